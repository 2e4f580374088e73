//! What `isolation: worktree` adds to a spawn (docs/workers.md §6.10), on a repository of 10,000
//! files: `SpawnWorker(wait)` of `/bin/true` with a worktree beside the same without one, through
//! a real server, interleaved in the same run, against the floor of `git worktree add` run by
//! hand on the same repository. Target: the extra cost ≤ 2× that floor.
//!
//! Run with `cargo bench --bench worktree` (`AGENTRY_BENCH_QUICK=1`: 1,000 files, 3 runs).

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use agentry::{
    config::{Config, StoreConfig},
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:8.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let quick = std::env::var_os("AGENTRY_BENCH_QUICK").is_some();
    let (files, runs) = if quick { (1_000, 3) } else { (10_000, 15) };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    for i in 0..files {
        let d = repo.join(format!("src/m{:03}", i / 100));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join(format!("f{i}.rs")),
            format!("// file {i}\npub fn f{i}() {{}}\n"),
        )
        .unwrap();
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "files"]);

    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cfg = Config {
        home: Some(home),
        store: StoreConfig {
            path: Some(dir.path().join("state/agentry.db")),
            url: None,
        },
        ..Config::default()
    };
    cfg.executor.command = vec!["/bin/true".into()];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (with, without, floor_add, floor_both) = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(agentry::grpc::run(cfg, listener, async move {
            let _ = rx.await;
        }));
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = AgentRegistryServiceClient::new(channel);
        let spawn = |isolation: pb::Isolation, i: usize| pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: format!("run {i} {isolation:?}"),
            workspace: repo.display().to_string(),
            wait: true,
            isolation: isolation as i32,
            ..Default::default()
        };
        let (mut with, mut without, mut add, mut both) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..runs + 2 {
            let t = Instant::now();
            let w = client
                .spawn_worker(spawn(pb::Isolation::Worktree, i))
                .await
                .unwrap()
                .into_inner()
                .worker
                .unwrap();
            let took = t.elapsed();
            assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
            assert!(w.worktree.is_some_and(|t| !t.changed));

            let t = Instant::now();
            let w = client
                .spawn_worker(spawn(pb::Isolation::None, i))
                .await
                .unwrap()
                .into_inner()
                .worker
                .unwrap();
            let plain = t.elapsed();
            assert_eq!(w.state, pb::WorkerState::Completed as i32);

            let path = dir.path().join(format!("hand-{i}"));
            let branch = format!("hand/{i}");
            let t = Instant::now();
            git(
                &repo,
                &[
                    "worktree",
                    "add",
                    "--quiet",
                    "-b",
                    &branch,
                    &path.display().to_string(),
                    "HEAD",
                ],
            );
            let added = t.elapsed();
            git(
                &repo,
                &["worktree", "remove", "--force", &path.display().to_string()],
            );
            git(&repo, &["branch", "-D", &branch]);
            let removed = t.elapsed();
            if i >= 2 {
                with.push(took);
                without.push(plain);
                add.push(added);
                both.push(removed);
            }
        }
        let _ = tx.send(());
        server.await.unwrap().unwrap();
        (p50(with), p50(without), p50(add), p50(both))
    });
    let extra = with.saturating_sub(without);
    println!("SpawnWorker(wait) of /bin/true in a repository of {files} files, p50 of {runs}");
    println!("  isolation: worktree           {}", ms(with));
    println!("  isolation: none               {}", ms(without));
    println!("  the worktree's cost           {}", ms(extra));
    println!(
        "  git worktree add by hand      {}   (floor)",
        ms(floor_add)
    );
    println!("  … add + remove + branch -D    {}", ms(floor_both));
    let ratio = extra.as_secs_f64() / floor_add.as_secs_f64();
    println!(
        "  ratio {ratio:.2}× of the floor   target ≤ 2×: {}",
        if ratio <= 2.0 { "met" } else { "NOT MET" }
    );
}
