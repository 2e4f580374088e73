// Types of @agentry/client (hand-written; checked by `npm run typecheck`).
//
// Field names are the proto's in lowerCamelCase (proto3 JSON), enum values their proto names
// ('WORKER_STATE_RUNNING'), times Date, 64-bit integers number. Optional proto fields that are
// unset are absent (`undefined`), unset messages are null.

import { EventEmitter } from 'node:events';
import type { ChannelCredentials, ChannelOptions } from '@grpc/grpc-js';

// ---------------------------------------------------------------------------------- enums

export type Source = 'SOURCE_UNSPECIFIED' | 'SOURCE_PROJECT' | 'SOURCE_USER' | 'SOURCE_PLUGIN' | 'SOURCE_DIR' | 'SOURCE_BUNDLED';
export type FileFormat = 'FILE_FORMAT_UNSPECIFIED' | 'FILE_FORMAT_MARKDOWN' | 'FILE_FORMAT_TOML';
export type AgentView = 'AGENT_VIEW_UNSPECIFIED' | 'AGENT_VIEW_FULL' | 'AGENT_VIEW_CATALOG';
export type Mode = 'MODE_UNSPECIFIED' | 'MODE_DEFAULT' | 'MODE_PLAN';
export type ThinkingLevel =
  | 'THINKING_LEVEL_UNSPECIFIED' | 'THINKING_LEVEL_OFF' | 'THINKING_LEVEL_MINIMAL' | 'THINKING_LEVEL_LOW'
  | 'THINKING_LEVEL_MEDIUM' | 'THINKING_LEVEL_HIGH' | 'THINKING_LEVEL_XHIGH';
export type Severity = 'SEVERITY_UNSPECIFIED' | 'SEVERITY_WARNING' | 'SEVERITY_ERROR' | 'SEVERITY_INFO';
export type OutputSchemaSource =
  | 'OUTPUT_SCHEMA_SOURCE_UNSPECIFIED' | 'OUTPUT_SCHEMA_SOURCE_AGENT' | 'OUTPUT_SCHEMA_SOURCE_REQUEST' | 'OUTPUT_SCHEMA_SOURCE_PARENT';
export type WorkerState =
  | 'WORKER_STATE_UNSPECIFIED' | 'WORKER_STATE_PENDING' | 'WORKER_STATE_RUNNING' | 'WORKER_STATE_COMPLETED'
  | 'WORKER_STATE_FAILED' | 'WORKER_STATE_KILLED' | 'WORKER_STATE_INPUT_REQUIRED';
export type Isolation = 'ISOLATION_UNSPECIFIED' | 'ISOLATION_NONE' | 'ISOLATION_WORKTREE';
export type ProgressKind =
  | 'PROGRESS_KIND_UNSPECIFIED' | 'PROGRESS_KIND_TEXT' | 'PROGRESS_KIND_TOOL_CALL' | 'PROGRESS_KIND_TOOL_RESULT' | 'PROGRESS_KIND_STATUS'
  | 'PROGRESS_KIND_MESSAGE' | 'PROGRESS_KIND_ARTIFACT';
export type ToolClass = 'TOOL_CLASS_UNSPECIFIED' | 'TOOL_CLASS_READ' | 'TOOL_CLASS_WRITE' | 'TOOL_CLASS_DESTRUCTIVE';
export type Decision = 'DECISION_UNSPECIFIED' | 'DECISION_APPROVE' | 'DECISION_REJECT';
export type HealthStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** gRPC status names, as AgentryError.code. */
export type StatusName =
  | 'OK' | 'CANCELLED' | 'UNKNOWN' | 'INVALID_ARGUMENT' | 'DEADLINE_EXCEEDED' | 'NOT_FOUND' | 'ALREADY_EXISTS'
  | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED' | 'FAILED_PRECONDITION' | 'ABORTED' | 'OUT_OF_RANGE'
  | 'UNIMPLEMENTED' | 'INTERNAL' | 'UNAVAILABLE' | 'DATA_LOSS' | 'UNAUTHENTICATED';

