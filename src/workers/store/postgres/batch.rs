//! Group commit on PostgreSQL (docs/replicas.md, "Group commit"): the hot writes — dedupe
//! claims, creates, transitions, and the runner waits and relays of runners across replicas
//! (`runners`) — of many workers as one statement and one commit.
//!
//! Written one by one, each of those writes costs a round trip, a statement's start-up and a
//! commit with its WAL flush, and with many workers moving at once those overheads are most of
//! what the database does. A [`Batcher`] writes the writes of one kind that arrive together as
//! **one** statement: they queue while earlier batches are in flight (at most [`IN_FLIGHT`]),
//! and the next free slot takes everything queued, up to [`MAX_BATCH`]. A worker alone on its
//! replica has its writes sent at once. While other workers are open, a batch of a worker's
//! writes (creates, claims, transitions) stays open up to the replica's commit window for more
//! ([`Gather`]): at a few workers a replica, writes rarely arrive while a batch is in flight,
//! and without it almost every write would be a commit of its own.
//!
//! Each write keeps its own condition and its own answer: a transition is still a
//! compare-and-set on its row's sequence and token (one that missed is read and decided again
//! by its caller, exactly as when written alone), a claim says whether it won its key, a create
//! whether its row went in (one that did not met a row with its id or its caller's
//! `request_id`, which its caller then names). Two writes about the same row never share a
//! batch. A batch
//! the database refuses as a whole (a constraint one of its rows breaks) is written again one
//! write at a time, so each caller gets its own answer; a lost connection is every caller's
//! [`StoreError::Lost`], which each retries as before (checking whether its write committed
//! after all).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tokio_postgres::types::ToSql;

use super::context::{PgContext, error_text};
use super::notices::PAYLOAD_LIMIT;
use crate::workers::model::WorkerEvent;
use crate::workers::store::StoreError;
use crate::workers::store::record::to_sql_sequence;

/// Batches of one kind written at once; more writes wait for it to end, and then go together.
/// One is measured to be best (`benches/fleet.rs`): with two, the second slot took most writes
/// alone — 3.3 commits per worker life instead of 2.2, and 1.6–2.1× the database's CPU.
const IN_FLIGHT: usize = 1;
/// The most transitions in one statement.
const MAX_BATCH: usize = 64;

/// The longest entry of a batch's notification: a worker id (36 bytes), the longest sequence
/// (19 digits), a replica id (34 bytes), two `:` and the `,` between entries.
const NOTICE_ENTRY_BYTES: usize = 36 + 19 + 34 + 3;
// A batch's notification must fit PostgreSQL's payload limit, or the whole batch would fail and
// be written again one write at a time.
const _: () = assert!(MAX_BATCH * NOTICE_ENTRY_BYTES < PAYLOAD_LIMIT);

/// One transition as it is written: its event (the worker as it moves), the sequence and
/// token the row must still be at, and the event's snapshot.
#[derive(Debug)]
pub(super) struct TransitionWrite {
    pub event: WorkerEvent,
    /// The sequence the row must still be at.
    pub expected_sequence: i64,
    /// The token hash the row must still have (a runner claim rotates it).
    pub expected_token: Option<String>,
    /// The event's snapshot (JSON).
    pub snapshot: String,
    /// An event written just before this one, in the same statement, at the sequence before
    /// it: the start of a run written with its end (`WorkerStore::apply_started`).
    pub earlier: Option<EarlierEvent>,
}

/// An event of a [`TransitionWrite`] that comes before its own.
#[derive(Debug)]
pub(super) struct EarlierEvent {
    pub event: WorkerEvent,
    /// The event's snapshot (JSON).
    pub snapshot: String,
}

/// A new worker as it is written (in `pending` at sequence 1): its creation event, its
/// effective agent and the event's snapshot, both as JSON.
#[derive(Debug)]
pub(super) struct CreateWrite {
    pub event: WorkerEvent,
    pub effective: String,
    pub snapshot: String,
    /// The dedupe claim the row needs (its key and time to live in ms): the row goes in only
    /// if the claim is won, in the same statement (`WorkerStore::create_claimed`).
    pub claim: Option<(String, i64)>,
}

