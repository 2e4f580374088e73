//! The real binary killed with SIGKILL while a worker runs, then restarted on the same store.

use std::time::Duration;

use agentry::grpc::pb;
use nix::sys::signal::Signal;
use tokio_stream::StreamExt;

use crate::{
    binary::{self, Launch, start},
    helpers::{get_on, pid_in, spawn_task, wait_state_on},
};

/// A directory with an agentry config for the real binary: a fake home, a store, and
/// `run-agent` (the script `body`) as the executor with `$OUT` = the directory.
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: std::path::PathBuf,
    pub(crate) db: std::path::PathBuf,
}

pub(crate) fn fixture(body: &str, extra_yaml: &str, executor_extra: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let bin = crate::helpers::script(root, "run-agent", body);
    std::fs::create_dir_all(root.join("home")).unwrap();
    let db = root.join("state/agentry.db");
    let config = binary::config(
        root,
        "agentry",
        &format!(
            "home: {home}\nstore: {{path: {db}}}\n{extra_yaml}executor: {{command: [{bin}], {executor_extra}env: {{OUT: {out}}}}}\n",
            home = root.join("home").display(),
            db = db.display(),
            bin = bin.display(),
            out = root.display(),
        ),
    );
    Fixture { dir, config, db }
}

#[tokio::test]
async fn kill_9_then_restart_closes_orphans_and_keeps_results() {
    let f = fixture(
        "input=$(cat)\ncase \"$input\" in\n  *quick*) echo fast-result ;;\n  *) echo $$ > \"$OUT/pid\"; exec sleep 30 ;;\nesac",
        "",
        "",
    );
    let (root, config) = (f.dir.path(), &f.config);
    let server = start(config).await;
    let c = server.client().await;
    let done = spawn_task(&c, "quick job", true).await;
    assert_eq!(done.result.as_deref(), Some("fast-result\n"));
    let long = spawn_task(&c, "long job", false).await;
    let pid = pid_in(&root.join("pid")).await;
    // Its start is recorded (the held start writes it up to `executor.start_hold` after the
    // process started, docs/workers.md §6.2) before the server is killed.
    wait_state_on(&c, &long.id, pb::WorkerState::Running as i32).await;
    server.kill_9();
    assert!(
        crate::helpers::pid_alive(pid),
        "the agent outlives a SIGKILLed server until the restart"
    );

    let server = start(config).await;
    let mut c = server.client().await;
    // The restart killed the process it left behind before closing its row.
    assert!(
        !crate::helpers::pid_alive(pid),
        "leftover agent process killed on restart"
    );
    let w = get_on(&c, &long.id).await;
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert_eq!(w.error.as_deref(), Some("orphaned: service restarted"));
    assert!(w.close_time.is_some());
    let kept = get_on(&c, &done.id).await;
    assert_eq!(kept, done, "results survive the restart");
    // Resume a watch across the restart from the stored transitions.
    let mut st = c
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: long.id.clone(),
            after_sequence: 1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(ev) = st.next().await {
        let ev = ev.unwrap();
        seen.push((ev.sequence, ev.state));
    }
    assert_eq!(
        seen,
        [
            (2, pb::WorkerState::Running as i32),
            (3, pb::WorkerState::Failed as i32)
        ]
    );
}

#[tokio::test]
async fn a_finished_worker_read_after_a_restart_is_answered_from_memory_afterwards() {
    let f = fixture("cat > /dev/null\necho the-result", "", "");
    let server = start(&f.config).await;
    let done = spawn_task(&server.client().await, "quick", true).await;
    assert_eq!(done.result.as_deref(), Some("the-result\n"));
    server.signal(Signal::SIGTERM);
    assert!(server.exit_within(Duration::from_secs(10)).await.success());

    // After the restart nothing is in memory: the first read comes from the store.
    let server = start(&f.config).await;
    let c = server.client().await;
    assert_eq!(get_on(&c, &done.id).await, done);
    // A finished row never changes, so it is kept: a change made to it underneath (which the
    // service itself never makes) is not read back, however often the result is polled.
    let conn = rusqlite::Connection::open(&f.db).unwrap();
    let changed = conn
        .execute(
            "UPDATE workers SET result = 'changed underneath' WHERE id = ?1",
            [&done.id],
        )
        .unwrap();
    assert_eq!(changed, 1, "the row is there to change");
    for _ in 0..20 {
        assert_eq!(get_on(&c, &done.id).await, done);
    }
}

#[tokio::test]
async fn sigterm_with_a_running_worker_records_it_killed_and_exits_zero() {
    // The agent ignores SIGTERM, so stopping it takes the whole kill_grace.
    let f = fixture(
        "cat > /dev/null\necho $$ > \"$OUT/pid\"\ntrap '' TERM\nexec sleep 30",
        "shutdown_grace: 10s\n",
        "kill_grace: 2s, ",
    );
    let (root, db) = (f.dir.path(), &f.db);
    let server = start(&f.config).await;
    let mut c = server.client().await;
    let w = c
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: "long".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let pid = pid_in(&root.join("pid")).await;
    let started = std::time::Instant::now();
    server.signal(Signal::SIGTERM);
    // While the worker is still being stopped, the server already accepts no new connection.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(server.try_wait().is_none(), "still stopping its worker");
    assert!(
        std::net::TcpStream::connect(&server.addr).is_err(),
        "no new connections during shutdown"
    );
    // Polled without blocking the runtime: the client's connection must be able to see GOAWAY.
    let status = server.exit_within(Duration::from_secs(15)).await;
    assert!(status.success(), "exit status {status:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        !crate::helpers::pid_alive(pid),
        "the worker process is gone"
    );
    use agentry::workers::store::{SqliteStore, WorkerStore};
    let rec = SqliteStore::open(db)
        .unwrap()
        .get(&agentry::workers::model::WorkerId::parse(&w.id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.state.as_str(), "killed");
    assert_eq!(rec.error.as_deref(), Some("killed: service shutting down"));
}

#[tokio::test]
async fn a_config_with_an_unknown_key_or_bad_value_fails_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, named) in [
        ("listen: 127.0.0.1:0\nlisten_adress: x\n", "listen_adress"),
        ("executor: {timeout: soon}\n", "executor.timeout"),
        ("limits: {max_running: -3}\n", "limits.max_running"),
        (
            "executor: {kill_grace: 20s}\nshutdown_grace: 10s\n",
            "executor.kill_grace",
        ),
    ] {
        let config = dir.path().join("bad.yaml");
        std::fs::write(&config, yaml).unwrap();
        let stderr = Launch::new(&config).fails().await;
        assert!(stderr.contains(named), "{named} not named in: {stderr}");
    }
}

