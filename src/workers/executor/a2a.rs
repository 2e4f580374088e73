//! The `a2a` executor (docs/a2a.md §13.4): a `kind: remote` persona runs on the A2A agent its
//! card names. The executor fetches the card (bounded in time and size), picks its JSON-RPC
//! interface (A2A 1.0 when offered, else 0.3), sends the prompt as a message — streamed when the
//! card says it can stream, else blocking and then polled — and maps what comes back: status
//! messages to progress, artifacts to the result, `input-required` to a question the caller
//! answers, a terminal state to the worker's end. A stop is forwarded as `CancelTask`, follow-up
//! messages as messages on the same remote task. Everything the remote agent sends is untrusted
//! and bounded; every failure names the URL and what went wrong.
//!
//! What the worker keeps between runs (an answered question, a continuation) is its *session*:
//! the remote task and context, recorded as the worker's `session_ref`.

use std::{
    collections::BTreeMap,
    sync::{Arc, OnceLock},
    time::Duration,
};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Assignment, BoxFuture, Executor, Job, Outcome, Started, model::Agentry, sse::Frames};
use crate::{config::A2aRemote, resolve::RemoteAgent, workers::model::ProgressKind};

/// How long a forwarded stop (`CancelTask`) may take before the worker is recorded killed.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a blocking remote agent's unfinished task is read again, and the inbox looked at.
const POLL_EVERY: Duration = Duration::from_millis(250);
/// Largest session reference kept on the worker row.
const MAX_SESSION_BYTES: usize = 4096;

/// What the executor is configured with.
#[derive(Debug, Clone)]
pub struct A2aSettings {
    /// `a2a.card_timeout`.
    pub card_timeout: Duration,
    /// `a2a.remotes`: per persona, how to authenticate.
    pub remotes: BTreeMap<String, A2aRemote>,
    /// Largest accepted card, in bytes.
    pub max_card_bytes: usize,
    /// Largest accepted event or response, in bytes.
    pub max_event_bytes: usize,
    /// Largest result (`executor.max_output_bytes`).
    pub max_result_bytes: usize,
}

/// Runs remote personas' workers on their A2A agents.
pub struct A2aExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    settings: A2aSettings,
    agentry: OnceLock<Arc<dyn Agentry>>,
}

/// The remote side of a worker, kept as its `session_ref`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Session {
    /// The JSON-RPC endpoint.
    url: String,
    /// A2A 1.0 (else 0.3).
    v1: bool,
    /// The card says it streams.
    streaming: bool,
    /// The remote task, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task: Option<String>,
    /// The remote context, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context: Option<String>,
}

impl A2aExecutor {
    /// An executor with its own HTTP client (TLS on the process's rustls provider).
    pub fn new(settings: A2aSettings) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("agentry/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                settings,
                agentry: OnceLock::new(),
            }),
        })
    }

    /// Binds the service the executor reports progress and takes messages through.
    pub fn bind(&self, agentry: Arc<dyn Agentry>) {
        let _ = self.inner.agentry.set(agentry);
    }
}

impl Executor for A2aExecutor {
    fn admit(&self, eff: &crate::resolve::Effective, _: &[String]) -> Result<(), String> {
        let Some(remote) = &eff.remote else {
            return Err(format!("agent {} is not a remote agent", eff.name));
        };
        match (&remote.card_json, &remote.card_url) {
            (Some(_), _) => Ok(()),
            (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(())
            }
            (None, Some(url)) => Err(format!(
                "agent {}: agent_card_url {} is not an http or https URL",
                eff.name,
                crate::grpc::request::quote(url)
            )),
            (None, None) => Err(format!(
                "agent {} is kind: remote but names no agent_card_url or agent_card_json",
                eff.name
            )),
        }
    }

    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> BoxFuture<'static, Outcome> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let timeout = job.timeout;
            let Some(a) = job.assignment.clone() else {
                return Outcome::CouldNotStart {
                    reason: "the a2a executor needs the worker's assignment".to_owned(),
                };
            };
            let run = Run {
                inner: &inner,
                a: &a,
                cancel: &cancel,
                started: Some(started),
                bearer: None,
                result: Artifacts::default(),
                sent: 0,
                notes: Vec::new(),
                last_note: None,
            };
            match tokio::time::timeout(timeout, run.go()).await {
                Ok(outcome) => outcome,
                Err(_) => Outcome::TimedOut {
                    after: timeout,
                    stderr_tail: String::new(),
                },
            }
        })
    }

    fn messages(
        &self,
        _: &str,
        _: &crate::workers::model::WorkerRecord,
    ) -> Result<(), (&'static str, String)> {
        // Follow-ups go to the same remote task, or continue it (docs §13.4).
        Ok(())
    }
}