/// A dedupe claim: `key` for `worker_id` until `ttl_ms` from now on the database clock.
#[derive(Debug)]
pub(super) struct ClaimWrite {
    pub key: String,
    pub worker_id: String,
    pub ttl_ms: i64,
}

/// One column of a batch: `f` of every write, in order.
pub(super) fn column<'a, W, T>(writes: &'a [W], f: impl Fn(&'a W) -> T) -> Vec<T> {
    writes.iter().map(f).collect()
}

/// When a dedupe claim already there may be taken over (the row lock taken by `ON CONFLICT`
/// makes concurrent claimers queue, so exactly one wins): it expired, its worker failed or was
/// killed, or its worker never appeared after `$secs` seconds (its replica died between the
/// claim and the row). The worker of a claim is looked up by its id (a scalar subquery, which
/// the planner cannot turn into a hash of every worker). `$secs` is the statement's parameter
/// of [`CLAIM_WITHOUT_ROW_SECS`].
macro_rules! claim_taken_over_when {
    ($secs:literal) => {
        concat!(
            "dedupe_claims.expires_at <= now()
         OR (SELECT w.state FROM workers w WHERE w.id = dedupe_claims.worker_id)
            IN ('failed', 'killed')
         OR ((SELECT w.state FROM workers w WHERE w.id = dedupe_claims.worker_id) IS NULL
             AND dedupe_claims.claimed_at < now() - ",
            $secs,
            "::DOUBLE PRECISION * interval '1 second')"
        )
    };
}

/// Transitions, each a compare-and-set on its row's sequence and token, with their events,
/// in one statement with **one** notification for the whole batch (`worker:sequence:origin`
/// of each event, joined by `,`: at most [`MAX_BATCH`] entries of at most
/// [`NOTICE_ENTRY_BYTES`], under [`PAYLOAD_LIMIT`]). Returns the ordinals (from 1) of the
/// transitions written, as one array; no row when none was.
const TRANSITIONS_SQL: &str = "WITH i AS (
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
                              $6::text[], $7::text[], $8::text[], $9::integer[], $10::text[],
                              $11::bigint[], $12::text[], $13::text[], $14::bigint[], $15::text[],
                              $16::bigint[], $17::text[], $18::text[], $19::text[],
                              $21::boolean[], $22::text[], $23::bigint[], $24::text[])
             WITH ORDINALITY AS i(id, state, sequence, start_time_ms, close_time_ms, result,
                                  structured_result, error, exit_code, token_hash,
                                  last_activity_ms, usage, worktree, expected_sequence,
                                  expected_token, time_ms, snapshot, question, session_ref,
                                  rejected, earlier_state, earlier_time_ms, earlier_snapshot,
                                  ord)
     ), g AS (
         UPDATE workers w
            SET state = i.state, sequence = i.sequence, start_time_ms = i.start_time_ms,
                close_time_ms = i.close_time_ms, result = i.result,
                structured_result = i.structured_result, error = i.error,
                exit_code = i.exit_code, token_hash = i.token_hash,
                last_activity_ms = i.last_activity_ms,
                stop_reason = CASE WHEN i.close_time_ms IS NOT NULL THEN NULL
                                   ELSE w.stop_reason END,
                usage = i.usage, worktree = i.worktree, question = i.question,
                session_ref = i.session_ref, rejected = i.rejected
           FROM i
          WHERE w.id = i.id AND w.sequence = i.expected_sequence
            AND w.token_hash IS NOT DISTINCT FROM i.expected_token
         RETURNING w.id, i.sequence AS seq, i.state AS st, i.time_ms AS at, i.snapshot AS snap,
                   i.ord, w.replica_id AS owner
     ), e AS (
         INSERT INTO worker_events (worker_id, sequence, state, time_ms, snapshot, progress)
         SELECT id, seq, st, at, snap, NULL FROM g
         UNION ALL
         SELECT g.id, g.seq - 1, i.earlier_state, i.earlier_time_ms, i.earlier_snapshot, NULL
           FROM g JOIN i ON i.ord = g.ord
          WHERE i.earlier_state IS NOT NULL
         RETURNING worker_id, sequence
     ), n AS (
         SELECT array_agg(g.ord) AS moved,
                string_agg(e.worker_id || ':' || e.sequence || ':' || $20::text, ',')
                    FILTER (WHERE $25::boolean OR g.owner IS DISTINCT FROM $20::text) AS heard
           FROM g JOIN e ON e.worker_id = g.id AND e.sequence = g.seq
         HAVING count(*) > 0
     )
     SELECT moved, CASE WHEN heard IS NOT NULL THEN pg_notify('agentry_events', heard) END
       FROM n";

