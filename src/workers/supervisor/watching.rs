//! `WatchWorker` as a domain stream (docs/workers.md §6.6): a snapshot of the worker (or the
//! stored events after a sequence), then every later transition and progress event in sequence
//! order, ending after the terminal one or when the consumer goes away. On shutdown a watch of a
//! worker stopped here still gets its `killed` event (within `shutdown_grace`), else it ends
//! with `UNAVAILABLE`: never OK without the terminal event.
//!
//! A worker live here is followed through its broadcast channel; a gap or a lag is filled from
//! the store, which has every event in order. A worker run by another replica is followed
//! through the store, woken by its notices and re-read at least every second (docs §9: notices
//! are hints).

use std::{collections::VecDeque, pin::Pin, sync::Arc, time::Duration};

use tokio::sync::{broadcast, broadcast::error::RecvError};
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;

use super::{Supervisor, Visibility, WorkerError};
use crate::workers::{
    model::{WorkerEvent, WorkerId},
    store::Followed,
};

/// The slowest a watcher of another replica's worker re-reads the store between notices.
const REMOTE_WATCH_POLL: Duration = Duration::from_secs(1);

/// The events of one watch, in sequence order.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<WorkerEvent, WorkerError>> + Send>>;

/// Where a watch gets the events after the ones it has.
enum Source {
    /// The worker runs here: its broadcast channel.
    Live(broadcast::Receiver<WorkerEvent>),
    /// It does not (another replica runs it, or it ended between the two reads): the store,
    /// woken by its notices when it has them.
    Store(Option<Followed>),
}

/// One watch's state. The stream is polled by the consumer itself — no task and no channel
/// per watcher — and ends when the consumer drops it.
struct Follow {
    sup: Arc<Supervisor>,
    id: WorkerId,
    /// Sequence of the last event handed out.
    last: u64,
    /// Events read but not handed out yet, in order.
    queue: VecDeque<WorkerEvent>,
    source: Source,
    shutdown: CancellationToken,
    /// Once the service began shutting down: until when this watch waits for the terminal
    /// event (the worker is being stopped) before it ends with `UNAVAILABLE`.
    drain: Option<tokio::time::Instant>,
    /// The terminal event was handed out, the worker's channel closed, or an error was
    /// reported: nothing more comes.
    over: bool,
}

impl Follow {
    /// The next event, or `None` once the watch is over.
    async fn next(mut self) -> Option<(Result<WorkerEvent, WorkerError>, Self)> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                self.last = ev.sequence;
                if ev.state.is_terminal() {
                    self.queue.clear();
                    self.over = true;
                }
                return Some((Ok(ev), self));
            }
            if self.over {
                return None;
            }
            if let Err(e) = self.refill().await {
                self.over = true;
                return Some((Err(e), self));
            }
        }
    }

    /// Waits for what comes after `last` and queues it (or marks the watch over).
    async fn refill(&mut self) -> Result<(), WorkerError> {
        match &mut self.source {
            Source::Live(live) => {
                let next = match self.drain {
                    // Shutting down: the worker is being stopped here, and its `killed` event
                    // is what this watcher must still get.
                    Some(deadline) => match tokio::time::timeout_at(deadline, live.recv()).await {
                        Ok(ev) => ev,
                        Err(_) => return Err(WorkerError::ShuttingDown),
                    },
                    None => tokio::select! {
                        ev = live.recv() => ev,
                        () = self.shutdown.cancelled() => {
                            self.drain = Some(self.sup.drain_deadline());
                            return Ok(());
                        }
                    },
                };
                match next {
                    Ok(ev) if ev.sequence <= self.last => {}
                    Ok(ev) if ev.sequence == self.last + 1 => self.queue.push_back(ev),
                    // A gap: two writers published out of commit order (a report racing a
                    // transition); the store has them in order.
                    Ok(_) => self.queue = self.sup.events_after(&self.id, self.last).await?.into(),
                    // Fell behind, or the run ended: the store has every event.
                    Err(e) => {
                        self.queue = self.sup.events_after(&self.id, self.last).await?.into();
                        // A run that ended without a terminal event left the worker waiting for
                        // an answer (docs §12.4): it is followed in the store until it runs
                        // again (elsewhere, or in a new run here) and ends.
                        if e == RecvError::Closed
                            && !self.queue.iter().any(|ev| ev.state.is_terminal())
                        {
                            self.source = Source::Store(self.sup.notices());
                        }
                    }
                }
            }
            Source::Store(notices) => {
                let shutting_down = tokio::select! {
                    _ = self.sup.store_changed(&self.id, notices, REMOTE_WATCH_POLL) => false,
                    () = self.shutdown.cancelled() => true,
                };
                self.queue = self.sup.events_after(&self.id, self.last).await?.into();
                // Another replica runs it and goes on: this stream cannot follow it to its end,
                // so it ends as retryable (another replica can resume it), never as complete.
                if shutting_down && !self.queue.iter().any(|e| e.state.is_terminal()) {
                    return Err(WorkerError::ShuttingDown);
                }
            }
        }
        Ok(())
    }
}

impl Supervisor {
    /// Watches worker `id` as `vis` may see it, from `after_sequence` (0: a snapshot first).
    pub async fn watch(
        self: &Arc<Self>,
        id: &WorkerId,
        vis: &Visibility,
        after_sequence: u64,
    ) -> Result<EventStream, WorkerError> {
        // Subscribe before reading, so no transition falls between the two. (A receiver of a
        // worker the caller may not see is dropped unused by the error below.)
        let source = match self.subscribe(id) {
            Some(live) => Source::Live(live),
            None => Source::Store(self.notices()),
        };
        // Another principal's worker does not exist for this caller.
        let current = self.get(id, vis).await?;
        let terminal = current.state.is_terminal();
        let last = current.sequence;
        let first = if after_sequence == 0 {
            vec![WorkerEvent::snapshot(current)]
        } else {
            self.events_after(id, after_sequence).await?
        };
        // A cursor past every event the worker has is not a place to wait at: the client has
        // the wrong worker or a corrupted cursor. (An event read after `current` counts too.)
        let newest = first.last().map_or(last, |e| e.sequence.max(last));
        if after_sequence > newest {
            return Err(WorkerError::SequenceOutOfRange {
                id: id.to_string(),
                after_sequence,
                last: newest,
            });
        }
        // A finished worker whose events are all before the cursor has nothing more to send:
        // the stream ends at once, with OK.
        let over = terminal && first.is_empty();
        let follow = Follow {
            sup: self.clone(),
            id: id.clone(),
            last: after_sequence,
            queue: first.into(),
            source,
            shutdown: self.shutdown_token(),
            drain: None,
            over,
        };
        Ok(Box::pin(futures_util::stream::unfold(follow, Follow::next)))
    }
}
