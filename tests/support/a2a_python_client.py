#!/usr/bin/env python3
"""The official Python A2A SDK (a2a-sdk, protocol 1.0) against agentry's A2A server.

Usage: a2a_python_client.py ECHO_URL ASKER_URL

ECHO_URL is the base URL of an exec agent that answers "echo: <prompt>" (a prompt
with "sleep" runs 30 s first); ASKER_URL of a model agent that asks "Which branch?"
when told "which branch" and submits "merged into main" once answered "main".
Each check prints "ok <name>"; the first failure raises and exits non-zero.
"""

import asyncio
import sys
import uuid

import grpc

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError


def message(text, task_id="", context_id=""):
    return SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            task_id=task_id,
            context_id=context_id,
        )
    )


async def last_task(client, request):
    """Sends and returns the task of the last event that carries one."""
    task = None
    async for event in client.send_message(request):
        if event.HasField("task"):
            task = event.task
    assert task is not None, "no task in the reply"
    return task


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


async def main(echo_url, asker_url):
    blocking = await create_client(echo_url, ClientConfig(streaming=False))
    card = blocking._card  # what the SDK resolved
    expect(card.name == "echo", f"card name {card.name}")
    expect(card.capabilities.streaming, "streaming capability")
    print("ok card")

    task = await last_task(blocking, message("hello"))
    expect(task.status.state == TaskState.TASK_STATE_COMPLETED, f"state {task.status.state}")
    expect(task.artifacts[0].parts[0].text == "echo: hello\n", f"artifact {task.artifacts}")
    print("ok send")

    got = await blocking.get_task(GetTaskRequest(id=task.id))
    expect(got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED, f"get {got}")
    print("ok get")

    listed = await blocking.list_tasks(ListTasksRequest(context_id=task.context_id))
    expect([t.id for t in listed.tasks] == [task.id], f"list {listed}")
    print("ok list")

    try:
        await blocking.get_task(GetTaskRequest(id="wkr_0123456789abcdef0123456789abcdef"))
        raise AssertionError("an unknown task was found")
    except TaskNotFoundError:
        print("ok not-found")

    streaming = await create_client(echo_url, ClientConfig(streaming=True))
    events = [e async for e in streaming.send_message(message("streamed"))]
    expect(events[0].HasField("task"), f"first event {events[0]}")
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    expect(states[-1] == TaskState.TASK_STATE_COMPLETED, f"stream states {states}")
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    expect(artifacts[0].parts[0].text == "echo: streamed\n", f"stream artifacts {artifacts}")
    print("ok stream")

    polling = await create_client(echo_url, ClientConfig(streaming=False, polling=True))
    started = await last_task(polling, message("sleep, then echo"))
    expect(
        started.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING),
        f"returnImmediately state {started.status.state}",
    )

    async def follow():
        return [e async for e in streaming.subscribe(SubscribeToTaskRequest(id=started.id))]

    watcher = asyncio.create_task(follow())
    await asyncio.sleep(0.3)
    canceled = await blocking.cancel_task(CancelTaskRequest(id=started.id))
    expect(canceled.status.state == TaskState.TASK_STATE_CANCELED, f"cancel {canceled.status}")
    followed = await asyncio.wait_for(watcher, 10)
    expect(followed[0].HasField("task"), f"subscribe first {followed[0]}")
    expect(
        followed[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED,
        f"subscribe last {followed[-1]}",
    )
    print("ok cancel-subscribe")

    asker = await create_client(asker_url, ClientConfig(streaming=False))
    asked = await last_task(asker, message("which branch"))
    expect(asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, f"asked {asked.status}")
    expect(asked.status.message.parts[0].text == "Which branch?", f"question {asked.status}")
    answered = await last_task(asker, message("main", task_id=asked.id, context_id=asked.context_id))
    expect(answered.id == asked.id, "the answer goes to the same task")
    expect(answered.status.state == TaskState.TASK_STATE_COMPLETED, f"answered {answered.status}")
    expect(answered.artifacts[0].parts[0].text == "merged into main", f"{answered.artifacts}")
    print("ok input-required")

    rest = await create_client(
        echo_url, ClientConfig(streaming=False, supported_protocol_bindings=["HTTP+JSON"])
    )
    task = await last_task(rest, message("over rest"))
    expect(task.artifacts[0].parts[0].text == "echo: over rest\n", f"rest {task}")
    got = await rest.get_task(GetTaskRequest(id=task.id))
    expect(got.status.state == TaskState.TASK_STATE_COMPLETED, f"rest get {got}")
    print("ok http-json")

    # The gRPC binding, on agentry's gRPC port: the card's GRPC interface names the agent as
    # its tenant.
    def channel(url):
        return grpc.aio.insecure_channel(url)

    over_grpc = await create_client(
        echo_url,
        ClientConfig(streaming=False, supported_protocol_bindings=["GRPC"], grpc_channel_factory=channel),
    )
    task = await last_task(over_grpc, message("over grpc"))
    expect(task.artifacts[0].parts[0].text == "echo: over grpc\n", f"grpc {task}")
    got = await over_grpc.get_task(GetTaskRequest(id=task.id))
    expect(got.status.state == TaskState.TASK_STATE_COMPLETED, f"grpc get {got}")
    listed = await over_grpc.list_tasks(ListTasksRequest(context_id=task.context_id))
    expect([t.id for t in listed.tasks] == [task.id], f"grpc list {listed}")
    try:
        await over_grpc.get_task(GetTaskRequest(id="wkr_0123456789abcdef0123456789abcdef"))
        raise AssertionError("an unknown task was found over gRPC")
    except TaskNotFoundError:
        pass
    grpc_stream = await create_client(
        echo_url,
        ClientConfig(streaming=True, supported_protocol_bindings=["GRPC"], grpc_channel_factory=channel),
    )
    events = [e async for e in grpc_stream.send_message(message("grpc stream"))]
    expect(events[0].HasField("task"), f"grpc first event {events[0]}")
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    expect(states[-1] == TaskState.TASK_STATE_COMPLETED, f"grpc stream states {states}")
    print("ok grpc")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