/** Requests take an enum's full name or its short form, in any case: 'MODE_PLAN', 'plan'. */
type Short<Full extends string, Prefix extends string> = Full | (Full extends `${Prefix}${infer S}` ? S | Lowercase<S> : never);
export type ModeInput = Short<Mode, 'MODE_'>;
export type AgentViewInput = Short<AgentView, 'AGENT_VIEW_'>;
export type IsolationInput = Short<Isolation, 'ISOLATION_'>;
export type WorkerStateInput = Short<WorkerState, 'WORKER_STATE_'>;
export type ProgressKindInput = Short<ProgressKind, 'PROGRESS_KIND_'>;
export type ToolClassInput = Short<ToolClass, 'TOOL_CLASS_'>;

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// ------------------------------------------------------------------------------- messages

/** The tools a worker gets: exactly a list, or everything but a list. */
export type ToolSet = { only: string[] } | { allExcept: string[] };

/** One parsed persona file. */
export interface Agent {
  name: string;
  description: string;
  systemPrompt: string;
  whenToUse?: string;
  /** The tool allow-list; null means the agent inherits every tool. */
  tools: string[] | null;
  /** Tools removed after `tools`; null when the file has none. */
  disallowedTools: string[] | null;
  /** `*` or a comma-separated list; absent means none. */
  spawns?: string;
  model: string[];
  thinkingLevel: ThinkingLevel;
  /** The `output` field as JSON text. */
  outputSchema?: string;
  permissionMode?: string;
  maxTurns?: number;
  criticalReminder?: string;
  /** Unknown frontmatter keys as a JSON object (text). */
  extraJson: string;
  source: Source;
  family: string;
  filePath: string;
  shadowedBy: string;
  contentSha256: string;
  format: FileFormat;
  temperature?: number;
  timeoutMins?: number;
  remote: boolean;
  /** Claude Code `background: true`: meant to be spawned with wait = false. */
  background: boolean;
  /** `isolation`: 'worktree' or 'none', when the file says. */
  isolation?: string;
  /** `memory`: 'user', 'project' or 'local', when the file says. */
  memory?: string;
  /** `skills`, composed into the prompt in this order. */
  skills: string[];
  /** `mcpServers`, when the file names any. */
  mcpServers: McpServerList | null;
}

/** One MCP server a persona names: a configured one (only `name`), or one it defines. */
export interface McpServerSpec {
  name: string;
  inline: boolean;
  command: string[];
  env: Record<string, string>;
  cwd?: string;
  url?: string;
  headers: Record<string, string>;
}

export interface McpServerList {
  servers: McpServerSpec[];
}

/** A tool-list entry with a permission pattern, `Bash(git diff:*)`, name and pattern apart. */
export interface ToolRule {
  entry: string;
  name: string;
  pattern: string;
  /** From `disallowed_tools`: calls the pattern matches are refused. */
  deny: boolean;
}

/** What a worker spawned by the caller would actually get. */
export interface Effective {
  name: string;
  systemPrompt: string;
  tools: ToolSet | null;
  spawns: string;
  model: string[];
  thinkingLevel: ThinkingLevel;
  maxTurns?: number;
  permissionMode?: string;
  outputSchema?: string;
  outputSchemaSource: OutputSchemaSource;
  mode: Mode;
  depth: number;
  atMaxDepth: boolean;
  mcpServers: McpServerList | null;
  toolRules: ToolRule[];
}
export type EffectiveAgent = Effective;

export interface Diagnostic {
  path: string;
  line?: number;
  severity: Severity;
  code: string;
  message: string;
}

export interface ModelUsage {
  model: string;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  byModel: ModelUsage[];
}

export interface Worktree {
  path: string;
  branch: string;
  baseCommit: string;
  changed: boolean;
}

