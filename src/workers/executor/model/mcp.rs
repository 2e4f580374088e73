//! MCP servers of one worker (docs/model.md §11.6), through the official Rust SDK (`rmcp`): a
//! stdio program in its own process group, or a streamable-HTTP endpoint. Behind the small
//! [`McpSession`] trait, so the loop never sees a transport; a call dropped midway (a stop, the
//! tool timeout) sends the MCP `notifications/cancelled` (rmcp does so for an abandoned request).

use std::{
    collections::BTreeMap,
    pin::Pin,
    process::Stdio,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
    time::Duration,
};

use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, ContentBlock},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, async_rw::AsyncRwTransport,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

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
    /// `readOnlyHint: true` from a trusted server.
    pub read_only: bool,
    /// Not read-only and not `destructiveHint: false` from a trusted server (unannotated tools,
    /// and every tool of an untrusted server, are destructive).
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

/// Starts server `name` for a worker in `workspace` and lists its tools. `max_message` bounds
/// one message from the server (`model.max_mcp_message_bytes`). `trusted` says whether its tool
/// annotations are believed: only for the operator's configured servers, never for a server a
/// persona file defines inline (its tools are then treated as destructive).
pub async fn start(
    name: &str,
    server: &McpServer,
    workspace: &str,
    max_message: usize,
    trusted: bool,
) -> Result<(Arc<dyn McpSession>, Vec<McpTool>), String> {
    let env = |n: &str| std::env::var(n).ok();
    let started = tokio::time::timeout(START_TIMEOUT, async {
        match &server.url {
            Some(url) => {
                start_http(
                    &expand(url, workspace, &env),
                    &server.headers,
                    workspace,
                    max_message,
                )
                .await
            }
            None => start_stdio(server, workspace, max_message).await,
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
            let e = session.failure(e.to_string());
            session.close().await;
            return Err(format!("MCP server {name}: cannot list its tools: {e}"));
        }
    };
    let tools = tools
        .into_iter()
        .map(|t| {
            let (read_only, destructive) = if trusted {
                classify(t.annotations.as_ref())
            } else {
                (false, true)
            };
            McpTool {
                server: name.to_owned(),
                name: t.name.to_string(),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
                read_only,
                destructive,
            }
        })
        .collect();
    Ok((Arc::new(session), tools))
}

/// `(read_only, destructive)` from a tool's annotations, as the MCP specification defines them:
/// read-only is `readOnlyHint: true` and nothing else; a tool that is not read-only is
/// destructive unless it says `destructiveHint: false` (its writes are only additive). No
/// annotations: a destructive write.
fn classify(a: Option<&rmcp::model::ToolAnnotations>) -> (bool, bool) {
    let read_only = a.is_some_and(|a| a.read_only_hint == Some(true));
    let destructive = !read_only && a.is_none_or(|a| a.destructive_hint != Some(false));
    (read_only, destructive)
}

/// A running rmcp client and, for stdio, the server's process group.
struct Session {
    service: RunningService<RoleClient, ()>,
    group: Option<i32>,
    /// The stdio server's process, killed when the session goes.
    _child: Option<tokio::process::Child>,
    /// Why the connection was cut by agentry (a message over its bound), once it was.
    cut: Arc<OnceLock<String>>,
}

impl Session {
    /// The text of a failed request: why agentry cut the connection, when it did (rmcp only
    /// sees a closed transport), else rmcp's own error.
    fn failure(&self, error: String) -> String {
        self.cut.get().cloned().unwrap_or(error)
    }
}

/// The server's stdout, failing the read of any line longer than `max` bytes: the MCP client
/// then sees its transport close, and a call waiting on it fails at once instead of waiting
/// for an answer that was dropped (rmcp drops an over-long line and reads on).
struct BoundedLines<R> {
    inner: R,
    line: usize,
    max: usize,
    cut: Arc<OnceLock<String>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(why) = self.cut.get() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                why.clone(),
            )));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                // The longest line in what was read, counting on from the line already open.
                let new = &buf.filled()[before..];
                let (mut line, mut longest, mut start) = (this.line, 0, 0);
                for nl in memchr::memchr_iter(b'\n', new) {
                    longest = longest.max(line + nl - start);
                    (line, start) = (0, nl + 1);
                }
                this.line = line + new.len() - start;
                longest = longest.max(this.line);
                if longest > this.max {
                    let why = format!(
                        "the server sent a message over {} bytes (model.max_mcp_message_bytes); its connection was closed",
                        this.max
                    );
                    let _ = this.cut.set(why.clone());
                    buf.set_filled(before);
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        why,
                    )));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

