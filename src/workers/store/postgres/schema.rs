//! The PostgreSQL schema (docs §9): versioned migrations recorded in `agentry_schema`, applied
//! at start-up under an advisory lock so replicas starting together never race, and the refusal
//! of a database written by a newer binary.
//!
//! Ids are `TEXT COLLATE "C"`, so `(create_time_ms, id)` orders byte-wise exactly as in SQLite
//! (and as the keyset cursor expects), whatever the database's default collation.

use deadpool_postgres::Client;

use super::context::PgContext;
use crate::workers::store::StoreError;

/// The advisory lock key migrations run under: `hashtext('agentry schema')` would do as well;
/// a fixed constant is simpler to find in `pg_locks`.
const MIGRATION_LOCK: i64 = 0x6167_656e_7472_7901;

/// Schema migrations, applied in order; migration `i` takes the database from version `i` to
/// `i + 1`. Append only: never edit a migration that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: replicas, workers (owned by a replica, with a stop request), their events, dedupe
    // claims.
    r#"CREATE TABLE replicas (
        id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        name       TEXT        NOT NULL,
        started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        renewed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE workers (
        id                TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        agent             TEXT    NOT NULL,
        description       TEXT    NOT NULL,
        prompt            TEXT    NOT NULL,
        workspace         TEXT,
        parent_id         TEXT COLLATE "C" REFERENCES workers (id),
        depth             BIGINT  NOT NULL CHECK (depth >= 0),
        state             TEXT    NOT NULL
            CHECK (state IN ('pending', 'running', 'completed', 'failed', 'killed')),
        sequence          BIGINT  NOT NULL CHECK (sequence >= 1),
        create_time_ms    BIGINT  NOT NULL,
        start_time_ms     BIGINT,
        close_time_ms     BIGINT,
        result            TEXT,
        structured_result TEXT,
        error             TEXT,
        exit_code         INTEGER,
        caller_scope      TEXT    NOT NULL,
        request_id        TEXT,
        token_hash        TEXT,
        effective         TEXT    NOT NULL,
        last_activity_ms  BIGINT  NOT NULL,
        replica_id        TEXT COLLATE "C" REFERENCES replicas (id),
        stop_reason       TEXT,
        CHECK ((close_time_ms IS NOT NULL) = (state IN ('completed', 'failed', 'killed'))),
        CHECK (token_hash IS NULL OR state IN ('pending', 'running'))
    );
    CREATE INDEX workers_by_create_time ON workers (create_time_ms, id);
    CREATE INDEX workers_by_parent ON workers (parent_id, create_time_ms, id);
    CREATE INDEX workers_by_state ON workers (state, create_time_ms, id);
    CREATE INDEX workers_by_scope ON workers (caller_scope, create_time_ms, id);
    CREATE INDEX workers_open_by_replica ON workers (replica_id)
        WHERE state IN ('pending', 'running');
    CREATE UNIQUE INDEX workers_by_request_id ON workers (caller_scope, request_id)
        WHERE request_id IS NOT NULL;
    CREATE UNIQUE INDEX workers_by_token_hash ON workers (token_hash)
        WHERE token_hash IS NOT NULL;
    CREATE TABLE worker_events (
        worker_id TEXT COLLATE "C" NOT NULL REFERENCES workers (id),
        sequence  BIGINT NOT NULL CHECK (sequence >= 1),
        state     TEXT   NOT NULL
            CHECK (state IN ('pending', 'running', 'completed', 'failed', 'killed')),
        time_ms   BIGINT NOT NULL,
        snapshot  TEXT   NOT NULL,
        progress  TEXT,
        PRIMARY KEY (worker_id, sequence)
    );
    CREATE TABLE dedupe_claims (
        key        TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        worker_id  TEXT COLLATE "C" NOT NULL,
        claimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        expires_at TIMESTAMPTZ NOT NULL
    );"#,
    // 2: token usage of model-executor runs (docs/model.md §11.8).
    "ALTER TABLE workers ADD COLUMN usage TEXT;",
    // 3: the git worktree of an isolated worker (docs/workers.md §6.10).
    "ALTER TABLE workers ADD COLUMN worktree TEXT;",
    // 4: where a replica runs (the kernel's boot id and its pid), so that a restart on the same
    // host takes over the rows of its dead predecessor at once (docs §9).
    "ALTER TABLE replicas ADD COLUMN boot_id TEXT; ALTER TABLE replicas ADD COLUMN pid BIGINT;",
    // 5: callers of one replica waiting for a worker another replica runs (docs §9).
    r#"CREATE TABLE worker_holds (
        id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        worker_id  TEXT COLLATE "C" NOT NULL,
        replica_id TEXT COLLATE "C" NOT NULL
    );
    CREATE INDEX worker_holds_by_worker ON worker_holds (worker_id);"#,
    // 6: runner workers waiting for a runner of any replica, and the messages between the
    // replica that owns such a worker and the one whose runner runs it (docs §10).
    r#"CREATE TABLE runner_waits (
        worker_id     TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        owner_replica TEXT COLLATE "C" NOT NULL,
        agent         TEXT NOT NULL,
        caller_scope  TEXT NOT NULL,
        deadline_ms   BIGINT NOT NULL,
        waiting_since TIMESTAMPTZ NOT NULL DEFAULT now(),
        claimed_by    TEXT COLLATE "C"
    );
    CREATE TABLE runner_relays (
        seq        BIGSERIAL PRIMARY KEY,
        to_replica TEXT COLLATE "C" NOT NULL,
        worker_id  TEXT COLLATE "C" NOT NULL,
        message    TEXT NOT NULL
    );
    CREATE INDEX runner_relays_to ON runner_relays (to_replica, seq);"#,
    // 7: conversations (docs §12): the `input_required` state (a waiting worker keeps its
    // token), continuations, the question, the inbox and the transcripts.
    r#"ALTER TABLE workers DROP CONSTRAINT workers_state_check,
        ADD CONSTRAINT workers_state_check CHECK
            (state IN ('pending', 'running', 'completed', 'failed', 'killed', 'input_required')),
        DROP CONSTRAINT workers_check1,
        ADD CONSTRAINT workers_check1 CHECK
            (token_hash IS NULL OR state IN ('pending', 'running', 'input_required')),
        ADD COLUMN continues TEXT COLLATE "C",
        ADD COLUMN continued_by TEXT COLLATE "C",
        ADD COLUMN question TEXT,
        ADD COLUMN undelivered BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN sealed BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE worker_events DROP CONSTRAINT worker_events_state_check,
        ADD CONSTRAINT worker_events_state_check CHECK
            (state IN ('pending', 'running', 'completed', 'failed', 'killed', 'input_required'));
    CREATE TABLE worker_messages (
        seq          BIGSERIAL PRIMARY KEY,
        id           TEXT COLLATE "C" NOT NULL UNIQUE,
        worker_id    TEXT COLLATE "C" NOT NULL,
        text         TEXT    NOT NULL,
        interrupt    BOOLEAN NOT NULL,
        caller_scope TEXT    NOT NULL,
        request_id   TEXT,
        time_ms      BIGINT  NOT NULL,
        delivered    BOOLEAN NOT NULL DEFAULT false
    );
    CREATE INDEX worker_messages_inbox ON worker_messages (worker_id, delivered, seq);
    CREATE UNIQUE INDEX worker_messages_by_request_id ON worker_messages (caller_scope, request_id)
        WHERE request_id IS NOT NULL;
    CREATE TABLE worker_transcripts (
        worker_id TEXT COLLATE "C" NOT NULL,
        idx       BIGINT NOT NULL,
        entry     TEXT   NOT NULL,
        PRIMARY KEY (worker_id, idx)
    );"#,
    // 8: the session reference a runner returned with a worker's end (docs §12.6).
    "ALTER TABLE workers ADD COLUMN session_ref TEXT;",
    // 9: the A2A context of a worker (docs §13.3), listed by context within a principal.
    r#"ALTER TABLE workers ADD COLUMN context_id TEXT COLLATE "C";
    CREATE INDEX workers_by_context ON workers (caller_scope, context_id, create_time_ms, id)
        WHERE context_id IS NOT NULL;"#,
    // 10: the artifacts a worker reported, assembled (docs §13.1).
    "ALTER TABLE workers ADD COLUMN artifacts TEXT;",
    // 11: a worker whose agent declined the task (docs §13.1).
    "ALTER TABLE workers ADD COLUMN rejected BOOLEAN NOT NULL DEFAULT false;",
    // 12: the A2A message that started a worker, for its spec (docs §13.3).
    "ALTER TABLE workers ADD COLUMN a2a_message TEXT;",
    // 13: no foreign-key checks on the hot inserts (docs §9, "Schema"): an event is only ever
    // written by the statement that writes or moves its worker's row, a worker names the
    // replica that created it, and neither table loses rows, so each check was a lookup per
    // event and per worker that could never fail.
    r#"ALTER TABLE worker_events DROP CONSTRAINT IF EXISTS worker_events_worker_id_fkey;
    ALTER TABLE workers DROP CONSTRAINT IF EXISTS workers_replica_id_fkey;"#,
    // 14: whether a replica follows the events of others' workers (docs §9, "Watching"): a
    // replica announces its events only while another live replica does.
    "ALTER TABLE replicas ADD COLUMN follows_events BOOLEAN NOT NULL DEFAULT false;",
    // 15: fewer index entries per worker life (docs §9, "Schema"): a worker without a parent is
    // not in `workers_by_parent`, and a completed one not in `workers_by_state`, so a top-level
    // worker's create skips the first and the transition that completes it both.
    r#"DROP INDEX workers_by_parent;
    CREATE INDEX workers_by_parent ON workers (parent_id, create_time_ms, id)
        WHERE parent_id IS NOT NULL;
    DROP INDEX workers_by_state;
    CREATE INDEX workers_by_state ON workers (state, create_time_ms, id)
        WHERE state <> 'completed';"#,
    // 16: no CHECK constraints on the hot tables (docs §9, "Schema"): PostgreSQL parses and
    // plans every one of them again for each statement that writes the table, a sixteenth of
    // the database's CPU per worker; the values they bounded are written only from the store's
    // own types, and the SQLite store keeps the same constraints, which the shared suite runs
    // against.
    r#"ALTER TABLE workers DROP CONSTRAINT IF EXISTS workers_depth_check,
        DROP CONSTRAINT IF EXISTS workers_sequence_check,
        DROP CONSTRAINT IF EXISTS workers_state_check,
        DROP CONSTRAINT IF EXISTS workers_check,
        DROP CONSTRAINT IF EXISTS workers_check1;
    ALTER TABLE worker_events DROP CONSTRAINT IF EXISTS worker_events_sequence_check,
        DROP CONSTRAINT IF EXISTS worker_events_state_check;"#,
];

