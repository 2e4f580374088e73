//! RunnerService/Connect through gRPC (docs/runners.md): a runner written here, in Rust, plays
//! every rule of §10 against the real server.

use std::time::Duration;

use agentry::{
    config::ExecutorKind,
    grpc::pb::{
        self, connect_request::Msg as In, connect_response::Msg as Out,
        runner_service_client::RunnerServiceClient,
    },
};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Code, Streaming, transport::Channel};

use crate::helpers::*;
use crate::workers::{spawn, spawn_req, wait_state};

/// Short protocol timing so the rules can be watched in a test.
pub(crate) fn fast(c: &mut agentry::config::Config) {
    c.executor.kind = ExecutorKind::Runner;
    c.runners.heartbeat_interval = Duration::from_millis(100);
    c.runners.lease = Duration::from_millis(800);
    c.runners.accept_timeout = Duration::from_millis(300);
    c.executor.kill_grace = Duration::from_millis(300);
}

pub(crate) async fn server() -> TestServer {
    start_with(fast).await
}

pub(crate) fn hello(name: &str, agents: &[&str], slots: u32) -> pb::RunnerHello {
    pb::RunnerHello {
        name: name.into(),
        agents: agents.iter().map(|a| (*a).to_owned()).collect(),
        slots,
        ..Default::default()
    }
}

/// One runner session.
pub(crate) struct Runner {
    pub(crate) tx: mpsc::Sender<pb::ConnectRequest>,
    pub(crate) rx: Streaming<pb::ConnectResponse>,
    pub(crate) welcome: pb::RunnerWelcome,
}

