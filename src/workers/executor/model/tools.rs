//! Which tools one worker is offered, and where a call goes (docs/model.md §11.4, §11.6): the
//! effective agent's tool list decides, the spawn tool only with spawn rights, MCP tools by
//! `mcp__<server>__<tool>` (and the Gemini `mcp_<server>_*` wildcard), read-only tools only for
//! a read-only or plan-mode worker. A name that was not offered routes to [`Route::Unknown`].

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    ModelSettings,
    conversation::SUBMIT_RESULT,
    mcp::{self, CallResult, McpSession, McpTool},
    turns::Catalog,
};
use crate::{
    config::McpServer,
    persona::Spawns,
    resolve::Tools,
    workers::{executor::Assignment, spec::McpServerSpec},
};

/// The tool an interactive worker asks its caller with (docs §12.4).
pub const ASK_CALLER: &str = "ask_caller";

/// The tool a worker that may spawn follows its children up with (docs §12.5).
pub const MESSAGE_WORKER: &str = "message_worker";

/// Where a call goes.
#[derive(Debug, Clone)]
pub enum Route {
    /// The implicit `submit_result`.
    Submit,
    /// `ask_caller`: the run stops and waits for its caller's answer.
    Ask,
    /// `message_worker`: a follow-up to one of the worker's children.
    Message,
    /// The spawn tool.
    Spawn,
    /// The spawn tool's name at the depth limit: refused with the depth message.
    DepthLimit,
    /// An MCP tool.
    Mcp(McpTool),
    /// A memory tool, in the agent's memory directory.
    Memory(String),
    /// A name that was not offered.
    Unknown,
}

/// Whether an entry of a tool list selects `tool` of `server`.
fn selects(entry: &str, server: &str, tool: &str) -> bool {
    let entry = entry.trim();
    if let Some(rest) = entry.strip_prefix("mcp__") {
        return match rest.split_once("__") {
            None => rest == server,
            Some((s, t)) => s == server && (t == "*" || t == tool),
        };
    }
    if let Some(rest) = entry.strip_prefix("mcp_") {
        if let Some(prefix) = rest.strip_suffix('*') {
            return format!("{server}_{tool}").starts_with(prefix) && prefix.starts_with(server);
        }
        return rest == format!("{server}_{tool}");
    }
    false
}

/// Whether a list entry names server `server` at all (so the server must be started).
fn mentions(entry: &str, server: &str) -> bool {
    let entry = entry.trim();
    if let Some(rest) = entry.strip_prefix("mcp__") {
        return rest.split_once("__").map_or(rest, |(s, _)| s) == server;
    }
    entry.strip_prefix("mcp_").is_some_and(|rest| {
        rest.strip_prefix(server)
            .is_some_and(|r| r.starts_with('_'))
    })
}

/// Whether an exclusion list removes every tool of `server`.
fn excludes_all(entry: &str, server: &str) -> bool {
    let e = entry.trim();
    e == format!("mcp__{server}")
        || e == format!("mcp__{server}__*")
        || e == format!("mcp_{server}_*")
}

/// The servers a worker of `agent` with `tools` gets, with what starts each. Without a
/// persona list (`mcpServers`): the configured servers its tool list mentions, or, for an agent
/// that inherits all tools, every one it does not exclude entirely. With one: exactly the
/// servers it names — a configured one by name (an unknown name refuses the spawn), an inline
/// one as the persona defines it — narrowed by the tool list the same way (docs/model.md §11.6,
/// docs/personas.md §2.9). Each comes with whether its tool annotations are trusted: a
/// configured server's are, an inline one's are not.
pub fn servers_for(
    settings: &ModelSettings,
    agent: &str,
    tools: &Tools,
    persona: Option<&[McpServerSpec]>,
) -> Result<Vec<(String, McpServer, bool)>, String> {
    let wanted = |s: &str| match tools {
        Tools::Only(list) => list.iter().any(|e| mentions(e, s)),
        Tools::AllExcept(ex) => !ex.iter().any(|e| excludes_all(e, s)),
    };
    let Some(persona) = persona else {
        return Ok(settings
            .servers
            .iter()
            .filter(|(s, _)| wanted(s))
            .map(|(s, def)| (s.clone(), def.clone(), true))
            .collect());
    };
    let mut out = Vec::new();
    for s in persona {
        let def = if s.inline {
            McpServer {
                command: s.command.clone(),
                env: s.env.clone(),
                // A relative directory is the workspace's.
                cwd: s.cwd.as_ref().map(|c| {
                    if c.starts_with('/') || c.starts_with("${") {
                        c.clone()
                    } else {
                        format!("${{workspace}}/{c}")
                    }
                }),
                url: s.url.clone(),
                headers: s.headers.clone(),
            }
        } else {
            match settings.servers.get(&s.name) {
                Some(def) => def.clone(),
                None => {
                    return Err(format!(
                        "agent {agent} names MCP server {:?}, which is not configured (mcp_servers: {})",
                        s.name,
                        if settings.servers.is_empty() {
                            "none".to_owned()
                        } else {
                            settings
                                .servers
                                .keys()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ));
                }
            }
        };
        if wanted(&s.name) {
            out.push((s.name.clone(), def, !s.inline));
        }
    }
    Ok(out)
}

/// A name the Chat Completions API accepts.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The definition of `ask_caller` (docs §12.4).
fn ask_definition() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": ASK_CALLER,
            "description": "Ask the caller who gave you this task a question, and wait for the answer. Use it only for a decision you cannot make yourself; the answer comes back as this call's result.",
            "parameters": {
                "type": "object",
                "properties": {"question": {"type": "string", "description": "The question, complete enough to answer without more context."}},
                "required": ["question"],
                "additionalProperties": false
            }
        }
    })
}

