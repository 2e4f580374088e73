//! The shared backend: PostgreSQL for several replicas (docs §9), through `tokio-postgres` with
//! a `deadpool-postgres` pool.
//!
//! The database is the arbiter of every race: a transition reads its row (or takes the row as
//! its replica last wrote it), asks the lifecycle, and writes row, event and `NOTIFY` in one
//! statement that moves the row only if its sequence and token are still the ones read (a
//! compare-and-set; a row that moved is read again and the lifecycle asked again); a create is
//! likewise one statement; the orphan close is a compare-and-set on the state of rows whose
//! replica's lease expired on the database clock; dedupe claims are `INSERT … ON CONFLICT`.
//! Claims, creates and transitions made at the same time are written together, one statement
//! and one commit per batch (`pg_batch`). Each commit of an event sends `NOTIFY agentry_events
//! '<worker_id>:<sequence>:<replica_id>'`; one dedicated `LISTEN` connection per process turns those (and
//! stop requests on `agentry_stop`) into [`Notice`]s. Notices are hints: the listener sends
//! [`Notice::Resync`] after every (re)connect, and readers poll as well.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use std::time::Duration;

use deadpool_postgres::GenericClient;
use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, IsolationLevel, NoTls, Row};

use super::pg_batch::{Batcher, ClaimWrite, CreateWrite, TransitionWrite, write_transition_in};
use super::pg_schema;
use super::record::{COLUMNS, Snapshot, advance, creation_event, progress_event, to_sql_sequence};
use super::{
    Applied, Lease, ListQuery, Notice, ParentFilter, Patch, Relayed, RunnerClaim, RunnerWait,
    SharedStore, StoreError, WorkerStore,
};
use crate::workers::lifecycle::Event;
use crate::workers::model::{
    Progress, SpawnSpec, WorkerEvent, WorkerId, WorkerRecord, WorkerState,
};

/// Connections in the pool.
const POOL_SIZE: usize = 16;
/// Connections of the batch writers (`pg_batch`): at most two batches of each of three kinds
/// at once.
const BATCH_POOL_SIZE: usize = 6;
/// How the batch writers' connections plan: index lookups of the rows named, never a scan of
/// a whole table (an `unnest` of parameters looks like ten rows to the planner, and the tables
/// look small until their first `ANALYZE`).
const BATCH_PLANNER_OPTIONS: &str =
    "-c enable_seqscan=off -c enable_hashjoin=off -c enable_mergejoin=off";
/// The largest relay notice that carries its messages (PostgreSQL takes payloads shorter than
/// 8000 bytes).
const RELAY_NOTICE_BYTES: usize = 7900;
/// How long a start-up or pooled connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two attempts of the listener to reconnect.
const LISTEN_RETRY: Duration = Duration::from_millis(500);
/// Notices buffered per receiver; one that lags re-reads (it gets `Lagged`, then resyncs).
const NOTICE_BUFFER: usize = 1024;

/// Who this process is among the replicas (`replica.name`, `replica.lease`).
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// Shown in orphan errors and logs; default the host name.
    pub name: String,
    /// How long the replica row stays valid without renewal.
    pub lease: Duration,
}

/// [`WorkerStore`] on a PostgreSQL database shared by several replicas.
pub struct PostgresStore {
    pool: Pool,
    /// This process's replica row: random per start.
    replica_id: String,
    replica: ReplicaSettings,
    /// Where [`Notice`]s are published; the listener task holds a clone.
    notices: broadcast::Sender<Notice>,
    /// The `LISTEN` task, ended with the store.
    listener: tokio::task::JoinHandle<()>,
    /// Writes transitions, creates and dedupe claims in batches (group commit, `pg_batch`).
    transitions: Batcher<TransitionWrite>,
    creates: Batcher<CreateWrite>,
    claims: Batcher<ClaimWrite>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("replica_id", &self.replica_id)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// `url` with its password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // A key=value connection string: hide `password=…`.
        return url
            .split_whitespace()
            .map(|kv| {
                if kv.to_ascii_lowercase().starts_with("password=") {
                    "password=***"
                } else {
                    kv
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    // `?password=` in the query string.
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| {
                    if kv.to_ascii_lowercase().starts_with("password=") {
                        "password=***".to_owned()
                    } else {
                        kv.to_owned()
                    }
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// `execute` of a statement prepared once per connection (deadpool's statement cache): a hot
/// statement costs one round trip, not a prepare and an execute.
async fn exec_cached(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.execute(&statement, params).await
}

/// `query_opt` of a statement prepared once per connection.
async fn query_opt_cached(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.query_opt(&statement, params).await
}

/// `query` of a statement prepared once per connection.
async fn query_cached(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.query(&statement, params).await
}

/// Attaches what the store was doing to a driver or pool error.
pub(super) trait PgContext<T> {
    /// Adds a fixed description.
    fn pg(self, what: &str) -> Result<T, StoreError>;
    /// Adds a description built only on error.
    fn pg_with(self, what: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T, E: std::error::Error + 'static> PgContext<T> for Result<T, E> {
    fn pg(self, what: &str) -> Result<T, StoreError> {
        self.pg_with(|| what.to_owned())
    }

    fn pg_with(self, what: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| {
            let (context, message) = (what(), error_text(&e));
            if connection_lost(&e) {
                StoreError::Lost { context, message }
            } else {
                StoreError::Postgres { context, message }
            }
        })
    }
}

/// Whether `e` (anywhere in its chain) says the connection is gone rather than that the
/// statement was refused: a closed client, an I/O failure, or a server that ended the session
/// (`57P01` admin shutdown — `pg_terminate_backend` —, `57P02`, `57P03`, class `08`).
fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
            if pg.is_closed() {
                return true;
            }
            if let Some(code) = pg.code().map(tokio_postgres::error::SqlState::code) {
                return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
            }
        }
        if err.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// First pause between two attempts of a write whose connection was lost; doubled each time.
const RETRY_FIRST: Duration = Duration::from_millis(20);
/// Longest pause between two attempts.
const RETRY_MOST: Duration = Duration::from_secs(1);

/// The driver's message with its cause (tokio-postgres puts the server's text in the source).
fn error_text(e: &impl std::fmt::Display) -> String {
    e.to_string()
}

impl PostgresStore {
    /// Connects to `url`, brings the schema up to date under the migration lock (refusing a
    /// newer one), registers this process as a replica with a fresh lease and starts the
    /// `LISTEN` connection. An unreachable database is [`StoreError::Unreachable`] naming the
    /// URL without its password.
    pub async fn open(url: &str, replica: ReplicaSettings) -> Result<Self, StoreError> {
        let shown = redact_url(url);
        let mut config =
            tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Unreachable {
                url: shown.clone(),
                message: format!("invalid URL: {e}"),
            })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("agentry");
        }
        let pool = new_pool(config.clone(), POOL_SIZE, &shown)?;
        // The batch writers' own connections, planning their statements for a few rows of
        // many (`pg_batch`): a plan made while the tables are still small (a fresh database)
        // would otherwise scan a whole table for each batch until statistics catch up.
        let mut planned = config.clone();
        planned.options(&match config.get_options() {
            Some(given) => format!("{given} {BATCH_PLANNER_OPTIONS}"),
            None => BATCH_PLANNER_OPTIONS.to_owned(),
        });
        let batch_pool = new_pool(planned, BATCH_POOL_SIZE, &shown)?;
        let mut client = pool.get().await.map_err(|e| StoreError::Unreachable {
            url: shown.clone(),
            message: pool_error_text(&e),
        })?;
        pg_schema::migrate(&mut client).await?;
        let replica_id = format!("r-{}", crate::workers::model::generate_token());
        let host = Host::this();
        take_over_predecessors(&client, &replica.name, &host).await?;
        client
            .execute(
                "INSERT INTO replicas (id, name, expires_at, boot_id, pid)
                 VALUES ($1, $2, now() + $3::BIGINT * interval '1 millisecond', $4, $5)",
                &[
                    &replica_id,
                    &replica.name,
                    &lease_ms(replica.lease),
                    &host.boot_id,
                    &host.pid,
                ],
            )
            .await
            .pg("register replica")?;
        drop(client);
        let (notices, _) = broadcast::channel(NOTICE_BUFFER);
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let listener = tokio::spawn(listen(
            config,
            replica_id.clone(),
            notices.clone(),
            ready_tx,
        ));
        // Listening before anything is committed, so this process misses no notice of its
        // own start; a listener slow to connect is not fatal (readers poll anyway).
        if tokio::time::timeout(CONNECT_TIMEOUT, ready).await.is_err() {
            tracing::warn!(url = %shown, "store listener not connected yet; watchers poll until it is");
        }
        tracing::info!(replica = %replica.name, replica_id = %replica_id, url = %shown, "registered replica");
        let origin: Arc<str> = Arc::from(replica_id.as_str());
        Ok(PostgresStore {
            transitions: Batcher::start(batch_pool.clone(), origin.clone()),
            creates: Batcher::start(batch_pool.clone(), origin.clone()),
            claims: Batcher::start(batch_pool, origin),
            pool,
            replica_id,
            replica,
            notices,
            listener,
        })
    }

    async fn client(&self) -> Result<Client, StoreError> {
        // Every pool failure is a connection that could not be had: retryable.
        self.pool.get().await.map_err(|e| StoreError::Lost {
            context: "get a connection".to_owned(),
            message: pool_error_text(&e),
        })
    }

    /// Runs `attempt` (given the attempt's number, 0 first) until it ends otherwise than with a
    /// lost connection, pausing with a doubling backoff, for at most `replica.lease`: each
    /// attempt takes a fresh connection (a terminated one is not recycled into the pool), and
    /// each write checks on a retry whether the attempt before it committed after all (the
    /// answer to a commit can be lost with the connection), so a retry never applies a write
    /// twice. After the lease, the last `Lost` error goes to the caller.
    async fn retrying<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + self.replica.lease;
        let mut pause = RETRY_FIRST;
        let mut n = 0;
        loop {
            match attempt(n).await {
                Err(e @ StoreError::Lost { .. })
                    if tokio::time::Instant::now() + pause < deadline =>
                {
                    tracing::warn!(error = %e, attempt = n, "{what}: the database connection was lost; retrying on a new one");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MOST);
                    n += 1;
                }
                other => return other,
            }
        }
    }

