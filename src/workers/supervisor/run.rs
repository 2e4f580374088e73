//! Running one worker (docs/workers.md §6.2): wait for a run slot, run the executor, persist
//! `running` when it starts, settle the outcome ([`super::outcome`]) and persist the terminal
//! transition — on every path, a panic of the run included, so no row stays open.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{
    Supervisor, WorkerError, now_ms,
    outcome::{self, OutputRule},
};
use crate::workers::{
    executor::{Job, Started},
    lifecycle::Event,
    model::{WorkerEvent, WorkerId, WorkerRecord, WorkerState},
    store::{Applied, Patch, StoreError},
    worktree::{self, Worktree},
};

/// How often an outcome the store could not record (its database away for longer than
/// `replica.lease`) is tried again.
const OUTCOME_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// One transition counted among the supervisor's unrecorded outcomes while it is held.
struct Unrecorded<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Unrecorded<'a> {
    fn count(n: &'a std::sync::atomic::AtomicUsize) -> Self {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for Unrecorded<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the run task of one worker holds.
pub(super) struct RunCtx {
    /// The worker.
    pub(super) id: WorkerId,
    /// What its output must satisfy.
    pub(super) output: OutputRule,
    /// Its stop request.
    pub(super) cancel: CancellationToken,
    /// Where its transitions are published.
    pub(super) events: broadcast::Sender<WorkerEvent>,
    /// Receives the final record.
    pub(super) done: watch::Sender<Option<WorkerRecord>>,
    /// Its place among the workers waiting for a run slot (`limits.max_pending`), given back
    /// once it starts or, at the latest, when the run ends.
    pub(super) pending: Option<OwnedSemaphorePermit>,
    /// The worker is already `running` (an answered question, docs §12.4): its start is not
    /// recorded again.
    pub(super) resumed: bool,
}

impl Supervisor {
    /// Runs one worker to a terminal state; every path closes the row.
    pub(super) async fn drive(self: Arc<Self>, mut ctx: RunCtx, job: Job) {
        let id = ctx.id.clone();
        let inner = {
            let this = self.clone();
            let (id, output, cancel, events) = (
                ctx.id.clone(),
                ctx.output.clone(),
                ctx.cancel.clone(),
                ctx.events.clone(),
            );
            let pending = ctx.pending.take();
            let resumed = ctx.resumed;
            tokio::spawn(tracing::Instrument::instrument(
                async move {
                    this.run_once(&id, &output, &cancel, &events, pending, resumed, job)
                        .await
                },
                tracing::Span::current(),
            ))
        };
        let (event, patch, held) = match inner.await {
            Ok(settled) => settled,
            Err(e) => {
                tracing::error!(worker = %id, error = %e, "worker task panicked");
                (
                    Event::Fail,
                    Patch {
                        error: Some(format!("executor panicked: {e}")),
                        ..Patch::default()
                    },
                    None,
                )
            }
        };
        let rec = match self
            .settle_outcome(&id, &ctx.events, event, patch, held)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                // Never leave the row open: close it as failed, saying why.
                tracing::error!(worker = %id, error = %e, "cannot record the final transition");
                let close = Patch {
                    error: Some(format!("internal error recording the outcome: {e}")),
                    ..Patch::default()
                };
                match self.transition(&id, &ctx.events, Event::Fail, close).await {
                    Ok(rec) => rec,
                    Err(_) => match self.store.get(&id).await {
                        Ok(Some(rec)) => rec,
                        _ => self.cached(&id).expect("live worker"),
                    },
                }
            }
        };
        tracing::Span::current().record("outcome", rec.state.as_str());
        self.metrics
            .worker_spawned(&rec.spec.agent, rec.state.as_str());
        let asked = rec.state == WorkerState::InputRequired;
        // A worker waiting for an answer keeps nothing here beyond its row (docs §12.4): it is
        // read from the store until it runs again.
        if !asked {
            self.recent.insert(id.clone(), rec.clone());
        }
        self.live().remove(&id);
        tracing::info!(worker = %id, agent = %rec.spec.agent, state = %rec.state, error = ?rec.error, "worker finished");
        let _ = ctx.done.send(Some(rec));
        if asked {
            // A message that came in while it was asking is its answer (docs §12.4).
            self.clone().answer_if_waiting(id).await;
        }
    }

    /// Records the run's outcome. A start held for it (`held`, the time the run started) is
    /// written with it, in one write. A completion (or a question) needs `running`, which may
    /// never have been written (the database was away when the run started, longer than the
    /// store retries): the live record, still `pending`, says so, and the start is recorded
    /// first.
    async fn settle_outcome(
        &self,
        id: &WorkerId,
        events: &broadcast::Sender<WorkerEvent>,
        event: Event,
        patch: Patch,
        held: Option<i64>,
    ) -> Result<WorkerRecord, WorkerError> {
        if let Some(started_ms) = held {
            let known = self.live().get(id).map(|l| l.record.clone());
            if let Some(known) = known.filter(|r| r.state == WorkerState::Pending) {
                return self
                    .until_stored(id, event, || {
                        self.transition_started(&known, events, started_ms, event, patch.clone())
                    })
                    .await;
            }
        }
        let unstarted = self
            .live()
            .get(id)
            .is_some_and(|l| l.record.state == WorkerState::Pending);
        // A runner's worker that asked and was not answered ends from `input_required`: it runs
        // again first, so its end is recorded from `running` (docs §12.6).
        let waiting = self
            .live()
            .get(id)
            .is_some_and(|l| l.record.state == WorkerState::InputRequired);
        if waiting
            && matches!(event, Event::Complete | Event::Ask)
            && let Err(e) = self
                .record_until_stored(id, events, Event::Answer, Patch::default())
                .await
        {
            tracing::error!(worker = %id, error = %e, "cannot record the end of a wait");
        }
        if matches!(event, Event::Complete | Event::Ask)
            && unstarted
            && let Err(e) = self
                .record_until_stored(id, events, Event::Start, Patch::default())
                .await
        {
            tracing::error!(worker = %id, error = %e, "cannot record the late start");
        }
        self.record_until_stored(id, events, event, patch).await
    }

    /// A transition the run must not lose (see [`until_stored`](Self::until_stored)).
    async fn record_until_stored(
        &self,
        id: &WorkerId,
        events: &broadcast::Sender<WorkerEvent>,
        event: Event,
        patch: Patch,
    ) -> Result<WorkerRecord, WorkerError> {
        self.until_stored(id, event, || {
            self.transition(id, events, event, patch.clone())
        })
        .await
    }

    /// Tries `attempt` (recording `event` of worker `id`) until it lands. The store retries a
    /// lost connection for `replica.lease`; past that it is tried again every
    /// [`OUTCOME_RETRY`] until it lands — a result is never traded for "internal error"
    /// because the database was away — or until the row is found closed by someone else (the
    /// lease sweeper of another replica, once this one's lease ran out), whose record is then
    /// the worker's. Meanwhile it counts among the unrecorded outcomes (health NOT_SERVING, no
    /// spawns), and waiters keep waiting: `wait=true` never returns a worker that is not
    /// terminal.
    async fn until_stored<F, Fut>(
        &self,
        id: &WorkerId,
        event: Event,
        mut attempt: F,
    ) -> Result<WorkerRecord, WorkerError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<WorkerRecord, WorkerError>>,
    {
        let mut _backlog: Option<Unrecorded<'_>> = None;
        loop {
            match attempt().await {
                Err(WorkerError::Store(e @ StoreError::Lost { .. })) => {
                    tracing::error!(worker = %id, error = %e, event = %event, "cannot record the transition yet; trying again");
                    _backlog.get_or_insert_with(|| Unrecorded::count(&self.unrecorded));
                    tokio::time::sleep(OUTCOME_RETRY).await;
                    if let Ok(Some(rec)) = self.store.get(id).await
                        && rec.state.is_terminal()
                    {
                        return Ok(rec);
                    }
                }
                other => return other,
            }
        }
    }

    /// Waits for a run slot, runs the executor, and settles the outcome. Persists `running`
    /// when the executor says the worker started, and gives its pending place back then. The
    /// start of a process this host started is held up to `executor.start_hold` for the
    /// process's end (docs/workers.md §6.2, "A start written with its end": a worker that ends
    /// within it costs the store one write instead of two): when the end comes first, the
    /// start is left to be written with it, and its time is returned.
    #[allow(clippy::too_many_arguments)]
    async fn run_once(
        &self,
        id: &WorkerId,
        output: &OutputRule,
        cancel: &CancellationToken,
        events: &broadcast::Sender<WorkerEvent>,
        mut pending: Option<OwnedSemaphorePermit>,
        resumed: bool,
        job: Job,
    ) -> (Event, Patch, Option<i64>) {
        let slot = tokio::select! {
            p = self.slots.clone().acquire_owned() => p.expect("slots never closed"),
            () = cancel.cancelled() => {
                let kill = Patch { error: Some(self.kill_reason(id)), ..Patch::default() };
                return (Event::Kill, kill, None);
            }
        };
        let (started_tx, started_rx) = oneshot::channel();
        let meter = job.meter.clone();
        let session_ref = job.assignment.as_ref().map(|a| a.session_ref.clone());
        let rotated = job.rotated_token.clone();
        let ran = CancellationToken::new();
        let run = async {
            let outcome = self.executor.run(job, cancel.clone(), started_tx).await;
            ran.cancel();
            outcome
        };
        // `running` is persisted while the executor goes on (its commit overlaps the run instead
        // of delaying it), and before the outcome is: both futures end before this returns, and
        // the executor drops its sender at the latest when the run ends.
        let start = async {
            let how = started_rx.await.ok()?;
            // A runner's replica claimed the worker and rotated its token: the row has that
            // hash now, and the start is written against the row as it is.
            if let Some(hash) = rotated.get()
                && let Some(l) = self.live().get_mut(id)
                && l.record.state == WorkerState::Pending
            {
                l.record.token_hash = Some(hash.clone());
            }
            drop(pending.take());
            if resumed {
                return None;
            }
            if how == Started::Process
                && let Some(started_ms) = self.hold_start(id, &ran).await
            {
                return Some(started_ms);
            }
            self.record_start(id, events).await;
            None
        };
        let (outcome, held) = tokio::join!(run, start);
        drop(slot);
        let (event, mut patch) = outcome::settle(outcome, output, || self.kill_reason(id));
        patch.usage = meter.to_json();
        patch.session_ref = session_ref.and_then(|s| s.get());
        // Nothing of the run is left: its worktree is removed, or kept when it changed.
        let recorded = self.live().get(id).and_then(|l| l.record.worktree.clone());
        if let Some(w) = recorded.and_then(|t| serde_json::from_str::<Worktree>(&t).ok()) {
            let done = worktree::finish(w).await;
            patch.worktree = serde_json::to_string(&done).ok();
        }
        (event, patch, held)
    }

    /// Holds the start of worker `id`'s process up to `executor.start_hold`: the time it
    /// started when the run ended first (`ran`), so the start is to be written with the end;
    /// `None` when the hold passed, a progress report asked for the start
    /// ([`Live::held_start`](super::Live)), or there is no hold.
    async fn hold_start(&self, id: &WorkerId, ran: &CancellationToken) -> Option<i64> {
        if self.settings.start_hold.is_zero() {
            return None;
        }
        let started_ms = now_ms();
        let start_now = Arc::new(tokio::sync::Notify::new());
        self.live().get_mut(id)?.held_start = Some(start_now.clone());
        let ended = tokio::select! {
            biased;
            () = ran.cancelled() => true,
            () = start_now.notified() => false,
            () = tokio::time::sleep(self.settings.start_hold) => false,
        };
        if let Some(l) = self.live().get_mut(id) {
            l.held_start = None;
        }
        ended.then_some(started_ms)
    }

    /// The executor started the worker: it is persisted `running`.
    async fn record_start(&self, id: &WorkerId, events: &broadcast::Sender<WorkerEvent>) {
        if let Err(e) = self
            .transition(id, events, Event::Start, Patch::default())
            .await
        {
            tracing::error!(worker = %id, error = %e, "cannot record start");
        }
    }

    /// Why a killed worker was stopped: the StopWorker reason, shutdown, or its caller leaving.
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

    /// Persists the start of a run (at `started_ms`) and its end together
    /// (`WorkerStore::apply_started`), then publishes both, in order, as
    /// [`transition`](Self::transition) does one.
    async fn transition_started(
        &self,
        known: &WorkerRecord,
        events: &broadcast::Sender<WorkerEvent>,
        started_ms: i64,
        event: Event,
        patch: Patch,
    ) -> Result<WorkerRecord, WorkerError> {
        let (start, ended) = self
            .store
            .apply_started(known, started_ms, event, patch, now_ms())
            .await?;
        if let Some(start) = start {
            self.publish(&known.id, events, start);
        }
        Ok(self.published(&known.id, events, ended))
    }

    /// Persists a transition, then publishes it and updates the live record.
    pub(super) async fn transition(
        &self,
        id: &WorkerId,
        events: &broadcast::Sender<WorkerEvent>,
        event: Event,
        patch: Patch,
    ) -> Result<WorkerRecord, WorkerError> {
        // The live record is the row as this process last wrote it: the store may write
        // against it without reading the row first (a compare-and-set catches a row that moved).
        let known = self.live().get(id).map(|l| l.record.clone());
        let applied = match known {
            Some(known) => {
                self.store
                    .apply_from(&known, event, patch, now_ms())
                    .await?
            }
            None => self.store.apply(id, event, patch, now_ms()).await?,
        };
        Ok(self.published(id, events, applied))
    }

    /// The worker after `applied`: a move is published first.
    fn published(
        &self,
        id: &WorkerId,
        events: &broadcast::Sender<WorkerEvent>,
        applied: Applied,
    ) -> WorkerRecord {
        match applied {
            Applied::Moved(ev) => {
                let rec = ev.worker.clone();
                self.publish(id, events, ev);
                rec
            }
            Applied::Absorbed(rec) => rec,
        }
    }

    /// A persisted transition of a live worker: its live record and the metrics move on, and
    /// the event goes to its followers and watchers.
    fn publish(&self, id: &WorkerId, events: &broadcast::Sender<WorkerEvent>, ev: WorkerEvent) {
        if let Some(l) = self.live().get_mut(id) {
            self.metrics
                .worker_state(Some(l.record.state.as_str()), ev.worker.state.as_str());
            l.record = ev.worker.clone();
        }
        self.announce(&ev);
        let _ = events.send(ev);
    }
}
