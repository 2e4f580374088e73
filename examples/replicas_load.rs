//! Replicas on one PostgreSQL database, beside SQLite on one replica (docs §9).
//!
//! `AGENTRY_TEST_POSTGRES_URL=postgres://… cargo run --release --example replicas_load -- [--quick] [--runners]`
//! (`--runners`: only the runner rows; `--spawns`: only the background spawn rows.)
//!
//! Three set-ups, each on fresh state (a temp dir; for PostgreSQL a fresh database created and
//! dropped like the tests do), every server an `agentry::grpc::run` in this process on
//! 127.0.0.1:
//!
//! * `sqlite ×1` — the embedded default, the baseline;
//! * `postgres ×1` — one replica on PostgreSQL;
//! * `postgres ×2` — two replicas on the same database.
//!
//! For each:
//!
//! 1. **Background spawns/s**: 8 clients (own connection each, spread over the replicas) send
//!    `SpawnWorker{wait: false}` with unique prompts back to back for S seconds
//!    (`/bin/true` workers, large limits); accepted spawns per second, then the time until
//!    every row is closed.
//! 2. **Watch latency**: N workers `sleep 0.2`, one at a time, each spawned on the first
//!    replica and watched on the **last** one (so across replicas with two, locally with one):
//!    for every event after the snapshot, the delay from the event's server timestamp (taken
//!    just before its commit) to its arrival at the watching client; p50 and p99. All on one
//!    host, so the two clocks are the same clock.
//!
//! 3. **Runner dispatch** (PostgreSQL, `executor.kind: runner`): 8 clients send
//!    `SpawnWorker{wait: true}` to the first replica for S seconds, served by one in-process
//!    runner (8 slots) that accepts and completes each assignment at once — connected to the
//!    same replica (its hub serves it), and connected to the second replica of two (the worker
//!    goes through the store: published, claimed, relayed; docs/runners.md). Completed workers
//!    per second and the p50 of one spawn-to-completed call.
//!
//! Without `AGENTRY_TEST_POSTGRES_URL` only the SQLite rows are printed.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use agentry::{
    config::{Config, Limits, ReplicaConfig, StoreConfig},
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
    workers::store::testdb::TestDb,
};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

type Client = AgentRegistryServiceClient<Channel>;

#[path = "../benches/support/load.rs"]
mod load;
use load::{connect, instant_runner};

const CLIENTS: usize = 8;

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    async fn start(cfg: Config) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(agentry::grpc::run(cfg, listener, async move {
            let _ = rx.await;
        }));
        Self { addr, stop, handle }
    }

    async fn shutdown(self) {
        let _ = self.stop.send(());
        match tokio::time::timeout(Duration::from_secs(30), self.handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("agentry server failed: {e:#}"),
            Ok(Err(e)) => eprintln!("agentry server task failed: {e}"),
            Err(_) => eprintln!("agentry server did not stop within 30 s"),
        }
    }
}

fn config(root: &Path, name: &str, url: Option<&str>, command: &[&str]) -> Config {
    let home = root.join("home");
    std::fs::create_dir_all(&home).expect("home dir");
    let mut cfg = Config {
        home: Some(home),
        store: StoreConfig {
            path: url.is_none().then(|| root.join("state/agentry.db")),
            url: url.map(str::to_owned),
        },
        replica: ReplicaConfig {
            name: Some(name.to_owned()),
            lease: Duration::from_secs(15),
            ..ReplicaConfig::default()
        },
        limits: Limits {
            max_running: 64,
            max_pending: 1_000_000,
            ..Limits::default()
        },
        ..Config::default()
    };
    cfg.executor.command = command.iter().map(|s| (*s).to_owned()).collect();
    cfg
}

fn spawn_req(prompt: String) -> pb::SpawnWorkerRequest {
    pb::SpawnWorkerRequest {
        agent: "quick_task".to_owned(),
        description: "replicas_load".to_owned(),
        prompt,
        wait: false,
        ..Default::default()
    }
}

/// Starts `n` replicas on `url` (SQLite when `None`) running `command`.
async fn start(root: &Path, url: Option<&str>, n: usize, command: &[&str]) -> Vec<Running> {
    let mut servers = Vec::new();
    for i in 0..n {
        servers.push(Running::start(config(root, &format!("r{i}"), url, command)).await);
    }
    servers
}

async fn open_workers(c: &mut Client) -> usize {
    let r = c
        .list_workers(pb::ListWorkersRequest {
            states: vec![
                pb::WorkerState::Pending as i32,
                pb::WorkerState::Running as i32,
            ],
            page_size: 1000,
            ..Default::default()
        })
        .await
        .expect("list");
    r.into_inner().workers.len()
}