    /// One attempt at [`SharedStore::renew_lease`].
    async fn renew_lease_once(&self) -> Result<Lease, StoreError> {
        let client = self.client().await?;
        // Both sides of the comparison are the database's clock.
        let row = client
            .query_opt(
                "WITH before AS (SELECT expires_at > now() AS alive FROM replicas WHERE id = $1)
                 UPDATE replicas
                    SET renewed_at = now(),
                        expires_at = now() + $2::BIGINT * interval '1 millisecond'
                  WHERE id = $1
                 RETURNING (SELECT alive FROM before)",
                &[&self.replica_id, &lease_ms(self.replica.lease)],
            )
            .await
            .pg("renew replica lease")?;
        match row {
            Some(row) if row.get::<_, Option<bool>>(0) == Some(true) => Ok(Lease::Renewed),
            Some(_) => Ok(Lease::Lapsed),
            None => {
                // Someone removed the row: register again under the same id.
                client
                    .execute(
                        "INSERT INTO replicas (id, name, expires_at)
                         VALUES ($1, $2, now() + $3::BIGINT * interval '1 millisecond')
                         ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                        &[
                            &self.replica_id,
                            &self.replica.name,
                            &lease_ms(self.replica.lease),
                        ],
                    )
                    .await
                    .pg("register replica again")?;
                Ok(Lease::Lapsed)
            }
        }
    }

    /// One attempt at [`WorkerStore::create`]: the row, its creation event and the
    /// notification, written with whatever else is being created (`pg_batch`). A row that did
    /// not go in met one with its id — on a retry, the attempt before committed (ids are random,
    /// so nobody else has this one) — or one with its caller's `request_id`: the unique index
    /// decides a `request_id` race between replicas.
    async fn create_once(
        &self,
        event: &WorkerEvent,
        retry: bool,
    ) -> Result<WorkerEvent, StoreError> {
        let w = &event.worker;
        if self.creates.write(create_write(event)?).await? {
            return Ok(event.clone());
        }
        if retry && self.get(&w.id).await?.is_some() {
            return Ok(event.clone());
        }
        if let Some(request_id) = &w.spec.request_id
            && let Some(existing) = self
                .find_by_request_id(&w.spec.caller_scope, request_id)
                .await?
        {
            return Err(StoreError::DuplicateRequestId {
                request_id: request_id.clone(),
                existing: existing.id,
            });
        }
        Err(StoreError::Postgres {
            context: "insert worker".to_owned(),
            message: format!(
                "worker {} conflicts with a stored row (its id or its caller's request_id)",
                w.id
            ),
        })
    }

    /// One attempt at [`WorkerStore::apply`], optimistic: read the row, decide, and write the
    /// transition as one compare-and-set statement on its sequence and token (one commit, no
    /// lock held across round trips); a row that moved in between is read again. With
    /// `known` (the row as the caller last saw it, [`WorkerStore::apply_from`]) the first
    /// decision is made on it without a read; a write that misses, or a decision other than a
    /// move (the row may have moved on where `known` has not), reads the row and decides again.
    async fn apply_once(
        &self,
        id: &WorkerId,
        known: Option<&WorkerRecord>,
        event: Event,
        patch: Patch,
        now_ms: i64,
        retry: bool,
    ) -> Result<Applied, StoreError> {
        let mut first = true;
        // A retry first checks what the attempt before did, which needs the row.
        let mut known = known.filter(|_| !retry);
        loop {
            if let Some(assumed) = known.take() {
                if let Ok(Some(next)) = advance(assumed, event, patch.clone(), now_ms)
                    && let Some(moved) = self.write_transition(assumed, next, now_ms).await?
                {
                    return Ok(Applied::Moved(moved));
                }
                continue;
            }
            // The connection goes back to the pool before the write, which takes its own.
            let current = {
                let client = self.client().await?;
                let current = select_worker(&client, id, false)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(id.clone()))?;
                if retry && first {
                    // The attempt before may have committed: then the row's latest event is
                    // this very transition (same state, same time), and it is answered as
                    // applied.
                    if let Some(ev) = latest_event(&client, &current).await?
                        && ev.progress.is_none()
                        && ev.time_ms == now_ms
                        && Some(ev.state) == event.leads_to()
                    {
                        return Ok(Applied::Moved(ev));
                    }
                }
                current
            };
            first = false;
            let Some(next) = advance(&current, event, patch.clone(), now_ms)? else {
                return Ok(Applied::Absorbed(current));
            };
            if let Some(moved) = self.write_transition(&current, next, now_ms).await? {
                return Ok(Applied::Moved(moved));
            }
        }
    }

    /// Writes `next` over `current` with whatever other transitions are being written (the
    /// batcher); `None`: the row moved in between, so the caller reads it again.
    async fn write_transition(
        &self,
        current: &WorkerRecord,
        next: WorkerRecord,
        now_ms: i64,
    ) -> Result<Option<WorkerEvent>, StoreError> {
        let write = transition_write(current, next, now_ms)?;
        let event = write.event.clone();
        Ok(self.transitions.write(write).await?.then_some(event))
    }

    /// One attempt at [`WorkerStore::append_progress`], optimistic like
    /// [`apply_once`](Self::apply_once).
    async fn append_once(
        &self,
        id: &WorkerId,
        progress: Progress,
        now_ms: i64,
        max_events: u64,
        retry: bool,
    ) -> Result<WorkerEvent, StoreError> {
        let client = self.client().await?;
        let id_text = id.as_str();
        let mut first = true;
        loop {
            let current = select_worker(&client, id, false)
                .await?
                .ok_or_else(|| StoreError::NotFound(id.clone()))?;
            if retry
                && first
                && let Some(ev) = latest_event(&client, &current).await?
                && ev.time_ms == now_ms
                && ev.progress.as_ref() == Some(&progress)
            {
                // The attempt before committed this report.
                return Ok(ev);
            }
            first = false;
            let expected = current.sequence;
            let token = current.token_hash.clone();
            let event = progress_event(current, progress.clone(), now_ms, max_events)?;
            let row = EventRow::of(&event, &self.replica_id)?;
            let expected = to_sql_sequence(expected);
            let mut params: Vec<&(dyn ToSql + Sync)> =
                vec![&id_text, &row.sequence, &now_ms, &expected, &token];
            params.extend(row.params());
            let written = exec_cached(&client, &PROGRESS_SQL, &params)
                .await
                .pg("record progress")?;
            if written == 1 {
                return Ok(event);
            }
        }
    }
}

