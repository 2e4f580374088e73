//! Domain values → protobuf messages: one function per message the service answers with.

use super::pb;
use crate::{
    app::{Resolved, ResolvedCommand},
    discovery::{AgentDef, CommandDef, SourceKind},
    persona::{Diagnostic, Format, Severity, ThinkingLevel},
    resolve::{
        Effective, Mode, SchemaSource, Tools,
        listing::{AgentPage, CommandPage},
    },
    review::{Decision, Verdict},
    workers::{
        model::{Progress, ProgressKind, WorkerEvent, WorkerRecord, WorkerState},
        supervisor::{Spawned, WorkersPage},
    },
};

fn list(v: &Option<Vec<String>>) -> Option<pb::StringList> {
    v.as_ref().map(|values| pb::StringList {
        values: values.clone(),
    })
}

/// Proto enum value of a thinking level.
pub fn thinking(t: Option<ThinkingLevel>) -> i32 {
    (match t {
        None => pb::ThinkingLevel::Unspecified,
        Some(ThinkingLevel::Off) => pb::ThinkingLevel::Off,
        Some(ThinkingLevel::Minimal) => pb::ThinkingLevel::Minimal,
        Some(ThinkingLevel::Low) => pb::ThinkingLevel::Low,
        Some(ThinkingLevel::Medium) => pb::ThinkingLevel::Medium,
        Some(ThinkingLevel::High) => pb::ThinkingLevel::High,
        Some(ThinkingLevel::Xhigh) => pb::ThinkingLevel::Xhigh,
    }) as i32
}

/// Proto enum value of a file format.
pub fn format(f: Format) -> i32 {
    (match f {
        Format::Markdown => pb::FileFormat::Markdown,
        Format::Toml => pb::FileFormat::Toml,
    }) as i32
}

/// Proto enum value of a source rule.
pub fn source(s: SourceKind) -> i32 {
    (match s {
        SourceKind::Project => pb::Source::Project,
        SourceKind::User => pb::Source::User,
        SourceKind::Plugin => pb::Source::Plugin,
        SourceKind::Dir => pb::Source::Dir,
        SourceKind::Bundled => pb::Source::Bundled,
    }) as i32
}

/// A definition as the API shows it.
pub fn agent(a: &AgentDef) -> pb::Agent {
    let p = &a.persona;
    pb::Agent {
        name: p.name.clone(),
        description: p.description.clone(),
        system_prompt: p.system_prompt.clone(),
        when_to_use: p.when_to_use.clone(),
        tools: list(&p.tools),
        disallowed_tools: list(&p.disallowed_tools),
        spawns: p.spawns.as_ref().map(|s| s.to_policy_string()),
        model: p.model.clone().unwrap_or_default(),
        thinking_level: thinking(p.thinking_level),
        output_schema: p.output.as_ref().map(|o| o.to_string()),
        permission_mode: p.permission_mode.clone().map(String::from),
        max_turns: p.max_turns,
        critical_reminder: p.critical_reminder.clone(),
        extra_json: serde_json::Value::Object(p.extra.clone()).to_string(),
        source: source(a.source),
        family: a.family.clone(),
        file_path: a.file_path.clone(),
        shadowed_by: a.shadowed_by.clone().unwrap_or_default(),
        content_sha256: a.content_sha256.clone(),
        format: format(p.format),
        temperature: p.temperature,
        timeout_mins: p.timeout_mins,
        remote: p.remote,
        background: p.background,
        isolation: p
            .worktree
            .map(|w| if w { "worktree" } else { "none" }.to_owned()),
        memory: p.memory.clone(),
        skills: p.skills.clone(),
        mcp_servers: p.mcp_servers.as_deref().map(persona_mcp),
    }
}

/// A persona's MCP servers as the API shows them.
fn persona_mcp(list: &[crate::persona::mcp::McpRef]) -> pb::McpServerList {
    mcp_servers(&crate::workers::spec::McpServerList {
        servers: list
            .iter()
            .map(crate::workers::spec::McpServerSpec::of)
            .collect(),
    })
}

