//! The console (docs/console.md §14): a page on the HTTP listener that shows the worker tree,
//! a worker's watch, the catalog and the replicas, live, and stops and messages workers. Every
//! read and action goes through the gRPC service's own methods ([`Service`]) with the caller's
//! principal, so validation, authorisation, tenancy and error messages are the RPCs' own; the
//! console adds only how a browser proves who it is (a session cookie holding a bearer token) and
//! how its actions are kept from other sites (a CSRF header and the `Origin` check).

mod assets;
mod streams;

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::{DefaultBodyLimit, Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};
use tonic::Code;

use crate::{
    app::App,
    auth::{Principal, TokenFile},
    grpc::{pb, pb::agent_registry_service_server::AgentRegistryService, service::Service},
    workers::{model::WorkerId, supervisor::Identity},
};

/// The session cookie's name.
const COOKIE: &str = "agentry_console";
/// The header an action made with a session cookie must carry.
const CSRF_HEADER: &str = "x-agentry-csrf";
/// How long a session lives after its last use.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);
/// How many sessions a replica keeps.
const MAX_SESSIONS: u64 = 10_000;
/// Largest accepted bearer token or cookie, in bytes.
const MAX_TOKEN_BYTES: usize = 4096;
/// How many workers' last progress lines are kept (newest first out).
const MAX_LINES: u64 = 100_000;
/// How many tree snapshots are built at once.
const SNAPSHOTS_AT_ONCE: usize = 4;
/// A progress line is cut to this many bytes.
const MAX_LINE_BYTES: usize = 240;

/// One logged-in browser.
struct Session {
    /// The bearer token it logged in with (`None` without authentication): mapped again on
    /// every request, so a token removed from the file ends its sessions.
    token: Option<String>,
    /// What its actions must carry in [`CSRF_HEADER`].
    csrf: String,
}

/// The console's shared state.
pub struct Console {
    app: App,
    svc: Service,
    tokens: Option<Arc<TokenFile>>,
    sessions: moka::sync::Cache<String, Arc<Session>>,
    /// Whether it answers at all: with authentication on, or on a loopback listener.
    open: bool,
    /// The last progress line of each worker (docs §14.1), fed by every event of this replica.
    lines: moka::sync::Cache<WorkerId, Arc<str>>,
    /// Tree snapshots built at once (each holds up to `limit` workers).
    snapshots: tokio::sync::Semaphore,
}

impl Console {
    /// The console of `app`; `tokens` is the bearer-token file when authentication is on;
    /// `loopback` says whether the HTTP listener is on a loopback address. Starts following the
    /// replica's events for the progress lines.
    pub fn new(app: App, tokens: Option<Arc<TokenFile>>, loopback: bool) -> Arc<Self> {
        let console = Arc::new(Self {
            svc: Service::new(app.clone()),
            open: tokens.is_some() || loopback,
            tokens,
            sessions: moka::sync::Cache::builder()
                .max_capacity(MAX_SESSIONS)
                .time_to_idle(SESSION_IDLE)
                .build(),
            lines: moka::sync::Cache::new(MAX_LINES),
            snapshots: tokio::sync::Semaphore::new(SNAPSHOTS_AT_ONCE),
            app,
        });
        streams::follow_lines(&console);
        console
    }

    /// The routes of docs §14.2.
    pub fn router(self: Arc<Self>) -> Router {
        let body_limit = self.app.limits.max_prompt_bytes + (4 << 10);
        Router::new()
            .route("/console", get(assets::page))
            .route("/console/", get(assets::page))
            .route("/console/app.js", get(assets::script))
            .route("/console/app.css", get(assets::style))
            .route(
                "/console/api/session",
                get(session).post(login).delete(logout),
            )
            .route("/console/api/tree", get(streams::tree))
            .route("/console/api/workers/{id}/watch", get(streams::watch))
            .route("/console/api/workers/{id}/stop", post(stop))
            .route("/console/api/workers/{id}/message", post(message))
            .route("/console/api/agents", get(streams::agents))
            .route("/console/api/replicas", get(replicas))
            .layer(DefaultBodyLimit::max(body_limit))
            .with_state(self)
    }

