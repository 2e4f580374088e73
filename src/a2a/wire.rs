//! The A2A JSON shapes in both dialects (docs/a2a.md §13.2): v1.0 is the ProtoJSON of
//! `lf.a2a.v1` (camelCase, enum names such as `TASK_STATE_COMPLETED`, parts without a kind), v0.3
//! is the earlier JSON (a `kind` on every object, states such as `input-required`). Workers are
//! rendered as tasks here, and incoming messages read into what a spawn or a message needs.

use std::time::{Duration, UNIX_EPOCH};

use axum::http::HeaderMap;
use serde_json::{Map, Value, json};

use super::error::{A2aError, Kind};
use crate::workers::{
    artifacts::{Artifact, Part},
    model::{WorkerRecord, WorkerState},
};

/// The header that selects the dialect.
pub const VERSION_HEADER: &str = "a2a-version";

/// Largest accepted `messageId`, `contextId` or `taskId`, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Which A2A version a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// 0.3: no `A2A-Version` header, or `0.3`.
    V03,
    /// 1.0: `A2A-Version: 1.0`.
    V1,
}

impl Dialect {
    /// The dialect of a request: absent header = 0.3 (the spec's rule); `0.3`, `0.3.x`, `1.0`,
    /// `1.0.x`; anything else is `VersionNotSupportedError`.
    pub fn of(headers: &HeaderMap) -> Result<Self, A2aError> {
        let Some(value) = headers.get(VERSION_HEADER) else {
            return Ok(Dialect::V03);
        };
        let v = value.to_str().unwrap_or("").trim();
        let major_minor = |want: &str| {
            v == want
                || v.strip_prefix(want).is_some_and(|rest| {
                    rest.strip_prefix('.')
                        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                })
        };
        if major_minor("1.0") {
            Ok(Dialect::V1)
        } else if major_minor("0.3") {
            Ok(Dialect::V03)
        } else {
            Err(A2aError::new(
                Kind::VersionNotSupported,
                format!(
                    "A2A-Version {} is not supported; this server speaks 1.0 and 0.3 (no header = 0.3)",
                    crate::grpc::request::quote(v)
                ),
            ))
        }
    }
}

/// An A2A task state.
fn state_name(d: Dialect, w: &WorkerRecord) -> &'static str {
    match (d, w.state) {
        (Dialect::V1, WorkerState::Pending) => "TASK_STATE_SUBMITTED",
        (Dialect::V1, WorkerState::Running) => "TASK_STATE_WORKING",
        (Dialect::V1, WorkerState::InputRequired) => "TASK_STATE_INPUT_REQUIRED",
        (Dialect::V1, WorkerState::Completed) => "TASK_STATE_COMPLETED",
        (Dialect::V1, WorkerState::Failed) if w.rejected => "TASK_STATE_REJECTED",
        (Dialect::V1, WorkerState::Failed) => "TASK_STATE_FAILED",
        (Dialect::V1, WorkerState::Killed) => "TASK_STATE_CANCELED",
        (Dialect::V03, WorkerState::Pending) => "submitted",
        (Dialect::V03, WorkerState::Running) => "working",
        (Dialect::V03, WorkerState::InputRequired) => "input-required",
        (Dialect::V03, WorkerState::Completed) => "completed",
        (Dialect::V03, WorkerState::Failed) if w.rejected => "rejected",
        (Dialect::V03, WorkerState::Failed) => "failed",
        (Dialect::V03, WorkerState::Killed) => "canceled",
    }
}

