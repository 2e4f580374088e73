//! Conversations (docs §12) through gRPC, on the model executor against the scripted
//! OpenAI-compatible server: follow-ups, continuations, the inbox and its seal, interrupts,
//! workers that ask, and every refusal.
//!
//! | rule | test |
//! |---|---|
//! | §12.3 a finished worker continues with its transcript | `a_follow_up_to_a_finished_worker_continues_its_conversation` |
//! | §12.3 transcripts survive a restart | `a_transcript_survives_a_restart` |
//! | §12.2 queued at the next turn boundary, PROGRESS_KIND_MESSAGE | `a_message_to_a_running_worker_is_its_next_user_message` |
//! | §12.2 interrupt | `an_interrupt_abandons_the_request_in_flight` |
//! | §12.2 the seal: never lost, never twice | `messages_racing_completion_are_answered_exactly_once` |
//! | §12.4 ask_caller and input_required | `an_interactive_worker_asks_and_the_answer_resumes_it` |
//! | §12.1 refusals | `refusals_name_what_was_wrong`, `a_worker_may_message_only_its_children` |
//! | §12.1 request_id | `a_request_id_makes_a_send_idempotent` |
//! | §12.3 transcript TTL | `an_expired_transcript_is_refused` |
//! | §12.4 a stop while waiting, the input timeout | `a_waiting_worker_can_be_stopped`, `an_unanswered_question_fails_the_worker_after_the_input_timeout` |
//! | §6.6, §12.4 one watch through a question | `a_watch_follows_a_worker_through_its_question_to_its_end` |
//! | §12.1 inbox bound, exec, tenancy | `a_full_inbox_is_resource_exhausted`, `an_exec_worker_is_not_resumable`, `another_principals_worker_is_not_found` |
//! | §12.6 runners: messages, input, resume | `a_runner_with_the_capabilities_takes_messages_and_asks`, `a_runner_session_is_resumed_by_a_continuation` |

use std::time::Duration;

use agentry::grpc::pb;
use serde_json::{Value, json};
use tonic::Code;

use crate::{
    helpers::*,
    model::{Scripted, events, on_model},
    workers::{self, spawn_req, wait_state},
};

fn agents(c: &agentry::config::Config) -> std::path::PathBuf {
    c.home.clone().unwrap().join(".claude/agents")
}

/// A server on `scripted` with the persona `helper` (and `lead`, which may spawn it).
async fn server(
    scripted: &Scripted,
    tweak: impl FnOnce(&mut agentry::config::Config),
) -> TestServer {
    start_with(|c| {
        on_model(c, scripted);
        let dir = agents(c);
        persona(
            &dir,
            "helper.md",
            "name: helper\ndescription: helps",
            "You help.",
        );
        persona(
            &dir,
            "lead.md",
            "name: lead\ndescription: leads\nspawns: helper",
            "You lead.",
        );
        tweak(c);
    })
    .await
}

fn msg(worker_id: &str, text: &str, wait: bool) -> pb::SendWorkerMessageRequest {
    pb::SendWorkerMessageRequest {
        worker_id: worker_id.into(),
        text: text.into(),
        wait,
        ..Default::default()
    }
}

async fn send(
    s: &TestServer,
    r: pb::SendWorkerMessageRequest,
) -> Result<pb::SendWorkerMessageResponse, tonic::Status> {
    send_with(s.client.clone(), r).await
}