/// An event's encoded columns and its notification's payload (`worker:sequence:replica`, the
/// replica that committed it last, so it can tell its own commits from others').
struct EventRow {
    sequence: i64,
    state: &'static str,
    time_ms: i64,
    snapshot: String,
    progress: Option<String>,
    payload: String,
}

impl EventRow {
    fn of(event: &WorkerEvent, origin: &str) -> Result<Self, StoreError> {
        let snapshot = serde_json::to_string(&Snapshot::of(&event.worker))
            .map_err(|e| StoreError::Corrupt(format!("cannot encode event snapshot: {e}")))?;
        let progress = event
            .progress
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("cannot encode progress: {e}")))?;
        Ok(Self {
            sequence: to_sql_sequence(event.sequence),
            state: event.state.as_str(),
            time_ms: event.time_ms,
            snapshot,
            progress,
            payload: format!("{}:{}:{origin}", event.worker_id, event.sequence),
        })
    }

    /// The parameters [`EventParams::from`] places, in its order.
    fn params(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.sequence,
            &self.state,
            &self.time_ms,
            &self.snapshot,
            &self.progress,
            &self.payload,
        ]
    }
}

/// Where an event's columns and its notification's payload sit among a statement's
/// parameters.
struct EventParams {
    sequence: usize,
    state: usize,
    time: usize,
    snapshot: usize,
    progress: usize,
    payload: usize,
}

impl EventParams {
    /// Six consecutive parameters from `first`, in the order of [`event_params`].
    const fn from(first: usize) -> Self {
        Self {
            sequence: first,
            state: first + 1,
            time: first + 2,
            snapshot: first + 3,
            progress: first + 4,
            payload: first + 5,
        }
    }

    /// The end every writing statement shares: the event row after `g` (a CTE returning the
    /// written worker's `id` when the write it guards happened), then its notification, sent
    /// by the server at commit. The statement returns one row if it wrote, none otherwise.
    fn tail(&self) -> String {
        let Self {
            sequence,
            state,
            time,
            snapshot,
            progress,
            payload,
        } = self;
        format!(
            ", e AS (
                 INSERT INTO worker_events (worker_id, sequence, state, time_ms, snapshot, progress)
                 SELECT id, ${sequence}::BIGINT, ${state}::TEXT, ${time}::BIGINT,
                        ${snapshot}::TEXT, ${progress}::TEXT FROM g
                 RETURNING 1
             )
             SELECT pg_notify('agentry_events', ${payload}::TEXT) FROM e"
        )
    }
}

/// A runner claim (`claim_runner_wait`): lock the wait unless another claimer holds it, rotate
/// the token of a worker that still waits (pending) and return its row, and claim the wait; a
/// wait whose worker no longer waits is dropped instead (PostgreSQL runs every data-modifying
/// `WITH` part to completion whether or not the outer query reads it).
static CLAIM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH c AS (
             SELECT worker_id FROM runner_waits WHERE worker_id = $1 AND claimed_by IS NULL
             FOR UPDATE SKIP LOCKED
         ), t AS (
             UPDATE workers w SET token_hash = $2 FROM c
              WHERE w.id = c.worker_id AND w.state = 'pending'
             RETURNING {COLUMNS}
         ), stale AS (
             DELETE FROM runner_waits r USING c
              WHERE r.worker_id = c.worker_id AND NOT EXISTS (SELECT 1 FROM t)
         ), k AS (
             UPDATE runner_waits r SET claimed_by = $3 FROM t
              WHERE r.worker_id = t.id
             RETURNING 1
         )
         SELECT {COLUMNS} FROM t WHERE EXISTS (SELECT 1 FROM k)"
    )
});

/// Relayed messages (`relay`): rows numbered in the order given (`seq` is taken row by row as
/// the ordered select yields them), and one notice that carries them (`[to, worker, [[seq,
/// message], …]]`) when that fits in a notice, else only `[to]`.
static RELAY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH sent AS (
             INSERT INTO runner_relays (to_replica, worker_id, message)
             SELECT $1, $2, m FROM unnest($3::text[]) WITH ORDINALITY AS u(m, i) ORDER BY i
             RETURNING seq, message
         ), whole AS (
             SELECT json_build_array($1, $2, json_agg(json_build_array(seq, message)
                                                      ORDER BY seq))::text AS p
               FROM sent HAVING count(*) > 0
         )
         SELECT pg_notify('agentry_relays', CASE WHEN octet_length(p) <= {RELAY_NOTICE_BYTES}
                                                 THEN p ELSE json_build_array($1)::text END)
           FROM whole"
    )
});

/// A progress report: the next sequence on a running row still at the sequence and token it
/// was read with.
static PROGRESS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH g AS (
             UPDATE workers SET sequence = $2, last_activity_ms = $3
              WHERE id = $1 AND sequence = $4 AND token_hash IS NOT DISTINCT FROM $5
                AND state = 'running'
             RETURNING id
         ){}",
        EventParams::from(6).tail()
    )
});

/// A pool error with its cause (the pool's own text says only "backend error").
/// A connection pool of at most `size` on `config`; `shown` names the URL without its
/// password in an error.
fn new_pool(config: tokio_postgres::Config, size: usize, shown: &str) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(CONNECT_TIMEOUT * 2))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| StoreError::Unreachable {
            url: shown.to_owned(),
            message: e.to_string(),
        })
}

pub(super) fn pool_error_text(e: &deadpool_postgres::PoolError) -> String {
    use std::error::Error;
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
}

/// The listener: one dedicated connection that `LISTEN`s on `agentry_events` and
/// `agentry_stop`, turning notifications into [`Notice`]s; reconnects forever, sending
/// [`Notice::Resync`] after each connect so receivers re-read what they may have missed.
async fn listen(
    config: tokio_postgres::Config,
    this_replica: String,
    notices: broadcast::Sender<Notice>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                // The connection must be polled for LISTEN to complete and for messages.
                let pump = tokio::spawn(async move {
                    while let Some(message) =
                        std::future::poll_fn(|cx| connection.poll_message(cx)).await
                    {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "store listener connection failed");
                                break;
                            }
                        }
                    }
                });
                if let Err(e) = client
                    .batch_execute(
                        "LISTEN agentry_events; LISTEN agentry_stop; LISTEN agentry_holds; \
                         LISTEN agentry_runner_waits; LISTEN agentry_relays",
                    )
                    .await
                {
                    tracing::warn!(error = %e, "store listener cannot LISTEN");
                    pump.abort();
                } else {
                    let _ = notices.send(Notice::Resync);
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    while let Some((channel, payload)) = rx.recv().await {
                        if let Some(notice) = parse_notice(&channel, &payload, &this_replica) {
                            let _ = notices.send(notice);
                        }
                    }
                    tracing::warn!("store listener disconnected; reconnecting");
                }
                drop(client);
            }
            Err(e) => tracing::debug!(error = %e, "store listener cannot connect"),
        }
        tokio::time::sleep(LISTEN_RETRY).await;
    }
}

/// A notification payload as a [`Notice`]; anything malformed is dropped (only a hint).
fn parse_notice(channel: &str, payload: &str, this_replica: &str) -> Option<Notice> {
    match channel {
        "agentry_events" => {
            // `worker:sequence:replica`; a replica of an earlier build sends no replica.
            let mut parts = payload.splitn(3, ':');
            let worker_id = WorkerId::parse(parts.next()?).ok()?;
            let sequence = parts.next()?.parse().ok()?;
            Some(Notice::Event {
                worker_id,
                sequence,
                by_this_replica: parts.next() == Some(this_replica),
            })
        }
        "agentry_stop" => Some(Notice::Stop {
            worker_id: WorkerId::parse(payload).ok()?,
        }),
        "agentry_holds" => Some(Notice::Holds {
            worker_id: WorkerId::parse(payload).ok()?,
        }),
        "agentry_runner_waits" => Some(Notice::RunnerWait(parse_wait(payload))),
        "agentry_relays" => parse_relay(payload),
        _ => None,
    }
}

