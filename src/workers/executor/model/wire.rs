//! The Chat Completions wire (docs/model.md §11.3, §11.9): lenient decoding of streamed chunks
//! into one [`Answer`], and the HTTP client behind the small [`ModelClient`] trait — one
//! streamed request per turn, retried on 429, 5xx and failed connections (honouring
//! `Retry-After`) but never once part of an answer has arrived.
//!
//! Real servers differ in small ways (`finish_reason: ""`, `usage: {}`, `choices: []`, a tool
//! call without `index`, one JSON answer instead of a stream), so every field is optional here
//! and anything unknown is ignored. Nothing from the endpoint is trusted: a body, an event, an
//! answer, an error body, the tool calls and `Retry-After` are each bounded before they are
//! held (docs/model.md §11.9), and a stream that stops early is not an answer.

use crate::workers::executor::sse::Frames;
use std::time::Duration;

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

/// How long one turn may take and how much of it is read: everything that arrives from the
/// endpoint is bounded before it is held (docs/model.md §11.9).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Silence allowed before and between events.
    pub idle: Duration,
    /// Retries of a retryable failure.
    pub max_retries: u32,
    /// The first backoff (doubled each retry, at most `max_backoff`).
    pub backoff: Duration,
    /// The longest wait between attempts, `Retry-After` included.
    pub max_backoff: Duration,
    /// Bytes of one answer body.
    pub response_bytes: usize,
    /// Bytes of one streamed event.
    pub event_bytes: usize,
    /// Bytes of text and tool arguments of one answer.
    pub answer_bytes: usize,
    /// Bytes of an error body read for its message.
    pub error_bytes: usize,
    /// Tool calls of one answer.
    pub tool_calls: usize,
}

impl Timing {
    /// The bounds of `model` (docs/model.md §11.10), with the first backoff.
    pub fn of(looping: &crate::config::ModelLoop, backoff: Duration) -> Self {
        Self {
            idle: looping.idle_timeout,
            max_retries: looping.max_retries,
            backoff,
            max_backoff: looping.max_backoff,
            response_bytes: looping.max_response_bytes,
            event_bytes: looping.max_event_bytes,
            answer_bytes: looping.max_answer_bytes,
            error_bytes: looping.max_error_bytes,
            tool_calls: looping.max_tool_calls,
        }
    }
}

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
            match self.attempt(endpoint, body, &timing).await {
                Ok(answer) => return Ok(answer),
                Err(Attempt::Fatal(why)) => return Err(TurnError(why)),
                Err(Attempt::Retry { why, after }) => {
                    if retries >= timing.max_retries {
                        return Err(TurnError(format!(
                            "{why} (after {retries} retries, model.max_retries)"
                        )));
                    }
                    retries += 1;
                    let wait = after.unwrap_or(backoff).min(timing.max_backoff);
                    tracing::warn!(url = %endpoint.url, error = %why, wait_ms = wait.as_millis() as u64, retry = retries, "model request retried");
                    tokio::time::sleep(wait).await;
                    backoff = backoff.saturating_mul(2).min(timing.max_backoff);
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
        timing: &Timing,
    ) -> Result<Answer, Attempt> {
        let idle = timing.idle;
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
            let after = retry_after(resp.headers(), timing.max_backoff);
            // Only the head of an error body is read: a hostile or broken endpoint may send
            // any amount, and the message needs a few hundred bytes.
            let mut body = Body::new(resp, idle);
            let mut text = Vec::new();
            while text.len() < timing.error_bytes {
                match body.next().await {
                    Ok(Some(chunk)) => text.extend_from_slice(&chunk),
                    Ok(None) | Err(_) => break,
                }
            }
            text.truncate(timing.error_bytes);
            let why = format!(
                "model request failed: {status}: {}",
                error_message(&String::from_utf8_lossy(&text))
            );
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                Attempt::Retry { why, after }
            } else {
                Attempt::Fatal(why)
            });
        }
        let kind = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let body = Body::new(resp, idle);
        match kind.as_str() {
            // Some servers ignore `stream: true` and answer with one JSON document.
            "application/json" => read_json(body, timing).await,
            "" | "text/event-stream" => read_stream(body, timing).await,
            other => Err(format!(
                "the model endpoint answered {status} with content type {:?}, neither an event stream (text/event-stream) nor JSON",
                other.chars().take(64).collect::<String>()
            )),
        }
        .map_err(Attempt::Fatal)
    }
}

