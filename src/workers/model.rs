//! The worker domain types: states, ids, the persisted record and the event log entry.
//!
//! This module owns the *shape* of a worker (docs §6) and the invariants that fit in a type — a
//! [`WorkerId`] is always well-formed, a [`WorkerState`] is always one of five values — plus the
//! worker-token helpers of docs §8.2. It owns no rules about which state may follow which (that is
//! [`super::lifecycle`]) and no I/O. It must not depend on the store, on tokio or on tonic.

use std::{fmt, str::FromStr, sync::Arc};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::resolve::Effective;

/// Where a worker is in its life (docs §6.1).
///
/// Serialized in snake case (`"pending"`, `"input_required"`, …) — the same spelling the store writes in its `state`
/// column, so the JSON snapshot and the SQL row never disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// The row exists but nothing runs yet: written before anything starts, so audits see it.
    Pending,
    /// The executor has started the agent.
    Running,
    /// The agent finished successfully (exit 0 and, with a schema, valid output).
    Completed,
    /// The agent could not start, exited non-zero, timed out, produced invalid output, or was
    /// orphaned by a restart.
    Failed,
    /// Someone stopped it, before or while it ran.
    Killed,
    /// It asked its caller a question and waits for the answer (docs §12.4): no run slot, no
    /// process, a valid token.
    InputRequired,
}

impl WorkerState {
    /// Every state once, in lifecycle order — lets tests and callers enumerate without drifting
    /// from the enum.
    pub const ALL: [WorkerState; 6] = [
        WorkerState::Pending,
        WorkerState::Running,
        WorkerState::Completed,
        WorkerState::Failed,
        WorkerState::Killed,
        WorkerState::InputRequired,
    ];

    /// Whether the worker holds a run (pending or running): what a lost process leaves open.
    pub fn is_active(self) -> bool {
        matches!(self, WorkerState::Pending | WorkerState::Running)
    }

    /// Whether no further transition (other than an absorbed repeated stop) can happen; a
    /// terminal worker has a `close_time` and no valid token.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WorkerState::Completed | WorkerState::Failed | WorkerState::Killed
        )
    }

    /// The snake-case name used in the database, in JSON and in log fields.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Pending => "pending",
            WorkerState::Running => "running",
            WorkerState::Completed => "completed",
            WorkerState::Failed => "failed",
            WorkerState::Killed => "killed",
            WorkerState::InputRequired => "input_required",
        }
    }
}

impl fmt::Display for WorkerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`WorkerState`]; kept so the caller can say what it got.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown worker state {0:?}: expected pending, running, completed, failed, killed or input_required"
)]
pub struct UnknownWorkerState(pub String);

impl FromStr for WorkerState {
    type Err = UnknownWorkerState;

    /// Parses the exact lowercase names produced by [`WorkerState::as_str`], nothing looser, so a
    /// corrupt database value is reported rather than guessed at.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkerState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownWorkerState(s.to_owned()))
    }
}

/// The prefix every worker id carries, so ids are recognizable in logs and never confused with
/// agent names or tokens.
const WORKER_ID_PREFIX: &str = "wkr_";
/// Hex digits after the prefix: a 128-bit UUID version 7.
const WORKER_ID_HEX_LEN: usize = 32;

/// A worker's id: `wkr_` followed by 32 lowercase hex digits (a UUID version 7: 48 bits of Unix
/// milliseconds, then 74 random bits).
///
/// Ids arrive from clients (`GetWorker`, `StopWorker`, `parent_id` filters), so the only ways to
/// get one are [`WorkerId::generate`] and [`WorkerId::parse`]; deserialization goes through
/// `parse` too. Holding a `WorkerId` therefore means holding a well-formed one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WorkerId(String);

/// A string that is not a well-formed [`WorkerId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid worker id {0:?}: expected \"wkr_\" followed by 32 lowercase hex digits")]
pub struct InvalidWorkerId(pub String);

