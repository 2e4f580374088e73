//! Stopping workers (docs/workers.md §6.4): descendants first, then the worker itself (SIGTERM
//! → grace → SIGKILL by the executor); returns once it is gone and recorded `killed`. A worker
//! run by another replica is stopped through its owner: the request is recorded on its row.
//!
//! The state a stop ends in is the run's: the supervisor only cancels and waits, and the
//! lifecycle's transition decides (a worker that completed meanwhile stays `completed`, and
//! the stop is `NOT_CANCELABLE`).

use super::{Supervisor, Visibility, WorkerError, waiting::wait_done};
use crate::workers::{
    model::{WorkerId, WorkerRecord, WorkerState},
    store::{ListQuery, ParentFilter},
};

/// Most open children of one worker a stop looks up in a shared store.
const MAX_OPEN_CHILDREN: usize = 10_000;

impl Supervisor {
    /// Stops worker `id` as `vis` may see it.
    pub async fn stop(
        &self,
        id: &WorkerId,
        reason: &str,
        vis: &Visibility,
    ) -> Result<WorkerRecord, WorkerError> {
        let rec = self.get(id, vis).await?;
        if rec.state == WorkerState::Killed {
            return Ok(rec);
        }
        if rec.state.is_terminal() {
            return Err(not_cancelable(id, rec.state));
        }
        self.stop_children(id).await?;
        let handles = self
            .live()
            .get(id)
            .map(|l| (l.cancel.clone(), l.done.clone(), l.stop_reason.clone()));
        let Some((cancel, done, told)) = handles else {
            if rec.state == WorkerState::InputRequired {
                // Nothing runs while it waits for an answer: the row is all there is.
                let why = match reason.trim() {
                    "" => "killed: stopped by StopWorker".to_owned(),
                    r => format!("killed: {r}"),
                };
                let patch = crate::workers::store::Patch {
                    error: Some(why),
                    ..Default::default()
                };
                let applied = self
                    .store
                    .apply(
                        id,
                        crate::workers::lifecycle::Event::Kill,
                        patch,
                        super::now_ms(),
                    )
                    .await;
                match applied {
                    Ok(a) => return killed(id, a.worker().clone()),
                    // Answered meanwhile: it runs now, here or elsewhere; stop that run.
                    Err(crate::workers::store::StoreError::Illegal(_)) => {
                        return Box::pin(self.stop(id, reason, vis)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            // Run by another replica: record the request for its owner and wait until the row
            // is terminal (the owner kills it, or the sweeper closes it if the owner is lost).
            let rec = if let Some(shared) = &self.shared
                && shared.request_stop(id, reason.trim()).await?
            {
                self.wait_terminal(id).await?
            } else {
                // Finished in the meantime.
                self.get(id, &Visibility::All).await?
            };
            return killed(id, rec);
        };
        let reason = if reason.trim().is_empty() {
            told.set("stopped by StopWorker");
            "killed: stopped by StopWorker".to_owned()
        } else {
            told.set(reason.trim());
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
        killed(id, rec)
    }

    /// Stops the open children of `id`, live here or (shared store) run by other replicas.
    async fn stop_children(&self, id: &WorkerId) -> Result<(), WorkerError> {
        let mut children: Vec<WorkerId> = self
            .live()
            .values()
            .filter(|l| l.record.spec.parent_id.as_ref() == Some(id))
            .map(|l| l.record.id.clone())
            .collect();
        if self.shared.is_some() {
            let q = ListQuery {
                parent: ParentFilter::Worker(id.clone()),
                states: vec![WorkerState::Pending, WorkerState::Running],
                caller_scope: None,
                context_id: None,
                agent: None,
                newest_first: false,
                after: None,
                limit: MAX_OPEN_CHILDREN,
            };
            children.extend(self.store.list(&q).await?.into_iter().map(|r| r.id));
            children.sort();
            children.dedup();
        }
        for c in children {
            let reason = format!("killed: parent {id} was stopped");
            let _ = Box::pin(self.stop(&c, &reason, &Visibility::All)).await;
        }
        Ok(())
    }
}

/// The answer of a stop whose worker ended as `rec`: `killed` is what was asked for; any other
/// end (it completed or failed first) means it could not be stopped.
fn killed(id: &WorkerId, rec: WorkerRecord) -> Result<WorkerRecord, WorkerError> {
    match rec.state {
        WorkerState::Killed => Ok(rec),
        state => Err(not_cancelable(id, state)),
    }
}

fn not_cancelable(id: &WorkerId, state: WorkerState) -> WorkerError {
    WorkerError::NotCancelable {
        id: id.to_string(),
        state,
    }
}
