"""Python client of agentry: the registry of agent personas and the supervisor of their workers.

* :class:`Client` calls ``AgentRegistryService``: list and resolve agents, spawn, watch, stop
  and review workers, report a worker's progress.
* :class:`Runner` runs agentry's workers in this process (``RunnerService``): register a handler
  per agent with ``@runner.agent(name)`` and call ``runner.run()``.
* :class:`AgentryError` is what every failed call raises: gRPC code, message and agentry's
  ``ErrorInfo`` reason.
* :mod:`agentry.pb2` and :mod:`agentry.pb2_grpc` are the generated messages and stubs of
  ``agentry.v1`` (the messages the client returns are of these classes).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import pb2, pb2_grpc
from ._util import TERMINAL_STATES, short_name
from .client import Client
from .errors import AgentryError
from .runner import Cancelled, Job, JobFailed, JobRejected, Runner

try:
    __version__ = version("agentry")
except PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "TERMINAL_STATES",
    "AgentryError",
    "Cancelled",
    "Client",
    "Job",
    "JobFailed",
    "JobRejected",
    "Runner",
    "pb2",
    "pb2_grpc",
    "state_name",
]


def state_name(state: int) -> str:
    """A worker state's short name: ``WORKER_STATE_COMPLETED`` → ``"completed"``."""
    return short_name(pb2.WorkerState, "WORKER_STATE_", state)
