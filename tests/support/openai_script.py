#!/usr/bin/env python3
"""Scripted OpenAI Chat Completions server for tests, benchmarks and demos.

A real HTTP/1.1 server (standard library only) that answers
POST /v1/chat/completions (and POST /chat/completions) from a script file
instead of a model.  GET /v1/models lists one model, "scripted".
GET /v1/_stats (and /_stats) reports what Flood steps wrote (see below).

Usage:
    python3 tests/support/openai_script.py --script FILE [--log FILE]
                                           [--port 0] [--host 127.0.0.1]

Once bound it prints exactly one line to stdout, `listening http://HOST:PORT/v1`,
and serves until SIGTERM/SIGINT.  Nothing else is written to stdout or stderr
in normal operation (no access log), so a parent need not drain the pipes.

Script file (JSON), re-read whenever it changes on disk; a new version starts
with no steps consumed (a half-written file is ignored until it parses):

    {"steps": [STEP, ...]}

Each chat request takes the FIRST unconsumed step whose optional "match"
string occurs in the raw request body (a step without "match" matches any
request).  A step is then consumed, unless it has "repeat": true.  If no step
matches, the answer is 400 "script exhausted: no step matches this request".

STEP is one of:

  Error   {"status": 429, "headers": {"Retry-After": "1"}, "body": {...} | "text"}
          That status, headers and body (objects are JSON-encoded; strings are
          sent as text/plain).  Default body:
          {"error": {"message": "scripted error <status>", "type": "server_error"}}

  Answer  {"content": "text",
           "tool_calls": [{"name": "task", "arguments": "{\\"a\\":1}" | {...}, "id": "opt"}],
           "usage": {...},          # optional; {} is sent as {}
           "finish_reason": "stop", # optional override, may be "" or null
           "split": 3,              # content / each arguments string in N pieces
           "delay_ms": 0,           # sleep between streamed chunks
           "stall_after": K,        # optional: send K events, stall, drop the socket
           "stall_ms": 0,           # how long to stall first
           "done": true,            # false: no `data: [DONE]` (the body still ends)
           "plain": false,          # true: never stream, even if the request asks to
           "model": "opt"}          # default: the request's "model"
          With "stream": true in the request this is streamed like OpenAI does
          (SSE over chunked encoding): a role chunk, content pieces, per tool
          call a header chunk (index/id/type/name) then argument pieces, a
          finish chunk ("tool_calls" if there are tool calls, else "stop"),
          a usage chunk with "choices": [] if "usage" is present, and
          `data: [DONE]`.  Tool call ids default to "call_<n>_<i>", where n is
          the request number.  Otherwise, or with "plain": true (a server that
          ignores "stream"), one plain "chat.completion" object
          (application/json).  "done": false with "finish_reason": null makes
          a stream that just stops: the events, then the terminating chunk.

  Raw     {"raw": ["data: {not json\\n\\n", ...], "delay_ms": 0}
          Each string is sent verbatim as one HTTP chunk of an event stream.

  Flood   {"flood": N, "flood_as": "content" | "line" | "error",
           "chunk": 65536,          # bytes per piece written
           "status": 500,           # "error" only
           "headers": {"Retry-After": "1"}}   # "error" only, optional
          A body of about N bytes, generated as it is written (N may be huge):
          "content" (the default): a 200 event stream of chat.completion.chunk
            events, each with a delta.content of `chunk` 'x' characters (the
            last one shorter) until N characters of content are sent, then a
            finish chunk ("stop") and `data: [DONE]`;
          "line": a 200 event stream of ONE event whose line is N bytes,
            `data: {"choices":[{"delta":{"content":"xxx...`, never ended by a
            newline; the body then ends (terminating chunk);
          "error": status `status` with Content-Type text/plain (unless
            "headers" sets it) and the step's "headers", chunked, whose body
            is N bytes of 'e'.
          If the client hangs up midway, the server stops quietly.

Optional fields common to all: "match", "repeat"; "delay_ms" also delays
Error and Flood steps (once, before answering).  A step is a Flood step if it
has "flood", else Raw if it has "raw", else Error if it has "status", else an
Answer.

GET /v1/_stats (or /_stats) answers, for each Flood request so far, how many
bytes of its response body (de-chunked) were written to the socket, updated
after every piece; a client that stops reading early shows little more than
what it read plus the socket buffers:
    {"written": {"<request n>": bytes, ...}}
Stats requests are not numbered, logged or matched against the script.

With --log FILE one JSON line is appended per request, before it is answered:
    {"n": 1, "path": "/v1/chat/completions", "authorization": "Bearer .." | null,
     "headers": {lowercased name: value}, "body": parsed JSON or raw text,
     "step": index of the step used | null}
"""

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What a client hanging up looks like from our side of the socket.
DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")
STATS_PATHS = ("/v1/_stats", "/_stats")


def error_body(message, kind="invalid_request_error"):
    return {"error": {"message": message, "type": kind}}


