//! What a hostile caller tries, and what it gets: each scenario below is a test through gRPC
//! against the real server (two real replicas where it says so), kept so the holes stay closed.
//!
//! | scenario | what must hold | test |
//! |---|---|---|
//! | a worker opens `RunnerService/Connect` with its own token (auth off, auth on, with or without a bearer token) | `UNAUTHENTICATED`, nothing offered | `a_worker_token_never_opens_a_runner_session*` |
//! | a worker under review opens a session to answer its own reviewer | refused like any worker token | `a_worker_cannot_take_its_own_reviewer` |
//! | bearer token of principal B with the worker token of A's worker | `PERMISSION_DENIED` on every RPC | `a_bearer_token_with_another_principals_worker_token_is_denied` |
//! | two `x-agentry-worker-token` values | `INVALID_ARGUMENT` naming the key | `two_worker_tokens_are_invalid_argument` |
//! | PostgreSQL backends of a replica terminated over and over while it runs `wait=true` spawns | every row terminal, every completed result kept, `wait=true` never returns a non-terminal worker, no `INTERNAL` | `replicas::replicas_survive_terminated_connections` |
//! | the database away for longer than `replica.lease` while a `wait=true` run ends (before or after its start was recorded) | the outcome waits and lands as it was, `wait=true` returns it completed, spawns are `UNAVAILABLE` meanwhile | `replicas::replicas_an_outcome_waits_for_the_database_and_is_kept` |
//! | `ReportProgress` on a replica that does not run the worker | accepted; watchers on every replica see it | `replicas::replicas_take_progress_on_any_replica` |
//! | `WatchWorker` resumed at or past a finished worker's last event | ends at once with OK; beyond the last sequence `OUT_OF_RANGE` | `a_resumed_watch_of_a_finished_worker_ends` |
//! | SIGTERM while watchers follow running workers | each watcher gets the `killed` event before its stream ends | `processes::sigterm_delivers_every_terminal_event_to_watchers` |
//! | a second server on the same SQLite file through a symlink or a hard link | refuses to start, the first one's workers untouched | `processes::a_second_server_through_a_symlink_or_a_hard_link_refuses_to_start` |
//! | a 1 MB persona with 100,000 keys, or a 250,000-element list | the first `ListAgents` answers in seconds and lists them (linear parse; memory bounded, measured) | `huge_personas_are_parsed_in_linear_time_through_list_agents`, `persona::tests` (unit) and `benches/discovery.rs` |
//! | a runner message over the size limit, or with invalid UTF-8 | the stream ends with `INVALID_ARGUMENT`, the session's workers follow the runner-lost rules | `a_bad_runner_message_ends_the_stream_as_invalid_argument` |
//! | a sustained stream of progress events on SQLite, a watcher reading along | the WAL stays under 64 MiB | `a_stream_of_progress_events_keeps_the_sqlite_wal_bounded`, `workers::store::sqlite::tests` (unit) |
//! | four workers at once flooding ~130 KB events (64 KiB text + 64 KiB data) | the WAL stays under 64 MiB (checkpoints by size, not by commit count) | `four_workers_flooding_large_events_keep_the_wal_bounded` |

use std::time::Duration;

use agentry::grpc::pb::{
    self, connect_request::Msg as In, connect_response::Msg as Out,
    runner_service_client::RunnerServiceClient,
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Code, Request, metadata::MetadataValue};

use crate::{
    helpers::*,
    runners::{Runner, bg, channel, fast, hello},
    workers::{spawn_req, wait_state, wait_state_auth},
};

/// Opens a runner stream with `md` as its metadata and a hello; the server's refusal, if any.
async fn connect_with(s: &TestServer, md: &[(&'static str, &str)]) -> Result<Out, tonic::Status> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::ConnectRequest {
        msg: Some(In::Hello(hello("intruder", &["*"], 8))),
    })
    .await
    .unwrap();
    let mut r = Request::new(ReceiverStream::new(rx));
    for (k, v) in md {
        r.metadata_mut().append(*k, v.parse().unwrap());
    }
    let mut stream = RunnerServiceClient::new(channel(s).await)
        .connect(r)
        .await?
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an answer in time");
    drop(tx);
    match first {
        Some(Ok(m)) => Ok(m.msg.expect("a message")),
        Some(Err(status)) => Err(status),
        None => panic!("the stream ended without a word"),
    }
}

