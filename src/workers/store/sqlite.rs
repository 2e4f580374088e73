//! The embedded backend: one SQLite file in WAL mode (docs/workers.md §6.2).
//!
//! There is one write connection. A write that finds the store idle — nothing queued, no commit
//! in the last [`IDLE_FOR`], the connection free — commits at once on its caller's thread (one
//! short transaction, about 0.1 ms, never a checkpoint): a lone write does not pay two thread
//! hand-offs. Otherwise it is queued for the writer thread, which
//! **group-commits** — every write queued while a commit is in progress runs in the next
//! transaction, each inside its own savepoint (so one refused write never undoes another), and
//! all of them learn the outcome of that one commit. The write connection never checkpoints: a
//! checkpointer thread with a connection of its own copies the WAL back into the file (with its
//! `fsync`) every [`CHECKPOINT_EVERY`] commits, so no commit waits for one. Reads run on a small
//! pool of read-only connections through `spawn_blocking`; WAL lets them proceed while a write
//! commits. An exclusive lock file keeps a second process off the same file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, mpsc};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};
use tokio::sync::oneshot;

use super::record::{COLUMNS, creation_event, to_sql_sequence};
use super::rows::{
    apply_in, insert_event, insert_worker, list_sql, open_ids, progress_in, read_event,
    read_record, select_worker,
};
use super::schema::{check_schema_version, migrate};
use super::{Applied, ListQuery, ORPHANED_ERROR, Patch, StoreError, WorkerStore};
use crate::workers::lifecycle::Event;
use crate::workers::model::{Progress, WorkerEvent, WorkerId, WorkerRecord};

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Enough cached statements for every fixed query plus every shape a list builds
/// (see [`list_sql`]).
const STATEMENT_CACHE_CAPACITY: usize = 256;

/// Most writes grouped into one commit; bounds the latency of the first one in a burst.
const MAX_GROUP: usize = 256;

/// Idle read connections kept for reuse (more are opened under load and closed after).
const MAX_IDLE_READERS: usize = 4;

/// Commits between two checkpoints. A commit of a worker transition writes about 5–10 WAL
/// frames, so this keeps the WAL near SQLite's own default of 1,000 pages.
const CHECKPOINT_EVERY: u32 = 128;

/// WAL growth, in bytes, that nudges the checkpointer whatever the commit count: commits of
/// large events (several 130 KB events grouped into each) outgrow the WAL bound long before
/// [`CHECKPOINT_EVERY`] commits.
const CHECKPOINT_BYTES: u64 = 4 << 20;

/// Bytes of payload (event text and data, results, prompts) one group commit takes at most;
/// a write that would go over waits for the next group. Bounds one commit's WAL growth.
const MAX_GROUP_BYTES: usize = 4 << 20;

