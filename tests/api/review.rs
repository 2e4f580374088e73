//! The Review RPC through gRPC, with shell scripts as the reviewer runtime.

use std::time::{Duration, Instant};

use agentry::grpc::pb;
use tonic::Code;
use tonic_types::StatusExt;

use crate::{
    helpers::*,
    workers::{env_of, out, with_runtime},
};

fn proposal(class: pb::ToolClass) -> pb::ReviewRequest {
    pb::ReviewRequest {
        tool: "kubectl".into(),
        tool_class: class as i32,
        action: "rollout restart".into(),
        target: "deploy/api".into(),
        reason: "pick up the new config map".into(),
        blast_radius: "api pods, one at a time".into(),
        operator: "alice".into(),
        arguments_json: r#"{"namespace":"prod","args":["rollout","restart","deploy/api"]}"#.into(),
        workspace: String::new(),
    }
}

async fn review(s: &TestServer, r: pb::ReviewRequest) -> Result<pb::ReviewResponse, tonic::Status> {
    s.client.clone().review(r).await.map(|r| r.into_inner())
}

async fn all_workers(s: &TestServer) -> Vec<pb::Worker> {
    s.client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers
}

/// A server whose reviewer prints `reply` (written to a file, so any bytes work).
async fn replying(reply: &str) -> TestServer {
    let s = with_runtime("cat \"$OUT/reply.txt\"", |_| {}).await;
    std::fs::write(out(&s).join("reply.txt"), reply).unwrap();
    s
}

async fn decide(reply: &str) -> pb::ReviewResponse {
    let s = replying(reply).await;
    review(&s, proposal(pb::ToolClass::Write)).await.unwrap()
}

#[tokio::test]
async fn read_class_is_approved_without_a_worker() {
    let s = replying("Decision: reject").await;
    for class in [pb::ToolClass::Read, pb::ToolClass::Unspecified] {
        let mut r = proposal(class);
        r.tool.clear();
        let resp = review(&s, r).await.unwrap();
        assert_eq!(resp.decision, pb::Decision::Approve as i32);
        assert!(!resp.reviewed);
        assert!(resp.reviewer_worker_id.is_empty());
    }
    assert!(all_workers(&s).await.is_empty());
}

#[tokio::test]
async fn text_approval_with_reason_is_recorded_in_the_audit_row() {
    let reply = "I checked the rollout history.\n\n**Decision:** approve\nKnown procedure: documented restart.\n\nRollback: rollout undo.\n";
    let s = replying(reply).await;
    let resp = review(&s, proposal(pb::ToolClass::Destructive))
        .await
        .unwrap();
    assert_eq!(resp.decision, pb::Decision::Approve as i32, "{resp:?}");
    assert_eq!(
        resp.reason,
        "Known procedure: documented restart.\nRollback: rollout undo."
    );
    assert!(resp.reviewed);

    // The audit row: the reviewer ran (its schema not enforced), its output and decision kept.
    let w = get(&s, &resp.reviewer_worker_id).await;
    assert_eq!(w.agent, "reviewer");
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some(reply));
    let structured: serde_json::Value =
        serde_json::from_str(w.structured_result.as_deref().unwrap()).unwrap();
    assert_eq!(structured["decision"], "approve");
    assert_eq!(all_workers(&s).await.len(), 1);

    // The prompt is the proposal, every field in a stable layout.
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out(&s).join(format!("{}.json", resp.reviewer_worker_id))).unwrap(),
    )
    .unwrap();
    let prompt = spec["prompt"].as_str().unwrap();
    for line in [
        "# Proposed action",
        "Tool: kubectl",
        "Class: destructive",
        "Action: rollout restart",
        "Target: deploy/api",
        "Reason: pick up the new config map",
        "Blast radius: api pods, one at a time",
        "Operator: alice",
        "```json",
        "  \"namespace\": \"prod\",",
    ] {
        assert!(prompt.contains(line), "{line:?} missing from {prompt}");
    }
}

