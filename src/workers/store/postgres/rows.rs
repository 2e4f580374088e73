//! PostgreSQL rows ⇄ domain records: reading `workers` and `worker_events` rows, the encoded
//! event and its notification that every writing statement ends with, the writes of creates and
//! transitions as the batch writers take them, a transition inside a caller's transaction, and
//! the reads of the [`WorkerStore`](crate::workers::store::WorkerStore) core (a worker, a page,
//! the events after a sequence, the lookups by token and by `request_id`).

use std::sync::{Arc, LazyLock};

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Row};

use super::batch::{CreateWrite, TransitionWrite, write_transition_in};
use super::cached::{query_cached, query_opt_cached};
use super::context::PgContext;
use crate::workers::lifecycle::Event;
use crate::workers::model::{
    Progress, SpawnSpec, WorkerEvent, WorkerId, WorkerRecord, WorkerState,
};
use crate::workers::store::record::{COLUMNS, Snapshot, advance, to_sql_sequence};
use crate::workers::store::{Applied, ListQuery, ParentFilter, Patch, StoreError};

/// An event's encoded columns and its notification's payload (`worker:sequence:replica`, the
/// replica that committed it last, so it can tell its own commits from others').
pub(super) struct EventRow {
    /// The event's sequence, as stored (a progress write also sets the row's to it).
    pub(super) sequence: i64,
    state: &'static str,
    time_ms: i64,
    snapshot: String,
    progress: Option<String>,
    payload: String,
}

impl EventRow {
    pub(super) fn of(event: &WorkerEvent, origin: &str) -> Result<Self, StoreError> {
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
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 6] {
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
    /// Six consecutive parameters from `first`, in the order of [`EventRow::params`].
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

/// A progress report: the next sequence on a running row still at the sequence and token it
/// was read with.
pub(super) static PROGRESS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH g AS (
             UPDATE workers SET sequence = $2, last_activity_ms = $3, artifacts = $12::TEXT
              WHERE id = $1 AND sequence = $4 AND token_hash IS NOT DISTINCT FROM $5
                AND state = 'running'
             RETURNING id
         ){}",
        EventParams::from(6).tail()
    )
});

/// Decodes a `workers` row selected as [`COLUMNS`].
pub(super) fn read_record(row: &Row) -> Result<WorkerRecord, StoreError> {
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Corrupt(format!("worker row: {what}: {e}"))
    };
    let id = |i: usize| -> Result<WorkerId, StoreError> {
        let text: &str = row.try_get(i).map_err(|e| corrupt("id", &e))?;
        WorkerId::parse(text).map_err(|e| corrupt("id", &e))
    };
    let parent: Option<&str> = row.try_get(5).map_err(|e| corrupt("parent_id", &e))?;
    let opt_id = |i: usize| -> Result<Option<WorkerId>, StoreError> {
        let text: Option<&str> = row.try_get(i).map_err(|e| corrupt("id", &e))?;
        text.map(WorkerId::parse)
            .transpose()
            .map_err(|e| corrupt("id", &e))
    };
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
            continues: opt_id(23)?,
            context_id: row.try_get(28).map_err(get)?,
            a2a_message: row.try_get(31).map_err(get)?,
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
        continued_by: opt_id(24)?,
        question: row.try_get(25).map_err(get)?,
        undelivered: u32::try_from(row.try_get::<_, i64>(26).map_err(get)?)
            .map_err(|e| corrupt("undelivered", &e))?,
        session_ref: row.try_get(27).map_err(get)?,
        artifacts: row.try_get(29).map_err(get)?,
        rejected: row.try_get(30).map_err(get)?,
    })
}

