//! A model server, an MCP server or a persona file never takes the service down or reaches
//! outside (issue 40): each scenario runs the real `agentry serve` binary under an address-space
//! limit, against a hostile scripted model server (`tests/support/openai_script.py`) and a
//! hostile MCP server (`tests/support/mcp_hostile.py`), and ends by checking that the service
//! is alive and healthy.
//!
//! | scenario | what must hold | test |
//! |---|---|---|
//! | a streamed tool call with `index: 4000000000` | the worker fails naming `model.max_tool_calls` | `a_tool_call_index_of_four_billion_fails_only_the_worker` |
//! | `Retry-After: 1e20` on a 429 | the retry waits `model.max_backoff`, the worker completes | `a_retry_after_of_1e20_waits_at_most_max_backoff` |
//! | a 50 MB answer, a 50 MB event line | the worker fails naming the bound; the rest is never read; `ListWorkers` answers | `a_50_mb_answer_fails_the_worker_and_is_not_read_whole` |
//! | a 700 MB error body | only its head is read; the worker fails with the status | `a_700_mb_error_body_is_read_only_to_its_bound` |
//! | an MCP reply over `model.max_mcp_message_bytes` | the call fails at once (no wait for the tool timeout) | `an_mcp_reply_over_the_bound_fails_the_call_at_once` |
//! | a 6 MB tool result | cut for the model with a note; not resent whole | `a_6_mb_tool_result_is_cut_for_the_model` |
//! | a plain JSON answer to a streamed request | read as the answer | `a_plain_json_answer_is_read_as_the_answer` |
//! | a stream without `[DONE]` or `finish_reason`; `finish_reason: length` | the worker fails saying so | `an_early_end_or_a_length_cut_is_never_a_completed_worker` |
//! | a body that goes on after `[DONE]` (a line over the event bound) | the answer stands | `what_follows_done_is_not_part_of_the_answer` |
//! | `memory_write` through a planted symlink; `MEMORY.md` a symlink, a FIFO or `/dev/zero`; the memory directory a symlink | refused, nothing created or read outside, the server never blocks | `the_memory_tools_and_the_prompt_never_reach_outside` |
//! | a project persona named `..` with `memory: user` | refused as a name (`invalid_name`); nothing written in the home | `a_persona_named_dot_dot_is_not_an_agent` |
//! | `ListWorkers {}` over workers with results near the 1 MiB bound | pages under 3 MiB, the rest by token | `list_workers_pages_are_bounded_in_bytes` |
//! | `destructiveHint: false`; annotations of an inline server | a write all the same (never offered read-only, reviewed); an inline server's tools are reviewed as destructive | `read_only_follows_the_mcp_specification_and_inline_servers_are_not_trusted` |

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use agentry::grpc::pb;
use serde_json::{Value, json};
use tonic::{Code, transport::Channel};

use crate::{
    binary::{Binary, Launch, config},
    helpers::*,
    model::{Scripted, tool_messages},
};

/// The address space a server under attack may have: room for its normal 1.8 GB of
/// reservations (thread stacks, allocator arenas) and nothing like what a regression asks for.
const ADDRESS_SPACE: u64 = 4 << 30;

/// A server on the model executor with a hostile model endpoint.
struct Hostile {
    dir: tempfile::TempDir,
    model: Scripted,
    server: Binary,
    client: pb::agent_registry_service_client::AgentRegistryServiceClient<Channel>,
}

