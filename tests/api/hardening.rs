//! The holes a hostile or new user found (lineage on every RPC, dedupe identity, shared waits,
//! broken persona schemas, tenancy, protocol edges), each pinned through gRPC.

use std::time::Duration;

use agentry::grpc::pb;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::{
    helpers::*,
    workers::{env_of, spawn, spawn_req, wait_state, with_runtime},
};

fn resolve(name: &str) -> pb::ResolveAgentRequest {
    pb::ResolveAgentRequest {
        name: name.into(),
        ..Default::default()
    }
}

fn catalog() -> pb::ListAgentsRequest {
    pb::ListAgentsRequest {
        view: pb::AgentView::Catalog as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn every_rpc_reads_the_worker_token() {
    let s = with_runtime("sleep 30", |_| {}).await;
    let mut c = s.client.clone();
    // `plan` (bundled) may spawn only `explore`.
    let plan = spawn(&s, spawn_req("plan", "plan it", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    wait_state(&s, &plan.id, pb::WorkerState::Running).await;
    let token = env_of(&s, &plan.id).await["AGENTRY_WORKER_TOKEN"].clone();
    let md = [("x-agentry-worker-token", token.as_str())];

    // ResolveAgent sees what SpawnWorker would do: depth 2, at the limit, no spawn rights.
    let eff = c
        .resolve_agent(req(resolve("explore"), &md))
        .await
        .unwrap()
        .into_inner()
        .effective
        .unwrap();
    assert_eq!((eff.depth, eff.at_max_depth), (2, true));
    assert_eq!(eff.spawns, "");
    let spawned = c
        .spawn_worker(req(spawn_req("explore", "look", false), &md))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!((spawned.depth, spawned.spawns.as_str()), (2, ""));
    // Its catalog lists only what it may spawn.
    let listed = c
        .list_agents(req(catalog(), &md))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(names(&listed.agents), ["explore"]);
    // A worker may not resolve its own agent as spawnable either: same lineage everywhere.
    let e = c
        .spawn_worker(req(spawn_req("task", "x", false), &md))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // A forged token is refused by every RPC, with auth off too.
    let forged = [("x-agentry-worker-token", "forged")];
    let unauthenticated = |r: Result<(), tonic::Status>, rpc: &str| {
        let e = r.expect_err(rpc);
        assert_eq!(e.code(), Code::Unauthenticated, "{rpc}: {e:?}");
        assert!(
            e.message().contains("x-agentry-worker-token"),
            "{rpc}: {e:?}"
        );
    };
    unauthenticated(
        c.list_agents(req(catalog(), &forged)).await.map(drop),
        "ListAgents",
    );
    unauthenticated(
        c.resolve_agent(req(resolve("explore"), &forged))
            .await
            .map(drop),
        "ResolveAgent",
    );
    unauthenticated(
        c.reload_agents(req(pb::ReloadAgentsRequest::default(), &forged))
            .await
            .map(drop),
        "ReloadAgents",
    );
    let by_id = |id: &str| pb::GetWorkerRequest {
        worker_id: id.into(),
    };
    unauthenticated(
        c.get_worker(req(by_id(&plan.id), &forged)).await.map(drop),
        "GetWorker",
    );
    unauthenticated(
        c.list_workers(req(pb::ListWorkersRequest::default(), &forged))
            .await
            .map(drop),
        "ListWorkers",
    );
    unauthenticated(
        c.watch_worker(req(
            pb::WatchWorkerRequest {
                worker_id: plan.id.clone(),
                after_sequence: 0,
            },
            &forged,
        ))
        .await
        .map(drop),
        "WatchWorker",
    );
    unauthenticated(
        c.stop_worker(req(
            pb::StopWorkerRequest {
                worker_id: plan.id.clone(),
                reason: String::new(),
            },
            &forged,
        ))
        .await
        .map(drop),
        "StopWorker",
    );
    unauthenticated(
        c.review(req(
            pb::ReviewRequest {
                tool: "read_file".into(),
                tool_class: pb::ToolClass::Read as i32,
                ..Default::default()
            },
            &forged,
        ))
        .await
        .map(drop),
        "Review",
    );
    unauthenticated(
        c.list_commands(req(pb::ListCommandsRequest::default(), &forged))
            .await
            .map(drop),
        "ListCommands",
    );
    unauthenticated(
        c.resolve_command(req(
            pb::ResolveCommandRequest {
                name: "init".into(),
                ..Default::default()
            },
            &forged,
        ))
        .await
        .map(drop),
        "ResolveCommand",
    );

    // Once the worker has ended, its token is unknown.
    c.stop_worker(pb::StopWorkerRequest {
        worker_id: plan.id.clone(),
        reason: String::new(),
    })
    .await
    .unwrap();
    unauthenticated(
        c.resolve_agent(req(resolve("explore"), &md))
            .await
            .map(drop),
        "ResolveAgent with an ended token",
    );
}

#[tokio::test]
async fn dedupe_and_request_ids_respect_mode_workspace_and_schema() {
    let s = with_runtime("sleep 30", |_| {}).await;
    let base = spawn(&s, spawn_req("task", "same brief", false))
        .await
        .unwrap();
    let first = base.worker.unwrap();
    let again = spawn(&s, spawn_req("task", "same  brief\n", false))
        .await
        .unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.worker.unwrap().id, first.id);

    let ws = s.ws("project").display().to_string();
    let variants = [
        pb::SpawnWorkerRequest {
            mode: pb::Mode::Plan as i32,
            ..spawn_req("task", "same brief", false)
        },
        pb::SpawnWorkerRequest {
            workspace: ws.clone(),
            ..spawn_req("task", "same brief", false)
        },
        pb::SpawnWorkerRequest {
            output_schema: Some(r#"{"type": "object"}"#.into()),
            ..spawn_req("task", "same brief", false)
        },
    ];
    for v in variants {
        let plan_mode = v.mode == pb::Mode::Plan as i32;
        let got = spawn(&s, v).await.unwrap();
        assert!(!got.deduplicated, "{got:?}");
        let w = got.worker.unwrap();
        assert_ne!(w.id, first.id);
        if plan_mode {
            // A plan-mode dispatch gets a plan-mode worker: plan tools, no spawning.
            assert_eq!(w.mode, pb::Mode::Plan as i32);
            assert_eq!(w.spawns, "");
        }
    }

    // A request_id names one dispatch: reusing it with another mode or schema is refused.
    let with_id = |mode: pb::Mode, schema: Option<&str>| pb::SpawnWorkerRequest {
        request_id: "req-1".into(),
        mode: mode as i32,
        output_schema: schema.map(Into::into),
        ..spawn_req("task", "idempotent brief", false)
    };
    let original = spawn(&s, with_id(pb::Mode::Default, None)).await.unwrap();
    let retry = spawn(&s, with_id(pb::Mode::Default, None)).await.unwrap();
    assert_eq!(
        retry.worker.unwrap().id,
        original.worker.as_ref().unwrap().id
    );
    for other in [
        with_id(pb::Mode::Plan, None),
        with_id(pb::Mode::Default, Some(r#"{"type": "object"}"#)),
    ] {
        let e = spawn(&s, other).await.unwrap_err();
        assert_bad_field(&e, "request_id");
    }
}

#[tokio::test]
async fn a_worker_shared_by_two_waiting_callers_lives_until_the_last_one_leaves() {
    // The runtime ends on its own after a short while unless it is killed first.
    let s = with_runtime("sleep 2; echo finished", |_| {}).await;
    let waiting = |prompt: &'static str| {
        let mut c = s.client.clone();
        tokio::spawn(async move {
            c.spawn_worker(spawn_req("task", prompt, true))
                .await
                .map(|r| r.into_inner())
        })
    };
    let first = waiting("shared brief");
    let id = eventually(
        "the shared worker to be listed",
        Duration::from_secs(10),
        || async {
            let listed = s
                .client
                .clone()
                .list_workers(pb::ListWorkersRequest::default())
                .await
                .unwrap()
                .into_inner()
                .workers;
            listed.first().map(|w| w.id.clone())
        },
    )
    .await;
    wait_state(&s, &id, pb::WorkerState::Running).await;
    let second = waiting("shared brief");
    // The second caller is attached before the first one leaves.
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.abort();
    let got = second.await.unwrap().unwrap();
    assert!(got.deduplicated);
    let w = got.worker.unwrap();
    assert_eq!(w.id, id);
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("finished\n"));

    // When every waiting caller goes away, the worker is killed.
    let a = waiting("another brief");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = waiting("another brief");
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.abort();
    b.abort();
    let listed = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers;
    let other = listed.iter().find(|w| w.id != id).unwrap().id.clone();
    let w = wait_state(&s, &other, pb::WorkerState::Killed).await;
    assert_eq!(
        w.error.as_deref(),
        Some("killed: the waiting caller went away")
    );
}

#[tokio::test]
async fn a_persona_with_a_broken_output_schema_is_skipped_with_a_diagnostic() {
    let s = start_with(|c| {
        let dir = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &dir,
            "typo.md",
            "name: typo\ndescription: d\noutput:\n  type: objekt",
            "p",
        );
        // `Use when: …` breaks YAML; the line fallback keeps `output` as an empty string.
        persona(
            &dir,
            "mangled.md",
            "name: mangled\ndescription: Use when: it breaks\noutput:\n  type: object",
            "p",
        );
        persona(
            &dir,
            "remote-ref.md",
            "name: remote-ref\ndescription: d\noutput:\n  $ref: https://example.com/s.json",
            "p",
        );
        simple(&dir, "fine.md", "fine", "d");
    })
    .await;
    let listed = list_all(&s, &s.home(), false).await;
    let found = names(&listed.agents);
    assert!(found.contains(&"fine".to_owned()));
    for bad in ["typo", "mangled", "remote-ref"] {
        assert!(!found.contains(&bad.to_owned()), "{bad} must be skipped");
        let d = listed
            .diagnostics
            .iter()
            .find(|d| d.path.ends_with(&format!("{bad}.md")) && d.code == "invalid_output_schema")
            .unwrap_or_else(|| {
                panic!(
                    "no invalid_output_schema for {bad}: {:?}",
                    listed.diagnostics
                )
            });
        assert_eq!(d.severity, pb::Severity::Error as i32);
        assert!(d.line.is_some_and(|l| l >= 2), "{d:?}");
    }
    let e = s
        .client
        .clone()
        .resolve_agent(resolve("typo"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

/// `request` carrying `authorization: Bearer <token>`.
fn bearer<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

#[tokio::test]
async fn a_principal_sees_and_stops_only_its_own_workers() {
    let s = with_runtime("sleep 30", |c| {
        tokens_file(c, "alice-secret: alice\nbob-secret: bob\nops-secret: ops\n");
        c.auth.operators = vec!["ops".into()];
    })
    .await;
    let mut c = s.client.clone();
    let alice = c
        .spawn_worker(bearer("alice-secret", spawn_req("lead", "alice's", false)))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let bob = c
        .spawn_worker(bearer("bob-secret", spawn_req("lead", "bob's", false)))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let not_found = |r: Result<(), tonic::Status>, rpc: &str| {
        let e = r.expect_err(rpc);
        assert_status(
            &e,
            Code::NotFound,
            "WORKER_NOT_FOUND",
            &format!("worker {} not found", alice.id),
        );
    };
    let get = |id: &str| pb::GetWorkerRequest {
        worker_id: id.into(),
    };
    not_found(
        c.get_worker(bearer("bob-secret", get(&alice.id)))
            .await
            .map(drop),
        "GetWorker",
    );
    not_found(
        c.watch_worker(bearer(
            "bob-secret",
            pb::WatchWorkerRequest {
                worker_id: alice.id.clone(),
                after_sequence: 0,
            },
        ))
        .await
        .map(drop),
        "WatchWorker",
    );
    not_found(
        c.watch_worker(bearer(
            "bob-secret",
            pb::WatchWorkerRequest {
                worker_id: alice.id.clone(),
                after_sequence: 1,
            },
        ))
        .await
        .map(drop),
        "WatchWorker after a sequence",
    );
    not_found(
        c.stop_worker(bearer(
            "bob-secret",
            pb::StopWorkerRequest {
                worker_id: alice.id.clone(),
                reason: "mine now".into(),
            },
        ))
        .await
        .map(drop),
        "StopWorker",
    );
    let list = |token: &str| {
        let mut c = s.client.clone();
        let token = token.to_owned();
        async move {
            let workers = c
                .list_workers(bearer(&token, pb::ListWorkersRequest::default()))
                .await
                .unwrap()
                .into_inner()
                .workers;
            workers.into_iter().map(|w| w.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(list("bob-secret").await, vec![bob.id.clone()]);
    assert_eq!(list("alice-secret").await, vec![alice.id.clone()]);
    let mut everything = list("ops-secret").await;
    everything.sort();
    let mut both = vec![alice.id.clone(), bob.id.clone()];
    both.sort();
    assert_eq!(everything, both);

    // Alice's worker is still running: bob's stop did nothing.
    let w = c
        .get_worker(bearer("alice-secret", get(&alice.id)))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Running as i32);
    // An operator sees and stops anyone's worker.
    let stopped = c
        .stop_worker(bearer(
            "ops-secret",
            pb::StopWorkerRequest {
                worker_id: alice.id.clone(),
                reason: "maintenance".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(stopped.state, pb::WorkerState::Killed as i32);
}

/// A ResolveAgentRequest whose `name` (field 1) carries raw bytes, to send invalid UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawResolve {
    #[prost(bytes = "vec", tag = "1")]
    name: Vec<u8>,
}

#[tokio::test]
async fn protocol_edges_fail_one_call_with_invalid_argument() {
    let s = with_runtime("sleep 1; echo done", |_| {}).await;
    let mut c = s.client.clone();

    // A 1 MB metadata value fails its own call; a sync spawn sharing the connection completes.
    let sync = {
        let mut c = s.client.clone();
        tokio::spawn(async move { c.spawn_worker(spawn_req("task", "in flight", true)).await })
    };
    eventually(
        "the sync spawn to be in flight",
        Duration::from_secs(10),
        || async {
            let listed = s
                .client
                .clone()
                .list_workers(pb::ListWorkersRequest::default())
                .await
                .unwrap()
                .into_inner()
                .workers;
            (!listed.is_empty()).then_some(())
        },
    )
    .await;
    let huge = "x".repeat(1_000_000);
    let e = c
        .resolve_agent(req(resolve("task"), &[("x-agentry-spawns", huge.as_str())]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("limit"), "{}", e.message());
    assert!(e.message().len() < 1024, "{}", e.message().len());
    let e = c
        .resolve_agent(req(resolve("task"), &[("x-custom-blob", huge.as_str())]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let done = sync.await.unwrap().unwrap().into_inner().worker.unwrap();
    assert_eq!(done.state, pb::WorkerState::Completed as i32, "{done:?}");

    // Invalid UTF-8 in a string field.
    let mut grpc = tonic::client::Grpc::new(
        tonic::transport::Channel::from_shared(format!("http://{}", s.addr))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    grpc.ready().await.unwrap();
    let e = grpc
        .unary::<RawResolve, pb::ResolveAgentResponse, _>(
            tonic::Request::new(RawResolve {
                name: vec![b't', 0xff, 0xfe],
            }),
            "/agentry.v1.AgentRegistryService/ResolveAgent"
                .parse()
                .unwrap(),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("UTF-8"), "{}", e.message());

    // A prompt over 4 MiB names the prompt bound, not the transport's.
    let e = spawn(&s, spawn_req("task", &"p".repeat(5 << 20), false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("limit"), "{}", e.message());

    // Over-long ids are bounded before they are quoted.
    let e = c
        .get_worker(pb::GetWorkerRequest {
            worker_id: "w".repeat(1_000_000),
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "worker_id");
    assert!(e.message().len() < 512, "{}", e.message().len());

    // Control characters in names, descriptions and request ids are refused, escaped.
    for name in ["ta\0sk", "ta\nsk", "ta\u{1b}[31msk"] {
        let e = c.resolve_agent(resolve(name)).await.unwrap_err();
        assert_bad_field(&e, "name");
        assert!(!e.message().contains('\u{1b}') && !e.message().contains('\n'));
        let e = spawn(&s, spawn_req(name, "x", false)).await.unwrap_err();
        assert_bad_field(&e, "agent");
    }
    let e = spawn(
        &s,
        pb::SpawnWorkerRequest {
            description: "two\nlines".into(),
            ..spawn_req("task", "x", false)
        },
    )
    .await
    .unwrap_err();
    assert_bad_field(&e, "description");
    let e = spawn(
        &s,
        pb::SpawnWorkerRequest {
            request_id: "id\0".into(),
            ..spawn_req("task", "x", false)
        },
    )
    .await
    .unwrap_err();
    assert_bad_field(&e, "request_id");

    // ResolveAgent refuses what SpawnWorker refuses.
    let remote = r#"{"$ref": "https://example.com/schema.json"}"#;
    let e = c
        .resolve_agent(pb::ResolveAgentRequest {
            output_schema: Some(remote.into()),
            ..resolve("task")
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "output_schema");
    let e = spawn(
        &s,
        pb::SpawnWorkerRequest {
            output_schema: Some(remote.into()),
            ..spawn_req("task", "x", false)
        },
    )
    .await
    .unwrap_err();
    assert_bad_field(&e, "output_schema");

    // A page token is bound to its page size.
    let first = c
        .list_agents(pb::ListAgentsRequest {
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = c
        .list_agents(pb::ListAgentsRequest {
            page_size: 3,
            page_token: first.next_page_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_token");
    for _ in 0..3 {
        spawn(
            &s,
            spawn_req("task", &format!("page {}", rand_suffix()), false),
        )
        .await
        .unwrap();
    }
    let first = c
        .list_workers(pb::ListWorkersRequest {
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!first.next_page_token.is_empty());
    let e = c
        .list_workers(pb::ListWorkersRequest {
            page_size: 3,
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_token");
    let mut watch = c
        .watch_worker(pb::WatchWorkerRequest {
            worker_id: done.id.clone(),
            after_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(watch.next().await.unwrap().is_ok());
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