/// An `agentry_relays` notice: `[to, worker, [[seq, message], …]]` with the messages, or `[to]`
/// (too large to carry; they are taken from the table). Without an addressee it is dropped.
fn parse_relay(payload: &str) -> Option<Notice> {
    type Whole = (String, String, Vec<(i64, String)>);
    if let Ok((to_replica, worker, messages)) = serde_json::from_str::<Whole>(payload) {
        // A carried message about an unreadable worker id: take them from the table instead.
        let relayed = WorkerId::parse(&worker).ok().map(|worker_id| {
            messages
                .into_iter()
                .map(|(seq, message)| Relayed {
                    seq,
                    worker_id: worker_id.clone(),
                    message,
                })
                .collect()
        });
        return Some(Notice::Relay {
            to_replica,
            relayed,
        });
    }
    let (to_replica,): (String,) = serde_json::from_str(payload).ok()?;
    Some(Notice::Relay {
        to_replica,
        relayed: None,
    })
}

/// The wait a `agentry_runner_waits` notice carries: `[worker, owner, agent, principal,
/// deadline_ms]` as JSON; `None` when the payload is not that (the waits are read instead).
fn parse_wait(payload: &str) -> Option<RunnerWait> {
    let (worker_id, owner, agent, caller_scope, deadline_ms): (
        String,
        String,
        String,
        String,
        i64,
    ) = serde_json::from_str(payload).ok()?;
    Some(RunnerWait {
        worker_id: WorkerId::parse(&worker_id).ok()?,
        owner,
        agent,
        caller_scope,
        deadline_ms,
    })
}

/// Decodes a `workers` row selected as [`COLUMNS`].
fn read_record(row: &Row) -> Result<WorkerRecord, StoreError> {
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Corrupt(format!("worker row: {what}: {e}"))
    };
    let id = |i: usize| -> Result<WorkerId, StoreError> {
        let text: &str = row.try_get(i).map_err(|e| corrupt("id", &e))?;
        WorkerId::parse(text).map_err(|e| corrupt("id", &e))
    };
    let parent: Option<&str> = row.try_get(5).map_err(|e| corrupt("parent_id", &e))?;
    let state: &str = row.try_get(7).map_err(|e| corrupt("state", &e))?;
    let effective: &str = row.try_get(19).map_err(|e| corrupt("effective", &e))?;
    let get = |e: tokio_postgres::Error| corrupt("column", &e);
    Ok(WorkerRecord {
        id: id(0)?,
        spec: Arc::new(SpawnSpec {
            agent: row.try_get(1).map_err(get)?,
            description: row.try_get(2).map_err(get)?,
            prompt: row.try_get(3).map_err(get)?,
            workspace: row.try_get(4).map_err(get)?,
            parent_id: parent
                .map(WorkerId::parse)
                .transpose()
                .map_err(|e| corrupt("parent_id", &e))?,
            depth: u32::try_from(row.try_get::<_, i64>(6).map_err(get)?)
                .map_err(|e| corrupt("depth", &e))?,
            create_time_ms: row.try_get(9).map_err(get)?,
            caller_scope: row.try_get(16).map_err(get)?,
            request_id: row.try_get(17).map_err(get)?,
            effective: serde_json::from_str(effective).map_err(|e| corrupt("effective", &e))?,
        }),
        state: state.parse().map_err(|e| corrupt("state", &e))?,
        sequence: u64::try_from(row.try_get::<_, i64>(8).map_err(get)?)
            .map_err(|e| corrupt("sequence", &e))?,
        start_time_ms: row.try_get(10).map_err(get)?,
        close_time_ms: row.try_get(11).map_err(get)?,
        result: row.try_get(12).map_err(get)?,
        structured_result: row.try_get(13).map_err(get)?,
        error: row.try_get(14).map_err(get)?,
        exit_code: row.try_get(15).map_err(get)?,
        token_hash: row.try_get(18).map_err(get)?,
        last_activity_ms: row.try_get(20).map_err(get)?,
        usage: row.try_get(21).map_err(get)?,
        worktree: row.try_get(22).map_err(get)?,
    })
}

/// The row's latest event (the one at its sequence), read in the caller's transaction.
async fn latest_event(
    tx: &impl GenericClient,
    current: &WorkerRecord,
) -> Result<Option<WorkerEvent>, StoreError> {
    let row = tx
        .query_opt(
            "SELECT sequence, state, time_ms, snapshot, progress FROM worker_events
             WHERE worker_id = $1 AND sequence = $2",
            &[&current.id.as_str(), &to_sql_sequence(current.sequence)],
        )
        .await
        .pg("read the latest worker event")?;
    row.map(|row| read_event(&row, current)).transpose()
}

/// Decodes a `worker_events` row (sequence, state, time_ms, snapshot, progress) over the
/// worker's fixed fields.
fn read_event(row: &Row, current: &WorkerRecord) -> Result<WorkerEvent, StoreError> {
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Corrupt(format!("worker event: {what}: {e}"))
    };
    let sequence = u64::try_from(
        row.try_get::<_, i64>(0)
            .map_err(|e| corrupt("sequence", &e))?,
    )
    .map_err(|e| corrupt("sequence", &e))?;
    let state: &str = row.try_get(1).map_err(|e| corrupt("state", &e))?;
    let state: WorkerState = state.parse().map_err(|e| corrupt("state", &e))?;
    let time_ms: i64 = row.try_get(2).map_err(|e| corrupt("time_ms", &e))?;
    let snapshot: &str = row.try_get(3).map_err(|e| corrupt("snapshot", &e))?;
    let snapshot: Snapshot = serde_json::from_str(snapshot).map_err(|e| corrupt("snapshot", &e))?;
    let progress: Option<&str> = row.try_get(4).map_err(|e| corrupt("progress", &e))?;
    let progress = progress
        .map(serde_json::from_str::<Progress>)
        .transpose()
        .map_err(|e| corrupt("progress", &e))?;
    let worker = snapshot.over(current, state, sequence, time_ms);
    Ok(WorkerEvent {
        worker_id: worker.id.clone(),
        sequence,
        state,
        time_ms,
        worker,
        progress,
    })
}

/// One row of `workers` by id; `lock` takes its row lock for the rest of the transaction.
async fn select_worker(
    c: &impl GenericClient,
    id: &WorkerId,
    lock: bool,
) -> Result<Option<WorkerRecord>, StoreError> {
    let sql = if lock {
        format!("SELECT {COLUMNS} FROM workers WHERE id = $1 FOR UPDATE")
    } else {
        format!("SELECT {COLUMNS} FROM workers WHERE id = $1")
    };
    let row = query_opt_cached(c, &sql, &[&id.as_str()])
        .await
        .pg("read worker")?;
    row.as_ref().map(read_record).transpose()
}

/// A creation event as its batched write (`pg_batch`).
fn create_write(event: &WorkerEvent) -> Result<CreateWrite, StoreError> {
    let w = &event.worker;
    let effective = serde_json::to_string(&w.spec.effective)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode effective agent: {e}")))?;
    Ok(CreateWrite {
        event: event.clone(),
        effective,
        snapshot: snapshot_of(w)?,
    })
}

/// The JSON snapshot an event of `worker` carries.
fn snapshot_of(worker: &WorkerRecord) -> Result<String, StoreError> {
    serde_json::to_string(&Snapshot::of(worker))
        .map_err(|e| StoreError::Corrupt(format!("cannot encode event snapshot: {e}")))
}

/// The event `next` makes and its write over `current`: the row moves only if it is still at
/// `current`'s sequence and token, and its event and notification (sent by the server at
/// commit) follow (`pg_batch`).
fn transition_write(
    current: &WorkerRecord,
    next: WorkerRecord,
    now_ms: i64,
) -> Result<TransitionWrite, StoreError> {
    Ok(TransitionWrite {
        snapshot: snapshot_of(&next)?,
        expected_sequence: to_sql_sequence(current.sequence),
        expected_token: current.token_hash.clone(),
        event: WorkerEvent {
            worker_id: next.id.clone(),
            sequence: next.sequence,
            state: next.state,
            time_ms: now_ms,
            worker: next,
            progress: None,
        },
    })
}

