//! The console (docs/console.md §14) in a real browser: Debian's headless `chromium`, driven
//! through `chromedriver` (WebDriver over HTTP), against a running server; and its API's
//! authentication, tenancy and CSRF rules over plain HTTP.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use agentry::grpc::pb;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::runners::{Runner, fast, hello};
use crate::workers::spawn_req;

#[path = "../support/browser.rs"]
mod browser;
use browser::Browser;

/// A browser, or `None` (skipped) where chromedriver is not installed; under CI=true its
/// absence fails.
async fn browser() -> Option<Browser> {
    let driver = installed("AGENTRY_TEST_CHROMEDRIVER", "chromium and chromium-driver")?;
    let chromium =
        std::env::var("AGENTRY_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    Some(Browser::start(&driver, &chromium).await)
}

/// Where the test leaves its screenshot (the README shows a copy).
fn screenshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console.png")
}

/// A server with authentication (alice, bob; `ops` an operator), runner-backed workers, a
/// broken persona file, and the HTTP listener; its base URL.
async fn console_server() -> (TestServer, String) {
    let s = start_with(|c| {
        fast(c);
        c.runners.accept_timeout = Duration::from_secs(5);
        // The test's runner sends nothing while the browser works (seconds on a loaded
        // machine), and nothing here is about a runner going silent.
        c.runners.lease = Duration::from_secs(60);
        tokens_file(c, "alice-secret: alice\nbob-secret: bob\nops-secret: ops\n");
        c.auth.operators = vec!["ops".into()];
        c.http.listen = Some("127.0.0.1:0".into());
        let dir = c.home.clone().unwrap().join(".claude/agents");
        persona(
            &dir,
            "helper.md",
            "name: helper\ndescription: helps",
            "Help.",
        );
        std::fs::write(
            dir.join("broken.md"),
            "---\nname: broken\ndescription: [unclosed\n---\nbody\n",
        )
        .unwrap();
    })
    .await;
    let base = format!("http://{}", s.http.expect("the HTTP listener"));
    (s, base)
}