/// The worker state a `ListTasks` status filter names (either dialect's spelling).
pub fn state_filter(name: &str) -> Result<Option<WorkerState>, A2aError> {
    Ok(Some(match name {
        "" | "TASK_STATE_UNSPECIFIED" => return Ok(None),
        "TASK_STATE_SUBMITTED" | "submitted" => WorkerState::Pending,
        "TASK_STATE_WORKING" | "working" => WorkerState::Running,
        "TASK_STATE_INPUT_REQUIRED" | "input-required" => WorkerState::InputRequired,
        "TASK_STATE_COMPLETED" | "completed" => WorkerState::Completed,
        "TASK_STATE_FAILED" | "failed" | "TASK_STATE_REJECTED" | "rejected" => WorkerState::Failed,
        "TASK_STATE_CANCELED" | "canceled" => WorkerState::Killed,
        other => {
            return Err(A2aError::params(
                "status",
                format!(
                    "{} is not a task state this server has (SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELED)",
                    crate::grpc::request::quote(other)
                ),
            ));
        }
    }))
}

/// RFC 3339 time of unix milliseconds.
fn timestamp(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A text part.
pub fn text_part(d: Dialect, text: &str) -> Value {
    match d {
        Dialect::V1 => json!({"text": text}),
        Dialect::V03 => json!({"kind": "text", "text": text}),
    }
}

/// A JSON data part.
fn data_part(d: Dialect, data: Value) -> Value {
    match d {
        Dialect::V1 => json!({"data": data, "mediaType": "application/json"}),
        // 0.3 data parts hold an object.
        Dialect::V03 => {
            let data = if data.is_object() {
                data
            } else {
                json!({"value": data})
            };
            json!({"kind": "data", "data": data})
        }
    }
}

/// A message of the agent or the user, about task `w`.
pub fn message(d: Dialect, w: &WorkerRecord, id: &str, user: bool, parts: Vec<Value>) -> Value {
    let mut m = Map::new();
    if d == Dialect::V03 {
        m.insert("kind".into(), "message".into());
    }
    m.insert("messageId".into(), id.into());
    if let Some(ctx) = &w.spec.context_id {
        m.insert("contextId".into(), ctx.as_str().into());
    }
    m.insert("taskId".into(), w.id.as_str().into());
    let role = match (d, user) {
        (Dialect::V1, true) => "ROLE_USER",
        (Dialect::V1, false) => "ROLE_AGENT",
        (Dialect::V03, true) => "user",
        (Dialect::V03, false) => "agent",
    };
    m.insert("role".into(), role.into());
    m.insert("parts".into(), Value::Array(parts));
    Value::Object(m)
}

/// The task status: its state, the message that goes with it (the question, the error) and
/// when it was reached.
pub fn status(d: Dialect, w: &WorkerRecord) -> Value {
    let mut s = Map::new();
    s.insert("state".into(), state_name(d, w).into());
    let said = match w.state {
        WorkerState::InputRequired => w.question.as_deref(),
        WorkerState::Failed | WorkerState::Killed => w.error.as_deref(),
        _ => None,
    };
    if let Some(text) = said {
        let id = format!("{}-status-{}", w.id, w.sequence);
        s.insert(
            "message".into(),
            message(d, w, &id, false, vec![text_part(d, text)]),
        );
    }
    let at = w.close_time_ms.unwrap_or(w.last_activity_ms);
    s.insert("timestamp".into(), timestamp(at).into());
    Value::Object(s)
}

/// A part of an artifact in dialect `d`.
fn artifact_part(d: Dialect, p: &Part) -> Value {
    match p {
        Part::Text(t) => text_part(d, t),
        Part::Data(v) => data_part(d, v.clone()),
        Part::File(f) => {
            let mut file = Map::new();
            match d {
                Dialect::V1 => {
                    if let Some(b) = &f.bytes {
                        file.insert("raw".into(), b.as_str().into());
                    }
                    if let Some(u) = &f.uri {
                        file.insert("url".into(), u.as_str().into());
                    }
                    if !f.name.is_empty() {
                        file.insert("filename".into(), f.name.as_str().into());
                    }
                    if !f.media_type.is_empty() {
                        file.insert("mediaType".into(), f.media_type.as_str().into());
                    }
                    Value::Object(file)
                }
                Dialect::V03 => {
                    if let Some(b) = &f.bytes {
                        file.insert("bytes".into(), b.as_str().into());
                    }
                    if let Some(u) = &f.uri {
                        file.insert("uri".into(), u.as_str().into());
                    }
                    if !f.name.is_empty() {
                        file.insert("name".into(), f.name.as_str().into());
                    }
                    if !f.media_type.is_empty() {
                        file.insert("mimeType".into(), f.media_type.as_str().into());
                    }
                    json!({"kind": "file", "file": file})
                }
            }
        }
    }
}

/// An artifact in dialect `d`.
pub fn artifact(d: Dialect, a: &Artifact) -> Value {
    let mut m = Map::new();
    m.insert("artifactId".into(), a.artifact_id.as_str().into());
    if !a.name.is_empty() {
        m.insert("name".into(), a.name.as_str().into());
    }
    if !a.description.is_empty() {
        m.insert("description".into(), a.description.as_str().into());
    }
    m.insert(
        "parts".into(),
        Value::Array(a.parts.iter().map(|p| artifact_part(d, p)).collect()),
    );
    Value::Object(m)
}

/// The artifacts of a worker (docs §13.1): those it reported, then its result once completed.
pub fn artifacts(d: Dialect, w: &WorkerRecord) -> Vec<Value> {
    crate::workers::artifacts::of(w)
        .iter()
        .map(|a| artifact(d, a))
        .collect()
}

/// The task a worker is. `history` bounds the history (`None`: all of it; `Some(0)`: none).
pub fn task(d: Dialect, w: &WorkerRecord, history: Option<usize>) -> Value {
    let mut t = Map::new();
    if d == Dialect::V03 {
        t.insert("kind".into(), "task".into());
    }
    t.insert("id".into(), w.id.as_str().into());
    t.insert(
        "contextId".into(),
        w.spec.context_id.as_deref().unwrap_or("").into(),
    );
    t.insert("status".into(), status(d, w));
    let artifacts = artifacts(d, w);
    if !artifacts.is_empty() {
        t.insert("artifacts".into(), Value::Array(artifacts));
    }
    // The history this server keeps of a task: the message that started it.
    let prompt_id = w
        .spec
        .request_id
        .clone()
        .unwrap_or_else(|| format!("{}-prompt", w.id));
    let all = [message(
        d,
        w,
        &prompt_id,
        true,
        vec![text_part(d, &w.spec.prompt)],
    )];
    let keep = history.unwrap_or(all.len()).min(all.len());
    if keep > 0 {
        t.insert(
            "history".into(),
            Value::Array(all[all.len() - keep..].to_vec()),
        );
    }
    let mut meta = Map::new();
    meta.insert("agent".into(), w.spec.agent.as_str().into());
    if let Some(prev) = &w.spec.continues {
        meta.insert("continues".into(), prev.as_str().into());
    }
    if let Some(next) = &w.continued_by {
        meta.insert("continuedBy".into(), next.as_str().into());
    }
    t.insert("metadata".into(), Value::Object(meta));
    Value::Object(t)
}

/// A status-update event; `last` marks the end of a stream (0.3's `final`).
pub fn status_update(d: Dialect, w: &WorkerRecord, status: Value, last: bool) -> Value {
    let ctx = w.spec.context_id.as_deref().unwrap_or("");
    match d {
        Dialect::V1 => json!({"statusUpdate": {
            "taskId": w.id.as_str(), "contextId": ctx, "status": status,
        }}),
        Dialect::V03 => json!({
            "kind": "status-update", "taskId": w.id.as_str(), "contextId": ctx,
            "status": status, "final": last,
        }),
    }
}

/// An artifact-update event: a whole artifact (`append: false, last: true`) or a chunk.
pub fn artifact_update(
    d: Dialect,
    w: &WorkerRecord,
    artifact: Value,
    append: bool,
    last: bool,
) -> Value {
    let ctx = w.spec.context_id.as_deref().unwrap_or("");
    match d {
        Dialect::V1 => json!({"artifactUpdate": {
            "taskId": w.id.as_str(), "contextId": ctx, "artifact": artifact,
            "append": append, "lastChunk": last,
        }}),
        Dialect::V03 => json!({
            "kind": "artifact-update", "taskId": w.id.as_str(), "contextId": ctx,
            "artifact": artifact, "append": append, "lastChunk": last,
        }),
    }
}

/// A task as the first event of a stream.
pub fn task_event(d: Dialect, w: &WorkerRecord) -> Value {
    match d {
        Dialect::V1 => json!({"task": task(d, w, None)}),
        Dialect::V03 => task(d, w, None),
    }
}

/// What an incoming message asks for, read and bounded.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// `messageId`: the idempotency key.
    pub message_id: String,
    /// `contextId`, if given.
    pub context_id: Option<String>,
    /// `taskId`, if given.
    pub task_id: Option<String>,
    /// `referenceTaskIds`.
    pub reference_task_ids: Vec<String>,
    /// The text and data parts as the prompt: texts as they are, data as JSON, in order.
    pub text: String,
    /// The parts themselves, for the worker's spec (docs §13.3).
    pub parts: Vec<crate::workers::spec::A2aPart>,
    /// The message's `metadata` as JSON text; empty = none.
    pub metadata_json: String,
}

