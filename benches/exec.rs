//! What a worker costs before the agent does anything, and what a dedupe hit costs.
//!
//! * spawn-to-`Completed` of `/bin/true` through [`ExecExecutor`] (three pipes, own process
//!   group, async reap, group sweep) beside `std::process::Command::status()` on the same binary,
//!   the fork/exec floor;
//! * [`DedupeCache::claim`] hits on a warm key: memory only, no disk;
//! * the leftover sweep every run ends with (`/proc` scanned for the worker's environment
//!   cookie), alone, so its share of the spawn-to-completed time is visible.
//!
//! Run with `cargo bench --bench exec`. Plain `std::time::Instant`, sequential runs.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use agentry::workers::dedupe::{Claim, DedupeCache, DedupeKey, Dispatch};
use agentry::workers::executor::{ExecExecutor, Executor, Job, Outcome, sweep};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 300;
const WARMUP: usize = 20;
const CLAIMS: u32 = 1_000_000;
const TRUE: &str = "/bin/true";

/// p50, p99 and mean of a set of samples.
struct Summary {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn summarise(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let total: Duration = samples.iter().sum();
    Summary {
        p50: at(0.50),
        p99: at(0.99),
        mean: total / samples.len() as u32,
    }
}

fn job() -> Job {
    Job {
        worker_id: "bench".to_owned(),
        stdin: br#"{"prompt":"noop"}"#.to_vec(),
        env: vec![("AGENTRY_WORKER_ID".to_owned(), "bench".to_owned())],
        cwd: None,
        timeout: Duration::from_secs(30),
        kill_grace: Duration::from_secs(5),
        max_output_bytes: 1 << 20,
        assignment: None,
        meter: Default::default(),
        stop_reason: Default::default(),
        rotated_token: Default::default(),
    }
}

/// Alternates one run through the executor with one direct `status()`, so machine noise hits
/// both alike. Returns (executor samples, floor samples).
fn bench_spawn(runtime: &tokio::runtime::Runtime) -> (Vec<Duration>, Vec<Duration>) {
    let executor = ExecExecutor::new(vec![TRUE.to_owned()], BTreeMap::new());
    let mut exec = Vec::with_capacity(RUNS);
    let mut floor = Vec::with_capacity(RUNS);
    runtime.block_on(async {
        for i in 0..WARMUP + RUNS {
            let (started, _) = oneshot::channel();
            let begun = Instant::now();
            let outcome = executor.run(job(), CancellationToken::new(), started).await;
            let exec_took = begun.elapsed();
            assert!(matches!(outcome, Outcome::Completed { .. }), "{outcome:?}");

            let begun = Instant::now();
            let status = Command::new(TRUE).status().expect("run /bin/true");
            let floor_took = begun.elapsed();
            assert!(status.success());

            if i >= WARMUP {
                exec.push(exec_took);
                floor.push(floor_took);
            }
        }
    });
    (exec, floor)
}

/// Times `CLAIMS` claim hits on a warm key, and as the baseline the same number of plain
/// `get`s (moka's lock-free read path), so the cost of the per-key lock is visible.
fn bench_dedupe_hits() -> (Duration, Duration) {
    let cache = DedupeCache::new(Duration::from_secs(120), 100_000);
    let key = DedupeKey::new(&Dispatch {
        caller_scope: "anonymous",
        parent_worker_id: "",
        agent: "reviewer",
        mode: "default",
        workspace: "",
        output_schema: None,
        prompt: "review the change",
    });
    assert_eq!(cache.claim(key, "w-first", |_| true), Claim::Fresh);

    let begun = Instant::now();
    for _ in 0..CLAIMS {
        let claim = cache.claim(black_box(key), "w-again", |_| true);
        debug_assert!(matches!(claim, Claim::Existing { .. }));
        black_box(claim);
    }
    let claims = begun.elapsed();

    let begun = Instant::now();
    for _ in 0..CLAIMS {
        black_box(cache.get(black_box(&key)));
    }
    (claims, begun.elapsed())
}

fn micros(d: Duration) -> String {
    format!("{:8.1} µs", d.as_secs_f64() * 1e6)
}

/// Times `RUNS` sweeps for a cookie nobody carries: the cost every run pays at its end.
fn bench_sweep() -> Summary {
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let begun = Instant::now();
        let killed = sweep::kill_marked(&["wkr_00000000000000000000000000000000"]);
        samples.push(begun.elapsed());
        assert_eq!(killed, 0);
    }
    summarise(samples)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    let (exec, floor) = bench_spawn(&runtime);
    let (exec, floor) = (summarise(exec), summarise(floor));

    println!("spawn-to-completed of {TRUE}, {RUNS} sequential runs each (after {WARMUP} warm-up)");
    println!("{:<34}{:>12}{:>12}{:>12}", "", "p50", "p99", "mean");
    println!(
        "{:<34}{:>12}{:>12}{:>12}",
        "ExecExecutor::run",
        micros(exec.p50),
        micros(exec.p99),
        micros(exec.mean)
    );
    println!(
        "{:<34}{:>12}{:>12}{:>12}",
        "std Command::status (floor)",
        micros(floor.p50),
        micros(floor.p99),
        micros(floor.mean)
    );
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "{:<34}{:>11.2}x{:>11.2}x{:>11.2}x",
        "ratio",
        ratio(exec.p50, floor.p50),
        ratio(exec.p99, floor.p99),
        ratio(exec.mean, floor.mean)
    );

    let sweeps = bench_sweep();
    let processes = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0);
    println!(
        "{:<34}{:>12}{:>12}{:>12}   ({processes} processes in /proc; included in ExecExecutor::run)",
        "leftover sweep (/proc scan) alone",
        micros(sweeps.p50),
        micros(sweeps.p99),
        micros(sweeps.mean)
    );

    let (claims, gets) = bench_dedupe_hits();
    println!();
    let per_op = |took: Duration| {
        format!(
            "{CLAIMS} in {:.3} s = {:>9.0} ops/s, {:>4.0} ns/op",
            took.as_secs_f64(),
            f64::from(CLAIMS) / took.as_secs_f64(),
            took.as_nanos() as f64 / f64::from(CLAIMS)
        )
    };
    println!("dedupe claim hits on a warm key     {}", per_op(claims));
    println!("baseline: plain cache get, same key {}", per_op(gets));
}