pub(crate) async fn channel(s: &TestServer) -> Channel {
    Channel::from_shared(format!("http://{}", s.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Opens a stream and sends `first` (normally a hello); the server's answer or refusal.
pub(crate) async fn open(
    s: &TestServer,
    first: In,
    bearer_token: Option<&str>,
) -> Result<
    (
        mpsc::Sender<pb::ConnectRequest>,
        Streaming<pb::ConnectResponse>,
    ),
    tonic::Status,
> {
    let (tx, rx) = mpsc::channel(64);
    tx.send(pb::ConnectRequest { msg: Some(first) })
        .await
        .unwrap();
    let mut r = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(t) = bearer_token {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let stream = RunnerServiceClient::new(channel(s).await)
        .connect(r)
        .await?
        .into_inner();
    Ok((tx, stream))
}

impl Runner {
    pub(crate) async fn connect(s: &TestServer, h: pb::RunnerHello) -> Runner {
        Self::connect_as(s, h, None).await
    }

    /// A runner `name` that serves every agent with `slots` slots.
    pub(crate) async fn any(s: &TestServer, name: &str, slots: u32) -> Runner {
        Self::connect(s, hello(name, &["*"], slots)).await
    }

    pub(crate) async fn connect_as(
        s: &TestServer,
        h: pb::RunnerHello,
        token: Option<&str>,
    ) -> Runner {
        let (tx, mut rx) = open(s, In::Hello(h), token).await.unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), rx.next())
            .await
            .expect("welcome in time")
            .expect("a message")
            .expect("not an error");
        let Some(Out::Welcome(welcome)) = first.msg else {
            panic!("first message is not welcome: {first:?}");
        };
        Runner { tx, rx, welcome }
    }

    /// Spawns a background `task` worker, takes its offer, accepts it and waits until the
    /// worker is running.
    pub(crate) async fn take(
        &mut self,
        s: &TestServer,
        prompt: &str,
    ) -> (pb::Worker, pb::RunnerAssignment) {
        let w = bg(s, "task", prompt).await;
        let a = self.assignment().await;
        assert_eq!(a.worker_id, w.id, "offered the new worker");
        self.accept(&a).await;
        wait_state(s, &w.id, pb::WorkerState::Running).await;
        (w, a)
    }

    pub(crate) async fn send(&self, m: In) {
        self.tx
            .send(pb::ConnectRequest { msg: Some(m) })
            .await
            .unwrap();
    }

    /// The next server message, within 10 s.
    pub(crate) async fn next(&mut self) -> Out {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("a message in time")
    }

    pub(crate) async fn next_within(&mut self, d: Duration) -> Option<Out> {
        match tokio::time::timeout(d, self.rx.next()).await {
            Err(_) => None,
            Ok(Some(Ok(m))) => Some(m.msg.expect("a message with content")),
            Ok(other) => panic!("the stream ended: {other:?}"),
        }
    }

    pub(crate) async fn assignment(&mut self) -> pb::RunnerAssignment {
        match self.next().await {
            Out::Assignment(a) => a,
            other => panic!("expected an assignment, got {other:?}"),
        }
    }

    pub(crate) async fn rejected(&mut self) -> pb::RunnerRejected {
        match self.next().await {
            Out::Rejected(r) => r,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    pub(crate) async fn accept(&self, a: &pb::RunnerAssignment) {
        self.send(In::Accepted(pb::RunnerAccepted {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
        }))
        .await;
    }

    pub(crate) async fn progress(&self, id: &str, lease: &str, text: &str, data: &str) {
        self.send(In::Progress(pb::RunnerProgress {
            worker_id: id.into(),
            lease_token: lease.into(),
            kind: pb::ProgressKind::Text as i32,
            text: text.into(),
            data_json: data.into(),
        }))
        .await;
    }

    pub(crate) async fn finish(
        &self,
        id: &str,
        lease: &str,
        outcome: pb::runner_finished::Outcome,
    ) {
        self.send(In::Finished(pb::RunnerFinished {
            worker_id: id.into(),
            lease_token: lease.into(),
            session_ref: String::new(),
            outcome: Some(outcome),
        }))
        .await;
    }

    pub(crate) async fn complete(&self, a: &pb::RunnerAssignment, result: &str) {
        self.finish(
            &a.worker_id,
            &a.lease_token,
            pb::runner_finished::Outcome::Completed(pb::runner_finished::Completed {
                result: result.into(),
            }),
        )
        .await;
    }
}

fn canceled() -> pb::runner_finished::Outcome {
    pb::runner_finished::Outcome::Canceled(pb::runner_finished::Canceled {})
}

pub(crate) async fn bg(s: &TestServer, agent: &str, prompt: &str) -> pb::Worker {
    spawn(s, spawn_req(agent, prompt, false))
        .await
        .unwrap()
        .worker
        .unwrap()
}

/// (sequence, state, progress text) of a worker's events after `after`, to its end.
pub(crate) async fn events(
    s: &TestServer,
    id: &str,
    after: u64,
) -> Vec<(u64, i32, Option<String>)> {
    let mut st = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: id.into(),
            after_sequence: after,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), st.next())
        .await
        .expect("events in time")
    {
        let ev = ev.unwrap();
        seen.push((ev.sequence, ev.state, ev.progress.map(|p| p.text)));
    }
    seen
}

const RUNNING: i32 = pb::WorkerState::Running as i32;

#[tokio::test]
async fn a_runner_takes_a_worker_reports_progress_and_completes() {
    let s = server().await;
    let mut r = Runner::any(&s, "py-1", 4).await;
    assert!(r.welcome.runner_id.starts_with("rnr_"));
    assert_eq!(
        r.welcome.lease,
        Some(prost_types::Duration {
            seconds: 0,
            nanos: 800_000_000
        })
    );
    let w = bg(&s, "task", "find the config").await;
    let a = r.assignment().await;
    assert_eq!(a.worker_id, w.id);
    let spec = a.spec.clone().unwrap();
    assert_eq!((spec.worker_id.as_str(), spec.depth), (w.id.as_str(), 1));
    assert_eq!(spec.prompt, "find the config");
    assert_eq!(spec.agent.as_ref().unwrap().name, "task");
    assert!(!a.worker_token.is_empty() && !a.lease_token.is_empty());
    assert!(a.deadline.is_some());
    // Offered is not running: the worker stays pending, and its token cannot report yet.
    assert_eq!(get(&s, &w.id).await.state, pb::WorkerState::Pending as i32);
    let err = s
        .client
        .clone()
        .report_progress(req(
            pb::ReportProgressRequest {
                kind: pb::ProgressKind::Status as i32,
                text: "early".into(),
                data_json: String::new(),
            },
            &[("x-agentry-worker-token", &a.worker_token)],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    r.accept(&a).await;
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    r.progress(
        &a.worker_id,
        &a.lease_token,
        "reading",
        r#"{"file":"a.toml"}"#,
    )
    .await;
    // The worker token works for ReportProgress too (its agent's own tools report this way).
    let seq = s
        .client
        .clone()
        .report_progress(req(
            pb::ReportProgressRequest {
                kind: pb::ProgressKind::ToolCall as i32,
                text: "grep".into(),
                data_json: String::new(),
            },
            &[("x-agentry-worker-token", &a.worker_token)],
        ))
        .await
        .unwrap()
        .into_inner()
        .sequence;
    assert_eq!(seq, 4, "pending, running, the runner's report, this one");
    r.complete(&a, "found it").await;
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result.as_deref(), Some("found it"));
    assert_eq!(
        events(&s, &w.id, 1).await,
        [
            (2, RUNNING, None),
            (3, RUNNING, Some("reading".into())),
            (4, RUNNING, Some("grep".into())),
            (5, pb::WorkerState::Completed as i32, None),
        ]
    );
}

#[tokio::test]
async fn an_unaccepted_assignment_is_withdrawn_and_offered_again() {
    let s = server().await;
    let mut r = Runner::any(&s, "slow", 1).await;
    let w = bg(&s, "task", "accept me later").await;
    let first = r.assignment().await;
    match r.next().await {
        Out::Cancel(c) => {
            assert_eq!(c.worker_id, w.id);
            assert_eq!(c.reason, "assignment withdrawn: not accepted within 300ms");
        }
        other => panic!("expected the withdrawal, got {other:?}"),
    }
    let second = r.assignment().await;
    assert_eq!(second.worker_id, w.id);
    assert_ne!(
        second.lease_token, first.lease_token,
        "a new lease per offer"
    );
    // The withdrawn lease is dead.
    r.accept(&first).await;
    let no = r.rejected().await;
    assert_eq!(
        (no.worker_id.as_str(), no.code.as_str()),
        (w.id.as_str(), "LEASE_ENDED")
    );
    assert!(
        no.reason.contains("not accepted within 300ms"),
        "{}",
        no.reason
    );
    assert_eq!(get(&s, &w.id).await.state, pb::WorkerState::Pending as i32);
    r.accept(&second).await;
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    r.complete(&second, "ok").await;
    wait_state(&s, &w.id, pb::WorkerState::Completed).await;
}

#[tokio::test]
async fn two_runners_share_the_work_by_their_slots() {
    let s = server().await;
    let mut one = Runner::any(&s, "one", 1).await;
    let mut two = Runner::any(&s, "two", 2).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(bg(&s, "task", &format!("job {i}")).await.id);
    }
    let a1 = one.assignment().await;
    let b1 = two.assignment().await;
    let b2 = two.assignment().await;
    for a in [&a1, &b1, &b2] {
        assert!(ids.contains(&a.worker_id));
    }
    // Every slot is taken: the fourth worker waits.
    assert!(one.next_within(Duration::from_millis(200)).await.is_none());
    assert!(two.next_within(Duration::from_millis(50)).await.is_none());
    one.accept(&a1).await;
    two.accept(&b1).await;
    two.accept(&b2).await;
    let waiting: Vec<_> = ids
        .iter()
        .filter(|id| ![&a1.worker_id, &b1.worker_id, &b2.worker_id].contains(id))
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        get(&s, waiting[0]).await.state,
        pb::WorkerState::Pending as i32
    );
    // A slot frees: the oldest waiting worker goes there.
    one.complete(&a1, "done").await;
    let a2 = one.assignment().await;
    assert_eq!(&a2.worker_id, waiting[0]);
    one.accept(&a2).await;
    for (r, a) in [(&one, &a2), (&two, &b1), (&two, &b2)] {
        r.complete(a, "done").await;
    }
    for id in &ids {
        wait_state(&s, id, pb::WorkerState::Completed).await;
    }
}

#[tokio::test]
async fn a_runner_that_reconnects_within_the_lease_keeps_its_worker() {
    let s = server().await;
    let mut r = Runner::any(&s, "flaky", 1).await;
    let (w, a) = r.take(&s, "survive a reconnect").await;
    drop(r);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut h = hello("flaky", &["*"], 1);
    h.resume = vec![a.lease_token.clone(), "not-a-lease".into()];
    let mut back = Runner::connect(&s, h).await;
    let no = back.rejected().await;
    assert_eq!(no.code, "RESUME_REFUSED");
    back.progress(&a.worker_id, &a.lease_token, "still here", "")
        .await;
    // Past the first session's lease (heartbeating as an idle runner does): resumed, not lost.
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        back.send(In::Heartbeat(pb::RunnerHeartbeat {})).await;
    }
    assert_eq!(get(&s, &w.id).await.state, RUNNING);
    back.complete(&a, "made it").await;
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result.as_deref(), Some("made it"));
    assert_eq!(
        events(&s, &w.id, 2).await,
        [
            (3, RUNNING, Some("still here".into())),
            (4, pb::WorkerState::Completed as i32, None)
        ]
    );
}

