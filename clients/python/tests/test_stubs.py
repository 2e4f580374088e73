"""The generated stubs: fresh from the proto, importable as `agentry._pb`, shipped as installed."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import agentry
from agentry import pb2, pb2_grpc

PACKAGE_DIR = Path(__file__).resolve().parents[1]
REGEN = PACKAGE_DIR / "scripts" / "regen.py"
SOURCE_PB = PACKAGE_DIR / "src" / "agentry" / "_pb"


def test_the_checked_in_stubs_match_a_fresh_generation() -> None:
    pytest.importorskip("grpc_tools", reason="needs the dev extra (grpcio-tools)")
    done = subprocess.run([sys.executable, str(REGEN), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_grpc_module_imports_its_sibling_relatively() -> None:
    from agentry._pb import agentry_pb2_grpc

    assert "from . import agentry_pb2 as" in inspect.getsource(agentry_pb2_grpc)
    assert "agentry.v1" not in sys.modules
    assert pb2.Worker.__module__ == "agentry._pb.agentry_pb2"
    assert pb2_grpc.RunnerServiceStub.__module__ == "agentry._pb.agentry_pb2_grpc"


def test_the_descriptor_keeps_the_proto_names() -> None:
    assert pb2.DESCRIPTOR.name == "agentry/v1/agentry.proto"
    assert pb2.DESCRIPTOR.package == "agentry.v1"
    assert set(pb2.DESCRIPTOR.services_by_name) == {"AgentRegistryService", "RunnerService"}


def test_the_installed_package_is_this_checkout() -> None:
    """The tests run against the installed package: it must be the one built from here."""
    installed = Path(agentry.__file__).resolve().parent
    if installed == SOURCE_PB.parent:
        pytest.skip("running from the source tree")
    for name in ("agentry_pb2.py", "agentry_pb2.pyi", "agentry_pb2_grpc.py"):
        assert (installed / "_pb" / name).read_bytes() == (SOURCE_PB / name).read_bytes(), name
    for source in (SOURCE_PB.parent).glob("*.py"):
        assert (installed / source.name).read_bytes() == source.read_bytes(), source.name
    assert (installed / "py.typed").exists()
