//! Durable worker rows and their event log: the [`WorkerStore`] trait and its SQLite
//! implementation, [`SqliteStore`] (SPEC §6.2, §6.6).
//!
//! This module owns persistence: the schema and its migrations, the rule that a transition is read,
//! decided by [`lifecycle::transition`] and written together with its event in **one** transaction
//! (so a transition is persisted before anyone can publish it), listing with keyset pagination,
//! and the start-up sweep that closes rows orphaned by a previous process.
//!
//! It must not depend on tokio, tonic or the supervisor. Calls are synchronous and short; async
//! callers call them directly for point operations or through `spawn_blocking`, and never hold
//! anything from here across an `.await`.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, Type, Value, ValueRef};
use rusqlite::{
    Connection, OptionalExtension, Row, ToSql, Transaction, TransactionBehavior, params,
    params_from_iter,
};
use serde::{Deserialize, Serialize};

use super::lifecycle::{self, Event, IllegalTransition, Outcome};
use super::model::{WorkerEvent, WorkerId, WorkerRecord, WorkerState};

/// The error text every row left open by a previous process is closed with (SPEC §6.2).
pub const ORPHANED_ERROR: &str = "orphaned: service restarted";

/// Where workers and their events live.
///
/// A trait so that a server database can back several replicas later (SPEC §6.2) without the
/// supervisor or the gRPC layer changing. Every method is one short, synchronous unit of work;
/// every method that changes state does so atomically.
pub trait WorkerStore: Send + Sync + 'static {
    /// Writes a new worker in `pending` with sequence 1, and its creation event, atomically.
    ///
    /// The lifecycle fields of `rec` (`state`, `sequence`, start/close times, `result`,
    /// `structured_result`, `error`, `exit_code`) are ignored: a new worker always starts from
    /// nothing. The returned event's `worker` is exactly what was stored. A `(caller_scope,
    /// request_id)` already in use is [`StoreError::DuplicateRequestId`].
    fn create(&self, rec: &WorkerRecord) -> Result<WorkerEvent, StoreError>;

    /// Applies one lifecycle event atomically: reads the state, asks [`lifecycle::transition`],
    /// and on a move writes the row (state, sequence + 1, the `patch`, `start_time_ms` on entering
    /// `running`, `close_time_ms` and a cleared `token_hash` on entering a terminal state) and the
    /// event. An absorbed repeated stop changes nothing and ignores `patch`.
    fn apply(
        &self,
        id: &WorkerId,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError>;

    /// The worker as stored, or `None` for an unknown id.
    fn get(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError>;

    /// One page of workers matching `q`, ordered by `(create_time_ms, id)` ascending.
    fn list(&self, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError>;

    /// The worker's events with a sequence greater than `after_sequence`, ascending; what a
    /// watcher resumes from, also after a restart. An unknown id is [`StoreError::NotFound`].
    fn events_after(
        &self,
        id: &WorkerId,
        after_sequence: u64,
    ) -> Result<Vec<WorkerEvent>, StoreError>;

    /// Closes every `pending` or `running` row as `failed` with [`ORPHANED_ERROR`], through the
    /// ordinary transition rules (so each gets its close time, loses its token and has an event).
    /// Called once at start-up, before anything new runs; returns the ids it closed.
    fn close_orphans(&self, now_ms: i64) -> Result<Vec<WorkerId>, StoreError>;

    /// The `pending` or `running` rows, oldest first: at start-up, the runs a previous process
    /// left behind, whose processes must be killed before the rows are closed.
    fn open_workers(&self) -> Result<Vec<WorkerId>, StoreError>;

    /// The worker holding the token with this hash; only non-terminal workers have one, so this
    /// is also the token validity check.
    fn find_by_token_hash(&self, hash: &str) -> Result<Option<WorkerRecord>, StoreError>;

    /// The worker a caller created with this idempotency key, if any.
    fn find_by_request_id(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<WorkerRecord>, StoreError>;

    /// The direct children of a worker, in any state, ordered like [`WorkerStore::list`]; what
    /// StopWorker walks to stop descendants first.
    fn children(&self, id: &WorkerId) -> Result<Vec<WorkerRecord>, StoreError>;
}

/// Outcome fields to write together with a transition; `None` leaves the stored value unchanged,
/// so a kill does not erase a result already recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patch {
    /// The agent's output.
    pub result: Option<String>,
    /// The output as JSON text, when there was a schema.
    pub structured_result: Option<String>,
    /// Why it failed or was killed.
    pub error: Option<String>,
    /// The process exit code.
    pub exit_code: Option<i32>,
}

impl Patch {
    /// Overwrites the fields of `rec` that this patch sets.
    fn apply_to(self, rec: &mut WorkerRecord) {
        if let Some(result) = self.result {
            rec.result = Some(result);
        }
        if let Some(structured) = self.structured_result {
            rec.structured_result = Some(structured);
        }
        if let Some(error) = self.error {
            rec.error = Some(error);
        }
        if let Some(code) = self.exit_code {
            rec.exit_code = Some(code);
        }
    }
}

/// What [`WorkerStore::apply`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    /// The worker moved; this event was persisted and is ready to publish.
    Moved(WorkerEvent),
    /// A repeated stop on a killed worker; nothing was written, and this is the worker as it is.
    Absorbed(WorkerRecord),
}

impl Applied {
    /// The worker after the call, whichever way it went; what StopWorker returns.
    pub fn worker(&self) -> &WorkerRecord {
        match self {
            Applied::Moved(event) => &event.worker,
            Applied::Absorbed(worker) => worker,
        }
    }
}

/// Which parent the listed workers must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParentFilter {
    /// No filter: the whole audit log.
    Any,
    /// Only workers spawned by top-level callers (`parent_id` absent).
    TopLevel,
    /// Only direct children of this worker.
    Worker(WorkerId),
}

