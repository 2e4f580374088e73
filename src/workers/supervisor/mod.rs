//! The supervisor: admits spawns (policy, depth, capacity, dedupe, idempotency), writes the row
//! before anything runs, runs each worker as a task that owns its state, persists every
//! transition before publishing it, stops workers (descendants first) and closes every row on
//! every path (docs §6).
//!
//! Depends on discovery/resolve for the effective agent and on the store and executor traits;
//! never on tonic.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::sync::{Semaphore, broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::{
    dedupe::DedupeCache,
    executor::Executor,
    model::{WorkerEvent, WorkerId, WorkerRecord, WorkerState, hash_token},
    store::{SharedStore, StoreError, WorkerStore},
};
mod admission;
mod conversing;
mod listing;
mod outcome;
mod progress;
mod run;
mod stop;
mod waiting;
mod watching;

pub use admission::{Admitted, Purpose, Started};
pub(crate) use conversing::start_duties;
pub use conversing::{MessageSent, SendRequest};
pub use listing::{WorkersPage, WorkersQuery};
pub use watching::EventStream;

use crate::{
    config::Config,
    discovery::{DiscoveryError, Registry},
    paging::PageError,
    resolve::{self, Caller, Declared, Mode, Rules, SpawnDenied},
};

/// Memory bound of the cache of recently finished workers (dedupe reuse without the disk).
const RECENT_CACHE_BYTES: u64 = 256 << 20;

/// How long a worker token found in the shared store (a worker of another replica) is trusted
/// without reading the store again.
const REMOTE_TOKEN_TTL: Duration = Duration::from_secs(1);

/// How many events a follower of all workers ([`Supervisor::activity`]) may fall behind.
pub const ACTIVITY_BUFFER: usize = 4096;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Settings of the supervisor, from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `host:port` a worker's process can dial (AGENTRY_ADDR).
    pub addr: String,
    /// Default and maximum run time.
    pub timeout: Duration,
    /// SIGTERM → SIGKILL delay.
    pub kill_grace: Duration,
    /// How long a process's start may wait for its end (`executor.start_hold`).
    pub start_hold: Duration,
    /// Bound on stdout.
    pub max_output_bytes: usize,
    /// Workers running at once.
    pub max_running: usize,
    /// Workers waiting for a slot.
    pub max_pending: usize,
    /// Dedupe window.
    pub dedupe_ttl: Duration,
    /// Dedupe bound.
    pub dedupe_max_entries: u64,
    /// Persona run by the review gate (`review.agent`).
    pub review_agent: String,
    /// Bound on one review, independent of `timeout` (`review.timeout`).
    pub review_timeout: Duration,
    /// The replica lease (`replica.lease`), with a shared store.
    pub replica_lease: Duration,
    /// Events one worker may have (`limits.max_events_per_worker`).
    pub max_events_per_worker: u64,
    /// Bytes of one `ListWorkers` page (`limits.max_page_bytes`).
    pub max_page_bytes: usize,
    /// `workers.isolation: worktree`.
    pub worktree_default: bool,
    /// `workers.worktree_base`.
    pub worktree_base: crate::workers::worktree::Base,
    /// Where worktrees are made.
    pub worktrees_dir: std::path::PathBuf,
    /// The home directory (user memory directories live under it).
    pub home: Option<std::path::PathBuf>,
    /// Undelivered messages one worker may hold (`workers.inbox_max`).
    pub inbox_max: u32,
    /// How long a finished worker's transcript is kept (`workers.transcript_ttl`).
    pub transcript_ttl: Duration,
    /// How long a worker waits for an answer (`workers.input_timeout`).
    pub input_timeout: Duration,
    /// Bytes of a message (`limits.max_prompt_bytes`).
    pub max_message_bytes: usize,
}