thread_local! {
    /// Frames in the WAL after the last commit on this thread, from SQLite's WAL hook (set
    /// during the commit, on the committing thread, and read right after it).
    static WAL_FRAMES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The write connection's WAL hook: records the frame count (it may not capture state).
fn wal_frames_hook(_: &rusqlite::hooks::Wal, frames: std::os::raw::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|f| f.set(u64::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// How long the store must have been without a commit for a write to commit in place. Writes
/// that come closer together than this are a stream (many clients at once), which the writer
/// thread commits in groups for less work per write; a write after a pause is a lone one, for
/// which the hand-off to that thread and back is most of its latency.
const IDLE_FOR: Duration = Duration::from_micros(200);

/// Tells one write how the commit it was grouped into ended.
type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;
/// One queued write: runs on the writer's connection inside the group's transaction (or is told
/// the transaction could not begin) and returns how to report the commit.
type WriteOp = Box<dyn FnOnce(Result<&Connection, String>) -> Finish + Send>;

/// A write queued for the writer thread, with the payload bytes it carries (for
/// [`MAX_GROUP_BYTES`]).
struct Queued {
    bytes: usize,
    op: WriteOp,
}

/// [`WorkerStore`] on one SQLite file in WAL mode: a writer thread with group commit, pooled
/// readers, and an exclusive lock file.
pub struct SqliteStore {
    /// Queue of the writer thread; dropping the store ends the thread once it is drained.
    writer: mpsc::Sender<Queued>,
    /// The write connection and what its users share.
    write: Arc<WriteSide>,
    /// Read connections and the path to open more.
    readers: Arc<Readers>,
    /// The exclusive lock on `<path>.lock`, held for the store's life (released on drop, and by
    /// the kernel when the process dies, so a crash never leaves a stale lock).
    _lock: Flock<std::fs::File>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.readers.path)
            .finish_non_exhaustive()
    }
}

/// The write connection, shared by the writer thread and the writes that commit in place.
struct WriteSide {
    /// Held by whoever commits: the writer thread for a group, or a lone write.
    conn: Mutex<Connection>,
    /// Writes handed to the writer thread and not yet committed by it; a write commits in place
    /// only when none is, so it never goes ahead of one queued before it.
    queued: AtomicUsize,
    /// Commits so far, counted to nudge the checkpointer every [`CHECKPOINT_EVERY`].
    commits: AtomicU32,
    /// WAL frames at the last nudge: another [`CHECKPOINT_BYTES`] of growth nudges again.
    nudged_frames: AtomicU64,
    /// Bytes of one WAL frame (the page size plus its header).
    frame_bytes: u64,
    /// When the last commit ended, in microseconds since `epoch`.
    last_commit_us: AtomicU64,
    /// The origin of `last_commit_us`.
    epoch: Instant,
    /// Wakes the checkpointer (a full queue means a checkpoint is due anyway).
    checkpoint: mpsc::SyncSender<()>,
    /// The exclusive `flock` on the database file itself, which any path to it meets (a hard
    /// link too). Last, so it is let go after the write connection closes: closing a
    /// descriptor of the file drops this process's POSIX locks on it, SQLite's included.
    _file_lock: Flock<std::fs::File>,
}

impl WriteSide {
    /// The write connection, waiting for it. Should a panic ever escape while it is held (a
    /// write's own are caught, see [`guarded`]), the transaction it left open is rolled back
    /// and the connection serves on.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.usable(self.conn.lock())
    }

    /// The write connection if the store is idle: no write queued for the writer thread, none
    /// committed in the last [`IDLE_FOR`], and the connection free.
    fn try_lock_idle(&self) -> Option<MutexGuard<'_, Connection>> {
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
    fn committed(&self) {
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
fn commit_alone<T>(
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

/// The bound on the WAL file, in bytes (README, "Limits"). A WAL that has grown past
/// [`WAL_TRUNCATE_AT`] is checkpointed and truncated to nothing; one that was reset in the
/// ordinary way is cut back to this size (`journal_size_limit`).
pub const WAL_LIMIT: u64 = 64 << 20;
/// The WAL size, in bytes, past which the checkpointer stops being passive. The checkpointer
/// looks every [`CHECKPOINT_EVERY`] commits, and that many commits of the largest events
/// (64 KiB of text and 64 KiB of data each, in overflow pages) add about 32 MiB: so the bound
/// holds from here.
const WAL_TRUNCATE_AT: u64 = WAL_LIMIT / 4;
/// The WAL size past which the writer thread truncates it itself before it takes the next
/// group (see [`WriteSide::hold_wal_bound`]): under [`WAL_LIMIT`] by one group and more.
const WAL_HOLD_AT: u64 = WAL_LIMIT / 2;
/// How long one truncating checkpoint may wait for readers of older snapshots to finish (writes
/// wait meanwhile); when that is not enough it gives up and tries again on the next nudge.
const TRUNCATE_WAIT: Duration = Duration::from_millis(500);

/// The checkpointer thread: on each nudge, copies what it can of the WAL back into the file
/// (`PASSIVE`: it waits for no reader or writer). A passive checkpoint never makes the WAL
/// shorter, and under a stream of writes with readers always on some snapshot the WAL may never
/// start over: once it has outgrown [`WAL_TRUNCATE_AT`], the checkpointer takes the write
/// connection (so no commit of ours races it for the write lock), runs a `TRUNCATE` checkpoint
/// (waiting at most [`TRUNCATE_WAIT`] for readers) and lets go. Ends when the write side is
/// gone.
fn checkpoint_loop(
    conn: &Connection,
    wal: &Path,
    side: &std::sync::Weak<WriteSide>,
    nudges: &mpsc::Receiver<()>,
) {
    while nudges.recv().is_ok() {
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "sqlite checkpoint failed; the WAL grows until one succeeds");
            continue;
        }
        let size = std::fs::metadata(wal).map_or(0, |m| m.len());
        if size < WAL_TRUNCATE_AT {
            continue;
        }
        let Some(side) = side.upgrade() else { return };
        let writes = side.lock();
        // Columns: busy (1 when a reader kept it from finishing), frames in the WAL, frames
        // copied back.
        let busy = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        });
        drop(writes);
        match busy {
            Ok(0) => tracing::debug!(wal_bytes = size, "sqlite WAL truncated"),
            Ok(_) => tracing::debug!(
                wal_bytes = size,
                "sqlite WAL truncation waited out its bound; trying again at the next checkpoint"
            ),
            Err(e) => tracing::warn!(error = %e, wal_bytes = size, "sqlite WAL truncation failed"),
        }
    }
}

