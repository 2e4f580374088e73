#!/usr/bin/env node
// A small agentry runner: pull the workers agentry admits and run them in this process.
//
// It connects to RunnerService/Connect, says hello, and for every assignment: accepts it, runs a
// toy agent (three progress steps, then a one-line result) and reports `finished`. A `cancel`
// stops the agent at its next step and is answered with `finished {canceled}`. It sends a
// heartbeat while idle and exits cleanly on SIGINT/SIGTERM or after --max-workers workers.
//
// Replace runAgent with your own agent loop: `spec` is the same document the exec executor writes
// to stdin, and `worker_token` is what to send as x-agentry-worker-token when the agent spawns
// children or asks for a review.
//
//   npm install            # @grpc/grpc-js and @grpc/proto-loader (package.json)
//   node runner.mjs --addr 127.0.0.1:50051 --proto-dir ../../proto
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: opts } = parseArgs({
  options: {
    addr: { type: 'string', default: '127.0.0.1:50051' },
    name: { type: 'string', default: 'node-runner' },
    agents: { type: 'string', default: '*' }, // comma-separated
    slots: { type: 'string', default: '4' },
    'max-workers': { type: 'string', default: '0' }, // exit after N workers (0 = never)
    'proto-dir': { type: 'string', default: path.join(here, '..', '..', 'proto') },
  },
});

// The stubs come from the repository's proto/ at start-up; enums and field names as in the proto.
const definition = protoLoader.loadSync('agentry/v1/agentry.proto', {
  includeDirs: [opts['proto-dir']],
  keepCase: true,
  enums: String,
  longs: Number,
  defaults: true,
  oneofs: true,
});
const { agentry } = grpc.loadPackageDefinition(definition);
const client = new agentry.v1.RunnerService(opts.addr, grpc.credentials.createInsecure());

const STEPS = 3;
const maxWorkers = Number(opts['max-workers']);
const cancels = new Map(); // worker id → AbortController
let done = 0;
let heartbeat = null;
let closed = false;

const call = client.Connect();
const send = (msg) => { if (!closed) call.write(msg); };
const close = () => {
  if (closed) return;
  closed = true;
  clearInterval(heartbeat);
  call.end(); // our side ends; the server then ends its side
};

// A google.protobuf.Value / ListValue as plain JSON (the spec's tools and output_schema).
const plain = (v) => {
  if (v == null) return v;
  if (v.kind === 'listValue' || Array.isArray(v.values)) return (v.listValue ?? v).values.map(plain);
  switch (v.kind) {
    case 'stringValue': return v.stringValue;
    case 'numberValue': return v.numberValue;
    case 'boolValue': return v.boolValue;
    case 'nullValue': return null;
    case 'structValue':
      return Object.fromEntries(Object.entries(v.structValue.fields).map(([k, x]) => [k, plain(x)]));
    default: return v;
  }
};

// The toy agent: a prompt `sleep N` works N seconds, anything else about a second. A cancel
// aborts `signal`, which ends the current step at once.
async function runAgent(spec, report, signal) {
  const m = /^sleep (\d+(?:\.\d+)?)/.exec(spec.prompt);
  const seconds = m ? Number(m[1]) : 1;
  for (let step = 1; step <= STEPS; step++) {
    await sleep((seconds * 1000) / STEPS, undefined, { signal });
    report(`step ${step}/${STEPS}`, { step, of: STEPS });
  }
  return `${spec.agent.name} did: ${spec.prompt}`;
}

async function work(a) {
  const ids = { worker_id: a.worker_id, lease_token: a.lease_token };
  const cancel = new AbortController();
  cancels.set(a.worker_id, cancel);
  send({ accepted: ids });
  const tools = a.spec.agent.tools;
  const spec = { ...a.spec, agent: { ...a.spec.agent, tools: { [tools.kind]: plain(tools[tools.kind]) } } };
  console.log(`runner: accepted ${a.worker_id} (${spec.agent.name})`);
  const report = (text, data) =>
    send({ progress: { ...ids, kind: 'PROGRESS_KIND_STATUS', text, data_json: JSON.stringify(data) } });
  let outcome;
  try {
    outcome = { completed: { result: await runAgent(spec, report, cancel.signal) } };
    console.log(`runner: completed ${a.worker_id}`);
  } catch (err) {
    if (cancel.signal.aborted) {
      outcome = { canceled: {} };
      console.log(`runner: canceled ${a.worker_id}`);
    } else {
      outcome = { failed: { error: String(err) } }; // the agent broke: tell agentry why
    }
  }
  send({ finished: { ...ids, ...outcome } });
  cancels.delete(a.worker_id);
  done += 1;
  if (maxWorkers > 0 && done >= maxWorkers) close();
}

call.on('data', (resp) => {
  switch (resp.msg) {
    case 'welcome': {
      const { seconds, nanos } = resp.welcome.heartbeat_interval;
      console.log(`runner: connected as ${resp.welcome.runner_id}`);
      heartbeat = setInterval(() => send({ heartbeat: {} }), seconds * 1000 + nanos / 1e6);
      break;
    }
    case 'assignment': work(resp.assignment); break;
    case 'cancel': cancels.get(resp.cancel.worker_id)?.abort(); break;
    case 'rejected': {
      const r = resp.rejected;
      console.error(`runner: refused (${r.code}) ${r.worker_id}: ${r.reason}`);
      break;
    }
  }
});
call.on('error', (err) => {
  if (closed && err.code === grpc.status.CANCELLED) return;
  console.error(`error: ${grpc.status[err.code]}: ${err.details}`);
  clearInterval(heartbeat);
  process.exitCode = 1;
});
call.on('end', () => {
  clearInterval(heartbeat);
  console.log('runner: stream closed, bye');
  client.close();
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, close);

send({
  hello: { name: opts.name, agents: opts.agents.split(','), slots: Number(opts.slots), labels: {}, resume: [] },
});
