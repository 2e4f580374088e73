//! The fleet on one PostgreSQL database (docs/replicas.md, "Capacity"), measured on a small
//! machine by making each replica a small machine of its own: every replica is an `agentry
//! serve` process started inside a cgroup of its own whose CPU quota is `--quota` cores (default
//! 0.25), and its workers (`/bin/true`) inherit the group. PostgreSQL and the load (this process,
//! tonic clients, uncapped) are outside every group, so the replicas — not the box — are the
//! bottleneck, and adding one must add its share.
//!
//! 1. **Background spawns**: 1, 2 and 4 replicas, each on a fresh database; 4 clients per
//!    replica send `SpawnWorker{wait: false}` with distinct prompts back to back for `--seconds`
//!    (default 10); the rate is every accepted spawn over the time until the last row is closed
//!    (completed workers per second, not accepted ones). Targets: 2 replicas ≥ 1.8× one, 4
//!    replicas ≥ 3.2× one. The same rows again at 16 clients per replica (`--clients 4,16`).
//! 2. **The database's CPU per spawn**: the CPU time (user + system, from `/proc`) of every
//!    PostgreSQL process — the backends, and through the postmaster's `cutime`/`cstime` the ones
//!    that exited — over the same run, divided by the spawns; and from it the ceiling of one
//!    database core in spawns per second. Target: ≤ 0.3 ms per spawn. Its floor, in the same
//!    run: the CPU of one durable one-row commit alone, twice (a worker's create and outcome),
//!    and what the database did per spawn (commits, rows, bytes of WAL), and which part of its
//!    CPU the backends spent (the rest: the postmaster and its background processes).
//! 3. **Runner workers across replicas**: two capped replicas, a runner (in this process) on the
//!    second; 8 clients send `SpawnWorker{wait: true}` to the second (the runner's own replica)
//!    and then to the first (the worker crosses through the store). Target: across ≥ 0.8× the
//!    same-replica rate.
//!
//! Each row also says what bounded it: the share of the replicas' quota periods in which they
//! were throttled (`cpu.stat`), and the share of the machine's cores busy and stolen by the
//! hypervisor (`/proc/stat`) over the same time. A ratio measured while the machine itself was
//! near its limit says more about the machine than about the replicas.
//!
//! `AGENTRY_TEST_POSTGRES_URL=postgres://… cargo bench --bench fleet -- [--quota 0.25]
//! [--seconds 10] [--quick] [--commit-window 2ms] [--clients 4,16] [--replicas 1,2,4]
//! [--only spawns|runners]`. Needs root and a writable cgroup `cpu` controller (v1
//! `/sys/fs/cgroup/cpu`, or v2 `cpu.max`); without one, or without the database URL, it says so
//! and measures nothing — and fails under `CI=true`.

#[path = "support/load.rs"]
mod load;
#[path = "support/missing.rs"]
mod missing;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use agentry::{
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
    workers::store::testdb::TestDb,
};
use load::connect;
use tonic::transport::Channel;

type Client = AgentRegistryServiceClient<Channel>;

/// The loads of the background spawns, in clients per replica, each sending its next spawn when
/// the last is accepted: 4 already saturate a quarter-core replica (its cap reached in nearly
/// every period); 16 keep calls queued at every replica, as at a fleet's capacity, where more of
/// a replica's writes share each commit (docs/replicas.md, "Group commit"). The database's cost
/// per spawn is printed for both.
const CLIENTS_PER_REPLICA: [usize; 2] = [4, 16];
/// Clients of the runner rows: as many as the runner's slots (a closed loop, latency-bound), and
/// four times that (enough calls in flight that the capped replicas' CPU bounds the rate).
const RUNNER_CLIENTS: [usize; 2] = [8, 32];
/// The runner's slots.
const RUNNER_SLOTS: u32 = 32;
/// The cgroup's period, in microseconds.
const PERIOD_US: u64 = 100_000;
/// `/proc/<pid>/stat` times are in clock ticks of 1/100 s on Linux (`USER_HZ`).
const TICK_MS: f64 = 10.0;

