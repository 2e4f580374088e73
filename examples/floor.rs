//! The framework floor for `benches/grpc.sh`: a bare tonic server of `agentry.v1` that answers
//! with replies captured from a real agentry, plus the client steps the script needs around it.
//!
//! ```text
//! floor capture --addr HOST:PORT --token T --workspace DIR --out DIR
//! floor serve   --replies DIR [--writes plain|batched]
//! floor verify  --addr HOST:PORT --token T --replies DIR
//! floor workers --addr HOST:PORT --token T
//! ```
//!
//! - **capture** waits until agentry is SERVING, makes each benchmarked call once (creating the
//!   finished worker that `GetWorker` and the dedupe hit need) and writes, per case, the request
//!   as a length-prefixed gRPC frame (`CASE.req`, the body h2load sends), the reply as protobuf
//!   bytes (`CASE.reply`) and one line of `cases.tsv` (case, path, request and reply bytes).
//! - **serve** binds 127.0.0.1:0 before anything else, prints `listening on ADDR`, and answers
//!   each captured request with a clone of its captured reply; any other request is `NOT_FOUND`,
//!   and the RPCs that are not benchmarked are `UNIMPLEMENTED`. Transport settings are agentry's
//!   (`TCP_NODELAY`, the same header-list bound); none of agentry's layers or handlers run, so
//!   what is left is tonic's own work for a reply of the same size. The floor is bare tonic, so
//!   its connections write each reply as it comes; `--writes batched` wraps them in agentry's
//!   `BatchedWrites` too, to show what that transport change is worth on its own.
//! - **verify** makes each captured call once against a server and checks that it succeeds
//!   (`grpc-status: 0`) with a reply of exactly the captured size (and, for the dedupe case, that
//!   it is a hit on the captured worker). It prints one line per case.
//! - **workers** prints how many workers the caller sees, so the script can check that the
//!   benchmark's dedupe hits started none.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use agentry::grpc::{
    SERVICE_NAME, layers,
    pb::{
        self,
        agent_registry_service_client::AgentRegistryServiceClient,
        agent_registry_service_server::{AgentRegistryService, AgentRegistryServiceServer},
    },
};
use anyhow::{Context, bail, ensure};
use prost::Message;
use tonic::{
    Request, Response, Status,
    metadata::MetadataValue,
    transport::{Channel, Server, server::TcpIncoming},
};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

type Client = AgentRegistryServiceClient<Channel>;

/// The fully-qualified method path of an RPC of the service.
fn path_of(method: &str) -> String {
    format!("/{SERVICE_NAME}/{method}")
}

/// One benchmarked call: its file stem and RPC.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    method: &'static str,
}

const RESOLVE: Case = Case {
    name: "resolve",
    method: "ResolveAgent",
};
const RESOLVE_WS: Case = Case {
    name: "resolve_ws",
    method: "ResolveAgent",
};
const LIST: Case = Case {
    name: "list",
    method: "ListAgents",
};
const GET_WORKER: Case = Case {
    name: "get_worker",
    method: "GetWorker",
};
const DEDUPE: Case = Case {
    name: "dedupe",
    method: "SpawnWorker",
};
const CASES: [Case; 5] = [RESOLVE, RESOLVE_WS, LIST, GET_WORKER, DEDUPE];

/// The agent spawned for the worker cases (bundled, spawnable by a top-level caller, no schema).
const WORKER_AGENT: &str = "quick_task";

/// `--name value` pairs of the command line.
struct Flags(HashMap<String, String>);

impl Flags {
    fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut map = HashMap::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let name = flag
                .strip_prefix("--")
                .with_context(|| format!("expected a --flag, got {flag:?}"))?;
            let value = it.next().with_context(|| format!("{flag} needs a value"))?;
            map.insert(name.to_owned(), value.clone());
        }
        Ok(Self(map))
    }

    fn optional(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn get(&self, name: &str) -> anyhow::Result<&str> {
        self.optional(name)
            .with_context(|| format!("--{name} is required"))
    }
}

/// A request with the bench principal's bearer token.
fn authed<T>(msg: T, token: &str) -> anyhow::Result<Request<T>> {
    let mut req = Request::new(msg);
    if !token.is_empty() {
        let value = MetadataValue::try_from(format!("Bearer {token}"))
            .context("the token is not a valid header value")?;
        req.metadata_mut().insert("authorization", value);
    }
    Ok(req)
}

async fn connect(addr: &str) -> anyhow::Result<Channel> {
    Channel::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("cannot connect to {addr}"))
}

/// Polls health until the registry service is SERVING (agentry's first discovery is done).
async fn wait_serving(channel: Channel) -> anyhow::Result<()> {
    let mut health = HealthClient::new(channel);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: SERVICE_NAME.to_owned(),
            })
            .await
            .map(|r| r.into_inner().status);
        if matches!(status, Ok(s) if s == ServingStatus::Serving as i32) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "agentry not SERVING after 60 s: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The 5-byte gRPC message prefix (uncompressed, big-endian length) and the message.
