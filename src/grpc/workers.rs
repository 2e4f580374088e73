//! The worker RPCs (SpawnWorker, StopWorker, GetWorker, ListWorkers, WatchWorker): request
//! validation, identity from metadata, domain ⇄ proto, and the WatchWorker stream glue.

use std::{pin::Pin, sync::Arc, time::Duration};

use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_stream::{Stream, wrappers::ReceiverStream};
use tonic::{Code, Request, Status, metadata::MetadataMap};

use super::{
    convert, metadata,
    page::{self, PageToken},
    pb,
    registry::{check_workspace, parse_mode, parse_schema},
    request,
    status::{Violations, invalid, with_info},
};
use crate::{
    resolve::{Effective, Tools},
    workers::{
        model::{WorkerEvent, WorkerId, WorkerRecord, WorkerState},
        store::{ListQuery, ParentFilter},
        supervisor::{Identity, SpawnRequest, Supervisor, Visibility, WorkerError},
    },
};

/// Longest accepted description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest accepted request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 256;
/// Longest accepted per-request timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The slowest a watcher of another replica's worker re-reads the store between notices.
const REMOTE_WATCH_POLL: Duration = Duration::from_secs(1);

/// The stream type of WatchWorker.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchWorkerResponse, Status>> + Send>>;

impl From<WorkerError> for Status {
    fn from(e: WorkerError) -> Self {
        let msg = e.to_string();
        match e {
            WorkerError::Denied(d) => d.into(),
            WorkerError::Discovery(d) => d.into(),
            WorkerError::UnknownToken => with_info(
                Code::Unauthenticated,
                "UNKNOWN_WORKER_TOKEN",
                "x-agentry-worker-token is not the token of a running worker",
                &[],
            ),
            WorkerError::Capacity(_) => with_info(Code::ResourceExhausted, "CAPACITY", msg, &[]),
            WorkerError::RequestIdReused { .. } => invalid("request_id", msg),
            WorkerError::NotFound(id) => with_info(
                Code::NotFound,
                "WORKER_NOT_FOUND",
                msg,
                &[("worker_id", &id)],
            ),
            WorkerError::NotCancelable { id, state } => with_info(
                Code::FailedPrecondition,
                "NOT_CANCELABLE",
                msg,
                &[("worker_id", &id), ("state", state.as_str())],
            ),
            WorkerError::ShuttingDown => with_info(Code::Unavailable, "SHUTTING_DOWN", msg, &[]),
            WorkerError::NotRunning { id, state } => with_info(
                Code::FailedPrecondition,
                "NOT_RUNNING",
                msg,
                &[("worker_id", &id), ("state", state.as_str())],
            ),
            WorkerError::TooManyEvents { id, max } => with_info(
                Code::ResourceExhausted,
                "TOO_MANY_EVENTS",
                msg,
                &[
                    ("worker_id", &id),
                    ("max_events_per_worker", &max.to_string()),
                ],
            ),
            WorkerError::Store(e) => {
                tracing::error!(error = %e, "worker store failure");
                with_info(
                    Code::Internal,
                    "STORE",
                    format!("worker store failure: {e}"),
                    &[],
                )
            }
        }
    }
}

/// A protobuf timestamp of unix milliseconds.
pub fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// Proto state of a domain state.
pub fn state(s: WorkerState) -> i32 {
    (match s {
        WorkerState::Pending => pb::WorkerState::Pending,
        WorkerState::Running => pb::WorkerState::Running,
        WorkerState::Completed => pb::WorkerState::Completed,
        WorkerState::Failed => pb::WorkerState::Failed,
        WorkerState::Killed => pb::WorkerState::Killed,
    }) as i32
}