/// The transition inside the caller's transaction, with the row locked: the same rules as
/// SQLite's, and the compare-and-set of the write as a second guard.
async fn apply_in(
    tx: &impl GenericClient,
    origin: &str,
    id: &WorkerId,
    event: Event,
    patch: Patch,
    now_ms: i64,
) -> Result<Applied, StoreError> {
    let current = select_worker(tx, id, true)
        .await?
        .ok_or_else(|| StoreError::NotFound(id.clone()))?;
    let Some(next) = advance(&current, event, patch, now_ms)? else {
        return Ok(Applied::Absorbed(current));
    };
    let write = transition_write(&current, next, now_ms)?;
    let written = write_transition_in(tx, origin, &write)
        .await
        .pg("update worker")?;
    match written {
        true => Ok(Applied::Moved(write.event)),
        false => Err(StoreError::Corrupt(format!(
            "worker {id} changed under its row lock (expected sequence {})",
            current.sequence
        ))),
    }
}

/// Where this process runs: the kernel's boot id (`None` off Linux) and its pid.
struct Host {
    boot_id: Option<String>,
    pid: i64,
}

impl Host {
    fn this() -> Self {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        Self {
            boot_id,
            pid: i64::from(std::process::id()),
        }
    }

    /// Whether `pid` on this host is another live agentry process: it exists, is not this
    /// process, and runs the same program name. (A pid of a previous container's namespace may
    /// name an unrelated process here; only one that runs agentry keeps its rows.)
    fn runs_another_agentry(&self, pid: i64) -> bool {
        if pid == self.pid {
            return false;
        }
        let comm = |p: &str| std::fs::read_to_string(format!("/proc/{p}/comm")).ok();
        match (comm(&pid.to_string()), comm("self")) {
            (Some(theirs), Some(ours)) => theirs == ours,
            _ => false,
        }
    }
}

/// A replica restarting on the same host under the same `replica.name` takes over its dead
/// predecessor (docs §9): that replica's lease is ended now instead of at its expiry, so this
/// start-up kills the processes it left on this host (the supervisor's cookie sweep of open
/// rows of lost replicas) and closes its rows before serving. "Same host" is the same kernel
/// boot id; "dead" is a pid that runs no other agentry process here. A replica of the same
/// name on another host, or alive here, is left to its lease.
async fn take_over_predecessors(
    client: &deadpool_postgres::Client,
    name: &str,
    host: &Host,
) -> Result<(), StoreError> {
    let Some(boot_id) = &host.boot_id else {
        return Ok(());
    };
    let rows = client
        .query(
            "SELECT id, pid FROM replicas
              WHERE name = $1 AND boot_id = $2 AND expires_at > now()",
            &[&name, boot_id],
        )
        .await
        .pg("find this host's earlier replicas")?;
    for row in rows {
        let id: &str = row.get(0);
        let pid: Option<i64> = row.get(1);
        if pid.is_some_and(|p| host.runs_another_agentry(p)) {
            tracing::warn!(replica = %name, replica_id = %id, pid = ?pid, "another live replica of the same name runs on this host; its workers are left to it");
            continue;
        }
        client
            .execute(
                "UPDATE replicas SET expires_at = now() - interval '1 millisecond' WHERE id = $1",
                &[&id],
            )
            .await
            .pg("end a dead predecessor's lease")?;
        tracing::warn!(replica = %name, replica_id = %id, pid = ?pid, "took over the rows of this replica's previous run on this host");
    }
    Ok(())
}

/// The open rows of replicas whose lease has expired (or whose replica row is gone), oldest
/// first, with the lost replica's name.
const ORPHANS_SQL: &str = "SELECT w.id, COALESCE(r.name, w.replica_id, 'unknown') FROM workers w
     LEFT JOIN replicas r ON r.id = w.replica_id
     WHERE w.state IN ('pending', 'running') AND (r.id IS NULL OR r.expires_at < now())
     ORDER BY w.create_time_ms, w.id";

/// The SQL and arguments of one list page; every filter becomes a `$n` placeholder.
fn list_sql(q: &ListQuery) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut sql = format!("SELECT {COLUMNS} FROM workers WHERE true");
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let next = |args: &mut Vec<Box<dyn ToSql + Sync + Send>>,
                value: Box<dyn ToSql + Sync + Send>| {
        args.push(value);
        format!("${}", args.len())
    };
    match &q.parent {
        ParentFilter::Any => {}
        ParentFilter::Worker(parent) => {
            let n = next(&mut args, Box::new(parent.as_str().to_owned()));
            sql.push_str(&format!(" AND parent_id = {n}"));
        }
    }
    if let Some(scope) = &q.caller_scope {
        let n = next(&mut args, Box::new(scope.clone()));
        sql.push_str(&format!(" AND caller_scope = {n}"));
    }
    let states: Vec<String> = WorkerState::ALL
        .into_iter()
        .filter(|state| q.states.contains(state))
        .map(|state| state.as_str().to_owned())
        .collect();
    if !states.is_empty() {
        let n = next(&mut args, Box::new(states));
        sql.push_str(&format!(" AND state = ANY({n})"));
    }
    if let Some((time_ms, id)) = &q.after {
        let t = next(&mut args, Box::new(*time_ms));
        let i = next(&mut args, Box::new(id.as_str().to_owned()));
        sql.push_str(&format!(" AND (create_time_ms, id) > ({t}, {i})"));
    }
    let l = next(
        &mut args,
        Box::new(i64::try_from(q.limit).unwrap_or(i64::MAX)),
    );
    sql.push_str(&format!(" ORDER BY create_time_ms, id LIMIT {l}"));
    (sql, args)
}

#[async_trait::async_trait]
impl WorkerStore for PostgresStore {
    async fn create(&self, rec: &WorkerRecord) -> Result<WorkerEvent, StoreError> {
        let event = creation_event(rec);
        self.retrying("create worker", |n| self.create_once(&event, n > 0))
            .await
    }

    async fn apply(
        &self,
        id: &WorkerId,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        self.retrying("apply worker event", |n| {
            self.apply_once(id, None, event, patch.clone(), now_ms, n > 0)
        })
        .await
    }

    async fn apply_from(
        &self,
        known: &WorkerRecord,
        event: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        self.retrying("apply worker event", |n| {
            self.apply_once(&known.id, Some(known), event, patch.clone(), now_ms, n > 0)
        })
        .await
    }

    async fn get(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        select_worker(&client, id, false).await
    }

    async fn list(&self, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError> {
        let (sql, args) = list_sql(q);
        let client = self.client().await?;
        let params: Vec<&(dyn ToSql + Sync)> = args
            .iter()
            .map(|a| a.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let rows = client
            .query(sql.as_str(), &params)
            .await
            .pg("list workers")?;
        rows.iter().map(read_record).collect()
    }

    async fn events_after(
        &self,
        id: &WorkerId,
        after_sequence: u64,
    ) -> Result<Vec<WorkerEvent>, StoreError> {
        let mut client = self.client().await?;
        // One snapshot, so the row and its events are from the same moment.
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .pg("read worker events: begin")?;
        let worker = select_worker(&tx, id, false)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let rows = query_cached(
            &tx,
            "SELECT sequence, state, time_ms, snapshot, progress FROM worker_events
             WHERE worker_id = $1 AND sequence > $2 ORDER BY sequence",
            &[&id.as_str(), &to_sql_sequence(after_sequence)],
        )
        .await
        .pg("read worker events")?;
        let events = rows
            .iter()
            .map(|row| read_event(row, &worker))
            .collect::<Result<Vec<_>, _>>()?;
        let _ = tx.commit().await;
        Ok(events)
    }

    async fn close_orphans(&self, now_ms: i64) -> Result<Vec<WorkerId>, StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .pg("close orphaned workers: begin")?;
        // SKIP LOCKED: a row another sweeper (or its owner) is writing right now is left to
        // it; the state compare-and-set below closes each row exactly once anyway.
        let rows = tx
            .query(&format!("{ORPHANS_SQL} FOR UPDATE OF w SKIP LOCKED"), &[])
            .await
            .pg("find orphaned workers")?;
        let mut closed = Vec::new();
        for row in &rows {
            let id: &str = row.get(0);
            let name: &str = row.get(1);
            let id = WorkerId::parse(id)
                .map_err(|e| StoreError::Corrupt(format!("worker row: id: {e}")))?;
            let patch = Patch {
                error: Some(format!("orphaned: replica {name} lost")),
                ..Patch::default()
            };
            // The row is locked and open (the lock re-checked it): this moves it to failed.
            if let Applied::Moved(_) =
                apply_in(&tx, &self.replica_id, &id, Event::Fail, patch, now_ms).await?
            {
                closed.push(id);
            }
        }
        tx.commit().await.pg("close orphaned workers: commit")?;
        Ok(closed)
    }

    async fn open_workers(&self) -> Result<Vec<WorkerId>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(ORPHANS_SQL, &[])
            .await
            .pg("find orphaned workers")?;
        rows.iter()
            .map(|row| {
                WorkerId::parse(row.get::<_, &str>(0))
                    .map_err(|e| StoreError::Corrupt(format!("worker row: id: {e}")))
            })
            .collect()
    }

