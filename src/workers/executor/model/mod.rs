//! The `model` executor (docs/model.md §11): agentry runs the agent loop itself over an
//! OpenAI-compatible Chat Completions endpoint, with MCP tools, and enforces the effective
//! agent — the model is offered exactly its tools, a result must match its schema, its turns are
//! counted, and risky tools go through the review gate.
//!
//! Layout, as the loop is a state machine with its I/O at the edges:
//! * [`turns`] — the loop as a pure state machine: event in, next action out (ask the model,
//!   review a call, run a call, finish), with every progress event it reports;
//! * [`conversation`] — what it holds: the messages, the turn budget, the output rule, and the
//!   wording of every reply;
//! * [`wire`] — the model edge: lenient streamed decoding behind [`wire::ModelClient`];
//! * [`mcp`] — the MCP edge behind [`mcp::McpSession`];
//! * [`tools`] — which tools a worker is offered, and routing a call by name;
//! * [`memory`] — the memory tools, confined to the agent's memory directory;
//! * this file — resolving the model, and the driver that joins them, with agentry itself (the
//!   spawn tool, the review gate, progress) behind the [`Agentry`] trait, bound once the service
//!   exists.

pub mod conversation;
pub mod mcp;
pub mod memory;
pub mod tools;
pub mod turns;
pub mod wire;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Assignment, BoxFuture, Executor, Job, Outcome, Started};
use crate::{
    config::{McpServer, ModelLoop, ModelsConfig},
    persona::ThinkingLevel,
    resolve::Effective,
    workers::{model::ProgressKind, spec::McpServerSpec, store::Message},
};
pub use conversation::DO_NOT_RETRY;
use conversation::{Bounds, Conversation, Reply};
use tools::{Route, Toolbox};
use turns::{Action, Call, End, Event, Note, Review, Turns};
use wire::{Endpoint, ModelClient, Timing, Usage};

/// What the executor needs of agentry itself: the spawn tool, the review gate and progress, all
/// as the worker (with its own token), so every rule that applies to a caller applies.
#[async_trait::async_trait]
pub trait Agentry: Send + Sync + 'static {
    /// Spawns `agent` as a child of the worker and waits for it: its result, or the refusal or
    /// failure as text for the model.
    async fn spawn(
        &self,
        worker: &Assignment,
        agent: &str,
        description: &str,
        prompt: &str,
    ) -> Result<String, String>;
    /// Runs the review gate on a call of `tool`: `Ok(reason)` approved, `Err(reason)` rejected.
    async fn review(
        &self,
        worker: &Assignment,
        tool: &str,
        destructive: bool,
        arguments: Option<Value>,
    ) -> Result<String, String>;
    /// Appends a progress event to the worker's log; `false` once its budget is spent.
    async fn progress(
        &self,
        worker: &Assignment,
        kind: ProgressKind,
        text: String,
        data: Option<Value>,
    ) -> bool;
    /// Sends `text` to `child`, one of the worker's children, and waits for the worker that
    /// answers (docs §12.5): its result, or the refusal or failure as text for the model.
    async fn message(&self, worker: &Assignment, child: &str, text: &str)
    -> Result<String, String>;
    /// The persisted transcript of worker `id` (docs §12.3), one JSON message per entry.
    async fn transcript(&self, id: &str) -> Result<Vec<String>, String>;
    /// Appends `entries` to the worker's transcript, the first at index `from`.
    async fn save_transcript(
        &self,
        worker: &Assignment,
        from: u32,
        entries: Vec<String>,
    ) -> Result<(), String>;
    /// Takes the worker's undelivered messages, oldest first (docs §12.2); with `seal` and
    /// none to take, seals its inbox so that any later message continues the worker instead.
    async fn messages(&self, worker: &Assignment, seal: bool) -> Result<Vec<Message>, String>;
}

/// What the model executor is configured with.
#[derive(Debug, Clone, Default)]
pub struct ModelSettings {
    /// Providers, default model, aliases.
    pub models: ModelsConfig,
    /// The loop's bounds.
    pub looping: ModelLoop,
    /// Servers a worker may have.
    pub servers: BTreeMap<String, McpServer>,
    /// Offered tool names that are always reviewed.
    pub review_tools: Vec<String>,
    /// The spawn tool's name.
    pub spawn_tool: String,
    /// Bound on one worker's persisted conversation (`workers.transcript_max_bytes`).
    pub transcript_max_bytes: usize,
}

/// Token usage of one worker, per model (docs/model.md §11.8); shared between the run and the
/// supervisor, which records it with the terminal state.
#[derive(Debug, Clone, Default)]
pub struct Meter(Arc<Mutex<BTreeMap<String, Usage>>>);

impl Meter {
    /// Adds one turn's usage of `model`.
    pub fn add(&self, model: &str, u: Usage) {
        let mut m = self.0.lock().expect("meter poisoned");
        let e = m.entry(model.to_owned()).or_default();
        e.prompt += u.prompt;
        e.completion += u.completion;
        e.total += u.total;
    }