/// A diagnostic as the API shows it.
pub fn diagnostic(d: &Diagnostic) -> pb::Diagnostic {
    pb::Diagnostic {
        path: d.path.clone(),
        line: d.line,
        severity: match d.severity {
            Severity::Info => pb::Severity::Info,
            Severity::Warning => pb::Severity::Warning,
            Severity::Error => pb::Severity::Error,
        } as i32,
        code: d.code.to_owned(),
        message: d.message.clone(),
    }
}

/// The proto mode of a domain mode.
pub fn mode(m: Mode) -> i32 {
    (match m {
        Mode::Default => pb::Mode::Default,
        Mode::Plan => pb::Mode::Plan,
    }) as i32
}

/// The effective tools as the API shows them.
fn tools(t: &Tools) -> pb::EffectiveTools {
    let kind = match t {
        Tools::Only(v) => pb::effective_tools::Kind::Only(pb::StringList { values: v.clone() }),
        Tools::AllExcept(v) => {
            pb::effective_tools::Kind::AllExcept(pb::StringList { values: v.clone() })
        }
    };
    pb::EffectiveTools { kind: Some(kind) }
}

/// The effective agent as the API shows it; takes it by value, so the composed prompt and the
/// lists move into the message instead of being copied.
pub fn effective(e: Effective) -> pb::EffectiveAgent {
    let tools = match e.tools {
        Tools::Only(values) => pb::effective_tools::Kind::Only(pb::StringList { values }),
        Tools::AllExcept(values) => pb::effective_tools::Kind::AllExcept(pb::StringList { values }),
    };
    pb::EffectiveAgent {
        name: e.name,
        system_prompt: e.system_prompt,
        tools: Some(pb::EffectiveTools { kind: Some(tools) }),
        tool_rules: tool_rules(&e.tool_rules),
        spawns: e.spawns.to_policy_string(),
        model: e.model,
        thinking_level: thinking(e.thinking_level),
        max_turns: e.max_turns,
        permission_mode: e.permission_mode.map(String::from),
        output_schema: e.output_schema.as_ref().map(|s| s.to_string()),
        output_schema_source: (match e.output_schema_source {
            None => pb::OutputSchemaSource::Unspecified,
            Some(SchemaSource::Agent) => pb::OutputSchemaSource::Agent,
            Some(SchemaSource::Request) => pb::OutputSchemaSource::Request,
            Some(SchemaSource::Parent) => pb::OutputSchemaSource::Parent,
        }) as i32,
        mode: mode(e.mode),
        depth: e.depth,
        at_max_depth: e.at_max_depth,
        mcp_servers: e.mcp_servers.as_deref().map(persona_mcp),
    }
}

/// A `ListAgents` page.
pub fn agent_page(p: &AgentPage) -> pb::ListAgentsResponse {
    pb::ListAgentsResponse {
        agents: p.agents.iter().map(|a| agent(a)).collect(),
        shadowed: p.shadowed.iter().map(|a| agent(a)).collect(),
        diagnostics: if p.with_diagnostics {
            p.snapshot.diagnostics.iter().map(diagnostic).collect()
        } else {
            Vec::new()
        },
        registry_version: p.snapshot.version.clone(),
        catalog_markdown: p.catalog_markdown.clone(),
        next_page_token: p.next_page_token.clone(),
        total_size: i32::try_from(p.total).unwrap_or(i32::MAX),
    }
}

/// A `ResolveAgent` answer.
pub fn resolved(r: Resolved) -> pb::ResolveAgentResponse {
    pb::ResolveAgentResponse::new(
        Some(agent(&r.agent)),
        Some(effective(r.effective)),
        r.snapshot.version.clone(),
    )
}

/// A command as the API shows it.
pub fn command(c: &CommandDef) -> pb::Command {
    let cmd = &c.command;
    pb::Command {
        name: c.name.clone(),
        aliases: c.aliases.clone(),
        description: cmd.description.clone(),
        template: cmd.template.clone(),
        argument_hint: cmd.argument_hint.clone(),
        model: cmd.model.clone(),
        allowed_tools: list(&cmd.allowed_tools),
        extra_json: serde_json::Value::Object(cmd.extra.clone()).to_string(),
        source: source(c.source),
        family: c.family.clone(),
        file_path: c.file_path.clone(),
        shadowed_by: c.shadowed_by.clone().unwrap_or_default(),
        content_sha256: c.content_sha256.clone(),
        format: format(cmd.format),
    }
}

