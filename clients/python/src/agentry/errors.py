"""The one exception type of the package: an agentry call that failed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

__all__ = ["AgentryError"]

# The trailer in which a gRPC server sends the google.rpc.Status of a failed call.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class AgentryError(Exception):
    """A failed agentry call: its gRPC status code and message, and agentry's error detail.

    agentry attaches a ``google.rpc.ErrorInfo`` to every error it returns (docs/api.md, "Errors"):
    its ``reason`` is a stable UPPER_SNAKE_CASE code such as ``AGENT_NOT_FOUND`` and its
    ``domain`` is ``agentry.dev``. Invalid requests also carry a ``google.rpc.BadRequest`` whose
    field violations are given as ``field_violations``.

    Attributes:
        code: The gRPC status code, e.g. ``grpc.StatusCode.NOT_FOUND``.
        message: The status message, verbatim.
        reason: ``ErrorInfo.reason``, or None when the error carries no ErrorInfo.
        domain: ``ErrorInfo.domain``, or None.
        metadata: ``ErrorInfo.metadata`` (empty without an ErrorInfo).
        field_violations: ``(field, description)`` pairs of a ``BadRequest`` detail.
        details: Every detail of the ``google.rpc.Status``, still packed.
    """

    code: grpc.StatusCode
    message: str
    reason: str | None
    domain: str | None
    metadata: dict[str, str]
    field_violations: list[tuple[str, str]]
    details: list[any_pb2.Any]

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str | None = None,
        domain: str | None = None,
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[tuple[str, str]] = (),
        details: Sequence[any_pb2.Any] = (),
    ) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata = dict(metadata or {})
        self.field_violations = list(field_violations)
        self.details = list(details)

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.message}"
        return f"{text} ({self.reason})" if self.reason else text

    def __repr__(self) -> str:
        return (
            f"AgentryError(code={self.code.name}, message={self.message!r}, reason={self.reason!r})"
        )

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> AgentryError:
        """Build the error from a failed call, decoding its ``grpc-status-details-bin`` trailer."""
        code = _call_attr(err, "code") or grpc.StatusCode.UNKNOWN
        message = _call_attr(err, "details") or ""
        error = cls(code, message)
        for key, value in _call_attr(err, "trailing_metadata") or ():
            if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
                error._decode_status(value)
        return error

    def _decode_status(self, raw: bytes) -> None:
        status = status_pb2.Status()
        try:
            status.ParseFromString(raw)
        except Exception:  # a malformed trailer: keep the code and message the call reported
            return
        self.details = list(status.details)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and self.reason is None:
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                self.reason = info.reason
                self.domain = info.domain
                self.metadata = dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                self.field_violations.extend((v.field, v.description) for v in bad.field_violations)


def _call_attr(err: grpc.RpcError, name: str) -> Any:
    """``err.code()`` and friends; an RpcError that is not also a Call has none of them."""
    method = getattr(err, name, None)
    if method is None:
        return None
    try:
        return method()
    except Exception:
        return None