/// The artifacts of the remote task, assembled in order.
#[derive(Default)]
struct Artifacts {
    order: Vec<String>,
    texts: BTreeMap<String, String>,
    bytes: usize,
}

impl Artifacts {
    /// Adds one artifact update; `Err` once the whole is over `max`.
    fn add(&mut self, id: &str, text: &str, append: bool, max: usize) -> Result<(), String> {
        if !self.texts.contains_key(id) {
            self.order.push(id.to_owned());
        }
        let slot = self.texts.entry(id.to_owned()).or_default();
        if !append {
            self.bytes -= slot.len();
            slot.clear();
        }
        slot.push_str(text);
        self.bytes += text.len();
        if self.bytes > max {
            return Err(format!(
                "the remote agent's artifacts are over {max} bytes (executor.max_output_bytes)"
            ));
        }
        Ok(())
    }

    fn text(&self) -> Option<String> {
        (!self.order.is_empty()).then(|| {
            self.order
                .iter()
                .map(|id| self.texts[id].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// Where a remote task stands, in either dialect's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Rejected,
    Canceled,
    Unknown,
}

impl State {
    fn of(s: &str) -> Self {
        let s = s.strip_prefix("TASK_STATE_").unwrap_or(s);
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "submitted" => State::Submitted,
            "working" => State::Working,
            "input_required" => State::InputRequired,
            "auth_required" => State::AuthRequired,
            "completed" => State::Completed,
            "failed" => State::Failed,
            "rejected" => State::Rejected,
            "canceled" | "cancelled" => State::Canceled,
            _ => State::Unknown,
        }
    }

    /// The remote task will not move on by itself.
    fn ends(self) -> bool {
        !matches!(self, State::Submitted | State::Working | State::Unknown)
    }
}

/// The text of a message or an artifact's parts: texts as they are, data as JSON, files named.
fn parts_text(parts: Option<&Value>) -> String {
    let Some(parts) = parts.and_then(Value::as_array) else {
        return String::new();
    };
    let mut out = Vec::new();
    for p in parts {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            out.push(t.to_owned());
        } else if let Some(d) = p.get("data") {
            out.push(d.to_string());
        } else if let Some(f) = p.get("file").or(Some(p)) {
            let name = f
                .get("name")
                .or_else(|| f.get("filename"))
                .and_then(Value::as_str)
                .unwrap_or("unnamed");
            if f.get("uri").or_else(|| f.get("url")).is_some()
                || f.get("bytes").or_else(|| f.get("raw")).is_some()
            {
                out.push(format!("[file {name}]"));
            }
        }
    }
    out.join("\n")
}

/// One run of a worker on its remote agent.
struct Run<'a> {
    inner: &'a Inner,
    a: &'a Assignment,
    cancel: &'a CancellationToken,
    started: Option<oneshot::Sender<Started>>,
    bearer: Option<String>,
    result: Artifacts,
    sent: u32,
    notes: Vec<String>,
    last_note: Option<String>,
}

/// How one exchange ended.
enum Step {
    /// The task reached `state` (a terminal or interrupted one), with its status text.
    Reached(State, String),
    /// The agent answered with a message and no task.
    Answered(String),
}

impl Run<'_> {
    fn name(&self) -> &str {
        &self.a.spec.agent.name
    }

