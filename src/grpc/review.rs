//! The Review RPC: validates the proposal, runs the gate, converts the verdict. Translation only.

use std::sync::Arc;

use tonic::{Request, Status};

use super::{pb, registry::check_workspace, status::Violations, workers::identity};
use crate::{
    review::{self, Decision, Proposal, ToolClass, Verdict},
    workers::supervisor::Supervisor,
};

/// Longest accepted text field of a proposal, in bytes.
pub const MAX_FIELD_BYTES: usize = 4096;
/// Longest accepted `arguments_json`, in bytes.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;

/// Validates a ReviewRequest into a proposal.
pub fn proposal(r: pb::ReviewRequest, v: &mut Violations) -> Proposal {
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
    check_workspace(&r.workspace, v);
    Proposal {
        tool: r.tool,
        class,
        action: r.action,
        target: r.target,
        reason: r.reason,
        blast_radius: r.blast_radius,
        operator: r.operator,
        arguments,
        workspace: r.workspace,
    }
}

fn response(v: Verdict) -> pb::ReviewResponse {
    pb::ReviewResponse {
        decision: match v.decision {
            Decision::Approve => pb::Decision::Approve,
            Decision::Reject => pb::Decision::Reject,
        } as i32,
        reason: v.reason,
        reviewed: v.reviewed,
        reviewer_worker_id: v.worker_id.unwrap_or_default(),
    }
}

/// Review.
pub async fn review(
    sup: &Arc<Supervisor>,
    req: Request<pb::ReviewRequest>,
) -> Result<pb::ReviewResponse, Status> {
    let mut v = Violations::default();
    let principal = req
        .extensions()
        .get::<crate::auth::Principal>()
        .map(|p| p.0.clone());
    let id = identity(req.metadata(), principal, &mut v);
    let p = proposal(req.into_inner(), &mut v);
    v.check()?;
    Ok(response(review::review(sup, &id, p).await))
}