#[tokio::test]
async fn structured_json_rejection_and_every_review_runs() {
    let s = replying(r#"{"decision": "reject", "reason": "a deploy is in progress"}"#).await;
    let a = review(&s, proposal(pb::ToolClass::Write)).await.unwrap();
    let b = review(&s, proposal(pb::ToolClass::Write)).await.unwrap();
    for r in [&a, &b] {
        assert_eq!(r.decision, pb::Decision::Reject as i32);
        assert_eq!(r.reason, "a deploy is in progress");
        assert!(r.reviewed);
    }
    assert_ne!(a.reviewer_worker_id, b.reviewer_worker_id, "no dedupe");
    assert_eq!(all_workers(&s).await.len(), 2);
}

#[tokio::test]
async fn template_echo_is_not_a_decision() {
    let r = decide("Decision: approve | reject\n\nDecision: reject\nno rollback plan").await;
    assert_eq!(r.decision, pb::Decision::Reject as i32);
    assert_eq!(r.reason, "no rollback plan");
}

#[tokio::test]
async fn pending_is_skipped_and_the_search_continues() {
    let r = decide("Decision: pending\nstill looking\n## Decision: Approved\nall gates hold").await;
    assert_eq!(r.decision, pb::Decision::Approve as i32);
    assert_eq!(r.reason, "all gates hold");
}

#[tokio::test]
async fn no_decision_fails_closed() {
    let r = decide("Looks fine to me.").await;
    assert_eq!(r.decision, pb::Decision::Reject as i32);
    assert_eq!(r.reason, "reviewer gave no decision");
    assert!(r.reviewed);
    assert!(!r.reviewer_worker_id.is_empty());
}

#[tokio::test]
async fn long_non_ascii_reason_is_cut_at_1024_characters() {
    let r = decide(&format!("Decision: reject\n{}\n", "ü€".repeat(1500))).await;
    assert_eq!(r.decision, pb::Decision::Reject as i32);
    assert_eq!(r.reason.chars().count(), 1024);
    assert!(r.reason.starts_with("ü€ü€"));
}

#[tokio::test]
async fn reviewer_crash_fails_closed() {
    let s = with_runtime("echo 'Decision: approve'; echo boom >&2; exit 2", |_| {}).await;
    let r = review(&s, proposal(pb::ToolClass::Write)).await.unwrap();
    assert_eq!(r.decision, pb::Decision::Reject as i32);
    assert!(r.reason.starts_with("reviewer failed: "), "{}", r.reason);
    assert!(r.reason.contains("boom"), "{}", r.reason);
    assert!(r.reviewed);
    let w = get(&s, &r.reviewer_worker_id).await;
    assert_eq!(w.state, pb::WorkerState::Failed as i32);
    assert_eq!(w.exit_code, Some(2));
}

#[tokio::test]
async fn slow_reviewer_times_out_and_is_gone() {
    let s = with_runtime("echo $$ > \"$OUT/pid\"\nsleep 30", |c| {
        c.review.timeout = Duration::from_millis(500);
    })
    .await;
    let started = Instant::now();
    let r = review(&s, proposal(pb::ToolClass::Write)).await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2000), "took {took:?}");
    assert_eq!(r.decision, pb::Decision::Reject as i32);
    assert_eq!(r.reason, "review timed out after 500ms");
    assert!(r.reviewed);
    let pid: i32 = std::fs::read_to_string(out(&s).join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid), "reviewer process {pid} still running");
    let w = get(&s, &r.reviewer_worker_id).await;
    assert_eq!(w.state, pb::WorkerState::Killed as i32, "{w:?}");
    assert_eq!(
        w.error.as_deref(),
        Some("killed: review timed out after 500ms")
    );
}

#[tokio::test]
async fn unknown_reviewer_agent_fails_closed_without_a_worker() {
    let s = with_runtime("echo 'Decision: approve'", |c| {
        c.review.agent = "nobody".into();
    })
    .await;
    let r = review(&s, proposal(pb::ToolClass::Write)).await.unwrap();
    assert_eq!(r.decision, pb::Decision::Reject as i32);
    assert!(
        r.reason
            .starts_with("review could not run: Unknown agent \"nobody\""),
        "{}",
        r.reason
    );
    assert!(!r.reviewed);
    assert!(all_workers(&s).await.is_empty());
}

/// A runtime where `lead`/`boss` stay alive (so their token is valid) and the reviewer approves.
const CALLERS: &str = "case \"$AGENTRY_AGENT\" in\n  lead|boss) sleep 30 ;;\n  *) echo 'Decision: approve'; echo 'fine' ;;\nesac";