/// A spawn as `token`'s principal (or as the worker whose `worker_token` is given).
async fn spawn_as(s: &TestServer, token: &str, r: pb::SpawnWorkerRequest) -> pb::Worker {
    let md: Vec<(&'static str, String)> = match token.strip_prefix("w:") {
        Some(worker) => vec![("x-agentry-worker-token", worker.to_owned())],
        None => vec![("authorization", format!("Bearer {token}"))],
    };
    let md: Vec<(&'static str, &str)> = md.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.client
        .clone()
        .spawn_worker(req(r, &md))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap()
}

async fn get_as(s: &TestServer, token: &str, id: &str) -> pb::Worker {
    s.client
        .clone()
        .get_worker(req(
            pb::GetWorkerRequest {
                worker_id: id.into(),
            },
            &[("authorization", &format!("Bearer {token}"))],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap()
}

/// A server-sent event stream being read.
pub(crate) struct Sse(pub reqwest::Response, pub String);

impl Sse {
    /// The next named event and its JSON data, within 5 s.
    pub(crate) async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.1.find("\n\n") {
                let block: String = self.1.drain(..end + 2).collect();
                let mut name = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if !name.is_empty() {
                    return (name, serde_json::from_str(&data).unwrap());
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), self.0.chunk())
                .await
                .expect("an event in time")
                .unwrap()
                .expect("the stream goes on");
            self.1.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

/// Waits until `token`'s principal sees worker `id` in `state`.
async fn wait_state_as(
    s: &TestServer,
    token: &str,
    id: &str,
    state: pb::WorkerState,
) -> pb::Worker {
    eventually(
        &format!("worker {id} to be {state:?}"),
        Duration::from_secs(10),
        || async {
            let w = get_as(s, token, id).await;
            if w.state == state as i32 {
                Ok(w)
            } else {
                Err(format!("{w:?}"))
            }
        },
    )
    .await
}

/// The page, end to end in Chromium: log in; workers spawned through gRPC appear in the tree
/// within a second, a child under its parent; another principal's never do; the watch shows a
/// worker's events; a stop from the page kills the worker (gRPC says so) and the page shows it;
/// a message from the page reaches the runner; a broken persona file shows its diagnostic and
/// goes when it is fixed; the tree and the watch work from the keyboard; a screenshot is saved.
#[tokio::test]
async fn the_console_in_a_real_browser() {
    // The server first: it installs the TLS crypto provider reqwest needs.
    let (s, base) = console_server().await;
    let Some(browser) = browser().await else {
        return;
    };
    let mut runner = Runner::connect_as(
        &s,
        pb::RunnerHello {
            capabilities: vec!["messages".into(), "input".into()],
            ..hello("r1", &["*"], 4)
        },
        Some("alice-secret"),
    )
    .await;
    // Bob's worker exists before alice looks: it must never reach her page.
    let bobs = spawn_as(
        &s,
        "bob-secret",
        spawn_req("task", "bob's secret work", false),
    )
    .await;

    browser.goto(&format!("{base}/console")).await;
    browser
        .until(
            "the login form",
            Duration::from_secs(10),
            "return !document.getElementById('login').hidden",
        )
        .await;
    browser.type_into("#token", "alice-secret").await;
    browser.click("#login-form button").await;
    browser
        .until(
            "logged in as alice",
            Duration::from_secs(5),
            "return document.getElementById('who').textContent.startsWith('alice')",
        )
        .await;
    browser
        .until(
            "the tree stream is live",
            Duration::from_secs(5),
            "return document.getElementById('conn').textContent === 'live'",
        )
        .await;

    // A worker spawned through gRPC appears within a second.
    let parent = spawn_as(
        &s,
        "alice-secret",
        spawn_req("task", "lead the work", false),
    )
    .await;
    let seen = Instant::now();
    let row = format!("[data-worker-id=\"{}\"]", parent.id);
    browser
        .until(
            "the new worker in the tree",
            Duration::from_secs(1),
            &format!("return !!document.querySelector('{row}')"),
        )
        .await;
    eprintln!(
        "worker visible in the page {:?} after SpawnWorker returned",
        seen.elapsed()
    );
    let a = runner.assignment().await;
    assert_eq!(a.worker_id, parent.id);
    runner.accept(&a).await;
    wait_state_as(&s, "alice-secret", &parent.id, pb::WorkerState::Running).await;
    browser
        .until(
            "running shown",
            Duration::from_secs(2),
            &format!("return document.querySelector('{row}').dataset.state === 'running'"),
        )
        .await;
    runner
        .progress(&a.worker_id, &a.lease_token, "reading the repository", "")
        .await;
    browser
        .until("the progress line", Duration::from_secs(2), &format!("return document.querySelector('{row} > .row .latest').textContent === 'reading the repository'"))
        .await;

    // Its child, spawned with its worker token, sits under it.
    let child = spawn_as(
        &s,
        &format!("w:{}", a.worker_token),
        spawn_req("helper", "help the lead", false),
    )
    .await;
    let nested = format!("{row} > ul > [data-worker-id=\"{}\"]", child.id);
    browser
        .until(
            "the child under its parent",
            Duration::from_secs(1),
            &format!("return !!document.querySelector('{nested}')"),
        )
        .await;
    let c = runner.assignment().await;
    runner.accept(&c).await;

    // The watch: the worker's events, then a message from the page reaches the runner.
    browser.click(&format!("{row} > .row")).await;
    browser
        .until("the watch shows the progress event", Duration::from_secs(2), "return [...document.querySelectorAll('#events li')].some(li => li.textContent.includes('reading the repository'))")
        .await;
    browser
        .type_into("#message-text", "also check the tests")
        .await;
    browser.click("#message-form button").await;
    let got = loop {
        match runner.next().await {
            pb::connect_response::Msg::Message(m) => break m,
            _ => continue,
        }
    };
    assert_eq!(
        (got.worker_id.as_str(), got.text.as_str()),
        (parent.id.as_str(), "also check the tests")
    );
    browser
        .until("the page says the message was sent", Duration::from_secs(2), "return document.getElementById('action-status').textContent.startsWith('message sent')")
        .await;

    // Stop from the page: gRPC sees it killed with the reason, the page shows it.
    let child_row = format!("[data-worker-id=\"{}\"]", child.id);
    browser.click(&format!("{child_row} > .row")).await;
    browser
        .type_into("#stop-reason", "not needed any more")
        .await;
    browser.click("#stop-form button").await;
    let killed = wait_state_as(&s, "alice-secret", &child.id, pb::WorkerState::Killed).await;
    assert!(
        killed
            .error
            .as_deref()
            .unwrap_or("")
            .contains("not needed any more"),
        "{killed:?}"
    );
    browser
        .until(
            "killed shown",
            Duration::from_secs(2),
            &format!("return document.querySelector('{child_row}').dataset.state === 'killed'"),
        )
        .await;

    // Bob's worker never appeared; alice sees exactly her own.
    let shown = browser
        .js("return [...document.querySelectorAll('[data-worker-id]')].map(e => e.dataset.workerId)", json!([]))
        .await;
    let shown: Vec<String> = serde_json::from_value(shown).unwrap();
    assert!(
        !shown.contains(&bobs.id),
        "bob's worker on alice's page: {shown:?}"
    );
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(get_as(&s, "bob-secret", &bobs.id).await.caller, "bob");

    browser.screenshot(&screenshot_path()).await;

    // Without a mouse: from the lead's row, down to its child, Enter opens the child's watch,
    // Escape closes it and gives the focus back to the row.
    browser
        .js(
            &format!("document.querySelector('{row}').focus()"),
            json!([]),
        )
        .await;
    browser.keys(&["\u{E015}"]).await;
    browser
        .until(
            "the focus on the child",
            Duration::from_secs(2),
            &format!(
                "return document.activeElement.dataset.workerId === '{}'",
                child.id
            ),
        )
        .await;
    browser.click("#watch-close").await;
    browser
        .js(
            &format!("document.querySelector('{child_row}').focus()"),
            json!([]),
        )
        .await;
    browser.keys(&["\u{E007}"]).await;
    browser
        .until("Enter opens the watch", Duration::from_secs(2), &format!("return !document.getElementById('watch').hidden && document.getElementById('watch-title').textContent.includes('{}')", child.id))
        .await;
    browser.keys(&["\u{E00C}"]).await;
    browser
        .until("Escape closes it, the focus back on the row", Duration::from_secs(2), &format!("return document.getElementById('watch').hidden && document.activeElement.dataset.workerId === '{}'", child.id))
        .await;

    // The agents view: the broken file's diagnostic with its file; a fix makes it go.
    browser.click(".tab[data-view=\"agents\"]").await;
    browser
        .until("the broken file's diagnostic", Duration::from_secs(5), "return [...document.querySelectorAll('#diagnostics li')].some(li => li.textContent.includes('broken.md'))")
        .await;
    browser
        .until(
            "the helper agent listed",
            Duration::from_secs(2),
            "return !!document.querySelector('#agents tr[data-agent=\"helper\"]')",
        )
        .await;
    persona(
        &s.home().join(".claude/agents"),
        "broken.md",
        "name: broken\ndescription: mended",
        "Body.",
    );
    browser
        .until("the diagnostic gone after the fix (hot reload)", Duration::from_secs(10), "return ![...document.querySelectorAll('#diagnostics li')].some(li => li.textContent.includes('broken.md')) && !!document.querySelector('#agents tr[data-agent=\"broken\"]')")
        .await;
    // Another workspace's catalog: a refused one says why, in the page.
    browser.type_into("#workspace", "relative/path").await;
    browser.click("#workspace-form button").await;
    browser
        .until("the refused workspace named", Duration::from_secs(5), "return document.getElementById('agents-meta').textContent.startsWith('INVALID_ARGUMENT')")
        .await;
    browser.close().await;
}

/// The API's own rules over plain HTTP: no token → 401 naming it; a session's action without
/// the CSRF header, or from another origin → 403; with them it works; another principal's worker
/// is 404 exactly as on gRPC; the replicas view is for operators; a bad body names what is wrong;
/// the page's headers forbid everything but itself.
#[tokio::test]
async fn the_console_api_authenticates_and_refuses_cross_site_actions() {
    let (s, base) = console_server().await;
    let http = http_client();
    let page = http.get(format!("{base}/console")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");

    let no_token = http
        .get(format!("{base}/console/api/session"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);
    let body: Value = no_token.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": {"code": "UNAUTHENTICATED", "message": "missing bearer token"}})
    );

    let bad = http
        .post(format!("{base}/console/api/session"))
        .json(&json!({"token": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    assert_eq!(
        bad.json::<Value>().await.unwrap()["error"]["message"],
        "unknown bearer token"
    );

    let login = http
        .post(format!("{base}/console/api/session"))
        .json(&json!({"token": "alice-secret"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let session: Value = login.json().await.unwrap();
    assert_eq!(
        (session["principal"].as_str(), session["operator"].as_bool()),
        (Some("alice"), Some(false))
    );
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    assert_eq!(csrf.len(), 64);

    let w = spawn_as(&s, "alice-secret", spawn_req("helper", "a long job", false)).await;
    let stop = |headers: Vec<(&'static str, String)>, body: Value| {
        let mut r = http
            .post(format!("{base}/console/api/workers/{}/stop", w.id))
            .json(&body);
        for (k, v) in headers {
            r = r.header(k, v);
        }
        r.send()
    };
    // The cookie alone (what a cross-site form would carry) is refused.
    let r = stop(vec![("cookie", cookie.clone())], json!({"reason": "x"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "cross-site request refused"
    );
    // With the CSRF value but from another origin: refused.
    let r = stop(
        vec![
            ("cookie", cookie.clone()),
            ("x-agentry-csrf", csrf.clone()),
            ("origin", "http://evil.example".into()),
        ],
        json!({"reason": "x"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 403);
    // A reason that is not a string names the field.
    let r = stop(
        vec![("cookie", cookie.clone()), ("x-agentry-csrf", csrf.clone())],
        json!({"reason": 5}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        json!({"code": "INVALID_ARGUMENT", "message": "reason: must be a string"})
    );
    // Bob cannot see alice's worker: NOT_FOUND, as gRPC says it.
    let r = stop(
        vec![("authorization", "Bearer bob-secret".into())],
        json!({"reason": "mine now"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let grpc = s
        .client
        .clone()
        .stop_worker(req(
            pb::StopWorkerRequest {
                worker_id: w.id.clone(),
                reason: "mine now".into(),
            },
            &[("authorization", "Bearer bob-secret")],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        grpc.message()
    );
    // Alice's own page, done right: the worker is killed with her reason.
    let r = stop(
        vec![
            ("cookie", cookie.clone()),
            ("x-agentry-csrf", csrf.clone()),
            ("origin", base.clone()),
        ],
        json!({"reason": "from the console"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let stopped: Value = r.json().await.unwrap();
    assert_eq!(stopped["worker"]["state"], "WORKER_STATE_KILLED");
    assert!(
        get_as(&s, "alice-secret", &w.id)
            .await
            .error
            .unwrap()
            .contains("from the console")
    );

    // A message with an empty text: the RPC's own violation.
    let r = http
        .post(format!("{base}/console/api/workers/{}/message", w.id))
        .header("authorization", "Bearer alice-secret")
        .json(&json!({"text": " "}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "text: must not be empty"
    );
    // Not JSON: refused before anything runs.
    let r = http
        .post(format!("{base}/console/api/workers/{}/message", w.id))
        .header("authorization", "Bearer alice-secret")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("text=hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Replicas: operators only.
    let r = http
        .get(format!("{base}/console/api/replicas"))
        .header("authorization", "Bearer alice-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        json!({"code": "PERMISSION_DENIED",
               "message": "the replicas view is for operators (auth.operators); principal \"alice\" is not one"})
    );
    let r = http
        .get(format!("{base}/console/api/replicas"))
        .header("authorization", "Bearer ops-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"shared": false, "replicas": []})
    );

    // Logging out ends the session.
    let r = http
        .delete(format!("{base}/console/api/session"))
        .header("cookie", &cookie)
        .header("x-agentry-csrf", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = http
        .get(format!("{base}/console/api/session"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "console session expired"
    );
}

/// The tree stream: a snapshot, then each change as it happens, only the caller's workers; a
/// worker's watch resumes after `Last-Event-ID`.
#[tokio::test]
async fn the_tree_stream_sends_changes_and_the_watch_resumes() {
    let (s, base) = console_server().await;
    let http = http_client();
    let tree = http
        .get(format!("{base}/console/api/tree"))
        .header("authorization", "Bearer alice-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(tree.status(), 200);
    let mut tree = Sse(tree, String::new());
    let (name, snap) = tree.next().await;
    assert_eq!(name, "snapshot");
    assert_eq!(snap["workers"], json!([]));
    assert_eq!(snap["truncated"], false);
    let _bobs = spawn_as(&s, "bob-secret", spawn_req("helper", "bob's", false)).await;
    let mine = spawn_as(&s, "alice-secret", spawn_req("helper", "alice's", false)).await;
    let (name, burst) = tree.next().await;
    assert_eq!(name, "workers");
    let ids: Vec<&str> = burst["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![mine.id.as_str()], "only alice's worker: {burst}");
    assert_eq!(burst["workers"][0]["state"], "WORKER_STATE_PENDING");

    // The watch, resumed after sequence 1: the first event it sends is the second.
    s.client
        .clone()
        .stop_worker(req(
            pb::StopWorkerRequest {
                worker_id: mine.id.clone(),
                reason: "enough".into(),
            },
            &[("authorization", "Bearer alice-secret")],
        ))
        .await
        .unwrap();
    let watch = http
        .get(format!("{base}/console/api/workers/{}/watch", mine.id))
        .header("authorization", "Bearer alice-secret")
        .header("last-event-id", "1")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let first_id = watch
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .map(str::trim);
    assert_eq!(first_id, Some("2"), "{watch}");
    assert!(watch.contains("event: end"), "{watch}");
    let (name, burst) = tree.next().await;
    assert_eq!(name, "workers");
    assert_eq!(
        burst["workers"][0]["state"], "WORKER_STATE_KILLED",
        "{burst}"
    );

    // The snapshot's bound: the open workers first, `truncated` past `limit`; a bad limit named.
    let open = spawn_as(
        &s,
        "alice-secret",
        spawn_req("helper", "alice's second", false),
    )
    .await;
    let bounded = http
        .get(format!("{base}/console/api/tree?limit=1"))
        .header("authorization", "Bearer alice-secret")
        .send()
        .await
        .unwrap();
    let (name, snap) = Sse(bounded, String::new()).next().await;
    assert_eq!(name, "snapshot");
    let ids: Vec<&str> = snap["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        (ids, &snap["truncated"]),
        (vec![open.id.as_str()], &json!(true)),
        "{snap}"
    );
    let r = http
        .get(format!("{base}/console/api/tree?limit=0"))
        .header("authorization", "Bearer alice-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": {"code": "INVALID_ARGUMENT", "message": "limit: must be 1..=5000, not 0"}})
    );

    // Bob's watch of alice's worker: 404 as gRPC's NOT_FOUND.
    let r = http
        .get(format!("{base}/console/api/workers/{}/watch", mine.id))
        .header("authorization", "Bearer bob-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// Without authentication (docs §14.4): on loopback the page needs no login but its actions
/// still need the session's CSRF value; `:port` binds loopback; on another address the console
/// refuses, naming the setting.
#[tokio::test]
async fn without_authentication_the_console_is_for_loopback_only() {
    let s = start_with(|c| {
        fast(c);
        c.http.listen = Some(":0".into());
    })
    .await;
    // `:port` without authentication is loopback only.
    let bound = s.http.expect("the HTTP listener");
    assert_eq!(bound.ip(), std::net::Ipv4Addr::LOCALHOST);
    let base = format!("http://{bound}");
    let http = http_client();
    let session = http
        .get(format!("{base}/console/api/session"))
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 200);
    let cookie = session.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let body: Value = session.json().await.unwrap();
    assert_eq!(
        (
            body["principal"].as_str(),
            body["operator"].as_bool(),
            body["auth"].as_bool()
        ),
        (Some("anonymous"), Some(true), Some(false))
    );
    let w = crate::workers::spawn(&s, spawn_req("task", "stop me", false))
        .await
        .unwrap()
        .worker
        .unwrap();
    let stop = |csrf: Option<&str>| {
        let mut r = http
            .post(format!("{base}/console/api/workers/{}/stop", w.id))
            .json(&json!({"reason": "done"}));
        if let Some(c) = csrf {
            r = r.header("cookie", &cookie).header("x-agentry-csrf", c);
        }
        r.send()
    };
    // No session: any page on the machine could post this.
    let r = stop(None).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = stop(Some(body["csrf"].as_str().unwrap())).await.unwrap();
    assert_eq!(r.status(), 200);

    // Every address, no authentication: refused.
    let s2 = start_with(|c| c.http.listen = Some("0.0.0.0:0".into())).await;
    let open = s2.http.expect("the HTTP listener");
    assert!(open.ip().is_unspecified(), "bound {open}");
    let r = http
        .get(format!("http://127.0.0.1:{}/console/api/tree", open.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "the console needs authentication (auth.tokens_file) when the HTTP listener is not on loopback"
    );
}
