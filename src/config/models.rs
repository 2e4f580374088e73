//! The model executor's keys (docs/model.md §11): `models` (providers, the default model,
//! aliases), `model` (the loop's bounds) and `mcp_servers`, and the implicit OpenAI provider
//! that `OPENAI_API_KEY` turns on when no executor is configured (§11.1).

use std::{collections::BTreeMap, time::Duration};

use serde::Deserialize;

/// The public OpenAI API, the base URL of the implicit provider without `OPENAI_BASE_URL`.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The implicit provider's default model without `OPENAI_MODEL`.
pub const OPENAI_MODEL: &str = "gpt-4.1-mini";

/// One OpenAI-compatible endpoint.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// The name model references use: `<name>/<model>`.
    pub name: String,
    /// The API root; `/chat/completions` is appended.
    pub base_url: String,
    /// The variable holding the API key, read at each request; none sends no `Authorization`.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Headers sent on every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `models`: where model names point.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelsConfig {
    /// Model of a persona that names none: `provider/model` or an alias.
    pub default: Option<String>,
    /// The endpoints.
    pub providers: Vec<Provider>,
    /// Persona model names (`sonnet`, `haiku`, …) → `provider/model`.
    pub aliases: BTreeMap<String, String>,
}

impl ModelsConfig {
    /// The provider called `name`.
    pub fn provider(&self, name: &str) -> Option<&Provider> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// `reference` as `(provider, model)`: an alias's target, or `provider/model` with a
    /// configured provider; `None` when it is neither.
    pub fn resolve(&self, reference: &str) -> Option<(&Provider, String)> {
        let target = self
            .aliases
            .get(reference)
            .map_or(reference, String::as_str);
        let (provider, model) = target.split_once('/')?;
        if model.is_empty() {
            return None;
        }
        Some((self.provider(provider)?, model.to_owned()))
    }
}

/// `model`: bounds of the agent loop.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelLoop {
    /// Turns of a persona without `max_turns`. Default 50.
    pub max_turns: u32,
    /// Invalid results handed back to the model before the worker fails. Default 2.
    pub output_retries: u32,
    /// Silence allowed before and between streamed chunks. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Bound on one MCP tool call. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub tool_timeout: Duration,
    /// Retries of a 429, a 5xx or a failed connection. Default 4.
    pub max_retries: u32,
    /// The longest wait between two attempts, a server's `Retry-After` included. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Bytes of one answer body read from the endpoint (an event stream or a JSON answer);
    /// past it the worker fails and nothing more is read. Default 16 MiB.
    pub max_response_bytes: usize,
    /// Bytes of one streamed event (one `data:` payload, or one line while it is read).
    /// Default 1 MiB.
    pub max_event_bytes: usize,
    /// Bytes of text and tool-call arguments of one answer. Default 1 MiB.
    pub max_answer_bytes: usize,
    /// Bytes of an error answer's body read for its message; the rest is not read. Default
    /// 64 KiB.
    pub max_error_bytes: usize,
    /// Tool calls of one answer (and so the largest `index` a call may have). Default 64.
    pub max_tool_calls: usize,
    /// Bytes of a tool's result handed to the model; a longer one is cut, with a note saying
    /// so. Default 128 KiB.
    pub max_tool_result_bytes: usize,
    /// Bytes of one message from an MCP server (a stdio line); a larger one ends that server's
    /// connection and fails its call at once. Default 8 MiB.
    pub max_mcp_message_bytes: usize,
}

impl Default for ModelLoop {
    fn default() -> Self {
        Self {
            max_turns: 50,
            output_retries: 2,
            idle_timeout: Duration::from_secs(60),
            tool_timeout: Duration::from_secs(60),
            max_retries: 4,
            max_backoff: Duration::from_secs(30),
            max_response_bytes: 16 << 20,
            max_event_bytes: 1 << 20,
            max_answer_bytes: 1 << 20,
            max_error_bytes: 64 << 10,
            max_tool_calls: 64,
            max_tool_result_bytes: 128 << 10,
            max_mcp_message_bytes: 8 << 20,
        }
    }
}

/// One `mcp_servers` entry: a stdio program or a streamable-HTTP endpoint.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct McpServer {
    /// argv of a stdio server (never through a shell).
    pub command: Vec<String>,
    /// Extra environment of a stdio server.
    pub env: BTreeMap<String, String>,
    /// Working directory of a stdio server.
    pub cwd: Option<String>,
    /// URL of a streamable-HTTP server.
    pub url: Option<String>,
    /// Headers sent to a streamable-HTTP server.
    pub headers: BTreeMap<String, String>,
}

/// Why a model key is refused: the key path and the reason.
pub(super) type Refusal = (String, String);

/// Checks the model keys once the file is read.
pub(super) fn validate(
    models: &ModelsConfig,
    looping: &ModelLoop,
    servers: &BTreeMap<String, McpServer>,
) -> Result<(), Refusal> {
    let refuse = |key: String, why: &str| Err((key, why.to_owned()));
    for (i, p) in models.providers.iter().enumerate() {
        if p.name.is_empty() || p.name.contains('/') {
            return refuse(
                format!("models.providers[{i}].name"),
                "must be a non-empty name without /",
            );
        }
        if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
            return refuse(
                format!("models.providers[{i}].base_url"),
                "must be an http:// or https:// URL",
            );
        }
        if models.providers[..i].iter().any(|q| q.name == p.name) {
            return refuse(format!("models.providers[{i}].name"), "is given twice");
        }
    }
    for (alias, target) in &models.aliases {
        if models.aliases.contains_key(target) || models.resolve(target).is_none() {
            return Err((
                format!("models.aliases.{alias}"),
                format!("{target} is not provider/model with a configured provider"),
            ));
        }
    }
    if let Some(default) = &models.default
        && models.resolve(default).is_none()
    {
        return Err((
            "models.default".to_owned(),
            format!("{default} is neither an alias nor provider/model with a configured provider"),
        ));
    }
    if looping.max_turns == 0 {
        return refuse("model.max_turns".to_owned(), "must be positive");
    }
    for (key, d) in [
        ("model.idle_timeout", looping.idle_timeout),
        ("model.tool_timeout", looping.tool_timeout),
        ("model.max_backoff", looping.max_backoff),
    ] {
        if d.is_zero() {
            return refuse(key.to_owned(), "must be positive");
        }
    }
    for (key, n) in [
        ("model.max_response_bytes", looping.max_response_bytes),
        ("model.max_event_bytes", looping.max_event_bytes),
        ("model.max_answer_bytes", looping.max_answer_bytes),
        ("model.max_error_bytes", looping.max_error_bytes),
        ("model.max_tool_calls", looping.max_tool_calls),
        ("model.max_tool_result_bytes", looping.max_tool_result_bytes),
        ("model.max_mcp_message_bytes", looping.max_mcp_message_bytes),
    ] {
        if n == 0 {
            return refuse(key.to_owned(), "must be positive");
        }
    }
    for (name, s) in servers {
        let key = format!("mcp_servers.{name}");
        if !crate::persona::mcp::valid_server_name(name) {
            return refuse(
                key,
                &format!("a server name is {}", crate::persona::mcp::SERVER_NAME_RULE),
            );
        }
        match (s.command.is_empty(), &s.url) {
            (true, None) => return refuse(key, "needs command (stdio) or url (streamable HTTP)"),
            (false, Some(_)) => return refuse(key, "give command or url, not both"),
            (true, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return refuse(format!("{key}.url"), "must be an http:// or https:// URL");
            }
            _ => {}
        }
    }
    Ok(())
}
