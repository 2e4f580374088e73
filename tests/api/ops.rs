//! Operations through gRPC: bearer-token auth and its reload, the Unix-socket listener, and the
//! real binary's signal handling.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use agentry::grpc::{
    Listener,
    pb::{self, agent_registry_service_client::AgentRegistryServiceClient},
};
use nix::sys::signal::Signal;
use tonic::{Code, transport::Channel};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::{
    binary::{self, Binary, Launch},
    helpers::*,
};

fn list_req() -> pb::ListAgentsRequest {
    pb::ListAgentsRequest {
        page_size: 10,
        ..Default::default()
    }
}

/// A server whose tokens file (returned) maps `tok-alice` to `alice`.
async fn start_with_tokens() -> (TestServer, PathBuf) {
    let mut tokens = PathBuf::new();
    let s = start_with(|cfg| {
        let dir = cfg.home.as_ref().unwrap().parent().unwrap();
        tokens = dir.join("tokens.yaml");
        std::fs::write(&tokens, "tok-alice: alice\n").unwrap();
        cfg.auth.tokens_file = Some(tokens.clone());
    })
    .await;
    (s, tokens)
}

async fn list_with(s: &TestServer, md: &[(&'static str, &str)]) -> Result<(), tonic::Status> {
    s.client
        .clone()
        .list_agents(req(list_req(), md))
        .await
        .map(drop)
}

#[tokio::test]
async fn auth_refuses_a_missing_token() {
    let (s, _) = start_with_tokens().await;
    let e = list_with(&s, &[]).await.unwrap_err();
    assert_status(
        &e,
        Code::Unauthenticated,
        "UNAUTHENTICATED",
        "missing bearer token",
    );
    // A scheme other than Bearer is no bearer token either.
    let e = list_with(&s, &[("authorization", "Basic dG9rLWFsaWNl")])
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::Unauthenticated,
        "UNAUTHENTICATED",
        "missing bearer token",
    );
}

#[tokio::test]
async fn auth_refuses_an_unknown_token() {
    let (s, _) = start_with_tokens().await;
    let e = list_with(&s, &[("authorization", "Bearer tok-mallory")])
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::Unauthenticated,
        "UNAUTHENTICATED",
        "unknown bearer token",
    );
}

#[tokio::test]
async fn auth_accepts_a_known_token() {
    let (s, _) = start_with_tokens().await;
    list_with(&s, &[("authorization", "Bearer tok-alice")])
        .await
        .unwrap();
}

#[tokio::test]
async fn health_and_reflection_need_no_token() {
    let (s, _) = start_with_tokens().await;
    s.health
        .clone()
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    // Reflection is a bidi stream: getting its response stream open is enough.
    let mut refl = tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
        Channel::from_shared(format!("http://{}", s.addr))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let ask = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut answers = refl
        .server_reflection_info(tokio_stream::iter([ask]))
        .await
        .unwrap()
        .into_inner();
    assert!(answers.message().await.unwrap().is_some());
}

#[tokio::test]
async fn tokens_file_edits_apply_while_running() {
    let (s, tokens) = start_with_tokens().await;
    let bob = [("authorization", "Bearer tok-bob")];
    assert_eq!(
        list_with(&s, &bob).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    std::fs::write(&tokens, "tok-bob: bob\n").unwrap();
    eventually(
        "the new token to be accepted",
        Duration::from_secs(3),
        || async { list_with(&s, &bob).await.map_err(|e| format!("{e:?}")) },
    )
    .await;
    let e = list_with(&s, &[("authorization", "Bearer tok-alice")])
        .await
        .unwrap_err();
    assert_eq!(e.message(), "unknown bearer token");
}

/// A broken edit of the tokens file is read and refused — the service says so in its log — and
/// the tokens in force stay; a good edit after it applies. (Asserting only that the old token
/// still works after a while would pass as well if the file were never read again.)
#[tokio::test]
async fn a_broken_tokens_file_edit_is_refused_and_the_tokens_in_force_stay() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let tokens = root.join("tokens.yaml");
    std::fs::write(&tokens, "tok-bob: bob\n").unwrap();
    let config = binary::config(
        root,
        "auth",
        &format!(
            "{}auth: {{tokens_file: {}}}\n",
            binary::home_and_store(root, "auth"),
            tokens.display()
        ),
    );
    let server = binary::start(&config).await;
    let client = server.client().await;
    let list = |token: &'static str| {
        let mut c = client.clone();
        async move {
            c.list_agents(req(list_req(), &[("authorization", token)]))
                .await
                .map(drop)
        }
    };
    list("Bearer tok-bob").await.unwrap();
    std::fs::write(&tokens, "tok-bob: [oops\n").unwrap();
    server
        .log_until("tokens file not reloaded", Duration::from_secs(10))
        .await;
    list("Bearer tok-bob").await.unwrap();
    // The reload loop goes on: the next good edit applies.
    std::fs::write(&tokens, "tok-carol: carol\n").unwrap();
    eventually(
        "the edit after the broken one to apply",
        Duration::from_secs(10),
        || async { list("Bearer tok-carol").await.map_err(|e| format!("{e:?}")) },
    )
    .await;
    assert_eq!(
        list("Bearer tok-bob").await.unwrap_err().code(),
        Code::Unauthenticated
    );
}

