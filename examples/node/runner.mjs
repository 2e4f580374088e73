#!/usr/bin/env node
// A small agentry runner on @agentry/client: a toy agent (three progress steps, then one line; a
// prompt `sleep N` works N seconds) that a cancel stops at once; it exits after --max-workers.
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Runner } from '@agentry/client';

const { values: o } = parseArgs({ options: { addr: { type: 'string', default: '127.0.0.1:50051' },
  name: { type: 'string', default: 'node-runner' }, agents: { type: 'string', default: '*' },
  slots: { type: 'string', default: '4' }, 'max-workers': { type: 'string', default: '0' } } });
const runner = new Runner(o.addr, { name: o.name, slots: Number(o.slots) });
for (const agent of o.agents.split(',')) runner.agent(agent, async (job) => {
  const seconds = Number(/^sleep (\d+(?:\.\d+)?)/.exec(job.prompt)?.[1] ?? 1);
  for (let step = 1; step <= 3; step++) {
    await sleep((seconds * 1000) / 3, undefined, { signal: job.signal });
    job.progress(`step ${step}/3`, 'status', { step, of: 3 });
  }
  return `${job.agent.name} did: ${job.prompt}`;
});
let done = 0;
runner.on('connected', (s) => console.log(`runner: connected as ${s.runnerId}`));
runner.on('disconnected', (err) => console.error(`runner: disconnected (${err.code}), reconnecting`));
runner.on('accepted', (job) => console.log(`runner: accepted ${job.workerId} (${job.agent.name})`));
runner.on('finished', (job, out) => {
  console.log(`runner: ${out.kind} ${job.workerId}${out.error ? `: ${out.error}` : ''}`);
  if (++done === Number(o['max-workers'])) runner.stop();
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => runner.stop());
await runner.run();
console.log('runner: stream closed, bye');
