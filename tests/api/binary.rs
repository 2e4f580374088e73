//! The real `agentry serve` as a child process. The child binds the address itself
//! (`listen: 127.0.0.1:0`, or a Unix socket) and says where with `--print-addr`, so no port is
//! ever guessed. Two threads read its stdout and stderr line by line for as long as it runs (the
//! pipes never fill), keeping every line for the test and for the panic messages; the child is
//! killed when the handle is dropped.

use std::{
    path::{Path, PathBuf},
    process::{Child, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use agentry::grpc::pb::agent_registry_service_client::AgentRegistryServiceClient;
use hyper_util::rt::TokioIo;
use nix::{sys::signal, unistd::Pid};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::helpers::eventually;

/// How long the child may take to say where it listens, to be SERVING, or to fail at start-up.
/// Generous: a debug build on a busy two-core machine.
const START_WITHIN: Duration = Duration::from_secs(30);

/// The line `--print-addr` prints before the address.
const LISTENING: &str = "listening ";

/// Writes `dir/<name>.yaml`: `listen: 127.0.0.1:0` (the child picks a free port), then `yaml`.
pub fn config(dir: &Path, name: &str, yaml: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, format!("listen: 127.0.0.1:0\n{yaml}")).unwrap();
    path
}

/// The `home` and SQLite `store` lines of a config whose files all live in `dir`, the store
/// named `<name>.db`.
pub fn home_and_store(dir: &Path, name: &str) -> String {
    format!(
        "home: {home}\nstore: {{path: {db}}}\n",
        home = dir.display(),
        db = dir.join(format!("{name}.db")).display(),
    )
}

/// Starts `agentry serve --config <config>` and waits until it is SERVING.
pub async fn start(config: &Path) -> Binary {
    Launch::new(config).start().await
}

/// Everything the child wrote so far, one entry per line.
#[derive(Default)]
struct Output {
    stdout: Vec<String>,
    stderr: Vec<String>,
    /// Streams that reached their end (0, 1 or 2).
    ended: usize,
}

/// Locks, also after a panic elsewhere poisoned the lock: what was collected is still right, and
/// a panic message (or `Drop`) must be able to show it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Output {
    fn show(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.join("\n"),
            self.stderr.join("\n")
        )
    }
}

/// How to start the binary: `serve --config <config> --print-addr` with a clean environment
/// (no inherited `AGENTRY_LISTEN` or OTLP endpoint, no colours in the log).
pub struct Launch {
    cmd: std::process::Command,
    config: PathBuf,
}

impl Launch {
    pub fn new(config: &Path) -> Self {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
        cmd.args(["serve", "--print-addr", "--config"])
            .arg(config)
            .env_remove("AGENTRY_LISTEN")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Self {
            cmd,
            config: config.to_owned(),
        }
    }

    /// Sets a variable in the child's environment.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Like [`Self::new`], with the child's address space (`RLIMIT_AS`) capped at `bytes`: a
    /// regression that allocates without bound then fails in the child (an allocation error,
    /// an abort) instead of taking the machine down with it. The limit is set by `sh`'s
    /// `ulimit -v`, which then `exec`s the binary (same pid; the crate forbids `unsafe`, so no
    /// `pre_exec`).
    pub fn with_address_space(config: &Path, bytes: u64) -> Self {
        let mut launch = Self::new(config);
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", bytes / 1024))
            .arg(env!("CARGO_BIN_EXE_agentry"))
            .args(launch.cmd.get_args());
        for (k, v) in launch.cmd.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        launch.cmd = cmd;
        launch
    }

    /// Removes a variable from the child's environment.
    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Spawns the child and waits for the address it listens on; it may not be SERVING yet.
    pub async fn spawn(self) -> Binary {
        let mut b = self.run();
        let output = b.output.clone();
        let child = b.child.clone();
        b.addr = eventually(
            &format!("{} to say where it listens", b.what),
            START_WITHIN,
            || async {
                let out = lock(&output);
                if let Some(line) = out.stdout.iter().find(|l| l.starts_with(LISTENING)) {
                    return Ok(line[LISTENING.len()..].to_owned());
                }
                let shown = out.show();
                drop(out);
                if let Some(status) = lock(&child).try_wait().unwrap() {
                    panic!("agentry serve exited ({status}) before it listened\n{shown}");
                }
                Err(shown)
            },
        )
        .await;
        b
    }

    /// Spawns the child and waits until it listens and its health is SERVING.
    pub async fn start(self) -> Binary {
        let b = self.spawn().await;
        b.wait_serving().await;
        b
    }

    /// Runs a server that must fail to start: waits for it to exit and for the end of its
    /// output, asserts the exit status is a failure and that it never said it was listening (a
    /// script waiting for that line must not take it as up), and returns its stderr.
    pub async fn fails(self) -> String {
        let b = self.run();
        let status = b.exit_within(START_WITHIN).await;
        assert!(
            !status.success(),
            "{} was expected to fail, exited {status}\n{}",
            b.what,
            b.output()
        );
        eventually(
            &format!("the end of the output of {}", b.what),
            START_WITHIN,
            || async { (lock(&b.output).ended == 2).then_some(()) },
        )
        .await;
        let out = lock(&b.output);
        assert!(
            !out.stdout.iter().any(|l| l.starts_with(LISTENING)),
            "{} printed a listening line although it did not start\n{}",
            b.what,
            out.show()
        );
        drop(out);
        b.stderr()
    }

