//! The console's server-sent event streams (docs §14.3): the tree, fed by every event the
//! service commits (this replica's, and the shared store's notices of the others'); a worker's
//! watch, which is `WatchWorker` with `Last-Event-ID` as its `after_sequence`; and the catalog,
//! sent again whenever the registry's watcher sees a change. Each stream is a task writing into a
//! small channel: it ends when the browser goes away or the service shuts down.

use std::{collections::HashMap, convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::{Path, Query, State},
    http::HeaderMap,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;
use tokio::sync::{broadcast, mpsc};
use tonic::Code;

use super::{ApiError, Caller, Console, MAX_LINE_BYTES, proto_json};
use crate::{
    grpc::{convert, pb, pb::agent_registry_service_server::AgentRegistryService},
    paging::PageRequest,
    workers::{
        model::{ProgressKind, WorkerEvent, WorkerId, WorkerRecord, WorkerState},
        store::{Followed, Notice, ParentFilter},
        supervisor::{Visibility, WorkersQuery},
    },
};

/// How long changes are gathered into one message.
const BURST: Duration = Duration::from_millis(25);
/// At most this many workers in one `workers` message.
const BURST_MAX: usize = 500;
/// The tree's default and largest `limit`.
const DEFAULT_LIMIT: usize = 1000;
const MAX_LIMIT: usize = 5000;
/// How often an idle stream sends a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A tree item's result is cut to this many bytes (the watch has it whole).
const MAX_RESULT_PREVIEW: usize = 240;

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// What the tree shows of a progress event: its text, its kind first unless it is plain text.
fn line(ev: &WorkerEvent) -> Option<String> {
    let p = ev.progress.as_ref()?;
    let text = p.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let text = match p.kind {
        ProgressKind::Text | ProgressKind::Status => text.to_owned(),
        kind => {
            let kind = serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("[{kind}] {text}")
        }
    };
    Some(cut(text.trim(), MAX_LINE_BYTES))
}

/// Keeps the last progress line of every worker of this replica, for the tree's snapshots.
pub(super) fn follow_lines(console: &Arc<Console>) {
    let mut activity = console.app.supervisor.activity();
    let shutdown = console.app.supervisor.shutdown_token();
    let weak = Arc::downgrade(console);
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                () = shutdown.cancelled() => return,
                ev = activity.recv() => ev,
            };
            let Some(console) = weak.upgrade() else {
                return;
            };
            match ev {
                Ok(ev) => {
                    if let Some(l) = line(&ev) {
                        console.lines.insert(ev.worker_id.clone(), l.into());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// A worker as the tree shows it: the gRPC `Worker` without what only its watch needs (the
/// whole result, artifacts, tools).
fn summary(rec: &WorkerRecord) -> Result<Value, ApiError> {
    let mut w = convert::worker(rec);
    w.result = w.result.map(|r| cut(&r, MAX_RESULT_PREVIEW));
    w.structured_result = None;
    w.artifacts.clear();
    w.tools = None;
    proto_json(&w, "agentry.v1.Worker")
}

/// A stream's event carrying `data`.
fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// The stream's error event, after which it ends.
fn error_event(e: &ApiError) -> Event {
    event("failure", &e.body())
}

/// The body of a stream fed by a task through `rx`.
fn sse(rx: mpsc::Receiver<Event>) -> Response {
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let mut resp = Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    resp.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    resp
}

/// `?limit=`, `?workspace=`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct StreamQuery {
    limit: Option<usize>,
    workspace: Option<String>,
}

/// `GET /console/api/tree`.
pub(super) async fn tree(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Query(q): Query<StreamQuery>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, false)?;
    let limit = match q.limit {
        None => DEFAULT_LIMIT,
        Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(ApiError::new(
                Code::InvalidArgument,
                format!("limit: must be 1..={MAX_LIMIT}, not {n}"),
            ));
        }
    };
    let vis = c.app.visibility(&caller.identity()).await?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(follow_tree(c, caller, vis, limit, tx));
    Ok(sse(rx))
}

/// The tree as it stands: the open workers, then the newest finished ones, `limit` in all;
/// whether some were left out.
async fn snapshot(
    c: &Console,
    caller: &Caller,
    limit: usize,
) -> Result<(Vec<WorkerRecord>, bool), ApiError> {
    let id = caller.identity();
    let mut out = Vec::new();
    for (states, newest_first) in [
        (
            vec![
                WorkerState::Pending,
                WorkerState::Running,
                WorkerState::InputRequired,
            ],
            false,
        ),
        (
            vec![
                WorkerState::Completed,
                WorkerState::Failed,
                WorkerState::Killed,
            ],
            true,
        ),
    ] {
        let mut token = String::new();
        loop {
            let room = limit - out.len();
            if room == 0 {
                return Ok((out, true));
            }
            let page = c
                .app
                .list_workers(
                    &id,
                    WorkersQuery {
                        parent: ParentFilter::Any,
                        states: states.clone(),
                        page: PageRequest {
                            size: room.min(crate::paging::MAX_PAGE_SIZE),
                            token,
                        },
                        context_id: None,
                        agent: None,
                        newest_first,
                    },
                )
                .await?;
            out.extend(page.workers);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    }
    Ok((out, false))
}

/// The progress lines known for `workers`.
fn lines_of<'a>(c: &Console, workers: impl IntoIterator<Item = &'a WorkerRecord>) -> Value {
    let mut lines = serde_json::Map::new();
    for w in workers {
        if let Some(l) = c.lines.get(&w.id) {
            lines.insert(w.id.to_string(), Value::String(l.to_string()));
        }
    }
    Value::Object(lines)
}

/// One message of the tree stream, as JSON text: `workers` with their progress lines. Written
/// worker by worker, so a large tree is never held as a JSON value tree besides its text.
fn tree_message(
    workers: &[WorkerRecord],
    lines: &Value,
    truncated: Option<bool>,
) -> Result<String, ApiError> {
    use std::fmt::Write;
    let mut out = String::with_capacity(64 + workers.len() * 512);
    out.push_str("{\"workers\":[");
    for (i, w) in workers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", summary(w)?);
    }
    let _ = write!(out, "],\"lastProgress\":{lines}");
    if let Some(t) = truncated {
        let _ = write!(out, ",\"truncated\":{t}");
    }
    out.push('}');
    Ok(out)
}

