//! Callers waiting for a worker (docs/workers.md §6.3, §6.7). A `wait` spawn binds the worker's
//! life to its caller; callers that reuse it (dedupe, `request_id`) join that binding, and the
//! worker is cancelled when the **last** of them goes away, never when only some do. A
//! background dispatch that reuses a bound worker hands it to the service instead.
//!
//! The binding is tokio-util's [`DropGuard`] of the worker's cancellation token, shared: each
//! waiting caller holds a strong reference, the worker keeps a weak one.
//!
//! Across replicas (docs §9) a caller of another replica that waits for a worker run here is a
//! *hold* row in the store: while a bound worker has any, this replica keeps one more strong
//! reference for them all ([`Binding::set_remote`]), recounted on every hold notice, so the
//! worker is cancelled when the last waiter anywhere goes away.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{SharedStore, Supervisor, Visibility, WorkerError};
use crate::workers::model::{WorkerId, WorkerRecord};

/// How often a caller waiting for another replica's worker re-reads it, between notices.
const REMOTE_POLL: Duration = Duration::from_millis(250);

/// How long a dispatch that lost the store's dedupe claim waits for the winner's row to appear.
const REMOTE_CLAIM_WAIT: Duration = Duration::from_secs(10);

/// One waiting caller's hold on a worker.
pub(super) type Hold = Arc<DropGuard>;

/// Who a live worker's life is bound to.
pub(super) struct Binding {
    /// The holds of the waiting callers; dead once the last one was dropped (the worker was
    /// cancelled then) or when nobody ever waited.
    bound: Weak<DropGuard>,
    /// Set when the service took the worker over: waiters no longer bind it.
    kept: Option<Hold>,
    /// Held for the callers of other replicas waiting for it, while there are any.
    remote: Option<Hold>,
}

impl Binding {
    /// The binding of a new worker, and the spawning caller's hold when it waits.
    pub(super) fn new(cancel: &CancellationToken, wait: bool) -> (Self, Option<Hold>) {
        if !wait {
            let unbound = Self {
                bound: Weak::new(),
                kept: None,
                remote: None,
            };
            return (unbound, None);
        }
        let hold = Arc::new(cancel.clone().drop_guard());
        let binding = Self {
            bound: Arc::downgrade(&hold),
            kept: None,
            remote: None,
        };
        (binding, Some(hold))
    }

    /// Joins the callers waiting for a bound worker; `None` when it is not bound to its waiters
    /// (a background run, or nobody is waiting any more and it is being cancelled).
    fn join(&self) -> Option<Hold> {
        if self.kept.is_some() {
            return None;
        }
        self.bound.upgrade()
    }

    /// The service takes the worker over: it lives until it ends, whoever stops waiting.
    fn detach(&mut self) {
        if let Some(hold) = self.bound.upgrade() {
            self.kept = Some(hold);
        }
    }

    /// Whether callers of other replicas wait for the worker: while they do, it stays bound
    /// (if it is bound at all). Returns the hold given up, for the caller to drop outside any
    /// lock (dropping the last hold cancels the worker).
    fn set_remote(&mut self, waited: bool) -> Option<Hold> {
        if waited {
            if self.remote.is_none() {
                self.remote = self.join();
            }
            None
        } else {
            self.remote.take()
        }
    }
}

/// A caller's hold on a worker another replica runs: released when dropped (the caller got
/// its answer or went away), which tells the owner to recount.
struct RemoteHold {
    store: Arc<dyn SharedStore>,
    worker: WorkerId,
    id: String,
}

impl Drop for RemoteHold {
    fn drop(&mut self) {
        let (store, worker, id) = (
            self.store.clone(),
            self.worker.clone(),
            std::mem::take(&mut self.id),
        );
        // Drop cannot wait; the release is retried by the store, and a hold that still cannot
        // be deleted goes with this replica's lease (the sweeper prunes it).
        tokio::spawn(async move {
            if let Err(e) = store.release_hold(&worker, &id).await {
                tracing::warn!(worker = %worker, error = %e, "cannot release a hold on a remote worker");
            }
        });
    }
}

