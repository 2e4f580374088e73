//! Remote A2A agents as personas (docs/a2a.md §13.4): a `kind: remote` persona runs on the
//! `a2a` executor, against agentry's own A2A server (a second real server) and against the
//! official Python SDK's server.
//!
//! | rule | test |
//! |---|---|
//! | §13.4 result, stop forwarded as CancelTask | `a_remote_persona_runs_on_another_agentry` |
//! | §13.4 input-required answered, a continuation refines the remote task | `a_remote_question_is_answered_and_a_finished_task_refined` |
//! | §13.4 card and protocol failures name the URL; project remotes refused | `remote_failures_name_the_url` |
//! | §13.4 the official SDK's server, streaming and blocking | `a_remote_persona_runs_on_the_python_sdk_server` |

use std::time::Duration;

use agentry::grpc::pb;
use serde_json::json;
use tonic::Code;

use crate::{
    a2a::a2a_server,
    helpers::*,
    model::{Scripted, events, on_model},
    workers::{self, spawn_req, wait_state},
};

/// A server whose `~/.gemini/agents` holds `personas` (`(file, frontmatter)`).
async fn caller(personas: &[(&str, String)]) -> TestServer {
    let personas: Vec<(String, String)> = personas
        .iter()
        .map(|(f, p)| ((*f).to_owned(), p.clone()))
        .collect();
    start_with(move |c| {
        let dir = c.home.clone().unwrap().join(".gemini/agents");
        for (file, front) in &personas {
            persona(&dir, file, front, "Remote.");
        }
        c.executor.kill_grace = Duration::from_millis(300);
    })
    .await
}

fn remote(name: &str, card: &str) -> String {
    format!("name: {name}\ndescription: runs elsewhere\nkind: remote\nagent_card_url: {card}")
}

async fn spawn(s: &TestServer, r: pb::SpawnWorkerRequest) -> pb::Worker {
    workers::spawn(s, r).await.unwrap().worker.unwrap()
}

/// The workers of `s` (newest last).
async fn listed(s: &TestServer) -> Vec<pb::Worker> {
    s.client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers
}

#[tokio::test]
async fn a_remote_persona_runs_on_another_agentry() {
    let b = a2a_server(|_| {}).await;
    let card = format!("{}/a2a/echo/.well-known/agent-card.json", b.base);
    let a = caller(&[("remote-echo.md", remote("remote-echo", &card))]).await;

    let w = spawn(&a, spawn_req("remote-echo", "hello over A2A", true)).await;
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("echo: hello over A2A\n"));
    // It ran on B, as B's worker of `echo`.
    let on_b = listed(&b.s).await;
    assert_eq!(on_b.len(), 1);
    assert_eq!(on_b[0].description, "hello over A2A");
    assert_eq!(on_b[0].result.as_deref(), Some("echo: hello over A2A\n"));

    // A stop is forwarded as CancelTask: B's worker is killed too.
    let w = spawn(&a, spawn_req("remote-echo", "sleep on B", false)).await;
    wait_state(&a, &w.id, pb::WorkerState::Running).await;
    let b_worker = eventually("B's worker", Duration::from_secs(10), || async {
        listed(&b.s)
            .await
            .into_iter()
            .find(|w| w.description == "sleep on B")
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    a.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: "enough".into(),
        })
        .await
        .unwrap();
    wait_state(&a, &w.id, pb::WorkerState::Killed).await;
    let killed = wait_state(&b.s, &b_worker.id, pb::WorkerState::Killed).await;
    assert_eq!(
        killed.error.as_deref(),
        Some("killed: canceled through A2A")
    );
}

