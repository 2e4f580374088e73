//! Writes: the one write connection and the writer thread's group commit. A write that finds
//! the store idle — nothing queued, no commit in the last [`IDLE_FOR`], the connection free —
//! commits at once on its caller's thread (one short transaction, about 0.1 ms, never a
//! checkpoint): a lone write does not pay two thread hand-offs. Otherwise it is queued for the
//! writer thread, which **group-commits** — every write queued while a commit is in progress
//! runs in the next transaction, each inside its own savepoint (so one refused write never
//! undoes another), and all of them learn the outcome of that one commit. A write that panics
//! is undone like a failed one. Each commit counts towards nudging the checkpointer, and the
//! writer truncates a WAL that outgrew its bound itself (the bounds are `wal`'s). Which path a
//! write takes is decided by `SqliteStore::write`, with the parts this file provides.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError, mpsc};
use std::time::{Duration, Instant};

use nix::fcntl::Flock;
use rusqlite::Connection;

use super::context::Context;
use super::wal::{CHECKPOINT_BYTES, CHECKPOINT_EVERY, WAL_FRAMES, WAL_HOLD_AT};
use crate::workers::store::StoreError;

/// Most writes grouped into one commit; bounds the latency of the first one in a burst.
const MAX_GROUP: usize = 256;

/// Bytes of payload (event text and data, results, prompts) one group commit takes at most;
/// a write that would go over waits for the next group. Bounds one commit's WAL growth.
const MAX_GROUP_BYTES: usize = 4 << 20;

/// How long the store must have been without a commit for a write to commit in place. Writes
/// that come closer together than this are a stream (many clients at once), which the writer
/// thread commits in groups for less work per write; a write after a pause is a lone one, for
/// which the hand-off to that thread and back is most of its latency.
pub(super) const IDLE_FOR: Duration = Duration::from_micros(200);

/// Tells one write how the commit it was grouped into ended.
pub(super) type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;

/// One queued write: runs on the writer's connection inside the group's transaction (or is told
/// the transaction could not begin) and returns how to report the commit.
pub(super) type WriteOp = Box<dyn FnOnce(Result<&Connection, String>) -> Finish + Send>;

/// A write queued for the writer thread, with the payload bytes it carries (for
/// [`MAX_GROUP_BYTES`]).
pub(super) struct Queued {
    /// The payload bytes it carries.
    pub(super) bytes: usize,
    /// The write itself.
    pub(super) op: WriteOp,
}

/// The write connection, shared by the writer thread and the writes that commit in place.
pub(super) struct WriteSide {
    /// Held by whoever commits: the writer thread for a group, or a lone write.
    pub(super) conn: Mutex<Connection>,
    /// Writes handed to the writer thread and not yet committed by it; a write commits in place
    /// only when none is, so it never goes ahead of one queued before it.
    pub(super) queued: AtomicUsize,
    /// Commits so far, counted to nudge the checkpointer every [`CHECKPOINT_EVERY`].
    pub(super) commits: AtomicU32,
    /// WAL frames at the last nudge: another [`CHECKPOINT_BYTES`] of growth nudges again.
    pub(super) nudged_frames: AtomicU64,
    /// Bytes of one WAL frame (the page size plus its header).
    pub(super) frame_bytes: u64,
    /// When the last commit ended, in microseconds since `epoch`.
    pub(super) last_commit_us: AtomicU64,
    /// The origin of `last_commit_us`.
    pub(super) epoch: Instant,
    /// Wakes the checkpointer (a full queue means a checkpoint is due anyway).
    pub(super) checkpoint: mpsc::SyncSender<()>,
    /// The exclusive `flock` on the database file itself, which any path to it meets (a hard
    /// link too). Last, so it is let go after the write connection closes: closing a
    /// descriptor of the file drops this process's POSIX locks on it, SQLite's included.
    pub(super) _file_lock: Flock<std::fs::File>,
}