#[tokio::test]
async fn a_bad_tokens_file_fails_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config_in(dir.path());
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, "- not\n- a mapping\n").unwrap();
    cfg.auth.tokens_file = Some(tokens.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = agentry::grpc::run(cfg, listener, std::future::pending())
        .await
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains(&tokens.display().to_string()), "{msg}");
    assert!(msg.contains("mapping"), "{msg}");
}

#[tokio::test]
async fn serves_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_in(dir.path());
    let sock = dir.path().join("agentry.sock");
    let listener = Listener::bind(&format!("unix:{}", sock.display()))
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(agentry::grpc::run(cfg, listener, async move {
        let _ = rx.await;
    }));
    let channel = binary::unix_channel(sock).await.unwrap();
    let resp = AgentRegistryServiceClient::new(channel.clone())
        .list_agents(list_req())
        .await
        .unwrap()
        .into_inner();
    assert!(names(&resp.agents).contains(&"explore".to_owned()));
    tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn print_addr_says_on_stdout_where_the_binary_listens() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let yaml = |name: &str| binary::home_and_store(root, name);
    let serves = |b: Binary| async move {
        let listed = b
            .client()
            .await
            .list_agents(list_req())
            .await
            .unwrap()
            .into_inner();
        assert!(names(&listed.agents).contains(&"explore".to_owned()));
    };
    // Port 0: the port the system chose, in the one line on stdout.
    let tcp = Launch::new(&binary::config(root, "tcp", &yaml("tcp")))
        .start()
        .await;
    let port: u16 = tcp
        .addr
        .strip_prefix("127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not 127.0.0.1:<port>: {:?}", tcp.addr));
    assert_ne!(port, 0);
    assert_eq!(tcp.stdout_lines(), [format!("listening 127.0.0.1:{port}")]);
    serves(tcp).await;
    // A Unix socket: its path.
    let sock = root.join("agentry.sock");
    let config = root.join("unix.yaml");
    std::fs::write(
        &config,
        format!("listen: unix:{}\n{}", sock.display(), yaml("unix")),
    )
    .unwrap();
    let unix = Launch::new(&config).start().await;
    assert_eq!(unix.addr, format!("unix:{}", sock.display()));
    assert_eq!(unix.stdout_lines(), [format!("listening {}", unix.addr)]);
    serves(unix).await;
    // The HTTP listener on port 0: the port the system chose, on a second line, and it answers.
    let with_http = Launch::new(&binary::config(
        root,
        "http",
        &format!("{}http: {{listen: '127.0.0.1:0'}}\n", yaml("http")),
    ))
    .start()
    .await;
    let http = with_http.http_addr().await;
    let http_port: u16 = http
        .strip_prefix("127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not 127.0.0.1:<port>: {http:?}"));
    assert_ne!(http_port, 0);
    assert_eq!(
        with_http.stdout_lines(),
        [
            format!("listening {}", with_http.addr),
            format!("http listening {http}")
        ]
    );
    let page = crate::helpers::http_client()
        .get(format!("http://{http}/console"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    serves(with_http).await;
}

/// The real binary with `grace` as its shutdown_grace, SERVING.
async fn with_grace(dir: &std::path::Path, grace: &str) -> Binary {
    let config = binary::config(
        dir,
        "agentry",
        &format!(
            "{}shutdown_grace: {grace}\nexecutor: {{kill_grace: 200ms}}\n",
            binary::home_and_store(dir, "agentry"),
        ),
    );
    Launch::new(&config).env("RUST_LOG", "info").start().await
}

/// Opens a health Watch and reads its first answer: a call that is in flight on the server
/// and never ends by itself, so a graceful drain has to wait for it.
async fn hang_a_call(b: &Binary) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    let mut watch = HealthClient::new(b.channel().await.unwrap())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    watch.message().await.unwrap().expect("a first status");
    watch
}

