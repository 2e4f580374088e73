//! Load against the real agentry server, next to a bare tonic "echo" server as the framework
//! floor.
//!
//! `cargo run --release --example load -- [--clients N] [--seconds S] [--workspace-roots]
//! [--echo-nagle]`
//!
//! Everything runs in this process, on 127.0.0.1 only:
//! - **agentry**: the real server (`agentry::grpc::run`) with a fake home of 200 personas and a
//!   workspace with 10 project personas, so a `ListAgents` page of 100 is real.
//! - **echo**: a second tonic server implementing the same generated `AgentRegistryService`
//!   whose handlers return a `.clone()` of a response captured once from the real server, so the
//!   bytes on the wire are identical and the only work left is tonic's. It accepts connections
//!   the way `Server::serve` does by default (`TCP_NODELAY` on); `--echo-nagle` makes it accept
//!   them the way `agentry::grpc::run` does today (a plain `TcpListenerStream`, Nagle on), which
//!   separates the cost of the socket option from the cost of agentry's own work.
//!
//! Each scenario (`ResolveAgent` of one name; `ListAgents` with `page_size: 100`) drives each
//! server with N client tasks, **each on its own HTTP/2 connection** (its own `Channel`), for S
//! seconds after an untimed warm-up, in five slices that alternate between the two servers.
//! Every request's latency is recorded (one `Vec` per client, merged). Clients and servers share
//! the machine's cores, the same way for both servers.
//!
//! The baseline is the echo server: target `ResolveAgent` ≥ 0.8× its throughput. `/proc/self/io`
//! read calls per request are compared between the two `ResolveAgent` phases: the difference is
//! what agentry reads per request beyond the socket (should be ~0: the snapshot is cached).
//! Before the load, a direct check asks a watching `Registry` for the same snapshot three times,
//! 300 ms apart, and says whether it was reused or rebuilt.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use agentry::{
    config::Config,
    discovery::{Registry, Snapshot},
    grpc::{
        SERVICE_NAME,
        pb::{
            self,
            agent_registry_service_client::AgentRegistryServiceClient,
            agent_registry_service_server::{AgentRegistryService, AgentRegistryServiceServer},
        },
    },
};
use prost::Message;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{
    Request, Response, Status,
    transport::{Channel, Server, server::TcpIncoming},
};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// Command-line knobs.
struct Args {
    /// Concurrent clients, one connection each.
    clients: usize,
    /// Measured seconds per scenario and server.
    seconds: f64,
    /// Set `workspace_roots` (every request then checks the workspace against it).
    workspace_roots: bool,
    /// Serve the echo floor without `TCP_NODELAY`, as agentry does today.
    echo_nagle: bool,
}

impl Args {
    fn parse() -> Self {
        let mut a = Self {
            clients: 32,
            seconds: 5.0,
            workspace_roots: false,
            echo_nagle: false,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            match flag.as_str() {
                "--clients" => {
                    a.clients = it
                        .next()
                        .and_then(|v| v.parse().ok())
                        .filter(|n| *n > 0)
                        .expect("--clients needs a positive integer");
                }
                "--seconds" => {
                    a.seconds = it
                        .next()
                        .and_then(|v| v.parse().ok())
                        .filter(|s: &f64| *s > 0.0 && *s <= 600.0)
                        .expect("--seconds needs a number in (0, 600]");
                }
                "--workspace-roots" => a.workspace_roots = true,
                "--echo-nagle" => a.echo_nagle = true,
                other => panic!(
                    "unknown argument {other:?}; usage: load [--clients N] [--seconds S] \
                     [--workspace-roots] [--echo-nagle]"
                ),
            }
        }
        a
    }
}

/// Writes `count` personas named `agent-NNN` (from `first`) into `dir`, 1–3 KiB each.
fn write_personas(dir: &Path, first: usize, count: usize) {
    std::fs::create_dir_all(dir).expect("persona dir");
    for i in first..first + count {
        let mut text = format!(
            "---\nname: agent-{i:03}\n\
             description: \"Specialist number {i}; returns a short report with evidence\"\n\
             tools: read, grep, find, bash\nmodel: [claude-sonnet-4-5, gpt-5-mini]\n\
             thinking_level: medium\nspawns: explore\n\
             when_to_use: |\n  Use when a change needs an independent opinion.\n  \
             Prefer it over `task` when the answer must cite files and lines.\n---\n\
             # agent-{i:03}\n\nYou are a careful specialist.\n\n"
        );
        let target = 1024 + (i * 37) % 2048;
        while text.len() < target {
            text.push_str("- review the change before reporting findings with file and line\n");
        }
        std::fs::write(dir.join(format!("agent-{i:03}.md")), text).expect("persona");
    }
}

