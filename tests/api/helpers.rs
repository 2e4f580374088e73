//! The shared harness: a real agentry server on 127.0.0.1:0 with fixture directories.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use agentry::{
    config::Config,
    grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
};
use tempfile::TempDir;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::{Request, transport::Channel};
use tonic_health::pb::health_client::HealthClient;

/// A running server plus the directories it reads.
#[allow(dead_code)]
pub struct TestServer {
    pub addr: std::net::SocketAddr,
    /// The HTTP listener's address, with `http.listen`.
    pub http: Option<std::net::SocketAddr>,
    pub client: AgentRegistryServiceClient<Channel>,
    pub health: HealthClient<Channel>,
    pub dir: TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    /// The fake `$HOME`.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// A workspace directory (created).
    pub fn ws(&self, rel: &str) -> PathBuf {
        let p = self.dir.path().join("ws").join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Stops the server and waits for it to exit; hands back its directory.
    pub async fn stop(mut self) -> anyhow::Result<TempDir> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.handle.take().unwrap().await.unwrap()?;
        Ok(std::mem::replace(
            &mut self.dir,
            tempfile::tempdir().unwrap(),
        ))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Config rooted in `dir`: home = dir/home, no watchers of the real home.
pub fn config_in(dir: &Path) -> Config {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    Config {
        home: Some(home),
        store: agentry::config::StoreConfig {
            path: Some(dir.join("state/agentry.db")),
            url: None,
        },
        ..Config::default()
    }
}

/// Starts a server with the default fixture config.
pub async fn start() -> TestServer {
    start_with(|_| {}).await
}

/// Starts a server after `tweak` adjusted the config (and may write fixture files into the
/// directory it is given).
pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config_in(dir.path());
    tweak(&mut cfg);
    start_in(dir, cfg).await
}

/// Starts a server in an existing directory with a given config.
///
/// With `http.listen` set, waits until the service is up and says where its HTTP listener is
/// ([`TestServer::http`]): `127.0.0.1:0` lets the system pick a port no one else holds.
pub async fn start_in(dir: TempDir, cfg: Config) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let with_http = cfg.http.listen.is_some();
    let (up_tx, up_rx) = oneshot::channel();
    let mut handle = tokio::spawn(agentry::grpc::run_announced(
        cfg,
        listener,
        async move {
            let _ = rx.await;
        },
        move |_, http| {
            let _ = up_tx.send(http);
        },
    ));
    let http = if with_http {
        // The sender is dropped unused when the service fails to start: say why.
        match up_rx.await {
            Ok(http) => http,
            Err(_) => panic!(
                "the server ended before it was up: {:?}",
                (&mut handle).await
            ),
        }
    } else {
        None
    };
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    TestServer {
        addr,
        http,
        client: AgentRegistryServiceClient::new(channel.clone()),
        health: HealthClient::new(channel),
        dir,
        shutdown: Some(tx),
        handle: Some(handle),
    }
}

/// Turns authentication on: writes `tokens` (token → principal lines) as `tokens.yaml` beside
/// the fake home and points `auth.tokens_file` at it.
pub fn tokens_file(c: &mut Config, tokens: &str) {
    let path = c
        .home
        .clone()
        .unwrap()
        .parent()
        .unwrap()
        .join("tokens.yaml");
    std::fs::write(&path, tokens).unwrap();
    c.auth.tokens_file = Some(path);
}

/// Writes a persona file `dir/file` with the given frontmatter lines and body.
pub fn persona(dir: &Path, file: &str, front: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(file);
    std::fs::write(&p, format!("---\n{front}\n---\n{body}\n")).unwrap();
    p
}

/// Shorthand: a persona with just a name and a description.
pub fn simple(dir: &Path, file: &str, name: &str, description: &str) -> PathBuf {
    persona(
        dir,
        file,
        &format!("name: {name}\ndescription: {description}"),
        "prompt",
    )
}

