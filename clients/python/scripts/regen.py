#!/usr/bin/env python3
"""Regenerate the checked-in gRPC stubs of the agentry package, or check that they are fresh.

    python scripts/regen.py          # rewrite src/agentry/_pb/ from ../../proto
    python scripts/regen.py --check  # exit 1 (with a diff) if the checked-in stubs are stale

The stubs are generated from the repository's proto/agentry/v1/agentry.proto by
`python -m grpc_tools.protoc` of exactly the grpcio-tools version pinned in the `dev` extra of
pyproject.toml (the generated code records that version), then post-processed so that they live
in `agentry._pb` instead of the proto package's `agentry.v1`:

* agentry_pb2_grpc.py imports its sibling relatively (`from . import agentry_pb2`);
* agentry_pb2.py registers its classes under the module `agentry._pb.agentry_pb2`.

The descriptor itself keeps the proto's own file name (`agentry/v1/agentry.proto`) and package
(`agentry.v1`), so the wire format and the service names are untouched.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # clients/python
REPO_ROOT = PACKAGE_DIR.parents[1]
PROTO_ROOT = REPO_ROOT / "proto"
PROTO_FILE = "agentry/v1/agentry.proto"
OUT_DIR = PACKAGE_DIR / "src" / "agentry" / "_pb"
GENERATED = ("agentry_pb2.py", "agentry_pb2.pyi", "agentry_pb2_grpc.py")
# Files in OUT_DIR that are written by hand and left alone.
HAND_WRITTEN = {"__init__.py"}
# (file, text protoc writes, replacement): each text must occur exactly once.
REWRITES = (
    (
        "agentry_pb2_grpc.py",
        b"from agentry.v1 import agentry_pb2 as agentry_dot_v1_dot_agentry__pb2\n",
        b"from . import agentry_pb2 as agentry_dot_v1_dot_agentry__pb2\n",
    ),
    (
        "agentry_pb2.py",
        b"_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, "
        b"'agentry.v1.agentry_pb2', _globals)\n",
        b"_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, "
        b"'agentry._pb.agentry_pb2', _globals)\n",
    ),
)


class RegenError(Exception):
    """The stubs cannot be generated as pinned."""


def pinned_tools_version() -> str:
    """The grpcio-tools version of the `dev` extra (`grpcio-tools==X`) in pyproject.toml."""
    with open(PACKAGE_DIR / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    for requirement in project.get("optional-dependencies", {}).get("dev", []):
        name, sep, version = requirement.replace(" ", "").partition("==")
        if name.lower() == "grpcio-tools" and sep:
            return version
    raise RegenError("pyproject.toml: the dev extra pins no grpcio-tools==VERSION")


def check_tools_version() -> str:
    wanted = pinned_tools_version()
    try:
        have = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != wanted:
        raise RegenError(
            f"the stubs are generated with grpcio-tools=={wanted}, but this Python has "
            f"{'none' if have is None else have}: pip install 'grpcio-tools=={wanted}' "
            f"(or pip install '{PACKAGE_DIR}[dev]')"
        )
    return wanted


def generate() -> dict[str, bytes]:
    """Run protoc and return the post-processed files by name."""
    check_tools_version()
    with tempfile.TemporaryDirectory(prefix="agentry-regen-") as tmp:
        argv = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(PROTO_ROOT / PROTO_FILE),
        ]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise RegenError(f"protoc failed ({done.returncode}):\n{done.stderr}")
        out = Path(tmp) / Path(PROTO_FILE).parent
        files = {name: (out / name).read_bytes() for name in GENERATED}
    for name, old, new in REWRITES:
        count = files[name].count(old)
        if count != 1:
            raise RegenError(
                f"{name}: expected the generated line {old.decode().strip()!r} once, found it "
                f"{count} times (did the grpcio-tools output change?)"
            )
        files[name] = files[name].replace(old, new)
    return files


def write(files: dict[str, bytes]) -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (OUT_DIR / name).write_bytes(content)
        print(f"wrote {(OUT_DIR / name).relative_to(REPO_ROOT)}")


def check(files: dict[str, bytes]) -> bool:
    """Compare the checked-in stubs with a fresh generation; print what differs."""
    fresh = True
    for name, content in files.items():
        path = OUT_DIR / name
        current = path.read_bytes() if path.exists() else None
        if current == content:
            continue
        fresh = False
        shown = path.relative_to(REPO_ROOT)
        if current is None:
            print(f"{shown}: missing", file=sys.stderr)
            continue
        diff = difflib.unified_diff(
            current.decode(errors="replace").splitlines(keepends=True),
            content.decode(errors="replace").splitlines(keepends=True),
            fromfile=f"{shown} (checked in)",
            tofile=f"{shown} (fresh from {PROTO_FILE})",
        )
        lines = list(diff)
        sys.stderr.writelines(line[:300] + ("\n" if len(line) > 300 else "") for line in lines[:80])
        if len(lines) > 80:
            print(f"... {len(lines) - 80} more diff lines", file=sys.stderr)
    expected = set(GENERATED) | HAND_WRITTEN
    for path in sorted(OUT_DIR.glob("*")):
        if path.is_file() and path.name not in expected:
            fresh = False
            print(f"{path.relative_to(REPO_ROOT)}: not generated from the proto", file=sys.stderr)
    return fresh


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 when the stubs are stale"
    )
    args = parser.parse_args()
    try:
        files = generate()
    except RegenError as err:
        print(f"regen: {err}", file=sys.stderr)
        return 2
    if not args.check:
        write(files)
        return 0
    if check(files):
        print(f"stubs are fresh: {OUT_DIR.relative_to(REPO_ROOT)} matches {PROTO_FILE}")
        return 0
    print(
        "regen: the checked-in stubs differ from the proto; run "
        "`python clients/python/scripts/regen.py` and commit the result",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
