//! A headless Chromium session through chromedriver (WebDriver over HTTP), for the console's
//! browser test (tests/api/console.rs) and benchmark (benches/console.rs); shared by `#[path]`.

#![allow(dead_code)]

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// A headless Chromium session through chromedriver, which runs in its own process group: the
/// group (driver and browser) is killed when this is dropped, whatever the test did.
pub struct Browser {
    http: reqwest::Client,
    url: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `driver` (chromedriver) and a headless session of `chromium`.
    pub async fn start(driver: &str, chromium: &str) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new(driver);
        cmd.arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {driver}: {e}"));
        let profile = tempfile::tempdir().unwrap();
        let mut b = Browser {
            http: reqwest::Client::new(),
            url: format!("http://127.0.0.1:{port}"),
            driver: child,
            _profile: profile,
        };
        let started = Instant::now();
        loop {
            let ready = match b.http.get(format!("{}/status", b.url)).send().await {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver {driver} is not ready after 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1400,900",
                format!("--user-data-dir={}", b._profile.path().display()),
            ]}
        }}});
        let session = b.post("/session", caps).await;
        let id = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {session}"))
            .to_owned();
        b.url = format!("{}/session/{id}", b.url);
        b
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let v: Value = self
            .http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page, returning its value.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": args}))
            .await
    }

    /// Waits until `script` returns something truthy, within `within`; returns it.
    pub async fn until(&self, what: &str, within: Duration, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let v = self.js(script, json!([])).await;
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!("") && v != json!(0);
            if truthy {
                return v;
            }
            if started.elapsed() > within {
                panic!("{what}: not within {within:?} (last value {v})");
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }

    /// The element `css` matches (WebDriver's own lookup, so clicks are real input events).
    pub async fn find(&self, css: &str) -> String {
        let v = self
            .post("/element", json!({"using": "css selector", "value": css}))
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_owned()
    }

    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{e}/click"), json!({})).await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{e}/clear"), json!({})).await;
        self.post(&format!("/element/{e}/value"), json!({"text": text}))
            .await;
    }

    /// Presses `keys` (WebDriver key values, e.g. "\u{E015}" for the down arrow) in the focused
    /// element, one after the other.
    pub async fn keys(&self, keys: &[&str]) {
        let actions: Vec<Value> = keys
            .iter()
            .flat_map(|k| {
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        self.post(
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}),
        )
        .await;
    }

    /// Saves a PNG of the window at `path`.
    pub async fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let v: Value = self
            .http
            .get(format!("{}/screenshot", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().expect("a screenshot"))
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Ends the session (the browser exits) before the driver is killed.
    pub async fn close(self) {
        let _ = self.http.delete(&self.url).send().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.driver.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}
