"""agentry.Client against a real server whose exec executor is tests/stub_agent.py."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from helpers import free_port, running_server, serving, wait_state

import agentry
from agentry import pb2


def test_wait_ready_returns_when_serving(client: agentry.Client) -> None:
    client.wait_ready(5)


def test_wait_ready_times_out_without_a_server() -> None:
    with agentry.Client(f"127.0.0.1:{free_port()}") as c:
        started = time.monotonic()
        with pytest.raises(agentry.AgentryError) as info:
            c.wait_ready(0.5)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "not SERVING after 0.5s" in info.value.message
    assert time.monotonic() - started < 5


def test_list_agents_returns_the_bundled_agents(client: agentry.Client) -> None:
    agents = client.list_agents()
    names = [a.name for a in agents]
    assert {"quick_task", "plan", "task", "reviewer"} <= set(names)
    assert all(a.source == pb2.SOURCE_BUNDLED for a in agents)
    # The catalog leaves the reserved agents out.
    catalog = [a.name for a in client.list_agents(view="catalog")]
    assert "quick_task" in catalog and "reviewer" not in catalog


def test_list_agents_fetches_every_page(client: agentry.Client) -> None:
    assert [a.name for a in client.list_agents(page_size=1)] == [
        a.name for a in client.list_agents()
    ]


def test_resolve_agent(client: agentry.Client, tmp_path) -> None:
    resolved = client.resolve_agent("plan", tmp_path)
    assert resolved.agent.name == "plan"
    assert resolved.effective.name == "plan"
    assert resolved.effective.depth == 1
    assert resolved.registry_version
    planned = client.resolve_agent("quick_task", mode="plan")
    assert planned.effective.mode == pb2.MODE_PLAN


def test_spawn_wait_returns_the_completed_worker(client: agentry.Client, tmp_path) -> None:
    worker = client.spawn(
        "quick_task", "say hi", wait=True, workspace=tmp_path, description="a test"
    )
    assert worker.state == pb2.WORKER_STATE_COMPLETED
    assert worker.result == "ok: quick_task at depth 1: say hi\n"
    assert worker.exit_code == 0
    assert worker.description == "a test"
    assert worker.workspace == str(tmp_path)
    assert client.get(worker.id).result == worker.result


def test_unknown_agent_is_not_found_with_its_reason(client: agentry.Client) -> None:
    with pytest.raises(agentry.AgentryError) as info:
        client.spawn("no_such_agent", "hello")
    err = info.value
    assert err.code == grpc.StatusCode.NOT_FOUND
    assert err.reason == "AGENT_NOT_FOUND"
    assert err.domain == "agentry.dev"
    assert err.metadata == {"agent": "no_such_agent"}
    assert err.message.startswith('Unknown agent "no_such_agent". Available: ')
    assert str(err).startswith('NOT_FOUND: Unknown agent "no_such_agent"')
    assert str(err).endswith("(AGENT_NOT_FOUND)")
    assert isinstance(err.__cause__, grpc.RpcError)
    # resolve_agent raises the same.
    with pytest.raises(agentry.AgentryError) as info:
        client.resolve_agent("no_such_agent")
    assert (info.value.code, info.value.reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND")


def test_invalid_request_carries_its_field_violations(client: agentry.Client) -> None:
    with pytest.raises(agentry.AgentryError) as info:
        client.spawn("", "")
    err = info.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    fields = dict(err.field_violations)
    assert "agent" in fields and "prompt" in fields


def test_watch_follows_a_worker_to_completion(client: agentry.Client) -> None:
    worker = client.spawn("quick_task", "sleep 0.3")
    assert worker.state in (pb2.WORKER_STATE_PENDING, pb2.WORKER_STATE_RUNNING)
    events = list(client.watch(worker.id, timeout=30))
    sequences = [e.sequence for e in events]
    assert sequences == sorted(set(sequences)), sequences
    states = [e.state for e in events]
    assert pb2.WORKER_STATE_RUNNING in states
    assert states[-1] == pb2.WORKER_STATE_COMPLETED
    assert events[-1].worker.result == "slept\n"
    assert client.get(worker.id).sequence == sequences[-1]


def test_watch_of_an_unknown_worker_raises(client: agentry.Client) -> None:
    with pytest.raises(agentry.AgentryError) as info:
        list(client.watch("wkr_" + "0" * 32))
    assert info.value.code == grpc.StatusCode.NOT_FOUND


def test_an_exec_worker_reports_progress_through_from_env(client: agentry.Client) -> None:
    worker = client.spawn("quick_task", "progress halfway there")
    events = list(client.watch(worker.id, after_sequence=worker.sequence, timeout=30))
    progress = [e.progress for e in events if e.HasField("progress")]
    assert [(p.kind, p.text) for p in progress] == [(pb2.PROGRESS_KIND_STATUS, "halfway there")]
    assert json.loads(progress[0].data_json) == {"from": "exec"}
    assert events[-1].state == pb2.WORKER_STATE_COMPLETED
    assert events[-1].worker.result.startswith("reported at ")


def test_report_progress_needs_a_worker_token(client: agentry.Client) -> None:
    with pytest.raises(agentry.AgentryError) as info:
        client.report_progress("hello")
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert info.value.reason == "WORKER_TOKEN_REQUIRED"


def test_a_failing_worker(client: agentry.Client) -> None:
    worker = client.spawn("quick_task", "fail it broke", wait=True)
    assert worker.state == pb2.WORKER_STATE_FAILED
    assert worker.exit_code == 3
    assert "it broke" in worker.error


def test_output_schema_gives_a_structured_result(client: agentry.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    worker = client.spawn("quick_task", 'json {"answer": 42}', wait=True, output_schema=schema)
    assert worker.state == pb2.WORKER_STATE_COMPLETED, worker.error
    assert json.loads(worker.structured_result) == {"answer": 42}
    invalid = client.spawn("quick_task", 'json {"answer": "no"}', wait=True, output_schema=schema)
    assert invalid.state == pb2.WORKER_STATE_FAILED


def test_spawn_timeout_bounds_the_run(client: agentry.Client) -> None:
    started = time.monotonic()
    worker = client.spawn("quick_task", "sleep 20", wait=True, timeout=0.5)
    assert worker.state == pb2.WORKER_STATE_FAILED
    assert "timed out" in worker.error
    assert time.monotonic() - started < 10


def test_stop_kills_a_running_worker_and_list_workers_sees_it(client: agentry.Client) -> None:
    worker = client.spawn("quick_task", "sleep 30", description="to stop")
    wait_state(client, worker.id, pb2.WORKER_STATE_RUNNING)
    running = client.list_workers(states=["running"])
    assert worker.id in [w.id for w in running]
    stopped = client.stop(worker.id, "the test stops it")
    assert stopped.state == pb2.WORKER_STATE_KILLED
    assert "the test stops it" in stopped.error
    killed = client.list_workers(states=[pb2.WORKER_STATE_KILLED])
    assert worker.id in [w.id for w in killed]
    assert all(w.state == pb2.WORKER_STATE_KILLED for w in killed)


def test_stopping_a_completed_worker_is_refused(client: agentry.Client) -> None:
    worker = client.spawn("quick_task", "hi", wait=True)
    with pytest.raises(agentry.AgentryError) as info:
        client.stop(worker.id)
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.reason == "NOT_CANCELABLE"


def test_send_message_reaches_the_server_and_its_refusal_is_typed(
    client: agentry.Client,
) -> None:
    # The stub agent runs on the exec executor: a process has no transcript to continue.
    worker = client.spawn("quick_task", "hi", wait=True)
    with pytest.raises(agentry.AgentryError) as info:
        client.send_message(worker.id, "and then?", request_id="k1")
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.reason == "NOT_RESUMABLE"
    assert worker.id in info.value.message
    with pytest.raises(agentry.AgentryError) as info:
        client.send_message(worker.id, "   ")
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_list_workers_pages(client: agentry.Client) -> None:
    for _ in range(3):
        client.spawn("quick_task", "hi", wait=True)
    all_workers = client.list_workers()
    assert len(all_workers) >= 3
    assert [w.id for w in client.list_workers(page_size=2)] == [w.id for w in all_workers]


def test_review_approves_a_read_only_call(client: agentry.Client) -> None:
    review = client.review("read_file", "read", target="README.md", arguments={"path": "x"})
    assert review.decision == pb2.DECISION_APPROVE
    assert not review.reviewed


def test_enum_arguments_are_checked_before_the_call(client: agentry.Client) -> None:
    with pytest.raises(ValueError, match="worktree"):
        client.spawn("quick_task", "hi", isolation="sideways")
    with pytest.raises(ValueError):
        client.list_workers(states=["finished"])


def test_state_name_and_terminal_states() -> None:
    assert agentry.state_name(pb2.WORKER_STATE_COMPLETED) == "completed"
    assert pb2.WORKER_STATE_KILLED in agentry.TERMINAL_STATES
    assert pb2.WORKER_STATE_RUNNING not in agentry.TERMINAL_STATES


def test_bearer_tokens(tmp_path) -> None:
    """With auth on: the token is sent, a missing one is UNAUTHENTICATED, for runners too."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("alice-secret: alice\n")
    config = {
        "executor": {"kind": "runner", "timeout": "30s", "kill_grace": "2s"},
        "auth": {"tokens_file": str(tokens)},
    }
    with running_server(tmp_path / "server", config) as server:
        with agentry.Client(server.addr) as anonymous:
            anonymous.wait_ready(5)  # health needs no token
            with pytest.raises(agentry.AgentryError) as info:
                anonymous.list_agents()
            assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
        with agentry.Client(server.addr, token="alice-secret") as alice:
            assert "quick_task" in [a.name for a in alice.list_agents()]

            # A runner with alice's token serves alice's workers.
            runner = agentry.Runner(server.addr, name="alice-runner", token="alice-secret")

            @runner.agent("quick_task")
            def answer(job: agentry.Job) -> str:
                return f"{job.prompt} for alice"

            with serving(runner):
                worker = alice.spawn("quick_task", "done", wait=True)
            assert worker.caller == "alice"
            assert worker.result == "done for alice"

        # A runner with a wrong token: run() raises instead of retrying forever.
        intruder = agentry.Runner(server.addr, name="intruder", token="wrong")
        intruder.agent("*")(lambda job: "")
        with pytest.raises(agentry.AgentryError) as info:
            intruder.run()
        assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
