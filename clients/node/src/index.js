// @agentry/client: a Node client for agentry (AgentRegistryService, health) and a runner helper
// for RunnerService/Connect. Types: ../index.d.ts.
export { Client } from './client.js';
export { Runner, JobRejected } from './runner.js';
export { AgentryError, codeName, decodeStatusDetails } from './errors.js';
export { PROTO_DIR, loadServices } from './proto.js';