/// A page request for [`WorkerStore::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    /// Which parent the workers must have.
    pub parent: ParentFilter,
    /// Allowed states; empty means every state.
    pub states: Vec<WorkerState>,
    /// Only workers of this caller scope (tenancy, SPEC §8.2); `None` lists every scope.
    pub caller_scope: Option<String>,
    /// Keyset cursor: only workers strictly after this `(create_time_ms, id)`, i.e. the last
    /// worker of the previous page. Stable while rows are added, unlike an offset.
    pub after: Option<(i64, WorkerId)>,
    /// At most this many workers; the caller bounds it (page size), 0 returns none.
    pub limit: usize,
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No worker has this id.
    #[error("worker {0} not found")]
    NotFound(WorkerId),
    /// The lifecycle refused the event; the gRPC layer maps this to FAILED_PRECONDITION.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// The caller already created a worker with this `request_id`; `existing` is that worker, so
    /// the caller can return it (idempotent retry) or refuse a changed request.
    #[error("request_id {request_id:?} was already used by this caller for worker {existing}")]
    DuplicateRequestId {
        /// The reused idempotency key.
        request_id: String,
        /// The worker created with it first.
        existing: WorkerId,
    },
    /// SQLite failed; `context` says what the store was doing.
    #[error("worker store: {context}: {source}")]
    Sqlite {
        /// What the store was trying to do.
        context: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The database file's directory could not be created.
    #[error("worker store: cannot create directory {}: {source}", path.display())]
    Io {
        /// The directory that could not be created.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Another process holds the store file: two services on one file would close each
    /// other's live workers as orphans, so the second one refuses to start.
    #[error(
        "worker store {} is in use by another agentry process ({holder}); \
         stop it or give this one another store.path",
        path.display()
    )]
    Locked {
        /// The store file.
        path: PathBuf,
        /// What the holder wrote into the lock file (pid, host, start time), or why it is
        /// unknown.
        holder: String,
    },
    /// A stored value could not be decoded (a bad state name, id or JSON); the file was changed
    /// by something other than this store.
    #[error("worker store is corrupt: {0}")]
    Corrupt(String),
    /// The file was written by a newer agentry; refusing it protects data this binary cannot
    /// read correctly.
    #[error(
        "worker store schema version {found} is newer than this binary supports (version {known}); \
         upgrade agentry or point it at another store file"
    )]
    SchemaTooNew {
        /// The schema version found in the file.
        found: i64,
        /// The newest schema version this binary knows.
        known: i64,
    },
}

/// Attaches what the store was doing to a SQLite error, and reports decoding failures as
/// [`StoreError::Corrupt`] rather than as SQLite failures.
trait Context<T> {
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

/// Schema migrations, applied in order; migration `i` takes the file from `PRAGMA user_version`
/// `i` to `i + 1`. Append only: never edit a migration that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: workers and their event log.
    "CREATE TABLE workers (
        id                TEXT    NOT NULL PRIMARY KEY,
        agent             TEXT    NOT NULL,
        description       TEXT    NOT NULL,
        prompt            TEXT    NOT NULL,
        workspace         TEXT,
        parent_id         TEXT    REFERENCES workers (id),
        depth             INTEGER NOT NULL CHECK (depth >= 0),
        state             TEXT    NOT NULL
            CHECK (state IN ('pending', 'running', 'completed', 'failed', 'killed')),
        sequence          INTEGER NOT NULL CHECK (sequence >= 1),
        create_time_ms    INTEGER NOT NULL,
        start_time_ms     INTEGER,
        close_time_ms     INTEGER,
        result            TEXT,
        structured_result TEXT,
        error             TEXT,
        exit_code         INTEGER,
        caller_scope      TEXT    NOT NULL,
        request_id        TEXT,
        token_hash        TEXT,
        effective         TEXT    NOT NULL,
        CHECK ((close_time_ms IS NOT NULL) = (state IN ('completed', 'failed', 'killed'))),
        CHECK (token_hash IS NULL OR state IN ('pending', 'running'))
    ) STRICT;
    CREATE INDEX workers_by_create_time ON workers (create_time_ms, id);
    CREATE INDEX workers_by_parent ON workers (parent_id, create_time_ms, id);
    CREATE INDEX workers_by_state ON workers (state, create_time_ms, id);
    CREATE UNIQUE INDEX workers_by_request_id ON workers (caller_scope, request_id)
        WHERE request_id IS NOT NULL;
    CREATE UNIQUE INDEX workers_by_token_hash ON workers (token_hash)
        WHERE token_hash IS NOT NULL;
    CREATE TABLE worker_events (
        worker_id TEXT    NOT NULL REFERENCES workers (id),
        sequence  INTEGER NOT NULL CHECK (sequence >= 1),
        state     TEXT    NOT NULL
            CHECK (state IN ('pending', 'running', 'completed', 'failed', 'killed')),
        time_ms   INTEGER NOT NULL,
        snapshot  TEXT    NOT NULL,
        PRIMARY KEY (worker_id, sequence)
    ) STRICT, WITHOUT ROWID;",
    // 2: a principal's own workers, listed in order (tenancy).
    "CREATE INDEX workers_by_scope ON workers (caller_scope, create_time_ms, id);",
];

/// The columns of `workers`, in the order [`read_record`] decodes them.
const COLUMNS: &str = "id, agent, description, prompt, workspace, parent_id, depth, state, \
     sequence, create_time_ms, start_time_ms, close_time_ms, result, structured_result, error, \
     exit_code, caller_scope, request_id, token_hash, effective";

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Enough cached statements for every fixed query plus every shape [`WorkerStore::list`] builds
/// (see [`list_sql`]).
const STATEMENT_CACHE_CAPACITY: usize = 256;

