// Runner: a session of agentry.v1.RunnerService/Connect (docs/runners.md) that runs the workers
// agentry assigns in this process, one handler per agent.
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import grpc from '@grpc/grpc-js';
import { loadServices } from './proto.js';
import { AgentryError, toAgentryError } from './errors.js';
import { buildMetadata, channelCredentials } from './metadata.js';
import { Client } from './client.js';
import * as convert from './convert.js';

// A stream that ends with one of these is a mistake to fix, not a network blip: no reconnect.
const FATAL = new Set(['INVALID_ARGUMENT', 'UNAUTHENTICATED', 'PERMISSION_DENIED', 'FAILED_PRECONDITION', 'UNIMPLEMENTED']);
// Refusals that say this runner no longer holds the worker: its handler is aborted.
const LEASE_GONE = new Set(['LEASE_ENDED', 'STALE_LEASE', 'UNKNOWN_WORKER']);

// Reconnects a stopping runner makes to deliver what it still holds.
const STOP_ATTEMPTS = 5;

const abortReason = (message) => new DOMException(message, 'AbortError');

/** One worker held by this runner. */
class Job {
  #runner;
  #client = null;
  #inbox = []; // messages not yet taken
  #waiting = []; // resolvers of nextMessage() calls

  constructor(runner, assignment, controller) {
    this.#runner = runner;
    const spec = convert.spec(assignment.spec ?? {});
    /** The worker's id. */
    this.workerId = assignment.workerId;
    /** The fencing token of every message about the worker (kept for resume). */
    this.leaseToken = assignment.leaseToken;
    /** The worker's own token: `x-agentry-worker-token` for its children, progress and reviews. */
    this.workerToken = assignment.workerToken;
    /** When the worker's timeout passes. */
    this.deadline = convert.toDate(assignment.deadline);
    /** The effective agent and the prompt (the exec executor's stdin document, lowerCamelCase). */
    this.spec = spec;
    this.agent = spec.agent;
    this.prompt = spec.prompt;
    /** Aborted when agentry cancels the worker (stop, timeout) or the runner loses it. */
    this.signal = controller.signal;
    /** For a continuation: {previousWorkerId, sessionRef} to reload (docs §12.6), else null. */
    this.resume = assignment.resume ? { ...assignment.resume } : null;
    /** Set by the handler: an opaque reference to this run's session, sent with `finished`. */
    this.sessionRef = null;
  }

  /**
   * The next message sent to the worker (SendWorkerMessage, docs §12.6), in order; resolves to
   * null once the worker is aborted. The runner acknowledges each message as it arrives here.
   */
  nextMessage() {
    if (this.#inbox.length) return Promise.resolve(this.#inbox.shift());
    if (this.signal.aborted) return Promise.resolve(null);
    return new Promise((resolve) => {
      const onAbort = () => resolve(null);
      this.signal.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push((text) => {
        this.signal.removeEventListener('abort', onAbort);
        resolve(text);
      });
    });
  }

  /** Asks the worker's caller `question` (the worker waits in input_required); resolves to the answer. */
  ask(question) {
    this.#runner._ask(this, String(question));
    return this.nextMessage();
  }

  _deliver(text) {
    const next = this.#waiting.shift();
    if (next) next(text);
    else this.#inbox.push(text);
  }

  /** Appends a progress event (kind 'text', 'tool_call', 'tool_result', 'status' or 'artifact'). */
  progress(text, kind = 'text', data) {
    this.#runner._progress(this, text, kind, data);
  }

  /**
   * Hands back an artifact, or a chunk of one (docs §13.1). Each part is a string (text), a
   * Buffer/Uint8Array (an inline file) or an object in the chunk's own form ({text}, {data},
   * {file}).
   */
  artifact(artifactId, parts, { name = '', description = '', append = false, lastChunk = false } = {}) {
    const chunk = {
      artifact_id: artifactId,
      parts: parts.map((p) =>
        typeof p === 'string' ? { text: p } : p instanceof Uint8Array ? { file: { bytes: Buffer.from(p).toString('base64') } } : p,
      ),
    };
    if (name) chunk.name = name;
    if (description) chunk.description = description;
    if (append) chunk.append = true;
    if (lastChunk) chunk.last_chunk = true;
    this.#runner._progress(this, '', 'artifact', chunk);
  }

  /** A Client that calls as this worker (to spawn children, report progress, ask for a review). */
  get client() {
    this.#client ??= this.#runner._clientFor(this.workerToken);
    return this.#client;
  }

  _closeClient() {
    this.#client?.close();
  }
}

/** Throw from a handler to decline the task: the worker fails `rejected: <reason>`, marked rejected. */
export class JobRejected extends Error {
  constructor(reason) {
    super(reason);
    this.name = 'JobRejected';
    this.reason = reason;
  }
}

export class Runner extends EventEmitter {
  #addr;
  #options;
  #stub;
  #handlers = new Map(); // agent name (or '*') → handler
  #jobs = new Map(); // worker id → {job, controller, canceled, lost}
  #outbox = []; // messages about workers, kept while the stream is down
  #inflight = []; // `finished` messages written on the current stream (re-sent after a drop)
  #call = null;
  #welcomed = false;
  #heartbeat = null;
  #runnerId = '';
  #running = null;
  #stopping = false;
  #stopAbort = new AbortController();