    async fn go(mut self) -> Outcome {
        let name = self.name().to_owned();
        if let Some(var) = self
            .inner
            .settings
            .remotes
            .get(&name)
            .and_then(|r| r.bearer_env.as_ref())
        {
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => self.bearer = Some(v),
                _ => {
                    return Outcome::CouldNotStart {
                        reason: format!(
                            "a2a.remotes.{name}.bearer_env: the variable {var} is not set"
                        ),
                    };
                }
            }
        }
        let Some(remote) = self.a.spec.agent.remote.clone() else {
            return Outcome::CouldNotStart {
                reason: format!("agent {name} is not a remote agent"),
            };
        };
        // The session and the first message: a fresh task, the answer to the task's question,
        // or a refinement of a finished task in its context.
        let (mut session, text, reference) = match &self.a.runner_resume {
            Some((prev, text)) => {
                let s: Session = match serde_json::from_str(text) {
                    Ok(s) => s,
                    Err(e) => {
                        return Outcome::CouldNotStart {
                            reason: format!(
                                "the A2A session of worker {prev} cannot be read ({e}); spawn a new worker"
                            ),
                        };
                    }
                };
                if *prev == self.a.spec.worker_id {
                    let answer = match self.take_messages(false).await {
                        Ok(m) if !m.is_empty() => m.join("\n\n"),
                        Ok(_) => {
                            return Outcome::CouldNotStart {
                                reason: "resumed without an answer to send".to_owned(),
                            };
                        }
                        Err(e) => return Outcome::CouldNotStart { reason: e },
                    };
                    (s, answer, None)
                } else {
                    let reference = s.task.clone();
                    (
                        Session { task: None, ..s },
                        self.a.spec.prompt.clone(),
                        reference,
                    )
                }
            }
            None => match self.session_from_card(&remote).await {
                Ok(s) => (s, self.a.spec.prompt.clone(), None),
                Err(reason) => return Outcome::CouldNotStart { reason },
            },
        };
        let mut text = text;
        let mut reference = reference;
        loop {
            let step = match self.exchange(&mut session, &text, reference.take()).await {
                Ok(step) => step,
                Err(Stop::Killed) => return Outcome::Killed,
                Err(Stop::Failed(reason)) => return failed(reason),
            };
            self.remember(&session);
            let (state, said) = match step {
                Step::Answered(text) => (State::Completed, text),
                Step::Reached(state, said) => (state, said),
            };
            let url = session.url.clone();
            match state {
                State::Completed => {
                    // Messages that came while it worked go on in the same context, never lost.
                    match self.take_messages(true).await {
                        Ok(more) if !more.is_empty() => {
                            text = more.join("\n\n");
                            reference = session.task.take();
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => return failed(e),
                    }
                    let stdout = self.result.text().unwrap_or(said);
                    return Outcome::Completed { stdout };
                }
                State::InputRequired if self.a.interactive => {
                    let question = if said.is_empty() {
                        format!("the A2A agent at {url} needs input")
                    } else {
                        said
                    };
                    return Outcome::Asked { question };
                }
                State::InputRequired => {
                    return failed(format!(
                        "the A2A agent at {url} asked for input ({}), but the worker was not spawned interactive",
                        crate::grpc::request::quote(&said)
                    ));
                }
                State::AuthRequired => {
                    return failed(format!(
                        "the A2A agent at {url} requires authentication (set a2a.remotes.{}.bearer_env)",
                        self.name()
                    ));
                }
                State::Canceled => {
                    return failed(format!("the A2A agent at {url} canceled the task"));
                }
                State::Rejected => {
                    return Outcome::Rejected {
                        reason: if said.is_empty() {
                            format!("the A2A agent at {url} declined the task")
                        } else {
                            said
                        },
                    };
                }
                State::Failed => {
                    return failed(if said.is_empty() {
                        format!("the A2A agent at {url} failed the task")
                    } else {
                        format!("the A2A agent at {url} failed the task: {said}")
                    });
                }
                State::Submitted | State::Working | State::Unknown => {
                    return failed(format!("the A2A agent at {url} left the task unfinished"));
                }
            }
        }
    }

    /// The worker's session as its `session_ref` (recorded with its end).
    fn remember(&self, s: &Session) {
        if let Ok(text) = serde_json::to_string(s)
            && text.len() <= MAX_SESSION_BYTES
        {
            self.a.session_ref.set(text);
        }
    }

    async fn take_messages(&self, seal: bool) -> Result<Vec<String>, String> {
        let Some(agentry) = self.inner.agentry.get() else {
            return Ok(Vec::new());
        };
        Ok(agentry
            .messages(self.a, seal)
            .await?
            .into_iter()
            .map(|m| m.text)
            .collect())
    }

