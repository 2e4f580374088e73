//! Lineage, spawn policy and the effective agent (docs §5): who is calling, what they may spawn,
//! and exactly what a worker spawned by them gets.
//!
//! Pure functions over a [`Snapshot`]; no I/O, no gRPC. Workflow commands are looked up and
//! expanded in [`command`].

pub mod command;
pub mod lineage;
pub mod listing;

use std::{sync::Arc, time::Duration};

use serde::Serialize;

use crate::{
    config::{Config, PlanMode},
    discovery::{AgentDef, Snapshot},
    persona::{Spawns, ThinkingLevel},
};

/// How many names an "Unknown agent" message lists before summarising the rest; a status
/// message travels in an HTTP/2 header, which peers limit (commonly 8–16 KiB).
const MAX_LISTED_NAMES: usize = 64;

/// The mode a worker runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The agent as defined.
    #[default]
    Default,
    /// Plan mode: preamble, plan tools, no spawning.
    Plan,
}

impl Mode {
    /// The mode's name as it is serialised (`default`, `plan`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Plan => "plan",
        }
    }
}

/// What a caller may do, after metadata narrowed what the service knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    /// The caller's depth (0 = top level).
    pub depth: u32,
    /// Who the caller may spawn.
    pub policy: Spawns,
    /// Agents the caller must not spawn (its own agent, declared blocks).
    pub blocked: Vec<String>,
    /// The calling worker's effective output schema, inherited as the last precedence level.
    pub parent_output_schema: Option<serde_json::Value>,
}

impl Caller {
    /// A top-level caller with no declarations: depth 0, may spawn anything.
    pub fn top_level() -> Self {
        Self {
            depth: 0,
            policy: Spawns::Any,
            blocked: Vec::new(),
            parent_output_schema: None,
        }
    }

    /// Applies what the caller declared about itself. Declarations only narrow: depth is the
    /// larger, policy the intersection, blocked agents the union.
    pub fn narrow(mut self, declared: &Declared) -> Self {
        if let Some(d) = declared.depth {
            self.depth = self.depth.max(d);
        }
        if let Some(p) = &declared.spawns {
            self.policy = intersect(&self.policy, p);
        }
        for b in &declared.blocked {
            if !self.blocked.contains(b) {
                self.blocked.push(b.clone());
            }
        }
        self
    }
}

fn intersect(a: &Spawns, b: &Spawns) -> Spawns {
    match (a, b) {
        (Spawns::Any, x) | (x, Spawns::Any) => x.clone(),
        (Spawns::Only(x), Spawns::Only(y)) => {
            Spawns::Only(x.iter().filter(|n| y.contains(n)).cloned().collect())
        }
    }
}

/// What a caller declared in call metadata (`x-agentry-*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// `x-agentry-spawns`.
    pub spawns: Option<Spawns>,
    /// `x-agentry-depth`.
    pub depth: Option<u32>,
    /// `x-agentry-blocked-agent`.
    pub blocked: Vec<String>,
}

/// Settings of resolution, from the configuration.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Deepest worker depth; negative = unlimited.
    pub max_depth: i64,
    /// The spawn tool's name.
    pub spawn_tool: String,
    /// Never spawned, never in a catalog.
    pub reserved: Vec<String>,
    /// Plan-mode preamble and tools.
    pub plan_mode: PlanMode,
    /// Universal preamble.
    pub base_prompt: String,
    /// `a2a.allow_project_remotes`: a project persona may be a remote A2A agent.
    pub allow_project_remotes: bool,
}

impl Rules {
    /// Takes the relevant keys of the configuration.
    pub fn from_config(cfg: &Config) -> Self {
        Self {
            max_depth: cfg.max_recursion_depth,
            spawn_tool: cfg.spawn_tool.clone(),
            reserved: cfg.reserved_agents.clone(),
            plan_mode: cfg.plan_mode.clone(),
            base_prompt: cfg.base_prompt.clone(),
            allow_project_remotes: cfg.a2a.allow_project_remotes,
        }
    }

    fn at_max(&self, depth: u32) -> bool {
        self.max_depth >= 0 && i64::from(depth) >= self.max_depth
    }
}

/// The tools a worker gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tools {
    /// Exactly these.
    Only(Vec<String>),
    /// Everything the runtime has, except these.
    AllExcept(Vec<String>),
}

