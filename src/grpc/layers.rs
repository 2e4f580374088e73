//! Tower layers around every gRPC service: [`TraceLayer`] (a span, a log line and metrics per
//! RPC), [`ProtocolLayer`] (metadata bounds, decode failures as the caller's error) and
//! [`AuthLayer`] (bearer tokens, docs/operations.md §8.2).
//!
//! They work on plain HTTP requests so they cover every service the server hosts, including the
//! ones added later, without touching the generated code. Health and reflection are exempt from
//! authentication, so probes and `grpcurl list` work without a token.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Instant,
};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::{Code, Status, body::Body};
use tower::{Layer, Service};

use super::status::with_info;
use crate::{
    auth::{Principal, TokenFile},
    telemetry::{self, Metrics},
};

/// Paths that never need a token: health probes and reflection.
const PUBLIC_PREFIXES: &[&str] = &["/grpc.health.v1.Health/", "/grpc.reflection."];

/// A boxed response future, as the layers return either the inner service's or their own.
type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

/// Requires `authorization: Bearer <token>` on every non-public RPC when a tokens file is
/// configured, and puts the caller's [`Principal`] into the request extensions.
#[derive(Clone, Default)]
pub struct AuthLayer {
    tokens: Option<Arc<TokenFile>>,
    workers: Option<WorkerTokens>,
}

/// Maps a live worker's `x-agentry-worker-token` to the principal that spawned it and the worker
/// itself, so a worker process can call back without holding its spawner's bearer token (the
/// worker goes into the request's extensions for the handler). Asynchronous because, with a
/// shared store, the worker may run on another replica and is looked up in the database.
pub type WorkerTokens = Arc<
    dyn Fn(
            String,
        ) -> BoxFuture<
            Option<(
                crate::auth::Principal,
                Arc<crate::workers::supervisor::CallingWorker>,
            )>,
            std::convert::Infallible,
        > + Send
        + Sync,
>;

impl std::fmt::Debug for AuthLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthLayer")
            .field("tokens", &self.tokens)
            .field("workers", &self.workers.is_some())
            .finish()
    }
}

impl AuthLayer {
    /// `None` turns authentication off: requests pass through without a `Principal`.
    pub fn new(tokens: Option<Arc<TokenFile>>) -> Self {
        Self {
            tokens,
            workers: None,
        }
    }

    /// Also accepts the token of a running worker in place of a bearer token.
    pub fn with_worker_tokens(mut self, workers: WorkerTokens) -> Self {
        self.workers = Some(workers);
        self
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            tokens: self.tokens.clone(),
            workers: self.workers.clone(),
        }
    }
}

/// The service [`AuthLayer`] makes.
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    tokens: Option<Arc<TokenFile>>,
    workers: Option<WorkerTokens>,
}

/// The token of an `authorization: Bearer <token>` header, if there is a usable one.
fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthenticated(message: &str) -> http::Response<Body> {
    with_info(Code::Unauthenticated, "UNAUTHENTICATED", message, &[]).into_http()
}

