"""Signs a request body as Slack does, with Slack's own SDK.

Usage: python sign.py SIGNING_SECRET TIMESTAMP < BODY
Prints the `X-Slack-Signature` value (`v0=...`) of the body read from stdin.
"""

import sys

from slack_sdk.signature import SignatureVerifier

secret, timestamp = sys.argv[1], sys.argv[2]
body = sys.stdin.buffer.read().decode("utf-8")
print(SignatureVerifier(signing_secret=secret).generate_signature(timestamp=timestamp, body=body))