async fn running(s: &TestServer, agent: &str) -> (String, String) {
    let w = s
        .client
        .clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: agent.into(),
            description: "caller".into(),
            prompt: "work".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let token = env_of(s, &w.id).await["AGENTRY_WORKER_TOKEN"].clone();
    (w.id, token)
}

#[tokio::test]
async fn reviewer_runs_as_a_child_of_the_calling_worker() {
    let s = with_runtime(CALLERS, |c| {
        let dir = c.home.clone().unwrap().parent().unwrap().join("more");
        persona(
            &dir,
            "boss.md",
            "name: boss\ndescription: may spawn anything\nspawns: \"*\"",
            "BOSS",
        );
        c.agent_dirs.push(agentry::config::AgentDir {
            path: dir,
            recursive: false,
        });
    })
    .await;
    let (boss, token) = running(&s, "boss").await;
    let r = s
        .client
        .clone()
        .review(req(
            proposal(pb::ToolClass::Write),
            &[("x-agentry-worker-token", &token)],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.decision, pb::Decision::Approve as i32, "{r:?}");
    assert_eq!(r.reason, "fine");
    let rows = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest {
            parent_id: boss.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].id, r.reviewer_worker_id);
    assert_eq!(rows[0].agent, "reviewer");
    assert_eq!(rows[0].depth, 2);
    assert_eq!(rows[0].result.as_deref(), Some("Decision: approve\nfine\n"));

    // The gate, not the caller, runs the reviewer: a worker whose own spawn policy does not
    // list it still gets its write reviewed.
    let (lead, token) = running(&s, "lead").await;
    let r = s
        .client
        .clone()
        .review(req(
            proposal(pb::ToolClass::Write),
            &[("x-agentry-worker-token", &token)],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.decision, pb::Decision::Approve as i32, "{}", r.reason);
    assert!(r.reviewed);
    let row = s
        .client
        .clone()
        .get_worker(pb::GetWorkerRequest {
            worker_id: r.reviewer_worker_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!((row.parent_id.as_str(), row.depth), (lead.as_str(), 2));
}

#[tokio::test]
async fn spawning_the_reviewer_directly_is_refused() {
    let s = replying("Decision: approve").await;
    let e = s
        .client
        .clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "reviewer".into(),
            prompt: "approve everything".into(),
            wait: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(e.get_details_error_info().unwrap().reason, "AGENT_RESERVED");
}

#[tokio::test]
async fn invalid_proposals_name_the_field() {
    let s = replying("Decision: approve").await;
    type Edit = Box<dyn Fn(&mut pb::ReviewRequest)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "arguments_json",
            Box::new(|r| r.arguments_json = "{not json".into()),
        ),
        (
            "arguments_json",
            Box::new(|r| r.arguments_json = format!("\"{}\"", "a".repeat(70_000))),
        ),
        ("tool", Box::new(|r| r.tool.clear())),
        ("tool_class", Box::new(|r| r.tool_class = 9)),
        ("action", Box::new(|r| r.action = "x".repeat(5000))),
        ("operator", Box::new(|r| r.operator = "x".repeat(5000))),
        (
            "workspace",
            Box::new(|r| r.workspace = "relative/path".into()),
        ),
    ];
    for (field, edit) in cases {
        let mut r = proposal(pb::ToolClass::Destructive);
        edit(&mut r);
        let e = review(&s, r).await.unwrap_err();
        assert_bad_field(&e, field);
    }
    assert!(all_workers(&s).await.is_empty());
}

#[tokio::test]
async fn a_caller_that_goes_away_takes_its_review_with_it() {
    let s = with_runtime("echo $$ > \"$OUT/pid\"\nsleep 30", |_| {}).await;
    let mut r = tonic::Request::new(proposal(pb::ToolClass::Destructive));
    r.set_timeout(Duration::from_millis(400));
    let e = s.client.clone().review(r).await.unwrap_err();
    assert!(
        matches!(
            e.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{e:?}"
    );
    let row = eventually(
        "the reviewer to be stopped",
        Duration::from_secs(10),
        || async {
            let rows = all_workers(&s).await;
            match rows
                .iter()
                .find(|w| w.state == pb::WorkerState::Killed as i32)
            {
                Some(w) => Ok(w.clone()),
                None => Err(format!("{rows:?}")),
            }
        },
    )
    .await;
    assert_eq!(row.agent, "reviewer");
    let pid: i32 = std::fs::read_to_string(out(&s).join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid), "reviewer process {pid} still running");
}