    async fn progress(&self, kind: ProgressKind, text: String) {
        if let Some(agentry) = self.inner.agentry.get() {
            agentry.progress(self.a, kind, text, None).await;
        }
    }

    /// Reads the card (inline, or fetched within `a2a.card_timeout`) and picks its interface.
    async fn session_from_card(&self, remote: &RemoteAgent) -> Result<Session, String> {
        let (card, source) = match (&remote.card_json, &remote.card_url) {
            (Some(j), _) => (
                serde_json::from_str::<Value>(j)
                    .map_err(|e| format!("agent_card_json of {} is not JSON: {e}", self.name()))?,
                "agent_card_json".to_owned(),
            ),
            (None, Some(url)) => (self.fetch_card(url).await?, url.clone()),
            (None, None) => {
                return Err(format!(
                    "agent {} names no agent_card_url or agent_card_json",
                    self.name()
                ));
            }
        };
        pick_interface(&card).map_err(|e| format!("A2A agent card {source}: {e}"))
    }

    async fn fetch_card(&self, url: &str) -> Result<Value, String> {
        let settings = &self.inner.settings;
        let fetch = async {
            let mut r = self
                .inner
                .http
                .get(url)
                .header("Accept", "application/json");
            if let Some(b) = &self.bearer {
                r = r.bearer_auth(b);
            }
            let resp = r.send().await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("HTTP {}", resp.status()));
            }
            let body = bounded_body(resp, settings.max_card_bytes).await?;
            serde_json::from_slice::<Value>(&body).map_err(|e| format!("not JSON: {e}"))
        };
        tokio::select! {
            r = tokio::time::timeout(settings.card_timeout, fetch) => match r {
                Ok(r) => r.map_err(|e| format!("A2A agent card {url}: {e}")),
                Err(_) => Err(format!(
                    "A2A agent card {url}: no answer within {} (a2a.card_timeout)",
                    humantime::format_duration(settings.card_timeout)
                )),
            },
            () = self.cancel.cancelled() => Err(format!("A2A agent card {url}: stopped while fetching it")),
        }
    }

    /// A JSON-RPC request to the remote agent.
    fn request(&self, s: &Session, method: &str, params: Value) -> reqwest::RequestBuilder {
        let mut r = self
            .inner
            .http
            .post(&s.url)
            .header("Accept", "text/event-stream, application/json")
            .json(&json!({"jsonrpc": "2.0", "id": self.sent, "method": method, "params": params}));
        if s.v1 {
            r = r.header("A2A-Version", "1.0");
        }
        if let Some(b) = &self.bearer {
            r = r.bearer_auth(b);
        }
        r
    }

    /// The message to send: a fresh one, or one on a task (`task`) or referring to one.
    fn message(
        &mut self,
        s: &Session,
        text: &str,
        task: Option<&str>,
        reference: Option<&str>,
    ) -> Value {
        self.sent += 1;
        let id = format!("{}-{}", self.a.spec.worker_id, self.sent);
        let mut m = if s.v1 {
            json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]})
        } else {
            json!({"kind": "message", "messageId": id, "role": "user",
                "parts": [{"kind": "text", "text": text}]})
        };
        if let Some(ctx) = &s.context {
            m["contextId"] = json!(ctx);
        }
        if let Some(t) = task {
            m["taskId"] = json!(t);
        }
        if let Some(r) = reference {
            m["referenceTaskIds"] = json!([r]);
        }
        m
    }

    /// Sends `text` (on the session's task, when it has one) and follows the task until it
    /// ends or is interrupted.
    async fn exchange(
        &mut self,
        s: &mut Session,
        text: &str,
        reference: Option<String>,
    ) -> Result<Step, Stop> {
        let task = s.task.clone();
        let message = self.message(s, text, task.as_deref(), reference.as_deref());
        let (method, params) = match (s.v1, s.streaming) {
            (true, true) => ("SendStreamingMessage", json!({"message": message})),
            (true, false) => ("SendMessage", json!({"message": message})),
            (false, true) => ("message/stream", json!({"message": message})),
            (false, false) => (
                "message/send",
                json!({"message": message, "configuration": {"blocking": true}}),
            ),
        };
        let resp = self.send(s, method, params).await?;
        let is_stream = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_stream {
            return self.follow_stream(s, resp, method).await;
        }
        let body = self.response_body(s, resp, method).await?;
        let result = rpc_result(&body).map_err(|e| self.refused(s, method, &e))?;
        let step = self.absorb(s, result)?;
        self.flush().await;
        if let Some(step) = step {
            return Ok(step);
        }
        // A blocking agent that answered before the task ended: read it until it does.
        self.poll(s).await
    }

    /// Posts a JSON-RPC request; a transport failure or an HTTP error is the run's failure.
    async fn send(
        &self,
        s: &Session,
        method: &str,
        params: Value,
    ) -> Result<reqwest::Response, Stop> {
        let resp = tokio::select! {
            r = self.request(s, method, params).send() => r,
            () = self.cancel.cancelled() => {
                self.cancel_remote(s).await;
                return Err(Stop::Killed);
            }
        };
        let resp = resp.map_err(|e| {
            Stop::Failed(format!(
                "the A2A agent at {} cannot be reached ({method}): {e}",
                s.url
            ))
        })?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = bounded_body(resp, 2048).await.unwrap_or_default();
            return Err(Stop::Failed(format!(
                "the A2A agent at {} answered {method} with HTTP {status}: {}",
                s.url,
                String::from_utf8_lossy(&body).trim()
            )));
        }
        Ok(resp)
    }

    async fn response_body(
        &self,
        s: &Session,
        resp: reqwest::Response,
        method: &str,
    ) -> Result<Value, Stop> {
        let max = self.inner.settings.max_event_bytes;
        let body = tokio::select! {
            b = bounded_body(resp, max) => b,
            () = self.cancel.cancelled() => {
                self.cancel_remote(s).await;
                return Err(Stop::Killed);
            }
        }
        .map_err(|e| Stop::Failed(format!("the A2A agent at {} answered {method}: {e}", s.url)))?;
        serde_json::from_slice(&body).map_err(|e| {
            Stop::Failed(format!(
                "the A2A agent at {} answered {method} with something that is not JSON: {e}",
                s.url
            ))
        })
    }

    fn refused(&self, s: &Session, method: &str, e: &str) -> Stop {
        Stop::Failed(format!("the A2A agent at {} refused {method}: {e}", s.url))
    }

    /// Reads a stream of events until the task ends or is interrupted; meanwhile forwards the
    /// worker's messages and a stop.
    async fn follow_stream(
        &mut self,
        s: &mut Session,
        resp: reqwest::Response,
        method: &str,
    ) -> Result<Step, Stop> {
        let mut body = resp.bytes_stream();
        let mut frames = Frames::new(
            self.inner.settings.max_event_bytes,
            "A2A stream",
            "the a2a executor's event bound",
        );
        let mut tick = tokio::time::interval(POLL_EVERY);
        loop {
            tokio::select! {
                chunk = body.next() => {
                    let Some(chunk) = chunk else {
                        let last = frames.finish();
                        if let Some(data) = last {
                            let step = self.event(s, &data, method)?;
                            self.flush().await;
                            if let Some(step) = step {
                                return Ok(step);
                            }
                        }
                        // The stream ended early: read the task for its state.
                        return self.poll(s).await;
                    };
                    let chunk = chunk.map_err(|e| Stop::Failed(format!(
                        "the A2A agent at {}: the {method} stream broke: {e}", s.url
                    )))?;
                    let events = frames.push(&chunk).map_err(|e| Stop::Failed(format!(
                        "the A2A agent at {}: {e}", s.url
                    )))?;
                    for data in events {
                        let step = self.event(s, &data, method)?;
                        self.flush().await;
                        if let Some(step) = step {
                            return Ok(step);
                        }
                    }
                }
                () = self.cancel.cancelled() => {
                    self.cancel_remote(s).await;
                    return Err(Stop::Killed);
                }
                _ = tick.tick() => self.forward_messages(s).await?,
            }
        }
    }

    /// One streamed event (a JSON-RPC response); `Some` when it ends the exchange.
    fn event(&mut self, s: &mut Session, data: &str, method: &str) -> Result<Option<Step>, Stop> {
        let v: Value = serde_json::from_str(data).map_err(|e| {
            Stop::Failed(format!(
                "the A2A agent at {}: a {method} event is not JSON: {e}",
                s.url
            ))
        })?;
        let result = rpc_result(&v).map_err(|e| self.refused(s, method, &e))?;
        self.absorb(s, result)
    }

    /// Takes in a task, a message, a status update or an artifact update (either dialect);
    /// `Some` once the task has ended or is interrupted.
    fn absorb(&mut self, s: &mut Session, v: &Value) -> Result<Option<Step>, Stop> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(Started::Elsewhere);
        }
        // 1.0 wraps each kind in a field; 0.3 tags it with `kind`.
        let (kind, body) = if let Some(kind) = v.get("kind").and_then(Value::as_str) {
            (kind.to_owned(), v)
        } else if let Some((k, b)) = v.as_object().and_then(|o| o.iter().next()) {
            let kind = match k.as_str() {
                "statusUpdate" => "status-update",
                "artifactUpdate" => "artifact-update",
                other => other,
            };
            (kind.to_owned(), b)
        } else {
            return Err(Stop::Failed(format!(
                "the A2A agent at {} sent an event that is neither a task, a message nor an update",
                s.url
            )));
        };
        match kind.as_str() {
            "message" => {
                let text = parts_text(body.get("parts"));
                // A message without a task is the agent's whole answer.
                if s.task.is_none() && body.get("taskId").is_none() {
                    return Ok(Some(Step::Answered(text)));
                }
                self.note(&text);
                Ok(None)
            }
            "task" => {
                self.learn(s, body.get("id"), body.get("contextId"));
                if let Some(arts) = body.get("artifacts").and_then(Value::as_array) {
                    for a in arts {
                        self.artifact(s, a, false)?;
                    }
                }
                Ok(self.status(body.get("status")))
            }
            "status-update" => {
                self.learn(s, body.get("taskId"), body.get("contextId"));
                Ok(self.status(body.get("status")))
            }
            "artifact-update" => {
                self.learn(s, body.get("taskId"), body.get("contextId"));
                let append = body.get("append").and_then(Value::as_bool) == Some(true);
                if let Some(a) = body.get("artifact") {
                    self.artifact(s, a, append)?;
                }
                Ok(None)
            }
            other => Err(Stop::Failed(format!(
                "the A2A agent at {} sent an event of unknown kind {}",
                s.url,
                crate::grpc::request::quote(other)
            ))),
        }
    }

    fn learn(&self, s: &mut Session, task: Option<&Value>, context: Option<&Value>) {
        let text = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|t| !t.is_empty() && t.len() <= 256)
                .map(str::to_owned)
        };
        let (task, context) = (text(task), text(context));
        let changed =
            (task.is_some() && task != s.task) || (context.is_some() && context != s.context);
        if !changed {
            // Every event names the task: the session is recorded once per change, not per event.
            return;
        }
        if task.is_some() {
            s.task = task;
        }
        if context.is_some() {
            s.context = context;
        }
        self.remember(s);
    }

    fn artifact(&mut self, s: &Session, a: &Value, append: bool) -> Result<(), Stop> {
        let id = a
            .get("artifactId")
            .and_then(Value::as_str)
            .unwrap_or("artifact")
            .to_owned();
        let text = parts_text(a.get("parts"));
        self.result
            .add(&id, &text, append, self.inner.settings.max_result_bytes)
            .map_err(|e| Stop::Failed(format!("the A2A agent at {}: {e}", s.url)))
    }

    /// A status: its message becomes progress while the task works; `Some` once it has ended.
    fn status(&mut self, status: Option<&Value>) -> Option<Step> {
        let status = status?;
        let state = State::of(status.get("state").and_then(Value::as_str).unwrap_or(""));
        let said = parts_text(status.get("message").and_then(|m| m.get("parts")));
        if state.ends() {
            return Some(Step::Reached(state, said));
        }
        self.note(&said);
        None
    }

    /// A progress line of the remote agent, reported by [`Self::flush`].
    fn note(&mut self, text: &str) {
        let text: String = text.trim().chars().take(4096).collect();
        // A task read again (a blocking agent, polled) repeats its status message.
        if !text.is_empty() && self.last_note.as_deref() != Some(text.as_str()) {
            self.last_note = Some(text.clone());
            self.notes.push(text);
        }
    }

    /// Reports the progress lines noted so far.
    async fn flush(&mut self) {
        for line in std::mem::take(&mut self.notes) {
            self.progress(ProgressKind::Text, line).await;
        }
    }

    /// Messages sent to the worker while it runs go to the remote task.
    async fn forward_messages(&mut self, s: &Session) -> Result<(), Stop> {
        if !self.a.mail.take_pending() {
            return Ok(());
        }
        let Some(task) = s.task.clone() else {
            // Not known yet: the messages wait in the inbox for the next look.
            self.a.mail.post(false);
            return Ok(());
        };
        let texts = self.take_messages(false).await.map_err(Stop::Failed)?;
        for text in texts {
            let message = self.message(s, &text, Some(&task), None);
            let params = if s.v1 {
                json!({"message": message, "configuration": {"returnImmediately": true}})
            } else {
                json!({"message": message, "configuration": {"blocking": false}})
            };
            let method = if s.v1 { "SendMessage" } else { "message/send" };
            let resp = self.send(s, method, params).await?;
            let body = self.response_body(s, resp, method).await?;
            if let Err(e) = rpc_result(&body) {
                self.progress(
                    ProgressKind::Status,
                    format!("the A2A agent at {} refused a message: {e}", s.url),
                )
                .await;
            } else {
                self.progress(
                    ProgressKind::Status,
                    format!("a message was sent to the remote task {task}"),
                )
                .await;
            }
        }
        Ok(())
    }

    /// Reads the task until it ends or is interrupted.
    async fn poll(&mut self, s: &mut Session) -> Result<Step, Stop> {
        let Some(task) = s.task.clone() else {
            return Err(Stop::Failed(format!(
                "the A2A agent at {} ended its answer without a task or a message",
                s.url
            )));
        };
        let method = if s.v1 { "GetTask" } else { "tasks/get" };
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL_EVERY) => {}
                () = self.cancel.cancelled() => {
                    self.cancel_remote(s).await;
                    return Err(Stop::Killed);
                }
            }
            self.forward_messages(s).await?;
            let resp = self.send(s, method, json!({"id": task})).await?;
            let body = self.response_body(s, resp, method).await?;
            let result = rpc_result(&body).map_err(|e| self.refused(s, method, &e))?;
            let wrapped = if s.v1 && result.get("id").is_some() {
                json!({"task": result})
            } else {
                result.clone()
            };
            // Artifacts are read whole each time: start from none.
            self.result = Artifacts::default();
            let step = self.absorb(s, &wrapped)?;
            self.flush().await;
            if let Some(step) = step {
                return Ok(step);
            }
        }
    }

    /// Forwards a stop as `CancelTask`, bounded; the worker is killed whatever it answers.
    async fn cancel_remote(&self, s: &Session) {
        let Some(task) = &s.task else { return };
        let method = if s.v1 { "CancelTask" } else { "tasks/cancel" };
        let call = self.request(s, method, json!({"id": task})).send();
        match tokio::time::timeout(CANCEL_TIMEOUT, call).await {
            Ok(Ok(r)) if r.status().is_success() => {}
            Ok(Ok(r)) => {
                tracing::warn!(url = %s.url, status = %r.status(), "the remote agent refused CancelTask");
            }
            Ok(Err(e)) => {
                tracing::warn!(url = %s.url, error = %e, "CancelTask did not reach the remote agent");
            }
            Err(_) => tracing::warn!(url = %s.url, "CancelTask got no answer within 5 s"),
        }
    }
}

