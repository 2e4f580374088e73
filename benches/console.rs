//! The console (docs/console.md §14), measured against the `agentry` binary as a separate
//! process (its memory read from `/proc`), with the browser a separate process too:
//!
//! 1. memory per open console (its two streams: the tree and the catalog) beside memory per open
//!    `WatchWorker` stream: 100 of each, each on its own server process holding the same 1,000
//!    workers, the resident-set growth divided by 100;
//! 2. in headless Chromium (through chromedriver): the page's first render of a 1,000-worker
//!    tree, then bursts of 100 workers stopped at once through gRPC — the time from a burst's
//!    message reaching the page to the frame after its DOM work (the page records it); target:
//!    ≤ 100 ms per burst.
//!
//! Run with `cargo bench --bench console` (`AGENTRY_BENCH_QUICK=1`: 100 workers, 10 streams,
//! 3 bursts). The browser part needs `AGENTRY_TEST_CHROMEDRIVER` (chromedriver's path) and says
//! so when it is not set.

#[path = "../tests/support/browser.rs"]
mod browser;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use agentry::grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient};
use serde_json::json;
use tonic::transport::Channel;

/// How big the run is.
struct Size {
    workers: usize,
    streams: usize,
    bursts: usize,
    burst: usize,
}

fn main() {
    let size = if std::env::var_os("AGENTRY_BENCH_QUICK").is_some() {
        Size {
            workers: 100,
            streams: 10,
            bursts: 3,
            burst: 20,
        }
    } else {
        Size {
            workers: 1000,
            streams: 100,
            bursts: 10,
            burst: 100,
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&size));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `agentry serve` process with runner-backed workers (no runner connects: they stay
/// pending) and the HTTP listener on loopback without authentication.
struct Server {
    child: Child,
    grpc: AgentRegistryServiceClient<Channel>,
    base: String,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(workers: usize) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let (grpc_port, http_port) = (free_port(), free_port());
        let config = dir.path().join("agentry.yaml");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{grpc_port}\nhome: {home}\nstore: {{path: {db}}}\n\
                 http: {{listen: '127.0.0.1:{http_port}'}}\nexecutor: {{kind: runner}}\n\
                 runners: {{accept_timeout: 60s}}\n\
                 limits: {{max_running: 4000, max_pending: 4000}}\n",
                home = dir.path().join("home").display(),
                db = dir.path().join("agentry.db").display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("agentry.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the agentry binary starts");
        let url = format!("http://127.0.0.1:{grpc_port}");
        let started = Instant::now();
        let channel = loop {
            match Channel::from_shared(url.clone()).unwrap().connect().await {
                Ok(c) => break c,
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("agentry did not listen on {url}: {e}"),
            }
        };
        let mut s = Server {
            child,
            grpc: AgentRegistryServiceClient::new(channel),
            base: format!("http://127.0.0.1:{http_port}"),
            _dir: dir,
        };
        s.spawn(workers).await;
        s
    }

    /// `n` background workers with distinct briefs (identical ones would be dedupe hits).
    async fn spawn(&mut self, n: usize) {
        let mut calls = Vec::new();
        for i in 0..n {
            let mut c = self.grpc.clone();
            calls.push(async move {
                c.spawn_worker(pb::SpawnWorkerRequest {
                    agent: "task".into(),
                    description: format!("job {i}"),
                    prompt: format!("work item {i}"),
                    ..Default::default()
                })
                .await
                .unwrap()
            });
            if calls.len() == 32 {
                futures_util::future::join_all(calls.drain(..)).await;
            }
        }
        futures_util::future::join_all(calls).await;
    }

    /// The ids of its pending workers.
    async fn pending(&self) -> Vec<String> {
        let mut ids = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .grpc
                .clone()
                .list_workers(pb::ListWorkersRequest {
                    states: vec![pb::WorkerState::Pending as i32],
                    page_size: 1000,
                    page_token: token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            ids.extend(page.workers.into_iter().map(|w| w.id));
            if page.next_page_token.is_empty() {
                return ids;
            }
            token = page.next_page_token;
        }
    }

    /// Its resident set, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads an SSE response until its first named event has arrived whole.
async fn first_event(resp: &mut reqwest::Response) {
    let mut seen = String::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if seen.contains("event:") && seen.contains("\n\n") {
            return;
        }
    }
    panic!("the stream ended before its first event");
}

async fn run(size: &Size) {
    println!(
        "console benchmark: {} workers, {} streams, {} bursts of {}",
        size.workers, size.streams, size.bursts, size.burst
    );

    // 1. WatchWorker streams, on a server of their own.
    let watch_kib = {
        let s = Server::start(size.workers).await;
        let ids = s.pending().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = s.rss_kib();
        let mut streams = Vec::new();
        for id in ids.iter().take(size.streams) {
            let mut st = s
                .grpc
                .clone()
                .watch_worker(pb::WatchWorkerRequest {
                    worker_id: id.clone(),
                    after_sequence: 0,
                })
                .await
                .unwrap()
                .into_inner();
            st.message().await.unwrap().expect("the snapshot event");
            streams.push(st);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = s.rss_kib();
        drop(streams);
        (after.saturating_sub(before)) as f64 / size.streams as f64
    };

    // 2. Consoles (tree + catalog streams, each on its own connection as a browser's).
    let s = Server::start(size.workers).await;
    let console_kib = {
        let http = reqwest::Client::new();
        // One console first, so what every console shares (the page's first catalog, the
        // listener's lazies) is not counted per console.
        let mut warm = http
            .get(format!("{}/console/api/tree", s.base))
            .send()
            .await
            .unwrap();
        first_event(&mut warm).await;
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = s.rss_kib();
        let mut streams = Vec::new();
        for _ in 0..size.streams {
            for path in ["tree", "agents"] {
                let mut r = reqwest::Client::new()
                    .get(format!("{}/console/api/{path}", s.base))
                    .send()
                    .await
                    .unwrap();
                first_event(&mut r).await;
                streams.push(r);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = s.rss_kib();
        drop(streams);
        (after.saturating_sub(before)) as f64 / size.streams as f64
    };
    println!(
        "memory per open stream, {} open, the server's resident set growth / {}",
        size.streams, size.streams
    );
    println!("  WatchWorker stream (gRPC)        {watch_kib:8.1} KiB   (floor)");
    println!(
        "  console (tree + catalog streams) {console_kib:8.1} KiB   {:.1}× a watch",
        console_kib / watch_kib.max(0.1)
    );

    // 3. The page in headless Chromium.
    let Ok(driver) = std::env::var("AGENTRY_TEST_CHROMEDRIVER") else {
        println!(
            "the browser rows are skipped: AGENTRY_TEST_CHROMEDRIVER (chromedriver's path) is not set"
        );
        return;
    };
    let chromium =
        std::env::var("AGENTRY_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let b = browser::Browser::start(&driver, &chromium).await;
    b.goto(&format!("{}/console", s.base)).await;
    let rows = format!(
        "return document.querySelectorAll('[data-worker-id]').length === {} && window.agentryConsole.renders.length > 0",
        size.workers
    );
    b.until("the whole tree", Duration::from_secs(30), &rows)
        .await;
    let first = b
        .js("return window.agentryConsole.renders[0]", json!([]))
        .await
        .as_f64()
        .unwrap();
    let mut ids = s.pending().await;
    let mut bursts = Vec::new();
    for round in 0..size.bursts {
        let renders_before = b
            .js("return window.agentryConsole.renders.length", json!([]))
            .await
            .as_u64()
            .unwrap();
        let batch: Vec<String> = ids.drain(..size.burst.min(ids.len())).collect();
        let calls = batch.iter().map(|id| {
            let mut c = s.grpc.clone();
            let id = id.clone();
            async move {
                c.stop_worker(pb::StopWorkerRequest {
                    worker_id: id,
                    reason: "benchmark burst".into(),
                })
                .await
                .unwrap()
            }
        });
        futures_util::future::join_all(calls).await;
        let killed = (round + 1) * size.burst;
        b.until(
            "the burst shown",
            Duration::from_secs(10),
            &format!(
                "return document.querySelectorAll('[data-state=\"killed\"]').length === {killed}"
            ),
        )
        .await;
        // The frame after the last message's DOM work has been recorded.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let times: Vec<f64> = serde_json::from_value(
            b.js(
                "return window.agentryConsole.renders.slice(arguments[0])",
                json!([renders_before]),
            )
            .await,
        )
        .unwrap();
        bursts.extend(times);
    }
    b.close().await;
    bursts.sort_by(f64::total_cmp);
    let p50 = bursts[bursts.len() / 2];
    let max = bursts[bursts.len() - 1];
    println!(
        "headless Chromium, a tree of {} workers (message received → the frame after its DOM work)",
        size.workers
    );
    println!("  first render of the whole tree   {first:8.1} ms");
    println!(
        "  a burst of {} stops: {} messages, p50 {p50:.1} ms, max {max:.1} ms   target ≤ 100 ms: {}",
        size.burst,
        bursts.len(),
        if max <= 100.0 { "met" } else { "MISSED" }
    );
}
