//! Requests → domain values: every `TryFrom` conversion of a request message, the bounds it
//! checks, who is calling (from metadata and the request's principal), and quoting of
//! caller-supplied values in error messages (docs/operations.md §8.2).
//!
//! A leaf of `grpc/`: it depends on the domain's request types, on [`metadata`] and on
//! [`Violations`]. A conversion collects every problem of the request, so one
//! `INVALID_ARGUMENT` names them all.

use std::time::Duration;

use tonic::Request;

use super::{metadata, pb, status::Violations};
use crate::{
    app::{CommandRequest, Limits, ResolveQuery, StopRequest, WatchRequest},
    paging::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, PageRequest},
    persona::MAX_NAME_BYTES,
    resolve::{
        Mode,
        listing::{AgentQuery, CommandQuery, View},
    },
    review::{Proposal, ToolClass},
    workers::{
        model::{Progress, ProgressKind, WorkerId, WorkerState},
        store::ParentFilter,
        supervisor::{Identity, SendRequest, SpawnRequest, WorkersQuery},
    },
};

/// Longest accepted worker id, in bytes (`wkr_` and 32 hex digits are 36).
pub const MAX_ID_BYTES: usize = 64;
/// Most bytes of a caller's value an error message quotes.
pub const MAX_QUOTED_BYTES: usize = 128;
/// Longest accepted workspace path, in bytes.
pub const MAX_WORKSPACE_BYTES: usize = 4096;
/// Largest accepted request output schema, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// Longest accepted description (and stop reason), in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest accepted request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 256;
/// Longest accepted per-request timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Longest accepted text field of a review proposal, in bytes.
pub const MAX_FIELD_BYTES: usize = 4096;
/// Longest accepted `arguments_json` of a review proposal, in bytes.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;
/// Largest accepted progress `text`, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Largest accepted progress `data_json`, in bytes.
pub const MAX_DATA_JSON_BYTES: usize = 64 * 1024;
/// Longest accepted `data_json` of an artifact chunk: room for one inline file of
/// `artifacts::MAX_FILE_BYTES`, base64.
pub const MAX_ARTIFACT_CHUNK_BYTES: usize = 512 * 1024;
/// Longest accepted value of `x-agentry-worker-token` and `traceparent`, in bytes.
pub const MAX_TOKEN_BYTES: usize = 512;

/// A request message with the configured limits it is checked against (prompts, arguments).
pub struct Limited<M>(pub M, pub Limits);

/// Splits a call into who is calling and its validated domain request; every problem of the
/// metadata and of the message is reported at once.
pub fn parse<M, D>(req: Request<M>) -> Result<(Identity, D), tonic::Status>
where
    D: TryFrom<M, Error = Violations>,
{
    let mut v = Violations::default();
    let id = identity(&req, &mut v);
    match D::try_from(req.into_inner()) {
        Ok(d) => v.check().map(|()| (id, d)),
        Err(more) => {
            v.extend(more);
            Err(v.into_status())
        }
    }
}

/// [`parse`] for a message checked against the configured limits.
pub fn parse_limited<M, D>(req: Request<M>, limits: Limits) -> Result<(Identity, D), tonic::Status>
where
    D: TryFrom<Limited<M>, Error = Violations>,
{
    parse(req.map(|m| Limited(m, limits)))
}

/// Who is calling: the authenticated principal (when authentication is on) and what the
/// metadata declares; problems are added to `v`.
pub fn identity<M>(req: &Request<M>, v: &mut Violations) -> Identity {
    let md = req.metadata();
    let principal = req
        .extensions()
        .get::<crate::auth::Principal>()
        .map(|p| p.0.to_string());
    let text = |key: &metadata::Key, v: &mut Violations| -> Option<String> {
        let val = metadata::single(md, key, v)?;
        let key = key.as_str();
        match val.to_str() {
            Ok(s) if s.len() <= MAX_TOKEN_BYTES => Some(s.to_owned()),
            Ok(_) => {
                v.add(key, format!("is longer than {MAX_TOKEN_BYTES} bytes"));
                None
            }
            Err(_) => {
                v.add(key, "must be printable ASCII");
                None
            }
        }
    };
    let (declared, worker_token, traceparent) = if metadata::carries_any(md) {
        (
            metadata::declared(md, v),
            text(&metadata::WORKER_TOKEN, v),
            text(&metadata::TRACEPARENT, v),
        )
    } else {
        Default::default()
    };
    Identity {
        authenticated: principal.is_some(),
        principal: principal.unwrap_or_else(|| crate::auth::Principal::ANONYMOUS.to_owned()),
        worker_token,
        declared,
        traceparent,
        worker: req
            .extensions()
            .get::<std::sync::Arc<crate::workers::supervisor::CallingWorker>>()
            .cloned(),
    }
}

