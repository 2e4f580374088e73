//! What the model executor itself costs (docs/model.md), measured beside bare clients doing the
//! same work against the same servers, in the same run:
//!
//! * a one-turn worker through [`ModelExecutor::run`] (request built from the conversation,
//!   streamed, assembled, result validated) beside a bare `reqwest` POST of the same body whose
//!   event stream is read to the end — the floor of one turn; target ≤ +1 ms;
//! * an MCP tool call through the executor's rmcp session beside a bare JSON-RPC line written to
//!   the same stdio server and its answer read back; target ≤ +0.5 ms (needs
//!   `AGENTRY_TEST_MCP_TIME`, the `mcp-server-time` entry point `.ci/run` installs; skipped
//!   without it);
//! * the memory of idle running model workers (each waiting on a model that has not answered),
//!   per worker, beyond its message history; target ≤ 64 KB.
//!
//! The model is the test suite's scripted OpenAI-compatible server
//! (`tests/support/openai_script.py`), started here. Run with `cargo bench --bench model`
//! (`AGENTRY_BENCH_QUICK=1` for a smoke run with tiny counts).

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use agentry::{
    config::{McpServer, ModelsConfig, Provider},
    resolve::Tools,
    workers::{
        executor::{
            Assignment, Executor, Job, Meter, ModelExecutor, Outcome,
            model::{ModelSettings, mcp, wire::HttpModel},
        },
        spec::{AgentSpec, WorkerSpec},
    },
};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

const SYSTEM: &str = "You are a benchmark agent. Answer briefly.";
const PROMPT: &str = "Say ok.";

fn quick() -> bool {
    std::env::var_os("AGENTRY_BENCH_QUICK").is_some()
}

/// The scripted server on `steps`, and the URL it prints.
fn scripted(dir: &Path, steps: serde_json::Value) -> (std::process::Child, String) {
    let script = dir.join(format!("script-{}.json", steps.to_string().len()));
    std::fs::write(&script, json!({ "steps": steps }).to_string()).unwrap();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/openai_script.py");
    let mut child = Command::new("python3")
        .arg(server)
        .arg("--script")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the scripted server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening ")
        .expect("listening line")
        .to_owned();
    (child, url)
}

fn executor(url: &str) -> ModelExecutor {
    ModelExecutor::new(
        ModelSettings {
            models: ModelsConfig {
                default: Some("bench/m".into()),
                providers: vec![Provider {
                    name: "bench".into(),
                    base_url: url.to_owned(),
                    api_key_env: None,
                    headers: Default::default(),
                }],
                aliases: Default::default(),
            },
            spawn_tool: "task".into(),
            ..ModelSettings::default()
        },
        Arc::new(HttpModel::new().unwrap()),
    )
}

fn job(i: usize) -> Job {
    let spec = WorkerSpec {
        worker_id: format!("wkr_{i:032x}"),
        depth: 1,
        prompt: PROMPT.into(),
        description: String::new(),
        workspace: None,
        agent: AgentSpec {
            name: "bench".into(),
            system_prompt: SYSTEM.into(),
            tools: Tools::Only(vec!["submit_result".into()]),
            tool_rules: Vec::new(),
            spawns: agentry::persona::Spawns::none(),
            model: Vec::new(),
            thinking_level: None,
            max_turns: None,
            permission_mode: None,
            output_schema: None,
            mcp_servers: None,
            remote: None,
        },
        memory_dir: None,
        a2a: None,
    };
    Job {
        worker_id: spec.worker_id.clone(),
        stdin: Vec::new(),
        env: Vec::new(),
        cwd: None,
        timeout: Duration::from_secs(120),
        kill_grace: Duration::from_secs(1),
        max_output_bytes: 1 << 20,
        assignment: Some(Arc::new(Assignment {
            spec,
            worker_token: "bench".into(),
            caller_scope: "anonymous".into(),
            inherited_model: Vec::new(),
            plan: false,
            at_max_depth: false,
            review: false,
            resume_from: None,
            interactive: false,
            mail: Default::default(),
            runner_resume: None,
            session_ref: Default::default(),
        })),
        meter: Meter::default(),
        stop_reason: Default::default(),
        rotated_token: Default::default(),
    }
}

/// The body the executor sends for a one-turn worker: the same for the bare client.
fn body() -> serde_json::Value {
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "submit_result",
            "description": "Finish the task: submit the final result. Call it once, when the work is done.",
            "parameters": {"type": "object", "properties": {"result": {"type": "string", "description": "The final answer."}}, "required": ["result"]}}}],
    })
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:7.3} ms", d.as_secs_f64() * 1e3)
}

/// One-turn workers through the executor, interleaved with bare requests.
async fn turns(url: &str, runs: usize) -> (Duration, Duration) {
    let ex = executor(url);
    let http = reqwest::Client::new();
    let endpoint = format!("{url}/chat/completions");
    let body = body();
    let (mut through, mut bare) = (Vec::new(), Vec::new());
    for i in 0..runs + 20 {
        let (started, _) = oneshot::channel();
        let t = Instant::now();
        let out = ex.run(job(i), CancellationToken::new(), started).await;
        let took = t.elapsed();
        assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");

        let t = Instant::now();
        let resp = http.post(&endpoint).json(&body).send().await.unwrap();
        assert!(resp.status().is_success());
        let mut stream = resp.bytes_stream();
        let mut bytes = 0;
        while let Some(chunk) = stream.next().await {
            bytes += chunk.unwrap().len();
        }
        assert!(bytes > 0);
        let bare_took = t.elapsed();
        if i >= 20 {
            through.push(took);
            bare.push(bare_took);
        }
    }
    (p50(through), p50(bare))
}