#[tokio::test]
async fn a_runner_that_disappears_loses_its_workers_exactly_once() {
    let s = server().await;
    let mut gone = Runner::any(&s, "vanishing", 1).await;
    let (w, _) = gone.take(&s, "will be lost").await;
    drop(gone);
    let lost = wait_state(&s, &w.id, pb::WorkerState::Failed).await;
    assert_eq!(lost.error.as_deref(), Some("runner lost: vanishing"));
    assert!(lost.close_time.is_some());
    assert_eq!(
        events(&s, &w.id, 1).await,
        [
            (2, RUNNING, None),
            (3, pb::WorkerState::Failed as i32, None)
        ],
        "one failure, never re-run"
    );

    // A runner still connected but silent past the lease: same, and its stream is closed.
    let mut silent = Runner::any(&s, "silent", 1).await;
    let w2 = bg(&s, "task", "silence").await;
    let a2 = silent.assignment().await;
    silent.accept(&a2).await;
    let lost = wait_state(&s, &w2.id, pb::WorkerState::Failed).await;
    assert_eq!(lost.error.as_deref(), Some("runner lost: silent"));
    let end = tokio::time::timeout(Duration::from_secs(5), silent.rx.next())
        .await
        .unwrap();
    let status = end.expect("a final status").unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(get(&s, &w2.id).await.sequence, 3);
}