/// `value` as an error message may show it: at most [`MAX_QUOTED_BYTES`] bytes (cut on a
/// character boundary, with `…` when cut), control characters escaped, in double quotes.
pub fn quote(value: &str) -> String {
    let mut end = value.len().min(MAX_QUOTED_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 8);
    out.push('"');
    for c in value[..end].chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out.push('"');
    if end < value.len() {
        out.push('…');
    }
    out
}

/// Checks a one-line text field: at most `max` bytes and no NUL or control characters (names,
/// ids, descriptions, request ids). Returns whether it passed.
pub fn check_line(field: &str, value: &str, max: usize, v: &mut Violations) -> bool {
    if value.len() > max {
        v.add(
            field,
            format!("is {} bytes; the limit is {max} bytes", value.len()),
        );
        false
    } else if let Some(c) = value.chars().find(|c| c.is_control()) {
        v.add(
            field,
            format!(
                "must not contain control characters (found {} in {})",
                c.escape_default(),
                quote(value)
            ),
        );
        false
    } else {
        true
    }
}

/// Reads a required worker id: bounded, printable, well-formed.
pub fn worker_id(field: &str, s: &str, v: &mut Violations) -> Option<WorkerId> {
    if s.is_empty() {
        v.add(field, "must not be empty");
        return None;
    }
    if !check_line(field, s, MAX_ID_BYTES, v) {
        return None;
    }
    match WorkerId::parse(s) {
        Ok(id) => Some(id),
        Err(_) => {
            v.add(
                field,
                format!(
                    "{} is not a worker id (expected wkr_ followed by 32 hex digits)",
                    quote(s)
                ),
            );
            None
        }
    }
}

/// Checks a request workspace: bounded, absolute when given.
pub fn check_workspace(ws: &str, v: &mut Violations) {
    if ws.len() > MAX_WORKSPACE_BYTES {
        v.add(
            "workspace",
            format!("is {} bytes; the limit is {MAX_WORKSPACE_BYTES}", ws.len()),
        );
    } else if !ws.is_empty() && !ws.starts_with('/') {
        v.add("workspace", format!("must be an absolute path, got {ws:?}"));
    } else if ws.contains('\0') {
        v.add("workspace", "must not contain NUL");
    }
}

/// Checks a required agent or command name.
fn check_name(field: &str, name: &str, v: &mut Violations) {
    if name.is_empty() {
        v.add(field, "must not be empty");
    } else {
        check_line(field, name, MAX_NAME_BYTES, v);
    }
}

/// Parses a request output schema: JSON text, bounded, and a usable JSON Schema — the same
/// check for `ResolveAgent` and `SpawnWorker`, so what one accepts the other runs.
fn parse_schema(field: &str, s: &str, v: &mut Violations) -> Option<serde_json::Value> {
    if s.len() > MAX_SCHEMA_BYTES {
        v.add(
            field,
            format!("is {} bytes; the limit is {MAX_SCHEMA_BYTES}", s.len()),
        );
        return None;
    }
    match crate::schema::check_schema(s) {
        Ok(val) => Some(val),
        Err(e) => {
            v.add(field, e.to_string());
            None
        }
    }
}

/// Reads the mode enum.
fn parse_mode(m: i32, v: &mut Violations) -> Mode {
    match pb::Mode::try_from(m) {
        Ok(pb::Mode::Plan) => Mode::Plan,
        Ok(_) => Mode::Default,
        Err(_) => {
            v.add("mode", format!("unknown mode {m}"));
            Mode::Default
        }
    }
}

/// Reads the mode and the request output schema: `ResolveAgent` and `SpawnWorker` check them
/// the same way, so what one accepts the other runs.
fn mode_and_schema(
    mode: i32,
    schema: Option<&str>,
    v: &mut Violations,
) -> (Mode, Option<serde_json::Value>) {
    let mode = parse_mode(mode, v);
    let schema = schema.and_then(|s| parse_schema("output_schema", s, v));
    (mode, schema)
}

