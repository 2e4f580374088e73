#!/usr/bin/env python3
"""A small MCP server over streamable HTTP, for the model executor's tests.

Built on the official Python SDK (`mcp` 2.x, installed by .ci/run with mcp-server-time). Usage:

    python3 tests/support/mcp_http_server.py --marker FILE [--stdio]

It binds 127.0.0.1 on a free port, prints one line `listening http://127.0.0.1:PORT/mcp`, and
serves two read-only tools until it is killed; with `--stdio` it serves them over stdio instead,
and writes its process id to `FILE.pid` when it starts:

* `lookup(key)` answers `value of <key>`;
* `slow(seconds)` writes `started` to the marker file, sleeps, and answers `slept`; when the
  call is cancelled (the client sent `notifications/cancelled`, or its session went away) it
  writes `cancelled` to the marker file instead.
"""

import argparse
import asyncio
import os
import socket

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--marker", required=True, help="file the slow tool writes its state to")
parser.add_argument("--stdio", action="store_true", help="serve over stdio, not HTTP")
args = parser.parse_args()

server = MCPServer("notes", log_level="WARNING")
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False)


@server.tool(annotations=READ_ONLY)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Take a while."""
    with open(args.marker, "w", encoding="utf-8") as f:
        f.write("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        with open(args.marker, "w", encoding="utf-8") as f:
            f.write("cancelled")
        raise
    return "slept"


if args.stdio:
    with open(args.marker + ".pid", "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    server.run("stdio")
    raise SystemExit(0)

probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
print(f"listening http://127.0.0.1:{port}/mcp", flush=True)
server.run("streamable-http", host="127.0.0.1", port=port)
