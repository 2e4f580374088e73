"""Generated code: the protobuf messages and gRPC stubs of proto/agentry/v1/agentry.proto.

Everything else in this directory is written by scripts/regen.py; do not edit it by hand. Import
the messages as `agentry.pb2` and the stubs as `agentry.pb2_grpc`.
"""