/// The definition of `message_worker` (docs §12.5).
fn message_definition() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": MESSAGE_WORKER,
            "description": "Send a follow-up message to one of your own child workers (the worker id the spawn tool's result names) and wait for its answer. A child that finished carries on with everything it already did.",
            "parameters": {
                "type": "object",
                "properties": {
                    "worker_id": {"type": "string", "description": "The child's worker id (wkr_…)."},
                    "text": {"type": "string", "description": "The message."}
                },
                "required": ["worker_id", "text"],
                "additionalProperties": false
            }
        }
    })
}

/// One worker's tools: the definitions sent each turn, and the started servers.
pub struct Toolbox {
    definitions: Vec<Value>,
    names: Vec<String>,
    spawn_tool: String,
    spawn: bool,
    at_max_depth: bool,
    mcp: Vec<McpTool>,
    sessions: Vec<(String, Arc<dyn McpSession>)>,
    review_tools: Vec<String>,
    /// The agent's memory directory, when its persona has `memory`.
    memory_dir: Option<std::path::PathBuf>,
}

impl Toolbox {
    /// Starts the worker's servers and computes what it is offered.
    pub async fn start(
        settings: &ModelSettings,
        a: &Assignment,
        workspace: &str,
    ) -> Result<Self, String> {
        let agent = &a.spec.agent;
        let mut sessions = Vec::new();
        let mut found = Vec::new();
        let persona = agent.mcp_servers.as_ref().map(|l| l.servers.as_slice());
        let max_message = settings.looping.max_mcp_message_bytes;
        for (name, server, trusted) in servers_for(settings, &agent.name, &agent.tools, persona)? {
            match mcp::start(&name, &server, workspace, max_message, trusted).await {
                Ok((session, tools)) => {
                    sessions.push((name, session));
                    found.extend(tools);
                }
                Err(e) => {
                    for (_, s) in &sessions {
                        s.close().await;
                    }
                    return Err(e);
                }
            }
        }
        let read_only = a.plan
            || agent
                .permission_mode
                .as_ref()
                .is_some_and(crate::persona::PermissionMode::is_read_only);
        let offered = |t: &McpTool| match &agent.tools {
            Tools::Only(list) => list.iter().any(|e| selects(e, &t.server, &t.name)),
            Tools::AllExcept(ex) => !ex.iter().any(|e| selects(e, &t.server, &t.name)),
        };
        let mcp: Vec<McpTool> = found
            .into_iter()
            .filter(|t| {
                let ok = valid_name(&t.offered_name());
                if !ok {
                    tracing::warn!(tool = %t.offered_name(), "MCP tool not offered: its name is not [A-Za-z0-9_-]{{1,64}}");
                }
                ok && offered(t) && (!read_only || t.read_only)
            })
            .collect();
        let spawn_tool = settings.spawn_tool.clone();
        let spawn = !agent.spawns.is_none()
            && match &agent.tools {
                Tools::Only(list) => list.contains(&spawn_tool),
                Tools::AllExcept(ex) => !ex.contains(&spawn_tool),
            };
        let mut definitions = vec![submit_definition(agent.output_schema.as_ref())];
        let mut names = vec![SUBMIT_RESULT.to_owned()];
        if spawn {
            definitions.push(spawn_definition(&spawn_tool, &agent.spawns));
            names.push(spawn_tool.clone());
            definitions.push(message_definition());
            names.push(MESSAGE_WORKER.to_owned());
        }
        if a.interactive {
            definitions.push(ask_definition());
            names.push(ASK_CALLER.to_owned());
        }
        // The persona's `memory` brings its tools, confined to the agent's directory.
        let memory_dir = a.spec.memory_dir.as_ref().map(std::path::PathBuf::from);
        if memory_dir.is_some() {
            for d in super::memory::definitions(read_only) {
                names.push(
                    d["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
                definitions.push(d);
            }
        }
        offer_mcp(&mcp, &mut definitions, &mut names);
        Ok(Self {
            definitions,
            names,
            spawn_tool,
            spawn,
            at_max_depth: a.at_max_depth,
            mcp,
            sessions,
            review_tools: settings.review_tools.clone(),
            memory_dir,
        })
    }

    /// A toolbox of these MCP tools on these sessions (in-process tests of the driver): only
    /// `submit_result` besides them, no spawn tool, no memory.
    #[cfg(test)]
    pub fn of_sessions(
        mcp: Vec<McpTool>,
        sessions: Vec<(String, Arc<dyn McpSession>)>,
        review_tools: Vec<String>,
    ) -> Self {
        let mut definitions = vec![submit_definition(None)];
        let mut names = vec![SUBMIT_RESULT.to_owned()];
        offer_mcp(&mcp, &mut definitions, &mut names);
        Self {
            definitions,
            names,
            spawn_tool: "task".to_owned(),
            spawn: false,
            at_max_depth: false,
            mcp,
            sessions,
            review_tools,
            memory_dir: None,
        }
    }

    /// The `tools` of every request.
    pub fn definitions(&self) -> &[Value] {
        &self.definitions
    }

    /// What the loop decides calls with (docs/model.md §11.4): the names offered, the MCP tools
    /// that are reviewed before they run, and the spawn tool's name at the depth limit.
    pub fn catalog(&self) -> Catalog {
        Catalog {
            offered: self.names.clone(),
            gated: self
                .mcp
                .iter()
                .filter(|t| self.needs_review(t))
                .map(McpTool::offered_name)
                .collect(),
            depth_limited: (!self.spawn && self.at_max_depth).then(|| self.spawn_tool.clone()),
        }
    }

    /// The names offered, in the order of [`Self::definitions`].
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Where a call of `name` goes.
    pub fn route(&self, name: &str) -> Route {
        if name == SUBMIT_RESULT {
            return Route::Submit;
        }
        if self.names.iter().any(|n| n == name) {
            if name == ASK_CALLER {
                return Route::Ask;
            }
            if name == MESSAGE_WORKER {
                return Route::Message;
            }
        }
        if name == self.spawn_tool {
            if self.spawn {
                return Route::Spawn;
            }
            if self.at_max_depth {
                return Route::DepthLimit;
            }
        }
        if self.memory_dir.is_some()
            && name.starts_with("memory_")
            && self.names.iter().any(|n| n == name)
        {
            return Route::Memory(name.to_owned());
        }
        self.mcp
            .iter()
            .find(|t| t.offered_name() == name)
            .map_or(Route::Unknown, |t| Route::Mcp(t.clone()))
    }

    /// The agent's memory directory, when it has one.
    pub fn memory_dir(&self) -> Option<&std::path::Path> {
        self.memory_dir.as_deref()
    }

    /// Whether a call of `tool` goes through the review gate first.
    pub fn needs_review(&self, tool: &McpTool) -> bool {
        !tool.read_only || self.review_tools.contains(&tool.offered_name())
    }

    /// Calls `tool` on its server.
    pub async fn call(&self, tool: &McpTool, args: Option<Value>) -> Result<CallResult, String> {
        let (_, session) = self
            .sessions
            .iter()
            .find(|(s, _)| *s == tool.server)
            .ok_or_else(|| format!("server {} is not running", tool.server))?;
        session.call(&tool.name, args).await
    }

    /// Stops every server of the worker.
    pub async fn close(&self) {
        for (_, s) in &self.sessions {
            s.close().await;
        }
    }
}

/// Adds the definitions and names of the MCP tools offered.
fn offer_mcp(mcp: &[McpTool], definitions: &mut Vec<Value>, names: &mut Vec<String>) {
    for t in mcp {
        definitions.push(json!({"type": "function", "function": {
            "name": t.offered_name(),
            "description": t.description,
            "parameters": t.input_schema,
        }}));
        names.push(t.offered_name());
    }
}

fn submit_definition(schema: Option<&Value>) -> Value {
    let result = schema
        .cloned()
        .unwrap_or_else(|| json!({"type": "string", "description": "The final answer."}));
    json!({"type": "function", "function": {
        "name": SUBMIT_RESULT,
        "description": "Finish the task: submit the final result. Call it once, when the work is done.",
        "parameters": {"type": "object", "properties": {"result": result}, "required": ["result"]},
    }})
}

fn spawn_definition(name: &str, spawns: &Spawns) -> Value {
    let mut agent = json!({"type": "string", "description": "The exact name of the agent to run."});
    if let Spawns::Only(allowed) = spawns {
        agent["enum"] = json!(allowed);
    }
    json!({"type": "function", "function": {
        "name": name,
        "description": "Run another agent on a sub-task and wait for its result.",
        "parameters": {"type": "object", "properties": {
            "agent": agent,
            "description": {"type": "string", "description": "A one-line summary of the sub-task."},
            "prompt": {"type": "string", "description": "The full brief for the agent."},
        }, "required": ["agent", "prompt"]},
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_entries_select_mcp_tools() {
        assert!(selects("mcp__fs__read_file", "fs", "read_file"));
        assert!(!selects("mcp__fs__read_file", "fs", "write_file"));
        assert!(selects("mcp__fs", "fs", "write_file"));
        assert!(selects("mcp__fs__*", "fs", "x"));
        assert!(!selects("mcp__fsx__*", "fs", "x"));
        assert!(selects("mcp_fs_*", "fs", "read_file"));
        assert!(selects("mcp_fs_read*", "fs", "read_file"));
        assert!(!selects("mcp_fs_read*", "fs", "write_file"));
        assert!(selects(
            "mcp_time_get_current_time",
            "time",
            "get_current_time"
        ));
        assert!(!selects("read", "fs", "read"));
        assert!(mentions("mcp__fs__read_file", "fs") && mentions("mcp_fs_*", "fs"));
        assert!(!mentions("mcp_fsx_*", "fs") && !mentions("Read", "fs"));
        assert!(excludes_all("mcp__fs", "fs") && !excludes_all("mcp__fs__write_file", "fs"));
    }

    #[test]
    fn servers_follow_the_tool_list() {
        let settings = ModelSettings {
            servers: [
                ("fs".to_owned(), Default::default()),
                ("time".to_owned(), Default::default()),
            ]
            .into(),
            ..ModelSettings::default()
        };
        let only = Tools::Only(vec!["read".into(), "mcp__time__get_current_time".into()]);
        let names = |persona: Option<&[McpServerSpec]>, tools: &Tools| {
            servers_for(&settings, "a", tools, persona)
                .map(|v| v.into_iter().map(|(n, _, _)| n).collect::<Vec<_>>())
        };
        assert_eq!(names(None, &only).unwrap(), ["time"]);
        let all = Tools::AllExcept(vec!["mcp__fs".into()]);
        assert_eq!(names(None, &all).unwrap(), ["time"]);
        let everything = Tools::AllExcept(vec![]);
        assert_eq!(names(None, &everything).unwrap(), ["fs", "time"]);

        let named = |n: &str| McpServerSpec {
            name: n.to_owned(),
            inline: false,
            command: Vec::new(),
            env: Default::default(),
            cwd: None,
            url: None,
            headers: Default::default(),
        };
        let own = McpServerSpec {
            inline: true,
            command: vec!["srv".into()],
            ..named("own")
        };
        let list = [named("time"), own];
        let got = servers_for(&settings, "a", &everything, Some(&list)).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[1].0.as_str(), got[1].1.command.as_slice()),
            ("own", &["srv".to_owned()][..])
        );
        // A configured server's annotations are trusted, an inline one's are not.
        assert!(got[0].2 && !got[1].2);
        assert_eq!(names(Some(&list), &only).unwrap(), ["time"]);
        assert_eq!(names(Some(&[]), &everything).unwrap(), Vec::<String>::new());
        let e = names(Some(&[named("github")]), &everything).unwrap_err();
        assert_eq!(
            e,
            "agent a names MCP server \"github\", which is not configured (mcp_servers: fs, time)"
        );
    }

    #[test]
    fn the_spawn_tool_lists_its_agents() {
        let d = spawn_definition("task", &Spawns::parse_policy("explore, plan"));
        assert_eq!(
            d["function"]["parameters"]["properties"]["agent"]["enum"],
            json!(["explore", "plan"])
        );
        assert!(
            spawn_definition("task", &Spawns::Any)["function"]["parameters"]["properties"]["agent"]
                .get("enum")
                .is_none()
        );
    }
}
