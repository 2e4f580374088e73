//! The load side of the replica benchmarks (examples/replicas_load.rs, benches/fleet.rs),
//! shared by `#[path]`: a client that waits for its replica to answer, and a runner that accepts
//! and completes every assignment at once.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use agentry::grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// A client of the replica on `addr`, once it answers `ListAgents` (within 60 s).
pub async fn connect(addr: SocketAddr) -> AgentRegistryServiceClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(ch) = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
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
            Instant::now() < deadline,
            "replica on {addr} did not come up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A runner on `addr` with `slots` slots that accepts and completes every assignment at once.
pub async fn instant_runner(addr: SocketAddr, slots: u32) -> JoinHandle<()> {
    use pb::{connect_request::Msg as In, connect_response::Msg as Out};
    let ch = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect the runner");
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tx.send(pb::ConnectRequest {
        msg: Some(In::Hello(pb::RunnerHello {
            name: "bench-runner".into(),
            agents: vec!["*".into()],
            slots,
            ..Default::default()
        })),
    })
    .await
    .expect("hello");
    let mut stream = pb::runner_service_client::RunnerServiceClient::new(ch)
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("runner stream")
        .into_inner();
    tokio::spawn(async move {
        while let Some(Ok(m)) = stream.next().await {
            if let Some(Out::Assignment(a)) = m.msg {
                let (id, lease) = (a.worker_id, a.lease_token);
                let accepted = In::Accepted(pb::RunnerAccepted {
                    worker_id: id.clone(),
                    lease_token: lease.clone(),
                });
                let finished = In::Finished(pb::RunnerFinished {
                    worker_id: id,
                    lease_token: lease,
                    session_ref: String::new(),
                    outcome: Some(pb::runner_finished::Outcome::Completed(
                        pb::runner_finished::Completed {
                            result: "ok".into(),
                        },
                    )),
                });
                for msg in [accepted, finished] {
                    if tx
                        .send(pb::ConnectRequest { msg: Some(msg) })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    })
}
