//! One runner's session after `hello`: applies its messages through the hub's fencing and the
//! supervisor (progress), and refuses — with a precise [`Refusal`] on the runner's own stream —
//! everything it may not do. A refused message never touches a worker row.
//!
//! The gRPC glue translates messages and calls one method per message; nothing here knows the
//! wire.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{broadcast, mpsc, watch};

use super::{Finish, Hello, HelloError, Outbound, Refusal, RunnerHub, RunnerId};
use crate::workers::{
    model::{Progress, WorkerEvent, WorkerId, WorkerState},
    supervisor::{Supervisor, Visibility, WorkerError},
};

/// How long `accepted` waits for the supervisor to record `running`, so a `progress` right
/// after it is never refused as "not running".
const START_RECORDED_WITHIN: Duration = Duration::from_secs(5);

/// How often the store is read for the start of another replica's worker when no notice says
/// it: a fallback (a worker that was already running, a lost notice), since the notice of the
/// start is what normally ends the wait.
const REMOTE_START_POLL: Duration = Duration::from_millis(100);

/// A connected runner.
pub struct Session {
    hub: Arc<RunnerHub>,
    sup: Arc<Supervisor>,
    runner: RunnerId,
    /// Workers this runner accepted whose `running` is not recorded yet: done once it is.
    starting: Arc<Mutex<HashMap<WorkerId, watch::Receiver<bool>>>>,
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
        let starting = Arc::default();
        Ok((
            Self {
                hub,
                sup,
                runner,
                starting,
            },
            rx,
        ))
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

    /// `accepted`: the worker runs. Returns at once, so one runner's other workers are never
    /// held up behind this one; `running` is looked for in the background, and a `progress`
    /// of this worker waits for it (`started`).
    pub fn accepted(&self, worker_id: &str, lease: &str) {
        let parsed = WorkerId::parse(worker_id).ok();
        // Subscribe before the start can be recorded, so the transition cannot be missed: to
        // the worker's events here, or to the store's notices for another replica's worker
        // (whose start its owner records once this `accepted` is relayed to it).
        let events = parsed.as_ref().and_then(|id| self.sup.subscribe(id));
        let notices = if events.is_none() {
            self.sup.notices()
        } else {
            None
        };
        let id = match self.hub.accept(&self.runner, worker_id, lease) {
            Ok(id) => id,
            Err(r) => return self.hub.reject(&self.runner, r),
        };
        let (done, recorded) = watch::channel(false);
        self.starting
            .lock()
            .expect("session poisoned")
            .insert(id.clone(), recorded);
        let (sup, starting) = (self.sup.clone(), self.starting.clone());
        tokio::spawn(async move {
            let following = running_recorded(&sup, &id, events, notices);
            if tokio::time::timeout(START_RECORDED_WITHIN, following)
                .await
                .is_err()
            {
                tracing::warn!(worker = %id, "running not recorded in time after accepted");
            }
            starting.lock().expect("session poisoned").remove(&id);
            let _ = done.send(true);
        });
    }

    /// Waits until the start of a worker this runner accepted is recorded (at most
    /// [`START_RECORDED_WITHIN`] after its `accepted`), so a `progress` right after `accepted`
    /// is never refused as "not running".
    async fn started(&self, id: &WorkerId) {
        let recorded = self
            .starting
            .lock()
            .expect("session poisoned")
            .get(id)
            .cloned();
        if let Some(mut recorded) = recorded {
            // An error: the waiter is gone, so the start was settled either way.
            let _ = recorded.wait_for(|done| *done).await;
        }
    }

    /// `progress`: `report` is the validated report, or why it is invalid.
    pub async fn progress(&self, worker_id: &str, lease: &str, report: Result<Progress, String>) {
        let id = match self.hub.check_running(&self.runner, worker_id, lease) {
            Ok(id) => id,
            Err(r) => return self.hub.reject(&self.runner, r),
        };
        self.started(&id).await;
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

    /// `message_delivered` (capability `messages`, docs §12.6): the agent has the worker's
    /// messages.
    pub async fn delivered(&self, worker_id: &str, lease: &str) {
        let id = match self.hub.check_running(&self.runner, worker_id, lease) {
            Ok(id) => id,
            Err(r) => return self.hub.reject(&self.runner, r),
        };
        self.started(&id).await;
        if let Err(e) = self.sup.runner_delivered(&id).await {
            tracing::error!(worker = %id, error = %e, "cannot record a delivered message");
            self.refuse(worker_id, "INTERNAL", format!("delivery not recorded: {e}"));
        }
    }

    /// `input_required` (capability `input`, docs §12.6): `question` is the validated
    /// question, or why it is invalid.
    pub async fn input_required(
        &self,
        worker_id: &str,
        lease: &str,
        question: Result<String, String>,
    ) {
        let id = match self.hub.check_input(&self.runner, worker_id, lease) {
            Ok(id) => id,
            Err(r) => return self.hub.reject(&self.runner, r),
        };
        self.started(&id).await;
        let question = match question {
            Ok(q) => q,
            Err(why) => return self.refuse(worker_id, "INVALID_MESSAGE", why),
        };
        if let Err(e) = self.sup.runner_asked(&id, question).await {
            self.refuse(worker_id, "NOT_RUNNING", e.to_string());
        }
    }

    /// `finished`, with the runner's session reference when it gave one (docs §12.6).
    pub fn finished(
        &self,
        worker_id: &str,
        lease: &str,
        finish: Finish,
        session_ref: Option<String>,
    ) {
        if let Err(r) = self
            .hub
            .finish(&self.runner, worker_id, lease, finish, session_ref)
        {
            self.hub.reject(&self.runner, r);
        }
    }
}

/// Returns once worker `id` is no longer pending (or is gone): a worker of this replica
/// announces its transitions on `events`; another replica's (runners across replicas,
/// recorded by its owner when the relayed `accepted` reaches it) is followed by the store's
/// `notices`, subscribed before that `accepted` was taken — so its start cannot have been
/// recorded unseen, and the first look is the notice, not a read — and read from the store
/// after a resync, or when no notice came for a while.
async fn running_recorded(
    sup: &Supervisor,
    id: &WorkerId,
    mut events: Option<broadcast::Receiver<WorkerEvent>>,
    mut notices: Option<crate::workers::store::Followed>,
) {
    let mut read = events.is_some() || notices.is_none();
    loop {
        if read {
            match sup.get(id, &Visibility::All).await {
                Ok(w) if w.state != WorkerState::Pending => return,
                Err(_) => return,
                Ok(_) => {}
            }
        }
        read = true;
        match events.as_mut() {
            Some(events) => {
                if let Err(broadcast::error::RecvError::Closed) = events.recv().await {
                    return;
                }
            }
            // Its creation is event 1, so the notice of a later one says it left pending
            // without another read.
            None => {
                let seen = sup.store_changed(id, &mut notices, REMOTE_START_POLL).await;
                if seen.is_some_and(|sequence| sequence >= 2) {
                    return;
                }
            }
        }
    }
}

impl Drop for Session {
    /// The stream ended: running workers wait a lease for a resume.
    fn drop(&mut self) {
        self.hub.disconnect(&self.runner);
    }
}
