//! Parses one persona file — markdown with YAML frontmatter (docs §2.1–§2.3, §2.6) or a Codex
//! TOML agent (§2.5) — into a [`Persona`] or diagnostics, and one workflow-command file into a
//! [`command::Command`] (§3.6).
//!
//! Pure: bytes in, a value out. No file system access, no knowledge of where the file came from
//! beyond the path used in diagnostics. Must not depend on discovery, workers or gRPC.

mod codex;
pub mod command;
mod fields;
pub mod mcp;
mod split;
mod tomlread;

use std::fmt;

use serde::Serialize;

pub use fields::{ModelCheck, ParseOptions, normalise_key};
pub use split::Comments;

/// Largest persona file read, in bytes (docs §2.4 `too_large`).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Longest accepted agent name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file loaded as written; a note for its author (a placeholder of another tool's
    /// dialect, which stays text).
    Info,
    /// The file loaded; something was ignored or guessed.
    Warning,
    /// The file was skipped.
    Error,
}

/// One problem found in a file; what an operator reads to learn why an agent is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file concerned.
    pub path: String,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// Warning or error.
    pub severity: Severity,
    /// Stable code (`missing_name`, `yaml_fallback`, ...).
    pub code: &'static str,
    /// Human-readable explanation.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        match self.line {
            Some(l) => write!(
                f,
                "{}:{l}: {sev}[{}]: {}",
                self.path, self.code, self.message
            ),
            None => write!(f, "{}: {sev}[{}]: {}", self.path, self.code, self.message),
        }
    }
}

/// Reasoning effort (`thinking_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    /// off
    Off,
    /// minimal
    Minimal,
    /// low
    Low,
    /// medium
    Medium,
    /// high
    High,
    /// xhigh
    Xhigh,
}

impl ThinkingLevel {
    /// Parses the exact lowercase spelling the spec lists.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "off" => Self::Off,
            "minimal" => Self::Minimal,
            "low" => Self::Low,
            "medium" => Self::Medium,
            "high" => Self::High,
            "xhigh" => Self::Xhigh,
            _ => return None,
        })
    }

    /// The spelling used in files and in the worker spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Xhigh => "xhigh",
        }
    }
}

/// The syntax a definition was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Markdown with an optional YAML frontmatter block.
    Markdown,
    /// A TOML document (Codex agents, Gemini CLI commands).
    Toml,
}

impl Format {
    /// `markdown` or `toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Markdown => "markdown",
            Self::Toml => "toml",
        }
    }
}

/// A spawn policy: which agents may be spawned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Spawns {
    /// `*`: any agent.
    Any,
    /// Exactly these names (empty = none).
    Only(Vec<String>),
}

impl Spawns {
    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            Spawns::Any => true,
            Spawns::Only(names) => names.iter().any(|n| n == name),
        }
    }

    /// `*`, empty, or the comma-joined names: the wire and environment form.
    pub fn to_policy_string(&self) -> String {
        match self {
            Spawns::Any => "*".to_owned(),
            Spawns::Only(names) => names.join(","),
        }
    }

    /// The length of [`Self::to_policy_string`], without building it.
    pub fn policy_len(&self) -> usize {
        match self {
            Spawns::Any => 1,
            Spawns::Only(names) => {
                names.iter().map(String::len).sum::<usize>() + names.len().saturating_sub(1)
            }
        }
    }

    /// No agent at all.
    pub fn none() -> Self {
        Spawns::Only(Vec::new())
    }

    /// Whether no agent may be spawned.
    pub fn is_none(&self) -> bool {
        matches!(self, Spawns::Only(names) if names.is_empty())
    }

    /// Parses the wire form: `*` (spaces allowed around it) = any; otherwise comma-separated
    /// names, trimmed, empties dropped (so an empty string is "none").
    pub fn parse_policy(s: &str) -> Self {
        if s.trim() == "*" {
            Spawns::Any
        } else {
            Spawns::Only(split_csv(s))
        }
    }
}

/// (De)serialises a [`Spawns`] as its wire form (`*`, empty or CSV), as the API, the stored
/// spec and a runtime's document carry it: `#[serde(with = "crate::persona::policy_text")]`.
pub mod policy_text {
    use super::Spawns;

