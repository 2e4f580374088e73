//! SQLite rows ⇄ domain records: reading and writing the `workers` and `worker_events` rows (and
//! `rusqlite`'s conversions of ids and states), the statements every store call shares (select,
//! insert, the transition itself, a progress report) and the list query builder.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, Type, Value, ValueRef};
use rusqlite::{Connection, OptionalExtension, Row, ToSql, params};

use super::context::Context;
use crate::workers::lifecycle::Event;
#[cfg(doc)]
use crate::workers::store::WorkerStore;
use crate::workers::store::record::{COLUMNS, Snapshot, advance, progress_event, to_sql_sequence};
use crate::workers::store::{Applied, ListQuery, ParentFilter, Patch, StoreError};
use std::sync::Arc;

use crate::workers::model::{
    Progress, SpawnSpec, WorkerEvent, WorkerId, WorkerRecord, WorkerState,
};

/// Ids of the `pending` and `running` rows, oldest first (an `input_required` worker holds no
/// run, so it is never an orphan).
pub(super) fn open_ids(conn: &Connection) -> Result<Vec<WorkerId>, StoreError> {
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
pub(super) fn list_sql(q: &ListQuery) -> (String, Vec<Value>) {
    let mut sql = format!("SELECT {COLUMNS} FROM workers WHERE 1 = 1");
    let mut args: Vec<Value> = Vec::new();
    match &q.parent {
        ParentFilter::Any => {}
        ParentFilter::Worker(parent) => {
            sql.push_str(" AND parent_id = ?");
            args.push(Value::Text(parent.as_str().to_owned()));
        }
    }
    if let Some(scope) = &q.caller_scope {
        sql.push_str(" AND caller_scope = ?");
        args.push(Value::Text(scope.clone()));
    }
    if let Some(context) = &q.context_id {
        sql.push_str(" AND context_id = ?");
        args.push(Value::Text(context.clone()));
    }
    if let Some(agent) = &q.agent {
        sql.push_str(" AND agent = ?");
        args.push(Value::Text(agent.clone()));
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
    let (cmp, order) = if q.newest_first {
        ("<", " ORDER BY create_time_ms DESC, id DESC LIMIT ?")
    } else {
        (">", " ORDER BY create_time_ms, id LIMIT ?")
    };
    if let Some((time_ms, id)) = &q.after {
        sql.push_str(&format!(" AND (create_time_ms, id) {cmp} (?, ?)"));
        args.push(Value::Integer(*time_ms));
        args.push(Value::Text(id.as_str().to_owned()));
    }
    sql.push_str(order);
    args.push(Value::Integer(i64::try_from(q.limit).unwrap_or(i64::MAX)));
    (sql, args)
}

/// Worker `id` as this transaction sees it; a missing one is `NotFound`.
fn current_worker(tx: &Connection, id: &WorkerId) -> Result<WorkerRecord, StoreError> {
    select_worker(tx, id)?.ok_or_else(|| StoreError::NotFound(id.clone()))
}

/// An update guarded by `sequence = previous_sequence` must have changed exactly one row:
/// anything else is impossible while the transaction holds the write lock, and is said loudly.
fn one_row_changed(
    changed: usize,
    id: &WorkerId,
    previous_sequence: u64,
) -> Result<(), StoreError> {
    if changed == 1 {
        return Ok(());
    }
    Err(StoreError::Corrupt(format!(
        "worker {id} changed under a write transaction (expected sequence {previous_sequence})"
    )))
}

/// The body of [`WorkerStore::apply`], run inside the caller's transaction so
/// [`WorkerStore::close_orphans`] goes through exactly the same rules.
pub(super) fn apply_in(
    tx: &Connection,
    id: &WorkerId,
    event: Event,
    patch: Patch,
    now_ms: i64,
) -> Result<Applied, StoreError> {
    let current = current_worker(tx, id)?;
    let previous_sequence = current.sequence;
    let Some(next) = advance(&current, event, patch, now_ms)? else {
        return Ok(Applied::Absorbed(current));
    };
    let state = next.state;
    let changed = tx
        .prepare_cached(
            "UPDATE workers SET state = ?2, sequence = ?3, start_time_ms = ?4,
                 close_time_ms = ?5, result = ?6, structured_result = ?7, error = ?8,
                 exit_code = ?9, token_hash = ?10, last_activity_ms = ?12, usage = ?13,
                 worktree = ?14, question = ?15, session_ref = ?16, rejected = ?17
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
                next.last_activity_ms,
                next.usage,
                next.worktree,
                next.question,
                next.session_ref,
                next.rejected,
            ])
        })
        .context("update worker")?;
    one_row_changed(changed, id, previous_sequence)?;
    let event = WorkerEvent {
        worker_id: next.id.clone(),
        sequence: next.sequence,
        state,
        time_ms: now_ms,
        worker: next,
        progress: None,
    };
    insert_event(tx, &event)?;
    Ok(Applied::Moved(event))
}

