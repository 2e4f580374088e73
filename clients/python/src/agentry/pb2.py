"""The protobuf messages and enums of ``agentry.v1`` (generated; see ``agentry._pb``).

``agentry.pb2.Worker``, ``agentry.pb2.WORKER_STATE_COMPLETED``, ``agentry.pb2.WorkerState.Name``
and so on are those of the generated ``agentry_pb2`` module.
"""

from ._pb.agentry_pb2 import *  # noqa: F403
from ._pb.agentry_pb2 import DESCRIPTOR as DESCRIPTOR
