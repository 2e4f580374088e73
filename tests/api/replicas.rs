//! Two real agentry processes on one PostgreSQL database (docs §9): every worker is visible,
//! watchable and stoppable from either, identical dispatches run once, worker tokens work on
//! both, a lost replica's workers are closed by the other, and health follows the database.
//!
//! Needs `AGENTRY_TEST_POSTGRES_URL`; without it each test passes at once and the skip is
//! printed once.

use std::time::{Duration, Instant};

use agentry::grpc::pb::{self, agent_registry_service_client::AgentRegistryServiceClient};
use agentry::workers::store::testdb::TestDb;
use nix::sys::signal::Signal;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::{
    binary::{self, Binary, Launch},
    helpers::{
        eventually, get_on as get, pid_alive, pid_in, req, script, spawn_task_reply as spawn,
        wait_state_on as wait_state,
    },
};

/// The agent: records its pid, token and each run, then answers fast (`quick`), after a
/// second (`slowish`), once the file `$OUT/<worker id>.go` exists (`gated`) or never (anything
/// else: sleeps until killed).
const AGENT: &str = r#"input=$(cat)
echo $$ > "$OUT/$AGENTRY_WORKER_ID.pid"
printf %s "$AGENTRY_WORKER_TOKEN" > "$OUT/$AGENTRY_WORKER_ID.token"
echo "$AGENTRY_WORKER_ID" >> "$OUT/runs"
case "$input" in
  *quick*) echo fast-result ;;
  *slowish*) sleep 1; echo slow-result ;;
  *gated*) while [ ! -e "$OUT/$AGENTRY_WORKER_ID.go" ]; do sleep 0.05; done; echo gated-result ;;
  *) exec sleep 30 ;;
esac"#;

/// One replica: its process and a client.
struct Replica {
    server: Binary,
    client: AgentRegistryServiceClient<Channel>,
}

/// Two replicas `a` and `b` on one fresh database, sharing one agent script and one directory
/// (`$OUT`); `extra` is added to both configs.
struct Pair {
    dir: tempfile::TempDir,
    a: Replica,
    b: Replica,
    // Last: the database is dropped after both processes are gone.
    db: TestDb,
}

/// Writes the config of replica `name` on `url` and returns its path.
fn replica_config(
    root: &std::path::Path,
    name: &str,
    url: &str,
    extra: &str,
) -> std::path::PathBuf {
    let bin = root.join("run-agent");
    if !bin.exists() {
        script(root, "run-agent", AGENT);
    }
    std::fs::create_dir_all(root.join("home")).unwrap();
    binary::config(
        root,
        name,
        &format!(
            "home: {home}\nstore: {{url: '{url}'}}\nreplica: {{name: {name}, lease: 2s}}\n\
             {extra}executor: {{command: [{bin}], kill_grace: 1s, env: {{OUT: {out}}}}}\n",
            home = root.join("home").display(),
            bin = bin.display(),
            out = root.display(),
        ),
    )
}

async fn start_replica(root: &std::path::Path, name: &str, url: &str, extra: &str) -> Replica {
    let server = binary::start(&replica_config(root, name, url, extra)).await;
    let client = server.client().await;
    Replica { server, client }
}

async fn pair(extra: &str) -> Option<Pair> {
    let db = TestDb::create().await?;
    let dir = tempfile::tempdir().unwrap();
    let a = start_replica(dir.path(), "a", &db.url, extra).await;
    let b = start_replica(dir.path(), "b", &db.url, extra).await;
    Some(Pair { dir, a, b, db })
}

/// Two replicas `a` and `b` on one fresh database that run workers on runners
/// ([`runner_replica`]).
async fn runner_pair() -> Option<Pair> {
    let db = TestDb::create().await?;
    let dir = tempfile::tempdir().unwrap();
    let a = runner_replica(dir.path(), "a", &db.url).await;
    let b = runner_replica(dir.path(), "b", &db.url).await;
    Some(Pair { dir, a, b, db })
}

/// Every (sequence, state) a watch delivers until it ends.
async fn watch_all(
    c: AgentRegistryServiceClient<Channel>,
    id: String,
    after_sequence: u64,
) -> Vec<(u64, i32)> {
    rest_of(watch(c, id, after_sequence).await, Vec::new()).await
}

async fn watch(
    mut c: AgentRegistryServiceClient<Channel>,
    worker_id: String,
    after_sequence: u64,
) -> tonic::Streaming<pb::WatchWorkerResponse> {
    c.watch_worker(pb::WatchWorkerRequest {
        worker_id,
        after_sequence,
    })
    .await
    .unwrap()
    .into_inner()
}

async fn rest_of(
    mut st: tonic::Streaming<pb::WatchWorkerResponse>,
    mut seen: Vec<(u64, i32)>,
) -> Vec<(u64, i32)> {
    while let Some(ev) = st.next().await {
        let ev = ev.unwrap();
        seen.push((ev.sequence, ev.state));
    }
    seen
}

/// A watch from the start that is attached (its snapshot arrived): the task that collects
/// every (sequence, state) until it ends.
async fn watch_attached(
    c: AgentRegistryServiceClient<Channel>,
    id: String,
) -> tokio::task::JoinHandle<Vec<(u64, i32)>> {
    let mut st = watch(c, id, 0).await;
    let first = tokio::time::timeout(Duration::from_secs(10), st.next())
        .await
        .expect("a snapshot in time")
        .expect("a snapshot")
        .unwrap();
    tokio::spawn(rest_of(st, vec![(first.sequence, first.state)]))
}

/// The pid the agent of worker `id` wrote, once it has.
async fn pid_of(root: &std::path::Path, id: &str) -> i32 {
    pid_in(&root.join(format!("{id}.pid"))).await
}

const RUNNING: i32 = pb::WorkerState::Running as i32;
const COMPLETED: i32 = pb::WorkerState::Completed as i32;
const KILLED: i32 = pb::WorkerState::Killed as i32;
const FAILED: i32 = pb::WorkerState::Failed as i32;

