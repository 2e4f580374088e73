//! The supervisor: admits spawns (policy, depth, capacity, dedupe, idempotency), writes the row
//! before anything runs, runs each worker as a task that owns its state, persists every
//! transition before publishing it, stops workers (descendants first) and closes every row on
//! every path (docs §6).
//!
//! Depends on discovery/resolve for the effective agent and on the store and executor traits;
//! never on tonic.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::sync::{Semaphore, broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{
    dedupe::{Claim, DedupeCache, DedupeKey, Dispatch},
    executor::{Assignment, Executor, Job, Outcome},
    lifecycle::Event,
    model::{WorkerEvent, WorkerId, WorkerRecord, WorkerState, generate_token, hash_token},
    spec::WorkerSpec,
    store::{Applied, ListQuery, Patch, StoreError, WorkerStore},
};
mod listing;
mod progress;
mod watching;

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

/// How often a caller waiting for another replica's worker re-reads it, between notices.
const REMOTE_POLL: Duration = Duration::from_millis(250);

/// How long a dispatch that lost the store's dedupe claim waits for the winner's row to appear.
const REMOTE_CLAIM_WAIT: Duration = Duration::from_secs(10);

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
}

impl Settings {
    /// Takes the relevant keys of the configuration; `addr` is where the server listens.
    pub fn from_config(cfg: &Config, addr: String) -> Self {
        Self {
            addr,
            timeout: cfg.executor.timeout,
            kill_grace: cfg.executor.kill_grace,
            max_output_bytes: cfg.executor.max_output_bytes,
            max_running: cfg.limits.max_running,
            max_pending: cfg.limits.max_pending,
            dedupe_ttl: cfg.dedupe.ttl,
            dedupe_max_entries: cfg.dedupe.max_entries,
            review_agent: cfg.review.agent.clone(),
            review_timeout: cfg.review.timeout,
            replica_lease: cfg.replica.lease,
            max_events_per_worker: cfg.limits.max_events_per_worker,
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

/// How a review run differs from an ordinary spawn: reserved agents allowed, no dedupe, no
/// output schema enforcement, its own deadline.
struct ReviewRun {
    /// Bound on the whole run, pending included.
    timeout: Duration,
    /// Fills `structured_result` of a completed run.
    summarise: Summarise,
}

/// A finished review run.
#[derive(Debug, Clone)]
pub struct Reviewed {
    /// The reviewer worker's final record (the audit row).
    pub worker: WorkerRecord,
    /// The review deadline passed and the reviewer was stopped.
    pub timed_out: bool,
}

/// Why a supervisor call failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Refused by policy.
    #[error(transparent)]
    Denied(#[from] SpawnDenied),
    /// The workspace was refused.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The worker token is not a live worker's.
    #[error("unknown or expired worker token")]
    UnknownToken,
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
    /// The service is shutting down.
    #[error("the service is shutting down")]
    ShuttingDown,
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
            Visibility::Principal(p) => rec.caller_scope == *p,
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

/// The waiting callers a worker is bound to (docs §6.3, §6.7): it is killed when the last one
/// goes away, never when only some of them do.
#[derive(Debug, Default)]
struct Waiters {
    /// Callers waiting right now.
    count: usize,
    /// The service owns the run (a background dispatch shares it): waiters no longer bind it.
    detached: bool,
}

/// One waiting caller's hold on a worker; dropping the last one cancels the worker.
struct WaitGuard {
    waiters: Arc<Mutex<Waiters>>,
    cancel: CancellationToken,
    /// Cleared once the wait finished normally.
    armed: bool,
}

impl WaitGuard {
    /// Joins the callers waiting for a bound worker; `None` when the worker is not bound to its
    /// waiters (a background run, or nobody is waiting any more and it is being cancelled).
    fn join(waiters: &Arc<Mutex<Waiters>>, cancel: &CancellationToken) -> Option<Self> {
        let mut w = waiters.lock().expect("waiters poisoned");
        if w.detached || w.count == 0 {
            return None;
        }
        w.count += 1;
        Some(Self {
            waiters: waiters.clone(),
            cancel: cancel.clone(),
            armed: true,
        })
    }

    /// The wait ended with the worker's final record: nothing to cancel.
    fn disarm(mut self) {
        self.armed = false;
        self.waiters.lock().expect("waiters poisoned").count -= 1;
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut w = self.waiters.lock().expect("waiters poisoned");
        w.count -= 1;
        if w.count == 0 && !w.detached {
            self.cancel.cancel();
        }
    }
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

    fn contains_key(&self, id: &WorkerId) -> bool {
        self.by_id.contains_key(id)
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
    /// The callers waiting for it (`wait = true`), which bind its life.
    waiters: Arc<Mutex<Waiters>>,
    /// What the service knows about it as a caller, from its typed effective agent at spawn:
    /// a call with its token starts from this (before metadata narrows it).
    lineage: Caller,
}

/// The supervisor. Cheap to share (`Arc`).
pub struct Supervisor {
    store: Arc<dyn WorkerStore>,
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
    /// Recently finished workers (dedupe reuse and cheap reads), kept for the dedupe TTL.
    recent: moka::sync::Cache<WorkerId, WorkerRecord>,
    slots: Arc<Semaphore>,
    pending: AtomicUsize,
    shutdown: CancellationToken,
    tasks: tokio_util::task::TaskTracker,
    /// Why a worker is being stopped, recorded as its error once it is gone.
    stop_reasons: Mutex<HashMap<WorkerId, String>>,
    /// Spawn outcomes, dedupe hits, workers per state.
    metrics: crate::telemetry::Metrics,
    /// Workers of other replicas found by their token (shared store): a short-lived cache, so
    /// a remote worker's calls do not each read the database. Entries live one second, which
    /// bounds how long a token stays usable here after its worker ended elsewhere.
    remote_tokens: moka::sync::Cache<String, WorkerRecord>,
}

/// A reserved pending slot, handed back on drop unless the worker was created.
struct PendingSlot<'a>(Option<&'a AtomicUsize>);

impl PendingSlot<'_> {
    /// The worker exists: its run task now owns the slot.
    fn keep(&mut self) {
        self.0 = None;
    }
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            p.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Supervisor {
    /// Creates the supervisor and closes rows orphaned by a previous process.
    pub async fn new(
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
        }
        let sup = Arc::new(Self {
            remote_tokens: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(REMOTE_TOKEN_TTL)
                .build(),
            dedupe: DedupeCache::new(settings.dedupe_ttl, settings.dedupe_max_entries),
            // Bounded by bytes, not entries: records carry prompts and results.
            recent: moka::sync::Cache::builder()
                .weigher(|_, r: &WorkerRecord| {
                    let bytes = r.prompt.len()
                        + r.result.as_ref().map_or(0, String::len)
                        + r.structured_result.as_ref().map_or(0, String::len)
                        + 1024;
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .max_capacity(RECENT_CACHE_BYTES)
                .time_to_live(settings.dedupe_ttl)
                .build(),
            slots: Arc::new(Semaphore::new(settings.max_running)),
            pending: AtomicUsize::new(0),
            live: Mutex::new(LiveSet::default()),
            creating: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            tasks: tokio_util::task::TaskTracker::new(),
            stop_reasons: Mutex::new(HashMap::new()),
            metrics: crate::telemetry::Metrics::new(),
            store,
            executor,
            registry,
            rules,
            settings,
        });
        // With a shared store: lease renewal, the orphan sweeper, stops asked by others.
        super::replica::start(&sup, sup.settings.replica_lease);
        Ok(sup)
    }

    /// The store (for the replica duties).
    pub(crate) fn store(&self) -> &Arc<dyn WorkerStore> {
        &self.store
    }

    /// The tracker of the service's own tasks (shutdown waits for them).
    pub(crate) fn task_tracker(&self) -> tokio_util::task::TaskTracker {
        self.tasks.clone()
    }

    /// The ids of the workers live in this process.
    pub(crate) fn live_ids(&self) -> Vec<WorkerId> {
        self.live().values().map(|l| l.record.id.clone()).collect()
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
        let local = {
            let live = self.live();
            live.by_token(&hash_token(token))
                .map(|l| (l.record.clone(), l.lineage.clone()))
        };
        let (parent, known) = match local {
            Some(found) => found,
            // A worker of another replica sharing the store (docs/replicas.md §9: any replica
            // authenticates a worker token); its lineage comes from its typed effective agent.
            None => {
                let rec = self
                    .remote_by_token(token)
                    .await?
                    .ok_or(WorkerError::UnknownToken)?;
                let eff: resolve::Effective = serde_json::from_value(rec.effective.clone())
                    .map_err(|e| {
                        StoreError::Corrupt(format!(
                            "worker {}: stored effective agent: {e}",
                            rec.id
                        ))
                    })?;
                let known = resolve::lineage::of_worker(&rec.agent, &eff);
                (rec, known)
            }
        };
        Ok(Lineage {
            caller: known.narrow(&id.declared),
            scope: parent.caller_scope.clone(),
            parent: Some(parent),
        })
    }

    /// The metric instruments, for layers built on the supervisor (the review gate).
    pub fn metrics(&self) -> &crate::telemetry::Metrics {
        &self.metrics
    }

    /// The principal that spawned the running worker holding `token`, if any (lets a worker
    /// process authenticate with its own token).
    pub fn principal_for_token(&self, token: &str) -> Option<String> {
        self.live_by_token(token).map(|r| r.caller_scope)
    }

    /// The running worker holding `token`: tokens are valid only while their worker is live.
    /// Also a worker of another replica whose token was looked up in the store within the last
    /// second.
    fn live_by_token(&self, token: &str) -> Option<WorkerRecord> {
        let hash = hash_token(token);
        if let Some(rec) = self.live().by_token(&hash).map(|l| l.record.clone()) {
            return Some(rec);
        }
        self.remote_tokens.get(&hash)
    }

    /// The open worker holding `token` in the shared store (a worker run by another replica).
    /// SQLite has no other process, so its live set is the whole truth.
    pub async fn remote_by_token(&self, token: &str) -> Result<Option<WorkerRecord>, WorkerError> {
        if !self.store.is_shared() {
            return Ok(None);
        }
        let hash = hash_token(token);
        let found = self.store.find_by_token_hash(&hash).await?;
        if let Some(rec) = &found {
            self.remote_tokens.insert(hash, rec.clone());
        }
        Ok(found)
    }

    /// Admits and starts (or reuses) a worker. With `wait`, returns when it is terminal and the
    /// worker is cancelled if this future is dropped first.
    pub async fn spawn(
        self: &Arc<Self>,
        id: &Identity,
        req: SpawnRequest,
    ) -> Result<Spawned, WorkerError> {
        self.spawn_inner(id, req, None).await.map(|(s, _)| s)
    }

    /// Runs the configured reviewer (`review.agent`) on `prompt` as a child of the caller and
    /// waits for it, at most `review.timeout`; past that it is stopped (recorded `killed`) and
    /// gone before this returns. Like a spawn, except: reserved agents may run, there is no
    /// dedupe (every review runs), and the output schema is not enforced — `summarise` fills the
    /// structured result of a completed run instead.
    pub async fn run_reviewer(
        self: &Arc<Self>,
        id: &Identity,
        description: String,
        prompt: String,
        workspace: String,
        summarise: Summarise,
    ) -> Result<Reviewed, WorkerError> {
        let req = SpawnRequest {
            agent: self.settings.review_agent.clone(),
            description,
            prompt,
            workspace,
            mode: Mode::Default,
            output_schema: None,
            wait: true,
            request_id: None,
            timeout: None,
        };
        let run = ReviewRun {
            timeout: self.settings.review_timeout,
            summarise,
        };
        let (s, timed_out) = self.spawn_inner(id, req, Some(run)).await?;
        Ok(Reviewed {
            worker: s.worker,
            timed_out,
        })
    }

    /// The shared path of [`Self::spawn`] and [`Self::run_reviewer`]; the flag says whether a
    /// review deadline passed.
    async fn spawn_inner(
        self: &Arc<Self>,
        id: &Identity,
        req: SpawnRequest,
        review: Option<ReviewRun>,
    ) -> Result<(Spawned, bool), WorkerError> {
        if self.shutdown.is_cancelled() {
            return Err(WorkerError::ShuttingDown);
        }
        let Lineage {
            caller,
            parent,
            scope,
        } = self.lineage(id).await?;

        let snap = self.registry.snapshot(&req.workspace).await?;
        let checked = if review.is_some() {
            resolve::check_review(&snap, &caller, &req.agent)
        } else {
            resolve::check_spawn(&snap, &caller, &req.agent, &self.rules)
        };
        let def = match checked {
            Ok(def) => def,
            Err(denied) => {
                self.metrics
                    .worker_spawned(&req.agent, &format!("denied_{}", denied.reason()));
                return Err(denied.into());
            }
        };
        let eff = resolve::effective(
            def,
            &snap,
            &caller,
            req.mode,
            req.output_schema.as_ref(),
            &self.rules,
        );
        let parent_id = parent.as_ref().map(|p| p.id.clone());
        // Reviews are never deduplicated: each one gates a different moment.
        let key = review.is_none().then(|| {
            DedupeKey::new(&Dispatch {
                caller_scope: &scope,
                parent_worker_id: parent_id.as_ref().map_or("", WorkerId::as_str),
                agent: &req.agent,
                mode: eff.mode.as_str(),
                workspace: &req.workspace,
                output_schema: eff.output_schema.as_ref(),
                prompt: &req.prompt,
            })
        });

        if let Some(rid) = &req.request_id
            && let Some(existing) = self.store.find_by_request_id(&scope, rid).await?
        {
            // The same request_id names the same dispatch: agent, prompt, mode, workspace and
            // effective schema must all agree, or it is a different request reusing the key.
            if key.is_none_or(|k| dispatch_key(&existing) != Some(k))
                || existing.prompt != req.prompt
            {
                return Err(WorkerError::RequestIdReused {
                    request_id: rid.clone(),
                    existing: existing.id.to_string(),
                });
            }
            let worker = self.finish_wait(existing, req.wait).await?;
            return Ok((
                Spawned {
                    hint: format!(
                        "request_id {rid:?} was already used for worker {}; returning it",
                        worker.id
                    ),
                    worker,
                    deduplicated: true,
                },
                false,
            ));
        }

        // Reserve a pending slot atomically; it is handed back on every early return below.
        let max_pending = self.settings.max_pending;
        if self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max_pending).then_some(n + 1)
            })
            .is_err()
        {
            self.metrics.worker_spawned(&req.agent, "denied_capacity");
            return Err(WorkerError::Capacity(format!(
                "{max_pending} workers are already waiting for a run slot (limits.max_pending); retry later"
            )));
        }
        let mut slot = PendingSlot(Some(&self.pending));

        let new_id = WorkerId::generate();
        if let Some(key) = key {
            let claim = self.dedupe.claim(key, new_id.as_str(), |existing| {
                WorkerId::parse(existing).is_ok_and(|w| self.reusable(&w))
            });
            if let Claim::Existing { worker_id, age } = claim {
                let wid = WorkerId::parse(&worker_id).expect("dedupe holds valid ids");
                let creating = self.creating_lock().get(&wid).cloned();
                if let Some(mut created) = creating {
                    let _ = created.wait_for(|done| *done).await;
                }
                if let Some(rec) = self.cached(&wid) {
                    self.metrics.dedupe_hit();
                    let worker = self.finish_wait(rec, req.wait).await?;
                    return Ok((
                        Spawned {
                            hint: format!(
                                "an identical dispatch of {} with the same prompt was made {}s ago as worker {}; its result is returned instead of starting a duplicate",
                                req.agent,
                                age.as_secs(),
                                worker.id
                            ),
                            worker,
                            deduplicated: true,
                        },
                        false,
                    ));
                }
            }
        }

        // The moka claim above is this process's; with a shared store the database decides
        // between replicas (docs §9). A local hit never gets here.
        if let Some(key) = key
            && let Some(holder) = self
                .store
                .claim_dedupe(&key.to_string(), &new_id, self.settings.dedupe_ttl)
                .await
                .inspect_err(|_| self.dedupe.forget(key, new_id.as_str()))?
        {
            self.dedupe.forget(key, new_id.as_str());
            if let Some(rec) = self.wait_for_row(&holder).await? {
                self.metrics.dedupe_hit();
                let age = Duration::from_millis(
                    u64::try_from(now_ms().saturating_sub(rec.create_time_ms)).unwrap_or(0),
                );
                let worker = self.finish_wait(rec, req.wait).await?;
                return Ok((
                    Spawned {
                        hint: format!(
                            "an identical dispatch of {} with the same prompt was made {}s ago as worker {}; its result is returned instead of starting a duplicate",
                            req.agent,
                            age.as_secs(),
                            worker.id
                        ),
                        worker,
                        deduplicated: true,
                    },
                    false,
                ));
            }
        }

        let token = generate_token();
        let mut blocked = caller.blocked.clone();
        if !blocked.contains(&req.agent) {
            blocked.insert(0, req.agent.clone());
        }
        let created_at = now_ms();
        let record = WorkerRecord {
            id: new_id.clone(),
            agent: req.agent.clone(),
            description: req.description.clone(),
            prompt: req.prompt.clone(),
            workspace: (!req.workspace.is_empty()).then(|| req.workspace.clone()),
            parent_id,
            depth: eff.depth,
            state: WorkerState::Pending,
            sequence: 1,
            create_time_ms: created_at,
            last_activity_ms: created_at,
            start_time_ms: None,
            close_time_ms: None,
            result: None,
            structured_result: None,
            error: None,
            exit_code: None,
            caller_scope: scope,
            request_id: req.request_id.clone(),
            token_hash: Some(hash_token(&token)),
            effective: serde_json::to_value(&eff).expect("effective agent serialises"),
        };
        let (created_tx, created_rx) = watch::channel(false);
        self.creating_lock().insert(new_id.clone(), created_rx);
        // Whatever happens below, waiters on the creation are released and the entry goes.
        let creation = CreationGuard {
            sup: self,
            id: new_id.clone(),
            tx: created_tx,
        };
        let created = match self.store.create(&record).await {
            Ok(ev) => ev,
            Err(e) => {
                if let Some(key) = key {
                    self.dedupe.forget(key, new_id.as_str());
                    let _ = self.store.release_dedupe(&key.to_string(), &new_id).await;
                }
                return Err(e.into());
            }
        };
        let record = created.worker.clone();
        // Transitions and progress reports; a lagging watcher re-reads the store.
        let (events, _) = broadcast::channel(64);
        let (done_tx, done_rx) = watch::channel(None);
        let cancel = self.shutdown.child_token();
        // A sync caller binds the worker's life; a background run belongs to the service.
        let waiters = Arc::new(Mutex::new(Waiters {
            count: usize::from(req.wait),
            detached: !req.wait,
        }));
        slot.keep();
        self.live().insert(
            new_id.clone(),
            Live {
                record: record.clone(),
                cancel: cancel.clone(),
                events: events.clone(),
                done: done_rx.clone(),
                token_hash: hash_token(&token),
                waiters: waiters.clone(),
                lineage: resolve::lineage::of_worker(&req.agent, &eff),
            },
        );
        drop(creation);
        let _ = events.send(created);
        self.metrics.worker_state(None, "pending");
        tracing::info!(worker = %new_id, agent = %req.agent, depth = record.depth, parent = ?record.parent_id.as_ref().map(WorkerId::as_str), "worker created");

        let spec = WorkerSpec::new(
            new_id.as_str(),
            &eff,
            &req.prompt,
            &req.description,
            record.workspace.as_deref(),
        );
        let assignment = Arc::new(Assignment {
            worker_token: token.clone(),
            caller_scope: record.caller_scope.clone(),
            spec,
        });
        let job = Job {
            worker_id: new_id.to_string(),
            stdin: assignment.spec.to_json(),
            env: vec![
                ("AGENTRY_ADDR".into(), self.settings.addr.clone()),
                ("AGENTRY_WORKER_ID".into(), new_id.to_string()),
                ("AGENTRY_WORKER_TOKEN".into(), token),
                ("AGENTRY_AGENT".into(), req.agent.clone()),
                ("AGENTRY_DEPTH".into(), eff.depth.to_string()),
                ("AGENTRY_SPAWNS".into(), eff.spawns.clone()),
                ("AGENTRY_BLOCKED_AGENT".into(), blocked.join(",")),
                (
                    "TRACEPARENT".into(),
                    crate::telemetry::current_traceparent()
                        .or_else(|| id.traceparent.clone())
                        .unwrap_or_default(),
                ),
            ],
            cwd: record.workspace.as_ref().map(Into::into),
            // A review has its own deadline (enforced below); the executor bound is only a
            // backstop behind it, so the row records the review's stop reason.
            timeout: match &review {
                Some(r) => r.timeout + self.settings.kill_grace + Duration::from_secs(1),
                None => resolve::effective_timeout(
                    req.timeout,
                    def.persona.timeout_mins,
                    self.settings.timeout,
                ),
            },
            kill_grace: self.settings.kill_grace,
            max_output_bytes: self.settings.max_output_bytes,
            assignment: Some(assignment),
        };
        let (schema, summarise, deadline) = match review {
            Some(r) => (None, Some(r.summarise), Some(r.timeout)),
            None => (eff.output_schema.clone(), None, None),
        };
        let ctx = RunCtx {
            id: new_id.clone(),
            schema,
            summarise,
            cancel: cancel.clone(),
            events,
            done: done_tx,
        };
        // The run belongs to the service; a sync caller only holds a guard that cancels it.
        let guard = req.wait.then(|| WaitGuard {
            waiters,
            cancel,
            armed: true,
        });
        let this = self.clone();
        let span = tracing::info_span!(
            "worker",
            worker = %new_id,
            agent = %req.agent,
            parent = record.parent_id.as_ref().map_or("", WorkerId::as_str),
            depth = record.depth,
            outcome = tracing::field::Empty,
        );
        self.tasks
            .spawn(tracing::Instrument::instrument(this.drive(ctx, job), span));
        let mut timed_out = false;
        let worker = if req.wait {
            let rec = match deadline {
                None => wait_done(done_rx).await,
                Some(t) => match tokio::time::timeout(t, wait_done(done_rx.clone())).await {
                    Ok(rec) => rec,
                    Err(_) => {
                        timed_out = true;
                        let reason = format!("review timed out after {}", seconds(t));
                        // Finished in the meantime is fine: the final record says how.
                        let _ = self.stop(&new_id, &reason, &Visibility::All).await;
                        wait_done(done_rx).await
                    }
                },
            };
            if let Some(g) = guard {
                g.disarm();
            }
            rec
        } else {
            record
        };
        Ok((
            Spawned {
                worker,
                deduplicated: false,
                hint: String::new(),
            },
            timed_out,
        ))
    }

    fn creating_lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkerId, watch::Receiver<bool>>> {
        self.creating.lock().expect("creating workers poisoned")
    }

    /// Whether a cached dispatch may be reused: being created, live, or finished `completed`.
    fn reusable(&self, id: &WorkerId) -> bool {
        if self.live().contains_key(id) || self.creating_lock().contains_key(id) {
            return true;
        }
        self.recent
            .get(id)
            .is_some_and(|r| r.state == WorkerState::Completed)
    }

    /// The latest record from memory (live or recently finished), never the disk.
    fn cached(&self, id: &WorkerId) -> Option<WorkerRecord> {
        if let Some(l) = self.live().get(id) {
            return Some(l.record.clone());
        }
        self.recent.get(id)
    }

    /// For a reused worker: wait for it when asked (joining the callers it is bound to, so it
    /// lives until the last of them goes away), else return it as it is — and a background
    /// dispatch sharing a bound worker hands it to the service.
    async fn finish_wait(
        &self,
        rec: WorkerRecord,
        wait: bool,
    ) -> Result<WorkerRecord, WorkerError> {
        if rec.state.is_terminal() {
            return Ok(rec);
        }
        let handles = self
            .live()
            .get(&rec.id)
            .map(|l| (l.done.clone(), l.waiters.clone(), l.cancel.clone()));
        let Some((done, waiters, cancel)) = handles else {
            // Run by another replica (shared store): it belongs to that replica's service, so
            // waiting never binds it; follow its row until it is terminal.
            if wait && self.store.is_shared() {
                return self.wait_terminal(&rec.id).await;
            }
            return self.get(&rec.id, &Visibility::All).await;
        };
        if !wait {
            waiters.lock().expect("waiters poisoned").detached = true;
            return Ok(rec);
        }
        let guard = WaitGuard::join(&waiters, &cancel);
        let rec = wait_done(done).await;
        if let Some(g) = guard {
            g.disarm();
        }
        Ok(rec)
    }

    /// Runs one worker to a terminal state; every path closes the row.
    async fn drive(self: Arc<Self>, ctx: RunCtx, job: Job) {
        let id = ctx.id.clone();
        let inner = {
            let this = self.clone();
            let ctx = ctx.clone_handles();
            tokio::spawn(tracing::Instrument::instrument(
                async move { this.run_once(ctx, job).await },
                tracing::Span::current(),
            ))
        };
        let final_patch = match inner.await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::error!(worker = %id, error = %e, "worker task panicked");
                (
                    Event::Fail,
                    Patch {
                        error: Some(format!("executor panicked: {e}")),
                        ..Patch::default()
                    },
                )
            }
        };
        let (event, patch) = final_patch;
        // Still pending here means it never started: leave the pending count now.
        let was_pending = self
            .live()
            .get(&id)
            .is_some_and(|l| l.record.state == WorkerState::Pending);
        if was_pending {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
        let rec = match self.transition(&ctx, event, patch).await {
            Ok(r) => r,
            Err(e) => {
                // Never leave the row open: close it as failed, saying why.
                tracing::error!(worker = %id, error = %e, "cannot record the final transition");
                let close = Patch {
                    error: Some(format!("internal error recording the outcome: {e}")),
                    ..Patch::default()
                };
                match self.transition(&ctx, Event::Fail, close).await {
                    Ok(rec) => rec,
                    Err(_) => match self.store.get(&id).await {
                        Ok(Some(rec)) => rec,
                        _ => self.cached(&id).expect("live worker"),
                    },
                }
            }
        };
        tracing::Span::current().record("outcome", rec.state.as_str());
        self.metrics.worker_spawned(&rec.agent, rec.state.as_str());
        self.recent.insert(id.clone(), rec.clone());
        self.live().remove(&id);
        tracing::info!(worker = %id, agent = %rec.agent, state = %rec.state, error = ?rec.error, "worker finished");
        let _ = ctx.done.send(Some(rec));
    }

    /// Waits for a slot, runs the executor, and decides the final event. Persists `running`.
    async fn run_once(self: Arc<Self>, ctx: RunCtx, job: Job) -> (Event, Patch) {
        let permit = tokio::select! {
            p = self.slots.clone().acquire_owned() => p.expect("slots never closed"),
            () = ctx.cancel.cancelled() => {
                return (Event::Kill, Patch { error: Some(self.kill_reason(&ctx.id)), ..Patch::default() });
            }
        };
        let (started_tx, started_rx) = oneshot::channel();
        let run = self.executor.run(job, ctx.cancel.clone(), started_tx);
        tokio::pin!(run);
        let mut started_rx = Some(started_rx);
        let outcome = loop {
            tokio::select! {
                // Start first: a fast process may have started and ended by the same poll.
                biased;
                s = async { started_rx.as_mut().expect("polled once").await }, if started_rx.is_some() => {
                    started_rx = None;
                    if s.is_ok() {
                        self.record_start(&ctx).await;
                    }
                }
                o = &mut run => break o,
            }
        };
        // The run can end before the start signal was observed; never lose `running`.
        if let Some(mut rx) = started_rx.take()
            && rx.try_recv().is_ok()
        {
            self.record_start(&ctx).await;
        }
        drop(permit);
        match outcome {
            Outcome::Completed { stdout } if ctx.summarise.is_some() => {
                let summarise = ctx.summarise.as_ref().expect("checked above");
                (
                    Event::Complete,
                    Patch {
                        structured_result: Some(summarise(&stdout).to_string()),
                        result: Some(stdout),
                        exit_code: Some(0),
                        ..Patch::default()
                    },
                )
            }
            Outcome::Completed { stdout } => match &ctx.schema {
                Some(schema) => match crate::schema::validate_output(schema, &stdout) {
                    Ok(v) => (
                        Event::Complete,
                        Patch {
                            structured_result: Some(v.to_string()),
                            result: Some(stdout),
                            ..Patch::default()
                        },
                    ),
                    Err(e) => (
                        Event::Fail,
                        Patch {
                            result: Some(stdout),
                            error: Some(e),
                            exit_code: Some(0),
                            ..Patch::default()
                        },
                    ),
                },
                None => (
                    Event::Complete,
                    Patch {
                        result: Some(stdout),
                        exit_code: Some(0),
                        ..Patch::default()
                    },
                ),
            },
            Outcome::Failed {
                exit_code,
                stderr_tail,
                reason,
                ..
            } => (
                Event::Fail,
                Patch {
                    error: Some(if stderr_tail.trim().is_empty() {
                        reason
                    } else {
                        format!("{reason}; stderr: {}", stderr_tail.trim_end())
                    }),
                    exit_code,
                    ..Patch::default()
                },
            ),
            Outcome::TimedOut { after, stderr_tail } => (
                Event::Fail,
                Patch {
                    error: Some(format!(
                        "timed out after {}{}",
                        humantime::format_duration(after),
                        if stderr_tail.trim().is_empty() {
                            String::new()
                        } else {
                            format!("; stderr: {}", stderr_tail.trim_end())
                        }
                    )),
                    ..Patch::default()
                },
            ),
            Outcome::Killed => (
                Event::Kill,
                Patch {
                    error: Some(self.kill_reason(&ctx.id)),
                    ..Patch::default()
                },
            ),
            Outcome::CouldNotStart { reason } => (
                Event::Fail,
                Patch {
                    error: Some(reason),
                    ..Patch::default()
                },
            ),
        }
    }

    /// The executor started the worker: it leaves the pending count and is persisted `running`.
    async fn record_start(&self, ctx: &RunCtx) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = self.transition(ctx, Event::Start, Patch::default()).await {
            tracing::error!(worker = %ctx.id, error = %e, "cannot record start");
        }
    }

