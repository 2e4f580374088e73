//! A2A (docs/a2a.md §13), measured through a real server's HTTP listener and its gRPC port:
//!
//! 1. a blocking `SendMessage` (JSON-RPC, A2A 1.0) of a trivial model agent beside a
//!    `SpawnWorker(wait)` of the same agent through gRPC, interleaved, p50; target: the A2A
//!    overhead ≤ +1 ms;
//! 2. the first event of a `SendStreamingMessage` stream: from sending the request to the first
//!    SSE event (the task), p50;
//! 3. an agent card (`GET /a2a/{agent}/.well-known/agent-card.json`) beside the same bytes as a
//!    static reply of the same HTTP stack (axum, `TCP_NODELAY`) on another port, interleaved,
//!    p50; target: the card ≥ 0.8× the static reply's rate.
//!
//! The client is in this process (reqwest over keep-alive HTTP/1.1, tonic over HTTP/2), the
//! model is the scripted OpenAI-compatible server. Run with `cargo bench --bench a2a`
//! (`AGENTRY_BENCH_QUICK=1` for fewer rounds).

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use agentry::{
    config::{Config, ExecutorKind, ModelsConfig, Provider, StoreConfig},
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:8.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let rounds = if std::env::var_os("AGENTRY_BENCH_QUICK").is_some() {
        30
    } else {
        300
    };
    let dir = tempfile::tempdir().unwrap();
    let steps = json!({"steps": [{"content": "ok", "repeat": true}]});
    let script = dir.path().join("script.json");
    std::fs::write(&script, steps.to_string()).unwrap();
    let mut model = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/openai_script.py"))
        .arg("--script")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the scripted server");
    let mut line = String::new();
    BufReader::new(model.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("listening ").unwrap().to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(dir.path(), &url, rounds));
    let _ = model.kill();
    let _ = model.wait();
}

async fn run(dir: &Path, url: &str, rounds: usize) {
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
    // The system picks the HTTP port; the service says which once it is up.
    cfg.http.listen = Some("127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (up_tx, up_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(agentry::grpc::run_announced(
        cfg,
        listener,
        std::future::pending(),
        move |_, http| {
            let _ = up_tx.send(http);
        },
    ));
    let http_addr = up_rx
        .await
        .expect("the service came up")
        .expect("the HTTP listener");
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = AgentRegistryServiceClient::new(channel);
    let http = reqwest::Client::new();
    let base = format!("http://{http_addr}/a2a/quick_task");
    let card_url = format!("{base}/.well-known/agent-card.json");
    let send = |id: String, method: &'static str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
            "messageId": id, "role": "ROLE_USER", "parts": [{"text": format!("a trivial brief {id}")}]}}})
    };

    // Row 1, interleaved after a warm-up.
    let (mut spawned, mut sent) = (Vec::new(), Vec::new());
    for i in 0..rounds + 10 {
        let t = Instant::now();
        let w = grpc
            .spawn_worker(pb::SpawnWorkerRequest {
                agent: "quick_task".into(),
                // Distinct briefs: an identical dispatch would be a dedupe hit (docs §6.7).
                prompt: format!("a trivial brief {i}"),
                wait: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .worker
            .unwrap();
        let g = t.elapsed();
        assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
        let t = Instant::now();
        let r: Value = http
            .post(&base)
            .header("A2A-Version", "1.0")
            .json(&send(format!("b-{i}"), "SendMessage"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let a = t.elapsed();
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{r}"
        );
        if i >= 10 {
            spawned.push(g);
            sent.push(a);
        }
    }
    let (g, a) = (p50(spawned), p50(sent));
    println!("a trivial model agent to its end, p50 of {rounds} interleaved");
    println!("  SpawnWorker(wait), gRPC           {}   (floor)", ms(g));
    println!("  SendMessage (JSON-RPC, blocking)  {}", ms(a));
    let extra = a.as_secs_f64() * 1e3 - g.as_secs_f64() * 1e3;
    println!(
        "  A2A's overhead                    {extra:+7.3} ms   target ≤ +1 ms: {}",
        if extra <= 1.0 { "met" } else { "NOT MET" }
    );

    // Row 2.
    let mut first = Vec::new();
    for i in 0..rounds {
        let t = Instant::now();
        let resp = http
            .post(&base)
            .header("A2A-Version", "1.0")
            .json(&send(format!("s-{i}"), "SendStreamingMessage"))
            .send()
            .await
            .unwrap();
        let mut body = resp.bytes_stream();
        let chunk = body.next().await.unwrap().unwrap();
        first.push(t.elapsed());
        assert!(chunk.starts_with(b"data: "), "{chunk:?}");
        while body.next().await.is_some() {}
    }
    println!("the first event of SendStreamingMessage, p50 of {rounds}");
    println!("  request sent → task event         {}", ms(p50(first)));

    // Row 3: the card beside the same bytes served statically by the same stack.
    let card_bytes = http
        .get(&card_url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let static_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let static_url = format!("http://{}/card", static_listener.local_addr().unwrap());
    let body = card_bytes.clone();
    let app = axum::Router::new().route(
        "/card",
        axum::routing::get(move || {
            let body = body.clone();
            async move { ([("content-type", "application/json")], body) }
        }),
    );
    tokio::spawn(async move {
        use axum::serve::ListenerExt;
        let l = static_listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(l, app).await
    });
    let n = rounds * 10;
    let (mut cards, mut statics) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + 100 {
        for (url, into) in [(&card_url, &mut cards), (&static_url, &mut statics)] {
            let t = Instant::now();
            let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
            if i >= 100 {
                into.push(t.elapsed());
            }
            assert_eq!(body.len(), card_bytes.len());
        }
    }
    let (card, floor) = (p50(cards), p50(statics));
    let ratio = floor.as_secs_f64() / card.as_secs_f64();
    println!(
        "an agent card ({} bytes), p50 of {n} interleaved on keep-alive connections",
        card_bytes.len()
    );
    println!("  the same bytes, static           {}   (floor)", ms(floor));
    println!("  GET …/.well-known/agent-card.json {}", ms(card));
    println!(
        "  the card's rate vs the floor's    {ratio:7.2}×      target ≥ 0.8×: {}",
        if ratio >= 0.8 { "met" } else { "NOT MET" }
    );
}
