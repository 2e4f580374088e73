//! A2A errors (docs/a2a.md §13.6): one value per failure, written as a JSON-RPC error object or
//! as an AIP-193 body, each carrying a `google.rpc.ErrorInfo` with domain `a2a-protocol.org`.
//! An agentry error underneath keeps its own reason and message, so a client sees what went
//! wrong in the same words the gRPC API uses.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use tonic::Code;

/// The `ErrorInfo.domain` of an A2A error.
pub const DOMAIN: &str = "a2a-protocol.org";

/// The A2A error kinds (the spec's table: JSON-RPC code, HTTP status, reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The body is not JSON.
    Parse,
    /// Not a JSON-RPC 2.0 request object.
    InvalidRequest,
    /// No such method (in this dialect).
    MethodNotFound,
    /// The parameters are wrong.
    InvalidParams,
    /// Something failed that the caller cannot fix.
    Internal,
    /// No such task for this caller and agent.
    TaskNotFound,
    /// The task cannot be canceled (it has ended).
    TaskNotCancelable,
    /// Push notifications are not offered.
    PushNotSupported,
    /// The operation does not apply (e.g. a message to a terminal task).
    Unsupported,
    /// A part's media type is not accepted.
    ContentTypeNotSupported,
    /// No extended card.
    ExtendedCardNotConfigured,
    /// The `A2A-Version` is not one this server speaks.
    VersionNotSupported,
    /// No or a wrong bearer token (HTTP 401).
    Unauthenticated,
    /// Authenticated but not allowed (HTTP 403).
    PermissionDenied,
    /// Too much at once: capacity, a full inbox (HTTP 429).
    Exhausted,
    /// The service cannot take it now: shutting down, the store unreachable (HTTP 503).
    Unavailable,
}

impl Kind {
    /// JSON-RPC error code.
    pub fn rpc_code(self) -> i64 {
        match self {
            Kind::Parse => -32700,
            Kind::InvalidRequest => -32600,
            Kind::MethodNotFound => -32601,
            Kind::InvalidParams => -32602,
            Kind::Internal | Kind::Unavailable | Kind::Exhausted => -32603,
            Kind::TaskNotFound => -32001,
            Kind::TaskNotCancelable => -32002,
            Kind::PushNotSupported => -32003,
            Kind::Unsupported | Kind::PermissionDenied | Kind::Unauthenticated => -32004,
            Kind::ContentTypeNotSupported => -32005,
            Kind::ExtendedCardNotConfigured => -32007,
            Kind::VersionNotSupported => -32009,
        }
    }

    /// HTTP status of the HTTP+JSON binding (and of a refused JSON-RPC call's transport).
    pub fn http(self) -> StatusCode {
        match self {
            Kind::TaskNotFound | Kind::MethodNotFound => StatusCode::NOT_FOUND,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
            Kind::PermissionDenied => StatusCode::FORBIDDEN,
            Kind::Exhausted => StatusCode::TOO_MANY_REQUESTS,
            Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The AIP-193 `status` (a gRPC code name).
    fn status(self) -> &'static str {
        match self {
            Kind::TaskNotFound | Kind::MethodNotFound => "NOT_FOUND",
            Kind::Internal => "INTERNAL",
            Kind::Unauthenticated => "UNAUTHENTICATED",
            Kind::PermissionDenied => "PERMISSION_DENIED",
            Kind::Exhausted => "RESOURCE_EXHAUSTED",
            Kind::Unavailable => "UNAVAILABLE",
            Kind::Parse | Kind::InvalidRequest | Kind::InvalidParams => "INVALID_ARGUMENT",
            Kind::ContentTypeNotSupported => "INVALID_ARGUMENT",
            _ => "FAILED_PRECONDITION",
        }
    }

    /// The `ErrorInfo.reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Kind::Parse => "PARSE_ERROR",
            Kind::InvalidRequest => "INVALID_REQUEST",
            Kind::MethodNotFound => "METHOD_NOT_FOUND",
            Kind::InvalidParams => "INVALID_PARAMS",
            Kind::Internal => "INTERNAL_ERROR",
            Kind::TaskNotFound => "TASK_NOT_FOUND",
            Kind::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            Kind::PushNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            Kind::Unsupported => "UNSUPPORTED_OPERATION",
            Kind::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            Kind::ExtendedCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            Kind::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            Kind::Unauthenticated => "UNAUTHENTICATED",
            Kind::PermissionDenied => "PERMISSION_DENIED",
            Kind::Exhausted => "RESOURCE_EXHAUSTED",
            Kind::Unavailable => "UNAVAILABLE",
        }
    }
}