impl Settings {
    /// Takes the relevant keys of the configuration; `addr` is where the server listens.
    pub fn from_config(cfg: &Config, addr: String) -> Self {
        Self {
            addr,
            timeout: cfg.executor.timeout,
            kill_grace: cfg.executor.kill_grace,
            start_hold: cfg.executor.start_hold,
            max_output_bytes: cfg.executor.max_output_bytes,
            max_running: cfg.limits.max_running,
            max_pending: cfg.limits.max_pending,
            dedupe_ttl: cfg.dedupe.ttl,
            dedupe_max_entries: cfg.dedupe.max_entries,
            review_agent: cfg.review.agent.clone(),
            review_timeout: cfg.review.timeout,
            replica_lease: cfg.replica.lease,
            max_events_per_worker: cfg.limits.max_events_per_worker,
            max_page_bytes: cfg.limits.max_page_bytes,
            worktree_default: cfg.workers.isolation == crate::config::IsolationKind::Worktree,
            worktree_base: cfg.workers.worktree_base,
            worktrees_dir: cfg.worktrees_dir(),
            home: cfg.home.clone(),
            inbox_max: cfg.workers.inbox_max,
            transcript_ttl: cfg.workers.transcript_ttl,
            input_timeout: cfg.workers.input_timeout,
            max_message_bytes: cfg.limits.max_prompt_bytes,
        }
    }
}

/// Who is calling, as far as the service can tell.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The authenticated principal or `anonymous`.
    pub principal: String,
    /// Whether `principal` came from a bearer token (authentication is on).
    pub authenticated: bool,
    /// The secret of a calling worker (`x-agentry-worker-token`), if any.
    pub worker_token: Option<String>,
    /// What the caller declared in metadata.
    pub declared: Declared,
    /// W3C trace context to hand to worker processes.
    pub traceparent: Option<String>,
    /// The worker holding `worker_token`, when authentication already looked it up for this
    /// call (so [`Supervisor::lineage`] does not look it up again).
    pub worker: Option<Arc<CallingWorker>>,
}

/// A live worker found by its token: what it is and what the service knows of its lineage.
#[derive(Debug, Clone)]
pub struct CallingWorker {
    /// Its latest record.
    pub record: WorkerRecord,
    /// Depth, policy and blocked agents the service knows it has.
    pub known: Caller,
}

/// A validated spawn request.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Agent name.
    pub agent: String,
    /// One-line summary.
    pub description: String,
    /// The brief.
    pub prompt: String,
    /// Workspace ("" = none).
    pub workspace: String,
    /// Mode.
    pub mode: Mode,
    /// Output schema from the request.
    pub output_schema: Option<serde_json::Value>,
    /// Wait for the end.
    pub wait: bool,
    /// Idempotency key.
    pub request_id: Option<String>,
    /// Requested run-time bound.
    pub timeout: Option<Duration>,
    /// `Some(true)`: a git worktree; `Some(false)`: none; `None`: the persona's, else the
    /// configured default (docs/workers.md §6.10).
    pub isolation: Option<bool>,
    /// The worker may ask its caller (docs §12.4).
    pub interactive: bool,
    /// The A2A context it belongs to (docs §13.3); `None` outside A2A.
    pub context_id: Option<String>,
    /// The A2A message that starts it, handed to the worker in its spec (docs §13.3).
    pub a2a_message: Option<String>,
}

/// What a spawn returned.
#[derive(Debug, Clone)]
pub struct Spawned {
    /// The worker.
    pub worker: WorkerRecord,
    /// An identical dispatch was reused.
    pub deduplicated: bool,
    /// Why, for the caller.
    pub hint: String,
}

/// Turns a completed run's stdout into its structured result. The review gate uses it to record
/// the decision in the worker row instead of enforcing the reviewer's output schema.
pub type Summarise = Arc<dyn Fn(&str) -> serde_json::Value + Send + Sync>;

