"""Test helpers: real agentry servers on free ports, runners in threads, a TCP proxy.

The tests never build the server. AGENTRY_BIN names the binary (CI passes target/debug/agentry);
without it the repository's target/debug/agentry is used if it exists, else the tests that need
a server are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentry

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parents[2]
STUB_AGENT = TESTS_DIR / "stub_agent.py"


def agentry_bin() -> Path:
    configured = os.environ.get("AGENTRY_BIN")
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            pytest.fail(f"AGENTRY_BIN={configured} is not an executable file")
        return path
    fallback = REPO_ROOT / "target" / "debug" / "agentry"
    if fallback.is_file():
        return fallback
    pytest.skip("no agentry server binary: set AGENTRY_BIN (e.g. target/debug/agentry)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `agentry serve` process with its own home, store and config."""

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root = root
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        (root / "home").mkdir(parents=True, exist_ok=True)
        self.config = {
            "listen": self.addr,
            "home": str(root / "home"),
            "store": {"path": str(root / "state" / "agentry.db")},
            "shutdown_grace": "5s",
            **config,
        }
        self.log_path = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        config = self.root / "config.yaml"
        config.write_text(json.dumps(self.config, indent=2))  # JSON is YAML
        argv = [str(agentry_bin()), "serve", "--config", str(config)]
        # Where util-linux has it, the server gets SIGTERM when the test process dies (killed
        # by a timeout, say), so that no server outlives the tests.
        setpriv = shutil.which("setpriv")
        if setpriv and sys.platform.startswith("linux"):
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            with agentry.Client(self.addr) as client:
                client.wait_ready(30)
        except agentry.AgentryError:
            self.stop()
            pytest.fail(f"agentry did not become ready:\n{self.log()}")
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextlib.contextmanager
def running_server(root: Path, config: dict[str, Any]) -> Iterator[Server]:
    server = Server(root, config).start()
    try:
        yield server
    finally:
        server.stop()


class RunningRunner:
    """A Runner whose run() goes on in a thread."""

    def __init__(self, runner: agentry.Runner, **run_kwargs: Any) -> None:
        self.runner = runner
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, kwargs=run_kwargs, daemon=True)

    def _run(self, **kwargs: Any) -> None:
        try:
            self.runner.run(**kwargs)
        except BaseException as err:  # handed to the test
            self.error = err

    def start(self) -> RunningRunner:
        self.thread.start()
        wait_for(lambda: self.runner.runner_id is not None or not self.thread.is_alive(), 15)
        return self

    def join(self, timeout: float = 20) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "runner.run() did not return"
        if self.error is not None:
            raise self.error


@contextlib.contextmanager
def serving(runner: agentry.Runner, **run_kwargs: Any) -> Iterator[RunningRunner]:
    """Run `runner` for the block; stop it and check that run() returned afterwards."""
    running = RunningRunner(runner, **run_kwargs).start()
    try:
        yield running
    finally:
        runner.stop()
        running.join()


def wait_for(predicate: Any, timeout: float, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def wait_state(client: agentry.Client, worker_id: str, state: int, timeout: float = 20) -> None:
    wait_for(
        lambda: client.get(worker_id).state == state,
        timeout,
        f"{worker_id} to be {agentry.state_name(state)}",
    )


class Proxy:
    """A TCP proxy to 127.0.0.1:<target> that can cut its connections and refuse new ones."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.refusing = False
        self.accepted = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self.accepted += 1
                self._sockets += [downstream, upstream]
            for src, dst in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every connection now (both sides see a reset)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()