/// The replicas' `replica.commit_window` when `--commit-window` gives one (else their default).
static COMMIT_WINDOW: std::sync::OnceLock<String> = std::sync::OnceLock::new();

struct Options {
    quota: f64,
    seconds: u64,
    /// The replica counts of the background-spawn rows (`--replicas 1,2,4`).
    replicas: Vec<usize>,
    /// Which parts run (`--only spawns` or `--only runners`; both by default).
    spawns: bool,
    runners: bool,
    /// The loads of the background-spawn rows, in clients per replica (`--clients 4,16`): each
    /// gets the whole set of rows.
    clients: Vec<usize>,
}

fn options() -> Options {
    let mut o = Options {
        quota: 0.25,
        seconds: 10,
        replicas: vec![1, 2, 4],
        spawns: true,
        runners: true,
        clients: CLIENTS_PER_REPLICA.to_vec(),
    };
    let args: Vec<String> = std::env::args().collect();
    for (i, a) in args.iter().enumerate() {
        let next = || args.get(i + 1).and_then(|v| v.parse().ok());
        match a.as_str() {
            "--quota" => o.quota = next().expect("--quota takes cores, e.g. 0.25"),
            "--seconds" => o.seconds = next().map(|s: f64| s as u64).expect("--seconds N"),
            "--quick" => o.seconds = 2,
            "--clients" => {
                o.clients = counts(args.get(i + 1))
                    .expect("--clients takes counts of clients per replica, e.g. 4,16");
            }
            "--replicas" => {
                o.replicas = counts(args.get(i + 1)).expect("--replicas takes counts, e.g. 1,2,4");
            }
            "--commit-window" => {
                let window = args
                    .get(i + 1)
                    .expect("--commit-window takes a duration, e.g. 5ms");
                COMMIT_WINDOW
                    .set(window.clone())
                    .expect("one --commit-window");
            }
            "--only" => match args.get(i + 1).map(String::as_str) {
                Some("spawns") => o.runners = false,
                Some("runners") => o.spawns = false,
                _ => panic!("--only takes spawns or runners"),
            },
            _ => {}
        }
    }
    if std::env::var_os("AGENTRY_BENCH_QUICK").is_some() {
        o.seconds = 2;
    }
    o
}

/// A comma-separated list of positive counts (`1,2,4`); `None` when empty or when one is 0.
fn counts(arg: Option<&String>) -> Option<Vec<usize>> {
    arg.map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty() && !v.contains(&0))
}

/// Where CPU groups can be made: the v1 `cpu` hierarchy, or a v2 hierarchy with `cpu`.
#[derive(Clone)]
struct Cgroups {
    root: PathBuf,
    v2: bool,
}

