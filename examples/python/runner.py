#!/usr/bin/env python3
"""Run agentry's workers in this process: a toy agent in three progress steps."""

import argparse
import signal

import agentry

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--addr", default="127.0.0.1:50051", help="host:port of agentry")
parser.add_argument("--name", default="python-runner", help="the runner's name")
parser.add_argument("--slots", type=int, default=4, help="workers run at once")
parser.add_argument("--max-workers", type=int, default=0, help="exit after N workers (0 = never)")
args = parser.parse_args()
runner = agentry.Runner(args.addr, name=args.name, slots=args.slots)


@runner.agent("*")  # every agent; replace the body with your agent loop
def toy(job: agentry.Job) -> str:
    """A prompt `sleep N` works N seconds, anything else about a second."""
    seconds = float(job.prompt.split()[1]) if job.prompt.startswith("sleep ") else 1.0
    for step in range(1, 4):
        if job.wait(seconds / 3):  # True once agentry cancels the worker
            print(f"runner: canceled {job.worker_id}", flush=True)
            return ""
        job.progress(f"step {step}/3", kind="status", data={"step": step, "of": 3})
    print(f"runner: completed {job.worker_id}", flush=True)
    return f"{job.agent} did: {job.prompt}"


for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda *_: runner.stop())
runner.run(max_jobs=args.max_workers or None)
print("runner: stream closed, bye", flush=True)
