//! The real binary killed with SIGKILL while a worker runs, then restarted on the same store.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use agentry::grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::helpers::eventually;

pub(crate) struct Server(pub(crate) Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn start_binary(config: &std::path::Path) -> Server {
    Server(
        Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

pub(crate) async fn connect(addr: &str) -> AgentRegistryServiceClient<Channel> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(ch) = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            let mut c = AgentRegistryServiceClient::new(ch);
            if c.list_agents(pb::ListAgentsRequest::default())
                .await
                .is_ok()
            {
                return c;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server did not come up on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A directory with an agentry config for the real binary: a free port, a fake home, a store,
/// and `run-agent` (the script `body`) as the executor with `$OUT` = the directory.
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) addr: String,
    pub(crate) config: std::path::PathBuf,
    pub(crate) db: std::path::PathBuf,
}

pub(crate) fn fixture(body: &str, extra_yaml: &str, executor_extra: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let bin = crate::helpers::script(root, "run-agent", body);
    std::fs::create_dir_all(root.join("home")).unwrap();
    let config = root.join("agentry.yaml");
    let db = root.join("state/agentry.db");
    std::fs::write(
        &config,
        format!(
            "listen: {addr}\nhome: {home}\nstore: {{path: {db}}}\n{extra_yaml}executor: {{command: [{bin}], {executor_extra}env: {{OUT: {out}}}}}\n",
            home = root.join("home").display(),
            db = db.display(),
            bin = bin.display(),
            out = root.display(),
        ),
    )
    .unwrap();
    Fixture {
        dir,
        addr,
        config,
        db,
    }
}

#[tokio::test]
async fn kill_9_then_restart_closes_orphans_and_keeps_results() {
    let f = fixture(
        "input=$(cat)\ncase \"$input\" in\n  *quick*) echo fast-result ;;\n  *) echo $$ > \"$OUT/pid\"; exec sleep 30 ;;\nesac",
        "",
        "",
    );
    let (root, addr, config) = (f.dir.path(), f.addr.as_str(), &f.config);
    let mut server = start_binary(config);
    let mut c = connect(addr).await;
    let done = c
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: "quick job".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(done.result.as_deref(), Some("fast-result\n"));
    let long = c
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: "long job".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let pid_file = root.join("pid");
    assert!(eventually(Duration::from_secs(10), || async { pid_file.exists() }).await);
    server.0.kill().unwrap(); // SIGKILL: no graceful path runs
    server.0.wait().unwrap();
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        crate::helpers::pid_alive(pid),
        "the agent outlives a SIGKILLed server until the restart"
    );

    let _server = start_binary(config);
    let mut c = connect(addr).await;
    // The restart killed the process it left behind before closing its row.
    assert!(
        !crate::helpers::pid_alive(pid),
        "leftover agent process killed on restart"
    );
    let w = c
        .get_worker(pb::GetWorkerRequest {
            worker_id: long.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert_eq!(w.error.as_deref(), Some("orphaned: service restarted"));
    assert!(w.close_time.is_some());
    let kept = c
        .get_worker(pb::GetWorkerRequest {
            worker_id: done.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
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
async fn sigterm_with_a_running_worker_records_it_killed_and_exits_zero() {
    // The agent ignores SIGTERM, so stopping it takes the whole kill_grace.
    let f = fixture(
        "cat > /dev/null\necho $$ > \"$OUT/pid\"\ntrap '' TERM\nexec sleep 30",
        "shutdown_grace: 10s\n",
        "kill_grace: 2s, ",
    );
    let (root, db) = (f.dir.path(), &f.db);
    let mut server = start_binary(&f.config);
    let mut c = connect(&f.addr).await;
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
    let pid_file = root.join("pid");
    assert!(eventually(Duration::from_secs(10), || async { pid_file.exists() }).await);
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    let started = std::time::Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &server.0.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    // While the worker is still being stopped, the server already accepts no new connection.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "still stopping its worker"
    );
    assert!(
        std::net::TcpStream::connect(&f.addr).is_err(),
        "no new connections during shutdown"
    );
    // Poll without blocking the runtime: the client's connection must be able to see GOAWAY.
    let status = loop {
        if let Some(st) = server.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "server did not exit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        !crate::helpers::pid_alive(pid.parse().unwrap()),
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

#[test]
fn a_config_with_an_unknown_key_or_bad_value_fails_start_up_naming_it() {
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
        let out = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(["serve", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{named} not named in: {stderr}");
    }
}
