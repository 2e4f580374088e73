#!/usr/bin/env node
// List the agents, resolve one, spawn a worker and watch it to its end (@agentry/client).
import { parseArgs } from 'node:util';
import { Client } from '@agentry/client';

const { values: o } = parseArgs({ options: { addr: { type: 'string', default: '127.0.0.1:50051' },
  prompt: { type: 'string', default: 'say hi' } } });
const client = new Client(o.addr);
const workspace = process.cwd();
await client.waitReady(30_000);
for (const a of (await client.listAgents({ workspace })).agents) console.log(`  ${a.name.padEnd(16)} ${a.source}`);
const { effective } = await client.resolveAgent('plan', { workspace });
console.log(`== effective ${effective.name}: spawns ${effective.spawns || '(none)'}`);
const { worker } = await client.spawn({ agent: 'quick_task', prompt: o.prompt, workspace, description: 'demo' });
console.log(`== spawned ${worker.id}`);
let last;
for await (last of client.watch(worker.id, { deadlineMs: 60_000 })) console.log(`  #${last.sequence} ${last.state}`);
client.close();
if (last?.worker?.state !== 'WORKER_STATE_COMPLETED') {
  console.error(`error: the worker ended ${last?.state}: ${last?.worker?.error}`);
  process.exit(1);
}
console.log(last.worker.result.trimEnd());
