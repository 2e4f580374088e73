//! Runners across replicas (docs/runners.md, "Runners across replicas"): a runner worker that
//! no runner of its own replica serves is published in the shared store; the replica of a
//! runner that can take it claims it (`FOR UPDATE SKIP LOCKED`, the worker's token rotated in
//! the same statement, since the store keeps only token hashes) and puts it in its own hub.
//! From then on the two replicas talk through the store: the claimer relays the runner's
//! `accepted`, `finished` and a lost runner to the owner, whose run future turns them into the
//! outcome exactly as for a local runner; the owner relays a stop (`cancel` with its reason).
//! Each relayed message is a row plus a `NOTIFY`, taken by its addressee; a one-second tick
//! takes them too, so a missed notice only delays. A replica hears of published waits only while
//! a runner is connected to it ([`RunnerHub::serving`]): nothing else would claim them.
//!
//! Liveness is the database's: a claim lives as long as the claiming replica's lease, which the
//! owner checks every second (a lost claimer fails the worker `runner lost: replica <id>
//! lost`); a claimer drops the workers whose rows ended (a lost owner's, closed by the
//! sweeper), cancelling them on their runner.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::sync::{
    broadcast::error::{RecvError, TryRecvError},
    mpsc,
};
use tokio_util::sync::CancellationToken;

use super::{Finish, RunEvent, RunnerHub};
use crate::workers::{
    executor::Assignment,
    model::{WorkerId, WorkerRecord, generate_token, hash_token},
    spec::WorkerSpec,
    store::{Relayed, RunnerClaim, RunnerNotice, RunnerWait, SharedStore, StoreError, WorkerStore},
};

/// How often waits are looked for and relays taken without a notice.
const TICK: Duration = Duration::from_secs(1);
/// How long an applied relayed message is remembered: far longer than a notice takes to arrive
/// after its row was committed (and taken).
const REMEMBER_APPLIED: Duration = Duration::from_secs(30);
/// Most waits read per look.
const WAITS_PER_LOOK: i64 = 64;
/// Most sequences of messages applied from notices that the next take is told of (so that it
/// does not return them again); past this, it returns them and they are skipped here.
const TOLD_PER_TAKE: usize = 65_536;

/// The relayed messages this replica applied.
#[derive(Default)]
struct Applied {
    /// Lately, by sequence, and when: one that both its notice and a take bring is applied once.
    lately: HashMap<i64, Instant>,
    /// Since the last take, from notices: their rows are still in the table, and the next take
    /// deletes them without returning them.
    since_take: Vec<i64>,
}

/// What one turn of the fleet's loop does, from the notices it was woken by.
#[derive(Default)]
struct Round {
    /// Read the waits and claim what this replica's runners can take.
    look: bool,
    /// Waits the notices carried, to claim without reading the table (when not `look`).
    waits: Vec<RunnerWait>,
    /// Take the messages relayed to this replica.
    take: bool,
    /// Messages to this replica that the notices carried, to apply without a read.
    relayed: Vec<Relayed>,
    /// Drop claimed workers whose rows ended elsewhere.
    drop_ended: bool,
}

impl Round {
    /// Adds what notice `n` asks for; a closed channel is dropped (the tick still serves). The
    /// runner notices hold only the relays addressed to this replica
    /// ([`SharedStore::runner_notices`]).
    fn note(
        &mut self,
        n: Result<RunnerNotice, RecvError>,
        notices: &mut Option<tokio::sync::broadcast::Receiver<RunnerNotice>>,
    ) {
        match n {
            Ok(RunnerNotice::Wait(Some(wait))) => self.waits.push(wait),
            Ok(RunnerNotice::Wait(None)) => self.look = true,
            Ok(RunnerNotice::Relay { relayed }) => match relayed {
                Some(relayed) => self.relayed.extend(relayed),
                None => self.take = true,
            },
            // Notices may have been missed: read everything.
            Ok(RunnerNotice::Resync) | Err(RecvError::Lagged(_)) => {
                self.look = true;
                self.take = true;
            }
            Err(RecvError::Closed) => *notices = None,
        }
    }
}

