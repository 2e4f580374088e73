//! The model executor (docs/model.md §11) through gRPC, against a real HTTP server that speaks
//! the OpenAI Chat Completions API from a script (`tests/support/openai_script.py`, streaming
//! SSE), and real MCP servers when `.ci/run` has installed them.
//!
//! | rule | test |
//! |---|---|
//! | §11.3 loop, usage, progress, exactly the tools | `a_worker_runs_on_the_model_and_is_offered_exactly_its_tools` |
//! | §11.3 lenient decoding, plain answer | `a_plain_answer_completes_and_lenient_chunks_are_read` |
//! | §11.5 output retries | `an_invalid_result_goes_back_to_the_model_then_fails_the_worker` |
//! | §11.4 hallucinated tool, §11.3 max turns | `a_tool_not_offered_is_answered_with_the_list_and_turns_are_bounded` |
//! | §11.4 spawn tool, lineage, tree usage | `the_spawn_tool_runs_a_child_with_the_workers_own_lineage` |
//! | §11.4 depth refusal as tool text | `at_the_depth_limit_the_spawn_tool_answers_with_the_depth_message` |
//! | §11.9 429 + Retry-After, 400 | `a_429_is_retried_after_retry_after_and_a_400_fails_with_its_message` |
//! | §11.9 idle timeout, malformed chunk | `a_stalled_stream_and_a_malformed_chunk_fail_the_worker` |
//! | §11.9 stop cancels the request | `stop_cancels_the_request_in_flight` |
//! | §11.1, §11.2 preconditions | `unknown_models_and_no_executor_are_refused_at_spawn` |
//! | §11.6, §11.7 MCP and review | `mcp_filesystem_reads_pass_and_writes_are_reviewed`, `mcp_time_over_python` |
//! | §11.6 streamable HTTP, §11.9 a stop cancels the MCP call | `mcp_over_streamable_http_and_a_stop_cancels_the_call` |
//! | personas §2.9 the persona's own MCP servers | `a_personas_mcp_servers_are_the_servers_its_workers_get` |
//! | §11.4 read-only workers, §11.7 `review.tools`, §11.6 Gemini wildcards | `a_read_only_worker_is_offered_only_read_only_tools`, `review_tools_are_reviewed_even_when_read_only_and_gemini_wildcards_select` |
//! | §11.4 spawn refusals as tool text | `spawn_tool_refusals_are_tool_errors_not_failed_workers` |
//! | §11.9 a stop ends a stdio server's call at once | `a_stop_during_a_stdio_tool_call_ends_the_server_at_once` |
//! | §11.11 memory tools in the agent's directory only | `memory_tools_write_the_agents_directory_and_the_next_run_reads_it` |
//! | §11.9 no retry after part of an answer | `a_stream_broken_after_part_of_the_answer_is_not_retried` |
//! | §11.9 5xx retried, §11.4 tool timeout | `a_5xx_is_retried_like_a_429`, `a_tool_call_past_the_tool_timeout_goes_back_to_the_model` |

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use agentry::{
    config::{Config, ExecutorKind, McpServer, ModelsConfig, Provider},
    grpc::pb,
};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tonic::Code;

use crate::{
    helpers::*,
    workers::{self, spawn_req},
};

/// The scripted OpenAI-compatible server, killed when dropped.
pub(crate) struct Scripted {
    pub(crate) base_url: String,
    dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl Scripted {
    /// Starts the server on `steps` (docs in the script's header).
    pub(crate) async fn start(steps: Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script.json");
        std::fs::write(&script, json!({ "steps": steps }).to_string()).unwrap();
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/openai_script.py");
        let mut child = tokio::process::Command::new("python3")
            .arg(server)
            .arg("--script")
            .arg(&script)
            .arg("--log")
            .arg(dir.path().join("log.jsonl"))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the scripted OpenAI server");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the scripted server starts")
            .unwrap()
            .expect("it prints where it listens");
        let base_url = line
            .strip_prefix("listening ")
            .expect("listening line")
            .to_owned();
        Self {
            base_url,
            dir,
            _child: child,
        }
    }

