"""The gRPC stubs of ``agentry.v1`` (generated; see ``agentry._pb``).

``AgentRegistryServiceStub`` and ``RunnerServiceStub``, for calls the client does not wrap.
"""

from ._pb.agentry_pb2_grpc import *  # noqa: F403