/// Writes `writes` as one statement on `c`: whether each moved its row.
async fn write_transitions(
    c: &impl GenericClient,
    origin: &str,
    announce: bool,
    writes: &[TransitionWrite],
) -> Result<Vec<bool>, tokio_postgres::Error> {
    let id = column(writes, |w| w.event.worker_id.as_str());
    let state = column(writes, |w| w.event.state.as_str());
    let sequence = column(writes, |w| to_sql_sequence(w.event.sequence));
    let start = column(writes, |w| w.event.worker.start_time_ms);
    let close = column(writes, |w| w.event.worker.close_time_ms);
    let result = column(writes, |w| w.event.worker.result.as_deref());
    let structured = column(writes, |w| w.event.worker.structured_result.as_deref());
    let error = column(writes, |w| w.event.worker.error.as_deref());
    let exit_code = column(writes, |w| w.event.worker.exit_code);
    let token = column(writes, |w| w.event.worker.token_hash.as_deref());
    let activity = column(writes, |w| w.event.worker.last_activity_ms);
    let usage = column(writes, |w| w.event.worker.usage.as_deref());
    let worktree = column(writes, |w| w.event.worker.worktree.as_deref());
    let expected = column(writes, |w| w.expected_sequence);
    let expected_token = column(writes, |w| w.expected_token.as_deref());
    let time = column(writes, |w| w.event.time_ms);
    let snapshot = column(writes, |w| w.snapshot.as_str());
    let question = column(writes, |w| w.event.worker.question.as_deref());
    let session_ref = column(writes, |w| w.event.worker.session_ref.as_deref());
    let rejected = column(writes, |w| w.event.worker.rejected);
    let earlier_state = column(writes, |w| {
        w.earlier.as_ref().map(|e| e.event.state.as_str())
    });
    let earlier_time = column(writes, |w| w.earlier.as_ref().map(|e| e.event.time_ms));
    let earlier_snapshot = column(writes, |w| w.earlier.as_ref().map(|e| e.snapshot.as_str()));
    let params: [&(dyn ToSql + Sync); 25] = [
        &id,
        &state,
        &sequence,
        &start,
        &close,
        &result,
        &structured,
        &error,
        &exit_code,
        &token,
        &activity,
        &usage,
        &worktree,
        &expected,
        &expected_token,
        &time,
        &snapshot,
        &question,
        &session_ref,
        &origin,
        &rejected,
        &earlier_state,
        &earlier_time,
        &earlier_snapshot,
        &announce,
    ];
    let statement = c.prepare_cached(TRANSITIONS_SQL).await?;
    let moved: HashSet<i64> = c
        .query_opt(&statement, &params)
        .await?
        .map(|row| row.get::<_, Vec<i64>>(0))
        .unwrap_or_default()
        .into_iter()
        .collect();
    // The statement's ordinals count from 1.
    Ok((1..=writes.len())
        .map(|ord| i64::try_from(ord).is_ok_and(|ord| moved.contains(&ord)))
        .collect())
}