#[tokio::test]
async fn replicas_a_worker_on_a_is_seen_listed_and_stopped_from_b() {
    let Some(p) = pair("").await else { return };
    let w = spawn(&p.a.client, "long job", false).await.worker.unwrap();
    let pid = pid_of(p.dir.path(), &w.id).await;

    // GetWorker and ListWorkers on B read the shared rows.
    let mut b = p.b.client.clone();
    wait_state(&b, &w.id, RUNNING).await;
    let listed = b
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(
        listed.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
        [w.id.as_str()]
    );

    // A watch on B follows A's worker to its end.
    let watch = watch_attached(p.b.client.clone(), w.id.clone()).await;

    // StopWorker on B: the process on A is really gone and the row is killed.
    let started = Instant::now();
    let stopped = b
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: "from b".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(stopped.state, KILLED);
    assert_eq!(stopped.error.as_deref(), Some("killed: from b"));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!pid_alive(pid), "the agent process on A is gone");
    assert_eq!(get(&p.a.client, &w.id).await, stopped);

    let seen = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, [(2, RUNNING), (3, KILLED)]);
    // Resuming after a seen sequence replays the rest, on either replica.
    assert_eq!(
        watch_all(p.b.client.clone(), w.id.clone(), 1).await,
        [(2, RUNNING), (3, KILLED)]
    );
    assert_eq!(
        watch_all(p.a.client.clone(), w.id.clone(), 2).await,
        [(3, KILLED)]
    );
    // Stopping again from either side is idempotent; an unknown id is NOT_FOUND.
    let again = b
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(again, stopped);
    let err = b
        .stop_worker(pb::StopWorkerRequest {
            worker_id: agentry::workers::model::WorkerId::generate().to_string(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
}

#[tokio::test]
async fn replicas_a_watch_on_b_sees_every_event_of_a_worker_on_a_in_order() {
    let Some(p) = pair("").await else { return };
    let w = spawn(&p.a.client, "slowish job", false)
        .await
        .worker
        .unwrap();
    let watch = tokio::spawn(watch_all(p.b.client.clone(), w.id.clone(), 0));
    let seen = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .unwrap()
        .unwrap();
    // A snapshot (pending or running), then every later event, strictly in order, ending
    // completed.
    let (first, _) = seen[0];
    let expected: Vec<(u64, i32)> = [
        (1, pb::WorkerState::Pending as i32),
        (2, RUNNING),
        (3, COMPLETED),
    ]
    .into_iter()
    .filter(|(s, _)| *s >= first)
    .collect();
    assert_eq!(seen, expected, "{seen:?}");
    assert_eq!(
        watch_all(p.b.client.clone(), w.id.clone(), 1).await,
        [(2, RUNNING), (3, COMPLETED)]
    );
    let done = get(&p.b.client, &w.id).await;
    assert_eq!(done.result.as_deref(), Some("slow-result\n"));
}

/// A connection to the database at `url` listening on `channel`, and the payloads of the
/// notifications it receives from now on.
async fn listen(
    url: &str,
    channel: &str,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let Ok(tokio_postgres::AsyncMessage::Notification(n)) = message
                && tx.send(n.payload().to_owned()).is_err()
            {
                return;
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .unwrap();
    (client, heard)
}

/// The first payload `heard` receives that `pred` accepts, within 15 seconds.
async fn heard_until(
    heard: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let payload = heard.recv().await.expect("the listening connection");
            if pred(&payload) {
                return payload;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no notification of {what} in 15 s"))
}

#[tokio::test]
async fn replicas_a_watch_on_b_makes_a_announce_its_worker_s_events() {
    // docs/replicas.md, "Followed events": a replica sends its events' notifications only
    // while another replica follows them. Here the database's own channel is read: a watch on
    // b must make a announce (first its resync, `*:<a>`, then the worker's next event), or b
    // would learn of the worker's end only by re-reading.
    let Some(p) = pair("").await else { return };
    let (client, mut heard) = listen(&p.db.url, "agentry_events").await;

    let w = spawn(&p.a.client, "gated job", false).await.worker.unwrap();
    wait_state(&p.a.client, &w.id, RUNNING).await;
    let watch = watch_attached(p.b.client.clone(), w.id.clone()).await;
    let a_id: String = client
        .query_one("SELECT id FROM replicas WHERE name = 'a'", &[])
        .await
        .unwrap()
        .get(0);
    let resync = format!("*:{a_id}");
    heard_until(&mut heard, "a's resync", |p| p == resync).await;
    std::fs::write(p.dir.path().join(format!("{}.go", w.id)), "").unwrap();
    let end = format!("{}:3:", w.id);
    heard_until(&mut heard, "the worker's end", |p| {
        p.split(',').any(|e| e.starts_with(&end))
    })
    .await;
    let seen = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.last(), Some(&(3, COMPLETED)), "{seen:?}");
}

#[tokio::test]
async fn replicas_b_lists_a_s_workers_by_state() {
    // On PostgreSQL a completed worker is in no state index (docs/replicas.md, "Schema"):
    // listed by state, with other states or alone, it is still found.
    let Some(p) = pair("").await else { return };
    let done = spawn(&p.a.client, "quick job", true).await.worker.unwrap();
    assert_eq!(done.state, COMPLETED);
    let open = spawn(&p.a.client, "gated job", false).await.worker.unwrap();
    let b = p.b.client.clone();
    wait_state(&b, &open.id, RUNNING).await;
    let by_state = |states: &[i32]| {
        let (mut b, states) = (b.clone(), states.to_vec());
        async move {
            let listed = b
                .list_workers(pb::ListWorkersRequest {
                    states,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .workers;
            listed.into_iter().map(|w| w.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(by_state(&[COMPLETED]).await, std::slice::from_ref(&done.id));
    assert_eq!(by_state(&[RUNNING]).await, std::slice::from_ref(&open.id));
    assert_eq!(
        by_state(&[RUNNING, COMPLETED]).await,
        [done.id.clone(), open.id.clone()]
    );
    assert_eq!(by_state(&[FAILED, KILLED]).await, Vec::<String>::new());
    std::fs::write(p.dir.path().join(format!("{}.go", open.id)), "").unwrap();
    wait_state(&b, &open.id, COMPLETED).await;
    assert_eq!(
        by_state(&[COMPLETED]).await,
        [done.id.clone(), open.id.clone()]
    );
}

#[tokio::test]
async fn replicas_an_identical_dispatch_to_a_and_b_at_once_runs_once() {
    let Some(p) = pair("").await else { return };
    let (a, b) = (p.a.client.clone(), p.b.client.clone());
    let (ra, rb) = tokio::join!(
        spawn(&a, "slowish  dedupe me", true),
        spawn(&b, "slowish dedupe   me", true)
    );
    let (wa, wb) = (ra.worker.unwrap(), rb.worker.unwrap());
    assert_eq!(wa.id, wb.id, "one worker serves both");
    assert_eq!(wa.state, COMPLETED);
    assert_eq!(wb.state, COMPLETED);
    assert_eq!(
        u8::from(ra.deduplicated) + u8::from(rb.deduplicated),
        1,
        "exactly one of them was deduplicated"
    );
    let hint = if ra.deduplicated { &ra.hint } else { &rb.hint };
    assert!(hint.contains(&wa.id), "{hint}");
    let runs = std::fs::read_to_string(p.dir.path().join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 1, "{runs}");
    // A second, later dispatch on the other replica is a hit too (moka on one, the claim row on
    // the other).
    let again = spawn(&b, "slowish dedupe me", false).await;
    assert!(again.deduplicated);
    assert_eq!(again.worker.unwrap().id, wa.id);
    let runs = std::fs::read_to_string(p.dir.path().join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 1, "{runs}");
}

/// A worker that gets a git worktree claims its dedupe key before its checkout (docs §9,
/// Dedupe): identical isolated dispatches to both replicas still run once.
#[tokio::test]
async fn replicas_an_identical_isolated_dispatch_to_a_and_b_at_once_runs_once() {
    let Some(p) = pair("").await else { return };
    let repo = crate::worktrees::repo(p.dir.path());
    let isolated = |prompt: &str| pb::SpawnWorkerRequest {
        agent: "task".into(),
        prompt: prompt.into(),
        workspace: repo.display().to_string(),
        isolation: pb::Isolation::Worktree as i32,
        wait: true,
        ..Default::default()
    };
    let (mut a, mut b) = (p.a.client.clone(), p.b.client.clone());
    let (ra, rb) = tokio::join!(
        a.spawn_worker(isolated("slowish isolated")),
        b.spawn_worker(isolated("slowish  isolated"))
    );
    let (ra, rb) = (ra.unwrap().into_inner(), rb.unwrap().into_inner());
    let (wa, wb) = (ra.worker.unwrap(), rb.worker.unwrap());
    assert_eq!(wa.id, wb.id, "one worker serves both");
    assert_eq!((wa.state, wb.state), (COMPLETED, COMPLETED));
    assert_eq!(
        u8::from(ra.deduplicated) + u8::from(rb.deduplicated),
        1,
        "exactly one of them was deduplicated"
    );
    let runs = std::fs::read_to_string(p.dir.path().join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 1, "{runs}");
}

#[tokio::test]
async fn replicas_a_worker_token_issued_by_a_authenticates_on_b() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, "tok-alice: alice\n").unwrap();
    let extra = format!("auth: {{tokens_file: {}}}\n", tokens.display());
    let a = start_replica(dir.path(), "a", &db.url, &extra).await;
    let b = start_replica(dir.path(), "b", &db.url, &extra).await;
    let mut ca = a.client.clone();
    let w = ca
        .spawn_worker(req(
            pb::SpawnWorkerRequest {
                agent: "task".into(),
                prompt: "long job".into(),
                ..Default::default()
            },
            &[("authorization", "Bearer tok-alice")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    pid_of(dir.path(), &w.id).await;
    let token = std::fs::read_to_string(dir.path().join(format!("{}.token", w.id))).unwrap();
    let mut cb = b.client.clone();
    // The worker's own token, and nothing else, on the replica that does not run it.
    let got = cb
        .get_worker(req(
            pb::GetWorkerRequest {
                worker_id: w.id.clone(),
            },
            &[("x-agentry-worker-token", token.as_str())],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(got.id, w.id);
    // Its lineage too: a resolution through B sees the caller one level deeper.
    let resolved = cb
        .resolve_agent(req(
            pb::ResolveAgentRequest {
                name: "explore".into(),
                ..Default::default()
            },
            &[("x-agentry-worker-token", token.as_str())],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resolved.effective.unwrap().depth, w.depth + 1);
    let err = cb
        .get_worker(req(
            pb::GetWorkerRequest {
                worker_id: w.id.clone(),
            },
            &[("x-agentry-worker-token", "0123456789abcdef0123456789abcdef")],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    // Once the worker ended, its token is dead everywhere.
    cb.stop_worker(req(
        pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: String::new(),
        },
        &[("authorization", "Bearer tok-alice")],
    ))
    .await
    .unwrap();
    // B may still trust it from its one-second cache of remote tokens, never longer.
    let err = eventually(
        "the ended worker's token refused on B",
        Duration::from_secs(3),
        || {
            let mut cb = cb.clone();
            let token = token.clone();
            let id = w.id.clone();
            async move {
                cb.get_worker(req(
                    pb::GetWorkerRequest { worker_id: id },
                    &[("x-agentry-worker-token", token.as_str())],
                ))
                .await
                .err()
            }
        },
    )
    .await;
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    drop((a, b));
}

#[tokio::test]
async fn replicas_kill_9_of_a_closes_its_workers_on_b_within_a_lease_exactly_once() {
    let Some(p) = pair("").await else { return };
    let w = spawn(&p.a.client, "long job", false).await.worker.unwrap();
    let done = spawn(&p.a.client, "quick job", true).await.worker.unwrap();
    let pid = pid_of(p.dir.path(), &w.id).await;
    wait_state(&p.b.client, &w.id, RUNNING).await;
    p.a.server.kill_9();
    let killed_at = Instant::now();
    let b = p.b.client.clone();
    let closed = eventually(
        "B to close the lost replica's worker within a few leases",
        Duration::from_secs(8),
        || {
            let (b, id) = (b.clone(), w.id.clone());
            async move {
                let now = get(&b, &id).await;
                if now.state != RUNNING {
                    Ok(now)
                } else {
                    Err(format!("{now:?}"))
                }
            }
        },
    )
    .await;
    // About one lease (2 s) plus a sweep tick.
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed_at.elapsed()
    );
    assert_eq!(closed.state, FAILED);
    assert_eq!(closed.error.as_deref(), Some("orphaned: replica a lost"));
    assert!(closed.close_time.is_some());
    // The agent process A left behind on this host is gone too.
    eventually(
        "the sweeper to kill the agent process left behind",
        Duration::from_secs(2),
        || async { (!pid_alive(pid)).then_some(()) },
    )
    .await;
    // Exactly once: one failed event, and a finished worker untouched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        watch_all(p.b.client.clone(), w.id.clone(), 1).await,
        [(2, RUNNING), (3, FAILED)]
    );
    assert_eq!(get(&b, &done.id).await, done);
}

#[tokio::test]
async fn replicas_health_follows_the_database() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    // A TCP relay in front of PostgreSQL that the test can cut and restore.
    let target = relay_target(&db.url);
    let relay = Relay::start(target).await;
    let url = relay_url(&db.url, relay.port);
    let dir = tempfile::tempdir().unwrap();
    let r = start_replica(dir.path(), "a", &url, "").await;
    let channel = r.server.channel().await.unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel);
    use tonic_health::pb::health_check_response::ServingStatus;
    let status_is = |want: ServingStatus| {
        let mut health = health.clone();
        async move {
            let now = health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap()
                .into_inner()
                .status;
            (now == want as i32)
                .then_some(())
                .ok_or(format!("status {now}"))
        }
    };
    eventually("SERVING", Duration::from_secs(10), || {
        status_is(ServingStatus::Serving)
    })
    .await;
    relay.cut();
    eventually(
        "NOT_SERVING while the database is unreachable",
        Duration::from_secs(15),
        || status_is(ServingStatus::NotServing),
    )
    .await;
    relay.restore();
    eventually(
        "SERVING again once the database is back",
        Duration::from_secs(15),
        || status_is(ServingStatus::Serving),
    )
    .await;
    drop(r);
}

#[tokio::test]
async fn replicas_an_unreachable_database_fails_start_up_naming_it_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let config = replica_config(
        dir.path(),
        "a",
        "postgres://agentry:s3cret@127.0.0.1:1/agentry",
        "",
    );
    let stderr = Launch::new(&config).fails().await;
    assert!(
        stderr.contains("postgres://agentry:***@127.0.0.1:1/agentry"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

/// `host:port` of the server in a test database URL.
fn relay_target(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split(['/', '?']).next().unwrap();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

/// The URL with its host:port replaced by the relay's.
fn relay_url(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    format!(
        "{scheme}://{}127.0.0.1:{port}{tail}",
        user.unwrap_or_default()
    )
}

/// A TCP relay to `target` that can drop every connection and refuse new ones (cut), and
/// accept again (restore).
struct Relay {
    port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    generation: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let task = {
            let (up, generation) = (up.clone(), generation.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    if !up.load(std::sync::atomic::Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let target = target.clone();
                    let mut cut = generation.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            })
        };
        Relay {
            port,
            up,
            generation,
            task,
        }
    }

    fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn replicas_a_frozen_replica_that_comes_back_never_overwrites_the_orphan_close() {
    let Some(p) = pair("").await else { return };
    let w = spawn(&p.a.client, "long job", false).await.worker.unwrap();
    pid_of(p.dir.path(), &w.id).await;
    // `running` is committed while the process runs: freeze A only once it is stored, or the
    // history would rightly be pending → failed.
    wait_state(&p.b.client, &w.id, RUNNING).await;
    // Frozen past its lease: B closes its worker as orphaned.
    p.a.server.signal(Signal::SIGSTOP);
    let b = p.b.client.clone();
    // (Should this fail, dropping A kills it, stopped or not.)
    wait_state(&b, &w.id, FAILED).await;
    p.a.server.signal(Signal::SIGCONT);
    // A wakes up, finds its lease lapsed, and stops its run; the row keeps B's close.
    p.a.server
        .log_until("lease had expired", Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = get(&b, &w.id).await;
    assert_eq!(now.state, FAILED);
    assert_eq!(now.error.as_deref(), Some("orphaned: replica a lost"));
    assert_eq!(
        watch_all(p.a.client.clone(), w.id.clone(), 1).await,
        [(2, RUNNING), (3, FAILED)]
    );
    // And A serves on: a new worker on A runs to completion.
    let done = spawn(&p.a.client, "quick after the freeze", true)
        .await
        .worker
        .unwrap();
    assert_eq!(done.state, COMPLETED);
}

#[tokio::test]
async fn replicas_take_progress_on_any_replica() {
    let Some(p) = pair("").await else {
        return;
    };
    let root = p.dir.path();
    let w = spawn(&p.a.client, "long job", false).await.worker.unwrap();
    pid_of(root, &w.id).await;
    let token = std::fs::read_to_string(root.join(format!("{}.token", w.id))).unwrap();
    // The process writes its pid before the row says running: wait for the event the watch
    // resumes after.
    wait_state(&p.a.client, &w.id, RUNNING).await;
    let watch_a = watch(p.a.client.clone(), w.id.clone(), 2).await;
    // The report goes to B, which does not run the worker.
    let seq =
        p.b.client
            .clone()
            .report_progress(req(
                pb::ReportProgressRequest {
                    kind: pb::ProgressKind::Text as i32,
                    text: "reported through b".into(),
                    data_json: String::new(),
                },
                &[("x-agentry-worker-token", token.as_str())],
            ))
            .await
            .unwrap()
            .into_inner()
            .sequence;
    assert_eq!(seq, 3, "pending, running, this report");
    // A's watcher sees it, then the end once A stops the worker.
    let mut st = watch_a;
    let ev = tokio::time::timeout(Duration::from_secs(5), st.next())
        .await
        .expect("the report reaches A's watcher")
        .unwrap()
        .unwrap();
    assert_eq!(ev.sequence, 3);
    assert_eq!(
        ev.progress.map(|p| p.text).as_deref(),
        Some("reported through b")
    );
    p.a.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn replicas_survive_terminated_connections() {
    let Some(p) = pair("").await else {
        return;
    };
    let (killer, conn) = tokio_postgres::connect(&p.db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let stop = tokio_util::sync::CancellationToken::new();
    // Every backend of the database but our own, eight times a second.
    let kills = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.is_cancelled() {
                let killed = killer
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = current_database() AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .await
                    .unwrap();
                n += killed.len();
                tokio::time::sleep(Duration::from_millis(125)).await;
            }
            n
        })
    };
    // Three callers spawning and waiting on A all along.
    let mut callers = Vec::new();
    for t in 0..3 {
        let c = p.a.client.clone();
        callers.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            let until = Instant::now() + Duration::from_secs(6);
            let mut n = 0;
            while Instant::now() < until {
                n += 1;
                let r = c
                    .clone()
                    .spawn_worker(pb::SpawnWorkerRequest {
                        agent: "task".into(),
                        prompt: format!("quick {t}-{n}"),
                        wait: true,
                        ..Default::default()
                    })
                    .await
                    .map(tonic::Response::into_inner);
                answers.push(r);
            }
            answers
        }));
    }
    let mut completed = Vec::new();
    let mut refused = 0;
    for c in callers {
        for answer in c.await.unwrap() {
            match answer {
                Ok(r) => {
                    let w = r.worker.unwrap();
                    // wait=true never returns a worker that is not terminal.
                    assert!(
                        [
                            pb::WorkerState::Completed as i32,
                            pb::WorkerState::Failed as i32,
                            pb::WorkerState::Killed as i32
                        ]
                        .contains(&w.state),
                        "{w:?}"
                    );
                    assert_eq!(
                        w.state,
                        pb::WorkerState::Completed as i32,
                        "a run that completed is recorded completed: {w:?}"
                    );
                    completed.push(w);
                }
                // A store that cannot be reached is retryable, never INTERNAL.
                Err(s) => {
                    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
                    refused += 1;
                }
            }
        }
    }
    stop.cancel();
    let killed = kills.await.unwrap();
    println!(
        "terminated {killed} backends; {} spawns completed, {refused} refused as UNAVAILABLE",
        completed.len()
    );
    assert!(killed > 20, "the loop terminated backends: {killed}");
    assert!(completed.len() >= 10, "{} completed", completed.len());
    // Afterwards, from either replica: every row terminal, every completed result kept.
    for c in [&p.a.client, &p.b.client] {
        let all = eventually("every row terminal", Duration::from_secs(20), || {
            let mut c = c.clone();
            async move {
                // Every page: a run here can complete more workers than one page holds.
                let mut l = Vec::new();
                let mut page_token = String::new();
                loop {
                    let page = c
                        .list_workers(pb::ListWorkersRequest {
                            page_size: 1000,
                            page_token,
                            ..Default::default()
                        })
                        .await
                        .map_err(|e| format!("{e:?}"))?
                        .into_inner();
                    l.extend(page.workers);
                    if page.next_page_token.is_empty() {
                        break;
                    }
                    page_token = page.next_page_token;
                }
                let open: Vec<_> = l
                    .iter()
                    .filter(|w| {
                        w.state == pb::WorkerState::Pending as i32
                            || w.state == pb::WorkerState::Running as i32
                    })
                    .map(|w| w.id.clone())
                    .collect();
                if open.is_empty() {
                    Ok(l)
                } else {
                    Err(format!("still open: {open:?}"))
                }
            }
        })
        .await;
        for w in &completed {
            let stored = all.iter().find(|s| s.id == w.id).expect("listed");
            assert_eq!(
                stored.state,
                pb::WorkerState::Completed as i32,
                "{stored:?}"
            );
            assert_eq!(stored.result.as_deref(), Some("fast-result\n"));
        }
    }
}

#[tokio::test]
async fn replicas_an_outcome_waits_for_the_database_and_is_kept() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let relay = Relay::start(relay_target(&db.url)).await;
    let url = relay_url(&db.url, relay.port);
    let dir = tempfile::tempdir().unwrap();
    let r = start_replica(dir.path(), "a", &url, "").await;
    let c = r.client.clone();
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { spawn(&c, "slowish job", true).await })
    };
    // The worker runs (its pid is written), then the database goes away for longer than the
    // lease (2 s) while the run ends: its outcome cannot be written.
    let id = eventually("the worker's row", Duration::from_secs(10), || {
        let root = dir.path().to_owned();
        async move {
            let runs = std::fs::read_to_string(root.join("runs")).unwrap_or_default();
            runs.lines()
                .next()
                .map(str::to_owned)
                .ok_or("no run yet".to_owned())
        }
    })
    .await;
    relay.cut();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !waiting.is_finished(),
        "wait=true must not return before the outcome is recorded"
    );
    let err = c
        .clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: "quick".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    // Back: the outcome lands as it was, and the waiting caller gets the terminal worker.
    relay.restore();
    let done = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the wait ends once the database is back")
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(done.id, id);
    assert_eq!(done.state, pb::WorkerState::Completed as i32, "{done:?}");
    assert_eq!(done.result.as_deref(), Some("slow-result\n"));
    assert_eq!(get(&c, &id).await.result.as_deref(), Some("slow-result\n"));
    // And the replica takes spawns again.
    eventually("spawns taken again", Duration::from_secs(15), || {
        let mut c = c.clone();
        async move {
            c.spawn_worker(pb::SpawnWorkerRequest {
                agent: "task".into(),
                prompt: "quick".into(),
                wait: true,
                ..Default::default()
            })
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn replicas_a_restart_on_the_same_host_takes_over_its_predecessor_before_serving() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    script(root, "run-agent", AGENT);
    // A lease far longer than the test: only the takeover can close the rows in time.
    let config = |name: &str, file: &str| {
        binary::config(
            root,
            file,
            &format!(
                "home: {root}\nstore: {{url: '{url}'}}\nreplica: {{name: {name}, lease: 60s}}\n\
                 executor: {{command: [{root}/run-agent], kill_grace: 1s, env: {{OUT: {root}}}}}\n",
                root = root.display(),
                url = db.url,
            ),
        )
    };
    let first = binary::start(&config("a", "a1")).await;
    let c = first.client().await;
    let w = spawn(&c, "long job", false).await.worker.unwrap();
    let pid = pid_of(root, &w.id).await;
    first.kill_9();
    assert!(
        pid_alive(pid),
        "the agent outlives a kill -9 of its replica"
    );

    // The same name on the same host: by the time it serves, the predecessor's worker is closed
    // and its process is gone, without waiting 60 s for the lease.
    let second = binary::start(&config("a", "a2")).await;
    let c = second.client().await;
    let closed = get(&c, &w.id).await;
    assert_eq!(closed.state, FAILED, "{closed:?}");
    assert_eq!(closed.error.as_deref(), Some("orphaned: replica a lost"));
    assert!(
        !pid_alive(pid),
        "the predecessor's agent was killed before serving"
    );
    assert!(
        second
            .stderr()
            .contains("took over the rows of this replica's previous run on this host")
    );

    // A live replica of the same name is left alone: its worker keeps running.
    let w2 = spawn(&c, "long job", false).await.worker.unwrap();
    let pid2 = pid_of(root, &w2.id).await;
    let third = binary::start(&config("a", "a3")).await;
    assert!(
        third
            .stderr()
            .contains("another live replica of the same name runs on this host"),
        "{}",
        third.stderr()
    );
    let c3 = third.client().await;
    assert_eq!(get(&c3, &w2.id).await.state, RUNNING);
    assert!(pid_alive(pid2));
    c.clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w2.id.clone(),
            reason: "test over".into(),
        })
        .await
        .unwrap();
    assert!(!pid_alive(pid2));
}

/// Holds of callers waiting on any replica, read from the database.
async fn holds_in(url: &str) -> i64 {
    count_in(url, "SELECT count(*) FROM worker_holds").await
}

/// The one count `sql` selects from the database at `url`.
async fn count_in(url: &str, sql: &str) -> i64 {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn replicas_a_waiting_caller_on_b_binds_a_worker_run_on_a() {
    let Some(p) = pair("").await else { return };
    let url = p.db.url.clone();
    let on_a = {
        let a = p.a.client.clone();
        tokio::spawn(async move { spawn(&a, "long bound job", true).await })
    };
    let id = eventually("the worker's row", Duration::from_secs(10), || {
        let root = p.dir.path().to_owned();
        async move {
            let runs = std::fs::read_to_string(root.join("runs")).unwrap_or_default();
            runs.lines()
                .next()
                .map(str::to_owned)
                .ok_or("no run yet".to_owned())
        }
    })
    .await;
    let pid = pid_of(p.dir.path(), &id).await;
    // The same dispatch on B reuses A's worker and waits for it there.
    let on_b = {
        let b = p.b.client.clone();
        tokio::spawn(async move { spawn(&b, "long   bound job", true).await })
    };
    eventually("B's hold", Duration::from_secs(10), || {
        let url = url.clone();
        async move { (holds_in(&url).await == 1).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A's caller goes away: B's caller still waits, so the worker runs on.
    on_a.abort();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get(&p.a.client, &id).await.state, RUNNING);
    assert!(pid_alive(pid));
    // The last waiter, on B, goes away: the worker is stopped as on one replica.
    on_b.abort();
    let stopped_at = Instant::now();
    let w = eventually("the worker stopped", Duration::from_secs(10), || {
        let (a, id) = (p.a.client.clone(), id.clone());
        async move {
            let w = get(&a, &id).await;
            if w.state == RUNNING {
                Err(format!("{w:?}"))
            } else {
                Ok(w)
            }
        }
    })
    .await;
    println!("stopped {:?} after B's caller left", stopped_at.elapsed());
    assert_eq!(w.state, pb::WorkerState::Killed as i32, "{w:?}");
    assert_eq!(
        w.error.as_deref(),
        Some("killed: the waiting caller went away")
    );
    assert!(!pid_alive(pid));
    assert_eq!(holds_in(&url).await, 0, "the hold is released");

    // A background worker belongs to the service: a waiter on B that leaves does not stop it.
    let bg = spawn(&p.a.client, "long background job", false)
        .await
        .worker
        .unwrap();
    let bg_pid = pid_of(p.dir.path(), &bg.id).await;
    let on_b = {
        let b = p.b.client.clone();
        tokio::spawn(async move { spawn(&b, "long  background job", true).await })
    };
    eventually("B's hold", Duration::from_secs(10), || {
        let url = url.clone();
        async move { (holds_in(&url).await == 1).then_some(()) }
    })
    .await;
    on_b.abort();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get(&p.a.client, &bg.id).await.state, RUNNING);
    assert!(pid_alive(bg_pid));
    p.a.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: bg.id.clone(),
            reason: "test over".into(),
        })
        .await
        .unwrap();
}

/// A replica on the runner executor with fast runner timing.
async fn runner_replica(root: &std::path::Path, name: &str, url: &str) -> Replica {
    std::fs::create_dir_all(root.join("home")).unwrap();
    let config = binary::config(
        root,
        name,
        &format!(
            "home: {home}\nstore: {{url: '{url}'}}\nreplica: {{name: {name}, lease: 2s}}\n\
             runners: {{heartbeat_interval: 100ms, lease: 800ms, accept_timeout: 2s}}\n\
             executor: {{kind: runner, kill_grace: 1s, timeout: 60s}}\n",
            home = root.join("home").display(),
        ),
    );
    let server = binary::start(&config).await;
    let client = server.client().await;
    Replica { server, client }
}

/// A runner's stream to one replica, opened with `hello`; the welcome was read.
struct RemoteRunner {
    tx: tokio::sync::mpsc::Sender<pb::ConnectRequest>,
    rx: tonic::Streaming<pb::ConnectResponse>,
}

impl RemoteRunner {
    async fn connect(r: &Replica, name: &str) -> Self {
        Self::with_slots(r, name, 1).await
    }

    async fn with_slots(r: &Replica, name: &str, slots: u32) -> Self {
        use pb::connect_request::Msg as In;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tx.send(pb::ConnectRequest {
            msg: Some(In::Hello(pb::RunnerHello {
                name: name.into(),
                agents: vec!["*".into()],
                slots,
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let channel = Channel::from_shared(format!("http://{}", r.server.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut rx = pb::runner_service_client::RunnerServiceClient::new(channel)
            .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let first = rx.next().await.unwrap().unwrap();
        assert!(
            matches!(first.msg, Some(pb::connect_response::Msg::Welcome(_))),
            "{first:?}"
        );
        // Heartbeats while the runner is held; dropping it ends them and the stream.
        let weak = tx.downgrade();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let Some(tx) = weak.upgrade() else { return };
                let beat = pb::ConnectRequest {
                    msg: Some(In::Heartbeat(pb::RunnerHeartbeat {})),
                };
                if tx.send(beat).await.is_err() {
                    return;
                }
            }
        });
        Self { tx, rx }
    }

    async fn next(&mut self, within: Duration) -> pb::connect_response::Msg {
        tokio::time::timeout(within, self.rx.next())
            .await
            .expect("a runner message in time")
            .expect("the stream is open")
            .expect("not an error")
            .msg
            .expect("a message")
    }

    async fn assignment(&mut self) -> pb::RunnerAssignment {
        match self.next(Duration::from_secs(10)).await {
            pb::connect_response::Msg::Assignment(a) => a,
            other => panic!("expected an assignment, got {other:?}"),
        }
    }

    async fn send(&self, m: pb::connect_request::Msg) {
        self.tx
            .send(pb::ConnectRequest { msg: Some(m) })
            .await
            .unwrap();
    }

    /// Sends `accepted` for `a`.
    async fn accept(&self, a: &pb::RunnerAssignment) {
        self.send(pb::connect_request::Msg::Accepted(pb::RunnerAccepted {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
        }))
        .await;
    }

    /// Sends `finished` for `a` with `outcome`.
    async fn finish(&self, a: &pb::RunnerAssignment, outcome: pb::runner_finished::Outcome) {
        self.send(pb::connect_request::Msg::Finished(pb::RunnerFinished {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
            session_ref: String::new(),
            outcome: Some(outcome),
        }))
        .await;
    }

    /// Sends `finished` for `a`, completed with `result`.
    async fn complete(&self, a: &pb::RunnerAssignment, result: &str) {
        let done = pb::runner_finished::Completed {
            result: result.to_owned(),
        };
        self.finish(a, pb::runner_finished::Outcome::Completed(done))
            .await;
    }

    /// Accepts `a`, then waits until `on` shows its worker running.
    async fn accept_until_running(
        &self,
        a: &pb::RunnerAssignment,
        on: &AgentRegistryServiceClient<Channel>,
    ) {
        self.accept(a).await;
        state_on(on, &a.worker_id, pb::WorkerState::Running).await;
    }
}

/// Waits until `on` shows worker `id` in `state`; the worker then.
async fn state_on(
    on: &AgentRegistryServiceClient<Channel>,
    id: &str,
    state: pb::WorkerState,
) -> pb::Worker {
    eventually(
        &format!("{id} {state:?}"),
        Duration::from_secs(15),
        || async {
            let g = get(on, id).await;
            (g.state == state as i32).then_some(g)
        },
    )
    .await
}

/// Runners across replicas (docs/runners.md): a runner connected to B runs a worker spawned on
/// A — assignment, progress seen by A's watcher, the result recorded on A — a stop on A reaches
/// the runner on B as `cancel` with the stop's reason within a second, and a runner lost on B
/// fails A's worker `runner lost`.
#[tokio::test]
async fn replicas_a_runner_on_b_runs_a_worker_spawned_on_a() {
    use pb::connect_request::Msg as In;
    let Some(p) = runner_pair().await else {
        return;
    };
    let (a, b) = (&p.a, &p.b);
    let mut r = RemoteRunner::connect(b, "on-b").await;

    // 1. Spawned on A, assigned to the runner on B, completed there, recorded on A.
    let w = spawn(&a.client, "remote job", false).await.worker.unwrap();
    let t0 = Instant::now();
    let asg = r.assignment().await;
    assert_eq!(asg.worker_id, w.id);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let token = asg.worker_token.clone();
    assert_eq!(token.len(), 32);
    let mut watch_a = watch(a.client.clone(), w.id.clone(), 0).await;
    r.accept_until_running(&asg, &a.client).await;
    r.send(In::Progress(pb::RunnerProgress {
        worker_id: w.id.clone(),
        lease_token: asg.lease_token.clone(),
        kind: pb::ProgressKind::Text as i32,
        text: "halfway, on b".into(),
        data_json: String::new(),
    }))
    .await;
    // The worker's token works for its agent's calls (here on A).
    a.client
        .clone()
        .report_progress(req(
            pb::ReportProgressRequest {
                kind: pb::ProgressKind::Text as i32,
                text: "by token".into(),
                data_json: String::new(),
            },
            &[("x-agentry-worker-token", token.as_str())],
        ))
        .await
        .unwrap();
    r.complete(&asg, "done on b").await;
    let done = state_on(&a.client, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result.as_deref(), Some("done on b"));
    let mut texts = Vec::new();
    while let Some(Ok(ev)) = watch_a.next().await {
        if let Some(p) = ev.progress {
            texts.push(p.text);
        }
    }
    // The runner's report (over its stream to B) and the token's (an RPC to A) race.
    texts.sort();
    assert_eq!(texts, ["by token", "halfway, on b"]);

    // 2. A stop on A reaches the runner on B as cancel, with the reason, within a second.
    let w = spawn(&a.client, "remote job 2", false)
        .await
        .worker
        .unwrap();
    let asg = r.assignment().await;
    assert_eq!(asg.worker_id, w.id);
    r.accept_until_running(&asg, &a.client).await;
    let mut stopper = a.client.clone();
    let id = w.id.clone();
    let stop = tokio::spawn(async move {
        stopper
            .stop_worker(pb::StopWorkerRequest {
                worker_id: id,
                reason: "the plan changed".into(),
            })
            .await
            .unwrap()
            .into_inner()
    });
    let t0 = Instant::now();
    match r.next(Duration::from_secs(5)).await {
        pb::connect_response::Msg::Cancel(c) => {
            assert_eq!(
                (c.worker_id.as_str(), c.reason.as_str()),
                (w.id.as_str(), "the plan changed")
            );
        }
        other => panic!("expected cancel, got {other:?}"),
    }
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "cancel took {:?}",
        t0.elapsed()
    );
    let canceled = pb::runner_finished::Canceled::default();
    r.finish(&asg, pb::runner_finished::Outcome::Canceled(canceled))
        .await;
    let stopped = stop.await.unwrap().worker.unwrap();
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32, "{stopped:?}");

    // 3. The runner on B is lost: A's worker fails `runner lost: on-b`.
    let w = spawn(&a.client, "remote job 3", false)
        .await
        .worker
        .unwrap();
    let asg = r.assignment().await;
    r.accept_until_running(&asg, &a.client).await;
    drop(r);
    let lost = state_on(&a.client, &w.id, pb::WorkerState::Failed).await;
    assert_eq!(lost.error.as_deref(), Some("runner lost: on-b"));

    // 4. Completed, stopped or lost, no wait is left behind (the claimer's last relay
    // withdraws it, or the owner does).
    eventually("every wait withdrawn", Duration::from_secs(5), || {
        let url = p.db.url.clone();
        async move { (count_in(&url, "SELECT count(*) FROM runner_waits").await == 0).then_some(()) }
    })
    .await;
    drop(p);
}

/// A replica hears of published waits only while a runner is connected to it (docs/runners.md,
/// "Claim"): a worker published on A while no runner was connected anywhere is still taken when
/// one connects to B, and so is the next after that runner left and another came.
#[tokio::test]
async fn replicas_a_wait_published_before_any_runner_is_taken_when_one_connects() {
    let Some(p) = runner_pair().await else {
        return;
    };
    let (a, b) = (&p.a, &p.b);
    for round in 0..2 {
        let w = spawn(&a.client, &format!("early job {round}"), false)
            .await
            .worker
            .unwrap();
        eventually("the wait published", Duration::from_secs(5), || {
            let (url, id) = (p.db.url.clone(), w.id.clone());
            async move {
                let sql = format!("SELECT count(*) FROM runner_waits WHERE worker_id = '{id}'");
                (count_in(&url, &sql).await == 1).then_some(())
            }
        })
        .await;
        let mut r = RemoteRunner::connect(b, &format!("late {round}")).await;
        let asg = r.assignment().await;
        assert_eq!(asg.worker_id, w.id);
        r.accept_until_running(&asg, &a.client).await;
        r.complete(&asg, "late but done").await;
        let done = state_on(&a.client, &w.id, pb::WorkerState::Completed).await;
        assert_eq!(done.result.as_deref(), Some("late but done"));
        drop(r);
    }
    drop(p);
}

/// Runners across replicas when a replica dies (docs/runners.md): the claimer B killed while
/// its runner runs A's worker fails it on A (`runner lost: replica … lost`, once B's lease is
/// over on the database clock); the owner A killed while B's runner runs its worker gets the
/// row closed by B's sweeper, and B cancels the worker on its runner.
#[tokio::test]
async fn replicas_a_runner_worker_survives_neither_replica_dying_silently() {
    let Some(p) = runner_pair().await else {
        return;
    };
    let (a, b) = (&p.a, &p.b);

    // The claimer dies.
    let r = {
        let mut r = RemoteRunner::connect(b, "on-b").await;
        let w = spawn(&a.client, "claimer dies", false)
            .await
            .worker
            .unwrap();
        let asg = r.assignment().await;
        r.accept_until_running(&asg, &a.client).await;
        b.server.kill_9();
        let failed = state_on(&a.client, &w.id, pb::WorkerState::Failed).await;
        let error = failed.error.unwrap_or_default();
        assert!(
            error.starts_with("runner lost: replica r-") && error.ends_with(" lost"),
            "{error}"
        );
        r
    };
    drop(r);

    // The owner dies.
    let b = runner_replica(p.dir.path(), "b2", &p.db.url).await;
    let mut r = RemoteRunner::connect(&b, "on-b2").await;
    let w = spawn(&a.client, "owner dies", false).await.worker.unwrap();
    let asg = r.assignment().await;
    assert_eq!(asg.worker_id, w.id);
    r.accept_until_running(&asg, &b.client).await;
    a.server.kill_9();
    match r.next(Duration::from_secs(15)).await {
        pb::connect_response::Msg::Cancel(c) => assert_eq!(c.worker_id, w.id),
        other => panic!("expected cancel, got {other:?}"),
    }
    let closed = get(&b.client, &w.id).await;
    assert_eq!(closed.state, pb::WorkerState::Failed as i32, "{closed:?}");
}

/// A replica claims no more published workers than its runners have free slots, even when
/// several waits arrive at once and its claims run together: with a two-slot runner on B and
/// three workers spawned on A, B takes two and the third is left for a runner that connects to
/// A. Each worker completes with its own result, also one whose runner sent `accepted` and
/// `finished` back to back and one whose result is too large to ride on a notice.
#[tokio::test]
async fn replicas_a_replica_claims_only_what_its_runners_have_room_for() {
    let Some(p) = runner_pair().await else {
        return;
    };
    let (a, b) = (&p.a, &p.b);
    let mut on_b = RemoteRunner::with_slots(b, "two-slots", 2).await;
    let done_of = |a: &pb::RunnerAssignment| format!("done {}", a.worker_id);
    // Accepted and finished back to back: both reach A (maybe in one relay), in order.
    let w = spawn(&a.client, "back to back", false)
        .await
        .worker
        .unwrap();
    let asg = on_b.assignment().await;
    assert_eq!(asg.worker_id, w.id);
    on_b.accept(&asg).await;
    on_b.complete(&asg, &done_of(&asg)).await;
    let done = state_on(&a.client, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result, Some(format!("done {}", w.id)), "{done:?}");
    assert!(done.start_time.is_some(), "{done:?}");
    // A result too large for a notice to carry is read from the store instead.
    let w = spawn(&a.client, "large result", false)
        .await
        .worker
        .unwrap();
    let asg = on_b.assignment().await;
    on_b.accept(&asg).await;
    let large = "é".repeat(10_000);
    on_b.complete(&asg, &large).await;
    let done = state_on(&a.client, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result.as_deref(), Some(large.as_str()));
    drop(on_b);

    // Three waits published while no runner is connected anywhere: B's first look after its
    // runner connects sees all three at once.
    let mut ids = Vec::new();
    for n in 0..3 {
        let w = spawn(&a.client, &format!("slot job {n}"), false).await;
        ids.push(w.worker.unwrap().id);
    }
    // Waits are published after the spawn answers: wait until all three are in the store.
    eventually("the three waits published", Duration::from_secs(10), || {
        let url = p.db.url.clone();
        async move {
            let published = count_in(
                &url,
                "SELECT count(*) FROM runner_waits WHERE claimed_by IS NULL",
            )
            .await;
            (published == 3).then_some(())
        }
    })
    .await;
    let mut on_b = RemoteRunner::with_slots(b, "two-slots-again", 2).await;
    // Accepted at once (an offer not accepted within the accept timeout goes back).
    let first = on_b.assignment().await;
    on_b.accept(&first).await;
    let second = on_b.assignment().await;
    on_b.accept(&second).await;
    let mut taken = vec![first.worker_id.clone(), second.worker_id.clone()];
    // Nothing more for B's runner while both its slots are held, for longer than a claim tick.
    let quiet = tokio::time::timeout(Duration::from_millis(1500), on_b.rx.next()).await;
    match quiet {
        Err(_) => {}
        Ok(Some(Ok(pb::ConnectResponse {
            msg: Some(pb::connect_response::Msg::Assignment(extra)),
        }))) => panic!("a third assignment for two slots: {extra:?}"),
        Ok(other) => panic!("unexpected runner message: {other:?}"),
    }
    // The third wait is still unclaimed: a runner on A gets it.
    let mut on_a = RemoteRunner::connect(a, "on-a").await;
    let third = tokio::time::timeout(Duration::from_secs(5), on_a.assignment())
        .await
        .expect("the third wait left for A's runner (B has no slot for it)");
    taken.push(third.worker_id.clone());
    taken.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(taken, want);
    // Accepted and finished back to back: they may reach A in one relay.
    on_a.accept(&third).await;
    on_a.complete(&third, &done_of(&third)).await;
    on_b.complete(&first, &done_of(&first)).await;
    on_b.complete(&second, &done_of(&second)).await;
    for id in &ids {
        let done = state_on(&a.client, id, pb::WorkerState::Completed).await;
        assert_eq!(done.result, Some(format!("done {id}")), "{done:?}");
        assert!(done.start_time.is_some(), "{done:?}");
    }
}

/// A published runner worker nobody claimed (no runner anywhere): its timeout ends it as
/// `no runner served agent …`, a stop kills it at once, and either way its wait is withdrawn, so
/// a runner that connects afterwards is offered nothing (docs/runners.md).
#[tokio::test]
async fn replicas_an_unclaimed_runner_worker_times_out_or_stops_and_is_withdrawn() {
    let Some(p) = runner_pair().await else {
        return;
    };
    let (a, b) = (&p.a, &p.b);
    let timed_out = a
        .client
        .clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "task".into(),
            prompt: "nobody serves this".into(),
            wait: true,
            timeout: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(
        timed_out.state,
        pb::WorkerState::Failed as i32,
        "{timed_out:?}"
    );
    let error = timed_out.error.unwrap_or_default();
    assert!(
        error.contains("no runner served agent task within 1s"),
        "{error}"
    );

    let w = spawn(&a.client, "stopped before any runner", false)
        .await
        .worker
        .unwrap();
    let t0 = Instant::now();
    let stopped = a
        .client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: "changed my mind".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());

    let mut r = RemoteRunner::connect(b, "late").await;
    let offered = tokio::time::timeout(Duration::from_millis(2500), r.rx.next()).await;
    assert!(
        offered.is_err(),
        "a withdrawn worker was offered: {offered:?}"
    );
}

/// A replica whose workers run on the model executor against `base_url`.
async fn model_replica(root: &std::path::Path, name: &str, url: &str, base_url: &str) -> Replica {
    std::fs::create_dir_all(root.join("home")).unwrap();
    let config = binary::config(
        root,
        name,
        &format!(
            "home: {home}\nstore: {{url: '{url}'}}\nreplica: {{name: {name}, lease: 2s}}\n\
             executor: {{kind: model, timeout: 60s}}\n\
             models: {{default: scripted/test-model, providers: [{{name: scripted, base_url: '{base_url}'}}]}}\n",
            home = root.join("home").display(),
        ),
    );
    let server = binary::start(&config).await;
    let client = server.client().await;
    Replica { server, client }
}

/// docs §12.2, §9: a message sent to replica b reaches the worker replica a runs (at its next
/// turn), and a follow-up through b to the finished worker continues it on b with a's
/// transcript, read from the shared store.
#[tokio::test]
async fn replicas_a_message_through_b_reaches_a_worker_on_a_and_continues_it_on_b() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let scripted = crate::model::Scripted::start(serde_json::json!([
        {"match": "follow up", "content": "continued on b"},
        {"match": "sent through b", "content": "heard you"},
        {"match": "slow brief", "delay_ms": 300, "tool_calls": [{"name": "nope", "arguments": {}}]},
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let a = model_replica(dir.path(), "a", &db.url, &scripted.base_url).await;
    let b = model_replica(dir.path(), "b", &db.url, &scripted.base_url).await;
    let w = spawn(&a.client, "slow brief", false).await.worker.unwrap();
    wait_state(&a.client, &w.id, RUNNING).await;
    let sent = b
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: w.id.clone(),
            text: "sent through b".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!sent.continued);
    wait_state(&a.client, &w.id, COMPLETED).await;
    let done = get(&b.client, &w.id).await;
    assert_eq!(done.result.as_deref(), Some("heard you"), "{done:?}");

    let next = b
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: w.id.clone(),
            text: "follow up".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(next.continues, w.id);
    assert_eq!(next.result.as_deref(), Some("continued on b"), "{next:?}");
    let said = crate::model::user_messages(&scripted.requests().pop().unwrap());
    assert_eq!(said, ["slow brief", "sent through b", "follow up"]);
    drop((a, b));
}

/// docs §12.2, §12.3 on PostgreSQL: an inbox and a transcript survive `kill -9` of the replica
/// that runs the worker; after the restart the orphan keeps its queued message, and the next
/// message continues it with that one first and the transcript before it.
#[tokio::test]
async fn replicas_an_inbox_and_a_transcript_survive_kill_9_on_postgresql() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let scripted = crate::model::Scripted::start(serde_json::json!([
        {"match": "queued before the kill", "content": "answered after the restart"},
        {"match": "stuck brief", "delay_ms": 60000, "content": "never"},
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let a = model_replica(dir.path(), "a", &db.url, &scripted.base_url).await;
    let w = spawn(&a.client, "stuck brief", false).await.worker.unwrap();
    eventually("the stuck request", Duration::from_secs(10), || async {
        (!scripted.requests().is_empty()).then_some(())
    })
    .await;
    let queued = a
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: w.id.clone(),
            text: "queued before the kill".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!queued.continued);
    a.server.kill_9();

    // The same replica restarted on the same host takes over its predecessor's rows.
    let a = model_replica(dir.path(), "a", &db.url, &scripted.base_url).await;
    wait_state(&a.client, &w.id, FAILED).await;
    let orphan = get(&a.client, &w.id).await;
    assert_eq!(orphan.undelivered_messages, 1, "{orphan:?}");
    let next = a
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: w.id.clone(),
            text: "and after it".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(next.continues, w.id);
    assert_eq!(next.result.as_deref(), Some("answered after the restart"));
    let said = crate::model::user_messages(&scripted.requests().pop().unwrap());
    assert_eq!(
        said,
        ["stuck brief", "queued before the kill", "and after it"]
    );
    drop(a);
}

/// The console on replica B (docs §14.1, §14.3): its tree stream shows a worker that runs on A
/// as it starts (through the store's notices), and its replicas view names both replicas with
/// the worker A runs.
#[tokio::test]
async fn replicas_the_console_on_b_follows_a_worker_of_a_and_lists_both_replicas() {
    use crate::{console::Sse, helpers::http_client};
    use serde_json::Value;
    let Some(db) = TestDb::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let listen = "http: {listen: '127.0.0.1:0'}\n";
    let a = start_replica(dir.path(), "a", &db.url, listen).await;
    let b = start_replica(dir.path(), "b", &db.url, listen).await;
    let base = format!("http://{}", b.server.http_addr().await);
    let http = http_client();
    let tree = http
        .get(format!("{base}/console/api/tree"))
        .send()
        .await
        .unwrap();
    assert_eq!(tree.status(), 200);
    let mut tree = Sse(tree, String::new());
    let (name, snap) = tree.next().await;
    assert_eq!(
        (name.as_str(), &snap["workers"]),
        ("snapshot", &serde_json::json!([]))
    );

    let w = spawn(&a.client, "long job", false).await.worker.unwrap();
    let mut running = false;
    for _ in 0..10 {
        // A whole snapshot again when A begins announcing its events, now that B's console
        // follows them (docs/replicas.md, "Followed events"): a resync.
        let (name, burst) = tree.next().await;
        assert!(name == "workers" || name == "snapshot", "{name}");
        let mine = burst["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == w.id.as_str())
            .cloned()
            .unwrap_or(Value::Null);
        if mine["state"] == "WORKER_STATE_RUNNING" {
            running = true;
            break;
        }
    }
    assert!(running, "B's console never showed A's worker running");

    let replicas: Value = http
        .get(format!("{base}/console/api/replicas"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replicas["shared"], true, "{replicas}");
    let list = replicas["replicas"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"], "{replicas}");
    assert_eq!(list[0]["workers"], serde_json::json!([w.id]), "{replicas}");
    assert_eq!(
        (list[0]["self"].as_bool(), list[1]["self"].as_bool()),
        (Some(false), Some(true))
    );
    drop((a, b));
    drop(db);
}