    fn kill_reason(&self, id: &WorkerId) -> String {
        let reasons = self.stop_reasons.lock().expect("stop reasons poisoned");
        reasons.get(id).cloned().unwrap_or_else(|| {
            if self.shutdown.is_cancelled() {
                "killed: service shutting down".to_owned()
            } else {
                "killed: the waiting caller went away".to_owned()
            }
        })
    }

    /// Persists a transition, then publishes it and updates the live record.
    async fn transition(
        &self,
        ctx: &RunCtx,
        event: Event,
        patch: Patch,
    ) -> Result<WorkerRecord, WorkerError> {
        match self.store.apply(&ctx.id, event, patch, now_ms()).await? {
            Applied::Moved(ev) => {
                let rec = ev.worker.clone();
                if let Some(l) = self.live().get_mut(&ctx.id) {
                    self.metrics
                        .worker_state(Some(l.record.state.as_str()), rec.state.as_str());
                    l.record = rec.clone();
                }
                let _ = ctx.events.send(ev);
                Ok(rec)
            }
            Applied::Absorbed(rec) => Ok(rec),
        }
    }

    /// The worker as it is now: memory first, then the store. A worker the caller may not see
    /// is `NotFound`, exactly like one that does not exist.
    pub async fn get(&self, id: &WorkerId, vis: &Visibility) -> Result<WorkerRecord, WorkerError> {
        let rec = match self.cached(id) {
            Some(r) => r,
            None => self
                .store
                .get(id)
                .await?
                .ok_or_else(|| WorkerError::NotFound(id.to_string()))?,
        };
        if vis.sees(&rec) {
            Ok(rec)
        } else {
            Err(WorkerError::NotFound(id.to_string()))
        }
    }

