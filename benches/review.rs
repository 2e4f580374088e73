//! What the review gate adds to a reviewer run.
//!
//! Against a real server on 127.0.0.1:0 whose runtime is a `#!/bin/sh` script that answers at
//! once (`Decision: approve`), sequential calls of:
//!
//! * `Review` of a write tool (proposal → reviewer worker → decision);
//! * `SpawnWorker(wait)` of an ordinary agent running the same script — the baseline: the
//!   difference is the gate's own overhead (validation, proposal text, decision parsing);
//! * `Review` of a read tool (no worker): the pass-through floor.
//!
//! Run with `cargo bench --bench review`. Plain `std::time::Instant`, sequential runs.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use agentry::{
    config::{AgentDir, Config, StoreConfig},
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
};
use tokio::net::TcpListener;
use tonic::transport::Channel;

const RUNS: usize = 200;
const WARMUP: usize = 20;

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{name:<34} p50 {:>9.3?}  p99 {:>9.3?}  mean {:>9.3?}",
        at(0.5),
        at(0.99),
        mean
    );
    at(0.5)
}

fn write_review() -> pb::ReviewRequest {
    pb::ReviewRequest {
        tool: "kubectl".into(),
        tool_class: pb::ToolClass::Write as i32,
        action: "rollout restart".into(),
        target: "deploy/api".into(),
        reason: "pick up the new config".into(),
        blast_radius: "api pods".into(),
        operator: "bench".into(),
        arguments_json: r#"{"args":["rollout","restart","deploy/api"]}"#.into(),
        workspace: String::new(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let home = root.join("home");
    let agents = root.join("agents");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&agents)?;
    std::fs::write(
        agents.join("plain.md"),
        "---\nname: plain\ndescription: baseline\n---\nbody\n",
    )?;
    let script = root.join("run-agent");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > /dev/null\necho 'Decision: approve'\necho 'fine'\n",
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;

    let mut cfg = Config {
        home: Some(home),
        store: StoreConfig {
            path: Some(root.join("state/agentry.db")),
            url: None,
        },
        agent_dirs: vec![AgentDir {
            path: agents,
            recursive: false,
        }],
        ..Config::default()
    };
    cfg.executor.command = vec![script.display().to_string()];

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(agentry::grpc::run(cfg, listener, async move {
        let _ = rx.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let client = AgentRegistryServiceClient::new(channel);

    println!(
        "{RUNS} sequential calls each (after {WARMUP} warm-up), interleaved, script answers at once"
    );
    let (mut review, mut spawn, mut read) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARMUP + RUNS {
        let mut c = client.clone();
        let t = Instant::now();
        let r = c.review(write_review()).await?.into_inner();
        let dt_review = t.elapsed();
        assert_eq!(r.decision, pb::Decision::Approve as i32, "{r:?}");

        // A distinct prompt per call, so dedupe never answers instead of a run.
        let t = Instant::now();
        let w = c
            .spawn_worker(pb::SpawnWorkerRequest {
                agent: "plain".into(),
                prompt: format!("baseline run {i}"),
                wait: true,
                ..Default::default()
            })
            .await?
            .into_inner()
            .worker
            .expect("worker");
        let dt_spawn = t.elapsed();
        assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");

        let mut r = write_review();
        r.tool_class = pb::ToolClass::Read as i32;
        let t = Instant::now();
        c.review(r).await?;
        let dt_read = t.elapsed();

        if i >= WARMUP {
            review.push(dt_review);
            spawn.push(dt_spawn);
            read.push(dt_read);
        }
    }

    let review = report("Review (write, reviewer worker)", review);
    let spawn = report("SpawnWorker(wait) baseline", spawn);
    report("Review (read, no worker)", read);
    let diff = review.as_secs_f64() - spawn.as_secs_f64();
    println!("gate overhead at p50: {:+.3} ms", diff * 1e3);

    let _ = tx.send(());
    server.await??;
    Ok(())
}