/// Starts the scripted model on `steps` and `agentry serve` (model executor, limited address
/// space) with `yaml` added to its config; personas go in `<dir>/agents` through `setup`.
async fn hostile(steps: Value, yaml: &str, setup: impl FnOnce(&Path)) -> Hostile {
    let model = Scripted::start(steps).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    setup(&root);
    let cfg = config(
        &root,
        "hostile",
        &format!(
            "home: {home}\nstore: {{path: {db}}}\nexecutor: {{kind: model, timeout: 60s}}\n\
             models:\n  default: scripted/test-model\n  providers: [{{name: scripted, base_url: \"{url}\"}}]\n\
             agent_dirs: [{{path: {agents}}}]\n{yaml}",
            home = root.join("home").display(),
            db = root.join("agentry.db").display(),
            url = model.base_url,
            agents = root.join("agents").display(),
        ),
    );
    let server = Launch::with_address_space(&cfg, ADDRESS_SPACE)
        .start()
        .await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max address space") && l.contains(&ADDRESS_SPACE.to_string())),
        "the server runs without its address-space limit:\n{limits}"
    );
    let client = server.client().await;
    Hostile {
        dir,
        model,
        server,
        client,
    }
}

impl Hostile {
    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// `SpawnWorker(wait)` of `agent` on `prompt` in `workspace` (none when empty).
    async fn run(
        &self,
        agent: &str,
        prompt: &str,
        workspace: &Path,
    ) -> Result<pb::Worker, tonic::Status> {
        let r = pb::SpawnWorkerRequest {
            workspace: workspace.display().to_string(),
            ..crate::workers::spawn_req(agent, prompt, true)
        };
        self.client
            .clone()
            .spawn_worker(r)
            .await
            .map(|r| r.into_inner().worker.unwrap())
    }

    /// The bytes of each flooded answer body the model server wrote before agentry stopped
    /// reading, by request number.
    async fn written(&self) -> Value {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = format!("{}/_stats", self.model.base_url);
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        serde_json::from_str::<Value>(&text).unwrap()["written"].clone()
    }

    /// The service is alive and healthy: the process runs, health is SERVING, `ListWorkers {}`
    /// answers within gRPC's default message limit.
    async fn assert_alive(&self) {
        assert!(
            self.server.try_wait().is_none(),
            "the server died\n{}",
            self.server.output()
        );
        self.server.wait_serving().await;
        let listed = self
            .server
            .client()
            .await
            .list_workers(pb::ListWorkersRequest::default())
            .await;
        assert!(listed.is_ok(), "{listed:?}");
    }
}

/// [`hostile`] with one persona, `scout`, that has nothing but a name and a description.
async fn scout(steps: Value, yaml: &str) -> Hostile {
    hostile(steps, yaml, |r| agent(r, "scout", "")).await
}

/// A persona `name` in `<root>/agents` with `front` after its name and description.
fn agent(root: &Path, name: &str, front: &str) {
    persona(
        &root.join("agents"),
        &format!("{name}.md"),
        &format!("name: {name}\ndescription: d\n{front}"),
        "Work.",
    );
}

/// `ListWorkers` of the children of worker `id`.
fn children_of(id: &str) -> pb::ListWorkersRequest {
    pb::ListWorkersRequest {
        parent_id: id.to_owned(),
        ..Default::default()
    }
}

fn failed_with(w: &pb::Worker, text: &str) {
    assert_eq!(w.state, pb::WorkerState::Failed as i32, "{w:?}");
    let error = w.error.as_deref().unwrap_or_default();
    assert!(error.contains(text), "error {error:?} lacks {text:?}");
}

fn sse(chunk: Value) -> String {
    format!("data: {chunk}\n\n")
}

#[tokio::test]
async fn a_tool_call_index_of_four_billion_fails_only_the_worker() {
    let call = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 4_000_000_000u64, "id": "c1", "type": "function",
         "function": {"name": "submit_result", "arguments": "{}"}}]}}]});
    let h = scout(json!([{"raw": [sse(call), "data: [DONE]\n\n"]}]), "").await;
    let w = h.run("scout", "go", Path::new("")).await.unwrap();
    failed_with(
        &w,
        "tool call index 4000000000 is over the 64 calls one answer may make (model.max_tool_calls)",
    );
    h.assert_alive().await;
}

