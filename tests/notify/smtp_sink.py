"""An SMTP server for the notification tests (aiosmtpd): each message it accepts is parsed with
Python's own `email` package and written to OUT_DIR as one JSON file (envelope recipients,
headers, the content type of each part, the text and the HTML), renamed into place once whole.

    python smtp_sink.py OUT_DIR [DEFER]

It binds a port of its own (so no other test can take it between a choice and a bind), prints
`port N`, and listens once it reads a line on stdin: until then the port is held but refuses
connections, as a server that is down. Prints `ready` once it listens; runs until killed.
DEFER: answer the first DEFER messages `451` (a transient refusal), then accept. A recipient
`bounce@...` is refused `550` (for good).
"""

import asyncio
import json
import os
import socket
import sys
import time
from email import message_from_bytes, policy

from aiosmtpd.smtp import SMTP


class Sink:
    def __init__(self, out, defer):
        self.out = out
        self.defer = defer
        self.n = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        # A mailbox that does not exist, refused for good.
        if address.startswith("bounce@"):
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self.defer > 0:
            self.defer -= 1
            return "451 4.3.0 try again later"
        self.n += 1
        message = message_from_bytes(envelope.original_content or envelope.content, policy=policy.default)
        parts = [part.get_content_type() for part in message.walk()]
        text = message.get_body(preferencelist=("plain",))
        html = message.get_body(preferencelist=("html",))
        record = {
            "rcpt_tos": envelope.rcpt_tos,
            "mail_from": envelope.mail_from,
            "subject": str(message["subject"]),
            "from": str(message["from"]),
            "to": str(message["to"]),
            "message_id": str(message["message-id"]),
            "parts": parts,
            "text": text.get_content() if text is not None else None,
            "html": html.get_content() if html is not None else None,
        }
        name = os.path.join(self.out, "%d-%d" % (time.time_ns(), self.n))
        with open(name + ".tmp", "w") as f:
            json.dump(record, f)
        os.rename(name + ".tmp", name + ".json")
        return "250 OK"


async def serve(sock, handler):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(handler, hostname="localhost"), sock=sock)
    print("ready", flush=True)
    await server.serve_forever()


def main():
    out = sys.argv[1]
    defer = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print("port", sock.getsockname()[1], flush=True)
    if not sys.stdin.readline():
        return
    asyncio.run(serve(sock, Sink(out, defer)))


if __name__ == "__main__":
    main()
