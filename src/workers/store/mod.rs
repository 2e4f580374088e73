//! Durable worker rows and their event log (docs/workers.md §6.2, §6.6): the async
//! [`WorkerStore`] trait every backend implements, the [`SharedStore`] trait of a store several
//! replicas share, and the types they speak. The backends live in `sqlite/` ([`SqliteStore`])
//! and `postgres/` ([`PostgresStore`], the only [`SharedStore`]), one file per concern; the
//! record code both write the same rows with is `record`, which depends on neither. This file
//! uses the backends only to re-export them.
//!
//! This module owns persistence: the rule that a transition is read, decided by
//! [`lifecycle::transition`](super::lifecycle::transition) and written together with its event
//! in **one** transaction (so a transition is persisted before anyone can publish it), listing
//! with keyset pagination, and the start-up close of rows orphaned by a previous process.
//!
//! It must not depend on tonic or the supervisor. Backends never block the async runtime's
//! threads: SQLite writes go through one writer thread that group-commits concurrent
//! transitions, reads through `spawn_blocking`. The behaviour every backend must have is pinned
//! by one test suite (`suite`) that each backend runs unchanged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::lifecycle::{Event, IllegalTransition};
use super::model::{Progress, WorkerEvent, WorkerId, WorkerRecord, WorkerState};

mod postgres;
mod record;
mod sqlite;
#[cfg(test)]
mod suite;
#[doc(hidden)]
pub mod testdb;

pub use postgres::{PostgresStore, ReplicaSettings, redact_url};
pub use sqlite::SqliteStore;

/// The error text every row left open by a previous process is closed with (docs/workers.md
/// §6.2).
pub const ORPHANED_ERROR: &str = "orphaned: service restarted";