/// Idle read-only connections to the store file.
struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// Runs `f` on an idle connection (or a new one), then keeps the connection for reuse.
    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open_reader(&self.path)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }
}

fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("open {} for reading", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .context("set busy timeout")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating it and its parent directories if needed) the store at `path`, takes its
    /// lock file, configures it (WAL, `synchronous=NORMAL`, a busy timeout, foreign keys, no
    /// automatic checkpoints), brings its schema up to date and starts the writer and
    /// checkpointer threads. A file from a newer binary is [`StoreError::SchemaTooNew`]; a file
    /// another process holds is [`StoreError::Locked`].
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_owned(),
                source,
            })?;
        }
        let lock = lock_exclusively(&canonical(path)?)?;
        let file_lock = lock_the_file_itself(path)?;
        let mut conn =
            Connection::open(path).with_context(|| format!("open {}", path.display()))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .context("set busy timeout")?;
        // Refuse a newer file before changing anything in it, journal mode included.
        check_schema_version(&conn)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .context("enable WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .context("set synchronous=NORMAL")?;
        conn.pragma_update(None, "foreign_keys", true)
            .context("enable foreign keys")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        migrate(&mut conn)?;
        // Commits may run on a serving thread; the checkpointer does the copying and syncing.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .context("turn automatic checkpoints off")?;
        // After the pragma above, which installs a hook of its own: the WAL's size after each
        // commit, for checkpoints by size.
        conn.wal_hook(Some(wal_frames_hook));
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .context("read page_size")?;
        // A WAL reset by a writer is cut back to the bound instead of keeping its largest size.
        conn.pragma_update(None, "journal_size_limit", WAL_LIMIT as i64)
            .context("set journal_size_limit")?;
        let checkpointer = Connection::open(path)
            .with_context(|| format!("open {} for checkpoints", path.display()))?;
        // Only the truncating checkpoint waits (a passive one never does): for this long.
        checkpointer
            .busy_timeout(TRUNCATE_WAIT)
            .context("set busy timeout")?;
        let wal = wal_path(path);
        let (nudge, nudges) = mpsc::sync_channel(1);
        let write = Arc::new(WriteSide {
            conn: Mutex::new(conn),
            queued: AtomicUsize::new(0),
            commits: AtomicU32::new(0),
            nudged_frames: AtomicU64::new(0),
            // A frame is a page and a 24-byte header.
            frame_bytes: u64::try_from(page_size).unwrap_or(4096) + 24,
            last_commit_us: AtomicU64::new(0),
            epoch: Instant::now(),
            checkpoint: nudge,
            _file_lock: file_lock,
        });
        let side = Arc::downgrade(&write);
        start_thread("agentry-sqlite-checkpoint", path, move || {
            checkpoint_loop(&checkpointer, &wal, &side, &nudges);
        })?;
        let (writer, queue) = mpsc::channel();
        let side = write.clone();
        start_thread("agentry-sqlite-writer", path, move || {
            write_loop(&side, &queue);
        })?;
        Ok(SqliteStore {
            writer,
            write,
            readers: Arc::new(Readers {
                path: path.to_owned(),
                idle: Mutex::new(Vec::new()),
            }),
            _lock: lock,
        })
    }

    /// Commits `f` at once on this thread if the write connection is idle; otherwise queues it
    /// for the writer thread and waits for the commit of the group it ran in.
    async fn write<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.write_sized(what, 0, f).await
    }

    /// [`Self::write`] of a write carrying about `bytes` of payload (bounds its group).
    async fn write_sized<T: Send + 'static>(
        &self,
        what: &'static str,
        bytes: usize,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        if let Some(conn) = self.write.try_lock_idle() {
            let result = commit_alone(&conn, what, f);
            drop(conn);
            if result.is_ok() {
                self.write.committed();
            }
            return result;
        }
        let (tx, rx) = oneshot::channel();
        let op: WriteOp = Box::new(move |conn| {
            let result = conn
                .map_err(|message| StoreError::Commit { what, message })
                .and_then(|conn| in_savepoint(conn, what, f));
            Box::new(move |commit| {
                let outcome = match commit {
                    Ok(()) => result,
                    // The whole group is gone; what this write did was not kept either.
                    Err(message) => result.and(Err(StoreError::Commit { what, message })),
                };
                let _ = tx.send(outcome);
            })
        });
        self.write.queued.fetch_add(1, Ordering::AcqRel);
        if self.writer.send(Queued { bytes, op }).is_err() {
            self.write.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(StoreError::Closed);
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Runs `f` on a read connection on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let readers = self.readers.clone();
        tokio::task::spawn_blocking(move || readers.with(f))
            .await
            .map_err(|_| StoreError::Closed)?
    }
}

