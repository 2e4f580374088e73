//! Domain errors → `tonic::Status` with a `google.rpc.ErrorInfo` (domain `agentry.dev`) and, for
//! bad requests, `BadRequest` field violations.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::{
    app,
    discovery::DiscoveryError,
    paging::PageError,
    resolve::{SpawnDenied, command::CommandError},
    workers::supervisor::WorkerError,
};

/// The `ErrorInfo.domain` of every agentry error.
pub const DOMAIN: &str = "agentry.dev";

/// A status with an `ErrorInfo` detail.
pub fn with_info(
    code: Code,
    reason: &str,
    message: impl Into<String>,
    meta: &[(&str, &str)],
) -> Status {
    let metadata: HashMap<String, String> = meta
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, DOMAIN, metadata),
    )
}

/// Collects field violations of one request; empty = valid.
#[derive(Default, Debug)]
pub struct Violations(Vec<FieldViolation>);

impl Violations {
    /// Records one problem with `field`.
    pub fn add(&mut self, field: &str, description: impl Into<String>) {
        self.0.push(FieldViolation::new(field, description));
    }

    /// Appends the problems of another part of the same request.
    pub fn extend(&mut self, more: Violations) {
        self.0.extend(more.0);
    }

    /// `value` when nothing was recorded, else these violations.
    pub fn or<T>(self, value: T) -> Result<T, Violations> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }

    /// `Ok` when nothing was recorded, else `INVALID_ARGUMENT` naming every field.
    pub fn check(self) -> Result<(), Status> {
        if self.0.is_empty() {
            return Ok(());
        }
        Err(bad_request(self.0))
    }

    /// `INVALID_ARGUMENT` naming every recorded field.
    pub fn into_status(self) -> Status {
        bad_request(self.0)
    }
}

/// `INVALID_ARGUMENT` with `BadRequest` violations and an `ErrorInfo` (`INVALID_REQUEST`).
pub fn bad_request(violations: Vec<FieldViolation>) -> Status {
    let message = violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    let mut details = ErrorDetails::with_bad_request(violations);
    details.set_error_info("INVALID_REQUEST", DOMAIN, HashMap::new());
    Status::with_error_details(
        Code::InvalidArgument,
        format!("invalid request: {message}"),
        details,
    )
}

/// One-field shorthand for [`bad_request`].
pub fn invalid(field: &str, description: impl Into<String>) -> Status {
    bad_request(vec![FieldViolation::new(field, description)])
}

impl From<DiscoveryError> for Status {
    fn from(e: DiscoveryError) -> Self {
        match &e {
            DiscoveryError::InvalidWorkspace { .. } => invalid("workspace", e.to_string()),
            DiscoveryError::OutsideRoots { workspace, .. } => with_info(
                Code::PermissionDenied,
                "WORKSPACE_OUTSIDE_ROOTS",
                e.to_string(),
                &[("workspace", workspace)],
            ),
            DiscoveryError::Bundled { .. } => {
                with_info(Code::Internal, "BUNDLED_AGENT_INVALID", e.to_string(), &[])
            }
        }
    }
}

impl From<SpawnDenied> for Status {
    fn from(e: SpawnDenied) -> Self {
        let msg = e.to_string();
        match &e {
            SpawnDenied::UnknownAgent { name, .. } => {
                with_info(Code::NotFound, "AGENT_NOT_FOUND", msg, &[("agent", name)])
            }
            SpawnDenied::Remote { name } | SpawnDenied::RemoteFromProject { name } => with_info(
                Code::FailedPrecondition,
                "REMOTE_AGENT",
                msg,
                &[("agent", name)],
            ),
            SpawnDenied::Reserved { name, reserved } => with_info(
                Code::PermissionDenied,
                "AGENT_RESERVED",
                msg,
                &[("agent", name), ("reserved", reserved)],
            ),
            SpawnDenied::Recursion { name } => with_info(
                Code::PermissionDenied,
                "RECURSION_BLOCKED",
                msg,
                &[("agent", name)],
            ),
            SpawnDenied::NotAllowed { name, allowed } => with_info(
                Code::PermissionDenied,
                "SPAWN_NOT_ALLOWED",
                msg,
                &[("agent", name), ("allowed", allowed)],
            ),
            SpawnDenied::MaxDepth { name, depth, max } => with_info(
                Code::PermissionDenied,
                "MAX_DEPTH",
                msg,
                &[
                    ("agent", name),
                    ("depth", &depth.to_string()),
                    ("max_recursion_depth", &max.to_string()),
                ],
            ),
        }
    }
}

impl From<PageError> for Status {
    fn from(e: PageError) -> Self {
        match &e {
            PageError::NotOurs | PageError::OtherQuery => invalid("page_token", e.to_string()),
            PageError::Changed { to, .. } => with_info(
                Code::Aborted,
                "REGISTRY_CHANGED",
                e.to_string(),
                &[("registry_version", to)],
            ),
        }
    }
}

