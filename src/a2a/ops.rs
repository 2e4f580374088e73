//! The A2A operations (docs/a2a.md §13.3), shared by the JSON-RPC and HTTP+JSON bindings: each
//! reads its parameters in the request's dialect, calls the same [`crate::app::App`] operation
//! as the gRPC API, and renders the worker as a task.

use std::{convert::Infallible, pin::Pin};

use axum::response::{
    IntoResponse, Response,
    sse::{Event, KeepAlive, Sse},
};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};

use super::{
    A2a,
    error::{A2aError, Kind},
    wire::{self, Dialect, Incoming},
};
use crate::{
    app::{StopRequest, WatchRequest},
    paging::PageRequest,
    workers::{
        model::{ProgressKind, WorkerId, WorkerRecord, WorkerState},
        store::ParentFilter,
        supervisor::{Identity, SendRequest, SpawnRequest, WorkersQuery},
    },
};

/// What a stream yields: an event, or the error that ends it.
pub type Events = Pin<Box<dyn Stream<Item = Result<Value, A2aError>> + Send>>;

/// An operation's answer.
pub enum Outcome {
    /// One JSON value.
    Value(Value),
    /// Server-sent events.
    Stream(Events),
}

/// The operations of both bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `SendMessage`, `message/send`.
    Send,
    /// `SendStreamingMessage`, `message/stream`.
    Stream,
    /// `GetTask`, `tasks/get`.
    Get,
    /// `ListTasks`.
    List,
    /// `CancelTask`, `tasks/cancel`.
    Cancel,
    /// `SubscribeToTask`, `tasks/resubscribe`.
    Subscribe,
    /// The push-notification configuration methods.
    PushConfig,
    /// `GetExtendedAgentCard`, `agent/getAuthenticatedExtendedCard`.
    ExtendedCard,
}

impl Call {
    fn v1(method: &str) -> Option<Self> {
        Some(match method {
            "SendMessage" => Call::Send,
            "SendStreamingMessage" => Call::Stream,
            "GetTask" => Call::Get,
            "ListTasks" => Call::List,
            "CancelTask" => Call::Cancel,
            "SubscribeToTask" => Call::Subscribe,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Call::PushConfig,
            "GetExtendedAgentCard" => Call::ExtendedCard,
            _ => return None,
        })
    }

    fn v03(method: &str) -> Option<Self> {
        Some(match method {
            "message/send" => Call::Send,
            "message/stream" => Call::Stream,
            "tasks/get" => Call::Get,
            "tasks/cancel" => Call::Cancel,
            "tasks/resubscribe" => Call::Subscribe,
            "tasks/pushNotificationConfig/set"
            | "tasks/pushNotificationConfig/get"
            | "tasks/pushNotificationConfig/list"
            | "tasks/pushNotificationConfig/delete" => Call::PushConfig,
            "agent/getAuthenticatedExtendedCard" => Call::ExtendedCard,
            _ => return None,
        })
    }

    /// The operation a JSON-RPC method names in dialect `d`; the other dialect's name is refused
    /// saying which header would make it valid.
    pub fn of(d: Dialect, method: &str) -> Result<Self, A2aError> {
        let quoted = crate::grpc::request::quote(method);
        match d {
            Dialect::V1 => Self::v1(method).ok_or_else(|| {
                A2aError::new(
                    Kind::MethodNotFound,
                    if Self::v03(method).is_some() {
                        format!("method {quoted} is an A2A 0.3 method, but the request says A2A-Version 1.0; send the 1.0 name or no A2A-Version header")
                    } else {
                        format!("no method {quoted} in A2A 1.0")
                    },
                )
            }),
            Dialect::V03 => Self::v03(method).ok_or_else(|| {
                A2aError::new(
                    Kind::MethodNotFound,
                    if Self::v1(method).is_some() {
                        format!("method {quoted} is an A2A 1.0 method; send the header A2A-Version: 1.0 (a request without it speaks 0.3)")
                    } else {
                        format!("no method {quoted} in A2A 0.3")
                    },
                )
            }),
        }
    }
}