/// A worker as the API shows it.
pub fn worker(w: &WorkerRecord) -> pb::Worker {
    let eff: Option<Effective> = serde_json::from_value(w.effective.clone()).ok();
    let (tools, spawns, model, mode) = match &eff {
        Some(e) => (
            Some(pb::EffectiveTools {
                kind: Some(match &e.tools {
                    Tools::Only(v) => {
                        pb::effective_tools::Kind::Only(pb::StringList { values: v.clone() })
                    }
                    Tools::AllExcept(v) => {
                        pb::effective_tools::Kind::AllExcept(pb::StringList { values: v.clone() })
                    }
                }),
            }),
            e.spawns.clone(),
            e.model.clone(),
            convert::mode(e.mode),
        ),
        None => (None, String::new(), Vec::new(), 0),
    };
    pb::Worker {
        id: w.id.to_string(),
        agent: w.agent.clone(),
        description: w.description.clone(),
        parent_id: w
            .parent_id
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        depth: w.depth,
        state: state(w.state),
        create_time: Some(ts(w.create_time_ms)),
        start_time: w.start_time_ms.map(ts),
        close_time: w.close_time_ms.map(ts),
        result: w.result.clone(),
        structured_result: w.structured_result.clone(),
        error: w.error.clone(),
        exit_code: w.exit_code,
        tools,
        spawns,
        model,
        caller: w.caller_scope.clone(),
        workspace: w.workspace.clone().unwrap_or_default(),
        mode,
        sequence: w.sequence,
        last_activity_time: Some(ts(w.last_activity_ms)),
    }
}

fn event(ev: &WorkerEvent) -> pb::WatchWorkerResponse {
    pb::WatchWorkerResponse {
        sequence: ev.sequence,
        state: state(ev.state),
        worker: Some(worker(&ev.worker)),
        time: Some(ts(ev.time_ms)),
        progress: ev.progress.as_ref().map(super::progress::to_pb),
    }
}

/// Reads who is calling from metadata (and, with auth, the request extensions).
pub fn identity(md: &MetadataMap, principal: Option<String>, v: &mut Violations) -> Identity {
    let declared = metadata::declared(md, v);
    let text = |key: &str, v: &mut Violations| -> Option<String> {
        let val = md.get(key)?;
        match val.to_str() {
            Ok(s) if s.len() <= 512 => Some(s.to_owned()),
            Ok(_) => {
                v.add(key, "is longer than 512 bytes");
                None
            }
            Err(_) => {
                v.add(key, "must be printable ASCII");
                None
            }
        }
    };
    Identity {
        principal: principal.unwrap_or_else(|| "anonymous".to_owned()),
        worker_token: text("x-agentry-worker-token", v),
        declared,
        traceparent: text("traceparent", v),
    }
}

/// Validates a SpawnWorker request into the domain request.
pub fn spawn_request(
    r: pb::SpawnWorkerRequest,
    max_prompt: usize,
    v: &mut Violations,
) -> SpawnRequest {
    if r.agent.is_empty() {
        v.add("agent", "must not be empty");
    } else {
        request::check_line("agent", &r.agent, crate::persona::MAX_NAME_BYTES, v);
    }
    if r.prompt.trim().is_empty() {
        v.add("prompt", "must not be empty");
    } else if r.prompt.len() > max_prompt {
        v.add(
            "prompt",
            format!(
                "is {} bytes; the limit (limits.max_prompt_bytes) is {max_prompt}",
                r.prompt.len()
            ),
        );
    }
    request::check_line("description", &r.description, MAX_DESCRIPTION_BYTES, v);
    check_workspace(&r.workspace, v);
    let mode = parse_mode(r.mode, v);
    let output_schema = r
        .output_schema
        .as_deref()
        .and_then(|s| parse_schema("output_schema", s, v));
    request::check_line("request_id", &r.request_id, MAX_REQUEST_ID_BYTES, v);
    let timeout = match r.timeout {
        None => None,
        Some(d) if d.seconds < 0 || d.nanos < 0 => {
            v.add("timeout", "must not be negative");
            None
        }
        Some(d) if d.seconds == 0 && d.nanos == 0 => {
            v.add(
                "timeout",
                "must be positive (omit it for the configured default)",
            );
            None
        }
        Some(d) => {
            let dur = Duration::new(d.seconds as u64, d.nanos.clamp(0, 999_999_999) as u32);
            if dur > MAX_TIMEOUT {
                v.add(
                    "timeout",
                    format!(
                        "must be at most {}",
                        humantime::format_duration(MAX_TIMEOUT)
                    ),
                );
                None
            } else {
                Some(dur)
            }
        }
    };
    SpawnRequest {
        agent: r.agent,
        description: r.description,
        prompt: r.prompt,
        workspace: r.workspace,
        mode,
        output_schema,
        wait: r.wait,
        request_id: (!r.request_id.is_empty()).then_some(r.request_id),
        timeout,
    }
}