impl Cgroups {
    /// The writable CPU controller of this machine, or why there is none.
    fn find() -> Result<Cgroups, String> {
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let v2 = Path::new("/sys/fs/cgroup");
        let (base, v2) = if v1.join("cpu.cfs_quota_us").exists() {
            (v1.to_path_buf(), false)
        } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
        {
            (v2.to_path_buf(), true)
        } else {
            return Err("no cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max)".into());
        };
        let root = base.join(format!("agentry-fleet-{}", std::process::id()));
        std::fs::create_dir(&root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        if v2 {
            std::fs::write(root.join("cgroup.subtree_control"), "+cpu")
                .map_err(|e| format!("cannot enable cpu under {}: {e}", root.display()))?;
        }
        Ok(Cgroups { root, v2 })
    }

    /// A group `name` capped at `cores`; its directory.
    fn group(&self, name: &str, cores: f64) -> PathBuf {
        let dir = self.root.join(name);
        let _ = std::fs::create_dir(&dir);
        let quota = (cores * PERIOD_US as f64) as u64;
        if self.v2 {
            std::fs::write(dir.join("cpu.max"), format!("{quota} {PERIOD_US}")).unwrap();
        } else {
            std::fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string()).unwrap();
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).unwrap();
        }
        dir
    }

    /// Removes the groups (their processes are gone).
    fn remove(&self) {
        if let Ok(dirs) = std::fs::read_dir(&self.root) {
            for d in dirs.flatten() {
                if d.path().is_dir() {
                    let _ = std::fs::remove_dir(d.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&self.root);
    }
}

/// One capped replica process.
struct Replica {
    child: Child,
    addr: SocketAddr,
    /// Its cgroup's directory.
    group: PathBuf,
}

impl Replica {
    /// The quota's periods so far and those in which the group was throttled (it used its
    /// whole quota and had more to run): `cpu.stat`'s `nr_periods` and `nr_throttled`, which
    /// cgroup v1 and v2 both keep.
    fn periods(&self) -> [u64; 2] {
        let stat = std::fs::read_to_string(self.group.join("cpu.stat")).unwrap_or_default();
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        [field("nr_periods "), field("nr_throttled ")]
    }

    /// Starts replica `name` on `url` inside a group capped at `cores`: the shell puts itself in
    /// the group, then becomes the server, so the server and every worker it forks are in it.
    fn start(cg: &Cgroups, dir: &Path, name: &str, url: &str, cores: f64, runner: bool) -> Self {
        let group = cg.group(name, cores);
        let procs = group.join("cgroup.procs");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nhome: {home}\nstore: {{url: '{url}'}}\n\
                 replica: {{name: {name}, lease: 15s{window}}}\n\
                 executor: {{command: [/bin/true]{kind}}}\n\
                 limits: {{max_running: 64, max_pending: 1000000}}\n",
                home = home.display(),
                kind = if runner { ", kind: runner" } else { "" },
                window = COMMIT_WINDOW
                    .get()
                    .map(|w| format!(", commit_window: {w}"))
                    .unwrap_or_default(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {procs} && exec {bin} serve --config {config}",
                procs = procs.display(),
                bin = env!("CARGO_BIN_EXE_agentry"),
                config = config.display(),
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a replica");
        Replica {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            group,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGTERM: a graceful stop, so no orphaned rows are left for the next set-up.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn spawn_req(prompt: String, wait: bool) -> pb::SpawnWorkerRequest {
    pb::SpawnWorkerRequest {
        agent: "quick_task".to_owned(),
        description: "fleet".to_owned(),
        prompt,
        wait,
        ..Default::default()
    }
}

/// CPU time of PostgreSQL's processes so far, in ms, split by kind.
#[derive(Clone, Copy, Default)]
struct PgCpu {
    /// The backends, each serving one client connection (its title names the client's
    /// address), and what the processes that exited left in the postmaster's
    /// `cutime`/`cstime` (backends, nearly always: the background processes live as long as
    /// the server).
    backends: f64,
    /// The postmaster's own time and every other process's: the checkpointer, the writers,
    /// autovacuum, parallel workers.
    others: f64,
}

impl PgCpu {
    fn total(self) -> f64 {
        self.backends + self.others
    }

    fn since(self, before: PgCpu) -> PgCpu {
        PgCpu {
            backends: self.backends - before.backends,
            others: self.others - before.others,
        }
    }
}

/// CPU time of every PostgreSQL process so far: each one's own, and what the processes that
/// exited left in their parent's `cutime`/`cstime`; by kind from each process's title
/// (`/proc/<pid>/cmdline`).
fn postgres_cpu_ms() -> PgCpu {
    let mut cpu = PgCpu::default();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if !head.ends_with("(postgres") {
            continue;
        }
        // After the name: state ppid … utime(14) stime(15) cutime(16) cstime(17), counted
        // from the state as field 3.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let own = (ticks(11) + ticks(12)) as f64 * TICK_MS;
        let children = (ticks(13) + ticks(14)) as f64 * TICK_MS;
        let title = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let title = String::from_utf8_lossy(&title);
        // A child's title is `postgres: <cluster>: <what>`; a backend's `<what>` names its
        // client as `host(port)` or `[local]`. The postmaster keeps its command line.
        let backend =
            title.starts_with("postgres:") && (title.contains("[local]") || title.contains(')'));
        if backend {
            cpu.backends += own;
        } else {
            cpu.others += own;
        }
        cpu.backends += children;
    }
    cpu
}

/// The whole machine's CPU so far, in ticks of every core: busy (user, nice, system, irq,
/// softirq), stolen by the hypervisor, and in all (idle and I/O wait too). From `/proc/stat`.
fn machine_ticks() -> [u64; 3] {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let busy = at(0) + at(1) + at(2) + at(5) + at(6);
    [busy, at(7), (0..8).map(at).sum()]
}

/// Where a run's time went on the machine: the share of every core busy and the share stolen,
/// and for each replica the share of its quota periods in which it was throttled. A row whose
/// replicas were throttled in most periods while the machine had time to spare measured the
/// replicas; one whose machine was busy through measured the machine.
struct Bottleneck {
    busy: f64,
    steal: f64,
    /// Per replica, in the order given.
    throttled: Vec<f64>,
}

/// The counters a [`Bottleneck`] is measured from: the machine's ticks and each replica's
/// quota periods, taken before a run.
struct Mark {
    machine: [u64; 3],
    periods: Vec<[u64; 2]>,
}

impl Mark {
    /// Counters now, to give to [`Bottleneck::since`] after the run.
    fn now(replicas: &[Replica]) -> Mark {
        Mark {
            machine: machine_ticks(),
            periods: replicas.iter().map(Replica::periods).collect(),
        }
    }
}

impl Bottleneck {
    /// What bounded the time since `mark`.
    fn since(mark: &Mark, replicas: &[Replica]) -> Self {
        let now = machine_ticks();
        let d = |i: usize| now[i].saturating_sub(mark.machine[i]) as f64;
        let throttled = replicas
            .iter()
            .zip(&mark.periods)
            .map(|(r, before)| {
                let after = r.periods();
                let periods = after[0].saturating_sub(before[0]);
                after[1].saturating_sub(before[1]) as f64 / periods.max(1) as f64
            })
            .collect();
        Bottleneck {
            busy: d(0) / d(2).max(1.0),
            steal: d(1) / d(2).max(1.0),
            throttled,
        }
    }

    /// A remark for a row whose machine was busy or stolen through (nine tenths of its cores or
    /// more): such a row says more about the machine than about the replicas.
    fn limit_remark(&self) -> &'static str {
        if self.busy + self.steal >= 0.9 {
            " — the machine, not only the replicas, was near its limit"
        } else {
            ""
        }
    }

    /// The replicas' throttled shares as a percentage, or their range when they differ.
    fn throttled_range(&self) -> String {
        let pct = |v: f64| format!("{:.1}", v * 100.0);
        let lo = self.throttled.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.throttled.iter().copied().fold(0.0, f64::max);
        if self.throttled.is_empty() {
            "—".to_owned()
        } else if pct(lo) == pct(hi) {
            format!("{} %", pct(hi))
        } else {
            format!("{}–{} %", pct(lo), pct(hi))
        }
    }
}

/// CPU time (user + system) of process `pid` so far, in ms.
fn process_cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    ticks as f64 * TICK_MS
}

/// Whether `c` still sees an open worker (one row read, so the probe costs the database little).
async fn any_open(c: &mut Client) -> bool {
    c.list_workers(pb::ListWorkersRequest {
        states: vec![
            pb::WorkerState::Pending as i32,
            pb::WorkerState::Running as i32,
        ],
        page_size: 1,
        ..Default::default()
    })
    .await
    .map_or(true, |r| !r.into_inner().workers.is_empty())
}

/// The database's own counters (`pg_stat_database`): commits, rows inserted, updated, deleted;
/// and the write-ahead log's position in bytes (the whole cluster's, which only the benchmark's
/// database writes to while it runs).
async fn db_counters(url: &str) -> [i64; 5] {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    let conn = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted,
                    pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
               FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await
        .expect("pg_stat_database");
    drop(client);
    let _ = conn.await;
    [row.get(0), row.get(1), row.get(2), row.get(3), row.get(4)]
}

/// The database's CPU for one durable write on its own, in ms: a one-row `INSERT` committed
/// alone (the WAL flushed), one after another from one connection for `dur`, on a fresh database
/// of its own, divided by the writes. A worker's life needs at least two such commits (its
/// create and its outcome, each told to a caller as durable) unless commits are shared between
/// workers: twice this is the floor of the database's CPU per spawn on this machine.
async fn durable_commit_floor(dur: Duration) -> f64 {
    let db = TestDb::create().await.expect("a test database");
    let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    let conn = tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE floor (id BIGINT PRIMARY KEY, v TEXT NOT NULL)")
        .await
        .expect("create the floor's table");
    let insert = client
        .prepare("INSERT INTO floor (id, v) VALUES ($1, 'x')")
        .await
        .expect("prepare the floor's insert");
    let before = postgres_cpu_ms().total();
    let started = Instant::now();
    let mut n = 0i64;
    while started.elapsed() < dur {
        client.execute(&insert, &[&n]).await.expect("insert");
        n += 1;
    }
    let cpu = postgres_cpu_ms().total() - before;
    drop(client);
    let _ = conn.await;
    drop(db);
    cpu / n.max(1) as f64
}

/// What one background-spawn run gave: completed workers per second, database CPU per spawn.
struct SpawnRow {
    per_s: f64,
    db_ms: f64,
    /// The backends' part of the database's CPU (the rest: the postmaster and the background
    /// processes).
    backends_share: f64,
    spawns: usize,
    /// Commits, rows inserted, updated, deleted and bytes of write-ahead log over the run.
    counters: [i64; 5],
    /// The database's CPU per second with the replicas idle, in ms.
    idle_ms_per_s: f64,
    /// How long the run took, until the last row closed.
    elapsed: Duration,
    /// Whether the replicas or the machine bounded the run.
    bound: Bottleneck,
}

/// `n` capped replicas on a fresh database under background spawns.
async fn spawns(cg: &Cgroups, n: usize, clients_each: usize, o: &Options) -> SpawnRow {
    let db = TestDb::create().await.expect("a test database");
    let dir = tempfile::tempdir().unwrap();
    let replicas: Vec<Replica> = (0..n)
        .map(|i| Replica::start(cg, dir.path(), &format!("r{i}"), &db.url, o.quota, false))
        .collect();
    let mut clients = Vec::new();
    for i in 0..n * clients_each {
        clients.push(connect(replicas[i % n].addr).await);
    }
    let dur = Duration::from_secs(o.seconds);
    // What the database spends with the replicas up and no load (lease renewals, the sweeper's
    // and the stop requests' polls): the fixed part of its cost.
    let idle_from = postgres_cpu_ms().total();
    let idle_for = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_ms_per_s = (postgres_cpu_ms().total() - idle_from) / idle_for.elapsed().as_secs_f64();
    let counted = db_counters(&db.url).await;
    let cpu_before = postgres_cpu_ms();
    let mark = Mark::now(&replicas);
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            tokio::spawn(async move {
                let mut accepted = 0usize;
                let mut k = 0usize;
                while started.elapsed() < dur {
                    k += 1;
                    if c.spawn_worker(spawn_req(format!("fleet {i} {k}"), false))
                        .await
                        .is_ok()
                    {
                        accepted += 1;
                    }
                }
                accepted
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let mut probe = connect(replicas[0].addr).await;
    while any_open(&mut probe).await && started.elapsed() < dur * 20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let cpu = postgres_cpu_ms().since(cpu_before);
    let bound = Bottleneck::since(&mark, &replicas);
    // Backends publish their counters at most every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = db_counters(&db.url).await;
    let counters = std::array::from_fn(|i| after[i] - counted[i]);
    drop(replicas);
    drop(db);
    SpawnRow {
        per_s: total as f64 / elapsed.as_secs_f64(),
        db_ms: cpu.total() / total.max(1) as f64,
        backends_share: cpu.backends / cpu.total().max(f64::MIN_POSITIVE),
        spawns: total,
        counters,
        idle_ms_per_s,
        elapsed,
        bound,
    }
}

/// Completed runner workers per second through `spawn_on`, the runner on replica 1 of two, and
/// each replica's CPU per completed worker (ms).
async fn runner_rate(
    replicas: &[Replica],
    spawn_on: usize,
    clients: usize,
    o: &Options,
) -> (f64, [f64; 2], Bottleneck) {
    let mut warm = connect(replicas[spawn_on].addr).await;
    warm.spawn_worker(spawn_req(format!("warm-up {spawn_on}"), true))
        .await
        .expect("a warm-up spawn");
    let dur = Duration::from_secs(o.seconds);
    let cpu = || [0, 1].map(|i| process_cpu_ms(replicas[i].child.id()));
    let cpu_before = cpu();
    let mark = Mark::now(replicas);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let mut c = connect(replicas[spawn_on].addr).await;
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            let mut k = 0usize;
            while started.elapsed() < dur {
                k += 1;
                let r = c
                    .spawn_worker(spawn_req(
                        format!("runner {spawn_on} {clients} {i} {k}"),
                        true,
                    ))
                    .await;
                if r.is_ok_and(|r| {
                    r.get_ref()
                        .worker
                        .as_ref()
                        .is_some_and(|w| w.state == pb::WorkerState::Completed as i32)
                }) {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    let after = cpu();
    (
        rate,
        [0, 1].map(|i| (after[i] - cpu_before[i]) / done.max(1) as f64),
        Bottleneck::since(&mark, replicas),
    )
}

fn main() {
    let o = options();
    let Ok(_) = std::env::var("AGENTRY_TEST_POSTGRES_URL") else {
        missing::missing("the fleet benchmark needs AGENTRY_TEST_POSTGRES_URL");
        return;
    };
    let cg = match Cgroups::find() {
        Ok(cg) => cg,
        Err(why) => {
            missing::missing(&format!(
                "the fleet benchmark needs root and a writable cgroup cpu controller: {why}"
            ));
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&cg, &o));
    cg.remove();
}

async fn run(cg: &Cgroups, o: &Options) {
    println!(
        "fleet on one PostgreSQL database: each replica in its own cgroup capped at {} core, workers /bin/true, {} s of load per row",
        o.quota, o.seconds
    );
    if o.spawns {
        for &clients in &o.clients {
            spawn_rows(cg, clients, o).await;
        }
    }
    if o.runners {
        runner_rows(cg, o).await;
    }
}

/// The background-spawn rows: rate and its ratios, the database's cost per spawn.
async fn spawn_rows(cg: &Cgroups, clients: usize, o: &Options) {
    let mut rows = Vec::new();
    for &n in &o.replicas {
        let r = spawns(cg, n, clients, o).await;
        rows.push((n, r));
    }
    let commit = durable_commit_floor(Duration::from_secs(o.seconds.clamp(2, 5))).await;
    let one = rows[0].1.per_s / rows[0].0 as f64;
    println!(
        "completed background spawns per second ({clients} clients per replica, each sending \
         its next spawn when the last is accepted)"
    );
    for (n, r) in &rows {
        let target = match n {
            2 => format!(
                "target ≥ 1.8×: {}",
                if r.per_s / one >= 1.8 {
                    "met"
                } else {
                    "NOT met"
                }
            ),
            4 => format!(
                "target ≥ 3.2×: {}",
                if r.per_s / one >= 3.2 {
                    "met"
                } else {
                    "NOT met"
                }
            ),
            _ => "(floor)".to_owned(),
        };
        println!(
            "  {n} replica{}  {:8.1}/s  {:5.2}× one   {target}",
            if *n == 1 { " " } else { "s" },
            r.per_s,
            r.per_s / one
        );
    }
    println!(
        "what bounded each row: the replicas' quota periods in which they were throttled (their cap \
         reached), and the machine's cores busy and stolen by the hypervisor over the same time"
    );
    for (n, r) in &rows {
        let b = &r.bound;
        println!(
            "  {n} replica{}  throttled in {} of periods; machine {:5.1} % busy, {:4.1} % stolen{}",
            if *n == 1 { " " } else { "s" },
            b.throttled_range(),
            b.busy * 100.0,
            b.steal * 100.0,
            b.limit_remark()
        );
    }
    println!("the database's CPU per spawn (every PostgreSQL process, user + system)");
    println!(
        "  floor: one durable one-row commit alone costs {commit:.3} ms (same run); a worker's life needs two unless commits are shared: {:.3} ms",
        2.0 * commit
    );
    for (n, r) in &rows {
        println!(
            "  {n} replica{}  {:6.3} ms over {} spawns → one database core carries ≈ {:6.0} spawns/s   target ≤ 0.3 ms: {}",
            if *n == 1 { " " } else { "s" },
            r.db_ms,
            r.spawns,
            1000.0 / r.db_ms.max(0.001),
            if r.db_ms <= 0.3 { "met" } else { "NOT met" }
        );
    }

    println!(
        "whose: the backends serving the replicas' connections, and the postmaster with the \
         background processes (checkpointer, writers, autovacuum)"
    );
    for (n, r) in &rows {
        println!(
            "  {n} replica{}  backends {:5.1} %, the rest {:5.1} %",
            if *n == 1 { " " } else { "s" },
            r.backends_share * 100.0,
            (1.0 - r.backends_share) * 100.0
        );
    }
    println!(
        "the database's fixed cost: its CPU with the replicas up and idle, and that share of a spawn's"
    );
    for (n, r) in &rows {
        let fixed = r.idle_ms_per_s * r.elapsed.as_secs_f64() / r.spawns.max(1) as f64;
        println!(
            "  {n} replica{}  {:6.1} ms of CPU per second idle → {:6.3} ms of each spawn's {:.3} ms",
            if *n == 1 { " " } else { "s" },
            r.idle_ms_per_s,
            fixed,
            r.db_ms
        );
    }
    println!(
        "what the database did per spawn (pg_stat_database and the WAL position over the same run)"
    );
    for (n, r) in &rows {
        let per = |i: usize| r.counters[i] as f64 / r.spawns.max(1) as f64;
        println!(
            "  {n} replica{}  {:5.2} commits, {:5.2} rows inserted, {:5.2} updated, {:5.2} deleted, {:6.0} bytes of WAL",
            if *n == 1 { " " } else { "s" },
            per(0),
            per(1),
            per(2),
            per(3),
            per(4)
        );
    }
}

/// The runner rows: workers spawned on the runner's replica and on the other one.
async fn runner_rows(cg: &Cgroups, o: &Options) {
    let db = TestDb::create().await.expect("a test database");
    let dir = tempfile::tempdir().unwrap();
    let replicas: Vec<Replica> = (0..2)
        .map(|i| Replica::start(cg, dir.path(), &format!("q{i}"), &db.url, o.quota, true))
        .collect();
    for r in &replicas {
        connect(r.addr).await;
    }
    let runner = load::instant_runner(replicas[1].addr, RUNNER_SLOTS).await;
    println!(
        "runner workers, 2 capped replicas, the runner ({RUNNER_SLOTS} slots) on the second, SpawnWorker(wait)"
    );
    for clients in RUNNER_CLIENTS {
        let (same, same_cpu, same_bound) = runner_rate(&replicas, 1, clients, o).await;
        let (across, across_cpu, across_bound) = runner_rate(&replicas, 0, clients, o).await;
        let ratio = across / same.max(0.001);
        println!(
            "  {clients:2} clients, spawned on the runner's replica   {same:8.1}/s   (floor)   CPU per worker: spawner {:.3} ms, runner's {:.3} ms",
            same_cpu[1], same_cpu[0]
        );
        println!(
            "  {clients:2} clients, spawned on the other replica      {across:8.1}/s   {ratio:.2}×   target ≥ 0.8×: {}   CPU per worker: spawner {:.3} ms, runner's {:.3} ms",
            if ratio >= 0.8 { "met" } else { "NOT met" },
            across_cpu[0],
            across_cpu[1]
        );
        for (label, b) in [
            ("the runner's replica", same_bound),
            ("the other", across_bound),
        ] {
            let t = |i: usize| b.throttled.get(i).copied().unwrap_or(0.0) * 100.0;
            println!(
                "      spawned on {label:<20} throttled in {:5.1} % of periods (the runner's replica), {:5.1} % (the other); machine {:5.1} % busy, {:4.1} % stolen{}",
                t(1),
                t(0),
                b.busy * 100.0,
                b.steal * 100.0,
                b.limit_remark()
            );
        }
    }
    runner.abort();
    drop(replicas);
    drop(db);
}
