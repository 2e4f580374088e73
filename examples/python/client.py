#!/usr/bin/env python3
"""List the agents, resolve one, spawn a worker and watch it to its end (agentry package)."""

import argparse
import os
import sys

import agentry
from agentry import pb2

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--addr", default="127.0.0.1:50051", help="host:port of agentry")
parser.add_argument("--prompt", default="say hi", help="the spawned worker's prompt")
args = parser.parse_args()

try:
    with agentry.Client(args.addr) as client:
        client.wait_ready(30)
        for agent in client.list_agents(os.getcwd()):
            print(f"  {agent.name:<16} {pb2.Source.Name(agent.source)}")
        effective = client.resolve_agent("plan", os.getcwd()).effective
        print(f"== effective {effective.name}: spawns {effective.spawns or '(none)'}")
        worker = client.spawn("quick_task", args.prompt, workspace=os.getcwd(), description="demo")
        print(f"== spawned {worker.id}")
        for event in client.watch(worker.id, timeout=60):
            print(f"  #{event.sequence} {pb2.WorkerState.Name(event.state)}")
except agentry.AgentryError as err:
    sys.exit(f"error: {err}")
if event.worker.state != pb2.WORKER_STATE_COMPLETED:
    sys.exit(f"error: the worker ended {agentry.state_name(event.state)}: {event.worker.error}")
print(event.worker.result.rstrip("\n"))