/// The orphan sweep ends the worktrees of the rows it closes as their runs would have
/// (docs/workers.md §6.10): a clean one is removed with its branch, a changed one is kept and
/// reported.
#[tokio::test]
async fn the_restart_sweep_finishes_the_worktrees_of_orphans() {
    use crate::worktrees::{git, repo};
    let f = fixture(
        "input=$(cat)\necho $$ > \"$OUT/$AGENTRY_WORKER_ID.pid\"\ncase \"$input\" in\n  *edit*) echo changed > NEW.txt ;;\nesac\nexec sleep 30",
        "",
        "",
    );
    let root = f.dir.path();
    let repo = repo(root);
    let server = start(&f.config).await;
    let mut c = server.client().await;
    let isolated = |prompt: &str| {
        let mut c = c.clone();
        let req = pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: prompt.into(),
            workspace: repo.display().to_string(),
            isolation: pb::Isolation::Worktree as i32,
            ..Default::default()
        };
        async move {
            c.spawn_worker(req)
                .await
                .unwrap()
                .into_inner()
                .worker
                .unwrap()
        }
    };
    let clean = isolated("look around").await;
    let edited = isolated("edit a file").await;
    for w in [&clean, &edited] {
        pid_in(&root.join(format!("{}.pid", w.id))).await;
    }
    // The edit is on disk before the crash.
    let edited_path = edited.worktree.clone().unwrap().path;
    for _ in 0..100 {
        if std::path::Path::new(&edited_path).join("NEW.txt").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill_9();

    let server = start(&f.config).await;
    c = server.client().await;
    let clean = get_on(&c, &clean.id).await;
    assert_eq!(clean.error.as_deref(), Some("orphaned: service restarted"));
    let wt = clean.worktree.unwrap();
    assert!(!wt.changed, "{wt:?}");
    assert!(!std::path::Path::new(&wt.path).exists(), "removed");
    assert!(!git(&repo, &["branch", "--list", &wt.branch]).contains("agentry/"));
    let edited = get_on(&c, &edited.id).await;
    let wt = edited.worktree.unwrap();
    assert!(wt.changed, "{wt:?}");
    assert!(
        std::path::Path::new(&wt.path).join("NEW.txt").exists(),
        "kept"
    );
    assert!(git(&repo, &["branch", "--list", &wt.branch]).contains(&wt.branch));
}

/// docs §12.2, §12.3: an inbox and transcripts survive `kill -9`. A finished model worker is
/// continued from its transcript after the restart; a worker killed mid-turn with a message
/// in its inbox is closed as orphaned, and the next message continues it with the undelivered
/// one first.
#[tokio::test]
async fn an_inbox_and_transcripts_survive_kill_9() {
    let scripted = crate::model::Scripted::start(serde_json::json!([
        {"match": "what about tests", "content": "tests answered"},
        {"match": "resume please", "content": "resumed"},
        {"match": "quick question", "content": "quick answer"},
        {"match": "stuck brief", "delay_ms": 60000, "content": "never"},
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("home")).unwrap();
    let config = binary::config(
        root,
        "agentry",
        &format!(
            "{}executor: {{kind: model, timeout: 120s}}\n\
             models: {{default: scripted/test-model, providers: [{{name: scripted, base_url: '{}'}}]}}\n",
            binary::home_and_store(&root.join("home"), "agentry"),
            scripted.base_url,
        ),
    );
    let server = start(&config).await;
    let mut c = server.client().await;
    let done = spawn_task(&c, "quick question", true).await;
    assert_eq!(done.result.as_deref(), Some("quick answer"));
    let stuck = spawn_task(&c, "stuck brief", false).await;
    crate::helpers::eventually("the stuck request", Duration::from_secs(10), || async {
        (scripted.requests().len() >= 2).then_some(())
    })
    .await;
    let queued = c
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: stuck.id.clone(),
            text: "what about tests".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!queued.continued);
    server.kill_9();

    let server = start(&config).await;
    let mut c = server.client().await;
    let orphan = get_on(&c, &stuck.id).await;
    assert_eq!(orphan.state, pb::WorkerState::Failed as i32);
    assert_eq!(orphan.undelivered_messages, 1, "{orphan:?}");
    let next = c
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: stuck.id.clone(),
            text: "resume please".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(next.continues, stuck.id);
    let last = scripted.requests().pop().unwrap();
    assert_eq!(
        crate::model::user_messages(&last),
        ["stuck brief", "what about tests", "resume please"]
    );
    assert_eq!(next.result.as_deref(), Some("tests answered"));

    let more = c
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: done.id.clone(),
            text: "resume please".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(more.continues, done.id);
    let last = scripted.requests().pop().unwrap();
    assert_eq!(last["body"]["messages"][2]["content"], "quick answer");
    assert_eq!(more.result.as_deref(), Some("resumed"));
}