    async fn find_by_token_hash(&self, hash: &str) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        let row = query_opt_cached(
            &client,
            &format!(
                "SELECT {COLUMNS} FROM workers
                     WHERE token_hash = $1 AND state IN ('pending', 'running')"
            ),
            &[&hash],
        )
        .await
        .pg("find worker by token")?;
        row.as_ref().map(read_record).transpose()
    }

    async fn append_progress(
        &self,
        id: &WorkerId,
        progress: Progress,
        now_ms: i64,
        max_events: u64,
    ) -> Result<WorkerEvent, StoreError> {
        self.retrying("record progress", |n| {
            self.append_once(id, progress.clone(), now_ms, max_events, n > 0)
        })
        .await
    }

    async fn find_by_request_id(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM workers WHERE caller_scope = $1 AND request_id = $2"
                ),
                &[&caller_scope, &request_id],
            )
            .await
            .pg("find worker by request_id")?;
        row.as_ref().map(read_record).transpose()
    }

    async fn record_worktree(&self, id: &WorkerId, worktree: &str) -> Result<(), StoreError> {
        self.retrying("record a worktree", |_| async {
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE workers SET worktree = $2
                      WHERE id = $1 AND state NOT IN ('pending', 'running')",
                    &[&id.as_str(), &worktree],
                )
                .await
                .pg("record a worktree")?;
            Ok(())
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.pg("ping")?;
        Ok(())
    }

    fn shared(self: Arc<Self>) -> Option<Arc<dyn SharedStore>> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl SharedStore for PostgresStore {
    fn replica_id(&self) -> &str {
        &self.replica_id
    }

    async fn renew_lease(&self) -> Result<Lease, StoreError> {
        // Retried on a lost connection like a write: a renewal missed for one killed backend
        // must not let the lease lapse while this replica is alive (renewing twice is harmless).
        self.retrying("renew replica lease", |_| self.renew_lease_once())
            .await
    }

    fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    async fn request_stop(&self, id: &WorkerId, reason: &str) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.pg("request stop: begin")?;
        let changed = tx
            .execute(
                "UPDATE workers SET stop_reason = $3
                  WHERE id = $1 AND state IN ('pending', 'running')
                    AND replica_id IS DISTINCT FROM $2",
                &[&id.as_str(), &self.replica_id, &reason],
            )
            .await
            .pg("request stop")?;
        if changed == 1 {
            tx.execute("SELECT pg_notify('agentry_stop', $1)", &[&id.as_str()])
                .await
                .pg("notify stop")?;
        }
        tx.commit().await.pg("request stop: commit")?;
        Ok(changed == 1)
    }

    async fn stop_requests(&self) -> Result<Vec<(WorkerId, String)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, stop_reason FROM workers
                  WHERE replica_id = $1 AND state IN ('pending', 'running')
                    AND stop_reason IS NOT NULL",
                &[&self.replica_id],
            )
            .await
            .pg("read stop requests")?;
        rows.iter()
            .map(|row| {
                let id = WorkerId::parse(row.get::<_, &str>(0))
                    .map_err(|e| StoreError::Corrupt(format!("worker row: id: {e}")))?;
                Ok((id, row.get::<_, String>(1)))
            })
            .collect()
    }

    async fn claim_dedupe(
        &self,
        key: &str,
        worker: &WorkerId,
        ttl: Duration,
    ) -> Result<Option<WorkerId>, StoreError> {
        let won = self
            .claims
            .write(ClaimWrite {
                key: key.to_owned(),
                worker_id: worker.as_str().to_owned(),
                ttl_ms: lease_ms(ttl),
            })
            .await?;
        if won {
            return Ok(None);
        }
        let client = self.client().await?;
        let holder = query_opt_cached(
            &client,
            "SELECT worker_id FROM dedupe_claims WHERE key = $1",
            &[&key],
        )
        .await
        .pg("read dedupe claim")?;
        match holder {
            Some(row) => {
                let id = WorkerId::parse(row.get::<_, &str>(0))
                    .map_err(|e| StoreError::Corrupt(format!("dedupe claim: {e}")))?;
                Ok((id != *worker).then_some(id))
            }
            // Released in between: the next dispatch claims it; this one runs.
            None => Ok(None),
        }
    }

    async fn release_dedupe(&self, key: &str, worker: &WorkerId) -> Result<(), StoreError> {
        let client = self.client().await?;
        exec_cached(
            &client,
            "DELETE FROM dedupe_claims WHERE key = $1 AND worker_id = $2",
            &[&key, &worker.as_str()],
        )
        .await
        .pg("release dedupe claim")?;
        Ok(())
    }

    async fn add_hold(&self, id: &WorkerId) -> Result<String, StoreError> {
        let hold = format!("h-{}", crate::workers::model::generate_token());
        let client = self.client().await?;
        client
            .execute(
                "WITH added AS (INSERT INTO worker_holds (id, worker_id, replica_id)
                                VALUES ($1, $2, $3) RETURNING worker_id)
                 SELECT pg_notify('agentry_holds', worker_id) FROM added",
                &[&hold, &id.as_str(), &self.replica_id],
            )
            .await
            .pg("add a hold on a remote worker")?;
        Ok(hold)
    }

    async fn release_hold(&self, id: &WorkerId, hold: &str) -> Result<(), StoreError> {
        self.retrying("release a hold on a remote worker", |_| async {
            let client = self.client().await?;
            client
                .execute(
                    "WITH gone AS (DELETE FROM worker_holds WHERE id = $1 RETURNING worker_id)
                     SELECT pg_notify('agentry_holds', $2) FROM gone",
                    &[&hold, &id.as_str()],
                )
                .await
                .pg("release a hold on a remote worker")?;
            Ok(())
        })
        .await
    }

    async fn holds(&self, id: &WorkerId) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM worker_holds h JOIN replicas r ON r.id = h.replica_id
                  WHERE h.worker_id = $1 AND r.expires_at > now()",
                &[&id.as_str()],
            )
            .await
            .pg("count the holds on a worker")?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn prune_holds(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "WITH gone AS (
                     DELETE FROM worker_holds h
                      WHERE NOT EXISTS (SELECT 1 FROM replicas r
                                         WHERE r.id = h.replica_id AND r.expires_at > now())
                         OR NOT EXISTS (SELECT 1 FROM workers w
                                         WHERE w.id = h.worker_id
                                           AND w.state IN ('pending', 'running'))
                     RETURNING worker_id)
                 SELECT pg_notify('agentry_holds', worker_id) FROM (SELECT DISTINCT worker_id FROM gone) g",
                &[],
            )
            .await
            .pg("prune holds")?;
        Ok(())
    }

    async fn publish_runner_wait(&self, wait: &RunnerWait) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "WITH added AS (
                     INSERT INTO runner_waits (worker_id, owner_replica, agent, caller_scope, deadline_ms)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (worker_id) DO NOTHING RETURNING 1)
                 SELECT pg_notify('agentry_runner_waits', json_build_array($1, $2, $3, $4, $5)::text)
                   FROM added",
                &[
                    &wait.worker_id.as_str(),
                    &wait.owner,
                    &wait.agent,
                    &wait.caller_scope,
                    &wait.deadline_ms,
                ],
            )
            .await
            .pg("publish a runner wait")?;
        Ok(())
    }

    async fn runner_waits(&self, limit: i64) -> Result<Vec<RunnerWait>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT w.worker_id, w.owner_replica, w.agent, w.caller_scope, w.deadline_ms
                   FROM runner_waits w JOIN replicas r ON r.id = w.owner_replica
                  WHERE w.claimed_by IS NULL AND r.expires_at > now()
                  ORDER BY w.waiting_since, w.worker_id LIMIT $1",
                &[&limit],
            )
            .await
            .pg("read runner waits")?;
        rows.iter()
            .map(|row| {
                Ok(RunnerWait {
                    worker_id: WorkerId::parse(row.get::<_, &str>(0))
                        .map_err(|e| StoreError::Corrupt(format!("runner wait: {e}")))?,
                    owner: row.get(1),
                    agent: row.get(2),
                    caller_scope: row.get(3),
                    deadline_ms: row.get(4),
                })
            })
            .collect()
    }

    async fn claim_runner_wait(
        &self,
        id: &WorkerId,
        token_hash: &str,
    ) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        // One statement, one commit ([`CLAIM_SQL`]).
        let row = query_opt_cached(
            &client,
            &CLAIM_SQL,
            &[&id.as_str(), &token_hash, &self.replica_id],
        )
        .await
        .pg("claim a runner wait")?;
        row.as_ref().map(read_record).transpose()
    }

    async fn withdraw_runner_wait(
        &self,
        id: &WorkerId,
        only_unclaimed: bool,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "DELETE FROM runner_waits WHERE worker_id = $1 AND (NOT $2 OR claimed_by IS NULL)",
                &[&id.as_str(), &only_unclaimed],
            )
            .await
            .pg("withdraw a runner wait")?;
        Ok(n > 0)
    }

    async fn runner_claim(&self, id: &WorkerId) -> Result<RunnerClaim, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT w.claimed_by, COALESCE(r.expires_at > now(), false)
                   FROM runner_waits w LEFT JOIN replicas r ON r.id = w.claimed_by
                  WHERE w.worker_id = $1",
                &[&id.as_str()],
            )
            .await
            .pg("read a runner claim")?;
        Ok(match row {
            None => RunnerClaim::NoWait,
            Some(row) => match row.get::<_, Option<String>>(0) {
                None => RunnerClaim::Unclaimed,
                Some(by) => RunnerClaim::Claimed {
                    by,
                    live: row.get::<_, bool>(1),
                },
            },
        })
    }

    async fn relay(&self, to: &str, id: &WorkerId, messages: &[String]) -> Result<(), StoreError> {
        let client = self.client().await?;
        // Carried by the notice, the messages need no read by their addressee ([`RELAY_SQL`]).
        exec_cached(&client, &RELAY_SQL, &[&to, &id.as_str(), &messages])
            .await
            .pg("relay runner messages")?;
        Ok(())
    }

    async fn take_relays(&self) -> Result<Vec<Relayed>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "DELETE FROM runner_relays WHERE to_replica = $1
                 RETURNING seq, worker_id, message",
                &[&self.replica_id],
            )
            .await
            .pg("take relayed runner messages")?;
        let mut out: Vec<Relayed> = rows
            .iter()
            .filter_map(|row| {
                Some(Relayed {
                    seq: row.get(0),
                    worker_id: WorkerId::parse(row.get::<_, &str>(1)).ok()?,
                    message: row.get(2),
                })
            })
            .collect();
        out.sort_by_key(|r| r.seq);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::pg_schema::MIGRATIONS;
    use super::*;
    use crate::workers::store::suite::{self, create, moved};
    use crate::workers::store::testdb::TestDb;

    fn replica(name: &str, lease_ms: u64) -> ReplicaSettings {
        ReplicaSettings {
            name: name.to_owned(),
            lease: Duration::from_millis(lease_ms),
        }
    }

    async fn open(db: &TestDb, name: &str) -> PostgresStore {
        PostgresStore::open(&db.url, replica(name, 60_000))
            .await
            .unwrap()
    }

    suite::store_suite!(async {
        let db = TestDb::create().await?;
        let store = open(&db, "suite").await;
        Some((db, Arc::new(store) as Arc<dyn WorkerStore>))
    });

    /// Ends `store`'s lease now, on the database clock, as if its process had died.
    async fn expire(store: &PostgresStore) {
        store
            .client()
            .await
            .unwrap()
            .execute(
                "UPDATE replicas SET expires_at = now() - interval '1 second' WHERE id = $1",
                &[&store.replica_id],
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn orphans_of_a_lost_replica_are_closed_exactly_once() {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let a = open(&db, "a").await;
        let b = open(&db, "b").await;
        let c = open(&db, "c").await;
        let pending = create(&a, None, 1_000).await;
        let running = create(&a, None, 2_000).await;
        a.apply(&running.id, Event::Start, Patch::default(), 2_100)
            .await
            .unwrap();
        let done = create(&a, None, 3_000).await;
        a.apply(&done.id, Event::Start, Patch::default(), 3_100)
            .await
            .unwrap();
        let done = moved(
            a.apply(&done.id, Event::Complete, Patch::default(), 3_200)
                .await
                .unwrap(),
        )
        .worker;
        let bs_own = create(&b, None, 4_000).await;

        // While a lives, nothing is an orphan.
        assert_eq!(b.open_workers().await.unwrap(), []);
        assert_eq!(b.close_orphans(5_000).await.unwrap(), []);

        expire(&a).await;
        assert_eq!(
            b.open_workers().await.unwrap(),
            [pending.id.clone(), running.id.clone()]
        );
        // Two sweepers at once: every orphan closed by exactly one of them.
        let (by_b, by_c) = tokio::join!(b.close_orphans(9_000), c.close_orphans(9_000));
        let (by_b, by_c) = (by_b.unwrap(), by_c.unwrap());
        let all: HashSet<_> = by_b.iter().chain(&by_c).cloned().collect();
        assert_eq!(by_b.len() + by_c.len(), 2, "{by_b:?} {by_c:?}");
        assert_eq!(all, HashSet::from([pending.id.clone(), running.id.clone()]));
        for (rec, sequence) in [(&pending, 2), (&running, 3)] {
            let now = b.get(&rec.id).await.unwrap().unwrap();
            assert_eq!(now.state, WorkerState::Failed);
            assert_eq!(now.error.as_deref(), Some("orphaned: replica a lost"));
            assert_eq!(now.close_time_ms, Some(9_000));
            assert_eq!(now.token_hash, None);
            assert_eq!(now.sequence, sequence);
            assert_eq!(
                b.events_after(&rec.id, 0).await.unwrap().len() as u64,
                sequence
            );
        }
        assert_eq!(b.get(&done.id).await.unwrap(), Some(done));
        assert_eq!(
            b.get(&bs_own.id).await.unwrap().unwrap().state,
            WorkerState::Pending
        );
        assert_eq!(c.close_orphans(10_000).await.unwrap(), []);

        // The zombie owner's late outcome never overwrites the orphan close.
        let late = a
            .apply(&running.id, Event::Complete, Patch::default(), 11_000)
            .await;
        assert!(matches!(late, Err(StoreError::Illegal(_))), "{late:?}");
        // Renewing tells the owner its lease had lapsed.
        assert_eq!(a.renew_lease().await.unwrap(), Lease::Lapsed);
        assert_eq!(a.renew_lease().await.unwrap(), Lease::Renewed);
    }

    #[tokio::test]
    async fn a_stop_request_reaches_the_owner() {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let a = open(&db, "a").await;
        let b = open(&db, "b").await;
        let mut notices = a.notices();
        let rec = create(&a, None, 1_000).await;
        assert!(b.request_stop(&rec.id, "from b").await.unwrap());
        assert_eq!(
            a.stop_requests().await.unwrap(),
            [(rec.id.clone(), "from b".to_owned())]
        );
        assert!(b.stop_requests().await.unwrap().is_empty());
        let stop = loop {
            let n = tokio::time::timeout(Duration::from_secs(10), notices.recv())
                .await
                .unwrap()
                .unwrap();
            if matches!(n, Notice::Stop { .. }) {
                break n;
            }
        };
        assert_eq!(
            stop,
            Notice::Stop {
                worker_id: rec.id.clone()
            }
        );
        // The owner kills it: the request is done with, and a terminal row takes none.
        a.apply(&rec.id, Event::Kill, Patch::default(), 2_000)
            .await
            .unwrap();
        assert!(a.stop_requests().await.unwrap().is_empty());
        assert!(!b.request_stop(&rec.id, "again").await.unwrap());
    }

    #[tokio::test]
    async fn events_committed_anywhere_are_announced_everywhere() {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let a = open(&db, "a").await;
        let b = open(&db, "b").await;
        let mut on_b = b.notices();
        let mut on_a = a.notices();
        let rec = create(&a, None, 1_000).await;
        a.apply(&rec.id, Event::Start, Patch::default(), 1_100)
            .await
            .unwrap();
        // Both replicas hear both events; only `a` hears them as its own.
        for (notices, own) in [(&mut on_b, false), (&mut on_a, true)] {
            let mut seen = Vec::new();
            while seen.len() < 2 {
                match tokio::time::timeout(Duration::from_secs(10), notices.recv())
                    .await
                    .unwrap()
                    .unwrap()
                {
                    Notice::Event {
                        worker_id,
                        sequence,
                        by_this_replica,
                    } if worker_id == rec.id => seen.push((sequence, by_this_replica)),
                    _ => {}
                }
            }
            assert_eq!(seen, [(1, own), (2, own)]);
        }
    }

    #[tokio::test]
    async fn a_dedupe_claim_is_won_once_across_replicas() {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let a = open(&db, "a").await;
        let b = open(&db, "b").await;
        let ttl = Duration::from_secs(60);
        let wa = create(&a, None, 1_000).await;
        let wb = create(&b, None, 1_000).await;
        let (ra, rb) = tokio::join!(
            a.claim_dedupe("key", &wa.id, ttl),
            b.claim_dedupe("key", &wb.id, ttl)
        );
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let winner = match (&ra, &rb) {
            (None, Some(holder)) => {
                assert_eq!(*holder, wa.id);
                &wa
            }
            (Some(holder), None) => {
                assert_eq!(*holder, wb.id);
                &wb
            }
            other => panic!("exactly one claim must win: {other:?}"),
        };
        // A failed worker's claim is taken over by the next dispatch.
        a.apply(&winner.id, Event::Fail, Patch::default(), 2_000)
            .await
            .unwrap();
        let next = create(&a, None, 3_000).await;
        assert_eq!(a.claim_dedupe("key", &next.id, ttl).await.unwrap(), None);
        assert_eq!(
            b.claim_dedupe("key", &wb.id, ttl).await.unwrap(),
            Some(next.id.clone())
        );
        // An expired claim too.
        let short = Duration::from_millis(1);
        a.release_dedupe("key", &next.id).await.unwrap();
        assert_eq!(a.claim_dedupe("key", &next.id, short).await.unwrap(), None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(b.claim_dedupe("key", &wb.id, ttl).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused_naming_both_versions() {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let store = open(&db, "a").await;
        let known = MIGRATIONS.len() as i64;
        store
            .client()
            .await
            .unwrap()
            .execute("UPDATE agentry_schema SET version = 999", &[])
            .await
            .unwrap();
        let err = PostgresStore::open(&db.url, replica("b", 60_000))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::SchemaTooNew { found: 999, known: k } if k == known),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("version 999") && message.contains(&format!("(version {known})")),
            "{message}"
        );
    }

    #[tokio::test]
    async fn replicas_starting_together_migrate_once() {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let mut stores = Vec::new();
        for i in 0..4 {
            let url = db.url.clone();
            stores.push(tokio::spawn(async move {
                PostgresStore::open(&url, replica(&format!("r{i}"), 60_000)).await
            }));
        }
        for s in stores {
            s.await.unwrap().unwrap();
        }
        let store = open(&db, "check").await;
        let client = store.client().await.unwrap();
        assert_eq!(
            pg_schema::schema_version(&client).await.unwrap(),
            MIGRATIONS.len() as i64
        );
        let replicas: i64 = client
            .query_one("SELECT count(*) FROM replicas", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(replicas, 5);
    }

    #[tokio::test]
    async fn an_unreachable_database_is_named_without_its_password() {
        // Port 1 on loopback: nothing listens there.
        let err = PostgresStore::open(
            "postgres://agentry:s3cret@127.0.0.1:1/agentry",
            replica("a", 1_000),
        )
        .await
        .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
        assert!(
            message.contains("postgres://agentry:***@127.0.0.1:1/agentry"),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }

    #[test]
    fn urls_lose_their_passwords() {
        for (url, shown) in [
            ("postgres://u:p@h:5432/db", "postgres://u:***@h:5432/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgresql://h/db?password=x&sslmode=disable",
                "postgresql://h/db?password=***&sslmode=disable",
            ),
            (
                "host=h user=u password=x dbname=d",
                "host=h user=u password=*** dbname=d",
            ),
            ("postgres://u:p%40ss@h", "postgres://u:***@h"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn notices_parse_and_bad_payloads_are_dropped() {
        let parse = |channel: &str, payload: &str| parse_notice(channel, payload, "r-me");
        let id = WorkerId::generate();
        // Whose commit it was: this replica's, another's, or (an earlier build) not said.
        for (payload, by_this_replica) in [
            (format!("{id}:7:r-me"), true),
            (format!("{id}:7:r-other"), false),
            (format!("{id}:7"), false),
        ] {
            assert_eq!(
                parse("agentry_events", &payload),
                Some(Notice::Event {
                    worker_id: id.clone(),
                    sequence: 7,
                    by_this_replica,
                }),
                "{payload}"
            );
        }
        assert_eq!(
            parse("agentry_stop", id.as_str()),
            Some(Notice::Stop {
                worker_id: id.clone()
            })
        );
        let wait = RunnerWait {
            worker_id: id.clone(),
            owner: "r-1".into(),
            agent: "reviewer".into(),
            caller_scope: "team:a".into(),
            deadline_ms: 1_700_000_000_000,
        };
        assert_eq!(
            parse(
                "agentry_runner_waits",
                &format!(r#"["{id}", "r-1", "reviewer", "team:a", 1700000000000]"#)
            ),
            Some(Notice::RunnerWait(Some(wait)))
        );
        // A wait notice that does not carry a wait still says "look".
        for payload in ["", "[1, 2]", r#"["not-an-id", "r", "a", "s", 1]"#] {
            assert_eq!(
                parse("agentry_runner_waits", payload),
                Some(Notice::RunnerWait(None)),
                "{payload}"
            );
        }
        assert_eq!(
            parse("agentry_relays", r#"["r-2"]"#),
            Some(Notice::Relay {
                to_replica: "r-2".into(),
                relayed: None
            })
        );
        let carried = format!(r#"["r-2", "{id}", [[7, "{{\"kind\":\"accepted\"}}"], [8, "x"]]]"#);
        assert_eq!(
            parse("agentry_relays", &carried),
            Some(Notice::Relay {
                to_replica: "r-2".into(),
                relayed: Some(vec![
                    Relayed {
                        seq: 7,
                        worker_id: id.clone(),
                        message: r#"{"kind":"accepted"}"#.into()
                    },
                    Relayed {
                        seq: 8,
                        worker_id: id.clone(),
                        message: "x".into()
                    },
                ])
            })
        );
        for (channel, payload) in [
            ("agentry_events", "nonsense"),
            ("agentry_events", "w:x"),
            ("agentry_events", "w-1:7:r-me"),
            ("agentry_stop", ""),
            ("agentry_relays", ""),
            ("agentry_relays", "[]"),
            ("agentry_relays", "[1]"),
            ("other", "x"),
        ] {
            assert_eq!(parse(channel, payload), None, "{channel} {payload}");
        }
    }
}