    /// Who is calling (docs §14.4): a bearer header, else the session cookie; `action` adds the
    /// CSRF checks of a state-changing request made with a cookie.
    fn caller(&self, headers: &HeaderMap, action: bool) -> Result<Caller, ApiError> {
        if !self.open {
            return Err(ApiError::new(
                Code::PermissionDenied,
                "the console needs authentication (auth.tokens_file) when the HTTP listener is not on loopback",
            ));
        }
        if let Some(token) = bearer(headers)? {
            return match &self.tokens {
                Some(tokens) => tokens
                    .principal(token)
                    .map(|p| Caller::new(Some(p), None))
                    .ok_or_else(|| ApiError::new(Code::Unauthenticated, "unknown bearer token")),
                None => Ok(Caller::new(None, None)),
            };
        }
        let Some(sid) = cookie(headers) else {
            return match (&self.tokens, action) {
                (Some(_), _) => Err(ApiError::new(Code::Unauthenticated, "missing bearer token")),
                // Without authentication a read needs nothing; an action still needs the
                // session, or any site could post to a console on loopback.
                (None, true) => Err(cross_site()),
                (None, false) => Ok(Caller::new(None, None)),
            };
        };
        let session = self
            .sessions
            .get(sid)
            .ok_or_else(|| ApiError::new(Code::Unauthenticated, "console session expired"))?;
        if action {
            same_site(headers, &session)?;
        }
        let principal = match (&self.tokens, &session.token) {
            (Some(tokens), Some(token)) => match tokens.principal(token) {
                Some(p) => Some(p),
                None => {
                    self.sessions.invalidate(sid);
                    return Err(ApiError::new(Code::Unauthenticated, "unknown bearer token"));
                }
            },
            // A session from before authentication was turned on (or off) is not honoured.
            (Some(_), None) | (None, Some(_)) => {
                self.sessions.invalidate(sid);
                return Err(ApiError::new(
                    Code::Unauthenticated,
                    "console session expired",
                ));
            }
            (None, None) => None,
        };
        Ok(Caller::new(principal, Some(session)))
    }

    /// Whether `caller` sees every worker (an operator, or no authentication), as the gRPC
    /// API decides it.
    async fn sees_all(&self, caller: &Caller) -> Result<bool, ApiError> {
        Ok(matches!(
            self.app.visibility(&caller.identity()).await?,
            crate::workers::supervisor::Visibility::All
        ))
    }

    /// A new session for `token`, with the `Set-Cookie` header that carries it.
    fn open_session(&self, token: Option<String>) -> (Arc<Session>, HeaderValue) {
        let sid = random_hex();
        let session = Arc::new(Session {
            token,
            csrf: random_hex(),
        });
        self.sessions.insert(sid.clone(), session.clone());
        let cookie = format!("{COOKIE}={sid}; Path=/console; HttpOnly; SameSite=Strict");
        (
            session,
            HeaderValue::from_str(&cookie).expect("hex cookie is a valid header"),
        )
    }

    /// What `GET /console/api/session` answers for `caller`, with the cookie of a session
    /// opened for it, if one was.
    async fn describe(
        &self,
        caller: &Caller,
        csrf: Option<&str>,
        cookie: Option<HeaderValue>,
    ) -> Result<Response, ApiError> {
        let mut resp = Json(json!({
            "principal": caller.identity().principal,
            "operator": self.sees_all(caller).await?,
            "auth": self.tokens.is_some(),
            "csrf": csrf.unwrap_or(""),
        }))
        .into_response();
        if let Some(cookie) = cookie {
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        Ok(no_store(resp))
    }
}

/// Who a console request is from.
struct Caller {
    /// The principal, when authentication is on.
    principal: Option<Principal>,
    /// The session it came with (none with a bearer header).
    session: Option<Arc<Session>>,
}

impl Caller {
    fn new(principal: Option<Principal>, session: Option<Arc<Session>>) -> Self {
        Self { principal, session }
    }