impl<S, B> Service<http::Request<B>> for Auth<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if let Some(tokens) = &self.tokens {
            let path = req.uri().path();
            if !PUBLIC_PREFIXES.iter().any(|p| path.starts_with(p)) {
                let principal = match bearer(req.headers()) {
                    Some(token) => tokens.principal(token),
                    None => {
                        let mut all = req.headers().get_all("x-agentry-worker-token").iter();
                        let token = all.next().and_then(|v| v.to_str().ok()).map(str::to_owned);
                        if all.next().is_some() {
                            // Which of two tokens would speak for the caller is not ours to
                            // guess: the call is malformed, as a repeated x-agentry-spawns is.
                            let status = super::status::invalid(
                                "x-agentry-worker-token",
                                "must be given at most once",
                            );
                            return Box::pin(std::future::ready(Ok(status.into_http())));
                        }
                        let (Some(token), Some(workers)) = (token, self.workers.as_ref()) else {
                            return Box::pin(std::future::ready(Ok(unauthenticated(
                                "missing bearer token",
                            ))));
                        };
                        let lookup = workers(token);
                        // The service that was polled ready goes with the request; a fresh
                        // clone stays for the next one (tower's rule for services used after
                        // an await).
                        let clone = self.inner.clone();
                        let mut inner = std::mem::replace(&mut self.inner, clone);
                        return Box::pin(async move {
                            match lookup.await {
                                Ok(Some((principal, worker))) => {
                                    req.extensions_mut().insert(principal.clone());
                                    req.extensions_mut().insert(worker);
                                    let resp = inner.call(req).await;
                                    Ok(with_principal(resp?, principal))
                                }
                                _ => Ok(unauthenticated("missing bearer token")),
                            }
                        });
                    }
                };
                let Some(principal) = principal else {
                    return Box::pin(std::future::ready(Ok(unauthenticated(
                        "unknown bearer token",
                    ))));
                };
                req.extensions_mut().insert(principal.clone());
                let fut = self.inner.call(req);
                return Box::pin(async move { Ok(with_principal(fut.await?, principal)) });
            }
        }
        Box::pin(self.inner.call(req))
    }
}

/// Hands the caller's principal back to the trace layer, which logs and records it.
fn with_principal(mut resp: http::Response<Body>, principal: Principal) -> http::Response<Body> {
    resp.extensions_mut().insert(principal);
    resp
}

/// Largest accepted value of one request header (metadata key), in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 16 * 1024;
/// Largest accepted total of all request headers (names and values), in bytes.
pub const MAX_HEADER_TOTAL_BYTES: usize = 64 * 1024;
/// The HTTP/2 header list size the server advertises and decodes. Larger than
/// [`MAX_HEADER_TOTAL_BYTES`] on purpose: an oversized header block is still decoded (HPACK state
/// is per connection) and then refused as one call's `INVALID_ARGUMENT`, instead of the HTTP/2
/// layer tearing down a connection other calls share. Beyond this the HTTP/2 layer protects
/// itself.
pub const HTTP2_MAX_HEADER_LIST_BYTES: u32 = 4 << 20;

/// Protocol limits of every call (docs/operations.md §8.2): refuses oversized metadata with
/// `INVALID_ARGUMENT` naming the key and the bound, and turns the transport's decode failures
/// (invalid UTF-8 in a string field, a message over the size limit) from `INTERNAL` /
/// `OUT_OF_RANGE` into `INVALID_ARGUMENT` — the caller sent a bad request, the service did not
/// fail.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProtocolLayer;

impl<S> Layer<S> for ProtocolLayer {
    type Service = Protocol<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Protocol { inner }
    }
}

/// The service [`ProtocolLayer`] makes.
#[derive(Clone, Debug)]
pub struct Protocol<S> {
    inner: S,
}

/// Why the request's headers are refused, if they are.
fn oversized_header(headers: &http::HeaderMap) -> Option<String> {
    let mut total = 0;
    for (name, value) in headers {
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return Some(format!(
                "metadata {} is {} bytes; the limit is {MAX_HEADER_VALUE_BYTES} bytes per value",
                super::request::quote(name.as_str()),
                value.len()
            ));
        }
        total += name.as_str().len() + value.len();
    }
    (total > MAX_HEADER_TOTAL_BYTES).then(|| {
        format!("metadata is {total} bytes in all; the limit is {MAX_HEADER_TOTAL_BYTES} bytes")
    })
}

/// The `grpc-status` in `headers`, read without building a whole [`Status`]: every response
/// passes here, and a successful one carries it only in its trailers.
fn grpc_code(headers: &http::HeaderMap) -> Option<Code> {
    static GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
    headers
        .get(&GRPC_STATUS)
        .map(|v| Code::from_bytes(v.as_bytes()))
}