/** One run of one agent on one prompt. */
export interface Worker {
  /** `wkr_` + 32 hex digits. */
  id: string;
  agent: string;
  description: string;
  /** Empty for a top-level caller. */
  parentId: string;
  depth: number;
  state: WorkerState;
  createTime: Date | null;
  startTime: Date | null;
  closeTime: Date | null;
  /** The agent's output. */
  result?: string;
  /** The output as JSON text, when an output schema applied. */
  structuredResult?: string;
  /** Why it failed or was killed. */
  error?: string;
  exitCode?: number;
  tools: ToolSet | null;
  spawns: string;
  model: string[];
  /** The principal that spawned it (`anonymous` without auth). */
  caller: string;
  workspace: string;
  mode: Mode;
  /** Sequence of the latest event. */
  sequence: number;
  lastActivityTime: Date | null;
  usage: TokenUsage | null;
  /** GetWorker only. */
  treeUsage: TokenUsage | null;
  worktree: Worktree | null;
  /** The worker whose conversation this one carries on; empty = none. */
  continues: string;
  /** The worker that carries this one's conversation on; empty = none. */
  continuedBy: string;
  /** What it asks its caller, while input_required. */
  question?: string;
  interactive: boolean;
  undeliveredMessages: number;
  /** What it handed back: reported artifacts, then its result as `result` (docs §13.1). */
  artifacts: Artifact[];
  /** It failed because its agent declined the task. */
  rejected: boolean;
}

/** An output of a worker. */
export interface Artifact {
  artifactId: string;
  name: string;
  description: string;
  parts: ArtifactPart[];
}

/** One part: exactly one of `text`, `dataJson` (JSON text) or `file`. */
export interface ArtifactPart {
  text?: string;
  dataJson?: string;
  file?: { name: string; mediaType: string; bytes?: Buffer; uri?: string };
}

export interface Progress {
  kind: ProgressKind;
  text: string;
  /** JSON text; empty = none. */
  dataJson: string;
}

/** One event of a watched worker: a transition, or a progress report (`progress` set). */
export interface WorkerEvent {
  sequence: number;
  /** The state entered; for a progress event, the unchanged state. */
  state: WorkerState;
  worker: Worker | null;
  time: Date | null;
  progress: Progress | null;
}

export interface Command {
  name: string;
  aliases: string[];
  description: string;
  template: string;
  argumentHint?: string;
  model?: string;
  allowedTools: string[] | null;
  extraJson: string;
  source: Source;
  family: string;
  filePath: string;
  shadowedBy: string;
  contentSha256: string;
  format: FileFormat;
}

export interface ListAgentsResult {
  agents: Agent[];
  shadowed: Agent[];
  diagnostics: Diagnostic[];
  registryVersion: string;
  catalogMarkdown: string;
  nextPageToken: string;
  totalSize: number;
}

export interface ResolveAgentResult {
  agent: Agent | null;
  effective: Effective | null;
  registryVersion: string;
}

export interface SpawnResult {
  /** Terminal when `wait` was set. */
  worker: Worker;
  deduplicated: boolean;
  hint: string;
}

export interface ListWorkersResult {
  workers: Worker[];
  nextPageToken: string;
}

export interface ReviewResult {
  decision: Decision;
  /** decision === 'DECISION_APPROVE'. */
  approved: boolean;
  reason: string;
  reviewed: boolean;
  reviewerWorkerId: string;
}

export interface ListCommandsResult {
  commands: Command[];
  shadowed: Command[];
  diagnostics: Diagnostic[];
  registryVersion: string;
  nextPageToken: string;
  totalSize: number;
}

export interface ResolveCommandResult {
  command: Command | null;
  expanded: string;
  registryVersion: string;
}

// --------------------------------------------------------------------------------- errors

export interface FieldViolation {
  field: string;
  description: string;
}

/** A failed call: the gRPC status and agentry's google.rpc.ErrorInfo. */
export declare class AgentryError extends Error {
  constructor(code: StatusName, message: string, extra?: {
    reason?: string;
    domain?: string;
    metadata?: Record<string, string>;
    fieldViolations?: FieldViolation[];
    grpcCode?: number;
    cause?: unknown;
  });
  readonly name: 'AgentryError';
  /** The gRPC status name: 'NOT_FOUND'. */
  code: StatusName;
  /** The numeric gRPC status: 5. */
  grpcCode: number;
  /** ErrorInfo.reason ('AGENT_NOT_FOUND'); empty when the status had none. */
  reason: string;
  /** ErrorInfo.domain ('agentry.dev'). */
  domain: string;
  /** ErrorInfo.metadata. */
  metadata: Record<string, string>;
  /** BadRequest field violations (INVALID_ARGUMENT). */
  fieldViolations: FieldViolation[];
}

/** The name of a gRPC status code: 5 → 'NOT_FOUND'. */
export declare function codeName(code: number): StatusName;