/// Reads `page_size` (0 = the default, 1..=max) and `page_token`.
fn page(size: i32, token: String, v: &mut Violations) -> PageRequest {
    let size = match usize::try_from(size) {
        Ok(0) => DEFAULT_PAGE_SIZE,
        Ok(n) if n <= MAX_PAGE_SIZE => n,
        _ => {
            v.add(
                "page_size",
                format!("must be between 0 and {MAX_PAGE_SIZE}, got {size}"),
            );
            DEFAULT_PAGE_SIZE
        }
    };
    PageRequest { size, token }
}

/// Checks a prompt-sized field against `limits.max_prompt_bytes`.
fn check_prompt_bytes(field: &str, s: &str, limits: Limits, v: &mut Violations) {
    let max = limits.max_prompt_bytes;
    if s.len() > max {
        v.add(
            field,
            format!(
                "is {} bytes; the limit (limits.max_prompt_bytes) is {max}",
                s.len()
            ),
        );
    }
}

/// Reads a per-request timeout: positive, at most [`MAX_TIMEOUT`].
fn timeout(d: Option<prost_types::Duration>, v: &mut Violations) -> Option<Duration> {
    let d = d?;
    if d.seconds < 0 || d.nanos < 0 {
        v.add("timeout", "must not be negative");
        return None;
    }
    if d.seconds == 0 && d.nanos == 0 {
        v.add(
            "timeout",
            "must be positive (omit it for the configured default)",
        );
        return None;
    }
    let dur = Duration::new(d.seconds as u64, d.nanos.clamp(0, 999_999_999) as u32);
    if dur > MAX_TIMEOUT {
        v.add(
            "timeout",
            format!(
                "must be at most {}",
                humantime::format_duration(MAX_TIMEOUT)
            ),
        );
        return None;
    }
    Some(dur)
}

impl TryFrom<pb::ListAgentsRequest> for AgentQuery {
    type Error = Violations;

    fn try_from(r: pb::ListAgentsRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        check_workspace(&r.workspace, &mut v);
        let view = match pb::AgentView::try_from(r.view) {
            Ok(pb::AgentView::Catalog) => View::Catalog,
            Ok(_) => View::Full,
            Err(_) => {
                v.add("view", format!("unknown view {}", r.view));
                View::Full
            }
        };
        let page = page(r.page_size, r.page_token, &mut v);
        v.or(Self {
            workspace: r.workspace,
            view,
            include_shadowed: r.include_shadowed,
            page,
        })
    }
}

impl TryFrom<pb::ResolveAgentRequest> for ResolveQuery {
    type Error = Violations;

    fn try_from(r: pb::ResolveAgentRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        check_name("name", &r.name, &mut v);
        check_workspace(&r.workspace, &mut v);
        let (mode, output_schema) = mode_and_schema(r.mode, r.output_schema.as_deref(), &mut v);
        v.or(Self {
            name: r.name,
            workspace: r.workspace,
            mode,
            output_schema,
        })
    }
}

/// The workspace a `ReloadAgents` rebuilds.
pub struct Workspace(pub String);

impl TryFrom<pb::ReloadAgentsRequest> for Workspace {
    type Error = Violations;

    fn try_from(r: pb::ReloadAgentsRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        check_workspace(&r.workspace, &mut v);
        v.or(Self(r.workspace))
    }
}

/// The age bound of a `PruneWorktrees`.
pub struct OlderThan(pub Duration);

impl TryFrom<pb::PruneWorktreesRequest> for OlderThan {
    type Error = Violations;

    fn try_from(r: pb::PruneWorktreesRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        match r.older_than {
            None => v.add(
                "older_than",
                "is required (0s prunes every finished worker's)",
            ),
            Some(d) if d.seconds < 0 || d.nanos < 0 => v.add("older_than", "must not be negative"),
            Some(d) => {
                return v.or(Self(Duration::new(
                    d.seconds as u64,
                    d.nanos.clamp(0, 999_999_999) as u32,
                )));
            }
        }
        Err(v)
    }
}

impl TryFrom<Limited<pb::SpawnWorkerRequest>> for SpawnRequest {
    type Error = Violations;

