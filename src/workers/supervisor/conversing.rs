//! Conversations (docs §12): `SendWorkerMessage` — who may send, idempotency, the inbox, the
//! answer to a waiting worker, continuations of finished ones — and the runs of rows that
//! already exist (a continuation the store created, a worker whose question was answered),
//! plus the duties that fail unanswered questions and drop expired transcripts.

use std::{sync::Arc, time::Duration};

use tokio::sync::{broadcast, watch};

use super::{
    Identity, Live, Supervisor, Visibility, WorkerError, now_ms,
    outcome::OutputRule,
    run::RunCtx,
    waiting::{Binding, wait_done},
};
use crate::{
    resolve,
    workers::{
        executor::Mailbox,
        lifecycle::Event,
        model::{SpawnSpec, WorkerId, WorkerRecord, WorkerState, generate_token, hash_token},
        store::{Continued, ListQuery, Message, ParentFilter, Patch, Sent, StoreError},
    },
};

/// How often the conversation duties run (unanswered questions, expired transcripts), at most:
/// a quarter of the shorter of `workers.input_timeout` and `workers.transcript_ttl` when that
/// is less, so neither is overrun by more than a quarter.
const DUTY_EVERY: Duration = Duration::from_secs(30);

/// The least pause between two runs of the duties.
const DUTY_AT_LEAST: Duration = Duration::from_millis(50);

/// How often a caller waiting for a worker another process runs re-reads it.
const POLL: Duration = Duration::from_millis(100);

/// A validated `SendWorkerMessage`.
#[derive(Debug, Clone)]
pub struct SendRequest {
    /// The worker named.
    pub worker_id: WorkerId,
    /// The message.
    pub text: String,
    /// `DELIVERY_INTERRUPT`.
    pub interrupt: bool,
    /// Return once the worker that answers is terminal or `input_required`.
    pub wait: bool,
    /// Idempotency key.
    pub request_id: Option<String>,
}

/// What a send did.
#[derive(Debug, Clone)]
pub struct MessageSent {
    /// The worker that answers.
    pub worker: WorkerRecord,
    /// The message's id.
    pub message_id: String,
    /// `worker` is a new continuation of the worker named.
    pub continued: bool,
}

impl Supervisor {
    /// `SendWorkerMessage` (docs §12.1) as `vis` may see the worker.
    pub async fn send_message(
        self: &Arc<Self>,
        id: &Identity,
        vis: &Visibility,
        req: SendRequest,
    ) -> Result<MessageSent, WorkerError> {
        if self.shutdown.is_cancelled() {
            return Err(WorkerError::ShuttingDown);
        }
        let lineage = self.lineage(id).await?;
        let named = self.get(&req.worker_id, vis).await?;
        if let Some(caller) = &lineage.parent {
            self.may_message(caller, &named).await?;
        }
        if let Some(rid) = &req.request_id
            && let Some(existing) = self.store.find_message(&lineage.scope, rid).await?
        {
            return self.resent(existing, &named, rid, &req).await;
        }
        if named.spec.agent == self.settings.review_agent {
            return Err(WorkerError::NoMessages {
                reason: "NOT_RESUMABLE",
                message: format!(
                    "worker {} is a review; a review takes no messages",
                    named.id
                ),
            });
        }
        self.executor
            .messages(&named.spec.agent, &named)
            .map_err(|(reason, message)| WorkerError::NoMessages { reason, message })?;
        let mut target = named.clone();
        let mut msg = Message {
            id: Message::new_id(),
            worker_id: target.id.clone(),
            text: req.text.clone(),
            interrupt: req.interrupt,
            caller_scope: lineage.scope.clone(),
            request_id: req.request_id.clone(),
            time_ms: now_ms(),
        };
        // A conversation is one line of workers: the message goes to its latest one.
        loop {
            while let Some(next) = target.continued_by.clone() {
                target = self.stored(&next).await?;
            }
            msg.worker_id = target.id.clone();
            let sent = match self.store.send_message(&msg, self.settings.inbox_max).await {
                Err(StoreError::InboxFull { id, max }) => {
                    return Err(WorkerError::InboxFull {
                        id: id.to_string(),
                        max,
                    });
                }
                other => other?,
            };
            let (worker, _hold) = match sent {
                Sent::Duplicate(existing) => {
                    let rid = msg.request_id.clone().unwrap_or_default();
                    return self.resent(existing, &named, &rid, &req).await;
                }
                Sent::Queued(rec) => {
                    self.delivered_to(&rec, &msg).await?;
                    (rec, None)
                }
                Sent::Closed(rec) => match self.continue_worker(&rec, &msg, req.wait).await? {
                    Some(next) => next,
                    None => {
                        // Another message continued it first: follow it.
                        target = self.stored(&rec.id).await?;
                        continue;
                    }
                },
            };
            let continued = worker.id != named.id;
            let worker = if req.wait {
                self.wait_answer(&worker.id).await?
            } else {
                worker
            };
            return Ok(MessageSent {
                worker,
                message_id: msg.id,
                continued,
            });
        }
    }