fn grpc_frame(msg: &impl Message) -> Vec<u8> {
    let body = msg.encode_to_vec();
    let len = u32::try_from(body.len()).expect("a request under 4 GiB");
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The message inside a frame written by [`grpc_frame`].
fn unframe(bytes: &[u8]) -> anyhow::Result<&[u8]> {
    ensure!(
        bytes.len() >= 5 && bytes[0] == 0,
        "not an uncompressed gRPC frame"
    );
    let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    ensure!(
        bytes.len() == 5 + len,
        "frame length {len} ≠ {}",
        bytes.len() - 5
    );
    Ok(&bytes[5..])
}

/// Writes one captured case and returns its `cases.tsv` line.
fn write_case(
    dir: &Path,
    case: Case,
    req: &impl Message,
    reply: &impl Message,
) -> anyhow::Result<String> {
    let frame = grpc_frame(req);
    let reply = reply.encode_to_vec();
    std::fs::write(dir.join(format!("{}.req", case.name)), &frame)?;
    std::fs::write(dir.join(format!("{}.reply", case.name)), &reply)?;
    Ok(format!(
        "{}\t{}\t{}\t{}\n",
        case.name,
        path_of(case.method),
        frame.len(),
        reply.len()
    ))
}

/// Makes every benchmarked call once against agentry and writes the cases.
async fn capture(flags: &Flags) -> anyhow::Result<()> {
    let addr = flags.get("addr")?;
    let token = flags.get("token")?;
    let workspace = flags.get("workspace")?;
    let out = PathBuf::from(flags.get("out")?);
    std::fs::create_dir_all(&out)?;
    let channel = connect(addr).await?;
    wait_serving(channel.clone()).await?;
    let mut client = Client::new(channel);
    let mut tsv = String::new();

    let resolve = pb::ResolveAgentRequest {
        name: "task".to_owned(),
        ..Default::default()
    };
    let reply = client
        .resolve_agent(authed(resolve.clone(), token)?)
        .await
        .context("ResolveAgent")?
        .into_inner();
    tsv += &write_case(&out, RESOLVE, &resolve, &reply)?;

    let resolve_ws = pb::ResolveAgentRequest {
        workspace: workspace.to_owned(),
        ..resolve
    };
    let reply = client
        .resolve_agent(authed(resolve_ws.clone(), token)?)
        .await
        .context("ResolveAgent with a workspace")?
        .into_inner();
    tsv += &write_case(&out, RESOLVE_WS, &resolve_ws, &reply)?;

    let list = pb::ListAgentsRequest {
        workspace: workspace.to_owned(),
        page_size: 100,
        ..Default::default()
    };
    let reply = client
        .list_agents(authed(list.clone(), token)?)
        .await
        .context("ListAgents")?
        .into_inner();
    ensure!(
        reply.agents.len() == 100,
        "ListAgents returned {} agents, not a full page of 100 (is the workspace's agent \
         directory there?)",
        reply.agents.len()
    );
    tsv += &write_case(&out, LIST, &list, &reply)?;

    // A finished worker: a fast one can come back still pending, and its dispatch is then not
    // reusable, so try a few prompts.
    let mut attempt = 0;
    let (spawn, worker) = loop {
        attempt += 1;
        let spawn = pb::SpawnWorkerRequest {
            agent: WORKER_AGENT.to_owned(),
            description: "grpc.sh benchmark target".to_owned(),
            prompt: format!("benchmark target {attempt}: report the state of the repository"),
            wait: true,
            ..Default::default()
        };
        let reply = client
            .spawn_worker(authed(spawn.clone(), token)?)
            .await
            .context("SpawnWorker(wait)")?
            .into_inner();
        let worker = reply.worker.context("SpawnWorker returned no worker")?;
        if worker.state == pb::WorkerState::Completed as i32 {
            break (spawn, worker);
        }
        ensure!(
            attempt < 20,
            "no benchmark worker completed in 20 tries (last state {}); is executor.command \
             /bin/true?",
            worker.state
        );
    };
    let get = pb::GetWorkerRequest {
        worker_id: worker.id.clone(),
    };
    let reply = client
        .get_worker(authed(get.clone(), token)?)
        .await
        .context("GetWorker")?
        .into_inner();
    tsv += &write_case(&out, GET_WORKER, &get, &reply)?;

    let reply = client
        .spawn_worker(authed(spawn.clone(), token)?)
        .await
        .context("SpawnWorker (dedupe hit)")?
        .into_inner();
    ensure!(
        reply.deduplicated && reply.worker.as_ref().is_some_and(|w| w.id == worker.id),
        "the repeated SpawnWorker was not a dedupe hit on {}",
        worker.id
    );
    tsv += &write_case(&out, DEDUPE, &spawn, &reply)?;

    std::fs::write(out.join("cases.tsv"), &tsv)?;
    print!("{tsv}");
    Ok(())
}

/// A captured case read back: the request message and the reply message.
fn load<Req: Message + Default, Rep: Message + Default>(
    dir: &Path,
    case: Case,
) -> anyhow::Result<(Req, Rep)> {
    let read = |ext: &str| {
        let p = dir.join(format!("{}.{ext}", case.name));
        std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))
    };
    let req = Req::decode(unframe(&read("req")?)?)?;
    let rep = Rep::decode(read("reply")?.as_slice())?;
    Ok((req, rep))
}