/// A `ListCommands` page.
pub fn command_page(p: &CommandPage) -> pb::ListCommandsResponse {
    pb::ListCommandsResponse {
        commands: p.commands.iter().map(|c| command(c)).collect(),
        shadowed: p.shadowed.iter().map(|c| command(c)).collect(),
        diagnostics: if p.with_diagnostics {
            p.snapshot
                .command_diagnostics
                .iter()
                .map(diagnostic)
                .collect()
        } else {
            Vec::new()
        },
        registry_version: p.snapshot.version.clone(),
        next_page_token: p.next_page_token.clone(),
        total_size: i32::try_from(p.total).unwrap_or(i32::MAX),
    }
}

/// A `ResolveCommand` answer.
pub fn resolved_command(r: &ResolvedCommand) -> pb::ResolveCommandResponse {
    pb::ResolveCommandResponse {
        command: Some(command(&r.command)),
        expanded: r.expanded.clone(),
        registry_version: r.snapshot.version.clone(),
    }
}

/// A protobuf timestamp of unix milliseconds.
pub fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// Proto state of a domain state.
pub fn state(s: WorkerState) -> i32 {
    (match s {
        WorkerState::Pending => pb::WorkerState::Pending,
        WorkerState::Running => pb::WorkerState::Running,
        WorkerState::Completed => pb::WorkerState::Completed,
        WorkerState::Failed => pb::WorkerState::Failed,
        WorkerState::Killed => pb::WorkerState::Killed,
        WorkerState::InputRequired => pb::WorkerState::InputRequired,
    }) as i32
}

/// A worker as the API shows it.
pub fn worker(w: &WorkerRecord) -> pb::Worker {
    let spec = &w.spec;
    let eff = &spec.effective;
    pb::Worker {
        id: w.id.to_string(),
        agent: spec.agent.clone(),
        description: spec.description.clone(),
        parent_id: spec
            .parent_id
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        depth: spec.depth,
        state: state(w.state),
        create_time: Some(ts(spec.create_time_ms)),
        start_time: w.start_time_ms.map(ts),
        close_time: w.close_time_ms.map(ts),
        result: w.result.clone(),
        structured_result: w.structured_result.clone(),
        error: w.error.clone(),
        exit_code: w.exit_code,
        tools: Some(tools(&eff.tools)),
        spawns: eff.spawns.to_policy_string(),
        model: eff.model.clone(),
        caller: spec.caller_scope.clone(),
        workspace: spec.workspace.clone().unwrap_or_default(),
        mode: mode(eff.mode),
        sequence: w.sequence,
        last_activity_time: Some(ts(w.last_activity_ms)),
        usage: w.usage.as_deref().and_then(usage),
        tree_usage: None,
        worktree: w
            .worktree
            .as_deref()
            .and_then(|t| serde_json::from_str::<crate::workers::worktree::Worktree>(t).ok())
            .map(|t| pb::Worktree {
                path: t.path,
                branch: t.branch,
                base_commit: t.base_commit,
                changed: t.changed.unwrap_or(false),
            }),
        continues: spec
            .continues
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        continued_by: w
            .continued_by
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        question: w.question.clone(),
        interactive: eff.interactive,
        undelivered_messages: w.undelivered,
        // The reported ones: the result artifact is `result` / `structured_result`, not
        // repeated (it would double every listing).
        artifacts: crate::workers::artifacts::assembled(w.artifacts.as_deref())
            .iter()
            .map(artifact)
            .collect(),
        rejected: w.rejected,
    }
}