/// What one wake-up of the tree stream brought.
enum Woken {
    /// An event of this replica.
    Event(Arc<WorkerEvent>),
    /// Another replica committed an event of this worker at this sequence.
    Remote(WorkerId, u64),
    /// The stream fell behind: send the tree again.
    Resync,
    /// Nothing more will come (the browser left, the service stops).
    End,
}

/// The tree stream's task: a snapshot, then bursts of changes, a new snapshot whenever it fell
/// behind.
async fn follow_tree(
    c: Arc<Console>,
    caller: Caller,
    vis: Visibility,
    limit: usize,
    tx: mpsc::Sender<Event>,
) {
    let sup = c.app.supervisor.clone();
    let shutdown = sup.shutdown_token();
    'resync: loop {
        // Subscribe first, then read: nothing falls between the snapshot and the changes.
        let mut activity = sup.activity();
        let mut notices = sup.notices();
        // A few snapshots at a time: a hundred consoles reconnecting at once after a restart
        // must not each hold a whole tree in memory together.
        let Ok(permit) = c.snapshots.acquire().await else {
            return;
        };
        let msg = match snapshot(&c, &caller, limit).await {
            Ok((workers, truncated)) => {
                let lines = lines_of(&c, &workers);
                tree_message(&workers, &lines, Some(truncated))
            }
            Err(e) => Err(e),
        };
        let sent = match msg {
            Ok(m) => tx.send(Event::default().event("snapshot").data(m)).await,
            Err(e) => {
                let _ = tx.send(error_event(&e)).await;
                return;
            }
        };
        drop(permit);
        if sent.is_err() {
            return;
        }
        loop {
            let first = wake(&mut activity, &mut notices, &tx, &shutdown).await;
            let mut batch: HashMap<WorkerId, (WorkerRecord, Option<String>)> = HashMap::new();
            let deadline = tokio::time::Instant::now() + BURST;
            let mut woken = first;
            loop {
                match woken {
                    Woken::End => return,
                    Woken::Resync => continue 'resync,
                    Woken::Event(ev) => take(&mut batch, &vis, &ev),
                    Woken::Remote(id, seq) => {
                        // Another replica's event: read it (with its progress) from the store.
                        if let Ok(evs) = sup.events_after(&id, seq.saturating_sub(1)).await {
                            for ev in evs {
                                take(&mut batch, &vis, &ev);
                            }
                        }
                    }
                }
                if batch.len() >= BURST_MAX {
                    break;
                }
                woken = tokio::select! {
                    () = tokio::time::sleep_until(deadline) => break,
                    w = wake(&mut activity, &mut notices, &tx, &shutdown) => w,
                };
            }
            if batch.is_empty() {
                continue;
            }
            let mut lines = serde_json::Map::new();
            let mut workers = Vec::with_capacity(batch.len());
            for (id, (rec, l)) in batch {
                if let Some(l) = l {
                    lines.insert(id.to_string(), Value::String(l));
                }
                workers.push(rec);
            }
            workers.sort_by_key(|w| (w.spec.create_time_ms, w.id.to_string()));
            let msg = match tree_message(&workers, &Value::Object(lines), None) {
                Ok(m) => m,
                Err(e) => {
                    let _ = tx.send(error_event(&e)).await;
                    return;
                }
            };
            if tx
                .send(Event::default().event("workers").data(msg))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Adds `ev` to `batch` when the caller may see its worker, keeping each worker at its newest.
fn take(
    batch: &mut HashMap<WorkerId, (WorkerRecord, Option<String>)>,
    vis: &Visibility,
    ev: &WorkerEvent,
) {
    if !vis.sees(&ev.worker) {
        return;
    }
    let l = line(ev);
    match batch.get_mut(&ev.worker_id) {
        Some((rec, known)) => {
            if rec.sequence < ev.worker.sequence {
                *rec = ev.worker.clone();
            }
            if l.is_some() {
                *known = l;
            }
        }
        None => {
            batch.insert(ev.worker_id.clone(), (ev.worker.clone(), l));
        }
    }
}

/// Waits for the next change the tree stream must look at.
async fn wake(
    activity: &mut broadcast::Receiver<Arc<WorkerEvent>>,
    notices: &mut Option<Followed>,
    tx: &mpsc::Sender<Event>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Woken {
    loop {
        let notice = async {
            match notices.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return Woken::End,
            () = tx.closed() => return Woken::End,
            ev = activity.recv() => return match ev {
                Ok(ev) => Woken::Event(ev),
                Err(broadcast::error::RecvError::Lagged(_)) => Woken::Resync,
                Err(broadcast::error::RecvError::Closed) => Woken::End,
            },
            n = notice => match n {
                Ok(Notice::Event { worker_id, sequence, by_this_replica: false }) => {
                    return Woken::Remote(worker_id, sequence);
                }
                Ok(Notice::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    return Woken::Resync;
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Closed) => *notices = None,
            },
        }
    }
}

/// `GET /console/api/workers/{id}/watch`: `WatchWorker` from the worker's first event after its
/// creation, or resumed after `Last-Event-ID`.
pub(super) async fn watch(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, false)?;
    // Without one, every event after the creation (the tree showed the worker as created).
    let after_sequence = match headers.get("last-event-id") {
        None => 1,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::new(
                    Code::InvalidArgument,
                    "Last-Event-ID: must be an event sequence (a whole number)",
                )
            })?,
    };
    let req = pb::WatchWorkerRequest {
        worker_id: id,
        after_sequence,
    };
    let mut events = c.svc.watch_worker(caller.request(req)).await?.into_inner();
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            // A browser that went away ends the watch at once, not at the worker's next event.
            let item = tokio::select! {
                () = tx.closed() => return,
                item = events.next() => item,
            };
            let Some(item) = item else { break };
            let ev = match item {
                Ok(ev) => match proto_json(&ev, "agentry.v1.WatchWorkerResponse") {
                    Ok(v) => event("event", &v).id(ev.sequence.to_string()),
                    Err(e) => error_event(&e),
                },
                Err(s) => error_event(&ApiError::from(s)),
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
        let _ = tx.send(event("end", &json!({}))).await;
    });
    Ok(sse(rx))
}