/// The floor service: captured (request, reply) pairs per RPC, answered with a clone.
struct Floor {
    resolve: Vec<(pb::ResolveAgentRequest, pb::ResolveAgentResponse)>,
    list: Vec<(pb::ListAgentsRequest, pb::ListAgentsResponse)>,
    get: Vec<(pb::GetWorkerRequest, pb::GetWorkerResponse)>,
    spawn: Vec<(pb::SpawnWorkerRequest, pb::SpawnWorkerResponse)>,
}

impl Floor {
    fn load(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            resolve: vec![load(dir, RESOLVE)?, load(dir, RESOLVE_WS)?],
            list: vec![load(dir, LIST)?],
            get: vec![load(dir, GET_WORKER)?],
            spawn: vec![load(dir, DEDUPE)?],
        })
    }
}

/// The captured reply of `req`, cloned.
fn answer<Req: PartialEq, Rep: Clone>(
    pairs: &[(Req, Rep)],
    req: Request<Req>,
) -> Result<Response<Rep>, Status> {
    let req = req.into_inner();
    pairs
        .iter()
        .find(|(r, _)| *r == req)
        .map(|(_, rep)| Response::new(rep.clone()))
        .ok_or_else(|| Status::not_found("the floor has no captured reply for this request"))
}

fn not_measured() -> Status {
    Status::unimplemented("the floor answers only the benchmarked requests")
}

#[tonic::async_trait]
impl AgentRegistryService for Floor {
    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        answer(&self.list, req)
    }

    async fn resolve_agent(
        &self,
        req: Request<pb::ResolveAgentRequest>,
    ) -> Result<Response<pb::ResolveAgentResponse>, Status> {
        answer(&self.resolve, req)
    }

    async fn reload_agents(
        &self,
        _req: Request<pb::ReloadAgentsRequest>,
    ) -> Result<Response<pb::ReloadAgentsResponse>, Status> {
        Err(not_measured())
    }

    async fn list_commands(
        &self,
        _req: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<pb::ListCommandsResponse>, Status> {
        Err(not_measured())
    }

    async fn resolve_command(
        &self,
        _req: Request<pb::ResolveCommandRequest>,
    ) -> Result<Response<pb::ResolveCommandResponse>, Status> {
        Err(not_measured())
    }

    async fn report_progress(
        &self,
        _req: Request<pb::ReportProgressRequest>,
    ) -> Result<Response<pb::ReportProgressResponse>, Status> {
        Err(not_measured())
    }

    async fn prune_worktrees(
        &self,
        _req: Request<pb::PruneWorktreesRequest>,
    ) -> Result<Response<pb::PruneWorktreesResponse>, Status> {
        Err(not_measured())
    }

    async fn spawn_worker(
        &self,
        req: Request<pb::SpawnWorkerRequest>,
    ) -> Result<Response<pb::SpawnWorkerResponse>, Status> {
        answer(&self.spawn, req)
    }

    async fn stop_worker(
        &self,
        _req: Request<pb::StopWorkerRequest>,
    ) -> Result<Response<pb::StopWorkerResponse>, Status> {
        Err(not_measured())
    }

    async fn send_worker_message(
        &self,
        _req: Request<pb::SendWorkerMessageRequest>,
    ) -> Result<Response<pb::SendWorkerMessageResponse>, Status> {
        Err(not_measured())
    }

    async fn get_worker(
        &self,
        req: Request<pb::GetWorkerRequest>,
    ) -> Result<Response<pb::GetWorkerResponse>, Status> {
        answer(&self.get, req)
    }

    async fn list_workers(
        &self,
        _req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        Err(not_measured())
    }

    async fn review(
        &self,
        _req: Request<pb::ReviewRequest>,
    ) -> Result<Response<pb::ReviewResponse>, Status> {
        Err(not_measured())
    }

    type WatchWorkerStream = agentry::grpc::service::WatchStream;

    async fn watch_worker(
        &self,
        _req: Request<pb::WatchWorkerRequest>,
    ) -> Result<Response<Self::WatchWorkerStream>, Status> {
        Err(not_measured())
    }
}

