//! ReportProgress and progress events in WatchWorker (docs/workers.md §6.9), with an exec
//! runtime that waits for a go file so the test can report while it runs.

use agentry::grpc::pb;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::helpers::*;
use crate::workers::{env_of, out, spawn, spawn_req, wait_state, with_runtime};

/// Waits for `$OUT/go`, then prints its result.
const WAIT_FOR_GO: &str = "while [ ! -e \"$OUT/go\" ]; do sleep 0.02; done; echo finished";

fn report(kind: pb::ProgressKind, text: &str, data: &str) -> pb::ReportProgressRequest {
    pb::ReportProgressRequest {
        kind: kind as i32,
        text: text.into(),
        data_json: data.into(),
    }
}

async fn send(
    s: &TestServer,
    token: Option<&str>,
    r: pb::ReportProgressRequest,
) -> Result<u64, tonic::Status> {
    let md: Vec<(&'static str, &str)> = token
        .map(|t| vec![("x-agentry-worker-token", t)])
        .unwrap_or_default();
    s.client
        .clone()
        .report_progress(req(r, &md))
        .await
        .map(|r| r.into_inner().sequence)
}

/// (sequence, state, progress text) of every event of a watch, to the end.
async fn watch_all(s: &TestServer, id: &str, after: u64) -> Vec<(u64, i32, Option<String>)> {
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
    while let Some(ev) = st.next().await {
        let ev = ev.unwrap();
        assert_eq!(ev.worker.as_ref().unwrap().sequence, ev.sequence, "{ev:?}");
        seen.push((ev.sequence, ev.state, ev.progress.map(|p| p.text)));
    }
    seen
}

#[tokio::test]
async fn progress_is_watched_between_transitions_and_resumed_across() {
    let s = with_runtime(WAIT_FOR_GO, |_| {}).await;
    let w = spawn(&s, spawn_req("task", "report while you work", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let running = wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let token = env_of(&s, &w.id).await["AGENTRY_WORKER_TOKEN"].clone();
    // A watcher from the start, concurrently with the reports; it has its snapshot before the
    // first report is sent.
    let (subscribed, ready) = tokio::sync::oneshot::channel::<()>();
    let live = {
        let s2 = s.client.clone();
        let id = w.id.clone();
        tokio::spawn(async move {
            let mut subscribed = Some(subscribed);
            let mut st = { s2 }
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
                seen.push((
                    ev.sequence,
                    ev.state,
                    ev.progress.map(|p| (p.kind, p.text, p.data_json)),
                ));
                if let Some(tx) = subscribed.take() {
                    let _ = tx.send(());
                }
            }
            seen
        })
    };
    ready.await.unwrap();
    let seq = send(
        &s,
        Some(&token),
        report(
            pb::ProgressKind::ToolCall,
            "grep config",
            r#"{"tool":"grep"}"#,
        ),
    )
    .await
    .unwrap();
    assert_eq!(seq, 3, "pending 1, running 2, then the report");
    assert_eq!(
        send(
            &s,
            Some(&token),
            report(pb::ProgressKind::Text, "thinking", "")
        )
        .await
        .unwrap(),
        4
    );
    let mid = get(&s, &w.id).await;
    assert_eq!(mid.state, pb::WorkerState::Running as i32);
    assert_eq!(mid.sequence, 4);
    let (before, after) = (
        running.last_activity_time.unwrap(),
        mid.last_activity_time.unwrap(),
    );
    assert!(
        (after.seconds, after.nanos) >= (before.seconds, before.nanos),
        "{before:?} → {after:?}"
    );
    std::fs::write(out(&s).join("go"), "").unwrap();
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.sequence, 5);
    let seen = live.await.unwrap();
    let tail: Vec<_> = seen.iter().filter(|e| e.0 >= 3).cloned().collect();
    assert_eq!(
        tail,
        [
            (
                3,
                pb::WorkerState::Running as i32,
                Some((
                    pb::ProgressKind::ToolCall as i32,
                    "grep config".to_owned(),
                    r#"{"tool":"grep"}"#.to_owned()
                ))
            ),
            (
                4,
                pb::WorkerState::Running as i32,
                Some((
                    pb::ProgressKind::Text as i32,
                    "thinking".to_owned(),
                    String::new()
                ))
            ),
            (5, pb::WorkerState::Completed as i32, None),
        ]
    );
    // Resuming after the first report replays the second one, then the end.
    assert_eq!(
        watch_all(&s, &w.id, 3).await,
        [
            (
                4,
                pb::WorkerState::Running as i32,
                Some("thinking".to_owned())
            ),
            (5, pb::WorkerState::Completed as i32, None),
        ]
    );
    // The token ended with the worker.
    let err = send(&s, Some(&token), report(pb::ProgressKind::Text, "late", ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
}

#[tokio::test]
async fn bad_reports_are_refused_precisely_and_the_log_is_bounded() {
    let s = with_runtime(WAIT_FOR_GO, |c| c.limits.max_events_per_worker = 5).await;
    let w = spawn(&s, spawn_req("task", "bounded", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Running).await;
    let token = env_of(&s, &w.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let ok = report(pb::ProgressKind::Status, "50%", "");

    let err = send(&s, None, ok.clone()).await.unwrap_err();
    assert_status(
        &err,
        Code::Unauthenticated,
        "WORKER_TOKEN_REQUIRED",
        "ReportProgress needs the calling worker's own x-agentry-worker-token",
    );
    let err = send(&s, Some("0123456789abcdef0123456789abcdef"), ok.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    let err = send(
        &s,
        Some(&token),
        report(pb::ProgressKind::Unspecified, "x", ""),
    )
    .await
    .unwrap_err();
    assert_bad_field(&err, "kind");
    let big = "x".repeat(64 * 1024 + 1);
    let err = send(&s, Some(&token), report(pb::ProgressKind::Text, &big, ""))
        .await
        .unwrap_err();
    assert_bad_field(&err, "text");
    let big_json = format!("\"{}\"", "x".repeat(64 * 1024));
    let err = send(
        &s,
        Some(&token),
        report(pb::ProgressKind::Text, "t", &big_json),
    )
    .await
    .unwrap_err();
    assert_bad_field(&err, "data_json");
    let err = send(
        &s,
        Some(&token),
        report(pb::ProgressKind::Text, "t", "{nope"),
    )
    .await
    .unwrap_err();
    assert_bad_field(&err, "data_json");
    // Exactly at the bounds is fine.
    let edge = "y".repeat(64 * 1024);
    assert_eq!(
        send(
            &s,
            Some(&token),
            report(pb::ProgressKind::Text, &edge, "[1,2]")
        )
        .await
        .unwrap(),
        3
    );
    assert_eq!(
        get(&s, &w.id).await.sequence,
        3,
        "refused reports wrote nothing"
    );
    assert_eq!(send(&s, Some(&token), ok.clone()).await.unwrap(), 4);
    assert_eq!(send(&s, Some(&token), ok.clone()).await.unwrap(), 5);
    let err = send(&s, Some(&token), ok.clone()).await.unwrap_err();
    assert_status(
        &err,
        Code::ResourceExhausted,
        "TOO_MANY_EVENTS",
        &format!(
            "worker {} already has 5 events, the limit (limits.max_events_per_worker)",
            w.id
        ),
    );
    // Transitions are never refused: the worker still ends, recorded.
    std::fs::write(out(&s).join("go"), "").unwrap();
    let done = wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(done.sequence, 6);
}

/// A start held for its end (docs/workers.md §6.2, "A start written with its end"), with a
/// hold far longer than any run here: a worker that ends is written once with both events and
/// is not kept waiting for the hold; a report of a worker whose start is held has the start
/// written first; a stop of one ends it as a worker that ran.
#[tokio::test]
async fn a_held_start_is_written_with_its_end_or_before_a_report() {
    let quick_or_wait = format!(
        "if grep -q quick \"$OUT/$AGENTRY_WORKER_ID.json\"; then echo quick; exit 0; fi\n{WAIT_FOR_GO}"
    );
    let s = with_runtime(&quick_or_wait, |c| {
        c.executor.start_hold = std::time::Duration::from_secs(30);
    })
    .await;

    // Ends at once: one write, both events, and the call is not held for the hold.
    let began = std::time::Instant::now();
    let quick = spawn(&s, spawn_req("task", "quick", true))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert!(
        began.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(quick.state, pb::WorkerState::Completed as i32, "{quick:?}");
    assert_eq!(quick.sequence, 3, "{quick:?}");
    let (start, close) = (quick.start_time.unwrap(), quick.close_time.unwrap());
    assert!(
        (start.seconds, start.nanos) <= (close.seconds, close.nanos),
        "{start:?} → {close:?}"
    );
    // Replayed after the creation event (a watch from 0 of a finished worker is its snapshot).
    assert_eq!(
        watch_all(&s, &quick.id, 1).await,
        [
            (2, pb::WorkerState::Running as i32, None),
            (3, pb::WorkerState::Completed as i32, None),
        ]
    );

    // Runs: its process exists while its start is held, so it still shows pending; its report
    // has the start written first, then is taken.
    let w = spawn(&s, spawn_req("task", "report early", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let token = env_of(&s, &w.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let held = get(&s, &w.id).await;
    assert_eq!(held.state, pb::WorkerState::Pending as i32, "{held:?}");
    let seq = send(&s, Some(&token), report(pb::ProgressKind::Status, "up", ""))
        .await
        .unwrap();
    assert_eq!(
        seq, 3,
        "pending 1, the start written for the report 2, the report 3"
    );
    let now = get(&s, &w.id).await;
    assert_eq!(
        (now.state, now.sequence),
        (pb::WorkerState::Running as i32, 3),
        "{now:?}"
    );
    assert!(now.start_time.is_some(), "{now:?}");
    std::fs::write(out(&s).join("go"), "").unwrap();
    wait_state(&s, &w.id, pb::WorkerState::Completed).await;
    assert_eq!(
        watch_all(&s, &w.id, 1).await,
        [
            (2, pb::WorkerState::Running as i32, None),
            (3, pb::WorkerState::Running as i32, Some("up".to_owned())),
            (4, pb::WorkerState::Completed as i32, None),
        ]
    );
    std::fs::remove_file(out(&s).join("go")).unwrap();

    // Stopped while its start is held: it ran, so it ends killed from running, with its start.
    let stopped = spawn(&s, spawn_req("task", "stop me", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    env_of(&s, &stopped.id).await;
    let k = s
        .client
        .clone()
        .stop_worker(pb::StopWorkerRequest {
            worker_id: stopped.id.clone(),
            reason: "enough".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(k.state, pb::WorkerState::Killed as i32, "{k:?}");
    assert!(k.start_time.is_some() && k.close_time.is_some(), "{k:?}");
    assert_eq!(
        watch_all(&s, &stopped.id, 1).await,
        [
            (2, pb::WorkerState::Running as i32, None),
            (3, pb::WorkerState::Killed as i32, None),
        ]
    );
}