/// The framework floor: answers with a pre-built response and does nothing else.
struct Echo {
    resolve: pb::ResolveAgentResponse,
    list: pb::ListAgentsResponse,
}

#[tonic::async_trait]
impl AgentRegistryService for Echo {
    async fn list_agents(
        &self,
        _req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        Ok(Response::new(self.list.clone()))
    }

    async fn resolve_agent(
        &self,
        _req: Request<pb::ResolveAgentRequest>,
    ) -> Result<Response<pb::ResolveAgentResponse>, Status> {
        Ok(Response::new(self.resolve.clone()))
    }

    async fn reload_agents(
        &self,
        _req: Request<pb::ReloadAgentsRequest>,
    ) -> Result<Response<pb::ReloadAgentsResponse>, Status> {
        Ok(Response::new(pb::ReloadAgentsResponse::default()))
    }

    // The worker RPCs are not part of this measurement.
    async fn spawn_worker(
        &self,
        _req: Request<pb::SpawnWorkerRequest>,
    ) -> Result<Response<pb::SpawnWorkerResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn stop_worker(
        &self,
        _req: Request<pb::StopWorkerRequest>,
    ) -> Result<Response<pb::StopWorkerResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn send_worker_message(
        &self,
        _req: Request<pb::SendWorkerMessageRequest>,
    ) -> Result<Response<pb::SendWorkerMessageResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn get_worker(
        &self,
        _req: Request<pb::GetWorkerRequest>,
    ) -> Result<Response<pb::GetWorkerResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn list_workers(
        &self,
        _req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn review(
        &self,
        _req: Request<pb::ReviewRequest>,
    ) -> Result<Response<pb::ReviewResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn list_commands(
        &self,
        _req: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<pb::ListCommandsResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn resolve_command(
        &self,
        _req: Request<pb::ResolveCommandRequest>,
    ) -> Result<Response<pb::ResolveCommandResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn report_progress(
        &self,
        _req: Request<pb::ReportProgressRequest>,
    ) -> Result<Response<pb::ReportProgressResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    async fn prune_worktrees(
        &self,
        _req: Request<pb::PruneWorktreesRequest>,
    ) -> Result<Response<pb::PruneWorktreesResponse>, Status> {
        Err(Status::unimplemented("not measured"))
    }

    type WatchWorkerStream = agentry::grpc::service::WatchStream;

    async fn watch_worker(
        &self,
        _req: Request<pb::WatchWorkerRequest>,
    ) -> Result<Response<Self::WatchWorkerStream>, Status> {
        Err(Status::unimplemented("not measured"))
    }
}

/// A server running in this process, stopped through `stop`.
struct Running {
    addr: std::net::SocketAddr,
    stop: oneshot::Sender<()>,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    async fn shutdown(self, label: &str) {
        let _ = self.stop.send(());
        match tokio::time::timeout(Duration::from_secs(10), self.handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("{label} server failed: {e:#}"),
            Ok(Err(e)) => eprintln!("{label} server task failed: {e}"),
            Err(_) => eprintln!("{label} server did not stop within 10 s"),
        }
    }
}

async fn start_agentry(cfg: Config) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(agentry::grpc::run(cfg, listener, async move {
        let _ = rx.await;
    }));
    Running { addr, stop, handle }
}

async fn start_echo(echo: Echo, nagle: bool) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let router = Server::builder().add_service(AgentRegistryServiceServer::new(echo));
        let stopped = async move {
            let _ = rx.await;
        };
        if nagle {
            router
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stopped)
                .await?;
        } else {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(incoming, stopped)
                .await?;
        }
        Ok(())
    });
    Running { addr, stop, handle }
}

