//! Progress reports of running workers (docs/workers.md §6.9): appended to the worker's event
//! log by the store (which enforces "running only" and the per-worker bound), then published to
//! its watchers like a transition. Both `ReportProgress` (the worker of the caller's token, found
//! on any replica) and a runner's stream (by worker id, after the lease was checked) come through
//! here.

use std::time::Duration;

use super::{Supervisor, WorkerError, now_ms};
use crate::workers::{
    model::{Progress, WorkerEvent, WorkerId},
    store::StoreError,
};

/// How long a progress report of a worker whose start is held waits for that start to be
/// written.
const HELD_START_WAIT: Duration = Duration::from_secs(1);

impl Supervisor {
    /// Appends a report of worker `id` as its next event, updates the live record and publishes
    /// the event. A worker that is not running is [`WorkerError::NotRunning`]; a full log is
    /// [`WorkerError::TooManyEvents`].
    pub async fn report_progress(
        &self,
        id: &WorkerId,
        progress: Progress,
    ) -> Result<WorkerEvent, WorkerError> {
        // Its start may be held here, to be written with its end: only a running worker
        // reports, so the start is written first.
        self.write_held_start(id).await;
        let max = self.settings.max_events_per_worker;
        let ev = self
            .store
            .append_progress(id, progress, now_ms(), max)
            .await
            .map_err(Self::refused_progress)?;
        let events = {
            let mut live = self.live();
            let Some(l) = live.get_mut(id) else {
                // Finished meanwhile: watchers re-read the store at the end.
                return Ok(ev);
            };
            // A transition committed after this report may already be in memory; keep the newer.
            if l.record.sequence < ev.sequence {
                l.record = ev.worker.clone();
            }
            l.events.clone()
        };
        self.announce(&ev);
        let _ = events.send(ev.clone());
        Ok(ev)
    }

    /// When worker `id` runs here and its start is held for its end, asks for the start to be
    /// written at once and waits, up to [`HELD_START_WAIT`], for that transition to be
    /// published; otherwise returns at once.
    async fn write_held_start(&self, id: &WorkerId) {
        let (start_now, mut events) = {
            let live = self.live();
            let Some((l, start_now)) = live.get(id).and_then(|l| Some((l, l.held_start.clone()?)))
            else {
                return;
            };
            (start_now, l.events.subscribe())
        };
        start_now.notify_one();
        let published = async {
            loop {
                match events.recv().await {
                    Ok(ev) if ev.progress.is_some() => {}
                    Ok(_) | Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(HELD_START_WAIT, published).await;
    }

    /// The error of a progress report the store refused.
    fn refused_progress(e: StoreError) -> WorkerError {
        match e {
            StoreError::NotRunning { id, state } => WorkerError::NotRunning {
                id: id.to_string(),
                state,
            },
            StoreError::TooManyEvents { id, max } => WorkerError::TooManyEvents {
                id: id.to_string(),
                max,
            },
            StoreError::NotFound(id) => WorkerError::NotFound(id.to_string()),
            e @ StoreError::ArtifactsTooLarge { .. } => {
                WorkerError::ArtifactsTooLarge(e.to_string())
            }
            e => e.into(),
        }
    }
}

impl Supervisor {
    /// Whether worker `id` runs here and its live record is older than `sequence`: the one
    /// notice of many that needs [`Supervisor::catch_up`] (a plain lookup, no store read).
    pub fn is_behind(&self, id: &WorkerId, sequence: u64) -> bool {
        self.live()
            .get(id)
            .is_some_and(|l| l.record.sequence < sequence)
    }

    /// A notice says worker `id` has an event at `sequence`: when it runs here and that event
    /// was committed elsewhere (a progress report taken by another replica), the events this
    /// replica has not seen are read from the store and published to its watchers, and the
    /// live record moves on with them.
    pub async fn catch_up(&self, id: &WorkerId, sequence: u64) {
        let Some(known) = self.live().get(id).map(|l| l.record.sequence) else {
            return;
        };
        if known >= sequence {
            return;
        }
        let missed = match self.store.events_after(id, known).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(worker = %id, error = %e, "cannot read events committed by another replica; watchers re-read them");
                return;
            }
        };
        let mut live = self.live();
        let Some(l) = live.get_mut(id) else { return };
        for ev in missed {
            if l.record.sequence < ev.sequence {
                l.record = ev.worker.clone();
            }
            let _ = l.events.send(ev);
        }
    }
}