/// One request's context: the service, the caller, the agent of the URL and the dialect.
pub struct Ctx<'a> {
    pub s: &'a A2a,
    pub id: &'a Identity,
    pub agent: &'a str,
    pub dialect: Dialect,
}

/// A string parameter.
fn str_param<'v>(params: &'v Value, field: &str) -> Result<Option<&'v str>, A2aError> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(A2aError::params(field, "must be a string")),
    }
}

/// An integer parameter (a number, or a string of digits as in a query string).
fn int_param(params: &Value, field: &str) -> Result<Option<i64>, A2aError> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .map(Some)
            .ok_or_else(|| A2aError::params(field, "must be an integer")),
    }
}

impl Ctx<'_> {
    /// Runs `call` with `params`.
    pub async fn run(&self, call: Call, params: &Value) -> Result<Outcome, A2aError> {
        match call {
            Call::Send => {
                let (inc, opts) =
                    wire::incoming(self.dialect, params, self.s.app.limits.max_prompt_bytes)?;
                let w = self.deliver(inc, opts.blocking).await?;
                let task = wire::task(self.dialect, &w, opts.history);
                Ok(Outcome::Value(match self.dialect {
                    Dialect::V1 => json!({"task": task}),
                    Dialect::V03 => task,
                }))
            }
            Call::Stream => {
                let (inc, _) =
                    wire::incoming(self.dialect, params, self.s.app.limits.max_prompt_bytes)?;
                let answering = inc.task_id.is_some();
                let w = self.deliver(inc, false).await?;
                Ok(Outcome::Stream(self.stream(w, answering).await?))
            }
            Call::Get => {
                let w = self.task(params).await?;
                let history = wire::history_length(params.get("historyLength"))?;
                Ok(Outcome::Value(wire::task(self.dialect, &w, history)))
            }
            Call::List => self.list(params).await.map(Outcome::Value),
            Call::Cancel => {
                let w = self.task(params).await?;
                if w.state.is_terminal() {
                    return Err(A2aError::new(
                        Kind::TaskNotCancelable,
                        format!("task {} is {}: it has ended", w.id, w.state.as_str()),
                    ));
                }
                let stopped = self
                    .s
                    .app
                    .stop_worker(
                        self.id,
                        StopRequest {
                            worker_id: w.id.clone(),
                            reason: "canceled through A2A".to_owned(),
                        },
                    )
                    .await?;
                Ok(Outcome::Value(wire::task(self.dialect, &stopped, None)))
            }
            Call::Subscribe => {
                let w = self.task(params).await?;
                if w.state.is_terminal() {
                    return Err(A2aError::new(
                        Kind::Unsupported,
                        format!(
                            "task {} is {}: a terminal task has no updates to subscribe to; GetTask reads it",
                            w.id,
                            w.state.as_str()
                        ),
                    ));
                }
                Ok(Outcome::Stream(self.stream(w, false).await?))
            }
            Call::PushConfig => Err(A2aError::new(
                Kind::PushNotSupported,
                "push notifications are not supported (the card says capabilities.pushNotifications: false); stream or poll the task",
            )),
            Call::ExtendedCard => Err(A2aError::new(
                Kind::ExtendedCardNotConfigured,
                "there is no extended agent card; the public card is the whole card",
            )),
        }
    }

    /// The task `params.id` names: one of this caller's workers of this agent, else
    /// `TaskNotFoundError`.
    async fn task(&self, params: &Value) -> Result<WorkerRecord, A2aError> {
        let id = str_param(params, "id")?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| A2aError::params("id", "is required"))?;
        self.task_by_id(id).await
    }

    async fn task_by_id(&self, id: &str) -> Result<WorkerRecord, A2aError> {
        let worker = WorkerId::parse(id)
            .map_err(|_| A2aError::task_not_found(&crate::grpc::request::quote(id)))?;
        let w =
            self.s
                .app
                .get_worker(self.id, &worker)
                .await
                .map_err(|e| match A2aError::from(e) {
                    // The task's own words: A2A names it a task.
                    e if e.kind == Kind::TaskNotFound => A2aError {
                        message: format!("task {id} not found"),
                        ..e
                    },
                    e => e,
                })?;
        if w.spec.agent != self.agent {
            return Err(A2aError::task_not_found(id));
        }
        Ok(w)
    }

    /// A message (docs §13.3): the answer or a queued message for a live task, a continuation
    /// of a terminal task it references, or a new task. Returns the worker that answers.
    async fn deliver(&self, inc: Incoming, wait: bool) -> Result<WorkerRecord, A2aError> {
        let app = &self.s.app;
        let send = |w: &WorkerRecord| SendRequest {
            worker_id: w.id.clone(),
            text: inc.text.clone(),
            interrupt: false,
            wait,
            request_id: Some(inc.message_id.clone()),
        };
        if let Some(task_id) = &inc.task_id {
            let w = self.task_by_id(task_id).await?;
            same_context(&inc, &w, "taskId")?;
            if w.state.is_terminal() {
                return Err(A2aError::new(
                    Kind::Unsupported,
                    format!(
                        "task {} is {}: a terminal task takes no more messages; to go on from it, send a message without taskId, in contextId {:?} with referenceTaskIds [{:?}]",
                        w.id,
                        w.state.as_str(),
                        w.spec.context_id.as_deref().unwrap_or(""),
                        w.id.as_str()
                    ),
                ));
            }
            return Ok(app.send_message(self.id, send(&w)).await?.worker);
        }
        if let Some(reference) = inc.reference_task_ids.first() {
            let w = self.task_by_id(reference).await?;
            same_context(&inc, &w, "referenceTaskIds")?;
            if w.state.is_terminal() {
                // A refinement of a finished task continues its conversation (docs §12.3).
                return Ok(app.send_message(self.id, send(&w)).await?.worker);
            }
        }
        let context_id = inc
            .context_id
            .clone()
            .unwrap_or_else(|| format!("ctx_{}", uuid::Uuid::now_v7().simple()));
        let description: String = inc
            .text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
            .chars()
            .take(100)
            .collect();
        let a2a_message = serde_json::to_string(&crate::workers::spec::A2aMessage {
            message_id: inc.message_id.clone(),
            context_id: context_id.clone(),
            parts: inc.parts,
            metadata_json: inc.metadata_json,
        })
        .ok();
        let spawned = app
            .spawn_worker(
                self.id,
                SpawnRequest {
                    agent: self.agent.to_owned(),
                    description,
                    prompt: inc.text,
                    workspace: String::new(),
                    mode: Default::default(),
                    output_schema: None,
                    wait,
                    request_id: Some(inc.message_id),
                    timeout: None,
                    isolation: None,
                    interactive: true,
                    context_id: Some(context_id),
                    a2a_message,
                },
            )
            .await?;
        Ok(spawned.worker)
    }

    /// `ListTasks`: the caller's tasks of this agent, newest first.
    async fn list(&self, params: &Value) -> Result<Value, A2aError> {
        let size = match int_param(params, "pageSize")? {
            None | Some(0) => 50,
            Some(n @ 1..=100) => n as usize,
            Some(n) => {
                return Err(A2aError::params(
                    "pageSize",
                    format!("must be between 1 and 100, got {n}"),
                ));
            }
        };
        let states = match str_param(params, "status")? {
            Some(s) => wire::state_filter(s)?.into_iter().collect(),
            None => Vec::new(),
        };
        let history = wire::history_length(params.get("historyLength"))?;
        let page = self
            .s
            .app
            .list_workers(
                self.id,
                WorkersQuery {
                    parent: ParentFilter::Any,
                    states,
                    page: PageRequest {
                        size,
                        token: str_param(params, "pageToken")?.unwrap_or("").to_owned(),
                    },
                    context_id: str_param(params, "contextId")?
                        .filter(|c| !c.is_empty())
                        .map(str::to_owned),
                    agent: Some(self.agent.to_owned()),
                    newest_first: true,
                },
            )
            .await?;
        let tasks: Vec<Value> = page
            .workers
            .iter()
            .map(|w| wire::task(self.dialect, w, history))
            .collect();
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": page.next_page_token,
            "pageSize": size,
        }))
    }

    /// The events of worker `w` from now: the task, then each progress line and state change,
    /// the result artifact, and a last status at a terminal or interrupted state. `answering`:
    /// the worker was just answered, so its `input_required` snapshot is not the end.
    async fn stream(&self, w: WorkerRecord, answering: bool) -> Result<Events, A2aError> {
        let mut watch = self
            .s
            .app
            .watch_worker(
                self.id,
                WatchRequest {
                    worker_id: w.id.clone(),
                    after_sequence: 0,
                },
            )
            .await?;
        let d = self.dialect;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Value, A2aError>>(16);
        tokio::spawn(async move {
            let ends = |s: WorkerState| s.is_terminal() || s == WorkerState::InputRequired;
            let mut last: Option<WorkerState> = None;
            while let Some(item) = watch.next().await {
                let ev = match item {
                    Ok(ev) => ev,
                    Err(e) => {
                        let _ = tx.send(Err(crate::app::Error::from(e).into())).await;
                        return;
                    }
                };
                let w = &ev.worker;
                let Some(prev) = last else {
                    last = Some(w.state);
                    if tx.send(Ok(wire::task_event(d, w))).await.is_err() {
                        return;
                    }
                    if ends(w.state) && !(answering && w.state == WorkerState::InputRequired) {
                        return;
                    }
                    continue;
                };
                if let Some(p) = &ev.progress {
                    if p.kind == ProgressKind::Artifact {
                        // A chunk as it came (docs §13.1), with its append and last marks.
                        if let Some(chunk) = p
                            .data_json
                            .as_deref()
                            .and_then(|j| crate::workers::artifacts::parse_chunk(j).ok())
                        {
                            let a = crate::workers::artifacts::Artifact {
                                artifact_id: chunk.artifact_id,
                                name: chunk.name,
                                description: chunk.description,
                                parts: chunk.parts,
                            };
                            let update = wire::artifact_update(
                                d,
                                w,
                                wire::artifact(d, &a),
                                chunk.append,
                                chunk.last_chunk,
                            );
                            if tx.send(Ok(update)).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    if matches!(p.kind, ProgressKind::Text | ProgressKind::Status)
                        && !p.text.trim().is_empty()
                    {
                        let status = wire::progress_status(d, w, ev.sequence, &p.text, ev.time_ms);
                        if tx
                            .send(Ok(wire::status_update(d, w, status, false)))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    continue;
                }
                if prev == w.state {
                    continue;
                }
                last = Some(w.state);
                // Reported artifacts went out as they came; the result goes out at the end.
                if let Some(a) = crate::workers::artifacts::result_artifact(w) {
                    let update = wire::artifact_update(d, w, wire::artifact(d, &a), false, true);
                    if tx.send(Ok(update)).await.is_err() {
                        return;
                    }
                }
                let end = ends(w.state);
                if tx
                    .send(Ok(wire::status_update(d, w, wire::status(d, w), end)))
                    .await
                    .is_err()
                    || end
                {
                    return;
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// A message's `contextId`, when given, must be its task's (the spec's rule).
fn same_context(inc: &Incoming, w: &WorkerRecord, field: &str) -> Result<(), A2aError> {
    match &inc.context_id {
        Some(ctx) if w.spec.context_id.as_deref() != Some(ctx.as_str()) => Err(A2aError::params(
            "message.contextId",
            format!(
                "is {:?}, but the task {} of {field} belongs to contextId {:?}",
                ctx,
                w.id,
                w.spec.context_id.as_deref().unwrap_or("")
            ),
        )),
        _ => Ok(()),
    }
}

/// `events` as server-sent events: each a JSON-RPC response for request `rpc_id`, or, for the
/// HTTP+JSON binding (`None`), the event itself (an error as an `error` event with an AIP-193
/// body).
pub fn sse(events: Events, rpc_id: Option<Value>) -> Response {
    let body = events.map(move |item| {
        let event = match (&rpc_id, item) {
            (Some(id), Ok(v)) => {
                Event::default().data(json!({"jsonrpc": "2.0", "id": id, "result": v}).to_string())
            }
            (Some(id), Err(e)) => Event::default().data(e.rpc_response(id).to_string()),
            (None, Ok(v)) => Event::default().data(v.to_string()),
            (None, Err(e)) => Event::default().event("error").data(e.aip193().to_string()),
        };
        Ok::<_, Infallible>(event)
    });
    Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response()
}