#[tokio::test]
async fn a_remote_question_is_answered_and_a_finished_task_refined() {
    let scripted = Scripted::start(json!([
        {"match": "\"content\":\"main\"", "tool_calls": [{"name": "submit_result", "arguments": {"result": "merged into main"}}]},
        {"match": "which branch", "tool_calls": [{"name": "ask_caller", "arguments": {"question": "Which branch?"}}]},
        {"match": "and tag it", "content": "tagged v1"},
    ]))
    .await;
    let b = a2a_server(|c| {
        on_model(c, &scripted);
        let dir = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &dir,
            "merger.md",
            "name: merger\ndescription: merges",
            "You merge.",
        );
    })
    .await;
    let card = format!("{}/a2a/merger/.well-known/agent-card.json", b.base);
    let a = caller(&[("remote-merger.md", remote("remote-merger", &card))]).await;

    let asked = spawn(
        &a,
        pb::SpawnWorkerRequest {
            interactive: true,
            ..spawn_req("remote-merger", "which branch", true)
        },
    )
    .await;
    assert_eq!(
        asked.state,
        pb::WorkerState::InputRequired as i32,
        "{asked:?}"
    );
    assert_eq!(asked.question.as_deref(), Some("Which branch?"));

    let answered = a
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: asked.id.clone(),
            text: "main".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!answered.continued);
    let done = answered.worker.unwrap();
    assert_eq!(done.id, asked.id);
    assert_eq!(done.result.as_deref(), Some("merged into main"), "{done:?}");
    // The answer went to the same remote task: B still has one worker.
    assert_eq!(listed(&b.s).await.len(), 1);

    // A follow-up to the finished worker continues it, and refines the remote task in its
    // context: B continues its own worker.
    let refined = a
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: asked.id.clone(),
            text: "and tag it".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(refined.continued);
    let next = refined.worker.unwrap();
    assert_eq!(next.result.as_deref(), Some("tagged v1"), "{next:?}");
    let on_b = listed(&b.s).await;
    assert_eq!(on_b.len(), 2, "{on_b:?}");
    assert_eq!(on_b[1].continues, on_b[0].id);
}

#[tokio::test]
async fn remote_failures_name_the_url() {
    let b = a2a_server(|_| {}).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = format!("http://127.0.0.1:{closed_port}/card.json");
    let missing = format!("{}/a2a/nobody/.well-known/agent-card.json", b.base);
    let rest_only =
        r#"{"name": "r", "url": "http://127.0.0.1:9/", "preferredTransport": "HTTP+JSON"}"#;
    let asks = format!("{}/a2a/echo/.well-known/agent-card.json", b.base);
    let a = caller(&[
        ("unreachable.md", remote("unreachable", &unreachable)),
        ("missing.md", remote("missing", &missing)),
        (
            "rest-only.md",
            format!(
                "name: rest-only\ndescription: d\nkind: remote\nagent_card_json: '{rest_only}'"
            ),
        ),
        (
            "no-card.md",
            "name: no-card\ndescription: d\nkind: remote".to_owned(),
        ),
        ("plain-echo.md", remote("plain-echo", &asks)),
    ])
    .await;

    let w = spawn(&a, spawn_req("unreachable", "x", true)).await;
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    let error = w.error.unwrap();
    assert!(
        error.starts_with(&format!("A2A agent card {unreachable}: ")),
        "{error}"
    );
    let w = spawn(&a, spawn_req("missing", "x", true)).await;
    assert_eq!(
        w.error.as_deref(),
        Some(format!("A2A agent card {missing}: HTTP 404 Not Found").as_str())
    );
    let w = spawn(&a, spawn_req("rest-only", "x", true)).await;
    assert_eq!(
        w.error.as_deref(),
        Some(
            "A2A agent card agent_card_json: offers no JSON-RPC interface over http(s); the a2a executor speaks A2A's JSON-RPC binding (1.0 or 0.3)"
        )
    );
    let refused = workers::spawn(&a, spawn_req("no-card", "x", true))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains(
            "agent no-card is kind: remote but names no agent_card_url or agent_card_json"
        ),
        "{refused:?}"
    );

    // A remote persona in a project directory would let the workspace choose the URL.
    let ws = a.dir.path().join("ws");
    persona(
        &ws.join(".gemini/agents"),
        "sneaky.md",
        &remote("sneaky", &asks),
        "x",
    );
    let refused = workers::spawn(
        &a,
        pb::SpawnWorkerRequest {
            workspace: ws.display().to_string(),
            ..spawn_req("sneaky", "x", true)
        },
    )
    .await
    .unwrap_err();
    assert_status(
        &refused,
        Code::FailedPrecondition,
        "REMOTE_AGENT",
        "Cannot spawn 'sneaky': it is a remote (A2A) agent defined in a project directory, and a project file may not make agentry call a URL it chooses. Define it in a user or configured directory, or set a2a.allow_project_remotes: true.",
    );
}

