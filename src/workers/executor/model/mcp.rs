//! MCP servers of one worker (docs/model.md §11.6), through the official Rust SDK (`rmcp`): a
//! stdio program in its own process group, or a streamable-HTTP endpoint. Behind the small
//! [`McpSession`] trait, so the loop never sees a transport; a call dropped midway (a stop, the
//! tool timeout) sends the MCP `notifications/cancelled` (rmcp does so for an abandoned request).

use std::{collections::BTreeMap, process::Stdio, sync::Arc, time::Duration};

use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, ContentBlock},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;

use crate::config::McpServer;

/// How long a server may take to start and list its tools.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One tool of one server, as the worker may be offered it.
#[derive(Debug, Clone)]
pub struct McpTool {
    /// The server's name in `mcp_servers`.
    pub server: String,
    /// The tool's own name on the server.
    pub name: String,
    /// What the model is told it does.
    pub description: String,
    /// Its JSON Schema for the arguments.
    pub input_schema: Value,
    /// `readOnlyHint: true` or `destructiveHint: false`.
    pub read_only: bool,
    /// `destructiveHint` true or absent (unannotated tools are destructive).
    pub destructive: bool,
}

impl McpTool {
    /// The name the model sees: `mcp__<server>__<tool>`.
    pub fn offered_name(&self) -> String {
        format!("mcp__{}__{}", self.server, self.name)
    }
}

/// What a tool call answered: its text, and whether the tool said it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// The text content (other content kinds are named, not inlined).
    pub text: String,
    /// `isError` of the result.
    pub is_error: bool,
}

/// A started server.
#[async_trait::async_trait]
pub trait McpSession: Send + Sync {
    /// Calls `tool` with `arguments`; `Err` is a transport or protocol failure.
    async fn call(&self, tool: &str, arguments: Option<Value>) -> Result<CallResult, String>;
    /// Stops the server (its process group, or its HTTP session).
    async fn close(&self);
}

/// Expands `${workspace}` and `${env:NAME}` in one configured value.
pub fn expand(value: &str, workspace: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = value.replace("${workspace}", workspace);
    while let Some(start) = out.find("${env:") {
        let Some(len) = out[start..].find('}') else {
            break;
        };
        let name = out[start + 6..start + len].to_owned();
        out.replace_range(start..=start + len, &env(&name).unwrap_or_default());
    }
    out
}

/// Starts server `name` for a worker in `workspace` and lists its tools.
pub async fn start(
    name: &str,
    server: &McpServer,
    workspace: &str,
) -> Result<(Arc<dyn McpSession>, Vec<McpTool>), String> {
    let env = |n: &str| std::env::var(n).ok();
    let started = tokio::time::timeout(START_TIMEOUT, async {
        match &server.url {
            Some(url) => {
                start_http(&expand(url, workspace, &env), &server.headers, workspace).await
            }
            None => start_stdio(server, workspace).await,
        }
    })
    .await
    .map_err(|_| {
        format!(
            "MCP server {name}: not ready within {}s",
            START_TIMEOUT.as_secs()
        )
    })?
    .map_err(|e| format!("MCP server {name}: {e}"))?;
    let session = started;
    let tools = match session.service.list_all_tools().await {
        Ok(t) => t,
        Err(e) => {
            session.close().await;
            return Err(format!("MCP server {name}: cannot list its tools: {e}"));
        }
    };
    let tools = tools
        .into_iter()
        .map(|t| {
            let a = t.annotations.as_ref();
            let read_only = a.is_some_and(|a| {
                a.read_only_hint == Some(true) || a.destructive_hint == Some(false)
            });
            McpTool {
                server: name.to_owned(),
                name: t.name.to_string(),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
                read_only,
                destructive: a.is_none_or(|a| a.destructive_hint != Some(false)) && !read_only
                    || a.is_some_and(|a| a.destructive_hint == Some(true)),
            }
        })
        .collect();
    Ok((Arc::new(session), tools))
}