/// What a dispatch that reuses a worker live here does with it.
enum Reuse {
    /// Waits for its final record, holding it (`None`: it is not bound to its waiters).
    Wait(watch::Receiver<Option<WorkerRecord>>, Option<Hold>),
    /// Hands it to the service and returns at once.
    Detached,
}

/// Waits until the worker's final record is published.
pub(super) async fn wait_done(mut rx: watch::Receiver<Option<WorkerRecord>>) -> WorkerRecord {
    loop {
        if let Some(r) = rx.borrow_and_update().clone() {
            return r;
        }
        if rx.changed().await.is_err() {
            // Sender gone without a value cannot happen (the run always sends); be safe.
            if let Some(r) = rx.borrow().clone() {
                return r;
            }
            std::future::pending::<()>().await;
        }
    }
}

impl Supervisor {
    /// For a reused worker: wait for it when asked (joining the callers it is bound to, so it
    /// lives until the last of them goes away), else return it as it is — and a background
    /// dispatch sharing a bound worker hands it to the service.
    pub(super) async fn finish_wait(
        &self,
        rec: WorkerRecord,
        wait: bool,
    ) -> Result<WorkerRecord, WorkerError> {
        if rec.state.is_terminal() {
            return Ok(rec);
        }
        let here = self.live_mut(&rec.id, |l| {
            if wait {
                Reuse::Wait(l.done.clone(), l.binding.join())
            } else {
                l.binding.detach();
                Reuse::Detached
            }
        });
        match here {
            Some(Reuse::Wait(done, hold)) => {
                let rec = wait_done(done).await;
                drop(hold);
                Ok(rec)
            }
            Some(Reuse::Detached) => Ok(rec),
            None => match self.shared.as_ref().filter(|_| wait) {
                // Run by another replica (shared store): follow its row until it is terminal,
                // holding it there as a waiter here would (dropping this future releases it).
                Some(shared) => {
                    let hold = RemoteHold {
                        id: shared.add_hold(&rec.id).await?,
                        store: shared.clone(),
                        worker: rec.id.clone(),
                    };
                    let rec = self.wait_terminal(&rec.id).await;
                    drop(hold);
                    rec
                }
                None => self.get(&rec.id, &Visibility::All).await,
            },
        }
    }

    /// Recounts the holds of callers of other replicas on `id`, if it runs here.
    pub(crate) async fn sync_remote_holds(&self, id: &WorkerId) {
        // Without a shared store no caller of another replica can hold it.
        let Some(shared) = &self.shared else {
            return;
        };
        if self.live_mut(id, |_| ()).is_none() {
            return;
        }
        let held = match shared.holds(id).await {
            Ok(n) => n > 0,
            Err(e) => {
                // Unknown: keep things as they are until the next notice or sweep.
                tracing::warn!(worker = %id, error = %e, "cannot count the holds on a worker");
                return;
            }
        };
        let released = self.live_mut(id, |l| l.binding.set_remote(held)).flatten();
        if released.is_some() {
            tracing::debug!(worker = %id, "no caller of another replica waits for the worker any more");
        }
        drop(released);
    }

    /// Waits (reading the store, woken by its notices) until the worker's row is terminal.
    pub(super) async fn wait_terminal(&self, id: &WorkerId) -> Result<WorkerRecord, WorkerError> {
        let mut notices = self.notices();
        loop {
            let rec = self.stored(id).await?;
            if rec.state.is_terminal() {
                return Ok(rec);
            }
            if self.shutdown.is_cancelled() {
                return Err(WorkerError::ShuttingDown);
            }
            self.store_changed(id, &mut notices, REMOTE_POLL).await;
        }
    }

    /// The row of a worker another replica claimed a dedupe key for, once it exists (the
    /// winner writes it right after its claim); `None` if it never appears.
    pub(super) async fn wait_for_row(
        &self,
        id: &WorkerId,
    ) -> Result<Option<WorkerRecord>, WorkerError> {
        let deadline = tokio::time::Instant::now() + REMOTE_CLAIM_WAIT;
        let mut notices = self.notices();
        loop {
            if let Some(rec) = self.store.get(id).await? {
                return Ok(Some(rec));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            self.store_changed(id, &mut notices, Duration::from_millis(50))
                .await;
        }
    }
}
