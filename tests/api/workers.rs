//! Worker RPCs through gRPC, with small shell scripts as the agent runtime.

use std::{path::PathBuf, time::Duration};

use agentry::grpc::pb;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::helpers::*;

/// A server whose runtime is `body`; `$OUT` is a directory the script may write to, and every
/// run records its stdin and AGENTRY_* environment there.
pub(crate) async fn with_runtime(
    body: &str,
    tweak: impl FnOnce(&mut agentry::config::Config),
) -> TestServer {
    let body = format!(
        "cat > \"$OUT/$AGENTRY_WORKER_ID.json\"\nenv | grep -E '^(AGENTRY_|TRACEPARENT)' > \"$OUT/$AGENTRY_WORKER_ID.env\"\n{body}"
    );
    start_with(|c| {
        let root = c.home.clone().unwrap().parent().unwrap().to_path_buf();
        let out = root.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let s = script(&root.join("bin"), "run-agent", &body);
        c.executor.command = vec![s.display().to_string()];
        c.executor
            .env
            .insert("OUT".into(), out.display().to_string());
        c.executor.kill_grace = Duration::from_millis(500);
        let agents = root.join("agents");
        persona(
            &agents,
            "lead.md",
            "name: lead\ndescription: leads\ntools: read, Bash(git diff:*)\nspawns: quick_task, lead",
            "LEAD",
        );
        c.agent_dirs = vec![agentry::config::AgentDir {
            path: agents,
            recursive: false,
        }];
        tweak(c);
    })
    .await
}

pub(crate) fn out(s: &TestServer) -> PathBuf {
    s.dir.path().join("out")
}

pub(crate) fn spawn_req(agent: &str, prompt: &str, wait: bool) -> pb::SpawnWorkerRequest {
    pb::SpawnWorkerRequest {
        agent: agent.into(),
        description: "test".into(),
        prompt: prompt.into(),
        wait,
        ..Default::default()
    }
}

pub(crate) async fn spawn(
    s: &TestServer,
    r: pb::SpawnWorkerRequest,
) -> Result<pb::SpawnWorkerResponse, tonic::Status> {
    s.client
        .clone()
        .spawn_worker(r)
        .await
        .map(|r| r.into_inner())
}

pub(crate) async fn wait_state(s: &TestServer, id: &str, state: pb::WorkerState) -> pb::Worker {
    eventually(
        &format!("worker {id} to be {state:?}"),
        Duration::from_secs(10),
        || async {
            let w = get(s, id).await;
            if w.state == state as i32 {
                Ok(w)
            } else {
                Err(format!("{w:?}"))
            }
        },
    )
    .await
}

/// The environment a worker process was given (waits for the script to record it).
pub(crate) async fn env_of(s: &TestServer, id: &str) -> std::collections::HashMap<String, String> {
    let path = out(s).join(format!("{id}.env"));
    let text = eventually(
        &format!("the environment of {id}"),
        Duration::from_secs(10),
        || async {
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            if text.contains("AGENTRY_WORKER_TOKEN=") {
                Ok(text)
            } else {
                Err(format!("{text:?}"))
            }
        },
    )
    .await;
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test]
async fn sync_spawn_completes_with_the_effective_agent() {
    let s = with_runtime("echo hello", |_| {}).await;
    let mut r = spawn_req("lead", "do  the\tthing", true);
    r.mode = pb::Mode::Plan as i32;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let w = s
        .client
        .clone()
        .spawn_worker(req(r, &[("traceparent", tp)]))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32);
    assert_eq!(w.result.as_deref(), Some("hello\n"));
    assert_eq!(w.exit_code, Some(0));
    assert_eq!((w.depth, w.parent_id.as_str()), (1, ""));
    assert!(w.create_time.is_some() && w.start_time.is_some() && w.close_time.is_some());
    assert_eq!(w.caller, "anonymous");
    // The process got the effective agent: plan mode applied for real.
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out(&s).join(format!("{}.json", w.id))).unwrap())
            .unwrap();
    assert_eq!(spec["prompt"], "do  the\tthing");
    assert_eq!(spec["depth"], 1);
    assert_eq!(spec["agent"]["name"], "lead");
    assert_eq!(spec["agent"]["spawns"], "");
    assert!(
        spec["agent"]["system_prompt"]
            .as_str()
            .unwrap()
            .starts_with("You are in plan mode.")
    );
    assert_eq!(spec["agent"]["tools"]["only"][0], "read");
    assert_eq!(spec["agent"]["tools"]["only"].as_array().unwrap().len(), 7);
    let env = env_of(&s, &w.id).await;
    assert_eq!(env["AGENTRY_WORKER_ID"], w.id);
    assert_eq!(env["AGENTRY_AGENT"], "lead");
    assert_eq!(env["AGENTRY_DEPTH"], "1");
    assert_eq!(env["AGENTRY_SPAWNS"], "");
    assert_eq!(env["AGENTRY_BLOCKED_AGENT"], "lead");
    assert_eq!(env["AGENTRY_ADDR"], s.addr.to_string());
    assert_eq!(env["AGENTRY_WORKER_TOKEN"].len(), 32);
    // Without an exporter the caller's trace context is handed on as is.
    assert_eq!(env["TRACEPARENT"], tp);
    assert_eq!(get(&s, &w.id).await, w);
}