/// A request with metadata.
pub fn req<T>(msg: T, md: &[(&'static str, &str)]) -> Request<T> {
    let mut r = Request::new(msg);
    for (k, v) in md {
        r.metadata_mut().insert(*k, v.parse().unwrap());
    }
    r
}

/// Lists everything (one big page) for a workspace.
pub async fn list_all(s: &TestServer, ws: &Path, shadowed: bool) -> pb::ListAgentsResponse {
    s.client
        .clone()
        .list_agents(pb::ListAgentsRequest {
            workspace: ws.display().to_string(),
            view: pb::AgentView::Full as i32,
            include_shadowed: shadowed,
            page_size: 1000,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Lists every workflow command (one big page) for a workspace.
pub async fn list_commands_all(
    s: &TestServer,
    ws: &Path,
    shadowed: bool,
) -> pb::ListCommandsResponse {
    s.client
        .clone()
        .list_commands(pb::ListCommandsRequest {
            workspace: ws.display().to_string(),
            include_shadowed: shadowed,
            page_size: 1000,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Walks a paged listing from its first page: `page(token)` fetches one page and returns its
/// items and `next_page_token`. Every page's items, in order; a listing that never ends fails.
pub async fn walk_pages<T, F, Fut>(mut page: F) -> Vec<Vec<T>>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = (Vec<T>, String)>,
{
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let (items, next) = page(token).await;
        pages.push(items);
        if next.is_empty() {
            return pages;
        }
        assert!(pages.len() < 1000, "the listing never ends");
        token = next;
    }
}

/// Names of a list of agents.
pub fn names(agents: &[pb::Agent]) -> Vec<String> {
    agents.iter().map(|a| a.name.clone()).collect()
}

/// What one poll of [`eventually`] saw: `Ok`/`Some` ends the wait with its value; `Err` is the
/// observation shown if the wait runs out (`None` has nothing to show).
pub trait Poll<T> {
    fn seen(self) -> Result<T, String>;
}

impl<T> Poll<T> for Option<T> {
    fn seen(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_owned())
    }
}

impl<T> Poll<T> for Result<T, String> {
    fn seen(self) -> Result<T, String> {
        self
    }
}

/// How often [`eventually`] polls.
pub const POLL_EVERY: Duration = Duration::from_millis(20);

/// Polls `f` every [`POLL_EVERY`] until it gives a value, and returns that value; panics naming
/// `what` was awaited and the last observation once `within` has passed. It sleeps on tokio's
/// clock, so the runtime (and a server on it) keeps running between polls.
pub async fn eventually<T, P, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    P: Poll<T>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = P>,
{
    let started = tokio::time::Instant::now();
    loop {
        let last = match f().await.seen() {
            Ok(v) => return v,
            Err(last) => last,
        };
        if started.elapsed() >= within {
            panic!("waited {within:?} for {what}; last seen: {last}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// An HTTP client for the tests' own requests. reqwest is built without a default TLS crypto
/// provider (the service installs ring's when it starts); a test whose servers all run as other
/// processes must install it here, or the client panics on construction.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Asserts a status: code, exact message, ErrorInfo reason.
#[track_caller]
pub fn assert_status(s: &tonic::Status, code: tonic::Code, reason: &str, message: &str) {
    use tonic_types::StatusExt;
    assert_eq!(s.code(), code, "{s:?}");
    assert_eq!(s.message(), message, "{s:?}");
    let info = s.get_details_error_info().expect("ErrorInfo detail");
    assert_eq!(info.reason, reason);
    assert_eq!(info.domain, "agentry.dev");
}

/// Asserts INVALID_ARGUMENT with a BadRequest violation on `field`.
#[track_caller]
pub fn assert_bad_field(s: &tonic::Status, field: &str) {
    use tonic_types::StatusExt;
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    let br = s.get_details_bad_request().expect("BadRequest detail");
    assert!(
        br.field_violations.iter().any(|v| v.field == field),
        "no violation on {field}: {br:?}"
    );
}

/// Writes an executable `#!/bin/sh` script.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')),
        Err(_) => false,
    }
}

/// The pid an agent script wrote into `path` (`echo $$ > file`), once the whole line is there.
pub async fn pid_in(path: &Path) -> i32 {
    eventually(
        &format!("a pid in {}", path.display()),
        Duration::from_secs(20),
        || async {
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            match text.strip_suffix('\n').map(str::parse) {
                Some(Ok(pid)) => Ok(pid),
                _ => Err(format!("{text:?}")),
            }
        },
    )
    .await
}

/// GetWorker, unwrapped.
pub async fn get(s: &TestServer, id: &str) -> pb::Worker {
    get_on(&s.client, id).await
}

/// GetWorker through any client (the real binary's too), unwrapped.
pub async fn get_on(c: &AgentRegistryServiceClient<Channel>, id: &str) -> pb::Worker {
    c.clone()
        .get_worker(pb::GetWorkerRequest {
            worker_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap()
}

/// Waits until GetWorker through any client says `state`.
pub async fn wait_state_on(c: &AgentRegistryServiceClient<Channel>, id: &str, state: i32) {
    eventually(
        &format!("worker {id} in state {state}"),
        Duration::from_secs(10),
        || {
            let (c, id) = (c.clone(), id.to_owned());
            async move {
                let w = get_on(&c, &id).await;
                (w.state == state).then_some(()).ok_or(format!("{w:?}"))
            }
        },
    )
    .await;
}

/// StopWorker of `id` with `reason`, unwrapped: the stopped worker.
pub async fn stop_worker(s: &TestServer, id: &str, reason: &str) -> pb::Worker {
    s.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: id.into(),
            reason: reason.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap()
}

/// SpawnWorker of the bundled `task` agent with `prompt` through any client, unwrapped.
pub async fn spawn_task(
    c: &AgentRegistryServiceClient<Channel>,
    prompt: &str,
    wait: bool,
) -> pb::Worker {
    spawn_task_reply(c, prompt, wait).await.worker.unwrap()
}

/// [`spawn_task`]'s whole reply (`deduplicated`, `hint`).
pub async fn spawn_task_reply(
    c: &AgentRegistryServiceClient<Channel>,
    prompt: &str,
    wait: bool,
) -> pb::SpawnWorkerResponse {
    c.clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: prompt.into(),
            wait,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// The path `var` names, of `what` `.ci/run` installs (pinned): `None` skips the test with a
/// note on a developer's machine, and under `CI=true` a missing one fails the test instead.
pub fn installed(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{var} is not set under CI=true: .ci/run installs {what} and sets it")
        }
        _ => {
            eprintln!("skipped: {var} is not set (.ci/run installs {what} and sets it)");
            None
        }
    }
}
