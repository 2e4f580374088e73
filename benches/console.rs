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
//! 3 bursts; `AGENTRY_BENCH_STREAMS=N` for another number of consoles). The browser part needs `AGENTRY_TEST_CHROMEDRIVER` (chromedriver's path) and says
//! so when it is not set.

#[path = "../tests/support/browser.rs"]
mod browser;
#[path = "support/missing.rs"]
mod missing;

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
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
    let mut size = size;
    if let Some(n) = std::env::var("AGENTRY_BENCH_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        size.streams = n;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&size));
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
        let config = dir.path().join("agentry.yaml");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:0\nhome: {home}\nstore: {{path: {db}}}\n\
                 http: {{listen: '127.0.0.1:0'}}\nexecutor: {{kind: runner}}\n\
                 runners: {{accept_timeout: 60s}}\n\
                 limits: {{max_running: 4000, max_pending: 4000}}\n",
                home = dir.path().join("home").display(),
                db = dir.path().join("agentry.db").display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("agentry.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            // Freed pages go back to the kernel at once, so the resident set follows what is
            // held rather than what the allocator keeps for later.
            .env("MIMALLOC_PURGE_DELAY", "0")
            .args(["serve", "--print-addr", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("the agentry binary starts");
        // Both ports are the system's choice; `--print-addr` says which once it is up.
        let (grpc_addr, http_addr) = {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
            let mut next = |prefix: &str| {
                let line = lines.next().and_then(Result::ok).unwrap_or_else(|| {
                    panic!("agentry exited before it said where it listens (see its log)")
                });
                line.strip_prefix(prefix)
                    .unwrap_or_else(|| panic!("expected {prefix:?}, read {line:?}"))
                    .to_owned()
            };
            (next("listening "), next("http listening "))
        };
        // Printed once it is up: the first connection is accepted.
        let channel = Channel::from_shared(format!("http://{grpc_addr}"))
            .unwrap()
            .connect()
            .await
            .expect("agentry accepts on the address it printed");
        let mut s = Server {
            child,
            grpc: AgentRegistryServiceClient::new(channel),
            base: format!("http://{http_addr}"),
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

/// What [`growth`] opens.
#[derive(Clone, Copy)]
enum Stream {
    Watch,
    Tree,
    Catalog,
}

/// Per stream of `n` open streams of `kind`, each having received its first event, on a fresh
/// server holding `workers` workers (one stream first and closed, so what every stream shares
/// is not counted per stream): the resident-set growth while they are open, and what closing
/// them gives back (the growth also holds what the allocator kept of transient buffers, such as
/// a snapshot's text; what closing frees is what the streams themselves held).
async fn growth(kind: Stream, n: usize, workers: usize) -> (f64, f64) {
    let s = Server::start(workers).await;
    let ids = s.pending().await;
    let open = |i: usize| {
        let (mut grpc, base, id) = (s.grpc.clone(), s.base.clone(), ids[i % ids.len()].clone());
        async move {
            match kind {
                Stream::Watch => {
                    let mut st = grpc
                        .watch_worker(pb::WatchWorkerRequest {
                            worker_id: id,
                            after_sequence: 0,
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    st.message().await.unwrap().expect("the snapshot event");
                    Box::new(st) as Box<dyn Send>
                }
                Stream::Tree | Stream::Catalog => {
                    let path = if matches!(kind, Stream::Tree) {
                        "tree"
                    } else {
                        "agents"
                    };
                    // Each on its own connection, as each browser has.
                    let mut r = reqwest::Client::new()
                        .get(format!("{base}/console/api/{path}"))
                        .send()
                        .await
                        .unwrap();
                    first_event(&mut r).await;
                    Box::new(r) as Box<dyn Send>
                }
            }
        }
    };
    drop(open(0).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = s.rss_kib();
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        held.push(open(i).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = s.rss_kib();
    drop(held);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let closed = s.rss_kib();
    let per = |kib: u64| kib as f64 / n as f64;
    (
        per(after.saturating_sub(before)),
        per(after.saturating_sub(closed)),
    )
}

async fn run(size: &Size) {
    println!(
        "console benchmark: {} workers, {} streams, {} bursts of {}",
        size.workers, size.streams, size.bursts, size.burst
    );

    // 1. Memory: each kind of stream on a server process of its own, holding the same workers.
    let watch = growth(Stream::Watch, size.workers, size.workers).await;
    let tree = growth(Stream::Tree, size.streams, size.workers).await;
    let catalog = growth(Stream::Catalog, size.streams, size.workers).await;
    println!(
        "memory per open stream, {} workers held: the server's resident-set growth while open / freed when closed",
        size.workers
    );
    let row = |what: String, (grown, freed): (f64, f64)| {
        println!("  {what:<50} {grown:7.1} KiB / {freed:7.1} KiB");
    };
    row(
        format!(
            "WatchWorker stream (gRPC, {} on one connection)",
            size.workers
        ),
        watch,
    );
    row(
        format!("console tree stream ({} connections)", size.streams),
        tree,
    );
    row(
        format!("console catalog stream ({} connections)", size.streams),
        catalog,
    );
    row(
        "one console (tree + catalog)".into(),
        (tree.0 + catalog.0, tree.1 + catalog.1),
    );
    println!(
        "  a console holds {:.1}× a WatchWorker stream (freed when closed)",
        (tree.1 + catalog.1) / watch.1.max(0.1)
    );

    // 2. The page, on a server of its own.
    let s = Server::start(size.workers).await;
    let Ok(driver) = std::env::var("AGENTRY_TEST_CHROMEDRIVER") else {
        missing::missing("the browser rows need AGENTRY_TEST_CHROMEDRIVER (chromedriver's path)");
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