/// One tool-list entry that carries a permission pattern, `Name(pattern)` as Claude Code writes
/// `Bash(git diff:*)`: the entry stays verbatim in the tools, and the rule tells an executor
/// which tool it restricts and how (docs/lineage.md §5.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolRule {
    /// The entry as written.
    pub entry: String,
    /// The tool it is about (`Bash`).
    pub name: String,
    /// The pattern between the parentheses (`git diff:*`), verbatim.
    pub pattern: String,
    /// From `disallowed_tools`: calls matching the pattern are refused; else only calls
    /// matching one of the tool's allow rules are allowed.
    pub deny: bool,
}

impl ToolRule {
    /// The rule of `entry`, when it is `Name(pattern)`: a name of letters, digits, `_`, `-`
    /// and `.`, then the pattern up to the closing parenthesis that ends the entry.
    pub fn parse(entry: &str, deny: bool) -> Option<Self> {
        let e = entry.trim();
        let (name, rest) = e.split_once('(')?;
        let pattern = rest.strip_suffix(')')?;
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        name_ok.then(|| Self {
            entry: e.to_owned(),
            name: name.to_owned(),
            pattern: pattern.to_owned(),
            deny,
        })
    }
}

/// The pattern rules of a worker's tools: the allow rules of an explicit list, and the deny
/// rules of `disallowed_tools` that still restrict a tool the worker has (an "all but" list
/// keeps every deny rule).
fn tool_rules(tools: &Tools, disallowed: &[String]) -> Vec<ToolRule> {
    match tools {
        Tools::Only(list) => {
            let mut rules: Vec<ToolRule> = list
                .iter()
                .filter_map(|e| ToolRule::parse(e, false))
                .collect();
            let has = |name: &str| {
                list.iter()
                    .any(|e| e == name || rules.iter().any(|r| r.name == name))
            };
            let denies: Vec<ToolRule> = disallowed
                .iter()
                .filter_map(|e| ToolRule::parse(e, true))
                .filter(|r| has(&r.name))
                .collect();
            rules.extend(denies);
            rules
        }
        Tools::AllExcept(ex) => ex.iter().filter_map(|e| ToolRule::parse(e, true)).collect(),
    }
}

/// Which rule supplied the output schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemaSource {
    /// The agent's `output`.
    Agent,
    /// The request's `output_schema`.
    Request,
    /// The calling worker's effective schema.
    Parent,
}

/// Exactly what a worker gets (docs §5.3).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Effective {
    /// Agent name.
    pub name: String,
    /// Composed system prompt.
    pub system_prompt: String,
    /// Tools after every rule.
    pub tools: Tools,
    /// The permission patterns among them (`Bash(git diff:*)`), name and pattern apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_rules: Vec<ToolRule>,
    /// The worker's own policy (none when it may not spawn); `*`, empty or CSV as text.
    #[serde(with = "crate::persona::policy_text")]
    pub spawns: Spawns,
    /// Models, in order.
    pub model: Vec<String>,
    /// Reasoning effort.
    pub thinking_level: Option<ThinkingLevel>,
    /// Turn budget.
    pub max_turns: Option<u32>,
    /// Passed through.
    pub permission_mode: Option<crate::persona::PermissionMode>,
    /// Effective output schema.
    pub output_schema: Option<serde_json::Value>,
    /// Where it came from.
    pub output_schema_source: Option<SchemaSource>,
    /// Mode computed for.
    pub mode: Mode,
    /// The worker's depth.
    pub depth: u32,
    /// Whether the worker is at the depth limit.
    pub at_max_depth: bool,
    /// The agent's memory directory, when its persona has `memory` (set at spawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_dir: Option<String>,
    /// The persona's MCP servers, when it names any (docs/personas.md §2.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<crate::persona::mcp::McpRef>>,
    /// Spawned with `interactive` (docs §12.4): on the model executor it is offered
    /// `ask_caller`. Not part of the persona: the spawn request decides it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// A `kind: remote` persona's A2A agent (docs §13.4): such a worker runs on the `a2a`
    /// executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteAgent>,
}

/// Where a remote persona's A2A agent card is (docs/personas.md §2.6, docs/a2a.md §13.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RemoteAgent {
    /// `agent_card_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_url: Option<String>,
    /// `agent_card_json`: the card itself, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_json: Option<String>,
}

