//! The `model` executor (docs/model.md §11): agentry runs the agent loop itself over an
//! OpenAI-compatible Chat Completions endpoint, with MCP tools, and enforces the effective
//! agent — the model is offered exactly its tools, a result must match its schema, its turns are
//! counted, and risky tools go through the review gate.
//!
//! Layout, as the loop is a state machine with its I/O at the edges:
//! * [`conversation`] — the pure state machine (messages, turns, output rule);
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
pub mod wire;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Assignment, BoxFuture, Executor, Job, Outcome};
use crate::{
    config::{McpServer, ModelLoop, ModelsConfig},
    persona::ThinkingLevel,
    resolve::Effective,
    workers::{model::ProgressKind, spec::McpServerSpec},
};
pub use conversation::DO_NOT_RETRY;
use conversation::{Bounds, CallStep, Conversation, Reply, Step};
use tools::{Route, Toolbox};
use wire::{Endpoint, ModelClient, Timing, Usage};

/// Bound on the text of one progress event (docs/workers.md §6.9).
const EVENT_TEXT: usize = 64 * 1024;

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
        started: oneshot::Sender<()>,
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

fn failed(reason: String) -> Outcome {
    Outcome::Failed {
        exit_code: None,
        signal: None,
        stderr_tail: String::new(),
        reason,
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn bounded(s: &str, max: usize) -> String {
    conversation::head(s, max).to_owned()
}

impl Run {
    async fn drive(self, started: oneshot::Sender<()>) -> Outcome {
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
        let _ = started.send(());
        let outcome = self.converse(&toolbox, &endpoint, &model).await;
        toolbox.close().await;
        outcome
    }

    async fn converse(&self, toolbox: &Toolbox, endpoint: &Endpoint, model: &str) -> Outcome {
        let agent = &self.assignment.spec.agent;
        let looping = &self.settings.looping;
        let mut conv = Conversation::new(
            &agent.system_prompt,
            &self.assignment.spec.prompt,
            // The reviewer's schema is offered in submit_result but not enforced (§7).
            agent
                .output_schema
                .clone()
                .filter(|_| !self.assignment.review),
            Bounds {
                max_turns: agent.max_turns.unwrap_or(looping.max_turns),
                output_retries: looping.output_retries,
                tool_result_bytes: looping.max_tool_result_bytes,
                result_bytes: self.max_output_bytes,
            },
        );
        let timing = Timing::of(looping, Duration::from_millis(500));
        let mut reporting = true;
        loop {
            let turn = match conv.begin_turn() {
                Ok(n) => n,
                Err(reason) => return failed(reason),
            };
            let body = conv.request(model, toolbox.definitions(), effort(agent.thinking_level));
            let answer = match self.client.turn(endpoint, &body, timing).await {
                Ok(a) => a,
                Err(e) => return failed(e.0),
            };
            if let Some(u) = answer.usage {
                self.meter.add(model, u);
            }
            let usage = answer.usage.map(|u| json!({"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.total}));
            self.report(&mut reporting, ProgressKind::Status, format!("turn {turn}: {model}"), Some(json!({"turn": turn, "model": model, "finish_reason": answer.finish_reason, "usage": usage}))).await;
            if !answer.content.trim().is_empty() {
                self.report(
                    &mut reporting,
                    ProgressKind::Text,
                    bounded(&answer.content, EVENT_TEXT),
                    None,
                )
                .await;
            }
            let calls = match conv.answer(answer) {
                Step::Done(result) => return Outcome::Completed { stdout: result },
                Step::Failed(reason) => return failed(reason),
                Step::Again => continue,
                Step::Tools(calls) => calls,
            };
            for call in calls {
                let args = bounded(&call.arguments, EVENT_TEXT - 512);
                self.report(
                    &mut reporting,
                    ProgressKind::ToolCall,
                    call.name.clone(),
                    Some(json!({"id": call.id, "name": call.name, "arguments": args})),
                )
                .await;
                match conv.take_call(&call) {
                    CallStep::Done(result) => {
                        self.report(&mut reporting, ProgressKind::ToolResult, "result accepted".to_owned(), Some(json!({"id": call.id, "name": call.name, "is_error": false, "reviewed": false}))).await;
                        return Outcome::Completed { stdout: result };
                    }
                    CallStep::Failed(reason) => return failed(reason),
                    CallStep::Answered(text) => {
                        self.report(&mut reporting, ProgressKind::ToolResult, bounded(&text, EVENT_TEXT), Some(json!({"id": call.id, "name": call.name, "is_error": true, "reviewed": false}))).await;
                    }
                    CallStep::Run => {
                        let (reply, reviewed) = self
                            .call(
                                toolbox,
                                toolbox.route(&call.name),
                                &call.name,
                                &call.arguments,
                            )
                            .await;
                        let is_error = reply.is_error();
                        let text = conv.tool_result(&call.id, reply);
                        self.report(&mut reporting, ProgressKind::ToolResult, bounded(&text, EVENT_TEXT), Some(json!({"id": call.id, "name": call.name, "is_error": is_error, "reviewed": reviewed}))).await;
                    }
                }
            }
        }
    }

    /// Runs one call that is not `submit_result`: what goes back to the model, and whether a
    /// review ran. Every wording is [`Reply`]'s.
    async fn call(
        &self,
        toolbox: &Toolbox,
        route: Route,
        name: &str,
        arguments: &str,
    ) -> (Reply, bool) {
        let args: Option<Value> = match arguments.trim() {
            "" => None,
            text => match serde_json::from_str(text) {
                Ok(v) => Some(v),
                Err(e) => return (Reply::bad_arguments(name, &e), false),
            },
        };
        match route {
            Route::Submit => unreachable!("decided by the conversation"),
            Route::Unknown => (Reply::unknown_tool(name, toolbox.names()), false),
            Route::Memory(tool) => {
                let dir = toolbox.memory_dir().unwrap_or(std::path::Path::new(""));
                match memory::call(dir, &tool, args.as_ref()).await {
                    Ok(text) => (Reply::Answer(text), false),
                    Err(why) => (Reply::Refused(why), false),
                }
            }
            Route::DepthLimit => (Reply::depth_limit(), false),
            Route::Spawn => {
                let Some(agentry) = &self.agentry else {
                    return (
                        Reply::Refused("the spawn tool is not available here.".to_owned()),
                        false,
                    );
                };
                let field = |k: &str| {
                    args.as_ref()
                        .and_then(|a| a.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let (agent, prompt) = (field("agent"), field("prompt"));
                if agent.is_empty() || prompt.is_empty() {
                    return (
                        Reply::Refused(format!("{name} needs \"agent\" and \"prompt\".")),
                        false,
                    );
                }
                match agentry
                    .spawn(&self.assignment, &agent, &field("description"), &prompt)
                    .await
                {
                    Ok(result) => (Reply::Answer(result), false),
                    Err(why) => (Reply::Refused(why), false),
                }
            }
            Route::Mcp(tool) => {
                let mut reviewed = false;
                if toolbox.needs_review(&tool) {
                    let Some(agentry) = &self.agentry else {
                        return (
                            Reply::Refused(
                                "rejected by review: the review gate is not available.".to_owned(),
                            ),
                            false,
                        );
                    };
                    reviewed = true;
                    if let Err(reason) = agentry
                        .review(
                            &self.assignment,
                            &tool.offered_name(),
                            tool.destructive,
                            args.clone(),
                        )
                        .await
                    {
                        return (Reply::Rejected(reason), true);
                    }
                }
                let timeout = self.settings.looping.tool_timeout;
                let reply = match tokio::time::timeout(timeout, toolbox.call(&tool, args)).await {
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
                };
                (reply, reviewed)
            }
        }
    }

    /// One progress event; after the first refusal (the budget is spent) no more are tried.
    async fn report(&self, on: &mut bool, kind: ProgressKind, text: String, data: Option<Value>) {
        if !*on {
            return;
        }
        if let Some(a) = &self.agentry
            && !a.progress(&self.assignment, kind, text, data).await
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
        Answer {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: arguments.into(),
            }],
            finish_reason: Some("tool_calls".into()),
            ..Answer::default()
        }
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
                spawns: String::new(),
                model: Vec::new(),
                thinking_level: None,
                max_turns: None,
                permission_mode: None,
                output_schema: None,
                mcp_servers: None,
            },
            memory_dir: None,
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
            })),
            meter: Meter::default(),
            stop_reason: Default::default(),
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