/// The `role: content` lines of a logged request's messages.
fn transcript_of(req: &Value) -> Vec<String> {
    req["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}: {}",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn a_follow_up_to_a_finished_worker_continues_its_conversation() {
    let scripted = Scripted::start(json!([
        {"match": "and the tests?", "content": "the tests pass"},
        {"match": "review the parser", "content": "the parser is fine"},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let first = workers::spawn(&s, spawn_req("helper", "review the parser", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(first.state, pb::WorkerState::Completed as i32, "{first:?}");

    let sent = send(&s, msg(&first.id, "and the tests?", true))
        .await
        .unwrap();
    assert!(sent.continued);
    assert!(sent.message_id.starts_with("msg_"), "{}", sent.message_id);
    let next = sent.worker.unwrap();
    assert_ne!(next.id, first.id);
    assert_eq!(next.state, pb::WorkerState::Completed as i32, "{next:?}");
    assert_eq!(next.result.as_deref(), Some("the tests pass"));
    assert_eq!(next.continues, first.id);
    assert_eq!((next.agent.as_str(), next.depth), ("helper", 1));
    assert_eq!(get(&s, &first.id).await.continued_by, next.id);

    // The follow-up's conversation is the first one's, then the message.
    let requests = scripted.requests();
    assert_eq!(
        transcript_of(&requests[1]),
        [
            "system: You help.",
            "user: review the parser",
            "assistant: the parser is fine",
            "user: and the tests?"
        ]
    );
    // The message is an event of the worker that answered it.
    let delivered: Vec<_> = events(&s, &next.id)
        .await
        .into_iter()
        .filter_map(|e| e.progress)
        .filter(|p| p.kind == pb::ProgressKind::Message as i32)
        .collect();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].text, "and the tests?");
    let data: Value = serde_json::from_str(&delivered[0].data_json).unwrap();
    assert_eq!(data["message_id"], sent.message_id.as_str());
    assert_eq!(data["delivery"], "queue");

    // A second message to the first worker goes to the latest of the line.
    let again = send(&s, msg(&first.id, "and the docs?", true))
        .await
        .unwrap();
    let third = again.worker.unwrap();
    assert_eq!(third.continues, next.id);
    assert_eq!(
        transcript_of(&scripted.requests()[2])[3..],
        [
            "user: and the tests?",
            "assistant: the tests pass",
            "user: and the docs?"
        ]
    );
}

#[tokio::test]
async fn a_transcript_survives_a_restart() {
    let scripted = Scripted::start(json!([
        {"match": "second question", "content": "second answer"},
        {"match": "first question", "content": "first answer"},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let first = workers::spawn(&s, spawn_req("helper", "first question", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    let dir = s.stop().await.unwrap();
    let mut cfg = config_in(dir.path());
    on_model(&mut cfg, &scripted);
    let s = start_in(dir, cfg).await;
    let next = send(&s, msg(&first.id, "second question", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(next.result.as_deref(), Some("second answer"), "{next:?}");
    assert_eq!(
        transcript_of(&scripted.requests()[1])[1..],
        [
            "user: first question",
            "assistant: first answer",
            "user: second question"
        ]
    );
}

#[tokio::test]
async fn a_message_to_a_running_worker_is_its_next_user_message() {
    // The first turn calls a tool nobody offered, slowly: the message arrives meanwhile and is
    // delivered after that call's reply.
    let scripted = Scripted::start(json!([
        {"match": "use the fast path", "content": "done the fast way"},
        {"match": "slow start", "delay_ms": 400, "tool_calls": [{"name": "nope", "arguments": {}}]},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let w = workers::spawn(&s, spawn_req("helper", "slow start", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let sent = send(&s, msg(&w.id, "use the fast path", false))
        .await
        .unwrap();
    assert!(!sent.continued);
    assert_eq!(sent.worker.unwrap().id, w.id);
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result.as_deref(), Some("done the fast way"));
    let lines = transcript_of(&scripted.requests()[1]);
    assert_eq!(lines[lines.len() - 1], "user: use the fast path");
    assert!(
        lines[lines.len() - 2].starts_with("tool: unknown tool nope"),
        "{lines:?}"
    );
    assert_eq!(done.undelivered_messages, 0);
}

#[tokio::test]
async fn an_interrupt_abandons_the_request_in_flight() {
    let scripted = Scripted::start(json!([
        {"match": "stop that", "content": "stopped"},
        {"match": "long think", "delay_ms": 20000, "content": "too late"},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let w = workers::spawn(&s, spawn_req("helper", "long think", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    // The request is in flight once the server has logged it.
    eventually("the first request", Duration::from_secs(10), || async {
        (!scripted.requests().is_empty()).then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    let r = pb::SendWorkerMessageRequest {
        delivery: pb::Delivery::Interrupt as i32,
        ..msg(&w.id, "stop that", true)
    };
    let sent = send(&s, r).await.unwrap();
    let done = sent.worker.unwrap();
    assert_eq!(done.id, w.id);
    assert_eq!(done.result.as_deref(), Some("stopped"), "{done:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The abandoned turn left nothing in the conversation: the brief, then the message.
    assert_eq!(
        transcript_of(&scripted.requests()[1])[1..],
        ["user: long think", "user: stop that"]
    );
}

#[tokio::test]
async fn messages_racing_completion_are_answered_exactly_once() {
    // A worker answers its brief in tens of milliseconds (longer with 300 at once); each
    // message is sent from 0 to 400 ms after the worker starts, so they land before, during
    // and after its completion.
    let scripted = Scripted::start(json!([
        {"match": "follow", "repeat": true, "content": "ok"},
        {"match": "brief", "repeat": true, "content": "brief answered", "split": 3, "delay_ms": 10},
    ]))
    .await;
    let s = server(&scripted, |c| {
        c.limits.max_running = 64;
    })
    .await;
    const N: usize = 300;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..N {
        let client = s.client.clone();
        set.spawn(async move {
            let mut client = client;
            let w = client
                .spawn_worker(spawn_req("helper", &format!("brief {i}"), false))
                .await
                .unwrap()
                .into_inner()
                .worker
                .unwrap();
            let mut watch = client
                .watch_worker(pb::WatchWorkerRequest {
                    worker_id: w.id.clone(),
                    after_sequence: 0,
                })
                .await
                .unwrap()
                .into_inner();
            while let Some(ev) = watch.message().await.unwrap() {
                if ev.state != pb::WorkerState::Pending as i32 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_micros((i as u64 * 7919) % 400_000)).await;
            let sent = client
                .send_worker_message(msg(&w.id, &format!("follow {i} ."), true))
                .await
                .unwrap()
                .into_inner();
            (i, sent)
        });
    }
    let mut continued = 0;
    while let Some(done) = set.join_next().await {
        let (i, sent) = done.unwrap();
        let w = sent.worker.unwrap();
        assert_eq!(
            w.state,
            pb::WorkerState::Completed as i32,
            "message {i}: {w:?}"
        );
        continued += usize::from(sent.continued);
    }
    // Each message was in exactly one model request that answered it: never lost, never
    // answered both by its worker and by a continuation.
    let requests = scripted.requests();
    for i in 0..N {
        let needle = format!("follow {i} .");
        let with: Vec<_> = requests
            .iter()
            .filter(|r| {
                r["body"]["messages"]
                    .as_array()
                    .unwrap()
                    .last()
                    .is_some_and(|m| m["content"] == needle.as_str())
            })
            .collect();
        assert_eq!(
            with.len(),
            1,
            "message {i} was answered {} times",
            with.len()
        );
    }
    println!("{continued} of {N} messages continued their worker; the rest were another turn");
}

#[tokio::test]
async fn an_interactive_worker_asks_and_the_answer_resumes_it() {
    let scripted = Scripted::start(json!([
        {"match": "\"content\":\"main\"", "tool_calls": [{"name": "submit_result", "arguments": {"result": "merged into main"}}]},
        {"match": "which branch", "tool_calls": [{"name": "ask_caller", "arguments": {"question": "Which branch do I merge into?"}}]},
        {"match": "batch job", "content": "no questions"},
    ]))
    .await;
    let s = server(&scripted, |c| {
        c.limits.max_running = 1;
    })
    .await;
    let asked = workers::spawn(
        &s,
        pb::SpawnWorkerRequest {
            interactive: true,
            ..spawn_req("helper", "which branch", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert_eq!(
        asked.state,
        pb::WorkerState::InputRequired as i32,
        "{asked:?}"
    );
    assert_eq!(
        asked.question.as_deref(),
        Some("Which branch do I merge into?")
    );
    assert!(asked.interactive);
    assert!(scripted.tools_of(0).contains(&"ask_caller".to_owned()));

    // Waiting, it holds no run slot: the one slot runs another worker.
    let other = workers::spawn(&s, spawn_req("helper", "batch job", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(other.result.as_deref(), Some("no questions"));
    assert!(!scripted.tools_of(1).contains(&"ask_caller".to_owned()));

    let sent = send(&s, msg(&asked.id, "main", true)).await.unwrap();
    assert!(!sent.continued);
    let done = sent.worker.unwrap();
    assert_eq!(done.id, asked.id);
    assert_eq!(done.result.as_deref(), Some("merged into main"), "{done:?}");
    assert_eq!(done.question, None);
    // The answer is the question's tool result.
    let last = scripted.requests().pop().unwrap();
    assert_eq!(crate::model::tool_messages(&last), ["main"]);
    let states: Vec<i32> = events(&s, &asked.id)
        .await
        .into_iter()
        .filter(|e| e.progress.is_none())
        .map(|e| e.state)
        .collect();
    use pb::WorkerState as S;
    assert_eq!(
        states,
        [
            S::Running as i32,
            S::InputRequired as i32,
            S::Running as i32,
            S::Completed as i32
        ]
    );
}

#[tokio::test]
async fn a_waiting_worker_can_be_stopped() {
    let scripted = Scripted::start(json!([
        {"tool_calls": [{"name": "ask_caller", "arguments": {"question": "ok?"}}]},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let asked = workers::spawn(
        &s,
        pb::SpawnWorkerRequest {
            interactive: true,
            ..spawn_req("helper", "ask me", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert_eq!(asked.state, pb::WorkerState::InputRequired as i32);
    let stopped = stop_worker(&s, &asked.id, "not needed").await;
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
    assert_eq!(stopped.error.as_deref(), Some("killed: not needed"));
}

#[tokio::test]
async fn refusals_name_what_was_wrong() {
    let scripted = Scripted::start(json!([{"repeat": true, "content": "ok"}])).await;
    let s = server(&scripted, |c| {
        c.workers.inbox_max = 1;
    })
    .await;
    // Bad requests.
    let err = send(&s, msg("wkr_00000000000000000000000000000000", "  ", false))
        .await
        .unwrap_err();
    assert_bad_field(&err, "text");
    let err = send(&s, msg("nope", "hi", false)).await.unwrap_err();
    assert_bad_field(&err, "worker_id");
    let big = "x".repeat(256 * 1024 + 1);
    let err = send(&s, msg("wkr_00000000000000000000000000000000", &big, false))
        .await
        .unwrap_err();
    assert_bad_field(&err, "text");
    // An unknown worker.
    let err = send(&s, msg("wkr_00000000000000000000000000000000", "hi", false))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "WORKER_NOT_FOUND",
        "worker wkr_00000000000000000000000000000000 not found",
    );
}

#[tokio::test]
async fn a_full_inbox_is_resource_exhausted() {
    let scripted = Scripted::start(json!([
        {"match": "slow", "delay_ms": 3000, "content": "late"},
        {"repeat": true, "content": "ok"},
    ]))
    .await;
    let s = server(&scripted, |c| {
        c.workers.inbox_max = 1;
    })
    .await;
    let w = workers::spawn(&s, spawn_req("helper", "slow", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let first = send(&s, msg(&w.id, "one", false)).await.unwrap();
    assert_eq!(first.worker.unwrap().undelivered_messages, 1);
    let err = send(&s, msg(&w.id, "two", false)).await.unwrap_err();
    assert_status(
        &err,
        Code::ResourceExhausted,
        "INBOX_FULL",
        &format!(
            "worker {} already has 1 undelivered messages (workers.inbox_max)",
            w.id
        ),
    );
}

#[tokio::test]
async fn an_exec_worker_is_not_resumable() {
    let s = workers::with_runtime("echo done", |_| {}).await;
    let w = workers::spawn(&s, spawn_req("lead", "go", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    let err = send(&s, msg(&w.id, "more", false)).await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "NOT_RESUMABLE",
        &format!(
            "worker {} runs on the exec executor: a process has no transcript to continue",
            w.id
        ),
    );
}

#[tokio::test]
async fn a_worker_may_message_only_its_children() {
    use crate::runners::{Runner, fast};
    let s = start_with(fast).await;
    let mut runner = Runner::any(&s, "r", 4).await;
    let parent = workers::spawn(&s, spawn_req("task", "parent", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let a = runner.assignment().await;
    assert_eq!(a.worker_id, parent.id);
    // The parent spawns a child with its token.
    let child = s
        .client
        .clone()
        .spawn_worker(req(
            spawn_req("explore", "child", false),
            &[("x-agentry-worker-token", &a.worker_token)],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let b = runner.assignment().await;
    assert_eq!(b.worker_id, child.id);
    let as_worker = |token: &str, to: &str| {
        req(
            msg(to, "hello", false),
            &[("x-agentry-worker-token", token)],
        )
    };
    let err = s
        .client
        .clone()
        .send_worker_message(as_worker(&a.worker_token, &parent.id))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::PermissionDenied,
        "MESSAGE_TO_SELF",
        "a worker cannot send a message to itself",
    );
    let err = s
        .client
        .clone()
        .send_worker_message(as_worker(&b.worker_token, &parent.id))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::PermissionDenied,
        "MESSAGE_TO_ANCESTOR",
        "a worker cannot send a message to its parent or another ancestor; return your answer as your result instead",
    );
    // Its own child passes the lineage rule; a child not yet running on a runner that takes
    // messages cannot take one.
    let err = s
        .client
        .clone()
        .send_worker_message(as_worker(&a.worker_token, &child.id))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "MESSAGES_UNSUPPORTED",
        &format!(
            "worker {} runs on a runner that does not take messages (it is not running on a runner connected to this replica)",
            child.id
        ),
    );
    // A sibling of no relation: a second top-level worker.
    let other = workers::spawn(&s, spawn_req("task", "other", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let _ = runner.assignment().await;
    let err = s
        .client
        .clone()
        .send_worker_message(as_worker(&b.worker_token, &other.id))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::PermissionDenied,
        "NOT_PARENT",
        &format!(
            "a worker can send messages only to its own children; worker {} is not a child of worker {}",
            other.id, child.id
        ),
    );
    drop(runner.tx);
}

#[tokio::test]
async fn a_request_id_makes_a_send_idempotent() {
    let scripted = Scripted::start(json!([
        {"match": "again?", "content": "once"},
        {"repeat": true, "content": "ok"},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let w = workers::spawn(&s, spawn_req("helper", "first", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    let r = pb::SendWorkerMessageRequest {
        request_id: "k1".into(),
        ..msg(&w.id, "again?", true)
    };
    let one = send(&s, r.clone()).await.unwrap();
    let two = send(&s, r.clone()).await.unwrap();
    assert_eq!(one.message_id, two.message_id);
    assert_eq!(one.worker.unwrap().id, two.worker.unwrap().id);
    assert_eq!(
        scripted
            .requests()
            .iter()
            .filter(|q| q["body"].to_string().contains("again?"))
            .count(),
        1
    );
    let err = send(
        &s,
        pb::SendWorkerMessageRequest {
            text: "something else".into(),
            ..r
        },
    )
    .await
    .unwrap_err();
    assert_bad_field(&err, "request_id");
}

#[tokio::test]
async fn an_expired_transcript_is_refused() {
    let scripted = Scripted::start(json!([{"repeat": true, "content": "ok"}])).await;
    let s = server(&scripted, |c| {
        c.workers.transcript_ttl = Duration::from_millis(300);
    })
    .await;
    let w = workers::spawn(&s, spawn_req("helper", "first", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let err = send(&s, msg(&w.id, "more", false)).await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "TRANSCRIPT_EXPIRED",
        &format!(
            "the transcript of worker {} expired (workers.transcript_ttl is 300ms); spawn a new worker",
            w.id
        ),
    );
}

/// docs §12.6: a runner with the capabilities `messages` and `input` gets each message on its
/// stream, acknowledges it (the message becomes an event), asks its caller (the worker waits in
/// `input_required` with the question, keeping its lease), and gets the answer as a message.
#[tokio::test]
async fn a_runner_with_the_capabilities_takes_messages_and_asks() {
    use crate::runners::{Runner, fast, hello};
    use pb::{connect_request::Msg as In, connect_response::Msg as Out};
    let s = start_with(fast).await;
    let mut runner = Runner::connect(
        &s,
        pb::RunnerHello {
            capabilities: vec!["messages".into(), "input".into()],
            ..hello("talker", &["*"], 2)
        },
    )
    .await;
    let w = workers::spawn(&s, spawn_req("task", "talk to me", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let a = runner.assignment().await;
    runner
        .send(In::Accepted(pb::RunnerAccepted {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
        }))
        .await;
    wait_state(&s, &w.id, pb::WorkerState::Running).await;

    let sent = send(&s, msg(&w.id, "hello runner", false)).await.unwrap();
    assert!(!sent.continued);
    let Out::Message(m) = runner.next().await else {
        panic!("expected a message")
    };
    assert_eq!(
        (m.worker_id.as_str(), m.text.as_str(), m.message_id.as_str()),
        (w.id.as_str(), "hello runner", sent.message_id.as_str())
    );
    assert_eq!(m.lease_token, a.lease_token);
    runner
        .send(In::MessageDelivered(pb::RunnerMessageDelivered {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
            message_id: m.message_id.clone(),
        }))
        .await;
    eventually("the delivery recorded", Duration::from_secs(10), || async {
        let w = get(&s, &w.id).await;
        (w.undelivered_messages == 0)
            .then_some(())
            .ok_or(format!("{w:?}"))
    })
    .await;

    runner
        .send(In::InputRequired(pb::RunnerInputRequired {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
            question: "Which branch?".into(),
        }))
        .await;
    let asked = wait_state(&s, &w.id, pb::WorkerState::InputRequired).await;
    assert_eq!(asked.question.as_deref(), Some("Which branch?"));
    send(&s, msg(&w.id, "main", false)).await.unwrap();
    let Out::Message(answer) = runner.next().await else {
        panic!("expected the answer")
    };
    assert_eq!(answer.text, "main");
    runner
        .send(In::MessageDelivered(pb::RunnerMessageDelivered {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
            message_id: answer.message_id,
        }))
        .await;
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    runner
        .send(In::Finished(pb::RunnerFinished {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
            session_ref: String::new(),
            outcome: Some(pb::runner_finished::Outcome::Completed(
                pb::runner_finished::Completed {
                    result: "merged".into(),
                },
            )),
        }))
        .await;
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.result.as_deref(), Some("merged"));
    let texts: Vec<String> = events(&s, &w.id)
        .await
        .into_iter()
        .filter_map(|e| e.progress)
        .filter(|p| p.kind == pb::ProgressKind::Message as i32)
        .map(|p| p.text)
        .collect();
    assert_eq!(texts, ["hello runner", "main"]);

    // A runner without `input` may not ask.
    let mut plain = Runner::connect(&s, hello("plain", &["*"], 1)).await;
    drop(runner);
    let w2 = workers::spawn(&s, spawn_req("task", "no questions", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let b = plain.assignment().await;
    assert_eq!(b.worker_id, w2.id);
    plain
        .send(In::Accepted(pb::RunnerAccepted {
            worker_id: b.worker_id.clone(),
            lease_token: b.lease_token.clone(),
        }))
        .await;
    wait_state(&s, &w2.id, pb::WorkerState::Running).await;
    plain
        .send(In::InputRequired(pb::RunnerInputRequired {
            worker_id: b.worker_id.clone(),
            lease_token: b.lease_token.clone(),
            question: "?".into(),
        }))
        .await;
    let refused = plain.rejected().await;
    assert_eq!(refused.code, "CAPABILITY_MISSING");
    let err = send(&s, msg(&w2.id, "hi", false)).await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "MESSAGES_UNSUPPORTED",
        &format!(
            "worker {} runs on a runner that does not take messages",
            w2.id
        ),
    );
}

#[tokio::test]
async fn an_unanswered_question_fails_the_worker_after_the_input_timeout() {
    let scripted = Scripted::start(json!([
        {"tool_calls": [{"name": "ask_caller", "arguments": {"question": "anyone?"}}]},
    ]))
    .await;
    let s = server(&scripted, |c| {
        c.workers.input_timeout = Duration::from_millis(400);
    })
    .await;
    let asked = workers::spawn(
        &s,
        pb::SpawnWorkerRequest {
            interactive: true,
            ..spawn_req("helper", "ask", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert_eq!(asked.state, pb::WorkerState::InputRequired as i32);
    let failed = wait_state(&s, &asked.id, pb::WorkerState::Failed).await;
    assert_eq!(
        failed.error.as_deref(),
        Some("no answer to the worker's question within 400ms (workers.input_timeout)")
    );
    assert_eq!(failed.question, None);
}

/// docs §12.6: a runner with `resume` returns a `session_ref` with `finished`; a follow-up then
/// continues the worker on a runner that can resume, assigned with the session to reload.
#[tokio::test]
async fn a_runner_session_is_resumed_by_a_continuation() {
    use crate::runners::{Runner, fast, hello};
    use pb::connect_request::Msg as In;
    let s = start_with(fast).await;
    let mut runner = Runner::connect(
        &s,
        pb::RunnerHello {
            capabilities: vec!["messages".into(), "resume".into()],
            ..hello("resumer", &["*"], 2)
        },
    )
    .await;
    let finish = |a: &pb::RunnerAssignment, result: &str, session_ref: &str| {
        In::Finished(pb::RunnerFinished {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
            session_ref: session_ref.into(),
            outcome: Some(pb::runner_finished::Outcome::Completed(
                pb::runner_finished::Completed {
                    result: result.into(),
                },
            )),
        })
    };
    let accept = |a: &pb::RunnerAssignment| {
        In::Accepted(pb::RunnerAccepted {
            worker_id: a.worker_id.clone(),
            lease_token: a.lease_token.clone(),
        })
    };
    let w = workers::spawn(&s, spawn_req("task", "first task", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let a = runner.assignment().await;
    assert!(a.resume.is_none());
    runner.send(accept(&a)).await;
    runner.send(finish(&a, "first done", "session-7")).await;
    wait_state(&s, &w.id, pb::WorkerState::Completed).await;

    let client = s.client.clone();
    let id = w.id.clone();
    let sending =
        tokio::spawn(async move { send_with(client, msg(&id, "and now the docs", true)).await });
    let b = runner.assignment().await;
    let resume = b
        .resume
        .clone()
        .expect("the continuation carries the session");
    assert_eq!(
        (
            resume.previous_worker_id.as_str(),
            resume.session_ref.as_str()
        ),
        (w.id.as_str(), "session-7")
    );
    assert_eq!(b.spec.as_ref().unwrap().prompt, "and now the docs");
    runner.send(accept(&b)).await;
    runner.send(finish(&b, "docs done", "")).await;
    let sent = sending.await.unwrap().unwrap();
    assert!(sent.continued);
    let next = sent.worker.unwrap();
    assert_eq!(
        (next.id.as_str(), next.continues.as_str()),
        (b.worker_id.as_str(), w.id.as_str())
    );
    assert_eq!(next.result.as_deref(), Some("docs done"));
    assert_eq!(next.undelivered_messages, 0);

    // It ended without a session_ref: its runner cannot resume it.
    let err = send(&s, msg(&next.id, "more", false)).await.unwrap_err();
    assert_status(
        &err,
        Code::FailedPrecondition,
        "MESSAGES_UNSUPPORTED",
        &format!(
            "worker {} ended without a session_ref: its runner cannot resume it",
            next.id
        ),
    );
}

async fn send_with(
    mut client: pb::agent_registry_service_client::AgentRegistryServiceClient<
        tonic::transport::Channel,
    >,
    r: pb::SendWorkerMessageRequest,
) -> Result<pb::SendWorkerMessageResponse, tonic::Status> {
    client.send_worker_message(r).await.map(|r| r.into_inner())
}

/// docs §6.6, §12.4: one watch follows a worker through its question, the answer and its end;
/// the stream does not end while the worker waits.
#[tokio::test]
async fn a_watch_follows_a_worker_through_its_question_to_its_end() {
    let scripted = Scripted::start(json!([
        {"match": "\"content\":\"yes\"", "content": "thanks"},
        {"tool_calls": [{"name": "ask_caller", "arguments": {"question": "go on?"}}]},
    ]))
    .await;
    let s = server(&scripted, |_| {}).await;
    let w = workers::spawn(
        &s,
        pb::SpawnWorkerRequest {
            interactive: true,
            ..spawn_req("helper", "asks once", false)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    let mut stream = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: w.id.clone(),
            after_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner();
    wait_state(&s, &w.id, pb::WorkerState::InputRequired).await;
    // Waiting, and watched: the stream stays open.
    send(&s, msg(&w.id, "yes", false)).await.unwrap();
    let mut states = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("the watch ends")
        .unwrap()
    {
        if ev.progress.is_none() {
            states.push(ev.state);
        }
    }
    use pb::WorkerState as S;
    assert_eq!(states.last(), Some(&(S::Completed as i32)), "{states:?}");
    assert!(states.contains(&(S::InputRequired as i32)), "{states:?}");
    let after = states
        .iter()
        .position(|s| *s == S::InputRequired as i32)
        .unwrap();
    assert_eq!(
        states[after..],
        [
            S::InputRequired as i32,
            S::Running as i32,
            S::Completed as i32
        ]
    );
}

/// docs §12.1, §8.2: another principal's worker does not exist for the caller.
#[tokio::test]
async fn another_principals_worker_is_not_found() {
    let scripted = Scripted::start(json!([{"repeat": true, "content": "ok"}])).await;
    let s = server(&scripted, |c| {
        tokens_file(c, "alice-secret: alice\nbob-secret: bob\n");
    })
    .await;
    let w = s
        .client
        .clone()
        .spawn_worker(req(
            spawn_req("helper", "alice's work", true),
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let err = s
        .client
        .clone()
        .send_worker_message(req(
            msg(&w.id, "hi from bob", false),
            &[("authorization", "Bearer bob-secret")],
        ))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "WORKER_NOT_FOUND",
        &format!("worker {} not found", w.id),
    );
    let ok = s
        .client
        .clone()
        .send_worker_message(req(
            msg(&w.id, "more from alice", true),
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap()
        .into_inner();
    let next = ok.worker.unwrap();
    assert_eq!(
        (next.caller.as_str(), next.continues.as_str()),
        ("alice", w.id.as_str())
    );
}