/// What the caller sent wrong, when `status` is the transport's failure to decode a request
/// message (invalid UTF-8 in a string field, bad wire data, a message over the size limit);
/// `None` for any other status. Unary calls and runner streams both say it this way.
pub fn decode_failure(status: &Status) -> Option<String> {
    let message = status.message();
    match status.code() {
        Code::Internal if message.starts_with("failed to decode Protobuf message") => {
            let detail = message.split_once(": ").map_or(message, |(_, rest)| rest);
            Some(format!("the request is not a valid message: {detail}"))
        }
        Code::OutOfRange if message.contains("message length too large") => {
            Some(format!("the request message is too large: {message}"))
        }
        _ => None,
    }
}

/// A transport-level refusal of the request body, rewritten as the caller's error.
fn rewrite_decode_error(resp: http::Response<Body>) -> http::Response<Body> {
    if !matches!(
        grpc_code(resp.headers()),
        Some(Code::Internal | Code::OutOfRange)
    ) {
        return resp;
    }
    let Some(status) = Status::from_header_map(resp.headers()) else {
        return resp;
    };
    let Some(rewritten) = decode_failure(&status) else {
        return resp;
    };
    with_info(Code::InvalidArgument, "INVALID_REQUEST", rewritten, &[]).into_http()
}

impl<S, B> Service<http::Request<B>> for Protocol<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if let Some(why) = oversized_header(req.headers()) {
            let resp = with_info(Code::InvalidArgument, "INVALID_REQUEST", why, &[]).into_http();
            return Box::pin(std::future::ready(Ok(resp)));
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map(rewrite_decode_error) })
    }
}

/// Opens a span per RPC (`rpc.service`, `rpc.method`, `rpc.grpc.status_code`, `latency_ms`,
/// `principal`), parented on the caller's `traceparent`; records [`Metrics::rpc`] and logs one
/// line when the response ends.
#[derive(Clone, Debug, Default)]
pub struct TraceLayer {
    metrics: Metrics,
}

impl TraceLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Trace {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`TraceLayer`] makes.
#[derive(Clone, Debug)]
pub struct Trace<S> {
    inner: S,
    metrics: Metrics,
}

/// Everything needed to close one RPC's span; taken exactly once.
struct Call {
    span: tracing::Span,
    started: Instant,
    /// `/pkg.Service/Method`, shared with the request (no copy).
    path: http::uri::PathAndQuery,
    /// Who called, once the auth layer has said so.
    principal: Option<Principal>,
    metrics: Metrics,
}

impl Call {
    fn finish(self, code: Code) {
        let elapsed = self.started.elapsed();
        // Whole microseconds: `0.373`, not `0.37269100000000005`.
        let latency_ms = elapsed.as_micros() as f64 / 1000.0;
        let (service, method) = split_path(self.path.path());
        self.span.record("rpc.grpc.status_code", code as i32);
        self.span.record("latency_ms", latency_ms);
        if is_server_fault(code) {
            self.span.record("otel.status_code", "ERROR");
        }
        self.metrics.rpc(service, method, code, elapsed);
        // The log line carries the span's fields itself: the log layer does not format the
        // span (see `telemetry::RPC_SPAN`).
        let principal = self.principal.as_ref().map(|p| &*p.0);
        let line = telemetry::RpcLine {
            level: if service.starts_with("grpc.") {
                tracing::Level::DEBUG
            } else {
                tracing::Level::INFO
            },
            service,
            method,
            code: code_name(code),
            latency_ms,
            principal,
        };
        let wanted = match line.level {
            tracing::Level::DEBUG => {
                tracing::enabled!(target: telemetry::RPC_LOG_TARGET, tracing::Level::DEBUG)
            }
            _ => tracing::enabled!(target: telemetry::RPC_LOG_TARGET, tracing::Level::INFO),
        };
        if !wanted || telemetry::rpc_line(&line) {
            return;
        }
        let (code, principal) = (line.code, principal.map(tracing::field::display));
        if line.level == tracing::Level::DEBUG {
            tracing::event!(target: telemetry::RPC_LOG_TARGET, parent: &self.span, tracing::Level::DEBUG, rpc.service = %service, rpc.method = %method, code = %code, latency_ms, principal, "rpc finished");
        } else {
            tracing::event!(target: telemetry::RPC_LOG_TARGET, parent: &self.span, tracing::Level::INFO, rpc.service = %service, rpc.method = %method, code = %code, latency_ms, principal, "rpc finished");
        }
    }
}