  /**
   * @param {string} addr `host:port`
   * @param {object} options {name, slots, token, labels, credentials, channelOptions,
   *   reconnectDelayMs, maxReconnectDelayMs}
   */
  constructor(addr, options = {}) {
    super();
    this.#addr = addr;
    this.#options = {
      ...options,
      name: options.name ?? 'node-runner',
      slots: options.slots ?? 1,
      labels: options.labels ?? {},
      reconnectDelayMs: options.reconnectDelayMs ?? 200,
      maxReconnectDelayMs: options.maxReconnectDelayMs ?? 5000,
    };
  }

  /** This session's id (from the latest welcome); empty before the first. */
  get runnerId() {
    return this.#runnerId;
  }

  /** The workers this runner holds now. */
  get activeJobs() {
    return this.#jobs.size;
  }

  /** Serves `name` ('*' = any agent) with `handler(job)`: its return value is the result. */
  agent(name, handler) {
    if (this.#running) throw new Error('Runner.agent: register agents before run()');
    if (typeof handler !== 'function') throw new TypeError('Runner.agent: the handler must be a function');
    this.#handlers.set(name, handler);
    return this;
  }

  /** Connects (and reconnects) until stop(); rejects when the server refuses the runner. */
  run() {
    if (this.#running) return this.#running;
    if (this.#handlers.size === 0) return Promise.reject(new Error('Runner.run: no agent registered'));
    this.#stopping = false;
    this.#stopAbort = new AbortController();
    const { RunnerService } = loadServices();
    this.#stub = new RunnerService(this.#addr, channelCredentials(this.#options), this.#options.channelOptions ?? {});
    this.#running = this.#loop().finally(() => {
      this.#stub.close();
      this.#running = null;
    });
    return this.#running;
  }

  /**
   * Stops: takes no new workers, waits for the running ones (or, with `abort: true`, aborts
   * their signals first), then ends the stream. Resolves when run() has returned.
   */
  async stop({ abort = false } = {}) {
    this.#stopping = true;
    if (abort) {
      for (const { controller } of this.#jobs.values()) controller.abort(abortReason('the runner is stopping'));
    }
    this.#maybeEnd();
    this.#stopAbort.abort();
    await this.#running?.catch(() => {});
  }

  async #loop() {
    let delay = this.#options.reconnectDelayMs;
    let attemptsWhileStopping = 0;
    const drained = () => this.#stopping && this.#jobs.size === 0 && this.#outbox.length === 0;
    try {
      for (;;) {
        if (drained()) return;
        const { error, welcomed } = await this.#session();
        if (drained()) return;
        if (error && FATAL.has(error.code)) throw error;
        // Stopping with outcomes still to deliver: a few more tries, then give up on them.
        if (this.#stopping && ++attemptsWhileStopping > STOP_ATTEMPTS) {
          this.emit('warning', new Error(`stopped with ${this.#outbox.length} message(s) undelivered: ${error?.message ?? 'stream ended'}`));
          return;
        }
        this.emit('disconnected', error ?? new AgentryError('UNAVAILABLE', 'the server ended the stream'));
        if (welcomed) delay = this.#options.reconnectDelayMs;
        await sleep(delay, undefined, { signal: this.#stopping ? undefined : this.#stopAbort.signal }).catch(() => {});
        delay = Math.min(delay * 2, this.#options.maxReconnectDelayMs);
      }
    } catch (err) {
      for (const { controller } of this.#jobs.values()) controller.abort(abortReason(`the runner failed: ${err.message}`));
      throw err;
    }
  }

  /** One stream, from hello to its end: {error, welcomed}. */
  #session() {
    return new Promise((resolve) => {
      const metadata = buildMetadata({ token: this.#options.token });
      const call = this.#stub.Connect(metadata);
      this.#call = call;
      this.#welcomed = false;
      let welcomed = false;
      let settled = false;
      const finish = (error) => {
        if (settled) return;
        settled = true;
        clearInterval(this.#heartbeat);
        this.#heartbeat = null;
        if (this.#call === call) this.#call = null;
        this.#welcomed = false;
        // A `finished` written just before the drop may never have arrived: send it again on
        // the next stream and resume its lease (a refusal of either is harmless).
        this.#outbox.unshift(...this.#inflight.splice(0));
        resolve({ error, welcomed });
      };
      call.on('data', (msg) => {
        try {
          if (msg.msg === 'welcome') welcomed = true;
          this.#onMessage(msg);
        } catch (err) {
          this.emit('warning', err);
        }
      });
      call.on('error', () => {}); // the status below says the same
      call.on('status', (status) => {
        // The final status; let any message still buffered be handled first.
        setImmediate(() => finish(status.code === grpc.status.OK ? null : toAgentryError(status)));
      });
      const resume = new Set([...this.#jobs.values()].filter((j) => !j.lost).map((j) => j.job.leaseToken));
      for (const m of this.#outbox) if (m.finished) resume.add(m.finished.leaseToken);
      call.write({
        hello: {
          name: this.#options.name,
          agents: [...this.#handlers.keys()],
          slots: this.#options.slots,
          labels: this.#options.labels,
          resume: [...resume],
          capabilities: ['messages', 'input', 'resume'],
        },
      });
    });
  }

  #write(msg) {
    if (this.#call && this.#welcomed) {
      this.#call.write(msg);
      if (msg.finished) this.#inflight.push(msg);
      return true;
    }
    return false;
  }

  /** A message about a worker: now, or once the stream is back. */
  #send(msg) {
    if (!this.#write(msg)) this.#outbox.push(msg);
  }

  #onMessage(msg) {
    switch (msg.msg) {
      case 'welcome': {
        const w = msg.welcome;
        this.#runnerId = w.runnerId;
        this.#welcomed = true;
        const interval = Math.max(50, convert.toMillis(w.heartbeatInterval) ?? 5000);
        this.#heartbeat = setInterval(() => this.#write({ heartbeat: {} }), interval);
        this.#heartbeat.unref?.();
        for (const m of this.#outbox.splice(0)) this.#write(m);
        this.emit('connected', {
          runnerId: w.runnerId,
          heartbeatIntervalMs: interval,
          leaseMs: convert.toMillis(w.lease),
          resumed: [...this.#jobs.keys()],
        });
        this.#maybeEnd();
        break;
      }
      case 'assignment':
        this.#onAssignment(msg.assignment);
        break;
      case 'cancel': {
        const entry = this.#jobs.get(msg.cancel.workerId);
        if (!entry) break;
        this.emit('cancel', entry.job, msg.cancel.reason);
        entry.canceled = true;
        entry.controller.abort(abortReason(msg.cancel.reason || 'canceled'));
        break;
      }
      case 'message': {
        const m = msg.message;
        const entry = this.#jobs.get(m.workerId);
        if (!entry || entry.job.leaseToken !== m.leaseToken) break;
        entry.job._deliver(m.text);
        this.#send({ messageDelivered: { workerId: m.workerId, leaseToken: m.leaseToken, messageId: m.messageId } });
        break;
      }
      case 'rejected': {
        const r = { workerId: msg.rejected.workerId, code: msg.rejected.code, reason: msg.rejected.reason };
        this.emit('rejected', r);
        let id = r.workerId;
        if (!id && r.code === 'RESUME_REFUSED') id = /worker (wkr_[0-9a-f]+)/.exec(r.reason)?.[1] ?? '';
        const entry = this.#jobs.get(id);
        if (entry && (LEASE_GONE.has(r.code) || r.code === 'RESUME_REFUSED')) {
          entry.lost = true;
          entry.controller.abort(abortReason(`the runner lost the worker: ${r.reason}`));
          this.emit('lost', entry.job, r.reason);
        }
        break;
      }
      default:
        break;
    }
  }

  #onAssignment(a) {
    const name = a.spec?.agent?.name ?? '';
    const handler = this.#handlers.get(name) ?? this.#handlers.get('*');
    if (!handler || this.#stopping) {
      // Not accepted: agentry withdraws the offer after its accept timeout and offers it again.
      this.emit('declined', { workerId: a.workerId, agent: name });
      return;
    }
    const old = this.#jobs.get(a.workerId);
    if (old) {
      old.lost = true;
      old.controller.abort(abortReason('offered again under a new lease'));
    }
    const controller = new AbortController();
    const job = new Job(this, a, controller);
    const entry = { job, controller, canceled: false, lost: false };
    this.#jobs.set(a.workerId, entry);
    this.#send({ accepted: { workerId: a.workerId, leaseToken: a.leaseToken } });
    this.emit('accepted', job);
    this.#work(handler, entry);
  }

  async #work(handler, entry) {
    const { job, controller } = entry;
    let outcome;
    try {
      const value = await handler(job);
      if (controller.signal.aborted) outcome = { canceled: {} };
      else outcome = { completed: { result: typeof value === 'string' ? value : value === undefined ? '' : JSON.stringify(value) } };
    } catch (err) {
      if (controller.signal.aborted) {
        outcome = { canceled: {} };
      } else if (err instanceof JobRejected) {
        outcome = { rejected: { reason: err.reason } };
      } else {
        const failed = { error: err instanceof Error ? err.message || String(err) : String(err) };
        if (Number.isInteger(err?.exitCode)) failed.exitCode = err.exitCode;
        outcome = { failed: failed };
      }
    }
    if (this.#jobs.get(job.workerId) === entry) this.#jobs.delete(job.workerId);
    if (!entry.lost) {
      this.#send({ finished: { workerId: job.workerId, leaseToken: job.leaseToken, sessionRef: job.sessionRef ?? '', ...outcome } });
    } else {
      // Its lease is gone: nothing about it may be sent any more.
      this.#outbox = this.#outbox.filter((m) => (m.progress ?? m.finished ?? m.accepted)?.leaseToken !== job.leaseToken);
    }
    job._closeClient();
    const kind = Object.keys(outcome)[0];
    this.emit('finished', job, { kind, ...outcome[kind] }, entry.lost);
    this.#maybeEnd();
  }

  /** During a stop: once nothing is running or queued, end our side; the server ends its own. */
  #maybeEnd() {
    if (this.#stopping && this.#jobs.size === 0 && this.#outbox.length === 0 && this.#call && this.#welcomed) {
      const call = this.#call;
      this.#welcomed = false;
      this.#inflight = [];
      clearInterval(this.#heartbeat);
      call.end();
    } else if (this.#stopping && !this.#call && this.#jobs.size === 0) {
      this.#stopAbort.abort();
    }
  }

  /** @internal Job.ask. */
  _ask(job, question) {
    const entry = this.#jobs.get(job.workerId);
    if (!entry || entry.job !== job || entry.lost) return;
    this.#send({ inputRequired: { workerId: job.workerId, leaseToken: job.leaseToken, question } });
  }

  /** @internal Job.progress. */
  _progress(job, text, kind, data) {
    const entry = this.#jobs.get(job.workerId);
    if (!entry || entry.job !== job || entry.lost) return;
    this.#send({
      progress: {
        workerId: job.workerId,
        leaseToken: job.leaseToken,
        kind: convert.enumValue('PROGRESS_KIND_', kind ?? 'text'),
        text: String(text ?? ''),
        dataJson: data === undefined ? '' : JSON.stringify(data),
      },
    });
  }

  /** @internal Job.client. */
  _clientFor(workerToken) {
    // A worker token alone speaks for the worker; the runner's bearer token goes along when set.
    return new Client(this.#addr, {
      token: this.#options.token,
      workerToken,
      credentials: this.#options.credentials,
      channelOptions: this.#options.channelOptions,
    });
  }
}