/// One replica's part in sharing runners with the others.
pub struct Fleet {
    /// The worker rows (a claimed worker's, to see it ended).
    store: Arc<dyn WorkerStore>,
    /// The same store as the replicas share it: waits, claims and relays.
    shared: Arc<dyn SharedStore>,
    hub: Arc<RunnerHub>,
    /// This replica's id in the store.
    me: String,
    /// Workers of this replica published to the fleet: where their relayed events go.
    owned: Mutex<HashMap<WorkerId, mpsc::UnboundedSender<RunEvent>>>,
    /// Workers this replica claimed for its runners: their owner replica.
    claimed: Mutex<HashMap<WorkerId, String>>,
    /// A claimed worker ended here, so a runner slot came free, and a wait was passed over
    /// for want of one: look for waits.
    slot_freed: tokio::sync::Notify,
    /// A look passed a wait over (no slot for it) or read a full page of them since the last
    /// look a freed slot asked for: only then is a freed slot worth a read of the waits.
    passed_over: AtomicBool,
    /// The relayed messages applied: lately, and since the last take.
    applied: Mutex<Applied>,
}

/// A relayed message, as JSON text.
fn message(kind: &str, extra: Value) -> String {
    let mut m = json!({"kind": kind});
    if let (Some(m), Value::Object(extra)) = (m.as_object_mut(), extra) {
        m.extend(extra);
    }
    m.to_string()
}

/// The claimer's last message about a worker (`finished`, `lost`), relayed with its wait
/// withdrawn in the same statement: it says so, and its owner then has nothing to withdraw.
fn last_message(kind: &str, mut extra: Value) -> String {
    if let Value::Object(m) = &mut extra {
        m.insert("withdrawn".to_owned(), Value::Bool(true));
    }
    message(kind, extra)
}

fn finish_json(f: &Finish) -> Value {
    match f {
        Finish::Completed { result } => json!({"completed": result}),
        Finish::Failed { error, exit_code } => json!({"failed": error, "exit_code": exit_code}),
        Finish::Canceled => json!({"canceled": true}),
        Finish::Rejected { reason } => json!({"rejected": reason}),
    }
}

fn finish_of(v: &Value) -> Finish {
    if let Some(r) = v.get("completed").and_then(Value::as_str) {
        return Finish::Completed {
            result: r.to_owned(),
        };
    }
    if let Some(r) = v.get("rejected").and_then(Value::as_str) {
        return Finish::Rejected {
            reason: r.to_owned(),
        };
    }
    if let Some(e) = v.get("failed").and_then(Value::as_str) {
        return Finish::Failed {
            error: e.to_owned(),
            exit_code: v
                .get("exit_code")
                .and_then(Value::as_i64)
                .and_then(|c| i32::try_from(c).ok()),
        };
    }
    Finish::Canceled
}

impl Fleet {
    /// The fleet of `store`, shared with other replicas as `shared` (its
    /// [`WorkerStore::shared`]).
    pub fn new(
        store: Arc<dyn WorkerStore>,
        shared: Arc<dyn SharedStore>,
        hub: Arc<RunnerHub>,
    ) -> Arc<Self> {
        let me = shared.replica_id().to_owned();
        Arc::new(Self {
            store,
            shared,
            hub,
            me,
            owned: Mutex::default(),
            claimed: Mutex::default(),
            slot_freed: tokio::sync::Notify::new(),
            passed_over: AtomicBool::new(false),
            applied: Mutex::default(),
        })
    }

    /// Whether the owner should publish: no runner of this replica serves the worker.
    pub fn should_publish(&self, agent: &str, scope: &str) -> bool {
        !self.hub.serves(agent, scope)
    }

    /// Publishes an owned worker; its relayed events arrive on `to_run`.
    pub async fn publish(
        &self,
        id: &WorkerId,
        assignment: &Assignment,
        deadline_ms: i64,
        to_run: mpsc::UnboundedSender<RunEvent>,
    ) -> Result<(), StoreError> {
        self.owned
            .lock()
            .expect("fleet poisoned")
            .insert(id.clone(), to_run);
        let wait = RunnerWait {
            worker_id: id.clone(),
            owner: self.me.clone(),
            agent: assignment.spec.agent.name.clone(),
            caller_scope: assignment.caller_scope.clone(),
            deadline_ms,
        };
        let r = self.shared.publish_runner_wait(&wait).await;
        if r.is_err() {
            self.owned.lock().expect("fleet poisoned").remove(id);
        }
        r
    }