/// The name of a gRPC status code, as the log line writes it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// Codes that mean the service, not the caller, failed.
fn is_server_fault(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown | Code::Internal | Code::Unavailable | Code::DataLoss | Code::Unimplemented
    )
}

/// Splits `/pkg.Service/Method`.
fn split_path(path: &str) -> (&str, &str) {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.rsplit_once('/').unwrap_or((path, ""))
}

impl<S, B> Service<http::Request<B>> for Trace<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
        let (service, method) = split_path(path.path());
        let span = tracing::info_span!(
            target: telemetry::RPC_SPAN_TARGET,
            telemetry::RPC_SPAN,
            otel.name = path.path().trim_start_matches('/'),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = method,
            rpc.grpc.status_code = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
            principal = tracing::field::Empty,
        );
        telemetry::set_remote_parent(&span, req.headers());
        let mut call = Call {
            span,
            started: Instant::now(),
            path,
            principal: None,
            metrics: self.metrics.clone(),
        };
        let fut = {
            let _in = call.span.enter();
            self.inner.call(req)
        };
        Box::pin(async move {
            let result = tracing::Instrument::instrument(fut, call.span.clone()).await;
            match result {
                Ok(mut resp) => {
                    call.principal = resp.extensions_mut().remove::<Principal>();
                    if let Some(p) = &call.principal {
                        call.span.record("principal", &*p.0);
                    }
                    // A trailers-only response (every error) carries the code in its headers.
                    let code = grpc_code(resp.headers());
                    let (parts, body) = resp.into_parts();
                    let body = Body::new(TracedBody {
                        inner: body,
                        code,
                        call: Some(call),
                    });
                    Ok(http::Response::from_parts(parts, body))
                }
                Err(e) => {
                    call.finish(Code::Internal);
                    Err(e)
                }
            }
        })
    }
}

/// A response body that closes the RPC's span when the last frame (the trailers) goes out, or
/// when it is dropped early (the caller went away: `CANCELLED`).
struct TracedBody {
    inner: Body,
    /// The code from the response headers, if it was there.
    code: Option<Code>,
    call: Option<Call>,
}

impl TracedBody {
    fn finish(&mut self, code: Code) {
        if let Some(call) = self.call.take() {
            call.finish(code);
        }
    }
}

impl HttpBody for TracedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = grpc_code(trailers).or(this.code).unwrap_or(Code::Unknown);
                    this.finish(code);
                }
            }
            Some(Err(status)) => this.finish(status.code()),
            None => {
                let code = this.code.unwrap_or(Code::Unknown);
                this.finish(code);
            }
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TracedBody {
    fn drop(&mut self) {
        let code = self.code.unwrap_or(Code::Cancelled);
        self.finish(code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_header_parsing() {
        let h = |v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            m
        };
        assert_eq!(bearer(&h("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&h("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&h("Basic abc")), None);
        assert_eq!(bearer(&h("Bearer ")), None);
        assert_eq!(bearer(&http::HeaderMap::new()), None);
    }

    #[test]
    fn paths_split_into_service_and_method() {
        assert_eq!(
            split_path("/agentry.v1.AgentRegistryService/ListAgents"),
            ("agentry.v1.AgentRegistryService", "ListAgents")
        );
        assert_eq!(split_path("/odd"), ("odd", ""));
    }
}