/// An artifact as the API shows it (docs §13.1).
pub fn artifact(a: &crate::workers::artifacts::Artifact) -> pb::Artifact {
    use crate::workers::artifacts::Part;
    use base64::Engine;
    use pb::{artifact_file::Content as File, artifact_part::Content};
    pb::Artifact {
        artifact_id: a.artifact_id.clone(),
        name: a.name.clone(),
        description: a.description.clone(),
        parts: a
            .parts
            .iter()
            .map(|p| pb::ArtifactPart {
                content: Some(match p {
                    Part::Text(t) => Content::Text(t.clone()),
                    Part::Data(v) => Content::DataJson(v.to_string()),
                    Part::File(f) => Content::File(pb::ArtifactFile {
                        name: f.name.clone(),
                        media_type: f.media_type.clone(),
                        content: match (&f.bytes, &f.uri) {
                            (Some(b), _) => base64::engine::general_purpose::STANDARD
                                .decode(b)
                                .ok()
                                .map(File::Bytes),
                            (None, Some(u)) => Some(File::Uri(u.clone())),
                            (None, None) => None,
                        },
                    }),
                }),
            })
            .collect(),
    }
}

/// Recorded token usage (JSON text, docs/model.md §11.8) as the API shows it; unreadable text
/// shows as none.
pub fn usage(json: &str) -> Option<pb::TokenUsage> {
    #[derive(serde::Deserialize)]
    struct Stored {
        prompt_tokens: u64,
        completion_tokens: u64,
        total_tokens: u64,
        #[serde(default)]
        by_model: Vec<PerModel>,
    }
    #[derive(serde::Deserialize)]
    struct PerModel {
        model: String,
        prompt_tokens: u64,
        completion_tokens: u64,
        total_tokens: u64,
    }
    let s: Stored = serde_json::from_str(json).ok()?;
    Some(pb::TokenUsage {
        prompt_tokens: s.prompt_tokens,
        completion_tokens: s.completion_tokens,
        total_tokens: s.total_tokens,
        by_model: s
            .by_model
            .into_iter()
            .map(|m| pb::ModelUsage {
                model: m.model,
                prompt_tokens: m.prompt_tokens,
                completion_tokens: m.completion_tokens,
                total_tokens: m.total_tokens,
            })
            .collect(),
    })
}

/// The sum of several recorded usages, merged per model.
pub fn sum_usage<'a>(all: impl IntoIterator<Item = &'a str>) -> Option<pb::TokenUsage> {
    let mut total: Option<pb::TokenUsage> = None;
    for u in all.into_iter().filter_map(usage) {
        let t = total.get_or_insert_with(pb::TokenUsage::default);
        t.prompt_tokens += u.prompt_tokens;
        t.completion_tokens += u.completion_tokens;
        t.total_tokens += u.total_tokens;
        for m in u.by_model {
            match t.by_model.iter_mut().find(|x| x.model == m.model) {
                Some(x) => {
                    x.prompt_tokens += m.prompt_tokens;
                    x.completion_tokens += m.completion_tokens;
                    x.total_tokens += m.total_tokens;
                }
                None => t.by_model.push(m),
            }
        }
    }
    total
}

/// A `SpawnWorker` answer.
pub fn spawned(s: &Spawned) -> pb::SpawnWorkerResponse {
    pb::SpawnWorkerResponse {
        worker: Some(worker(&s.worker)),
        deduplicated: s.deduplicated,
        hint: s.hint.clone(),
    }
}

/// A `ListWorkers` page.
pub fn workers_page(p: &WorkersPage) -> pb::ListWorkersResponse {
    pb::ListWorkersResponse {
        workers: p.workers.iter().map(worker).collect(),
        next_page_token: p.next_page_token.clone(),
    }
}

/// One `WatchWorker` event.
pub fn event(ev: &WorkerEvent) -> pb::WatchWorkerResponse {
    pb::WatchWorkerResponse {
        sequence: ev.sequence,
        state: state(ev.state),
        worker: Some(worker(&ev.worker)),
        time: Some(ts(ev.time_ms)),
        progress: ev.progress.as_ref().map(progress),
    }
}

/// The proto form of a progress report.
pub fn progress(p: &Progress) -> pb::Progress {
    pb::Progress {
        kind: (match p.kind {
            ProgressKind::Text => pb::ProgressKind::Text,
            ProgressKind::ToolCall => pb::ProgressKind::ToolCall,
            ProgressKind::ToolResult => pb::ProgressKind::ToolResult,
            ProgressKind::Status => pb::ProgressKind::Status,
            ProgressKind::Message => pb::ProgressKind::Message,
            ProgressKind::Artifact => pb::ProgressKind::Artifact,
        }) as i32,
        text: p.text.clone(),
        data_json: p.data_json.clone().unwrap_or_default(),
    }
}

