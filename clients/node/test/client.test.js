// Client against a real agentry whose exec executor is a stub script.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, AgentryError } from '@agentry/client';
import { startServer, writeStubAgent } from './server.js';

// The fields index.d.ts declares for `interface name`: {all, required}.
const DTS = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
function declared(name) {
  const body = new RegExp(`export interface ${name} \\{\\n([\\s\\S]*?)\\n\\}`).exec(DTS)?.[1];
  assert.ok(body, `interface ${name} in index.d.ts`);
  const fields = [...body.matchAll(/^  (?:readonly )?(\w+)(\??):/gm)];
  return { all: new Set(fields.map((m) => m[1])), required: fields.filter((m) => !m[2]).map((m) => m[1]) };
}
/** The object has every required field of the interface, and nothing it does not declare. */
function assertShape(name, obj) {
  const { all, required } = declared(name);
  for (const k of Object.keys(obj)) assert.ok(all.has(k), `${name}.${k} is returned but not declared in index.d.ts`);
  for (const k of required) assert.ok(k in obj, `${name}.${k} is declared but not returned`);
}

const TERMINAL = new Set(['WORKER_STATE_COMPLETED', 'WORKER_STATE_FAILED', 'WORKER_STATE_KILLED']);
const unique = () => `${process.pid}-${Date.now()}-${Math.random().toString(16).slice(2)}`;