/// [`WorkerStore`] on one SQLite file in WAL mode.
///
/// One connection behind a `std::sync::Mutex`: SQLite serializes writers anyway, the critical
/// sections are single short transactions, and one connection lets every statement stay in its
/// prepared-statement cache.
#[derive(Debug)]
pub struct SqliteStore {
    /// The only connection; locked for exactly one store call.
    conn: Mutex<Connection>,
    /// The exclusive lock on `<path>.lock`, held for the store's life (released on drop, and by
    /// the kernel when the process dies, so a crash never leaves a stale lock).
    _lock: Flock<std::fs::File>,
}

impl SqliteStore {
    /// Opens (creating it and its parent directories if needed) the store at `path`, configures
    /// it (WAL, `synchronous=NORMAL`, a busy timeout, foreign keys) and brings its schema up to
    /// date. A file from a newer binary is [`StoreError::SchemaTooNew`].
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_owned(),
                source,
            })?;
        }
        let lock = lock_exclusively(path)?;
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
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            _lock: lock,
        })
    }

    /// The connection, for one store call.
    ///
    /// A panic while it was held can only have happened inside a call whose transaction was then
    /// rolled back by its drop, so the connection is consistent and the poison is ignored.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` in an IMMEDIATE transaction (the write lock is taken up front, so a read followed
    /// by a write cannot fail half-way on a lock upgrade) and commits if it succeeds.
    fn write<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = Transaction::new(&mut conn, TransactionBehavior::Immediate)
            .with_context(|| format!("{what}: begin"))?;
        let value = f(&tx)?;
        tx.commit().with_context(|| format!("{what}: commit"))?;
        Ok(value)
    }
}

/// Fails with [`StoreError::SchemaTooNew`] if the file's schema is newer than [`MIGRATIONS`].
fn check_schema_version(conn: &Connection) -> Result<i64, StoreError> {
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .context("read schema version")?;
    let known = MIGRATIONS.len() as i64;
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    if found < 0 {
        return Err(StoreError::Corrupt(format!(
            "negative schema version {found}"
        )));
    }
    Ok(found)
}

/// Applies the missing migrations, each in its own transaction together with its version bump.
/// The version is re-read inside each transaction, so two processes opening a new file at once
/// do not both apply the same migration.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    loop {
        let tx =
            Transaction::new(conn, TransactionBehavior::Immediate).context("migrate: begin")?;
        let version = check_schema_version(&tx)?;
        // `check_schema_version` bounds it to 0..=MIGRATIONS.len().
        let Some(sql) = MIGRATIONS.get(version as usize) else {
            return Ok(());
        };
        tx.execute_batch(sql)
            .with_context(|| format!("apply schema migration {}", version + 1))?;
        tx.pragma_update(None, "user_version", version + 1)
            .context("record schema version")?;
        tx.commit().context("migrate: commit")?;
    }
}

