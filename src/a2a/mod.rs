//! A2A (Agent2Agent) over HTTP (docs/a2a.md §13): every persona in a caller's catalog is an A2A
//! agent with a card, answering the JSON-RPC 2.0 binding (v1.0 and v0.3 method names on one URL,
//! streams as server-sent events) and the HTTP+JSON binding, on the HTTP listener
//! (`http.listen`). A task is a worker; everything goes through [`App`], with the caller's
//! identity read from the same bearer and worker tokens as gRPC, so lineage, policy and tenancy
//! are the gRPC API's own.

pub mod error;
pub mod grpc;
mod ops;
pub mod wire;

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};

use crate::{
    app::App,
    auth::{Principal, TokenFile},
    discovery::AgentDef,
    workers::supervisor::Identity,
};
use error::{A2aError, Kind};
use wire::Dialect;

/// Largest accepted worker or bearer token, in bytes.
const MAX_TOKEN_BYTES: usize = 4096;

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct A2a {
    app: App,
    tokens: Option<Arc<TokenFile>>,
    default_agent: Option<String>,
    /// Where the gRPC port is dialled (the card's gRPC interface).
    grpc_url: String,
    /// Rendered cards by persona content and base URL: a card changes only with its file.
    cards: moka::sync::Cache<(String, String), Bytes>,
}

impl A2a {
    /// The A2A surface of `app`; `tokens` is the bearer-token file when authentication is on;
    /// `grpc_url` is where the gRPC port is dialled.
    pub fn new(
        app: App,
        tokens: Option<Arc<TokenFile>>,
        default_agent: Option<String>,
        grpc_url: String,
    ) -> Self {
        Self {
            app,
            tokens,
            default_agent,
            grpc_url,
            cards: moka::sync::Cache::new(1024),
        }
    }

    /// The routes of docs §13.2.
    pub fn router(self) -> Router {
        // A body holds at most one prompt-sized message and its envelope.
        let body_limit = self.app.limits.max_prompt_bytes * 2 + (64 << 10);
        Router::new()
            .route("/.well-known/agent-card.json", get(default_card))
            .route("/a2a/{agent}/.well-known/agent-card.json", get(card))
            .route("/a2a/{agent}", post(jsonrpc))
            .route("/a2a/{agent}/", post(jsonrpc))
            .route("/a2a/{agent}/{action}", post(rest_post))
            .route("/a2a/{agent}/tasks", get(rest_list))
            .route(
                "/a2a/{agent}/tasks/{task}",
                get(rest_get).post(rest_task_post),
            )
            .layer(DefaultBodyLimit::max(body_limit))
            .with_state(self)
    }

    /// Who is calling (docs §13.3, as on gRPC): with authentication on, the bearer token's
    /// principal, or — without one — the principal of the worker whose `x-agentry-worker-token`
    /// is given; with it off, `anonymous`. A worker token makes the call that worker's own.
    async fn identity(&self, headers: &HeaderMap) -> Result<Identity, A2aError> {
        let worker_token = single_header(headers, "x-agentry-worker-token")?;
        let traceparent = single_header(headers, "traceparent")?;
        let unauthenticated = |m: &str| A2aError::new(Kind::Unauthenticated, m);
        let (principal, worker) = match &self.tokens {
            None => (None, None),
            Some(tokens) => match bearer(headers) {
                Some(token) => {
                    let Principal(p) = tokens
                        .principal(token)
                        .ok_or_else(|| unauthenticated("unknown bearer token"))?;
                    (Some(p.to_string()), None)
                }
                None => {
                    let token = worker_token
                        .as_deref()
                        .ok_or_else(|| unauthenticated("missing bearer token"))?;
                    let w = self
                        .app
                        .supervisor
                        .calling_worker(token)
                        .await
                        .ok()
                        .flatten()
                        .ok_or_else(|| unauthenticated("missing bearer token"))?;
                    (Some(w.record.spec.caller_scope.clone()), Some(w))
                }
            },
        };
        Ok(Identity {
            authenticated: principal.is_some(),
            principal: principal.unwrap_or_else(|| Principal::ANONYMOUS.to_owned()),
            worker_token,
            declared: Default::default(),
            traceparent,
            worker,
        })
    }

