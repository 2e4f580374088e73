// Loads the protos shipped in this package: agentry.v1 (a copy of the repository's proto), the
// standard health service, and the google.rpc messages that carry error details. The Google
// well-known types (duration, timestamp, struct, any) come from the copies bundled with
// protobufjs, which proto-loader resolves by itself.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

/** The package's proto/ directory. */
export const PROTO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'proto');

const LOADER_OPTIONS = {
  includeDirs: [PROTO_DIR],
  keepCase: false, // lowerCamelCase field names, as proto3 JSON spells them
  enums: String, // enum values as their proto names: 'WORKER_STATE_RUNNING'
  longs: Number, // uint64 sequences and token counts fit a double
  defaults: true,
  oneofs: true,
};

let services = null;
let details = null;

/** The gRPC service constructors (loaded once). */
export function loadServices() {
  if (!services) {
    const definition = protoLoader.loadSync(
      ['agentry/v1/agentry.proto', 'grpc/health/v1/health.proto'],
      LOADER_OPTIONS,
    );
    const pkg = grpc.loadPackageDefinition(definition);
    services = {
      AgentRegistryService: pkg.agentry.v1.AgentRegistryService,
      RunnerService: pkg.agentry.v1.RunnerService,
      Health: pkg.grpc.health.v1.Health,
    };
  }
  return services;
}

/** protobufjs types for google.rpc.Status, ErrorInfo and BadRequest (loaded once). */
export function loadDetailTypes() {
  if (!details) {
    const root = new protobuf.Root();
    root.resolvePath = (origin, target) =>
      target.startsWith('google/protobuf/') ? target : path.join(PROTO_DIR, target);
    root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: false });
    details = {
      Status: root.lookupType('google.rpc.Status'),
      ErrorInfo: root.lookupType('google.rpc.ErrorInfo'),
      BadRequest: root.lookupType('google.rpc.BadRequest'),
    };
  }
  return details;
}