    /// The usage as recorded on the row: `{prompt_tokens, completion_tokens, total_tokens,
    /// by_model: [{model, …}]}`, or `None` when nothing was counted.
    pub fn to_json(&self) -> Option<String> {
        let m = self.0.lock().expect("meter poisoned");
        if m.is_empty() {
            return None;
        }
        let sum = m.values().fold(Usage::default(), |a, u| Usage {
            prompt: a.prompt + u.prompt,
            completion: a.completion + u.completion,
            total: a.total + u.total,
        });
        let by_model: Vec<Value> = m
            .iter()
            .map(|(model, u)| json!({"model": model, "prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.total}))
            .collect();
        Some(
            json!({"prompt_tokens": sum.prompt, "completion_tokens": sum.completion, "total_tokens": sum.total, "by_model": by_model})
                .to_string(),
        )
    }
}

/// The model executor.
pub struct ModelExecutor {
    settings: Arc<ModelSettings>,
    client: Arc<dyn ModelClient>,
    agentry: Arc<OnceLock<Arc<dyn Agentry>>>,
}

impl ModelExecutor {
    /// An executor over `client`; [`Self::bind`] gives it agentry once the service exists.
    pub fn new(settings: ModelSettings, client: Arc<dyn ModelClient>) -> Self {
        Self {
            settings: Arc::new(settings),
            client,
            agentry: Arc::new(OnceLock::new()),
        }
    }

    /// Gives the executor the service it runs in (spawn tool, review gate, progress).
    pub fn bind(&self, agentry: Arc<dyn Agentry>) {
        let _ = self.agentry.set(agentry);
    }

    /// The endpoint and model name of a worker (docs/model.md §11.2).
    fn endpoint(
        settings: &ModelSettings,
        agent: &str,
        models: &[String],
        inherited: &[String],
    ) -> Result<(Endpoint, String), String> {
        let m = &settings.models;
        let reference = pick_model(m, agent, models, inherited)?;
        let (provider, model) = m
            .resolve(&reference)
            .ok_or_else(|| unknown_model(agent, &reference))?;
        let api_key = match &provider.api_key_env {
            None => None,
            Some(var) => Some(
                std::env::var(var)
                    .ok()
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| {
                        format!("provider {}: the variable {var} is not set", provider.name)
                    })?,
            ),
        };
        let url = format!(
            "{}/chat/completions",
            provider.base_url.trim_end_matches('/')
        );
        Ok((
            Endpoint {
                url,
                api_key,
                headers: provider
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            model,
        ))
    }
}

fn unknown_model(agent: &str, model: &str) -> String {
    format!(
        "agent {agent}: model {model} is neither an alias in models.aliases nor provider/model with a configured provider"
    )
}

/// The model reference of a worker: the first of its models that resolves (`inherit` = the
/// parent's), else `models.default`. A model list where nothing resolves is refused by name.
fn pick_model(
    m: &ModelsConfig,
    agent: &str,
    models: &[String],
    inherited: &[String],
) -> Result<String, String> {
    let mut first_unknown = None;
    for name in models {
        let name = name.trim();
        if name == "inherit" {
            if let Some(parent) = inherited
                .iter()
                .find(|p| *p != "inherit" && m.resolve(p).is_some())
            {
                return Ok(parent.clone());
            }
            if let Some(d) = &m.default {
                return Ok(d.clone());
            }
            continue;
        }
        if m.resolve(name).is_some() {
            return Ok(name.to_owned());
        }
        first_unknown.get_or_insert(name);
    }
    if let Some(name) = first_unknown {
        return Err(unknown_model(agent, name));
    }
    m.default
        .clone()
        .ok_or_else(|| format!("agent {agent} names no model and models.default is not set"))
}

/// `reasoning_effort` for a thinking level (docs/model.md §11.3).
fn effort(level: Option<ThinkingLevel>) -> Option<&'static str> {
    Some(match level? {
        ThinkingLevel::Off => return None,
        ThinkingLevel::Minimal | ThinkingLevel::Low => "low",
        ThinkingLevel::Medium => "medium",
        ThinkingLevel::High | ThinkingLevel::Xhigh => "high",
    })
}

impl Executor for ModelExecutor {
    fn messages(
        &self,
        _agent: &str,
        _worker: &crate::workers::model::WorkerRecord,
    ) -> Result<(), (&'static str, String)> {
        Ok(())
    }

    fn admit(&self, eff: &Effective, inherited: &[String]) -> Result<(), String> {
        Self::endpoint(&self.settings, &eff.name, &eff.model, inherited)?;
        let persona: Option<Vec<McpServerSpec>> = eff
            .mcp_servers
            .as_ref()
            .map(|l| l.iter().map(McpServerSpec::of).collect());
        tools::servers_for(&self.settings, &eff.name, &eff.tools, persona.as_deref()).map(drop)
    }

    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> BoxFuture<'static, Outcome> {
        let settings = self.settings.clone();
        let client = self.client.clone();
        let agentry = self.agentry.get().cloned();
        Box::pin(async move {
            let Some(assignment) = job.assignment.clone() else {
                return Outcome::CouldNotStart {
                    reason: "the model executor needs the worker's assignment".to_owned(),
                };
            };
            if cancel.is_cancelled() {
                return Outcome::Killed;
            }
            let run = Run {
                settings,
                client,
                agentry,
                assignment,
                meter: job.meter.clone(),
                max_output_bytes: job.max_output_bytes,
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => Outcome::Killed,
                () = tokio::time::sleep(job.timeout) => Outcome::TimedOut { after: job.timeout, stderr_tail: String::new() },
                out = run.drive(started) => out,
            }
        })
    }
}

/// One worker's run: everything the driver needs, owned.
struct Run {
    settings: Arc<ModelSettings>,
    client: Arc<dyn ModelClient>,
    agentry: Option<Arc<dyn Agentry>>,
    assignment: Arc<Assignment>,
    meter: Meter,
    /// The bound on the worker's result (`executor.max_output_bytes`).
    max_output_bytes: usize,
}

/// How much of the conversation is persisted: entries and their bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Saved {
    entries: usize,
    bytes: usize,
}