/// Why an exchange stopped early.
enum Stop {
    Killed,
    Failed(String),
}

fn failed(reason: String) -> Outcome {
    Outcome::Failed {
        exit_code: None,
        signal: None,
        stderr_tail: String::new(),
        reason,
    }
}

/// The `result` of a JSON-RPC response, or its error as text.
fn rpc_result(v: &Value) -> Result<&Value, String> {
    if let Some(e) = v.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        let message: String = message.chars().take(1024).collect();
        return Err(format!("JSON-RPC error {code}: {message}"));
    }
    v.get("result")
        .ok_or_else(|| "a JSON-RPC response without result or error".to_owned())
}

/// The card's JSON-RPC interface: A2A 1.0 when offered, else 0.3.
fn pick_interface(card: &Value) -> Result<Session, String> {
    let streaming = card
        .pointer("/capabilities/streaming")
        .and_then(Value::as_bool)
        == Some(true);
    let url_ok = |u: &str| u.starts_with("http://") || u.starts_with("https://");
    let mut v03 = None;
    if let Some(list) = card.get("supportedInterfaces").and_then(Value::as_array) {
        for i in list {
            let binding = i.get("protocolBinding").and_then(Value::as_str);
            let version = i
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let Some(url) = i.get("url").and_then(Value::as_str).filter(|u| url_ok(u)) else {
                continue;
            };
            if binding != Some("JSONRPC") {
                continue;
            }
            if version == "1.0" || version.starts_with("1.0.") {
                return Ok(Session {
                    url: url.to_owned(),
                    v1: true,
                    streaming,
                    task: None,
                    context: None,
                });
            }
            if version.starts_with("0.3") && v03.is_none() {
                v03 = Some(url.to_owned());
            }
        }
    }
    if v03.is_none() {
        let preferred = card
            .get("preferredTransport")
            .and_then(Value::as_str)
            .unwrap_or("JSONRPC");
        if preferred == "JSONRPC" {
            v03 = card
                .get("url")
                .and_then(Value::as_str)
                .filter(|u| url_ok(u))
                .map(str::to_owned);
        }
        if v03.is_none()
            && let Some(list) = card.get("additionalInterfaces").and_then(Value::as_array)
        {
            v03 = list
                .iter()
                .filter(|i| i.get("transport").and_then(Value::as_str) == Some("JSONRPC"))
                .filter_map(|i| i.get("url").and_then(Value::as_str))
                .find(|u| url_ok(u))
                .map(str::to_owned);
        }
    }
    v03.map(|url| Session {
        url,
        v1: false,
        streaming,
        task: None,
        context: None,
    })
    .ok_or_else(|| {
        "offers no JSON-RPC interface over http(s); the a2a executor speaks A2A's JSON-RPC binding (1.0 or 0.3)".to_owned()
    })
}

