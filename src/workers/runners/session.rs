//! One runner's session after `hello`: applies its messages through the hub's fencing and the
//! supervisor (progress), and refuses — with a precise [`Refusal`] on the runner's own stream —
//! everything it may not do. A refused message never touches a worker row.
//!
//! The gRPC glue translates messages and calls one method per message; nothing here knows the
//! wire.

use std::{sync::Arc, time::Duration};

use tokio::sync::mpsc;

use super::{Finish, Hello, HelloError, Outbound, Refusal, RunnerHub, RunnerId};
use crate::workers::{
    model::{Progress, WorkerState},
    supervisor::{Supervisor, Visibility, WorkerError},
};

/// How long `accepted` waits for the supervisor to record `running`, so a `progress` right
/// after it is never refused as "not running".
const START_RECORDED_WITHIN: Duration = Duration::from_secs(5);

/// A connected runner.
pub struct Session {
    hub: Arc<RunnerHub>,
    sup: Arc<Supervisor>,
    runner: RunnerId,
}

impl Session {
    /// Registers the runner; returns the session and the messages for its stream (the first is
    /// `welcome`).
    pub fn start(
        hub: Arc<RunnerHub>,
        sup: Arc<Supervisor>,
        hello: Hello,
        principal: Option<String>,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Outbound>), HelloError> {
        let (runner, rx) = hub.connect(hello, principal)?;
        Ok((Self { hub, sup, runner }, rx))
    }

    /// This session's id.
    pub fn runner_id(&self) -> &RunnerId {
        &self.runner
    }

    /// Every message is a heartbeat.
    pub fn touch(&self) {
        self.hub.touch(&self.runner);
    }

    /// Refuses a message the glue could not even read (bad fields, a second `hello`).
    pub fn refuse(&self, worker_id: &str, code: &'static str, reason: impl Into<String>) {
        self.hub.reject(
            &self.runner,
            Refusal {
                worker_id: worker_id.to_owned(),
                code,
                reason: reason.into(),
            },
        );
    }

    /// `accepted`: the worker runs; returns once `running` is recorded.
    pub async fn accepted(&self, worker_id: &str, lease: &str) {
        let parsed = crate::workers::model::WorkerId::parse(worker_id).ok();
        // Subscribe before the start can be recorded, so the transition cannot be missed.
        let mut events = parsed.as_ref().and_then(|id| self.sup.subscribe(id));
        let id = match self.hub.accept(&self.runner, worker_id, lease) {
            Ok(id) => id,
            Err(r) => return self.hub.reject(&self.runner, r),
        };
        // A worker of this replica announces its transitions; another replica's (runners
        // across replicas, recorded by its owner when the relayed `accepted` reaches it) is
        // looked for in the store.
        let recorded = async {
            loop {
                match self.sup.get(&id, &Visibility::All).await {
                    Ok(w) if w.state != WorkerState::Pending => return,
                    Err(_) => return,
                    Ok(_) => {}
                }
                match events.as_mut() {
                    Some(events) => {
                        if let Err(tokio::sync::broadcast::error::RecvError::Closed) =
                            events.recv().await
                        {
                            return;
                        }
                    }
                    None => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        };
        if tokio::time::timeout(START_RECORDED_WITHIN, recorded)
            .await
            .is_err()
        {
            tracing::warn!(worker = %id, "running not recorded in time after accepted");
        }
    }

    /// `progress`: `report` is the validated report, or why it is invalid.
    pub async fn progress(&self, worker_id: &str, lease: &str, report: Result<Progress, String>) {
        let id = match self.hub.check_running(&self.runner, worker_id, lease) {
            Ok(id) => id,
            Err(r) => return self.hub.reject(&self.runner, r),
        };
        let report = match report {
            Ok(p) => p,
            Err(why) => return self.refuse(worker_id, "INVALID_PROGRESS", why),
        };
        match self.sup.report_progress(&id, report).await {
            Ok(_) => {}
            Err(e @ WorkerError::NotRunning { .. }) => {
                self.refuse(worker_id, "NOT_RUNNING", e.to_string());
            }
            Err(e @ WorkerError::TooManyEvents { .. }) => {
                self.refuse(worker_id, "TOO_MANY_EVENTS", e.to_string());
            }
            Err(e) => {
                tracing::error!(worker = %id, error = %e, "cannot record a runner's progress");
                self.refuse(worker_id, "INTERNAL", format!("progress not recorded: {e}"));
            }
        }
    }

    /// `finished`.
    pub fn finished(&self, worker_id: &str, lease: &str, finish: Finish) {
        if let Err(r) = self.hub.finish(&self.runner, worker_id, lease, finish) {
            self.hub.reject(&self.runner, r);
        }
    }
}

impl Drop for Session {
    /// The stream ended: running workers wait a lease for a resume.
    fn drop(&mut self) {
        self.hub.disconnect(&self.runner);
    }
}