    /// A worker (`caller`, by its token) may message only its own children.
    async fn may_message(
        &self,
        caller: &WorkerRecord,
        target: &WorkerRecord,
    ) -> Result<(), WorkerError> {
        if caller.id == target.id {
            return Err(WorkerError::MessageDenied {
                reason: "MESSAGE_TO_SELF",
                message: "a worker cannot send a message to itself".to_owned(),
            });
        }
        if target.spec.parent_id.as_ref() == Some(&caller.id) {
            return Ok(());
        }
        let mut up = caller.spec.parent_id.clone();
        while let Some(ancestor) = up {
            if ancestor == target.id {
                return Err(WorkerError::MessageDenied {
                    reason: "MESSAGE_TO_ANCESTOR",
                    message: "a worker cannot send a message to its parent or another ancestor; return your answer as your result instead".to_owned(),
                });
            }
            up = self.stored(&ancestor).await?.spec.parent_id.clone();
        }
        Err(WorkerError::MessageDenied {
            reason: "NOT_PARENT",
            message: format!(
                "a worker can send messages only to its own children; worker {} is not a child of worker {}",
                target.id, caller.id
            ),
        })
    }

    /// The answer to a send whose `request_id` was used before: the same message, or a refusal
    /// when it is another one.
    async fn resent(
        &self,
        existing: Message,
        named: &WorkerRecord,
        rid: &str,
        req: &SendRequest,
    ) -> Result<MessageSent, WorkerError> {
        let holder = self.stored(&existing.worker_id).await?;
        let same_line = holder.id == named.id || holder.spec.continues.is_some();
        if existing.text != req.text || !same_line {
            return Err(WorkerError::MessageIdReused {
                request_id: rid.to_owned(),
                existing: existing.id,
            });
        }
        let worker = if req.wait {
            self.wait_answer(&holder.id).await?
        } else {
            holder
        };
        Ok(MessageSent {
            continued: worker.id != named.id,
            worker,
            message_id: existing.id,
        })
    }

    /// A message is in the inbox of `rec`: wake its run here, or resume it if it waits for an
    /// answer. A worker run by another replica takes it at its next turn boundary.
    async fn delivered_to(
        self: &Arc<Self>,
        rec: &WorkerRecord,
        msg: &Message,
    ) -> Result<(), WorkerError> {
        let posted = self
            .live_mut(&rec.id, |l| {
                l.record.undelivered = rec.undelivered;
                l.mail.post(msg.interrupt);
            })
            .is_some();
        if posted {
            // A runner's worker gets it on the runner's stream (docs §12.6).
            self.executor.deliver(&rec.spec.agent, rec.id.as_str(), msg);
        } else if rec.state == WorkerState::InputRequired {
            self.resume(rec.clone()).await?;
        }
        Ok(())
    }

    /// A runner's agent has the messages of its worker `id` (docs §12.6): they are delivered,
    /// each a `PROGRESS_KIND_MESSAGE` event, and a worker that waited for an answer runs again.
    pub async fn runner_delivered(&self, id: &WorkerId) -> Result<(), WorkerError> {
        let taken = self.store.take_messages(id, false).await?;
        self.inbox_taken(id);
        let waiting = self
            .live_mut(id, |l| l.record.state == WorkerState::InputRequired)
            .unwrap_or(false);
        if waiting {
            self.live_transition(id, Event::Answer, Patch::default())
                .await?;
        }
        for m in taken {
            let p = crate::workers::model::Progress {
                kind: crate::workers::model::ProgressKind::Message,
                data_json: Some(m.delivered_data().to_string()),
                text: m.text,
            };
            if let Err(e) = self.report_progress(id, p).await {
                tracing::debug!(worker = %id, error = %e, "message event not recorded");
            }
        }
        Ok(())
    }