#[track_caller]
fn assert_token_refused(r: Result<Out, tonic::Status>) {
    match r {
        Err(status) => assert_status(
            &status,
            Code::Unauthenticated,
            "WORKER_TOKEN_REFUSED",
            "RunnerService/Connect does not accept x-agentry-worker-token: a runner connects as a principal (authorization: Bearer <token> when auth.tokens_file is set), never as a worker",
        ),
        Ok(m) => panic!("a worker token opened a runner session: {m:?}"),
    }
}

/// A server with runners on and the tokens file `alice-secret: alice`, `bob-secret: bob`.
async fn with_auth() -> TestServer {
    start_with(|c| {
        fast(c);
        tokens_file(c, "alice-secret: alice\nbob-secret: bob\n");
    })
    .await
}

/// On a [`with_auth`] server: alice's runner, and a worker alice spawned that it took and runs.
async fn alice_running(s: &TestServer) -> (Runner, pb::Worker, pb::RunnerAssignment) {
    let mut r = Runner::connect_as(s, hello("alice-runner", &["*"], 1), Some("alice-secret")).await;
    let w = s
        .client
        .clone()
        .spawn_worker(req(
            spawn_req("task", "alice's work", false),
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let a = r.assignment().await;
    assert_eq!(a.worker_id, w.id);
    r.accept(&a).await;
    wait_state_auth(s, &w.id).await;
    (r, w, a)
}

#[tokio::test]
async fn a_worker_token_never_opens_a_runner_session_without_auth() {
    let s = start_with(fast).await;
    let mut r = Runner::any(&s, "honest", 1).await;
    let (_, a) = r.take(&s, "running").await;
    // A second worker waits for a slot: the intruder would be offered it (and its token).
    let waiting = bg(&s, "task", "waiting for a runner").await;
    assert_token_refused(connect_with(&s, &[("x-agentry-worker-token", &a.worker_token)]).await);
    // Nothing was taken from the honest runner's queue: the waiting worker is still pending.
    assert_eq!(
        get(&s, &waiting.id).await.state,
        pb::WorkerState::Pending as i32
    );
}

#[tokio::test]
async fn a_worker_token_never_opens_a_runner_session_with_auth() {
    let s = with_auth().await;
    let (_r, _, a) = alice_running(&s).await;
    // The worker token alone, and beside its own principal's bearer token: refused both ways.
    assert_token_refused(connect_with(&s, &[("x-agentry-worker-token", &a.worker_token)]).await);
    assert_token_refused(
        connect_with(
            &s,
            &[
                ("authorization", "Bearer alice-secret"),
                ("x-agentry-worker-token", &a.worker_token),
            ],
        )
        .await,
    );
    // A bearer token alone still opens one.
    match connect_with(&s, &[("authorization", "Bearer alice-secret")]).await {
        Ok(Out::Welcome(_)) => {}
        other => panic!("a principal's runner was not welcomed: {other:?}"),
    }
}

#[tokio::test]
async fn a_worker_cannot_take_its_own_reviewer() {
    // Every agent runs on runners, the reviewer too: the review's worker waits for a runner.
    let s = start_with(|c| {
        fast(c);
        c.review.timeout = Duration::from_secs(3);
    })
    .await;
    let mut r = Runner::any(&s, "honest", 1).await;
    let (w, a) = r.take(&s, "about to delete things").await;
    let mut review = s.client.clone();
    let token = a.worker_token.clone();
    let pending = tokio::spawn(async move {
        review
            .review(req(
                pb::ReviewRequest {
                    tool: "rm".into(),
                    tool_class: pb::ToolClass::Destructive as i32,
                    action: "delete the repository".into(),
                    ..Default::default()
                },
                &[("x-agentry-worker-token", &token)],
            ))
            .await
    });
    // The reviewer is a pending child of the worker; its runner slot is taken, so nothing
    // honest can run it yet, and the worker itself may not offer to.
    let reviewer = eventually("the reviewer row", Duration::from_secs(10), || {
        let mut c = s.client.clone();
        let parent = w.id.clone();
        async move {
            let l = c
                .list_workers(pb::ListWorkersRequest {
                    parent_id: parent,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            l.workers
                .into_iter()
                .next()
                .ok_or("no child yet".to_owned())
        }
    })
    .await;
    assert_eq!(reviewer.agent, "reviewer");
    assert_token_refused(connect_with(&s, &[("x-agentry-worker-token", &a.worker_token)]).await);
    assert_eq!(
        get(&s, &reviewer.id).await.state,
        pb::WorkerState::Pending as i32,
        "nobody took the reviewer"
    );
    // Let the review fail closed: nobody may run the reviewer, so the gate rejects at its own
    // timeout, naming it, and the reviewer never completed.
    r.complete(&a, "done").await;
    drop(r);
    let verdict = pending.await.unwrap().unwrap().into_inner();
    assert_eq!(verdict.decision, pb::Decision::Reject as i32, "{verdict:?}");
    assert_eq!(verdict.reason, "review timed out after 3s");
    assert!(verdict.reviewed);
    assert_eq!(verdict.reviewer_worker_id, reviewer.id);
    let ended = get(&s, &reviewer.id).await;
    assert_ne!(ended.state, pb::WorkerState::Completed as i32, "{ended:?}");
}

#[tokio::test]
async fn a_bearer_token_with_another_principals_worker_token_is_denied() {
    let s = with_auth().await;
    let (_r, w, a) = alice_running(&s).await;
    let denied = |st: tonic::Status| {
        assert_status(
            &st,
            Code::PermissionDenied,
            "WORKER_TOKEN_OF_OTHER_PRINCIPAL",
            "x-agentry-worker-token is the token of a worker of another principal than the bearer token's; send the worker token with its own principal's bearer token, or alone",
        );
    };
    let bob = [
        ("authorization", "Bearer bob-secret"),
        ("x-agentry-worker-token", a.worker_token.as_str()),
    ];
    let mut c = s.client.clone();
    denied(
        c.report_progress(req(
            pb::ReportProgressRequest {
                kind: pb::ProgressKind::Text as i32,
                text: "bob writes as alice".into(),
                data_json: String::new(),
            },
            &bob,
        ))
        .await
        .unwrap_err(),
    );
    denied(
        c.spawn_worker(req(spawn_req("task", "bob spawns as alice", false), &bob))
            .await
            .unwrap_err(),
    );
    denied(
        c.get_worker(req(
            pb::GetWorkerRequest {
                worker_id: w.id.clone(),
            },
            &bob,
        ))
        .await
        .unwrap_err(),
    );
    denied(
        c.list_agents(req(pb::ListAgentsRequest::default(), &bob))
            .await
            .unwrap_err(),
    );
    // Alice's bearer token with her own worker's token is the worker speaking: accepted.
    let seq = c
        .report_progress(req(
            pb::ReportProgressRequest {
                kind: pb::ProgressKind::Text as i32,
                text: "alice's worker".into(),
                data_json: String::new(),
            },
            &[
                ("authorization", "Bearer alice-secret"),
                ("x-agentry-worker-token", a.worker_token.as_str()),
            ],
        ))
        .await
        .unwrap()
        .into_inner()
        .sequence;
    assert_eq!(seq, 3, "pending, running, this report: bob wrote nothing");
    // Bob spawned nothing: alice's worker has no children.
    let children = c
        .list_workers(req(
            pb::ListWorkersRequest {
                parent_id: w.id.clone(),
                ..Default::default()
            },
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(children.is_empty(), "{children:?}");
}

/// A request carrying `token` twice as `x-agentry-worker-token`.
fn twice<T>(msg: T, token: &str, bearer: Option<&str>) -> Request<T> {
    let mut r = Request::new(msg);
    let v: MetadataValue<_> = token.parse().unwrap();
    r.metadata_mut().append("x-agentry-worker-token", v.clone());
    r.metadata_mut().append("x-agentry-worker-token", v);
    if let Some(b) = bearer {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {b}").parse().unwrap());
    }
    r
}

#[tokio::test]
async fn two_worker_tokens_are_invalid_argument() {
    // Without auth: the handler's metadata check.
    let s = start_with(fast).await;
    let mut r = Runner::any(&s, "honest", 1).await;
    let (_, a) = r.take(&s, "running").await;
    let err = s
        .client
        .clone()
        .spawn_worker(twice(spawn_req("task", "x", false), &a.worker_token, None))
        .await
        .unwrap_err();
    assert_bad_field(&err, "x-agentry-worker-token");
    drop(r);

    // With auth and no bearer token: the authentication layer refuses before any lookup; with a
    // bearer token: the handler's check.
    let s = with_auth().await;
    let (_r, _, a) = alice_running(&s).await;
    for bearer in [None, Some("alice-secret")] {
        let err = s
            .client
            .clone()
            .report_progress(twice(
                pb::ReportProgressRequest {
                    kind: pb::ProgressKind::Text as i32,
                    text: "which one".into(),
                    data_json: String::new(),
                },
                &a.worker_token,
                bearer,
            ))
            .await
            .unwrap_err();
        assert_bad_field(&err, "x-agentry-worker-token");
    }
}

/// `ConnectRequest` as a client that ignores the proto's string rules would send it: the same
/// tags, with `progress`'s strings as raw bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct RawConnectRequest {
    #[prost(message, optional, tag = "1")]
    hello: Option<pb::RunnerHello>,
    #[prost(message, optional, tag = "2")]
    accepted: Option<pb::RunnerAccepted>,
    #[prost(message, optional, tag = "3")]
    progress: Option<RawProgress>,
}

/// `RunnerProgress` with bytes where the proto has strings.
#[derive(Clone, PartialEq, prost::Message)]
struct RawProgress {
    #[prost(bytes = "vec", tag = "1")]
    worker_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    lease_token: Vec<u8>,
    #[prost(int32, tag = "3")]
    kind: i32,
    #[prost(bytes = "vec", tag = "4")]
    text: Vec<u8>,
}

/// Opens a runner session, has it accept a worker, sends the progress report `text` for it
/// with raw bytes, and returns how the stream ended and the worker's id.
async fn bad_message(s: &TestServer, text: Vec<u8>) -> (tonic::Status, String) {
    let mut grpc = tonic::client::Grpc::new(channel(s).await);
    grpc.ready().await.unwrap();
    let (tx, rx) = mpsc::channel(4);
    tx.send(RawConnectRequest {
        hello: Some(hello("sloppy", &["*"], 1)),
        ..Default::default()
    })
    .await
    .unwrap();
    let path = http::uri::PathAndQuery::from_static("/agentry.v1.RunnerService/Connect");
    let codec = tonic_prost::ProstCodec::<RawConnectRequest, pb::ConnectResponse>::default();
    let mut st = grpc
        .streaming(Request::new(ReceiverStream::new(rx)), path, codec)
        .await
        .unwrap()
        .into_inner();
    let mut next = async || {
        let m = tokio::time::timeout(Duration::from_secs(10), st.next())
            .await
            .expect("a message in time");
        m.expect("a message").map(|m| m.msg.unwrap())
    };
    assert!(matches!(next().await, Ok(Out::Welcome(_))));
    let w = bg(s, "task", "a worker for the sloppy runner").await;
    let Ok(Out::Assignment(a)) = next().await else {
        panic!("expected the assignment")
    };
    tx.send(RawConnectRequest {
        accepted: Some(pb::RunnerAccepted {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_state(s, &w.id, pb::WorkerState::Running).await;
    tx.send(RawConnectRequest {
        progress: Some(RawProgress {
            worker_id: a.worker_id.into_bytes(),
            lease_token: a.lease_token.into_bytes(),
            kind: pb::ProgressKind::Text as i32,
            text,
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let end = next().await.expect_err("the stream ends with an error");
    (end, w.id)
}

#[tokio::test]
async fn a_bad_runner_message_ends_the_stream_as_invalid_argument() {
    let s = start_with(fast).await;
    // Invalid UTF-8 in a string field.
    let (end, id) = bad_message(&s, b"caf\xe9 \xff".to_vec()).await;
    assert_eq!(end.code(), Code::InvalidArgument, "{end:?}");
    assert!(
        end.message()
            .starts_with("the request is not a valid message: ")
            && end.message().contains("UTF-8"),
        "{end:?}"
    );
    // The session ended: its worker is lost like any runner's, once the lease passes.
    let lost = wait_state(&s, &id, pb::WorkerState::Failed).await;
    assert_eq!(lost.error.as_deref(), Some("runner lost: sloppy"));

    // A message over the stream's size limit (16 MiB here).
    let (end, _) = bad_message(&s, vec![b'x'; 17 << 20]).await;
    assert_eq!(end.code(), Code::InvalidArgument, "{end:?}");
    assert!(
        end.message()
            .starts_with("the request message is too large: "),
        "{end:?}"
    );
}

#[tokio::test]
async fn a_resumed_watch_of_a_finished_worker_ends() {
    let s = start_with(fast).await;
    let mut r = Runner::any(&s, "honest", 1).await;
    let (w, a) = r.take(&s, "short").await;
    r.complete(&a, "done").await;
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    let last = 3; // pending, running, completed
    let watch = |after: u64| {
        let mut c = s.client.clone();
        let id = w.id.clone();
        async move {
            c.watch_worker(pb::WatchWorkerRequest {
                worker_id: id,
                after_sequence: after,
            })
            .await
        }
    };
    // At the last event: nothing to send, the stream ends at once with OK.
    let mut st = watch(last).await.unwrap().into_inner();
    let end = tokio::time::timeout(Duration::from_secs(2), st.next())
        .await
        .expect("the stream ends at once");
    assert!(end.is_none(), "{end:?}");
    // Before it: the rest, then the end.
    let mut st = watch(last - 1).await.unwrap().into_inner();
    let ev = st.next().await.unwrap().unwrap();
    assert_eq!(ev.sequence, last);
    assert_eq!(ev.state, done.state);
    assert!(st.next().await.is_none());
    // Beyond it, up to the largest cursor: OUT_OF_RANGE, at once.
    for after in [last + 1, u64::MAX] {
        let err = watch(after).await.unwrap_err();
        assert_status(
            &err,
            Code::OutOfRange,
            "SEQUENCE_OUT_OF_RANGE",
            &format!(
                "after_sequence {after} is beyond the last event of worker {} (sequence {last})",
                w.id
            ),
        );
    }
    // A running worker's cursor beyond its last event is refused the same way.
    let (w2, _) = r.take(&s, "long").await;
    let err = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: w2.id.clone(),
            after_sequence: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
}

/// A 1 MB persona with 100,000 keys, and one holding a 500,000-element list, beside a normal
/// one: the first `ListAgents` of the workspace answers in seconds, not the minute a quadratic
/// parse took (55.6 s before the fix), and lists the normal agent. The bound is loose on
/// purpose (a debug build on a shared CI core); the measured figures are in the discovery
/// benchmark.
#[tokio::test]
async fn huge_personas_are_parsed_in_linear_time_through_list_agents() {
    let s = start().await;
    let ws = s.ws("big");
    let dir = ws.join(".claude/agents");
    std::fs::create_dir_all(&dir).unwrap();
    let mut keys = String::from("---\nname: many\ndescription: many keys\n");
    for i in 0..100_000 {
        keys.push_str(&format!("k{i}: v\n"));
    }
    keys.push_str("---\nBody.\n");
    assert!(
        keys.len() > 900_000 && keys.len() < 1 << 20,
        "{}",
        keys.len()
    );
    std::fs::write(dir.join("many.md"), keys).unwrap();
    let mut list = String::from("---\nname: listy\ndescription: a long list\nitems:\n");
    while list.len() < 1_000_000 {
        list.push_str("- x\n");
    }
    list.push_str("---\nBody.\n");
    std::fs::write(dir.join("listy.md"), list).unwrap();
    persona(&dir, "normal.md", "name: normal\ndescription: d", "Normal.");
    let t0 = std::time::Instant::now();
    let r = list_all(&s, &ws, false).await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(20), "ListAgents took {took:?}");
    for name in ["many", "listy", "normal"] {
        assert!(r.agents.iter().any(|a| a.name == name), "{name} not listed");
    }
}

/// A running worker on `prompt`, its worker token, and a watch of its events from the start.
async fn watched_runner(
    s: &TestServer,
    prompt: &str,
) -> (
    pb::Worker,
    String,
    tonic::Streaming<pb::WatchWorkerResponse>,
) {
    let w = crate::workers::spawn(s, spawn_req("task", prompt, false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(s, &w.id, pb::WorkerState::Running).await;
    let token = crate::workers::env_of(s, &w.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let watch = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: w.id.clone(),
            after_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner();
    (w, token, watch)
}

/// A sustained stream of progress events through gRPC — 112 MiB of event text, with a watcher
/// reading along — keeps the SQLite WAL under its 64 MiB bound the whole time (it grew to 651 MB
/// before the bound; docs/guide.md, limits).
#[tokio::test]
async fn a_stream_of_progress_events_keeps_the_sqlite_wal_bounded() {
    use tokio_stream::StreamExt as _;
    let s = crate::workers::with_runtime("exec sleep 120", |_| {}).await;
    // A watcher follows the events, so readers hold snapshots while the writes go on.
    let (w, token, mut watch) = watched_runner(&s, "hold the line").await;
    let watcher = tokio::spawn(async move {
        let mut seen = 0u64;
        while let Some(Ok(_)) = watch.next().await {
            seen += 1;
        }
        seen
    });
    let wal = s.dir.path().join("state/agentry.db-wal");
    let text = "x".repeat(60 * 1024);
    let mut largest = 0u64;
    let mut c = s.client.clone();
    for n in 0..1_900 {
        c.report_progress(req(
            pb::ReportProgressRequest {
                kind: pb::ProgressKind::Text as i32,
                text: text.clone(),
                data_json: String::new(),
            },
            &[("x-agentry-worker-token", token.as_str())],
        ))
        .await
        .unwrap_or_else(|e| panic!("event {n}: {e:?}"));
        if n % 20 == 0 {
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
    }
    largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
    assert!(largest <= 64 << 20, "the WAL reached {} MiB", largest >> 20);
    stop_worker(&s, &w.id, "enough").await;
    let seen = watcher.await.unwrap();
    assert!(seen >= 1_900, "the watcher saw {seen} events");
}

/// issue 40: four workers at once, each reporting 1,000 events of ~130 KB (64 KiB of text and
/// 64 KiB of data, the largest an event may be), with watchers reading along: the WAL stays
/// under its 64 MiB bound. Commits then carry several large events each, so a checkpoint every
/// so many commits let it reach 88 MiB (10,000 events each); it is checkpointed by size, and
/// past 32 MiB the writer truncates it before it writes more (20–32 MiB here, release build).
#[tokio::test]
async fn four_workers_flooding_large_events_keep_the_wal_bounded() {
    use tokio_stream::StreamExt as _;
    const WORKERS: usize = 4;
    const EVENTS: usize = 1000;
    let s = crate::workers::with_runtime("exec sleep 120", |_| {}).await;
    let wal = s.dir.path().join("state/agentry.db-wal");
    let mut floods = tokio::task::JoinSet::new();
    let mut ids = Vec::new();
    for i in 0..WORKERS {
        let (w, token, mut watch) = watched_runner(&s, &format!("flood {i}")).await;
        tokio::spawn(async move { while let Some(Ok(_)) = watch.next().await {} });
        let mut c = s.client.clone();
        floods.spawn(async move {
            let text = "t".repeat(64 * 1024);
            let data = format!("\"{}\"", "d".repeat(64 * 1024 - 2));
            for n in 0..EVENTS {
                c.report_progress(req(
                    pb::ReportProgressRequest {
                        kind: pb::ProgressKind::Text as i32,
                        text: text.clone(),
                        data_json: data.clone(),
                    },
                    &[("x-agentry-worker-token", token.as_str())],
                ))
                .await
                .unwrap_or_else(|e| panic!("event {n}: {e:?}"));
            }
        });
        ids.push(w.id);
    }
    // The WAL's size, looked at every few milliseconds while the floods go on.
    let largest = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampling = {
        let (wal, largest) = (wal.clone(), largest.clone());
        tokio::spawn(async move {
            loop {
                let n = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
                largest.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    floods.join_all().await;
    sampling.abort();
    let largest = largest.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("largest WAL: {:.1} MiB", largest as f64 / (1 << 20) as f64);
    assert!(largest <= 64 << 20, "the WAL reached {} MiB", largest >> 20);
    for id in ids {
        stop_worker(&s, &id, "enough").await;
    }
}