/// Asks a watching registry for the same workspace's snapshot three times, 300 ms apart, and
/// reports whether the cached snapshot was reused (nothing on disk changed in between).
async fn snapshot_reuse(cfg: &Config, workspace: &str) -> String {
    let registry = Registry::new(cfg, true).expect("registry");
    let mut seen: Vec<Arc<Snapshot>> = Vec::new();
    for _ in 0..3 {
        seen.push(registry.snapshot(workspace).await.expect("snapshot"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let reused = seen
        .windows(2)
        .filter(|w| Arc::ptr_eq(&w[0], &w[1]))
        .count();
    if reused == 2 {
        "reused (good)".to_owned()
    } else {
        format!("REBUILT {} of 2 times although no file changed", 2 - reused)
    }
}

async fn connect(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect")
}

/// Polls health until the registry service is SERVING (its first discovery is done).
async fn wait_serving(channel: Channel) {
    let mut health = HealthClient::new(channel);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: SERVICE_NAME.to_owned(),
            })
            .await
            .map(|r| r.into_inner().status);
        if matches!(status, Ok(s) if s == ServingStatus::Serving as i32) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "agentry not SERVING after 30 s: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One kind of request, built once and cloned per call.
#[derive(Clone)]
enum Scenario {
    Resolve(pb::ResolveAgentRequest),
    List(pb::ListAgentsRequest),
}

impl Scenario {
    fn label(&self) -> &'static str {
        match self {
            Self::Resolve(_) => "ResolveAgent",
            Self::List(_) => "ListAgents(100)",
        }
    }
}

/// Measured slices per scenario and server, alternating between the servers.
const ROUNDS: u32 = 5;

/// What one phase (or the sum of several) measured.
#[derive(Default)]
struct Stats {
    /// Successful requests.
    ok: usize,
    /// Failed requests.
    errors: usize,
    /// Wall time from start until the last client stopped.
    wall: Duration,
    /// Latencies of the successful requests, in nanoseconds (sorted before quantiles).
    latencies: Vec<u64>,
}

impl Stats {
    /// Adds another phase; the caller sorts the latencies once at the end.
    fn absorb(&mut self, other: Stats) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.wall += other.wall;
        self.latencies.extend(other.latencies);
    }

    fn rps(&self) -> f64 {
        self.ok as f64 / self.wall.as_secs_f64()
    }

    /// The `q` quantile (0..=1) in microseconds, nearest rank.
    fn quantile_us(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.latencies.len() as f64).ceil() as usize).max(1);
        self.latencies[rank.min(self.latencies.len()) - 1] as f64 / 1e3
    }
}