/// A response body read chunk by chunk, each within the idle timeout. Only the body stream is
/// kept: the response's headers are slices of the connection's read buffer, and an idle worker
/// holding them would pin that buffer for as long as it waits.
struct Body {
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    idle: Duration,
}

impl Body {
    fn new(resp: reqwest::Response, idle: Duration) -> Self {
        Self {
            stream: Box::pin(resp.bytes_stream()),
            idle,
        }
    }

    async fn next(&mut self) -> Result<Option<bytes::Bytes>, String> {
        use futures_util::StreamExt;
        match tokio::time::timeout(self.idle, self.stream.next()).await {
            Err(_) => Err(idle_message(self.idle)),
            Ok(Some(Err(e))) => Err(error_chain(&e)),
            Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
            Ok(None) => Ok(None),
        }
    }
}

/// The failure of an answer body longer than `model.max_response_bytes`.
fn too_long(limit: usize) -> String {
    format!(
        "the model's answer is over {limit} bytes (model.max_response_bytes); the rest was not read"
    )
}

/// A non-streamed answer: one `chat.completion` document, read whole up to the bound.
async fn read_json(mut body: Body, timing: &Timing) -> Result<Answer, String> {
    let mut data = Vec::new();
    while let Some(chunk) = body
        .next()
        .await
        .map_err(|e| format!("model answer broke after {} bytes: {e}", data.len()))?
    {
        if data.len() + chunk.len() > timing.response_bytes {
            return Err(too_long(timing.response_bytes));
        }
        data.extend_from_slice(&chunk);
    }
    let text = std::str::from_utf8(&data)
        .map_err(|_| "the model's JSON answer is not UTF-8".to_owned())?;
    let mut assembly = Assembly::bounded(timing);
    assembly.whole = true;
    assembly.take(text)?;
    if assembly.events == 1 && !assembly.saw_choice {
        return Err(
            "the model's JSON answer has no choices: it is not a chat completion".to_owned(),
        );
    }
    Ok(assembly.finish())
}

