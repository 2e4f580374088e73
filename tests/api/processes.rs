//! No process outlives its worker (docs/operations.md §8.2): daemons that left the process
//! group, agents of a SIGKILLed server, and one store file per process — with the real binary.

use std::time::Duration;

use agentry::grpc::pb;

use crate::{
    binary::{Launch, start},
    helpers::{eventually, get_on, pid_alive, spawn_task},
    restart::fixture,
};

/// Pids written one per line into `path` by the agent scripts.
fn pids(path: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[tokio::test]
async fn a_daemon_that_called_setsid_dies_with_its_worker() {
    // `quick` jobs leave a daemon holding stdout and exit; others leave one and keep running.
    let f = fixture(
        "input=$(cat)\nsetsid sleep 300 &\necho $! >> \"$OUT/daemons\"\ncase \"$input\" in\n  *quick*) echo done ;;\n  *) exec sleep 300 ;;\nesac",
        "",
        "kill_grace: 1s, ",
    );
    let root = f.dir.path();
    let server = start(&f.config).await;
    let mut c = server.client().await;
    let started = std::time::Instant::now();
    let w = spawn_task(&c, "quick job", true).await;
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("done\n"));
    // The daemon held stdout open; killing it at exit means no 2 s drain wait either.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let daemons = pids(&root.join("daemons"));
    assert_eq!(daemons.len(), 1);
    assert!(
        !pid_alive(daemons[0]),
        "daemon of a finished worker is gone"
    );

    let w = spawn_task(&c, "long job", false).await;
    let file = root.join("daemons");
    let daemon = eventually(
        "the second daemon's pid",
        Duration::from_secs(10),
        || async {
            let pids = pids(&file);
            pids.get(1).copied().ok_or(format!("{pids:?}"))
        },
    )
    .await;
    assert!(pid_alive(daemon));
    let stopped = c
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id,
            reason: "enough".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
    assert!(!pid_alive(daemon), "daemon of a stopped worker is gone");
}

/// Workers that end together share the exit sweep's scans (the sweeper thread serves whoever
/// ended while a scan ran): every one of their daemons still dies with its worker.
#[tokio::test]
async fn daemons_of_workers_that_end_together_all_die() {
    const WORKERS: usize = 8;
    let f = fixture(
        "cat > /dev/null\nsetsid sleep 300 > /dev/null 2>&1 < /dev/null &\necho $! >> \"$OUT/daemons\"\necho done",
        "",
        "",
    );
    let server = start(&f.config).await;
    let client = server.client().await;
    let calls: Vec<_> = (0..WORKERS)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { spawn_task(&c, &format!("job {i}"), true).await })
        })
        .collect();
    for call in calls {
        let w = call.await.unwrap();
        assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    }
    let daemons = pids(&f.dir.path().join("daemons"));
    assert_eq!(daemons.len(), WORKERS, "{daemons:?}");
    for pid in daemons {
        assert!(!pid_alive(pid), "daemon {pid} outlived its finished worker");
    }
}

#[tokio::test]
async fn a_restart_after_kill_9_kills_every_process_left_behind() {
    const WORKERS: usize = 12;
    let f = fixture(
        "cat > /dev/null\nsetsid sleep 300 > /dev/null 2>&1 < /dev/null &\necho $! >> \"$OUT/pids\"\necho $$ >> \"$OUT/pids\"\nexec sleep 300",
        "",
        "",
    );
    let root = f.dir.path();
    let server = start(&f.config).await;
    let c = server.client().await;
    let mut ids = Vec::new();
    for i in 0..WORKERS {
        ids.push(spawn_task(&c, &format!("long job {i}"), false).await.id);
    }
    let file = root.join("pids");
    let left = eventually(
        "a pid for every agent and daemon",
        Duration::from_secs(20),
        || async {
            let pids = pids(&file);
            if pids.len() == 2 * WORKERS {
                Ok(pids)
            } else {
                Err(format!("{pids:?}"))
            }
        },
    )
    .await;
    server.kill_9();
    assert!(left.iter().all(|p| pid_alive(*p)), "all survive the crash");

    let server = start(&f.config).await;
    let c = server.client().await;
    let alive: Vec<i32> = left.iter().copied().filter(|p| pid_alive(*p)).collect();
    assert!(alive.is_empty(), "still alive after the restart: {alive:?}");
    for id in ids {
        let w = get_on(&c, &id).await;
        assert_eq!(w.state, pb::WorkerState::Failed as i32);
        assert_eq!(w.error.as_deref(), Some("orphaned: service restarted"));
    }
}

/// A `wait=true` spawn of the `first` agent of the lock tests, running in the background.
fn keep_going(
    c: &agentry::grpc::pb::agent_registry_service_client::AgentRegistryServiceClient<
        tonic::transport::Channel,
    >,
) -> tokio::task::JoinHandle<Result<tonic::Response<pb::SpawnWorkerResponse>, tonic::Status>> {
    let mut c = c.clone();
    tokio::spawn(async move {
        c.spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: "keep going".into(),
            wait: true,
            ..Default::default()
        })
        .await
    })
}