/// Every client sends `scenario` back to back until `duration` has passed.
async fn phase(
    clients: &[AgentRegistryServiceClient<Channel>],
    scenario: &Scenario,
    duration: Duration,
) -> Stats {
    let start = Instant::now();
    let end = start + duration;
    let tasks: Vec<JoinHandle<(Vec<u64>, usize)>> = clients
        .iter()
        .map(|c| {
            let mut client = c.clone();
            let scenario = scenario.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(1 << 14);
                let mut errors = 0usize;
                while Instant::now() < end {
                    let t = Instant::now();
                    let ok = match &scenario {
                        Scenario::Resolve(r) => client.resolve_agent(r.clone()).await.is_ok(),
                        Scenario::List(r) => client.list_agents(r.clone()).await.is_ok(),
                    };
                    if ok {
                        lat.push(t.elapsed().as_nanos() as u64);
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.expect("client task");
        latencies.extend(lat);
        errors += e;
    }
    let wall = start.elapsed();
    Stats {
        ok: latencies.len(),
        errors,
        wall,
        latencies,
    }
}

/// `rchar` and `syscr` of this process (all threads): bytes and calls of read-type syscalls,
/// sockets included.
fn proc_io() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("rchar:"), field("syscr:"))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("tempdir");
    let root: PathBuf = dir.path().canonicalize().expect("tempdir path");
    let home = root.join("home");
    let ws = root.join("ws/repo");
    write_personas(&home.join(".claude/agents"), 0, 150);
    write_personas(&home.join(".xcsh/agent/agents"), 150, 50);
    // Ten project personas, five of which shadow user ones.
    write_personas(&ws.join(".claude/agents"), 195, 10);
    let cfg = Config {
        home: Some(home),
        workspace_roots: if args.workspace_roots {
            vec![root.clone()]
        } else {
            Vec::new()
        },
        store: agentry::config::StoreConfig {
            path: Some(root.join("state/agentry.db")),
            url: None,
        },
        ..Config::default()
    };
    let workspace = ws.display().to_string();
    println!(
        "snapshot cache check (watching registry, same workspace 3× 300 ms apart): {}",
        snapshot_reuse(&cfg, &workspace).await
    );

    let real = start_agentry(cfg.clone()).await;
    wait_serving(connect(real.addr).await).await;

    let resolve_req = pb::ResolveAgentRequest {
        name: "agent-042".to_owned(),
        workspace: workspace.clone(),
        mode: pb::Mode::Default as i32,
        output_schema: None,
    };
    let list_req = pb::ListAgentsRequest {
        workspace: workspace.clone(),
        view: pb::AgentView::Full as i32,
        include_shadowed: false,
        page_size: 100,
        page_token: String::new(),
    };
    let mut probe = AgentRegistryServiceClient::new(connect(real.addr).await);
    let resolve = probe
        .resolve_agent(resolve_req.clone())
        .await
        .expect("ResolveAgent on the real server")
        .into_inner();
    let list = probe
        .list_agents(list_req.clone())
        .await
        .expect("ListAgents on the real server")
        .into_inner();
    assert_eq!(list.agents.len(), 100, "a full page of 100");
    println!(
        "agentry on {} ({} agents for the workspace; ResolveAgent response {} B, ListAgents page {} B); \
         workspace_roots {}",
        real.addr,
        list.total_size,
        resolve.encoded_len(),
        list.encoded_len(),
        if args.workspace_roots { "set" } else { "unset" },
    );
    let sizes = (resolve.encoded_len(), list.encoded_len());
    let echo = start_echo(Echo { resolve, list }, args.echo_nagle).await;
    println!(
        "echo    on {} (same responses, cloned; TCP_NODELAY {}); {} clients, each on its own \
         connection; {} s per scenario and server in {ROUNDS} alternating slices after a {} s \
         warm-up; tokio worker threads: {}",
        echo.addr,
        if args.echo_nagle {
            "off, as agentry::grpc::run"
        } else {
            "on, as Server::serve"
        },
        args.clients,
        args.seconds,
        (args.seconds / 5.0).min(1.0),
        tokio::runtime::Handle::current().metrics().num_workers(),
    );

    let mut conns = Vec::new();
    for server in [&real, &echo] {
        let mut v = Vec::with_capacity(args.clients);
        for _ in 0..args.clients {
            v.push(AgentRegistryServiceClient::new(connect(server.addr).await));
        }
        conns.push(v);
    }
    let measured = Duration::from_secs_f64(args.seconds);
    let warmup = Duration::from_secs_f64((args.seconds / 5.0).min(1.0));

    let scenarios = [Scenario::Resolve(resolve_req), Scenario::List(list_req)];
    // (scenario, server) → stats and read calls per request. The measured time is split into
    // ROUNDS slices that alternate between the servers, so a neighbour's load that comes and
    // goes lands on both alike.
    let slice = measured / ROUNDS;
    let mut results: Vec<(&'static str, &'static str, Stats, f64, f64)> = Vec::new();
    for scenario in &scenarios {
        let servers = [("agentry", &conns[0]), ("echo", &conns[1])];
        let mut acc: Vec<(Stats, u64, u64)> = Vec::new();
        for (_, clients) in servers {
            phase(clients, scenario, warmup).await;
            acc.push((Stats::default(), 0, 0));
        }
        for _ in 0..ROUNDS {
            for ((_, clients), (total, rchar, syscr)) in servers.iter().zip(&mut acc) {
                let (rchar0, syscr0) = proc_io();
                let s = phase(clients, scenario, slice).await;
                let (rchar1, syscr1) = proc_io();
                total.absorb(s);
                *rchar += rchar1 - rchar0;
                *syscr += syscr1 - syscr0;
            }
        }
        for ((name, _), (mut s, rchar, syscr)) in servers.into_iter().zip(acc) {
            s.latencies.sort_unstable();
            let n = (s.ok + s.errors).max(1) as f64;
            results.push((
                scenario.label(),
                name,
                s,
                rchar as f64 / n,
                syscr as f64 / n,
            ));
        }
    }

    println!(
        "\n| scenario        | server  |    req/s |  p50 µs |  p99 µs | errors | read calls/req | read B/req |"
    );
    println!(
        "|-----------------|---------|---------:|--------:|--------:|-------:|---------------:|-----------:|"
    );
    for (label, server, s, bytes, calls) in &results {
        println!(
            "| {label:<15} | {server:<7} | {:>8.0} | {:>7.0} | {:>7.0} | {:>6} | {calls:>14.2} | {bytes:>10.0} |",
            s.rps(),
            s.quantile_us(0.5),
            s.quantile_us(0.99),
            s.errors,
        );
    }
    println!();
    for pair in results.chunks(2) {
        let [(label, _, real, _, real_calls), (_, _, echo, _, echo_calls)] = pair else {
            continue;
        };
        let ratio = real.rps() / echo.rps();
        let target = if *label == "ResolveAgent" {
            format!(
                " (target ≥ 0.80×: {})",
                if ratio >= 0.8 { "met" } else { "NOT met" }
            )
        } else {
            String::new()
        };
        println!(
            "{label:<15} agentry/echo throughput = {ratio:.2}×{target}; p50 {:.2}×, p99 {:.2}×; \
             extra read calls per request vs echo: {:+.3}",
            real.quantile_us(0.5) / echo.quantile_us(0.5),
            real.quantile_us(0.99) / echo.quantile_us(0.99),
            real_calls - echo_calls,
        );
    }
    println!(
        "(read calls/req counts every read-type syscall of the process, sockets included; the same \
         response sizes, {} B and {} B, go over the wire for both servers, so the difference is \
         what agentry reads per request)",
        sizes.0, sizes.1
    );

    drop(conns);
    drop(probe);
    echo.shutdown("echo").await;
    real.shutdown("agentry").await;
}
