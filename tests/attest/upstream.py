"""An MCP server (the official MCP Python SDK) that records the attestation of every call it
gets: one JSON line per call in LOG, `{"meta": <the _meta token>, "header": <the
Toolgate-Attestation header, or null>, "arguments": {...}}`. tests/attestations.rs verifies each
with PyJWT (tests/attest/verify.py) against toolgate's key set.

Usage:
  upstream.py --log LOG --transport stdio
  upstream.py --log LOG --transport http --port N
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel
import uvicorn


class Noted(BaseModel):
    note: str


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    server = MCPServer("attested", version="1.0.0")

    @server.tool(description="Takes a note; records the call's attestation.")
    async def note(note: str, ctx: Context) -> Noted:
        meta = ctx.request_context.meta or {}
        token = meta.get("dev.toolgate/attestation") if isinstance(meta, dict) else None
        header = (ctx.headers or {}).get("toolgate-attestation")
        line = json.dumps({"meta": token, "header": header, "arguments": {"note": note}})
        fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return Noted(note=note)

    if args.transport == "stdio":
        server.run("stdio")
        return
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host="127.0.0.1",
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