class Script:
    """The step list of the current script version and which steps are used.

    Not thread-safe by itself: callers hold State.lock.
    """

    def __init__(self, path):
        self.path = path
        self.version = None
        self.steps = []
        self.consumed = set()
        self.load()  # a bad script at startup is fatal

    def stamp(self):
        st = os.stat(self.path)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def load(self):
        before = self.stamp()
        with open(self.path, encoding="utf-8") as f:
            data = json.load(f)
        if self.stamp() != before:
            raise ValueError(f"{self.path}: changed while being read")
        steps = data.get("steps") if isinstance(data, dict) else None
        if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
            raise ValueError(f'{self.path}: expected {{"steps": [object, ...]}}')
        self.version, self.steps, self.consumed = before, steps, set()

    def pick(self, body_text):
        """Return (index, step) for a request body, or (None, None)."""
        try:
            if self.stamp() != self.version:
                self.load()
        except (OSError, ValueError):
            pass  # mid-rewrite or briefly missing: keep the old version, retry later
        for i, step in enumerate(self.steps):
            if i in self.consumed:
                continue
            if "match" in step and str(step["match"]) not in body_text:
                continue
            if not step.get("repeat"):
                self.consumed.add(i)
            return i, step
        return None, None


class State:
    """Everything shared between request threads, guarded by one lock."""

    def __init__(self, script, log_path):
        self.script = script
        self.log_path = log_path
        self.lock = threading.Lock()
        self.count = 0
        self.written = {}  # request n -> body bytes written by a Flood step

    def log(self, record):
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------- answers

def split(text, parts):
    """Cut text into at most `parts` roughly equal, non-empty pieces."""
    parts = max(1, int(parts))
    cuts = [len(text) * i // parts for i in range(parts + 1)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if a < b]


def tool_arguments(call):
    args = call.get("arguments", "{}")
    return args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))


def tool_id(n, i, call):
    return call.get("id") or f"call_{n}_{i}"


def finish_reason(step):
    if "finish_reason" in step:
        return step["finish_reason"]
    return "tool_calls" if step.get("tool_calls") else "stop"