/** Decodes the bytes of a `grpc-status-details-bin` trailer (a google.rpc.Status). */
export declare function decodeStatusDetails(bytes: Uint8Array): {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
  fieldViolations: FieldViolation[];
};

// --------------------------------------------------------------------------------- client

export interface ClientOptions {
  /** Bearer token (`authorization: Bearer <token>`), when the server has `auth.tokens_file`. */
  token?: string;
  /** Call as this worker (`x-agentry-worker-token`): spawn children, report progress, review. */
  workerToken?: string;
  /** Extra metadata on every call (`x-agentry-spawns`, `x-agentry-depth`, ...). */
  metadata?: Record<string, string>;
  /** Default: insecure (plaintext). */
  credentials?: ChannelCredentials;
  channelOptions?: ChannelOptions;
}

/** Per-call options (the last argument of every method). */
export interface CallOptions {
  /** Aborting cancels the call; it rejects with AgentryError CANCELLED. */
  signal?: AbortSignal;
  /** A deadline this many milliseconds from now (DEADLINE_EXCEEDED after it). */
  deadlineMs?: number;
  metadata?: Record<string, string>;
}

export interface ListAgentsOptions {
  workspace?: string;
  view?: AgentViewInput;
  includeShadowed?: boolean;
  pageSize?: number;
  pageToken?: string;
  /** Follow next_page_token and return every page's agents. */
  all?: boolean;
}

export interface ResolveAgentOptions {
  workspace?: string;
  mode?: ModeInput;
  /** A JSON output schema (text, or a value to stringify). */
  outputSchema?: string | Json;
}

export interface SpawnOptions {
  agent: string;
  prompt: string;
  description?: string;
  /** Absolute workspace directory. */
  workspace?: string;
  mode?: ModeInput;
  outputSchema?: string | Json;
  /** Return only when the worker is terminal. */
  wait?: boolean;
  /** Idempotency key. */
  requestId?: string;
  /** Run-time bound of the worker, in milliseconds (capped by executor.timeout). */
  timeoutMs?: number;
  isolation?: IsolationInput;
  /** The worker may ask its caller and wait in input_required for the answer. */
  interactive?: boolean;
}

export interface SendMessageOptions {
  /** Abandon the worker's request or tool call in flight and deliver at once. */
  interrupt?: boolean;
  /** Resolve once the worker that answers is terminal or asks again. */
  wait?: boolean;
  /** Idempotency key. */
  requestId?: string;
}

export interface SendMessageResult {
  /** The worker that answers: the one named, or its continuation. */
  worker: Worker;
  /** `msg_` + 32 hex digits. */
  messageId: string;
  /** True when `worker` is a new continuation of the worker named. */
  continued: boolean;
}

export interface ListWorkersOptions {
  parentId?: string;
  states?: WorkerStateInput[];
  pageSize?: number;
  pageToken?: string;
}

export interface WatchOptions extends CallOptions {
  /** Resume after this sequence (0 = start with a snapshot). */
  afterSequence?: number;
}

export interface ReviewOptions {
  tool?: string;
  toolClass?: ToolClassInput;
  action?: string;
  target?: string;
  reason?: string;
  blastRadius?: string;
  operator?: string;
  /** The tool's arguments: JSON text, or a value to stringify. */
  arguments?: string | Json;
  workspace?: string;
}

export interface ReportProgressOptions {
  text: string;
  kind?: ProgressKindInput;
  /** Structured detail, sent as JSON. */
  data?: Json;
}

export declare class Client {
  constructor(addr: string, options?: ClientOptions);
  readonly address: string;
  /** A client for the same server that calls as the worker of `workerToken`. */
  withWorkerToken(workerToken: string): Client;
  close(): void;