/// Accepted background spawns per second, and the drain time after.
async fn throughput(servers: &[Running], dur: Duration) -> (f64, Duration) {
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        clients.push(connect(servers[i % servers.len()].addr).await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let (mut accepted, mut failed) = (0usize, 0usize);
            let mut n = 0usize;
            while started.elapsed() < dur {
                let prompt = format!("throughput {i} {n}");
                n += 1;
                match c.spawn_worker(spawn_req(prompt)).await {
                    Ok(r) if r.get_ref().deduplicated => {
                        panic!("throughput {i} {n} was deduplicated")
                    }
                    Ok(_) => accepted += 1,
                    Err(e) => {
                        if failed == 0 {
                            eprintln!("spawn failed: {e}");
                        }
                        failed += 1;
                    }
                }
            }
            (accepted, failed)
        }));
    }
    let (mut accepted, mut failed) = (0, 0);
    for t in tasks {
        let (a, f) = t.await.expect("client task");
        accepted += a;
        failed += f;
    }
    if failed > 0 {
        eprintln!("background spawns: {failed} refused");
    }
    let elapsed = started.elapsed();
    let drain_start = Instant::now();
    let mut c = connect(servers[0].addr).await;
    while open_workers(&mut c).await > 0 && drain_start.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (
        accepted as f64 / elapsed.as_secs_f64(),
        drain_start.elapsed(),
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Delays (ms) from each event's server time to its arrival at a watcher on the last replica.
async fn watch_latency(servers: &[Running], workers: usize) -> Vec<i64> {
    let mut spawner = connect(servers[0].addr).await;
    let watcher = connect(servers[servers.len() - 1].addr).await;
    let mut delays = Vec::new();
    for i in 0..workers {
        let w = spawner
            .spawn_worker(spawn_req(format!("watch {i}")))
            .await
            .expect("spawn")
            .into_inner()
            .worker
            .expect("worker");
        let mut st = watcher
            .clone()
            .watch_worker(pb::WatchWorkerRequest {
                worker_id: w.id,
                after_sequence: 0,
            })
            .await
            .expect("watch")
            .into_inner();
        let mut first = true;
        while let Some(ev) = st.next().await {
            let ev = ev.expect("event");
            let arrived = now_ms();
            if !first && let Some(t) = ev.time {
                delays.push(arrived - (t.seconds * 1000 + i64::from(t.nanos) / 1_000_000));
            }
            first = false;
        }
    }
    delays
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return -1;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

struct Row {
    setup: String,
    spawns_per_s: f64,
    drain: Duration,
    p50: i64,
    p99: i64,
    samples: usize,
}

async fn measure(setup: &str, url: Option<&str>, n: usize, dur: Duration, workers: usize) -> Row {
    let root = tempfile::tempdir().expect("temp dir");
    let servers = start(root.path(), url, n, &["/bin/true"]).await;
    // On stderr, so a profiler can be started on this phase.
    eprintln!("measuring: {setup} background spawns");
    let (spawns_per_s, drain) = throughput(&servers, dur).await;
    for s in servers {
        s.shutdown().await;
    }
    let mut delays = Vec::new();
    if workers > 0 {
        let root = tempfile::tempdir().expect("temp dir");
        let servers = start(root.path(), url, n, &["/bin/sleep", "0.2"]).await;
        delays = watch_latency(&servers, workers).await;
        for s in servers {
            s.shutdown().await;
        }
    }
    delays.sort_unstable();
    Row {
        setup: setup.to_owned(),
        spawns_per_s,
        drain,
        p50: pct(&delays, 0.5),
        p99: pct(&delays, 0.99),
        samples: delays.len(),
    }
}

/// Completed runner workers per second through `servers[0]`, and the p50, p90 and mean of one
/// call (ms), with
/// the runner on `servers[runner_on]`.
async fn runner_dispatch(
    servers: &[Running],
    runner_on: usize,
    dur: Duration,
) -> (f64, f64, f64, f64) {
    let runner = instant_runner(servers[runner_on].addr, CLIENTS as u32).await;
    // Wait until the runner serves a first worker, so its session is in place.
    let mut probe = connect(servers[0].addr).await;
    let mut first = spawn_req("runner warm-up".to_owned());
    first.wait = true;
    probe.spawn_worker(first).await.expect("warm-up spawn");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let mut c = connect(servers[0].addr).await;
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let mut failed = 0usize;
            let mut n = 0usize;
            while started.elapsed() < dur {
                let mut r = spawn_req(format!("runner {i} {n}"));
                r.wait = true;
                let t = Instant::now();
                let answer = c.spawn_worker(r).await.map(tonic::Response::into_inner);
                // Only a new worker run to completion counts: a reused dispatch never reached
                // a runner.
                match answer {
                    Ok(a) if a.deduplicated => panic!("runner {i} {n} was deduplicated"),
                    Ok(a)
                        if a.worker
                            .as_ref()
                            .is_some_and(|w| w.state == pb::WorkerState::Completed as i32) =>
                    {
                        times.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    _ => failed += 1,
                }
                n += 1;
            }
            (times, failed)
        }));
    }
    let mut times = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (t, f) = t.await.expect("client task");
        times.extend(t);
        failed += f;
    }
    if failed > 0 {
        eprintln!("runner dispatch: {failed} calls did not complete a worker");
    }
    let per_s = times.len() as f64 / started.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    runner.abort();
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let at = |p: f64| {
        times
            .get(((times.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(-1.0)
    };
    (per_s, at(0.5), at(0.9), mean)
}

type RunnerRow = (String, (f64, f64, f64, f64));

/// Both set-ups, each on its own fresh database (so no dispatch of one is reused by the other).
async fn runner_rows(dur: Duration) -> [RunnerRow; 2] {
    let mut out = Vec::new();
    for (label, n, on) in [
        ("runner on the same replica (×1)", 1, 0),
        ("runner on the other replica (×2)", 2, 1),
    ] {
        let db = TestDb::create().await.expect("test database");
        let root = tempfile::tempdir().expect("temp dir");
        let mut servers = Vec::new();
        for i in 0..n {
            let mut cfg = config(root.path(), &format!("r{i}"), Some(&db.url), &["/bin/true"]);
            cfg.executor.kind = agentry::config::ExecutorKind::Runner;
            servers.push(Running::start(cfg).await);
        }
        for s in &servers {
            connect(s.addr).await;
        }
        let figures = runner_dispatch(&servers, on, dur).await;
        for s in servers {
            s.shutdown().await;
        }
        out.push((label.to_owned(), figures));
    }
    [out[0].clone(), out[1].clone()]
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // Only the runner rows (they need PostgreSQL).
    let runners_only = std::env::args().any(|a| a == "--runners");
    let dur = Duration::from_secs(if quick { 1 } else { 5 });
    // Only the background spawn rows (no watch latency, no runners).
    let spawns_only = std::env::args().any(|a| a == "--spawns");
    let workers = match (spawns_only, quick) {
        (true, _) => 0,
        (false, true) => 10,
        (false, false) => 100,
    };
    let mut rows = Vec::new();
    if !runners_only {
        rows.push(measure("sqlite ×1", None, 1, dur, workers).await);
    }
    let mut runner = None;
    match std::env::var("AGENTRY_TEST_POSTGRES_URL") {
        Ok(_) => {
            for n in [1, 2].into_iter().filter(|_| !runners_only) {
                let db = TestDb::create().await.expect("test database");
                rows.push(measure(&format!("postgres ×{n}"), Some(&db.url), n, dur, workers).await);
            }
            if !spawns_only {
                runner = Some(runner_rows(dur).await);
            }
        }
        Err(_) => println!("PostgreSQL rows skipped: AGENTRY_TEST_POSTGRES_URL is not set"),
    }
    println!(
        "{:<12} {:>14} {:>10} {:>16} {:>16} {:>8}",
        "setup", "spawns/s", "drain", "watch p50 (ms)", "watch p99 (ms)", "events"
    );
    for r in &rows {
        println!(
            "{:<12} {:>14.0} {:>9.1}s {:>16} {:>16} {:>8}",
            r.setup,
            r.spawns_per_s,
            r.drain.as_secs_f64(),
            r.p50,
            r.p99,
            r.samples
        );
    }
    println!(
        "watch latency is measured on the last replica for workers spawned on the first: across \
         replicas with ×2, locally otherwise"
    );
    if let Some([local, remote]) = runner {
        println!();
        println!(
            "{:<34} {:>12} {:>10} {:>10} {:>10}",
            "runner workers (postgres)", "completed/s", "p50 (ms)", "p90 (ms)", "mean (ms)"
        );
        for (label, (per_s, p50, p90, mean)) in [&local, &remote] {
            println!("{label:<34} {per_s:>12.0} {p50:>10.2} {p90:>10.2} {mean:>10.2}");
        }
        println!(
            "across replicas: {:.2}× the throughput and {:.2}× the mean call of a runner on the same replica (target: within 1.2×)",
            remote.1.0 / local.1.0,
            remote.1.3 / local.1.3
        );
    }
}
