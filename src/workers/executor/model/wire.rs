//! The Chat Completions wire (docs/model.md §11.3, §11.9): lenient decoding of streamed chunks
//! into one [`Answer`], and the HTTP client behind the small [`ModelClient`] trait — one
//! streamed request per turn, retried on 429, 5xx and failed connections (honouring
//! `Retry-After`) but never once part of an answer has arrived.
//!
//! Real servers differ in small ways (`finish_reason: ""`, `usage: {}`, `choices: []`, a tool
//! call without `index`), so every field is optional here and anything unknown is ignored.

use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::Value;

/// One tool call the model made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// Its id, echoed in the answer.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// JSON text, as the model wrote it.
    pub arguments: String,
}

/// Tokens one turn used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
    /// Total tokens (prompt + completion when the provider gives no total).
    pub total: u64,
}

/// One turn's assembled answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The text.
    pub content: String,
    /// The tool calls, in the model's order.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped, when it said (`""` is kept as none).
    pub finish_reason: Option<String>,
    /// Token usage, when the provider sent it.
    pub usage: Option<Usage>,
    /// How many events the stream carried.
    pub events: usize,
}

/// Where one turn goes.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `{base_url}/chat/completions`.
    pub url: String,
    /// The bearer key, when the provider has one.
    pub api_key: Option<String>,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
}

/// How one turn may take.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Silence allowed before and between events.
    pub idle: Duration,
    /// Retries of a retryable failure.
    pub max_retries: u32,
    /// The first backoff (doubled each retry, at most [`MAX_BACKOFF`]).
    pub backoff: Duration,
}

/// The longest wait between two attempts, `Retry-After` included.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a turn failed; the text is the worker's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TurnError(pub String);

/// Sends one turn and assembles the streamed answer. A trait so the loop can be driven without
/// a network in unit tests; the service uses [`HttpModel`].
#[async_trait::async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// Posts `body` to `endpoint` and returns the assembled answer.
    async fn turn(
        &self,
        endpoint: &Endpoint,
        body: &Value,
        timing: Timing,
    ) -> Result<Answer, TurnError>;
}

/// The HTTP client of every model worker (one connection pool).
pub struct HttpModel {
    http: reqwest::Client,
}

impl HttpModel {
    /// A client with TLS on the process's rustls provider (installed at start-up).
    pub fn new() -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("agentry/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self { http })
    }
}

/// One attempt's failure: retryable or not, and how long the server asked to wait.
enum Attempt {
    Retry {
        why: String,
        after: Option<Duration>,
    },
    Fatal(String),
}