  listAgents(options?: ListAgentsOptions, call?: CallOptions): Promise<ListAgentsResult>;
  resolveAgent(name: string, options?: ResolveAgentOptions, call?: CallOptions): Promise<ResolveAgentResult>;
  resolveAgent(options: ResolveAgentOptions & { name: string }, call?: CallOptions): Promise<ResolveAgentResult>;
  reloadAgents(options?: { workspace?: string }, call?: CallOptions): Promise<{ registryVersion: string; diagnostics: Diagnostic[] }>;
  spawn(options: SpawnOptions, call?: CallOptions): Promise<SpawnResult>;
  get(workerId: string, call?: CallOptions): Promise<Worker>;
  listWorkers(options?: ListWorkersOptions, call?: CallOptions): Promise<ListWorkersResult>;
  /** The worker, killed. */
  stop(workerId: string, reason?: string, call?: CallOptions): Promise<Worker>;
  /** A follow-up message: queued, an answer, or a continuation (docs §12). */
  sendMessage(workerId: string, text: string, options?: SendMessageOptions, call?: CallOptions): Promise<SendMessageResult>;
  /** A snapshot, then every transition and progress event; ends after the terminal one. */
  watch(workerId: string, options?: WatchOptions): AsyncGenerator<WorkerEvent, void, undefined>;
  review(options: ReviewOptions, call?: CallOptions): Promise<ReviewResult>;
  /** As the worker of this client's workerToken. */
  reportProgress(text: string, kind?: ProgressKindInput, data?: Json, call?: CallOptions): Promise<{ sequence: number }>;
  reportProgress(options: ReportProgressOptions, call?: CallOptions): Promise<{ sequence: number }>;
  listCommands(options?: { workspace?: string; includeShadowed?: boolean; pageSize?: number; pageToken?: string }, call?: CallOptions): Promise<ListCommandsResult>;
  resolveCommand(name: string, options?: { workspace?: string; arguments?: string }, call?: CallOptions): Promise<ResolveCommandResult>;
  /** One grpc.health.v1 Check ('' = the server as a whole). */
  health(service?: string, call?: CallOptions): Promise<HealthStatus>;
  /** Polls health until SERVING; rejects with AgentryError DEADLINE_EXCEEDED after timeoutMs. */
  waitReady(timeoutMs?: number, options?: { service?: string; signal?: AbortSignal }): Promise<void>;
}

// --------------------------------------------------------------------------------- runner

/** The effective agent of an assignment, as a runtime needs it. */
export interface AgentSpec {
  name: string;
  systemPrompt: string;
  tools: ToolSet | null;
  spawns: string;
  model: string[];
  /** 'off', 'minimal', 'low', 'medium', 'high' or 'xhigh', when set. */
  thinkingLevel?: string;
  maxTurns?: number;
  permissionMode?: string;
  /** The effective output schema, when there is one. */
  outputSchema?: Json;
  mcpServers: McpServerList | null;
  toolRules: ToolRule[];
}

/** The assignment's spec: the exec executor's stdin document, in lowerCamelCase. */
export interface WorkerSpec {
  workerId: string;
  depth: number;
  prompt: string;
  description: string;
  workspace?: string;
  agent: AgentSpec;
  /** The agent's memory directory, when its persona has `memory`. */
  memoryDir?: string;
  /** The A2A message that started the worker, when one did (docs §13.3). */
  a2a?: A2aMessage;
}

/** An A2A message as a worker gets it. */
export interface A2aMessage {
  messageId: string;
  contextId: string;
  parts: ArtifactPart[];
  /** Its metadata as JSON text; empty = none. */
  metadataJson: string;
}

/** One worker held by a runner: what its handler gets. */
export interface Job {
  readonly workerId: string;
  /** The fencing token of the worker's lease. */
  readonly leaseToken: string;
  /** `x-agentry-worker-token` of the worker. */
  readonly workerToken: string;
  /** When the worker's timeout passes. */
  readonly deadline: Date | null;
  readonly spec: WorkerSpec;
  /** spec.agent */
  readonly agent: AgentSpec;
  /** spec.prompt */
  readonly prompt: string;
  /**
   * Aborted on cancel (stop, timeout; `reason.message` says which), when the runner loses the
   * worker, or on stop({abort: true}). A handler that ends after the abort is `finished canceled`.
   */
  readonly signal: AbortSignal;
  /** Appends a progress event (sent at once, or after a reconnect). */
  progress(text: string, kind?: ProgressKindInput, data?: Json): void;
  /** Hands back an artifact, or a chunk of one (docs §13.1). */
  artifact(
    artifactId: string,
    parts: Array<string | Uint8Array | { text: string } | { data: Json } | { file: { name?: string; media_type?: string; bytes?: string; uri?: string } }>,
    options?: { name?: string; description?: string; append?: boolean; lastChunk?: boolean },
  ): void;
  /** For a continuation: the worker it continues and the session to reload (docs §12.6). */
  readonly resume: { previousWorkerId: string; sessionRef: string } | null;
  /** Set by the handler: an opaque reference to this run's session, sent with `finished`. */
  sessionRef: string | null;
  /** The next message sent to the worker (docs §12.6); null once the worker is aborted. */
  nextMessage(): Promise<string | null>;
  /** Asks the worker's caller; the worker waits in input_required; resolves to the answer. */
  ask(question: string): Promise<string | null>;
  /** A Client that calls as this worker. */
  readonly client: Client;
}