/// Where workers and their events live: the core every backend implements whole.
///
/// A trait so that several backends (SQLite embedded, a server database for several replicas)
/// serve the supervisor and the gRPC layer unchanged. Every method is one short unit of work;
/// every method that changes state does so atomically. What exists only where several processes
/// share the store is [`SharedStore`], reached through [`shared`](Self::shared).
#[async_trait::async_trait]
pub trait WorkerStore: Send + Sync + 'static {
    /// Writes a new worker in `pending` with sequence 1, and its creation event, atomically.
    ///
    /// The lifecycle fields of `rec` (`state`, `sequence`, start/close times, `result`,
    /// `structured_result`, `error`, `exit_code`) are ignored and written as a new worker's; the
    /// returned event carries the record as stored. A `request_id` already used by the same
    /// caller scope is [`StoreError::DuplicateRequestId`]; a `parent_id` that names no worker is
    /// an error.
    async fn create(&self, rec: &WorkerRecord) -> Result<WorkerEvent, StoreError>;

    /// [`create`](Self::create) of a worker that must first win the dedupe claim `claim`
    /// (the key and how long the claim lasts) in a store shared by replicas (docs §9): the
    /// claim and the row are written together (on PostgreSQL one statement, one commit), and a
    /// claim another live worker holds is [`StoreError::DedupeHeld`] with nothing written. A
    /// store of one process has no claims of its own (the process's dedupe cache is the only
    /// one) and creates.
    async fn create_claimed(
        &self,
        rec: &WorkerRecord,
        claim: Option<(&str, Duration)>,
    ) -> Result<WorkerEvent, StoreError> {
        let _ = claim;
        self.create(rec).await
    }

    /// Applies a lifecycle event: reads the row, asks the transition function, and writes the
    /// new state (with `patch`, the times, the next sequence and, when terminal, no token) and
    /// its event in one transaction. A terminal worker absorbing a repeated stop is
    /// [`Applied::Absorbed`]; a refused transition is [`StoreError::Illegal`].
    async fn apply(
        &self,
        id: &WorkerId,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError>;

    /// [`apply`](Self::apply) for a caller that holds the row as this process last wrote or
    /// read it (`known`): a backend may decide the transition on `known` and write it without
    /// reading the row first, as long as the write is a compare-and-set that finds a row moved
    /// since (then it reads the row and decides again). The outcome is `apply`'s.
    async fn apply_from(
        &self,
        known: &WorkerRecord,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        self.apply(&known.id, event, patch, now_ms).await
    }

    /// The start of a run (at `started_ms`) and its end (`end`, with `patch`, at `now_ms`),
    /// written together for a worker whose run ended before its start was written (docs
    /// §6.2, "A start written with its end"): both events are kept, in order, and the row
    /// moves once. `known` is the row as this process last wrote it, still `pending`. Returns
    /// the start's event (`None` when the row was found already started, or the two were
    /// found committed without their events) and the end's outcome, as
    /// [`apply_from`](Self::apply_from) would answer it. A row that moved since `known` (a
    /// stop, a start written elsewhere) is decided as it is: the start only if it is still
    /// `pending`, then the end.
    async fn apply_started(
        &self,
        known: &WorkerRecord,
        started_ms: i64,
        end: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<(Option<WorkerEvent>, Applied), StoreError>;

    /// The worker as stored, if it exists.
    async fn get(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError>;

    /// One page of workers, ordered by `(create_time_ms, id)`.
    async fn list(&self, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError>;

    /// The stored events of a worker after `after_sequence`, in order; an unknown worker is
    /// [`StoreError::NotFound`]. What a watcher replays to resume.
    async fn events_after(
        &self,
        id: &WorkerId,
        after_sequence: u64,
    ) -> Result<Vec<WorkerEvent>, StoreError>;

    /// Closes every orphaned row — `pending` or `running`, but no live process owns its run —
    /// as `failed`, through the ordinary transition rules (so each gets its close time, loses
    /// its token and has an event), and returns the ids it closed. Each close is a
    /// compare-and-set on the row's state, so a row is closed exactly once however many callers
    /// race, and a terminal row is never touched.
    ///
    /// SQLite (one process per file, under an exclusive lock): every open row belongs to a
    /// previous process; called once at start-up, error [`ORPHANED_ERROR`]. PostgreSQL: the
    /// open rows whose owning replica's lease has expired on the database clock, error
    /// `orphaned: replica <name> lost`; called at start-up and by the sweeper.
    async fn close_orphans(&self, now_ms: i64) -> Result<Vec<WorkerId>, StoreError>;

    /// The orphaned rows [`close_orphans`](Self::close_orphans) would close now, oldest first:
    /// the runs a lost process left behind, whose processes (if on this host) must be killed
    /// before the rows are closed.
    async fn open_workers(&self) -> Result<Vec<WorkerId>, StoreError>;

    /// Whether the database answers: health follows it (docs §9).
    async fn ping(&self) -> Result<(), StoreError>;

    /// The worker holding the token with this hash; only non-terminal workers have one, so this
    /// is also the token validity check.
    async fn find_by_token_hash(&self, hash: &str) -> Result<Option<WorkerRecord>, StoreError>;

    /// Appends a progress report of a `running` worker as its next event (and its latest
    /// activity). A worker in another state is [`StoreError::NotRunning`]; one that already has
    /// `max_events` events is [`StoreError::TooManyEvents`] (transitions are never refused).
    async fn append_progress(
        &self,
        id: &WorkerId,
        progress: Progress,
        now_ms: i64,
        max_events: u64,
    ) -> Result<WorkerEvent, StoreError>;

    /// The worker a caller created with this idempotency key, if any.
    async fn find_by_request_id(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<WorkerRecord>, StoreError>;

    /// Replaces the worktree record (JSON text) of a worker that already ended: the orphan
    /// sweep finishes the worktrees of the rows it closed (docs/workers.md §6.10) after closing
    /// them. A row that is still open is left as it is.
    async fn record_worktree(&self, id: &WorkerId, worktree: &str) -> Result<(), StoreError>;

    /// Accepts `msg` into the inbox of worker `msg.worker_id` (docs §12.2), in one transaction
    /// that finds the worker open (not terminal) and its inbox not sealed, counting it among
    /// the worker's undelivered messages: [`Sent::Queued`] with the worker as it is now. A
    /// terminal worker or a sealed inbox takes nothing: [`Sent::Closed`] (the caller continues
    /// the worker instead). A `request_id` the same caller already used is
    /// [`Sent::Duplicate`] with that message; an inbox already holding `inbox_max` undelivered
    /// messages is [`StoreError::InboxFull`].
    async fn send_message(&self, msg: &Message, inbox_max: u32) -> Result<Sent, StoreError>;

    /// Takes the undelivered messages of worker `id`, oldest first, marking them delivered. With
    /// `seal` and none to take, seals the inbox in the same transaction: every later send is
    /// [`Sent::Closed`]. What a worker about to complete calls, so that a message either becomes
    /// another turn or a continuation, never neither.
    async fn take_messages(&self, id: &WorkerId, seal: bool) -> Result<Vec<Message>, StoreError>;

    /// Creates `new` as the continuation of worker `old` (docs §12.3) in one transaction: the
    /// new row (with `continues = old`) and its creation event, `old.continued_by = new`, the
    /// old worker's undelivered messages moved to the new one, then `msg` for it.
    /// [`Continued::Already`] when `old` already has a continuation (nothing written).
    async fn continue_worker(
        &self,
        old: &WorkerId,
        new: &WorkerRecord,
        msg: &Message,
    ) -> Result<Continued, StoreError>;

    /// The message a caller sent with this idempotency key, if any.
    async fn find_message(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<Message>, StoreError>;

    /// Appends entries (one JSON message each) to the transcript of worker `id`, the first at
    /// index `from`; an entry already stored at an index is replaced.
    async fn append_transcript(
        &self,
        id: &WorkerId,
        from: u32,
        entries: &[String],
    ) -> Result<(), StoreError>;

    /// The transcript of worker `id`, in order (empty: none stored).
    async fn transcript(&self, id: &WorkerId) -> Result<Vec<String>, StoreError>;

    /// Deletes the transcripts of workers that ended before `closed_before_ms`; how many
    /// workers lost theirs.
    async fn prune_transcripts(&self, closed_before_ms: i64) -> Result<u64, StoreError>;

    /// This store as one other processes share (PostgreSQL): then the replica duties run
    /// (lease renewal, the orphan sweeper, stop requests, holds, runners across replicas).
    /// `None` for SQLite, where one process owns the file and orphans are closed once at
    /// start-up.
    fn shared(self: Arc<Self>) -> Option<Arc<dyn SharedStore>> {
        None
    }
}

/// What a store shared by several processes (replicas, docs §9) can do beyond
/// [`WorkerStore`]: the lease that tells live replicas from lost ones, the wake-ups between
/// them, stops and dedupe claims across them, callers waiting for another replica's worker,
/// and runners shared by every replica. Only such a store has it ([`WorkerStore::shared`]);
/// a caller holding none does what a single process does alone.
#[async_trait::async_trait]
pub trait SharedStore: Send + Sync {
    /// This replica's id in the shared store (random per start).
    fn replica_id(&self) -> &str;

    /// Renews this process's replica lease (docs §9); called every `replica.lease / 3`.
    /// [`Lease::Lapsed`] says the lease had already expired, so other replicas may have closed
    /// this one's runs as orphans.
    async fn renew_lease(&self) -> Result<Lease, StoreError>;

    /// Wake-ups from other processes sharing the store (events committed, stops requested,
    /// holds changed); the runner notices go to [`SharedStore::runner_notices`]. Hints
    /// only: a receiver must still re-read the store on [`Notice::Resync`] and at least every
    /// second. Other replicas' creates and transitions of their own workers come only while
    /// this replica follows events ([`Self::follow_events`]).
    fn notices(&self) -> broadcast::Receiver<Notice>;

    /// Follows events until the answer is dropped (docs §9, "Watching"): the other replicas
    /// announce the events they commit only while one of theirs follows them, so a caller
    /// that reads [`Self::notices`] for a worker this replica may not run holds this while it
    /// does. Announcing starts a moment later, with a [`Notice::Resync`].
    fn follow_events(&self) -> Following;

    /// The runner notices (docs §10, runners across replicas): [`RunnerNotice::Wait`] (while
    /// [`Self::listen_for_waits`] is on), the [`RunnerNotice::Relay`]s addressed to this
    /// replica (those to others are dropped where they are read), and [`RunnerNotice::Resync`].
    /// Apart from [`Self::notices`], so that the fleet's loop wakes only for these and the
    /// other receivers never for these. Hints, like [`Self::notices`].
    fn runner_notices(&self) -> broadcast::Receiver<RunnerNotice>;

    /// Records a stop request on an open row owned by **another** replica and notifies it;
    /// returns whether one was recorded (false: the row is terminal, unknown, or this process
    /// owns it — then the caller stops it itself).
    async fn request_stop(&self, id: &WorkerId, reason: &str) -> Result<bool, StoreError>;

    /// The open rows owned by this replica that another replica asked to stop, with the
    /// reason: the owner's slow poll behind [`Notice::Stop`].
    async fn stop_requests(&self) -> Result<Vec<(WorkerId, String)>, StoreError>;

    /// Claims a dedupe key for `worker` in the store for `ttl` (docs §9), unless a live claim
    /// exists: then returns the worker holding it. A claim whose worker ended `failed` or
    /// `killed`, or that expired, is taken over. (Without a shared store the in-process cache
    /// is the only claim.)
    async fn claim_dedupe(
        &self,
        key: &str,
        worker: &WorkerId,
        ttl: Duration,
    ) -> Result<Option<WorkerId>, StoreError>;

    /// Drops `worker`'s claim on `key` (its creation failed).
    async fn release_dedupe(&self, key: &str, worker: &WorkerId) -> Result<(), StoreError>;

    /// Records that a caller of this replica waits for `id`, a worker another replica runs
    /// (docs §9, waiting across replicas), and notifies its owner, which keeps a worker bound
    /// to its waiters alive while such holds exist. Returns the hold's id.
    async fn add_hold(&self, id: &WorkerId) -> Result<String, StoreError>;

    /// Ends the hold [`add_hold`](Self::add_hold) returned, and notifies the worker's owner.
    async fn release_hold(&self, id: &WorkerId, hold: &str) -> Result<(), StoreError>;

    /// How many holds of live replicas a worker has.
    async fn holds(&self, id: &WorkerId) -> Result<u64, StoreError>;

    /// Deletes the holds of replicas whose lease expired and of workers that ended, notifying
    /// the owners of the workers they held; the sweeper's cleanup after a waiting replica is
    /// lost.
    async fn prune_holds(&self) -> Result<(), StoreError>;

    /// Publishes a runner worker of this replica (`wait.owner` is this replica's id) for the
    /// runners of every replica (docs §10, runners across replicas), and notifies them.
    async fn publish_runner_wait(&self, wait: &RunnerWait) -> Result<(), StoreError>;

    /// Whether this replica hears of the waits other replicas publish
    /// ([`RunnerNotice::Wait`]): only while a runner is connected to it (off at first), since
    /// nothing else claims them. Turned on, a [`RunnerNotice::Wait`]`(None)` follows once it
    /// takes effect, so that the waits published meanwhile are read.
    fn listen_for_waits(&self, on: bool);

    /// Unclaimed runner waits of live replicas, oldest first, at most `limit`.
    async fn runner_waits(&self, limit: i64) -> Result<Vec<RunnerWait>, StoreError>;

    /// Claims an unclaimed wait for this replica and sets the worker's token hash to
    /// `token_hash` (a token minted by the claimer) in one statement, skipping a wait another
    /// claimer holds locked; the worker's record as claimed (pending, with that token hash)
    /// when this replica won it.
    async fn claim_runner_wait(
        &self,
        id: &WorkerId,
        token_hash: &str,
    ) -> Result<Option<WorkerRecord>, StoreError>;

    /// Deletes the wait of a worker whose run ended here, claimed or not (none there is no
    /// error).
    async fn unpublish_runner_wait(&self, id: &WorkerId) -> Result<(), StoreError>;

    /// Deletes a wait only while no replica has claimed it; whether it was deleted.
    async fn withdraw_unclaimed_wait(&self, id: &WorkerId) -> Result<bool, StoreError>;

    /// Who claimed the runner wait of worker `id`.
    async fn runner_claim(&self, id: &WorkerId) -> Result<RunnerClaim, StoreError>;

    /// Sends `messages` about worker `id` to replica `to`, in order, and notifies it once; with
    /// `withdraw` (the claimer's last message about the worker), the wait this replica claimed
    /// for it is deleted in the same statement, so its owner need not.
    async fn relay(
        &self,
        to: &str,
        id: &WorkerId,
        messages: Vec<String>,
        withdraw: bool,
    ) -> Result<(), StoreError>;

    /// Takes (deletes) the messages sent to this replica, and returns in order those whose
    /// sequence is not in `applied` (the ones their notices brought already).
    async fn take_relays(&self, applied: &[i64]) -> Result<Vec<Relayed>, StoreError>;

    /// The replicas whose lease has not expired, by start, each with (at most
    /// [`REPLICA_WORKERS_SHOWN`] of) the open workers it runs: the console's view (docs §14.1).
    async fn replicas(&self) -> Result<Vec<ReplicaInfo>, StoreError>;
}

/// How many of a replica's open workers [`SharedStore::replicas`] names.
pub const REPLICA_WORKERS_SHOWN: i64 = 200;

/// One live replica as [`SharedStore::replicas`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// Its id in the shared store.
    pub id: String,
    /// `replica.name`.
    pub name: String,
    /// When it started, its lease was last renewed and when that lease expires, in unix ms
    /// (the database's clock).
    pub started_ms: i64,
    /// See `started_ms`.
    pub renewed_ms: i64,
    /// See `started_ms`.
    pub expires_ms: i64,
    /// How many open workers it runs.
    pub open_workers: i64,
    /// Their ids, oldest first, at most [`REPLICA_WORKERS_SHOWN`].
    pub workers: Vec<String>,
}

/// A message sent to a worker (docs §12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `msg_` and 32 hex digits.
    pub id: String,
    /// The worker that holds it (a continuation takes over its predecessor's undelivered ones).
    pub worker_id: WorkerId,
    /// Its text.
    pub text: String,
    /// Delivered at once, interrupting the worker's in-flight request or tool call.
    pub interrupt: bool,
    /// The principal that sent it.
    pub caller_scope: String,
    /// The sender's idempotency key.
    pub request_id: Option<String>,
    /// When it was accepted, in unix milliseconds.
    pub time_ms: i64,
}

impl Message {
    /// A fresh message id.
    pub fn new_id() -> String {
        format!("msg_{}", uuid::Uuid::now_v7().simple())
    }

    /// The `data_json` of its `PROGRESS_KIND_MESSAGE` event once delivered (docs §12.2):
    /// `{"message_id", "delivery"}`.
    pub fn delivered_data(&self) -> serde_json::Value {
        let delivery = if self.interrupt { "interrupt" } else { "queue" };
        serde_json::json!({"message_id": self.id, "delivery": delivery})
    }
}

/// What [`WorkerStore::send_message`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Sent {
    /// In the worker's inbox; the worker as it is now.
    Queued(WorkerRecord),
    /// The worker is terminal or its inbox sealed: nothing was written; the worker as it is.
    Closed(WorkerRecord),
    /// The caller sent a message with this `request_id` already: that message.
    Duplicate(Message),
}

/// What [`WorkerStore::continue_worker`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Continued {
    /// The continuation was created: its creation event (its record counts its undelivered
    /// messages).
    Created(Box<WorkerEvent>),
    /// The worker already had this continuation; nothing was written.
    Already(WorkerId),
}

/// A runner worker waiting for a runner on any replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerWait {
    /// The worker.
    pub worker_id: WorkerId,
    /// The replica that runs it (its row's owner).
    pub owner: String,
    /// Its agent.
    pub agent: String,
    /// Its principal.
    pub caller_scope: String,
    /// When its timeout passes, in unix milliseconds.
    pub deadline_ms: i64,
}

