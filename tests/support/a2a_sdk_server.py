#!/usr/bin/env python3
"""An A2A agent on the official Python SDK's server (a2a-sdk, JSON-RPC 1.0 with 0.3 compat),
for the a2a executor's tests.

Usage: a2a_sdk_server.py [--no-streaming]

Binds 127.0.0.1 on a free port, prints `listening http://127.0.0.1:PORT` (the card is at
/.well-known/agent-card.json, JSON-RPC at /), and serves until killed. What it does with the
text of a message:

  contains "ask"    the task asks "Which colour?" (input-required); the answer completes it
                    with the artifact "painted <answer>"
  contains "slow"   the task works for 30 s (a status message "still painting"); a cancel
                    ends it canceled and writes the line `canceled <task id>` to stderr
  contains "fail"   the task fails with the message "no paint left"
  contains "reject" the task is rejected with the message "not a painting job"
  otherwise         a status message "painting", then the artifact "sdk: <text>", completed
"""

import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Role,
    TaskState,
)


class Painter(AgentExecutor):
    async def execute(self, context, event_queue):
        text = context.get_user_input()
        task = context.current_task
        if task is None:
            task = new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words):
            return new_text_message(words, role=Role.ROLE_AGENT, context_id=task.context_id, task_id=task.id)

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await up.add_artifact([new_text_part(f"painted {text}")], name="result")
            await up.complete()
        elif "ask" in text:
            await up.requires_input(say("Which colour?"))
        elif "slow" in text:
            await up.start_work(say("still painting"))
            await asyncio.sleep(30)
            await up.complete()
        elif "fail" in text:
            await up.failed(say("no paint left"))
        elif "reject" in text:
            await up.reject(say("not a painting job"))
        else:
            await up.start_work(say("painting"))
            await up.add_artifact([new_text_part(f"sdk: {text}")], name="result")
            await up.complete()

    async def cancel(self, context, event_queue):
        print(f"canceled {context.task_id}", file=sys.stderr, flush=True)
        up = TaskUpdater(event_queue, context.task_id, context.context_id)
        await up.cancel()


def main():
    streaming = "--no-streaming" not in sys.argv
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="painter",
        description="Paints what it is told",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="paint", name="paint", description="paints", tags=["paint"])],
    )
    handler = DefaultRequestHandler(agent_executor=Painter(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)
    app = Starlette(routes=routes)
    print(f"listening http://127.0.0.1:{port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
