//! The `runner` executor (docs/runners.md): a worker's run is an entry in the [`RunnerHub`]
//! that a connected runner accepts, reports on and finishes. This future is the only thing that
//! turns those events into an [`Outcome`], so the supervisor records exactly one ending per
//! worker whatever the runner does.
//!
//! Must not depend on tonic or the store.

use std::{sync::Arc, time::Duration};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{BoxFuture, Executor, Job, Outcome, Started};
use crate::workers::{
    model::WorkerId,
    runners::{Finish, RunEvent, RunnerHub, fleet::Fleet},
    supervisor::{now_ms, seconds},
};

/// Runs workers on connected runners: of this replica, or, on a shared store, of any replica
/// (through the [`Fleet`]).
pub struct RunnerExecutor {
    hub: Arc<RunnerHub>,
    fleet: Option<Arc<Fleet>>,
}

impl RunnerExecutor {
    /// An executor over `hub`, sharing runners with other replicas through `fleet` when given.
    pub fn new(hub: Arc<RunnerHub>, fleet: Option<Arc<Fleet>>) -> Self {
        Self { hub, fleet }
    }
}

/// Where a worker waits for its runner, and what undoes that however its run future ends (also
/// when it is dropped).
enum Placed {
    /// In this replica's hub.
    Hub(Arc<RunnerHub>),
    /// Published to the runners of every replica.
    Fleet(Arc<Fleet>),
}

/// The worker's place, left when the run future ends.
struct Place {
    placed: Placed,
    id: WorkerId,
}

impl Drop for Place {
    fn drop(&mut self) {
        match &self.placed {
            Placed::Hub(hub) => hub.remove(&self.id, "the worker ended"),
            // Unless the claimer's last relay withdrew the wait already.
            Placed::Fleet(fleet) if fleet.forget(&self.id) => {
                let (fleet, id) = (fleet.clone(), self.id.clone());
                tokio::spawn(async move { fleet.unpublish(&id).await });
            }
            Placed::Fleet(_) => {}
        }
    }
}

impl Place {
    /// Asks for a stop: `cancel` to the runner that holds the worker (through its claiming
    /// replica for a published one); a worker no runner took is withdrawn. True when a runner
    /// had it, so its `finished` is worth waiting for.
    async fn cancel(&self, reason: &str) -> bool {
        match &self.placed {
            Placed::Hub(hub) => hub.cancel(&self.id, reason),
            Placed::Fleet(fleet) => {
                !fleet.withdraw_unclaimed(&self.id).await && fleet.cancel(&self.id, reason).await
            }
        }
    }

    /// At the deadline of a worker never accepted: withdraws it if no runner took it meanwhile.
    async fn withdraw_unstarted(&self) -> bool {
        match &self.placed {
            // The hub's entry goes with this place.
            Placed::Hub(_) => true,
            Placed::Fleet(fleet) => fleet.withdraw_unclaimed(&self.id).await,
        }
    }

    /// For a published worker: the claiming replica, once its lease has lapsed.
    async fn lost_claimer(&self) -> Option<String> {
        match &self.placed {
            Placed::Hub(_) => None,
            Placed::Fleet(fleet) => fleet.lost_claimer(&self.id).await,
        }
    }

    /// What the worker's events stopped coming from, for the error.
    fn source(&self) -> &'static str {
        match &self.placed {
            Placed::Hub(_) => "the runner hub",
            Placed::Fleet(_) => "the fleet",
        }
    }
}

fn failed(reason: String, exit_code: Option<i32>) -> Outcome {
    Outcome::Failed {
        exit_code,
        signal: None,
        stderr_tail: String::new(),
        reason,
    }
}

/// The outcome of a runner's `finished` that was not asked for by a stop.
fn outcome(f: Finish, runner_canceled: &str) -> Outcome {
    match f {
        Finish::Completed { result } => Outcome::Completed { stdout: result },
        Finish::Failed { error, exit_code } => failed(error, exit_code),
        Finish::Canceled => failed(runner_canceled.to_owned(), None),
        Finish::Rejected { reason } => Outcome::Rejected { reason },
    }
}

/// Sends `cancel` for the worker at `place` and waits, at most `grace`, for its `finished` (or
/// its loss) when a runner had it.
async fn stop(
    place: &Place,
    rx: &mut mpsc::UnboundedReceiver<RunEvent>,
    reason: &str,
    grace: Duration,
) {
    if !place.cancel(reason).await {
        return;
    }
    let _ = tokio::time::timeout(grace, async {
        while let Some(ev) = rx.recv().await {
            if matches!(ev, RunEvent::Finished(_) | RunEvent::Lost(_)) {
                return;
            }
        }
    })
    .await;
}

/// How often a published worker's claiming replica is checked for a lapsed lease.
const CLAIMER_CHECK: Duration = Duration::from_secs(1);

