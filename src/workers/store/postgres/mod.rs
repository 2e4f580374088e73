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
//! and one commit per batch (`batch`). Each commit of an event sends `NOTIFY agentry_events
//! '<worker_id>:<sequence>:<replica_id>'`; one dedicated `LISTEN` connection per process turns
//! those (and stop requests on `agentry_stop`) into [`Notice`]s. Notices are hints: the
//! listener sends [`Notice::Resync`] after every (re)connect, and readers poll as well.
//!
//! This file holds [`PostgresStore`]: how it opens, its pools, the retry of a write whose
//! connection was lost, the optimistic create, transition and progress writes, and its
//! [`WorkerStore`] and [`SharedStore`] implementations, which hand each statement to the file
//! of its concern:
//!
//! - `rows`: rows ⇄ records, the reads of the core, the event every write ends with;
//! - `batch`: group commit of dedupe claims, creates and transitions;
//! - `lease`: replicas, their leases, the orphan sweep and stop requests;
//! - `notices`: the `LISTEN` connection and its payloads;
//! - `holds`, `dedupe`, `runners`: callers waiting across replicas, dedupe claims, runners
//!   across replicas;
//! - `schema`: the versioned migrations;
//! - `context`, `cached`: error context and statements cached per connection, the leaves the
//!   others use.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::broadcast;
use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;

use super::record::{advance, creation_event, progress_event, to_sql_sequence};
use super::{
    Applied, Continued, Following, Lease, ListQuery, Message, Notice, Patch, Relayed, RunnerClaim,
    RunnerNotice, RunnerWait, Sent, SharedStore, StoreError, WorkerStore,
};
use crate::workers::lifecycle::Event;
use crate::workers::model::{Progress, WorkerEvent, WorkerId, WorkerRecord};
use batch::{Batcher, ClaimWrite, CreateWrite, EarlierEvent, Gather, Origin, TransitionWrite};
use cached::exec_cached;
use context::{PgContext, error_text};
pub use lease::ReplicaSettings;
use lease::{Host, lease_ms, take_over_predecessors};
use notices::{NOTICE_BUFFER, Senders, listen};
use rows::{EventRow, PROGRESS_SQL, create_write, latest_event, select_worker, transition_write};
use runners::{PublishWrite, RelayWrite, UnpublishWrite};

mod batch;
mod cached;
mod context;
mod dedupe;
mod follows;
mod holds;
mod lease;
mod messages;
mod notices;
mod rows;
mod runners;
mod schema;
#[cfg(test)]
mod tests;

/// How many times a create tries for a dedupe claim that keeps being released under it.
const CLAIM_ATTEMPTS: usize = 3;

/// Connections in the pool.
const POOL_SIZE: usize = 16;

/// Connections of the batch writers (`batch`): one batch of each of six kinds at once
/// (transitions, creates, dedupe claims, runner waits published and withdrawn, relays).
const BATCH_POOL_SIZE: usize = 6;

/// How the batch writers' connections plan: index lookups of the rows named, never a scan of
/// a whole table (an `unnest` of parameters looks like ten rows to the planner, and the tables
/// look small until their first `ANALYZE`).
const BATCH_PLANNER_OPTIONS: &str =
    "-c enable_seqscan=off -c enable_hashjoin=off -c enable_mergejoin=off";