impl WorkerStore for SqliteStore {
    fn create(&self, rec: &WorkerRecord) -> Result<WorkerEvent, StoreError> {
        let worker = WorkerRecord {
            state: WorkerState::Pending,
            sequence: 1,
            start_time_ms: None,
            close_time_ms: None,
            result: None,
            structured_result: None,
            error: None,
            exit_code: None,
            ..rec.clone()
        };
        let event = WorkerEvent {
            worker_id: worker.id.clone(),
            sequence: 1,
            state: WorkerState::Pending,
            time_ms: worker.create_time_ms,
            worker,
        };
        self.write("create worker", |tx| {
            if let Some(request_id) = &event.worker.request_id {
                let existing = tx
                    .prepare_cached(
                        "SELECT id FROM workers WHERE caller_scope = ?1 AND request_id = ?2",
                    )
                    .and_then(|mut stmt| {
                        stmt.query_row(params![event.worker.caller_scope, request_id], |row| {
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
            Ok(())
        })?;
        Ok(event)
    }

    fn apply(
        &self,
        id: &WorkerId,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        self.write("apply worker event", |tx| {
            apply_in(tx, id, event, patch, now_ms)
        })
    }

    fn get(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError> {
        select_worker(&self.lock(), id)
    }

    fn list(&self, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError> {
        let (sql, args) = list_sql(q);
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&sql).context("list workers")?;
        let rows = stmt
            .query_map(params_from_iter(args), read_record)
            .context("list workers")?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .context("list workers")
    }

    fn events_after(
        &self,
        id: &WorkerId,
        after_sequence: u64,
    ) -> Result<Vec<WorkerEvent>, StoreError> {
        let mut conn = self.lock();
        // One read transaction, so the row and its events are from the same moment.
        let tx = conn.transaction().context("read worker events: begin")?;
        let worker = select_worker(&tx, id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let mut stmt = tx
            .prepare_cached(
                "SELECT sequence, state, time_ms, snapshot FROM worker_events
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
    }

    fn close_orphans(&self, now_ms: i64) -> Result<Vec<WorkerId>, StoreError> {
        self.write("close orphaned workers", |tx| {
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
    }

    fn open_workers(&self) -> Result<Vec<WorkerId>, StoreError> {
        open_ids(&self.lock())
    }

    fn find_by_token_hash(&self, hash: &str) -> Result<Option<WorkerRecord>, StoreError> {
        let conn = self.lock();
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM workers
             WHERE token_hash = ?1 AND state IN ('pending', 'running')"
        ))
        .and_then(|mut stmt| stmt.query_row([hash], read_record).optional())
        .context("find worker by token")
    }

    fn find_by_request_id(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<WorkerRecord>, StoreError> {
        let conn = self.lock();
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM workers WHERE caller_scope = ?1 AND request_id = ?2"
        ))
        .and_then(|mut stmt| {
            stmt.query_row([caller_scope, request_id], read_record)
                .optional()
        })
        .context("find worker by request_id")
    }

    fn children(&self, id: &WorkerId) -> Result<Vec<WorkerRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM workers WHERE parent_id = ?1 ORDER BY create_time_ms, id"
            ))
            .context("list children")?;
        let rows = stmt.query_map([id], read_record).context("list children")?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .context("list children")
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

/// Ids of the `pending` and `running` rows, oldest first.
fn open_ids(conn: &Connection) -> Result<Vec<WorkerId>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id FROM workers WHERE state IN ('pending', 'running')
             ORDER BY create_time_ms, id",
        )
        .context("find open workers")?;
    let rows = stmt
        .query_map([], |row| row.get(0))
        .context("find open workers")?;
    rows.collect::<rusqlite::Result<_>>()
        .context("find open workers")
}

/// The SQL and arguments for one [`WorkerStore::list`] page. Every filter combination has its own
/// statement text (at most 3 parents × 32 state sets × 2 cursors), so each is prepared once and
/// cached.
fn list_sql(q: &ListQuery) -> (String, Vec<Value>) {
    let mut sql = format!("SELECT {COLUMNS} FROM workers WHERE 1 = 1");
    let mut args: Vec<Value> = Vec::new();
    match &q.parent {
        ParentFilter::Any => {}
        ParentFilter::TopLevel => sql.push_str(" AND parent_id IS NULL"),
        ParentFilter::Worker(parent) => {
            sql.push_str(" AND parent_id = ?");
            args.push(Value::Text(parent.as_str().to_owned()));
        }
    }
    if let Some(scope) = &q.caller_scope {
        sql.push_str(" AND caller_scope = ?");
        args.push(Value::Text(scope.clone()));
    }
    // Canonical order and no duplicates, so equal filters share one cached statement.
    let states: Vec<WorkerState> = WorkerState::ALL
        .into_iter()
        .filter(|state| q.states.contains(state))
        .collect();
    if !states.is_empty() {
        let marks = vec!["?"; states.len()].join(", ");
        sql.push_str(&format!(" AND state IN ({marks})"));
        args.extend(
            states
                .iter()
                .map(|state| Value::Text(state.as_str().to_owned())),
        );
    }
    if let Some((time_ms, id)) = &q.after {
        sql.push_str(" AND (create_time_ms, id) > (?, ?)");
        args.push(Value::Integer(*time_ms));
        args.push(Value::Text(id.as_str().to_owned()));
    }
    sql.push_str(" ORDER BY create_time_ms, id LIMIT ?");
    args.push(Value::Integer(i64::try_from(q.limit).unwrap_or(i64::MAX)));
    (sql, args)
}

/// The body of [`WorkerStore::apply`], run inside the caller's transaction so
/// [`WorkerStore::close_orphans`] goes through exactly the same rules.
fn apply_in(
    tx: &Transaction<'_>,
    id: &WorkerId,
    event: Event,
    patch: Patch,
    now_ms: i64,
) -> Result<Applied, StoreError> {
    let current = select_worker(tx, id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
    let state = match lifecycle::transition(current.state, event)? {
        Outcome::Absorbed => return Ok(Applied::Absorbed(current)),
        Outcome::Moved(state) => state,
    };
    let previous_sequence = current.sequence;
    let mut next = current;
    next.state = state;
    next.sequence = previous_sequence + 1;
    patch.apply_to(&mut next);
    if state == WorkerState::Running {
        next.start_time_ms = Some(now_ms);
    }
    if state.is_terminal() {
        next.close_time_ms = Some(now_ms);
        next.token_hash = None;
    }
    let changed = tx
        .prepare_cached(
            "UPDATE workers SET state = ?2, sequence = ?3, start_time_ms = ?4,
                 close_time_ms = ?5, result = ?6, structured_result = ?7, error = ?8,
                 exit_code = ?9, token_hash = ?10
             WHERE id = ?1 AND sequence = ?11",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                next.id,
                next.state,
                to_sql_sequence(next.sequence),
                next.start_time_ms,
                next.close_time_ms,
                next.result,
                next.structured_result,
                next.error,
                next.exit_code,
                next.token_hash,
                to_sql_sequence(previous_sequence),
            ])
        })
        .context("update worker")?;
    if changed != 1 {
        // Impossible while this transaction holds the write lock; says so loudly if it happens.
        return Err(StoreError::Corrupt(format!(
            "worker {id} changed under a write transaction (expected sequence {previous_sequence})"
        )));
    }
    let event = WorkerEvent {
        worker_id: next.id.clone(),
        sequence: next.sequence,
        state,
        time_ms: now_ms,
        worker: next,
    };
    insert_event(tx, &event)?;
    Ok(Applied::Moved(event))
}

/// One row of `workers` by id.
fn select_worker(conn: &Connection, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM workers WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], read_record).optional())
        .context("read worker")
}

/// Writes a new `workers` row.
fn insert_worker(conn: &Connection, rec: &WorkerRecord) -> Result<(), StoreError> {
    let effective = serde_json::to_string(&rec.effective)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode effective agent: {e}")))?;
    conn.prepare_cached(&format!(
        "INSERT INTO workers ({COLUMNS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
              ?19, ?20)"
    ))
    .and_then(|mut stmt| {
        stmt.execute(params![
            rec.id,
            rec.agent,
            rec.description,
            rec.prompt,
            rec.workspace,
            rec.parent_id,
            rec.depth,
            rec.state,
            to_sql_sequence(rec.sequence),
            rec.create_time_ms,
            rec.start_time_ms,
            rec.close_time_ms,
            rec.result,
            rec.structured_result,
            rec.error,
            rec.exit_code,
            rec.caller_scope,
            rec.request_id,
            rec.token_hash,
            effective,
        ])
    })
    .context("insert worker")?;
    Ok(())
}

/// The part of a worker that transitions change, as stored in each event's `snapshot` column.
///
/// The fields fixed at creation (prompt, effective agent, lineage, …) are not repeated in every
/// event — the prompt alone may be 256 KiB — but read from the `workers` row when events are
/// loaded; since they never change, the rebuilt [`WorkerEvent::worker`] is exactly the record as
/// it was right after the transition.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    start_time_ms: Option<i64>,
    close_time_ms: Option<i64>,
    result: Option<String>,
    structured_result: Option<String>,
    error: Option<String>,
    exit_code: Option<i32>,
    token_hash: Option<String>,
}