/// A message relayed to a replica ([`SharedStore::relay`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relayed {
    /// Its place in the order of every relayed message (unique).
    pub seq: i64,
    /// The worker it is about.
    pub worker_id: WorkerId,
    /// Its text.
    pub message: String,
}

/// What [`SharedStore::renew_lease`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// Renewed in time.
    Renewed,
    /// Renewed, but it had expired first: sweepers elsewhere may have closed this replica's
    /// runs.
    Lapsed,
}

/// A wake-up sent by another process through the shared store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// An event with this sequence was committed for the worker.
    Event {
        /// The worker.
        worker_id: WorkerId,
        /// The sequence committed.
        sequence: u64,
        /// Whether this replica committed it (then it has already published the event to
        /// its own watchers and live record).
        by_this_replica: bool,
    },
    /// Someone asked the owner of this worker to stop it.
    Stop {
        /// The worker.
        worker_id: WorkerId,
    },
    /// A replica began or ended waiting for the worker (docs §9): its owner recounts the
    /// worker's holds.
    Holds {
        /// The worker.
        worker_id: WorkerId,
    },
    /// The listener (re)connected and may have missed notices, or a replica began announcing
    /// what it commits: re-read everything.
    Resync,
}

/// A wake-up about runners across replicas (docs §10), on its own channel
/// ([`SharedStore::runner_notices`]) so that the fleet's loop wakes only for these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunnerNotice {
    /// A runner worker was published for the runners of every replica: the wait itself when
    /// the notice carried it whole (a replica may claim it without reading the table), else
    /// `None` (read the waits).
    Wait(Option<RunnerWait>),
    /// Messages were relayed to this replica.
    Relay {
        /// The messages, when the notice carried them whole (the addressee applies them at
        /// once and deletes their rows later); `None`: take them from the store.
        relayed: Option<Vec<Relayed>>,
    },
    /// The listener (re)connected and may have missed notices: re-read the waits and the
    /// relays.
    Resync,
}