/**
 * A handler: its value is the result (a string as is, anything else as JSON); a throw fails the
 * worker with the error's message (and `exitCode`, when an integer).
 */
export type JobHandler = (job: Job) => Promise<unknown> | unknown;

export interface RunnerOptions {
  /** For logs and `runner lost: <name>`; default 'node-runner'. */
  name?: string;
  /** Workers run at once; default 1. */
  slots?: number;
  /** Bearer token of the runner's principal. */
  token?: string;
  labels?: Record<string, string>;
  credentials?: ChannelCredentials;
  channelOptions?: ChannelOptions;
  /** First reconnect delay (doubling up to maxReconnectDelayMs); default 200. */
  reconnectDelayMs?: number;
  /** Default 5000. */
  maxReconnectDelayMs?: number;
}

export interface Connected {
  runnerId: string;
  heartbeatIntervalMs: number;
  leaseMs: number | null;
  /** Ids of the workers this session resumed (held across the reconnect). */
  resumed: string[];
}

export interface Rejection {
  workerId: string;
  /** UNKNOWN_WORKER, STALE_LEASE, LEASE_ENDED, NOT_ACCEPTED, ... RESUME_REFUSED. */
  code: string;
  reason: string;
}

export type Outcome =
  | { kind: 'completed'; result: string }
  | { kind: 'failed'; error: string; exitCode?: number }
  | { kind: 'canceled' };

export interface RunnerEvents {
  connected: [info: Connected];
  disconnected: [error: AgentryError];
  accepted: [job: Job];
  declined: [assignment: { workerId: string; agent: string }];
  cancel: [job: Job, reason: string];
  finished: [job: Job, outcome: Outcome, lost: boolean];
  lost: [job: Job, reason: string];
  rejected: [rejection: Rejection];
  warning: [error: Error];
}

/** Throw from a handler to decline the task: the worker fails `rejected: <reason>`, marked rejected. */
export declare class JobRejected extends Error {
  constructor(reason: string);
  readonly reason: string;
}

export declare class Runner extends EventEmitter {
  constructor(addr: string, options?: RunnerOptions);
  /** The session id of the latest welcome. */
  readonly runnerId: string;
  /** Workers held now. */
  readonly activeJobs: number;
  /** Serves `name` ('*' = any agent) with `handler`; before run(). */
  agent(name: string, handler: JobHandler): this;
  /** Connects and reconnects until stop(); rejects with an AgentryError the server refused it with. */
  run(): Promise<void>;
  /** Takes no new workers, waits for (or with abort, aborts) the running ones, ends the stream. */
  stop(options?: { abort?: boolean }): Promise<void>;

  on<E extends keyof RunnerEvents>(event: E, listener: (...args: RunnerEvents[E]) => void): this;
  once<E extends keyof RunnerEvents>(event: E, listener: (...args: RunnerEvents[E]) => void): this;
  off<E extends keyof RunnerEvents>(event: E, listener: (...args: RunnerEvents[E]) => void): this;
  emit<E extends keyof RunnerEvents>(event: E, ...args: RunnerEvents[E]): boolean;
}

// ---------------------------------------------------------------------------------- misc

/** The package's proto/ directory (agentry/v1, grpc/health/v1, google/rpc). */
export declare const PROTO_DIR: string;

/** The grpc-js service constructors generated from the shipped protos. */
export declare function loadServices(): {
  AgentRegistryService: import('@grpc/grpc-js').ServiceClientConstructor;
  RunnerService: import('@grpc/grpc-js').ServiceClientConstructor;
  Health: import('@grpc/grpc-js').ServiceClientConstructor;
};
