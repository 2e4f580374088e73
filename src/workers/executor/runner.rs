//! The `runner` executor (docs/runners.md): a worker's run is an entry in the [`RunnerHub`]
//! that a connected runner accepts, reports on and finishes. This future is the only thing that
//! turns those events into an [`Outcome`], so the supervisor records exactly one ending per
//! worker whatever the runner does.
//!
//! Must not depend on tonic or the store.

use std::{sync::Arc, time::Duration};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{BoxFuture, Executor, Job, Outcome};
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

/// Forgets a worker published to the fleet however its run future ends.
struct Published {
    fleet: Arc<Fleet>,
    id: WorkerId,
}

impl Drop for Published {
    fn drop(&mut self) {
        let (fleet, id) = (self.fleet.clone(), self.id.clone());
        tokio::spawn(async move { fleet.unpublish(&id).await });
    }
}

/// Asks the claiming replica to cancel a published worker and waits, at most `grace`, for its
/// `finished` (or its loss); one nobody claimed is simply withdrawn.
async fn stop_in_fleet(
    fleet: &Fleet,
    id: &WorkerId,
    rx: &mut mpsc::UnboundedReceiver<RunEvent>,
    reason: &str,
    grace: Duration,
) {
    if fleet.withdraw_unclaimed(id).await || !fleet.cancel(id, reason).await {
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

/// The run of a worker no runner of this replica serves, on a runner of another (docs/runners.md,
/// "Runners across replicas").
async fn run_in_fleet(
    fleet: Arc<Fleet>,
    job: Job,
    assignment: Arc<super::Assignment>,
    id: WorkerId,
    cancel: CancellationToken,
    started: oneshot::Sender<()>,
) -> Outcome {
    let agent = assignment.spec.agent.name.clone();
    let timeout = job.timeout;
    let deadline_ms =
        now_ms().saturating_add(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX));
    let (tx, mut rx) = mpsc::unbounded_channel();
    if let Err(e) = fleet.publish(&id, &assignment, deadline_ms, tx).await {
        return Outcome::CouldNotStart {
            reason: format!("cannot offer the worker to the runners of other replicas: {e}"),
        };
    }
    let _published = Published {
        fleet: fleet.clone(),
        id: id.clone(),
    };
    let expiry = tokio::time::sleep(timeout);
    tokio::pin!(expiry);
    let mut check = tokio::time::interval(Duration::from_secs(1));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut started = Some(started);
    loop {
        tokio::select! {
            biased;
            ev = rx.recv() => match ev {
                Some(RunEvent::Accepted) => {
                    if let Some(s) = started.take() {
                        let _ = s.send(());
                    }
                }
                Some(RunEvent::Finished(f)) => {
                    return outcome(f, "canceled by the runner without a stop request");
                }
                Some(RunEvent::Lost(name)) => return failed(format!("runner lost: {name}"), None),
                None => return failed("the fleet dropped the worker".to_owned(), None),
            },
            () = cancel.cancelled() => {
                let reason = job.stop_reason.get().unwrap_or_else(|| "stop requested".to_owned());
                stop_in_fleet(&fleet, &id, &mut rx, &reason, job.kill_grace).await;
                return Outcome::Killed;
            }
            () = &mut expiry => {
                if started.is_some() && fleet.withdraw_unclaimed(&id).await {
                    return Outcome::CouldNotStart {
                        reason: format!("no runner served agent {agent} within {}", seconds(timeout)),
                    };
                }
                let reason = format!("timed out after {}", seconds(timeout));
                stop_in_fleet(&fleet, &id, &mut rx, &reason, job.kill_grace).await;
                return Outcome::TimedOut { after: timeout, stderr_tail: String::new() };
            }
            _ = check.tick() => {
                if let Some(by) = fleet.lost_claimer(&id).await {
                    return failed(format!("runner lost: replica {by} lost"), None);
                }
            }
        }
    }
}

/// Removes the worker from the hub however the run future ends (also when it is dropped).
struct InHub {
    hub: Arc<RunnerHub>,
    id: WorkerId,
}

impl Drop for InHub {
    fn drop(&mut self) {
        self.hub.remove(&self.id, "the worker ended");
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
    }
}

/// Sends `cancel` to the runner of an accepted worker and waits, at most `grace`, for its
/// `finished` (or its loss).
async fn stop_on_runner(
    hub: &RunnerHub,
    id: &WorkerId,
    rx: &mut mpsc::UnboundedReceiver<RunEvent>,
    reason: &str,
    grace: Duration,
) {
    if !hub.cancel(id, reason) {
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

impl Executor for RunnerExecutor {
    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<()>,
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
            if let Some(fleet) = fleet
                .filter(|f| f.should_publish(&assignment.spec.agent.name, &assignment.caller_scope))
            {
                return run_in_fleet(fleet, job, assignment, id, cancel, started).await;
            }
            let agent = assignment.spec.agent.name.clone();
            let timeout = job.timeout;
            let deadline_ms =
                now_ms().saturating_add(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX));
            let (tx, mut rx) = mpsc::unbounded_channel();
            hub.enqueue(id.clone(), assignment, deadline_ms, tx);
            let _in_hub = InHub {
                hub: hub.clone(),
                id: id.clone(),
            };
            let expiry = tokio::time::sleep(timeout);
            tokio::pin!(expiry);
            let mut started = Some(started);
            loop {
                tokio::select! {
                    biased;
                    ev = rx.recv() => match ev {
                        Some(RunEvent::Accepted) => {
                            if let Some(s) = started.take() {
                                let _ = s.send(());
                            }
                        }
                        Some(RunEvent::Finished(f)) => {
                            return outcome(f, "canceled by the runner without a stop request");
                        }
                        Some(RunEvent::Lost(name)) => return failed(format!("runner lost: {name}"), None),
                        None => return failed("the runner hub dropped the worker".to_owned(), None),
                    },
                    () = cancel.cancelled() => {
                        // The StopWorker reason when a stop gave one (shutdown and a caller
                        // leaving give none).
                        let reason = job.stop_reason.get().unwrap_or_else(|| "stop requested".to_owned());
                        stop_on_runner(&hub, &id, &mut rx, &reason, job.kill_grace).await;
                        return Outcome::Killed;
                    }
                    () = &mut expiry => {
                        if started.is_some() {
                            return Outcome::CouldNotStart {
                                reason: format!("no runner served agent {agent} within {}", seconds(timeout)),
                            };
                        }
                        let reason = format!("timed out after {}", seconds(timeout));
                        stop_on_runner(&hub, &id, &mut rx, &reason, job.kill_grace).await;
                        return Outcome::TimedOut { after: timeout, stderr_tail: String::new() };
                    }
                }
            }
        })
    }
}