    /// Every request so far, as logged: `{n, path, authorization, headers, body, step}`.
    pub(crate) fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("log.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The tool names offered in request `i`.
    pub(crate) fn tools_of(&self, i: usize) -> Vec<String> {
        self.requests()[i]["body"]["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|d| d["function"]["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Points the config at `scripted` as the only provider, default model `scripted/test-model`.
pub(crate) fn on_model(c: &mut Config, scripted: &Scripted) {
    c.executor.kind = ExecutorKind::Model;
    c.models = ModelsConfig {
        default: Some("scripted/test-model".into()),
        providers: vec![Provider {
            name: "scripted".into(),
            base_url: scripted.base_url.clone(),
            api_key_env: None,
            headers: [("X-Team".to_owned(), "agents".to_owned())].into(),
        }],
        aliases: [("sonnet".to_owned(), "scripted/big-model".to_owned())].into(),
    };
    c.executor.timeout = Duration::from_secs(60);
}

fn agents(c: &Config) -> PathBuf {
    c.home.clone().unwrap().join(".claude/agents")
}

/// `SpawnWorker(wait)` of `agent` on `prompt`: the finished worker.
async fn spawn(s: &TestServer, agent: &str, prompt: &str) -> Result<pb::Worker, tonic::Status> {
    workers::spawn(s, spawn_req(agent, prompt, true))
        .await
        .map(|r| r.worker.unwrap())
}

fn submit(result: Value) -> Value {
    json!({"name": "submit_result", "arguments": {"result": result}})
}

/// Every event of a finished worker, from the start.
pub(crate) async fn events(s: &TestServer, id: &str) -> Vec<pb::WatchWorkerResponse> {
    let mut stream = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: id.into(),
            after_sequence: 1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    while let Some(ev) = stream.message().await.unwrap() {
        all.push(ev);
    }
    all
}

/// The texts of the `user` messages the model was sent in a logged request, in order.
pub(crate) fn user_messages(req: &Value) -> Vec<String> {
    req["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// The `tool` messages the model was sent in a logged request.
pub(crate) fn tool_messages(req: &Value) -> Vec<String> {
    req["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_worker_runs_on_the_model_and_is_offered_exactly_its_tools() {
    let scripted = Scripted::start(json!([
        {"content": "Reading the brief.", "tool_calls": [submit(json!("all done"))], "split": 4,
         "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        persona(
            &agents(c),
            "scout.md",
            "name: scout\ndescription: looks around\ntools: read, grep",
            "You are the scout.",
        );
    })
    .await;
    let w = spawn(&s, "scout", "find the config loader").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("all done"));
    let usage = w.usage.clone().expect("usage recorded");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (120, 30, 150)
    );
    assert_eq!(usage.by_model[0].model, "test-model");
    let got = get(&s, &w.id).await;
    assert_eq!(got.tree_usage.unwrap().total_tokens, 150);

    let reqs = scripted.requests();
    assert_eq!(reqs.len(), 1);
    let body = &reqs[0]["body"];
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You are the scout."})
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "find the config loader"})
    );
    assert_eq!(reqs[0]["headers"]["x-team"], "agents");
    assert_eq!(reqs[0]["authorization"], Value::Null);
    // read and grep are not tools this executor has; only submit_result is offered.
    assert_eq!(scripted.tools_of(0), ["submit_result"]);

    let evs = events(&s, &w.id).await;
    let kinds: Vec<(i32, String)> = evs
        .iter()
        .filter_map(|e| e.progress.as_ref().map(|p| (p.kind, p.text.clone())))
        .collect();
    assert_eq!(
        kinds,
        [
            (
                pb::ProgressKind::Status as i32,
                "turn 1: test-model".to_owned()
            ),
            (
                pb::ProgressKind::Text as i32,
                "Reading the brief.".to_owned()
            ),
            (
                pb::ProgressKind::ToolCall as i32,
                "submit_result".to_owned()
            ),
            (
                pb::ProgressKind::ToolResult as i32,
                "result accepted".to_owned()
            ),
        ]
    );
    let status: Value = serde_json::from_str(
        &evs.iter()
            .find_map(|e| e.progress.as_ref())
            .unwrap()
            .data_json,
    )
    .unwrap();
    assert_eq!(status["usage"]["total_tokens"], 150);
}

#[tokio::test]
async fn a_plain_answer_completes_and_lenient_chunks_are_read() {
    let scripted = Scripted::start(json!([
        {"content": "The answer is 42.", "finish_reason": "", "usage": {}},
    ]))
    .await;
    let s = start_with(|c| on_model(c, &scripted)).await;
    let w = spawn(&s, "task", "what is six times seven").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("The answer is 42."));
    assert_eq!(w.usage.unwrap().total_tokens, 0);
}

#[tokio::test]
async fn an_invalid_result_goes_back_to_the_model_then_fails_the_worker() {
    let schema =
        r#"{"type":"object","required":["count"],"properties":{"count":{"type":"integer"}}}"#;
    let scripted = Scripted::start(json!([
        {"match": "GOOD", "tool_calls": [submit(json!({"count": "three"}))]},
        {"match": "GOOD", "tool_calls": [submit(json!({"count": 3}))]},
        {"match": "BAD", "tool_calls": [submit(json!({"count": "x"}))], "repeat": true},
    ]))
    .await;
    let s = start_with(|c| on_model(c, &scripted)).await;
    let mut client = s.client.clone();
    let ask = |prompt: &str| {
        let mut c = client.clone();
        let r = pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: prompt.into(),
            wait: true,
            output_schema: Some(schema.into()),
            ..Default::default()
        };
        async move {
            c.spawn_worker(r)
                .await
                .unwrap()
                .into_inner()
                .worker
                .unwrap()
        }
    };
    let good = ask("GOOD count the files").await;
    assert_eq!(good.state, pb::WorkerState::Completed as i32, "{good:?}");
    assert_eq!(good.structured_result.as_deref(), Some(r#"{"count":3}"#));
    let handed_back = tool_messages(&scripted.requests()[1]);
    assert!(
        handed_back[0].starts_with("output does not match the output schema: /count: ")
            && handed_back[0].ends_with(
                "Do not repeat the same call unchanged; fix the arguments or take another approach."
            ),
        "{handed_back:?}"
    );

    let bad = ask("BAD count the files").await;
    assert_eq!(bad.state, pb::WorkerState::Failed as i32);
    let error = bad.error.unwrap();
    assert!(
        error.starts_with(
            "output invalid after 3 attempts: output does not match the output schema: /count"
        ),
        "{error}"
    );
    // output_retries (2) invalid results were handed back before the third failed the worker.
    assert_eq!(scripted.requests().len(), 2 + 3);
    let _ = &mut client;
}

#[tokio::test]
async fn a_tool_not_offered_is_answered_with_the_list_and_turns_are_bounded() {
    let scripted = Scripted::start(json!([
        {"tool_calls": [{"name": "bash", "arguments": {"cmd": "rm -rf /"}}], "repeat": true},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        persona(
            &agents(c),
            "loop.md",
            "name: looper\ndescription: loops\nmax_turns: 3",
            "Loop.",
        );
    })
    .await;
    let w = spawn(&s, "looper", "go").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert_eq!(w.error.as_deref(), Some("max turns (3) reached"));
    let reqs = scripted.requests();
    assert_eq!(reqs.len(), 3);
    let answered = tool_messages(&reqs[1]);
    assert_eq!(
        answered,
        [
            "unknown tool bash; the tools you have are: submit_result. Call only one of these. Do not repeat the same call unchanged; fix the arguments or take another approach."
        ]
    );
}

#[tokio::test]
async fn the_spawn_tool_runs_a_child_with_the_workers_own_lineage() {
    let scripted = Scripted::start(json!([
        {"match": "child says hi", "tool_calls": [submit(json!("parent done"))],
         "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}},
        {"match": "CHILD brief", "content": "child says hi",
         "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}},
        {"match": "PARENT", "tool_calls": [{"name": "task", "arguments": {"agent": "helper", "description": "sub", "prompt": "CHILD brief"}}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        let dir = agents(c);
        persona(
            &dir,
            "lead.md",
            "name: lead\ndescription: leads\nspawns: helper",
            "Lead.",
        );
        persona(
            &dir,
            "helper.md",
            "name: helper\ndescription: helps\nmodel: sonnet",
            "Help.",
        );
    })
    .await;
    let w = spawn(&s, "lead", "PARENT task").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("parent done"));
    assert!(
        scripted.tools_of(0).contains(&"task".to_owned()),
        "{:?}",
        scripted.tools_of(0)
    );
    let spawn_def = scripted.requests()[0]["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["function"]["name"] == "task")
        .cloned()
        .unwrap();
    assert_eq!(
        spawn_def["function"]["parameters"]["properties"]["agent"]["enum"],
        json!(["helper"])
    );
    // The spawn tool's result names the child (docs §12.5), so the model can follow it up.
    let replies = tool_messages(&scripted.requests()[2]);
    assert_eq!(replies.len(), 1);
    let (head, said) = replies[0].split_once('\n').unwrap();
    assert_eq!(said, "child says hi");

    let children = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            parent_id: w.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!((child.agent.as_str(), child.depth), ("helper", 2));
    assert_eq!(head, format!("worker {} (completed):", child.id));
    // The alias resolved for the child's own model.
    assert_eq!(child.usage.clone().unwrap().by_model[0].model, "big-model");
    let tree = get(&s, &w.id).await.tree_usage.unwrap();
    assert_eq!(tree.total_tokens, 11 + 7 + 6);
    assert_eq!(tree.by_model.len(), 2);
}

#[tokio::test]
async fn at_the_depth_limit_the_spawn_tool_answers_with_the_depth_message() {
    let scripted = Scripted::start(json!([
        {"match": "depth limit", "tool_calls": [submit(json!("solved alone"))]},
        {"tool_calls": [{"name": "task", "arguments": {"agent": "helper", "prompt": "x"}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.max_recursion_depth = 1;
        let dir = agents(c);
        persona(
            &dir,
            "lead.md",
            "name: lead\ndescription: leads\nspawns: helper",
            "Lead.",
        );
        simple(&dir, "helper.md", "helper", "helps");
    })
    .await;
    let w = spawn(&s, "lead", "go deep").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("solved alone"));
    assert!(!scripted.tools_of(0).contains(&"task".to_owned()));
    assert_eq!(
        tool_messages(&scripted.requests()[1]),
        [
            "Agent depth limit reached. Solve the task yourself. Do not repeat the same call unchanged; fix the arguments or take another approach."
        ]
    );
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after_and_a_400_fails_with_its_message() {
    let scripted = Scripted::start(json!([
        {"match": "retry me", "status": 429, "headers": {"Retry-After": "1"}},
        {"match": "retry me", "content": "after the wait"},
        {"match": "refuse me", "status": 400, "body": {"error": {"message": "context length exceeded", "type": "invalid_request_error"}}},
    ]))
    .await;
    let s = start_with(|c| on_model(c, &scripted)).await;
    let t0 = Instant::now();
    let w = spawn(&s, "task", "retry me").await.unwrap();
    assert_eq!(w.result.as_deref(), Some("after the wait"), "{w:?}");
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured: {:?}",
        t0.elapsed()
    );
    let w = spawn(&s, "task", "refuse me").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert_eq!(
        w.error.as_deref(),
        Some("model request failed: 400 Bad Request: context length exceeded")
    );
    assert_eq!(scripted.requests().len(), 3, "a 400 is not retried");
}

#[tokio::test]
async fn a_stalled_stream_and_a_malformed_chunk_fail_the_worker() {
    let scripted = Scripted::start(json!([
        {"match": "stall", "content": "partial answer", "split": 5, "stall_after": 2, "stall_ms": 30000},
        {"match": "garbage", "raw": ["data: {\"choices\":[]}\n\n", "data: {nope\n\n"]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.model.idle_timeout = Duration::from_millis(700);
    })
    .await;
    let t0 = Instant::now();
    let w = spawn(&s, "task", "stall").await.unwrap();
    assert_eq!(
        w.error.as_deref(),
        Some("the model sent nothing for 700ms (model.idle_timeout)"),
        "{w:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
    let w = spawn(&s, "task", "garbage").await.unwrap();
    let error = w.error.unwrap();
    assert!(
        error.starts_with("model stream: event 2 is not valid JSON: "),
        "{error}"
    );
    // Neither is retried: part of an answer had arrived.
    assert_eq!(scripted.requests().len(), 2);
}

#[tokio::test]
async fn stop_cancels_the_request_in_flight() {
    let scripted = Scripted::start(json!([
        {"content": "never finishes", "stall_after": 1, "stall_ms": 60000},
    ]))
    .await;
    let s = start_with(|c| on_model(c, &scripted)).await;
    let w = workers::spawn(&s, spawn_req("task", "think forever", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    eventually(
        "the request reaches the model",
        Duration::from_secs(10),
        || async { (scripted.requests().len() == 1).then_some(()) },
    )
    .await;
    let t0 = Instant::now();
    let stopped = stop_worker(&s, &w.id, "no longer needed").await;
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "stopped at once: {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn unknown_models_and_no_executor_are_refused_at_spawn() {
    let scripted = Scripted::start(json!([])).await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        persona(
            &agents(c),
            "old.md",
            "name: old\ndescription: old\nmodel: opus",
            "Old.",
        );
    })
    .await;
    // Reported when the file is read, not only at spawn.
    let listed = list_all(&s, &s.ws("w"), false).await;
    let d = listed
        .diagnostics
        .iter()
        .find(|d| d.code == "unknown_model")
        .expect("an unknown_model warning");
    assert!(
        d.path.ends_with("old.md") && d.message.starts_with("model opus of agent old is neither"),
        "{d:?}"
    );
    let e = spawn(&s, "old", "x").await.unwrap_err();
    assert_status(
        &e,
        Code::FailedPrecondition,
        "EXECUTOR_UNAVAILABLE",
        "agent old: model opus is neither an alias in models.aliases nor provider/model with a configured provider",
    );
    let none = start_with(|c| c.executor_unconfigured = true).await;
    let e = spawn(&none, "task", "x").await.unwrap_err();
    assert_status(
        &e,
        Code::FailedPrecondition,
        "EXECUTOR_UNAVAILABLE",
        "no executor is configured: set executor.command (or executor.kind) in the config file, or set OPENAI_API_KEY to run workers on the model executor",
    );
    // Nothing was written: a refused spawn leaves no row.
    let listed = none
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(listed.is_empty());
    assert!(scripted.requests().is_empty());
}

/// The MCP server program `var` names, installed by `.ci/run` ([`installed`]).
fn mcp_program(var: &str) -> Option<String> {
    installed(var, "the MCP servers")
}

/// The time server of `program` (`mcp-server-time`) over stdio, in UTC.
fn time_mcp(program: &str) -> McpServer {
    McpServer {
        command: vec![program.to_owned(), "--local-timezone".into(), "UTC".into()],
        ..McpServer::default()
    }
}

#[tokio::test]
async fn mcp_filesystem_reads_pass_and_writes_are_reviewed() {
    let Some(fs_server) = mcp_program("AGENTRY_TEST_MCP_FILESYSTEM") else {
        return;
    };
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = ws_dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("notes.txt"), "the secret word is tangerine\n").unwrap();
    let read = json!({"path": ws.join("notes.txt")});
    let rejected = json!({"path": ws.join("rejected.txt"), "content": "nope"});
    let approved = json!({"path": ws.join("approved.txt"), "content": "written after review"});
    // Each step matches text only its own request has (the first matching step answers).
    let scripted = Scripted::start(json!([
        {"match": "Successfully wrote", "tool_calls": [submit(json!("wrote it"))]},
        {"match": "writes outside the plan", "tool_calls": [{"name": "mcp__fs__write_file", "arguments": approved}]},
        {"match": "tangerine", "tool_calls": [{"name": "mcp__fs__write_file", "arguments": rejected}]},
        // The reviewers (run on the model executor too) decide by the path.
        {"match": "rejected.txt", "content": "Decision: reject\nwrites outside the plan"},
        {"match": "approved.txt", "content": "Decision: approve\nwithin the task"},
        {"match": "FILES", "tool_calls": [{"name": "mcp__fs__read_text_file", "arguments": read}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.mcp_servers.insert(
            "fs".into(),
            McpServer {
                command: vec![fs_server.clone(), "${workspace}".into()],
                ..McpServer::default()
            },
        );
        persona(&agents(c), "editor.md", "name: editor\ndescription: edits\ntools: mcp__fs__read_text_file, mcp__fs__write_file, mcp__fs__list_directory", "Edit files.");
    })
    .await;
    let request = pb::SpawnWorkerRequest {
        workspace: ws.display().to_string(),
        ..spawn_req("editor", "FILES: read notes.txt, then write", true)
    };
    let w = workers::spawn(&s, request).await.unwrap().worker.unwrap();
    assert_eq!(
        w.state,
        pb::WorkerState::Completed as i32,
        "{w:?}\n{:#?}",
        scripted
            .requests()
            .iter()
            .map(|r| r["body"]["messages"].as_array().unwrap().last().cloned())
            .collect::<Vec<_>>()
    );
    let mut offered = scripted.tools_of(0);
    offered.sort();
    assert_eq!(
        offered,
        [
            "mcp__fs__list_directory",
            "mcp__fs__read_text_file",
            "mcp__fs__write_file",
            "submit_result"
        ]
    );
    assert!(
        !ws.join("rejected.txt").exists(),
        "a rejected write never runs"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("approved.txt")).unwrap(),
        "written after review"
    );
    // Two reviews ran as children of the worker: one reject, one approve.
    let reviews = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            parent_id: w.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(
        reviews.iter().filter(|r| r.agent == "reviewer").count(),
        2,
        "{reviews:?}"
    );
    let worker_reqs: Vec<Value> = scripted
        .requests()
        .into_iter()
        .filter(|r| {
            r["body"]["messages"][1]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("FILES"))
        })
        .collect();
    let answers = tool_messages(worker_reqs.last().unwrap());
    assert!(answers[0].contains("tangerine"), "{answers:?}");
    assert_eq!(answers[1], "rejected by review: writes outside the plan");
    assert!(!answers[2].contains("rejected"), "{answers:?}");
}

#[tokio::test]
async fn mcp_time_over_python() {
    let Some(time_server) = mcp_program("AGENTRY_TEST_MCP_TIME") else {
        return;
    };
    let scripted = Scripted::start(json!([
        {"match": "\"tool\"", "tool_calls": [submit(json!("got the time"))]},
        {"tool_calls": [{"name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.mcp_servers.insert("time".into(), time_mcp(&time_server));
        // No `tools`: it inherits every tool, so every configured server is started.
        persona(
            &agents(c),
            "clock.md",
            "name: clock\ndescription: tells the time",
            "Tell the time.",
        );
    })
    .await;
    let w = spawn(&s, "clock", "what time is it").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    // Read-only: no review ran, and the tool's answer reached the model.
    let answers = tool_messages(&scripted.requests()[1]);
    assert!(answers[0].contains("UTC"), "{answers:?}");
    assert!(
        scripted
            .tools_of(0)
            .contains(&"mcp__time__convert_time".to_owned())
    );
}

/// The MCP server of `tests/support/mcp_http_server.py` over streamable HTTP, started with the
/// Python that has the MCP SDK (`AGENTRY_TEST_MCP_PYTHON`, set by `.ci/run`): its URL and the
/// process (killed when dropped).
async fn http_mcp(python: &str, marker: &Path) -> (String, tokio::process::Child) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp_http_server.py");
    let mut child = tokio::process::Command::new(python)
        .arg(script)
        .arg("--marker")
        .arg(marker)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line.strip_prefix("listening ").unwrap().to_owned();
    // Listening is printed just before uvicorn binds: wait until it accepts.
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    eventually("the MCP server accepts", Duration::from_secs(20), || {
        let addr = addr.clone();
        async move { tokio::net::TcpStream::connect(addr).await.ok().map(drop) }
    })
    .await;
    (url, child)
}

#[tokio::test]
async fn mcp_over_streamable_http_and_a_stop_cancels_the_call() {
    let Some(python) = mcp_program("AGENTRY_TEST_MCP_PYTHON") else {
        return;
    };
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("slow.txt");
    let (url, _server) = http_mcp(&python, &marker).await;
    let scripted = Scripted::start(json!([
        {"match": "value of alpha", "tool_calls": [submit(json!("found it"))]},
        {"match": "LOOKUP", "tool_calls": [{"name": "mcp__notes__lookup", "arguments": {"key": "alpha"}}]},
        {"match": "SLOW", "tool_calls": [{"name": "mcp__notes__slow", "arguments": {"seconds": 60}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.mcp_servers.insert(
            "notes".into(),
            McpServer {
                url: Some(url.clone()),
                headers: [("X-Test".to_owned(), "yes".to_owned())].into(),
                ..McpServer::default()
            },
        );
        persona(
            &agents(c),
            "reader.md",
            "name: reader\ndescription: reads\ntools: mcp__notes",
            "Read.",
        );
    })
    .await;
    let w = spawn(&s, "reader", "LOOKUP alpha").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(tool_messages(&scripted.requests()[1]), ["value of alpha"]);
    let mut offered = scripted.tools_of(0);
    offered.sort();
    assert_eq!(
        offered,
        ["mcp__notes__lookup", "mcp__notes__slow", "submit_result"]
    );

    // A stop while the tool runs: the worker is killed at once and the server's call cancelled.
    let w = workers::spawn(&s, spawn_req("reader", "SLOW please", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    eventually("the slow tool runs", Duration::from_secs(20), || async {
        (std::fs::read_to_string(&marker).ok()? == "started").then_some(())
    })
    .await;
    let t0 = Instant::now();
    let stopped = stop_worker(&s, &w.id, "enough").await;
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    eventually(
        "the server's call is cancelled",
        Duration::from_secs(10),
        || async { (std::fs::read_to_string(&marker).ok()? == "cancelled").then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_5xx_is_retried_like_a_429() {
    let scripted = Scripted::start(json!([
        {"match": "flaky", "status": 503},
        {"match": "flaky", "content": "served on the second try"},
    ]))
    .await;
    let s = start_with(|c| on_model(c, &scripted)).await;
    let w = spawn(&s, "task", "flaky provider").await.unwrap();
    assert_eq!(
        w.result.as_deref(),
        Some("served on the second try"),
        "{w:?}"
    );
    assert_eq!(scripted.requests().len(), 2);
}

#[tokio::test]
async fn a_tool_call_past_the_tool_timeout_goes_back_to_the_model() {
    let Some(python) = mcp_program("AGENTRY_TEST_MCP_PYTHON") else {
        return;
    };
    let marker_dir = tempfile::tempdir().unwrap();
    let (url, _server) = http_mcp(&python, &marker_dir.path().join("slow.txt")).await;
    let scripted = Scripted::start(json!([
        {"match": "model.tool_timeout", "tool_calls": [submit(json!("gave up on it"))]},
        {"tool_calls": [{"name": "mcp__notes__slow", "arguments": {"seconds": 60}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.model.tool_timeout = Duration::from_millis(500);
        c.mcp_servers.insert(
            "notes".into(),
            McpServer {
                url: Some(url.clone()),
                ..McpServer::default()
            },
        );
        persona(
            &agents(c),
            "reader.md",
            "name: reader\ndescription: reads\ntools: mcp__notes",
            "Read.",
        );
    })
    .await;
    let w = spawn(&s, "reader", "slow please").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(
        tool_messages(&scripted.requests()[1]),
        [
            "mcp__notes__slow did not answer within 500ms (model.tool_timeout). Do not repeat the same call unchanged; fix the arguments or take another approach."
        ]
    );
}

/// A persona's `mcpServers` (docs/personas.md §2.9): a named server narrows the configured
/// ones, an inline one is started for its worker alone, an unknown name refuses the spawn, and
/// an inline server in a project file is dropped with a warning unless `mcp.allow_inline`.
#[tokio::test]
async fn a_personas_mcp_servers_are_the_servers_its_workers_get() {
    let Some(time_server) = mcp_program("AGENTRY_TEST_MCP_TIME") else {
        return;
    };
    let scripted = Scripted::start(json!([
        // An inline server's annotations are not trusted: its read-only clock is reviewed, and
        // this reviewer approves.
        {"match": "Decision", "content": "Decision: approve\nreads the clock", "repeat": true},
        {"match": "\"tool\"", "tool_calls": [submit(json!("done"))], "repeat": true},
        {"match": "CLOCK", "tool_calls": [{"name": "mcp__clock__get_current_time", "arguments": {"timezone": "UTC"}}], "repeat": true},
        {"tool_calls": [submit(json!("nothing to do"))], "repeat": true},
    ]))
    .await;
    let time = time_mcp(&time_server);
    let inline = format!(
        "mcpServers:\n  - clock:\n      command: {time_server}\n      args: [--local-timezone, UTC]"
    );
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.mcp_servers.insert("time".into(), time.clone());
        // A second configured server that would fail to start: only a worker that gets it
        // would notice.
        c.mcp_servers.insert(
            "broken".into(),
            McpServer {
                command: vec!["/nonexistent/mcp-server".into()],
                ..McpServer::default()
            },
        );
        let dir = agents(c);
        persona(
            &dir,
            "named.md",
            "name: named\ndescription: d\nmcpServers: [time]",
            "Use the time.",
        );
        persona(
            &dir,
            "own.md",
            &format!("name: own\ndescription: d\n{inline}"),
            "Use your clock.",
        );
        persona(
            &dir,
            "none.md",
            "name: none\ndescription: d\nmcpServers: []",
            "No servers.",
        );
        persona(
            &dir,
            "ghost.md",
            "name: ghost\ndescription: d\nmcpServers: [time, github]",
            "x",
        );
    })
    .await;

    // Named: exactly `time`, although the agent inherits every tool and `broken` is configured.
    let w = spawn(&s, "named", "what time is it").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let offered = scripted.tools_of(0);
    assert!(
        offered.contains(&"mcp__time__get_current_time".to_owned()),
        "{offered:?}"
    );
    assert!(
        offered.iter().all(|t| !t.starts_with("mcp__broken")),
        "{offered:?}"
    );

    // Inline: its own server, started for this worker, whose answer reaches the model.
    let before = scripted.requests().len();
    let w = spawn(&s, "own", "CLOCK: what time is it").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let mut offered = scripted.tools_of(before);
    offered.retain(|t| t.starts_with("mcp__"));
    assert!(
        offered.contains(&"mcp__clock__get_current_time".to_owned()),
        "{offered:?}"
    );
    assert!(
        offered.iter().all(|t| t.starts_with("mcp__clock__")),
        "{offered:?}"
    );
    // The worker's next turn (after the review's own request) carries the clock's answer.
    let answers: Vec<String> = scripted.requests()[before + 1..]
        .iter()
        .flat_map(tool_messages)
        .collect();
    assert!(
        answers.len() == 1 && answers[0].contains("UTC"),
        "{answers:?}"
    );

    // An empty list: no MCP server at all.
    let before = scripted.requests().len();
    let w = spawn(&s, "none", "nothing").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(scripted.tools_of(before), ["submit_result"]);

    // An unknown name refuses the spawn, naming the configured servers; no row is written.
    let e = spawn(&s, "ghost", "x").await.unwrap_err();
    assert_status(
        &e,
        Code::FailedPrecondition,
        "EXECUTOR_UNAVAILABLE",
        "agent ghost names MCP server \"github\", which is not configured (mcp_servers: broken, time)",
    );

    // A project file's inline server is refused by default: a warning, and no server.
    let ws = s.ws("proj");
    persona(
        &ws.join(".claude/agents"),
        "local.md",
        &format!("name: local\ndescription: d\n{inline}"),
        "Project agent.",
    );
    let listed = list_all(&s, &ws, false).await;
    let d = listed
        .diagnostics
        .iter()
        .find(|d| d.path.ends_with("local.md"))
        .expect("a diagnostic on local.md");
    assert_eq!(
        (d.code.as_str(), d.line),
        ("inline_mcp_refused", Some(4)),
        "{d:?}"
    );
    assert_eq!(
        d.message,
        "MCP server \"clock\" is defined in a project file, and mcp.allow_inline is off: it is not started"
    );
    let before = scripted.requests().len();
    let w = workers::spawn(
        &s,
        pb::SpawnWorkerRequest {
            workspace: ws.display().to_string(),
            ..spawn_req("local", "nothing", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(scripted.tools_of(before), ["submit_result"]);

    // With mcp.allow_inline the same project file's server starts.
    let allowed = start_with(|c| {
        on_model(c, &scripted);
        c.mcp.allow_inline = true;
    })
    .await;
    let ws = allowed.ws("proj");
    persona(
        &ws.join(".claude/agents"),
        "local.md",
        &format!("name: local\ndescription: d\n{inline}"),
        "Project agent.",
    );
    let listed = list_all(&allowed, &ws, false).await;
    assert!(
        listed
            .diagnostics
            .iter()
            .all(|d| !d.path.ends_with("local.md")),
        "{:?}",
        listed.diagnostics
    );
    let before = scripted.requests().len();
    let w = workers::spawn(
        &allowed,
        pb::SpawnWorkerRequest {
            workspace: ws.display().to_string(),
            ..spawn_req("local", "CLOCK: the time", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert!(
        scripted
            .tools_of(before)
            .contains(&"mcp__clock__get_current_time".to_owned())
    );
}

/// A read-only worker (persona `permissionMode: read-only`) is offered only the read-only tools
/// of a server its list selects whole (docs/model.md §11.4); the others are never shown.
#[tokio::test]
async fn a_read_only_worker_is_offered_only_read_only_tools() {
    let Some(fs_server) = mcp_program("AGENTRY_TEST_MCP_FILESYSTEM") else {
        return;
    };
    let scripted =
        Scripted::start(json!([{"tool_calls": [submit(json!("looked"))], "repeat": true}])).await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.mcp_servers.insert(
            "fs".into(),
            McpServer {
                command: vec![fs_server.clone(), "${workspace}".into()],
                ..McpServer::default()
            },
        );
        let dir = agents(c);
        persona(
            &dir,
            "looker.md",
            "name: looker\ndescription: looks\ntools: mcp__fs\npermissionMode: read-only",
            "Look.",
        );
        persona(
            &dir,
            "toucher.md",
            "name: toucher\ndescription: touches\ntools: mcp__fs",
            "Touch.",
        );
    })
    .await;
    let ws_dir = tempfile::tempdir().unwrap();
    let run = |agent: &'static str| {
        let s = &s;
        let ws = ws_dir.path().display().to_string();
        async move {
            workers::spawn(
                s,
                pb::SpawnWorkerRequest {
                    workspace: ws,
                    ..spawn_req(agent, "look around", true)
                },
            )
            .await
            .unwrap()
            .worker
            .unwrap()
        }
    };
    let w = run("toucher").await;
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let all = scripted.tools_of(0);
    let w = run("looker").await;
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let read_only = scripted.tools_of(1);
    for t in [
        "mcp__fs__write_file",
        "mcp__fs__edit_file",
        "mcp__fs__move_file",
    ] {
        assert!(all.contains(&t.to_owned()), "{t} in {all:?}");
        assert!(
            !read_only.contains(&t.to_owned()),
            "{t} offered read-only: {read_only:?}"
        );
    }
    for t in ["mcp__fs__read_text_file", "mcp__fs__list_directory"] {
        assert!(
            read_only.contains(&t.to_owned()),
            "{t} not in {read_only:?}"
        );
    }
    assert!(read_only.len() < all.len());
}

/// `review.tools` sends a read-only tool through the review gate too, and a Gemini-style
/// `mcp_<server>_*` wildcard selects that server's tools (docs/model.md §11.6, §11.7).
#[tokio::test]
async fn review_tools_are_reviewed_even_when_read_only_and_gemini_wildcards_select() {
    let Some(time_server) = mcp_program("AGENTRY_TEST_MCP_TIME") else {
        return;
    };
    let scripted = Scripted::start(json!([
        {"match": "rejected by review", "tool_calls": [submit(json!("no clock then"))]},
        // The reviewer sees the call's arguments.
        {"match": "Europe/Oslo", "content": "Decision: reject\nno clocks today"},
        {"match": "CLOCK", "tool_calls": [{"name": "mcp__time__get_current_time", "arguments": {"timezone": "Europe/Oslo"}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.review.tools = vec!["mcp__time__get_current_time".into()];
        c.mcp_servers.insert("time".into(), time_mcp(&time_server));
        persona(
            &agents(c),
            "gem.md",
            "name: gem\ndescription: d\ntools: mcp_time_*",
            "Tell the time.",
        );
    })
    .await;
    let w = spawn(&s, "gem", "CLOCK please").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("no clock then"));
    let mut offered = scripted.tools_of(0);
    offered.sort();
    assert_eq!(
        offered,
        [
            "mcp__time__convert_time",
            "mcp__time__get_current_time",
            "submit_result"
        ]
    );
    let last = scripted.requests().last().cloned().unwrap();
    assert_eq!(
        tool_messages(&last),
        ["rejected by review: no clocks today"]
    );
    let reviews = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            parent_id: w.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(reviews[0].agent, "reviewer");
}

/// Spawn-tool refusals other than the depth limit — an agent outside the worker's spawn
/// rights, an agent that does not exist — go back to the model as the tool's error text, and
/// the worker goes on (docs/model.md §11.4).
#[tokio::test]
async fn spawn_tool_refusals_are_tool_errors_not_failed_workers() {
    let scripted = Scripted::start(json!([
        // Each step matches the prompt of the call before it (the arguments are in the history).
        {"match": "SECOND-TRY", "tool_calls": [submit(json!("did it myself"))]},
        {"match": "FIRST-TRY", "tool_calls": [{"name": "task", "arguments": {"agent": "ghost", "prompt": "SECOND-TRY"}}]},
        {"tool_calls": [{"name": "task", "arguments": {"agent": "outsider", "prompt": "FIRST-TRY"}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        let dir = agents(c);
        persona(
            &dir,
            "lead.md",
            "name: lead\ndescription: leads\nspawns: helper, ghost",
            "Lead.",
        );
        simple(&dir, "helper.md", "helper", "helps");
        simple(&dir, "outsider.md", "outsider", "not allowed");
    })
    .await;
    let w = spawn(&s, "lead", "delegate").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("did it myself"));
    let answers = tool_messages(scripted.requests().last().unwrap());
    assert_eq!(
        answers,
        [
            "Cannot spawn 'outsider'. Allowed: helper, ghost. Do not repeat the same call unchanged; fix the arguments or take another approach.",
            "Unknown agent \"ghost\". Available: helper, lead, outsider, explore, plan, designer, reviewer, task, quick_task. Do not repeat the same call unchanged; fix the arguments or take another approach."
        ]
    );
    // Nothing was spawned.
    let children = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            parent_id: w.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(children.is_empty(), "{children:?}");
}

/// A stream that breaks after part of an answer arrived is never retried: the worker fails
/// with the break, after exactly one request (docs/model.md §11.9).
#[tokio::test]
async fn a_stream_broken_after_part_of_the_answer_is_not_retried() {
    let scripted = Scripted::start(json!([
        {"match": "PARTIAL", "content": "half of an answer that never ends", "split": 6,
         "stall_after": 3, "stall_ms": 0, "repeat": true},
    ]))
    .await;
    let s = start_with(|c| on_model(c, &scripted)).await;
    let w = spawn(&s, "task", "PARTIAL answer").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32, "{w:?}");
    let error = w.error.unwrap_or_default();
    assert!(
        error.starts_with("model stream broke after 3 events"),
        "{error}"
    );
    assert_eq!(
        scripted.requests().len(),
        1,
        "retried after part of an answer"
    );
}

/// A stop while a stdio MCP server's tool runs: the worker is killed at once, and the server's
/// process with it (its process group is killed; docs/model.md §11.9).
#[tokio::test]
async fn a_stop_during_a_stdio_tool_call_ends_the_server_at_once() {
    let Some(python) = mcp_program("AGENTRY_TEST_MCP_PYTHON") else {
        return;
    };
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("slow.txt");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp_http_server.py");
    let scripted = Scripted::start(json!([
        {"match": "SLOW", "tool_calls": [{"name": "mcp__notes__slow", "arguments": {"seconds": 60}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        c.mcp_servers.insert(
            "notes".into(),
            McpServer {
                command: vec![
                    python.clone(),
                    script.display().to_string(),
                    "--stdio".into(),
                    "--marker".into(),
                    marker.display().to_string(),
                ],
                ..McpServer::default()
            },
        );
        persona(
            &agents(c),
            "reader.md",
            "name: reader\ndescription: reads\ntools: mcp__notes",
            "Read.",
        );
    })
    .await;
    let w = workers::spawn(&s, spawn_req("reader", "SLOW please", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    eventually("the slow tool runs", Duration::from_secs(20), || async {
        (std::fs::read_to_string(&marker).ok()? == "started").then_some(())
    })
    .await;
    let pid: i32 = std::fs::read_to_string(marker.with_extension("txt.pid"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    let t0 = Instant::now();
    let stopped = stop_worker(&s, &w.id, "enough").await;
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    // Killed, and reaped by agentry (no zombie left behind either).
    eventually(
        "the server process is gone",
        Duration::from_secs(5),
        || async { (!Path::new(&format!("/proc/{pid}")).exists()).then_some(()) },
    )
    .await;
}

/// A persona with `memory` gets the memory tools, which read and write its memory directory
/// and nowhere else; what one run writes to `MEMORY.md` is in the next run's prompt (docs/model.md
/// §11.11, docs/personas.md §2.7).
#[tokio::test]
async fn memory_tools_write_the_agents_directory_and_the_next_run_reads_it() {
    let scripted = Scripted::start(json!([
        {"match": "SECOND", "tool_calls": [submit(json!("ok"))]},
        {"match": "MEMORY.md (16 bytes)", "tool_calls": [submit(json!("remembered"))]},
        {"match": "not a path inside", "tool_calls": [{"name": "memory_list", "arguments": {}}]},
        {"match": "wrote 16 bytes to MEMORY.md", "tool_calls": [{"name": "memory_write", "arguments": {"path": "../escape.md", "content": "x"}}]},
        {"tool_calls": [{"name": "memory_write", "arguments": {"path": "MEMORY.md", "content": "the answer is 42"}}]},
    ]))
    .await;
    let s = start_with(|c| {
        on_model(c, &scripted);
        persona(
            &agents(c),
            "keeper.md",
            "name: keeper\ndescription: remembers\nmemory: user",
            "Keep notes.",
        );
    })
    .await;
    let w = spawn(&s, "keeper", "FIRST: remember the answer")
        .await
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("remembered"));
    let mut offered = scripted.tools_of(0);
    offered.sort();
    assert_eq!(
        offered,
        [
            "memory_list",
            "memory_read",
            "memory_write",
            "submit_result"
        ]
    );
    let dir = s.dir.path().join("home/.claude/agent-memory/keeper");
    assert_eq!(
        std::fs::read_to_string(dir.join("MEMORY.md")).unwrap(),
        "the answer is 42"
    );
    assert!(!dir.parent().unwrap().join("escape.md").exists());
    let answers = tool_messages(&scripted.requests()[3]);
    assert_eq!(answers[0], "wrote 16 bytes to MEMORY.md.");
    assert!(
        answers[1].starts_with("\"../escape.md\" is not a path inside your memory directory"),
        "{answers:?}"
    );
    assert_eq!(answers[2], "MEMORY.md (16 bytes)");

    let w = spawn(&s, "keeper", "SECOND run").await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let system = scripted.requests().last().unwrap()["body"]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("the answer is 42"), "{system}");
}