impl WorkerId {
    /// A fresh id: a UUID version 7 from the `uuid` crate, so ids made later sort later. The
    /// store's tables and indexes keyed by id then grow at their right edge, and a commit
    /// rewrites the same few pages instead of one random page per worker (a random id put
    /// 79 KB of page writes on every spawn). The 74 random bits leave collisions no practical
    /// concern, and the store's primary key would reject one anyway. Clients still see an
    /// opaque string (docs/api.md, Types).
    pub fn generate() -> WorkerId {
        WorkerId(format!(
            "{WORKER_ID_PREFIX}{}",
            uuid::Uuid::now_v7().simple()
        ))
    }

    /// Accepts exactly `wkr_` + 32 lowercase hex digits; anything else (upper case, whitespace,
    /// other lengths) is rejected so ids have one spelling and compare by string.
    pub fn parse(s: &str) -> Result<WorkerId, InvalidWorkerId> {
        let well_formed = s.strip_prefix(WORKER_ID_PREFIX).is_some_and(|digits| {
            digits.len() == WORKER_ID_HEX_LEN
                && digits
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if well_formed {
            Ok(WorkerId(s.to_owned()))
        } else {
            Err(InvalidWorkerId(s.to_owned()))
        }
    }

    /// The id as text, for SQL parameters, proto fields and log fields.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for WorkerId {
    type Err = InvalidWorkerId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkerId::parse(s)
    }
}

impl TryFrom<String> for WorkerId {
    type Error = InvalidWorkerId;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        WorkerId::parse(&s)
    }
}

impl From<WorkerId> for String {
    fn from(id: WorkerId) -> String {
        id.0
    }
}

/// What a worker was spawned as: fixed at creation and never changed afterwards. Shared
/// (`Arc`) by every copy of the record, so an event, a cached record or a watcher's snapshot
/// does not copy the prompt and the effective agent again.
#[derive(Clone, Debug, PartialEq)]
pub struct SpawnSpec {
    /// Name of the agent (persona) it runs, as the caller asked for it.
    pub agent: String,
    /// The short task description the caller gave, shown in audits and lists.
    pub description: String,
    /// The prompt the agent received; kept for audits and for `request_id` idempotency checks.
    pub prompt: String,
    /// The absolute workspace the caller worked in, if it gave one.
    pub workspace: Option<String>,
    /// The worker that spawned this one; `None` when a top-level caller did. Forms the audit tree.
    pub parent_id: Option<WorkerId>,
    /// 0 would be a top-level caller, so a worker's depth is its parent's + 1 (docs §5.2).
    pub depth: u32,
    /// The authenticated principal that spawned it, or `"anonymous"`; scopes dedupe and
    /// `request_id`.
    pub caller_scope: String,
    /// The client's idempotency key: unique per `caller_scope`, so a retried spawn finds this
    /// worker instead of starting another.
    pub request_id: Option<String>,
    /// The worker whose conversation this one carries on (docs §12.3).
    pub continues: Option<WorkerId>,
    /// The A2A `contextId` the worker belongs to (docs §13.3): set by an A2A call (given by
    /// the client or generated), kept by a continuation; `None` for a worker spawned otherwise.
    pub context_id: Option<String>,
    /// The A2A message that started it (docs §13.3), as the JSON of
    /// [`crate::workers::spec::A2aMessage`]; `None` outside A2A.
    pub a2a_message: Option<String>,
    /// The effective agent the worker got (docs §5.3). The store keeps it as JSON text and
    /// refuses a row whose text does not read back as one.
    pub effective: Effective,
    /// When the row was created, in unix milliseconds; also the list ordering key.
    pub create_time_ms: i64,
}