/// The Python SDK's server (`tests/support/a2a_sdk_server.py`): the process and its card URL.
async fn sdk_server(python: &str, args: &[&str]) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(python)
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/support/a2a_sdk_server.py"),
        )
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the SDK server starts")
        .unwrap()
        .expect("a listening line");
    let base = line.strip_prefix("listening ").unwrap().to_owned();
    (child, format!("{base}/.well-known/agent-card.json"))
}

#[tokio::test]
async fn a_remote_persona_runs_on_the_python_sdk_server() {
    let Some(python) = installed("AGENTRY_TEST_A2A_PYTHON", "the A2A SDKs") else {
        return;
    };
    let (mut sdk, card) = sdk_server(&python, &[]).await;
    let (_blocking, blocking_card) = sdk_server(&python, &["--no-streaming"]).await;
    let a = caller(&[
        ("painter.md", remote("painter", &card)),
        ("slow-painter.md", remote("slow-painter", &blocking_card)),
    ])
    .await;

    let w = spawn(&a, spawn_req("painter", "a house", true)).await;
    assert_eq!(w.result.as_deref(), Some("sdk: a house"), "{w:?}");
    let progress: Vec<String> = events(&a, &w.id)
        .await
        .into_iter()
        .filter_map(|e| e.progress.map(|p| p.text))
        .collect();
    assert!(progress.contains(&"painting".to_owned()), "{progress:?}");

    // Blocking (the card does not stream): the same answer.
    let w = spawn(&a, spawn_req("slow-painter", "a barn", true)).await;
    assert_eq!(w.result.as_deref(), Some("sdk: a barn"), "{w:?}");

    let asked = spawn(
        &a,
        pb::SpawnWorkerRequest {
            interactive: true,
            ..spawn_req("painter", "ask me", true)
        },
    )
    .await;
    assert_eq!(
        asked.question.as_deref(),
        Some("Which colour?"),
        "{asked:?}"
    );
    let done = a
        .client
        .clone()
        .send_worker_message(pb::SendWorkerMessageRequest {
            worker_id: asked.id.clone(),
            text: "red".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(done.result.as_deref(), Some("painted red"), "{done:?}");

    // Not interactive: a question fails the worker, saying so.
    let w = spawn(&a, spawn_req("painter", "ask anyway", true)).await;
    let error = w.error.unwrap();
    assert!(
        error.ends_with(
            "asked for input (\"Which colour?\"), but the worker was not spawned interactive"
        ),
        "{error}"
    );

    let w = spawn(&a, spawn_req("painter", "fail please", true)).await;
    let base = card.trim_end_matches(".well-known/agent-card.json");
    assert_eq!(
        w.error.as_deref(),
        Some(format!("the A2A agent at {base} failed the task: no paint left").as_str())
    );

    // A rejection is the worker's: failed, marked rejected.
    let w = spawn(&a, spawn_req("painter", "reject this", true)).await;
    assert_eq!(
        w.error.as_deref(),
        Some("rejected: not a painting job"),
        "{w:?}"
    );
    assert!(w.rejected);

    // A stop reaches the SDK's agent as a cancel.
    let w = spawn(&a, spawn_req("painter", "slow work", false)).await;
    wait_state(&a, &w.id, pb::WorkerState::Running).await;
    a.client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: "stop".into(),
        })
        .await
        .unwrap();
    wait_state(&a, &w.id, pb::WorkerState::Killed).await;
    use tokio::io::AsyncBufReadExt;
    let mut err = tokio::io::BufReader::new(sdk.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match err.next_line().await.unwrap() {
                Some(l) if l.starts_with("canceled ") => return l,
                Some(_) => {}
                None => panic!("the SDK server ended"),
            }
        }
    })
    .await
    .expect("the SDK agent was canceled");
    assert!(line.len() > "canceled ".len(), "{line}");
}