    fn try_from(Limited(r, limits): Limited<pb::SpawnWorkerRequest>) -> Result<Self, Violations> {
        let mut v = Violations::default();
        check_name("agent", &r.agent, &mut v);
        if r.prompt.trim().is_empty() {
            v.add("prompt", "must not be empty");
        } else {
            check_prompt_bytes("prompt", &r.prompt, limits, &mut v);
        }
        check_line("description", &r.description, MAX_DESCRIPTION_BYTES, &mut v);
        check_workspace(&r.workspace, &mut v);
        let (mode, output_schema) = mode_and_schema(r.mode, r.output_schema.as_deref(), &mut v);
        check_line("request_id", &r.request_id, MAX_REQUEST_ID_BYTES, &mut v);
        let timeout = timeout(r.timeout, &mut v);
        let isolation = match pb::Isolation::try_from(r.isolation) {
            Ok(pb::Isolation::Unspecified) => None,
            Ok(pb::Isolation::None) => Some(false),
            Ok(pb::Isolation::Worktree) => Some(true),
            Err(_) => {
                v.add("isolation", format!("unknown isolation {}", r.isolation));
                None
            }
        };
        v.or(Self {
            agent: r.agent,
            description: r.description,
            prompt: r.prompt,
            workspace: r.workspace,
            mode,
            output_schema,
            wait: r.wait,
            request_id: (!r.request_id.is_empty()).then_some(r.request_id),
            timeout,
            isolation,
            interactive: r.interactive,
            context_id: None,
            a2a_message: None,
        })
    }
}

impl TryFrom<Limited<pb::SendWorkerMessageRequest>> for SendRequest {
    type Error = Violations;

    fn try_from(
        Limited(r, limits): Limited<pb::SendWorkerMessageRequest>,
    ) -> Result<Self, Violations> {
        let mut v = Violations::default();
        let id = worker_id("worker_id", &r.worker_id, &mut v);
        if r.text.trim().is_empty() {
            v.add("text", "must not be empty");
        } else {
            check_prompt_bytes("text", &r.text, limits, &mut v);
        }
        if r.text.contains('\0') {
            v.add("text", "must not contain NUL");
        }
        check_line("request_id", &r.request_id, MAX_REQUEST_ID_BYTES, &mut v);
        let interrupt = match pb::Delivery::try_from(r.delivery) {
            Ok(pb::Delivery::Unspecified | pb::Delivery::Queue) => false,
            Ok(pb::Delivery::Interrupt) => true,
            Err(_) => {
                v.add("delivery", format!("unknown delivery {}", r.delivery));
                false
            }
        };
        match id {
            Some(worker_id) => v.or(Self {
                worker_id,
                text: r.text,
                interrupt,
                wait: r.wait,
                request_id: (!r.request_id.is_empty()).then_some(r.request_id),
            }),
            None => Err(v),
        }
    }
}

impl TryFrom<pb::StopWorkerRequest> for StopRequest {
    type Error = Violations;

    fn try_from(r: pb::StopWorkerRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        let id = worker_id("worker_id", &r.worker_id, &mut v);
        if r.reason.len() > MAX_DESCRIPTION_BYTES {
            v.add(
                "reason",
                format!("is longer than {MAX_DESCRIPTION_BYTES} bytes"),
            );
        } else if r.reason.contains('\0') {
            v.add("reason", "must not contain NUL");
        }
        match id {
            Some(worker_id) => v.or(Self {
                worker_id,
                reason: r.reason,
            }),
            None => Err(v),
        }
    }
}

impl TryFrom<pb::GetWorkerRequest> for WorkerId {
    type Error = Violations;

    fn try_from(r: pb::GetWorkerRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        worker_id("worker_id", &r.worker_id, &mut v).ok_or(v)
    }
}

impl TryFrom<pb::WatchWorkerRequest> for WatchRequest {
    type Error = Violations;

    fn try_from(r: pb::WatchWorkerRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        match worker_id("worker_id", &r.worker_id, &mut v) {
            Some(worker_id) => Ok(Self {
                worker_id,
                after_sequence: r.after_sequence,
            }),
            None => Err(v),
        }
    }
}

/// Reads a proto worker state; `None` for unspecified or unknown values.
fn worker_state(s: i32) -> Option<WorkerState> {
    match pb::WorkerState::try_from(s).ok()? {
        pb::WorkerState::Pending => Some(WorkerState::Pending),
        pb::WorkerState::Running => Some(WorkerState::Running),
        pb::WorkerState::Completed => Some(WorkerState::Completed),
        pb::WorkerState::Failed => Some(WorkerState::Failed),
        pb::WorkerState::Killed => Some(WorkerState::Killed),
        pb::WorkerState::InputRequired => Some(WorkerState::InputRequired),
        pb::WorkerState::Unspecified => None,
    }
}

