//! The SQLite schema: versioned migrations in `PRAGMA user_version`, and the refusal of a file
//! written by a newer binary.

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::context::Context;
use crate::workers::store::StoreError;

/// Schema migrations, applied in order; migration `i` takes the file from `PRAGMA user_version`
/// `i` to `i + 1`. Append only: never edit a migration that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 3: progress events and the latest activity of each worker.
    "ALTER TABLE worker_events ADD COLUMN progress TEXT;
     ALTER TABLE workers ADD COLUMN last_activity_ms INTEGER;
     UPDATE workers SET last_activity_ms = COALESCE(close_time_ms, start_time_ms, create_time_ms);",
    // 4: token usage of model-executor runs (docs/model.md §11.8).
    "ALTER TABLE workers ADD COLUMN usage TEXT;",
    // 5: the git worktree of an isolated worker (docs/workers.md §6.10).
    "ALTER TABLE workers ADD COLUMN worktree TEXT;",
    // 6: conversations (docs §12): continuations, the question of a waiting worker, the inbox
    // and the transcripts. The state checks learn `input_required` in `relax_state_checks`.
    "ALTER TABLE workers ADD COLUMN continues TEXT;
     ALTER TABLE workers ADD COLUMN continued_by TEXT;
     ALTER TABLE workers ADD COLUMN question TEXT;
     ALTER TABLE workers ADD COLUMN undelivered INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE workers ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
     CREATE TABLE worker_messages (
         seq          INTEGER PRIMARY KEY,
         id           TEXT    NOT NULL UNIQUE,
         worker_id    TEXT    NOT NULL,
         text         TEXT    NOT NULL,
         interrupt    INTEGER NOT NULL,
         caller_scope TEXT    NOT NULL,
         request_id   TEXT,
         time_ms      INTEGER NOT NULL,
         delivered    INTEGER NOT NULL DEFAULT 0
     ) STRICT;
     CREATE INDEX worker_messages_inbox ON worker_messages (worker_id, delivered, seq);
     CREATE UNIQUE INDEX worker_messages_by_request_id ON worker_messages (caller_scope, request_id)
         WHERE request_id IS NOT NULL;
     CREATE TABLE worker_transcripts (
         worker_id TEXT    NOT NULL,
         idx       INTEGER NOT NULL,
         entry     TEXT    NOT NULL,
         PRIMARY KEY (worker_id, idx)
     ) STRICT, WITHOUT ROWID;",
    // 7: the session reference a runner returned with a worker's end (docs §12.6).
    "ALTER TABLE workers ADD COLUMN session_ref TEXT;",
    // 8: the A2A context of a worker (docs §13.3), listed by context within a principal.
    "ALTER TABLE workers ADD COLUMN context_id TEXT;
     CREATE INDEX workers_by_context ON workers (caller_scope, context_id, create_time_ms, id)
         WHERE context_id IS NOT NULL;",
    // 9: the artifacts a worker reported, assembled (docs §13.1).
    "ALTER TABLE workers ADD COLUMN artifacts TEXT;",
    // 10: a worker whose agent declined the task (docs §13.1).
    "ALTER TABLE workers ADD COLUMN rejected INTEGER NOT NULL DEFAULT 0;",
    // 11: the A2A message that started a worker, for its spec (docs §13.3).
    "ALTER TABLE workers ADD COLUMN a2a_message TEXT;",
];

/// The migration whose state checks [`relax_state_checks`] widens after its SQL.
const STATE_CHECKS_MIGRATION: i64 = 6;

/// Lets the `state` columns hold `input_required` (docs §12.4), and a waiting worker keep its
/// token. SQLite cannot alter a CHECK constraint; its documented way to *relax* one without
/// rewriting the table is to edit the schema text and bump the schema cookie, which is safe
/// because every stored row already satisfies the wider check. Runs inside the migration's
/// transaction, so a failure leaves the file at the previous version.
fn relax_state_checks(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let cookie: i64 = tx
        .pragma_query_value(None, "schema_version", |row| row.get(0))
        .context("read schema cookie")?;
    tx.pragma_update(None, "writable_schema", true)
        .context("open the schema for the state checks")?;
    let edited = tx
        .execute(
            "UPDATE sqlite_schema
                SET sql = replace(replace(sql,
                    '''running'', ''completed'', ''failed'', ''killed'')',
                    '''running'', ''completed'', ''failed'', ''killed'', ''input_required'')'),
                    'token_hash IS NULL OR state IN (''pending'', ''running'')',
                    'token_hash IS NULL OR state IN (''pending'', ''running'', ''input_required'')')
              WHERE type = 'table' AND name IN ('workers', 'worker_events')",
            [],
        )
        .context("widen the state checks")?;
    tx.pragma_update(None, "schema_version", cookie + 1)
        .context("bump schema cookie")?;
    tx.pragma_update(None, "writable_schema", false)
        .context("close the schema")?;
    if edited != 2 {
        return Err(StoreError::Corrupt(format!(
            "the state checks of {edited} tables were found, expected 2 (workers, worker_events)"
        )));
    }
    Ok(())
}

/// Fails with [`StoreError::SchemaTooNew`] if the file's schema is newer than [`MIGRATIONS`].
pub(super) fn check_schema_version(conn: &Connection) -> Result<i64, StoreError> {
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
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
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
        if version + 1 == STATE_CHECKS_MIGRATION {
            relax_state_checks(&tx)?;
        }
        tx.pragma_update(None, "user_version", version + 1)
            .context("record schema version")?;
        tx.commit().context("migrate: commit")?;
    }
}