#[tokio::test]
async fn stale_unknown_and_repeated_messages_are_refused_and_change_no_row() {
    let s = server().await;
    let mut r = Runner::any(&s, "careful", 1).await;
    let w = bg(&s, "task", "mine").await;
    let a = r.assignment().await;
    let mut other = Runner::any(&s, "other", 1).await;
    let v = bg(&s, "task", "theirs").await;
    let b = other.assignment().await;
    assert_eq!(
        (a.worker_id.as_str(), b.worker_id.as_str()),
        (w.id.as_str(), v.id.as_str())
    );

    // Progress before accepted.
    r.progress(&a.worker_id, &a.lease_token, "too soon", "")
        .await;
    assert_eq!(r.rejected().await.code, "NOT_ACCEPTED");
    r.accept(&a).await;
    other.accept(&b).await;
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    wait_state(&s, &v.id, pb::WorkerState::Running).await;
    let v_seq = get(&s, &v.id).await.sequence;

    // A second hello.
    r.send(In::Hello(hello("again", &["*"], 1))).await;
    assert_eq!(r.rejected().await.code, "HELLO_REPEATED");
    // A lease token it does not hold (its own worker, a made-up token).
    r.progress(&a.worker_id, "0000", "forged", "").await;
    let no = r.rejected().await;
    assert_eq!(
        (no.worker_id.as_str(), no.code.as_str()),
        (w.id.as_str(), "STALE_LEASE")
    );
    // Another runner's worker, even with that worker's real lease token.
    r.complete(&b, "hijack").await;
    assert_eq!(r.rejected().await.code, "STALE_LEASE");
    // An unknown worker id, and garbage.
    r.progress("wkr_00000000000000000000000000000000", "x", "who", "")
        .await;
    assert_eq!(r.rejected().await.code, "UNKNOWN_WORKER");
    r.progress("nonsense\u{1b}", "x", "who", "").await;
    let no = r.rejected().await;
    assert_eq!(no.code, "UNKNOWN_WORKER");
    assert!(no.reason.contains("\\u{1b}"), "{}", no.reason);
    // Progress over the bounds, or with garbage JSON.
    r.progress(&a.worker_id, &a.lease_token, &"x".repeat(64 * 1024 + 1), "")
        .await;
    let no = r.rejected().await;
    assert_eq!(no.code, "INVALID_PROGRESS");
    assert!(no.reason.contains("progress.text"), "{}", no.reason);
    r.progress(&a.worker_id, &a.lease_token, "t", "{not json")
        .await;
    let no = r.rejected().await;
    assert_eq!(no.code, "INVALID_PROGRESS");
    assert!(no.reason.contains("progress.data_json"), "{}", no.reason);
    // An empty message, an accepted twice.
    r.tx.send(pb::ConnectRequest { msg: None }).await.unwrap();
    assert_eq!(r.rejected().await.code, "INVALID_MESSAGE");
    r.accept(&a).await;
    assert_eq!(r.rejected().await.code, "ALREADY_ACCEPTED");
    assert_eq!(
        get(&s, &w.id).await.sequence,
        2,
        "nothing refused was written"
    );
    assert_eq!(
        get(&s, &v.id).await.sequence,
        v_seq,
        "the other worker is untouched"
    );

    // finished twice.
    r.complete(&a, "first").await;
    wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    r.complete(&a, "second").await;
    let no = r.rejected().await;
    assert_eq!(no.code, "LEASE_ENDED");
    assert!(no.reason.contains("finished"), "{}", no.reason);
    assert_eq!(get(&s, &w.id).await.result.as_deref(), Some("first"));
    other.complete(&b, "theirs done").await;
    wait_state(&s, &v.id, pb::WorkerState::Completed).await;
}