impl TryFrom<pb::ListWorkersRequest> for WorkersQuery {
    type Error = Violations;

    fn try_from(r: pb::ListWorkersRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        let parent = if r.parent_id.is_empty() {
            ParentFilter::Any
        } else {
            match WorkerId::parse(&r.parent_id) {
                Ok(id) => ParentFilter::Worker(id),
                Err(_) => {
                    v.add(
                        "parent_id",
                        format!("{} is not a worker id", quote(&r.parent_id)),
                    );
                    ParentFilter::Any
                }
            }
        };
        let mut states = Vec::new();
        for s in &r.states {
            match worker_state(*s) {
                Some(state) => states.push(state),
                None => v.add("states", format!("unknown or unspecified state {s}")),
            }
        }
        let page = page(r.page_size, r.page_token, &mut v);
        v.or(Self {
            parent,
            states,
            page,
            context_id: None,
            agent: None,
            newest_first: false,
        })
    }
}

impl TryFrom<pb::ReviewRequest> for Proposal {
    type Error = Violations;

    fn try_from(r: pb::ReviewRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        let class = match pb::ToolClass::try_from(r.tool_class) {
            Ok(pb::ToolClass::Unspecified | pb::ToolClass::Read) => ToolClass::Read,
            Ok(pb::ToolClass::Write) => ToolClass::Write,
            Ok(pb::ToolClass::Destructive) => ToolClass::Destructive,
            Err(_) => {
                v.add("tool_class", format!("unknown tool class {}", r.tool_class));
                ToolClass::Read
            }
        };
        for (field, value) in [
            ("tool", &r.tool),
            ("action", &r.action),
            ("target", &r.target),
            ("reason", &r.reason),
            ("blast_radius", &r.blast_radius),
            ("operator", &r.operator),
        ] {
            if value.len() > MAX_FIELD_BYTES {
                v.add(
                    field,
                    format!("is {} bytes; the limit is {MAX_FIELD_BYTES}", value.len()),
                );
            }
        }
        if class != ToolClass::Read && r.tool.trim().is_empty() {
            v.add("tool", "must not be empty for write and destructive tools");
        }
        let arguments = if r.arguments_json.len() > MAX_ARGUMENTS_BYTES {
            v.add(
                "arguments_json",
                format!(
                    "is {} bytes; the limit is {MAX_ARGUMENTS_BYTES}",
                    r.arguments_json.len()
                ),
            );
            None
        } else if r.arguments_json.trim().is_empty() {
            None
        } else {
            match serde_json::from_str::<serde_json::Value>(&r.arguments_json) {
                Ok(val) => Some(val),
                Err(e) => {
                    v.add("arguments_json", format!("is not JSON: {e}"));
                    None
                }
            }
        };
        check_workspace(&r.workspace, &mut v);
        v.or(Self {
            tool: r.tool,
            class,
            action: r.action,
            target: r.target,
            reason: r.reason,
            blast_radius: r.blast_radius,
            operator: r.operator,
            arguments,
            workspace: r.workspace,
        })
    }
}

impl TryFrom<pb::ListCommandsRequest> for CommandQuery {
    type Error = Violations;

    fn try_from(r: pb::ListCommandsRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        check_workspace(&r.workspace, &mut v);
        let page = page(r.page_size, r.page_token, &mut v);
        v.or(Self {
            workspace: r.workspace,
            include_shadowed: r.include_shadowed,
            page,
        })
    }
}

impl TryFrom<Limited<pb::ResolveCommandRequest>> for CommandRequest {
    type Error = Violations;

    fn try_from(
        Limited(r, limits): Limited<pb::ResolveCommandRequest>,
    ) -> Result<Self, Violations> {
        let mut v = Violations::default();
        check_name("name", &r.name, &mut v);
        check_workspace(&r.workspace, &mut v);
        check_prompt_bytes("arguments", &r.arguments, limits, &mut v);
        v.or(Self {
            name: r.name,
            workspace: r.workspace,
            arguments: r.arguments,
        })
    }
}

impl TryFrom<pb::ReportProgressRequest> for Progress {
    type Error = Violations;