/// A caller of this replica following events ([`SharedStore::follow_events`]), counted
/// while it lives.
#[derive(Debug)]
pub struct Following(std::sync::Arc<tokio::sync::watch::Sender<usize>>);

impl Following {
    /// Counts one more follower on `followers`.
    pub fn new(followers: std::sync::Arc<tokio::sync::watch::Sender<usize>>) -> Self {
        followers.send_modify(|n| *n += 1);
        Self(followers)
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The store's notices for a caller following events (it holds a [`Following`] as long).
#[derive(Debug)]
pub struct Followed {
    notices: broadcast::Receiver<Notice>,
    _following: Following,
}

impl Followed {
    /// Subscribes to `store`'s notices, following events while the answer lives.
    pub fn on(store: &dyn SharedStore) -> Self {
        Self {
            _following: store.follow_events(),
            notices: store.notices(),
        }
    }

    /// The next notice, as [`broadcast::Receiver::recv`].
    pub async fn recv(&mut self) -> Result<Notice, broadcast::error::RecvError> {
        self.notices.recv().await
    }
}

/// Outcome fields to write together with a transition; `None` leaves the stored value unchanged,
/// so a kill does not erase a result already recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patch {
    /// The agent's output.
    pub result: Option<String>,
    /// The output as JSON text, when there was a schema.
    pub structured_result: Option<String>,
    /// Why it failed or was killed.
    pub error: Option<String>,
    /// The process exit code.
    pub exit_code: Option<i32>,
    /// Token usage (JSON text), from the model executor.
    pub usage: Option<String>,
    /// The worktree record (JSON text) once the worker ended.
    pub worktree: Option<String>,
    /// The question of a worker that asks its caller ([`Event::Ask`]); cleared by the store on
    /// any transition out of `input_required`.
    pub question: Option<String>,
    /// A new token's hash, for a worker that runs again after an answer ([`Event::Answer`]).
    pub token_hash: Option<String>,
    /// The session reference a runner returned with `finished` (docs §12.6).
    pub session_ref: Option<String>,
    /// The agent declined the task (docs §13.1).
    pub rejected: bool,
}

impl Patch {
    /// Overwrites the fields of `rec` that this patch sets.
    fn apply_to(self, rec: &mut WorkerRecord) {
        if self.rejected {
            rec.rejected = true;
        }
        if let Some(result) = self.result {
            rec.result = Some(result);
        }
        if let Some(structured) = self.structured_result {
            rec.structured_result = Some(structured);
        }
        if let Some(error) = self.error {
            rec.error = Some(error);
        }
        if let Some(code) = self.exit_code {
            rec.exit_code = Some(code);
        }
        if let Some(usage) = self.usage {
            rec.usage = Some(usage);
        }
        if let Some(worktree) = self.worktree {
            rec.worktree = Some(worktree);
        }
        if let Some(question) = self.question {
            rec.question = Some(question);
        }
        if let Some(hash) = self.token_hash {
            rec.token_hash = Some(hash);
        }
        if let Some(r) = self.session_ref {
            rec.session_ref = Some(r);
        }
    }
}

/// What [`WorkerStore::apply`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    /// The worker moved; this event was persisted and is ready to publish.
    Moved(WorkerEvent),
    /// A repeated stop on a killed worker; nothing was written, and this is the worker as it is.
    Absorbed(WorkerRecord),
}