/// Everything the service knows about one worker: the persisted row, and the snapshot carried by
/// every [`WorkerEvent`] — its [`SpawnSpec`], fixed at creation, and its lifecycle status.
///
/// The status fields (`state`, `sequence`, the times, the outcome fields and `token_hash`) are
/// written by the store when it applies a lifecycle event; the spec is written once, at creation.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerRecord {
    /// The worker's identity; primary key of the row and of its event stream.
    pub id: WorkerId,
    /// What it was spawned as.
    pub spec: Arc<SpawnSpec>,
    /// Current lifecycle state.
    pub state: WorkerState,
    /// Sequence of the last event; 1 is the `pending` event written at creation. Watchers resume
    /// after a sequence they have seen (docs §6.6).
    pub sequence: u64,
    /// When it entered `running`, in unix milliseconds.
    pub start_time_ms: Option<i64>,
    /// When it became terminal, in unix milliseconds: set on every terminal transition and never
    /// otherwise (docs §6.2).
    pub close_time_ms: Option<i64>,
    /// The agent's output (stdout for the exec executor).
    pub result: Option<String>,
    /// The output as JSON text, when the effective agent had an output schema.
    pub structured_result: Option<String>,
    /// Why it failed or was killed, in words a calling model can read.
    pub error: Option<String>,
    /// The process exit code, when a process ran and exited.
    pub exit_code: Option<i32>,
    /// Hex SHA-256 of the worker's secret token ([`hash_token`]); the token itself is never
    /// stored. Cleared when the worker becomes terminal, which is what ends the token's validity.
    pub token_hash: Option<String>,
    /// When its latest event (a transition or a progress report) happened, in unix
    /// milliseconds: lets a coordinator tell a slow worker from a stuck one (docs/workers.md
    /// §6.9).
    pub last_activity_ms: i64,
    /// Token usage of a model-executor run as JSON text (docs/model.md §11.8), recorded with
    /// the terminal state; `None` for other executors.
    pub usage: Option<String>,
    /// The worker's git worktree as JSON text ([`crate::workers::worktree::Worktree`]), when it
    /// runs isolated; `changed` is set with the terminal state.
    pub worktree: Option<String>,
    /// The worker that carries this one's conversation on (docs §12.3).
    pub continued_by: Option<WorkerId>,
    /// What it asks its caller, while `input_required` (docs §12.4).
    pub question: Option<String>,
    /// Messages accepted for it and not delivered (docs §12.2).
    pub undelivered: u32,
    /// The session reference its runner returned when it ended (docs §12.6): what a
    /// continuation's runner reloads.
    pub session_ref: Option<String>,
    /// The artifacts reported so far, assembled (JSON, docs §13.1); `None` without any.
    pub artifacts: Option<String>,
    /// It failed because its agent declined the task (a runner's or a remote agent's
    /// `rejected`, docs §13.1).
    pub rejected: bool,
}

/// What a progress report is about (docs/workers.md §6.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressKind {
    /// Free text: what the agent is doing.
    Text,
    /// The agent called a tool.
    ToolCall,
    /// A tool answered.
    ToolResult,
    /// A status line (a phase, a percentage).
    Status,
    /// A message sent to the worker was delivered (docs §12.2).
    Message,
    /// A chunk of an artifact (docs §13.1): `data_json` is the chunk.
    Artifact,
}

/// A running worker's report of what it is doing, one event in its log between transitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// What it is about.
    pub kind: ProgressKind,
    /// Human-readable text, at most 64 KiB.
    pub text: String,
    /// Structured detail as JSON text (validated), at most 64 KiB.
    pub data_json: Option<String>,
}

impl WorkerRecord {
    /// A new worker as it is created: `pending`, sequence 1, no outcome, latest activity = its
    /// creation.
    pub fn new(id: WorkerId, spec: Arc<SpawnSpec>, token_hash: Option<String>) -> Self {
        Self {
            id,
            state: WorkerState::Pending,
            sequence: 1,
            start_time_ms: None,
            close_time_ms: None,
            result: None,
            structured_result: None,
            error: None,
            exit_code: None,
            token_hash,
            last_activity_ms: spec.create_time_ms,
            usage: None,
            worktree: None,
            continued_by: None,
            question: None,
            undelivered: 0,
            session_ref: None,
            artifacts: None,
            rejected: false,
            spec,
        }
    }
}