    /// Stops a worker: descendants first, then SIGTERM → grace → SIGKILL; returns once it is
    /// gone and recorded `killed`.
    pub async fn stop(
        &self,
        id: &WorkerId,
        reason: &str,
        vis: &Visibility,
    ) -> Result<WorkerRecord, WorkerError> {
        let rec = self.get(id, vis).await?;
        match rec.state {
            WorkerState::Killed => return Ok(rec),
            WorkerState::Completed | WorkerState::Failed => {
                return Err(WorkerError::NotCancelable {
                    id: id.to_string(),
                    state: rec.state,
                });
            }
            WorkerState::Pending | WorkerState::Running => {}
        }
        let mut children: Vec<WorkerId> = self
            .live()
            .values()
            .filter(|l| l.record.parent_id.as_ref() == Some(id))
            .map(|l| l.record.id.clone())
            .collect();
        if self.store.is_shared() {
            // Children run by other replicas are stopped through their owners.
            children.extend(self.open_children(id).await?);
            children.sort();
            children.dedup();
        }
        for c in children {
            let reason = format!("killed: parent {id} was stopped");
            let _ = Box::pin(self.stop(&c, &reason, &Visibility::All)).await;
        }
        let handles = self
            .live()
            .get(id)
            .map(|l| (l.cancel.clone(), l.done.clone()));
        let Some((cancel, done)) = handles else {
            // Run by another replica: record the request for its owner and wait until the row
            // is terminal (the owner kills it, or the sweeper closes it if the owner is lost).
            if self.store.is_shared() && self.store.request_stop(id, reason.trim()).await? {
                let rec = self.wait_terminal(id).await?;
                return match rec.state {
                    WorkerState::Killed => Ok(rec),
                    state => Err(WorkerError::NotCancelable {
                        id: id.to_string(),
                        state,
                    }),
                };
            }
            // Finished in the meantime.
            return self.stop_finished(id).await;
        };
        let reason = if reason.trim().is_empty() {
            "killed: stopped by StopWorker".to_owned()
        } else {
            format!("killed: {}", reason.trim())
        };
        self.stop_reasons
            .lock()
            .expect("stop reasons poisoned")
            .insert(id.clone(), reason);
        cancel.cancel();
        let rec = wait_done(done).await;
        self.stop_reasons
            .lock()
            .expect("stop reasons poisoned")
            .remove(id);
        match rec.state {
            WorkerState::Killed => Ok(rec),
            state => Err(WorkerError::NotCancelable {
                id: id.to_string(),
                state,
            }),
        }
    }

