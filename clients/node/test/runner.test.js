// Runner against a real agentry whose executor kind is `runner`.
import { describe, it, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Runner, JobRejected } from '@agentry/client';
import { startServer, startProxy } from './server.js';

const unique = () => `${process.pid}-${Date.now()}-${Math.random().toString(16).slice(2)}`;

/** A promise with its resolve function. */
function gate() {
  let open;
  const promise = new Promise((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** Watches a worker to its end: {progress texts, states, last event}. */
async function watchAll(client, workerId, onEvent = () => {}) {
  const progress = [];
  const states = [];
  let last = null;
  for await (const ev of client.watch(workerId)) {
    if (ev.progress) progress.push(ev.progress.text);
    else states.push(ev.state);
    last = ev;
    onEvent(ev);
  }
  return { progress, states, last };
}

async function untilRunning(client, workerId) {
  for await (const ev of client.watch(workerId)) if (ev.state === 'WORKER_STATE_RUNNING') return;
  throw new Error(`${workerId} ended without running`);
}

describe('Runner', () => {
  let server;
  let client;
  const runners = [];

  /** A runner (stopped after the test) serving `agents` ({name: handler}). */
  function startRunner(addr, agents, options = {}) {
    const runner = new Runner(addr, { name: `test-${runners.length}`, slots: 4, ...options });
    for (const [name, handler] of Object.entries(agents)) runner.agent(name, handler);
    const done = runner.run();
    runners.push({ runner, done });
    return { runner, done };
  }

  before(async () => {
    server = await startServer([
      'executor: {kind: runner, timeout: 60s, kill_grace: 2s}',
      'runners: {heartbeat_interval: 1s, lease: 5s, accept_timeout: 5s}',
    ]);
    client = new Client(server.addr);
    await client.waitReady(30_000);
  });

  afterEach(async () => {
    for (const { runner, done } of runners.splice(0)) {
      await runner.stop({ abort: true });
      await done;
    }
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  it('takes a spawn with runner.agent: progress seen by a watcher, result recorded', async () => {
    const watching = gate();
    const seen = {};
    const { runner } = startRunner(server.addr, {
      quick_task: async (job) => {
        seen.job = job;
        await watching.promise; // the watcher has its snapshot: it sees every progress event
        job.progress('step 1/2', 'status', { step: 1 });
        job.progress('step 2/2', 'PROGRESS_KIND_STATUS');
        const { sequence } = await job.client.reportProgress('through the client', 'text');
        assert.ok(sequence > 0);
        return `${job.agent.name} did: ${job.prompt}`;
      },
    });
    const connected = once(runner, 'connected');
    const [info] = await connected;
    assert.match(info.runnerId, /^rnr_/);
    assert.equal(info.heartbeatIntervalMs, 1000);
    assert.equal(info.leaseMs, 5000);

    const prompt = `say hi ${unique()}`;
    const { worker } = await client.spawn({ agent: 'quick_task', prompt, description: 'runner test' });
    const events = [];
    const { progress, last } = await watchAll(client, worker.id, (ev) => {
      events.push(ev);
      watching.open();
    });
    // The stream's events in order; the RPC came over another connection, so anywhere.
    assert.deepEqual(progress.filter((t) => t.startsWith('step')), ['step 1/2', 'step 2/2']);
    assert.deepEqual([...progress].sort(), ['step 1/2', 'step 2/2', 'through the client']);
    assert.equal(last.state, 'WORKER_STATE_COMPLETED');
    assert.equal(last.worker.result, `quick_task did: ${prompt}`);
    const statusEvent = events.find((e) => e.progress?.text === 'step 1/2');
    assert.equal(statusEvent.progress.kind, 'PROGRESS_KIND_STATUS');
    assert.equal(statusEvent.progress.dataJson, '{"step":1}');

    // What the job saw: the assignment's spec as plain JSON.
    assert.equal(seen.job.workerId, worker.id);
    assert.equal(seen.job.spec.workerId, worker.id);
    assert.equal(seen.job.spec.depth, 1);
    assert.equal(seen.job.spec.description, 'runner test');
    assert.ok(seen.job.agent.tools.allExcept || seen.job.agent.tools.only);
    assert.ok(seen.job.deadline instanceof Date && seen.job.deadline > new Date());
    assert.match(seen.job.workerToken, /.+/);
    assert.equal(seen.job.signal.aborted, false);
  });

  it('a stop delivers cancel: the handler is aborted, finished canceled, the worker killed', async () => {
    const started = gate();
    let reason = null;
    const { runner } = startRunner(server.addr, {
      quick_task: async (job) => {
        started.open();
        await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
        reason = job.signal.reason.message;
        return 'ignored: the worker was canceled';
      },
    });
    const finished = once(runner, 'finished');
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `sleep 60 ${unique()}` });
    await started.promise;
    await untilRunning(client, worker.id);

    const t0 = Date.now();
    const killed = await client.stop(worker.id, 'the test stopped it');
    const elapsed = Date.now() - t0;
    assert.equal(killed.state, 'WORKER_STATE_KILLED');
    assert.match(killed.error, /the test stopped it/);
    // Well within kill_grace (2 s): the runner answered the cancel.
    assert.ok(elapsed < 1500, `stop took ${elapsed} ms`);
    assert.equal(reason, 'the test stopped it'); // the cancel carries the StopWorker reason
    const [job, outcome] = await finished;
    assert.equal(job.workerId, worker.id);
    assert.equal(outcome.kind, 'canceled');
    assert.equal((await client.get(worker.id)).state, 'WORKER_STATE_KILLED');
  });

  it('heartbeats keep a silent worker past the lease (5 s)', async () => {
    startRunner(server.addr, {
      quick_task: async (job) => {
        await sleep(6500, undefined, { signal: job.signal });
        return 'still here';
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `quiet ${unique()}`, wait: true });
    assert.equal(worker.state, 'WORKER_STATE_COMPLETED', worker.error);
    assert.equal(worker.result, 'still here');
  });

  it('a handler takes messages and asks its caller: nextMessage, ask, input_required', async () => {
    startRunner(server.addr, {
      quick_task: async (job) => {
        const first = await job.nextMessage();
        const answer = await job.ask(`got ${first}; which branch?`);
        return `merging into ${answer}`;
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `talk ${unique()}` });
    await untilRunning(client, worker.id);
    const sent = await client.sendMessage(worker.id, 'hello');
    assert.equal(sent.continued, false);
    let asked;
    for (let i = 0; i < 200; i++) {
      asked = await client.get(worker.id);
      if (asked.state === 'WORKER_STATE_INPUT_REQUIRED') break;
      await sleep(50);
    }
    assert.equal(asked.state, 'WORKER_STATE_INPUT_REQUIRED');
    assert.equal(asked.question, 'got hello; which branch?');
    const done = await client.sendMessage(worker.id, 'main', { wait: true });
    assert.equal(done.worker.state, 'WORKER_STATE_COMPLETED');
    assert.equal(done.worker.result, 'merging into main');
  });

  it('a sessionRef comes back with a continuation as job.resume', async () => {
    const seen = [];
    startRunner(server.addr, {
      quick_task: async (job) => {
        seen.push(job.resume);
        job.sessionRef = `session-of-${job.workerId}`;
        return `done ${job.prompt}`;
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `one ${unique()}`, wait: true });
    const sent = await client.sendMessage(worker.id, 'two', { wait: true });
    assert.equal(sent.continued, true);
    assert.equal(sent.worker.result, 'done two');
    assert.deepEqual(seen, [null, { previousWorkerId: worker.id, sessionRef: `session-of-${worker.id}` }]);
  });

  it('a thrown error fails the worker with its message', async () => {
    startRunner(server.addr, {
      quick_task: async () => {
        const err = new Error('the agent broke');
        err.exitCode = 3;
        throw err;
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `fail ${unique()}`, wait: true });
    assert.equal(worker.state, 'WORKER_STATE_FAILED');
    assert.match(worker.error, /the agent broke/);
    assert.equal(worker.exitCode, 3);
  });

  it('hands back artifacts with job.artifact, and declines a task with JobRejected', async () => {
    startRunner(server.addr, {
      quick_task: async (job) => {
        if (job.prompt.startsWith('not mine')) throw new JobRejected('not my kind of task');
        job.artifact('report', ['part one'], { name: 'report' });
        job.artifact('report', [' part two', { data: { k: 1 } }], { append: true, lastChunk: true });
        job.artifact('logo', [Buffer.from('hi')]);
        return 'done';
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `report ${unique()}`, wait: true });
    assert.equal(worker.state, 'WORKER_STATE_COMPLETED', worker.error);
    assert.deepEqual(worker.artifacts.map((a) => a.artifactId), ['report', 'logo']);
    const [report, logo] = worker.artifacts;
    assert.equal(report.name, 'report');
    assert.deepEqual(report.parts.map((p) => p.content), ['text', 'text', 'dataJson']);
    assert.equal(report.parts[1].text, ' part two');
    assert.deepEqual(JSON.parse(report.parts[2].dataJson), { k: 1 });
    assert.equal(Buffer.from(logo.parts[0].file.bytes).toString(), 'hi');
    const declined = await client.spawn({ agent: 'quick_task', prompt: `not mine ${unique()}`, wait: true });
    assert.equal(declined.worker.state, 'WORKER_STATE_FAILED');
    assert.equal(declined.worker.rejected, true);
    assert.equal(declined.worker.error, 'rejected: not my kind of task');
  });

  it('a non-string result is sent as JSON; agents are matched by name, then "*"', async () => {
    startRunner(server.addr, {
      quick_task: async () => 'named handler',
      '*': async (job) => ({ agent: job.agent.name, ok: true }),
    });
    const a = await client.spawn({ agent: 'quick_task', prompt: `x ${unique()}`, wait: true });
    assert.equal(a.worker.result, 'named handler');
    const b = await client.spawn({ agent: 'task', prompt: `y ${unique()}`, wait: true });
    assert.equal(b.worker.state, 'WORKER_STATE_COMPLETED');
    assert.deepEqual(JSON.parse(b.worker.result), { agent: 'task', ok: true });
  });

  it('reconnects after the stream drops and resumes its lease: the worker completes', async () => {
    const proxy = await startProxy(server.addr);
    try {
      const resumed = gate();
      const { runner } = startRunner(proxy.addr, {
        quick_task: async (job) => {
          job.progress('before the drop');
          await resumed.promise;
          job.progress('after the drop');
          return 'survived';
        },
      }, { reconnectDelayMs: 50 });
      const connects = [];
      const drops = [];
      runner.on('connected', (info) => connects.push(info));
      runner.on('disconnected', (err) => drops.push(err));
      await once(runner, 'connected');

      const { worker } = await client.spawn({ agent: 'quick_task', prompt: `resume ${unique()}` });
      const watched = watchAll(client, worker.id);
      await untilRunning(client, worker.id);
      await sleep(100); // let 'before the drop' arrive

      proxy.drop();
      const [again] = await once(runner, 'connected');
      assert.deepEqual(again.resumed, [worker.id]);
      assert.notEqual(again.runnerId, connects[0].runnerId);
      assert.equal(drops.length, 1);
      assert.equal(drops[0].code, 'UNAVAILABLE');
      resumed.open();

      const { progress, last } = await watched;
      assert.equal(last.state, 'WORKER_STATE_COMPLETED', JSON.stringify(last.worker));
      assert.equal(last.worker.result, 'survived');
      assert.ok(progress.includes('after the drop'), JSON.stringify(progress));
    } finally {
      await proxy.close();
    }
  });

  it('away longer than the lease: the worker fails, the reconnected runner is told and aborts it', async () => {
    const proxy = await startProxy(server.addr);
    try {
      let aborted = null;
      const { runner } = startRunner(proxy.addr, {
        quick_task: async (job) => {
          await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
          aborted = job.signal.reason.message;
          return 'never recorded';
        },
      }, { reconnectDelayMs: 50, maxReconnectDelayMs: 200 });
      await once(runner, 'connected');
      const lost = once(runner, 'lost');
      const finished = once(runner, 'finished');
      const { worker } = await client.spawn({ agent: 'quick_task', prompt: `lost ${unique()}` });
      await untilRunning(client, worker.id);

      await proxy.pause();
      const { last } = await watchAll(client, worker.id);
      assert.equal(last.state, 'WORKER_STATE_FAILED');
      assert.match(last.worker.error, /runner lost: test-\d+/);
      await proxy.reopen();

      const [job, why] = await lost;
      assert.equal(job.workerId, worker.id);
      assert.match(why, /cannot resume/);
      assert.match(aborted, /the runner lost the worker/);
      const [, outcome, wasLost] = await finished;
      assert.equal(outcome.kind, 'canceled');
      assert.equal(wasLost, true);
      assert.equal((await client.get(worker.id)).error, last.worker.error);
    } finally {
      await proxy.close();
    }
  });

  it('stop({abort: true}) aborts running handlers; agentry records the cancel it did not ask for', async () => {
    const started = gate();
    const { runner, done } = startRunner(server.addr, {
      quick_task: async (job) => {
        started.open();
        await sleep(60_000, undefined, { signal: job.signal });
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `abort ${unique()}` });
    await started.promise;
    await runner.stop({ abort: true });
    await done;
    const { last } = await watchAll(client, worker.id);
    assert.equal(last.state, 'WORKER_STATE_FAILED');
    assert.match(last.worker.error, /canceled by the runner without a stop request/);
  });

  it('run() keeps trying while nothing answers; stop() ends it', async () => {
    const runner = new Runner('127.0.0.1:1', { reconnectDelayMs: 20 });
    runner.agent('quick_task', async () => 'never');
    const drops = [];
    runner.on('disconnected', (err) => drops.push(err.code));
    const done = runner.run();
    await sleep(300);
    await runner.stop();
    await done;
    assert.ok(drops.length >= 2, JSON.stringify(drops));
    assert.ok(drops.every((c) => c === 'UNAVAILABLE'));
  });

  it('stop() waits for running workers, then run() resolves', async () => {
    const started = gate();
    const release = gate();
    const { runner, done } = startRunner(server.addr, {
      quick_task: async () => {
        started.open();
        await release.promise;
        return 'finished during the stop';
      },
    });
    const { worker } = await client.spawn({ agent: 'quick_task', prompt: `drain ${unique()}` });
    await started.promise;
    const stopping = runner.stop();
    await sleep(200);
    assert.equal(runner.activeJobs, 1);
    release.open();
    await stopping;
    await done;
    assert.equal(runner.activeJobs, 0);
    // The server applies `finished` on its own time: watch to the end rather than get.
    const { last } = await watchAll(client, worker.id);
    assert.equal(last.state, 'WORKER_STATE_COMPLETED', last.worker.error);
    assert.equal(last.worker.result, 'finished during the stop');
  });

  it('a refused runner makes run() reject with the AgentryError', async () => {
    const runner = new Runner(server.addr, { name: '', slots: 1 });
    runner.agent('quick_task', async () => 'never');
    const err = await runner.run().then(() => null, (e) => e);
    assert.equal(err?.code, 'INVALID_ARGUMENT');
  });
});