    /// A runner's agent asks its caller (docs §12.6): the worker becomes `input_required` and
    /// keeps its lease and its run.
    pub async fn runner_asked(
        &self,
        id: &WorkerId,
        question: String,
    ) -> Result<WorkerRecord, WorkerError> {
        let patch = Patch {
            question: Some(question),
            ..Patch::default()
        };
        self.live_transition(id, Event::Ask, patch).await
    }

    /// A transition of a worker live here, published to its watchers.
    async fn live_transition(
        &self,
        id: &WorkerId,
        event: Event,
        patch: Patch,
    ) -> Result<WorkerRecord, WorkerError> {
        let events = self
            .live_mut(id, |l| l.events.clone())
            .ok_or_else(|| WorkerError::NotFound(id.to_string()))?;
        self.transition(id, &events, event, patch).await
    }

    /// Creates and starts the continuation of finished worker `rec` with `msg` (docs §12.3);
    /// `None` when another message continued it first.
    async fn continue_worker(
        self: &Arc<Self>,
        rec: &WorkerRecord,
        msg: &Message,
        wait: bool,
    ) -> Result<Option<(WorkerRecord, Option<super::waiting::Hold>)>, WorkerError> {
        if let Some(closed) = rec.close_time_ms {
            let ttl = self.settings.transcript_ttl;
            let age = now_ms().saturating_sub(closed);
            if u128::try_from(age).unwrap_or(0) > ttl.as_millis() {
                return Err(WorkerError::NoMessages {
                    reason: "TRANSCRIPT_EXPIRED",
                    message: format!(
                        "the transcript of worker {} expired (workers.transcript_ttl is {}); spawn a new worker",
                        rec.id,
                        humantime::format_duration(ttl)
                    ),
                });
            }
        }
        let pending = self.pending.clone().try_acquire_owned().map_err(|_| {
            WorkerError::Capacity(format!(
                "{} workers are already waiting for a run slot (limits.max_pending); retry later",
                self.settings.max_pending
            ))
        })?;
        let token = generate_token();
        let spec = Arc::new(SpawnSpec {
            prompt: msg.text.clone(),
            request_id: None,
            continues: Some(rec.id.clone()),
            // The message that started the old worker is not this one's.
            a2a_message: None,
            create_time_ms: now_ms(),
            ..(*rec.spec).clone()
        });
        let new = WorkerRecord::new(WorkerId::generate(), spec, Some(hash_token(&token)));
        let mut msg = msg.clone();
        msg.worker_id = new.id.clone();
        let created = match self.store.continue_worker(&rec.id, &new, &msg).await? {
            Continued::Created(ev) => *ev,
            Continued::Already(_) => return Ok(None),
        };
        tracing::info!(worker = %new.id, continues = %rec.id, agent = %rec.spec.agent, "worker continued");
        // What this process shows of the old worker learns its continuation.
        if let Some(mut old) = self.recent.get(&rec.id) {
            old.continued_by = Some(new.id.clone());
            old.undelivered = 0;
            self.recent.insert(rec.id.clone(), old);
        }
        self.live_mut(&rec.id, |l| {
            l.record.continued_by = Some(new.id.clone());
            l.record.undelivered = 0;
        });
        let mut record = created.worker.clone();
        if rec.session_ref.is_some() {
            // A runner's continuation gets the message as its prompt, with the session to
            // reload (docs §12.6): it is delivered with the assignment.
            let taken = self.store.take_messages(&new.id, false).await?;
            if taken.len() > 1 {
                tracing::warn!(worker = %new.id, messages = taken.len() - 1, "messages the runner never took are not carried to its continuation");
            }
            record.undelivered = 0;
        }
        let hold = self
            .launch(
                created,
                token,
                Launch {
                    pending: Some(pending),
                    resume_from: rec.id.clone(),
                    runner_resume: rec.session_ref.clone().map(|r| (rec.id.to_string(), r)),
                    resumed: false,
                    wait,
                },
            )
            .await;
        Ok(Some((record, hold)))
    }