impl WriteSide {
    /// The write connection, waiting for it. Should a panic ever escape while it is held (a
    /// write's own are caught, see [`guarded`]), the transaction it left open is rolled back
    /// and the connection serves on.
    pub(super) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.usable(self.conn.lock())
    }

    /// The write connection if the store is idle: no write queued for the writer thread, none
    /// committed in the last [`IDLE_FOR`], and the connection free.
    pub(super) fn try_lock_idle(&self) -> Option<MutexGuard<'_, Connection>> {
        if self.queued.load(Ordering::Acquire) != 0
            || self
                .since_epoch_us()
                .saturating_sub(self.last_commit_us.load(Ordering::Relaxed))
                < IDLE_FOR.as_micros() as u64
        {
            return None;
        }
        match self.conn.try_lock() {
            Ok(conn) => Some(self.usable(Ok(conn))),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(poisoned)) => Some(self.usable(Err(poisoned))),
        }
    }

    /// The connection of a lock just taken, poisoned or not: the poison is cleared and a
    /// transaction left open by whoever panicked is rolled back.
    fn usable<'a>(
        &self,
        locked: Result<MutexGuard<'a, Connection>, PoisonError<MutexGuard<'a, Connection>>>,
    ) -> MutexGuard<'a, Connection> {
        let conn = locked.unwrap_or_else(|poisoned| {
            self.conn.clear_poison();
            poisoned.into_inner()
        });
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn
    }

    fn since_epoch_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The backstop of the WAL bound, run by the writer thread after a group's callers have
    /// their answers: a WAL past [`WAL_HOLD_AT`] (the checkpointer has not kept up, readers
    /// kept it from truncating) is truncated here, with the write connection held, so the next
    /// groups wait for it instead of growing it further.
    fn hold_wal_bound(&self) {
        let frames = WAL_FRAMES.with(std::cell::Cell::get);
        if frames * self.frame_bytes < WAL_HOLD_AT {
            return;
        }
        let conn = self.lock();
        match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        }) {
            Ok(0) => {
                WAL_FRAMES.with(|f| f.set(0));
                tracing::debug!(frames, "sqlite WAL truncated by the writer");
            }
            Ok(_) => tracing::warn!(
                frames,
                "sqlite WAL truncation waited out its bound; readers hold old snapshots"
            ),
            Err(e) => tracing::warn!(error = %e, frames, "sqlite WAL truncation failed"),
        }
    }

    /// Counts one commit, nudging the checkpointer every [`CHECKPOINT_EVERY`] commits and
    /// every [`CHECKPOINT_BYTES`] of WAL growth (the WAL hook's count on this thread).
    pub(super) fn committed(&self) {
        self.last_commit_us
            .store(self.since_epoch_us(), Ordering::Relaxed);
        let frames = WAL_FRAMES.with(std::cell::Cell::get);
        let nudged = self.nudged_frames.load(Ordering::Relaxed);
        // A WAL that started over has fewer frames than at the last nudge.
        let grown =
            frames.saturating_sub(nudged) * self.frame_bytes >= CHECKPOINT_BYTES || frames < nudged;
        let counted =
            self.commits.fetch_add(1, Ordering::Relaxed) % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1;
        if grown || counted {
            self.nudged_frames.store(frames, Ordering::Relaxed);
            let _ = self.checkpoint.try_send(());
        }
    }
}

/// Runs one write alone in its own transaction on `conn`: committed if it succeeds, rolled back
/// if it fails.
pub(super) fn commit_alone<T>(
    conn: &Connection,
    what: &'static str,
    f: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    begin(conn).map_err(|message| StoreError::Commit { what, message })?;
    match guarded(conn, what, f) {
        Ok(value) => commit(conn)
            .map(|()| value)
            .map_err(|message| StoreError::Commit { what, message }),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Opens the write transaction of a lone write or a group.
fn begin(conn: &Connection) -> Result<(), String> {
    conn.prepare_cached("BEGIN IMMEDIATE")
        .and_then(|mut stmt| stmt.execute([]))
        .map(drop)
        .map_err(|e| format!("begin: {e}"))
}

/// Commits the open write transaction, rolling it back if the commit fails.
fn commit(conn: &Connection) -> Result<(), String> {
    conn.prepare_cached("COMMIT")
        .and_then(|mut stmt| stmt.execute([]))
        .map(drop)
        .map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            e.to_string()
        })
}

