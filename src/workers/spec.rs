//! The worker spec: the effective agent and the prompt of one worker, as every executor hands
//! it to the agent runtime (docs/workers.md §6.4, docs/runners.md).
//!
//! One type, two forms: the `exec` executor writes its JSON to the process's stdin, and a
//! runner receives it as the proto message `agentry.v1.WorkerSpec`. The serde form here is the
//! proto3 JSON form of that message with proto field names and fields without presence always
//! printed (what `MessageToDict(spec, preserving_proto_field_name=True,
//! always_print_fields_with_no_presence=True)` gives in Python), so a runner and an exec runtime
//! read the same document. Absent optional fields are left out, never `null`. The field order
//! is the proto's, and scripts rely on it (`"depth"` is followed by `"prompt"`).
//!
//! Pure data; depends only on the resolve types it is built from.

use serde::Serialize;

use crate::{persona::ThinkingLevel, resolve::Tools};

/// What one worker runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerSpec {
    /// The worker's id (`wkr_…`).
    pub worker_id: String,
    /// Its depth: 1 below a top-level caller.
    pub depth: u32,
    /// The task brief.
    pub prompt: String,
    /// The one-line summary the caller gave.
    pub description: String,
    /// The absolute workspace, when the caller gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The effective agent (docs/lineage.md §5.3), never the raw file.
    pub agent: AgentSpec,
    /// The agent's memory directory (persona `memory`, docs/personas.md §2.7), created at
    /// spawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_dir: Option<String>,
    /// The A2A message that started the worker (docs §13.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aMessage>,
}

/// An A2A message as the worker gets it (proto `agentry.v1.A2aMessage`); stored as this JSON on
/// the worker row.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct A2aMessage {
    /// Its `messageId`.
    pub message_id: String,
    /// Its `contextId`.
    pub context_id: String,
    /// Its text and data parts, in order.
    pub parts: Vec<A2aPart>,
    /// Its `metadata` as JSON text; empty = none.
    #[serde(default)]
    pub metadata_json: String,
}

/// One part of an [`A2aMessage`]: exactly one of the two is set (proto `ArtifactPart`).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct A2aPart {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A JSON value, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_json: Option<String>,
}

/// The effective agent as a runtime needs it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentSpec {
    /// The agent's name.
    pub name: String,
    /// The composed system prompt.
    pub system_prompt: String,
    /// `{"only": [...]}` or `{"all_except": [...]}`.
    pub tools: Tools,
    /// The permission patterns among the tools, name and pattern apart (docs/lineage.md §5.3);
    /// always written, `[]` without any, as the proto JSON form prints a repeated field.
    pub tool_rules: Vec<crate::resolve::ToolRule>,
    /// The worker's own spawn policy, written `*`, empty or CSV.
    #[serde(with = "crate::persona::policy_text")]
    pub spawns: crate::persona::Spawns,
    /// Models in order.
    pub model: Vec<String>,
    /// `off` … `xhigh`, when the persona sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<ThinkingLevel>,
    /// Turn budget, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Passed through, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<crate::persona::PermissionMode>,
    /// The effective output schema (a JSON value), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// The persona's MCP servers, when it names any (docs/personas.md §2.9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<McpServerList>,
    /// A remote persona's A2A agent (docs §13.4); agentry's own, not part of the spec a
    /// runtime reads.
    #[serde(skip)]
    pub remote: Option<crate::resolve::RemoteAgent>,
}

/// The MCP servers a persona names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpServerList {
    /// In the persona's order.
    pub servers: Vec<McpServerSpec>,
}

/// One MCP server a persona names (proto `agentry.v1.McpServerSpec`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpServerSpec {
    /// Its name.
    pub name: String,
    /// Defined in the persona file (else: the configuration's server of this name).
    pub inline: bool,
    /// argv of a stdio server.
    pub command: Vec<String>,
    /// Extra environment of a stdio server.
    pub env: std::collections::BTreeMap<String, String>,
    /// Working directory of a stdio server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// URL of a streamable-HTTP server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent to a streamable-HTTP server.
    pub headers: std::collections::BTreeMap<String, String>,
}

impl McpServerSpec {
    /// The spec of one server a persona names.
    pub fn of(r: &crate::persona::mcp::McpRef) -> Self {
        use crate::persona::mcp::McpRef;
        match r {
            McpRef::Named(name) => Self {
                name: name.clone(),
                inline: false,
                command: Vec::new(),
                env: Default::default(),
                cwd: None,
                url: None,
                headers: Default::default(),
            },
            McpRef::Inline(d) => Self {
                name: d.name.clone(),
                inline: true,
                command: d.command.clone(),
                env: d.env.clone(),
                cwd: d.cwd.clone(),
                url: d.url.clone(),
                headers: d.headers.clone(),
            },
        }
    }
}

impl WorkerSpec {
    /// The spec of worker `worker_id` running `eff` on `prompt`.
    pub fn new(
        worker_id: &str,
        eff: &crate::resolve::Effective,
        prompt: &str,
        description: &str,
        workspace: Option<&str>,
    ) -> Self {
        Self {
            worker_id: worker_id.to_owned(),
            depth: eff.depth,
            prompt: prompt.to_owned(),
            description: description.to_owned(),
            workspace: workspace.map(str::to_owned),
            agent: AgentSpec {
                name: eff.name.clone(),
                system_prompt: eff.system_prompt.clone(),
                tools: eff.tools.clone(),
                tool_rules: eff.tool_rules.clone(),
                spawns: eff.spawns.clone(),
                model: eff.model.clone(),
                thinking_level: eff.thinking_level,
                max_turns: eff.max_turns,
                permission_mode: eff.permission_mode.clone(),
                output_schema: eff.output_schema.clone(),
                mcp_servers: eff.mcp_servers.as_ref().map(|list| McpServerList {
                    servers: list.iter().map(McpServerSpec::of).collect(),
                }),
                remote: eff.remote.clone(),
            },
            memory_dir: eff.memory_dir.clone(),
            a2a: None,
        }
    }

    /// With the A2A message stored on the worker (its JSON), when there is one that reads.
    pub fn with_a2a(mut self, stored: Option<&str>) -> Self {
        self.a2a = stored.and_then(|j| serde_json::from_str(j).ok());
        self
    }

    /// The stdin document of the `exec` executor.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("worker spec serialises")
    }
}