/// The [`keep_going`] worker ended as it would have with no second server around.
async fn assert_untouched(
    running: tokio::task::JoinHandle<
        Result<tonic::Response<pb::SpawnWorkerResponse>, tonic::Status>,
    >,
) {
    let w = running.await.unwrap().unwrap().into_inner().worker.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("first\n"));
}

#[tokio::test]
async fn a_second_server_on_the_same_store_refuses_to_start_naming_the_holder() {
    let f = fixture("cat > /dev/null\nsleep 1\necho first", "", "");
    let server = start(&f.config).await;
    let mut c = server.client().await;
    let running = keep_going(&c);
    // The same config, so the same store (each process picks its own port).
    let stderr = Launch::new(&f.config).fails().await;
    assert!(
        stderr.contains("is in use by another agentry process")
            && stderr.contains(&format!("pid {}", server.pid())),
        "{stderr}"
    );
    // The first server's worker was not touched.
    assert_untouched(running).await;
    let listed = c
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn a_second_server_through_a_symlink_or_a_hard_link_refuses_to_start() {
    let f = fixture("cat > /dev/null\nsleep 1\necho first", "", "");
    let root = f.dir.path();
    let server = start(&f.config).await;
    let c = server.client().await;
    let running = keep_going(&c);
    // The same database named two other ways: through a symlinked directory, and through a
    // symlink to the file itself (with a `..` on the way).
    std::os::unix::fs::symlink(root.join("state"), root.join("state-link")).unwrap();
    std::fs::create_dir_all(root.join("elsewhere/sub")).unwrap();
    std::os::unix::fs::symlink(f.db.clone(), root.join("elsewhere/db-link")).unwrap();
    let ways = [
        root.join("state-link/agentry.db"),
        root.join("elsewhere/sub/../db-link"),
    ];
    for (n, db) in ways.iter().enumerate() {
        let config = crate::binary::config(
            root,
            &format!("via-link-{n}"),
            &format!(
                "home: {home}\nstore: {{path: {db}}}\nexecutor: {{command: [/bin/true]}}\n",
                home = root.join("home").display(),
                db = db.display(),
            ),
        );
        let stderr = Launch::new(&config).fails().await;
        assert!(
            stderr.contains("is in use by another agentry process")
                && stderr.contains(&format!("pid {}", server.pid())),
            "{}: {stderr}",
            db.display()
        );
    }
    // A hard link under another name is the same inode: the file's own lock refuses it.
    std::fs::hard_link(&f.db, root.join("elsewhere/hard.db")).unwrap();
    let config = crate::binary::config(
        root,
        "via-hard-link",
        &format!(
            "home: {home}\nstore: {{path: {db}}}\nexecutor: {{command: [/bin/true]}}\n",
            home = root.join("home").display(),
            db = root.join("elsewhere/hard.db").display(),
        ),
    );
    let stderr = Launch::new(&config).fails().await;
    assert!(
        stderr.contains("is in use by another agentry process (the file itself is locked: another path to it, such as a hard link, is in use)"),
        "{stderr}"
    );
    // The first server's worker was not touched.
    assert_untouched(running).await;
}

#[tokio::test]
async fn sigterm_delivers_every_terminal_event_to_watchers() {
    use nix::sys::signal::Signal;
    use tokio_stream::StreamExt;
    // Agents that take their time to die (they ignore SIGTERM until kill_grace), so the watches
    // are open well after shutdown began.
    let f = fixture(
        "cat > /dev/null\ntrap '' TERM\nexec sleep 300",
        "shutdown_grace: 10s\n",
        "kill_grace: 1s, ",
    );
    let server = start(&f.config).await;
    let c = server.client().await;
    let mut watches = Vec::new();
    for n in 0..4 {
        let w = spawn_task(&c, &format!("long job {n}"), false).await;
        let mut c = c.clone();
        let mut st = c
            .watch_worker(pb::WatchWorkerRequest {
                worker_id: w.id.clone(),
                after_sequence: 0,
            })
            .await
            .unwrap()
            .into_inner();
        // The snapshot first, then (once it runs) `running`.
        let snap = st.next().await.unwrap().unwrap();
        watches.push((w.id, snap.sequence, st));
    }
    for (id, _, _) in &watches {
        eventually("the worker running", Duration::from_secs(10), || {
            let c = c.clone();
            async move {
                let w = get_on(&c, id).await;
                (w.state == pb::WorkerState::Running as i32)
                    .then_some(())
                    .ok_or(format!("{w:?}"))
            }
        })
        .await;
    }
    server.signal(Signal::SIGTERM);
    for (id, _, mut st) in watches {
        let mut last = None;
        loop {
            match tokio::time::timeout(Duration::from_secs(15), st.next())
                .await
                .expect("the watch ends within the shutdown grace")
            {
                Some(Ok(ev)) => last = Some(ev),
                Some(Err(status)) => panic!("{id}: the watch ended with {status:?}"),
                None => break,
            }
        }
        let last = last.expect("events");
        assert_eq!(
            last.state,
            pb::WorkerState::Killed as i32,
            "{id}: the stream ended OK only after the terminal event: {last:?}"
        );
    }
    assert!(server.exit_within(Duration::from_secs(15)).await.success());
}
