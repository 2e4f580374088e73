#!/usr/bin/env python3
"""A small agentry runner: pull the workers agentry admits and run them in this process.

It connects to RunnerService/Connect, says hello, and for every assignment: accepts it, runs a
toy agent on a thread (three progress steps, then a one-line result), and reports `finished`.
A `cancel` stops the agent at its next step and is answered with `finished {canceled}`. It sends
a heartbeat while idle and exits cleanly on SIGINT/SIGTERM or after --max-workers workers.

Replace `run_agent` with your own agent loop: `spec` is the same document the exec executor
writes to stdin, and `assignment.worker_token` is the token to send as x-agentry-worker-token
when the agent spawns children or asks for a review.

The stubs are generated from the repository's proto/ at start-up, as client.py does.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import tempfile
import threading
from pathlib import Path

import grpc
from google.protobuf import json_format

from client import REPO_ROOT, Failure, generate_stubs, wait_until_serving

STEPS = 3


class Canceled(Exception):
    """The server asked us to stop this worker."""


class Runner:
    def __init__(self, pb2, args: argparse.Namespace):
        self.pb2 = pb2
        self.args = args
        self.outbox: queue.Queue = queue.Queue()  # messages to the server; None ends the stream
        self.cancels: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.done = 0
        self.closed = threading.Event()

    # -- the request stream -----------------------------------------------------------------

    def requests(self):
        pb2 = self.pb2
        yield pb2.ConnectRequest(
            hello=pb2.RunnerHello(
                name=self.args.name, agents=self.args.agents, slots=self.args.slots
            )
        )
        while True:
            msg = self.outbox.get()
            if msg is None:
                return
            yield msg

    def send(self, **fields) -> None:
        if not self.closed.is_set():
            self.outbox.put(self.pb2.ConnectRequest(**fields))

    def close(self) -> None:
        """End our side of the stream; the server then ends its side."""
        if not self.closed.is_set():
            self.closed.set()
            self.outbox.put(None)

    # -- one worker -------------------------------------------------------------------------

    def run_agent(self, spec: dict, report, cancel: threading.Event) -> str:
        """The toy agent: a prompt `sleep N` works N seconds, anything else about a second."""
        prompt = spec["prompt"]
        seconds = float(prompt.split()[1]) if prompt.startswith("sleep ") else 1.0
        for step in range(1, STEPS + 1):
            if cancel.wait(seconds / STEPS):
                raise Canceled()
            report(f"step {step}/{STEPS}", {"step": step, "of": STEPS})
        return f"{spec['agent']['name']} did: {prompt}"

    def work(self, a) -> None:
        pb2 = self.pb2
        ids = dict(worker_id=a.worker_id, lease_token=a.lease_token)
        cancel = threading.Event()
        with self.lock:
            self.cancels[a.worker_id] = cancel
        self.send(accepted=pb2.RunnerAccepted(**ids))
        # The exec executor's stdin document, as a dict.
        spec = json_format.MessageToDict(
            a.spec, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        print(f"runner: accepted {a.worker_id} ({spec['agent']['name']})", flush=True)

        def report(text: str, data: dict) -> None:
            self.send(
                progress=pb2.RunnerProgress(
                    **ids, kind=pb2.PROGRESS_KIND_STATUS, text=text, data_json=json.dumps(data)
                )
            )

        try:
            result = self.run_agent(spec, report, cancel)
            outcome = dict(completed=pb2.RunnerFinished.Completed(result=result))
            print(f"runner: completed {a.worker_id}", flush=True)
        except Canceled:
            outcome = dict(canceled=pb2.RunnerFinished.Canceled())
            print(f"runner: canceled {a.worker_id}", flush=True)
        except Exception as err:  # the agent broke: tell agentry why
            outcome = dict(failed=pb2.RunnerFinished.Failed(error=f"{type(err).__name__}: {err}"))
        self.send(finished=pb2.RunnerFinished(**ids, **outcome))
        with self.lock:
            self.cancels.pop(a.worker_id, None)
            self.done += 1
            if self.args.max_workers and self.done >= self.args.max_workers:
                self.close()

    # -- the session ------------------------------------------------------------------------

    def heartbeat(self, every: float) -> None:
        while not self.closed.wait(every):
            self.send(heartbeat=self.pb2.RunnerHeartbeat())

    def serve(self, stub) -> None:
        for resp in stub.Connect(self.requests()):
            kind = resp.WhichOneof("msg")
            if kind == "welcome":
                every = resp.welcome.heartbeat_interval.ToTimedelta().total_seconds()
                print(f"runner: connected as {resp.welcome.runner_id}", flush=True)
                threading.Thread(target=self.heartbeat, args=(every,), daemon=True).start()
            elif kind == "assignment":
                threading.Thread(target=self.work, args=(resp.assignment,), daemon=True).start()
            elif kind == "cancel":
                with self.lock:
                    event = self.cancels.get(resp.cancel.worker_id)
                if event:
                    event.set()
            elif kind == "rejected":
                r = resp.rejected
                print(f"runner: refused ({r.code}) {r.worker_id}: {r.reason}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051", help="host:port of agentry")
    parser.add_argument("--name", default="python-runner", help="the runner's name")
    parser.add_argument("--agents", nargs="+", default=["*"], help="agents served (* = any)")
    parser.add_argument("--slots", type=int, default=4, help="workers run at once")
    parser.add_argument("--max-workers", type=int, default=0, help="exit after N (0 = never)")
    parser.add_argument("--wait-ready", type=float, default=0, metavar="SECONDS")
    parser.add_argument("--proto-dir", type=Path, default=REPO_ROOT / "proto")
    parser.add_argument("--stubs-dir", help="generate the stubs here (default: a temp dir)")
    args = parser.parse_args()

    stubs = Path(args.stubs_dir) if args.stubs_dir else Path(tempfile.mkdtemp(prefix="stubs-"))
    pb2, pb2_grpc = generate_stubs(args.proto_dir, stubs)
    runner = Runner(pb2, args)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: runner.close())
    try:
        with grpc.insecure_channel(args.addr) as channel:
            if args.wait_ready:
                wait_until_serving(channel, args.wait_ready)
            runner.serve(pb2_grpc.RunnerServiceStub(channel))
    except grpc.RpcError as err:
        print(f"error: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    except Failure as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("runner: stream closed, bye", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