/// Turns the events of a placed worker into its outcome, handling stop, timeout and (for a
/// published worker) a lost claiming replica.
async fn follow(
    place: Place,
    mut rx: mpsc::UnboundedReceiver<RunEvent>,
    job: Job,
    agent: String,
    cancel: CancellationToken,
    started: oneshot::Sender<Started>,
) -> Outcome {
    let timeout = job.timeout;
    let expiry = tokio::time::sleep(timeout);
    tokio::pin!(expiry);
    // The first check a second in: a claimer just found is not lost (no read at the start).
    let mut check =
        tokio::time::interval_at(tokio::time::Instant::now() + CLAIMER_CHECK, CLAIMER_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut started = Some(started);
    loop {
        tokio::select! {
            biased;
            ev = rx.recv() => match ev {
                Some(RunEvent::Accepted { token_hash }) => {
                    if let Some(hash) = token_hash {
                        let _ = job.rotated_token.set(hash);
                    }
                    if let Some(s) = started.take() {
                        let _ = s.send(Started::Elsewhere);
                    }
                }
                Some(RunEvent::Finished(f)) => {
                    return outcome(f, "canceled by the runner without a stop request");
                }
                Some(RunEvent::Lost(name)) => return failed(format!("runner lost: {name}"), None),
                None => return failed(format!("{} dropped the worker", place.source()), None),
            },
            () = cancel.cancelled() => {
                // The StopWorker reason when a stop gave one (shutdown and a caller leaving give
                // none).
                let reason = job.stop_reason.get().unwrap_or_else(|| "stop requested".to_owned());
                stop(&place, &mut rx, &reason, job.kill_grace).await;
                return Outcome::Killed;
            }
            () = &mut expiry => {
                if started.is_some() && place.withdraw_unstarted().await {
                    return Outcome::CouldNotStart {
                        reason: format!("no runner served agent {agent} within {}", seconds(timeout)),
                    };
                }
                let reason = format!("timed out after {}", seconds(timeout));
                stop(&place, &mut rx, &reason, job.kill_grace).await;
                return Outcome::TimedOut { after: timeout, stderr_tail: String::new() };
            }
            _ = check.tick() => {
                if let Some(by) = place.lost_claimer().await {
                    return failed(format!("runner lost: replica {by} lost"), None);
                }
            }
        }
    }
}

impl Executor for RunnerExecutor {
    fn messages(
        &self,
        _agent: &str,
        worker: &crate::workers::model::WorkerRecord,
    ) -> Result<(), (&'static str, String)> {
        let refused = |why: String| ("MESSAGES_UNSUPPORTED", why);
        if worker.state.is_terminal() {
            // A continuation is assigned with the runner's own session (capability `resume`).
            return match worker.session_ref {
                Some(_) => Ok(()),
                None => Err(refused(format!(
                    "worker {} ended without a session_ref: its runner cannot resume it",
                    worker.id
                ))),
            };
        }
        self.hub.takes_messages(&worker.id).map_err(refused)
    }

    fn deliver(&self, _agent: &str, worker_id: &str, message: &crate::workers::store::Message) {
        if let Ok(id) = WorkerId::parse(worker_id)
            && let Err(why) = self
                .hub
                .message(&id, &message.id, &message.text, message.interrupt)
        {
            // It stays in the inbox: a continuation or the next send finds it.
            tracing::warn!(worker = %id, error = %why, "message not handed to the runner");
        }
    }

    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> BoxFuture<'static, Outcome> {
        let hub = self.hub.clone();
        let fleet = self.fleet.clone();
        Box::pin(async move {
            let (Some(assignment), Ok(id)) =
                (job.assignment.clone(), WorkerId::parse(&job.worker_id))
            else {
                return Outcome::CouldNotStart {
                    reason: "the runner executor needs the worker's assignment".to_owned(),
                };
            };
            if cancel.is_cancelled() {
                return Outcome::Killed;
            }
            let agent = assignment.spec.agent.name.clone();
            let deadline_ms =
                now_ms().saturating_add(i64::try_from(job.timeout.as_millis()).unwrap_or(i64::MAX));
            let (tx, rx) = mpsc::unbounded_channel();
            // Local first; a worker no runner of this replica serves goes to the fleet (docs
            // /runners.md, "Runners across replicas").
            let placed = match fleet.filter(|f| f.should_publish(&agent, &assignment.caller_scope))
            {
                Some(fleet) => {
                    if let Err(e) = fleet.publish(&id, &assignment, deadline_ms, tx).await {
                        return Outcome::CouldNotStart {
                            reason: format!(
                                "cannot offer the worker to the runners of other replicas: {e}"
                            ),
                        };
                    }
                    Placed::Fleet(fleet)
                }
                None => {
                    hub.enqueue(id.clone(), assignment, deadline_ms, tx);
                    Placed::Hub(hub)
                }
            };
            follow(Place { placed, id }, rx, job, agent, cancel, started).await
        })
    }
}
