//! Runner throughput (docs/runners.md), through the real server over gRPC:
//!
//! * assignments/s through one runner with 32 slots that completes every worker at once (accept,
//!   then finished), beside the `exec` executor's spawns/s on `/bin/true` — the same SpawnWorker
//!   calls with `wait = true` from 64 concurrent callers, only `executor.kind` differs;
//! * progress events/s into 100 watchers of one worker: the runner reports as fast as it can and
//!   the clock stops when every watcher has seen every event.
//!
//! Run with `cargo bench --bench runners`. Plain `std::time::Instant`.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use agentry::{
    config::{Config, ExecutorKind, StoreConfig},
    grpc::pb::{
        self, agent_registry_service_client::AgentRegistryServiceClient,
        connect_request::Msg as In, connect_response::Msg as Out,
        runner_service_client::RunnerServiceClient,
    },
};
use tokio::{net::TcpListener, sync::mpsc};
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::transport::Channel;

const SPAWNS: usize = 2_000;
const CALLERS: usize = 64;
const SLOTS: u32 = 32;
const EVENTS: usize = 2_000;
const WATCHERS: usize = 100;

struct Server {
    channel: Channel,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn server(kind: ExecutorKind) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let mut cfg = Config {
        home: Some(home),
        store: StoreConfig {
            path: Some(dir.path().join("agentry.db")),
            url: None,
        },
        ..Config::default()
    };
    cfg.executor.kind = kind;
    cfg.executor.command = vec!["/bin/true".into()];
    // The progress worker's transitions plus its reports.
    cfg.limits.max_events_per_worker = (EVENTS + 10) as u64;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(agentry::grpc::run(cfg, listener, async move {
        let _ = rx.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    Server {
        channel,
        _dir: dir,
        _stop: tx,
    }
}

/// A runner that accepts and completes every assignment at once; with `hold`, it accepts but
/// hands each worker's (id, lease) to the caller instead of finishing it.
async fn runner(
    channel: Channel,
    slots: u32,
    hold: Option<mpsc::UnboundedSender<(String, String, mpsc::Sender<pb::ConnectRequest>)>>,
) {
    let (tx, rx) = mpsc::channel(1024);
    tx.send(pb::ConnectRequest {
        msg: Some(In::Hello(pb::RunnerHello {
            name: "bench".into(),
            agents: vec!["*".into()],
            slots,
            ..Default::default()
        })),
    })
    .await
    .expect("hello");
    let mut stream = RunnerServiceClient::new(channel)
        .connect(ReceiverStream::new(rx))
        .await
        .expect("connect")
        .into_inner();
    tokio::spawn(async move {
        while let Some(Ok(m)) = stream.next().await {
            let Some(Out::Assignment(a)) = m.msg else {
                continue;
            };
            let send = |msg| pb::ConnectRequest { msg: Some(msg) };
            let _ = tx
                .send(send(In::Accepted(pb::RunnerAccepted {
                    worker_id: a.worker_id.clone(),
                    lease_token: a.lease_token.clone(),
                })))
                .await;
            match &hold {
                Some(h) => {
                    let _ = h.send((a.worker_id, a.lease_token, tx.clone()));
                }
                None => {
                    let _ = tx
                        .send(send(In::Finished(pb::RunnerFinished {
                            worker_id: a.worker_id,
                            lease_token: a.lease_token,
                            session_ref: String::new(),
                            outcome: Some(pb::runner_finished::Outcome::Completed(
                                pb::runner_finished::Completed {
                                    result: "done".into(),
                                },
                            )),
                        })))
                        .await;
                }
            }
        }
    });
}

/// `SPAWNS` waited spawns from `CALLERS` concurrent callers; returns workers/s.
async fn spawns_per_second(channel: Channel) -> f64 {
    let begun = Instant::now();
    let mut callers = Vec::new();
    for c in 0..CALLERS {
        let mut client = AgentRegistryServiceClient::new(channel.clone());
        callers.push(tokio::spawn(async move {
            for i in (c..SPAWNS).step_by(CALLERS) {
                let w = client
                    .spawn_worker(pb::SpawnWorkerRequest {
                        agent: "quick_task".into(),
                        prompt: format!("job {i}"),
                        wait: true,
                        ..Default::default()
                    })
                    .await
                    .expect("spawn")
                    .into_inner()
                    .worker
                    .expect("worker");
                assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
            }
        }));
    }
    for c in callers {
        c.await.expect("caller");
    }
    SPAWNS as f64 / begun.elapsed().as_secs_f64()
}

/// One running worker, `WATCHERS` watchers, `EVENTS` reports; returns events/s (per watcher:
/// every watcher sees every event, so deliveries/s is this times `WATCHERS`).
async fn progress_per_second(channel: Channel) -> f64 {
    let (held_tx, mut held_rx) = mpsc::unbounded_channel();
    runner(channel.clone(), 1, Some(held_tx)).await;
    let mut client = AgentRegistryServiceClient::new(channel.clone());
    let w = client
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "quick_task".into(),
            prompt: "report a lot".into(),
            ..Default::default()
        })
        .await
        .expect("spawn")
        .into_inner()
        .worker
        .expect("worker");
    let (id, lease, tx) = held_rx.recv().await.expect("assigned");
    loop {
        let got = client
            .get_worker(pb::GetWorkerRequest {
                worker_id: id.clone(),
            })
            .await
            .expect("get")
            .into_inner()
            .worker
            .expect("worker");
        if got.state == pb::WorkerState::Running as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let start_seq = 2;
    let last = start_seq + EVENTS as u64;
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut c = AgentRegistryServiceClient::new(channel.clone());
        let id = w.id.clone();
        let mut st = c
            .watch_worker(pb::WatchWorkerRequest {
                worker_id: id,
                after_sequence: start_seq,
            })
            .await
            .expect("watch")
            .into_inner();
        watchers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while let Some(ev) = st.next().await {
                let ev = ev.expect("event");
                if ev.progress.is_some() {
                    n += 1;
                }
                if ev.sequence >= last {
                    break;
                }
            }
            n
        }));
    }
    let begun = Instant::now();
    for i in 0..EVENTS {
        tx.send(pb::ConnectRequest {
            msg: Some(In::Progress(pb::RunnerProgress {
                worker_id: id.clone(),
                lease_token: lease.clone(),
                kind: pb::ProgressKind::Status as i32,
                text: format!("step {i}"),
                data_json: String::new(),
            })),
        })
        .await
        .expect("progress");
    }
    for w in watchers {
        assert_eq!(
            w.await.expect("watcher"),
            EVENTS,
            "every watcher saw every event"
        );
    }
    EVENTS as f64 / begun.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let s = server(ExecutorKind::Runner).await;
        runner(s.channel.clone(), SLOTS, None).await;
        let runner_rate = spawns_per_second(s.channel.clone()).await;
        drop(s);
        let s = server(ExecutorKind::Runner).await;
        let progress_rate = progress_per_second(s.channel.clone()).await;
        drop(s);
        let s = server(ExecutorKind::Exec).await;
        let exec_rate = spawns_per_second(s.channel.clone()).await;

        println!("{SPAWNS} SpawnWorker(wait) calls from {CALLERS} callers, limits.max_running 32");
        println!(
            "  runner, 1 runner x {SLOTS} slots (completes at once) {runner_rate:>10.0} workers/s"
        );
        println!("  exec, /bin/true (baseline)                      {exec_rate:>10.0} workers/s");
        println!("{EVENTS} progress events of one worker into {WATCHERS} watchers");
        println!(
            "  events/s (each seen by every watcher)           {progress_rate:>10.0} events/s"
        );
        println!(
            "  deliveries/s                                     {:>10.0} events/s",
            progress_rate * WATCHERS as f64
        );
    });
}