/// Waits for the exit; the status and how long it took from now.
async fn exit_within(b: &Binary, within: Duration) -> (std::process::ExitStatus, Duration) {
    let started = Instant::now();
    let status = b.exit_within(within).await;
    (status, started.elapsed())
}

#[tokio::test]
async fn sigterm_drains_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let b = with_grace(dir.path(), "5s").await;
    b.signal(Signal::SIGTERM);
    let (status, _) = exit_within(&b, Duration::from_secs(5)).await;
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_call_that_never_ends_is_cut_at_shutdown_grace() {
    let dir = tempfile::tempdir().unwrap();
    let b = with_grace(dir.path(), "1s").await;
    let _call = hang_a_call(&b).await;
    b.signal(Signal::SIGTERM);
    let (status, took) = exit_within(&b, Duration::from_secs(6)).await;
    assert!(status.success(), "{status:?}");
    assert!(
        took >= Duration::from_millis(800),
        "did not drain: {took:?}"
    );
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let b = with_grace(dir.path(), "60s").await;
    let _call = hang_a_call(&b).await;
    b.signal(Signal::SIGTERM);
    // The first signal has started the drain, which then goes on.
    b.log_until(
        "shutting down; a second signal exits at once",
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(b.try_wait().is_none(), "exited before the drain");
    b.signal(Signal::SIGINT);
    let (status, _) = exit_within(&b, Duration::from_secs(3)).await;
    assert!(!status.success(), "{status:?}");
}

/// The real binary's log lines up to its `agentry listening` line, as a user sees them (text
/// format, no colour), with `executor` as the whole `executor:` config value (none: defaults).
async fn start_up_log(dir: &std::path::Path, name: &str, executor: Option<&str>) -> Vec<String> {
    let mut yaml = binary::home_and_store(dir, name);
    if let Some(e) = executor {
        yaml.push_str(&format!("executor: {e}\n"));
    }
    let config = binary::config(dir, name, &yaml);
    let b = Launch::new(&config)
        .env("RUST_LOG", "info")
        .env_remove("OPENAI_API_KEY")
        .spawn()
        .await;
    b.log_until("agentry listening", Duration::from_secs(30))
        .await
}

#[tokio::test]
async fn logs_to_a_pipe_are_plain_text_and_arrive_whole() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = binary::home_and_store(dir.path(), "plain");
    let config = binary::config(dir.path(), "plain", &yaml);
    // No NO_COLOR: stderr is a pipe, which alone must turn colours off.
    let b = Launch::new(&config)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .start()
        .await;
    let log = b
        .log_until("agentry listening", Duration::from_secs(30))
        .await;
    assert!(
        log.iter().all(|l| !l.contains('\u{1b}')),
        "escape codes in a log that goes to a pipe: {log:?}"
    );
    // A line logged while serving arrives through the log thread, whole.
    b.client()
        .await
        .reload_agents(pb::ReloadAgentsRequest::default())
        .await
        .unwrap();
    let log = b
        .log_until("agents reloaded", Duration::from_secs(10))
        .await;
    let line = lines_with(&log, "agents reloaded")[0];
    assert!(line.contains("version="), "{line}");
    // Every finished RPC logs one line of its own, with the method, code and latency, and the
    // per-RPC span is not repeated in front of the lines logged inside the call.
    let log = b
        .log_until("rpc.method=ReloadAgents", Duration::from_secs(10))
        .await;
    let line = lines_with(&log, "rpc.method=ReloadAgents")[0];
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(time.ends_with('Z') && time.contains('T'), "{line}");
    let rest = rest
        .strip_prefix(
            " INFO agentry::rpc: rpc finished rpc.service=agentry.v1.AgentRegistryService \
             rpc.method=ReloadAgents code=Ok latency_ms=",
        )
        .unwrap_or_else(|| panic!("{line}"));
    assert!(rest.parse::<f64>().is_ok_and(|ms| ms >= 0.0), "{line}");
    assert!(
        !lines_with(&log, "agents reloaded")[0].contains("rpc{"),
        "{log:?}"
    );
}