impl Applied {
    /// The worker after the call, whichever way it went; what StopWorker returns.
    pub fn worker(&self) -> &WorkerRecord {
        match self {
            Applied::Moved(event) => &event.worker,
            Applied::Absorbed(worker) => worker,
        }
    }
}

/// Which parent the listed workers must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParentFilter {
    /// No filter: the whole audit log.
    Any,
    /// Only direct children of this worker.
    Worker(WorkerId),
}

/// A page request for [`WorkerStore::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    /// Which parent the workers must have.
    pub parent: ParentFilter,
    /// Allowed states; empty means every state.
    pub states: Vec<WorkerState>,
    /// Only workers of this caller scope (tenancy, docs §8.2); `None` lists every scope.
    pub caller_scope: Option<String>,
    /// Only workers of this A2A context (docs §13.3).
    pub context_id: Option<String>,
    /// Only workers of this agent.
    pub agent: Option<String>,
    /// Newest first (A2A `ListTasks`): the cursor then means strictly *before* it.
    pub newest_first: bool,
    /// Keyset cursor: only workers strictly after this `(create_time_ms, id)`, i.e. the last
    /// worker of the previous page. Stable while rows are added, unlike an offset.
    pub after: Option<(i64, WorkerId)>,
    /// At most this many workers; the caller bounds it (page size), 0 returns none.
    pub limit: usize,
}