#[tokio::test]
async fn a_retry_after_of_1e20_waits_at_most_max_backoff() {
    let h = scout(
        json!([
            {"status": 429, "headers": {"Retry-After": "1e20"}},
            {"content": "fine after the wait"},
        ]),
        "model: {max_backoff: 300ms}\n",
    )
    .await;
    let t0 = Instant::now();
    let w = h.run("scout", "go", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("fine after the wait"));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(h.model.requests().len(), 2);
    h.assert_alive().await;
}

#[tokio::test]
async fn a_50_mb_answer_fails_the_worker_and_is_not_read_whole() {
    let h = scout(
        json!([
            {"match": "text flood", "flood": 50_000_000, "flood_as": "content"},
            {"match": "line flood", "flood": 50_000_000, "flood_as": "line"},
        ]),
        "",
    )
    .await;
    let w = h.run("scout", "text flood", Path::new("")).await.unwrap();
    failed_with(
        &w,
        "the model's answer is over 1048576 bytes of text and tool arguments (model.max_answer_bytes)",
    );
    let w = h.run("scout", "line flood", Path::new("")).await.unwrap();
    failed_with(
        &w,
        "model stream: an event is over 1048576 bytes (model.max_event_bytes)",
    );
    // Reading stopped at the bound: what the server managed to write is the bound plus what
    // the sockets buffer, far from 50 MB.
    let written = h.written().await;
    for n in ["1", "2"] {
        let bytes = written[n].as_u64().unwrap();
        assert!(bytes < 16_000_000, "request {n}: {bytes} bytes were read");
    }
    h.assert_alive().await;
}

#[tokio::test]
async fn a_700_mb_error_body_is_read_only_to_its_bound() {
    let h = scout(
        json!([{"flood": 700_000_000, "flood_as": "error", "status": 400}]),
        "",
    )
    .await;
    let w = h.run("scout", "go", Path::new("")).await.unwrap();
    failed_with(&w, "model request failed: 400 Bad Request: eeee");
    let error = w.error.unwrap();
    assert!(error.len() < 2048, "{} bytes of error", error.len());
    let bytes = h.written().await["1"].as_u64().unwrap();
    assert!(
        bytes < 16_000_000,
        "{bytes} bytes of the error body were read"
    );
    h.assert_alive().await;
}

/// The hostile MCP server, configured as `hostile` (a trusted, configured server).
fn mcp_hostile(notes: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp_hostile.py");
    format!(
        "mcp_servers:\n  hostile: {{command: [python3, \"{}\", --notes, \"{}\"]}}\n",
        script.display(),
        notes.display()
    )
}

#[tokio::test]
async fn an_mcp_reply_over_the_bound_fails_the_call_at_once() {
    let notes = tempfile::NamedTempFile::new().unwrap();
    let h = hostile(json!([
            {"match": "max_mcp_message_bytes", "tool_calls": [{"name": "submit_result", "arguments": {"result": "gave up"}}]},
            {"tool_calls": [{"name": "mcp__hostile__big", "arguments": {"bytes": 2_000_000}}]},
        ]),
        &format!(
            "{}model: {{max_mcp_message_bytes: 1048576, tool_timeout: 60s}}\n",
            mcp_hostile(notes.path())
        ),
        |r| {
            agent(r, "digger", "tools: mcp__hostile__big");
        },
    )
    .await;
    let t0 = Instant::now();
    let w = h.run("digger", "dig", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the call waited {:?}",
        t0.elapsed()
    );
    let requests = h.model.requests();
    let answer = &tool_messages(&requests[1])[0];
    assert!(
        answer.contains(
            "the server sent a message over 1048576 bytes (model.max_mcp_message_bytes); its connection was closed"
        ),
        "{answer}"
    );
    h.assert_alive().await;
}