/// New workers, each with its creation event, in one statement with one notification for the
/// batch (as [`TRANSITIONS_SQL`] sends it); a row that conflicts with one already there (its
/// id, or its caller's `request_id`), or whose dedupe claim another worker holds, is skipped,
/// not an error. The claims are taken as
/// [`CLAIMS_SQL`] takes them, in the same statement. Returns the ids written, as one array; no
/// row when none was.
const CREATES_SQL: &str = concat!(
    "WITH i AS (
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                              $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::text[],
                              $11::text[], $12::text[], $13::bigint[], $14::text[], $15::text[],
                              $17::text[], $18::text[], $19::text[], $20::bigint[])
             AS i(id, agent, description, prompt, workspace, parent_id, depth, create_time_ms,
                  caller_scope, request_id, token_hash, effective, last_activity_ms, worktree,
                  snapshot, context_id, a2a_message, claim_key, claim_ttl_ms)
     ), c AS (
         INSERT INTO dedupe_claims (key, worker_id, expires_at)
         SELECT claim_key, id, now() + claim_ttl_ms * interval '1 millisecond'
           FROM i WHERE claim_key IS NOT NULL
         ON CONFLICT (key) DO UPDATE
            SET worker_id = EXCLUDED.worker_id, claimed_at = now(),
                expires_at = EXCLUDED.expires_at
          WHERE ",
    claim_taken_over_when!("$21"),
    "
         RETURNING key
     ), g AS (
         INSERT INTO workers (id, agent, description, prompt, workspace, parent_id, depth, state,
                              sequence, create_time_ms, caller_scope, request_id, token_hash,
                              effective, last_activity_ms, worktree, replica_id, context_id,
                              a2a_message)
         SELECT id, agent, description, prompt, workspace, parent_id, depth, 'pending', 1,
                create_time_ms, caller_scope, request_id, token_hash, effective,
                last_activity_ms, worktree, $16::text, context_id, a2a_message
           FROM i LEFT JOIN c ON c.key = i.claim_key
          WHERE i.claim_key IS NULL OR c.key IS NOT NULL
         ON CONFLICT DO NOTHING
         RETURNING id
     ), e AS (
         INSERT INTO worker_events (worker_id, sequence, state, time_ms, snapshot, progress)
         SELECT i.id, 1, 'pending', i.create_time_ms, i.snapshot, NULL FROM i JOIN g ON g.id = i.id
         RETURNING worker_id
     )
     SELECT array_agg(worker_id),
            CASE WHEN $22::boolean
                 THEN pg_notify('agentry_events', string_agg(worker_id || ':1:' || $16::text, ','))
            END
       FROM e HAVING count(*) > 0"
);