    /// As the domain operations take it.
    fn identity(&self) -> Identity {
        Identity {
            authenticated: self.principal.is_some(),
            principal: self
                .principal
                .as_ref()
                .map_or_else(|| Principal::ANONYMOUS.to_owned(), |p| p.0.to_string()),
            worker_token: None,
            declared: Default::default(),
            traceparent: None,
            worker: None,
        }
    }

    /// `msg` as a gRPC request from this caller, as the authentication layer would pass it on.
    fn request<M>(&self, msg: M) -> tonic::Request<M> {
        let mut req = tonic::Request::new(msg);
        if let Some(p) = &self.principal {
            req.extensions_mut().insert(p.clone());
        }
        req
    }
}

/// An API error (docs §14.2): the RPC's code and message, with the HTTP status of that code.
#[derive(Debug)]
pub struct ApiError {
    code: Code,
    message: String,
}

impl ApiError {
    fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The gRPC code's name (`NOT_FOUND`).
    fn code_name(&self) -> &'static str {
        match self.code {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    fn http_status(&self) -> StatusCode {
        match self.code {
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body.
    fn body(&self) -> Value {
        json!({"error": {"code": self.code_name(), "message": self.message}})
    }
}

impl From<tonic::Status> for ApiError {
    /// The RPC's own status; a `BadRequest`'s violations as `field: description`.
    fn from(s: tonic::Status) -> Self {
        use tonic_types::StatusExt;
        let details = s.get_error_details();
        let fields: Vec<String> = details
            .bad_request()
            .map(|b| {
                b.field_violations
                    .iter()
                    .map(|v| format!("{}: {}", v.field, v.description))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            code: s.code(),
            message: if fields.is_empty() {
                s.message().to_owned()
            } else {
                fields.join("; ")
            },
        }
    }
}

impl From<crate::app::Error> for ApiError {
    fn from(e: crate::app::Error) -> Self {
        tonic::Status::from(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.http_status(), Json(self.body())).into_response();
        if self.code == Code::Unauthenticated {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"agentry\""),
            );
        }
        no_store(resp)
    }
}

/// `resp` marked as never to be cached.
fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The refusal of an action that did not prove it comes from the console's own page.
fn cross_site() -> ApiError {
    ApiError::new(Code::PermissionDenied, "cross-site request refused")
}

/// The CSRF checks of an action made with session `s` (docs §14.4).
fn same_site(headers: &HeaderMap, s: &Session) -> Result<(), ApiError> {
    let given = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    if given != Some(s.csrf.as_str()) {
        return Err(cross_site());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        // The page's own origin: its host is the one the request was sent to. Either scheme,
        // so a console behind a TLS-terminating proxy (https://host, forwarded as http) works.
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin.to_str().ok().and_then(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
        });
        if host.is_none() || origin_host != host {
            return Err(cross_site());
        }
    }
    Ok(())
}

/// The token of an `authorization: Bearer` header; a malformed or oversized header is refused.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || ApiError::new(Code::Unauthenticated, "unknown bearer token");
    let value = value.to_str().map_err(|_| bad())?;
    let (scheme, token) = value.trim().split_once(' ').ok_or_else(bad)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(bad());
    }
    Ok(Some(token))
}

/// The session id of the console's cookie, if one is sent.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, v)| *k == COOKIE && !v.is_empty() && v.len() <= MAX_TOKEN_BYTES)
        .map(|(_, v)| v)
}

/// 256 random bits as hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    hex::encode(bytes)
}

/// A JSON body of an action: `application/json` (which no HTML form can send), an object.
fn json_body(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json {
        return Err(ApiError::new(
            Code::InvalidArgument,
            "the body must be application/json",
        ));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::new(
            Code::InvalidArgument,
            "the body must be a JSON object",
        )),
        Err(e) => Err(ApiError::new(
            Code::InvalidArgument,
            format!("the body is not JSON: {e}"),
        )),
    }
}