/// Starts one of the store's threads; failing to is an I/O error of the store at `path`.
fn start_thread(
    name: &str,
    path: &Path,
    run: impl FnOnce() + Send + 'static,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(run)
        .map(drop)
        .map_err(|source| StoreError::Io {
            path: path.to_owned(),
            source,
        })
}

/// Runs `f` inside a savepoint: its writes are undone alone if it fails.
fn in_savepoint<T>(
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
fn write_loop(side: &WriteSide, queue: &mpsc::Receiver<Queued>) {
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

#[async_trait::async_trait]
impl WorkerStore for SqliteStore {
    async fn create(&self, rec: &WorkerRecord) -> Result<WorkerEvent, StoreError> {
        let event = creation_event(rec);
        let bytes = rec.spec.prompt.len();
        self.write_sized("create worker", bytes, move |tx| {
            if let Some(request_id) = &event.worker.spec.request_id {
                let existing = tx
                    .prepare_cached(
                        "SELECT id FROM workers WHERE caller_scope = ?1 AND request_id = ?2",
                    )
                    .and_then(|mut stmt| {
                        stmt.query_row(params![event.worker.spec.caller_scope, request_id], |row| {
                            row.get::<_, WorkerId>(0)
                        })
                        .optional()
                    })
                    .context("look up request_id")?;
                if let Some(existing) = existing {
                    return Err(StoreError::DuplicateRequestId {
                        request_id: request_id.clone(),
                        existing,
                    });
                }
            }
            insert_worker(tx, &event.worker)?;
            insert_event(tx, &event)?;
            Ok(event)
        })
        .await
    }

    async fn apply(
        &self,
        id: &WorkerId,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        let id = id.clone();
        let bytes = [&patch.result, &patch.structured_result, &patch.error]
            .iter()
            .map(|f| f.as_ref().map_or(0, String::len))
            .sum();
        self.write_sized("apply worker event", bytes, move |tx| {
            apply_in(tx, &id, event, patch, now_ms)
        })
        .await
    }

    async fn get(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError> {
        let id = id.clone();
        self.read(move |conn| select_worker(conn, &id)).await
    }

    async fn list(&self, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError> {
        let (sql, args) = list_sql(q);
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&sql).context("list workers")?;
            let rows = stmt
                .query_map(params_from_iter(args), read_record)
                .context("list workers")?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .context("list workers")
        })
        .await
    }

    async fn events_after(
        &self,
        id: &WorkerId,
        after_sequence: u64,
    ) -> Result<Vec<WorkerEvent>, StoreError> {
        let id = id.clone();
        self.read(move |conn| {
            // One read transaction, so the row and its events are from the same moment.
            conn.execute_batch("BEGIN")
                .context("read worker events: begin")?;
            let result = (|| {
                let worker =
                    select_worker(conn, &id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT sequence, state, time_ms, snapshot, progress FROM worker_events
                         WHERE worker_id = ?1 AND sequence > ?2 ORDER BY sequence",
                    )
                    .context("read worker events")?;
                let rows = stmt
                    .query_map(params![id, to_sql_sequence(after_sequence)], |row| {
                        read_event(row, &worker)
                    })
                    .context("read worker events")?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .context("read worker events")
            })();
            let _ = conn.execute_batch("COMMIT");
            result
        })
        .await
    }

    async fn record_worktree(&self, id: &WorkerId, worktree: &str) -> Result<(), StoreError> {
        let (id, worktree) = (id.clone(), worktree.to_owned());
        self.write("record a worktree", move |tx| {
            tx.execute(
                "UPDATE workers SET worktree = ?2
                  WHERE id = ?1 AND state NOT IN ('pending', 'running')",
                params![id, worktree],
            )
            .context("record a worktree")?;
            Ok(())
        })
        .await
    }

    async fn close_orphans(&self, now_ms: i64) -> Result<Vec<WorkerId>, StoreError> {
        self.write("close orphaned workers", move |tx| {
            let open = open_ids(tx)?;
            for id in &open {
                let patch = Patch {
                    error: Some(ORPHANED_ERROR.to_owned()),
                    ..Patch::default()
                };
                apply_in(tx, id, Event::Fail, patch, now_ms)?;
            }
            Ok(open)
        })
        .await
    }

    async fn open_workers(&self) -> Result<Vec<WorkerId>, StoreError> {
        self.read(open_ids).await
    }

    async fn find_by_token_hash(&self, hash: &str) -> Result<Option<WorkerRecord>, StoreError> {
        let hash = hash.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM workers
                 WHERE token_hash = ?1 AND state IN ('pending', 'running')"
            ))
            .and_then(|mut stmt| stmt.query_row([hash], read_record).optional())
            .context("find worker by token")
        })
        .await
    }

    async fn append_progress(
        &self,
        id: &WorkerId,
        progress: Progress,
        now_ms: i64,
        max_events: u64,
    ) -> Result<WorkerEvent, StoreError> {
        let id = id.clone();
        let bytes = progress.text.len() + progress.data_json.as_ref().map_or(0, String::len);
        self.write_sized("record progress", bytes, move |tx| {
            progress_in(tx, &id, progress, now_ms, max_events)
        })
        .await
    }

    async fn find_by_request_id(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<WorkerRecord>, StoreError> {
        let (scope, rid) = (caller_scope.to_owned(), request_id.to_owned());
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM workers WHERE caller_scope = ?1 AND request_id = ?2"
            ))
            .and_then(|mut stmt| stmt.query_row([scope, rid], read_record).optional())
            .context("find worker by request_id")
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).context("ping"))
            .await
    }

    // `shared` stays `None`: one process owns the file (the lock above), so there is no lease
    // to renew, nobody else to notify, stop or race for a claim.
}