impl RemoteAgent {
    /// The card location of persona `p`, when it is `kind: remote`.
    pub fn of(p: &crate::persona::Persona) -> Option<Self> {
        if !p.remote {
            return None;
        }
        let field = |name: &str| {
            p.extra
                .iter()
                .find(|(k, _)| crate::persona::normalise_key(k) == name)
                .map(|(_, v)| v)
        };
        Some(Self {
            card_url: field("agent_card_url")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            card_json: field("agent_card_json").map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
        })
    }
}

/// Computes the effective agent for `def` spawned by `caller`.
pub fn effective(
    def: &AgentDef,
    snapshot: &Snapshot,
    caller: &Caller,
    mode: Mode,
    request_schema: Option<&serde_json::Value>,
    rules: &Rules,
) -> Effective {
    let p = &def.persona;
    // `permissionMode: plan` is plan mode (docs/personas.md §2.7): the worker gets exactly the
    // plan-mode agent, whatever mode the request asked for.
    let mode = if p.permission_mode == Some(crate::persona::PermissionMode::Plan) {
        Mode::Plan
    } else {
        mode
    };
    let depth = caller.depth.saturating_add(1);
    let at_max = rules.at_max(depth);
    let own_spawns = match &p.spawns {
        Some(Spawns::Only(n)) if n.is_empty() => None,
        other => other.clone(),
    };
    let can_spawn = own_spawns.is_some() && !at_max && mode == Mode::Default;
    let spawn_tool = &rules.spawn_tool;

    let disallowed = match mode {
        Mode::Plan => Vec::new(),
        _ => p.disallowed_tools.clone().unwrap_or_default(),
    };
    let tools = if mode == Mode::Plan {
        Tools::Only(rules.plan_mode.tools.clone())
    } else {
        let disallowed = disallowed.clone();
        match &p.tools {
            Some(list) => {
                let mut t: Vec<String> = list
                    .iter()
                    .filter(|t| !disallowed.contains(t))
                    .cloned()
                    .collect();
                if can_spawn {
                    if !t.contains(spawn_tool) {
                        t.push(spawn_tool.clone());
                    }
                } else {
                    t.retain(|x| x != spawn_tool);
                }
                Tools::Only(t)
            }
            None => {
                let mut except = Vec::new();
                for d in disallowed {
                    if !except.contains(&d) {
                        except.push(d);
                    }
                }
                if !can_spawn && !except.contains(spawn_tool) {
                    except.push(spawn_tool.clone());
                }
                Tools::AllExcept(except)
            }
        }
    };
    let spawns = match (&own_spawns, can_spawn) {
        (Some(s), true) => s.clone(),
        _ => Spawns::none(),
    };

    let body: std::borrow::Cow<'_, str> = if mode == Mode::Plan {
        format!("{}\n\n{}", rules.plan_mode.prompt.trim(), p.system_prompt).into()
    } else {
        p.system_prompt.as_str().into()
    };
    let reminder = p
        .critical_reminder
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| format!("<critical-reminder>\n{r}\n</critical-reminder>"));
    // Each skill the persona names, after its body (docs/personas.md §2.8).
    let skill_texts: Vec<String> = snapshot
        .skills_of(def)
        .map(|s| format!("## Skill: {}\n\n{}", s.name, s.body.trim()))
        .collect();
    let catalog_text =
        (p.name == "default").then(|| catalog_markdown(&catalog(snapshot, caller, rules)));
    let system_prompt = [Some(rules.base_prompt.as_str()), Some(&*body)]
        .into_iter()
        .chain(skill_texts.iter().map(|s| Some(s.as_str())))
        .chain([reminder.as_deref(), catalog_text.as_deref()])
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");

    let (output_schema, output_schema_source) = match output_schema(def, request_schema, caller) {
        Some((s, source)) => (Some(s.clone()), Some(source)),
        None => (None, None),
    };

    Effective {
        name: p.name.clone(),
        system_prompt,
        tool_rules: tool_rules(&tools, &disallowed),
        tools,
        spawns,
        model: p.model.clone().unwrap_or_default(),
        thinking_level: p.thinking_level,
        max_turns: p.max_turns,
        permission_mode: p.permission_mode.clone(),
        output_schema,
        output_schema_source,
        mode,
        depth,
        at_max_depth: at_max,
        memory_dir: None,
        mcp_servers: p.mcp_servers.clone(),
        interactive: false,
        remote: RemoteAgent::of(p),
    }
}