    /// The owned worker's run ended: forget it. True when its wait may still be published
    /// (then [`Fleet::unpublish`] it); false when the claimer's last relay withdrew it.
    pub fn forget(&self, id: &WorkerId) -> bool {
        self.owned
            .lock()
            .expect("fleet poisoned")
            .remove(id)
            .is_some()
    }

    /// Withdraws the wait of an owned worker whose run ended, claimed or not.
    pub async fn unpublish(&self, id: &WorkerId) {
        if let Err(e) = self.shared.unpublish_runner_wait(id).await {
            tracing::warn!(worker = %id, error = %e, "cannot withdraw a runner wait");
        }
    }

    /// Withdraws an owned worker nobody claimed yet; true when it was still unclaimed.
    pub async fn withdraw_unclaimed(&self, id: &WorkerId) -> bool {
        self.shared
            .withdraw_unclaimed_wait(id)
            .await
            .unwrap_or(false)
    }

    /// Asks the replica that claimed an owned worker to cancel it on its runner.
    pub async fn cancel(&self, id: &WorkerId, reason: &str) -> bool {
        let Ok(RunnerClaim::Claimed { by, .. }) = self.shared.runner_claim(id).await else {
            return false;
        };
        let m = message("cancel", json!({"reason": reason}));
        self.shared.relay(&by, id, vec![m], false).await.is_ok()
    }

    /// The claim of an owned worker, when its claimer's lease has lapsed: that replica's id.
    pub async fn lost_claimer(&self, id: &WorkerId) -> Option<String> {
        match self.shared.runner_claim(id).await {
            Ok(RunnerClaim::Claimed { by, live: false }) => Some(by),
            _ => None,
        }
    }