/// Why a supervisor call failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Refused by policy.
    #[error(transparent)]
    Denied(#[from] SpawnDenied),
    /// The workspace was refused.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// A reported artifact would pass the worker's bound (docs §13.1).
    #[error("{0}")]
    ArtifactsTooLarge(String),
    /// The worker token is not a live worker's.
    #[error("unknown or expired worker token")]
    UnknownToken,
    /// A bearer token of one principal with the worker token of another principal's worker: the
    /// call would read as one principal and write (spawn, report) as the other.
    #[error(
        "x-agentry-worker-token is the token of a worker of another principal than the bearer token's; send the worker token with its own principal's bearer token, or alone"
    )]
    TokenOfOtherPrincipal,
    /// Too many workers.
    #[error("{0}")]
    Capacity(String),
    /// A request id reused for a different dispatch.
    #[error(
        "request_id {request_id:?} was already used for a different dispatch (worker {existing})"
    )]
    RequestIdReused {
        /// The key.
        request_id: String,
        /// The worker it names.
        existing: String,
    },
    /// No such worker.
    #[error("worker {0} not found")]
    NotFound(String),
    /// Stop of a completed or failed worker.
    #[error("worker {id} is {state} and cannot be stopped")]
    NotCancelable {
        /// The worker.
        id: String,
        /// Its state.
        state: WorkerState,
    },
    /// The worker's git worktree could not be made (docs/workers.md §6.10).
    #[error("{0}")]
    Worktree(String),
    /// No executor can run the agent (none configured, an unknown model, a missing key): the
    /// spawn is refused before any row is written (docs/model.md §11.1, §11.2).
    #[error("{0}")]
    Unrunnable(String),
    /// The service is shutting down.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// Outcomes of this replica's workers wait for the database; no new worker is taken until
    /// they are recorded.
    #[error(
        "this replica cannot record worker outcomes (its database is unreachable); try another replica or later"
    )]
    StoreBacklog,
    /// A progress report of a worker that is not running.
    #[error("worker {id} is {state}, not running: only a running worker reports progress")]
    NotRunning {
        /// The worker.
        id: String,
        /// Its state.
        state: WorkerState,
    },
    /// The worker's event log is full (`limits.max_events_per_worker`).
    #[error("worker {id} already has {max} events, the limit (limits.max_events_per_worker)")]
    TooManyEvents {
        /// The worker.
        id: String,
        /// The bound.
        max: u64,
    },
    /// `WatchWorker.after_sequence` beyond the worker's last event.
    #[error(
        "after_sequence {after_sequence} is beyond the last event of worker {id} (sequence {last})"
    )]
    SequenceOutOfRange {
        /// The worker.
        id: String,
        /// The cursor asked for.
        after_sequence: u64,
        /// Its last event's sequence.
        last: u64,
    },
    /// The worker's inbox is full (`workers.inbox_max`).
    #[error("worker {id} already has {max} undelivered messages (workers.inbox_max)")]
    InboxFull {
        /// The worker.
        id: String,
        /// The bound.
        max: u32,
    },
    /// A message the worker cannot take (docs §12.1): its reason code and message.
    #[error("{message}")]
    NoMessages {
        /// `NOT_RESUMABLE`, `MESSAGES_UNSUPPORTED` or `TRANSCRIPT_EXPIRED`.
        reason: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A worker may message only its own children (docs §12.1).
    #[error("{message}")]
    MessageDenied {
        /// `MESSAGE_TO_SELF`, `MESSAGE_TO_ANCESTOR` or `NOT_PARENT`.
        reason: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A message `request_id` reused for another message.
    #[error("request_id {request_id:?} was already used for another message ({existing})")]
    MessageIdReused {
        /// The key.
        request_id: String,
        /// The message it names.
        existing: String,
    },
    /// A page token was refused.
    #[error("page_token {0}")]
    Page(#[from] PageError),
    /// Persistence failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Who may see and act on which workers (docs §8.2 tenancy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// Every worker: authentication is off, or the caller is an operator.
    All,
    /// Only the workers this principal spawned (directly or through its workers).
    Principal(String),
}

impl Visibility {
    /// Whether the caller may see `rec`.
    pub fn sees(&self, rec: &WorkerRecord) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Principal(p) => rec.spec.caller_scope == *p,
        }
    }

    /// The caller scope a listing is restricted to, if any.
    pub fn scope(&self) -> Option<&str> {
        match self {
            Visibility::All => None,
            Visibility::Principal(p) => Some(p),
        }
    }
}

/// Who is calling, resolved against the service's own records (docs §5.1).
#[derive(Debug, Clone)]
pub struct Lineage {
    /// Depth, policy and blocked agents after metadata narrowed what the service knows.
    pub caller: Caller,
    /// The calling worker, when the call carried its token.
    pub parent: Option<WorkerRecord>,
    /// The caller scope: the calling worker's scope, else the principal.
    pub scope: String,
}