    /// The agent a path names, if the caller may see it as an A2A agent; else `TaskNotFound`'s
    /// sibling: a 404 naming it.
    async fn agent(&self, id: &Identity, name: &str) -> Result<Arc<AgentDef>, A2aError> {
        self.app
            .catalog_agent(id, name)
            .await?
            .ok_or_else(|| agent_not_found(name))
    }
}

/// The refusal of an agent that has no card for this caller.
fn agent_not_found(name: &str) -> A2aError {
    A2aError {
        kind: Kind::MethodNotFound,
        message: format!(
            "no A2A agent {} here: it is not in your catalog (unknown, reserved, not allowed to you, or a remote persona)",
            crate::grpc::request::quote(name)
        ),
        agentry_reason: Some("AGENT_NOT_FOUND".to_owned()),
    }
}

/// The token of an `authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_BYTES)
        .then_some(token)
}

/// A header given at most once, printable and bounded.
fn single_header(headers: &HeaderMap, name: &str) -> Result<Option<String>, A2aError> {
    let mut all = headers.get_all(name).iter();
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(A2aError::params(name, "must be given at most once"));
    }
    match first.to_str() {
        Ok(s) if s.len() <= MAX_TOKEN_BYTES => Ok(Some(s.to_owned())),
        Ok(_) => Err(A2aError::params(
            name,
            format!("is longer than {MAX_TOKEN_BYTES} bytes"),
        )),
        Err(_) => Err(A2aError::params(name, "must be printable ASCII")),
    }
}

/// `http://host` as the caller reached us, for the URLs in a card.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// The card of `def` (docs §13.2): both dialects' fields, so a 0.3 client (`url`,
/// `preferredTransport`) and a 1.0 client (`supportedInterfaces`) read the same document.
fn card_json(def: &AgentDef, base: &str, grpc_url: &str, auth: bool) -> Value {
    let p = &def.persona;
    let url = format!("{base}/a2a/{}", p.name);
    let mut skill_description = p.description.clone();
    if let Some(when) = p.when_to_use.as_deref().map(str::trim)
        && !when.is_empty()
        && when != p.description
    {
        skill_description.push_str("\n\nWhen to use: ");
        skill_description.push_str(when);
    }
    let mut outputs = vec!["text/plain"];
    if p.output.is_some() {
        outputs.push("application/json");
    }
    let tags: Vec<&str> = [def.source.as_str(), def.family.as_str()]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect();
    let mut card = json!({
        "protocolVersion": "0.3.0",
        "name": p.name,
        "description": p.description,
        "url": url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": url, "transport": "JSONRPC"},
            {"url": url, "transport": "HTTP+JSON"},
        ],
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": grpc_url, "protocolBinding": "GRPC", "protocolVersion": "1.0", "tenant": p.name},
        ],
        "provider": {"organization": "agentry", "url": base},
        "version": def.content_sha256.get(..12).unwrap_or(&def.content_sha256),
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": outputs,
        "skills": [{
            "id": p.name,
            "name": p.name,
            "description": skill_description,
            "tags": tags,
        }],
    });
    if auth {
        card["securitySchemes"] = json!({"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "an agentry bearer token (auth.tokens_file)",
        }});
        card["security"] = json!([{"bearer": []}]);
    }
    card
}