/// Appends an event row.
fn insert_event(conn: &Connection, event: &WorkerEvent) -> Result<(), StoreError> {
    let w = &event.worker;
    let snapshot = serde_json::to_string(&Snapshot {
        start_time_ms: w.start_time_ms,
        close_time_ms: w.close_time_ms,
        result: w.result.clone(),
        structured_result: w.structured_result.clone(),
        error: w.error.clone(),
        exit_code: w.exit_code,
        token_hash: w.token_hash.clone(),
    })
    .map_err(|e| StoreError::Corrupt(format!("cannot encode event snapshot: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO worker_events (worker_id, sequence, state, time_ms, snapshot)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            event.worker_id,
            to_sql_sequence(event.sequence),
            event.state,
            event.time_ms,
            snapshot,
        ])
    })
    .context("insert worker event")?;
    Ok(())
}

/// Decodes a `workers` row selected as [`COLUMNS`].
fn read_record(row: &Row<'_>) -> rusqlite::Result<WorkerRecord> {
    let effective: String = row.get(19)?;
    Ok(WorkerRecord {
        id: row.get(0)?,
        agent: row.get(1)?,
        description: row.get(2)?,
        prompt: row.get(3)?,
        workspace: row.get(4)?,
        parent_id: row.get(5)?,
        depth: row.get(6)?,
        state: row.get(7)?,
        sequence: read_sequence(row, 8)?,
        create_time_ms: row.get(9)?,
        start_time_ms: row.get(10)?,
        close_time_ms: row.get(11)?,
        result: row.get(12)?,
        structured_result: row.get(13)?,
        error: row.get(14)?,
        exit_code: row.get(15)?,
        caller_scope: row.get(16)?,
        request_id: row.get(17)?,
        token_hash: row.get(18)?,
        effective: serde_json::from_str(&effective)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(19, Type::Text, e.into()))?,
    })
}

/// Decodes a `worker_events` row (sequence, state, time, snapshot) into an event whose worker is
/// `current` — the worker's row, for the fields fixed at creation — with the snapshot laid over.
fn read_event(row: &Row<'_>, current: &WorkerRecord) -> rusqlite::Result<WorkerEvent> {
    let sequence = read_sequence(row, 0)?;
    let state: WorkerState = row.get(1)?;
    let time_ms: i64 = row.get(2)?;
    let snapshot: String = row.get(3)?;
    let snapshot: Snapshot = serde_json::from_str(&snapshot)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(3, Type::Text, e.into()))?;
    let worker = WorkerRecord {
        state,
        sequence,
        start_time_ms: snapshot.start_time_ms,
        close_time_ms: snapshot.close_time_ms,
        result: snapshot.result,
        structured_result: snapshot.structured_result,
        error: snapshot.error,
        exit_code: snapshot.exit_code,
        token_hash: snapshot.token_hash,
        ..current.clone()
    };
    Ok(WorkerEvent {
        worker_id: worker.id.clone(),
        sequence,
        state,
        time_ms,
        worker,
    })
}

/// Reads a sequence column; a negative value is reported as out of range (so as corruption).
fn read_sequence(row: &Row<'_>, index: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(index)?;
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(index, value))
}