/// The WAL file SQLite keeps beside the database: its name with `-wal` appended.
pub fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// The one path of the database file, whichever path reached it: symlinks (of the file or of
/// any directory above it), `.` and `..` resolved, so the lock file beside it is the same for
/// every way of naming the file. A file that does not exist yet is named in its canonical
/// directory (created by the caller).
fn canonical(path: &Path) -> Result<PathBuf, StoreError> {
    let io = |path: &Path, source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    match std::fs::canonicalize(path) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let dir = std::fs::canonicalize(dir).map_err(|e| io(dir, e))?;
            Ok(match path.file_name() {
                Some(name) => dir.join(name),
                None => dir,
            })
        }
        Err(e) => Err(io(path, e)),
    }
}

/// Takes an exclusive `flock` on `<db>.lock` (a file beside the database, so SQLite's own POSIX
/// locks are untouched) and writes who holds it; a held lock is [`StoreError::Locked`] naming
/// the holder.
fn lock_exclusively(db: &Path) -> Result<Flock<std::fs::File>, StoreError> {
    use std::io::{Read, Seek, Write};
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StoreError::Locked {
                path: db.to_owned(),
                holder: if holder.is_empty() {
                    "holder unknown".to_owned()
                } else {
                    holder.to_owned()
                },
            });
        }
        Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
    };
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown host".to_owned());
    let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let note = format!("pid {} on {host}, since {since}", std::process::id());
    lock.set_len(0).map_err(io)?;
    lock.rewind().map_err(io)?;
    lock.write_all(note.as_bytes()).map_err(io)?;
    Ok(lock)
}