#[tokio::test]
async fn failure_timeout_and_missing_binary_close_the_row() {
    let s = with_runtime("echo partial; echo 'it broke' >&2; exit 3", |_| {}).await;
    let w = spawn(&s, spawn_req("task", "x", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert_eq!(w.exit_code, Some(3));
    let err = w.error.unwrap();
    assert!(
        err.contains("exit status 3") && err.contains("it broke"),
        "{err}"
    );
    assert!(w.close_time.is_some());

    let s = with_runtime("sleep 30", |_| {}).await;
    let mut r = spawn_req("task", "slow", true);
    r.timeout = Some(prost_types::Duration {
        seconds: 0,
        nanos: 300_000_000,
    });
    let started = std::time::Instant::now();
    let w = spawn(&s, r).await.unwrap().worker.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert!(w.error.unwrap().starts_with("timed out after 300ms"));
    assert!(w.close_time.is_some());

    let s = start_with(|c| c.executor.command = vec!["/nonexistent/run-agent".into()]).await;
    let w = spawn(&s, spawn_req("task", "x", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert!(w.error.unwrap().contains("/nonexistent/run-agent"));
    assert!(w.close_time.is_some() && w.start_time.is_none());
}

#[tokio::test]
async fn background_stop_kills_the_process_and_is_idempotent() {
    let s = with_runtime(
        "echo $$ > \"$OUT/$AGENTRY_WORKER_ID.pid\"; sleep 30",
        |_| {},
    )
    .await;
    let w = spawn(&s, spawn_req("task", "long", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert!(
        w.state == pb::WorkerState::Pending as i32 || w.state == pb::WorkerState::Running as i32
    );
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let pid_file = out(&s).join(format!("{}.pid", w.id));
    let pid = pid_in(&pid_file).await;
    assert!(pid_alive(pid));
    let mut c = s.client.clone();
    let stop = |id: &str| pb::StopWorkerRequest {
        worker_id: id.into(),
        reason: "enough".into(),
    };
    let k = c
        .stop_worker(stop(&w.id))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(k.state, pb::WorkerState::Killed as i32);
    assert_eq!(k.error.as_deref(), Some("killed: enough"));
    assert!(!pid_alive(pid), "the process is really gone");
    let again = c
        .stop_worker(stop(&w.id))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(again, k);

    let s2 = with_runtime("echo ok", |_| {}).await;
    let done = spawn(&s2, spawn_req("task", "x", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    let e = s2
        .client
        .clone()
        .stop_worker(stop(&done.id))
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::FailedPrecondition,
        "NOT_CANCELABLE",
        &format!("worker {} is completed and cannot be stopped", done.id),
    );
    let e = c
        .stop_worker(stop("wkr_00000000000000000000000000000000"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_bad_field(&c.stop_worker(stop("nope")).await.unwrap_err(), "worker_id");
}

#[tokio::test]
async fn stop_while_pending_and_capacity_limits() {
    let s = with_runtime("sleep 30", |c| {
        c.limits.max_running = 1;
        c.limits.max_pending = 1;
    })
    .await;
    let a = spawn(&s, spawn_req("task", "a", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &a.id, pb::WorkerState::Running).await;
    let b = spawn(&s, spawn_req("task", "b", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(get(&s, &b.id).await.state, pb::WorkerState::Pending as i32);
    let e = spawn(&s, spawn_req("task", "c", false)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    // An identical dispatch is answered by the pending worker: it needs no place of its own.
    let again = spawn(&s, spawn_req("task", "b", false)).await.unwrap();
    assert!(again.deduplicated, "{again:?}");
    assert_eq!(again.worker.unwrap().id, b.id);
    let k = s
        .client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: b.id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(k.state, pb::WorkerState::Killed as i32);
    assert!(k.start_time.is_none() && k.close_time.is_some());
    // Room again.
    spawn(&s, spawn_req("task", "c", false)).await.unwrap();
}

#[tokio::test]
async fn sync_spawn_is_killed_when_the_caller_goes_away() {
    let s = with_runtime(
        "echo $$ > \"$OUT/$AGENTRY_WORKER_ID.pid\"; sleep 30",
        |_| {},
    )
    .await;
    let mut r = tonic::Request::new(spawn_req("task", "bound", true));
    r.set_timeout(Duration::from_millis(500));
    let e = s.client.clone().spawn_worker(r).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );
    let list = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let id = list.workers[0].id.clone();
    let w = wait_state(&s, &id, pb::WorkerState::Killed).await;
    let pid: i32 = std::fs::read_to_string(out(&s).join(format!("{id}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid));
    assert!(w.close_time.is_some());
}

#[tokio::test]
async fn watchers_see_the_same_ordered_events_and_can_resume() {
    let s = with_runtime("read go < \"$OUT/go\"; echo finished", |_| {}).await;
    let fifo = out(&s).join("go");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let w = spawn(&s, spawn_req("task", "watch me", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    // Attach every watcher in the same state (running, blocked on the FIFO), so all snapshots
    // are the same event.
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let mut watchers = Vec::new();
    // Each watcher says when its snapshot arrived: then it is attached.
    let (attached, mut all_attached) = tokio::sync::mpsc::channel::<()>(3);
    for _ in 0..3 {
        let mut c = s.client.clone();
        let (id, attached) = (w.id.clone(), attached.clone());
        watchers.push(tokio::spawn(async move {
            let mut st = c
                .watch_worker(pb::WatchWorkerRequest {
                    worker_id: id,
                    after_sequence: 0,
                })
                .await
                .unwrap()
                .into_inner();
            let mut seen = Vec::new();
            while let Some(ev) = st.next().await {
                let ev = ev.unwrap();
                seen.push((ev.sequence, ev.state));
                if seen.len() == 1 {
                    attached.send(()).await.unwrap();
                }
            }
            seen
        }));
    }
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(10), all_attached.recv())
            .await
            .expect("every watcher gets its snapshot")
            .unwrap();
    }
    std::fs::write(&fifo, "go\n").unwrap();
    let mut all = Vec::new();
    for h in watchers {
        all.push(h.await.unwrap());
    }
    for seen in &all {
        assert_eq!(seen, &all[0], "every watcher sees the same events");
        assert!(
            seen.windows(2).all(|p| p[0].0 < p[1].0),
            "strictly increasing: {seen:?}"
        );
        assert_eq!(
            seen.last().unwrap(),
            &(3, pb::WorkerState::Completed as i32)
        );
    }
    // Resume after the first event: running, then completed.
    let mut st = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: w.id.clone(),
            after_sequence: 1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut resumed = Vec::new();
    while let Some(ev) = st.next().await {
        let ev = ev.unwrap();
        resumed.push((ev.sequence, ev.state));
    }
    assert_eq!(
        resumed,
        [
            (2, pb::WorkerState::Running as i32),
            (3, pb::WorkerState::Completed as i32)
        ]
    );
    let e = s
        .client
        .clone()
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: "wkr_11111111111111111111111111111111".into(),
            after_sequence: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test]
async fn lineage_comes_from_the_token_not_from_claims() {
    let s = with_runtime("sleep 30", |_| {}).await;
    let parent = spawn(&s, spawn_req("lead", "parent", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &parent.id, pb::WorkerState::Running).await;
    let token = env_of(&s, &parent.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let as_parent = |r: pb::SpawnWorkerRequest, extra: &[(&'static str, &str)]| {
        let mut md = vec![("x-agentry-worker-token", token.as_str())];
        md.extend_from_slice(extra);
        req(r, &md)
    };
    let mut c = s.client.clone();
    // The child claims depth 0 and any policy; the service knows better.
    let child = c
        .spawn_worker(as_parent(
            spawn_req("quick_task", "child", false),
            &[("x-agentry-depth", "0"), ("x-agentry-spawns", "*")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(child.parent_id, parent.id);
    assert_eq!(child.depth, 2);
    assert_eq!(child.caller, "anonymous");
    let e = c
        .spawn_worker(as_parent(spawn_req("task", "x", false), &[]))
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::PermissionDenied,
        "SPAWN_NOT_ALLOWED",
        "Cannot spawn 'task'. Allowed: quick_task, lead",
    );
    let e = c
        .spawn_worker(as_parent(spawn_req("lead", "x", false), &[]))
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::PermissionDenied,
        "RECURSION_BLOCKED",
        "Cannot spawn lead agent from within itself (recursion prevention). Use a different agent type.",
    );
    // The child (depth 2) is at the limit: it may not spawn at all.
    wait_state(&s, &child.id, pb::WorkerState::Running).await;
    let child_token = env_of(&s, &child.id).await["AGENTRY_WORKER_TOKEN"].clone();
    assert_eq!(env_of(&s, &child.id).await["AGENTRY_SPAWNS"], "");
    let e = c
        .spawn_worker(req(
            spawn_req("explore", "x", false),
            &[("x-agentry-worker-token", child_token.as_str())],
        ))
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::PermissionDenied,
        "SPAWN_NOT_ALLOWED",
        "Cannot spawn 'explore'. Allowed: none (spawns disabled for this agent)",
    );
    // Declared depth at the limit for a top-level caller.
    let e = c
        .spawn_worker(req(
            spawn_req("task", "x", false),
            &[("x-agentry-depth", "2")],
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(e.get_details_error_info_reason(), "MAX_DEPTH");
    let e = c
        .spawn_worker(req(
            spawn_req("task", "x", false),
            &[("x-agentry-worker-token", "forged")],
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let e = spawn(&s, spawn_req("reviewer", "x", false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(e.get_details_error_info_reason(), "AGENT_RESERVED");
    // The audit tree.
    let kids = c
        .list_workers(pb::ListWorkersRequest {
            parent_id: parent.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].id, child.id);
    // Stopping the parent stops the child first.
    c.stop_worker(pb::StopWorkerRequest {
        worker_id: parent.id.clone(),
        reason: String::new(),
    })
    .await
    .unwrap();
    assert_eq!(
        get(&s, &child.id).await.state,
        pb::WorkerState::Killed as i32
    );
}

trait ReasonExt {
    fn get_details_error_info_reason(&self) -> String;
}

impl ReasonExt for tonic::Status {
    fn get_details_error_info_reason(&self) -> String {
        use tonic_types::StatusExt;
        self.get_details_error_info()
            .map(|i| i.reason)
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn dedupe_and_request_ids() {
    let s = with_runtime("echo result-$AGENTRY_WORKER_ID", |_| {}).await;
    let a = spawn(&s, spawn_req("task", "same  prompt\n", true))
        .await
        .unwrap();
    assert!(!a.deduplicated);
    let b = spawn(&s, spawn_req("task", " same prompt", true))
        .await
        .unwrap();
    assert!(
        b.deduplicated,
        "whitespace-equivalent prompt is a duplicate"
    );
    assert_eq!(b.worker.as_ref().unwrap().id, a.worker.as_ref().unwrap().id);
    assert!(
        b.hint.contains(&a.worker.as_ref().unwrap().id),
        "{}",
        b.hint
    );
    let other_agent = spawn(&s, spawn_req("quick_task", "same prompt", true))
        .await
        .unwrap();
    assert!(!other_agent.deduplicated);

    // Two concurrent identical background spawns start one worker.
    let (x, y) = tokio::join!(
        spawn(&s, spawn_req("task", "concurrent", false)),
        spawn(&s, spawn_req("task", "concurrent", false))
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.worker.unwrap().id, y.worker.unwrap().id);
    assert!(x.deduplicated ^ y.deduplicated);

    // request_id: same dispatch → same worker; different dispatch → INVALID_ARGUMENT.
    let mut r = spawn_req("task", "idempotent", true);
    r.request_id = "req-1".into();
    let first = spawn(&s, r.clone()).await.unwrap().worker.unwrap();
    let again = spawn(&s, r.clone()).await.unwrap().worker.unwrap();
    assert_eq!(first.id, again.id);
    r.prompt = "something else".into();
    assert_bad_field(&spawn(&s, r).await.unwrap_err(), "request_id");

    // Failed workers are not reused: the retry runs.
    let f = with_runtime("exit 1", |_| {}).await;
    let a = spawn(&f, spawn_req("task", "flaky", true)).await.unwrap();
    let b = spawn(&f, spawn_req("task", "flaky", true)).await.unwrap();
    assert!(!b.deduplicated);
    assert_ne!(a.worker.unwrap().id, b.worker.unwrap().id);
}

#[tokio::test]
async fn dedupe_is_scoped_by_parent() {
    let s = with_runtime("sleep 30", |_| {}).await;
    let parent = spawn(&s, spawn_req("lead", "p", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &parent.id, pb::WorkerState::Running).await;
    let token = env_of(&s, &parent.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let top = spawn(&s, spawn_req("quick_task", "shared", false))
        .await
        .unwrap();
    let child = s
        .client
        .clone()
        .spawn_worker(req(
            spawn_req("quick_task", "shared", false),
            &[("x-agentry-worker-token", token.as_str())],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!child.deduplicated);
    assert_ne!(top.worker.unwrap().id, child.worker.unwrap().id);
}

#[tokio::test]
async fn output_schema_success_and_failure() {
    let schema =
        r#"{"type":"object","required":["answer"],"properties":{"answer":{"type":"integer"}}}"#;
    let s = with_runtime("echo '{\"answer\": 42}'", |_| {}).await;
    let mut r = spawn_req("task", "q", true);
    r.output_schema = Some(schema.into());
    let w = spawn(&s, r).await.unwrap().worker.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32);
    assert_eq!(w.structured_result.as_deref(), Some(r#"{"answer":42}"#));
    let s = with_runtime("echo '{\"answer\": \"many\"}'", |_| {}).await;
    let mut r = spawn_req("task", "q", true);
    r.output_schema = Some(schema.into());
    let w = spawn(&s, r).await.unwrap().worker.unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert!(
        w.error.unwrap().contains("/answer"),
        "names the failing path"
    );
}

#[tokio::test]
async fn spawn_requests_are_validated() {
    let s = with_runtime("echo ok", |c| c.limits.max_prompt_bytes = 1000).await;
    let cases: Vec<(pb::SpawnWorkerRequest, &str)> = vec![
        (spawn_req("", "p", true), "agent"),
        (spawn_req("task", "  ", true), "prompt"),
        (spawn_req("task", &"x".repeat(1001), true), "prompt"),
        (
            pb::SpawnWorkerRequest {
                timeout: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..spawn_req("task", "p", true)
            },
            "timeout",
        ),
        (
            pb::SpawnWorkerRequest {
                timeout: Some(prost_types::Duration {
                    seconds: 10_000_000,
                    nanos: 0,
                }),
                ..spawn_req("task", "p", true)
            },
            "timeout",
        ),
        (
            pb::SpawnWorkerRequest {
                output_schema: Some("{".into()),
                ..spawn_req("task", "p", true)
            },
            "output_schema",
        ),
        (
            pb::SpawnWorkerRequest {
                output_schema: Some(r#"{"type": 12}"#.into()),
                ..spawn_req("task", "p", true)
            },
            "output_schema",
        ),
        (
            pb::SpawnWorkerRequest {
                workspace: "rel".into(),
                ..spawn_req("task", "p", true)
            },
            "workspace",
        ),
    ];
    for (r, field) in cases {
        let e = spawn(&s, r).await.unwrap_err();
        assert_bad_field(&e, field);
    }
    let e = spawn(&s, spawn_req("ghost", "p", true)).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(
        e.message()
            .starts_with("Unknown agent \"ghost\". Available: lead, explore")
    );
    assert_bad_field(
        &s.client
            .clone()
            .get_worker(pb::GetWorkerRequest {
                worker_id: "x".into(),
            })
            .await
            .unwrap_err(),
        "worker_id",
    );
    let e = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            page_size: -5,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_size");
}

#[tokio::test]
async fn list_workers_paginates_and_filters() {
    let s = with_runtime("echo ok", |_| {}).await;
    for i in 0..5 {
        spawn(&s, spawn_req("task", &format!("p{i}"), true))
            .await
            .unwrap();
    }
    let mut c = s.client.clone();
    let ids = walk_pages(|page_token| {
        let mut c = c.clone();
        async move {
            let r = c
                .list_workers(pb::ListWorkersRequest {
                    states: vec![pb::WorkerState::Completed as i32],
                    page_size: 2,
                    page_token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let ids = r.workers.iter().map(|w| w.id.clone()).collect();
            (ids, r.next_page_token)
        }
    })
    .await
    .concat();
    assert_eq!(ids.len(), 5);
    let mut dedup = ids.clone();
    dedup.dedup();
    assert_eq!(dedup, ids);
    let none = c
        .list_workers(pb::ListWorkersRequest {
            states: vec![pb::WorkerState::Running as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(none.workers.is_empty());
}

#[tokio::test]
async fn graceful_shutdown_records_running_workers_as_killed() {
    let s = with_runtime("sleep 30", |c| c.shutdown_grace = Duration::from_secs(5)).await;
    let w = spawn(&s, spawn_req("task", "x", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let started = std::time::Instant::now();
    let dir = s.stop().await.unwrap();
    let db = dir.path().join("state/agentry.db");
    assert!(started.elapsed() < Duration::from_secs(5));
    use agentry::workers::store::{SqliteStore, WorkerStore};
    let store = SqliteStore::open(&db).unwrap();
    let rec = store
        .get(&agentry::workers::model::WorkerId::parse(&w.id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.state.as_str(), "killed");
    assert!(rec.close_time_ms.is_some());
}

#[tokio::test]
async fn the_principal_is_recorded_scopes_dedupe_and_covers_worker_callbacks() {
    let s = with_runtime("sleep 30", |c| {
        tokens_file(c, "alice-secret: alice\nbob-secret: bob\n");
    })
    .await;
    let mut c = s.client.clone();
    let as_user = |token: &str, r: pb::SpawnWorkerRequest| {
        let mut r = tonic::Request::new(r);
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    };
    let a = c
        .spawn_worker(as_user("alice-secret", spawn_req("lead", "same", false)))
        .await
        .unwrap()
        .into_inner();
    let a_worker = a.worker.unwrap();
    assert_eq!(a_worker.caller, "alice");
    let b = c
        .spawn_worker(as_user("bob-secret", spawn_req("lead", "same", false)))
        .await
        .unwrap()
        .into_inner();
    assert!(!b.deduplicated, "different callers are not deduplicated");
    assert_eq!(b.worker.unwrap().caller, "bob");
    let again = c
        .spawn_worker(as_user("alice-secret", spawn_req("lead", "same", false)))
        .await
        .unwrap()
        .into_inner();
    assert!(again.deduplicated);
    assert_eq!(again.worker.unwrap().id, a_worker.id);
    // The worker process calls back with only its own token: it acts as alice.
    wait_state_auth(&s, &a_worker.id).await;
    let token = env_of(&s, &a_worker.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let child = c
        .spawn_worker(req(
            spawn_req("quick_task", "child", false),
            &[("x-agentry-worker-token", token.as_str())],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(
        (child.caller.as_str(), child.parent_id.as_str()),
        ("alice", a_worker.id.as_str())
    );
    let e = c
        .spawn_worker(req(
            spawn_req("quick_task", "x", false),
            &[("x-agentry-worker-token", "forged")],
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
}

/// `wait_state` with a bearer token (auth is on).
pub(crate) async fn wait_state_auth(s: &TestServer, id: &str) {
    eventually(
        &format!("worker {id} to be running"),
        Duration::from_secs(10),
        || async {
            let w = s
                .client
                .clone()
                .get_worker(req(
                    pb::GetWorkerRequest {
                        worker_id: id.into(),
                    },
                    &[("authorization", "Bearer alice-secret")],
                ))
                .await
                .unwrap()
                .into_inner()
                .worker
                .unwrap();
            if w.state == pb::WorkerState::Running as i32 {
                Ok(())
            } else {
                Err(format!("{w:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn instant_workers_always_end_terminal_with_a_running_event() {
    // A process that starts and exits within one poll must still be recorded running, then
    // completed: the start signal and the exit can arrive together.
    let s = start_with(|c| c.executor.command = vec!["/bin/true".into()]).await;
    for i in 0..100 {
        let w = spawn(&s, spawn_req("quick_task", &format!("fast {i}"), true))
            .await
            .unwrap()
            .worker
            .unwrap();
        assert_eq!(w.state, pb::WorkerState::Completed as i32, "run {i}: {w:?}");
        assert_eq!(w.sequence, 3, "pending, running, completed");
        assert!(w.start_time.is_some() && w.close_time.is_some());
    }
    let open = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            states: vec![
                pb::WorkerState::Pending as i32,
                pb::WorkerState::Running as i32,
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(open.is_empty(), "rows left open: {open:?}");
}

#[tokio::test]
async fn a_runtime_that_is_not_executable_fails_the_worker_with_the_reason() {
    let s = start_with(|c| {
        let root = c.home.clone().unwrap().parent().unwrap().to_path_buf();
        let not_exec = root.join("run-agent");
        std::fs::write(&not_exec, "#!/bin/sh\necho hi\n").unwrap();
        c.executor.command = vec![not_exec.display().to_string()];
    })
    .await;
    let w = spawn(&s, spawn_req("task", "x", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    let err = w.error.unwrap();
    assert!(
        err.contains("run-agent") && err.contains("ermission denied"),
        "{err}"
    );
    assert!(w.close_time.is_some() && w.start_time.is_none());
}

/// The README walkthrough's configuration as shipped: `examples/walkthrough.yaml` names the demo
/// runtime by a path relative to the service's directory (the repository root here, as in the
/// README), and a worker running in a workspace elsewhere still finds it.
#[tokio::test]
async fn the_walkthrough_config_runs_the_demo_agent_from_any_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = agentry::config::Config::load(
        Some(std::path::Path::new("examples/walkthrough.yaml")),
        std::iter::empty(),
    )
    .unwrap();
    assert_eq!(shipped.executor.command, ["examples/agents/echo-agent"]);
    let mut cfg = config_in(dir.path());
    cfg.executor = shipped.executor;
    cfg.executor.kill_grace = Duration::from_millis(500);
    let s = start_in(dir, cfg).await;
    let ws = s.ws("elsewhere");

    let mut r = spawn_req("quick_task", "say hi", true);
    r.workspace = ws.display().to_string();
    let w = spawn(&s, r).await.unwrap().worker.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(
        w.result.as_deref(),
        Some(format!("quick_task (worker {}) says: say hi\n", w.id).as_str())
    );

    // "sleep N" is the demo's long job: it runs until stopped.
    let mut r = spawn_req("task", "sleep 60", false);
    r.workspace = ws.display().to_string();
    let w = spawn(&s, r).await.unwrap().worker.unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let stopped = s
        .client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: w.id.clone(),
            reason: "demo over".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32, "{stopped:?}");
}