/// Brings the schema up to date under the migration advisory lock, or refuses a newer one.
/// Returns the version found before migrating.
pub(super) async fn migrate(client: &mut Client) -> Result<i64, StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .pg("migrate: take the advisory lock")?;
    let result = migrate_locked(client).await;
    // Released on every path; a dead connection releases it by itself.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}

async fn migrate_locked(client: &mut Client) -> Result<i64, StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS agentry_schema (
                 one     BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
                 version BIGINT  NOT NULL CHECK (version >= 0)
             );
             INSERT INTO agentry_schema (version) VALUES (0) ON CONFLICT DO NOTHING;",
        )
        .await
        .pg("migrate: create the version table")?;
    let found = schema_version(client).await?;
    let known = MIGRATIONS.len() as i64;
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i64 + 1;
        let tx = client.transaction().await.pg("migrate: begin")?;
        tx.batch_execute(sql)
            .await
            .pg_with(|| format!("apply schema migration {version}"))?;
        tx.execute("UPDATE agentry_schema SET version = $1", &[&version])
            .await
            .pg("record schema version")?;
        tx.commit().await.pg("migrate: commit")?;
    }
    Ok(found)
}

/// The version recorded in `agentry_schema`.
pub(super) async fn schema_version(client: &Client) -> Result<i64, StoreError> {
    let row = client
        .query_one("SELECT version FROM agentry_schema", &[])
        .await
        .pg("read schema version")?;
    Ok(row.get(0))
}