#[tokio::test]
async fn the_per_rpc_line_can_be_filtered_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = binary::home_and_store(dir.path(), "quiet");
    let config = binary::config(dir.path(), "quiet", &yaml);
    let b = Launch::new(&config)
        .env("RUST_LOG", "info,agentry::rpc=warn")
        .start()
        .await;
    b.log_until("agentry listening", Duration::from_secs(30))
        .await;
    let mut client = b.client().await;
    client
        .reload_agents(pb::ReloadAgentsRequest::default())
        .await
        .unwrap();
    client
        .reload_agents(pb::ReloadAgentsRequest::default())
        .await
        .unwrap();
    // The first call's rpc line would be written before the second call was answered: once the
    // second reload's own line is there, so would it be.
    let log = eventually(
        "both reloads to be logged",
        Duration::from_secs(10),
        || async {
            let log = b.stderr();
            (log.matches("agents reloaded").count() == 2).then_some(log)
        },
    )
    .await;
    assert!(!log.contains("rpc finished"), "{log}");
}

fn lines_with<'a>(log: &'a [String], needle: &str) -> Vec<&'a String> {
    log.iter().filter(|l| l.contains(needle)).collect()
}

#[tokio::test]
async fn start_up_says_in_one_line_when_the_executor_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let missing = root.join("no-such-runtime");
    let not_executable = root.join("plain.sh");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    for (name, program, error) in [
        (
            "missing",
            &missing,
            "No such file or directory (os error 2)",
        ),
        ("plain", &not_executable, "Permission denied (os error 13)"),
        ("dir", &root.to_path_buf(), "not a regular file"),
    ] {
        let log = start_up_log(
            root,
            name,
            Some(&format!("{{command: [{}]}}", program.display())),
        )
        .await;
        let warning = lines_with(&log, "executor.command cannot run");
        assert_eq!(warning.len(), 1, "{name}: {log:#?}");
        let line = warning[0];
        assert!(line.contains(" WARN "), "{line}");
        assert!(
            line.contains(&format!("program=\"{}\"", program.display())),
            "{line}"
        );
        assert!(line.contains(&format!("error={error}")), "{line}");
        assert!(line.contains("set executor.command"), "{line}");
        assert!(lines_with(&log, "executor.command ready").is_empty());
    }
    // The embedded default, the README's first run: no executor configured (and no
    // OPENAI_API_KEY in the injected environment) says so once, naming both ways.
    let log = start_up_log(root, "default", None).await;
    let warning = lines_with(&log, "no executor is configured");
    assert_eq!(warning.len(), 1, "{log:#?}");
    assert!(warning[0].contains(" WARN ") && warning[0].contains("set OPENAI_API_KEY"));
    assert!(
        lines_with(&log, "executor.command cannot run").is_empty(),
        "{log:#?}"
    );
}

#[tokio::test]
async fn start_up_is_quiet_about_an_executor_that_can_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let runtime = script(&root.join("bin"), "run-agent", "cat");
    let log = start_up_log(
        root,
        "path",
        Some(&format!("{{command: [{}]}}", runtime.display())),
    )
    .await;
    assert!(lines_with(&log, "cannot run").is_empty(), "{log:#?}");
    let ready = lines_with(&log, "executor.command ready");
    assert_eq!(ready.len(), 1, "{log:#?}");
    assert!(ready[0].contains(&format!("program={}", runtime.display())));
    // A bare name is looked up on the PATH workers get.
    let log = start_up_log(
        root,
        "name",
        Some(&format!(
            "{{command: [run-agent], env: {{PATH: {}}}}}",
            root.join("bin").display()
        )),
    )
    .await;
    assert!(lines_with(&log, "cannot run").is_empty(), "{log:#?}");
    assert_eq!(lines_with(&log, "executor.command ready").len(), 1);
}