/// The output schema a worker of `def` must answer with, and where it comes from: the agent's
/// own, else the request's, else the one its parent worker must answer with.
pub fn output_schema<'a>(
    def: &'a AgentDef,
    request_schema: Option<&'a serde_json::Value>,
    caller: &'a Caller,
) -> Option<(&'a serde_json::Value, SchemaSource)> {
    match (
        &def.persona.output,
        request_schema,
        &caller.parent_output_schema,
    ) {
        (Some(s), _, _) => Some((s, SchemaSource::Agent)),
        (None, Some(s), _) => Some((s, SchemaSource::Request)),
        (None, None, Some(s)) => Some((s, SchemaSource::Parent)),
        _ => None,
    }
}

/// A worker's run timeout: the smallest of the request's, the agent's own (`timeout_mins`,
/// docs §2.6) and `executor.timeout`, which is also the default.
pub fn effective_timeout(
    request: Option<Duration>,
    agent_mins: Option<u32>,
    executor: Duration,
) -> Duration {
    let agent = agent_mins.map(|m| Duration::from_secs(u64::from(m) * 60));
    [request, agent]
        .into_iter()
        .flatten()
        .fold(executor, Duration::min)
}

/// Agents the caller may spawn, in precedence order: not reserved, not blocked, allowed by its
/// policy, and none at all when the caller is at the depth limit.
pub fn catalog<'a>(
    snapshot: &'a Snapshot,
    caller: &Caller,
    rules: &Rules,
) -> Vec<&'a Arc<AgentDef>> {
    if rules.at_max(caller.depth) {
        return Vec::new();
    }
    snapshot
        .agents
        .iter()
        .filter(|a| {
            let n = &a.persona.name;
            !rules.reserved.contains(n) && !caller.blocked.contains(n) && caller.policy.allows(n)
        })
        .collect()
}

/// The catalog as a markdown bullet list (docs §5.4).
pub fn catalog_markdown(agents: &[&Arc<AgentDef>]) -> String {
    let mut out = String::new();
    for a in agents {
        let p = &a.persona;
        out.push_str(&format!("- `{}` — {}", p.name, p.description));
        if let Some(first) = p
            .when_to_use
            .as_deref()
            .and_then(|w| w.lines().map(str::trim).find(|l| !l.is_empty()))
            && first != p.description
        {
            out.push_str(&format!(" When to use: {first}"));
        }
        out.push('\n');
    }
    out
}

/// Why a spawn is refused, in the check order of docs §4.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnDenied {
    /// No such agent.
    #[error("Unknown agent \"{name}\". Available: {available}")]
    UnknownAgent {
        /// Requested name.
        name: String,
        /// Comma-separated names, or `none`.
        available: String,
    },
    /// A Gemini CLI `kind: remote` agent as the review gate's reviewer: the gate runs a local
    /// reviewer, and a remote agent's verdict is not one (docs/review.md §7).
    #[error(
        "Cannot spawn '{name}' as the reviewer: it is a remote (A2A) agent, and the review gate \
         runs only a local reviewer."
    )]
    Remote {
        /// Requested name.
        name: String,
    },
    /// A `kind: remote` agent from a project directory: whoever can write the workspace would
    /// choose the URL agentry calls (docs/a2a.md §13.4).
    #[error(
        "Cannot spawn '{name}': it is a remote (A2A) agent defined in a project directory, and a \
         project file may not make agentry call a URL it chooses. Define it in a user or \
         configured directory, or set a2a.allow_project_remotes: true."
    )]
    RemoteFromProject {
        /// Requested name.
        name: String,
    },
    /// A reserved agent.
    #[error(
        "Cannot spawn '{name}': it is a reserved agent (reserved: {reserved}). The reviewer runs \
         only through the Review gate and `default` is the coordinator itself, so neither can be \
         spawned as a worker."
    )]
    Reserved {
        /// Requested name.
        name: String,
        /// The reserved list.
        reserved: String,
    },
    /// The caller's own agent, or a declared blocked agent.
    #[error(
        "Cannot spawn {name} agent from within itself (recursion prevention). Use a different agent type."
    )]
    Recursion {
        /// Requested name.
        name: String,
    },
    /// Not in the caller's policy.
    #[error("Cannot spawn '{name}'. Allowed: {allowed}")]
    NotAllowed {
        /// Requested name.
        name: String,
        /// The policy, or `none (spawns disabled for this agent)`.
        allowed: String,
    },
    /// The caller is at the depth limit.
    #[error(
        "Cannot spawn '{name}': the caller is at depth {depth} and max_recursion_depth is {max}, so a child would be too deep"
    )]
    MaxDepth {
        /// Requested name.
        name: String,
        /// Caller depth.
        depth: u32,
        /// The limit.
        max: i64,
    },
}

