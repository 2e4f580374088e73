//! ReportProgress (docs/workers.md §6.9): the calling worker is the one of its own
//! `x-agentry-worker-token`; the request becomes a domain [`Progress`] after the bounds are
//! checked. The same validation serves a runner's `progress` message (§10).

use std::sync::Arc;

use tonic::{Code, Request, Status};

use super::{
    pb,
    status::{Violations, with_info},
    workers,
};
use crate::workers::{
    model::{Progress, ProgressKind},
    supervisor::Supervisor,
};

/// Largest accepted progress `text`, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Largest accepted progress `data_json`, in bytes.
pub const MAX_DATA_JSON_BYTES: usize = 64 * 1024;

/// Validates the fields of a progress report (kind, text, data_json) into the domain value;
/// every problem is added to `v` under `prefix` + the field name.
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
        Ok(pb::ProgressKind::Unspecified) => {
            v.add(
                &field("kind"),
                "must be set (PROGRESS_KIND_TEXT, _TOOL_CALL, _TOOL_RESULT or _STATUS)",
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
    if data_json.len() > MAX_DATA_JSON_BYTES {
        v.add(
            &field("data_json"),
            format!(
                "is {} bytes; the limit is {MAX_DATA_JSON_BYTES} bytes",
                data_json.len()
            ),
        );
    } else if !data_json.is_empty()
        && let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&data_json)
    {
        v.add(&field("data_json"), format!("is not valid JSON: {e}"));
    }
    Progress {
        kind,
        text,
        data_json: (!data_json.is_empty()).then_some(data_json),
    }
}

/// The proto form of a progress report.
pub fn to_pb(p: &Progress) -> pb::Progress {
    pb::Progress {
        kind: (match p.kind {
            ProgressKind::Text => pb::ProgressKind::Text,
            ProgressKind::ToolCall => pb::ProgressKind::ToolCall,
            ProgressKind::ToolResult => pb::ProgressKind::ToolResult,
            ProgressKind::Status => pb::ProgressKind::Status,
        }) as i32,
        text: p.text.clone(),
        data_json: p.data_json.clone().unwrap_or_default(),
    }
}

/// ReportProgress.
pub async fn report(
    sup: &Arc<Supervisor>,
    req: Request<pb::ReportProgressRequest>,
) -> Result<pb::ReportProgressResponse, Status> {
    let mut v = Violations::default();
    let principal = req
        .extensions()
        .get::<crate::auth::Principal>()
        .map(|p| p.0.clone());
    let id = workers::identity(req.metadata(), principal, &mut v);
    let r = req.into_inner();
    let p = progress("", r.kind, r.text, r.data_json, &mut v);
    v.check()?;
    let Some(token) = id.worker_token else {
        return Err(with_info(
            Code::Unauthenticated,
            "WORKER_TOKEN_REQUIRED",
            "ReportProgress needs the calling worker's own x-agentry-worker-token",
            &[],
        ));
    };
    let ev = sup.report_progress_by_token(&token, p).await?;
    Ok(pb::ReportProgressResponse {
        sequence: ev.sequence,
    })
}