/// Writes `writes` as one statement on `c`: whether each row went in.
async fn write_creates(
    c: &impl GenericClient,
    origin: &str,
    announce: bool,
    writes: &[CreateWrite],
) -> Result<Vec<bool>, tokio_postgres::Error> {
    let id = column(writes, |w| w.event.worker_id.as_str());
    let agent = column(writes, |w| w.event.worker.spec.agent.as_str());
    let description = column(writes, |w| w.event.worker.spec.description.as_str());
    let prompt = column(writes, |w| w.event.worker.spec.prompt.as_str());
    let workspace = column(writes, |w| w.event.worker.spec.workspace.as_deref());
    let parent = column(writes, |w| {
        w.event.worker.spec.parent_id.as_ref().map(|p| p.as_str())
    });
    let depth = column(writes, |w| i64::from(w.event.worker.spec.depth));
    let created = column(writes, |w| w.event.worker.spec.create_time_ms);
    let scope = column(writes, |w| w.event.worker.spec.caller_scope.as_str());
    let request = column(writes, |w| w.event.worker.spec.request_id.as_deref());
    let token = column(writes, |w| w.event.worker.token_hash.as_deref());
    let effective = column(writes, |w| w.effective.as_str());
    let activity = column(writes, |w| w.event.worker.last_activity_ms);
    let worktree = column(writes, |w| w.event.worker.worktree.as_deref());
    let snapshot = column(writes, |w| w.snapshot.as_str());
    let context = column(writes, |w| w.event.worker.spec.context_id.as_deref());
    let a2a_message = column(writes, |w| w.event.worker.spec.a2a_message.as_deref());
    let claim_key = column(writes, |w| w.claim.as_ref().map(|(k, _)| k.as_str()));
    let claim_ttl = column(writes, |w| w.claim.as_ref().map(|(_, ttl)| *ttl));
    let params: [&(dyn ToSql + Sync); 22] = [
        &id,
        &agent,
        &description,
        &prompt,
        &workspace,
        &parent,
        &depth,
        &created,
        &scope,
        &request,
        &token,
        &effective,
        &activity,
        &worktree,
        &snapshot,
        &origin,
        &context,
        &a2a_message,
        &claim_key,
        &claim_ttl,
        &CLAIM_WITHOUT_ROW_SECS,
        &announce,
    ];
    let statement = c.prepare_cached(CREATES_SQL).await?;
    let written: HashSet<String> = c
        .query_opt(&statement, &params)
        .await?
        .map(|row| row.get::<_, Vec<String>>(0))
        .unwrap_or_default()
        .into_iter()
        .collect();
    Ok(id.iter().map(|id| written.contains(*id)).collect())
}

/// Dedupe claims in one statement: each inserts its key, or takes over a claim that no longer
/// serves (expired, its worker failed or was killed, or its worker never appeared after
/// `$4` seconds); the row lock taken by `ON CONFLICT` makes concurrent claimers queue, so
/// exactly one wins. Returns the keys won. The worker of a claim is looked up by its id (a
/// scalar subquery, which the planner cannot turn into a hash of every worker).
const CLAIMS_SQL: &str = concat!(
    "INSERT INTO dedupe_claims (key, worker_id, expires_at)
     SELECT key, worker_id, now() + ttl_ms * interval '1 millisecond'
       FROM unnest($1::text[], $2::text[], $3::bigint[]) AS i(key, worker_id, ttl_ms)
     ON CONFLICT (key) DO UPDATE
        SET worker_id = EXCLUDED.worker_id, claimed_at = now(),
            expires_at = EXCLUDED.expires_at
      WHERE ",
    claim_taken_over_when!("$4"),
    " RETURNING key"
);

/// A dedupe claim whose worker row has not appeared after this long is taken over: its replica
/// died between the claim and the row.
const CLAIM_WITHOUT_ROW_SECS: f64 = 10.0;

/// Writes `writes` as one statement on `c`: whether each won its key.
async fn write_claims(
    c: &impl GenericClient,
    writes: &[ClaimWrite],
) -> Result<Vec<bool>, tokio_postgres::Error> {
    let key = column(writes, |w| w.key.as_str());
    let worker = column(writes, |w| w.worker_id.as_str());
    let ttl = column(writes, |w| w.ttl_ms);
    let statement = c.prepare_cached(CLAIMS_SQL).await?;
    let won: HashSet<String> = c
        .query(&statement, &[&key, &worker, &ttl, &CLAIM_WITHOUT_ROW_SECS])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    Ok(key.iter().map(|k| won.contains(*k)).collect())
}

/// One kind of write the [`Batcher`] groups; each is answered yes or no (a transition: it
/// moved its row; a create: its row went in; a claim: it won its key).
pub(super) trait Batched: Send + Sync + 'static {
    /// What a failed batch was doing, for its error.
    const CONTEXT: &'static str;
    /// The row it writes: two writes of one row never share a batch.
    fn row(&self) -> &str;
    /// Writes `batch` as one statement, answering each write in order.
    fn write_all(
        c: &deadpool_postgres::Client,
        origin: &Origin,
        batch: &[Self],
    ) -> impl Future<Output = Result<Vec<bool>, tokio_postgres::Error>> + Send
    where
        Self: Sized;
}