async fn start_stdio(
    server: &McpServer,
    workspace: &str,
    max_message: usize,
) -> Result<Session, String> {
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
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let group = child.id().and_then(|p| i32::try_from(p).ok());
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        kill_group(group);
        return Err(format!("cannot start {program}: its pipes were not made"));
    };
    let cut = Arc::new(OnceLock::new());
    let reader = BoundedLines {
        inner: stdout,
        line: 0,
        max: max_message,
        cut: cut.clone(),
    };
    // rmcp's own line bound (which drops a line silently) is left above ours.
    let transport = AsyncRwTransport::new_client(reader, stdin)
        .with_max_line_length(max_message.saturating_add(2));
    if let Some(stderr) = child.stderr.take() {
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
        Ok(service) => Ok(Session {
            service,
            group,
            _child: Some(child),
            cut,
        }),
        Err(e) => {
            kill_group(group);
            let e = cut.get().cloned().unwrap_or_else(|| e.to_string());
            Err(format!("{program} did not complete the MCP handshake: {e}"))
        }
    }
}

async fn start_http(
    url: &str,
    headers: &BTreeMap<String, String>,
    workspace: &str,
    max_message: usize,
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
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(map);
    // rmcp refuses a larger answer or event before it parses it.
    cfg.max_json_response_size = max_message;
    cfg.max_sse_event_size = max_message;
    let transport = StreamableHttpClientTransport::from_config(cfg);
    let service = ().serve(transport).await.map_err(|e| format!("{url}: {e}"))?;
    Ok(Session {
        service,
        group: None,
        _child: None,
        cut: Arc::new(OnceLock::new()),
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
            .map_err(|e| self.failure(e.to_string()))?;
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

    /// A line over the bound fails the read at once, wherever it falls in the bytes read, and
    /// every read after it fails too.
    #[tokio::test]
    async fn lines_over_the_bound_cut_the_connection() {
        use tokio::io::AsyncReadExt;
        let read = |bytes: &'static [u8], max: usize| async move {
            let mut r = BoundedLines {
                inner: bytes,
                line: 0,
                max,
                cut: Arc::new(OnceLock::new()),
            };
            let mut out = Vec::new();
            let first = r.read_to_end(&mut out).await.map(|_| out);
            (first, r.read(&mut [0u8; 4]).await.is_err())
        };
        assert_eq!(read(b"abc\nabcd\n", 4).await.0.unwrap(), b"abc\nabcd\n");
        let (cut, after) = read(b"ab\nabcde\nab", 4).await;
        assert!(cut.unwrap_err().to_string().contains("over 4 bytes"));
        assert!(after, "a cut connection stays cut");
        assert!(
            read(b"abcde", 4).await.0.is_err(),
            "an unended line counts too"
        );
    }

    #[test]
    fn annotations_follow_the_mcp_specification() {
        use rmcp::model::ToolAnnotations;
        let a = |ro: Option<bool>, d: Option<bool>| {
            let mut t = ToolAnnotations::new();
            t.read_only_hint = ro;
            t.destructive_hint = d;
            t
        };
        assert_eq!(classify(None), (false, true));
        assert_eq!(classify(Some(&a(Some(true), None))), (true, false));
        // An additive write is still a write.
        assert_eq!(classify(Some(&a(None, Some(false)))), (false, false));
        assert_eq!(classify(Some(&a(Some(false), Some(false)))), (false, false));
        assert_eq!(classify(Some(&a(Some(false), None))), (false, true));
        // readOnlyHint wins: destructiveHint is meaningful only for a tool that writes.
        assert_eq!(classify(Some(&a(Some(true), Some(true)))), (true, false));
    }

    #[test]
    fn placeholders_expand() {
        let env = |n: &str| (n == "TOKEN").then(|| "t0k".to_owned());
        assert_eq!(expand("${workspace}/x", "/w", &env), "/w/x");
        assert_eq!(expand("Bearer ${env:TOKEN}", "", &env), "Bearer t0k");
        assert_eq!(expand("${env:NOPE}-", "", &env), "-");
        assert_eq!(expand("${env:open", "", &env), "${env:open");
    }
}