    fn try_from(r: pb::ReportProgressRequest) -> Result<Self, Violations> {
        let mut v = Violations::default();
        let p = progress("", r.kind, r.text, r.data_json, &mut v);
        v.or(p)
    }
}

/// Validates the fields of a progress report (kind, text, data_json) into the domain value;
/// every problem is added to `v` under `prefix` + the field name. `ReportProgress` and a
/// runner's `progress` message (docs/runners.md §10) share it.
pub fn progress(
    prefix: &str,
    kind: i32,
    text: String,
    data_json: String,
    v: &mut Violations,
) -> Progress {
    let field = |name: &str| format!("{prefix}{name}");
    let kind = match pb::ProgressKind::try_from(kind) {
        Ok(pb::ProgressKind::Text) => ProgressKind::Text,
        Ok(pb::ProgressKind::ToolCall) => ProgressKind::ToolCall,
        Ok(pb::ProgressKind::ToolResult) => ProgressKind::ToolResult,
        Ok(pb::ProgressKind::Status) => ProgressKind::Status,
        Ok(pb::ProgressKind::Artifact) => ProgressKind::Artifact,
        Ok(pb::ProgressKind::Message) => {
            v.add(
                &field("kind"),
                "PROGRESS_KIND_MESSAGE is reported by agentry when it delivers a message; report PROGRESS_KIND_TEXT, _TOOL_CALL, _TOOL_RESULT, _STATUS or _ARTIFACT",
            );
            ProgressKind::Text
        }
        Ok(pb::ProgressKind::Unspecified) => {
            v.add(
                &field("kind"),
                "must be set (PROGRESS_KIND_TEXT, _TOOL_CALL, _TOOL_RESULT, _STATUS or _ARTIFACT)",
            );
            ProgressKind::Text
        }
        Err(_) => {
            v.add(&field("kind"), format!("unknown progress kind {kind}"));
            ProgressKind::Text
        }
    };
    if text.len() > MAX_TEXT_BYTES {
        v.add(
            &field("text"),
            format!(
                "is {} bytes; the limit is {MAX_TEXT_BYTES} bytes",
                text.len()
            ),
        );
    }
    let max = if kind == ProgressKind::Artifact {
        MAX_ARTIFACT_CHUNK_BYTES
    } else {
        MAX_DATA_JSON_BYTES
    };
    if data_json.len() > max {
        v.add(
            &field("data_json"),
            format!("is {} bytes; the limit is {max} bytes", data_json.len()),
        );
    } else if !data_json.is_empty()
        && let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&data_json)
    {
        v.add(&field("data_json"), format!("is not valid JSON: {e}"));
    } else if kind == ProgressKind::Artifact {
        // The chunk itself (docs §13.1): checked here, assembled by the store.
        if let Err(e) = crate::workers::artifacts::parse_chunk(&data_json) {
            v.add(
                &field("data_json"),
                format!("is not an artifact chunk: {e}"),
            );
        }
    }
    Progress {
        kind,
        text,
        data_json: (!data_json.is_empty()).then_some(data_json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_bounds_and_escapes() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\u{0}b\nc\u{1b}"), "\"a\\u{0}b\\nc\\u{1b}\"");
        let long = "é".repeat(200);
        let q = quote(&long);
        assert!(q.len() <= MAX_QUOTED_BYTES + 8, "{}", q.len());
        assert!(q.ends_with('…'));
    }

    #[test]
    fn lines_refuse_control_characters_and_length() {
        let mut v = Violations::default();
        assert!(check_line("f", "fine text", 64, &mut v));
        assert!(!check_line("f", "tab\there", 64, &mut v));
        assert!(!check_line("f", &"x".repeat(65), 64, &mut v));
        assert!(v.check().is_err());
    }

    #[test]
    fn worker_ids_are_bounded_before_they_are_quoted() {
        let refused = |s: &str| {
            let mut v = Violations::default();
            assert!(worker_id("worker_id", s, &mut v).is_none());
            v.into_status()
        };
        let err = refused(&"x".repeat(1_000_000));
        assert!(err.message().len() < 300, "{}", err.message().len());
        assert!(err.message().contains("the limit is 64 bytes"));
        let err = refused("wkr_\u{1b}[31m");
        assert!(
            err.message().contains("control characters"),
            "{}",
            err.message()
        );
    }
}