/// Sequences are `u64` in the API and `INTEGER` (i64) in SQLite. A worker would need 2^63
/// transitions to overflow, so saturating is unreachable rather than lossy.
fn to_sql_sequence(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

impl ToSql for WorkerId {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for WorkerId {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        WorkerId::parse(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

impl ToSql for WorkerState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for WorkerState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use std::slice;
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::workers::model::{generate_token, hash_token};

    /// A store on a real file, in a directory that does not exist yet (so `open` must create it).
    fn open_temp() -> (tempfile::TempDir, PathBuf, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("agentry.db");
        let store = SqliteStore::open(&path).unwrap();
        (dir, path, store)
    }

    /// A new worker record, as the supervisor would build it.
    fn record(parent: Option<&WorkerRecord>, create_time_ms: i64) -> WorkerRecord {
        WorkerRecord {
            id: WorkerId::generate(),
            agent: "explore".to_owned(),
            description: "look around".to_owned(),
            prompt: "find where the config is loaded".to_owned(),
            workspace: Some("/work/project".to_owned()),
            parent_id: parent.map(|p| p.id.clone()),
            depth: parent.map_or(1, |p| p.depth + 1),
            state: WorkerState::Pending,
            sequence: 1,
            create_time_ms,
            start_time_ms: None,
            close_time_ms: None,
            result: None,
            structured_result: None,
            error: None,
            exit_code: None,
            caller_scope: "anonymous".to_owned(),
            request_id: None,
            token_hash: Some(hash_token(&generate_token())),
            effective: json!({"name": "explore", "tools": {"all_but": ["task"]}, "spawns": ""}),
        }
    }

    fn create(store: &SqliteStore, parent: Option<&WorkerRecord>, time: i64) -> WorkerRecord {
        store.create(&record(parent, time)).unwrap().worker
    }

    fn moved(applied: Applied) -> WorkerEvent {
        match applied {
            Applied::Moved(event) => event,
            Applied::Absorbed(worker) => panic!("expected a move, got absorbed {worker:?}"),
        }
    }

    fn ids(records: &[WorkerRecord]) -> Vec<WorkerId> {
        records.iter().map(|r| r.id.clone()).collect()
    }

    fn query(parent: ParentFilter, states: &[WorkerState]) -> ListQuery {
        ListQuery {
            parent,
            states: states.to_vec(),
            caller_scope: None,
            after: None,
            limit: 100,
        }
    }

    #[test]
    fn create_then_get_round_trips() {
        let (_dir, _path, store) = open_temp();
        let mut rec = record(None, 1_000);
        rec.request_id = Some("req-1".to_owned());
        rec.structured_result = None;
        let event = store.create(&rec).unwrap();
        assert_eq!(event.sequence, 1);
        assert_eq!(event.state, WorkerState::Pending);
        assert_eq!(event.time_ms, 1_000);
        assert_eq!(event.worker_id, rec.id);
        assert_eq!(event.worker, rec);
        assert_eq!(store.get(&rec.id).unwrap(), Some(rec));
        assert_eq!(store.get(&WorkerId::generate()).unwrap(), None);
    }

    #[test]
    fn create_ignores_lifecycle_fields_of_the_input() {
        let (_dir, _path, store) = open_temp();
        let mut rec = record(None, 1_000);
        rec.state = WorkerState::Completed;
        rec.sequence = 7;
        rec.start_time_ms = Some(1);
        rec.close_time_ms = Some(2);
        rec.result = Some("stale".to_owned());
        rec.error = Some("stale".to_owned());
        rec.exit_code = Some(3);
        let stored = store.create(&rec).unwrap().worker;
        assert_eq!(stored.state, WorkerState::Pending);
        assert_eq!(stored.sequence, 1);
        assert_eq!(
            (stored.start_time_ms, stored.close_time_ms, stored.exit_code),
            (None, None, None)
        );
        assert_eq!((stored.result, stored.error), (None, None));
    }

    #[test]
    fn full_run_has_sequences_1_2_3_and_closes_only_at_the_end() {
        let (_dir, _path, store) = open_temp();
        let created = store.create(&record(None, 1_000)).unwrap();
        let id = created.worker_id.clone();

        let started = moved(
            store
                .apply(&id, Event::Start, Patch::default(), 2_000)
                .unwrap(),
        );
        assert_eq!(
            (started.sequence, started.state, started.time_ms),
            (2, WorkerState::Running, 2_000)
        );
        assert_eq!(started.worker.start_time_ms, Some(2_000));
        assert_eq!(started.worker.close_time_ms, None);
        assert!(started.worker.token_hash.is_some());

        let patch = Patch {
            result: Some("{\"ok\":true}".to_owned()),
            structured_result: Some("{\"ok\":true}".to_owned()),
            exit_code: Some(0),
            ..Patch::default()
        };
        let done = moved(store.apply(&id, Event::Complete, patch, 3_000).unwrap());
        assert_eq!((done.sequence, done.state), (3, WorkerState::Completed));
        assert_eq!(done.worker.start_time_ms, Some(2_000));
        assert_eq!(done.worker.close_time_ms, Some(3_000));
        assert_eq!(done.worker.token_hash, None);
        assert_eq!(done.worker.exit_code, Some(0));
        assert_eq!(done.worker.result.as_deref(), Some("{\"ok\":true}"));
        assert_eq!(store.get(&id).unwrap(), Some(done.worker.clone()));

        let events = store.events_after(&id, 0).unwrap();
        assert_eq!(events, vec![created, started, done]);
    }

    #[test]
    fn kill_is_absorbed_once_killed() {
        let (_dir, _path, store) = open_temp();
        let pending = create(&store, None, 1_000);
        let killed = moved(
            store
                .apply(&pending.id, Event::Kill, Patch::default(), 1_500)
                .unwrap(),
        );
        assert_eq!((killed.sequence, killed.state), (2, WorkerState::Killed));
        assert_eq!(
            killed.worker.start_time_ms, None,
            "killed before it started"
        );
        assert_eq!(killed.worker.close_time_ms, Some(1_500));

        let again = Patch {
            error: Some("ignored".to_owned()),
            ..Patch::default()
        };
        let absorbed = store.apply(&pending.id, Event::Kill, again, 9_000).unwrap();
        assert_eq!(absorbed, Applied::Absorbed(killed.worker.clone()));
        assert_eq!(absorbed.worker(), &killed.worker);
        assert_eq!(store.events_after(&pending.id, 0).unwrap().len(), 2);

        let running = create(&store, None, 2_000);
        store
            .apply(&running.id, Event::Start, Patch::default(), 2_100)
            .unwrap();
        let stop = Patch {
            error: Some("stopped by caller".to_owned()),
            ..Patch::default()
        };
        let killed = moved(store.apply(&running.id, Event::Kill, stop, 2_200).unwrap());
        assert_eq!((killed.sequence, killed.state), (3, WorkerState::Killed));
        assert_eq!(killed.worker.error.as_deref(), Some("stopped by caller"));
        assert_eq!(killed.worker.close_time_ms, Some(2_200));
    }

    #[test]
    fn stopping_a_finished_worker_is_not_cancelable_and_changes_nothing() {
        let (_dir, _path, store) = open_temp();
        let completed = create(&store, None, 1_000);
        store
            .apply(&completed.id, Event::Start, Patch::default(), 1_100)
            .unwrap();
        store
            .apply(&completed.id, Event::Complete, Patch::default(), 1_200)
            .unwrap();
        let failed = create(&store, None, 2_000);
        store
            .apply(&failed.id, Event::Fail, Patch::default(), 2_100)
            .unwrap();

        for (id, state) in [
            (&completed.id, WorkerState::Completed),
            (&failed.id, WorkerState::Failed),
        ] {
            let before = store.get(id).unwrap();
            let err = store
                .apply(id, Event::Kill, Patch::default(), 5_000)
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    StoreError::Illegal(IllegalTransition::NotCancelable { state: s }) if s == state
                ),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("worker is already {state} and cannot be stopped")
            );
            assert_eq!(store.get(id).unwrap(), before);
        }
    }

    #[test]
    fn invalid_events_and_unknown_ids_are_errors() {
        let (_dir, _path, store) = open_temp();
        let rec = create(&store, None, 1_000);
        let err = store
            .apply(&rec.id, Event::Complete, Patch::default(), 1_100)
            .unwrap_err();
        assert!(matches!(
            err,
            StoreError::Illegal(IllegalTransition::Invalid {
                from: WorkerState::Pending,
                event: Event::Complete
            })
        ));
        assert_eq!(store.get(&rec.id).unwrap(), Some(rec));

        let unknown = WorkerId::generate();
        let err = store
            .apply(&unknown, Event::Start, Patch::default(), 1)
            .unwrap_err();
        assert!(matches!(&err, StoreError::NotFound(id) if *id == unknown));
        assert_eq!(err.to_string(), format!("worker {unknown} not found"));
        assert!(matches!(
            store.events_after(&unknown, 0),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn events_after_resumes_after_a_seen_sequence() {
        let (_dir, _path, store) = open_temp();
        let rec = create(&store, None, 1_000);
        store
            .apply(&rec.id, Event::Start, Patch::default(), 1_100)
            .unwrap();
        store
            .apply(&rec.id, Event::Fail, Patch::default(), 1_200)
            .unwrap();
        let sequences = |after| {
            store
                .events_after(&rec.id, after)
                .unwrap()
                .iter()
                .map(|e| (e.sequence, e.state))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            sequences(1),
            [(2, WorkerState::Running), (3, WorkerState::Failed)]
        );
        assert_eq!(sequences(2), [(3, WorkerState::Failed)]);
        assert_eq!(sequences(3), []);
        assert_eq!(sequences(u64::MAX), []);
    }

    #[test]
    fn list_filters_by_parent() {
        let (_dir, _path, store) = open_temp();
        let a = create(&store, None, 1_000);
        let b = create(&store, None, 2_000);
        let a1 = create(&store, Some(&a), 3_000);
        let b1 = create(&store, Some(&b), 4_000);
        let a2 = create(&store, Some(&a), 5_000);
        let a1x = create(&store, Some(&a1), 6_000);

        let top = store.list(&query(ParentFilter::TopLevel, &[])).unwrap();
        assert_eq!(ids(&top), [a.id.clone(), b.id.clone()]);
        let of_a = store
            .list(&query(ParentFilter::Worker(a.id.clone()), &[]))
            .unwrap();
        assert_eq!(ids(&of_a), [a1.id.clone(), a2.id.clone()]);
        assert_eq!(store.children(&a.id).unwrap(), of_a);
        assert_eq!(
            ids(&store.children(&a1.id).unwrap()),
            slice::from_ref(&a1x.id)
        );
        assert_eq!(store.children(&a2.id).unwrap(), []);
        let all = store.list(&query(ParentFilter::Any, &[])).unwrap();
        assert_eq!(ids(&all), [a.id, b.id, a1.id, b1.id, a2.id, a1x.id]);
    }

    #[test]
    fn list_filters_by_states() {
        let (_dir, _path, store) = open_temp();
        let pending = create(&store, None, 1_000);
        let running = create(&store, None, 2_000);
        store
            .apply(&running.id, Event::Start, Patch::default(), 2_100)
            .unwrap();
        let failed = create(&store, None, 3_000);
        store
            .apply(&failed.id, Event::Fail, Patch::default(), 3_100)
            .unwrap();
        let child = create(&store, Some(&running), 4_000);

        let list =
            |parent, states: &[WorkerState]| ids(&store.list(&query(parent, states)).unwrap());
        assert_eq!(
            list(ParentFilter::Any, &[WorkerState::Running]),
            slice::from_ref(&running.id)
        );
        assert_eq!(
            list(
                ParentFilter::Any,
                &[
                    WorkerState::Failed,
                    WorkerState::Pending,
                    WorkerState::Failed
                ]
            ),
            [pending.id.clone(), failed.id.clone(), child.id.clone()]
        );
        assert_eq!(
            list(ParentFilter::TopLevel, &[WorkerState::Pending]),
            slice::from_ref(&pending.id)
        );
        assert_eq!(
            list(
                ParentFilter::Worker(running.id.clone()),
                &[WorkerState::Pending]
            ),
            slice::from_ref(&child.id)
        );
        assert_eq!(list(ParentFilter::Any, &[WorkerState::Killed]), []);
    }

    #[test]
    fn pagination_walks_every_worker_once_across_pages() {
        let (_dir, _path, store) = open_temp();
        let parent = create(&store, None, 0);
        // Equal create times force the id tie-break.
        for time in [5, 5, 5, 6, 6, 7, 8] {
            create(&store, Some(&parent), time);
        }
        let everything = store
            .list(&query(ParentFilter::Worker(parent.id.clone()), &[]))
            .unwrap();
        assert_eq!(everything.len(), 7);
        let keys: Vec<_> = everything
            .iter()
            .map(|r| (r.create_time_ms, r.id.clone()))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "ordered by (create_time_ms, id)");

        let mut walked = Vec::new();
        let mut page_sizes = Vec::new();
        let mut q = ListQuery {
            limit: 3,
            ..query(ParentFilter::Worker(parent.id.clone()), &[])
        };
        loop {
            let page = store.list(&q).unwrap();
            page_sizes.push(page.len());
            let Some(last) = page.last() else { break };
            q.after = Some((last.create_time_ms, last.id.clone()));
            walked.extend(page);
        }
        assert_eq!(page_sizes, [3, 3, 1, 0]);
        assert_eq!(walked, everything);

        let zero = ListQuery {
            limit: 0,
            ..query(ParentFilter::Any, &[])
        };
        assert_eq!(store.list(&zero).unwrap(), []);
    }

    #[test]
    fn every_query_uses_an_index() {
        let (_dir, _path, store) = open_temp();
        let parent = WorkerId::generate();
        let cursor = Some((5, WorkerId::generate()));
        let mut statements = Vec::new();
        for parent in [
            ParentFilter::Any,
            ParentFilter::TopLevel,
            ParentFilter::Worker(parent),
        ] {
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
        let conn = store.lock();
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

    #[test]
    fn close_orphans_fails_open_rows_and_leaves_closed_ones() {
        let (_dir, _path, store) = open_temp();
        let pending = create(&store, None, 1_000);
        let running = create(&store, None, 2_000);
        store
            .apply(&running.id, Event::Start, Patch::default(), 2_100)
            .unwrap();
        let completed = create(&store, None, 3_000);
        store
            .apply(&completed.id, Event::Start, Patch::default(), 3_100)
            .unwrap();
        let completed = moved(
            store
                .apply(&completed.id, Event::Complete, Patch::default(), 3_200)
                .unwrap(),
        )
        .worker;
        let killed = create(&store, None, 4_000);
        let killed = moved(
            store
                .apply(&killed.id, Event::Kill, Patch::default(), 4_100)
                .unwrap(),
        )
        .worker;

        let closed = store.close_orphans(9_000).unwrap();
        assert_eq!(closed, [pending.id.clone(), running.id.clone()]);
        for (rec, sequence) in [(&pending, 2), (&running, 3)] {
            let now = store.get(&rec.id).unwrap().unwrap();
            assert_eq!(now.state, WorkerState::Failed);
            assert_eq!(now.error.as_deref(), Some("orphaned: service restarted"));
            assert_eq!(now.close_time_ms, Some(9_000));
            assert_eq!(now.token_hash, None);
            assert_eq!(now.sequence, sequence);
            let last = store.events_after(&rec.id, sequence - 1).unwrap();
            assert_eq!(last.len(), 1);
            assert_eq!(last[0].state, WorkerState::Failed);
            assert_eq!(last[0].worker, now);
        }
        assert_eq!(store.get(&completed.id).unwrap(), Some(completed));
        assert_eq!(store.get(&killed.id).unwrap(), Some(killed));
        assert_eq!(store.close_orphans(10_000).unwrap(), []);
    }

    #[test]
    fn data_survives_closing_and_reopening() {
        let (_dir, path, store) = open_temp();
        let parent = create(&store, None, 1_000);
        let child = create(&store, Some(&parent), 1_500);
        let started = moved(
            store
                .apply(&parent.id, Event::Start, Patch::default(), 2_000)
                .unwrap(),
        );
        let events = store.events_after(&parent.id, 0).unwrap();
        drop(store);

        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get(&parent.id).unwrap(), Some(started.worker));
        assert_eq!(store.get(&child.id).unwrap(), Some(child.clone()));
        assert_eq!(store.events_after(&parent.id, 0).unwrap(), events);
        assert_eq!(ids(&store.children(&parent.id).unwrap()), [child.id]);
        let mode: String = store
            .lock()
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn duplicate_request_id_is_refused_per_caller_scope() {
        let (_dir, _path, store) = open_temp();
        let mut first = record(None, 1_000);
        first.request_id = Some("retry-me".to_owned());
        let first = store.create(&first).unwrap().worker;

        let mut again = record(None, 2_000);
        again.request_id = Some("retry-me".to_owned());
        let err = store.create(&again).unwrap_err();
        assert!(
            matches!(&err, StoreError::DuplicateRequestId { request_id, existing }
                if request_id == "retry-me" && *existing == first.id),
            "{err:?}"
        );
        assert_eq!(store.get(&again.id).unwrap(), None, "nothing was written");

        again.caller_scope = "alice".to_owned();
        store.create(&again).unwrap();
        assert_eq!(
            store.find_by_request_id("anonymous", "retry-me").unwrap(),
            Some(first)
        );
        assert_eq!(
            store
                .find_by_request_id("alice", "retry-me")
                .unwrap()
                .map(|r| r.id),
            Some(again.id)
        );
        assert_eq!(store.find_by_request_id("bob", "retry-me").unwrap(), None);

        // Workers without a request_id never collide.
        create(&store, None, 3_000);
        create(&store, None, 3_000);
    }

    #[test]
    fn token_lookup_stops_once_the_worker_is_terminal() {
        let (_dir, _path, store) = open_temp();
        let token = generate_token();
        let mut rec = record(None, 1_000);
        rec.token_hash = Some(hash_token(&token));
        let rec = store.create(&rec).unwrap().worker;
        let find = || store.find_by_token_hash(&hash_token(&token)).unwrap();

        assert_eq!(find().map(|r| r.id), Some(rec.id.clone()));
        store
            .apply(&rec.id, Event::Start, Patch::default(), 1_100)
            .unwrap();
        assert_eq!(find().map(|r| r.state), Some(WorkerState::Running));
        store
            .apply(&rec.id, Event::Complete, Patch::default(), 1_200)
            .unwrap();
        assert_eq!(find(), None);
        assert_eq!(
            store.find_by_token_hash(&hash_token("other")).unwrap(),
            None
        );
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
                    known: 2
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("version 999") && message.contains("(version 2)"),
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

    #[test]
    fn undecodable_rows_are_reported_as_corrupt() {
        let (_dir, _path, store) = open_temp();
        let rec = create(&store, None, 1_000);
        store
            .lock()
            .execute(
                "UPDATE workers SET effective = 'not json' WHERE id = ?1",
                [&rec.id],
            )
            .unwrap();
        let err = store.get(&rec.id).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    }

    #[test]
    fn a_parent_must_exist() {
        let (_dir, _path, store) = open_temp();
        let ghost = record(None, 0);
        let orphan = record(Some(&ghost), 1_000);
        assert!(matches!(
            store.create(&orphan),
            Err(StoreError::Sqlite { .. })
        ));
        assert_eq!(store.get(&orphan.id).unwrap(), None);
    }

    #[test]
    fn concurrent_callers_each_see_consistent_runs() {
        let (_dir, _path, store) = open_temp();
        let store = Arc::new(store);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..25 {
                        let rec = create(&store, None, t * 1_000 + i);
                        store
                            .apply(&rec.id, Event::Start, Patch::default(), 1)
                            .unwrap();
                        store
                            .apply(&rec.id, Event::Complete, Patch::default(), 2)
                            .unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let done = store
            .list(&ListQuery {
                limit: 1_000,
                ..query(ParentFilter::Any, &[WorkerState::Completed])
            })
            .unwrap();
        assert_eq!(done.len(), 100);
        assert!(done.iter().all(|r| r.sequence == 3));
    }
}