/// Runs `f`, turning a panic (a bug in a write) into an error, so the write is undone like any
/// failed one and neither the connection nor the writer thread is lost with it.
fn guarded<T>(
    conn: &Connection,
    what: &'static str,
    f: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn))).unwrap_or_else(|_| {
        tracing::error!(
            write = what,
            "a store write panicked; what it wrote is undone"
        );
        Err(StoreError::Commit {
            what,
            message: "the write panicked; nothing of it was kept".to_owned(),
        })
    })
}

/// Runs `f` inside a savepoint: its writes are undone alone if it fails.
pub(super) fn in_savepoint<T>(
    conn: &Connection,
    what: &'static str,
    f: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    conn.execute_batch("SAVEPOINT op").context("savepoint")?;
    match guarded(conn, what, f) {
        Ok(value) => {
            conn.execute_batch("RELEASE op")
                .context("release savepoint")?;
            Ok(value)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK TO op; RELEASE op");
            Err(e)
        }
    }
}

/// The writer thread: takes every queued write (up to [`MAX_GROUP`] writes and
/// [`MAX_GROUP_BYTES`] of payload), runs them in one transaction and reports its commit to
/// each. Ends when the store is dropped.
pub(super) fn write_loop(side: &WriteSide, queue: &mpsc::Receiver<Queued>) {
    let mut held: Option<Queued> = None;
    while let Some(first) = held.take().or_else(|| next_write(queue)) {
        let mut bytes = first.bytes;
        let mut group = vec![first.op];
        while group.len() < MAX_GROUP && bytes < MAX_GROUP_BYTES {
            match queue.try_recv() {
                Ok(q) if bytes + q.bytes > MAX_GROUP_BYTES => {
                    // Starts the next group: this one is full.
                    held = Some(q);
                    break;
                }
                Ok(q) => {
                    bytes += q.bytes;
                    group.push(q.op);
                }
                Err(_) => break,
            }
        }
        let taken = group.len();
        let conn = side.lock();
        let (finishers, commit): (Vec<Finish>, _) = match begin(&conn) {
            Ok(()) => {
                let finishers = group.into_iter().map(|op| op(Ok(&conn))).collect();
                (finishers, commit(&conn))
            }
            Err(message) => {
                let finishers = group
                    .into_iter()
                    .map(|op| op(Err(message.clone())))
                    .collect();
                (finishers, Err(message))
            }
        };
        drop(conn);
        side.queued.fetch_sub(taken, Ordering::AcqRel);
        if commit.is_ok() {
            side.committed();
        }
        for finish in finishers {
            finish(commit.clone());
        }
        if commit.is_ok() {
            side.hold_wal_bound();
        }
    }
}

/// How long the writer keeps looking for the next write, giving its CPU to others between looks,
/// before it sleeps until one comes.
const STAY_AWAKE: Duration = Duration::from_micros(300);

/// The next queued write; `None` once the store is dropped. A write that arrives within
/// [`STAY_AWAKE`] of the last group is taken without the writer having slept: waking a sleeping
/// thread on a busy machine cost more than the commit itself (under 8 clients spawning, a write
/// waited 0.64 ms at the median for the writer to run it, and its group took 0.11 ms).
fn next_write(queue: &mpsc::Receiver<Queued>) -> Option<Queued> {
    let until = Instant::now() + STAY_AWAKE;
    loop {
        match queue.try_recv() {
            Ok(op) => return Some(op),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if Instant::now() < until => {
                std::thread::yield_now();
            }
            Err(mpsc::TryRecvError::Empty) => return queue.recv().ok(),
        }
    }
}
