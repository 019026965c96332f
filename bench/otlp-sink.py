"""A collector that takes OTLP/HTTP exports and discards them: what `bench/telemetry` points
toolgate at, so the figures count toolgate's cost of making and sending spans.

    python3 bench/otlp-sink.py PORT
"""

import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