impl SpawnDenied {
    /// The stable UPPER_SNAKE reason (also the gRPC `ErrorInfo.reason`).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownAgent { .. } => "AGENT_NOT_FOUND",
            Self::Remote { .. } | Self::RemoteFromProject { .. } => "REMOTE_AGENT",
            Self::Reserved { .. } => "AGENT_RESERVED",
            Self::Recursion { .. } => "RECURSION_BLOCKED",
            Self::NotAllowed { .. } => "SPAWN_NOT_ALLOWED",
            Self::MaxDepth { .. } => "MAX_DEPTH",
        }
    }
}

/// The "Unknown agent" error for `name`.
pub fn unknown_agent(snapshot: &Snapshot, name: &str) -> SpawnDenied {
    let names: Vec<&str> = snapshot
        .agents
        .iter()
        .map(|a| a.persona.name.as_str())
        .collect();
    SpawnDenied::UnknownAgent {
        name: name.to_owned(),
        available: available(&names, "ListAgents"),
    }
}

/// The `Available:` part of an unknown-name message: the names, `none`, or the first
/// [`MAX_LISTED_NAMES`] and a count pointing at the listing RPC.
fn available(names: &[&str], listing: &str) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else if names.len() <= MAX_LISTED_NAMES {
        names.join(", ")
    } else {
        format!(
            "{}, … ({} more; use {listing})",
            names[..MAX_LISTED_NAMES].join(", "),
            names.len() - MAX_LISTED_NAMES
        )
    }
}

/// Checks a spawn in the order of docs §4: unknown → remote (§2.6) → reserved → recursion →
/// policy → depth.
pub fn check_spawn<'a>(
    snapshot: &'a Snapshot,
    caller: &Caller,
    name: &str,
    rules: &Rules,
) -> Result<&'a Arc<AgentDef>, SpawnDenied> {
    check(snapshot, caller, name, rules)
}

/// The checks for the review gate's reviewer: unknown, remote and recursion only. The reviewer is
/// reserved precisely so that only the gate runs it, and the gate — not the caller — decides
/// to run it, so the caller's spawn policy and depth do not apply: a worker that may spawn
/// nothing, or sits at the depth limit, must still be able to have a write reviewed (else every
/// such write would be rejected unseen). The row is still the caller's child, at depth + 1.
pub fn check_review<'a>(
    snapshot: &'a Snapshot,
    caller: &Caller,
    name: &str,
) -> Result<&'a Arc<AgentDef>, SpawnDenied> {
    let def = snapshot
        .get(name)
        .ok_or_else(|| unknown_agent(snapshot, name))?;
    if def.persona.remote {
        return Err(SpawnDenied::Remote {
            name: name.to_owned(),
        });
    }
    if caller.blocked.iter().any(|b| b == name) {
        return Err(SpawnDenied::Recursion {
            name: name.to_owned(),
        });
    }
    Ok(def)
}