/// `GET /a2a/{agent}/.well-known/agent-card.json`.
async fn card(State(s): State<A2a>, Path(agent): Path<String>, headers: HeaderMap) -> Response {
    card_reply(&s, &agent, &headers)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `GET /.well-known/agent-card.json`: the card of `a2a.default_agent`.
async fn default_card(State(s): State<A2a>, headers: HeaderMap) -> Response {
    let Some(agent) = s.default_agent.clone() else {
        return A2aError::new(
            Kind::MethodNotFound,
            "no default A2A agent: set a2a.default_agent, or fetch /a2a/{agent}/.well-known/agent-card.json",
        )
        .into_response();
    };
    card_reply(&s, &agent, &headers)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn card_reply(s: &A2a, agent: &str, headers: &HeaderMap) -> Result<Response, A2aError> {
    let id = s.identity(headers).await?;
    let def = s.agent(&id, agent).await?;
    let etag = format!("\"{}\"", def.content_sha256);
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        if let Ok(v) = HeaderValue::from_str(&etag) {
            resp.headers_mut().insert(header::ETAG, v);
        }
        return Ok(resp);
    }
    let base = base_url(headers);
    // Who may see it was checked above; its bytes depend only on the file and the base URL.
    let body = s
        .cards
        .get_with((def.content_sha256.clone(), base.clone()), || {
            Bytes::from(card_json(&def, &base, &s.grpc_url, s.tokens.is_some()).to_string())
        });
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=60"),
    );
    Ok(resp)
}

/// `POST /a2a/{agent}`: one JSON-RPC 2.0 request (docs §13.2).
async fn jsonrpc(
    State(s): State<A2a>,
    Path(agent): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let err = A2aError::new(Kind::Parse, format!("the body is not JSON: {e}"));
            return axum::Json(err.rpc_response(&Value::Null)).into_response();
        }
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let id = if id.is_string() || id.is_number() || id.is_null() {
        id
    } else {
        Value::Null
    };
    let reply = |r: Result<Value, A2aError>| -> Response {
        match r {
            Ok(result) => {
                axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
            }
            Err(e) => {
                let status = match e.kind {
                    Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
                    _ => StatusCode::OK,
                };
                let mut resp = (status, axum::Json(e.rpc_response(&id))).into_response();
                if status == StatusCode::UNAUTHORIZED {
                    resp.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                }
                resp
            }
        }
    };
    let (method, params) = match parse_rpc(&request) {
        Ok(v) => v,
        Err(e) => return reply(Err(e)),
    };
    let dialect = match Dialect::of(&headers) {
        Ok(d) => d,
        Err(e) => return reply(Err(e)),
    };
    let call = match ops::Call::of(dialect, &method) {
        Ok(c) => c,
        Err(e) => return reply(Err(e)),
    };
    let ident = match s.identity(&headers).await {
        Ok(i) => i,
        Err(e) => return reply(Err(e)),
    };
    if let Err(e) = s.agent(&ident, &agent).await {
        return reply(Err(e));
    }
    let ctx = ops::Ctx {
        s: &s,
        id: &ident,
        agent: &agent,
        dialect,
    };
    match ctx.run(call, &params).await {
        Ok(ops::Outcome::Value(v)) => reply(Ok(v)),
        Ok(ops::Outcome::Stream(events)) => ops::sse(events, Some(id)),
        Err(e) => reply(Err(e)),
    }
}

/// The method and params of a JSON-RPC 2.0 request object.
fn parse_rpc(request: &Value) -> Result<(String, Value), A2aError> {
    let obj = match request {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(A2aError::new(
                Kind::InvalidRequest,
                "batch requests are not supported; send one request object",
            ));
        }
        _ => {
            return Err(A2aError::new(
                Kind::InvalidRequest,
                "a JSON-RPC request is an object",
            ));
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(A2aError::new(
            Kind::InvalidRequest,
            "jsonrpc must be \"2.0\"",
        ));
    }
    let method = obj
        .get("method")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty() && m.len() <= 128)
        .ok_or_else(|| A2aError::new(Kind::InvalidRequest, "method must be a non-empty string"))?;
    let params = obj.get("params").cloned().unwrap_or_else(|| json!({}));
    Ok((method.to_owned(), params))
}

