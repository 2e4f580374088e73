//! A persona's own MCP servers (`mcpServers`, docs/personas.md §2.9), as Claude Code writes
//! them — a list whose items are the name of a configured server or a one-key map
//! `{name: definition}` — and as Gemini CLI writes them — a map `{name: definition}`. A
//! definition is a stdio program (`command` and `args`, `env`, `cwd`) or a streamable-HTTP
//! endpoint (`url`, Gemini's `httpUrl`, `headers`). Pure parsing: which of them a worker gets,
//! and whether an inline one may start, is decided by discovery and the model executor.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_yaml::Value as Yaml;

/// One server a persona names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpRef {
    /// A server of the configuration (`mcp_servers.<name>`).
    Named(String),
    /// A server defined in the persona file, started for each worker of it.
    Inline(InlineMcp),
}

impl McpRef {
    /// The server's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Named(n) => n,
            Self::Inline(i) => &i.name,
        }
    }
}

/// A server defined in a persona file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineMcp {
    /// Its name (the key it was given under).
    pub name: String,
    /// argv of a stdio server: `command` then `args`.
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

/// Whether `name` can name an MCP server: letters, digits, `-` and `_` (Codex names servers
/// `chrome_devtools`), but no `__`, nor `_` first or last: a server's name is the middle of its
/// tools' names `mcp__<server>__<tool>`, where `__` separates.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

/// What a bad server name is told.
pub const SERVER_NAME_RULE: &str = "letters, digits, - and _ (no __, and no _ first or last: __ separates the parts of a tool name)";

fn check_name(name: &str) -> Result<(), String> {
    if !valid_server_name(name) {
        return Err(format!("server name {name:?} must be {SERVER_NAME_RULE}"));
    }
    Ok(())
}

/// Reads the field: the servers it names, and a message for each entry that is skipped.
pub(super) fn read(value: &Yaml) -> (Vec<McpRef>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut add = |r: Result<McpRef, String>, out: &mut Vec<McpRef>| match r {
        Ok(r) if out.iter().any(|o: &McpRef| o.name() == r.name()) => {
            problems.push(format!(
                "server {:?} is named twice; the first is kept",
                r.name()
            ));
        }
        Ok(r) => out.push(r),
        Err(why) => problems.push(why),
    };
    match value {
        Yaml::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                let r = match item {
                    Yaml::String(name) => {
                        let name = name.trim();
                        check_name(name).map(|()| McpRef::Named(name.to_owned()))
                    }
                    Yaml::Mapping(m) if m.len() == 1 => {
                        let (k, v) = m.iter().next().expect("one entry");
                        inline(k, v)
                    }
                    _ => Err(format!(
                        "entry {i} must be a server name or a one-key map {{name: definition}}"
                    )),
                };
                add(r, &mut out);
            }
        }
        Yaml::Mapping(m) => {
            for (k, v) in m {
                add(inline(k, v), &mut out);
            }
        }
        Yaml::String(s) => {
            for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                add(
                    check_name(name).map(|()| McpRef::Named(name.to_owned())),
                    &mut out,
                );
            }
        }
        Yaml::Null => {}
        _ => problems.push(
            "must be a list of server names or definitions, or a map of definitions".to_owned(),
        ),
    }
    (out, problems)
}