/// MCP calls through the executor's session, interleaved with bare JSON-RPC lines to a second
/// instance of the same server.
async fn mcp_calls(program: &str, runs: usize) -> (Duration, Duration) {
    let server = McpServer {
        command: vec![program.to_owned(), "--local-timezone".into(), "UTC".into()],
        ..McpServer::default()
    };
    let (session, tools) = mcp::start("time", &server, "", 8 << 20, true)
        .await
        .expect("mcp-server-time starts");
    assert!(tools.iter().any(|t| t.name == "get_current_time"));

    let mut bare = Command::new(program)
        .args(["--local-timezone", "UTC"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = bare.stdin.take().unwrap();
    let mut stdout = BufReader::new(bare.stdout.take().unwrap());
    let mut rpc = |msg: serde_json::Value, answer: bool| -> String {
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        if answer {
            stdout.read_line(&mut line).unwrap();
        }
        line
    };
    rpc(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}),
        true,
    );
    rpc(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    );

    let args = json!({"timezone": "UTC"});
    let (mut through, mut floor) = (Vec::new(), Vec::new());
    for i in 0..runs + 20 {
        let t = Instant::now();
        let r = session
            .call("get_current_time", Some(args.clone()))
            .await
            .unwrap();
        let took = t.elapsed();
        assert!(!r.is_error && r.text.contains("UTC"), "{r:?}");

        let t = Instant::now();
        let line = rpc(
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "get_current_time", "arguments": args}}),
            true,
        );
        let floor_took = t.elapsed();
        assert!(line.contains("UTC"), "{line}");
        if i >= 20 {
            through.push(took);
            floor.push(floor_took);
        }
    }
    session.close().await;
    let _ = bare.kill();
    let _ = bare.wait();
    (p50(through), p50(floor))
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// RSS per running worker that waits on a model which has not answered.
async fn idle_memory(url: &str, workers: usize) -> (f64, usize) {
    let ex = Arc::new(executor(url));
    // Warm the client pool and the allocator with a few runs first.
    let cancel = CancellationToken::new();
    let before = rss_bytes();
    let mut runs = Vec::with_capacity(workers);
    for i in 0..workers {
        let (started, _) = oneshot::channel();
        runs.push(tokio::spawn(ex.run(job(i), cancel.child_token(), started)));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss_bytes();
    cancel.cancel();
    for r in runs {
        assert_eq!(r.await.unwrap(), Outcome::Killed);
    }
    let history = SYSTEM.len() + PROMPT.len() + 64;
    (
        after.saturating_sub(before) as f64 / workers as f64,
        history,
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let dir = tempfile::tempdir().unwrap();
    let (runs, workers) = if quick() { (30, 50) } else { (400, 500) };

    let (mut answering, url) = scripted(
        dir.path(),
        json!([{"tool_calls": [{"name": "submit_result", "arguments": {"result": "ok"}}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}, "repeat": true}]),
    );
    let (through, bare) = runtime.block_on(turns(&url, runs));
    println!("model turn (one-turn worker), p50 of {runs}");
    println!("  ModelExecutor::run           {}", ms(through));
    println!("  bare reqwest, same body      {}   (floor)", ms(bare));
    let extra = through.as_secs_f64() * 1e3 - bare.as_secs_f64() * 1e3;
    println!(
        "  executor's own cost          {extra:+7.3} ms   target ≤ +1 ms: {}",
        if extra <= 1.0 { "met" } else { "NOT MET" }
    );
    let _ = answering.kill();
    let _ = answering.wait();

    match std::env::var("AGENTRY_TEST_MCP_TIME") {
        Ok(program) if !program.is_empty() => {
            let (through, bare) = runtime.block_on(mcp_calls(&program, runs));
            println!("MCP tool call (mcp-server-time get_current_time over stdio), p50 of {runs}");
            println!("  executor session (rmcp)      {}", ms(through));
            println!("  bare JSON-RPC line           {}   (floor)", ms(bare));
            let extra = through.as_secs_f64() * 1e3 - bare.as_secs_f64() * 1e3;
            println!(
                "  executor's own cost          {extra:+7.3} ms   target ≤ +0.5 ms: {}",
                if extra <= 0.5 { "met" } else { "NOT MET" }
            );
        }
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "AGENTRY_TEST_MCP_TIME is not set under CI=true: .ci/run installs mcp-server-time"
            )
        }
        _ => println!("MCP tool call: skipped (AGENTRY_TEST_MCP_TIME is not set)"),
    }

    let (mut stalled, url) = scripted(
        dir.path(),
        json!([{"content": "...", "stall_after": 1, "stall_ms": 60000, "repeat": true}]),
    );
    let (per_worker, history) = runtime.block_on(idle_memory(&url, workers));
    let beyond = per_worker - history as f64;
    println!("idle running model workers: {workers}, each waiting on an unanswered stream");
    println!(
        "  RSS per worker               {:7.1} KB ({:.1} KB beyond its {history}-byte history)   target ≤ 64 KB: {}",
        per_worker / 1024.0,
        beyond / 1024.0,
        if beyond <= 64.0 * 1024.0 {
            "met"
        } else {
            "NOT MET"
        }
    );
    let _ = stalled.kill();
    let _ = stalled.wait();
}