/// Field `name` of `body` as a string (absent: empty).
fn string_field(body: &serde_json::Map<String, Value>, name: &str) -> Result<String, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ApiError::new(
            Code::InvalidArgument,
            format!("{name}: must be a string"),
        )),
    }
}

/// A gRPC message as its canonical JSON.
fn proto_json<M: prost::Message>(m: &M, name: &str) -> Result<Value, ApiError> {
    crate::a2a::grpc::to_json(m, name).map_err(ApiError::from)
}

/// An RPC's response as the action's answer.
fn proto_reply<M: prost::Message>(m: &M, name: &str) -> Result<Response, ApiError> {
    Ok(no_store(Json(proto_json(m, name)?).into_response()))
}

/// `GET /console/api/session`: who is calling. Without authentication a browser without a
/// session gets one here (its actions need the CSRF value).
async fn session(State(c): State<Arc<Console>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, false)?;
    match (&caller.session, &c.tokens) {
        (Some(s), _) => c.describe(&caller, Some(&s.csrf), None).await,
        (None, None) if bearer(&headers).ok().flatten().is_none() => {
            let (s, cookie) = c.open_session(None);
            c.describe(&caller, Some(&s.csrf), Some(cookie)).await
        }
        _ => c.describe(&caller, None, None).await,
    }
}

/// `POST /console/api/session` `{"token": …}`: logs in with a bearer token.
async fn login(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !c.open {
        c.caller(&headers, false)?;
    }
    let body = json_body(&headers, &body)?;
    let token = string_field(&body, "token")?;
    let token = token.trim();
    let (caller, token) = match &c.tokens {
        Some(tokens) => {
            if token.is_empty() {
                return Err(ApiError::new(Code::Unauthenticated, "missing bearer token"));
            }
            let p = tokens
                .principal(token)
                .ok_or_else(|| ApiError::new(Code::Unauthenticated, "unknown bearer token"))?;
            (Caller::new(Some(p), None), Some(token.to_owned()))
        }
        None => (Caller::new(None, None), None),
    };
    let (s, cookie) = c.open_session(token);
    c.describe(&caller, Some(&s.csrf), Some(cookie)).await
}

/// `DELETE /console/api/session`: logs out.
async fn logout(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(e) = c.caller(&headers, true) {
        return e.into_response();
    }
    if let Some(sid) = cookie(&headers) {
        c.sessions.invalidate(sid);
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "agentry_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    no_store(resp)
}

/// `POST /console/api/workers/{id}/stop` `{"reason": …}`: `StopWorker`.
async fn stop(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, true)?;
    let body = json_body(&headers, &body)?;
    let req = pb::StopWorkerRequest {
        worker_id: id,
        reason: string_field(&body, "reason")?,
    };
    let resp = c.svc.stop_worker(caller.request(req)).await?.into_inner();
    proto_reply(&resp, "agentry.v1.StopWorkerResponse")
}

/// `POST /console/api/workers/{id}/message` `{"text": …}`: `SendWorkerMessage`.
async fn message(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, true)?;
    let body = json_body(&headers, &body)?;
    let req = pb::SendWorkerMessageRequest {
        worker_id: id,
        text: string_field(&body, "text")?,
        ..Default::default()
    };
    let resp = c
        .svc
        .send_worker_message(caller.request(req))
        .await?
        .into_inner();
    proto_reply(&resp, "agentry.v1.SendWorkerMessageResponse")
}

