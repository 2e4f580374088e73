#!/usr/bin/env python3
"""A hostile MCP server over stdio, for the model executor's tests.

Standard library only. Usage:

    python3 tests/support/mcp_hostile.py [--notes FILE]

It speaks MCP (protocol version 2025-06-18) as newline-delimited JSON-RPC 2.0 on stdin and
stdout: one JSON object per line, stdout carrying nothing but protocol messages, flushed after
each. `initialize` is answered with the client's requested protocol version (else 2025-06-18)
and the `tools` capability, `ping` with `{}`, `tools/list` with the tools below (one page);
notifications (no "id") are ignored; unknown methods get error -32601, unknown tools and bad
arguments -32602. It serves until stdin closes:

* `big(bytes)` (read-only) answers a text of `bytes` 'y' characters, as one line written in
  pieces; 20,000,000 is fine;
* `append_note(text)` (an additive write: not read-only, not destructive) appends `text`, as
  is, to the `--notes` file (without one it does nothing) and answers `noted`;
* `peek()` (read-only) answers `peeked`;
* `wipe()` (destructive) does nothing and answers `wiped`.
"""

import argparse
import json
import os
import sys

PROTOCOL_VERSION = "2025-06-18"
PIECE = 1 << 20  # bytes of `big` text per write

NO_ARGUMENTS = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "big", "description": "Answer a long text of 'y' characters.",
     "inputSchema": {"type": "object",
                     "properties": {"bytes": {"type": "integer", "minimum": 0}},
                     "required": ["bytes"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "append_note", "description": "Append a text to the notes file.",
     "inputSchema": {"type": "object",
                     "properties": {"text": {"type": "string"}},
                     "required": ["text"]},
     "annotations": {"readOnlyHint": False, "destructiveHint": False}},
    {"name": "peek", "description": "Look, change nothing.",
     "inputSchema": NO_ARGUMENTS,
     "annotations": {"readOnlyHint": True}},
    {"name": "wipe", "description": "Claim to wipe everything.",
     "inputSchema": NO_ARGUMENTS,
     "annotations": {"destructiveHint": True}},
]

parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
parser.add_argument("--notes", help="file append_note appends to")
args = parser.parse_args()

out = sys.stdout.buffer


def send(message):
    out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    out.flush()


def reply(id_, result):
    send({"jsonrpc": "2.0", "id": id_, "result": result})


def fail(id_, code, message):
    send({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}})


def text(value):
    return {"content": [{"type": "text", "text": value}], "isError": False}


def send_big(id_, count):
    """The answer to big(count), written in pieces so the text is never whole in memory."""
    head = {"jsonrpc": "2.0", "id": id_, "result": {"content": [{"type": "text", "text": ""}]}}
    # Everything up to the empty text's closing quote, then the 'y's, then the rest.
    line = json.dumps(head, separators=(",", ":"))
    cut = line.index('"text":""') + len('"text":"')
    out.write(line[:cut].encode())
    block = b"y" * min(PIECE, count)
    left = count
    while left > 0:
        k = min(PIECE, left)
        out.write(block if k == len(block) else block[:k])
        left -= k
    out.write(line[cut:-2].encode() + b',"isError":false}}\n')
    out.flush()


def call(id_, params):
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, dict):
        return fail(id_, -32602, "arguments must be an object")
    if name == "big":
        count = arguments.get("bytes")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return fail(id_, -32602, "big: bytes must be a non-negative integer")
        return send_big(id_, count)
    if name == "append_note":
        note = arguments.get("text")
        if not isinstance(note, str):
            return fail(id_, -32602, "append_note: text must be a string")
        if args.notes:
            with open(args.notes, "a", encoding="utf-8") as f:
                f.write(note)
        return reply(id_, text("noted"))
    if name == "peek":
        return reply(id_, text("peeked"))
    if name == "wipe":
        return reply(id_, text("wiped"))
    return fail(id_, -32602, f"unknown tool: {name}")


def handle(message):
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        if isinstance(message, dict) and "id" in message and ("result" in message or "error" in message):
            return  # a response to nothing we asked: ignore
        return fail(message.get("id") if isinstance(message, dict) else None, -32600, "invalid request")
    if "id" not in message:
        return  # a notification (initialized, cancelled, ...)
    id_, method = message["id"], message["method"]
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return fail(id_, -32602, "params must be an object")
    if method == "initialize":
        version = params.get("protocolVersion")
        return reply(id_, {"protocolVersion": version if isinstance(version, str) else PROTOCOL_VERSION,
                           "capabilities": {"tools": {}},
                           "serverInfo": {"name": "hostile", "version": "1"}})
    if method == "ping":
        return reply(id_, {})
    if method == "tools/list":
        return reply(id_, {"tools": TOOLS})
    if method == "tools/call":
        return call(id_, params)
    return fail(id_, -32601, f"method not found: {method}")


def main():
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        try:
            message = json.loads(raw)
        except ValueError:
            fail(None, -32700, "parse error")
            continue
        handle(message)


try:
    main()
except BrokenPipeError:
    # The client went away; point stdout at /dev/null so the exit flush cannot complain.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
except KeyboardInterrupt:
    pass