#[async_trait::async_trait]
impl ModelClient for HttpModel {
    async fn turn(
        &self,
        endpoint: &Endpoint,
        body: &Value,
        timing: Timing,
    ) -> Result<Answer, TurnError> {
        let mut backoff = timing.backoff;
        let mut retries = 0;
        loop {
            match self.attempt(endpoint, body, timing.idle).await {
                Ok(answer) => return Ok(answer),
                Err(Attempt::Fatal(why)) => return Err(TurnError(why)),
                Err(Attempt::Retry { why, after }) => {
                    if retries >= timing.max_retries {
                        return Err(TurnError(format!(
                            "{why} (after {retries} retries, model.max_retries)"
                        )));
                    }
                    retries += 1;
                    let wait = after.unwrap_or(backoff).min(MAX_BACKOFF);
                    tracing::warn!(url = %endpoint.url, error = %why, wait_ms = wait.as_millis() as u64, retry = retries, "model request retried");
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

impl HttpModel {
    async fn attempt(
        &self,
        endpoint: &Endpoint,
        body: &Value,
        idle: Duration,
    ) -> Result<Answer, Attempt> {
        let mut req = self
            .http
            .post(&endpoint.url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(body);
        if let Some(key) = &endpoint.api_key {
            req = req.bearer_auth(key);
        }
        for (k, v) in &endpoint.headers {
            req = req.header(k, v);
        }
        let resp = match tokio::time::timeout(idle, req.send()).await {
            Err(_) => return Err(Attempt::Fatal(idle_message(idle))),
            Ok(Err(e)) if e.is_connect() || e.is_request() => {
                return Err(Attempt::Retry {
                    why: format!("model request failed: {}", error_chain(&e)),
                    after: None,
                });
            }
            Ok(Err(e)) => {
                return Err(Attempt::Fatal(format!(
                    "model request failed: {}",
                    error_chain(&e)
                )));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            let after = retry_after(resp.headers());
            let text = tokio::time::timeout(idle, resp.text())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            let why = format!("model request failed: {status}: {}", error_message(&text));
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                Attempt::Retry { why, after }
            } else {
                Attempt::Fatal(why)
            });
        }
        read_stream(resp, idle).await.map_err(Attempt::Fatal)
    }
}

/// Reads the event stream of a successful response into one answer. Nothing here is retried:
/// part of an answer has arrived.
async fn read_stream(resp: reqwest::Response, idle: Duration) -> Result<Answer, String> {
    let mut events = sse_stream::SseStream::from_bytes_stream(resp.bytes_stream());
    let mut assembly = Assembly::default();
    let mut done = false;
    loop {
        let next = tokio::time::timeout(idle, events.next())
            .await
            .map_err(|_| idle_message(idle))?;
        match next {
            None => break,
            Some(Err(e)) => {
                return Err(format!(
                    "model stream broke after {} events: {e}",
                    assembly.events
                ));
            }
            Some(Ok(sse)) => {
                let Some(data) = sse.data else { continue };
                // Read on to the end of the body after `[DONE]`, so the connection goes back to
                // the pool instead of being closed with unread bytes.
                if done {
                    continue;
                }
                if data.trim() == "[DONE]" {
                    done = true;
                    continue;
                }
                assembly.take(&data)?;
            }
        }
    }
    Ok(assembly.finish())
}

/// The worker's error for a silent stream.
fn idle_message(idle: Duration) -> String {
    format!(
        "the model sent nothing for {} (model.idle_timeout)",
        humantime::format_duration(idle)
    )
}

/// An error and its causes on one line (reqwest's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `Retry-After` in seconds or as an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The provider's `error.message`, else the body's first 512 characters.
fn error_message(body: &str) -> String {
    #[derive(Deserialize)]
    struct Wrapper {
        error: Option<Inner>,
    }
    #[derive(Deserialize)]
    struct Inner {
        message: Option<String>,
    }
    if let Ok(Wrapper {
        error: Some(Inner { message: Some(m) }),
    }) = serde_json::from_str(body)
    {
        return m;
    }
    let trimmed = body.trim();
    match trimmed.char_indices().nth(512) {
        Some((i, _)) => format!("{}…", &trimmed[..i]),
        None if trimmed.is_empty() => "(no body)".to_owned(),
        None => trimmed.to_owned(),
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    usage: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Choice {
    delta: Option<Delta>,
    /// Some servers put a whole message here instead of a delta.
    message: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<DeltaCall>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DeltaCall {
    index: Option<usize>,
    id: Option<String>,
    function: Option<DeltaFunction>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DeltaFunction {
    name: Option<String>,
    /// Text, or (some servers) an object already parsed.
    arguments: Option<Value>,
}

/// An answer being assembled from its events.
#[derive(Default)]
pub(super) struct Assembly {
    content: String,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    events: usize,
}

impl Assembly {
    /// Takes one event's `data`.
    pub(super) fn take(&mut self, data: &str) -> Result<(), String> {
        self.events += 1;
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| format!("model stream: event {} is not valid JSON: {e}", self.events))?;
        if let Some(u) = chunk.usage.as_ref().and_then(usage_of) {
            self.usage = Some(u);
        }
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta.or(choice.message) else {
                continue;
            };
            if let Some(text) = delta.content {
                self.content.push_str(&text);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                self.take_call(call);
            }
        }
        Ok(())
    }

    /// One tool-call delta: a new call (a new index, or a new id without index) or more of one.
    fn take_call(&mut self, call: DeltaCall) {
        let at = match call.index {
            Some(i) => i,
            None => match (&call.id, self.calls.last()) {
                (Some(id), Some(last)) if *id == last.id => self.calls.len() - 1,
                (None, Some(_)) => self.calls.len() - 1,
                _ => self.calls.len(),
            },
        };
        if at >= self.calls.len() {
            // Bounded by the stream itself; an index far ahead only adds empty slots.
            self.calls.resize_with(at + 1, ToolCall::default);
        }
        let slot = &mut self.calls[at];
        if let Some(id) = call.id.filter(|i| !i.is_empty()) {
            slot.id = id;
        }
        if let Some(f) = call.function {
            if let Some(name) = f.name.filter(|n| !n.is_empty()) {
                slot.name = name;
            }
            match f.arguments {
                Some(Value::String(s)) => slot.arguments.push_str(&s),
                Some(Value::Null) | None => {}
                Some(other) => slot.arguments.push_str(&other.to_string()),
            }
        }
    }

    /// The answer, with every call named and given an id.
    pub(super) fn finish(self) -> Answer {
        let calls = self
            .calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .enumerate()
            .map(|(i, mut c)| {
                if c.id.is_empty() {
                    c.id = format!("call_{i}");
                }
                if c.arguments.trim().is_empty() {
                    c.arguments = "{}".to_owned();
                }
                c
            })
            .collect();
        Answer {
            content: self.content,
            tool_calls: calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            events: self.events,
        }
    }
}

/// `usage` leniently: `{}` or missing counts are zero, and a missing total is the sum.
fn usage_of(v: &Value) -> Option<Usage> {
    let obj = v.as_object()?;
    let n = |k: &str| obj.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (prompt, completion) = (n("prompt_tokens"), n("completion_tokens"));
    let total = obj
        .get("total_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(prompt + completion);
    Some(Usage {
        prompt,
        completion,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(events: &[&str]) -> Result<Answer, String> {
        let mut a = Assembly::default();
        for e in events {
            a.take(e)?;
        }
        Ok(a.finish())
    }

    #[test]
    fn split_tool_calls_text_and_usage_are_assembled() {
        let a = assemble(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"Look"}}]}"#,
            r#"{"choices":[{"delta":{"content":"ing."}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"task","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ag"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"submit_result","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ent\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":""}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}"#,
        ])
        .unwrap();
        assert_eq!(a.content, "Looking.");
        assert_eq!(a.tool_calls.len(), 2);
        assert_eq!(a.tool_calls[0].arguments, r#"{"agent":1}"#);
        assert_eq!(a.tool_calls[1].name, "submit_result");
        assert_eq!(a.finish_reason, None);
        assert_eq!(
            a.usage,
            Some(Usage {
                prompt: 7,
                completion: 5,
                total: 12
            })
        );
        assert_eq!(a.events, 9);
    }

    #[test]
    fn lenient_shapes_are_accepted_and_bad_json_is_named() {
        let a = assemble(&[
            r#"{"choices":null,"usage":{}}"#,
            r#"{"choices":[{"message":{"content":"hi","tool_calls":[{"function":{"name":"t","arguments":{"x":1}}}]},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(a.usage, Some(Usage::default()));
        assert_eq!(a.content, "hi");
        assert_eq!(a.tool_calls[0].id, "call_0");
        assert_eq!(a.tool_calls[0].arguments, r#"{"x":1}"#);
        let e = assemble(&[r#"{"choices":[]}"#, "{nope"]).unwrap_err();
        assert!(
            e.starts_with("model stream: event 2 is not valid JSON: "),
            "{e}"
        );
    }

    #[test]
    fn retry_after_and_error_bodies() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(
            "retry-after",
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
        assert_eq!(
            error_message(r#"{"error":{"message":"bad key"}}"#),
            "bad key"
        );
        assert_eq!(error_message(""), "(no body)");
    }
}
