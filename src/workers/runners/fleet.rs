//! Runners across replicas (docs/runners.md, "Runners across replicas"): a runner worker that
//! no runner of its own replica serves is published in the shared store; the replica of a
//! runner that can take it claims it (`FOR UPDATE SKIP LOCKED`, the worker's token rotated in
//! the same transaction, since the store keeps only token hashes) and puts it in its own hub.
//! From then on the two replicas talk through the store: the claimer relays the runner's
//! `accepted`, `finished` and a lost runner to the owner, whose run future turns them into the
//! outcome exactly as for a local runner; the owner relays a stop (`cancel` with its reason).
//! Each relayed message is a row plus a `NOTIFY`, taken by its addressee; a one-second tick
//! takes them too, so a missed notice only delays.
//!
//! Liveness is the database's: a claim lives as long as the claiming replica's lease, which the
//! owner checks every second (a lost claimer fails the worker `runner lost: replica <id>
//! lost`); a claimer drops the workers whose rows ended (a lost owner's, closed by the
//! sweeper), cancelling them on their runner.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_util::sync::CancellationToken;

use super::{Finish, RunEvent, RunnerHub};
use crate::workers::{
    executor::Assignment,
    model::{WorkerId, WorkerState, generate_token, hash_token},
    spec::WorkerSpec,
    store::{Notice, RunnerWait, StoreError, WorkerStore},
};

/// How often waits are looked for and relays taken without a notice.
const TICK: Duration = Duration::from_secs(1);
/// Most waits read per look.
const WAITS_PER_LOOK: i64 = 64;

/// One replica's part in sharing runners with the others.
pub struct Fleet {
    store: Arc<dyn WorkerStore>,
    hub: Arc<RunnerHub>,
    /// This replica's id in the store.
    me: String,
    /// Workers of this replica published to the fleet: where their relayed events go.
    owned: Mutex<HashMap<WorkerId, mpsc::UnboundedSender<RunEvent>>>,
    /// Workers this replica claimed for its runners: their owner replica.
    claimed: Mutex<HashMap<WorkerId, String>>,
    /// A claimed worker ended here, so a runner slot came free: look for waits.
    slot_freed: tokio::sync::Notify,
}

/// A relayed message, as JSON text.
fn message(kind: &str, extra: Value) -> String {
    let mut m = json!({"kind": kind});
    if let (Some(m), Value::Object(extra)) = (m.as_object_mut(), extra) {
        m.extend(extra);
    }
    m.to_string()
}

fn finish_json(f: &Finish) -> Value {
    match f {
        Finish::Completed { result } => json!({"completed": result}),
        Finish::Failed { error, exit_code } => json!({"failed": error, "exit_code": exit_code}),
        Finish::Canceled => json!({"canceled": true}),
    }
}