    /// Writes the policy's text.
    pub fn serialize<S: serde::Serializer>(p: &Spawns, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&p.to_policy_string())
    }

    /// Reads the policy from its text.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Spawns, D::Error> {
        let text: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
        Ok(Spawns::parse_policy(&text))
    }
}

/// Splits a CSV value: split on `,`, trim, drop empties.
pub fn split_csv(s: &str) -> Vec<String> {
    // Commas inside parentheses belong to the entry: `Agent(explore, plan)` and
    // `Bash(git diff:*, git log:*)` are one entry each (docs/personas.md §2.3).
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    let mut push = |piece: &str| {
        let piece = piece.trim();
        if !piece.is_empty() {
            out.push(piece.to_owned());
        }
    };
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    push(&s[start..]);
    out
}

/// The spawn rights a tool-list entry grants in the Claude Code syntax: bare `Agent` / `Task`
/// any agent, `Agent(a, b)` / `Task(a, b)` exactly those; `None` for every other entry.
pub fn spawn_entry(entry: &str) -> Option<Spawns> {
    let e = entry.trim();
    if e == "Agent" || e == "Task" {
        return Some(Spawns::Any);
    }
    let inner = e
        .strip_prefix("Agent(")
        .or_else(|| e.strip_prefix("Task("))?
        .strip_suffix(')')?;
    let names = split_csv(inner);
    if names.is_empty() || names.iter().any(|n| n == "*") {
        return Some(Spawns::Any);
    }
    Some(Spawns::Only(names))
}

/// The `permissionMode` values the dialects write (Claude Code's, and agentry's `read-only`);
/// another value is passed through with an `unknown_permission_mode` warning.
pub const PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "auto",
    "dontAsk",
    "bypassPermissions",
    "plan",
    "manual",
    "read-only",
];

/// A persona's `permissionMode` (docs/personas.md §2.7), typed from parsing to the edge: one of
/// [`PERMISSION_MODES`], or any other value passed through as written (with an
/// `unknown_permission_mode` warning at parse). It travels as its text (stored specs, the exec
/// document, the API), so a value reads back exactly as it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(from = "String", into = "String")]
pub enum PermissionMode {
    /// `default`.
    Default,
    /// `acceptEdits`.
    AcceptEdits,
    /// `auto`.
    Auto,
    /// `dontAsk`.
    DontAsk,
    /// `bypassPermissions`.
    BypassPermissions,
    /// `plan`: the worker runs in plan mode.
    Plan,
    /// `manual`.
    Manual,
    /// `read-only` (agentry's): only read-only tools.
    ReadOnly,
    /// Anything else, as written.
    Other(String),
}

impl PermissionMode {
    /// The mode `s` names (never fails: an unknown one is [`PermissionMode::Other`]).
    pub fn parse(s: &str) -> Self {
        match s {
            "default" => Self::Default,
            "acceptEdits" => Self::AcceptEdits,
            "auto" => Self::Auto,
            "dontAsk" => Self::DontAsk,
            "bypassPermissions" => Self::BypassPermissions,
            "plan" => Self::Plan,
            "manual" => Self::Manual,
            "read-only" => Self::ReadOnly,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The text, as written.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "acceptEdits",
            Self::Auto => "auto",
            Self::DontAsk => "dontAsk",
            Self::BypassPermissions => "bypassPermissions",
            Self::Plan => "plan",
            Self::Manual => "manual",
            Self::ReadOnly => "read-only",
            Self::Other(s) => s,
        }
    }

    /// Whether the value is one the dialects write.
    pub fn is_known(&self) -> bool {
        !matches!(self, Self::Other(_))
    }

    /// Whether a worker of this mode is offered only read-only tools: `read-only` (also
    /// spelled `readonly`) and `plan` (docs/model.md §11.4).
    pub fn is_read_only(&self) -> bool {
        match self {
            Self::ReadOnly | Self::Plan => true,
            Self::Other(s) => s == "readonly",
            _ => false,
        }
    }
}

impl From<String> for PermissionMode {
    fn from(s: String) -> Self {
        Self::parse(&s)
    }
}

impl From<PermissionMode> for String {
    fn from(m: PermissionMode) -> Self {
        match m {
            PermissionMode::Other(s) => s,
            known => known.as_str().to_owned(),
        }
    }
}