def stream_chunks(n, model, step):
    """The chat.completion.chunk objects for an Answer step, in order."""
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def chunk(delta, finish=None):
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    parts = step.get("split", 3)
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in split(step.get("content") or "", parts)]
    for i, call in enumerate(step.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{
            "index": i, "id": tool_id(n, i, call), "type": "function",
            "function": {"name": call.get("name", ""), "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in split(tool_arguments(call), parts)]
    out.append(chunk({}, finish_reason(step)))
    if "usage" in step:
        out.append({**base, "choices": [], "usage": step["usage"]})
    return out


def completion(n, model, step):
    """A non-streamed chat.completion object for an Answer step."""
    calls = step.get("tool_calls") or []
    content = step.get("content")
    message = {"role": "assistant", "content": content if content is not None or calls else ""}
    if calls:
        message["tool_calls"] = [
            {"id": tool_id(n, i, c), "type": "function",
             "function": {"name": c.get("name", ""), "arguments": tool_arguments(c)}}
            for i, c in enumerate(calls)]
    result = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
              "model": model,
              "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(step)}]}
    if "usage" in step:
        result["usage"] = step["usage"]
    return result


def fill(total, size, byte, head=b""):
    """`head` then `byte` repeated, `total` bytes in all, in pieces of at most `size`."""
    size = max(1, int(size))
    block = byte * size
    head = head[:total]
    if head:
        yield head
    left = total - len(head)
    while left > 0:
        k = min(size, left)
        yield block if k == size else block[:k]
        left -= k


def flood_events(n, model, total, size):
    """A Flood "content" event stream: `total` 'x' characters of content, then stop and [DONE]."""
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def event(delta, finish=None):
        c = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(c)}\n\n".encode()

    size = max(1, int(size))
    full = event({"content": "x" * size})  # encoded once, sent again and again
    left = total
    while left > 0:
        k = min(size, left)
        yield full if k == size else event({"content": "x" * k})
        left -= k
    yield event({}, "stop")
    yield b"data: [DONE]\n\n"


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked responses
    # Every event goes out at once, as production servers send them (TCP_NODELAY): with Nagle on,
    # small chunks on a reused connection wait for the client's delayed ACK.
    disable_nagle_algorithm = True
    server_version = "openai-script/1"

    def log_message(self, *args):
        pass  # no access log: a parent may never read our stderr

    def handle(self):
        try:
            super().handle()
        except DISCONNECTS:
            pass  # the client hung up; nothing to tell anybody

    def do_GET(self):
        self.route()

    def do_POST(self):
        self.route()

    def route(self):
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        text = self.rfile.read(length).decode("utf-8", "replace") if length > 0 else ""
        try:
            body = json.loads(text)
        except ValueError:
            body = text
        path = self.path.split("?", 1)[0]
        is_chat = self.command == "POST" and path in CHAT_PATHS

        state = self.server.state
        if self.command == "GET" and path in STATS_PATHS:  # not numbered, not logged
            with state.lock:
                written = dict(state.written)
            self.send_json(200, {"written": written})
            return
        with state.lock:  # numbering, step choice and log order agree
            state.count += 1
            n = state.count
            index, step = state.script.pick(text) if is_chat else (None, None)
            state.log({"n": n, "path": self.path,
                       "authorization": self.headers.get("Authorization"),
                       "headers": {k.lower(): v for k, v in self.headers.items()},
                       "body": body, "step": index})

        if is_chat and step is None:
            self.send_json(400, error_body("script exhausted: no step matches this request"))
        elif is_chat:
            self.answer(n, step, body if isinstance(body, dict) else {})
        elif self.command == "GET" and path in MODELS_PATHS:
            self.send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        else:
            self.send_json(404, error_body(f"no route for {self.command} {path}"))

    def answer(self, n, step, request):
        delay = step.get("delay_ms", 0) / 1000
        if "flood" in step:
            time.sleep(delay)
            self.flood(n, step, request)
            return
        if "raw" in step:
            self.stream(step["raw"], delay)
            return
        if "status" in step:
            time.sleep(delay)
            self.send_scripted_error(step)
            return
        model = step.get("model") or request.get("model") or "scripted"
        stall_after, stall_ms = step.get("stall_after"), step.get("stall_ms", 0)
        if request.get("stream") is True and not step.get("plain"):
            events = [f"data: {json.dumps(c)}\n\n" for c in stream_chunks(n, model, step)]
            if step.get("done", True) is not False:
                events.append("data: [DONE]\n\n")
            self.stream(events, delay, stall_after, stall_ms)
            return
        time.sleep(delay)
        if stall_after is not None:  # stall before any response, then drop
            self.stall(stall_ms / 1000)
            self.close_connection = True
            return
        self.send_json(200, completion(n, model, step))

    def send_scripted_error(self, step):
        status = int(step["status"])
        body = step.get("body", error_body(f"scripted error {status}", "server_error"))
        if isinstance(body, str):
            data, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        headers = dict(step.get("headers") or {})
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = ctype
        self.send_body(status, data, headers)

    def flood(self, n, step, request):
        total, size = max(0, int(step["flood"])), step.get("chunk", 65536)
        kind = step.get("flood_as", "content")
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        status = 200
        if kind == "content":
            model = step.get("model") or request.get("model") or "scripted"
            pieces = flood_events(n, model, total, size)
        elif kind == "line":
            head = b'data: {"choices":[{"delta":{"content":"'
            pieces = fill(total, size, b"x", head)
        elif kind == "error":
            status = int(step.get("status", 500))
            headers = dict(step.get("headers") or {})
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "text/plain"
            pieces = fill(total, size, b"e")
        else:
            self.send_json(400, error_body(f"unknown flood_as {kind!r}"))
            return
        self.send_chunked(n, status, headers, pieces)

    def send_chunked(self, n, status, headers, pieces):
        """Send the pieces as a chunked body, counting the bytes in state.written[n].

        If the client hangs up midway, stop quietly and close the connection.
        """
        state = self.server.state
        with state.lock:
            state.written[n] = 0
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, str(value))
        self.send_header("Transfer-Encoding", "chunked")
        try:
            self.end_headers()
            written = 0
            for data in pieces:
                if not data:
                    continue  # an empty chunk would end the body early
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                written += len(data)
                with state.lock:
                    state.written[n] = written
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except DISCONNECTS:
            self.close_connection = True

    def send_json(self, status, obj):
        self.send_body(status, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def send_body(self, status, data, headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, str(value))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, events, delay, stall_after=None, stall_ms=0):
        """Send each string as one HTTP chunk of a text/event-stream response.

        With stall_after, only that many events are sent; then we wait and
        drop the connection without the terminating chunk.
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if stall_after is not None:
            events = events[:max(0, int(stall_after))]
        for i, event in enumerate(events):
            if i and delay:
                time.sleep(delay)
            data = event.encode()
            if data:  # an empty chunk would end the body early
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
        if stall_after is not None:
            self.stall(stall_ms / 1000)
            self.close_connection = True  # the socket is closed, body unfinished
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def stall(self, seconds):
        """Sleep up to `seconds`, returning early if the client hangs up."""
        deadline = time.monotonic() + seconds
        readable, _, _ = select.select([self.connection], [], [], max(0.0, seconds))
        if readable and self.connection.recv(1, socket.MSG_PEEK):
            # The client sent more bytes rather than hanging up: sit out the rest.
            time.sleep(max(0.0, deadline - time.monotonic()))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # the default of 5 resets connections under load

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], DISCONNECTS):
            super().handle_error(request, client_address)


def main():
    parser = argparse.ArgumentParser(description="Scripted OpenAI Chat Completions server.")
    parser.add_argument("--script", required=True, help="JSON script file")
    parser.add_argument("--log", help="append one JSON line per request to this file")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()

    try:
        script = Script(args.script)
    except (OSError, ValueError) as e:
        sys.exit(f"openai_script: {e}")

    server = Server((args.host, args.port), Handler)
    server.state = State(script, args.log)
    # Installed explicitly: a shell's `cmd &` starts us with SIGINT ignored.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    print(f"listening http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
