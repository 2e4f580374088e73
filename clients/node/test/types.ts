// Type-checked, never run (`npm run typecheck`): the declarations in index.d.ts describe what
// the package exports and how it is used.
import { Client, Runner, AgentryError, codeName } from '@agentry/client';
import type { Worker, WorkerEvent, Agent, Effective, Job, Outcome, StatusName } from '@agentry/client';

async function client(): Promise<void> {
  const c = new Client('127.0.0.1:50051', { token: 't', workerToken: 'w', metadata: { 'x-agentry-depth': '1' } });
  await c.waitReady(5000);
  const { agents } = await c.listAgents({ view: 'catalog', all: true });
  const first: Agent | undefined = agents[0];
  const tools: string[] | null = first?.tools ?? null;
  const { effective } = await c.resolveAgent('plan', { mode: 'plan' });
  const e: Effective | null = effective;
  if (e?.tools && 'only' in e.tools) e.tools.only satisfies string[];
  await c.resolveAgent({ name: 'plan', mode: 'MODE_PLAN' }, { deadlineMs: 1000 });
  const { worker } = await c.spawn({ agent: 'quick_task', prompt: 'hi', wait: true, timeoutMs: 30_000, isolation: 'worktree' });
  const w: Worker = worker;
  const done: Date | null = w.closeTime;
  const result: string | undefined = w.result;
  for await (const ev of c.watch(w.id, { afterSequence: 0, signal: AbortSignal.timeout(1000) })) {
    const event: WorkerEvent = ev;
    if (event.progress) event.progress.text satisfies string;
  }
  await c.listWorkers({ states: ['running', 'WORKER_STATE_PENDING'] });
  (await c.stop(w.id, 'why')).state satisfies Worker['state'];
  const r = await c.review({ tool: 'rm', toolClass: 'destructive', arguments: { path: '/' } });
  r.approved satisfies boolean;
  (await c.reportProgress('reading', 'status', { files: 3 })).sequence satisfies number;
  await c.reportProgress({ text: 'x', kind: 'PROGRESS_KIND_TOOL_CALL' });
  (await c.health()) satisfies 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';
  c.withWorkerToken('other').close();
  try {
    await c.get('wkr_x');
  } catch (err) {
    if (err instanceof AgentryError) {
      const code: StatusName = err.code;
      const reason: string = err.reason;
      err.fieldViolations.map((v) => v.field);
      void [code, reason];
    }
  }
  codeName(5) satisfies StatusName;
  void [tools, done, result];
}

async function runner(): Promise<void> {
  const r = new Runner('127.0.0.1:50051', { name: 'n', slots: 2, token: 't' });
  r.agent('task', async (job: Job) => {
    job.progress('step', 'status', { step: 1 });
    job.signal.throwIfAborted();
    await job.client.spawn({ agent: 'explore', prompt: job.prompt });
    return `${job.agent.name}: ${job.spec.workerId}`;
  }).agent('*', () => ({ structured: true }));
  r.on('finished', (job, outcome: Outcome, lost) => {
    if (outcome.kind === 'failed') outcome.error satisfies string;
    void [job.workerId, lost];
  });
  r.on('connected', (info) => info.runnerId satisfies string);
  const running = r.run();
  await r.stop({ abort: true });
  await running;
}

void [client, runner];