/// `GET /console/api/replicas`: the live replicas and what each runs (operators; docs §14.1).
async fn replicas(State(c): State<Arc<Console>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, false)?;
    if !c.sees_all(&caller).await? {
        return Err(crate::app::Error::OperatorsOnly(
            "the replicas view",
            caller.identity().principal,
        )
        .into());
    }
    let Some(shared) = c.app.supervisor.shared_store() else {
        return Ok(no_store(
            Json(json!({"shared": false, "replicas": []})).into_response(),
        ));
    };
    let list = shared
        .replicas()
        .await
        .map_err(|e| ApiError::new(Code::Unavailable, e.to_string()))?;
    let this = shared.replica_id().to_owned();
    let replicas: Vec<Value> = list
        .into_iter()
        .map(|r| {
            json!({
                "id": r.id, "name": r.name, "self": r.id == this,
                "startedMs": r.started_ms, "renewedMs": r.renewed_ms, "expiresMs": r.expires_ms,
                "openWorkers": r.open_workers, "workers": r.workers,
            })
        })
        .collect();
    Ok(no_store(
        Json(json!({"shared": true, "replicas": replicas})).into_response(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; agentry_console=abc; b=2")]);
        assert_eq!(cookie(&h), Some("abc"));
        let h = headers(&[("cookie", "a=1"), ("cookie", "agentry_console=xyz")]);
        assert_eq!(cookie(&h), Some("xyz"));
        assert_eq!(cookie(&headers(&[("cookie", "agentry_console=")])), None);
        assert_eq!(cookie(&headers(&[("cookie", "agentry_consolex=1")])), None);
    }

    #[test]
    fn an_action_needs_the_csrf_value_and_its_own_origin() {
        let s = Session {
            token: None,
            csrf: "c1".into(),
        };
        let ok = headers(&[(CSRF_HEADER, "c1"), ("host", "127.0.0.1:8080")]);
        assert!(same_site(&ok, &s).is_ok());
        let same_origin = headers(&[
            (CSRF_HEADER, "c1"),
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert!(same_site(&same_origin, &s).is_ok());
        let behind_tls = headers(&[
            (CSRF_HEADER, "c1"),
            ("host", "console.example"),
            ("origin", "https://console.example"),
        ]);
        assert!(same_site(&behind_tls, &s).is_ok());
        for bad in [
            headers(&[("host", "127.0.0.1:8080")]),
            headers(&[(CSRF_HEADER, "c2"), ("host", "127.0.0.1:8080")]),
            headers(&[
                (CSRF_HEADER, "c1"),
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:9090"),
            ]),
            headers(&[
                (CSRF_HEADER, "c1"),
                ("host", "127.0.0.1:8080"),
                ("origin", "null"),
            ]),
        ] {
            let e = same_site(&bad, &s).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (Code::PermissionDenied, "cross-site request refused")
            );
        }
    }

    #[test]
    fn a_bearer_header_is_bounded_and_must_be_bearer() {
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer t1")])).unwrap(),
            Some("t1")
        );
        assert_eq!(bearer(&HeaderMap::new()).unwrap(), None);
        assert!(bearer(&headers(&[("authorization", "Basic dXNlcg==")])).is_err());
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
        assert!(bearer(&headers(&[("authorization", &long)])).is_err());
    }

    #[test]
    fn errors_carry_the_grpc_code_name_and_its_http_status() {
        let e = ApiError::from(tonic::Status::not_found("worker x not found"));
        assert_eq!(e.http_status(), StatusCode::NOT_FOUND);
        assert_eq!(
            e.body(),
            json!({"error": {"code": "NOT_FOUND", "message": "worker x not found"}})
        );
        let e = ApiError::new(Code::Unauthenticated, "missing bearer token");
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert!(resp.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    #[test]
    fn an_action_body_must_be_a_json_object() {
        let json_type = headers(&[("content-type", "application/json; charset=utf-8")]);
        assert!(json_body(&json_type, &Bytes::from_static(b"{\"a\":1}")).is_ok());
        let form = headers(&[("content-type", "application/x-www-form-urlencoded")]);
        assert_eq!(
            json_body(&form, &Bytes::from_static(b"a=1"))
                .unwrap_err()
                .message,
            "the body must be application/json"
        );
        assert_eq!(
            json_body(&json_type, &Bytes::from_static(b"[1]"))
                .unwrap_err()
                .message,
            "the body must be a JSON object"
        );
    }
}