/// How long a start-up or pooled connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// [`WorkerStore`] on a PostgreSQL database shared by several replicas.
pub struct PostgresStore {
    pool: Pool,
    /// This process's replica row: random per start.
    replica_id: String,
    replica: ReplicaSettings,
    /// Where [`Notice`]s are published; the listener task holds a clone.
    notices: broadcast::Sender<Notice>,
    /// The runner notices (waits, relays to this replica), apart.
    runner_notices: broadcast::Sender<RunnerNotice>,
    /// Whether the listener listens for published runner waits (`listen_for_waits`).
    wants_waits: tokio::sync::watch::Sender<bool>,
    /// This replica's callers following events (`follow_events`), which the `follows` task
    /// records; it ends when this is dropped.
    followers: Arc<tokio::sync::watch::Sender<usize>>,
    /// The `LISTEN` task, ended with the store.
    listener: tokio::task::JoinHandle<()>,
    /// Workers created here and not yet ended here: whether a batch may wait for more writes
    /// (`batch::Gather`). An estimate (a worker ended by another replica is not counted off).
    open: Arc<AtomicUsize>,
    /// Writes transitions, creates and dedupe claims in batches (group commit, `batch`).
    transitions: Batcher<TransitionWrite>,
    creates: Batcher<CreateWrite>,
    claims: Batcher<ClaimWrite>,
    publishes: Batcher<PublishWrite>,
    unpublishes: Batcher<UnpublishWrite>,
    relays: Batcher<RelayWrite>,
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

/// First pause between two attempts of a write whose connection was lost; doubled each time.
const RETRY_FIRST: Duration = Duration::from_millis(20);

/// Longest pause between two attempts.
const RETRY_MOST: Duration = Duration::from_secs(1);

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
        // many (`batch`): a plan made while the tables are still small (a fresh database)
        // would otherwise scan a whole table for each batch until statistics catch up.
        let mut planned = config.clone();
        planned.options(&match config.get_options() {
            Some(given) => format!("{given} {BATCH_PLANNER_OPTIONS}"),
            None => BATCH_PLANNER_OPTIONS.to_owned(),
        });
        let batch_pool = new_pool(planned, BATCH_POOL_SIZE, &shown)?;
        let mut client = pool.get().await.map_err(|e| StoreError::Unreachable {
            url: shown.clone(),
            message: error_text(&e),
        })?;
        schema::migrate(&mut client).await?;
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
        let (runner_notices, _) = broadcast::channel(NOTICE_BUFFER);
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let wants_waits = tokio::sync::watch::Sender::new(false);
        let heard = Arc::new(tokio::sync::Notify::new());
        let listener = tokio::spawn(listen(
            config,
            replica_id.clone(),
            Senders {
                notices: notices.clone(),
                runners: runner_notices.clone(),
                follows: heard.clone(),
            },
            wants_waits.subscribe(),
            ready_tx,
        ));
        // Listening before anything is committed, so this process misses no notice of its
        // own start; a listener slow to connect is not fatal (readers poll anyway).
        if tokio::time::timeout(CONNECT_TIMEOUT, ready).await.is_err() {
            tracing::warn!(url = %shown, "store listener not connected yet; watchers poll until it is");
        }
        tracing::info!(replica = %replica.name, replica_id = %replica_id, url = %shown, "registered replica");
        // Announcing everything until the first read says whether anyone follows.
        let followed = Arc::new(AtomicBool::new(true));
        let followers = Arc::new(tokio::sync::watch::Sender::new(0));
        tokio::spawn(follows::run(
            pool.clone(),
            replica_id.clone(),
            followers.subscribe(),
            heard,
            followed.clone(),
            replica.lease / 3,
        ));
        let origin = Origin {
            id: Arc::from(replica_id.as_str()),
            followed,
        };
        // The writes of a worker's life may wait for each other; a runner's messages across
        // replicas are sent at once.
        let open = Arc::new(AtomicUsize::new(0));
        let gather = Some(Gather {
            window: replica.commit_window,
            open: open.clone(),
        });
        Ok(PostgresStore {
            open,
            transitions: Batcher::start(batch_pool.clone(), origin.clone(), gather.clone()),
            creates: Batcher::start(batch_pool.clone(), origin.clone(), gather.clone()),
            claims: Batcher::start(batch_pool.clone(), origin.clone(), gather),
            publishes: Batcher::start(batch_pool.clone(), origin.clone(), None),
            unpublishes: Batcher::start(batch_pool.clone(), origin.clone(), None),
            relays: Batcher::start(batch_pool, origin, None),
            pool,
            replica_id,
            replica,
            notices,
            runner_notices,
            wants_waits,
            followers,
            listener,
        })
    }

    async fn client(&self) -> Result<Client, StoreError> {
        // Every pool failure is a connection that could not be had: retryable.
        self.pool.get().await.map_err(|e| StoreError::Lost {
            context: "get a connection".to_owned(),
            message: error_text(&e),
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

    /// One attempt at [`WorkerStore::create`]: the row, its creation event and the
    /// notification, written with whatever else is being created (`batch`). A row that did
    /// not go in met one with its id — on a retry, the attempt before committed (ids are random,
    /// so nobody else has this one) — or one with its caller's `request_id`: the unique index
    /// decides a `request_id` race between replicas.
    ///
    /// With a dedupe `claim` (key, time to live), the row goes in only if the claim is won in
    /// the same statement; a claim another worker holds is [`StoreError::DedupeHeld`]. `None`:
    /// the claim was lost and then released before its holder could be read, so the caller
    /// tries again.
    async fn create_once(
        &self,
        event: &WorkerEvent,
        claim: Option<(&str, Duration)>,
        retry: bool,
    ) -> Result<Option<WorkerEvent>, StoreError> {
        let w = &event.worker;
        let mut write = create_write(event)?;
        write.claim = claim.map(|(key, ttl)| (key.to_owned(), lease_ms(ttl)));
        if self.creates.write(write).await? || (retry && self.get(&w.id).await?.is_some()) {
            self.open.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(event.clone()));
        }
        if let Some((key, _)) = claim {
            let holder = {
                let client = self.client().await?;
                dedupe::holder(&client, key, &w.id).await?
            };
            if let Some(holder) = holder {
                return Err(StoreError::DedupeHeld { holder });
            }
            // This worker won the claim and its row conflicted (its caller's `request_id`,
            // named), or the claim was released in between: then the caller tries again.
            return match self.created_conflict(w).await {
                Err(StoreError::Postgres { .. }) => Ok(None),
                other => other.map(Some),
            };
        }
        self.created_conflict(w).await.map(Some)
    }

    /// Why the row of `w` did not go in: its caller's `request_id` is taken (by a row that is
    /// named), or a row with its id is there.
    async fn created_conflict(&self, w: &WorkerRecord) -> Result<WorkerEvent, StoreError> {
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

    /// One attempt at [`WorkerStore::apply_started`]: the start and the end as one transition
    /// write (the row moves once, both events go in) against `known`; when the row moved since,
    /// or this retries an attempt whose fate is unknown, the two one after the other, each
    /// decided on the row as it is.
    async fn apply_started_once(
        &self,
        known: &WorkerRecord,
        started_ms: i64,
        end: Event,
        patch: Patch,
        now_ms: i64,
        retry: bool,
    ) -> Result<(Option<WorkerEvent>, Applied), StoreError> {
        if retry {
            // The attempt before may have committed both: then the row is two events on and
            // its latest is this very end.
            let client = self.client().await?;
            if let Some(current) = select_worker(&client, &known.id, false).await?
                && current.sequence == known.sequence + 2
                && let Some(ev) = latest_event(&client, &current).await?
                && ev.progress.is_none()
                && ev.time_ms == now_ms
                && Some(ev.state) == end.leads_to()
            {
                return Ok((None, Applied::Moved(ev)));
            }
        } else if let Some(started) = advance(known, Event::Start, Patch::default(), started_ms)?
            && let Some(next) = advance(&started, end, patch.clone(), now_ms)?
        {
            let start = transition_write(known, started, started_ms)?;
            let mut write = transition_write(known, next, now_ms)?;
            write.earlier = Some(EarlierEvent {
                event: start.event.clone(),
                snapshot: start.snapshot,
            });
            let ended = write.event.clone();
            if self.write_batched(write).await? {
                return Ok((Some(start.event), Applied::Moved(ended)));
            }
        }
        let start = match self
            .apply_once(
                &known.id,
                None,
                Event::Start,
                Patch::default(),
                started_ms,
                false,
            )
            .await
        {
            Ok(Applied::Moved(ev)) => Some(ev),
            Ok(Applied::Absorbed(_)) | Err(StoreError::Illegal(_)) => None,
            Err(e) => return Err(e),
        };
        let ended = self
            .apply_once(&known.id, None, end, patch, now_ms, false)
            .await?;
        Ok((start, ended))
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
        Ok(self.write_batched(write).await?.then_some(event))
    }

    /// A transition through the batcher: whether it moved its row. One that ends a worker
    /// counts it off the open ones.
    async fn write_batched(&self, write: TransitionWrite) -> Result<bool, StoreError> {
        let ends = write.event.state.is_terminal();
        let moved = self.transitions.write(write).await?;
        if moved && ends {
            let _ = self
                .open
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        Ok(moved)
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
            params.push(&event.worker.artifacts);
            let written = exec_cached(&client, &PROGRESS_SQL, &params)
                .await
                .pg("record progress")?;
            if written == 1 {
                return Ok(event);
            }
        }
    }
}

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

#[async_trait::async_trait]
impl WorkerStore for PostgresStore {
    async fn create(&self, rec: &WorkerRecord) -> Result<WorkerEvent, StoreError> {
        self.create_claimed(rec, None).await
    }

    async fn create_claimed(
        &self,
        rec: &WorkerRecord,
        claim: Option<(&str, Duration)>,
    ) -> Result<WorkerEvent, StoreError> {
        let event = creation_event(rec);
        // A claim released between losing it and reading its holder is tried again, a few
        // times: each time another dispatch took it and let it go at that very moment.
        for _ in 0..CLAIM_ATTEMPTS {
            let created = self
                .retrying("create worker", |n| self.create_once(&event, claim, n > 0))
                .await?;
            if let Some(created) = created {
                return Ok(created);
            }
        }
        Err(StoreError::Postgres {
            context: "insert worker".to_owned(),
            message: format!(
                "worker {}: its dedupe claim was lost and released {CLAIM_ATTEMPTS} times in a row",
                rec.id
            ),
        })
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

    async fn apply_started(
        &self,
        known: &WorkerRecord,
        started_ms: i64,
        end: Event,
        patch: Patch,
        now_ms: i64,
    ) -> Result<(Option<WorkerEvent>, Applied), StoreError> {
        self.retrying("apply worker start and end", |n| {
            self.apply_started_once(known, started_ms, end, patch.clone(), now_ms, n > 0)
        })
        .await
    }

    async fn get(&self, id: &WorkerId) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        select_worker(&client, id, false).await
    }

    async fn list(&self, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        rows::list(&client, q).await
    }

    async fn events_after(
        &self,
        id: &WorkerId,
        after_sequence: u64,
    ) -> Result<Vec<WorkerEvent>, StoreError> {
        let mut client = self.client().await?;
        rows::events_after(&mut client, id, after_sequence).await
    }

    async fn close_orphans(&self, now_ms: i64) -> Result<Vec<WorkerId>, StoreError> {
        let mut client = self.client().await?;
        lease::close_orphans(&mut client, &self.replica_id, now_ms).await
    }

    async fn open_workers(&self) -> Result<Vec<WorkerId>, StoreError> {
        let client = self.client().await?;
        lease::open_workers(&client).await
    }

    async fn find_by_token_hash(&self, hash: &str) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        rows::find_by_token_hash(&client, hash).await
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
        rows::find_by_request_id(&client, caller_scope, request_id).await
    }

    async fn record_worktree(&self, id: &WorkerId, worktree: &str) -> Result<(), StoreError> {
        self.retrying("record a worktree", |_| async {
            let client = self.client().await?;
            rows::record_worktree(&client, id, worktree).await
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.pg("ping")?;
        Ok(())
    }

    async fn send_message(&self, msg: &Message, inbox_max: u32) -> Result<Sent, StoreError> {
        let mut client = self.client().await?;
        messages::send(&mut client, msg, inbox_max).await
    }

    async fn take_messages(&self, id: &WorkerId, seal: bool) -> Result<Vec<Message>, StoreError> {
        let mut client = self.client().await?;
        messages::take(&mut client, id, seal).await
    }

    async fn continue_worker(
        &self,
        old: &WorkerId,
        new: &WorkerRecord,
        msg: &Message,
    ) -> Result<Continued, StoreError> {
        let mut client = self.client().await?;
        messages::continue_worker(&mut client, &self.replica_id, old, new, msg).await
    }

    async fn find_message(
        &self,
        caller_scope: &str,
        request_id: &str,
    ) -> Result<Option<Message>, StoreError> {
        let client = self.client().await?;
        messages::find_message(&client, caller_scope, request_id).await
    }

    async fn append_transcript(
        &self,
        id: &WorkerId,
        from: u32,
        entries: &[String],
    ) -> Result<(), StoreError> {
        self.retrying("append a transcript", |_| async {
            let client = self.client().await?;
            messages::append_transcript(&client, id, from, entries).await
        })
        .await
    }

    async fn transcript(&self, id: &WorkerId) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        messages::transcript(&client, id).await
    }

    async fn prune_transcripts(&self, closed_before_ms: i64) -> Result<u64, StoreError> {
        let client = self.client().await?;
        messages::prune_transcripts(&client, closed_before_ms).await
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
        self.retrying("renew replica lease", |_| async {
            let client = self.client().await?;
            lease::renew(&client, &self.replica_id, &self.replica).await
        })
        .await
    }

    fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    fn runner_notices(&self) -> broadcast::Receiver<RunnerNotice> {
        self.runner_notices.subscribe()
    }

    fn follow_events(&self) -> Following {
        Following::new(self.followers.clone())
    }

    fn listen_for_waits(&self, on: bool) {
        self.wants_waits
            .send_if_modified(|was| std::mem::replace(was, on) != on);
    }

    async fn request_stop(&self, id: &WorkerId, reason: &str) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        lease::request_stop(&mut client, &self.replica_id, id, reason).await
    }

    async fn stop_requests(&self) -> Result<Vec<(WorkerId, String)>, StoreError> {
        let client = self.client().await?;
        lease::stop_requests(&client, &self.replica_id).await
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
        dedupe::holder(&client, key, worker).await
    }

    async fn release_dedupe(&self, key: &str, worker: &WorkerId) -> Result<(), StoreError> {
        let client = self.client().await?;
        dedupe::release(&client, key, worker).await
    }

    async fn add_hold(&self, id: &WorkerId) -> Result<String, StoreError> {
        let client = self.client().await?;
        holds::add(&client, &self.replica_id, id).await
    }

    async fn release_hold(&self, id: &WorkerId, hold: &str) -> Result<(), StoreError> {
        self.retrying("release a hold on a remote worker", |_| async {
            let client = self.client().await?;
            holds::release(&client, id, hold).await
        })
        .await
    }

    async fn holds(&self, id: &WorkerId) -> Result<u64, StoreError> {
        let client = self.client().await?;
        holds::count(&client, id).await
    }

    async fn prune_holds(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        holds::prune(&client).await
    }

    async fn replicas(&self) -> Result<Vec<crate::workers::store::ReplicaInfo>, StoreError> {
        let client = self.client().await?;
        lease::replicas(&client).await
    }

    async fn publish_runner_wait(&self, wait: &RunnerWait) -> Result<(), StoreError> {
        self.publishes
            .write(PublishWrite(wait.clone()))
            .await
            .map(drop)
    }

    async fn runner_waits(&self, limit: i64) -> Result<Vec<RunnerWait>, StoreError> {
        let client = self.client().await?;
        runners::waits(&client, limit).await
    }

    async fn claim_runner_wait(
        &self,
        id: &WorkerId,
        token_hash: &str,
    ) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        runners::claim_wait(&client, &self.replica_id, id, token_hash).await
    }

    async fn unpublish_runner_wait(&self, id: &WorkerId) -> Result<(), StoreError> {
        self.unpublishes
            .write(UnpublishWrite(id.clone()))
            .await
            .map(drop)
    }

    async fn withdraw_unclaimed_wait(&self, id: &WorkerId) -> Result<bool, StoreError> {
        let client = self.client().await?;
        runners::withdraw_unclaimed(&client, id).await
    }

    async fn runner_claim(&self, id: &WorkerId) -> Result<RunnerClaim, StoreError> {
        let client = self.client().await?;
        runners::claim_of(&client, id).await
    }

    async fn relay(
        &self,
        to: &str,
        id: &WorkerId,
        messages: Vec<String>,
        withdraw: bool,
    ) -> Result<(), StoreError> {
        self.relays
            .write(RelayWrite {
                to: to.to_owned(),
                worker: id.clone(),
                messages,
                withdraw,
            })
            .await
            .map(drop)
    }

    async fn take_relays(&self, applied: &[i64]) -> Result<Vec<Relayed>, StoreError> {
        let client = self.client().await?;
        runners::take_relays(&client, &self.replica_id, applied).await
    }
}
