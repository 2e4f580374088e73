"""`Runner`: run the workers agentry admits inside this process (docs/runners.md).

A runner holds one ``RunnerService/Connect`` session: it says ``hello`` with the agents it has
handlers for, accepts every assignment, runs the handler on a thread of its own, relays the
handler's progress, answers ``cancel``, sends ``finished`` and heartbeats while idle. When the
stream drops it reconnects and resumes its workers by their lease tokens.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import inspect
import json
import logging
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format

from ._pb import agentry_pb2 as pb2
from ._pb import agentry_pb2_grpc as pb2_grpc
from ._util import JsonText, call_metadata, enum_value, json_text, open_channel
from .client import Client
from .errors import AgentryError

__all__ = ["Cancelled", "Job", "JobFailed", "Runner"]

log = logging.getLogger("agentry.runner")

Result = str | Mapping[str, Any] | Sequence[Any] | None
Handler = Callable[["Job"], Result | Awaitable[Result]]
H = TypeVar("H", bound=Handler)

# agentry refuses a `failed.error` over 64 KiB (INVALID_MESSAGE), which would leave the worker
# running: longer errors are cut.
MAX_ERROR_BYTES = 60 * 1024
# Progress reports kept while disconnected, sent after the next welcome (oldest dropped first).
MAX_BACKLOG = 1000
# Errors that no reconnect can fix: run() raises them.
FATAL_CODES = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
_WORKER_IN_REASON = re.compile(r"\bworker (wkr_[0-9a-f]+)")
_HEARTBEAT = pb2.ConnectRequest(heartbeat=pb2.RunnerHeartbeat())


class Cancelled(Exception):
    """The worker was cancelled: raise it (or let :meth:`Job.raise_if_cancelled` raise it)."""


class JobFailed(Exception):
    """Raise from a handler to fail its worker with this error and, optionally, an exit code.

    Any other exception fails the worker too, with the exception's message as the error.
    """

    def __init__(self, error: str, exit_code: int | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.exit_code = exit_code


class JobRejected(Exception):
    """Raise from a handler to decline the task: the worker fails with ``rejected: <reason>``
    and is marked ``rejected`` (an A2A client sees ``REJECTED``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Job:
    """One worker that agentry assigned to this runner, as its handler sees it.

    Attributes:
        worker_id: The worker's id.
        lease_token: The fencing token of this assignment (the runner sends it; you need not).
        worker_token: The worker's own token: calls made with it are made as the worker (its
            children, progress, reviews); :meth:`client` makes such a client.
        spec: The ``agentry.v1.WorkerSpec``: the effective agent and the prompt.
        deadline: When the worker's timeout passes (UTC), or None.
    """

    def __init__(self, runner: Runner, assignment: pb2.RunnerAssignment) -> None:
        self.worker_id: str = assignment.worker_id
        self.lease_token: str = assignment.lease_token
        self.worker_token: str = assignment.worker_token
        self.spec: pb2.WorkerSpec = assignment.spec
        self.deadline: datetime.datetime | None = (
            assignment.deadline.ToDatetime(tzinfo=datetime.UTC)
            if assignment.HasField("deadline")
            else None
        )
        self._runner = runner
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._cancel_reason: str | None = None
        self._cancel_callbacks: list[Callable[[], None]] = []
        self._ended = False  # the handler returned: no more messages about this lease
        self._running_confirmed = False
        self._inbox: queue.Queue[str] = queue.Queue()
        #: Set by the handler: an opaque reference to this run's own session (at most 4 KiB),
        #: sent with ``finished``; a follow-up message then continues the worker on a runner
        #: that gets it back as :attr:`resume` (docs §12.6).
        self.session_ref: str | None = None
        #: For a continuation: ``(previous_worker_id, session_ref)`` to reload, else None.
        self.resume: tuple[str, str] | None = (
            (assignment.resume.previous_worker_id, assignment.resume.session_ref)
            if assignment.HasField("resume")
            else None
        )

    # -- what to do ----------------------------------------------------------------------------

    @property
    def agent(self) -> str:
        """The agent's name."""
        return self.spec.agent.name

    @property
    def prompt(self) -> str:
        """The task brief."""
        return self.spec.prompt

    @property
    def description(self) -> str:
        """The one-line summary the caller gave."""
        return self.spec.description

    @property
    def workspace(self) -> str | None:
        """The absolute workspace, when the caller gave one."""
        return self.spec.workspace if self.spec.HasField("workspace") else None

    @property
    def depth(self) -> int:
        """The worker's depth (1 below a top-level caller)."""
        return self.spec.depth

    @property
    def document(self) -> dict[str, Any]:
        """The spec as the document the exec executor writes to an agent's stdin (a dict)."""
        return json_format.MessageToDict(
            self.spec,
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )

    # -- cancellation --------------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once agentry cancelled the worker (stop, timeout) or the runner is stopping.

        A handler should then return soon: whatever it returns or raises, the runner answers
        ``finished {canceled}``.
        """
        return self._cancelled.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why the worker was cancelled (the StopWorker reason, a timeout...), or None."""
        return self._cancel_reason

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once on cancel; True when cancelled."""
        return self._cancelled.wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` when the worker was cancelled."""
        if self._cancelled.is_set():
            raise Cancelled(self._cancel_reason or "cancelled")

    # -- conversation (docs §12.6) -------------------------------------------------------------

    def next_message(self, timeout: float | None = None) -> str | None:
        """The next message sent to the worker (``SendWorkerMessage``), waiting up to
        ``timeout`` seconds; None on timeout or once the worker is cancelled.

        Messages arrive in the order they were sent; the runner acknowledges each one as it is
        queued here, so agentry records it delivered.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._cancelled.is_set():
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return None
            try:
                return self._inbox.get(timeout=left)
            except queue.Empty:
                continue
        return None

    def ask(self, question: str, timeout: float | None = None) -> str | None:
        """Ask the worker's caller a question and wait for the answer: the worker is
        ``input_required`` (with ``question``) until a message answers it.

        Returns the answer, or None on timeout or cancel.
        """
        message = pb2.ConnectRequest(
            input_required=pb2.RunnerInputRequired(
                worker_id=self.worker_id, lease_token=self.lease_token, question=question
            )
        )
        self._runner._send_progress(self, message)
        return self.next_message(timeout)

    # -- reporting -----------------------------------------------------------------------------

    def progress(
        self, text: str, *, kind: str | int = "text", data: JsonText | None = None
    ) -> None:
        """Report what the worker is doing: a progress event that watchers of it see.

        It is sent on the runner's stream (kept while reconnecting) and does not block.

        Args:
            text: Human-readable text (at most 64 KiB).
            kind: ``"text"``, ``"tool_call"``, ``"tool_result"`` or ``"status"``.
            data: Structured detail: JSON text or a JSON-serialisable value.
        """
        message = pb2.ConnectRequest(
            progress=pb2.RunnerProgress(
                worker_id=self.worker_id,
                lease_token=self.lease_token,
                kind=enum_value(pb2.ProgressKind, "PROGRESS_KIND_", kind),
                text=text,
                data_json=json_text(data),
            )
        )
        self._runner._send_progress(self, message)

    def artifact(
        self,
        artifact_id: str,
        parts: list[Any],
        *,
        name: str = "",
        description: str = "",
        append: bool = False,
        last_chunk: bool = False,
    ) -> None:
        """Hand back an artifact, or a chunk of one (docs §13.1); ``Worker.artifacts`` shows
        them assembled and an A2A client gets each as an artifact update.

        Args:
            artifact_id: Unique within the worker (not ``"result"``: that is the result).
            parts: Each a ``str`` (a text part), ``bytes`` (an inline file), or a dict in the
                chunk's own form (``{"text": …}``, ``{"data": …}``, ``{"file": {…}}``).
            append: Add these parts to the artifact instead of replacing it.
            last_chunk: The artifact is complete.
        """
        shaped: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part, str):
                shaped.append({"text": part})
            elif isinstance(part, bytes):
                shaped.append({"file": {"bytes": base64.b64encode(part).decode("ascii")}})
            else:
                shaped.append(part)
        chunk: dict[str, Any] = {"artifact_id": artifact_id, "parts": shaped}
        if name:
            chunk["name"] = name
        if description:
            chunk["description"] = description
        if append:
            chunk["append"] = True
        if last_chunk:
            chunk["last_chunk"] = True
        self.progress("", kind="artifact", data=chunk)

    def wait_running(self, timeout: float = 5.0) -> bool:
        """Wait until agentry has made the worker ``running``; True when it is.

        The handler starts as soon as the runner has sent ``accepted``, but agentry may not have
        applied it yet when a call made with the ``worker_token`` on another connection arrives
        (such a call needs a running worker). :meth:`client` waits for this itself; call it
        before using ``worker_token`` with a client of your own.
        """
        if self._running_confirmed:
            return True
        stub = self._runner._registry
        deadline = time.monotonic() + timeout
        request = pb2.GetWorkerRequest(worker_id=self.worker_id)
        while not self._cancelled.is_set():
            try:
                reply = stub.GetWorker(
                    request,
                    timeout=max(0.1, deadline - time.monotonic()),
                    metadata=self._runner._metadata,
                )
            except grpc.RpcError as err:
                log.debug("runner: GetWorker %s: %s", self.worker_id, err)
                return False
            if reply.worker.state == pb2.WORKER_STATE_RUNNING:
                self._running_confirmed = True
                return True
            if reply.worker.state != pb2.WORKER_STATE_PENDING or time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return False

    def client(self, **kwargs: Any) -> Client:
        """A :class:`Client` that calls agentry as this worker (its ``worker_token``).

        Use it to spawn the worker's children, report progress or ask for a review; close it
        when done. It first waits (briefly) for agentry to have made the worker running.
        """
        self.wait_running()
        runner = self._runner
        kwargs.setdefault("credentials", runner._credentials)
        return Client(runner.addr, token=runner._token, worker_token=self.worker_token, **kwargs)

    # -- the runner's side ---------------------------------------------------------------------

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self._cancelled.is_set():
                return
            self._cancel_reason = reason
            self._cancelled.set()
            callbacks = list(self._cancel_callbacks)
        for callback in callbacks:
            callback()

    def _run_awaitable(self, awaitable: Awaitable[Result]) -> Result:
        """Run an async handler on an event loop of its own; a cancel cancels its task."""

        async def main() -> Result:
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()
            assert task is not None

            def cancel_task() -> None:
                try:
                    loop.call_soon_threadsafe(task.cancel)
                except RuntimeError:  # the loop already closed
                    pass

            with self._lock:
                self._cancel_callbacks.append(cancel_task)
                already = self._cancelled.is_set()
            if already:
                task.cancel()
            try:
                return await awaitable
            finally:
                with self._lock:
                    self._cancel_callbacks.remove(cancel_task)

        return asyncio.run(main())

    def __repr__(self) -> str:
        return f"Job({self.worker_id!r}, agent={self.agent!r})"


@dataclasses.dataclass
class _Sent:
    """A `finished` that may not have reached agentry: resent after a reconnect."""

    message: pb2.ConnectRequest
    worker_id: str
    session: _Session | None
    at: float
    resent: bool = False


class _Session:
    """One Connect stream: its hello, its outgoing queue and the heartbeat that fills gaps."""

    def __init__(self, hello: pb2.ConnectRequest) -> None:
        self.hello = hello
        self.heartbeat: float | None = None  # set by welcome
        self.call: Any = None
        self._queue: queue.SimpleQueue[pb2.ConnectRequest | None] = queue.SimpleQueue()
        self._closed = False

    def put(self, message: pb2.ConnectRequest) -> None:
        if not self._closed:
            self._queue.put(message)

    def close(self) -> None:
        """End the request stream after what is queued (the server then ends its side)."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)

    def requests(self) -> Iterator[pb2.ConnectRequest]:
        yield self.hello
        while True:
            try:
                message = self._queue.get(timeout=self.heartbeat or 0.5)
            except queue.Empty:
                if self._closed:
                    return
                if self.heartbeat is not None:  # idle for a whole interval: say we are alive
                    yield _HEARTBEAT
                continue
            if message is None:
                return
            yield message


class Runner:
    """Serve agentry's runner workers with Python handlers.

    ::

        runner = agentry.Runner("127.0.0.1:50051", name="my-runner", slots=4)

        @runner.agent("task")
        def task(job: agentry.Job) -> str:
            job.progress("thinking", kind="status")
            return f"did: {job.prompt}"

        runner.run()  # until runner.stop()

    A handler gets a :class:`Job` and returns the result: text, or a dict or list (sent as JSON,
    validated against the worker's output schema), or None for an empty result. It may be a
    coroutine function; it then runs on an event loop of its own, and a cancel cancels its task.
    An exception fails the worker with the exception's message (:class:`JobFailed` also sets an
    exit code). Once the worker is cancelled (``job.cancelled``), whatever the handler returns
    is answered ``finished {canceled}``.

    Args:
        addr: ``host:port`` of agentry.
        name: The runner's name, for logs and ``runner lost: <name>`` (1..256 bytes).
        slots: Workers run at once (1..10000): agentry never assigns more.
        token: Bearer token (when the server sets ``auth.tokens_file``); the runner is offered
            only the workers of that token's principal.
        labels: Free-form labels, logged by the server.
        credentials: TLS credentials; plaintext when None.
        stop_grace: Seconds :meth:`stop` waits for running handlers before it closes the stream.
        reconnect_delay: ``(first, max)`` seconds between reconnection attempts (doubling).
    """

    def __init__(
        self,
        addr: str,
        *,
        name: str,
        slots: int = 1,
        token: str | None = None,
        labels: Mapping[str, str] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        stop_grace: float = 10.0,
        reconnect_delay: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        if not name:
            raise ValueError("a runner needs a name")
        if not 1 <= slots <= 10000:
            raise ValueError(f"slots must be within 1..10000, got {slots}")
        self.addr = addr
        self.name = name
        self.slots = slots
        self.labels = dict(labels or {})
        self.stop_grace = stop_grace
        self.reconnect_delay = reconnect_delay
        self._token = token
        self._credentials = credentials
        self._metadata = call_metadata(token, None)
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running = False
        self._reset()

    def _reset(self) -> None:
        """Fresh state for the next run()."""
        # stop() only sets these two plain attributes, so that it is safe in a signal handler.
        self._stop_flag = False
        self._cancel_on_stop = False
        self._closing = threading.Event()  # the final close: no more reconnects
        self._jobs: dict[str, Job] = {}  # by lease token: accepted, handler not returned
        self._session: _Session | None = None  # the welcomed session, if any
        self._live: _Session | None = None  # the session whose stream is open, welcomed or not
        self._backlog: deque[pb2.ConnectRequest] = deque(maxlen=MAX_BACKLOG)
        self._recent: dict[str, _Sent] = {}  # by lease token
        self._ended = 0
        self._max_jobs: int | None = None
        self._fatal: AgentryError | None = None
        self._lease = 30.0
        self.runner_id: str | None = None

    # -- registration --------------------------------------------------------------------------

    def agent(self, name: str = "*") -> Callable[[H], H]:
        """Decorator: register the handler of agent ``name`` (``"*"`` = every other agent)."""

        def register(handler: H) -> H:
            if name in self._handlers:
                raise ValueError(f"agent {name!r} already has a handler")
            self._handlers[name] = handler
            return handler

        return register

    @property
    def agents(self) -> list[str]:
        """The agents this runner serves (its hello's ``agents``)."""
        return sorted(self._handlers)

    @property
    def running(self) -> list[Job]:
        """The jobs whose handlers are running."""
        with self._lock:
            return list(self._jobs.values())

    # -- running -------------------------------------------------------------------------------

    def run(self, *, max_jobs: int | None = None) -> None:
        """Serve until :meth:`stop` (or ``max_jobs`` jobs have ended); blocks.

        Connection failures are retried forever (with backoff); the call returns after a stop
        once the running jobs answered or ``stop_grace`` passed.

        Raises:
            AgentryError: the server refused the runner for good (``UNAUTHENTICATED``,
                ``PERMISSION_DENIED``, an invalid hello, ...).
        """
        if not self._handlers:
            raise ValueError("no handler: register one with @runner.agent(name)")
        if max_jobs is not None and max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1 (or None), got {max_jobs}")
        with self._lock:
            if self._running:
                raise RuntimeError("this runner is already running")
            self._running = True
        self._max_jobs = max_jobs
        # gRPC's own reconnect backoff grows to 2 minutes by default, far past a runner lease.
        first_ms, max_ms = (int(s * 1000) for s in self.reconnect_delay)
        channel = open_channel(
            self.addr,
            self._credentials,
            (
                ("grpc.initial_reconnect_backoff_ms", first_ms),
                ("grpc.min_reconnect_backoff_ms", first_ms),
                ("grpc.max_reconnect_backoff_ms", max_ms),
            ),
        )
        self._stub = pb2_grpc.RunnerServiceStub(channel)
        self._registry = pb2_grpc.AgentRegistryServiceStub(channel)
        conn = threading.Thread(
            target=self._connect_loop, name=f"agentry-runner-{self.name}", daemon=True
        )
        try:
            conn.start()
            # Poll, rather than wait on a lock, so that signal handlers run promptly here.
            while not self._stop_flag and conn.is_alive():
                time.sleep(0.05)
            self._shutdown(conn)
        finally:
            channel.close()
            fatal = self._fatal
            with self._lock:
                self._running = False
                self._reset()
        if fatal is not None:
            raise fatal

    def stop(self, *, cancel: bool = True) -> None:
        """End :meth:`run`; returns at once (safe in a signal handler and from a handler).

        No new assignment is accepted. With ``cancel`` the running jobs are cancelled (their
        handlers see ``job.cancelled``; agentry records them failed, as cancelled without a stop
        request); without it they may finish. Either way run() closes the stream once they have
        answered or ``stop_grace`` passed.
        """
        if cancel:
            self._cancel_on_stop = True
        self._stop_flag = True

    def _shutdown(self, conn: threading.Thread) -> None:
        if self._cancel_on_stop or self._fatal is not None:
            reason = "the runner is stopping" if self._fatal is None else str(self._fatal)
            for job in self.running:
                job._cancel(reason)
        deadline = time.monotonic() + self.stop_grace
        with self._changed:
            # Wait for the handlers, and for a session to send outcomes kept while disconnected.
            while (self._jobs or self._undelivered()) and conn.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.1))
            left_behind = len(self._jobs)
        if left_behind:
            log.warning(
                "runner %s: %d job(s) still running after %gs; leaving them (agentry fails them "
                "as runner lost)",
                self.name,
                left_behind,
                self.stop_grace,
            )
        # Closing first, then the open session: the connect loop sets _live before it checks
        # _closing, so either it sees the flag or this sees its session.
        self._closing.set()
        with self._lock:
            session = self._live
        if session is not None:
            session.close()
        conn.join(5)
        if conn.is_alive():  # the server did not end its side: cancel the call
            with self._lock:
                session = self._live
            if session is not None and session.call is not None:
                session.call.cancel()
            conn.join(2)

    # -- the session ---------------------------------------------------------------------------

    def _connect_loop(self) -> None:
        delay = self.reconnect_delay[0]
        while not self._closing.is_set():
            session = self._open_session()
            with self._lock:
                self._live = session
            if self._closing.is_set():  # closed while the hello was being made
                return
            error: grpc.RpcError | None = None
            try:
                session.call = self._stub.Connect(session.requests(), metadata=self._metadata)
                for response in session.call:
                    self._on_response(session, response)
            except grpc.RpcError as err:
                error = err
            finally:
                welcomed = session.heartbeat is not None
                session.close()
                with self._lock:
                    if self._session is session:
                        self._session = None
                    self._live = None
            if self._closing.is_set():
                return
            if error is not None:
                code = error.code()
                if code in FATAL_CODES or (
                    code == grpc.StatusCode.INVALID_ARGUMENT and not welcomed
                ):
                    self._fatal = AgentryError.from_rpc_error(error)
                    log.error("runner %s: refused: %s", self.name, self._fatal)
                    self._stop_flag = True
                    return
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    # A message of ours broke the stream: do not send the same ones again.
                    with self._lock:
                        self._recent.clear()
                what = str(AgentryError.from_rpc_error(error))
            else:
                what = "the server ended the stream"
            if welcomed:
                delay = self.reconnect_delay[0]
            log.warning("runner %s: %s; reconnecting in %.1fs", self.name, what, delay)
            if self._closing.wait(delay):
                return
            delay = min(delay * 2, self.reconnect_delay[1])

    def _open_session(self) -> _Session:
        with self._lock:
            self._prune_recent()
            resume = [job.lease_token for job in self._jobs.values()]
            resume.extend(self._recent)
        if resume:
            log.info("runner %s: resuming %d lease(s)", self.name, len(resume))
        hello = pb2.RunnerHello(
            name=self.name,
            agents=self.agents,
            slots=self.slots,
            labels=self.labels,
            resume=resume,
            capabilities=["messages", "input", "resume"],
        )
        return _Session(pb2.ConnectRequest(hello=hello))

    def _undelivered(self) -> bool:
        """Whether an outcome waits for a session to be sent on (call with the lock held)."""
        return any(sent.session is None for sent in self._recent.values())

    def _prune_recent(self) -> None:
        """Forget finished messages older than the lease: agentry has them, or gave up."""
        horizon = time.monotonic() - self._lease
        for token in [t for t, sent in self._recent.items() if sent.at < horizon]:
            del self._recent[token]

    def _on_response(self, session: _Session, response: pb2.ConnectResponse) -> None:
        kind = response.WhichOneof("msg")
        if kind == "welcome":
            self._on_welcome(session, response.welcome)
        elif kind == "assignment":
            self._on_assignment(session, response.assignment)
        elif kind == "cancel":
            self._on_cancel(response.cancel)
        elif kind == "rejected":
            self._on_rejected(response.rejected)
        elif kind == "message":
            self._on_message(session, response.message)
        else:
            log.debug("runner %s: ignoring an unknown message %r", self.name, kind)

    def _on_message(self, session: _Session, message: pb2.RunnerMessage) -> None:
        with self._lock:
            job = self._jobs.get(message.lease_token)
        if job is None:
            log.debug("runner %s: a message for no job of ours (%s)", self.name, message.worker_id)
            return
        job._inbox.put(message.text)
        session.put(
            pb2.ConnectRequest(
                message_delivered=pb2.RunnerMessageDelivered(
                    worker_id=message.worker_id,
                    lease_token=message.lease_token,
                    message_id=message.message_id,
                )
            )
        )

    def _on_welcome(self, session: _Session, welcome: pb2.RunnerWelcome) -> None:
        interval = welcome.heartbeat_interval.ToTimedelta().total_seconds() or 5.0
        lease = welcome.lease.ToTimedelta().total_seconds() or 30.0
        now = time.monotonic()
        with self._lock:
            self.runner_id = welcome.runner_id
            self._lease = lease
            session.heartbeat = interval
            self._session = session
            while self._backlog:
                session.put(self._backlog.popleft())
            for sent in self._recent.values():
                if sent.session is not session:  # queued on a stream that has ended since
                    session.put(sent.message)
                    sent.session, sent.at, sent.resent = session, now, True
        log.info(
            "runner %s: connected as %s (heartbeat %gs, lease %gs)",
            self.name,
            welcome.runner_id,
            interval,
            lease,
        )

    def _on_assignment(self, session: _Session, assignment: pb2.RunnerAssignment) -> None:
        if self._stop_flag:
            # Not accepted: agentry withdraws it after runners.accept_timeout and offers it again.
            log.info("runner %s: stopping, not taking %s", self.name, assignment.worker_id)
            return
        job = Job(self, assignment)
        handler = self._handlers.get(job.agent) or self._handlers.get("*")
        with self._lock:
            self._jobs[job.lease_token] = job
        session.put(
            pb2.ConnectRequest(
                accepted=pb2.RunnerAccepted(worker_id=job.worker_id, lease_token=job.lease_token)
            )
        )
        log.info("runner %s: accepted %s (%s)", self.name, job.worker_id, job.agent)
        threading.Thread(
            target=self._run_job,
            args=(job, handler),
            name=f"agentry-job-{job.worker_id}",
            daemon=True,
        ).start()

    def _on_cancel(self, cancel: pb2.RunnerCancel) -> None:
        jobs = [job for job in self.running if job.worker_id == cancel.worker_id]
        log.info(
            "runner %s: cancel %s (%s)%s",
            self.name,
            cancel.worker_id,
            cancel.reason,
            "" if jobs else ": not running here",
        )
        for job in jobs:
            job._cancel(cancel.reason or "cancelled")

    def _on_rejected(self, rejected: pb2.RunnerRejected) -> None:
        worker_id = rejected.worker_id
        if rejected.code == "RESUME_REFUSED":
            match = _WORKER_IN_REASON.search(rejected.reason)
            worker_id = match.group(1) if match else ""
        with self._lock:
            resent = any(s.resent and s.worker_id == worker_id for s in self._recent.values())
            live = [job for job in self._jobs.values() if job.worker_id == worker_id]
        if rejected.code == "RESUME_REFUSED" and live:
            # That lease is over (the worker was lost or stopped while we were away).
            for job in live:
                job._cancel(rejected.reason)
        level = logging.DEBUG if resent else logging.WARNING
        log.log(
            level,
            "runner %s: refused (%s) %s: %s",
            self.name,
            rejected.code,
            rejected.worker_id or "-",
            rejected.reason,
        )

    # -- jobs ----------------------------------------------------------------------------------

    def _run_job(self, job: Job, handler: Handler | None) -> None:
        finished = pb2.RunnerFinished(worker_id=job.worker_id, lease_token=job.lease_token)
        try:
            if handler is None:
                raise JobFailed(f"runner {self.name} has no handler for agent {job.agent!r}")
            value = handler(job)
            if inspect.isawaitable(value):
                value = job._run_awaitable(value)
            finished.completed.result = _result_text(value)
        except Cancelled:
            finished.canceled.SetInParent()
        except JobRejected as err:
            finished.rejected.reason = _cut(err.reason)
        except JobFailed as err:
            finished.failed.error = _cut(err.error)
            if err.exit_code is not None:
                finished.failed.exit_code = err.exit_code
        except asyncio.CancelledError:
            finished.failed.error = "the handler's task was cancelled"
        except Exception as err:
            log.debug("runner %s: %s raised", self.name, job.worker_id, exc_info=True)
            finished.failed.error = _cut(str(err) or type(err).__name__)
        if job.cancelled:
            finished.canceled.SetInParent()  # the answer to cancel, whatever the handler did
        if job.session_ref:
            finished.session_ref = job.session_ref
        outcome = finished.WhichOneof("outcome")
        log.info("runner %s: %s %s", self.name, outcome, job.worker_id)
        self._finish(job, pb2.ConnectRequest(finished=finished))

    def _finish(self, job: Job, message: pb2.ConnectRequest) -> None:
        with self._changed:
            job._ended = True
            self._jobs.pop(job.lease_token, None)
            self._prune_recent()
            session = self._session
            self._recent[job.lease_token] = _Sent(message, job.worker_id, session, time.monotonic())
            if session is not None:
                session.put(message)
            self._ended += 1
            if self._max_jobs is not None and self._ended >= self._max_jobs:
                self._stop_flag = True
            self._changed.notify_all()

    def _send_progress(self, job: Job, message: pb2.ConnectRequest) -> None:
        with self._lock:
            if job._ended:
                log.debug("runner %s: %s has ended; progress dropped", self.name, job.worker_id)
            elif self._session is not None:
                self._session.put(message)
            else:
                self._backlog.append(message)

    def __repr__(self) -> str:
        return f"Runner({self.addr!r}, name={self.name!r}, slots={self.slots})"


def _result_text(value: Result) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value)
    raise TypeError(
        f"a handler returns text, a dict or a list (or None), not {type(value).__name__}"
    )


def _cut(error: str) -> str:
    raw = error.encode()
    if len(raw) <= MAX_ERROR_BYTES:
        return error
    return raw[:MAX_ERROR_BYTES].decode(errors="ignore") + " …(cut)"