/// The row's latest event (the one at its sequence), read in the caller's transaction.
pub(super) async fn latest_event(
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
pub(super) async fn select_worker(
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

/// A creation event as its batched write (`batch`).
pub(super) fn create_write(event: &WorkerEvent) -> Result<CreateWrite, StoreError> {
    let w = &event.worker;
    let effective = serde_json::to_string(&w.spec.effective)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode effective agent: {e}")))?;
    Ok(CreateWrite {
        event: event.clone(),
        effective,
        snapshot: snapshot_of(w)?,
        claim: None,
    })
}

/// The JSON snapshot an event of `worker` carries.
fn snapshot_of(worker: &WorkerRecord) -> Result<String, StoreError> {
    serde_json::to_string(&Snapshot::of(worker))
        .map_err(|e| StoreError::Corrupt(format!("cannot encode event snapshot: {e}")))
}

/// The event `next` makes and its write over `current`: the row moves only if it is still at
/// `current`'s sequence and token, and its event and notification (sent by the server at
/// commit) follow (`batch`).
pub(super) fn transition_write(
    current: &WorkerRecord,
    next: WorkerRecord,
    now_ms: i64,
) -> Result<TransitionWrite, StoreError> {
    Ok(TransitionWrite {
        snapshot: snapshot_of(&next)?,
        expected_sequence: to_sql_sequence(current.sequence),
        expected_token: current.token_hash.clone(),
        earlier: None,
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
pub(super) async fn apply_in(
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
    if let Some(context) = &q.context_id {
        let n = next(&mut args, Box::new(context.clone()));
        sql.push_str(&format!(" AND context_id = {n}"));
    }
    if let Some(agent) = &q.agent {
        let n = next(&mut args, Box::new(agent.clone()));
        sql.push_str(&format!(" AND agent = {n}"));
    }
    let states: Vec<String> = WorkerState::ALL
        .into_iter()
        .filter(|state| q.states.contains(state))
        .map(|state| state.as_str().to_owned())
        .collect();
    if !states.is_empty() {
        let n = next(&mut args, Box::new(states));
        sql.push_str(&format!(" AND state = ANY({n})"));
        // The predicate of `workers_by_state`, named so the planner may read that index.
        if !q.states.contains(&WorkerState::Completed) {
            sql.push_str(" AND state <> 'completed'");
        }
    }
    let (cmp, order) = if q.newest_first {
        ("<", "create_time_ms DESC, id DESC")
    } else {
        (">", "create_time_ms, id")
    };
    if let Some((time_ms, id)) = &q.after {
        let t = next(&mut args, Box::new(*time_ms));
        let i = next(&mut args, Box::new(id.as_str().to_owned()));
        sql.push_str(&format!(" AND (create_time_ms, id) {cmp} ({t}, {i})"));
    }
    let l = next(
        &mut args,
        Box::new(i64::try_from(q.limit).unwrap_or(i64::MAX)),
    );
    sql.push_str(&format!(" ORDER BY {order} LIMIT {l}"));
    (sql, args)
}

/// One page of workers (`WorkerStore::list`).
pub(super) async fn list(client: &Client, q: &ListQuery) -> Result<Vec<WorkerRecord>, StoreError> {
    let (sql, args) = list_sql(q);
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

/// The worker's events after `after_sequence` (`WorkerStore::events_after`), read in one
/// snapshot with its row.
pub(super) async fn events_after(
    client: &mut Client,
    id: &WorkerId,
    after_sequence: u64,
) -> Result<Vec<WorkerEvent>, StoreError> {
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

/// The open worker holding the token with this hash (`WorkerStore::find_by_token_hash`).
pub(super) async fn find_by_token_hash(
    client: &Client,
    hash: &str,
) -> Result<Option<WorkerRecord>, StoreError> {
    let row = query_opt_cached(
        client,
        &format!(
            "SELECT {COLUMNS} FROM workers
                     WHERE token_hash = $1 AND state IN ('pending', 'running', 'input_required')"
        ),
        &[&hash],
    )
    .await
    .pg("find worker by token")?;
    row.as_ref().map(read_record).transpose()
}

/// The worker a caller created with this idempotency key (`WorkerStore::find_by_request_id`).
pub(super) async fn find_by_request_id(
    client: &Client,
    caller_scope: &str,
    request_id: &str,
) -> Result<Option<WorkerRecord>, StoreError> {
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM workers WHERE caller_scope = $1 AND request_id = $2"),
            &[&caller_scope, &request_id],
        )
        .await
        .pg("find worker by request_id")?;
    row.as_ref().map(read_record).transpose()
}

/// Replaces the worktree record of a worker that ended (`WorkerStore::record_worktree`).
pub(super) async fn record_worktree(
    client: &Client,
    id: &WorkerId,
    worktree: &str,
) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE workers SET worktree = $2
                      WHERE id = $1 AND state NOT IN ('pending', 'running')",
            &[&id.as_str(), &worktree],
        )
        .await
        .pg("record a worktree")?;
    Ok(())
}