fn finish_of(v: &Value) -> Finish {
    if let Some(r) = v.get("completed").and_then(Value::as_str) {
        return Finish::Completed {
            result: r.to_owned(),
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
    /// The fleet of a shared store, or `None` for a store only this process uses.
    pub fn new(store: Arc<dyn WorkerStore>, hub: Arc<RunnerHub>) -> Option<Arc<Self>> {
        let me = store.replica_id()?.to_owned();
        Some(Arc::new(Self {
            store,
            hub,
            me,
            owned: Mutex::default(),
            claimed: Mutex::default(),
            slot_freed: tokio::sync::Notify::new(),
        }))
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
        let r = self.store.publish_runner_wait(&wait).await;
        if r.is_err() {
            self.owned.lock().expect("fleet poisoned").remove(id);
        }
        r
    }

    /// The owned worker's run ended: forget it and its wait.
    pub async fn unpublish(&self, id: &WorkerId) {
        self.owned.lock().expect("fleet poisoned").remove(id);
        if let Err(e) = self.store.withdraw_runner_wait(id, false).await {
            tracing::warn!(worker = %id, error = %e, "cannot withdraw a runner wait");
        }
    }

    /// Withdraws an owned worker nobody claimed yet; true when it was still unclaimed.
    pub async fn withdraw_unclaimed(&self, id: &WorkerId) -> bool {
        self.store
            .withdraw_runner_wait(id, true)
            .await
            .unwrap_or(false)
    }

    /// Asks the replica that claimed an owned worker to cancel it on its runner.
    pub async fn cancel(&self, id: &WorkerId, reason: &str) -> bool {
        let Ok(Some(Some((by, _)))) = self.store.runner_claim(id).await else {
            return false;
        };
        let m = message("cancel", json!({"reason": reason}));
        self.store.relay(&by, id, &m).await.is_ok()
    }

    /// The claim of an owned worker, when its claimer's lease has lapsed: that replica's id.
    pub async fn lost_claimer(&self, id: &WorkerId) -> Option<String> {
        match self.store.runner_claim(id).await {
            Ok(Some(Some((by, false)))) => Some(by),
            _ => None,
        }
    }

    /// Runs the fleet's loop until `shutdown`.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        let fleet = self.clone();
        tokio::spawn(async move { fleet.run(shutdown).await });
    }

    async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut notices = self.store.notices();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let notice = tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.slot_freed.notified() => Some(Ok(Notice::RunnerWait)),
                _ = tick.tick() => None,
                n = async {
                    match notices.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => Some(n),
            };
            match notice {
                Some(Ok(Notice::RunnerWait)) => self.claim().await,
                Some(Ok(Notice::Relay)) => self.take().await,
                Some(Ok(Notice::Resync) | Err(RecvError::Lagged(_))) | None => {
                    self.take().await;
                    self.claim().await;
                    if notice.is_none() {
                        self.drop_ended().await;
                    }
                }
                Some(Err(RecvError::Closed)) => notices = None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// Claims the waits this replica's runners can take, oldest first.
    async fn claim(self: &Arc<Self>) {
        // No runner here: nothing to claim, and no query every tick.
        if self.hub.counts().0 == 0 {
            return;
        }
        let waits = match self.store.runner_waits(WAITS_PER_LOOK).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read runner waits");
                return;
            }
        };
        for wait in waits {
            if !self.hub.can_take(&wait.agent, &wait.caller_scope) {
                continue;
            }
            let token = generate_token();
            match self
                .store
                .claim_runner_wait(&wait.worker_id, &hash_token(&token))
                .await
            {
                Ok(true) => self.take_on(wait, token).await,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(worker = %wait.worker_id, error = %e, "cannot claim a runner wait");
                }
            }
        }
    }

    /// A claimed worker goes into this replica's hub; its runner's events go to the owner.
    async fn take_on(self: &Arc<Self>, wait: RunnerWait, token: String) {
        let id = wait.worker_id.clone();
        let rec = match self.store.get(&id).await {
            Ok(Some(rec)) if rec.state == WorkerState::Pending => rec,
            other => {
                tracing::warn!(worker = %id, found = ?other.map(|r| r.map(|r| r.state)), "a claimed runner wait has no pending worker");
                let _ = self.store.withdraw_runner_wait(&id, false).await;
                return;
            }
        };
        let s = &rec.spec;
        let eff = &s.effective;
        let assignment = Arc::new(Assignment {
            spec: WorkerSpec::new(
                id.as_str(),
                eff,
                &s.prompt,
                &s.description,
                s.workspace.as_deref(),
            ),
            worker_token: token,
            caller_scope: s.caller_scope.clone(),
            inherited_model: Vec::new(),
            plan: eff.mode == crate::resolve::Mode::Plan,
            at_max_depth: eff.at_max_depth,
            review: false,
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
            while let Some(ev) = rx.recv().await {
                let (m, last) = match &ev {
                    RunEvent::Accepted => (message("accepted", json!({})), false),
                    RunEvent::Finished(f) => (message("finished", finish_json(f)), true),
                    RunEvent::Lost(name) => (message("lost", json!({"runner": name})), true),
                };
                if let Err(e) = fleet.store.relay(&wait.owner, &id, &m).await {
                    tracing::warn!(worker = %id, error = %e, "cannot relay a runner event to the worker's replica");
                }
                if last {
                    break;
                }
            }
            fleet.hub.remove(&id, "the worker ended");
            fleet.claimed.lock().expect("fleet poisoned").remove(&id);
            // A slot came free: a published worker may be waiting for it.
            fleet.slot_freed.notify_one();
        });
    }

    /// Takes the messages relayed to this replica and applies them.
    async fn take(&self) {
        let relays = match self.store.take_relays().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot take relayed runner messages");
                return;
            }
        };
        for (id, text) in relays {
            let Ok(m) = serde_json::from_str::<Value>(&text) else {
                tracing::warn!(worker = %id, text, "an unreadable relayed runner message");
                continue;
            };
            let kind = m.get("kind").and_then(Value::as_str).unwrap_or_default();
            if kind == "cancel" {
                let reason = m
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("stop requested");
                self.cancel_claimed(&id, reason).await;
                continue;
            }
            let ev = match kind {
                "accepted" => RunEvent::Accepted,
                "finished" => RunEvent::Finished(finish_of(&m)),
                "lost" => RunEvent::Lost(
                    m.get("runner")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown")
                        .to_owned(),
                ),
                _ => continue,
            };
            let to = self.owned.lock().expect("fleet poisoned").get(&id).cloned();
            if let Some(to) = to {
                let _ = to.send(ev);
            }
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
            let m = message("finished", finish_json(&Finish::Canceled));
            let _ = self.store.relay(&owner, id, &m).await;
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