/// Tries of [`lock_the_file_itself`], 10 ms apart.
const FILE_LOCK_TRIES: u32 = 100;

/// Takes an exclusive `flock` on the database file (creating it empty, which SQLite reads as a
/// new database): the lock file names the holder for every path that resolves to the same
/// canonical path, and this catches the paths that do not — a hard link under another name is
/// the same inode. `flock` locks are apart from the POSIX locks SQLite takes on the file.
fn lock_the_file_itself(db: &Path) -> Result<Flock<std::fs::File>, StoreError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(db)
        .map_err(|source| StoreError::Io {
            path: db.to_owned(),
            source,
        })?;
    // A store of this process closed just now lets go of the file when its writer thread has
    // drained (the lock file above is already free then): wait that long, not more.
    let mut file = file;
    let mut tries = 1;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, Errno::EWOULDBLOCK)) if tries < FILE_LOCK_TRIES => {
                file = f;
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(StoreError::Locked {
                    path: db.to_owned(),
                    holder: "the file itself is locked: another path to it, such as a hard link, \
                             is in use"
                        .to_owned(),
                });
            }
            Err((_, errno)) => {
                return Err(StoreError::Io {
                    path: db.to_owned(),
                    source: std::io::Error::from(errno),
                });
            }
        }
    }
}