#[tokio::test]
async fn a_stream_must_start_with_a_valid_hello() {
    let s = server().await;
    let err = open(&s, In::Heartbeat(pb::RunnerHeartbeat {}), None)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "HELLO_REQUIRED",
        "the first message of a runner stream must be hello; got heartbeat",
    );
    let err = open(&s, In::Hello(hello("", &[], 0)), None)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_bad_field(&err, "hello.name");
    assert_bad_field(&err, "hello.agents");
    assert_bad_field(&err, "hello.slots");
}

#[tokio::test]
async fn stop_cancels_on_the_runner_answered_or_not() {
    let s = server().await;
    let mut r = Runner::any(&s, "obedient", 2).await;
    let (w, a) = r.take(&s, "stop me").await;
    let stop = {
        let mut c = s.client.clone();
        let id = w.id.clone();
        tokio::spawn(async move {
            c.stop_worker(pb::StopWorkerRequest {
                worker_id: id,
                reason: "enough".into(),
            })
            .await
        })
    };
    match r.next().await {
        // The cancel carries the StopWorker reason.
        Out::Cancel(c) => assert_eq!(
            (c.worker_id.as_str(), c.reason.as_str()),
            (w.id.as_str(), "enough")
        ),
        other => panic!("expected cancel, got {other:?}"),
    }
    r.finish(&a.worker_id, &a.lease_token, canceled()).await;
    let killed = stop.await.unwrap().unwrap().into_inner().worker.unwrap();
    assert_eq!(killed.state, pb::WorkerState::Killed as i32);
    assert_eq!(killed.error.as_deref(), Some("killed: enough"));

    // Unanswered: killed after the grace, and the lease is dead from then on.
    let (w, a) = r.take(&s, "ignore the stop").await;
    let started = std::time::Instant::now();
    let killed = s
        .client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(killed.state, pb::WorkerState::Killed as i32);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited the grace"
    );
    assert!(matches!(r.next().await, Out::Cancel(_)));
    r.complete(&a, "too late").await;
    assert_eq!(r.rejected().await.code, "LEASE_ENDED");
    assert_eq!(get(&s, &w.id).await.result, None);
}