    /// Runs the fleet's loop until `shutdown`.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        let fleet = self.clone();
        tokio::spawn(async move { fleet.run(shutdown).await });
    }

    async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut notices = Some(self.shared.runner_notices());
        // Waits are heard of only while a runner is here to take them; when one connects, the
        // store's notice that it listens again makes this loop read the waits.
        let mut serving = self.hub.serving();
        self.shared.listen_for_waits(*serving.borrow_and_update());
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut round = Round::default();
            tokio::select! {
                () = shutdown.cancelled() => return,
                Ok(()) = serving.changed() => {
                    self.shared.listen_for_waits(*serving.borrow_and_update());
                    continue;
                }
                () = self.slot_freed.notified() => round.look = true,
                _ = tick.tick() => {
                    round = Round { look: true, take: true, drop_ended: true, ..Round::default() };
                }
                n = async {
                    match notices.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => round.note(n, &mut notices),
            }
            // The notices that came meanwhile (a burst of publishes, the events of every
            // worker) are served by this one round.
            while let Some(n) = notices.as_mut().map(|rx| rx.try_recv()) {
                let n = match n {
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Lagged(k)) => Err(RecvError::Lagged(k)),
                    Err(TryRecvError::Closed) => Err(RecvError::Closed),
                    Ok(n) => Ok(n),
                };
                round.note(n, &mut notices);
            }
            // Taken first: a message carried by a notice is in order after the rows a take
            // returns, or among them (then applied once).
            if round.take {
                self.take().await;
            }
            for r in round.relayed {
                self.apply(r, false).await;
            }
            if round.look {
                self.claim(None).await;
            } else if !round.waits.is_empty() {
                self.claim(Some(round.waits)).await;
            }
            if round.drop_ended {
                self.drop_ended().await;
                self.applied
                    .lock()
                    .expect("fleet poisoned")
                    .lately
                    .retain(|_, at| at.elapsed() < REMEMBER_APPLIED);
            }
        }
    }

    /// Claims the waits this replica's runners can take, oldest first: `notified` ones (in the
    /// order their notices came), else those read from the store. Each claim is a round trip of
    /// its own, so they run at once; a wait is chosen only while its runners have a slot that
    /// neither a worker queued here nor a wait chosen before it in this look takes.
    async fn claim(self: &Arc<Self>, notified: Option<Vec<RunnerWait>>) {
        // No runner here: nothing to claim, and no query every tick.
        if self.hub.counts().0 == 0 {
            return;
        }
        let waits = match notified {
            Some(waits) => waits,
            None => match self.shared.runner_waits(WAITS_PER_LOOK).await {
                Ok(w) => {
                    if w.len() as i64 >= WAITS_PER_LOOK {
                        self.passed_over.store(true, Ordering::Relaxed);
                    }
                    w
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read runner waits");
                    return;
                }
            },
        };
        let mut chosen: HashMap<(String, String), usize> = HashMap::new();
        let mut claims = tokio::task::JoinSet::new();
        for wait in waits {
            let before = chosen
                .entry((wait.agent.clone(), wait.caller_scope.clone()))
                .or_default();
            if !self.hub.can_take(&wait.agent, &wait.caller_scope, *before) {
                self.passed_over.store(true, Ordering::Relaxed);
                continue;
            }
            *before += 1;
            let fleet = self.clone();
            claims.spawn(async move {
                let token = generate_token();
                match fleet
                    .shared
                    .claim_runner_wait(&wait.worker_id, &hash_token(&token))
                    .await
                {
                    Ok(Some(rec)) => fleet.take_on(wait, &rec, token),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(worker = %wait.worker_id, error = %e, "cannot claim a runner wait");
                    }
                }
            });
        }
        // Awaited whole: a claim the store committed always reaches the hub, shutdown or not.
        while claims.join_next().await.is_some() {}
    }

    /// A claimed worker (`rec`, as the claim returned it) goes into this replica's hub; its
    /// runner's events go to the owner, those that come together in one relay.
    fn take_on(self: &Arc<Self>, wait: RunnerWait, rec: &WorkerRecord, token: String) {
        let id = wait.worker_id.clone();
        // The row's token hash since this claim, relayed with `accepted` so the owner writes
        // the start against it.
        let rotated = rec.token_hash.clone();
        let s = &rec.spec;
        let eff = &s.effective;
        let assignment = Arc::new(Assignment {
            spec: WorkerSpec::new(
                id.as_str(),
                eff,
                &s.prompt,
                &s.description,
                s.workspace.as_deref(),
            )
            .with_a2a(s.a2a_message.as_deref()),
            worker_token: token,
            caller_scope: s.caller_scope.clone(),
            inherited_model: Vec::new(),
            plan: eff.mode == crate::resolve::Mode::Plan,
            at_max_depth: eff.at_max_depth,
            review: false,
            resume_from: None,
            interactive: false,
            mail: Default::default(),
            runner_resume: None,
            session_ref: Default::default(),
        });
        self.claimed
            .lock()
            .expect("fleet poisoned")
            .insert(id.clone(), wait.owner.clone());
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.hub
            .enqueue(id.clone(), assignment, wait.deadline_ms, tx);
        tracing::info!(worker = %id, owner = %wait.owner, "took a runner worker of another replica");
        let fleet = self.clone();
        tokio::spawn(async move {
            let mut last = false;
            while let Some(first) = rx.recv().await {
                let mut messages = Vec::new();
                let mut next = Some(first);
                while let Some(ev) = next.take() {
                    let (m, ends) = match &ev {
                        RunEvent::Accepted { .. } => {
                            (message("accepted", json!({ "token_hash": rotated })), false)
                        }
                        RunEvent::Finished(f) => (last_message("finished", finish_json(f)), true),
                        RunEvent::Lost(name) => {
                            (last_message("lost", json!({"runner": name})), true)
                        }
                    };
                    messages.push(m);
                    last = ends;
                    if !last {
                        next = rx.try_recv().ok();
                    }
                }
                if let Err(e) = fleet.shared.relay(&wait.owner, &id, messages, last).await {
                    tracing::warn!(worker = %id, error = %e, "cannot relay a runner event to the worker's replica");
                }
                if last {
                    break;
                }
            }
            fleet.hub.remove(&id, "the worker ended");
            fleet.claimed.lock().expect("fleet poisoned").remove(&id);
            // A slot came free: a published worker may be waiting for it, if one was passed
            // over (any other wait was claimed when its notice came; the tick looks anyway).
            if fleet.passed_over.swap(false, Ordering::Relaxed) {
                fleet.slot_freed.notify_one();
            }
        });
    }

    /// Takes the messages relayed to this replica and applies those its notices did not bring.
    async fn take(&self) {
        let told = std::mem::take(&mut self.applied.lock().expect("fleet poisoned").since_take);
        let relays = match self.shared.take_relays(&told).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot take relayed runner messages");
                // Their rows are still there: the next take is told of them again (nothing was
                // applied meanwhile: only this loop applies).
                self.applied.lock().expect("fleet poisoned").since_take = told;
                return;
            }
        };
        for r in relays {
            self.apply(r, true).await;
        }
    }

    /// Applies one message relayed to this replica (`taken` from the table, or carried by a
    /// notice), unless it was already.
    async fn apply(&self, r: Relayed, taken: bool) {
        {
            let mut applied = self.applied.lock().expect("fleet poisoned");
            if applied.lately.insert(r.seq, Instant::now()).is_some() {
                return;
            }
            if !taken && applied.since_take.len() < TOLD_PER_TAKE {
                applied.since_take.push(r.seq);
            }
        }
        let (id, text) = (r.worker_id, r.message);
        let Ok(m) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!(worker = %id, text, "an unreadable relayed runner message");
            return;
        };
        let kind = m.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind == "cancel" {
            let reason = m
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("stop requested");
            self.cancel_claimed(&id, reason).await;
            return;
        }
        let ev = match kind {
            "accepted" => RunEvent::Accepted {
                token_hash: m
                    .get("token_hash")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            "finished" => RunEvent::Finished(finish_of(&m)),
            "lost" => RunEvent::Lost(
                m.get("runner")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_owned(),
            ),
            _ => return,
        };
        // The claimer's last message withdrew the wait with it: nothing is left to withdraw.
        let withdrawn = m.get("withdrawn").and_then(Value::as_bool) == Some(true);
        let to = {
            let mut owned = self.owned.lock().expect("fleet poisoned");
            if withdrawn {
                owned.remove(&id)
            } else {
                owned.get(&id).cloned()
            }
        };
        if let Some(to) = to {
            let _ = to.send(ev);
        }
    }

    /// The owner stopped a worker this replica's runner holds: `cancel` it there; one that no
    /// runner had accepted yet ends at once as canceled.
    async fn cancel_claimed(&self, id: &WorkerId, reason: &str) {
        let owner = self
            .claimed
            .lock()
            .expect("fleet poisoned")
            .get(id)
            .cloned();
        let Some(owner) = owner else { return };
        if !self.hub.cancel(id, reason) {
            self.hub.remove(id, reason);
            self.claimed.lock().expect("fleet poisoned").remove(id);
            let m = last_message("finished", finish_json(&Finish::Canceled));
            let _ = self.shared.relay(&owner, id, vec![m], true).await;
        }
    }

    /// Drops the claimed workers whose rows ended elsewhere (a lost owner's, closed by the
    /// sweeper), cancelling them on their runner.
    async fn drop_ended(&self) {
        let ids: Vec<WorkerId> = self
            .claimed
            .lock()
            .expect("fleet poisoned")
            .keys()
            .cloned()
            .collect();
        for id in ids {
            if let Ok(Some(rec)) = self.store.get(&id).await
                && rec.state.is_terminal()
            {
                tracing::warn!(worker = %id, state = %rec.state, "a runner worker ended on its own replica; cancelling it here");
                self.hub.cancel(&id, "the worker ended on its replica");
                self.hub.remove(&id, "the worker ended on its replica");
                self.claimed.lock().expect("fleet poisoned").remove(&id);
            }
        }
    }
}
