// AgentryError: a gRPC status with agentry's google.rpc.ErrorInfo decoded from the
// `grpc-status-details-bin` trailer.
import grpc from '@grpc/grpc-js';
import { loadDetailTypes } from './proto.js';

const CODE_NAMES = Object.fromEntries(
  Object.entries(grpc.status).filter(([, n]) => typeof n === 'number').map(([name, n]) => [n, name]),
);

/** The name of a gRPC status code: 5 → 'NOT_FOUND'. */
export function codeName(code) {
  return CODE_NAMES[code] ?? 'UNKNOWN';
}

/** An error of an agentry call: `code` is the gRPC status name, `reason` the ErrorInfo reason. */
export class AgentryError extends Error {
  constructor(code, message, { reason, domain, metadata, fieldViolations, grpcCode, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'AgentryError';
    this.code = code;
    this.grpcCode = grpcCode ?? grpc.status[code] ?? grpc.status.UNKNOWN;
    this.reason = reason ?? '';
    this.domain = domain ?? '';
    this.metadata = metadata ?? {};
    this.fieldViolations = fieldViolations ?? [];
  }
}

/** Decodes a google.rpc.Status (the trailer's bytes) into its ErrorInfo and field violations. */
export function decodeStatusDetails(bytes) {
  const out = { reason: '', domain: '', metadata: {}, fieldViolations: [] };
  const { Status, ErrorInfo, BadRequest } = loadDetailTypes();
  const status = Status.decode(bytes);
  for (const any of status.details ?? []) {
    // The bundled google/protobuf/any.proto keeps its field names as written (type_url).
    const type = String(any.typeUrl ?? any.type_url ?? '').split('/').pop();
    if (type === 'google.rpc.ErrorInfo') {
      const info = ErrorInfo.toObject(ErrorInfo.decode(any.value), { defaults: true });
      out.reason = info.reason;
      out.domain = info.domain;
      out.metadata = { ...info.metadata };
    } else if (type === 'google.rpc.BadRequest') {
      const bad = BadRequest.toObject(BadRequest.decode(any.value), { defaults: true });
      out.fieldViolations = (bad.fieldViolations ?? bad.field_violations ?? []).map((v) => ({ field: v.field, description: v.description }));
    }
  }
  return out;
}

/** Turns whatever a grpc-js call failed with into an AgentryError. */
export function toAgentryError(err) {
  if (err instanceof AgentryError) return err;
  if (err == null || typeof err.code !== 'number') {
    return new AgentryError('UNKNOWN', err?.message ?? String(err), { cause: err });
  }
  let extra = {};
  const raw = err.metadata?.get?.('grpc-status-details-bin')?.[0];
  if (raw) {
    try {
      extra = decodeStatusDetails(Buffer.isBuffer(raw) ? raw : Buffer.from(raw));
    } catch {
      // A trailer that does not decode leaves the error without a reason.
    }
  }
  return new AgentryError(codeName(err.code), err.details ?? err.message, {
    ...extra,
    grpcCode: err.code,
    cause: err,
  });
}
