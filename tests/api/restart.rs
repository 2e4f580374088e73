//! The real binary killed with SIGKILL while a worker runs, then restarted on the same store.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use agentry::grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::helpers::eventually;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_binary(config: &std::path::Path) -> Server {
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

async fn connect(addr: &str) -> AgentRegistryServiceClient<Channel> {
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

#[tokio::test]
async fn kill_9_then_restart_closes_orphans_and_keeps_results() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let bin = root.join("run-agent");
    std::fs::write(
        &bin,
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n  *quick*) echo fast-result ;;\n  *) echo $$ > \"$OUT/pid\"; exec sleep 30 ;;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    let config = root.join("agentry.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: {addr}\nhome: {home}\nstore: {{path: {db}}}\nexecutor: {{command: [{bin}], env: {{OUT: {out}}}}}\n",
            home = root.join("home").display(),
            db = root.join("state/agentry.db").display(),
            bin = bin.display(),
            out = root.display(),
        ),
    )
    .unwrap();

    let mut server = start_binary(&config);
    let mut c = connect(&addr).await;
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
    // The orphaned agent process is not ours to keep; clean it up.
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        let _ = Command::new("kill").arg("-9").arg(pid.trim()).status();
    }

    let _server = start_binary(&config);
    let mut c = connect(&addr).await;
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
