// Client: promise-based calls of agentry.v1.AgentRegistryService and grpc.health.v1.
import { setTimeout as sleep } from 'node:timers/promises';
import { loadServices } from './proto.js';
import { AgentryError, toAgentryError } from './errors.js';
import { buildMetadata, channelCredentials } from './metadata.js';
import * as convert from './convert.js';

const { enumValue, jsonText } = convert;

function abortError(signal) {
  const why = signal?.reason instanceof Error ? signal.reason.message : String(signal?.reason ?? 'aborted');
  return new AgentryError('CANCELLED', `the call was aborted: ${why}`);
}

export class Client {
  #addr;
  #options;
  #registry;
  #health;

  /**
   * @param {string} addr `host:port` (or any grpc-js target such as `unix:/path`)
   * @param {object} [options] {token, workerToken, metadata, credentials, channelOptions}
   */
  constructor(addr, options = {}) {
    this.#addr = addr;
    this.#options = { ...options };
    const { AgentRegistryService, Health } = loadServices();
    const creds = channelCredentials(options);
    this.#registry = new AgentRegistryService(addr, creds, options.channelOptions ?? {});
    // The same target and options: grpc-js shares one connection between both.
    this.#health = new Health(addr, creds, options.channelOptions ?? {});
  }

  /** The address this client dials. */
  get address() {
    return this.#addr;
  }

  /** A client for the same server that calls as the worker of `workerToken`. */
  withWorkerToken(workerToken) {
    return new Client(this.#addr, { ...this.#options, workerToken });
  }

  /** Closes the channels; pending calls fail. */
  close() {
    this.#registry.close();
    this.#health.close();
  }

  #metadata(extra) {
    const o = this.#options;
    return buildMetadata({
      token: o.token,
      workerToken: o.workerToken,
      metadata: { ...(o.metadata ?? {}), ...(extra ?? {}) },
    });
  }