/// Pending and running workers, by id and by token hash (a caller lookup is a map access).
#[derive(Default)]
struct LiveSet {
    by_id: HashMap<WorkerId, Live>,
    by_token: HashMap<String, WorkerId>,
}

impl LiveSet {
    fn get(&self, id: &WorkerId) -> Option<&Live> {
        self.by_id.get(id)
    }

    fn get_mut(&mut self, id: &WorkerId) -> Option<&mut Live> {
        self.by_id.get_mut(id)
    }

    fn values(&self) -> impl Iterator<Item = &Live> {
        self.by_id.values()
    }

    fn insert(&mut self, id: WorkerId, live: Live) {
        self.by_token.insert(live.token_hash.clone(), id.clone());
        self.by_id.insert(id, live);
    }

    fn remove(&mut self, id: &WorkerId) -> Option<Live> {
        let live = self.by_id.remove(id)?;
        self.by_token.remove(&live.token_hash);
        Some(live)
    }

    fn by_token(&self, hash: &str) -> Option<&Live> {
        self.by_id.get(self.by_token.get(hash)?)
    }
}

/// Handle of a pending or running worker.
struct Live {
    /// Latest record (what GetWorker, watchers and dedupe hits see without the disk).
    record: WorkerRecord,
    /// Stop request.
    cancel: CancellationToken,
    /// Every persisted transition, in order.
    events: broadcast::Sender<WorkerEvent>,
    /// Becomes `Some` with the final record.
    done: watch::Receiver<Option<WorkerRecord>>,
    /// Token hash, for caller lookup.
    token_hash: String,
    /// Who its life is bound to: its waiting callers, or the service.
    binding: waiting::Binding,
    /// What the service knows about it as a caller, from its typed effective agent at spawn:
    /// a call with its token starts from this (before metadata narrows it).
    lineage: Caller,
    /// Told to the run before a stop cancels it.
    stop_reason: crate::workers::executor::StopReason,
    /// Where a message sent to it is posted (docs §12.2).
    mail: Arc<crate::workers::executor::Mailbox>,
    /// While its start is held to be written with its end: told when the start must be
    /// written now (a progress report arrived first: only a running worker reports).
    held_start: Option<Arc<tokio::sync::Notify>>,
}

/// The supervisor. Cheap to share (`Arc`).
pub struct Supervisor {
    store: Arc<dyn WorkerStore>,
    /// The same store as one other replicas share (PostgreSQL), or `None` (SQLite: this
    /// process is alone with its file).
    shared: Option<Arc<dyn SharedStore>>,
    executor: Arc<dyn Executor>,
    registry: Arc<Registry>,
    rules: Arc<Rules>,
    settings: Settings,
    dedupe: DedupeCache,
    live: Mutex<LiveSet>,
    /// Workers whose row is being written: a concurrent identical dispatch that found the dedupe
    /// claim waits here (`true` once the worker is live, or once its creation failed and it is
    /// gone) instead of starting a duplicate.
    creating: Mutex<HashMap<WorkerId, watch::Receiver<bool>>>,
    /// Workers admitted and not yet written, from before their worktree is made until their row
    /// exists: `PruneWorktrees` never takes such a worker's worktree for a leftover.
    admitting: Mutex<std::collections::HashSet<WorkerId>>,
    /// Recently finished workers (dedupe reuse and cheap reads), kept for the dedupe TTL.
    recent: moka::sync::Cache<WorkerId, WorkerRecord>,
    /// Run slots (`limits.max_running`).
    slots: Arc<Semaphore>,
    /// Places for workers waiting for a run slot (`limits.max_pending`).
    pending: Arc<Semaphore>,
    shutdown: CancellationToken,
    /// Set by [`Supervisor::shutdown`]: until when a watch of a worker that is being stopped
    /// waits for its terminal event before it ends with `UNAVAILABLE` instead.
    drain_until: std::sync::OnceLock<tokio::time::Instant>,
    /// Outcomes the store could not record within `replica.lease` (its database away) and that
    /// are being tried again: while any is, the replica reports NOT_SERVING and takes no spawn.
    unrecorded: std::sync::atomic::AtomicUsize,
    tasks: tokio_util::task::TaskTracker,
    /// Why a worker is being stopped, recorded as its error once it is gone.
    stop_reasons: Mutex<HashMap<WorkerId, String>>,
    /// Spawn outcomes, dedupe hits, workers per state.
    metrics: crate::telemetry::Metrics,
    /// Workers of other replicas found by their token (shared store): a short-lived cache, so
    /// a remote worker's calls do not each read the database. Entries live one second, which
    /// bounds how long a token stays usable here after its worker ended elsewhere.
    remote_tokens: moka::sync::Cache<String, Arc<CallingWorker>>,
    /// Every event this replica commits, for whoever follows all workers at once (the
    /// console, docs §14.3); sent only while someone listens.
    activity: broadcast::Sender<Arc<WorkerEvent>>,
}

