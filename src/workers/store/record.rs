//! The worker record as every backend writes it: the columns of `workers`, the record a
//! transition or a progress report leads to (as the lifecycle decides), a creation's event, and
//! the snapshot each event stores. Shared by the SQLite and PostgreSQL backends, so they write
//! the same rows; it depends on neither.

use serde::{Deserialize, Serialize};

use super::{Patch, StoreError};
use crate::workers::lifecycle::{self, Event, Outcome};
use crate::workers::model::{Progress, WorkerEvent, WorkerRecord, WorkerState};

/// The columns of `workers`, in the order each backend's `read_record` decodes them.
pub(super) const COLUMNS: &str = "id, agent, description, prompt, workspace, parent_id, depth, state, \
     sequence, create_time_ms, start_time_ms, close_time_ms, result, structured_result, error, \
     exit_code, caller_scope, request_id, token_hash, effective, last_activity_ms, usage, worktree, \
     continues, continued_by, question, undelivered, session_ref, context_id, artifacts, rejected, a2a_message";

/// The event a backend writes for [`WorkerStore::create`](super::WorkerStore::create): `rec` as
/// a new worker (pending, sequence 1, no outcome, latest activity = creation), whatever
/// lifecycle fields it carried; its worktree, made before the row, is kept.
pub(crate) fn creation_event(rec: &WorkerRecord) -> WorkerEvent {
    let mut worker = WorkerRecord::new(rec.id.clone(), rec.spec.clone(), rec.token_hash.clone());
    worker.worktree = rec.worktree.clone();
    WorkerEvent {
        worker_id: worker.id.clone(),
        sequence: 1,
        state: WorkerState::Pending,
        time_ms: worker.spec.create_time_ms,
        worker,
        progress: None,
    }
}

/// The record after `event`, as the lifecycle decides it (`None`: a repeated stop absorbed):
/// the next sequence, the patch, the start or close time, no token once terminal. Shared by
/// every backend, so they write the same rows.
pub(super) fn advance(
    current: &WorkerRecord,
    event: Event,
    patch: Patch,
    now_ms: i64,
) -> Result<Option<WorkerRecord>, StoreError> {
    let state = match lifecycle::transition(current.state, event)? {
        Outcome::Absorbed => return Ok(None),
        Outcome::Moved(state) => state,
    };
    let mut next = current.clone();
    next.state = state;
    next.sequence = current.sequence + 1;
    patch.apply_to(&mut next);
    if state == WorkerState::Running && current.state == WorkerState::Pending {
        next.start_time_ms = Some(now_ms);
    }
    if state != WorkerState::InputRequired {
        next.question = None;
    }
    if state.is_terminal() {
        next.close_time_ms = Some(now_ms);
        next.token_hash = None;
    }
    next.last_activity_ms = now_ms;
    Ok(Some(next))
}

/// The progress event `current` gets (docs/workers.md §6.9): only a running worker reports, at
/// most `max_events` events per worker; the event takes the next sequence and is the worker's
/// latest activity. Shared by every backend, like [`advance`].
pub(super) fn progress_event(
    current: WorkerRecord,
    progress: Progress,
    now_ms: i64,
    max_events: u64,
) -> Result<WorkerEvent, StoreError> {
    if current.state != WorkerState::Running {
        return Err(StoreError::NotRunning {
            id: current.id.clone(),
            state: current.state,
        });
    }
    if current.sequence >= max_events {
        return Err(StoreError::TooManyEvents {
            id: current.id.clone(),
            max: max_events,
        });
    }
    let mut next = current;
    if progress.kind == crate::workers::model::ProgressKind::Artifact {
        // Checked where it was reported; a chunk that does not read here is not taken in.
        let chunk = progress
            .data_json
            .as_deref()
            .map(crate::workers::artifacts::parse_chunk)
            .transpose()
            .map_err(StoreError::Corrupt)?;
        if let Some(chunk) = chunk {
            next.artifacts = Some(
                crate::workers::artifacts::merge(next.artifacts.as_deref(), &chunk).map_err(
                    |size| StoreError::ArtifactsTooLarge {
                        id: next.id.clone(),
                        size,
                    },
                )?,
            );
        }
    }
    next.sequence += 1;
    next.last_activity_ms = now_ms;
    Ok(WorkerEvent {
        worker_id: next.id.clone(),
        sequence: next.sequence,
        state: next.state,
        time_ms: now_ms,
        worker: next,
        progress: Some(progress),
    })
}

/// The part of a worker that transitions change, as stored in each event's `snapshot` column.
///
/// The fields fixed at creation (prompt, effective agent, lineage, …) are not repeated in every
/// event — the prompt alone may be 256 KiB — but read from the `workers` row when events are
/// loaded; since they never change, the rebuilt [`WorkerEvent::worker`] is exactly the record as
/// it was right after the transition.
#[derive(Serialize, Deserialize)]
pub(super) struct Snapshot {
    #[serde(default)]
    last_activity_ms: Option<i64>,
    start_time_ms: Option<i64>,
    close_time_ms: Option<i64>,
    result: Option<String>,
    structured_result: Option<String>,
    error: Option<String>,
    exit_code: Option<i32>,
    token_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worktree: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    question: Option<String>,
}

impl Snapshot {
    /// The changing part of `w`.
    pub(super) fn of(w: &WorkerRecord) -> Self {
        Snapshot {
            last_activity_ms: Some(w.last_activity_ms),
            start_time_ms: w.start_time_ms,
            close_time_ms: w.close_time_ms,
            result: w.result.clone(),
            structured_result: w.structured_result.clone(),
            error: w.error.clone(),
            exit_code: w.exit_code,
            token_hash: w.token_hash.clone(),
            usage: w.usage.clone(),
            worktree: w.worktree.clone(),
            question: w.question.clone(),
        }
    }

    /// The worker as it was at this event: `current`'s fixed fields with the snapshot laid
    /// over.
    pub(super) fn over(
        self,
        current: &WorkerRecord,
        state: WorkerState,
        sequence: u64,
        time_ms: i64,
    ) -> WorkerRecord {
        WorkerRecord {
            state,
            sequence,
            start_time_ms: self.start_time_ms,
            close_time_ms: self.close_time_ms,
            result: self.result,
            structured_result: self.structured_result,
            error: self.error,
            exit_code: self.exit_code,
            token_hash: self.token_hash,
            usage: self.usage,
            worktree: self.worktree,
            question: self.question,
            last_activity_ms: self.last_activity_ms.unwrap_or(time_ms),
            ..current.clone()
        }
    }
}

/// Sequences are `u64` in the API and a signed 64-bit integer in the databases (SQLite's
/// `INTEGER`, PostgreSQL's `BIGINT`). A worker would need 2^63
/// transitions to overflow, so saturating is unreachable rather than lossy.
pub(super) fn to_sql_sequence(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}
