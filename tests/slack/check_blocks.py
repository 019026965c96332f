"""Judges Slack message bodies with Slack's own SDK (slack_sdk's Block Kit models).

Usage: python check_blocks.py BODIES.json

BODIES.json is a JSON list of `chat.postMessage` (or `chat.update`) bodies as toolgate sends
them. Each body must have a fallback `text` and at most 50 `blocks`, every block a kind the SDK
knows (`Block.parse_all`) that passes its `validate_json()` (Slack's limits: 3,000 characters a
section, 75 a button's text, 2,000 its value, ...). No text may hold a broadcast mention
(`<!channel>`, `<!here>`, `<!everyone>`, `<!subteam^...>`). Approve and Reject buttons must carry
a value. Prints, for each body, its buttons and every text in it, as JSON on stdout; exits
non-zero saying what is wrong otherwise.
"""

import json
import re
import sys

from slack_sdk.models.blocks import Block

BROADCAST = re.compile(r"<!(channel|here|everyone|subteam\^)")
DECIDING = {"toolgate_approve", "toolgate_reject"}


def texts(value):
    """Every `text` string in a block, however deep."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "text" and isinstance(child, str):
                yield child
            else:
                yield from texts(child)
    elif isinstance(value, list):
        for child in value:
            yield from texts(child)


def buttons(blocks):
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("type") == "button":
                yield {
                    "action_id": element.get("action_id"),
                    "text": element["text"]["text"],
                    "value": element.get("value"),
                    "url": element.get("url"),
                    "style": element.get("style"),
                    "confirm": "confirm" in element,
                }


def check(number, body):
    where = f"body {number}"
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise SystemExit(f"{where}: no fallback `text`")
    blocks = body.get("blocks")
    if not isinstance(blocks, list) or not blocks or len(blocks) > 50:
        raise SystemExit(f"{where}: `blocks` must be a list of 1 to 50 blocks")
    parsed = Block.parse_all(blocks)
    for index, (raw, block) in enumerate(zip(blocks, parsed)):
        if block is None:
            raise SystemExit(f"{where}, block {index}: slack_sdk knows no {raw.get('type')!r}")
        try:
            block.validate_json()
        except Exception as err:  # the SDK's SlackObjectFormationError, and the like
            raise SystemExit(f"{where}, block {index}: {err}") from err
    every_text = [text, *texts(blocks)]
    for one in every_text:
        if BROADCAST.search(one):
            raise SystemExit(f"{where}: a broadcast mention in {one!r}")
    found = list(buttons(blocks))
    for button in found:
        if button["action_id"] in DECIDING and not button["value"]:
            raise SystemExit(f"{where}: {button['action_id']} carries no value")
        if button["action_id"] is None:
            raise SystemExit(f"{where}: a button without an action_id")
    return {"buttons": found, "texts": every_text}


def main():
    with open(sys.argv[1], encoding="utf-8") as file:
        bodies = json.load(file)
    if not isinstance(bodies, list):
        raise SystemExit("the file must hold a JSON list of message bodies")
    print(json.dumps([check(number, body) for number, body in enumerate(bodies)]))


if __name__ == "__main__":
    main()