/// SpawnWorker.
pub async fn spawn(
    sup: &Arc<Supervisor>,
    max_prompt: usize,
    req: Request<pb::SpawnWorkerRequest>,
) -> Result<pb::SpawnWorkerResponse, Status> {
    let mut v = Violations::default();
    let principal = req
        .extensions()
        .get::<crate::auth::Principal>()
        .map(|p| p.0.clone());
    let id = identity(req.metadata(), principal, &mut v);
    let r = spawn_request(req.into_inner(), max_prompt, &mut v);
    v.check()?;
    let s = sup.spawn(&id, r).await?;
    Ok(pb::SpawnWorkerResponse {
        worker: Some(worker(&s.worker)),
        deduplicated: s.deduplicated,
        hint: s.hint,
    })
}

/// StopWorker.
pub async fn stop(
    sup: &Supervisor,
    vis: &Visibility,
    r: pb::StopWorkerRequest,
) -> Result<pb::StopWorkerResponse, Status> {
    let id = request::worker_id("worker_id", &r.worker_id)?;
    if r.reason.len() > MAX_DESCRIPTION_BYTES {
        return Err(invalid(
            "reason",
            format!("is longer than {MAX_DESCRIPTION_BYTES} bytes"),
        ));
    }
    if r.reason.contains('\0') {
        return Err(invalid("reason", "must not contain NUL"));
    }
    let w = sup.stop(&id, &r.reason, vis).await?;
    Ok(pb::StopWorkerResponse {
        worker: Some(worker(&w)),
    })
}

/// GetWorker.
pub async fn get(
    sup: &Supervisor,
    vis: &Visibility,
    r: pb::GetWorkerRequest,
) -> Result<pb::GetWorkerResponse, Status> {
    let id = request::worker_id("worker_id", &r.worker_id)?;
    Ok(pb::GetWorkerResponse {
        worker: Some(worker(&sup.get(&id, vis).await?)),
    })
}

/// ListWorkers.
pub async fn list(
    sup: &Supervisor,
    vis: &Visibility,
    r: pb::ListWorkersRequest,
) -> Result<pb::ListWorkersResponse, Status> {
    let mut v = Violations::default();
    let parent = if r.parent_id.is_empty() {
        ParentFilter::Any
    } else {
        match WorkerId::parse(&r.parent_id) {
            Ok(id) => ParentFilter::Worker(id),
            Err(_) => {
                v.add(
                    "parent_id",
                    format!("{} is not a worker id", request::quote(&r.parent_id)),
                );
                ParentFilter::Any
            }
        }
    };
    let mut states = Vec::new();
    for s in &r.states {
        match pb::WorkerState::try_from(*s) {
            Ok(pb::WorkerState::Pending) => states.push(WorkerState::Pending),
            Ok(pb::WorkerState::Running) => states.push(WorkerState::Running),
            Ok(pb::WorkerState::Completed) => states.push(WorkerState::Completed),
            Ok(pb::WorkerState::Failed) => states.push(WorkerState::Failed),
            Ok(pb::WorkerState::Killed) => states.push(WorkerState::Killed),
            _ => v.add("states", format!("unknown or unspecified state {s}")),
        }
    }
    let limit = page::page_size(r.page_size, &mut v);
    // A token is bound to the filters, the page size and the caller's scope.
    let query = page::query_hash(&[
        &r.parent_id,
        &format!("{:?}", r.states),
        &limit.to_string(),
        vis.scope().unwrap_or("*"),
    ]);
    let after = page::page_token(&r.page_token, &query, &mut v).and_then(|t| {
        let (ms, id) = t.at.split_once(':')?;
        Some((ms.parse::<i64>().ok()?, WorkerId::parse(id).ok()?))
    });
    v.check()?;
    let mut rows = sup
        .list(&ListQuery {
            parent,
            states,
            caller_scope: vis.scope().map(str::to_owned),
            after,
            limit: limit + 1,
        })
        .await?;
    let next_page_token = if rows.len() > limit {
        rows.truncate(limit);
        let last = rows.last().expect("non-empty page");
        PageToken {
            offset: 0,
            at: format!("{}:{}", last.create_time_ms, last.id),
            query,
        }
        .encode()
    } else {
        String::new()
    };
    Ok(pb::ListWorkersResponse {
        workers: rows.iter().map(worker).collect(),
        next_page_token,
    })
}

