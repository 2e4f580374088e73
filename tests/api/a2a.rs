//! A2A (docs/a2a.md §13) over the HTTP listener of a real server: cards, the JSON-RPC binding in
//! both dialects, SSE streams, the HTTP+JSON binding, the mapping to workers, and every refusal
//! with its code. The official SDK clients run against the same server in `a2a_clients`.
//!
//! | rule | test |
//! |---|---|
//! | §13.2 cards, ETag, reserved and unknown agents, default card | `a_card_per_catalog_persona` |
//! | §13.3 send in both dialects, messageId idempotent, GetTask, historyLength | `a_message_is_a_task_in_both_dialects` |
//! | §13.2 versions, methods, JSON-RPC errors | `refusals_carry_the_specs_codes` |
//! | §13.2 streams | `a_stream_follows_the_task_to_its_end` |
//! | §13.3 cancel, subscribe | `a_task_is_canceled_and_subscribed_to` |
//! | §13.3 ListTasks | `tasks_are_listed_newest_first_by_context` |
//! | §13.2 HTTP+JSON, AIP-193 | `the_http_json_binding_answers_the_same` |
//! | §13.2 the gRPC binding lf.a2a.v1.A2AService | `the_grpc_binding_answers_the_same` |
//! | §13.3 lineage and tenancy | `tenancy_and_lineage_are_the_grpc_apis` |
//! | §13.3 input-required, continuation by reference | `a_question_is_answered_and_a_finished_task_refined` |
//! | §13.7 the official SDK clients (Python 1.0, JavaScript 0.3) | `a2a_sdk_python_client`, `a2a_sdk_js_client` |
//! | §13.1 artifacts: chunks, files, the result; refused chunks | `a_runners_artifacts_are_assembled_and_streamed` |
//! | §13.1 rejected: a failure marked, REJECTED in A2A | `a_runner_may_decline_a_task` |
//! | §13.3 the worker's spec carries the A2A message | `the_spec_carries_the_a2a_message`, `a_runner_may_decline_a_task` |

use std::time::Duration;

use agentry::grpc::pb;
use serde_json::{Value, json};

use crate::{
    helpers::*,
    model::{Scripted, on_model},
};

/// A running server with the HTTP listener, and its base URL.
pub(crate) struct A2aServer {
    pub s: TestServer,
    pub base: String,
    pub http: reqwest::Client,
}

/// The exec agent `echo` answers `echo: <prompt>`; a prompt with `sleep` runs 30 s first.
pub(crate) async fn a2a_server(tweak: impl FnOnce(&mut agentry::config::Config)) -> A2aServer {
    let s = start_with(|c| {
        let root = c.home.clone().unwrap().parent().unwrap().to_path_buf();
        let run = script(
            &root.join("bin"),
            "echo-agent",
            r#"python3 -c '
import json, os, sys, time
spec = json.load(sys.stdin)
if "token" in spec["prompt"]:
    with open(os.environ["OUT"] + "/token.tmp", "w") as f:
        f.write(os.environ["AGENTRY_WORKER_TOKEN"])
    os.rename(os.environ["OUT"] + "/token.tmp", os.environ["OUT"] + "/token")
if "sleep" in spec["prompt"]:
    time.sleep(30)
if "show the spec" in spec["prompt"]:
    print(json.dumps(spec.get("a2a")))
else:
    print("echo: " + spec["prompt"])'"#,
        );
        c.executor.command = vec![run.display().to_string()];
        c.executor
            .env
            .insert("OUT".into(), root.display().to_string());
        c.executor.kill_grace = Duration::from_millis(300);
        let dir = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &dir,
            "echo.md",
            "name: echo\ndescription: Echoes the brief\nwhen_to_use: to test",
            "Echo.",
        );
        persona(
            &dir,
            "secret.md",
            "name: secret\ndescription: reserved",
            "No.",
        );
        persona(
            &dir,
            "lead.md",
            "name: lead\ndescription: leads\nspawns: echo",
            "Lead.",
        );
        c.reserved_agents = vec!["secret".into()];
        c.http.listen = Some("127.0.0.1:0".into());
        tweak(c);
    })
    .await;
    let base = format!("http://{}", s.http.expect("the HTTP listener"));
    // Up when `start_with` returns: its HTTP listener is bound and served.
    let http = http_client();
    A2aServer { s, base, http }
}

impl A2aServer {
    /// A JSON-RPC call to `agent` in dialect `version` (`None`: no header, 0.3).
    pub async fn rpc(
        &self,
        agent: &str,
        version: Option<&str>,
        method: &str,
        params: Value,
    ) -> Value {
        self.rpc_as(agent, version, method, params, &[]).await
    }