impl Batched for TransitionWrite {
    const CONTEXT: &'static str = "update worker";
    fn row(&self) -> &str {
        self.event.worker_id.as_str()
    }
    async fn write_all(
        c: &deadpool_postgres::Client,
        origin: &Origin,
        batch: &[Self],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        write_transitions(c, &origin.id, origin.announces(), batch).await
    }
}

impl Batched for CreateWrite {
    const CONTEXT: &'static str = "insert worker";
    fn row(&self) -> &str {
        self.event.worker_id.as_str()
    }
    async fn write_all(
        c: &deadpool_postgres::Client,
        origin: &Origin,
        batch: &[Self],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        write_creates(c, &origin.id, origin.announces(), batch).await
    }
}

impl Batched for ClaimWrite {
    const CONTEXT: &'static str = "claim dedupe key";
    fn row(&self) -> &str {
        &self.key
    }
    async fn write_all(
        c: &deadpool_postgres::Client,
        _origin: &Origin,
        batch: &[Self],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        write_claims(c, batch).await
    }
}

/// The one-write form of the transitions statement, for a caller inside its own transaction
/// (its event always announced: such writes are rare, and some concern another replica's
/// worker).
pub(super) async fn write_transition_in(
    c: &impl GenericClient,
    origin: &str,
    write: &TransitionWrite,
) -> Result<bool, tokio_postgres::Error> {
    Ok(
        write_transitions(c, origin, true, std::slice::from_ref(write))
            .await?
            .contains(&true),
    )
}

/// Who the batches are written by: this replica's id, which their notifications name, and
/// whether another replica follows events now (docs/replicas.md, "Watching"): only then are
/// this replica's creates and transitions announced (a transition of a worker another replica
/// owns always is, for its owner).
#[derive(Clone)]
pub(super) struct Origin {
    pub id: Arc<str>,
    pub followed: Arc<AtomicBool>,
}

impl Origin {
    fn announces(&self) -> bool {
        self.followed.load(Ordering::Acquire)
    }
}

/// A write waiting for its batch, and where its answer goes.
struct Queued<T: Batched> {
    write: T,
    answer: oneshot::Sender<Result<bool, StoreError>>,
}

/// Writes of kind `T` in batches (the module's doc); ends with the store.
pub(super) struct Batcher<T: Batched> {
    queue: mpsc::UnboundedSender<Queued<T>>,
    task: tokio::task::JoinHandle<()>,
}

/// When a batch stays open for more writes (`replica.commit_window`, docs/replicas.md, "Group
/// commit"): up to `window` after its first write, while at least one worker besides the
/// writer's own is open on this replica (`open`, kept by the store: created here and not yet
/// ended), so more writes are likely to come, and until it holds as many writes as there are
/// open workers; a worker alone on its replica is written at once.
#[derive(Clone)]
pub(super) struct Gather {
    pub window: Duration,
    pub open: Arc<AtomicUsize>,
}

impl Gather {
    /// Whether a batch of `held` writes may still get more: fewer than the open workers (so a
    /// batch of one waits only while another worker is open).
    fn more_likely(&self, held: usize) -> bool {
        held < self.open.load(Ordering::Relaxed)
    }
}

impl<T: Batched> Batcher<T> {
    /// Starts the batching task on `pool`, writing as `origin` (this replica). With
    /// `gather`, a batch may stay open for more writes; without it, it is sent at once.
    pub(super) fn start(pool: Pool, origin: Origin, gather: Option<Gather>) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(pool, origin, rx, gather));
        Self { queue, task }
    }

    /// Writes `write` with whatever else of its kind is queued.
    pub(super) async fn write(&self, write: T) -> Result<bool, StoreError> {
        let (answer, rx) = oneshot::channel();
        let lost = || StoreError::Lost {
            context: T::CONTEXT.to_owned(),
            message: "the store's batch writer has stopped".to_owned(),
        };
        self.queue
            .send(Queued { write, answer })
            .map_err(|_| lost())?;
        rx.await.map_err(|_| lost())?
    }
}