describe('Client', () => {
  let server;
  let client;
  let stubDir;

  before(async () => {
    stubDir = mkdtempSync(path.join(os.tmpdir(), 'agentry-node-stub-'));
    const stub = writeStubAgent(stubDir);
    server = await startServer([`executor: {command: [${stub}], timeout: 30s, kill_grace: 2s}`]);
    client = new Client(server.addr);
    await client.waitReady(30_000);
  });

  after(async () => {
    client?.close();
    await server?.stop();
    rmSync(stubDir, { recursive: true, force: true });
  });

  it('waitReady answers once SERVING; health says so', async () => {
    await client.waitReady(1000);
    assert.equal(await client.health(), 'SERVING');
    assert.equal(await client.health('agentry.v1.AgentRegistryService'), 'SERVING');
  });

  it('waitReady rejects with DEADLINE_EXCEEDED when nothing serves', async () => {
    const nobody = new Client('127.0.0.1:1');
    try {
      const err = await nobody.waitReady(300).then(() => null, (e) => e);
      assert.ok(err instanceof AgentryError);
      assert.equal(err.code, 'DEADLINE_EXCEEDED');
      assert.match(err.message, /not SERVING after 300 ms/);
    } finally {
      nobody.close();
    }
  });

  it('listAgents returns the bundled agents in precedence order', async () => {
    const res = await client.listAgents();
    const names = res.agents.map((a) => a.name);
    for (const name of ['explore', 'plan', 'reviewer', 'task', 'quick_task']) assert.ok(names.includes(name), name);
    assert.equal(res.totalSize, res.agents.length);
    assert.match(res.registryVersion, /^[0-9a-f]{64}$/);
    assert.equal(res.nextPageToken, '');
    const plan = res.agents.find((a) => a.name === 'plan');
    assert.equal(plan.source, 'SOURCE_BUNDLED');
    assert.equal(plan.format, 'FILE_FORMAT_MARKDOWN');
    assert.ok(Array.isArray(plan.tools));
    assert.equal(Object.keys(plan).some((k) => k.startsWith('_')), false);

    // Paging: two at a time, all of them.
    const paged = await client.listAgents({ pageSize: 2, all: true });
    assert.deepEqual(paged.agents.map((a) => a.name), names);
    const first = await client.listAgents({ pageSize: 2 });
    assert.equal(first.agents.length, 2);
    assert.notEqual(first.nextPageToken, '');
  });

  it('resolveAgent returns the definition and the effective view', async () => {
    const res = await client.resolveAgent('plan');
    assert.equal(res.agent.name, 'plan');
    assert.equal(res.effective.name, 'plan');
    assert.equal(res.effective.depth, 1);
    assert.equal(res.effective.mode, 'MODE_DEFAULT');
    assert.ok(Array.isArray(res.effective.tools.only), JSON.stringify(res.effective.tools));
    assert.ok(res.effective.systemPrompt.length > 0);

    const planned = await client.resolveAgent({ name: 'plan', mode: 'plan' });
    assert.equal(planned.effective.mode, 'MODE_PLAN');
  });

  it('an unknown agent is AgentryError NOT_FOUND / AGENT_NOT_FOUND', async () => {
    for (const call of [() => client.resolveAgent('no-such-agent'), () => client.spawn({ agent: 'no-such-agent', prompt: 'x' })]) {
      const err = await call().then(() => null, (e) => e);
      assert.ok(err instanceof AgentryError, String(err));
      assert.equal(err.code, 'NOT_FOUND');
      assert.equal(err.grpcCode, 5);
      assert.equal(err.reason, 'AGENT_NOT_FOUND');
      assert.equal(err.domain, 'agentry.dev');
      assert.match(err.message, /^Unknown agent "no-such-agent"\. Available: /);
    }
  });

  it('a bad request carries its field violations', async () => {
    const err = await client.spawn({ agent: '', prompt: '' }).then(() => null, (e) => e);
    assert.equal(err.code, 'INVALID_ARGUMENT');
    assert.equal(err.reason, 'INVALID_REQUEST');
    assert.ok(err.fieldViolations.length > 0);
    assert.ok(err.fieldViolations.every((v) => typeof v.field === 'string' && v.description));
  });

  it('spawn with wait returns the completed worker and its result', async () => {
    const { worker, deduplicated } = await client.spawn({
      agent: 'quick_task',
      prompt: `say hi ${unique()}`,
      description: 'node test',
      wait: true,
    });
    assert.equal(deduplicated, false);
    assert.match(worker.id, /^wkr_[0-9a-f]{32}$/);
    assert.equal(worker.state, 'WORKER_STATE_COMPLETED');
    assert.equal(worker.result, 'stub ok: quick_task at depth 1\n');
    assert.equal(worker.exitCode, 0);
    assert.equal(worker.depth, 1);
    assert.equal(worker.caller, 'anonymous');
    assert.ok(worker.createTime instanceof Date && worker.closeTime instanceof Date);
    assert.ok(worker.closeTime >= worker.createTime);
    assert.deepEqual(await client.get(worker.id).then((w) => [w.id, w.state]), [worker.id, worker.state]);
  });

  it('a worker that fails says why', async () => {
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `fail ${unique()}`, wait: true });
    assert.equal(worker.state, 'WORKER_STATE_FAILED');
    assert.equal(worker.exitCode, 7);
    assert.ok(worker.error);
  });

  it('watch streams a snapshot and every transition to completion', async () => {
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `sleep 1 ${unique()}`, workspace: process.cwd() });
    const events = [];
    for await (const ev of client.watch(worker.id)) events.push(ev);
    assert.ok(events.length >= 2, JSON.stringify(events.map((e) => e.state)));
    for (let i = 1; i < events.length; i++) assert.ok(events[i].sequence > events[i - 1].sequence);
    const last = events.at(-1);
    assert.equal(last.state, 'WORKER_STATE_COMPLETED');
    assert.equal(last.worker.result, 'stub ok: quick_task at depth 1\n');
    assert.equal(last.worker.workspace, process.cwd());
    assert.ok(last.time instanceof Date);
    assert.ok(events.some((e) => e.state === 'WORKER_STATE_RUNNING'));
    assert.equal(events.filter((e) => TERMINAL.has(e.state)).length, 1);

    // Replay after a sequence: only the later events.
    const replay = [];
    for await (const ev of client.watch(worker.id, { afterSequence: events[0].sequence })) replay.push(ev.sequence);
    assert.deepEqual(replay, events.slice(1).map((e) => e.sequence));
  });

  it('leaving a watch early, or aborting it, ends the stream', async () => {
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `sleep 5 ${unique()}` });
    for await (const ev of client.watch(worker.id)) {
      assert.ok(ev.sequence > 0);
      break;
    }
    const ac = new AbortController();
    const seen = [];
    const err = await (async () => {
      for await (const ev of client.watch(worker.id, { signal: ac.signal })) {
        seen.push(ev);
        ac.abort(new Error('enough'));
      }
    })().then(() => null, (e) => e);
    assert.equal(seen.length, 1);
    assert.ok(err instanceof AgentryError);
    assert.equal(err.code, 'CANCELLED');
    await client.stop(worker.id, 'test cleanup');
  });

  it('listWorkers filters by state; stop kills a running worker', async () => {
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `sleep 20 ${unique()}` });
    for await (const ev of client.watch(worker.id)) if (ev.state === 'WORKER_STATE_RUNNING') break;
    const running = await client.listWorkers({ states: ['running'] });
    assert.ok(running.workers.some((w) => w.id === worker.id));
    assert.ok(running.workers.every((w) => w.state === 'WORKER_STATE_RUNNING'));

    const killed = await client.stop(worker.id, 'the test stopped it');
    assert.equal(killed.state, 'WORKER_STATE_KILLED');
    assert.match(killed.error, /the test stopped it/);

    const err = await client.stop((await client.spawn({ agent: 'quick_task', prompt: `x ${unique()}`, wait: true })).worker.id)
      .then(() => null, (e) => e);
    assert.equal(err.code, 'FAILED_PRECONDITION');
    assert.equal(err.reason, 'NOT_CANCELABLE');
    const missing = await client.get('wkr_00000000000000000000000000000000').then(() => null, (e) => e);
    assert.equal(missing.code, 'NOT_FOUND');
  });

  it('sendMessage reaches the server; an exec worker is NOT_RESUMABLE', async () => {
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `m ${unique()}`, wait: true });
    const err = await client.sendMessage(worker.id, 'and then?', { requestId: 'k1' }).then(() => null, (e) => e);
    assert.ok(err instanceof AgentryError, String(err));
    assert.equal(err.code, 'FAILED_PRECONDITION');
    assert.equal(err.reason, 'NOT_RESUMABLE');
    assert.match(err.message, new RegExp(worker.id));
    assert.equal(worker.continues, '');
    assert.equal(worker.interactive, false);
  });

  it('review: a read is approved at once, a write goes to the reviewer', async () => {
    const read = await client.review({ tool: 'ls', toolClass: 'read' });
    assert.deepEqual([read.decision, read.approved, read.reviewed], ['DECISION_APPROVE', true, false]);

    const write = await client.review({
      tool: 'write_file',
      toolClass: 'TOOL_CLASS_WRITE',
      action: 'write a file',
      target: '/tmp/x',
      reason: 'test',
      arguments: { path: '/tmp/x' },
    });
    assert.equal(write.decision, 'DECISION_APPROVE');
    assert.equal(write.reviewed, true);
    assert.equal(write.reason, 'the stub approves');
    const reviewer = await client.get(write.reviewerWorkerId);
    assert.equal(reviewer.agent, 'reviewer');
  });

  it('reportProgress without a worker token is UNAUTHENTICATED / WORKER_TOKEN_REQUIRED', async () => {
    const err = await client.reportProgress('hello').then(() => null, (e) => e);
    assert.equal(err.code, 'UNAUTHENTICATED');
    assert.equal(err.reason, 'WORKER_TOKEN_REQUIRED');
  });

  it('returned messages have the shapes index.d.ts declares', async () => {
    const { agents } = await client.listAgents();
    for (const a of agents) assertShape('Agent', a);
    const { effective } = await client.resolveAgent('task');
    assertShape('Effective', effective);
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `shape ${unique()}`, wait: true });
    assertShape('Worker', worker);
    for await (const ev of client.watch(worker.id)) {
      assertShape('WorkerEvent', ev);
      assertShape('Worker', ev.worker);
    }
    const { commands } = await client.listCommands();
    for (const c of commands) assertShape('Command', c);
  });

  it('commands and reload', async () => {
    const { commands } = await client.listCommands();
    assert.ok(commands.some((c) => c.name === 'init'));
    const init = await client.resolveCommand('init', { arguments: 'now' });
    assert.equal(init.command.name, 'init');
    assert.ok(init.expanded.length > 0);
    const reload = await client.reloadAgents();
    assert.match(reload.registryVersion, /^[0-9a-f]{64}$/);
  });
});