    pub async fn rpc_as(
        &self,
        agent: &str,
        version: Option<&str>,
        method: &str,
        params: Value,
        headers: &[(&str, &str)],
    ) -> Value {
        let mut r = self
            .http
            .post(format!("{}/a2a/{agent}", self.base))
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
        if let Some(v) = version {
            r = r.header("A2A-Version", v);
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let resp = r.send().await.unwrap();
        resp.json().await.unwrap()
    }

    /// `GET url` of the HTTP+JSON binding in A2A 1.0, its JSON body.
    pub async fn v1_get(&self, url: &str) -> Value {
        self.http
            .get(url)
            .header("A2A-Version", "1.0")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The events of an SSE reply, each `data:` line as JSON.
    pub async fn sse(&self, resp: reqwest::Response) -> Vec<Value> {
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        let text = tokio::time::timeout(Duration::from_secs(30), resp.text())
            .await
            .expect("the stream ends")
            .unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }
}

fn v03_message(id: &str, text: &str) -> Value {
    json!({"message": {"kind": "message", "messageId": id, "role": "user",
        "parts": [{"kind": "text", "text": text}]}})
}

fn v1_message(id: &str, text: &str) -> Value {
    json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// The JSON-RPC error's code and message.
#[track_caller]
fn rpc_error(reply: &Value) -> (i64, String) {
    let e = &reply["error"];
    assert!(e.is_object(), "not an error: {reply}");
    assert_eq!(e["data"][0]["domain"], "a2a-protocol.org", "{reply}");
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_card_per_catalog_persona() {
    let a = a2a_server(|c| c.a2a.default_agent = Some("echo".into())).await;
    let resp = a
        .http
        .get(format!("{}/a2a/echo/.well-known/agent-card.json", a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(resp.headers()["cache-control"], "private, max-age=60");
    let card: Value = resp.json().await.unwrap();
    assert_eq!(card["name"], "echo");
    assert_eq!(card["description"], "Echoes the brief");
    let url = format!("{}/a2a/echo", a.base);
    assert_eq!(card["url"], url);
    assert_eq!(card["preferredTransport"], "JSONRPC");
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": a.s.addr.to_string(), "protocolBinding": "GRPC", "protocolVersion": "1.0", "tenant": "echo"},
        ])
    );
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": false})
    );
    assert_eq!(card["defaultOutputModes"], json!(["text/plain"]));
    assert_eq!(
        card["skills"][0]["description"],
        "Echoes the brief\n\nWhen to use: to test"
    );
    assert!(
        etag.contains(card["version"].as_str().unwrap()),
        "{etag} {card}"
    );
    assert!(card.get("securitySchemes").is_none(), "auth is off: {card}");

    let again = a
        .http
        .get(format!("{}/a2a/echo/.well-known/agent-card.json", a.base))
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    let default: Value = a
        .http
        .get(format!("{}/.well-known/agent-card.json", a.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(default["name"], "echo");

    for agent in ["secret", "nobody"] {
        let resp = a
            .http
            .get(format!(
                "{}/a2a/{agent}/.well-known/agent-card.json",
                a.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{agent}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["status"], "NOT_FOUND");
        assert_eq!(
            body["error"]["message"],
            format!(
                "no A2A agent \"{agent}\" here: it is not in your catalog (unknown, reserved, not allowed to you, or a remote persona)"
            )
        );
    }
}

#[tokio::test]
async fn a_message_is_a_task_in_both_dialects() {
    let a = a2a_server(|_| {}).await;
    let old = a
        .rpc("echo", None, "message/send", v03_message("m-1", "hello"))
        .await;
    let task = &old["result"];
    assert_eq!(task["kind"], "task", "{old}");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(
        task["artifacts"][0]["parts"][0],
        json!({"kind": "text", "text": "echo: hello\n"})
    );
    assert_eq!(task["history"][0]["messageId"], "m-1");
    assert_eq!(task["history"][0]["role"], "user");
    let ctx = task["contextId"].as_str().unwrap();
    assert!(ctx.starts_with("ctx_") && ctx.len() == 36, "{ctx}");
    let id = task["id"].as_str().unwrap().to_owned();

    // The same messageId again is the same task.
    let repeat = a
        .rpc("echo", None, "message/send", v03_message("m-1", "hello"))
        .await;
    assert_eq!(repeat["result"]["id"], id.as_str());

    // The task is the worker.
    let w =
        a.s.client
            .clone()
            .get_worker(pb::GetWorkerRequest {
                worker_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .worker
            .unwrap();
    assert_eq!(w.result.as_deref(), Some("echo: hello\n"));
    assert_eq!(w.agent, "echo");

    let v1 = a
        .rpc("echo", Some("1.0"), "SendMessage", v1_message("m-2", "hi"))
        .await;
    let task = &v1["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v1}");
    assert_eq!(
        task["artifacts"][0]["parts"][0],
        json!({"text": "echo: hi\n"})
    );
    assert_eq!(task["history"][0]["role"], "ROLE_USER");

    let got = a
        .rpc(
            "echo",
            Some("1.0"),
            "GetTask",
            json!({"id": id, "historyLength": 0}),
        )
        .await;
    assert_eq!(got["result"]["id"], id.as_str());
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(got["result"].get("history").is_none(), "{got}");
    let got = a.rpc("echo", None, "tasks/get", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "completed");
    assert_eq!(got["result"]["history"].as_array().unwrap().len(), 1);

    // A client-supplied contextId is kept.
    let mut m = v03_message("m-3", "with context");
    m["message"]["contextId"] = json!("my-context");
    let r = a.rpc("echo", None, "message/send", m).await;
    assert_eq!(r["result"]["contextId"], "my-context");
}

#[tokio::test]
async fn refusals_carry_the_specs_codes() {
    let a = a2a_server(|_| {}).await;
    let (code, message) = rpc_error(&a.rpc("echo", Some("2.0"), "SendMessage", json!({})).await);
    assert_eq!(code, -32009);
    assert_eq!(
        message,
        "A2A-Version \"2.0\" is not supported; this server speaks 1.0 and 0.3 (no header = 0.3)"
    );
    let (code, message) = rpc_error(
        &a.rpc("echo", None, "SendMessage", v1_message("x", "y"))
            .await,
    );
    assert_eq!(code, -32601);
    assert_eq!(
        message,
        "method \"SendMessage\" is an A2A 1.0 method; send the header A2A-Version: 1.0 (a request without it speaks 0.3)"
    );
    let (code, _) = rpc_error(
        &a.rpc("echo", Some("1.0"), "message/send", v03_message("x", "y"))
            .await,
    );
    assert_eq!(code, -32601);
    let (code, message) = rpc_error(
        &a.rpc("echo", None, "tasks/pushNotificationConfig/set", json!({}))
            .await,
    );
    assert_eq!(code, -32003, "{message}");
    let (code, _) = rpc_error(
        &a.rpc("echo", Some("1.0"), "GetExtendedAgentCard", json!({}))
            .await,
    );
    assert_eq!(code, -32007);
    let (code, message) = rpc_error(
        &a.rpc(
            "echo",
            None,
            "tasks/get",
            json!({"id": "wkr_0123456789abcdef0123456789abcdef"}),
        )
        .await,
    );
    assert_eq!(code, -32001);
    assert_eq!(
        message,
        "task wkr_0123456789abcdef0123456789abcdef not found"
    );
    let (code, _) = rpc_error(
        &a.rpc("echo", None, "tasks/get", json!({"id": "nonsense"}))
            .await,
    );
    assert_eq!(code, -32001);

    // Not JSON, not a request, a batch.
    for (body, want) in [
        ("{not json", -32700),
        (r#"{"id": 1, "method": "tasks/get"}"#, -32600),
        (
            r#"[{"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}]"#,
            -32600,
        ),
    ] {
        let reply: Value = a
            .http
            .post(format!("{}/a2a/echo", a.base))
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(rpc_error(&reply).0, want, "{body}: {reply}");
    }

    // Bad messages.
    let file = json!({"message": {"kind": "message", "messageId": "f", "role": "user",
        "parts": [{"kind": "file", "file": {"uri": "file:///etc/passwd"}}]}});
    let (code, message) = rpc_error(&a.rpc("echo", None, "message/send", file).await);
    assert_eq!(code, -32005);
    assert!(
        message.starts_with("message.parts[0] is a file part"),
        "{message}"
    );
    let empty =
        json!({"message": {"kind": "message", "messageId": "e", "role": "user", "parts": []}});
    let (code, message) = rpc_error(&a.rpc("echo", None, "message/send", empty).await);
    assert_eq!(code, -32602);
    assert_eq!(
        message,
        "message.parts: hold no text or data; a message needs at least one non-empty text or data part"
    );
    let no_id = json!({"message": {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "x"}]}});
    let (code, message) = rpc_error(&a.rpc("echo", None, "message/send", no_id).await);
    assert_eq!(
        (code, message.as_str()),
        (-32602, "message.messageId: is required")
    );
    let huge = v03_message("h", &"x".repeat(300_000));
    let (code, message) = rpc_error(&a.rpc("echo", None, "message/send", huge).await);
    assert_eq!(code, -32602);
    assert!(message.contains("limits.max_prompt_bytes"), "{message}");

    // A terminal task takes no message; a contextId that is not the task's is refused.
    let done = a
        .rpc("echo", None, "message/send", v03_message("d-1", "done"))
        .await;
    let id = done["result"]["id"].as_str().unwrap();
    let mut again = v03_message("d-2", "more");
    again["message"]["taskId"] = json!(id);
    let (code, message) = rpc_error(&a.rpc("echo", None, "message/send", again.clone()).await);
    assert_eq!(code, -32004);
    assert!(
        message.starts_with(&format!(
            "task {id} is completed: a terminal task takes no more messages"
        )),
        "{message}"
    );
    again["message"]["contextId"] = json!("other");
    let (code, message) = rpc_error(&a.rpc("echo", None, "message/send", again).await);
    assert_eq!(code, -32602);
    assert!(
        message.starts_with("message.contextId: is \"other\", but the task"),
        "{message}"
    );

    // An agent without a card.
    let (code, _) = rpc_error(
        &a.rpc("secret", None, "message/send", v03_message("s", "x"))
            .await,
    );
    assert_eq!(code, -32601);
}

#[tokio::test]
async fn a_stream_follows_the_task_to_its_end() {
    let a = a2a_server(|_| {}).await;
    let resp = a
        .http
        .post(format!("{}/a2a/echo", a.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage",
            "params": v1_message("st-1", "streamed")}),
        )
        .send()
        .await
        .unwrap();
    let events = a.sse(resp).await;
    assert!(
        events
            .iter()
            .all(|e| e["id"] == "s1" && e["jsonrpc"] == "2.0")
    );
    let results: Vec<&Value> = events.iter().map(|e| &e["result"]).collect();
    assert_eq!(
        results[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{events:?}"
    );
    let last = results.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let artifact = results
        .iter()
        .find(|r| r.get("artifactUpdate").is_some())
        .expect("an artifact event");
    assert_eq!(
        artifact["artifactUpdate"]["artifact"]["parts"][0]["text"],
        "echo: streamed\n"
    );
    assert_eq!(artifact["artifactUpdate"]["lastChunk"], true);

    // 0.3: kinds and `final`.
    let resp = a
        .http
        .post(format!("{}/a2a/echo", a.base))
        .json(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "message/stream",
            "params": v03_message("st-2", "old stream")}),
        )
        .send()
        .await
        .unwrap();
    let events = a.sse(resp).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["result"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"));
    assert!(kinds.contains(&"artifact-update"), "{kinds:?}");
    let last = &events.last().unwrap()["result"];
    assert_eq!(last["kind"], "status-update");
    assert_eq!(last["final"], true);
    assert_eq!(last["status"]["state"], "completed");
}

#[tokio::test]
async fn a_task_is_canceled_and_subscribed_to() {
    let a = a2a_server(|_| {}).await;
    let mut m = v1_message("c-1", "sleep please");
    m["configuration"] = json!({"returnImmediately": true});
    let r = a.rpc("echo", Some("1.0"), "SendMessage", m).await;
    let id = r["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{r}"
    );

    let sub = a
        .http
        .post(format!("{}/a2a/echo", a.base))
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/resubscribe", "params": {"id": id}}))
        .send()
        .await
        .unwrap();
    let watching = tokio::spawn(async move { sub.text().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let canceled = a.rpc("echo", None, "tasks/cancel", json!({"id": id})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "canceled",
        "{canceled}"
    );
    let text = tokio::time::timeout(Duration::from_secs(10), watching)
        .await
        .unwrap()
        .unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(events[0]["result"]["kind"], "task");
    let last = &events.last().unwrap()["result"];
    assert_eq!(
        (last["status"]["state"].as_str(), last["final"].as_bool()),
        (Some("canceled"), Some(true))
    );

    let (code, _) = rpc_error(&a.rpc("echo", None, "tasks/cancel", json!({"id": id})).await);
    assert_eq!(code, -32002);
    let (code, message) = rpc_error(
        &a.rpc("echo", None, "tasks/resubscribe", json!({"id": id}))
            .await,
    );
    assert_eq!(code, -32004);
    assert!(
        message.contains("a terminal task has no updates"),
        "{message}"
    );
}

#[tokio::test]
async fn tasks_are_listed_newest_first_by_context() {
    let a = a2a_server(|_| {}).await;
    let mut ids = Vec::new();
    for (i, ctx) in ["a", "a", "a", "b"].iter().enumerate() {
        let mut m = v1_message(&format!("l-{i}"), &format!("task {i}"));
        m["message"]["contextId"] = json!(ctx);
        let r = a.rpc("echo", Some("1.0"), "SendMessage", m).await;
        ids.push(r["result"]["task"]["id"].as_str().unwrap().to_owned());
    }
    let page = a
        .rpc(
            "echo",
            Some("1.0"),
            "ListTasks",
            json!({"contextId": "a", "pageSize": 2}),
        )
        .await;
    let listed: Vec<&str> = page["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()], "{page}");
    let token = page["result"]["nextPageToken"].as_str().unwrap();
    assert!(!token.is_empty());
    let next = a
        .rpc(
            "echo",
            Some("1.0"),
            "ListTasks",
            json!({"contextId": "a", "pageSize": 2, "pageToken": token}),
        )
        .await;
    let listed: Vec<&str> = next["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[0].as_str()]);
    assert_eq!(next["result"]["nextPageToken"], "");
    let none = a
        .rpc(
            "echo",
            Some("1.0"),
            "ListTasks",
            json!({"status": "TASK_STATE_FAILED"}),
        )
        .await;
    assert_eq!(none["result"]["tasks"], json!([]));
    let (code, _) = rpc_error(
        &a.rpc("echo", Some("1.0"), "ListTasks", json!({"pageSize": 101}))
            .await,
    );
    assert_eq!(code, -32602);
}

#[tokio::test]
async fn the_http_json_binding_answers_the_same() {
    let a = a2a_server(|_| {}).await;
    let url = format!("{}/a2a/echo", a.base);
    let sent: Value = a
        .http
        .post(format!("{url}/message:send"))
        .header("A2A-Version", "1.0")
        .json(&v1_message("r-1", "rest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = &sent["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    let id = task["id"].as_str().unwrap();
    let got = a.v1_get(&format!("{url}/tasks/{id}")).await;
    assert_eq!(got["artifacts"][0]["parts"][0]["text"], "echo: rest\n");
    let ctx = task["contextId"].as_str().unwrap();
    let listed = a.v1_get(&format!("{url}/tasks?contextId={ctx}")).await;
    assert_eq!(listed["tasks"][0]["id"], id);

    let missing = a
        .http
        .post(format!(
            "{url}/tasks/wkr_0123456789abcdef0123456789abcdef:cancel"
        ))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": {"code": 404, "status": "NOT_FOUND",
            "message": "task wkr_0123456789abcdef0123456789abcdef not found",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"},
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "WORKER_NOT_FOUND", "domain": "agentry.dev"}]}})
    );
    let canceled = a
        .http
        .post(format!("{url}/tasks/{id}:cancel"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(canceled.status(), 400);
    let body: Value = canceled.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_CANCELABLE");
    assert_eq!(
        body["error"]["message"],
        format!("task {id} is completed: it has ended")
    );

    let stream = a
        .http
        .post(format!("{url}/message:stream"))
        .header("A2A-Version", "1.0")
        .json(&v1_message("r-2", "rest stream"))
        .send()
        .await
        .unwrap();
    let events = a.sse(stream).await;
    assert!(events[0].get("task").is_some(), "{events:?}");
    assert_eq!(
        events.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[tokio::test]
async fn tenancy_and_lineage_are_the_grpc_apis() {
    let a = a2a_server(|c| tokens_file(c, "alice-token: alice\nbob-token: bob\n")).await;
    let card = a
        .http
        .get(format!("{}/a2a/echo/.well-known/agent-card.json", a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), 401);
    assert_eq!(card.headers()["www-authenticate"], "Bearer");
    let card: Value = a
        .http
        .get(format!("{}/a2a/echo/.well-known/agent-card.json", a.base))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["securitySchemes"]["bearer"]["scheme"], "bearer");
    assert_eq!(card["security"], json!([{"bearer": []}]));

    let unauth = a
        .http
        .post(format!("{}/a2a/echo", a.base))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": v03_message("t", "x")}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauth.status(), 401);
    let body: Value = unauth.json().await.unwrap();
    assert_eq!(body["error"]["message"], "missing bearer token");

    let alice = [("authorization", "Bearer alice-token")];
    let bob = [("authorization", "Bearer bob-token")];
    let r = a
        .rpc_as(
            "echo",
            None,
            "message/send",
            v03_message("t-1", "alice's"),
            &alice,
        )
        .await;
    let id = r["result"]["id"].as_str().unwrap().to_owned();
    let (code, _) = rpc_error(
        &a.rpc_as("echo", None, "tasks/get", json!({"id": id}), &bob)
            .await,
    );
    assert_eq!(code, -32001);
    let mine = a
        .rpc_as("echo", None, "tasks/get", json!({"id": id}), &alice)
        .await;
    assert_eq!(mine["result"]["id"], id.as_str());
    // The same messageId of another principal is another task.
    let r = a
        .rpc_as(
            "echo",
            None,
            "message/send",
            v03_message("t-1", "alice's"),
            &bob,
        )
        .await;
    assert_ne!(r["result"]["id"], id.as_str());

    // A worker's token alone makes the call that worker's child, of the worker's principal.
    let mut client = a.s.client.clone();
    let parent = client
        .spawn_worker(req(
            crate::workers::spawn_req("lead", "token, then sleep", false),
            &[("authorization", "Bearer alice-token")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    let token_file = a.s.dir.path().join("token");
    let token = eventually("the worker's token", Duration::from_secs(10), || {
        let p = token_file.clone();
        async move { std::fs::read_to_string(&p).map_err(|e| e.to_string()) }
    })
    .await;
    let child = a
        .rpc_as(
            "echo",
            None,
            "message/send",
            v03_message("t-2", "a child"),
            &[("x-agentry-worker-token", token.as_str())],
        )
        .await;
    let child_id = child["result"]["id"].as_str().expect("a task").to_owned();
    let w = client
        .get_worker(req(
            pb::GetWorkerRequest {
                worker_id: child_id,
            },
            &[("authorization", "Bearer alice-token")],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(w.parent_id, parent.id);
    assert_eq!(w.depth, 2);
}

#[tokio::test]
async fn a_question_is_answered_and_a_finished_task_refined() {
    let scripted = Scripted::start(json!([
        {"match": "\"content\":\"main\"", "tool_calls": [{"name": "submit_result", "arguments": {"result": "merged into main"}}]},
        {"match": "which branch", "tool_calls": [{"name": "ask_caller", "arguments": {"question": "Which branch?"}}]},
        {"match": "and tag it", "content": "tagged v1"},
    ]))
    .await;
    let a = a2a_server(|c| {
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
    let r = a
        .rpc(
            "merger",
            Some("1.0"),
            "SendMessage",
            v1_message("q-1", "which branch"),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "Which branch?"
    );
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    let id = task["id"].as_str().unwrap().to_owned();
    let ctx = task["contextId"].as_str().unwrap().to_owned();

    let mut answer = v1_message("q-2", "main");
    answer["message"]["taskId"] = json!(id);
    answer["message"]["contextId"] = json!(ctx);
    let r = a.rpc("merger", Some("1.0"), "SendMessage", answer).await;
    let task = &r["result"]["task"];
    assert_eq!(task["id"], id.as_str(), "{r}");
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "merged into main");

    // A refinement in the same context, referencing the finished task, continues it.
    let mut refine = v1_message("q-3", "and tag it");
    refine["message"]["contextId"] = json!(ctx);
    refine["message"]["referenceTaskIds"] = json!([id]);
    let r = a.rpc("merger", Some("1.0"), "SendMessage", refine).await;
    let task = &r["result"]["task"];
    assert_ne!(task["id"], id.as_str(), "{r}");
    assert_eq!(task["contextId"], ctx.as_str());
    assert_eq!(task["metadata"]["continues"], id.as_str());
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "tagged v1");
    let old = a
        .rpc("merger", Some("1.0"), "GetTask", json!({"id": id}))
        .await;
    assert_eq!(old["result"]["metadata"]["continuedBy"], task["id"]);
}

/// A server with `echo` (exec) and `asker` (the scripted model: asks "Which branch?", then
/// submits "merged into main" once answered "main"), for the SDK clients.
async fn clients_server() -> (A2aServer, Scripted) {
    let scripted = Scripted::start(json!([
        {"match": "\"content\":\"main\"", "repeat": true, "tool_calls": [{"name": "submit_result", "arguments": {"result": "merged into main"}}]},
        {"match": "which branch", "repeat": true, "tool_calls": [{"name": "ask_caller", "arguments": {"question": "Which branch?"}}]},
    ]))
    .await;
    let a = a2a_server(|c| {
        let exec = c.executor.command.clone();
        on_model(c, &scripted);
        c.executor.command = exec;
        c.executor
            .by_agent
            .insert("echo".into(), agentry::config::ExecutorKind::Exec);
        let dir = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &dir,
            "asker.md",
            "name: asker\ndescription: asks",
            "You ask.",
        );
    })
    .await;
    (a, scripted)
}

/// Runs an SDK client program; its `ok <check>` lines must be `checks`.
async fn run_client(mut cmd: tokio::process::Command, checks: &[&str]) {
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the client ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let ok: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    assert_eq!(ok, checks, "stdout:\n{stdout}\nstderr:\n{stderr}");
}

fn support(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(file)
}

#[tokio::test]
async fn a2a_sdk_python_client() {
    let Some(python) = installed("AGENTRY_TEST_A2A_PYTHON", "the A2A SDKs") else {
        return;
    };
    let (a, _scripted) = clients_server().await;
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(support("a2a_python_client.py"))
        .arg(format!("{}/a2a/echo", a.base))
        .arg(format!("{}/a2a/asker", a.base));
    run_client(
        cmd,
        &[
            "card",
            "send",
            "get",
            "list",
            "not-found",
            "stream",
            "cancel-subscribe",
            "input-required",
            "http-json",
            "grpc",
        ],
    )
    .await;
}

#[tokio::test]
async fn a2a_sdk_js_client() {
    let Some(modules) = installed("AGENTRY_TEST_A2A_NODE_MODULES", "the A2A SDKs") else {
        return;
    };
    let (a, _scripted) = clients_server().await;
    let mut cmd = tokio::process::Command::new("node");
    cmd.env("NODE_PATH", modules)
        .arg(support("a2a_js_client.mjs"))
        .arg(format!("{}/a2a/echo/.well-known/agent-card.json", a.base))
        .arg(format!("{}/a2a/asker/.well-known/agent-card.json", a.base));
    run_client(
        cmd,
        &[
            "card",
            "send",
            "get",
            "not-found",
            "stream",
            "cancel-resubscribe",
            "input-required",
        ],
    )
    .await;
}

/// A server whose agent `reporter` runs on a runner, and that runner, connected.
async fn reporter_server() -> (A2aServer, crate::runners::Runner) {
    use crate::runners::{Runner, hello};
    let a = a2a_server(|c| {
        c.executor
            .by_agent
            .insert("reporter".into(), agentry::config::ExecutorKind::Runner);
        let dir = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &dir,
            "reporter.md",
            "name: reporter\ndescription: reports",
            "Report.",
        );
    })
    .await;
    let runner = Runner::connect(&a.s, hello("r1", &["reporter"], 1)).await;
    (a, runner)
}

/// A runner's artifacts (docs §13.1): chunks appended in order, a file, the result last;
/// `GetWorker` shows them assembled, an A2A stream sends each chunk as it comes, `GetTask`
/// shows them in the A2A shape; a bad chunk is refused naming what was wrong.
#[tokio::test]
async fn a_runners_artifacts_are_assembled_and_streamed() {
    let (a, mut runner) = reporter_server().await;
    let stream = a
        .http
        .post(format!("{}/a2a/reporter", a.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": v1_message("art-1", "write a report")}),
        )
        .send()
        .await
        .unwrap();
    let streamed = tokio::spawn(async move { stream.text().await.unwrap() });
    let job = runner.assignment().await;
    runner.accept(&job).await;
    let chunk = |data: Value| {
        let (id, lease) = (job.worker_id.clone(), job.lease_token.clone());
        pb::connect_request::Msg::Progress(pb::RunnerProgress {
            worker_id: id,
            lease_token: lease,
            kind: pb::ProgressKind::Artifact as i32,
            text: String::new(),
            data_json: data.to_string(),
        })
    };
    for data in [
        json!({"artifact_id": "report", "name": "report", "parts": [{"text": "part one"}]}),
        json!({"artifact_id": "report", "parts": [{"text": " part two"}], "append": true, "last_chunk": true}),
        json!({"artifact_id": "logo", "parts": [{"file": {"name": "l.txt", "media_type": "text/plain", "bytes": "aGk="}}]}),
    ] {
        runner.send(chunk(data)).await;
    }
    // A bad chunk through ReportProgress, with the worker's token: refused, naming the field.
    let bad =
        a.s.client
            .clone()
            .report_progress(req(
                pb::ReportProgressRequest {
                    kind: pb::ProgressKind::Artifact as i32,
                    text: String::new(),
                    data_json: json!({"artifact_id": "result", "parts": []}).to_string(),
                },
                &[("x-agentry-worker-token", job.worker_token.as_str())],
            ))
            .await
            .unwrap_err();
    assert_bad_field(&bad, "data_json");
    assert!(bad.message().contains("is the worker's result"), "{bad:?}");
    let id = job.worker_id.clone();
    eventually("three artifact events", Duration::from_secs(10), || {
        let s = &a.s;
        let id = id.clone();
        async move {
            let w = get(s, &id).await;
            if w.artifacts.len() == 2 {
                Ok(())
            } else {
                Err(format!("{:?}", w.artifacts))
            }
        }
    })
    .await;
    runner.complete(&job, "done").await;
    let w = crate::workers::wait_state(&a.s, &id, pb::WorkerState::Completed).await;
    use pb::artifact_part::Content;
    let shown: Vec<(String, Vec<Option<Content>>)> = w
        .artifacts
        .iter()
        .map(|x| {
            (
                x.artifact_id.clone(),
                x.parts.iter().map(|p| p.content.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "report".to_owned(),
                vec![
                    Some(Content::Text("part one".into())),
                    Some(Content::Text(" part two".into()))
                ]
            ),
            (
                "logo".to_owned(),
                vec![Some(Content::File(pb::ArtifactFile {
                    name: "l.txt".into(),
                    media_type: "text/plain".into(),
                    content: Some(pb::artifact_file::Content::Bytes(b"hi".to_vec())),
                }))]
            ),
        ]
    );
    // The result is the A2A artifact `result`; on the gRPC API it is `result` itself.
    assert_eq!(w.result.as_deref(), Some("done"));

    let text = tokio::time::timeout(Duration::from_secs(10), streamed)
        .await
        .unwrap()
        .unwrap();
    let updates: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|e| e["result"].get("artifactUpdate").cloned())
        .collect();
    let seen: Vec<(String, bool, bool)> = updates
        .iter()
        .map(|u| {
            (
                u["artifact"]["artifactId"].as_str().unwrap().to_owned(),
                u["append"].as_bool().unwrap(),
                u["lastChunk"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("report".to_owned(), false, false),
            ("report".to_owned(), true, true),
            ("logo".to_owned(), false, false),
            ("result".to_owned(), false, true),
        ]
    );
    let got = a
        .rpc("reporter", Some("1.0"), "GetTask", json!({"id": id}))
        .await;
    assert_eq!(
        got["result"]["artifacts"][1]["parts"][0],
        json!({"raw": "aGk=", "filename": "l.txt", "mediaType": "text/plain"})
    );
    assert_eq!(
        got["result"]["artifacts"][0]["parts"][1]["text"],
        " part two"
    );
}

#[tokio::test]
async fn a_runner_may_decline_a_task() {
    let (a, mut runner) = reporter_server().await;
    let mut m = v03_message("rej-1", "paint the fence");
    m["configuration"] = json!({"blocking": false});
    let sent = a.rpc("reporter", None, "message/send", m).await;
    let id = sent["result"]["id"].as_str().unwrap().to_owned();
    let job = runner.assignment().await;
    // The runner's spec carries the A2A message (docs §13.3).
    let a2a = job.spec.clone().unwrap().a2a.unwrap();
    assert_eq!(a2a.message_id, "rej-1");
    assert_eq!(
        a2a.parts[0].content,
        Some(pb::artifact_part::Content::Text("paint the fence".into()))
    );
    runner.accept(&job).await;
    runner
        .finish(
            &job.worker_id,
            &job.lease_token,
            pb::runner_finished::Outcome::Rejected(pb::runner_finished::Rejected {
                reason: "not my job".into(),
            }),
        )
        .await;
    let w = crate::workers::wait_state(&a.s, &id, pb::WorkerState::Failed).await;
    assert!(w.rejected);
    assert_eq!(w.error.as_deref(), Some("rejected: not my job"));
    let old = a
        .rpc("reporter", None, "tasks/get", json!({"id": id}))
        .await;
    assert_eq!(old["result"]["status"]["state"], "rejected", "{old}");
    let new = a
        .rpc("reporter", Some("1.0"), "GetTask", json!({"id": id}))
        .await;
    assert_eq!(new["result"]["status"]["state"], "TASK_STATE_REJECTED");
    assert_eq!(
        new["result"]["status"]["message"]["parts"][0]["text"],
        "rejected: not my job"
    );
}

#[tokio::test]
async fn the_spec_carries_the_a2a_message() {
    let a = a2a_server(|_| {}).await;
    let r = a
        .rpc(
            "echo",
            Some("1.0"),
            "SendMessage",
            json!({"message": {"messageId": "spec-1", "contextId": "c-spec", "role": "ROLE_USER",
                "parts": [{"text": "show the spec"}, {"data": {"k": [1, 2]}}],
                "metadata": {"m": "x"}}}),
        )
        .await;
    let out = r["result"]["task"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    let spec: Value = serde_json::from_str(out).unwrap();
    assert_eq!(
        spec,
        json!({"message_id": "spec-1", "context_id": "c-spec",
            "parts": [{"text": "show the spec"}, {"data_json": "{\"k\":[1,2]}"}],
            "metadata_json": "{\"m\":\"x\"}"})
    );
    // The prompt is the parts as text, the data as JSON.
    let w = get(&a.s, r["result"]["task"]["id"].as_str().unwrap()).await;
    assert_eq!(w.description, "show the spec");
}

#[tokio::test]
async fn the_grpc_binding_answers_the_same() {
    use agentry::grpc::a2a_pb::{self as a2a, a2a_service_client::A2aServiceClient};
    use tonic_types::StatusExt;
    let a = a2a_server(|_| {}).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", a.s.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = A2aServiceClient::new(channel);
    let message = |id: &str, text: &str| a2a::Message {
        message_id: id.into(),
        role: a2a::Role::User as i32,
        parts: vec![a2a::Part {
            content: Some(a2a::part::Content::Text(text.into())),
            ..Default::default()
        }],
        ..Default::default()
    };
    let sent = c
        .send_message(a2a::SendMessageRequest {
            tenant: "echo".into(),
            message: Some(message("g-1", "over grpc")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let Some(a2a::send_message_response::Payload::Task(task)) = sent.payload else {
        panic!("not a task: {sent:?}");
    };
    let status = task.status.clone().unwrap();
    assert_eq!(status.state, a2a::TaskState::Completed as i32);
    assert!(status.timestamp.is_some());
    assert_eq!(
        task.artifacts[0].parts[0].content,
        Some(a2a::part::Content::Text("echo: over grpc\n".into()))
    );
    assert_eq!(task.history[0].message_id, "g-1");
    let got = c
        .get_task(a2a::GetTaskRequest {
            tenant: "echo".into(),
            id: task.id.clone(),
            history_length: Some(0),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.id, task.id);
    assert!(got.history.is_empty());
    let listed = c
        .list_tasks(a2a::ListTasksRequest {
            tenant: "echo".into(),
            context_id: task.context_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tasks.len(), 1);

    let mut stream = c
        .send_streaming_message(a2a::SendMessageRequest {
            tenant: "echo".into(),
            message: Some(message("g-2", "grpc stream")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(ev) = stream.message().await.unwrap() {
        events.push(ev.payload.unwrap());
    }
    assert!(matches!(events[0], a2a::stream_response::Payload::Task(_)));
    let Some(a2a::stream_response::Payload::StatusUpdate(last)) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(
        last.status.as_ref().unwrap().state,
        a2a::TaskState::Completed as i32
    );

    // Errors: the spec's codes with an ErrorInfo of domain a2a-protocol.org.
    let missing = c
        .get_task(a2a::GetTaskRequest {
            tenant: "echo".into(),
            id: "wkr_0123456789abcdef0123456789abcdef".into(),
            history_length: None,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert_eq!(
        missing.message(),
        "task wkr_0123456789abcdef0123456789abcdef not found"
    );
    let info = missing.get_details_error_info().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        ("TASK_NOT_FOUND", "a2a-protocol.org")
    );
    let push = c
        .create_task_push_notification_config(a2a::TaskPushNotificationConfig {})
        .await
        .unwrap_err();
    assert_eq!(push.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        push.get_details_error_info().unwrap().reason,
        "PUSH_NOTIFICATION_NOT_SUPPORTED"
    );
    let no_tenant = c
        .get_task(a2a::GetTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(no_tenant.code(), tonic::Code::InvalidArgument);
    assert!(
        no_tenant.message().starts_with("tenant: names the agent"),
        "{no_tenant:?}"
    );
    let other_agent = c
        .get_task(a2a::GetTaskRequest {
            tenant: "secret".into(),
            id: task.id.clone(),
            history_length: None,
        })
        .await
        .unwrap_err();
    assert_eq!(other_agent.code(), tonic::Code::NotFound);
}