/// One persisted transition: what a watcher receives, and what it can resume after.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerEvent {
    /// The worker this event belongs to.
    pub worker_id: WorkerId,
    /// Strictly increasing per worker, starting at 1 for the creation event.
    pub sequence: u64,
    /// The state the worker entered.
    pub state: WorkerState,
    /// When the transition was applied, in unix milliseconds.
    pub time_ms: i64,
    /// The whole record right after the transition, so a watcher needs no second read.
    pub worker: WorkerRecord,
    /// Set for a progress report: the state did not change, this is what the worker said.
    pub progress: Option<Progress>,
}

impl WorkerEvent {
    /// The worker as it stands, as one event: what a watch without `after_sequence` starts with.
    pub fn snapshot(worker: WorkerRecord) -> Self {
        Self {
            worker_id: worker.id.clone(),
            sequence: worker.sequence,
            state: worker.state,
            time_ms: worker
                .close_time_ms
                .or(worker.start_time_ms)
                .unwrap_or(worker.spec.create_time_ms),
            worker,
            progress: None,
        }
    }
}

/// Hex SHA-256 of a worker token: what the store keeps and looks workers up by, so a leaked
/// database does not leak live credentials.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new worker token: 128 random bits as 32 lowercase hex digits (docs §8.2). Handed once to the
/// worker's process; only its [`hash_token`] is stored.
pub fn generate_token() -> String {
    hex::encode(random_128())
}

/// 16 bytes from the operating system's random source.
fn random_128() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    // The OS random source failing means the machine cannot produce secrets at all; continuing
    // with predictable ids or tokens would be worse than stopping.
    getrandom::fill(&mut bytes).expect("operating system random source failed");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_round_trip_through_str_and_serde() {
        for state in WorkerState::ALL {
            assert_eq!(state.as_str().parse::<WorkerState>(), Ok(state));
            assert_eq!(state.to_string(), state.as_str());
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
            assert_eq!(serde_json::from_str::<WorkerState>(&json).unwrap(), state);
        }
        assert!("Pending".parse::<WorkerState>().is_err());
        assert!("".parse::<WorkerState>().is_err());
    }

    #[test]
    fn only_completed_failed_killed_are_terminal() {
        let terminal: Vec<_> = WorkerState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [
                WorkerState::Completed,
                WorkerState::Failed,
                WorkerState::Killed
            ]
        );
    }

    #[test]
    fn generated_ids_parse_and_differ() {
        let a = WorkerId::generate();
        let b = WorkerId::generate();
        assert_ne!(a, b);
        assert_eq!(WorkerId::parse(a.as_str()), Ok(a.clone()));
        assert_eq!(a.as_str().len(), 4 + 32);
        assert_eq!(a.to_string(), a.as_str());
    }

    #[test]
    fn a_later_id_sorts_later() {
        let ids: Vec<WorkerId> = (0..1000).map(|_| WorkerId::generate()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn parse_rejects_malformed_ids() {
        let good = "wkr_0123456789abcdef0123456789abcdef";
        assert!(WorkerId::parse(good).is_ok());
        for bad in [
            "",
            "wkr_",
            "0123456789abcdef0123456789abcdef",
            "wkr_0123456789ABCDEF0123456789abcdef",
            "wkr_0123456789abcdef0123456789abcde",
            "wkr_0123456789abcdef0123456789abcdef0",
            "wkr_0123456789abcdef0123456789abcdeg",
            " wkr_0123456789abcdef0123456789abcdef",
            "WKR_0123456789abcdef0123456789abcdef",
            "wkr-0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(
                WorkerId::parse(bad),
                Err(InvalidWorkerId(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn worker_id_deserialization_validates() {
        let ok: WorkerId =
            serde_json::from_str("\"wkr_0123456789abcdef0123456789abcdef\"").unwrap();
        assert_eq!(ok.as_str(), "wkr_0123456789abcdef0123456789abcdef");
        assert!(serde_json::from_str::<WorkerId>("\"nope\"").is_err());
    }

    #[test]
    fn tokens_are_random_and_hash_to_hex_sha256() {
        let a = generate_token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, generate_token());
        // Known SHA-256 of "abc".
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hash_token(&a).len(), 64);
    }
}