/// Attaches what the store was doing to a SQLite error, and reports decoding failures as
/// [`StoreError::Corrupt`] rather than as SQLite failures.
pub(super) trait Context<T> {
    /// Adds a fixed description.
    fn context(self, what: &str) -> Result<T, StoreError>;
    /// Adds a description built only if there is an error, for the hot path.
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> Context<T> for rusqlite::Result<T> {
    fn context(self, what: &str) -> Result<T, StoreError> {
        self.with_context(|| what.to_owned())
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|source| match source {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => {
                StoreError::Corrupt(format!("{}: {source}", what()))
            }
            source => StoreError::Sqlite {
                context: what(),
                source,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use rusqlite::{Connection, params_from_iter, types::Value};

    use super::*;
    use crate::workers::model::WorkerState;
    use crate::workers::store::{
        ListQuery, ParentFilter,
        schema::MIGRATIONS,
        suite::{self, create, ids, moved},
    };

    /// A store on a real file, in a directory that does not exist yet (so `open` must create it).
    fn open_temp() -> (tempfile::TempDir, PathBuf, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("agentry.db");
        let store = SqliteStore::open(&path).unwrap();
        (dir, path, store)
    }

    suite::store_suite!(async {
        let (dir, _path, store) = open_temp();
        Some((dir, Arc::new(store) as Arc<dyn WorkerStore>))
    });

    #[tokio::test]
    async fn close_orphans_fails_every_open_row_of_the_file() {
        let (_dir, _path, store) = open_temp();
        suite::close_orphans_fails_open_rows_and_leaves_closed_ones(&store).await;
    }

    #[test]
    fn every_query_uses_an_index() {
        let (_dir, path, _store) = open_temp();
        let parent = WorkerId::generate();
        let cursor = Some((5, WorkerId::generate()));
        let mut statements = Vec::new();
        for parent in [ParentFilter::Any, ParentFilter::Worker(parent)] {
            for states in [&[][..], &[WorkerState::Running], &WorkerState::ALL[..2]] {
                for after in [None, cursor.clone()] {
                    for caller_scope in [None, Some("alice".to_owned())] {
                        let q = ListQuery {
                            parent: parent.clone(),
                            states: states.to_vec(),
                            caller_scope,
                            after: after.clone(),
                            limit: 10,
                        };
                        statements.push(list_sql(&q));
                    }
                }
            }
        }
        let id = Value::Text(WorkerId::generate().to_string());
        let text = |s: &str| Value::Text(s.to_owned());
        for (sql, args) in [
            (format!("SELECT {COLUMNS} FROM workers WHERE id = ?1"), vec![id.clone()]),
            (
                format!("SELECT {COLUMNS} FROM workers WHERE parent_id = ?1 ORDER BY create_time_ms, id"),
                vec![id.clone()],
            ),
            (
                format!("SELECT {COLUMNS} FROM workers WHERE token_hash = ?1 AND state IN ('pending', 'running')"),
                vec![text("ab")],
            ),
            (
                format!("SELECT {COLUMNS} FROM workers WHERE caller_scope = ?1 AND request_id = ?2"),
                vec![text("anonymous"), text("r")],
            ),
            (
                "SELECT id FROM workers WHERE state IN ('pending', 'running') ORDER BY create_time_ms, id".to_owned(),
                vec![],
            ),
            (
                "SELECT sequence FROM worker_events WHERE worker_id = ?1 AND sequence > ?2 ORDER BY sequence".to_owned(),
                vec![id.clone(), Value::Integer(0)],
            ),
        ] {
            statements.push((sql, args));
        }
        let conn = Connection::open(&path).unwrap();
        for (sql, args) in statements {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan: Vec<String> = stmt
                .query_map(params_from_iter(args), |row| row.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(
                plan.iter()
                    .all(|step| !step.starts_with("SCAN") || step.contains("INDEX")),
                "full scan in {sql}: {plan:?}"
            );
        }
    }

    #[tokio::test]
    async fn data_survives_closing_and_reopening() {
        let (_dir, path, store) = open_temp();
        let parent = create(&store, None, 1_000).await;
        let child = create(&store, Some(&parent), 1_500).await;
        let started = moved(
            store
                .apply(&parent.id, Event::Start, Patch::default(), 2_000)
                .await
                .unwrap(),
        );
        let events = store.events_after(&parent.id, 0).await.unwrap();
        drop(store);

        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get(&parent.id).await.unwrap(), Some(started.worker));
        assert_eq!(store.get(&child.id).await.unwrap(), Some(child.clone()));
        assert_eq!(store.events_after(&parent.id, 0).await.unwrap(), events);
        let children = store
            .list(&ListQuery {
                parent: ParentFilter::Worker(parent.id.clone()),
                states: Vec::new(),
                caller_scope: None,
                after: None,
                limit: 10,
            })
            .await
            .unwrap();
        assert_eq!(ids(&children), [child.id]);
        let mode: String = Connection::open(&path)
            .unwrap()
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_newer_schema_is_refused_with_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("future.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 999)
            .unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 999,
                    known: 5
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("version 999") && message.contains("(version 5)"),
            "{message}"
        );
    }

    #[test]
    fn a_new_file_gets_the_latest_schema_version() {
        let (_dir, path, store) = open_temp();
        drop(store);
        let version: i64 = Connection::open(&path)
            .unwrap()
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        // Opening again applies nothing and succeeds.
        SqliteStore::open(&path).unwrap();
    }

    #[tokio::test]
    async fn undecodable_rows_are_reported_as_corrupt() {
        let (_dir, path, store) = open_temp();
        let rec = create(&store, None, 1_000).await;
        Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE workers SET effective = 'not json' WHERE id = ?1",
                [&rec.id],
            )
            .unwrap();
        let err = store.get(&rec.id).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    }

    #[test]
    fn a_second_open_of_the_same_file_is_refused_naming_the_holder() {
        let (_dir, path, _store) = open_temp();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
    }

    /// A write that inserts a worker row, then panics; the error it ends with, and the name of
    /// the thread it ran on.
    async fn panicking_write(store: &SqliteStore, rec: &WorkerRecord) -> (String, String) {
        let rec = rec.clone();
        let ran_on = Arc::new(Mutex::new(String::new()));
        let seen = ran_on.clone();
        let error = store
            .write("a write that panics", move |conn| {
                *seen.lock().unwrap() = std::thread::current().name().unwrap_or("").to_owned();
                insert_worker(conn, &rec)?;
                panic!("a bug in a write");
                #[allow(unreachable_code)]
                Ok(())
            })
            .await
            .unwrap_err()
            .to_string();
        let thread = ran_on.lock().unwrap().clone();
        (error, thread)
    }

    #[tokio::test]
    async fn a_write_that_panicked_is_undone_and_the_store_writes_on() {
        let (_dir, _path, store) = open_temp();
        let message = "worker store: a write that panics: commit failed: the write panicked; \
                       nothing of it was kept";
        // In place: the store has been idle, so the write runs on its caller's thread.
        std::thread::sleep(IDLE_FOR * 2);
        let inline = suite::record(None, 1_000);
        let (error, thread) = panicking_write(&store, &inline).await;
        assert_eq!(error, message);
        assert_eq!(thread, std::thread::current().name().unwrap());
        // Queued: a commit just ended, so the write goes to the writer thread.
        store.write.committed();
        let queued = suite::record(None, 2_000);
        let (error, thread) = panicking_write(&store, &queued).await;
        assert_eq!(error, message);
        assert_eq!(thread, "agentry-sqlite-writer");
        // Neither row was kept; both paths write on.
        for rec in [&inline, &queued] {
            assert_eq!(store.get(&rec.id).await.unwrap(), None);
        }
        std::thread::sleep(IDLE_FOR * 2);
        let alone = create(&store, None, 3_000).await;
        store.write.committed();
        let grouped = create(&store, None, 4_000).await;
        for rec in [&alone, &grouped] {
            assert_eq!(store.get(&rec.id).await.unwrap().unwrap().id, rec.id);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_wal_stays_bounded_under_a_stream_of_progress_events() {
        use crate::workers::model::{Progress, ProgressKind};
        let (_dir, path, store) = open_temp();
        let store = Arc::new(store);
        let wal = wal_path(&path);
        let mut ids = Vec::new();
        for i in 0..4 {
            let rec = create(&*store, None, 1_000 + i).await;
            store
                .apply(&rec.id, Event::Start, Patch::default(), 1_100)
                .await
                .unwrap();
            ids.push(rec.id);
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Watchers following each worker keep read snapshots open nearly all along, which is
        // what keeps a passive checkpoint from ever letting the WAL start over.
        let mut readers = Vec::new();
        for id in ids.clone() {
            let (store, done) = (store.clone(), done.clone());
            readers.push(tokio::spawn(async move {
                let mut last = 0;
                while !done.load(Ordering::Relaxed) {
                    if let Some(ev) = store.events_after(&id, last).await.unwrap().last() {
                        last = ev.sequence;
                    }
                    store.get(&id).await.unwrap();
                }
            }));
        }
        let sampler = {
            let (wal, done) = (wal.clone(), done.clone());
            std::thread::spawn(move || {
                let mut max = 0;
                while !done.load(Ordering::Relaxed) {
                    max = max.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
                    std::thread::sleep(Duration::from_millis(5));
                }
                max
            })
        };
        // About 160 MB of progress text, from four writers at once.
        let text = "x".repeat(60 * 1024);
        let writers: Vec<_> = ids
            .iter()
            .cloned()
            .map(|id| {
                let (store, text) = (store.clone(), text.clone());
                tokio::spawn(async move {
                    for n in 0..650 {
                        let p = Progress {
                            kind: ProgressKind::Text,
                            text: text.clone(),
                            data_json: None,
                        };
                        store
                            .append_progress(&id, p, 2_000 + n, 100_000)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap();
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            r.await.unwrap();
        }
        let max = sampler.join().unwrap();
        eprintln!("largest WAL seen: {max} bytes");
        assert!(
            max <= WAL_LIMIT,
            "the WAL reached {max} bytes; the bound is {WAL_LIMIT}"
        );
    }

    #[tokio::test]
    async fn the_checkpointer_copies_the_wal_back_into_the_file() {
        let (_dir, path, store) = open_temp();
        let size = || std::fs::metadata(&path).unwrap().len();
        let before = size();
        // The write connection never checkpoints: only the checkpointer, nudged every
        // CHECKPOINT_EVERY commits, makes the file itself grow.
        for i in 0..CHECKPOINT_EVERY {
            create(&store, None, 1_000 + i64::from(i)).await;
        }
        let grew = (0..250).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            size() > before
        });
        assert!(grew, "the file stayed at {before} bytes");
    }
}