impl<T: Batched> Drop for Batcher<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run<T: Batched>(
    pool: Pool,
    origin: Origin,
    mut rx: mpsc::UnboundedReceiver<Queued<T>>,
    gather: Option<Gather>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(q) => q,
            None => match rx.recv().await {
                Some(q) => q,
                None => return,
            },
        };
        let opened = Instant::now();
        // Wait for a free slot before taking the queue: what arrives meanwhile joins the batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        // One write per row in a batch: a second one for the same row starts the next batch
        // (rare: two transitions of one worker at once, two claims of one key).
        let mut rows: HashSet<String> = HashSet::from([batch[0].write.row().to_owned()]);
        let gathering = gather
            .as_ref()
            .filter(|g| !g.window.is_zero())
            .map(|g| (g, opened + g.window));
        while batch.len() < MAX_BATCH {
            let q = match rx.try_recv() {
                Ok(q) => q,
                Err(_) => {
                    // As many writes as open workers: the likely writers are all in.
                    let Some((_, close_at)) = gathering.filter(|(g, _)| g.more_likely(batch.len()))
                    else {
                        break;
                    };
                    match tokio::time::timeout_at(close_at, rx.recv()).await {
                        Ok(Some(q)) => q,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            if !rows.insert(q.write.row().to_owned()) {
                next = Some(q);
                break;
            }
            batch.push(q);
        }
        let (pool, origin) = (pool.clone(), origin.clone());
        tokio::spawn(async move {
            commit(&pool, &origin, batch).await;
            drop(slot);
        });
    }
}

/// Writes one batch and answers each of its writes.
async fn commit<T: Batched>(pool: &Pool, origin: &Origin, batch: Vec<Queued<T>>) {
    let (writes, answers): (Vec<T>, Vec<_>) =
        batch.into_iter().map(|q| (q.write, q.answer)).unzip();
    let client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            let lost = StoreError::Lost {
                context: "get a connection".to_owned(),
                message: error_text(&e),
            };
            return fail_all(answers, lost);
        }
    };
    match T::write_all(&client, origin, &writes).await.pg(T::CONTEXT) {
        Ok(moved) => {
            for (answer, yes) in answers.into_iter().zip(moved) {
                let _ = answer.send(Ok(yes));
            }
        }
        // Refused as a whole: each alone, so each gets its own answer.
        Err(StoreError::Postgres { .. }) if writes.len() > 1 => {
            for (write, answer) in writes.iter().zip(answers) {
                let alone = T::write_all(&client, origin, std::slice::from_ref(write))
                    .await
                    .pg(T::CONTEXT)
                    .map(|yes| yes.contains(&true));
                let _ = answer.send(alone);
            }
        }
        // Every caller of the batch gets the error (a lost connection: each retries).
        Err(e) => fail_all(answers, e),
    }
}

/// Answers every write of a batch with `e`: the first gets it, the others a copy (a lost
/// connection stays `Lost` for each, so each caller retries).
fn fail_all(answers: Vec<oneshot::Sender<Result<bool, StoreError>>>, e: StoreError) {
    let copy = |e: &StoreError| match e {
        StoreError::Lost { context, message } => StoreError::Lost {
            context: context.clone(),
            message: message.clone(),
        },
        StoreError::Postgres { context, message } => StoreError::Postgres {
            context: context.clone(),
            message: message.clone(),
        },
        other => StoreError::Corrupt(other.to_string()),
    };
    let mut answers = answers.into_iter();
    let first = answers.next();
    for answer in answers {
        let _ = answer.send(Err(copy(&e)));
    }
    if let Some(first) = first {
        let _ = first.send(Err(e));
    }
}