#[tokio::test]
async fn a_6_mb_tool_result_is_cut_for_the_model() {
    let notes = tempfile::NamedTempFile::new().unwrap();
    let h = hostile(
        json!([
            {"match": "peeked", "tool_calls": [{"name": "submit_result", "arguments": {"result": "done"}}]},
            {"match": "max_tool_result_bytes", "tool_calls": [{"name": "mcp__hostile__peek", "arguments": {}}]},
            {"tool_calls": [{"name": "mcp__hostile__big", "arguments": {"bytes": 6_000_000}}]},
        ]),
        &mcp_hostile(notes.path()),
        |r| {
            agent(r, "digger", "tools: mcp__hostile__big, mcp__hostile__peek");
        },
    )
    .await;
    let w = h.run("digger", "dig", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let requests = h.model.requests();
    assert_eq!(requests.len(), 3);
    let cut = &tool_messages(&requests[1])[0];
    assert!(
        cut.ends_with(
            "\n[cut: the tool returned 6000000 bytes; only the first 131072 are shown (model.max_tool_result_bytes)]"
        ),
        "{}",
        &cut[cut.len().saturating_sub(200)..]
    );
    assert!(cut.len() < 132_000, "{} bytes", cut.len());
    // The next turn carries the cut result again, not six megabytes.
    let sent = serde_json::to_string(&requests[2]["body"]).unwrap().len();
    assert!(sent < 300_000, "the third request was {sent} bytes");
    h.assert_alive().await;
}

#[tokio::test]
async fn a_plain_json_answer_is_read_as_the_answer() {
    let h = scout(json!([{"plain": true, "content": "a plain answer"}]), "").await;
    let w = h.run("scout", "go", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("a plain answer"));
    h.assert_alive().await;
}

#[tokio::test]
async fn an_early_end_or_a_length_cut_is_never_a_completed_worker() {
    let h = scout(
        json!([
            {"match": "early", "content": "half of it", "finish_reason": null, "done": false},
            {"match": "long", "content": "cut off mid", "finish_reason": "length"},
        ]),
        "",
    )
    .await;
    let w = h.run("scout", "early", Path::new("")).await.unwrap();
    failed_with(
        &w,
        "without [DONE] or a finish_reason: the answer is incomplete",
    );
    let w = h.run("scout", "long", Path::new("")).await.unwrap();
    failed_with(
        &w,
        "the model's answer was cut at its output token limit (finish_reason: length)",
    );
    assert_eq!(w.result, None);
    h.assert_alive().await;
}

/// A project at `<root>/<name>` whose `.claude/agents/keeper.md` has `memory: project`.
fn project(root: &Path, name: &str) -> PathBuf {
    let p = root.join(name);
    persona(
        &p.join(".claude/agents"),
        "keeper.md",
        "name: keeper\ndescription: keeps notes\nmemory: project",
        "Keep notes.",
    );
    p
}

#[tokio::test]
async fn the_memory_tools_and_the_prompt_never_reach_outside() {
    let write = json!({"name": "memory_write", "arguments": {"path": "up/new/deeper/x.md", "content": "escaped"}});
    let h = hostile(json!([
            {"match": "leads out of your memory directory", "tool_calls": [{"name": "submit_result", "arguments": {"result": "refused"}}]},
            {"tool_calls": [write]},
        ]),
        "",
        |_| {},
    )
    .await;
    let root = h.root();
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "the outside secret\n").unwrap();

    // A symlink planted inside the memory directory: the write is refused, nothing is made
    // behind it.
    let planted = project(&root, "planted");
    let mem = planted.join(".claude/agent-memory/keeper");
    std::fs::create_dir_all(&mem).unwrap();
    std::os::unix::fs::symlink(&outside, mem.join("up")).unwrap();
    let w = h.run("keeper", "write", &planted).await.unwrap();
    assert_eq!(w.result.as_deref(), Some("refused"), "{w:?}");
    assert!(
        !outside.join("new").exists(),
        "a directory was made outside"
    );

    // MEMORY.md a symlink to a file outside, to /dev/zero, or a FIFO; the memory directory
    // itself a symlink: each spawn is refused naming what is wrong, and the server answers
    // meanwhile (a FIFO never blocks it).
    let linked = project(&root, "linked");
    let mem = linked.join(".claude/agent-memory/keeper");
    std::fs::create_dir_all(&mem).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), mem.join("MEMORY.md")).unwrap();
    let zero = project(&root, "zero");
    let mem = zero.join(".claude/agent-memory/keeper");
    std::fs::create_dir_all(&mem).unwrap();
    std::os::unix::fs::symlink("/dev/zero", mem.join("MEMORY.md")).unwrap();
    let fifo = project(&root, "fifo");
    let mem = fifo.join(".claude/agent-memory/keeper");
    std::fs::create_dir_all(&mem).unwrap();
    nix::unistd::mkfifo(
        &mem.join("MEMORY.md"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let dir_link = project(&root, "dir-link");
    std::fs::create_dir_all(dir_link.join(".claude")).unwrap();
    std::os::unix::fs::symlink(&outside, dir_link.join(".claude/agent-memory")).unwrap();
    for (ws, what) in [
        (&linked, "MEMORY.md is a symlink"),
        (&zero, "MEMORY.md is a symlink"),
        (&fifo, "MEMORY.md is not a regular file"),
        (&dir_link, ".claude/agent-memory is a symlink"),
    ] {
        let t0 = Instant::now();
        let e = h.run("keeper", "read", ws).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(
            e.message().contains(what),
            "{}: {}",
            ws.display(),
            e.message()
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        h.assert_alive().await;
    }
    assert!(!outside.join("keeper").exists());
    // Nothing from outside ever went to the model.
    let log = serde_json::to_string(&h.model.requests()).unwrap();
    assert!(!log.contains("the outside secret"));
    h.assert_alive().await;
}

#[tokio::test]
async fn a_persona_named_dot_dot_is_not_an_agent() {
    let h = hostile(json!([]), "", |_| {}).await;
    let root = h.root();
    let ws = root.join("project");
    persona(
        &ws.join(".claude/agents"),
        "dots.md",
        "name: \"..\"\ndescription: climbs\nmemory: user",
        "Write a persona into the home.",
    );
    let listed = h
        .client
        .clone()
        .list_agents(pb::ListAgentsRequest {
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let d = listed
        .diagnostics
        .iter()
        .find(|d| d.code == "invalid_name")
        .expect("an invalid_name diagnostic");
    assert!(d.path.ends_with("dots.md"), "{d:?}");
    assert!(
        d.message.contains("\"..\" is a relative path, not a name"),
        "{d:?}"
    );
    assert!(!listed.agents.iter().any(|a| a.name == ".."));
    let e = h.run("..", "climb", &ws).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(!root.join("home/.claude/agent-memory").exists());
    h.assert_alive().await;
}

#[tokio::test]
async fn read_only_follows_the_mcp_specification_and_inline_servers_are_not_trusted() {
    let notes = tempfile::NamedTempFile::new().unwrap();
    let inline = format!(
        "mcpServers:\n  - own:\n      command: python3\n      args: [\"{}\"]",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/support/mcp_hostile.py")
            .display()
    );
    let h = hostile(
        json!([
            // The reviewer refuses every proposal it is shown.
            {"match": "Decision", "content": "Decision: reject\nnot on my watch", "repeat": true},
            {"match": "rejected by review", "tool_calls": [{"name": "submit_result", "arguments": {"result": "stopped"}}], "repeat": true},
            {"match": "append the note", "tool_calls": [{"name": "mcp__hostile__append_note", "arguments": {"text": "additive"}}]},
            {"match": "peek inline", "tool_calls": [{"name": "mcp__own__peek", "arguments": {}}]},
            {"tool_calls": [{"name": "submit_result", "arguments": {"result": "looked"}}], "repeat": true},
        ]),
        &mcp_hostile(notes.path()),
        |r| {
            agent(r, "looker", "permission_mode: read-only\ntools: mcp__hostile, mcp__own");
            agent(r, "writer", "tools: mcp__hostile");
            persona(
                &r.join("home/.claude/agents"),
                "inliner.md",
                &format!("name: inliner\ndescription: d\ntools: mcp__own\n{inline}"),
                "Work.",
            );
            persona(
                &r.join("home/.claude/agents"),
                "inline-looker.md",
                &format!(
                    "name: inline-looker\ndescription: d\npermission_mode: read-only\ntools: mcp__own\n{inline}"
                ),
                "Work.",
            );
        },
    )
    .await;
    // A read-only worker is offered only readOnlyHint tools of the configured server:
    // `append_note` (destructiveHint: false, an additive write) is a write.
    let w = h.run("looker", "look", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let offered = |i: usize| {
        let mut t = h.model.tools_of(i);
        t.sort();
        t
    };
    assert_eq!(
        offered(0),
        ["mcp__hostile__big", "mcp__hostile__peek", "submit_result"]
    );
    // An inline server's readOnlyHint is not believed: nothing of it for a read-only worker.
    let w = h.run("inline-looker", "look", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(offered(1), ["submit_result"]);
    // A write with destructiveHint: false is reviewed (here rejected, and never run).
    let w = h
        .run("writer", "append the note", Path::new(""))
        .await
        .unwrap();
    assert_eq!(w.result.as_deref(), Some("stopped"), "{w:?}");
    assert_eq!(std::fs::read_to_string(notes.path()).unwrap(), "");
    // The inline server's "read-only" peek is reviewed like a destructive tool.
    let w = h
        .run("inliner", "peek inline", Path::new(""))
        .await
        .unwrap();
    assert_eq!(w.result.as_deref(), Some("stopped"), "{w:?}");
    let reviews = h.client.clone().list_workers(children_of(&w.id)).await;
    let reviews = reviews.unwrap().into_inner().workers;
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(reviews[0].agent, "reviewer");
    let asked = h
        .model
        .requests()
        .into_iter()
        .filter(|r| r["body"].to_string().contains("Decision"))
        .map(|r| r["body"].to_string())
        .collect::<Vec<_>>();
    assert_eq!(asked.len(), 2, "two reviews ran");
    assert!(
        asked[1].contains("mcp__own__peek") && asked[1].contains("destructive"),
        "{}",
        asked[1]
    );
    h.assert_alive().await;
}

/// A page of `ListWorkers` is sized in bytes too: workers with results near the 1 MiB bound fill
/// a page before its row count, the page stays under a client's 4 MiB message limit, and the
/// token brings the rest.
#[tokio::test]
async fn list_workers_pages_are_bounded_in_bytes() {
    let s = crate::workers::with_runtime("head -c 900000 /dev/zero | tr '\\0' x", |_| {}).await;
    for i in 0..6 {
        let w = crate::workers::spawn(
            &s,
            crate::workers::spawn_req("task", &format!("big {i}"), true),
        )
        .await
        .unwrap()
        .worker
        .unwrap();
        assert_eq!(
            w.result.as_deref().map(str::len),
            Some(900_000),
            "{:?}",
            w.error
        );
    }
    let mut seen = 0;
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = s
            .client
            .clone()
            .list_workers(pb::ListWorkersRequest {
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let bytes = prost::Message::encoded_len(&page);
        assert!(bytes <= 3 << 20, "a page of {bytes} bytes");
        assert!(!page.workers.is_empty());
        seen += page.workers.len();
        pages += 1;
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!((seen, pages), (6, 2));
}

/// After `[DONE]` the answer is whole: whatever the body carries next (here a 2 MB line, over
/// the event bound) is drained or let go, never read as part of the answer.
#[tokio::test]
async fn what_follows_done_is_not_part_of_the_answer() {
    let text =
        json!({"choices": [{"index": 0, "delta": {"content": "whole"}, "finish_reason": "stop"}]});
    let junk = format!("data: {}", "x".repeat(2_000_000));
    let h = scout(json!([{"raw": [sse(text), "data: [DONE]\n\n", junk]}]), "").await;
    let w = h.run("scout", "go", Path::new("")).await.unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    assert_eq!(w.result.as_deref(), Some("whole"));
    h.assert_alive().await;
}