fn check<'a>(
    snapshot: &'a Snapshot,
    caller: &Caller,
    name: &str,
    rules: &Rules,
) -> Result<&'a Arc<AgentDef>, SpawnDenied> {
    let def = snapshot
        .get(name)
        .ok_or_else(|| unknown_agent(snapshot, name))?;
    if def.persona.remote
        && def.source == crate::discovery::SourceKind::Project
        && !rules.allow_project_remotes
    {
        return Err(SpawnDenied::RemoteFromProject {
            name: name.to_owned(),
        });
    }
    if rules.reserved.iter().any(|r| r == name) {
        return Err(SpawnDenied::Reserved {
            name: name.to_owned(),
            reserved: rules.reserved.join(", "),
        });
    }
    if caller.blocked.iter().any(|b| b == name) {
        return Err(SpawnDenied::Recursion {
            name: name.to_owned(),
        });
    }
    if !caller.policy.allows(name) {
        let allowed = match &caller.policy {
            Spawns::Only(n) if n.is_empty() => "none (spawns disabled for this agent)".to_owned(),
            Spawns::Only(n) => n.join(", "),
            Spawns::Any => "*".to_owned(),
        };
        return Err(SpawnDenied::NotAllowed {
            name: name.to_owned(),
            allowed,
        });
    }
    if rules.at_max(caller.depth) {
        return Err(SpawnDenied::MaxDepth {
            name: name.to_owned(),
            depth: caller.depth,
            max: rules.max_depth,
        });
    }
    Ok(def)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_patterns_are_split_and_deny_rules_kept_where_they_restrict() {
        let r = ToolRule::parse(" WebFetch(domain:example.com) ", false).unwrap();
        assert_eq!(
            (r.name.as_str(), r.pattern.as_str()),
            ("WebFetch", "domain:example.com")
        );
        assert_eq!(r.entry, "WebFetch(domain:example.com)");
        // The pattern is everything up to the closing parenthesis that ends the entry.
        let r = ToolRule::parse("Bash(echo (a)):x)", true).unwrap();
        assert_eq!(r.pattern, "echo (a)):x");
        for not in ["Bash", "(x)", "Bash(x", "two words(x)", "Bash(x) y"] {
            assert_eq!(ToolRule::parse(not, false), None, "{not}");
        }
        let only = Tools::Only(vec!["Read".into(), "Bash(git diff:*)".into()]);
        let denied = [
            "Bash(rm:*)".to_owned(),
            "Edit(src/**)".to_owned(),
            "Grep".to_owned(),
        ];
        let rules = tool_rules(&only, &denied);
        let got: Vec<(&str, bool)> = rules.iter().map(|r| (r.entry.as_str(), r.deny)).collect();
        // Edit is not among the tools: its deny rule restricts nothing and is not kept.
        assert_eq!(got, [("Bash(git diff:*)", false), ("Bash(rm:*)", true)]);
        let all = Tools::AllExcept(vec!["task".into(), "Bash(rm:*)".into()]);
        let rules = tool_rules(&all, &[]);
        let got: Vec<(&str, bool)> = rules.iter().map(|r| (r.name.as_str(), r.deny)).collect();
        assert_eq!(got, [("Bash", true)]);
    }

    #[test]
    fn the_smallest_timeout_wins() {
        let m = Duration::from_secs(60);
        let exec = 10 * m;
        assert_eq!(effective_timeout(None, None, exec), exec);
        assert_eq!(effective_timeout(Some(3 * m), None, exec), 3 * m);
        assert_eq!(effective_timeout(Some(30 * m), None, exec), exec);
        assert_eq!(effective_timeout(None, Some(2), exec), 2 * m);
        assert_eq!(effective_timeout(None, Some(20), exec), exec);
        assert_eq!(effective_timeout(Some(5 * m), Some(2), exec), 2 * m);
        assert_eq!(effective_timeout(Some(m / 2), Some(2), exec), m / 2);
        assert_eq!(effective_timeout(None, Some(u32::MAX), exec), exec);
    }

    #[test]
    fn narrowing_only_narrows() {
        let known = Caller {
            depth: 1,
            policy: Spawns::Only(vec!["a".into(), "b".into()]),
            blocked: vec!["w".into()],
            parent_output_schema: None,
        };
        let declared = Declared {
            spawns: Some(Spawns::Only(vec!["b".into(), "c".into()])),
            depth: Some(0),
            blocked: vec!["x".into()],
        };
        let c = known.narrow(&declared);
        assert_eq!(c.depth, 1);
        assert_eq!(c.policy, Spawns::Only(vec!["b".into()]));
        assert_eq!(c.blocked, ["w", "x"]);
        let c = Caller::top_level().narrow(&Declared {
            spawns: Some(Spawns::Any),
            depth: Some(3),
            blocked: vec![],
        });
        assert_eq!((c.depth, c.policy), (3, Spawns::Any));
    }
}