/// WatchWorker: a snapshot (or the stored events after `after_sequence`), then every later
/// transition and progress event in sequence order; ends after the terminal one, on shutdown, or when the client goes away.
pub async fn watch(
    sup: Arc<Supervisor>,
    vis: &Visibility,
    r: pb::WatchWorkerRequest,
) -> Result<WatchStream, Status> {
    let id = request::worker_id("worker_id", &r.worker_id)?;
    // Another principal's worker does not exist for this caller.
    sup.get(&id, vis).await?;
    // Subscribe before reading, so no transition falls between the two.
    let live = sup.subscribe(&id);
    let first: Vec<WorkerEvent> = if r.after_sequence == 0 {
        let w = sup.get(&id, vis).await?;
        let time = w
            .close_time_ms
            .or(w.start_time_ms)
            .unwrap_or(w.create_time_ms);
        vec![WorkerEvent {
            worker_id: w.id.clone(),
            sequence: w.sequence,
            state: w.state,
            time_ms: time,
            worker: w,
            progress: None,
        }]
    } else {
        sup.events_after(&id, r.after_sequence).await?
    };
    let (tx, rx) = mpsc::channel(16);
    let shutdown = sup.shutdown_token();
    tokio::spawn(async move {
        let mut last = r.after_sequence;
        for ev in first {
            last = ev.sequence;
            let terminal = ev.state.is_terminal();
            if tx.send(Ok(event(&ev))).await.is_err() || terminal {
                return;
            }
        }
        let Some(mut live) = live else {
            // Not live here: run by another replica sharing the store (or it ended between the
            // two reads). Follow its stored events, woken by the store's notices and re-read at
            // least every second (docs §9: notices are hints).
            let mut notices = sup.notices();
            loop {
                tokio::select! {
                    () = sup.store_changed(&id, &mut notices, REMOTE_WATCH_POLL) => {}
                    () = shutdown.cancelled() => return,
                    () = tx.closed() => return,
                }
                let batch = match sup.events_after(&id, last).await {
                    Ok(evs) => evs,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                for ev in batch {
                    last = ev.sequence;
                    let terminal = ev.state.is_terminal();
                    if tx.send(Ok(event(&ev))).await.is_err() || terminal {
                        return;
                    }
                }
            }
        };
        loop {
            let next = tokio::select! {
                ev = live.recv() => ev,
                () = shutdown.cancelled() => return,
                () = tx.closed() => return,
            };
            let (batch, closed) = match next {
                Ok(ev) if ev.sequence <= last => continue,
                Ok(ev) if ev.sequence == last + 1 => (vec![ev], false),
                // A gap: two writers published out of commit order (a report racing a
                // transition); the store has them in order.
                Ok(_) => match sup.events_after(&id, last).await {
                    Ok(evs) => (evs, false),
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                },
                // Fell behind, or the worker finished: the store has every event.
                Err(e) => match sup.events_after(&id, last).await {
                    Ok(evs) => (evs, e == RecvError::Closed),
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                },
            };
            for ev in batch {
                last = ev.sequence;
                let terminal = ev.state.is_terminal();
                if tx.send(Ok(event(&ev))).await.is_err() || terminal {
                    return;
                }
            }
            if closed {
                return;
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}