impl Supervisor {
    /// Creates the supervisor and closes rows orphaned by a previous process; the replica
    /// duties are started by [`crate::workers::supervise`], which is how the service builds it.
    pub(in crate::workers) async fn new(
        store: Arc<dyn WorkerStore>,
        executor: Arc<dyn Executor>,
        registry: Arc<Registry>,
        rules: Arc<Rules>,
        settings: Settings,
    ) -> Result<Arc<Self>, StoreError> {
        // Processes of runs a killed predecessor left behind go first, then their rows.
        let open = store.open_workers().await?;
        if !open.is_empty() {
            let ids: Vec<&str> = open.iter().map(WorkerId::as_str).collect();
            let killed = executor.reap_leftovers(&ids);
            if killed > 0 {
                tracing::warn!(
                    processes = killed,
                    "killed processes left behind by workers of a previous run"
                );
            }
        }
        let orphans = store.close_orphans(now_ms()).await?;
        if !orphans.is_empty() {
            tracing::warn!(
                count = orphans.len(),
                "closed workers orphaned by a restart"
            );
            finish_orphan_worktrees(store.as_ref(), &orphans).await;
        }
        let sup = Arc::new(Self {
            activity: broadcast::channel(ACTIVITY_BUFFER).0,
            remote_tokens: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(REMOTE_TOKEN_TTL)
                .build(),
            dedupe: DedupeCache::new(settings.dedupe_ttl, settings.dedupe_max_entries),
            // Bounded by bytes, not entries: records carry prompts and results.
            recent: moka::sync::Cache::builder()
                .weigher(|_, r: &WorkerRecord| {
                    let bytes = r.spec.prompt.len()
                        + r.result.as_ref().map_or(0, String::len)
                        + r.structured_result.as_ref().map_or(0, String::len)
                        + 1024;
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .max_capacity(RECENT_CACHE_BYTES)
                .time_to_live(settings.dedupe_ttl)
                .build(),
            slots: Arc::new(Semaphore::new(settings.max_running)),
            pending: Arc::new(Semaphore::new(settings.max_pending)),
            live: Mutex::new(LiveSet::default()),
            creating: Mutex::new(HashMap::new()),
            admitting: Mutex::new(std::collections::HashSet::new()),
            shutdown: CancellationToken::new(),
            drain_until: std::sync::OnceLock::new(),
            unrecorded: std::sync::atomic::AtomicUsize::new(0),
            tasks: tokio_util::task::TaskTracker::new(),
            stop_reasons: Mutex::new(HashMap::new()),
            metrics: crate::telemetry::Metrics::new(),
            shared: store.clone().shared(),
            store,
            executor,
            registry,
            rules,
            settings,
        });
        Ok(sup)
    }

    /// The store (for the replica duties).
    pub(crate) fn store(&self) -> &Arc<dyn WorkerStore> {
        &self.store
    }

    /// The store as other replicas share it, if they do (for the replica duties).
    pub(crate) fn shared_store(&self) -> Option<&Arc<dyn SharedStore>> {
        self.shared.as_ref()
    }

    /// The tracker of the service's own tasks (shutdown waits for them).
    pub(crate) fn task_tracker(&self) -> tokio_util::task::TaskTracker {
        self.tasks.clone()
    }

    /// The ids of the workers live in this process.
    pub(crate) fn live_ids(&self) -> Vec<WorkerId> {
        self.live().values().map(|l| l.record.id.clone()).collect()
    }

    /// Finishes the worktrees of rows the orphan sweep closed (see [`finish_orphan_worktrees`]).
    pub(crate) async fn finish_orphan_worktrees(&self, ids: &[WorkerId]) {
        finish_orphan_worktrees(self.store.as_ref(), ids).await;
    }

    /// Kills this host's processes of workers whose runs are lost.
    pub(crate) fn reap_leftovers(&self, ids: &[WorkerId]) {
        let ids: Vec<&str> = ids.iter().map(WorkerId::as_str).collect();
        let killed = self.executor.reap_leftovers(&ids);
        if killed > 0 {
            tracing::warn!(
                processes = killed,
                "killed processes left behind by workers of a lost replica"
            );
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, LiveSet> {
        self.live.lock().expect("live workers poisoned")
    }

    /// Runs `f` on live worker `id` under the lock; `None` when it is not live here.
    fn live_mut<T>(&self, id: &WorkerId, f: impl FnOnce(&mut Live) -> T) -> Option<T> {
        self.live().get_mut(id).map(f)
    }

    /// The caller's effective lineage: what the service knows from a worker token, narrowed by
    /// what the caller declared. Every RPC goes through here, so a worker sees the same lineage
    /// in its catalog, its resolutions, its spawns and its reviews; a token that is not a live
    /// worker's is refused.
    pub async fn lineage(&self, id: &Identity) -> Result<Lineage, WorkerError> {
        let Some(token) = &id.worker_token else {
            return Ok(Lineage {
                caller: Caller::top_level().narrow(&id.declared),
                parent: None,
                scope: id.principal.clone(),
            });
        };
        let found = match &id.worker {
            Some(w) => w.clone(),
            None => self
                .calling_worker(token)
                .await?
                .ok_or(WorkerError::UnknownToken)?,
        };
        if id.authenticated && found.record.spec.caller_scope != id.principal {
            return Err(WorkerError::TokenOfOtherPrincipal);
        }
        Ok(Lineage {
            caller: found.known.clone().narrow(&id.declared),
            scope: found.record.spec.caller_scope.clone(),
            parent: Some(found.record.clone()),
        })
    }

    /// The worker holding `token`: a live one of this process, else (shared store) an open one
    /// of another replica (docs/replicas.md §9: any replica authenticates a worker token),
    /// looked up by hash in the store and trusted for a second, whose lineage comes from its
    /// typed effective agent. `None` when no open worker holds it.
    pub async fn calling_worker(
        &self,
        token: &str,
    ) -> Result<Option<Arc<CallingWorker>>, WorkerError> {
        let hash = hash_token(token);
        if let Some(l) = self.live().by_token(&hash) {
            return Ok(Some(Arc::new(CallingWorker {
                record: l.record.clone(),
                known: l.lineage.clone(),
            })));
        }
        // SQLite has no other process, so its live set is the whole truth.
        if self.shared.is_none() {
            return Ok(None);
        }
        if let Some(w) = self.remote_tokens.get(&hash) {
            return Ok(Some(w));
        }
        let Some(record) = self.store.find_by_token_hash(&hash).await? else {
            return Ok(None);
        };
        let w = Arc::new(CallingWorker {
            known: resolve::lineage::of_worker(&record.spec.agent, &record.spec.effective),
            record,
        });
        self.remote_tokens.insert(hash, w.clone());
        Ok(Some(w))
    }

    /// The metric instruments, for layers built on the supervisor (the review gate).
    pub fn metrics(&self) -> &crate::telemetry::Metrics {
        &self.metrics
    }

    /// The latest record from memory (live or recently finished), never the disk.
    fn cached(&self, id: &WorkerId) -> Option<WorkerRecord> {
        if let Some(l) = self.live().get(id) {
            return Some(l.record.clone());
        }
        self.recent.get(id)
    }

    /// Where worker worktrees are made (`workers.worktrees_dir`).
    pub fn worktrees_dir(&self) -> &std::path::Path {
        &self.settings.worktrees_dir
    }

    /// The worker as it is now: memory first, then the store. A worker the caller may not see
    /// is `NotFound`, exactly like one that does not exist.
    pub async fn get(&self, id: &WorkerId, vis: &Visibility) -> Result<WorkerRecord, WorkerError> {
        let rec = match self.cached(id) {
            Some(r) => r,
            None => self.stored(id).await?,
        };
        if vis.sees(&rec) {
            Ok(rec)
        } else {
            Err(WorkerError::NotFound(id.to_string()))
        }
    }

    /// The worker's row, `NotFound` when there is none. A finished worker never changes again,
    /// so it is kept in memory: later reads of it (a coordinator polling the result, another
    /// replica's worker) stay off the disk.
    pub(super) async fn stored(&self, id: &WorkerId) -> Result<WorkerRecord, WorkerError> {
        let rec = self
            .store
            .get(id)
            .await?
            .ok_or_else(|| WorkerError::NotFound(id.to_string()))?;
        if rec.state.is_terminal() {
            self.recent.insert(id.clone(), rec.clone());
        }
        Ok(rec)
    }

    /// Waits until the store may hold something new about `id`: a notice about it (then the
    /// sequence it announced), a resync of the listener, or `poll` passed (notices are only
    /// hints).
    pub async fn store_changed(
        &self,
        id: &WorkerId,
        notices: &mut Option<super::store::Followed>,
        poll: Duration,
    ) -> Option<u64> {
        use super::store::Notice;
        let deadline = tokio::time::sleep(poll);
        tokio::pin!(deadline);
        loop {
            let Some(rx) = notices.as_mut() else {
                deadline.await;
                return None;
            };
            tokio::select! {
                () = &mut deadline => return None,
                n = rx.recv() => match n {
                    Ok(Notice::Event { worker_id, sequence, .. }) if worker_id == *id => {
                        return Some(sequence);
                    }
                    Ok(Notice::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        return None;
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Closed) => *notices = None,
                },
            }
        }
    }

    /// The notices of the shared store, if any, following events as long as they are held
    /// (for watchers following another replica's worker).
    pub fn notices(&self) -> Option<super::store::Followed> {
        self.shared
            .as_ref()
            .map(|shared| super::store::Followed::on(&**shared))
    }

    /// Follows every event this replica commits, of every worker (docs §14.3). A receiver
    /// that falls [`ACTIVITY_BUFFER`] events behind is told it lagged and must read again.
    pub fn activity(&self) -> broadcast::Receiver<Arc<WorkerEvent>> {
        self.activity.subscribe()
    }

    /// Publishes `ev` to the followers of [`Supervisor::activity`], if there are any (no copy
    /// is made otherwise).
    pub(super) fn announce(&self, ev: &WorkerEvent) {
        if self.activity.receiver_count() > 0 {
            let _ = self.activity.send(Arc::new(ev.clone()));
        }
    }

    /// Subscribes to a worker's events. Returns the receiver (None when the worker is already
    /// terminal) — subscribe first, then read the store, so nothing falls between.
    pub fn subscribe(&self, id: &WorkerId) -> Option<broadcast::Receiver<WorkerEvent>> {
        self.live().get(id).map(|l| l.events.subscribe())
    }

    /// Stored events after a sequence.
    pub async fn events_after(
        &self,
        id: &WorkerId,
        after: u64,
    ) -> Result<Vec<WorkerEvent>, WorkerError> {
        match self.store.events_after(id, after).await {
            Err(StoreError::NotFound(_)) => Err(WorkerError::NotFound(id.to_string())),
            other => Ok(other?),
        }
    }

    /// The reviewer agent (`review.agent`).
    pub fn review_agent(&self) -> &str {
        &self.settings.review_agent
    }

    /// The review deadline (`review.timeout`).
    pub fn review_timeout(&self) -> Duration {
        self.settings.review_timeout
    }

    /// A token that is cancelled when the service shuts down (ends watch streams).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// How many outcomes wait for the database to come back (see `unrecorded`): health is
    /// NOT_SERVING while any does.
    pub fn unrecorded_outcomes(&self) -> usize {
        self.unrecorded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Until when a watch keeps waiting for a terminal event once shutdown began (a second from
    /// now if the shutdown token was cancelled some other way).
    pub fn drain_deadline(&self) -> tokio::time::Instant {
        self.drain_until
            .get()
            .copied()
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1))
    }

    /// Kills every live worker (recorded `killed`) and waits for them, at most `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        // Watchers keep following through the stop, so each gets its worker's `killed` event;
        // they give up a little before the server closes what is left at `grace`, so that their
        // UNAVAILABLE still reaches the client.
        let margin = (grace / 10).min(Duration::from_millis(500));
        let _ = self
            .drain_until
            .set(tokio::time::Instant::now() + grace.saturating_sub(margin));
        self.shutdown.cancel();
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("workers still running after the shutdown grace");
        }
    }
}

/// A duration as whole seconds (`60s`) or, below a second or fractional, milliseconds (`500ms`).
pub fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Finishes the worktrees of workers whose rows the orphan sweep closed, as their run would
/// have (docs/workers.md §6.10): removed when unchanged, else kept and reported with
/// `changed`. Only a worktree this host can reach is finished; one on another host's disk is
/// left as recorded (its `changed` stays unset) for that host's `agentry worktrees prune`.
async fn finish_orphan_worktrees(store: &dyn WorkerStore, ids: &[WorkerId]) {
    for id in ids {
        let recorded = match store.get(id).await {
            Ok(Some(rec)) => rec.worktree,
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(worker = %id, error = %e, "cannot read an orphan's worktree");
                None
            }
        };
        let Some(w) = recorded
            .as_deref()
            .and_then(|t| serde_json::from_str::<crate::workers::worktree::Worktree>(t).ok())
        else {
            continue;
        };
        if w.changed.is_some() || !std::path::Path::new(&w.path).exists() {
            continue;
        }
        let done = crate::workers::worktree::finish(w).await;
        tracing::info!(worker = %id, worktree = %done.path, kept = done.changed == Some(true), "finished an orphan's worktree");
        if let Ok(text) = serde_json::to_string(&done)
            && let Err(e) = store.record_worktree(id, &text).await
        {
            tracing::warn!(worker = %id, error = %e, "cannot record an orphan's worktree");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    use crate::workers::{
        executor::{BoxFuture, Job, Outcome, Started},
        model::WorkerState,
        store::SqliteStore,
    };

    /// An executor whose process "starts and exits within one poll": it fires `started` and
    /// returns at once — the race a real `/bin/true` hits under load.
    struct Instant;

    impl Executor for Instant {
        fn run(
            &self,
            _job: Job,
            _cancel: CancellationToken,
            started: oneshot::Sender<Started>,
        ) -> BoxFuture<'static, Outcome> {
            let _ = started.send(Started::Elsewhere);
            Box::pin(async {
                Outcome::Completed {
                    stdout: "done".into(),
                }
            })
        }
    }

    #[tokio::test]
    async fn a_start_seen_together_with_the_exit_is_still_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            home: Some(dir.path().to_owned()),
            ..Config::default()
        };
        let registry = Arc::new(Registry::new(&cfg, false).unwrap());
        let sup = Supervisor::new(
            Arc::new(SqliteStore::open(&dir.path().join("w.db")).unwrap()),
            Arc::new(Instant),
            registry,
            Arc::new(Rules::from_config(&cfg)),
            Settings::from_config(&cfg, "127.0.0.1:1".into()),
        )
        .await
        .unwrap();
        let id = Identity {
            principal: "anonymous".into(),
            authenticated: false,
            worker_token: None,
            declared: Declared::default(),
            traceparent: None,
            worker: None,
        };
        for i in 0..64 {
            let req = SpawnRequest {
                agent: "quick_task".into(),
                description: String::new(),
                prompt: format!("p{i}"),
                workspace: String::new(),
                mode: Mode::Default,
                output_schema: None,
                wait: true,
                request_id: None,
                timeout: None,
                isolation: None,
                interactive: false,
                context_id: None,
                a2a_message: None,
            };
            let w = sup.spawn(&id, req).await.unwrap().worker;
            assert_eq!(w.state, WorkerState::Completed, "run {i}: {w:?}");
            assert_eq!(w.sequence, 3, "pending, running, completed");
        }
        assert_eq!(
            sup.pending.available_permits(),
            sup.settings.max_pending,
            "every pending place was given back"
        );
    }
}
