//! The embedded backend: one SQLite file in WAL mode (docs/workers.md §6.2).
//!
//! There is one write connection. A write that finds the store idle commits at once on its
//! caller's thread; otherwise the writer thread **group-commits** it with every write queued
//! meanwhile, each inside its own savepoint (`writer`). The write connection never
//! checkpoints: a checkpointer thread with a connection of its own copies the WAL back into the
//! file, so no commit waits for one (`checkpoint`), and the WAL stays within its bound (`wal`).
//! Reads run on a small pool of read-only connections through `spawn_blocking` (`readers`);
//! WAL lets them proceed while a write commits. An exclusive lock file keeps a second process
//! off the same file (`lock`).
//!
//! This file holds [`SqliteStore`], how it opens, and its [`WorkerStore`] implementation; the
//! rest is one file per concern:
//!
//! - `writer`: the write connection, in-place commits and the writer thread's group commit;
//! - `wal`, `checkpoint`: the WAL's bound, and the checkpointer thread that keeps it;
//! - `readers`: connection settings and the pool of read-only connections;
//! - `lock`: the lock file and the `flock` on the database file;
//! - `rows`, `schema`: rows ⇄ records and the statements, the versioned migrations;
//! - `context`: error context, the leaf the others use.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Instant;

use nix::fcntl::Flock;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use tokio::sync::oneshot;

use super::record::{COLUMNS, creation_event, to_sql_sequence};
use super::{
    Applied, Continued, ListQuery, Message, ORPHANED_ERROR, Patch, Sent, StoreError, WorkerStore,
};
use crate::workers::lifecycle::Event;
use crate::workers::model::{Progress, WorkerEvent, WorkerId, WorkerRecord, WorkerState};
use checkpoint::checkpoint_loop;
use context::Context;
use lock::{canonical, lock_exclusively, lock_the_file_itself};
use readers::{BUSY_TIMEOUT, Readers, STATEMENT_CACHE_CAPACITY};
use rows::{
    apply_in, insert_event, insert_worker, list_sql, open_ids, progress_in, read_event,
    read_record, select_worker,
};
use schema::{check_schema_version, migrate};
use wal::{TRUNCATE_WAIT, wal_frames_hook};
pub use wal::{WAL_LIMIT, wal_path};
use writer::{Queued, WriteOp, WriteSide, commit_alone, in_savepoint, write_loop};

mod checkpoint;
mod context;
mod lock;
mod messages;
mod readers;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod wal;
mod writer;

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

    async fn apply_started(
        &self,
        known: &WorkerRecord,
        started_ms: i64,
        end: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<(Option<WorkerEvent>, Applied), StoreError> {
        let id = known.id.clone();
        let bytes = [&patch.result, &patch.structured_result, &patch.error]
            .iter()
            .map(|f| f.as_ref().map_or(0, String::len))
            .sum();
        // One transaction: the start (unless the row was found started already) and the end.
        self.write_sized("apply worker start and end", bytes, move |tx| {
            let found = select_worker(tx, &id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
            let start = if found.state == WorkerState::Pending {
                match apply_in(tx, &id, Event::Start, Patch::default(), started_ms)? {
                    Applied::Moved(ev) => Some(ev),
                    Applied::Absorbed(_) => None,
                }
            } else {
                None
            };
            Ok((start, apply_in(tx, &id, end, patch, now_ms)?))
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
                 WHERE token_hash = ?1 AND state IN ('pending', 'running', 'input_required')"
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

    async fn send_message(&self, msg: &Message, inbox_max: u32) -> Result<Sent, StoreError> {
        let msg = msg.clone();
        let bytes = msg.text.len();
        self.write_sized("send a message", bytes, move |tx| {
            messages::send_in(tx, &msg, inbox_max)
        })
        .await
    }

    async fn take_messages(&self, id: &WorkerId, seal: bool) -> Result<Vec<Message>, StoreError> {
        let id = id.clone();
        self.write("take messages", move |tx| messages::take_in(tx, &id, seal))
            .await
    }

    async fn continue_worker(
        &self,
        old: &WorkerId,
        new: &WorkerRecord,
        msg: &Message,
    ) -> Result<Continued, StoreError> {
        let (old, new, msg) = (old.clone(), new.clone(), msg.clone());
        let bytes = new.spec.prompt.len() + msg.text.len();
        self.write_sized("continue a worker", bytes, move |tx| {
            messages::continue_in(tx, &old, &new, &msg)
        })
        .await
    }

    async fn find_message(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<Message>, StoreError> {
        let (scope, rid) = (caller_scope.to_owned(), request_id.to_owned());
        self.read(move |conn| messages::find_message(conn, &scope, &rid))
            .await
    }

    async fn append_transcript(
        &self,
        id: &WorkerId,
        from: u32,
        entries: &[String],
    ) -> Result<(), StoreError> {
        let (id, entries) = (id.clone(), entries.to_vec());
        let bytes = entries.iter().map(String::len).sum();
        self.write_sized("append a transcript", bytes, move |tx| {
            messages::append_transcript_in(tx, &id, from, &entries)
        })
        .await
    }

    async fn transcript(&self, id: &WorkerId) -> Result<Vec<String>, StoreError> {
        let id = id.clone();
        self.read(move |conn| messages::transcript(conn, &id)).await
    }

    async fn prune_transcripts(&self, closed_before_ms: i64) -> Result<u64, StoreError> {
        self.write("prune transcripts", move |tx| {
            messages::prune_transcripts_in(tx, closed_before_ms)
        })
        .await
    }

    // `shared` stays `None`: one process owns the file (the lock above), so there is no lease
    // to renew, nobody else to notify, stop or race for a claim.
}
