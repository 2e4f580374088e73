//! Conversations (docs §12), measured:
//!
//! 1. a follow-up turn on a finished model worker (`SendWorkerMessage(wait)`, which continues it
//!    from its transcript) beside a fresh `SpawnWorker(wait)` with the same prompt, through a
//!    real server and the scripted OpenAI-compatible server, interleaved, p50; target: the
//!    follow-up's overhead ≤ +1 ms;
//! 2. the transcript write of one turn (bytes and time, p50), on SQLite and — with
//!    `AGENTRY_TEST_POSTGRES_URL` — on PostgreSQL;
//! 3. the memory of an idle `input_required` worker: RSS of this process (server and client)
//!    per waiting worker; target ≤ 16 KB (it holds no task).
//!
//! Run with `cargo bench --bench conversations` (`AGENTRY_BENCH_QUICK=1` for fewer rounds).

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use agentry::{
    config::{Config, ExecutorKind, ModelsConfig, Provider, StoreConfig},
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
    workers::{
        model::{SpawnSpec, WorkerId, WorkerRecord},
        store::{PostgresStore, ReplicaSettings, SqliteStore, WorkerStore, testdb::TestDb},
    },
};
use serde_json::json;

fn quick() -> bool {
    std::env::var_os("AGENTRY_BENCH_QUICK").is_some()
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:8.3} ms", d.as_secs_f64() * 1e3)
}

/// The scripted OpenAI-compatible server on `steps`: the process and its base URL.
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

/// A server on the model executor against `url`, in `dir`; its client.
async fn server(dir: &Path, url: &str) -> AgentRegistryServiceClient<tonic::transport::Channel> {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cfg = Config {
        home: Some(home),
        store: StoreConfig {
            path: Some(dir.join("state/agentry.db")),
            url: None,
        },
        ..Config::default()
    };
    cfg.executor.kind = ExecutorKind::Model;
    cfg.models = ModelsConfig {
        default: Some("bench/m".into()),
        providers: vec![Provider {
            name: "bench".into(),
            base_url: url.to_owned(),
            api_key_env: None,
            headers: Default::default(),
        }],
        aliases: Default::default(),
    };
    cfg.limits.max_running = 1024;
    cfg.limits.max_pending = 4096;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(agentry::grpc::run(cfg, listener, std::future::pending()));
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    AgentRegistryServiceClient::new(channel)
}

fn spawn_req(prompt: &str, interactive: bool) -> pb::SpawnWorkerRequest {
    pb::SpawnWorkerRequest {
        agent: "quick_task".into(),
        prompt: prompt.into(),
        wait: true,
        interactive,
        ..Default::default()
    }
}

