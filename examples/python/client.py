#!/usr/bin/env python3
"""A small agentry client: list agents, resolve one, spawn a background worker and watch it.

The Python stubs are generated from the repository's proto/ with grpcio-tools when the client
starts (into --stubs-dir, or a temporary directory), so no generated code is checked in.

Exit status: 0 when the worker completed, 1 on a gRPC error or any other unexpected outcome.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_FILE = "agentry/v1/agentry.proto"


class Failure(Exception):
    """An outcome the client did not expect."""


def generate_stubs(proto_dir: Path, out_dir: Path):
    """Compile agentry.proto into out_dir and import the generated modules."""
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(proto_dir / PROTO_FILE),
        ]
    )
    if status != 0:
        raise Failure(f"protoc failed on {proto_dir / PROTO_FILE} (status {status})")
    sys.path.insert(0, str(out_dir))
    pb2 = importlib.import_module("agentry.v1.agentry_pb2")
    pb2_grpc = importlib.import_module("agentry.v1.agentry_pb2_grpc")
    return pb2, pb2_grpc


def wait_until_serving(channel: grpc.Channel, seconds: float) -> None:
    """Poll grpc.health.v1 until the server reports SERVING."""
    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + seconds
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            reply = health.Check(health_pb2.HealthCheckRequest(), timeout=2)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.RpcError as err:
            last = f"{err.code().name}: {err.details()}"
        time.sleep(0.2)
    raise Failure(f"server not SERVING after {seconds:g}s (last: {last})")


def describe_tools(tools) -> str:
    """Render EffectiveTools: exactly a list, or everything but a list."""
    kind = tools.WhichOneof("kind")
    if kind == "only":
        return "only: " + (", ".join(tools.only.values) or "(none)")
    if kind == "all_except":
        return "all except: " + (", ".join(tools.all_except.values) or "(nothing)")
    return "(unset)"


def run(args: argparse.Namespace) -> None:
    if args.stubs_dir:
        pb2, pb2_grpc = generate_stubs(args.proto_dir, Path(args.stubs_dir))
    else:
        tmp = tempfile.TemporaryDirectory(prefix="agentry-stubs-")
        pb2, pb2_grpc = generate_stubs(args.proto_dir, Path(tmp.name))

    with grpc.insecure_channel(args.addr) as channel:
        if args.wait_ready:
            wait_until_serving(channel, args.wait_ready)
        stub = pb2_grpc.AgentRegistryServiceStub(channel)
        workspace = os.path.abspath(args.workspace)

        # 1. Every agent, page by page.
        print(f"== agents for {workspace}")
        names, token = [], ""
        while True:
            page = stub.ListAgents(
                pb2.ListAgentsRequest(workspace=workspace, page_token=token), timeout=10
            )
            for agent in page.agents:
                names.append(agent.name)
                print(f"  {agent.name:<16} {pb2.Source.Name(agent.source)}")
            token = page.next_page_token
            if not token:
                break
        if not names:
            raise Failure("the registry has no agents")

        # 2. What a worker of one agent would get.
        resolved = stub.ResolveAgent(
            pb2.ResolveAgentRequest(name=args.resolve, workspace=workspace), timeout=10
        )
        effective = resolved.effective
        print(f"== effective {effective.name} (depth {effective.depth})")
        print(f"  tools:  {describe_tools(effective.tools)}")
        print(f"  spawns: {effective.spawns or '(none)'}")

        # 3. A background worker, watched to its terminal state.
        spawned = stub.SpawnWorker(
            pb2.SpawnWorkerRequest(
                agent=args.spawn,
                description="python example",
                prompt=args.prompt,
                workspace=workspace,
                wait=False,
            ),
            timeout=10,
        )
        worker_id = spawned.worker.id
        print(f"== spawned {worker_id} ({args.spawn})")

        terminal = {
            pb2.WORKER_STATE_COMPLETED,
            pb2.WORKER_STATE_FAILED,
            pb2.WORKER_STATE_KILLED,
        }
        last = None
        for event in stub.WatchWorker(
            pb2.WatchWorkerRequest(worker_id=worker_id), timeout=args.timeout
        ):
            print(f"  #{event.sequence} {pb2.WorkerState.Name(event.state)}")
            if last is not None and event.sequence <= last.sequence:
                raise Failure(f"sequence went from {last.sequence} to {event.sequence}")
            last = event
        if last is None or last.state not in terminal:
            raise Failure("the watch ended before the worker reached a terminal state")

        worker = last.worker
        if worker.state != pb2.WORKER_STATE_COMPLETED:
            error = worker.error if worker.HasField("error") else "no error recorded"
            raise Failure(f"worker ended {pb2.WorkerState.Name(worker.state)}: {error}")
        print("== result")
        print(worker.result.rstrip("\n"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051", help="host:port of agentry")
    parser.add_argument("--workspace", default=".", help="workspace directory (default: cwd)")
    parser.add_argument("--resolve", default="plan", help="agent to resolve")
    parser.add_argument("--spawn", default="quick_task", help="agent to spawn")
    parser.add_argument("--prompt", default="say hi", help="prompt of the spawned worker")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to watch the worker")
    parser.add_argument(
        "--wait-ready", type=float, default=0, metavar="SECONDS",
        help="first wait up to SECONDS for the health check to report SERVING",
    )
    parser.add_argument("--proto-dir", type=Path, default=REPO_ROOT / "proto")
    parser.add_argument("--stubs-dir", help="generate the stubs here (default: a temp dir)")
    args = parser.parse_args()

    try:
        run(args)
    except grpc.RpcError as err:
        print(f"error: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    except Failure as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