/// Reads the event stream of a successful response into one answer. Nothing here is retried:
/// part of an answer has arrived. Framing is done here rather than by an SSE crate so that a
/// line and an event are bounded while they are read, not after they are held whole.
async fn read_stream(mut body: Body, timing: &Timing) -> Result<Answer, String> {
    let mut frames = Frames::new(timing.event_bytes, "model stream", "model.max_event_bytes");
    let mut assembly = Assembly::bounded(timing);
    let mut done = false;
    let mut read = 0usize;
    loop {
        let chunk = match body.next().await {
            Ok(chunk) => chunk,
            // After `[DONE]` the answer is whole: a body that then breaks is let go.
            Err(_) if done => break,
            Err(e) if e.starts_with("the model sent nothing") => return Err(e),
            Err(e) => {
                return Err(format!(
                    "model stream broke after {} events: {e}",
                    assembly.events
                ));
            }
        };
        let Some(chunk) = chunk else { break };
        read += chunk.len();
        if done {
            // Read on to the end of the body after `[DONE]`, so the connection goes back to
            // the pool instead of being closed with unread bytes; past the bound it is let go.
            if read > timing.response_bytes {
                break;
            }
            continue;
        }
        if read > timing.response_bytes {
            return Err(too_long(timing.response_bytes));
        }
        for data in frames.push(&chunk)? {
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
    if !done && let Some(data) = frames.finish() {
        if data.trim() == "[DONE]" {
            done = true;
        } else {
            assembly.take(&data)?;
        }
    }
    if !done && assembly.finish_reason.is_none() {
        return Err(format!(
            "model stream ended after {} events without [DONE] or a finish_reason: the answer is incomplete",
            assembly.events
        ));
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

/// `Retry-After` in seconds or as an HTTP date, capped at `max` before it becomes a duration
/// (a server may ask for `1e20` seconds).
fn retry_after(headers: &reqwest::header::HeaderMap, max: Duration) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::from_secs_f64(secs.min(max.as_secs_f64())));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .min(max),
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
    match body.trim() {
        "" => "(no body)".to_owned(),
        trimmed => head_chars(trimmed, 512),
    }
}

/// The first `n` characters of `text`, with `…` when there were more.
fn head_chars(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
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
    /// A number as the API sends it; anything else is refused by name, not as bad JSON.
    index: Option<Value>,
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

/// An answer being assembled from its events, within its bounds.
pub(super) struct Assembly {
    content: String,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    events: usize,
    /// Whether any event had a `choices` entry (a JSON answer without one is not an answer).
    saw_choice: bool,
    /// The answer is one JSON document, not a stream of events (for the wording of errors).
    whole: bool,
    /// Bytes of text and arguments so far, against `max_bytes`.
    bytes: usize,
    max_bytes: usize,
    max_calls: usize,
}

#[cfg(test)]
impl Default for Assembly {
    fn default() -> Self {
        Self::bounded(&Timing::of(
            &crate::config::ModelLoop::default(),
            Duration::ZERO,
        ))
    }
}

impl Assembly {
    /// An empty answer with the bounds of `timing`.
    pub(super) fn bounded(timing: &Timing) -> Self {
        Self {
            content: String::new(),
            calls: Vec::new(),
            finish_reason: None,
            usage: None,
            events: 0,
            saw_choice: false,
            whole: false,
            bytes: 0,
            max_bytes: timing.answer_bytes,
            max_calls: timing.tool_calls,
        }
    }

    /// What an error names: the current event of a stream, or the JSON answer.
    fn place(&self) -> String {
        if self.whole {
            "the model's JSON answer".to_owned()
        } else {
            format!("model stream: event {}", self.events)
        }
    }

    /// Takes one event's `data`.
    pub(super) fn take(&mut self, data: &str) -> Result<(), String> {
        self.events += 1;
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| format!("{} is not valid JSON: {e}", self.place()))?;
        if let Some(u) = chunk.usage.as_ref().and_then(usage_of) {
            self.usage = Some(u);
        }
        for choice in chunk.choices.unwrap_or_default() {
            self.saw_choice = true;
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta.or(choice.message) else {
                continue;
            };
            if let Some(text) = delta.content {
                self.grow(text.len())?;
                self.content.push_str(&text);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                self.take_call(call)?;
            }
        }
        Ok(())
    }

    /// Counts `n` more bytes of the answer against its bound.
    fn grow(&mut self, n: usize) -> Result<(), String> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.max_bytes {
            return Err(format!(
                "the model's answer is over {} bytes of text and tool arguments (model.max_answer_bytes)",
                self.max_bytes
            ));
        }
        Ok(())
    }

    /// One tool-call delta: a new call (a new index, or a new id without index) or more of one.
    fn take_call(&mut self, call: DeltaCall) -> Result<(), String> {
        let at = match &call.index {
            Some(Value::Null) | None => match (&call.id, self.calls.last()) {
                (Some(id), Some(last)) if *id == last.id => self.calls.len() - 1,
                (None, Some(_)) => self.calls.len() - 1,
                _ => self.calls.len(),
            },
            Some(v) => match v.as_u64().and_then(|i| usize::try_from(i).ok()) {
                Some(i) => i,
                None => {
                    return Err(format!(
                        "{}: tool call index {} is not a non-negative integer",
                        self.place(),
                        head_chars(&v.to_string(), 64)
                    ));
                }
            },
        };
        if at >= self.max_calls {
            return Err(format!(
                "{}: tool call index {at} is over the {} calls one answer may make (model.max_tool_calls)",
                self.place(),
                self.max_calls
            ));
        }
        if at >= self.calls.len() {
            // Within the bound just checked: at most `max_calls` slots.
            self.calls.resize_with(at + 1, ToolCall::default);
        }
        let mut added = 0;
        let slot = &mut self.calls[at];
        if let Some(id) = call.id.filter(|i| !i.is_empty()) {
            added += id.len();
            slot.id = id;
        }
        if let Some(f) = call.function {
            if let Some(name) = f.name.filter(|n| !n.is_empty()) {
                added += name.len();
                slot.name = name;
            }
            match f.arguments {
                Some(Value::String(s)) => {
                    added += s.len();
                    slot.arguments.push_str(&s);
                }
                Some(Value::Null) | None => {}
                Some(other) => {
                    let text = other.to_string();
                    added += text.len();
                    slot.arguments.push_str(&text);
                }
            }
        }
        self.grow(added)
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

    #[test]
    fn tool_calls_and_answers_are_bounded() {
        let big = r#"{"choices":[{"delta":{"tool_calls":[{"index":4000000000,"id":"c","function":{"name":"t"}}]}}]}"#;
        let e = assemble(&[big]).unwrap_err();
        assert_eq!(
            e,
            "model stream: event 1: tool call index 4000000000 is over the 64 calls one answer may make (model.max_tool_calls)"
        );
        let neg = r#"{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}"#;
        assert!(
            assemble(&[neg])
                .unwrap_err()
                .ends_with("tool call index -1 is not a non-negative integer")
        );
        // Calls without an index count against the same bound.
        let mut a = Assembly::default();
        for i in 0..64 {
            a.take(&format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{{"id":"c{i}","function":{{"name":"t"}}}}]}}}}]}}"#)).unwrap();
        }
        assert!(
            a.take(r#"{"choices":[{"delta":{"tool_calls":[{"id":"c64"}]}}]}"#)
                .is_err()
        );
        let mut t = Timing::of(&crate::config::ModelLoop::default(), Duration::ZERO);
        t.answer_bytes = 10;
        let mut a = Assembly::bounded(&t);
        a.take(r#"{"choices":[{"delta":{"content":"0123456789"}}]}"#)
            .unwrap();
        assert_eq!(
            a.take(r#"{"choices":[{"delta":{"content":"!"}}]}"#)
                .unwrap_err(),
            "the model's answer is over 10 bytes of text and tool arguments (model.max_answer_bytes)"
        );
    }

    #[test]
    fn events_are_framed_within_their_bound() {
        let mut f = Frames::new(32, "model stream", "model.max_event_bytes");
        assert_eq!(
            f.push(b": comment\ndata: a\r\nda").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            f.push(b"ta: b\n\ndata: [DONE]").unwrap(),
            vec!["a\nb".to_owned()]
        );
        assert_eq!(f.finish().as_deref(), Some("[DONE]"));
        let mut f = Frames::new(32, "model stream", "model.max_event_bytes");
        let e = f.push(&[b'x'; 40]).unwrap_err();
        assert_eq!(
            e,
            "model stream: an event is over 32 bytes (model.max_event_bytes)"
        );
        let mut f = Frames::new(32, "model stream", "model.max_event_bytes");
        f.push(b"data: 0123456789012345\n").unwrap();
        assert!(f.push(b"data: 0123456789012345\n").is_err());
    }

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
        let max = Duration::from_secs(30);
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h, max), Some(Duration::from_secs(2)));
        h.insert("retry-after", "1e20".parse().unwrap());
        assert_eq!(retry_after(&h, max), Some(max));
        h.insert(
            "retry-after",
            "Fri, 31 Dec 9999 23:59:59 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h, max), Some(max));
        h.insert(
            "retry-after",
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h, max), Some(Duration::ZERO));
        for bad in ["soon", "-1", "NaN", "inf"] {
            h.insert("retry-after", bad.parse().unwrap());
            assert_eq!(retry_after(&h, max), None, "{bad}");
        }
        assert_eq!(
            error_message(r#"{"error":{"message":"bad key"}}"#),
            "bad key"
        );
        assert_eq!(error_message(""), "(no body)");
    }
}