/// The string argument `key` of a call ("" when absent or not a string).
fn text_arg(args: Option<&Value>, key: &str) -> String {
    args.and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Bound on the question of `ask_caller` (a progress event's text).
const MAX_QUESTION: usize = 64 * 1024;

/// The question of an `ask_caller` call, or why the call is refused.
fn question(args: Option<&Value>) -> Result<String, String> {
    let q = text_arg(args, "question");
    let q = q.trim();
    if q.is_empty() {
        return Err(format!(
            "{} needs a non-empty \"question\".",
            tools::ASK_CALLER
        ));
    }
    if q.len() > MAX_QUESTION {
        return Err(format!(
            "the question is {} bytes; at most {MAX_QUESTION} are taken.",
            q.len()
        ));
    }
    Ok(q.to_owned())
}

fn failed(reason: String) -> Outcome {
    Outcome::Failed {
        exit_code: None,
        signal: None,
        stderr_tail: String::new(),
        reason,
    }
}

impl Run {
    async fn drive(self, started: oneshot::Sender<Started>) -> Outcome {
        let spec = &self.assignment.spec;
        let agent = &spec.agent;
        let (endpoint, model) = match ModelExecutor::endpoint(
            &self.settings,
            &agent.name,
            &agent.model,
            &self.assignment.inherited_model,
        ) {
            Ok(e) => e,
            Err(reason) => return Outcome::CouldNotStart { reason },
        };
        // Recorded even if the provider never reports usage, so the row says it ran a model.
        self.meter.add(&model, Usage::default());
        // The worker's MCP servers, for it alone; dropped (and so stopped) with this future.
        let workspace = spec.workspace.clone().unwrap_or_default();
        let toolbox = match Toolbox::start(&self.settings, &self.assignment, &workspace).await {
            Ok(t) => t,
            Err(reason) => return Outcome::CouldNotStart { reason },
        };
        let _ = started.send(Started::Elsewhere);
        let outcome = self.converse(&toolbox, &endpoint, &model).await;
        toolbox.close().await;
        outcome
    }

    async fn converse(&self, toolbox: &Toolbox, endpoint: &Endpoint, model: &str) -> Outcome {
        let agent = &self.assignment.spec.agent;
        let looping = &self.settings.looping;
        // The reviewer's schema is offered in submit_result but not enforced (§7).
        let schema = agent
            .output_schema
            .clone()
            .filter(|_| !self.assignment.review);
        let bounds = Bounds {
            max_turns: agent.max_turns.unwrap_or(looping.max_turns),
            output_retries: looping.output_retries,
            tool_result_bytes: looping.max_tool_result_bytes,
            result_bytes: self.max_output_bytes,
        };
        let mut saved = Saved::default();
        let conv = match &self.assignment.resume_from {
            None => Conversation::new(
                &agent.system_prompt,
                &self.assignment.spec.prompt,
                schema,
                bounds,
            ),
            Some(from) => match self.load(from).await {
                Ok((messages, bytes)) => {
                    // Its own transcript is stored already; a predecessor's is copied.
                    if *from == self.assignment.spec.worker_id {
                        saved = Saved {
                            entries: messages.len(),
                            bytes,
                        };
                    }
                    let messages = if messages.is_empty() {
                        vec![conversation::Message::System {
                            content: agent.system_prompt.clone(),
                        }]
                    } else {
                        messages
                    };
                    Conversation::resume(messages, schema, bounds)
                }
                Err(reason) => return failed(reason),
            },
        };
        let mut turns = Turns::new(conv, toolbox.catalog(), model);
        if self.assignment.resume_from.is_some() {
            // The first message answers the question the conversation stopped at, if any.
            let mut inbox = self.inbox(false).await.into_iter();
            let mut answer = inbox.next().map(|m| (m.text.clone(), m.delivered_data()));
            turns.answer_open(tools::ASK_CALLER, &mut answer);
            if let Some((text, data)) = answer {
                turns.deliver(&text, data);
            }
            for m in inbox {
                turns.deliver(&m.text, m.delivered_data());
            }
        }
        let timing = Timing::of(looping, Duration::from_millis(500));
        let mut reporting = true;
        let mail = self.assignment.mail.clone();
        let mut action = turns.step(Event::Start);
        loop {
            if matches!(action, Action::Ask) {
                for m in self.inbox(false).await {
                    turns.deliver(&m.text, m.delivered_data());
                }
            }
            for note in turns.take_notes() {
                self.report(&mut reporting, note).await;
            }
            let event = match action {
                Action::Finish(End::Completed(result)) => {
                    if let Err(reason) = self.save(&turns, &mut saved).await {
                        return failed(reason);
                    }
                    // The seal: a message that came in before it is another turn; one after
                    // it continues the worker (docs §12.2).
                    let late = self.inbox(true).await;
                    if late.is_empty() {
                        return Outcome::Completed { stdout: result };
                    }
                    action = turns.reopen();
                    for m in late {
                        turns.deliver(&m.text, m.delivered_data());
                    }
                    continue;
                }
                Action::Finish(End::Failed(reason)) => {
                    // Kept, so that a continuation carries on from what the worker did.
                    let _ = self.save(&turns, &mut saved).await;
                    return failed(reason);
                }
                Action::Ask => {
                    if let Err(reason) = self.save(&turns, &mut saved).await {
                        return failed(reason);
                    }
                    let body = turns.request(toolbox.definitions(), effort(agent.thinking_level));
                    tokio::select! {
                        biased;
                        () = mail.interrupted() => Event::Interrupted,
                        answer = self.client.turn(endpoint, &body, timing) => match answer {
                            Ok(answer) => {
                                if let Some(u) = answer.usage {
                                    self.meter.add(model, u);
                                }
                                Event::Answered(answer)
                            }
                            Err(e) => Event::AskFailed(e.0),
                        },
                    }
                }
                Action::Review(call) => tokio::select! {
                    biased;
                    () = mail.interrupted() => Event::Interrupted,
                    review = self.review(toolbox, &call) => Event::Reviewed(review),
                },
                Action::Run(call) if matches!(toolbox.route(&call.call.name), Route::Ask) => {
                    match question(call.args.as_ref()) {
                        Err(why) => Event::Ran(Reply::Refused(why)),
                        Ok(question) => {
                            turns.park();
                            if let Err(reason) = self.save(&turns, &mut saved).await {
                                return failed(reason);
                            }
                            return Outcome::Asked { question };
                        }
                    }
                }
                Action::Run(call) => tokio::select! {
                    biased;
                    () = mail.interrupted() => Event::Interrupted,
                    reply = self.run_call(toolbox, call) => Event::Ran(reply),
                },
            };
            action = turns.step(event);
        }
    }

    /// The transcript of worker `id`, decoded, with its size.
    async fn load(&self, id: &str) -> Result<(Vec<conversation::Message>, usize), String> {
        let Some(agentry) = &self.agentry else {
            return Ok((Vec::new(), 0));
        };
        let entries = agentry.transcript(id).await?;
        let bytes = entries.iter().map(String::len).sum();
        let messages = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                serde_json::from_str(e).map_err(|err| {
                    format!("the transcript of worker {id} is unreadable at entry {i}: {err}")
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((messages, bytes))
    }

    /// Persists the messages of the conversation not stored yet (docs §12.3), within
    /// `workers.transcript_max_bytes`.
    async fn save(&self, turns: &Turns, saved: &mut Saved) -> Result<(), String> {
        let Some(agentry) = &self.agentry else {
            return Ok(());
        };
        let messages = turns.conversation().messages();
        if messages.len() <= saved.entries {
            return Ok(());
        }
        let entries: Vec<String> = messages[saved.entries..]
            .iter()
            .map(|m| serde_json::to_string(m).unwrap_or_default())
            .collect();
        let bytes = saved.bytes + entries.iter().map(String::len).sum::<usize>();
        let max = self.settings.transcript_max_bytes;
        if bytes > max {
            return Err(format!(
                "the conversation is over workers.transcript_max_bytes ({max} bytes)"
            ));
        }
        let from = u32::try_from(saved.entries).unwrap_or(u32::MAX);
        agentry
            .save_transcript(&self.assignment, from, entries)
            .await
            .map_err(|e| format!("the conversation could not be persisted: {e}"))?;
        *saved = Saved {
            entries: messages.len(),
            bytes,
        };
        Ok(())
    }

    /// The worker's undelivered messages (none without agentry, or on a store error, which
    /// leaves them in the inbox for the seal or a continuation).
    async fn inbox(&self, seal: bool) -> Vec<Message> {
        let Some(agentry) = &self.agentry else {
            return Vec::new();
        };
        match agentry.messages(&self.assignment, seal).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(worker = %self.assignment.spec.worker_id, error = %e, "messages not taken");
                Vec::new()
            }
        }
    }

    /// The review step of a gated call, before it runs (docs §7).
    async fn review(&self, toolbox: &Toolbox, call: &Call) -> Review {
        let Some(agentry) = &self.agentry else {
            return Review::Unavailable;
        };
        let (name, destructive) = match toolbox.route(&call.call.name) {
            Route::Mcp(tool) => (tool.offered_name(), tool.destructive),
            // Only MCP tools are gated; anything else is reviewed as destructive.
            _ => (call.call.name.clone(), true),
        };
        match agentry
            .review(&self.assignment, &name, destructive, call.args.clone())
            .await
        {
            Ok(_) => Review::Approved,
            Err(reason) => Review::Rejected(reason),
        }
    }

    /// Runs a call the loop decided to run: what goes back to the model.
    async fn run_call(&self, toolbox: &Toolbox, call: Call) -> Reply {
        let Call { call, args } = call;
        let name = call.name.as_str();
        match toolbox.route(name) {
            // Decided by the loop before a call is run; answered the same way should one come.
            Route::Submit | Route::Unknown | Route::Ask => {
                Reply::unknown_tool(name, toolbox.names())
            }
            Route::Message => {
                let Some(agentry) = &self.agentry else {
                    return Reply::Refused("message_worker is not available here.".to_owned());
                };
                let field = |k: &str| text_arg(args.as_ref(), k);
                let (child, text) = (field("worker_id"), field("text"));
                if child.is_empty() || text.trim().is_empty() {
                    return Reply::Refused(format!("{name} needs \"worker_id\" and \"text\"."));
                }
                match agentry.message(&self.assignment, &child, &text).await {
                    Ok(result) => Reply::Answer(result),
                    Err(why) => Reply::Refused(why),
                }
            }
            Route::DepthLimit => Reply::depth_limit(),
            Route::Memory(tool) => {
                let dir = toolbox.memory_dir().unwrap_or(std::path::Path::new(""));
                match memory::call(dir, &tool, args.as_ref()).await {
                    Ok(text) => Reply::Answer(text),
                    Err(why) => Reply::Refused(why),
                }
            }
            Route::Spawn => {
                let Some(agentry) = &self.agentry else {
                    return Reply::Refused("the spawn tool is not available here.".to_owned());
                };
                let field = |k: &str| text_arg(args.as_ref(), k);
                let (agent, prompt) = (field("agent"), field("prompt"));
                if agent.is_empty() || prompt.is_empty() {
                    return Reply::Refused(format!("{name} needs \"agent\" and \"prompt\"."));
                }
                match agentry
                    .spawn(&self.assignment, &agent, &field("description"), &prompt)
                    .await
                {
                    Ok(result) => Reply::Answer(result),
                    Err(why) => Reply::Refused(why),
                }
            }
            Route::Mcp(tool) => {
                let timeout = self.settings.looping.tool_timeout;
                match tokio::time::timeout(timeout, toolbox.call(&tool, args)).await {
                    Err(_) => Reply::Refused(format!(
                        "{} did not answer within {} (model.tool_timeout).",
                        tool.offered_name(),
                        humantime::format_duration(timeout)
                    )),
                    Ok(Err(why)) => {
                        Reply::Refused(format!("{} failed: {why}.", tool.offered_name()))
                    }
                    Ok(Ok(r)) if r.is_error => Reply::ToolError(r.text),
                    Ok(Ok(r)) => Reply::Answer(r.text),
                }
            }
        }
    }

    /// One progress event; after the first refusal (the budget is spent) no more are tried.
    async fn report(&self, on: &mut bool, note: Note) {
        if !*on {
            return;
        }
        if let Some(a) = &self.agentry
            && !a
                .progress(&self.assignment, note.kind, note.text, note.data)
                .await
        {
            *on = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        config::Provider,
        resolve::Tools,
        workers::spec::{AgentSpec, WorkerSpec},
    };
    use wire::{Answer, ToolCall, TurnError};

    /// A model in process: each turn takes the next scripted answer (or waits forever once
    /// they are spent), and keeps the request it was sent.
    struct FakeModel {
        answers: Mutex<Vec<Result<Answer, TurnError>>>,
        seen: Mutex<Vec<Value>>,
    }

    #[async_trait::async_trait]
    impl ModelClient for FakeModel {
        async fn turn(&self, _: &Endpoint, body: &Value, _: Timing) -> Result<Answer, TurnError> {
            self.seen.lock().unwrap().push(body.clone());
            let next = {
                let mut answers = self.answers.lock().unwrap();
                (!answers.is_empty()).then(|| answers.remove(0))
            };
            match next {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> Answer {
        calls_of(&[(id, name, arguments)])
    }

    /// A job of a worker of agent `a` (only `submit_result` offered) on the fake model.
    fn job(timeout: Duration) -> Job {
        let spec = WorkerSpec {
            worker_id: "wkr_00000000000000000000000000000001".into(),
            depth: 1,
            prompt: "do it".into(),
            description: String::new(),
            workspace: None,
            agent: AgentSpec {
                name: "a".into(),
                system_prompt: "sys".into(),
                tools: Tools::Only(vec!["submit_result".into()]),
                tool_rules: Vec::new(),
                spawns: crate::persona::Spawns::none(),
                model: Vec::new(),
                thinking_level: None,
                max_turns: None,
                permission_mode: None,
                output_schema: None,
                mcp_servers: None,
                remote: None,
            },
            memory_dir: None,
            a2a: None,
        };
        Job {
            worker_id: spec.worker_id.clone(),
            stdin: Vec::new(),
            env: Vec::new(),
            cwd: None,
            timeout,
            kill_grace: Duration::from_secs(1),
            max_output_bytes: 1 << 20,
            assignment: Some(Arc::new(Assignment {
                spec,
                worker_token: "t".into(),
                caller_scope: "anonymous".into(),
                inherited_model: Vec::new(),
                plan: false,
                at_max_depth: false,
                review: false,
                resume_from: None,
                interactive: false,
                mail: Default::default(),
                runner_resume: None,
                session_ref: Default::default(),
            })),
            meter: Meter::default(),
            stop_reason: Default::default(),
            rotated_token: Default::default(),
        }
    }

    async fn drive(
        answers: Vec<Result<Answer, TurnError>>,
        timeout: Duration,
    ) -> (Outcome, Vec<Value>) {
        let fake = Arc::new(FakeModel {
            answers: Mutex::new(answers),
            seen: Mutex::new(Vec::new()),
        });
        let ex = ModelExecutor::new(
            ModelSettings {
                models: models(),
                ..ModelSettings::default()
            },
            fake.clone(),
        );
        let (started, _) = oneshot::channel();
        let out = ex
            .run(job(timeout), CancellationToken::new(), started)
            .await;
        let seen = fake.seen.lock().unwrap().clone();
        (out, seen)
    }

    /// The driver in process: a hallucinated tool and an invalid result go back to the model as
    /// tool errors in order, the second `submit_result` ends the run and the call after it in
    /// the same answer is never run.
    #[tokio::test(start_paused = true)]
    async fn the_driver_answers_each_call_in_order_and_submit_ends_the_list() {
        let mut last = call("c3", "submit_result", r#"{"result": "done"}"#);
        last.tool_calls.push(ToolCall {
            id: "c4".into(),
            name: "never_run".into(),
            arguments: "{}".into(),
        });
        let (out, seen) = drive(
            vec![
                Ok(call("c1", "read_file", "{}")),
                Ok(call("c2", "submit_result", "{not json")),
                Ok(last),
            ],
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(
            out,
            Outcome::Completed {
                stdout: "done".into()
            }
        );
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0]["model"], "base");
        assert_eq!(seen[0]["tools"][0]["function"]["name"], "submit_result");
        let tool_text = |req: &Value| {
            req["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            tool_text(&seen[1]),
            format!(
                "unknown tool read_file; the tools you have are: submit_result. Call only one of these. {DO_NOT_RETRY}"
            )
        );
        assert!(
            tool_text(&seen[2]).starts_with("the arguments are not JSON: "),
            "{}",
            tool_text(&seen[2])
        );
    }

    /// Under paused time: a model that never answers is bounded by the worker's timeout, and a
    /// turn error fails the run with its text.
    #[tokio::test(start_paused = true)]
    async fn a_silent_model_times_out_and_a_turn_error_fails_the_run() {
        let t0 = tokio::time::Instant::now();
        let (out, seen) = drive(Vec::new(), Duration::from_secs(90)).await;
        assert!(matches!(out, Outcome::TimedOut { after, .. } if after == Duration::from_secs(90)));
        assert_eq!(t0.elapsed(), Duration::from_secs(90));
        assert_eq!(seen.len(), 1);
        let (out, _) = drive(
            vec![Err(TurnError(
                "model request failed: 400 Bad Request: no".into(),
            ))],
            Duration::from_secs(90),
        )
        .await;
        assert!(
            matches!(&out, Outcome::Failed { reason, .. } if reason == "model request failed: 400 Bad Request: no"),
            "{out:?}"
        );
    }

    /// An MCP server in process: answers every call after `delay`, and keeps the calls.
    struct FakeMcp {
        delay: Duration,
        calls: Mutex<Vec<(String, Option<Value>)>>,
    }

    #[async_trait::async_trait]
    impl mcp::McpSession for FakeMcp {
        async fn call(
            &self,
            tool: &str,
            arguments: Option<Value>,
        ) -> Result<mcp::CallResult, String> {
            self.calls
                .lock()
                .unwrap()
                .push((tool.to_owned(), arguments));
            tokio::time::sleep(self.delay).await;
            Ok(mcp::CallResult {
                text: format!("{tool} ok"),
                is_error: false,
            })
        }

        async fn close(&self) {}
    }

    /// agentry in process: a review gate that approves or rejects, and a progress log.
    struct FakeAgentry {
        approve: bool,
        reviews: Mutex<Vec<(String, bool)>>,
        progress: Mutex<Vec<(ProgressKind, String)>>,
        transcript: Mutex<Vec<String>>,
        inbox: Mutex<Vec<Message>>,
    }

    #[async_trait::async_trait]
    impl Agentry for FakeAgentry {
        async fn spawn(&self, _: &Assignment, _: &str, _: &str, _: &str) -> Result<String, String> {
            Err("no spawning here".into())
        }

        async fn review(
            &self,
            _: &Assignment,
            tool: &str,
            destructive: bool,
            _: Option<Value>,
        ) -> Result<String, String> {
            self.reviews
                .lock()
                .unwrap()
                .push((tool.to_owned(), destructive));
            if self.approve {
                Ok("fine".into())
            } else {
                Err("too risky".into())
            }
        }

        async fn progress(
            &self,
            _: &Assignment,
            kind: ProgressKind,
            text: String,
            _: Option<Value>,
        ) -> bool {
            self.progress.lock().unwrap().push((kind, text));
            true
        }

        async fn message(&self, _: &Assignment, _: &str, _: &str) -> Result<String, String> {
            Err("no children here".into())
        }

        async fn transcript(&self, _: &str) -> Result<Vec<String>, String> {
            Ok(self.transcript.lock().unwrap().clone())
        }

        async fn save_transcript(
            &self,
            _: &Assignment,
            from: u32,
            entries: Vec<String>,
        ) -> Result<(), String> {
            let mut t = self.transcript.lock().unwrap();
            t.truncate(from as usize);
            t.extend(entries);
            Ok(())
        }

        async fn messages(&self, _: &Assignment, _: bool) -> Result<Vec<Message>, String> {
            Ok(std::mem::take(&mut *self.inbox.lock().unwrap()))
        }
    }

    fn fs_tool(name: &str, read_only: bool) -> mcp::McpTool {
        mcp::McpTool {
            server: "fs".into(),
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            read_only,
            destructive: !read_only,
        }
    }

    /// The driver with a fake model, a fake MCP server and a fake review gate: what reached the
    /// server, what was reviewed, the requests sent, and how the run ended.
    async fn drive_tools(
        answers: Vec<Answer>,
        approve: bool,
        delay: Duration,
    ) -> (
        Outcome,
        Vec<(String, Option<Value>)>,
        Vec<(String, bool)>,
        Vec<Value>,
    ) {
        let model = Arc::new(FakeModel {
            answers: Mutex::new(answers.into_iter().map(Ok).collect()),
            seen: Mutex::new(Vec::new()),
        });
        let server = Arc::new(FakeMcp {
            delay,
            calls: Mutex::new(Vec::new()),
        });
        let agentry = Arc::new(FakeAgentry {
            approve,
            reviews: Mutex::new(Vec::new()),
            progress: Mutex::new(Vec::new()),
            transcript: Mutex::default(),
            inbox: Mutex::default(),
        });
        let toolbox = Toolbox::of_sessions(
            vec![fs_tool("read", true), fs_tool("write", false)],
            vec![("fs".into(), server.clone() as Arc<dyn mcp::McpSession>)],
            Vec::new(),
        );
        let settings = ModelSettings {
            models: models(),
            transcript_max_bytes: 8 << 20,
            ..ModelSettings::default()
        };
        let (endpoint, name) =
            ModelExecutor::endpoint(&settings, "a", &[], &[]).expect("the default model");
        let run = Run {
            settings: Arc::new(settings),
            client: model.clone(),
            agentry: Some(agentry.clone()),
            assignment: job(Duration::from_secs(60)).assignment.unwrap(),
            meter: Meter::default(),
            max_output_bytes: 1 << 20,
        };
        let out = run.converse(&toolbox, &endpoint, &name).await;
        let seen = model.seen.lock().unwrap().clone();
        let calls = server.calls.lock().unwrap().clone();
        let reviews = agentry.reviews.lock().unwrap().clone();
        (out, calls, reviews, seen)
    }

    /// The tool messages of a request, in order.
    fn tool_texts(req: &Value) -> Vec<String> {
        req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    }

    fn calls_of(list: &[(&str, &str, &str)]) -> Answer {
        Answer {
            tool_calls: list
                .iter()
                .map(|(id, name, args)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: (*args).into(),
                })
                .collect(),
            finish_reason: Some("tool_calls".into()),
            ..Answer::default()
        }
    }

    /// A read-only tool runs at once; a destructive one is reviewed first and runs once
    /// approved; both results go back in order.
    #[tokio::test(start_paused = true)]
    async fn a_gated_call_is_reviewed_before_it_runs() {
        let (out, calls, reviews, seen) = drive_tools(
            vec![
                calls_of(&[
                    ("c1", "mcp__fs__read", r#"{"path": "a"}"#),
                    ("c2", "mcp__fs__write", r#"{"path": "b"}"#),
                ]),
                call("c3", "submit_result", r#"{"result": "written"}"#),
            ],
            true,
            Duration::from_millis(5),
        )
        .await;
        assert_eq!(
            out,
            Outcome::Completed {
                stdout: "written".into()
            }
        );
        assert_eq!(
            calls,
            [
                ("read".to_owned(), Some(json!({"path": "a"}))),
                ("write".to_owned(), Some(json!({"path": "b"})))
            ]
        );
        assert_eq!(reviews, [("mcp__fs__write".to_owned(), true)]);
        assert_eq!(tool_texts(&seen[1]), ["read ok", "write ok"]);
    }

    /// A rejected call never reaches its server; the model is told why.
    #[tokio::test(start_paused = true)]
    async fn a_rejected_call_never_runs() {
        let (out, calls, reviews, seen) = drive_tools(
            vec![
                calls_of(&[("c1", "mcp__fs__write", "{}")]),
                call("c2", "submit_result", r#"{"result": "gave up"}"#),
            ],
            false,
            Duration::ZERO,
        )
        .await;
        assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");
        assert!(calls.is_empty(), "{calls:?}");
        assert_eq!(reviews.len(), 1);
        assert_eq!(tool_texts(&seen[1]), ["rejected by review: too risky"]);
    }

    /// Under paused time: a tool that does not answer is cut at `model.tool_timeout`, and the
    /// model is told so; the run goes on.
    #[tokio::test(start_paused = true)]
    async fn a_silent_tool_is_cut_at_the_tool_timeout() {
        let t0 = tokio::time::Instant::now();
        let (out, calls, _, seen) = drive_tools(
            vec![
                calls_of(&[("c1", "mcp__fs__read", "{}")]),
                call("c2", "submit_result", r#"{"result": "x"}"#),
            ],
            true,
            Duration::from_secs(3600),
        )
        .await;
        assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");
        assert_eq!(calls.len(), 1);
        let timeout = ModelSettings::default().looping.tool_timeout;
        assert_eq!(t0.elapsed(), timeout);
        assert_eq!(
            tool_texts(&seen[1]),
            [format!(
                "mcp__fs__read did not answer within {} (model.tool_timeout). {DO_NOT_RETRY}",
                humantime::format_duration(timeout)
            )]
        );
    }

    fn models() -> ModelsConfig {
        ModelsConfig {
            default: Some("local/base".into()),
            providers: vec![Provider {
                name: "local".into(),
                base_url: "http://127.0.0.1:1/v1".into(),
                api_key_env: None,
                headers: BTreeMap::new(),
            }],
            aliases: [("sonnet".to_owned(), "local/big".to_owned())].into(),
        }
    }

    #[test]
    fn the_first_model_that_resolves_is_used_and_unknown_ones_are_named() {
        let m = models();
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(pick_model(&m, "a", &[], &[]).unwrap(), "local/base");
        assert_eq!(
            pick_model(&m, "a", &s(&["opus", "sonnet"]), &[]).unwrap(),
            "sonnet"
        );
        assert_eq!(
            pick_model(&m, "a", &s(&["inherit"]), &s(&["local/p"])).unwrap(),
            "local/p"
        );
        assert_eq!(
            pick_model(&m, "a", &s(&["inherit"]), &[]).unwrap(),
            "local/base"
        );
        let e = pick_model(&m, "a", &s(&["opus"]), &[]).unwrap_err();
        assert_eq!(
            e,
            "agent a: model opus is neither an alias in models.aliases nor provider/model with a configured provider"
        );
        let none = ModelsConfig { default: None, ..m };
        assert!(
            pick_model(&none, "a", &[], &[])
                .unwrap_err()
                .contains("models.default is not set")
        );
    }

    #[test]
    fn usage_is_summed_per_model() {
        let meter = Meter::default();
        assert_eq!(meter.to_json(), None);
        meter.add(
            "a",
            Usage {
                prompt: 1,
                completion: 2,
                total: 3,
            },
        );
        meter.add(
            "a",
            Usage {
                prompt: 1,
                completion: 0,
                total: 1,
            },
        );
        meter.add(
            "b",
            Usage {
                prompt: 5,
                completion: 5,
                total: 10,
            },
        );
        let v: Value = serde_json::from_str(&meter.to_json().unwrap()).unwrap();
        assert_eq!(v["total_tokens"], 14);
        assert_eq!(
            v["by_model"][0],
            json!({"model": "a", "prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4})
        );
    }
}