/// How a send wants its answer.
#[derive(Debug, Clone, Copy)]
pub struct SendOptions {
    /// Return at a terminal or interrupted state (the default), or at once.
    pub blocking: bool,
    /// How much history the returned task carries.
    pub history: Option<usize>,
}

/// An id field: a non-empty string of at most [`MAX_ID_BYTES`] bytes without control
/// characters, or absent.
fn id_field(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, A2aError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s.len() > MAX_ID_BYTES => Err(A2aError::params(
            &format!("message.{field}"),
            format!("is {} bytes; at most {MAX_ID_BYTES}", s.len()),
        )),
        Some(Value::String(s)) if s.chars().any(char::is_control) => Err(A2aError::params(
            &format!("message.{field}"),
            "holds control characters",
        )),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(A2aError::params(
            &format!("message.{field}"),
            "must be a string",
        )),
    }
}

/// Reads `params.message` and `params.configuration` of a send, in dialect `d`, bounding the
/// prompt by `max_prompt_bytes`.
pub fn incoming(
    d: Dialect,
    params: &Value,
    max_prompt_bytes: usize,
) -> Result<(Incoming, SendOptions), A2aError> {
    let params = params
        .as_object()
        .ok_or_else(|| A2aError::params("params", "must be an object"))?;
    let msg = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| A2aError::params("message", "is required and must be an object"))?;
    let message_id = id_field(msg, "messageId")?
        .ok_or_else(|| A2aError::params("message.messageId", "is required"))?;
    match (d, msg.get("role").and_then(Value::as_str)) {
        (Dialect::V1, Some("ROLE_USER" | "ROLE_UNSPECIFIED")) | (Dialect::V03, Some("user")) => {}
        (_, None) => {}
        (_, Some(other)) => {
            return Err(A2aError::params(
                "message.role",
                format!(
                    "{} is not the user's role; a client sends messages as {}",
                    crate::grpc::request::quote(other),
                    if d == Dialect::V1 {
                        "ROLE_USER"
                    } else {
                        "user"
                    }
                ),
            ));
        }
    }
    let parts = msg
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| A2aError::params("message.parts", "is required and must be an array"))?;
    let mut text = String::new();
    let mut kept = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let piece = part_text(d, part, i)?;
        kept.push(match part.get("text").and_then(Value::as_str) {
            Some(t) => crate::workers::spec::A2aPart {
                text: Some(t.to_owned()),
                data_json: None,
            },
            None => crate::workers::spec::A2aPart {
                text: None,
                data_json: Some(part.get("data").cloned().unwrap_or(Value::Null).to_string()),
            },
        });
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&piece);
        if text.len() > max_prompt_bytes {
            return Err(A2aError::params(
                "message.parts",
                format!(
                    "hold more than {max_prompt_bytes} bytes; the limit (limits.max_prompt_bytes) is {max_prompt_bytes}"
                ),
            ));
        }
    }
    if text.trim().is_empty() {
        return Err(A2aError::params(
            "message.parts",
            "hold no text or data; a message needs at least one non-empty text or data part",
        ));
    }
    let reference_task_ids = match msg.get("referenceTaskIds") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) if ids.len() <= 16 => ids
            .iter()
            .map(|v| {
                v.as_str()
                    .filter(|s| !s.is_empty() && s.len() <= MAX_ID_BYTES)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        A2aError::params("message.referenceTaskIds", "must hold task ids")
                    })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(A2aError::params(
                "message.referenceTaskIds",
                "must be an array of at most 16 task ids",
            ));
        }
    };
    let config = params.get("configuration").and_then(Value::as_object);
    let blocking = match d {
        Dialect::V1 => !config
            .and_then(|c| c.get("returnImmediately"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Dialect::V03 => config
            .and_then(|c| c.get("blocking"))
            .and_then(Value::as_bool)
            .unwrap_or(true),
    };
    let history = history_length(config.and_then(|c| c.get("historyLength")))?;
    Ok((
        Incoming {
            message_id,
            context_id: id_field(msg, "contextId")?,
            task_id: id_field(msg, "taskId")?,
            reference_task_ids,
            text,
            parts: kept,
            metadata_json: match msg.get("metadata") {
                None | Some(Value::Null) => String::new(),
                Some(m) => m.to_string(),
            },
        },
        SendOptions { blocking, history },
    ))
}

/// `historyLength`: absent = all, else a non-negative count.
pub fn history_length(v: Option<&Value>) -> Result<Option<usize>, A2aError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX)))
            .ok_or_else(|| A2aError::params("historyLength", "must be a non-negative integer")),
    }
}

