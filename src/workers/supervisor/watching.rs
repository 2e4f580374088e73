//! `WatchWorker` as a domain stream (docs/workers.md §6.6): a snapshot of the worker (or the
//! stored events after a sequence), then every later transition and progress event in sequence
//! order, ending after the terminal one, on shutdown, or when the consumer goes away.
//!
//! A worker live here is followed through its broadcast channel; a gap or a lag is filled from
//! the store, which has every event in order. A worker run by another replica is followed
//! through the store, woken by its notices and re-read at least every second (docs §9: notices
//! are hints).

use std::{pin::Pin, time::Duration};

use tokio::sync::{broadcast, broadcast::error::RecvError, mpsc};
use tokio_stream::{Stream, wrappers::ReceiverStream};

use super::{Supervisor, Visibility, WorkerError};
use crate::workers::model::{WorkerEvent, WorkerId};

/// The slowest a watcher of another replica's worker re-reads the store between notices.
const REMOTE_WATCH_POLL: Duration = Duration::from_secs(1);

/// How many events a watcher may have in flight before the follower waits for it.
const WATCH_BUFFER: usize = 16;

/// The events of one watch, in sequence order.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<WorkerEvent, WorkerError>> + Send>>;

/// Where the follower stands and where it sends.
struct Follower {
    tx: mpsc::Sender<Result<WorkerEvent, WorkerError>>,
    last: u64,
}

impl Follower {
    /// Sends a batch in order; `false` once the watch is over (terminal event sent, or the
    /// consumer left).
    async fn send(&mut self, batch: Vec<WorkerEvent>) -> bool {
        for ev in batch {
            self.last = ev.sequence;
            let terminal = ev.state.is_terminal();
            if self.tx.send(Ok(ev)).await.is_err() || terminal {
                return false;
            }
        }
        true
    }

    /// Reports a failure to the consumer; the watch ends.
    async fn fail(&self, e: WorkerError) {
        let _ = self.tx.send(Err(e)).await;
    }
}

impl Supervisor {
    /// Watches worker `id` as `vis` may see it, from `after_sequence` (0: a snapshot first).
    pub async fn watch(
        self: &std::sync::Arc<Self>,
        id: &WorkerId,
        vis: &Visibility,
        after_sequence: u64,
    ) -> Result<EventStream, WorkerError> {
        // Another principal's worker does not exist for this caller.
        self.get(id, vis).await?;
        // Subscribe before reading, so no transition falls between the two.
        let live = self.subscribe(id);
        let first = if after_sequence == 0 {
            vec![WorkerEvent::snapshot(self.get(id, vis).await?)]
        } else {
            self.events_after(id, after_sequence).await?
        };
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let mut f = Follower {
            tx,
            last: after_sequence,
        };
        let sup = self.clone();
        let id = id.clone();
        tokio::spawn(async move {
            if !f.send(first).await {
                return;
            }
            match live {
                Some(live) => sup.follow_live(&id, live, f).await,
                None => sup.follow_store(&id, f).await,
            }
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
    }

    /// Follows a worker run here through its broadcast channel.
    async fn follow_live(
        &self,
        id: &WorkerId,
        mut live: broadcast::Receiver<WorkerEvent>,
        mut f: Follower,
    ) {
        let shutdown = self.shutdown_token();
        loop {
            let next = tokio::select! {
                ev = live.recv() => ev,
                () = shutdown.cancelled() => return,
                () = f.tx.closed() => return,
            };
            let (batch, closed) = match next {
                Ok(ev) if ev.sequence <= f.last => continue,
                Ok(ev) if ev.sequence == f.last + 1 => (vec![ev], false),
                // A gap: two writers published out of commit order (a report racing a
                // transition); the store has them in order.
                Ok(_) => match self.events_after(id, f.last).await {
                    Ok(evs) => (evs, false),
                    Err(e) => return f.fail(e).await,
                },
                // Fell behind, or the worker finished: the store has every event.
                Err(e) => match self.events_after(id, f.last).await {
                    Ok(evs) => (evs, e == RecvError::Closed),
                    Err(e) => return f.fail(e).await,
                },
            };
            if !f.send(batch).await || closed {
                return;
            }
        }
    }

    /// Follows a worker that is not live here (another replica runs it, or it ended between
    /// the two reads) through the store.
    async fn follow_store(&self, id: &WorkerId, mut f: Follower) {
        let shutdown = self.shutdown_token();
        let mut notices = self.notices();
        loop {
            tokio::select! {
                () = self.store_changed(id, &mut notices, REMOTE_WATCH_POLL) => {}
                () = shutdown.cancelled() => return,
                () = f.tx.closed() => return,
            }
            match self.events_after(id, f.last).await {
                Ok(batch) => {
                    if !f.send(batch).await {
                        return;
                    }
                }
                Err(e) => return f.fail(e).await,
            }
        }
    }
}