fn inline(key: &Yaml, def: &Yaml) -> Result<McpRef, String> {
    let Yaml::String(name) = key else {
        return Err("a server name must be a string".to_owned());
    };
    check_name(name)?;
    let Yaml::Mapping(def) = def else {
        return Err(format!("server {name:?}: its definition must be a map"));
    };
    let text = |k: &str| -> Result<Option<String>, String> {
        match def.get(k) {
            None | Some(Yaml::Null) => Ok(None),
            Some(Yaml::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("server {name:?}: `{k}` must be a string")),
        }
    };
    let map = |k: &str| -> Result<BTreeMap<String, String>, String> {
        match def.get(k) {
            None | Some(Yaml::Null) => Ok(BTreeMap::new()),
            Some(Yaml::Mapping(m)) => m
                .iter()
                .map(|(k2, v)| match (k2, v) {
                    (Yaml::String(a), Yaml::String(b)) => Ok((a.clone(), b.clone())),
                    (Yaml::String(a), Yaml::Number(n)) => Ok((a.clone(), n.to_string())),
                    (Yaml::String(a), Yaml::Bool(b)) => Ok((a.clone(), b.to_string())),
                    _ => Err(format!("server {name:?}: `{k}` must map names to strings")),
                })
                .collect(),
            Some(_) => Err(format!("server {name:?}: `{k}` must be a map")),
        }
    };
    let mut command = Vec::new();
    if let Some(c) = text("command")? {
        command.push(c);
        match def.get("args") {
            None | Some(Yaml::Null) => {}
            Some(Yaml::Sequence(args)) => {
                for a in args {
                    match a {
                        Yaml::String(s) => command.push(s.clone()),
                        Yaml::Number(n) => command.push(n.to_string()),
                        _ => return Err(format!("server {name:?}: `args` must be strings")),
                    }
                }
            }
            Some(_) => return Err(format!("server {name:?}: `args` must be a list")),
        }
    }
    let url = match (text("url")?, text("httpUrl")?) {
        (Some(u), None) | (None, Some(u)) => Some(u),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(format!(
                "server {name:?}: give `url` or `httpUrl`, not both"
            ));
        }
    };
    match text("type")?.as_deref() {
        None | Some("stdio" | "http" | "streamable-http" | "streamableHttp") => {}
        Some(other) => {
            return Err(format!(
                "server {name:?}: transport {other:?} is not supported (stdio or streamable HTTP)"
            ));
        }
    }
    match (command.is_empty(), &url) {
        (true, None) => {
            return Err(format!(
                "server {name:?} needs `command` (stdio) or `url` (streamable HTTP)"
            ));
        }
        (false, Some(_)) => {
            return Err(format!(
                "server {name:?}: give `command` or `url`, not both"
            ));
        }
        (true, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
            return Err(format!(
                "server {name:?}: `url` must be an http:// or https:// URL"
            ));
        }
        _ => {}
    }
    Ok(McpRef::Inline(InlineMcp {
        name: name.clone(),
        command,
        env: map("env")?,
        cwd: text("cwd")?,
        url,
        // Codex writes `http_headers`.
        headers: match map("headers")? {
            h if h.is_empty() => map("http_headers")?,
            h => h,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn y(s: &str) -> Yaml {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn claude_lists_gemini_maps_and_their_mistakes() {
        let (r, p) = read(&y(
            "- github\n- local:\n    command: npx\n    args: [-y, server, 3]\n    env: {A: b}\n- web: {type: http, url: 'http://h/mcp', headers: {X: y}}",
        ));
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(r[0], McpRef::Named("github".into()));
        let McpRef::Inline(local) = &r[1] else {
            panic!()
        };
        assert_eq!(local.command, ["npx", "-y", "server", "3"]);
        assert_eq!(local.env["A"], "b");
        let McpRef::Inline(web) = &r[2] else { panic!() };
        assert_eq!(web.url.as_deref(), Some("http://h/mcp"));
        assert_eq!(web.headers["X"], "y");

        let (r, p) = read(&y("files: {command: srv}\nremote: {httpUrl: 'https://x'}"));
        assert!(p.is_empty());
        assert_eq!(r.len(), 2);

        let (r, p) = read(&y(
            "- a b\n- x: {command: c, url: 'http://u'}\n- s: {type: sse, url: 'http://u'}\n- n: {}\n- ok\n- ok\n- 3",
        ));
        assert_eq!(r, [McpRef::Named("ok".into())]);
        assert_eq!(p.len(), 6, "{p:?}");
        assert!(p[2].contains("transport \"sse\" is not supported"), "{p:?}");
        assert!(read(&y("github, time")).0.len() == 2);
        assert!(!read(&y("3")).1.is_empty());
    }
}