/// Row 1: p50 of a fresh spawn and of a follow-up on a finished worker, interleaved.
async fn follow_ups(url: &str, dir: &Path, rounds: usize) -> (Duration, Duration) {
    let mut c = server(dir, url).await;
    let mut bases = Vec::with_capacity(rounds + 10);
    for i in 0..rounds + 10 {
        let w = c
            .spawn_worker(spawn_req(&format!("base brief {i}"), false))
            .await
            .unwrap()
            .into_inner()
            .worker
            .unwrap();
        assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
        bases.push(w.id);
    }
    let (mut fresh, mut follow) = (Vec::new(), Vec::new());
    for (i, base) in bases.into_iter().enumerate() {
        let text = format!("the question {i}");
        let t = Instant::now();
        let w = c
            .spawn_worker(spawn_req(&text, false))
            .await
            .unwrap()
            .into_inner()
            .worker
            .unwrap();
        let spawned = t.elapsed();
        assert_eq!(w.state, pb::WorkerState::Completed as i32);
        let t = Instant::now();
        let sent = c
            .send_worker_message(pb::SendWorkerMessageRequest {
                worker_id: base,
                text,
                wait: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let followed = t.elapsed();
        assert!(sent.continued);
        assert_eq!(
            sent.worker.unwrap().state,
            pb::WorkerState::Completed as i32
        );
        // The first rounds warm both paths.
        if i >= 10 {
            fresh.push(spawned);
            follow.push(followed);
        }
    }
    (p50(fresh), p50(follow))
}

/// One turn's transcript entries as the loop writes them: the assistant's answer with a tool
/// call and the tool's reply (about 2 KB).
fn turn_entries(i: usize) -> Vec<String> {
    let assistant = json!({"role": "assistant", "content": format!("Reading the file for step {i}."),
        "tool_calls": [{"id": format!("call_{i}"), "type": "function",
            "function": {"name": "mcp__fs__read_file", "arguments": "{\"path\": \"src/config.rs\"}"}}]});
    let tool = json!({"role": "tool", "tool_call_id": format!("call_{i}"),
        "content": "pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {\n".repeat(28)});
    vec![assistant.to_string(), tool.to_string()]
}

fn record() -> WorkerRecord {
    let eff: agentry::resolve::Effective = serde_json::from_value(json!({
        "name": "explore", "system_prompt": "", "tools": {"all_except": []}, "spawns": "",
        "model": [], "thinking_level": null, "max_turns": null, "permission_mode": null,
        "output_schema": null, "output_schema_source": null, "mode": "default", "depth": 1,
        "at_max_depth": false
    }))
    .expect("an effective agent");
    WorkerRecord::new(
        WorkerId::generate(),
        Arc::new(SpawnSpec {
            agent: "explore".into(),
            description: String::new(),
            prompt: "bench".into(),
            workspace: None,
            parent_id: None,
            depth: 1,
            caller_scope: "anonymous".into(),
            request_id: None,
            continues: None,
            context_id: None,
            a2a_message: None,
            effective: eff,
            create_time_ms: 1_700_000_000_000,
        }),
        None,
    )
}

/// Row 2: p50 of one turn's transcript write, and its bytes.
async fn transcript_writes(store: &dyn WorkerStore, turns: usize) -> (Duration, usize) {
    let rec = record();
    store.create(&rec).await.unwrap();
    let mut took = Vec::with_capacity(turns);
    let mut bytes = 0;
    for i in 0..turns {
        let entries = turn_entries(i);
        bytes = entries.iter().map(String::len).sum();
        let t = Instant::now();
        store
            .append_transcript(&rec.id, u32::try_from(2 * i).unwrap(), &entries)
            .await
            .unwrap();
        took.push(t.elapsed());
    }
    assert_eq!(store.transcript(&rec.id).await.unwrap().len(), 2 * turns);
    (p50(took), bytes)
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

/// Row 3: RSS per worker waiting in `input_required`.
async fn waiting_memory(url: &str, dir: &Path, workers: usize) -> f64 {
    let c = server(dir, url).await;
    let ask = |c: AgentRegistryServiceClient<tonic::transport::Channel>, i: usize| async move {
        let mut c = c;
        let w = c
            .spawn_worker(spawn_req(&format!("ask me {i}"), true))
            .await
            .unwrap()
            .into_inner()
            .worker
            .unwrap();
        assert_eq!(w.state, pb::WorkerState::InputRequired as i32, "{w:?}");
    };
    // Warm the allocator, the pools and the caches.
    for i in 0..50 {
        ask(c.clone(), i).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_bytes();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..workers {
        set.spawn(ask(c.clone(), 1_000 + i));
        if set.len() >= 32 {
            set.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_bytes();
    after.saturating_sub(before) as f64 / workers as f64
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (rounds, turns, workers) = if quick() {
        (30, 50, 200)
    } else {
        (300, 500, 2000)
    };

    let (mut answering, url) = scripted(
        dir.path(),
        json!([{"content": "ok", "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}, "repeat": true}]),
    );
    let (fresh, follow) = runtime.block_on(follow_ups(&url, &dir.path().join("a"), rounds));
    println!("a follow-up turn on a finished model worker, p50 of {rounds} interleaved");
    println!(
        "  SpawnWorker(wait), fresh            {}   (floor)",
        ms(fresh)
    );
    println!("  SendWorkerMessage(wait), continued  {}", ms(follow));
    let extra = follow.as_secs_f64() * 1e3 - fresh.as_secs_f64() * 1e3;
    println!(
        "  the follow-up's overhead            {extra:+7.3} ms   target ≤ +1 ms: {}",
        if extra <= 1.0 { "met" } else { "NOT MET" }
    );
    let _ = answering.kill();
    let _ = answering.wait();

    let sqlite = SqliteStore::open(&dir.path().join("transcripts.db")).unwrap();
    let (took, bytes) = runtime.block_on(transcript_writes(&sqlite, turns));
    println!("transcript write of one turn (assistant + tool reply), p50 of {turns}");
    println!("  SQLite       {}   {bytes} bytes a turn", ms(took));
    let pg = runtime.block_on(async {
        let db = TestDb::create().await?;
        let store = PostgresStore::open(
            &db.url,
            ReplicaSettings {
                name: "bench".into(),
                lease: Duration::from_secs(60),
                commit_window: Duration::ZERO,
            },
        )
        .await
        .unwrap();
        let r = transcript_writes(&store, turns).await;
        drop(store);
        drop(db);
        Some(r)
    });
    match pg {
        Some((took, bytes)) => println!("  PostgreSQL   {}   {bytes} bytes a turn", ms(took)),
        None => println!("  PostgreSQL   skipped (AGENTRY_TEST_POSTGRES_URL is not set)"),
    }

    let (mut asking, url) = scripted(
        dir.path(),
        json!([{"tool_calls": [{"name": "ask_caller", "arguments": {"question": "Which branch do I merge into?"}}], "repeat": true}]),
    );
    let per = runtime.block_on(waiting_memory(&url, &dir.path().join("b"), workers));
    println!("idle input_required workers: {workers}, each waiting for an answer");
    println!(
        "  RSS per worker                      {:7.1} KB   target ≤ 16 KB: {}",
        per / 1024.0,
        if per <= 16.0 * 1024.0 {
            "met"
        } else {
            "NOT MET"
        }
    );
    let _ = asking.kill();
    let _ = asking.wait();
}