/// Who holds the runner wait of a worker (docs/runners.md, across replicas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerClaim {
    /// The worker has no wait: not published, or already withdrawn.
    NoWait,
    /// Published and not claimed yet.
    Unclaimed,
    /// Claimed by replica `by`, whose lease is still live on the database clock (`live`) or
    /// has lapsed.
    Claimed {
        /// The claiming replica's id.
        by: String,
        /// Whether its lease is live.
        live: bool,
    },
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No worker has this id.
    #[error("worker {0} not found")]
    NotFound(WorkerId),
    /// The lifecycle refused the event; the gRPC layer maps this to FAILED_PRECONDITION.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// The caller already created a worker with this `request_id`; `existing` is that worker, so
    /// the caller can return it (idempotent retry) or refuse a changed request.
    #[error("request_id {request_id:?} was already used by this caller for worker {existing}")]
    DuplicateRequestId {
        /// The reused idempotency key.
        request_id: String,
        /// The worker created with it first.
        existing: WorkerId,
    },
    /// Another worker holds the dedupe claim a [`WorkerStore::create_claimed`] asked for;
    /// nothing was written.
    #[error("an identical dispatch holds the dedupe claim: worker {holder}")]
    DedupeHeld {
        /// The worker that holds the claim.
        holder: WorkerId,
    },
    /// PostgreSQL (or its connection pool) failed; `context` says what the store was doing.
    #[error("worker store: {context}: {message}")]
    Postgres {
        /// What the store was trying to do.
        context: String,
        /// The driver's error.
        message: String,
    },
    /// The connection to PostgreSQL was lost (the backend was terminated, the socket broke, the
    /// pool could not open a new one): retryable, and retried by the store itself until
    /// `replica.lease` has passed. The gRPC layer maps it to `UNAVAILABLE`.
    #[error("worker store unreachable: {context}: {message}")]
    Lost {
        /// What the store was trying to do.
        context: String,
        /// The driver's error.
        message: String,
    },
    /// The database could not be reached at start-up.
    #[error("worker store: cannot connect to {url}: {message}")]
    Unreachable {
        /// The URL, without its password.
        url: String,
        /// Why.
        message: String,
    },
    /// SQLite failed; `context` says what the store was doing.
    #[error("worker store: {context}: {source}")]
    Sqlite {
        /// What the store was trying to do.
        context: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The database file's directory could not be created.
    #[error("worker store: cannot create directory {}: {source}", path.display())]
    Io {
        /// The directory that could not be created.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Another process holds the store file: two services on one file would close each
    /// other's live workers as orphans, so the second one refuses to start.
    #[error(
        "worker store {} is in use by another agentry process ({holder}); \
         stop it or give this one another store.path",
        path.display()
    )]
    Locked {
        /// The store file.
        path: PathBuf,
        /// What the holder wrote into the lock file (pid, host, start time), or why it is
        /// unknown.
        holder: String,
    },
    /// Progress is only accepted from a running worker.
    #[error("worker {id} is {state}, not running")]
    NotRunning {
        /// The worker.
        id: WorkerId,
        /// Its state.
        state: WorkerState,
    },
    /// The worker's artifacts would pass their bound (docs §13.1).
    #[error(
        "the artifacts of worker {id} would be {size} bytes; a worker's artifacts are at most {max} bytes",
        max = crate::workers::artifacts::MAX_ARTIFACT_BYTES
    )]
    ArtifactsTooLarge {
        /// The worker.
        id: WorkerId,
        /// Their size with the chunk.
        size: usize,
    },
    /// The worker's event log is full (`limits.max_events_per_worker`).
    #[error("worker {id} already has {max} events (limits.max_events_per_worker)")]
    TooManyEvents {
        /// The worker.
        id: WorkerId,
        /// The bound.
        max: u64,
    },
    /// The worker's inbox is full (`workers.inbox_max`).
    #[error("worker {id} already has {max} undelivered messages (workers.inbox_max)")]
    InboxFull {
        /// The worker.
        id: WorkerId,
        /// The bound.
        max: u32,
    },
    /// The store's writer is gone (the service is shutting down, or the writer thread died).
    #[error("worker store is closed")]
    Closed,
    /// The transaction a write was grouped into failed to commit; nothing of it was kept.
    #[error("worker store: {what}: commit failed: {message}")]
    Commit {
        /// What the write was.
        what: &'static str,
        /// The backend's error.
        message: String,
    },
    /// A stored value could not be decoded (a bad state name, id or JSON); the file was changed
    /// by something other than this store.
    #[error("worker store is corrupt: {0}")]
    Corrupt(String),
    /// The file was written by a newer agentry; refusing it protects data this binary cannot
    /// read correctly.
    #[error(
        "worker store schema version {found} is newer than this binary supports (version {known}); \
         upgrade agentry or point it at another store"
    )]
    SchemaTooNew {
        /// The schema version found in the file.
        found: i64,
        /// The newest schema version this binary knows.
        known: i64,
    },
}