/// A `Review` verdict.
pub fn verdict(v: Verdict) -> pb::ReviewResponse {
    pb::ReviewResponse {
        decision: match v.decision {
            Decision::Approve => pb::Decision::Approve,
            Decision::Reject => pb::Decision::Reject,
        } as i32,
        reason: v.reason,
        reviewed: v.reviewed,
        reviewer_worker_id: v.worker_id.unwrap_or_default(),
    }
}

/// A JSON value as `google.protobuf.Value`.
fn value(v: &serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(value).collect(),
        }),
        serde_json::Value::Object(o) => Kind::StructValue(prost_types::Struct {
            fields: o.iter().map(|(k, v)| (k.clone(), value(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

fn string_list(v: &[String]) -> prost_types::ListValue {
    prost_types::ListValue {
        values: v
            .iter()
            .map(|s| prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(s.clone())),
            })
            .collect(),
    }
}

/// The proto form of a worker spec.
pub fn spec(s: &crate::workers::spec::WorkerSpec) -> pb::WorkerSpec {
    let a = &s.agent;
    pb::WorkerSpec {
        worker_id: s.worker_id.clone(),
        depth: s.depth,
        prompt: s.prompt.clone(),
        description: s.description.clone(),
        workspace: s.workspace.clone(),
        agent: Some(pb::AgentSpec {
            name: a.name.clone(),
            system_prompt: a.system_prompt.clone(),
            tools: Some(pb::ToolSpec {
                kind: Some(match &a.tools {
                    Tools::Only(v) => pb::tool_spec::Kind::Only(string_list(v)),
                    Tools::AllExcept(v) => pb::tool_spec::Kind::AllExcept(string_list(v)),
                }),
            }),
            tool_rules: tool_rules(&a.tool_rules),
            spawns: a.spawns.to_policy_string(),
            model: a.model.clone(),
            thinking_level: a.thinking_level.map(|t| t.as_str().to_owned()),
            max_turns: a.max_turns,
            permission_mode: a.permission_mode.clone().map(String::from),
            output_schema: a.output_schema.as_ref().map(value),
            mcp_servers: a.mcp_servers.as_ref().map(mcp_servers),
        }),
        memory_dir: s.memory_dir.clone(),
        a2a: s.a2a.as_ref().map(|m| pb::A2aMessage {
            message_id: m.message_id.clone(),
            context_id: m.context_id.clone(),
            parts: m
                .parts
                .iter()
                .map(|p| pb::ArtifactPart {
                    content: match (&p.text, &p.data_json) {
                        (Some(t), _) => Some(pb::artifact_part::Content::Text(t.clone())),
                        (None, Some(d)) => Some(pb::artifact_part::Content::DataJson(d.clone())),
                        (None, None) => None,
                    },
                })
                .collect(),
            metadata_json: m.metadata_json.clone(),
        }),
    }
}

/// Permission-pattern rules as the API shows them.
pub fn tool_rules(rules: &[crate::resolve::ToolRule]) -> Vec<pb::ToolRule> {
    rules
        .iter()
        .map(|r| pb::ToolRule {
            entry: r.entry.clone(),
            name: r.name.clone(),
            pattern: r.pattern.clone(),
            deny: r.deny,
        })
        .collect()
}

/// A persona's MCP servers as the API shows them.
pub fn mcp_servers(list: &crate::workers::spec::McpServerList) -> pb::McpServerList {
    pb::McpServerList {
        servers: list
            .servers
            .iter()
            .map(|s| pb::McpServerSpec {
                name: s.name.clone(),
                inline: s.inline,
                command: s.command.clone(),
                env: s.env.clone().into_iter().collect(),
                cwd: s.cwd.clone(),
                url: s.url.clone(),
                headers: s.headers.clone().into_iter().collect(),
            })
            .collect(),
    }
}

/// A duration as `google.protobuf.Duration` (saturating).
pub fn duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