/// A running rmcp client and, for stdio, the server's process group.
struct Session {
    service: RunningService<RoleClient, ()>,
    group: Option<i32>,
}

async fn start_stdio(server: &McpServer, workspace: &str) -> Result<Session, String> {
    let env = |n: &str| std::env::var(n).ok();
    let argv: Vec<String> = server
        .command
        .iter()
        .map(|a| expand(a, workspace, &env))
        .collect();
    let (program, args) = argv.split_first().ok_or("empty command")?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(
            server
                .env
                .iter()
                .map(|(k, v)| (k, expand(v, workspace, &env))),
        )
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &server.cwd {
        cmd.current_dir(expand(cwd, workspace, &env));
    } else if !workspace.is_empty() {
        cmd.current_dir(workspace);
    }
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let group = transport.id().and_then(|p| i32::try_from(p).ok());
    if let Some(stderr) = stderr {
        let program = program.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = %program, "{line}");
            }
        });
    }
    match ().serve(transport).await {
        Ok(service) => Ok(Session { service, group }),
        Err(e) => {
            kill_group(group);
            Err(format!("{program} did not complete the MCP handshake: {e}"))
        }
    }
}

async fn start_http(
    url: &str,
    headers: &BTreeMap<String, String>,
    workspace: &str,
) -> Result<Session, String> {
    let env = |n: &str| std::env::var(n).ok();
    let mut map = std::collections::HashMap::new();
    for (k, v) in headers {
        let name = reqwest::header::HeaderName::try_from(k.as_str())
            .map_err(|e| format!("header {k}: {e}"))?;
        let value = reqwest::header::HeaderValue::try_from(expand(v, workspace, &env))
            .map_err(|e| format!("header {k}: {e}"))?;
        map.insert(name, value);
    }
    let cfg = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(map);
    let transport = StreamableHttpClientTransport::from_config(cfg);
    let service = ().serve(transport).await.map_err(|e| format!("{url}: {e}"))?;
    Ok(Session {
        service,
        group: None,
    })
}

fn kill_group(group: Option<i32>) {
    if let Some(pgid) = group.filter(|p| *p > 1) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[async_trait::async_trait]
impl McpSession for Session {
    async fn call(&self, tool: &str, arguments: Option<Value>) -> Result<CallResult, String> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        match arguments {
            Some(Value::Object(map)) => params = params.with_arguments(map),
            None | Some(Value::Null) => {}
            Some(other) => return Err(format!("the arguments must be a JSON object, got {other}")),
        }
        let r = self
            .service
            .call_tool(params)
            .await
            .map_err(|e| e.to_string())?;
        let mut parts: Vec<String> = r
            .content
            .iter()
            .map(|c| match c {
                ContentBlock::Text(t) => t.text.clone(),
                ContentBlock::Image(_) => "[image]".to_owned(),
                ContentBlock::Audio(_) => "[audio]".to_owned(),
                _ => "[resource]".to_owned(),
            })
            .collect();
        if parts.is_empty()
            && let Some(v) = &r.structured_content
        {
            parts.push(v.to_string());
        }
        Ok(CallResult {
            text: parts.join("\n"),
            is_error: r.is_error == Some(true),
        })
    }

    async fn close(&self) {
        // The group first: a stdio server (and whatever it started, `npx` → `node`) is gone at
        // once; the client's own shutdown then finds a closed pipe.
        kill_group(self.group);
        self.service.cancellation_token().cancel();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        kill_group(self.group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand() {
        let env = |n: &str| (n == "TOKEN").then(|| "t0k".to_owned());
        assert_eq!(expand("${workspace}/x", "/w", &env), "/w/x");
        assert_eq!(expand("Bearer ${env:TOKEN}", "", &env), "Bearer t0k");
        assert_eq!(expand("${env:NOPE}-", "", &env), "-");
        assert_eq!(expand("${env:open", "", &env), "${env:open");
    }
}