impl From<CommandError> for Status {
    fn from(e: CommandError) -> Self {
        let msg = e.to_string();
        match &e {
            CommandError::NotFound { name, .. } => with_info(
                Code::NotFound,
                "COMMAND_NOT_FOUND",
                msg,
                &[("command", name)],
            ),
            CommandError::TooLarge { .. } => invalid("arguments", msg),
        }
    }
}

impl From<WorkerError> for Status {
    fn from(e: WorkerError) -> Self {
        let msg = e.to_string();
        match e {
            WorkerError::Denied(d) => d.into(),
            WorkerError::Discovery(d) => d.into(),
            WorkerError::Page(p) => p.into(),
            WorkerError::UnknownToken => with_info(
                Code::Unauthenticated,
                "UNKNOWN_WORKER_TOKEN",
                "x-agentry-worker-token is not the token of a running worker",
                &[],
            ),
            WorkerError::TokenOfOtherPrincipal => with_info(
                Code::PermissionDenied,
                "WORKER_TOKEN_OF_OTHER_PRINCIPAL",
                msg,
                &[],
            ),
            WorkerError::SequenceOutOfRange {
                id,
                after_sequence,
                last,
            } => with_info(
                Code::OutOfRange,
                "SEQUENCE_OUT_OF_RANGE",
                msg,
                &[
                    ("worker_id", &id),
                    ("after_sequence", &after_sequence.to_string()),
                    ("last_sequence", &last.to_string()),
                ],
            ),
            WorkerError::Capacity(_) => with_info(Code::ResourceExhausted, "CAPACITY", msg, &[]),
            WorkerError::ArtifactsTooLarge(_) => {
                with_info(Code::ResourceExhausted, "ARTIFACTS_TOO_LARGE", msg, &[])
            }
            WorkerError::InboxFull { id, max } => with_info(
                Code::ResourceExhausted,
                "INBOX_FULL",
                msg,
                &[("worker_id", &id), ("inbox_max", &max.to_string())],
            ),
            WorkerError::NoMessages { reason, .. } => {
                with_info(Code::FailedPrecondition, reason, msg, &[])
            }
            WorkerError::MessageDenied { reason, .. } => {
                with_info(Code::PermissionDenied, reason, msg, &[])
            }
            WorkerError::MessageIdReused { .. } => invalid("request_id", msg),
            WorkerError::RequestIdReused { .. } => invalid("request_id", msg),
            WorkerError::NotFound(id) => with_info(
                Code::NotFound,
                "WORKER_NOT_FOUND",
                msg,
                &[("worker_id", &id)],
            ),
            WorkerError::NotCancelable { id, state } => with_info(
                Code::FailedPrecondition,
                "NOT_CANCELABLE",
                msg,
                &[("worker_id", &id), ("state", state.as_str())],
            ),
            WorkerError::ShuttingDown => with_info(Code::Unavailable, "SHUTTING_DOWN", msg, &[]),
            WorkerError::Worktree(_) => {
                with_info(Code::FailedPrecondition, "WORKTREE_UNAVAILABLE", msg, &[])
            }
            WorkerError::Unrunnable(_) => {
                with_info(Code::FailedPrecondition, "EXECUTOR_UNAVAILABLE", msg, &[])
            }
            WorkerError::StoreBacklog => {
                with_info(Code::Unavailable, "STORE_UNAVAILABLE", msg, &[])
            }
            WorkerError::NotRunning { id, state } => with_info(
                Code::FailedPrecondition,
                "NOT_RUNNING",
                msg,
                &[("worker_id", &id), ("state", state.as_str())],
            ),
            WorkerError::TooManyEvents { id, max } => with_info(
                Code::ResourceExhausted,
                "TOO_MANY_EVENTS",
                msg,
                &[
                    ("worker_id", &id),
                    ("max_events_per_worker", &max.to_string()),
                ],
            ),
            // A lost database connection is the one store failure worth retrying: the store
            // already retried it for replica.lease, and the replica reports NOT_SERVING.
            WorkerError::Store(e @ crate::workers::store::StoreError::Lost { .. }) => {
                tracing::warn!(error = %e, "worker store unreachable");
                with_info(Code::Unavailable, "STORE_UNAVAILABLE", e.to_string(), &[])
            }
            WorkerError::Store(e) => {
                tracing::error!(error = %e, "worker store failure");
                with_info(
                    Code::Internal,
                    "STORE",
                    format!("worker store failure: {e}"),
                    &[],
                )
            }
        }
    }
}

impl From<app::Error> for Status {
    fn from(e: app::Error) -> Self {
        match e {
            app::Error::Worker(e) => e.into(),
            app::Error::Discovery(e) => e.into(),
            app::Error::Denied(e) => e.into(),
            app::Error::Page(e) => e.into(),
            app::Error::Command(e) => e.into(),
            app::Error::WorkerTokenRequired => with_info(
                Code::Unauthenticated,
                "WORKER_TOKEN_REQUIRED",
                e.to_string(),
                &[],
            ),
            app::Error::OperatorsOnly(..) => {
                with_info(Code::PermissionDenied, "OPERATORS_ONLY", e.to_string(), &[])
            }
        }
    }
}