/// The HTTP+JSON binding's answer: the value, a stream, or an AIP-193 error.
fn rest_reply(r: Result<ops::Outcome, A2aError>) -> Response {
    match r {
        Ok(ops::Outcome::Value(v)) => axum::Json(v).into_response(),
        Ok(ops::Outcome::Stream(events)) => ops::sse(events, None),
        Err(e) => e.into_response(),
    }
}

/// Reads the caller, the dialect and the agent of an HTTP+JSON request, and runs `call`.
async fn rest(
    s: &A2a,
    agent: &str,
    headers: &HeaderMap,
    call: ops::Call,
    params: Value,
) -> Response {
    let run = async {
        let dialect = Dialect::of(headers)?;
        let ident = s.identity(headers).await?;
        s.agent(&ident, agent).await?;
        let ctx = ops::Ctx {
            s,
            id: &ident,
            agent,
            dialect,
        };
        ctx.run(call, &params).await
    };
    rest_reply(run.await)
}

/// A JSON body, or `{}` when empty.
fn json_body(body: &Bytes) -> Result<Value, A2aError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| A2aError::new(Kind::Parse, format!("the body is not JSON: {e}")))
}

/// `POST /a2a/{agent}/message:send` and `…/message:stream`.
async fn rest_post(
    State(s): State<A2a>,
    Path((agent, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let call = match action.as_str() {
        "message:send" => ops::Call::Send,
        "message:stream" => ops::Call::Stream,
        _ => {
            return A2aError::new(
                Kind::MethodNotFound,
                format!(
                    "no HTTP+JSON method POST /a2a/{agent}/{action}; the methods are message:send, message:stream, tasks/{{id}}:cancel and tasks/{{id}}:subscribe"
                ),
            )
            .into_response();
        }
    };
    match json_body(&body) {
        Ok(params) => rest(&s, &agent, &headers, call, params).await,
        Err(e) => e.into_response(),
    }
}

/// `POST /a2a/{agent}/tasks/{id}:cancel` and `…:subscribe`.
async fn rest_task_post(
    State(s): State<A2a>,
    Path((agent, task)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (call, id) = match task.rsplit_once(':') {
        Some((id, "cancel")) => (ops::Call::Cancel, id),
        Some((id, "subscribe")) => (ops::Call::Subscribe, id),
        _ => {
            return A2aError::new(
                Kind::MethodNotFound,
                format!(
                    "no HTTP+JSON method POST /a2a/{agent}/tasks/{task}; on a task the methods are :cancel and :subscribe"
                ),
            )
            .into_response();
        }
    };
    rest(&s, &agent, &headers, call, json!({"id": id})).await
}

/// `GET /a2a/{agent}/tasks/{id}` (and `GET …:subscribe`).
async fn rest_get(
    State(s): State<A2a>,
    Path((agent, task)): Path<(String, String)>,
    Query(q): Query<std::collections::BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(id) = task.strip_suffix(":subscribe") {
        return rest(
            &s,
            &agent,
            &headers,
            ops::Call::Subscribe,
            json!({"id": id}),
        )
        .await;
    }
    let mut params = json!({"id": task});
    if let Some(h) = q.get("historyLength") {
        params["historyLength"] = Value::String(h.clone());
    }
    rest(&s, &agent, &headers, ops::Call::Get, params).await
}

/// `GET /a2a/{agent}/tasks`.
async fn rest_list(
    State(s): State<A2a>,
    Path(agent): Path<String>,
    Query(q): Query<std::collections::BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let params = Value::Object(q.into_iter().map(|(k, v)| (k, Value::String(v))).collect());
    rest(&s, &agent, &headers, ops::Call::List, params).await
}

/// Serves the HTTP listener until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // TCP_NODELAY: without it a stream's small events wait out delayed ACKs (~40 ms).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