    /// Runs again a worker whose question was answered (docs §12.4): `input_required →
    /// running` with a new token, its conversation from its transcript. A worker that another
    /// send already resumed is left to that one.
    async fn resume(self: &Arc<Self>, rec: WorkerRecord) -> Result<(), WorkerError> {
        if self.live_mut(&rec.id, |_| ()).is_some() {
            return Ok(());
        }
        let token = generate_token();
        let patch = Patch {
            token_hash: Some(hash_token(&token)),
            ..Patch::default()
        };
        let moved = match self
            .store
            .apply(&rec.id, Event::Answer, patch, now_ms())
            .await
        {
            Ok(crate::workers::store::Applied::Moved(ev)) => ev,
            Ok(_) | Err(StoreError::Illegal(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        tracing::info!(worker = %rec.id, "worker answered; running again");
        self.launch(
            moved,
            token,
            Launch {
                pending: None,
                resume_from: rec.id.clone(),
                // A remote (A2A) worker answers on its remote task (docs §13.4).
                runner_resume: rec.session_ref.clone().map(|r| (rec.id.to_string(), r)),
                resumed: true,
                wait: false,
            },
        )
        .await;
        Ok(())
    }

    /// After a worker asked: a message that reached its inbox while it was asking is its
    /// answer. Boxed: a resumed run ends here again, and the run's future must stay `Send`.
    pub(super) fn answer_if_waiting(
        self: Arc<Self>,
        id: WorkerId,
    ) -> crate::workers::executor::BoxFuture<'static, ()> {
        Box::pin(async move {
            match self.store.get(&id).await {
                Ok(Some(rec)) if rec.state == WorkerState::InputRequired && rec.undelivered > 0 => {
                    if let Err(e) = self.resume(rec).await {
                        tracing::warn!(worker = %id, error = %e, "cannot resume a worker with an answer waiting");
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(worker = %id, error = %e, "cannot read a worker that asked");
                }
            }
        })
    }

    /// Makes an existing row live here and starts its run (the second half of a spawn's
    /// creation, for a continuation or an answered worker).
    /// Returns the waiting caller's hold when it waits (the run is bound to it, as a waiting
    /// spawn's).
    async fn launch(
        self: &Arc<Self>,
        created: crate::workers::model::WorkerEvent,
        token: String,
        how: Launch,
    ) -> Option<super::waiting::Hold> {
        let record = created.worker.clone();
        let id = record.id.clone();
        let eff = &record.spec.effective;
        let (events, _) = broadcast::channel(64);
        let (done_tx, done_rx) = watch::channel(None);
        let cancel = self.shutdown.child_token();
        let (binding, hold) = Binding::new(&cancel, how.wait);
        let stop_reason = crate::workers::executor::StopReason::default();
        let mail = Arc::new(Mailbox::full());
        self.live().insert(
            id.clone(),
            Live {
                record: record.clone(),
                cancel: cancel.clone(),
                events: events.clone(),
                done: done_rx,
                token_hash: hash_token(&token),
                binding,
                lineage: resolve::lineage::of_worker(&record.spec.agent, eff),
                stop_reason: stop_reason.clone(),
                mail: mail.clone(),
                held_start: None,
            },
        );
        self.announce(&created);
        let _ = events.send(created);
        if !how.resumed {
            self.metrics.worker_state(None, "pending");
        }
        let inherited = match &record.spec.parent_id {
            Some(p) => self
                .store
                .get(p)
                .await
                .ok()
                .flatten()
                .map(|p| p.spec.effective.model.clone())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let mut job = self.job(
            None,
            &record,
            &[],
            inherited,
            token,
            self.settings.timeout,
            false,
            super::admission::Conversing {
                resume_from: Some(how.resume_from.to_string()),
                mail,
                runner_resume: how.runner_resume,
            },
        );
        job.stop_reason = stop_reason;
        let ctx = RunCtx {
            id: id.clone(),
            output: eff
                .output_schema
                .clone()
                .map_or(OutputRule::Plain, OutputRule::Schema),
            cancel,
            events,
            done: done_tx,
            pending: how.pending,
            resumed: how.resumed,
        };
        let span = tracing::info_span!(
            "worker",
            worker = %id,
            agent = %record.spec.agent,
            parent = record.spec.parent_id.as_ref().map_or("", WorkerId::as_str),
            depth = record.spec.depth,
            outcome = tracing::field::Empty,
        );
        self.tasks.spawn(tracing::Instrument::instrument(
            self.clone().drive(ctx, job),
            span,
        ));
        hold
    }

    /// The run of worker `id` took its messages: what this process shows of it has none
    /// undelivered.
    pub(crate) fn inbox_taken(&self, id: &WorkerId) {
        self.live_mut(id, |l| l.record.undelivered = 0);
    }

    /// Waits until worker `id` is terminal or asks its caller.
    async fn wait_answer(&self, id: &WorkerId) -> Result<WorkerRecord, WorkerError> {
        let done = self.live_mut(id, |l| l.done.clone());
        let rec = match done {
            Some(done) => wait_done(done).await,
            None => loop {
                let rec = self.stored(id).await?;
                if rec.state.is_terminal() || rec.state == WorkerState::InputRequired {
                    break rec;
                }
                if self.shutdown.is_cancelled() {
                    return Err(WorkerError::ShuttingDown);
                }
                tokio::time::sleep(POLL).await;
            },
        };
        Ok(rec)
    }

    /// Fails the workers that waited for an answer longer than `workers.input_timeout`, and
    /// deletes the transcripts older than `workers.transcript_ttl`.
    pub(crate) async fn conversation_duties(&self) {
        let timeout = self.settings.input_timeout;
        let cutoff =
            now_ms().saturating_sub(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX));
        let mut after = None;
        loop {
            let page = match self
                .store
                .list(&ListQuery {
                    parent: ParentFilter::Any,
                    states: vec![WorkerState::InputRequired],
                    caller_scope: None,
                    context_id: None,
                    agent: None,
                    newest_first: false,
                    after: after.clone(),
                    limit: 500,
                })
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list the workers waiting for an answer");
                    break;
                }
            };
            for rec in &page {
                if rec.last_activity_ms >= cutoff || self.live_mut(&rec.id, |_| ()).is_some() {
                    continue;
                }
                let patch = Patch {
                    error: Some(format!(
                        "no answer to the worker's question within {} (workers.input_timeout)",
                        humantime::format_duration(timeout)
                    )),
                    ..Patch::default()
                };
                match self
                    .store
                    .apply(&rec.id, Event::Fail, patch, now_ms())
                    .await
                {
                    Ok(_) | Err(StoreError::Illegal(_)) => {}
                    Err(e) => {
                        tracing::warn!(worker = %rec.id, error = %e, "cannot fail an unanswered worker");
                    }
                }
            }
            match page.last() {
                Some(last) if page.len() == 500 => {
                    after = Some((last.spec.create_time_ms, last.id.clone()));
                }
                _ => break,
            }
        }
        let ttl = i64::try_from(self.settings.transcript_ttl.as_millis()).unwrap_or(i64::MAX);
        match self
            .store
            .prune_transcripts(now_ms().saturating_sub(ttl))
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(workers = n, "expired transcripts deleted"),
            Err(e) => tracing::warn!(error = %e, "cannot delete expired transcripts"),
        }
    }
}

/// How [`Supervisor::launch`] starts a row that exists.
struct Launch {
    /// Its place among the pending workers (a continuation), if it takes one.
    pending: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Whose transcript its conversation starts from.
    resume_from: WorkerId,
    /// The runner session it carries on (a runner's worker, docs §12.6).
    runner_resume: Option<(String, String)>,
    /// Already `running` (an answered question).
    resumed: bool,
    /// A caller waits for it.
    wait: bool,
}

/// Runs the conversation duties every [`DUTY_EVERY`] (or sooner, see there) until shutdown.
pub(crate) fn start_duties(sup: &Arc<Supervisor>) {
    let weak = Arc::downgrade(sup);
    let shutdown = sup.shutdown_token();
    let every = DUTY_EVERY
        .min(sup.settings.input_timeout / 4)
        .min(sup.settings.transcript_ttl / 4)
        .max(DUTY_AT_LEAST);
    sup.task_tracker().spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let Some(sup) = weak.upgrade() else { return };
            sup.conversation_duties().await;
        }
    });
}