/// The prompt text of one part: a text part's text, a data part's JSON.
fn part_text(d: Dialect, part: &Value, i: usize) -> Result<String, A2aError> {
    let field = format!("message.parts[{i}]");
    let obj = part
        .as_object()
        .ok_or_else(|| A2aError::params(&field, "must be an object"))?;
    let kind = match d {
        Dialect::V03 => obj.get("kind").and_then(Value::as_str).unwrap_or(""),
        Dialect::V1 => ["text", "data", "raw", "url"]
            .into_iter()
            .find(|k| obj.contains_key(*k))
            .unwrap_or(""),
    };
    match kind {
        "text" => obj
            .get("text")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| A2aError::params(&format!("{field}.text"), "must be a string")),
        "data" => {
            let data = obj.get("data").cloned().unwrap_or(Value::Null);
            Ok(serde_json::to_string_pretty(&data).unwrap_or_default())
        }
        "file" | "raw" | "url" => Err(A2aError::new(
            Kind::ContentTypeNotSupported,
            format!(
                "{field} is a file part; this agent accepts text/plain and application/json parts (its card's defaultInputModes)"
            ),
        )),
        _ => Err(A2aError::params(
            &field,
            match d {
                Dialect::V03 => "has no kind text, data or file",
                Dialect::V1 => "has none of text, data, raw or url",
            },
        )),
    }
}

/// A `WORKING` status carrying a progress line of the worker as the agent's message.
pub fn progress_status(d: Dialect, w: &WorkerRecord, sequence: u64, text: &str, at: i64) -> Value {
    let id = format!("{}-progress-{sequence}", w.id);
    json!({
        "state": if d == Dialect::V1 { "TASK_STATE_WORKING" } else { "working" },
        "message": message(d, w, &id, false, vec![text_part(d, text)]),
        "timestamp": timestamp(at),
    })
}
