"""Fixtures: the shared agentry servers (exec and runner executors), clients and a proxy."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from helpers import STUB_AGENT, Proxy, Server, running_server

import agentry


@pytest.fixture(scope="session")
def exec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """agentry with the exec executor running tests/stub_agent.py."""
    config = {
        "executor": {
            "command": [sys.executable, str(STUB_AGENT)],
            "timeout": "30s",
            "kill_grace": "2s",
        }
    }
    with running_server(tmp_path_factory.mktemp("exec-server"), config) as server:
        yield server


@pytest.fixture(scope="session")
def runner_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """agentry whose executor is `runner`, with short runner timing."""
    config = {
        "executor": {"kind": "runner", "timeout": "60s", "kill_grace": "2s"},
        "runners": {"heartbeat_interval": "500ms", "lease": "3s", "accept_timeout": "5s"},
    }
    with running_server(tmp_path_factory.mktemp("runner-server"), config) as server:
        yield server


@pytest.fixture
def client(exec_server: Server) -> Iterator[agentry.Client]:
    with agentry.Client(exec_server.addr) as c:
        yield c


@pytest.fixture
def runner_client(runner_server: Server) -> Iterator[agentry.Client]:
    with agentry.Client(runner_server.addr) as c:
        yield c


@pytest.fixture
def proxy(runner_server: Server) -> Iterator[Proxy]:
    p = Proxy(runner_server.port)
    try:
        yield p
    finally:
        p.close()