/// An A2A error: its kind, a message naming what was wrong, and the agentry reason under it.
#[derive(Debug, Clone)]
pub struct A2aError {
    /// Which error of the spec.
    pub kind: Kind,
    /// What was wrong, for a person.
    pub message: String,
    /// The agentry `ErrorInfo.reason` it came from, if any.
    pub agentry_reason: Option<String>,
}

impl A2aError {
    /// An error of `kind`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            agentry_reason: None,
        }
    }

    /// `InvalidParamsError` naming the field.
    pub fn params(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::new(Kind::InvalidParams, format!("{field}: {problem}"))
    }

    /// `TaskNotFoundError` for `id`.
    pub fn task_not_found(id: &str) -> Self {
        Self::new(Kind::TaskNotFound, format!("task {id} not found"))
    }

    /// The `data` of a JSON-RPC error and the `details` of an AIP-193 body.
    fn details(&self) -> Value {
        let mut details = vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.kind.reason(),
            "domain": DOMAIN,
        })];
        if let Some(reason) = &self.agentry_reason {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": crate::grpc::status::DOMAIN,
            }));
        }
        Value::Array(details)
    }

    /// The JSON-RPC error object.
    pub fn rpc_object(&self) -> Value {
        json!({
            "code": self.kind.rpc_code(),
            "message": self.message,
            "data": self.details(),
        })
    }

    /// A JSON-RPC response carrying this error for request `id`.
    pub fn rpc_response(&self, id: &Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "error": self.rpc_object()})
    }

    /// The AIP-193 body.
    pub fn aip193(&self) -> Value {
        json!({"error": {
            "code": self.kind.http().as_u16(),
            "status": self.kind.status(),
            "message": self.message,
            "details": self.details(),
        }})
    }
}

impl std::fmt::Display for A2aError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<crate::app::Error> for A2aError {
    fn from(e: crate::app::Error) -> Self {
        tonic::Status::from(e).into()
    }
}

impl From<tonic::Status> for A2aError {
    /// The gRPC API's own status (its code, message and reason) in A2A terms.
    fn from(s: tonic::Status) -> Self {
        use tonic_types::StatusExt;
        let details = s.get_error_details();
        let reason = details.error_info().map(|i| i.reason.clone());
        let mut message = s.message().to_owned();
        if let Some(bad) = details.bad_request() {
            let fields: Vec<String> = bad
                .field_violations
                .iter()
                .map(|v| format!("{}: {}", v.field, v.description))
                .collect();
            if !fields.is_empty() {
                message = fields.join("; ");
            }
        }
        let kind = match (s.code(), reason.as_deref()) {
            (Code::NotFound, Some("WORKER_NOT_FOUND")) => Kind::TaskNotFound,
            (Code::NotFound, _) | (Code::InvalidArgument, _) | (Code::OutOfRange, _) => {
                Kind::InvalidParams
            }
            (Code::FailedPrecondition, Some("NOT_CANCELABLE")) => Kind::TaskNotCancelable,
            (Code::FailedPrecondition, _) => Kind::Unsupported,
            (Code::Unauthenticated, _) => Kind::Unauthenticated,
            (Code::PermissionDenied, _) => Kind::PermissionDenied,
            (Code::ResourceExhausted, _) => Kind::Exhausted,
            (Code::Unavailable, _) => Kind::Unavailable,
            _ => Kind::Internal,
        };
        Self {
            kind,
            message,
            agentry_reason: reason,
        }
    }
}

impl IntoResponse for A2aError {
    /// The HTTP+JSON binding's error: the status and an AIP-193 body.
    fn into_response(self) -> Response {
        let mut resp = (self.kind.http(), axum::Json(self.aip193())).into_response();
        if self.kind == Kind::Unauthenticated {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}