/// Serves the floor until SIGTERM or SIGINT.
async fn serve(flags: &Flags) -> anyhow::Result<()> {
    let floor = Floor::load(Path::new(flags.get("replies")?))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    use std::io::Write as _;
    std::io::stdout().flush()?;
    let stop = async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    let router = Server::builder()
        .http2_max_header_list_size(layers::HTTP2_MAX_HEADER_LIST_BYTES)
        .add_service(AgentRegistryServiceServer::new(floor).max_decoding_message_size(16 << 20));
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    match flags.optional("writes") {
        None | Some("plain") => router.serve_with_incoming_shutdown(incoming, stop).await?,
        Some("batched") => {
            let incoming = agentry::grpc::BatchedWrites::incoming(incoming);
            router.serve_with_incoming_shutdown(incoming, stop).await?;
        }
        Some(other) => anyhow::bail!("--writes is plain or batched, not {other:?}"),
    }
    Ok(())
}

/// Makes each captured call once against `--addr` and checks status and reply size.
async fn verify(flags: &Flags) -> anyhow::Result<()> {
    let addr = flags.get("addr")?;
    let token = flags.get("token")?;
    let dir = PathBuf::from(flags.get("replies")?);
    let mut client = Client::new(connect(addr).await?);
    for case in CASES {
        let captured = std::fs::read(dir.join(format!("{}.reply", case.name)))?.len();
        let got = match case.method {
            "ResolveAgent" => {
                let (req, _) =
                    load::<pb::ResolveAgentRequest, pb::ResolveAgentResponse>(&dir, case)?;
                client
                    .resolve_agent(authed(req, token)?)
                    .await
                    .map(|r| r.into_inner().encoded_len())
            }
            "ListAgents" => {
                let (req, _) = load::<pb::ListAgentsRequest, pb::ListAgentsResponse>(&dir, case)?;
                client
                    .list_agents(authed(req, token)?)
                    .await
                    .map(|r| r.into_inner().encoded_len())
            }
            "GetWorker" => {
                let (req, _) = load::<pb::GetWorkerRequest, pb::GetWorkerResponse>(&dir, case)?;
                client
                    .get_worker(authed(req, token)?)
                    .await
                    .map(|r| r.into_inner().encoded_len())
            }
            "SpawnWorker" => {
                let (req, rep) =
                    load::<pb::SpawnWorkerRequest, pb::SpawnWorkerResponse>(&dir, case)?;
                let want = rep.worker.map(|w| w.id).unwrap_or_default();
                let r = client.spawn_worker(authed(req, token)?).await;
                if let Ok(r) = &r {
                    let r = r.get_ref();
                    ensure!(
                        r.deduplicated && r.worker.as_ref().is_some_and(|w| w.id == want),
                        "{addr}: {}: not a dedupe hit on {want}",
                        case.name
                    );
                }
                r.map(|r| r.into_inner().encoded_len())
            }
            other => bail!("no verification for {other}"),
        };
        // A dedupe hit's hint counts the seconds since the dispatch: a few more digits later.
        let slack = if case.name == DEDUPE.name { 3 } else { 0 };
        match got {
            Ok(n) if (captured..=captured + slack).contains(&n) => {
                println!(
                    "{addr} {} grpc-status 0, reply {n} B (captured {captured} B)",
                    case.name
                );
            }
            Ok(n) => bail!(
                "{addr}: {}: reply is {n} B, captured {captured} B",
                case.name
            ),
            Err(s) => bail!(
                "{addr}: {}: grpc-status {} ({:?}): {}",
                case.name,
                s.code() as i32,
                s.code(),
                s.message()
            ),
        }
    }
    Ok(())
}

/// Prints how many workers the caller sees (every page).
async fn workers(flags: &Flags) -> anyhow::Result<()> {
    let addr = flags.get("addr")?;
    let token = flags.get("token")?;
    let mut client = Client::new(connect(addr).await?);
    let (mut count, mut page_token) = (0usize, String::new());
    loop {
        let r = client
            .list_workers(authed(
                pb::ListWorkersRequest {
                    page_size: 1000,
                    page_token,
                    ..Default::default()
                },
                token,
            )?)
            .await
            .context("ListWorkers")?
            .into_inner();
        count += r.workers.len();
        if r.next_page_token.is_empty() {
            break;
        }
        page_token = r.next_page_token;
    }
    println!("{count}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!("usage: floor capture|serve|verify|workers --flag value ...");
    };
    let flags = Flags::parse(rest)?;
    match command.as_str() {
        "capture" => capture(&flags).await,
        "serve" => serve(&flags).await,
        "verify" => verify(&flags).await,
        "workers" => workers(&flags).await,
        other => bail!("unknown command {other:?}; expected capture, serve, verify or workers"),
    }
}