/// `GET /console/api/agents`: the catalog, and again after every change.
pub(super) async fn agents(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Query(q): Query<StreamQuery>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, false)?;
    let workspace = q.workspace.unwrap_or_default();
    let mut changes = c.app.registry.changes();
    let shutdown = c.app.supervisor.shutdown_token();
    let (tx, rx) = mpsc::channel(2);
    // A refused workspace is the stream's `failure` event, which a browser's EventSource can
    // read (an HTTP error it could not).
    let first = match catalog(&c, &caller, &workspace).await {
        Ok(first) => first,
        Err(e) => {
            let _ = tx.send(error_event(&e)).await;
            return Ok(sse(rx));
        }
    };
    tokio::spawn(async move {
        // Only the digest of what was sent is kept: a catalog is large, a stream is not.
        let digest = |v: &str| -> [u8; 32] { sha2::Sha256::digest(v.as_bytes()).into() };
        let mut last = digest(&first);
        if tx
            .send(Event::default().event("agents").data(first))
            .await
            .is_err()
        {
            return;
        }
        let Some(changes) = changes.as_mut() else {
            return tx.closed().await;
        };
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tx.closed() => return,
                r = changes.changed() => if r.is_err() { return },
            }
            let next = match catalog(&c, &caller, &workspace).await {
                Ok(v) => v,
                Err(e) => {
                    let _ = tx.send(error_event(&e)).await;
                    return;
                }
            };
            let d = digest(&next);
            if d != last {
                last = d;
                if tx
                    .send(Event::default().event("agents").data(next))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    Ok(sse(rx))
}

/// Every page of `ListAgents` (view full, with shadowed definitions) as one JSON text.
async fn catalog(c: &Console, caller: &Caller, workspace: &str) -> Result<String, ApiError> {
    let mut all = pb::ListAgentsResponse::default();
    let mut token = String::new();
    loop {
        let req = pb::ListAgentsRequest {
            workspace: workspace.to_owned(),
            view: pb::AgentView::Full as i32,
            include_shadowed: true,
            page_size: crate::paging::MAX_PAGE_SIZE as i32,
            page_token: token,
        };
        let page = c.svc.list_agents(caller.request(req)).await?.into_inner();
        if all.registry_version.is_empty() {
            all.registry_version = page.registry_version.clone();
            all.diagnostics = page.diagnostics;
            all.shadowed = page.shadowed;
            all.total_size = page.total_size;
        }
        all.agents.extend(page.agents);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    Ok(proto_json(&all, "agentry.v1.ListAgentsResponse")?.to_string())
}
