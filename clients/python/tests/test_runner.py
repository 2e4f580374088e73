"""agentry.Runner against a real server whose executor is `runner` (lease 3 s, heartbeat 0.5 s)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import Proxy, Server, serving, wait_for, wait_state

import agentry
from agentry import pb2


def make_runner(server_addr: str, name: str, **kwargs) -> agentry.Runner:
    return agentry.Runner(server_addr, name=name, stop_grace=5, **kwargs)


def progress_texts(events: list[pb2.WatchWorkerResponse]) -> list[str]:
    return [e.progress.text for e in events if e.HasField("progress")]


def test_a_spawn_is_taken_by_the_handler_and_its_progress_watched(
    runner_server: Server, runner_client: agentry.Client, tmp_path
) -> None:
    runner = make_runner(runner_server.addr, "py-progress", slots=2)
    seen: dict[str, object] = {}

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        seen.update(
            agent=job.agent,
            prompt=job.prompt,
            description=job.description,
            depth=job.depth,
            workspace=job.workspace,
            deadline=job.deadline,
            document=job.document,
            token=bool(job.worker_token),
        )
        for step in range(1, 4):
            job.progress(f"step {step}/3", kind="status", data={"step": step})
        return f"{job.agent} did: {job.prompt}"

    with serving(runner):
        worker = runner_client.spawn(
            "quick_task", "say hi", workspace=tmp_path, description="runner test"
        )
        events = list(runner_client.watch(worker.id, after_sequence=worker.sequence, timeout=30))

    assert events[-1].state == pb2.WORKER_STATE_COMPLETED
    assert events[-1].worker.result == "quick_task did: say hi"
    assert progress_texts(events) == ["step 1/3", "step 2/3", "step 3/3"]
    kinds = {e.progress.kind for e in events if e.HasField("progress")}
    assert kinds == {pb2.PROGRESS_KIND_STATUS}
    data = [json.loads(e.progress.data_json) for e in events if e.HasField("progress")]
    assert data == [{"step": 1}, {"step": 2}, {"step": 3}]
    assert seen["agent"] == "quick_task" and seen["prompt"] == "say hi"
    assert seen["description"] == "runner test" and seen["depth"] == 1
    assert seen["workspace"] == str(tmp_path)
    assert seen["deadline"] is not None and seen["token"]
    document = seen["document"]
    assert isinstance(document, dict)
    assert document["worker_id"] == worker.id and document["agent"]["name"] == "quick_task"


def test_a_handler_takes_messages_and_asks_its_caller(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-talk")

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        first = job.next_message(timeout=20)
        answer = job.ask(f"got {first!r}; which branch?", timeout=20)
        return f"merging into {answer}"

    with serving(runner):
        worker = runner_client.spawn("quick_task", "talk")
        wait_state(runner_client, worker.id, pb2.WORKER_STATE_RUNNING)
        sent = runner_client.send_message(worker.id, "hello")
        assert not sent.continued and sent.message_id.startswith("msg_")
        wait_state(runner_client, worker.id, pb2.WORKER_STATE_INPUT_REQUIRED)
        asked = runner_client.get(worker.id)
        assert asked.question == "got 'hello'; which branch?"
        done = runner_client.send_message(worker.id, "main", wait=True).worker
    assert done.state == pb2.WORKER_STATE_COMPLETED
    assert done.result == "merging into main"


def test_a_session_ref_comes_back_with_a_continuation(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-resume")
    seen: list[object] = []

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        seen.append(job.resume)
        job.session_ref = f"session-of-{job.worker_id}"
        return f"done {job.prompt}"

    with serving(runner):
        first = runner_client.spawn("quick_task", "one", wait=True)
        sent = runner_client.send_message(first.id, "two", wait=True)
    assert sent.continued
    assert sent.worker.result == "done two"
    assert sent.worker.continues == first.id
    assert seen == [None, (first.id, f"session-of-{first.id}")]


def test_stop_delivers_cancel_and_the_worker_ends_killed(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-stop")
    seen: dict[str, object] = {}

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        job.progress("waiting for the stop")
        cancelled = job.wait(30)
        seen.update(cancelled=cancelled, flag=job.cancelled, reason=job.cancel_reason)
        return "returned after the cancel"

    with serving(runner):
        worker = runner_client.spawn("quick_task", "run until stopped")
        wait_state(runner_client, worker.id, pb2.WORKER_STATE_RUNNING)
        started = time.monotonic()
        stopped = runner_client.stop(worker.id, "the test stops it")
        elapsed = time.monotonic() - started
    assert stopped.state == pb2.WORKER_STATE_KILLED
    assert "the test stops it" in stopped.error
    # The runner answered the cancel itself, well within the 2 s kill grace.
    assert elapsed < 1.5, elapsed
    assert seen["cancelled"] is True and seen["flag"] is True
    # The cancel carries the StopWorker reason (docs/runners.md); servers before ee00ab3 sent
    # "stop requested" instead.
    assert seen["reason"] in ("the test stops it", "stop requested"), seen


def test_an_exception_fails_the_worker_with_its_message(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-fail")

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        if job.prompt == "exit":
            raise agentry.JobFailed("gave up", exit_code=7)
        raise ValueError("the input was bad")

    with serving(runner):
        failed = runner_client.spawn("quick_task", "boom", wait=True)
        exited = runner_client.spawn("quick_task", "exit", wait=True)
    assert failed.state == pb2.WORKER_STATE_FAILED
    assert failed.error == "the input was bad"
    assert exited.state == pb2.WORKER_STATE_FAILED
    assert exited.error == "gave up" and exited.exit_code == 7


def test_artifacts_are_handed_back_and_a_task_may_be_declined(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-artifacts")

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        if job.prompt == "not mine":
            raise agentry.JobRejected("not my kind of task")
        job.artifact("report", ["part one"], name="report")
        job.artifact("report", [" part two", {"data": {"k": 1}}], append=True, last_chunk=True)
        job.artifact("logo", [b"hi"])
        return "done"

    with serving(runner):
        worker = runner_client.spawn("quick_task", "write the artifacts", wait=True)
        declined = runner_client.spawn("quick_task", "not mine", wait=True)
    assert worker.state == pb2.WORKER_STATE_COMPLETED, worker.error
    assert worker.result == "done"
    assert [a.artifact_id for a in worker.artifacts] == ["report", "logo"]
    report = worker.artifacts[0]
    assert report.name == "report"
    assert [p.WhichOneof("content") for p in report.parts] == ["text", "text", "data_json"]
    assert report.parts[1].text == " part two"
    assert json.loads(report.parts[2].data_json) == {"k": 1}
    assert worker.artifacts[1].parts[0].file.bytes == b"hi"
    assert declined.state == pb2.WORKER_STATE_FAILED
    assert declined.rejected
    assert declined.error == "rejected: not my kind of task"


def test_a_dict_result_is_sent_as_json(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-json")
    runner.agent("*")(lambda job: {"answer": 42, "prompt": job.prompt})
    schema = {"type": "object", "required": ["answer"]}
    with serving(runner):
        worker = runner_client.spawn("task", "q", wait=True, output_schema=schema)
    assert worker.state == pb2.WORKER_STATE_COMPLETED, worker.error
    assert json.loads(worker.result) == {"answer": 42, "prompt": "q"}
    assert json.loads(worker.structured_result) == {"answer": 42, "prompt": "q"}


def test_an_async_handler_runs_and_is_cancelled_by_a_stop(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-async", slots=2)
    seen: list[str] = []

    @runner.agent("quick_task")
    async def handle(job: agentry.Job) -> str:
        if job.prompt == "quick":
            await asyncio.sleep(0.05)
            return "async done"
        job.progress("sleeping")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("task cancelled")
            raise
        return "not reached"

    with serving(runner):
        quick = runner_client.spawn("quick_task", "quick", wait=True)
        slow = runner_client.spawn("quick_task", "slow")
        wait_state(runner_client, slow.id, pb2.WORKER_STATE_RUNNING)
        stopped = runner_client.stop(slow.id)
    assert quick.result == "async done"
    assert stopped.state == pb2.WORKER_STATE_KILLED
    assert seen == ["task cancelled"]


def test_heartbeats_keep_a_silent_job_past_the_lease(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-silent")

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        job.wait(4.5)  # longer than the 3 s lease, with nothing to say
        return "still here"

    with serving(runner):
        worker = runner_client.spawn("quick_task", "be quiet", wait=True)
    assert worker.state == pb2.WORKER_STATE_COMPLETED, worker.error
    assert worker.result == "still here"


def test_the_job_client_calls_as_the_worker(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-job-client")

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        with job.client() as client:
            sequence = client.report_progress("through the API", kind="text")
        return f"reported at {sequence}"

    with serving(runner):
        worker = runner_client.spawn("quick_task", "report")
        events = list(runner_client.watch(worker.id, after_sequence=worker.sequence, timeout=30))
    summary = [(e.sequence, agentry.state_name(e.state), e.progress.text) for e in events]
    summary.append(events[-1].worker.error)
    assert "through the API" in progress_texts(events), summary
    assert events[-1].worker.result.startswith("reported at ")


def test_max_jobs_ends_run(runner_server: Server, runner_client: agentry.Client) -> None:
    runner = make_runner(runner_server.addr, "py-max-jobs")
    runner.agent("quick_task")(lambda job: "one")
    thread = threading.Thread(target=runner.run, kwargs={"max_jobs": 1}, daemon=True)
    thread.start()
    worker = runner_client.spawn("quick_task", "only one", wait=True)
    assert worker.result == "one"
    thread.join(10)
    assert not thread.is_alive()


def test_stop_cancels_the_running_jobs(
    runner_server: Server, runner_client: agentry.Client
) -> None:
    runner = make_runner(runner_server.addr, "py-shutdown")
    reasons: list[str | None] = []

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        job.progress("started")
        job.wait(30)
        reasons.append(job.cancel_reason)
        return "too late"

    with serving(runner) as running:
        worker = runner_client.spawn("quick_task", "long")
        wait_state(runner_client, worker.id, pb2.WORKER_STATE_RUNNING)
        runner.stop()
        running.join()
    assert reasons == ["the runner is stopping"]
    ended = runner_client.get(worker.id)
    # Cancelled by the runner without a stop request: agentry records a failure.
    assert ended.state == pb2.WORKER_STATE_FAILED
    assert "without a stop request" in ended.error


def test_reconnects_and_resumes_its_leases(
    runner_server: Server, runner_client: agentry.Client, proxy: Proxy
) -> None:
    """The stream drops twice: mid-job (resumed, job goes on) and while the job finishes."""
    runner = make_runner(proxy.addr, "py-resume")
    phase = {"cut": threading.Event(), "cut_again": threading.Event()}

    @runner.agent("quick_task")
    def handle(job: agentry.Job) -> str:
        job.progress("before the cut")
        assert phase["cut"].wait(20)
        job.progress("after the cut")
        assert phase["cut_again"].wait(20)
        return "survived"  # sent while disconnected, delivered after the reconnect

    with serving(runner):
        first_session = runner.runner_id
        worker = runner_client.spawn("quick_task", "hold on")
        events: list[pb2.WatchWorkerResponse] = []
        watcher = threading.Thread(
            target=lambda: events.extend(
                runner_client.watch(worker.id, after_sequence=worker.sequence, timeout=60)
            ),
            daemon=True,
        )
        watcher.start()
        wait_for(lambda: runner_client.get(worker.id).sequence >= 3, 15, "the first progress event")
        proxy.cut()
        wait_for(lambda: runner.runner_id != first_session, 10, "a new session")
        phase["cut"].set()
        wait_for(lambda: runner_client.get(worker.id).sequence >= 4, 15, "the second event")

        # Second drop: refuse connections while the handler returns, then let it back in.
        proxy.refusing = True
        second_session = runner.runner_id
        proxy.cut()
        phase["cut_again"].set()
        time.sleep(0.5)
        proxy.refusing = False
        wait_for(lambda: runner.runner_id != second_session, 10, "a third session")
        watcher.join(20)

    assert events[-1].state == pb2.WORKER_STATE_COMPLETED, events[-1].worker.error
    assert events[-1].worker.result == "survived"
    assert progress_texts(events) == ["before the cut", "after the cut"]
    assert proxy.accepted >= 3
    assert "resumed=1" in runner_server.log()


def test_a_runner_needs_a_handler_and_valid_settings() -> None:
    with pytest.raises(ValueError):
        agentry.Runner("127.0.0.1:1", name="", slots=1)
    with pytest.raises(ValueError):
        agentry.Runner("127.0.0.1:1", name="x", slots=0)
    runner = agentry.Runner("127.0.0.1:1", name="x")
    with pytest.raises(ValueError, match="no handler"):
        runner.run()
    runner.agent("a")(lambda job: "")
    with pytest.raises(ValueError, match="already has a handler"):
        runner.agent("a")(lambda job: "")
    with pytest.raises(ValueError, match="max_jobs"):
        runner.run(max_jobs=0)


SIGNALLED_RUNNER = """
import signal, sys
import agentry

runner = agentry.Runner(sys.argv[1], name="py-sigterm")
runner.agent("quick_task")(lambda job: "unused")
signal.signal(signal.SIGTERM, lambda *_: runner.stop())
print("serving", flush=True)
runner.run()
print("stopped", flush=True)
"""


def test_stop_from_a_signal_handler_ends_run(runner_server: Server, tmp_path) -> None:
    script = tmp_path / "signalled.py"
    script.write_text(SIGNALLED_RUNNER)
    proc = subprocess.Popen(
        [sys.executable, str(script), runner_server.addr],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "serving\n"
        wait_for(lambda: "runner=py-sigterm" in runner_server.log(), 15, "the runner to connect")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert out.strip().endswith("stopped"), out