/// Frontmatter fields agentry does not honour although they change what a worker may do: each
/// is an `unsupported_field` warning naming the file, line and field, never silence
/// (docs/personas.md §2.7).
pub const UNSUPPORTED_FIELDS: &[&str] = &["hooks", "sandbox_mode", "approval_policy"];

/// One parsed persona (docs §2.3). Absent optional fields stay `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Persona {
    /// Exact, case-sensitive identity.
    pub name: String,
    /// What the agent is for.
    pub description: String,
    /// The body: the system prompt.
    pub system_prompt: String,
    /// Dispatch guidance; its first line goes into the catalog.
    pub when_to_use: Option<String>,
    /// Tool allow-list with implicit tools appended; `None` = inherits all tools.
    pub tools: Option<Vec<String>>,
    /// Tools removed after `tools`.
    pub disallowed_tools: Option<Vec<String>>,
    /// Who this agent may spawn; `None` = nobody.
    pub spawns: Option<Spawns>,
    /// Ordered model names or patterns.
    pub model: Option<Vec<String>>,
    /// Reasoning effort.
    pub thinking_level: Option<ThinkingLevel>,
    /// Opaque output schema.
    pub output: Option<serde_json::Value>,
    /// Passed through, typed.
    pub permission_mode: Option<PermissionMode>,
    /// Positive turn budget.
    pub max_turns: Option<u32>,
    /// Wrapped into `<critical-reminder>` in the composed prompt.
    pub critical_reminder: Option<String>,
    /// Gemini CLI sampling temperature (0–2), passed through.
    pub temperature: Option<f64>,
    /// Gemini CLI `timeout_mins`: the agent's own run timeout, in minutes (a worker gets the
    /// smallest of the request's, this one and `executor.timeout`).
    pub timeout_mins: Option<u32>,
    /// Gemini CLI `kind: remote`: an A2A agent. Listed and resolvable, but not spawnable until
    /// an A2A executor exists.
    pub remote: bool,
    /// Claude Code `memory`: `user`, `project` or `local`, the scope of the agent's memory
    /// directory (docs/personas.md §2.7).
    pub memory: Option<String>,
    /// Claude Code `skills`: names of skills whose bodies are composed into the prompt after
    /// the persona body, in this order (docs/personas.md §2.8).
    pub skills: Vec<String>,
    /// Line of the `skills` key, for diagnostics about the skills it names.
    #[serde(skip)]
    pub skills_line: Option<u32>,
    /// `mcpServers`: the MCP servers a worker of this agent gets, named or defined here
    /// (docs/personas.md §2.9); `None` when the file does not say.
    pub mcp_servers: Option<Vec<mcp::McpRef>>,
    /// Line of the `mcp_servers` key.
    #[serde(skip)]
    pub mcp_servers_line: Option<u32>,
    /// Claude Code `background: true`: the agent is meant to run in the background; surfaced
    /// for the coordinator (`Agent.background`), which decides how it waits.
    pub background: bool,
    /// Claude Code `isolation`: `Some(true)` for `worktree` (a git worktree per worker,
    /// docs/workers.md §6.10), `Some(false)` for `none`.
    pub worktree: Option<bool>,
    /// Markdown or TOML, so a reader knows which rules produced the fields.
    pub format: Format,
    /// Every key agentry does not know, verbatim, so nothing a file says is lost.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Persona {
    /// A persona of `format` with every field empty: what a reader fills in.
    pub(crate) fn empty(format: Format) -> Self {
        Persona {
            name: String::new(),
            description: String::new(),
            system_prompt: String::new(),
            when_to_use: None,
            tools: None,
            disallowed_tools: None,
            spawns: None,
            model: None,
            thinking_level: None,
            output: None,
            permission_mode: None,
            max_turns: None,
            critical_reminder: None,
            temperature: None,
            timeout_mins: None,
            remote: false,
            worktree: None,
            background: false,
            memory: None,
            skills: Vec::new(),
            skills_line: None,
            mcp_servers: None,
            mcp_servers_line: None,
            format,
            extra: serde_json::Map::new(),
        }
    }
}

