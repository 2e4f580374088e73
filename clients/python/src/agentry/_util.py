"""Helpers shared by the client and the runner: channels, metadata and value conversions."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from ._pb import agentry_pb2 as pb2

# Results and specs can be large (executor.max_output_bytes is configurable); gRPC's default
# receive limit of 4 MiB would refuse them.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Notice a dead connection under a long-lived stream (WatchWorker, a runner session).
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
)

WORKER_TOKEN_KEY = "x-agentry-worker-token"

Seconds = float | int | datetime.timedelta
JsonText = str | Mapping[str, Any] | Sequence[Any]


def open_channel(
    addr: str,
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A channel to ``addr`` (``host:port``): TLS when credentials are given, else plaintext."""
    merged = dict(CHANNEL_OPTIONS)
    merged.update(dict(options))
    opts = list(merged.items())
    if credentials is not None:
        return grpc.secure_channel(addr, credentials, options=opts)
    return grpc.insecure_channel(addr, options=opts)


def call_metadata(token: str | None, worker_token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata of every call: the bearer token and the caller's worker token, when set."""
    metadata = []
    if token:
        metadata.append(("authorization", f"Bearer {token}"))
    if worker_token:
        metadata.append((WORKER_TOKEN_KEY, worker_token))
    return tuple(metadata)


def enum_value(enum: EnumTypeWrapper, prefix: str, value: str | int | None) -> Any:
    """An enum number from a number, a full name (``MODE_PLAN``) or a short one (``"plan"``).

    Typed Any: it is the value of whichever generated enum class ``enum`` is.
    """
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected a {prefix.rstrip('_')} name or number, got {value!r}")
    if isinstance(value, int):
        if value not in enum.values():
            raise ValueError(f"unknown {enum.DESCRIPTOR.name} number {value}")
        return value
    name = value.strip().upper().replace("-", "_")
    if not name.startswith(prefix):
        name = prefix + name
    try:
        return enum.Value(name)
    except ValueError:
        choices = ", ".join(
            n[len(prefix) :].lower() for n in enum.keys() if not n.endswith("_UNSPECIFIED")
        )
        raise ValueError(f"unknown {enum.DESCRIPTOR.name} {value!r} (one of: {choices})") from None


def short_name(enum: EnumTypeWrapper, prefix: str, number: int) -> str:
    """``WORKER_STATE_COMPLETED`` → ``completed``; an unknown number → its decimal text."""
    try:
        return enum.Name(number)[len(prefix) :].lower()
    except ValueError:
        return str(number)


def duration(value: Seconds | None) -> duration_pb2.Duration | None:
    """A Duration from seconds or a timedelta (None stays None)."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    else:
        seconds = float(value)
    if seconds < 0:
        raise ValueError(f"a duration must not be negative, got {seconds:g}s")
    out = duration_pb2.Duration()
    out.FromNanoseconds(round(seconds * 1e9))
    return out


def json_text(value: JsonText | None) -> str:
    """JSON text from text (passed through) or a JSON-serialisable value; None → ``""``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def workspace_path(workspace: str | os.PathLike[str] | None) -> str:
    """The absolute form agentry wants; empty (no workspace) stays empty."""
    if workspace is None:
        return ""
    text = os.fspath(workspace)
    return os.path.abspath(text) if text else ""


TERMINAL_STATES: frozenset[int] = frozenset(
    {pb2.WORKER_STATE_COMPLETED, pb2.WORKER_STATE_FAILED, pb2.WORKER_STATE_KILLED}
)