    /// The open direct children of `id` in the store.
    async fn open_children(&self, id: &WorkerId) -> Result<Vec<WorkerId>, WorkerError> {
        let q = ListQuery {
            parent: super::store::ParentFilter::Worker(id.clone()),
            states: vec![WorkerState::Pending, WorkerState::Running],
            caller_scope: None,
            after: None,
            limit: 10_000,
        };
        Ok(self
            .store
            .list(&q)
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }

    /// Waits (reading the store, woken by its notices) until the worker's row is terminal.
    async fn wait_terminal(&self, id: &WorkerId) -> Result<WorkerRecord, WorkerError> {
        let mut notices = self.store.notices();
        loop {
            let rec = self
                .store
                .get(id)
                .await?
                .ok_or_else(|| WorkerError::NotFound(id.to_string()))?;
            if rec.state.is_terminal() {
                return Ok(rec);
            }
            if self.shutdown.is_cancelled() {
                return Err(WorkerError::ShuttingDown);
            }
            self.store_changed(id, &mut notices, REMOTE_POLL).await;
        }
    }

    /// Waits until the store may hold something new about `id`: a notice about it, a resync of
    /// the listener, or `poll` passed (notices are only hints).
    pub async fn store_changed(
        &self,
        id: &WorkerId,
        notices: &mut Option<broadcast::Receiver<super::store::Notice>>,
        poll: Duration,
    ) {
        use super::store::Notice;
        let deadline = tokio::time::sleep(poll);
        tokio::pin!(deadline);
        loop {
            let Some(rx) = notices.as_mut() else {
                deadline.await;
                return;
            };
            tokio::select! {
                () = &mut deadline => return,
                n = rx.recv() => match n {
                    Ok(Notice::Event { worker_id, .. }) if worker_id == *id => return,
                    Ok(Notice::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Closed) => *notices = None,
                },
            }
        }
    }

    /// The notices of the shared store, if any (for watchers following another replica's
    /// worker).
    pub fn notices(&self) -> Option<broadcast::Receiver<super::store::Notice>> {
        self.store.notices()
    }

    /// The row of a worker another replica claimed a dedupe key for, once it exists (the
    /// winner writes it right after its claim); `None` if it never appears.
    async fn wait_for_row(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, WorkerError> {
        let deadline = tokio::time::Instant::now() + REMOTE_CLAIM_WAIT;
        let mut notices = self.store.notices();
        loop {
            if let Some(rec) = self.store.get(id).await? {
                return Ok(Some(rec));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            self.store_changed(id, &mut notices, Duration::from_millis(50))
                .await;
        }
    }

    async fn stop_finished(&self, id: &WorkerId) -> Result<WorkerRecord, WorkerError> {
        let rec = self.get(id, &Visibility::All).await?;
        match rec.state {
            WorkerState::Killed => Ok(rec),
            state => Err(WorkerError::NotCancelable {
                id: id.to_string(),
                state,
            }),
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

    /// The review deadline (`review.timeout`).
    pub fn review_timeout(&self) -> Duration {
        self.settings.review_timeout
    }

    /// A token that is cancelled when the service shuts down (ends watch streams).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Kills every live worker (recorded `killed`) and waits for them, at most `grace`.
    pub async fn shutdown(&self, grace: Duration) {
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

/// The dedupe key a stored worker was admitted under, from its own record (None when the
/// record predates the fields it needs).
fn dispatch_key(rec: &WorkerRecord) -> Option<DedupeKey> {
    let eff = &rec.effective;
    let mode = eff.get("mode")?.as_str()?;
    let schema = eff.get("output_schema").filter(|s| !s.is_null());
    Some(DedupeKey::new(&Dispatch {
        caller_scope: &rec.caller_scope,
        parent_worker_id: rec.parent_id.as_ref().map_or("", WorkerId::as_str),
        agent: &rec.agent,
        mode,
        workspace: rec.workspace.as_deref().unwrap_or(""),
        output_schema: schema,
        prompt: &rec.prompt,
    }))
}

/// Ends a worker's "being created" phase: removes its entry and wakes the dispatches waiting on
/// it, on success (the worker is live by then) and on every early return alike.
struct CreationGuard<'a> {
    sup: &'a Supervisor,
    id: WorkerId,
    tx: watch::Sender<bool>,
}

impl Drop for CreationGuard<'_> {
    fn drop(&mut self) {
        self.sup.creating_lock().remove(&self.id);
        let _ = self.tx.send(true);
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

/// Waits until the worker's final record is published.
async fn wait_done(mut rx: watch::Receiver<Option<WorkerRecord>>) -> WorkerRecord {
    loop {
        if let Some(r) = rx.borrow_and_update().clone() {
            return r;
        }
        if rx.changed().await.is_err() {
            // Sender gone without a value cannot happen (drive always sends); be safe.
            if let Some(r) = rx.borrow().clone() {
                return r;
            }
            std::future::pending::<()>().await;
        }
    }
}

/// What the run task needs.
struct RunCtx {
    id: WorkerId,
    schema: Option<serde_json::Value>,
    summarise: Option<Summarise>,
    cancel: CancellationToken,
    events: broadcast::Sender<WorkerEvent>,
    done: watch::Sender<Option<WorkerRecord>>,
}

impl RunCtx {
    fn clone_handles(&self) -> RunCtx {
        RunCtx {
            id: self.id.clone(),
            schema: self.schema.clone(),
            summarise: self.summarise.clone(),
            cancel: self.cancel.clone(),
            events: self.events.clone(),
            done: watch::channel(None).0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{executor::BoxFuture, store::SqliteStore};

    /// An executor whose process "starts and exits within one poll": it fires `started` and
    /// returns at once — the race a real `/bin/true` hits under load.
    struct Instant;

    impl Executor for Instant {
        fn run(
            &self,
            _job: Job,
            _cancel: CancellationToken,
            started: oneshot::Sender<()>,
        ) -> BoxFuture<'static, Outcome> {
            let _ = started.send(());
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
            };
            let w = sup.spawn(&id, req).await.unwrap().worker;
            assert_eq!(w.state, WorkerState::Completed, "run {i}: {w:?}");
            assert_eq!(w.sequence, 3, "pending, running, completed");
        }
        assert_eq!(sup.pending.load(Ordering::SeqCst), 0);
    }
}