/// The result of parsing one file: maybe a persona, always the diagnostics found on the way.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// `None` when an error diagnostic made the file unusable.
    pub persona: Option<Persona>,
    /// Warnings (file loaded) and errors (file skipped).
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses a markdown persona's bytes; `comments` says whether its family's HTML comments are
/// removed (docs §2.1). `path` only labels diagnostics. Never panics on any input.
pub fn parse(bytes: &[u8], path: &str, opts: &ParseOptions, comments: Comments) -> Parsed {
    let mut diags = Vec::new();
    let persona = decode(bytes, path, &mut diags)
        .and_then(|t| parse_text(t, path, opts, comments, &mut diags));
    Parsed {
        persona,
        diagnostics: diags,
    }
}

/// A skill file's parts (docs/personas.md §2.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillText {
    /// Its frontmatter's `description` (empty when absent).
    pub description: String,
    /// The instructions: the body after the frontmatter, or the whole text without one.
    pub body: String,
}

/// Parses a `SKILL.md`: an optional frontmatter (its `description` is kept; the rest is the
/// skill tool's business), then the body. An error says why the file cannot be used.
pub fn parse_skill(bytes: &[u8], comments: Comments) -> Result<SkillText, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        )
    })?;
    let doc = split::split(text, comments);
    let description = match doc.front {
        split::Front::None => String::new(),
        split::Front::Unclosed { open_line } => {
            return Err(format!(
                "the frontmatter opened on line {open_line} is never closed with `---`"
            ));
        }
        split::Front::Block(block) => {
            let yaml = block.text.replace('\t', "  ");
            match serde_yaml::from_str::<serde_yaml::Value>(&yaml) {
                Ok(v) => v
                    .get("description")
                    .and_then(serde_yaml::Value::as_str)
                    .map(|d| d.trim().to_owned())
                    .unwrap_or_default(),
                // Only the description is read from it: a frontmatter YAML cannot read is no
                // reason to lose the instructions.
                Err(_) => String::new(),
            }
        }
    };
    if doc.body.is_empty() {
        return Err("the skill has no instructions (its body is empty)".to_owned());
    }
    Ok(SkillText {
        description,
        body: doc.body,
    })
}

/// Parses a Codex TOML agent's bytes (docs §2.5). `path` only labels diagnostics. Never panics
/// on any input.
pub fn parse_toml(bytes: &[u8], path: &str) -> Parsed {
    let mut diags = Vec::new();
    let persona = decode(bytes, path, &mut diags).and_then(|t| codex::read(t, path, &mut diags));
    Parsed {
        persona,
        diagnostics: diags,
    }
}

/// The text of a file: UTF-8 (else a `not_utf8` error naming the line of the first bad byte).
fn decode<'a>(bytes: &'a [u8], path: &str, diags: &mut Vec<Diagnostic>) -> Option<&'a str> {
    match std::str::from_utf8(bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            diags.push(Diagnostic {
                path: path.to_owned(),
                line: Some(line_of_offset(bytes, e.valid_up_to())),
                severity: Severity::Error,
                code: "not_utf8",
                message: format!(
                    "file is not valid UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ),
            });
            None
        }
    }
}

fn line_of_offset(bytes: &[u8], offset: usize) -> u32 {
    let n = bytes[..offset.min(bytes.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    u32::try_from(n + 1).unwrap_or(u32::MAX)
}

fn parse_text(
    text: &str,
    path: &str,
    opts: &ParseOptions,
    comments: Comments,
    diags: &mut Vec<Diagnostic>,
) -> Option<Persona> {
    let doc = split::split(text, comments);
    let mut diag = |line: Option<u32>, severity, code, message: String| {
        diags.push(Diagnostic {
            path: path.to_owned(),
            line,
            severity,
            code,
            message,
        });
    };
    let front = match doc.front {
        split::Front::None => {
            diag(
                Some(1),
                Severity::Error,
                "missing_name",
                "no frontmatter: the first non-blank line is not `---`, so `name` and \
                 `description` are missing"
                    .to_owned(),
            );
            return None;
        }
        split::Front::Unclosed { open_line } => {
            diag(
                Some(open_line),
                Severity::Error,
                "unclosed_frontmatter",
                format!("frontmatter opened on line {open_line} is never closed by a `---` line"),
            );
            return None;
        }
        split::Front::Block(b) => b,
    };
    fields::read(&front, doc.body, opts, &mut diag)
}

#[cfg(test)]
mod tests;