/// A response body of at most `max` bytes.
async fn bounded_body(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if body.len() + chunk.len() > max {
            return Err(format!("the answer is over {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_offers_1_0_before_0_3() {
        let card = json!({
        "url": "http://a/old", "preferredTransport": "JSONRPC",
        "capabilities": {"streaming": true},
        "supportedInterfaces": [
            {"url": "http://a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://a/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        let s = pick_interface(&card).unwrap();
        assert_eq!(
            (s.url.as_str(), s.v1, s.streaming),
            ("http://a/v1", true, true)
        );
        let old = json!({"url": "https://b/rpc"});
        let s = pick_interface(&old).unwrap();
        assert_eq!(
            (s.url.as_str(), s.v1, s.streaming),
            ("https://b/rpc", false, false)
        );
        let rest_only = json!({"url": "http://c", "preferredTransport": "HTTP+JSON"});
        assert!(
            pick_interface(&rest_only)
                .unwrap_err()
                .contains("no JSON-RPC interface")
        );
        let file = json!({"url": "file:///etc/passwd"});
        assert!(pick_interface(&file).is_err());
    }

    #[test]
    fn states_of_both_dialects() {
        assert_eq!(State::of("TASK_STATE_INPUT_REQUIRED"), State::InputRequired);
        assert_eq!(State::of("input-required"), State::InputRequired);
        assert_eq!(State::of("completed"), State::Completed);
        assert_eq!(State::of("nonsense"), State::Unknown);
        assert!(!State::Unknown.ends());
    }

    #[test]
    fn artifacts_append_and_are_bounded() {
        let mut a = Artifacts::default();
        a.add("x", "one", false, 100).unwrap();
        a.add("x", " two", true, 100).unwrap();
        a.add("y", "three", false, 100).unwrap();
        a.add("y", "3", false, 100).unwrap();
        assert_eq!(a.text().as_deref(), Some("one two\n3"));
        assert!(a.add("z", &"z".repeat(200), false, 100).is_err());
    }
}
