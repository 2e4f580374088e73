"""`Client`: a typed wrapper of agentry's AgentRegistryService."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ._pb import agentry_pb2 as pb2
from ._pb import agentry_pb2_grpc as pb2_grpc
from ._util import (
    JsonText,
    Seconds,
    call_metadata,
    duration,
    enum_value,
    json_text,
    open_channel,
    workspace_path,
)
from .errors import AgentryError

__all__ = ["Client"]

Workspace = str | os.PathLike[str] | None


class Client:
    """A connection to agentry's ``AgentRegistryService``.

    Every method raises :class:`agentry.AgentryError` when the call fails. Enum arguments take
    the proto's number, its full name (``"MODE_PLAN"``) or the name without the prefix
    (``"plan"``). Workspaces may be relative: they are sent as absolute paths. The messages
    returned are the generated protobuf classes of :mod:`agentry.pb2`.

    Use it as a context manager, or call :meth:`close`, to close its channel::

        with agentry.Client("127.0.0.1:50051") as client:
            worker = client.spawn("quick_task", "say hi", wait=True)
            print(worker.result)

    Args:
        addr: ``host:port`` of agentry.
        token: Bearer token, sent as ``authorization: Bearer <token>`` (needed when the server
            sets ``auth.tokens_file``).
        worker_token: A worker's token, sent as ``x-agentry-worker-token``: the calls are then
            made as that worker (its children, its progress, its reviews; docs/lineage.md).
        credentials: TLS credentials; plaintext when None.
        timeout: Deadline in seconds of calls that return at once (None = no deadline). Calls
            that last as long as a worker (``spawn(wait=True)``, ``watch``, ``review``) have no
            deadline unless one is given to them.
        options: Extra gRPC channel options.
    """

    def __init__(
        self,
        addr: str,
        token: str | None = None,
        worker_token: str | None = None,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float | None = 30.0,
        options: Iterable[tuple[str, Any]] = (),
    ) -> None:
        self.addr = addr
        self.timeout = timeout
        self.channel: grpc.Channel = open_channel(addr, credentials, tuple(options))
        self.metadata: tuple[tuple[str, str], ...] = call_metadata(token, worker_token)
        #: The generated stub, for the RPCs this class does not wrap (pass ``metadata=``).
        self.stub = pb2_grpc.AgentRegistryServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    @classmethod
    def from_env(cls, *, token: str | None = None, **kwargs: Any) -> Client:
        """A client for an agent started by agentry's exec executor.

        It dials ``AGENTRY_ADDR`` as the worker of ``AGENTRY_WORKER_TOKEN``, the environment the
        executor gives every worker process (docs/workers.md §6.4).
        """
        try:
            addr = os.environ["AGENTRY_ADDR"]
        except KeyError:
            raise RuntimeError(
                "AGENTRY_ADDR is not set: not started by agentry's executor"
            ) from None
        worker_token = os.environ.get("AGENTRY_WORKER_TOKEN") or None
        return cls(addr, token=token, worker_token=worker_token, **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the gRPC health check (``grpc.health.v1``) reports ``SERVING``.

        Raises:
            AgentryError: ``DEADLINE_EXCEEDED`` when it does not within ``timeout`` seconds; the
                message says what the last check answered.
        """
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                reply = self._health.Check(
                    health_pb2.HealthCheckRequest(), timeout=min(2.0, max(left, 0.05))
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.RpcError as err:
                last = f"{err.code().name}: {err.details()}"
            time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))
        raise AgentryError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"{self.addr} is not SERVING after {timeout:g}s (last: {last})",
        )

    # -- the registry ------------------------------------------------------------------------

    def list_agents(
        self,
        workspace: Workspace = None,
        *,
        view: str | int | None = None,
        page_size: int = 0,
    ) -> list[pb2.Agent]:
        """Every agent for a workspace, in precedence order, fetching all pages.

        Args:
            workspace: The directory whose project agents count; None = no project directories.
            view: ``"full"`` (the default) or ``"catalog"`` (only the agents the caller may
                spawn, reserved ones excluded).
            page_size: Agents per page (0 = the server's default).
        """
        request = pb2.ListAgentsRequest(
            workspace=workspace_path(workspace),
            view=enum_value(pb2.AgentView, "AGENT_VIEW_", view),
            page_size=page_size,
        )
        agents: list[pb2.Agent] = []
        while True:
            page: pb2.ListAgentsResponse = self._unary(self.stub.ListAgents, request)
            agents.extend(page.agents)
            if not page.next_page_token:
                return agents
            request.page_token = page.next_page_token

    def resolve_agent(
        self,
        name: str,
        workspace: Workspace = None,
        *,
        mode: str | int | None = None,
        output_schema: JsonText | None = None,
    ) -> pb2.ResolveAgentResponse:
        """One agent's definition (``.agent``) and what a worker of it would get (``.effective``).

        Args:
            name: The agent's exact name.
            workspace: The caller's directory (project agents); None = none.
            mode: ``"default"`` or ``"plan"``.
            output_schema: A JSON schema (text or a dict) used when the agent has none.
        """
        request = pb2.ResolveAgentRequest(
            name=name,
            workspace=workspace_path(workspace),
            mode=enum_value(pb2.Mode, "MODE_", mode),
        )
        if output_schema is not None:
            request.output_schema = json_text(output_schema)
        response: pb2.ResolveAgentResponse = self._unary(self.stub.ResolveAgent, request)
        return response

    # -- workers -----------------------------------------------------------------------------

    def spawn(
        self,
        agent: str,
        prompt: str,
        *,
        wait: bool = False,
        workspace: Workspace = None,
        description: str = "",
        output_schema: JsonText | None = None,
        timeout: Seconds | None = None,
        isolation: str | int | None = None,
        mode: str | int | None = None,
        request_id: str = "",
        interactive: bool = False,
        deadline: float | None = None,
    ) -> pb2.Worker:
        """Start a worker: one run of ``agent`` on ``prompt``, as a child of the caller.

        Args:
            agent: The agent's exact name.
            prompt: The task brief (never put in argv).
            wait: Return only when the worker is terminal (it is then bound to this call).
            workspace: The directory the worker works in (project agents, working directory).
            description: A one-line summary.
            output_schema: A JSON schema (text or a dict) for the output when the agent has none;
                a valid result then also comes as ``structured_result``.
            timeout: The worker's run-time bound in seconds (or a timedelta), capped by the
                server's ``executor.timeout``.
            isolation: ``"none"`` or ``"worktree"`` (its own git worktree); None = the agent's
                or the server's default.
            mode: ``"default"`` or ``"plan"``.
            request_id: Idempotency key: the same key from the same caller returns the same
                worker.
            interactive: The worker may ask its caller a question and wait in
                ``input_required`` for the answer (sent with :meth:`send_message`).
            deadline: The RPC's own deadline in seconds; default the client's ``timeout``, or
                none with ``wait``.

        Returns:
            The worker: pending or running, or terminal (or ``input_required``) with ``wait``.
        """
        request = pb2.SpawnWorkerRequest(
            agent=agent,
            prompt=prompt,
            description=description,
            workspace=workspace_path(workspace),
            mode=enum_value(pb2.Mode, "MODE_", mode),
            wait=wait,
            request_id=request_id,
            isolation=enum_value(pb2.Isolation, "ISOLATION_", isolation),
            interactive=interactive,
        )
        if output_schema is not None:
            request.output_schema = json_text(output_schema)
        run_bound = duration(timeout)
        if run_bound is not None:
            request.timeout.CopyFrom(run_bound)
        if deadline is None and not wait:
            deadline = self.timeout
        response: pb2.SpawnWorkerResponse = self._unary(self.stub.SpawnWorker, request, deadline)
        return response.worker

    def send_message(
        self,
        worker_id: str,
        text: str,
        *,
        interrupt: bool = False,
        wait: bool = False,
        request_id: str = "",
        deadline: float | None = None,
    ) -> pb2.SendWorkerMessageResponse:
        """Send a follow-up message to a worker (docs §12).

        A running worker gets it at its next turn (or at once with ``interrupt``); a worker in
        ``input_required`` takes it as the answer to its question; a finished one is continued
        by a new worker that carries its conversation on (``response.continued``).

        Args:
            worker_id: The worker.
            text: The message.
            interrupt: Abandon the worker's model request or tool call in flight and deliver
                at once.
            wait: Return once the worker that answers is terminal or asks again.
            request_id: Idempotency key: the same key returns the same message.
            deadline: The RPC's own deadline in seconds; default the client's ``timeout``, or
                none with ``wait``.

        Returns:
            ``worker`` (the one that answers), ``message_id`` and ``continued``.
        """
        request = pb2.SendWorkerMessageRequest(
            worker_id=worker_id,
            text=text,
            delivery=pb2.DELIVERY_INTERRUPT if interrupt else pb2.DELIVERY_QUEUE,
            wait=wait,
            request_id=request_id,
        )
        if deadline is None and not wait:
            deadline = self.timeout
        response: pb2.SendWorkerMessageResponse = self._unary(
            self.stub.SendWorkerMessage, request, deadline
        )
        return response

    def get(self, worker_id: str) -> pb2.Worker:
        """One worker, with its tree's token usage."""
        request = pb2.GetWorkerRequest(worker_id=worker_id)
        response: pb2.GetWorkerResponse = self._unary(self.stub.GetWorker, request)
        return response.worker

    def list_workers(
        self,
        *,
        parent_id: str = "",
        states: Iterable[str | int] = (),
        page_size: int = 0,
    ) -> list[pb2.Worker]:
        """Workers, oldest first, fetching all pages.

        Args:
            parent_id: Only the children of this worker ("" = any parent).
            states: Only workers in these states (e.g. ``["running", "pending"]``; empty = all).
            page_size: Workers per page (0 = the server's default).
        """
        request = pb2.ListWorkersRequest(
            parent_id=parent_id,
            states=[enum_value(pb2.WorkerState, "WORKER_STATE_", s) for s in states],
            page_size=page_size,
        )
        workers: list[pb2.Worker] = []
        while True:
            page: pb2.ListWorkersResponse = self._unary(self.stub.ListWorkers, request)
            workers.extend(page.workers)
            if not page.next_page_token:
                return workers
            request.page_token = page.next_page_token

    def watch(
        self,
        worker_id: str,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
    ) -> Iterator[pb2.WatchWorkerResponse]:
        """Iterate over a worker's events until its terminal one.

        The first event is a snapshot of the worker's current state (unless ``after_sequence``
        resumes a watch); then come every transition and progress report (``event.progress`` is
        set on those), each with a strictly increasing ``sequence``. The iterator ends after the
        terminal event; closing it early cancels the call.

        Args:
            worker_id: The worker.
            after_sequence: Resume after this event's sequence (0 = start with a snapshot).
            timeout: Deadline of the whole watch in seconds (None = none).
        """
        call = self.stub.WatchWorker(
            pb2.WatchWorkerRequest(worker_id=worker_id, after_sequence=after_sequence),
            timeout=timeout,
            metadata=self.metadata,
        )
        try:
            yield from call
        except grpc.RpcError as err:
            raise AgentryError.from_rpc_error(err) from err
        finally:
            call.cancel()

    def stop(self, worker_id: str, reason: str = "") -> pb2.Worker:
        """Stop a pending or running worker (descendants first); returns it, killed.

        Args:
            worker_id: The worker.
            reason: Recorded as the worker's ``error``.
        """
        request = pb2.StopWorkerRequest(worker_id=worker_id, reason=reason)
        response: pb2.StopWorkerResponse = self._unary(self.stub.StopWorker, request)
        return response.worker

    def review(
        self,
        tool: str,
        tool_class: str | int = "write",
        *,
        action: str = "",
        target: str = "",
        reason: str = "",
        blast_radius: str = "",
        operator: str = "",
        arguments: JsonText | None = None,
        workspace: Workspace = None,
        deadline: float | None = None,
    ) -> pb2.ReviewResponse:
        """Ask agentry's reviewer whether a tool call may run (``.decision``, ``.reason``).

        Read-only calls (``tool_class="read"``) are approved at once; write and destructive ones
        run the configured reviewer as a child of the caller, and fail closed (reject).

        Args:
            tool: The tool about to run.
            tool_class: ``"read"``, ``"write"`` or ``"destructive"``.
            action, target, reason, blast_radius, operator: What the call does, to what, why,
                what it could affect and who asked, in words.
            arguments: The tool's arguments (JSON text or a JSON-serialisable value).
            workspace: The workspace whose agents provide the reviewer.
            deadline: The RPC's deadline in seconds (None = none: the server bounds a review).
        """
        request = pb2.ReviewRequest(
            tool=tool,
            tool_class=enum_value(pb2.ToolClass, "TOOL_CLASS_", tool_class),
            action=action,
            target=target,
            reason=reason,
            blast_radius=blast_radius,
            operator=operator,
            arguments_json=json_text(arguments),
            workspace=workspace_path(workspace),
        )
        response: pb2.ReviewResponse = self._unary(self.stub.Review, request, deadline)
        return response

    def report_progress(
        self,
        text: str,
        *,
        kind: str | int = "text",
        data: JsonText | None = None,
    ) -> int:
        """Append a progress event to the calling worker's log; returns the event's sequence.

        The client must have been made with the running worker's ``worker_token`` (see
        :meth:`from_env`).

        Args:
            text: Human-readable text (at most 64 KiB).
            kind: ``"text"``, ``"tool_call"``, ``"tool_result"`` or ``"status"``.
            data: Structured detail: JSON text or a JSON-serialisable value.
        """
        request = pb2.ReportProgressRequest(
            kind=enum_value(pb2.ProgressKind, "PROGRESS_KIND_", kind),
            text=text,
            data_json=json_text(data),
        )
        response: pb2.ReportProgressResponse = self._unary(self.stub.ReportProgress, request)
        return response.sequence

    # -- plumbing ----------------------------------------------------------------------------

    _KEEP = object()

    def _unary(self, method: Callable[..., Any], request: Any, deadline: Any = _KEEP) -> Any:
        timeout = self.timeout if deadline is Client._KEEP else deadline
        try:
            return method(request, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as err:
            raise AgentryError.from_rpc_error(err) from err

    def __repr__(self) -> str:
        return f"Client({self.addr!r})"