/// The body of [`WorkerStore::append_progress`]: a
/// progress event of a running worker, the next sequence, its latest activity.
pub(super) fn progress_in(
    tx: &Connection,
    id: &WorkerId,
    progress: Progress,
    now_ms: i64,
    max_events: u64,
) -> Result<WorkerEvent, StoreError> {
    let current = current_worker(tx, id)?;
    let previous_sequence = current.sequence;
    let event = progress_event(current, progress, now_ms, max_events)?;
    let changed = tx
        .prepare_cached(
            "UPDATE workers SET sequence = ?2, last_activity_ms = ?3, artifacts = ?5
             WHERE id = ?1 AND sequence = ?4",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                event.worker_id,
                to_sql_sequence(event.sequence),
                now_ms,
                to_sql_sequence(previous_sequence),
                event.worker.artifacts,
            ])
        })
        .context("record progress")?;
    one_row_changed(changed, id, previous_sequence)?;
    insert_event(tx, &event)?;
    Ok(event)
}

/// One row of `workers` by id.
pub(super) fn select_worker(
    conn: &Connection,
    id: &WorkerId,
) -> Result<Option<WorkerRecord>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM workers WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], read_record).optional())
        .context("read worker")
}

/// Writes a new `workers` row.
pub(super) fn insert_worker(conn: &Connection, rec: &WorkerRecord) -> Result<(), StoreError> {
    let effective = serde_json::to_string(&rec.spec.effective)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode effective agent: {e}")))?;
    conn.prepare_cached(&format!(
        "INSERT INTO workers ({COLUMNS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
              ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)"
    ))
    .and_then(|mut stmt| {
        stmt.execute(params![
            rec.id,
            rec.spec.agent,
            rec.spec.description,
            rec.spec.prompt,
            rec.spec.workspace,
            rec.spec.parent_id,
            rec.spec.depth,
            rec.state,
            to_sql_sequence(rec.sequence),
            rec.spec.create_time_ms,
            rec.start_time_ms,
            rec.close_time_ms,
            rec.result,
            rec.structured_result,
            rec.error,
            rec.exit_code,
            rec.spec.caller_scope,
            rec.spec.request_id,
            rec.token_hash,
            effective,
            rec.last_activity_ms,
            rec.usage,
            rec.worktree,
            rec.spec.continues,
            rec.continued_by,
            rec.question,
            rec.undelivered,
            rec.session_ref,
            rec.spec.context_id,
            rec.artifacts,
            rec.rejected,
            rec.spec.a2a_message,
        ])
    })
    .context("insert worker")?;
    Ok(())
}

/// Appends an event row.
pub(super) fn insert_event(conn: &Connection, event: &WorkerEvent) -> Result<(), StoreError> {
    let snapshot = serde_json::to_string(&Snapshot::of(&event.worker))
        .map_err(|e| StoreError::Corrupt(format!("cannot encode event snapshot: {e}")))?;
    let progress = event
        .progress
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("cannot encode progress: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO worker_events (worker_id, sequence, state, time_ms, snapshot, progress)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            event.worker_id,
            to_sql_sequence(event.sequence),
            event.state,
            event.time_ms,
            snapshot,
            progress,
        ])
    })
    .context("insert worker event")?;
    Ok(())
}

/// Decodes a `workers` row selected as [`COLUMNS`].
pub(super) fn read_record(row: &Row<'_>) -> rusqlite::Result<WorkerRecord> {
    let effective: String = row.get(19)?;
    let spec = SpawnSpec {
        agent: row.get(1)?,
        description: row.get(2)?,
        prompt: row.get(3)?,
        workspace: row.get(4)?,
        parent_id: row.get(5)?,
        depth: row.get(6)?,
        create_time_ms: row.get(9)?,
        caller_scope: row.get(16)?,
        request_id: row.get(17)?,
        continues: row.get(23)?,
        context_id: row.get(28)?,
        a2a_message: row.get(31)?,
        effective: serde_json::from_str(&effective)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(19, Type::Text, e.into()))?,
    };
    Ok(WorkerRecord {
        id: row.get(0)?,
        spec: Arc::new(spec),
        state: row.get(7)?,
        sequence: read_sequence(row, 8)?,
        start_time_ms: row.get(10)?,
        close_time_ms: row.get(11)?,
        result: row.get(12)?,
        structured_result: row.get(13)?,
        error: row.get(14)?,
        exit_code: row.get(15)?,
        token_hash: row.get(18)?,
        last_activity_ms: row.get(20)?,
        usage: row.get(21)?,
        worktree: row.get(22)?,
        continued_by: row.get(24)?,
        question: row.get(25)?,
        undelivered: row.get(26)?,
        session_ref: row.get(27)?,
        artifacts: row.get(29)?,
        rejected: row.get(30)?,
    })
}

/// Decodes a `worker_events` row (sequence, state, time, snapshot) into an event whose worker is
/// `current` — the worker's row, for the fields fixed at creation — with the snapshot laid over.
pub(super) fn read_event(row: &Row<'_>, current: &WorkerRecord) -> rusqlite::Result<WorkerEvent> {
    let sequence = read_sequence(row, 0)?;
    let state: WorkerState = row.get(1)?;
    let time_ms: i64 = row.get(2)?;
    let snapshot: String = row.get(3)?;
    let snapshot: Snapshot = serde_json::from_str(&snapshot)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(3, Type::Text, e.into()))?;
    let progress: Option<String> = row.get(4)?;
    let progress = progress
        .map(|p| serde_json::from_str::<Progress>(&p))
        .transpose()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(4, Type::Text, e.into()))?;
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

/// Reads a sequence column; a negative value is reported as out of range (so as corruption).
pub(super) fn read_sequence(row: &Row<'_>, index: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(index)?;
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(index, value))
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