  #callOptions(call) {
    const opts = {};
    if (call?.deadlineMs != null) opts.deadline = new Date(Date.now() + call.deadlineMs);
    return opts;
  }

  #unary(stub, method, request, call = {}) {
    return new Promise((resolve, reject) => {
      const signal = call.signal;
      if (signal?.aborted) {
        reject(abortError(signal));
        return;
      }
      const onAbort = () => pending.cancel();
      const pending = stub[method](request, this.#metadata(call.metadata), this.#callOptions(call), (err, res) => {
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(signal?.aborted ? abortError(signal) : toAgentryError(err));
        else resolve(res);
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** ListAgents: one page, or with `all: true` every page's agents concatenated. */
  async listAgents(opts = {}, call) {
    const request = {
      workspace: opts.workspace ?? '',
      view: enumValue('AGENT_VIEW_', opts.view),
      includeShadowed: Boolean(opts.includeShadowed),
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? '',
    };
    const first = await this.#unary(this.#registry, 'ListAgents', request, call);
    const out = {
      agents: first.agents.map(convert.agent),
      shadowed: first.shadowed.map(convert.agent),
      diagnostics: first.diagnostics.map(convert.diagnostic),
      registryVersion: first.registryVersion,
      catalogMarkdown: first.catalogMarkdown,
      nextPageToken: first.nextPageToken,
      totalSize: first.totalSize,
    };
    while (opts.all && out.nextPageToken) {
      const page = await this.#unary(this.#registry, 'ListAgents', { ...request, pageToken: out.nextPageToken }, call);
      out.agents.push(...page.agents.map(convert.agent));
      out.nextPageToken = page.nextPageToken;
    }
    return out;
  }

  /** ResolveAgent: `resolveAgent('plan', {workspace, mode, outputSchema})` or `resolveAgent({name, ...})`. */
  async resolveAgent(nameOrOpts, opts = {}, call) {
    const o = typeof nameOrOpts === 'string' ? { ...opts, name: nameOrOpts } : { ...nameOrOpts };
    if (typeof nameOrOpts !== 'string') call = opts;
    const res = await this.#unary(this.#registry, 'ResolveAgent', {
      name: o.name,
      workspace: o.workspace ?? '',
      mode: enumValue('MODE_', o.mode),
      outputSchema: jsonText(o.outputSchema),
    }, call);
    return {
      agent: convert.agent(res.agent),
      effective: convert.effective(res.effective),
      registryVersion: res.registryVersion,
    };
  }

  /** ReloadAgents. */
  async reloadAgents(opts = {}, call) {
    const res = await this.#unary(this.#registry, 'ReloadAgents', { workspace: opts.workspace ?? '' }, call);
    return { registryVersion: res.registryVersion, diagnostics: res.diagnostics.map(convert.diagnostic) };
  }

  /** SpawnWorker: {agent, prompt, description, workspace, mode, outputSchema, wait, requestId, timeoutMs, isolation, interactive}. */
  async spawn(opts, call) {
    const res = await this.#unary(this.#registry, 'SpawnWorker', {
      agent: opts.agent,
      description: opts.description ?? '',
      prompt: opts.prompt ?? '',
      workspace: opts.workspace ?? '',
      mode: enumValue('MODE_', opts.mode),
      outputSchema: jsonText(opts.outputSchema),
      wait: Boolean(opts.wait),
      requestId: opts.requestId ?? '',
      timeout: opts.timeoutMs != null ? convert.fromMillis(opts.timeoutMs) : null,
      isolation: enumValue('ISOLATION_', opts.isolation),
      interactive: Boolean(opts.interactive),
    }, call);
    return { worker: convert.worker(res.worker), deduplicated: res.deduplicated, hint: res.hint };
  }

  /**
   * SendWorkerMessage (docs §12): `sendMessage(workerId, text, {interrupt, wait, requestId})`.
   * Resolves to {worker, messageId, continued}: the worker that answers (the one named, or a
   * new continuation of a finished one).
   */
  async sendMessage(workerId, text, opts = {}, call) {
    const res = await this.#unary(this.#registry, 'SendWorkerMessage', {
      workerId,
      text,
      delivery: opts.interrupt ? 'DELIVERY_INTERRUPT' : 'DELIVERY_QUEUE',
      wait: Boolean(opts.wait),
      requestId: opts.requestId ?? '',
    }, call);
    return { worker: convert.worker(res.worker), messageId: res.messageId, continued: res.continued };
  }

  /** GetWorker. */
  async get(workerId, call) {
    const res = await this.#unary(this.#registry, 'GetWorker', { workerId }, call);
    return convert.worker(res.worker);
  }

  /** ListWorkers: {parentId, states, pageSize, pageToken}. */
  async listWorkers(opts = {}, call) {
    const res = await this.#unary(this.#registry, 'ListWorkers', {
      parentId: opts.parentId ?? '',
      states: (opts.states ?? []).map((s) => enumValue('WORKER_STATE_', s)),
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? '',
    }, call);
    return { workers: res.workers.map(convert.worker), nextPageToken: res.nextPageToken };
  }

  /** StopWorker: the worker, killed. */
  async stop(workerId, reason = '', call) {
    const res = await this.#unary(this.#registry, 'StopWorker', { workerId, reason }, call);
    return convert.worker(res.worker);
  }

  /**
   * WatchWorker as an async iterator: a snapshot, then every transition and progress event; it
   * ends after the terminal event. Leaving the loop early cancels the stream.
   */
  async *watch(workerId, opts = {}) {
    const signal = opts.signal;
    if (signal?.aborted) throw abortError(signal);
    const stream = this.#registry.WatchWorker(
      { workerId, afterSequence: opts.afterSequence ?? 0 },
      this.#metadata(opts.metadata),
      this.#callOptions(opts),
    );
    stream.on('error', () => {}); // delivered through the iterator below; never unhandled
    const onAbort = () => stream.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      for await (const ev of stream) yield convert.event(ev);
    } catch (err) {
      throw signal?.aborted ? abortError(signal) : toAgentryError(err);
    } finally {
      signal?.removeEventListener('abort', onAbort);
      stream.cancel();
    }
  }

  /** Review: {tool, toolClass, action, target, reason, blastRadius, operator, arguments, workspace}. */
  async review(opts, call) {
    const res = await this.#unary(this.#registry, 'Review', {
      tool: opts.tool ?? '',
      toolClass: enumValue('TOOL_CLASS_', opts.toolClass),
      action: opts.action ?? '',
      target: opts.target ?? '',
      reason: opts.reason ?? '',
      blastRadius: opts.blastRadius ?? '',
      operator: opts.operator ?? '',
      argumentsJson: jsonText(opts.arguments) ?? '',
      workspace: opts.workspace ?? '',
    }, call);
    return {
      decision: res.decision,
      approved: res.decision === 'DECISION_APPROVE',
      reason: res.reason,
      reviewed: res.reviewed,
      reviewerWorkerId: res.reviewerWorkerId,
    };
  }

  /**
   * ReportProgress as the worker of this client's `workerToken`:
   * `reportProgress('reading files', 'status', {files: 3})` or `reportProgress({text, kind, data})`.
   */
  async reportProgress(textOrOpts, kind, data, call) {
    const o = typeof textOrOpts === 'string' ? { text: textOrOpts, kind, data } : { ...textOrOpts };
    if (typeof textOrOpts !== 'string') call = kind;
    const res = await this.#unary(this.#registry, 'ReportProgress', {
      kind: enumValue('PROGRESS_KIND_', o.kind ?? 'text'),
      text: o.text ?? '',
      dataJson: o.data === undefined ? '' : JSON.stringify(o.data),
    }, call);
    return { sequence: res.sequence };
  }

  /** ListCommands. */
  async listCommands(opts = {}, call) {
    const res = await this.#unary(this.#registry, 'ListCommands', {
      workspace: opts.workspace ?? '',
      includeShadowed: Boolean(opts.includeShadowed),
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? '',
    }, call);
    return {
      commands: res.commands.map(convert.command),
      shadowed: res.shadowed.map(convert.command),
      diagnostics: res.diagnostics.map(convert.diagnostic),
      registryVersion: res.registryVersion,
      nextPageToken: res.nextPageToken,
      totalSize: res.totalSize,
    };
  }

  /** ResolveCommand: `resolveCommand('init', {workspace, arguments})`. */
  async resolveCommand(name, opts = {}, call) {
    const res = await this.#unary(this.#registry, 'ResolveCommand', {
      name,
      workspace: opts.workspace ?? '',
      arguments: opts.arguments ?? '',
    }, call);
    return { command: convert.command(res.command), expanded: res.expanded, registryVersion: res.registryVersion };
  }

  /** One grpc.health.v1 check: 'SERVING', 'NOT_SERVING', ... */
  async health(service = '', call) {
    const res = await this.#unary(this.#health, 'Check', { service }, call);
    return res.status;
  }

  /**
   * Polls grpc.health.v1 until `service` ('' = the server) is SERVING; rejects with
   * DEADLINE_EXCEEDED after `timeoutMs`.
   */
  async waitReady(timeoutMs = 10_000, { service = '', signal } = {}) {
    const deadline = Date.now() + timeoutMs;
    let last = 'no answer';
    for (;;) {
      if (signal?.aborted) throw abortError(signal);
      const left = deadline - Date.now();
      if (left <= 0) break;
      try {
        const status = await this.health(service, { deadlineMs: Math.min(2000, left), signal });
        if (status === 'SERVING') return;
        last = status;
      } catch (err) {
        if (signal?.aborted) throw err;
        last = `${err.code}: ${err.message}`;
      }
      await sleep(Math.max(0, Math.min(100, deadline - Date.now())));
    }
    throw new AgentryError('DEADLINE_EXCEEDED', `${this.#addr} not SERVING after ${timeoutMs} ms (last: ${last})`);
  }
}