#[tokio::test]
async fn a_completed_result_is_checked_against_the_output_schema() {
    let s = server().await;
    let mut r = Runner::any(&s, "typed", 2).await;
    let schema =
        r#"{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}}}"#;
    let mut ids = Vec::new();
    for p in ["bad", "good"] {
        let mut q = spawn_req("task", p, false);
        q.output_schema = Some(schema.into());
        ids.push(spawn(&s, q).await.unwrap().worker.unwrap().id);
    }
    for _ in 0..2 {
        let a = r.assignment().await;
        let spec = a.spec.clone().unwrap();
        assert!(spec.agent.unwrap().output_schema.is_some());
        r.accept(&a).await;
        let result = if spec.prompt == "bad" {
            "not json"
        } else {
            r#"{"answer":"42"}"#
        };
        r.complete(&a, result).await;
    }
    let bad = wait_state(&s, &ids[0], pb::WorkerState::Failed).await;
    assert!(bad.error.is_some(), "{bad:?}");
    assert_eq!(bad.result.as_deref(), Some("not json"));
    let good = wait_state(&s, &ids[1], pb::WorkerState::Completed).await;
    assert_eq!(
        good.structured_result.as_deref(),
        Some(r#"{"answer":"42"}"#)
    );
}

#[tokio::test]
async fn a_runner_is_offered_only_the_agents_it_serves() {
    let s = server().await;
    let mut r = Runner::connect(&s, hello("quick-only", &["quick_task"], 2)).await;
    let mut q = spawn_req("task", "nobody serves me", false);
    q.timeout = Some(prost_types::Duration {
        seconds: 0,
        nanos: 600_000_000,
    });
    let task = spawn(&s, q).await.unwrap().worker.unwrap();
    let quick = bg(&s, "quick_task", "served").await;
    let a = r.assignment().await;
    assert_eq!(a.worker_id, quick.id);
    r.accept(&a).await;
    r.complete(&a, "ok").await;
    wait_state(&s, &quick.id, pb::WorkerState::Completed).await;
    let failed = wait_state(&s, &task.id, pb::WorkerState::Failed).await;
    assert_eq!(
        failed.error.as_deref(),
        Some("no runner served agent task within 600ms")
    );
    assert!(failed.start_time.is_none(), "it never ran");
}

/// A waiting worker that no connected runner serves does not hold back one behind it that a
/// runner does: the served one is offered at once, while the first still waits.
#[tokio::test]
async fn a_worker_no_runner_serves_does_not_hold_back_the_next() {
    let s = server().await;
    let mut r = Runner::connect(&s, hello("quick-only", &["quick_task"], 1)).await;
    let task = bg(&s, "task", "nobody serves me").await;
    let quick = bg(&s, "quick_task", "served").await;
    let a = match r.next_within(Duration::from_millis(500)).await {
        Some(Out::Assignment(a)) => a,
        other => panic!("expected the served worker's assignment at once, got {other:?}"),
    };
    assert_eq!(a.worker_id, quick.id);
    assert_eq!(
        get(&s, &task.id).await.state,
        pb::WorkerState::Pending as i32
    );
    r.accept(&a).await;
    r.complete(&a, "ok").await;
    wait_state(&s, &quick.id, pb::WorkerState::Completed).await;
    s.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: task.id,
            reason: "test over".into(),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn by_agent_keeps_some_agents_on_exec() {
    let s = crate::workers::with_runtime("echo from-exec", |c| {
        fast(c);
        c.executor
            .by_agent
            .insert("quick_task".into(), ExecutorKind::Exec);
    })
    .await;
    let w = spawn(&s, spawn_req("quick_task", "exec please", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(w.result.as_deref(), Some("from-exec\n"));
    let mut r = Runner::any(&s, "rest", 1).await;
    let t = bg(&s, "task", "runner please").await;
    assert_eq!(r.assignment().await.worker_id, t.id);
}

#[tokio::test]
async fn the_runner_spec_is_the_exec_stdin_document() {
    // The same dispatch through exec and through a runner: the JSON form of the proto spec
    // (proto field names, default-valued fields printed) equals exec's stdin.
    let s = crate::workers::with_runtime("echo ok", |_| {}).await;
    let mut q = spawn_req("lead", "compare\tme", true);
    q.output_schema = Some(r#"{"type":"object","required":["a"]}"#.into());
    let w = spawn(&s, q).await.unwrap().worker.unwrap();
    let stdin: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::workers::out(&s).join(format!("{}.json", w.id))).unwrap(),
    )
    .unwrap();
    // The runner kind, same persona, same dispatch.
    let s = start_with(|c| {
        fast(c);
        let root = c.home.clone().unwrap().parent().unwrap().to_path_buf();
        persona(
            &root.join("agents"),
            "lead.md",
            "name: lead\ndescription: leads\ntools: read, Bash(git diff:*)\nspawns: quick_task, lead",
            "LEAD",
        );
        c.agent_dirs = vec![agentry::config::AgentDir {
            path: root.join("agents"),
            recursive: false,
        }];
    })
    .await;
    let mut r = Runner::any(&s, "spec", 1).await;
    let mut q = spawn_req("lead", "compare\tme", false);
    q.output_schema = Some(r#"{"type":"object","required":["a"]}"#.into());
    let w2 = spawn(&s, q).await.unwrap().worker.unwrap();
    let a = r.assignment().await;
    let mut from_runner = spec_json(&a.spec.unwrap());
    from_runner["worker_id"] = serde_json::Value::String(w.id.clone());
    assert_eq!(from_runner, stdin, "runner spec of {} vs exec stdin", w2.id);
}

/// The proto3 JSON form of a spec with proto field names and fields without presence printed,
/// written out by hand from the message: the mapping `MessageToDict` applies in Python.
fn spec_json(s: &pb::WorkerSpec) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    fn value(v: &prost_types::Value) -> Value {
        use prost_types::value::Kind;
        match v.kind.as_ref().unwrap() {
            Kind::NullValue(_) => Value::Null,
            Kind::BoolValue(b) => Value::Bool(*b),
            Kind::NumberValue(n) => json!(n),
            Kind::StringValue(s) => Value::String(s.clone()),
            Kind::ListValue(l) => Value::Array(l.values.iter().map(value).collect()),
            Kind::StructValue(st) => Value::Object(
                st.fields
                    .iter()
                    .map(|(k, v)| (k.clone(), value(v)))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
    let a = s.agent.as_ref().unwrap();
    let tools = match a.tools.as_ref().unwrap().kind.as_ref().unwrap() {
        pb::tool_spec::Kind::Only(l) => {
            json!({"only": l.values.iter().map(value).collect::<Vec<_>>()})
        }
        pb::tool_spec::Kind::AllExcept(l) => {
            json!({"all_except": l.values.iter().map(value).collect::<Vec<_>>()})
        }
    };
    let rules: Vec<Value> = a
        .tool_rules
        .iter()
        .map(|r| json!({"entry": r.entry, "name": r.name, "pattern": r.pattern, "deny": r.deny}))
        .collect();
    let mut agent = json!({
        "name": a.name, "system_prompt": a.system_prompt, "tools": tools, "tool_rules": rules,
        "spawns": a.spawns, "model": a.model,
    });
    let o = agent.as_object_mut().unwrap();
    if let Some(t) = &a.thinking_level {
        o.insert("thinking_level".into(), json!(t));
    }
    if let Some(m) = a.max_turns {
        o.insert("max_turns".into(), json!(m));
    }
    if let Some(p) = &a.permission_mode {
        o.insert("permission_mode".into(), json!(p));
    }
    if let Some(sc) = &a.output_schema {
        o.insert("output_schema".into(), value(sc));
    }
    let mut doc = json!({
        "worker_id": s.worker_id, "depth": s.depth, "prompt": s.prompt,
        "description": s.description, "agent": agent,
    });
    if let Some(ws) = &s.workspace {
        doc["workspace"] = json!(ws);
    }
    doc
}

#[tokio::test]
async fn a_runner_is_offered_only_its_own_principals_workers() {
    let s = start_with(|c| {
        fast(c);
        tokens_file(c, "alice-secret: alice\nbob-secret: bob\n");
    })
    .await;
    // Without a bearer token the stream is refused.
    let err = open(&s, In::Hello(hello("anon", &["*"], 1)), None)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    let mut bobs = Runner::connect_as(&s, hello("bob-runner", &["*"], 4), Some("bob-secret")).await;
    let w = s
        .client
        .clone()
        .spawn_worker(req(
            spawn_req("task", "alice's secret work", false),
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert!(
        bobs.next_within(Duration::from_millis(400)).await.is_none(),
        "bob's runner never sees alice's worker"
    );
    let mut alices =
        Runner::connect_as(&s, hello("alice-runner", &["*"], 1), Some("alice-secret")).await;
    let a = alices.assignment().await;
    assert_eq!(a.worker_id, w.id);
    // Bob's runner cannot touch it even with its lease token.
    bobs.complete(&a, "bob was here").await;
    assert_eq!(bobs.rejected().await.code, "STALE_LEASE");
    alices.accept(&a).await;
    alices.complete(&a, "alice's result").await;
    let done = s
        .client
        .clone()
        .get_worker(req(
            pb::GetWorkerRequest {
                worker_id: w.id.clone(),
            },
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(done.caller, "alice");
}

/// A persona's `memory` reaches a runner as the spec's `memory_dir` (docs/personas.md §2.7),
/// created before the offer.
#[tokio::test]
async fn a_runner_is_told_the_memory_directory_of_its_agent() {
    let s = start_with(|c| {
        fast(c);
        let agents = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &agents,
            "keeper.md",
            "name: keeper\ndescription: remembers\nmemory: user",
            "Keep notes.",
        );
    })
    .await;
    let mut r = Runner::any(&s, "py-1", 1).await;
    let w = bg(&s, "keeper", "remember this").await;
    let a = r.assignment().await;
    assert_eq!(a.worker_id, w.id);
    let dir = s.home().join(".claude/agent-memory/keeper");
    assert!(dir.is_dir(), "created before the offer");
    assert_eq!(
        a.spec.unwrap().memory_dir.as_deref(),
        Some(dir.to_str().unwrap())
    );
    s.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id,
            reason: "test over".into(),
        })
        .await
        .unwrap();
}
