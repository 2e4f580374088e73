import grpc from '@grpc/grpc-js';

/**
 * Call metadata: `authorization: Bearer <token>`, `x-agentry-worker-token` and any extra keys
 * (such as the lineage headers `x-agentry-spawns` and `x-agentry-depth`).
 */
export function buildMetadata({ token, workerToken, metadata } = {}) {
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  if (workerToken) md.set('x-agentry-worker-token', workerToken);
  for (const [k, v] of Object.entries(metadata ?? {})) {
    if (v != null) md.set(k.toLowerCase(), String(v));
  }
  return md;
}

/** grpc.ChannelCredentials from the options: given ones, else insecure (plaintext). */
export function channelCredentials(options = {}) {
  return options.credentials ?? grpc.credentials.createInsecure();
}