    fn run(mut self) -> Binary {
        let mut child = self.cmd.spawn().unwrap();
        let output = Arc::new(Mutex::new(Output::default()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        collect(stdout, output.clone(), |o| &mut o.stdout);
        collect(stderr, output.clone(), |o| &mut o.stderr);
        Binary {
            what: format!(
                "agentry serve --config {} (pid {})",
                self.config.display(),
                child.id()
            ),
            pid: child.id() as i32,
            child: Arc::new(Mutex::new(child)),
            addr: String::new(),
            output,
        }
    }
}

/// Reads `from` line by line on its own thread into the lines `pick` chooses, until EOF.
fn collect(
    from: impl std::io::Read + Send + 'static,
    output: Arc<Mutex<Output>>,
    pick: fn(&mut Output) -> &mut Vec<String>,
) {
    use std::io::BufRead;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).into_owned();
            pick(&mut lock(&output)).push(line);
        }
        lock(&output).ended += 1;
    });
}

/// A channel over the Unix domain socket at `path`.
pub async fn unix_channel(path: PathBuf) -> Result<Channel, tonic::transport::Error> {
    // The URI is required by the API but unused: the connector ignores it.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
}

/// A running `agentry serve`; killed (SIGKILL) and reaped on drop. A test that panics while it
/// holds one prints the child's output.
pub struct Binary {
    /// The address it listens on, as it printed it: `127.0.0.1:41234` or `unix:/path`.
    pub addr: String,
    pid: i32,
    what: String,
    child: Arc<Mutex<Child>>,
    output: Arc<Mutex<Output>>,
}

impl Binary {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A channel to the server (TCP or Unix socket), connected now.
    pub async fn channel(&self) -> Result<Channel, tonic::transport::Error> {
        match self.addr.strip_prefix(agentry::grpc::listen::UNIX_PREFIX) {
            Some(path) => unix_channel(PathBuf::from(path)).await,
            None => {
                Channel::from_shared(format!("http://{}", self.addr))
                    .unwrap()
                    .connect()
                    .await
            }
        }
    }

    /// A registry client on a fresh channel.
    pub async fn client(&self) -> AgentRegistryServiceClient<Channel> {
        AgentRegistryServiceClient::new(self.channel().await.unwrap())
    }

    /// Waits until health (`""`) is SERVING; panics early, with the output, if the child exits.
    pub async fn wait_serving(&self) {
        eventually(
            &format!("{} to be SERVING", self.what),
            START_WITHIN,
            || async {
                if let Some(status) = self.try_wait() {
                    panic!("{} exited ({status})\n{}", self.what, self.output());
                }
                let ch = self.channel().await.map_err(|e| format!("{e:?}"))?;
                let status = HealthClient::new(ch)
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                    .map_err(|e| format!("{e:?}"))?
                    .into_inner()
                    .status;
                if status == ServingStatus::Serving as i32 {
                    Ok(())
                } else {
                    Err(format!("health status {status}"))
                }
            },
        )
        .await;
    }

    pub fn signal(&self, sig: signal::Signal) {
        signal::kill(Pid::from_raw(self.pid), sig).unwrap();
    }

    /// SIGKILL, then reaps it: no graceful path runs.
    pub fn kill_9(&self) {
        let mut child = lock(&self.child);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Its exit status, if it has exited (never blocks).
    pub fn try_wait(&self) -> Option<ExitStatus> {
        lock(&self.child).try_wait().unwrap()
    }

    /// Waits for it to exit, without blocking the runtime (a client on it must keep working).
    pub async fn exit_within(&self, within: Duration) -> ExitStatus {
        eventually(&format!("{} to exit", self.what), within, || async {
            self.try_wait().ok_or_else(|| "still running".to_owned())
        })
        .await
    }

    /// Everything it wrote so far, stdout then stderr.
    pub fn output(&self) -> String {
        lock(&self.output).show()
    }

    /// Its stderr (the log) so far.
    pub fn stderr(&self) -> String {
        lock(&self.output).stderr.join("\n")
    }

    /// The HTTP listener's address, from the `http listening <address>` line `--print-addr`
    /// prints after the listening line when `http.listen` is set.
    pub async fn http_addr(&self) -> String {
        const HTTP: &str = "http listening ";
        self.output_until("say where its HTTP listener is", START_WITHIN, |out| {
            let line = out.stdout.iter().find(|l| l.starts_with(HTTP))?;
            Some(line[HTTP.len()..].to_owned())
        })
        .await
    }

    /// Its stdout so far, one entry per line.
    pub fn stdout_lines(&self) -> Vec<String> {
        lock(&self.output).stdout.clone()
    }

    /// Waits for a stderr line containing `needle`; returns the log lines up to that one.
    pub async fn log_until(&self, needle: &str, within: Duration) -> Vec<String> {
        self.output_until(&format!("log {needle:?}"), within, |out| {
            let i = out.stderr.iter().position(|l| l.contains(needle))?;
            Some(out.stderr[..=i].to_vec())
        })
        .await
    }

    /// Waits until `find` finds what it looks for in the output so far; fails after `within`
    /// with everything the binary wrote, saying it did not `what`.
    async fn output_until<T>(
        &self,
        what: &str,
        within: Duration,
        find: impl Fn(&Output) -> Option<T>,
    ) -> T {
        eventually(&format!("{} to {what}", self.what), within, || async {
            let out = lock(&self.output);
            find(&out).ok_or_else(|| out.show())
        })
        .await
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
        if std::thread::panicking() {
            eprintln!("{} output:\n{}", self.what, self.output());
        }
    }
}

/// The harness's own promise: a child that exits before it listens fails the wait at once, and
/// the panic shows what the child said.
#[tokio::test]
#[should_panic(expected = "unknown field `listen_adress`")]
async fn a_child_that_exits_before_it_listens_fails_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "bad", "listen_adress: x\n");
    let started = std::time::Instant::now();
    let b = tokio::time::timeout(START_WITHIN / 2, Launch::new(&config).spawn()).await;
    panic!("no panic after {:?}: {}", started.elapsed(), b.is_ok());
}
