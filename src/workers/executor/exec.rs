//! The `exec` executor (docs §6.4, §6.5): one configured argv, started per worker in its own
//! process group, never through a shell.
//!
//! This module owns the child process from spawn to reap: feeding stdin, reading stdout (bounded)
//! and stderr (tail only) concurrently, the timeout, the SIGTERM → grace → SIGKILL stop path, and
//! the guarantee that nothing in the process group outlives the run — not after a normal exit,
//! not after a stop, not when the run future is dropped. It must not depend on the worker store,
//! the supervisor, configuration types or `tonic`; it sees only a [`Job`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{BoxFuture, Executor, Job, Outcome, Started, sweep};

/// How much of stderr a failed run keeps: enough for a stack trace's last frames, small enough
/// to store on every worker row.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// After the agent exits, how long to keep reading pipes that something outside its process
/// group (a daemon that called `setsid`) may still hold open. Inside the group everything is
/// killed at exit, so this only bounds the pathological case.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// While the pipes stay open after the exit, how often the worker's processes are swept again:
/// a process caught in `execve` during the sweep at exit cannot be read and is only found by a
/// later one.
const RESWEEP_EVERY: Duration = Duration::from_millis(50);

/// Read size for stdout and stderr.
const READ_CHUNK: usize = 16 * 1024;

/// Stands in for "no timeout" when `now + timeout` does not fit in an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Why the program of an [`ExecExecutor`] cannot be started, found by
/// [`ExecExecutor::preflight`] before any worker runs.
#[derive(Debug, thiserror::Error)]
pub enum CannotRun {
    /// The argv has no program at all.
    #[error("the command is empty")]
    Empty,
    /// A bare name (no `/`) that no `PATH` directory holds as an executable file.
    #[error("not found as an executable file in any PATH directory")]
    NotOnPath,
    /// The path exists but is a directory, a FIFO, a device…
    #[error("not a regular file")]
    NotAFile,
    /// The OS refused: missing file (ENOENT), no execute permission (EACCES), …
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Runs `executor.command` as a child process per worker.
///
/// Cheap to clone: the argv and environment are shared.
#[derive(Debug, Clone)]
pub struct ExecExecutor {
    /// `argv[0]` is the program (an absolute path, or a name looked up on `PATH`), the rest its
    /// fixed arguments. Per-worker data never goes here: it travels on stdin and in the
    /// environment.
    command: Arc<[String]>,
    /// Configured variables set on top of the inherited environment; a job's own variables win.
    env: Arc<BTreeMap<String, String>>,
}

impl ExecExecutor {
    /// An executor for `command` (argv, never parsed by a shell) with extra environment `env`.
    ///
    /// A relative program path with a `/` in it (`examples/agents/echo-agent`) is made absolute
    /// against the service's working directory here, once: a worker runs in its workspace, and
    /// the same path read from there would name another file or none. A bare name (`run-agent`)
    /// is left to the `PATH` lookup of every spawn.
    ///
    /// An empty `command` is accepted here and reported per run as
    /// [`Outcome::CouldNotStart`], so a misconfiguration shows up on the worker, not as a panic.
    pub fn new(mut command: Vec<String>, env: BTreeMap<String, String>) -> Self {
        if let Some(program) = command.first_mut()
            && program.contains('/')
            && Path::new(program).is_relative()
            && let Ok(abs) = std::path::absolute(&*program)
        {
            *program = abs.display().to_string();
        }
        Self {
            command: command.into(),
            env: Arc::new(env),
        }
    }

    /// The configured argv, for start-up logging and diagnostics.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// Checks, without running anything, that a spawn would find the program: resolved as
    /// `execvp` does (a path with a `/` as it is, a bare name on the `PATH` that workers get —
    /// the configured `env`'s, else the service's), it must exist, be a regular file and be
    /// executable by this process. Returns the resolved path.
    ///
    /// Only an early warning: every spawn resolves the program again, so a runtime installed
    /// after start-up is picked up without a restart.
    pub fn preflight(&self) -> Result<PathBuf, CannotRun> {
        let program = self.command.first().ok_or(CannotRun::Empty)?;
        if program.is_empty() {
            return Err(CannotRun::Empty);
        }
        if program.contains('/') {
            let path = PathBuf::from(program);
            check_executable(&path)?;
            return Ok(path);
        }
        let search: Option<OsString> = match self.env.get("PATH") {
            Some(p) => Some(p.into()),
            None => std::env::var_os("PATH"),
        };
        search
            .iter()
            .flat_map(std::env::split_paths)
            // An empty PATH entry means the current directory, as for execvp.
            .map(|dir| {
                if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                }
            })
            .map(|dir| dir.join(program))
            .find(|candidate| check_executable(candidate).is_ok())
            .ok_or(CannotRun::NotOnPath)
    }

    async fn run_job(
        self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> Outcome {
        let Some((program, args)) = self.command.split_first() else {
            return Outcome::CouldNotStart {
                reason: "cannot start: executor.command is empty".to_owned(),
            };
        };
        if cancel.is_cancelled() {
            // Stopped while still pending: nothing was started, so there is nothing to kill.
            return Outcome::Killed;
        }
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(self.env.iter())
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            // The cookie that finds this worker's processes wherever they go (see `sweep`).
            .env(sweep::COOKIE, &job.worker_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(dir) = job.cwd.as_deref().filter(|dir| dir.is_dir()) {
            command.current_dir(dir);
        }
        // Where `posix_spawn` runs: see [`Spawning`]. The group is made there too: should this
        // run be dropped meanwhile, dropping the group kills what was started.
        let worker_id = job.worker_id.clone();
        let spawn = move || {
            command
                .spawn()
                .map(|child| ProcessGroup::new(child, worker_id))
        };
        let spawned = match Spawning::enter() {
            Spawning::Alone(_count) => spawn(),
            Spawning::Crowded(_count) => tokio::task::spawn_blocking(spawn)
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e))),
        };
        let mut group = match spawned {
            Ok(group) => group,
            Err(err) => {
                return Outcome::CouldNotStart {
                    reason: format!("cannot start {program}: {err}"),
                };
            }
        };
        debug!(worker_id = %job.worker_id, pid = ?group.pgid.map(Pid::as_raw), "worker process started");
        // The supervisor may have stopped listening (the worker was stopped meanwhile); the
        // cancellation token, not this channel, tells us about that.
        let _ = started.send(Started::Process);
        supervise(&mut group, &job, &cancel).await
    }
}

impl Executor for ExecExecutor {
    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> BoxFuture<'static, Outcome> {
        Box::pin(self.clone().run_job(job, cancel, started))
    }

    fn reap_leftovers(&self, worker_ids: &[&str]) -> usize {
        sweep::kill_marked_afresh(worker_ids)
    }
}

/// Spawns under way in this process, counted by [`Spawning`].
static SPAWNS_UNDER_WAY: AtomicUsize = AtomicUsize::new(0);

/// Where one `posix_spawn` runs, counted among the spawns under way until dropped.
///
/// `posix_spawn` holds its thread until the child has exec'd (about 0.25 ms here). Alone, it
/// runs on the task's own thread: the other runtime threads are free, and the hand-offs to and
/// from the blocking pool cost a sequential `SpawnWorker {wait}` about 0.1 ms. While another
/// spawn is under way it goes to the blocking pool, so spawns arriving together never hold the
/// threads that serve requests (8 clients spawning in the background make about a quarter more
/// workers per second that way).
enum Spawning {
    /// No other spawn is under way: run it here.
    Alone(SpawnCount),
    /// Another one is: run it on the blocking pool.
    Crowded(SpawnCount),
}

impl Spawning {
    fn enter() -> Self {
        Self::enter_on(&SPAWNS_UNDER_WAY)
    }

    /// Counts one more spawn on `under_way`.
    fn enter_on(under_way: &'static AtomicUsize) -> Self {
        let count = SpawnCount(under_way);
        if under_way.fetch_add(1, Ordering::AcqRel) == 0 {
            Self::Alone(count)
        } else {
            Self::Crowded(count)
        }
    }
}

/// One spawn counted on its counter, until dropped.
struct SpawnCount(&'static AtomicUsize);

impl Drop for SpawnCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether `path` (symlinks followed) is a regular file this process may execute.
fn check_executable(path: &Path) -> Result<(), CannotRun> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(CannotRun::NotAFile);
    }
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).map_err(io::Error::from)?;
    Ok(())
}

/// Why a run was stopped by us rather than ending by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Cancelled,
    TimedOut,
    OutputTooLarge,
}

/// Drives a spawned child to the end: stdin, both pipes, the exit, the timeout and stops.
///
/// One `select!` loop over cancel-safe operations, so no helper task exists that could outlive
/// the run; dropping this future drops everything, and [`ProcessGroup`]'s `Drop` kills the group.
async fn supervise(group: &mut ProcessGroup, job: &Job, cancel: &CancellationToken) -> Outcome {
    let mut stdin = group.child.stdin.take().filter(|_| !job.stdin.is_empty());
    let mut stdout = group.child.stdout.take();
    let mut stderr = group.child.stderr.take();
    let mut written = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut err_tail = TailBuffer::new(STDERR_TAIL_BYTES);
    let mut out_chunk = vec![0u8; READ_CHUNK];
    let mut err_chunk = vec![0u8; READ_CHUNK];

    let started_at = Instant::now();
    let deadline = started_at
        .checked_add(job.timeout)
        .unwrap_or_else(|| started_at + FAR_FUTURE);
    let timeout = sleep_until(deadline);
    tokio::pin!(timeout);
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);

    let mut stop: Option<StopReason> = None;
    let mut kill_at: Option<Instant> = None;
    let mut drain_until: Option<Instant> = None;
    let mut resweep_at: Option<Instant> = None;
    let mut status: Option<ExitStatus> = None;

    loop {
        if status.is_some() && stdout.is_none() && stderr.is_none() {
            break;
        }
        // A stop is requested at most once; its handler runs after the select has dropped
        // every branch future, so it may touch any of the state above.
        let mut requested: Option<StopReason> = None;
        tokio::select! {
            res = group.wait(), if status.is_none() => match res {
                Ok(exit) => {
                    status = Some(exit);
                    stdin = None;
                    drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                    resweep_at = Some(Instant::now() + RESWEEP_EVERY);
                }
                Err(err) => {
                    warn!(worker_id = %job.worker_id, error = %err, "waiting for worker process failed");
                    return Outcome::Failed {
                        exit_code: None,
                        signal: None,
                        stderr_tail: err_tail.into_string(),
                        reason: format!("waiting for the process failed: {err}"),
                    };
                }
            },
            () = &mut cancelled, if status.is_none() && stop.is_none() => {
                requested = Some(StopReason::Cancelled);
            }
            () = &mut timeout, if status.is_none() && stop.is_none() => {
                requested = Some(StopReason::TimedOut);
            }
            () = sleep_until_opt(kill_at), if status.is_none() => {
                debug!(worker_id = %job.worker_id, "kill grace over, sending SIGKILL");
                group.signal(Signal::SIGKILL);
                kill_at = None;
            }
            () = sleep_until_opt(resweep_at) => {
                // Something still holds the pipes: a process of the worker the sweep at exit
                // missed (its environment was unreadable mid-exec), or one that never had the
                // cookie (it cleared its environment; the drain bound covers that one).
                let killed = sweep::kill_marked(&[&job.worker_id]);
                if killed > 0 {
                    debug!(worker_id = %job.worker_id, killed, "killed worker processes a later sweep found");
                }
                resweep_at = Some(Instant::now() + RESWEEP_EVERY);
            }
            () = sleep_until_opt(drain_until) => {
                debug!(worker_id = %job.worker_id, "pipes still open after exit, giving up on them");
                break;
            }
            res = write_some(&mut stdin, &job.stdin[written..]) => match res {
                Ok(n) => {
                    written += n;
                    if written >= job.stdin.len() {
                        stdin = None;
                    }
                }
                // EPIPE: the agent closed stdin without reading it all; that is its business.
                Err(_) => stdin = None,
            },
            res = read_some(&mut stdout, &mut out_chunk) => match res {
                Ok(0) | Err(_) => stdout = None,
                Ok(n) if stop.is_none() => {
                    if out.len() + n > job.max_output_bytes {
                        requested = Some(StopReason::OutputTooLarge);
                    } else {
                        out.extend_from_slice(&out_chunk[..n]);
                    }
                }
                // Stopping: keep the pipe flowing so a blocked writer can see its signal.
                Ok(_) => {}
            },
            res = read_some(&mut stderr, &mut err_chunk) => match res {
                Ok(0) | Err(_) => stderr = None,
                Ok(n) => err_tail.push(&err_chunk[..n]),
            },
        }
        if let Some(reason) = requested {
            debug!(worker_id = %job.worker_id, ?reason, "stopping worker process group");
            stop = Some(reason);
            stdin = None;
            group.signal(Signal::SIGTERM);
            kill_at = Some(Instant::now() + job.kill_grace);
        }
    }

    let stderr_tail = err_tail.into_string();
    let Some(status) = status else {
        // Unreachable by construction (the loop ends only once the exit is known), but a
        // wrong answer here must not be a panic in the supervisor.
        return Outcome::Failed {
            exit_code: None,
            signal: None,
            stderr_tail,
            reason: "process ended without an exit status".to_owned(),
        };
    };
    match stop {
        Some(StopReason::Cancelled) => Outcome::Killed,
        Some(StopReason::TimedOut) => Outcome::TimedOut {
            after: job.timeout,
            stderr_tail,
        },
        Some(StopReason::OutputTooLarge) => Outcome::Failed {
            exit_code: status.code(),
            signal: status.signal(),
            stderr_tail,
            reason: format!(
                "stdout exceeded executor.max_output_bytes ({} bytes)",
                job.max_output_bytes
            ),
        },
        None if status.success() => match String::from_utf8(out) {
            Ok(stdout) => Outcome::Completed { stdout },
            Err(err) => Outcome::Failed {
                exit_code: status.code(),
                signal: None,
                stderr_tail,
                reason: format!(
                    "stdout is not valid UTF-8 (invalid byte at offset {})",
                    err.utf8_error().valid_up_to()
                ),
            },
        },
        None => Outcome::Failed {
            exit_code: status.code(),
            signal: status.signal(),
            stderr_tail,
            reason: describe_exit(status),
        },
    }
}

/// `exit status 3`, `killed by signal 9 (SIGKILL)`.
fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(sig) => match Signal::try_from(sig) {
            Ok(named) => format!("killed by signal {sig} ({})", named.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        None => format!("ended abnormally ({status})"),
    }
}

/// The spawned child and its process group (the child leads it: `process_group(0)`).
///
/// Dropping it before the child was reaped SIGKILLs the whole group, so a caller that goes
/// away mid-run leaves no orphans; tokio reaps the killed child in the background.
struct ProcessGroup {
    /// The leader; its stdio handles are taken by [`supervise`].
    child: Child,
    /// The group id (= the leader's pid). `None` only if the OS gave no pid, in which case
    /// there is nothing we could signal anyway.
    pgid: Option<Pid>,
    /// The leader's exit status, set once it has been reaped; from then on the group is only
    /// swept, never killed on drop (its id could in principle be reused once the group is
    /// empty).
    status: Option<ExitStatus>,
    /// The sweep queued when the leader was reaped, until it answered.
    sweep: Option<oneshot::Receiver<usize>>,
    /// The worker's cookie value: processes that left the group are found by it.
    worker_id: String,
}

impl ProcessGroup {
    fn new(child: Child, worker_id: String) -> Self {
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        Self {
            child,
            pgid,
            status: None,
            sweep: None,
            worker_id,
        }
    }

    /// Sends `signal` to every process in the group. `ESRCH` (nobody left) is success.
    fn signal(&self, signal: Signal) {
        let Some(pgid) = self.pgid else { return };
        match killpg(pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => {
                warn!(pgid = pgid.as_raw(), %signal, error = %err, "cannot signal worker process group");
            }
        }
    }

    /// Waits for the leader to exit and reaps it, then SIGKILLs whatever is left in its group
    /// (background jobs of a shell script, children that ignored SIGTERM) and every process
    /// that left the group but carries the worker's cookie (a `setsid` daemon): the worker is
    /// over, so nothing it started may outlive it. Cancel safe: the reap, the group kill and
    /// the queueing of the sweep happen once, in one poll; a later call waits for the same
    /// sweep.
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = match self.status {
            Some(status) => status,
            None => {
                let status = self.child.wait().await?;
                self.status = Some(status);
                self.signal(Signal::SIGKILL);
                self.sweep = Some(sweep::after_exit(
                    &self.worker_id,
                    self.pgid.and_then(|pid| u32::try_from(pid.as_raw()).ok()),
                ));
                status
            }
        };
        if let Some(sweep) = &mut self.sweep {
            let escaped = sweep.await.unwrap_or(0);
            self.sweep = None;
            if escaped > 0 {
                debug!(worker_id = %self.worker_id, escaped, "killed worker processes outside its group");
            }
        }
        Ok(status)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.signal(Signal::SIGKILL);
            // The leader itself, should it have left its group: the sweep may know it from
            // before its `exec` (the scans remember what they read), when its environment was
            // still this service's, without the cookie.
            let _ = self.child.start_kill();
            sweep::kill_marked(&[&self.worker_id]);
        }
    }
}

/// Keeps the last `cap` bytes written to it, in amortised O(1) per byte.
struct TailBuffer {
    buf: Vec<u8>,
    cap: usize,
    /// Whether bytes were dropped from the front, i.e. the tail may start mid-character.
    cut: bool,
}

impl TailBuffer {
    fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            cut: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        if data.len() >= self.cap {
            self.cut |= !self.buf.is_empty() || data.len() > self.cap;
            self.buf.clear();
            self.buf.extend_from_slice(&data[data.len() - self.cap..]);
            return;
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() > 2 * self.cap {
            let excess = self.buf.len() - self.cap;
            self.buf.drain(..excess);
            self.cut = true;
        }
    }

    /// The last `cap` bytes as text: a character split by the cut is dropped, anything else
    /// that is not UTF-8 is replaced (stderr is for humans).
    fn into_string(self) -> String {
        let start = self.buf.len().saturating_sub(self.cap);
        let mut tail = &self.buf[start..];
        if self.cut || start > 0 {
            let skip = tail
                .iter()
                .take(3)
                .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
                .count();
            tail = &tail[skip..];
        }
        String::from_utf8_lossy(tail).into_owned()
    }
}

/// Reads from an optional pipe; a closed (`None`) pipe never becomes ready.
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Writes part of `data` to an optional pipe; a closed (`None`) pipe never becomes ready.
async fn write_some<W: AsyncWrite + Unpin>(pipe: &mut Option<W>, data: &[u8]) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.write(data).await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::time::Instant as StdInstant;

    use tempfile::TempDir;

    #[test]
    fn a_spawn_runs_in_place_only_while_no_other_one_is_under_way() {
        static UNDER_WAY: AtomicUsize = AtomicUsize::new(0);
        let first = Spawning::enter_on(&UNDER_WAY);
        assert!(matches!(first, Spawning::Alone(_)));
        let second = Spawning::enter_on(&UNDER_WAY);
        assert!(matches!(second, Spawning::Crowded(_)));
        drop(first);
        // The one still under way (on the pool) keeps the next one off this thread.
        let third = Spawning::enter_on(&UNDER_WAY);
        assert!(matches!(third, Spawning::Crowded(_)));
        drop((second, third));
        assert_eq!(UNDER_WAY.load(Ordering::Acquire), 0);
        assert!(matches!(Spawning::enter_on(&UNDER_WAY), Spawning::Alone(_)));
        assert_eq!(
            UNDER_WAY.load(Ordering::Acquire),
            0,
            "a dropped count is given back"
        );
    }

    /// Writes an executable `#!/bin/sh` script.
    fn script(dir: &TempDir, name: &str, body: &str) -> PathBuf {
        let path = dir.path().join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn executor(path: &Path) -> ExecExecutor {
        ExecExecutor::new(vec![path.display().to_string()], BTreeMap::new())
    }

    fn job(stdin: &[u8]) -> Job {
        Job {
            // Unique per run: the leftover sweep finds processes by it, and tests run in parallel.
            worker_id: crate::workers::model::WorkerId::generate().to_string(),
            stdin: stdin.to_vec(),
            env: Vec::new(),
            cwd: None,
            timeout: Duration::from_secs(30),
            kill_grace: Duration::from_secs(5),
            max_output_bytes: 1 << 20,
            assignment: None,
            meter: Default::default(),
            stop_reason: Default::default(),
            rotated_token: Default::default(),
        }
    }

    /// Runs a job, retrying the spawn on ETXTBSY: tests write scripts while other tests fork,
    /// and a forked child briefly holds the script's write descriptor until it execs.
    async fn run(ex: &ExecExecutor, job: Job, cancel: CancellationToken) -> Outcome {
        for _ in 0..20 {
            let (tx, _rx) = oneshot::channel();
            match ex.run(job.clone(), cancel.clone(), tx).await {
                Outcome::CouldNotStart { reason } if reason.contains("os error 26") => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                outcome => return outcome,
            }
        }
        panic!("script stayed busy (ETXTBSY)");
    }

    /// Whether `pid` is a live (non-zombie) process. Zombies count as dead: the container's
    /// init may never reap re-parented grandchildren.
    fn is_alive(pid: i32) -> bool {
        if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
            return false;
        }
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat
                    .rsplit_once(") ")
                    .and_then(|(_, rest)| rest.chars().next());
                !matches!(state, Some('Z' | 'X'))
            }
            Err(_) => false,
        }
    }

    /// Polls (real time) until every pid is dead; the kernel tears processes down asynchronously.
    fn assert_gone(pids: &[i32]) {
        let until = StdInstant::now() + Duration::from_secs(5);
        while pids.iter().any(|p| is_alive(*p)) {
            assert!(StdInstant::now() < until, "still alive: {pids:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reads a pid the script wrote, waiting (real time, off the runtime) until it is there.
    async fn wait_for_pid(path: PathBuf) -> i32 {
        tokio::task::spawn_blocking(move || {
            let until = StdInstant::now() + Duration::from_secs(10);
            loop {
                if let Ok(text) = fs::read_to_string(&path)
                    && let Ok(pid) = text.trim().parse()
                {
                    return pid;
                }
                assert!(
                    StdInstant::now() < until,
                    "{} never written",
                    path.display()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .await
        .unwrap()
    }

    /// A script that records its own pid and a background grandchild's pid, then blocks.
    fn long_runner(dir: &TempDir, prelude: &str) -> PathBuf {
        let d = dir.path().display();
        script(
            dir,
            "long.sh",
            &format!(
                "{prelude}\nsleep 1000 &\necho $! > {d}/grandchild.tmp && mv {d}/grandchild.tmp {d}/grandchild\n\
                 echo $$ > {d}/leader.tmp && mv {d}/leader.tmp {d}/leader\n\
                 while :; do sleep 0.05; done"
            ),
        )
    }

    #[tokio::test]
    async fn stdin_reaches_the_child_and_exit_zero_completes() {
        let dir = TempDir::new().unwrap();
        let path = script(&dir, "cat.sh", "cat");
        let input = br#"{"worker_id":"w1","prompt":"hello"}"#;
        let outcome = run(&executor(&path), job(input), CancellationToken::new()).await;
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: String::from_utf8(input.to_vec()).unwrap()
            }
        );
    }

    #[tokio::test]
    async fn argv_is_passed_verbatim_without_a_shell() {
        let dir = TempDir::new().unwrap();
        let path = script(
            &dir,
            "args.sh",
            r#"for a in "$@"; do printf '[%s]' "$a"; done"#,
        );
        let ex = ExecExecutor::new(
            vec![
                path.display().to_string(),
                "a b".into(),
                "$HOME".into(),
                "; echo no".into(),
            ],
            BTreeMap::new(),
        );
        let outcome = run(&ex, job(b""), CancellationToken::new()).await;
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: "[a b][$HOME][; echo no]".into()
            }
        );
    }

    #[tokio::test]
    async fn configured_and_job_env_reach_the_child_and_the_job_wins() {
        let dir = TempDir::new().unwrap();
        let path = script(
            &dir,
            "env.sh",
            r#"printf '%s|%s|%s' "$AGENTRY_WORKER_ID" "$FROM_CONFIG" "$SHARED""#,
        );
        let config_env = BTreeMap::from([
            ("FROM_CONFIG".to_owned(), "cfg".to_owned()),
            ("SHARED".to_owned(), "config".to_owned()),
        ]);
        let ex = ExecExecutor::new(vec![path.display().to_string()], config_env);
        let mut j = job(b"{}");
        j.env = vec![
            ("AGENTRY_WORKER_ID".into(), "w-42".into()),
            ("SHARED".into(), "job".into()),
        ];
        let outcome = run(&ex, j, CancellationToken::new()).await;
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: "w-42|cfg|job".into()
            }
        );
    }

    #[tokio::test]
    async fn runs_in_the_workspace_when_it_exists() {
        let dir = TempDir::new().unwrap();
        let workspace = TempDir::new().unwrap();
        let path = script(&dir, "pwd.sh", "pwd -P");
        let mut j = job(b"");
        j.cwd = Some(workspace.path().to_path_buf());
        let outcome = run(&executor(&path), j.clone(), CancellationToken::new()).await;
        let expected = workspace.path().canonicalize().unwrap();
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: format!("{}\n", expected.display())
            }
        );

        j.cwd = Some(workspace.path().join("missing"));
        let outcome = run(&executor(&path), j, CancellationToken::new()).await;
        assert!(
            matches!(outcome, Outcome::Completed { .. }),
            "a missing workspace falls back to the inherited cwd: {outcome:?}"
        );
    }

    #[tokio::test]
    async fn non_zero_exit_fails_with_code_and_stderr_tail() {
        let dir = TempDir::new().unwrap();
        let path = script(&dir, "fail.sh", "echo partial\necho 'it broke' >&2\nexit 3");
        let outcome = run(&executor(&path), job(b""), CancellationToken::new()).await;
        assert_eq!(
            outcome,
            Outcome::Failed {
                exit_code: Some(3),
                signal: None,
                stderr_tail: "it broke\n".into(),
                reason: "exit status 3".into(),
            }
        );
    }

    #[tokio::test]
    async fn a_signal_we_did_not_send_is_a_failure() {
        let dir = TempDir::new().unwrap();
        let path = script(&dir, "selfkill.sh", "kill -KILL $$");
        let outcome = run(&executor(&path), job(b""), CancellationToken::new()).await;
        let Outcome::Failed {
            exit_code,
            signal,
            reason,
            ..
        } = outcome
        else {
            panic!("expected Failed, got {outcome:?}");
        };
        assert_eq!((exit_code, signal), (None, Some(9)));
        assert_eq!(reason, "killed by signal 9 (SIGKILL)");
    }

    #[tokio::test]
    async fn stdout_over_the_bound_fails_and_kills_the_group() {
        let dir = TempDir::new().unwrap();
        let d = dir.path().display();
        let path = script(
            &dir,
            "flood.sh",
            &format!(
                "echo $$ > {d}/leader\nwhile :; do echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; done"
            ),
        );
        let mut j = job(b"");
        j.max_output_bytes = 1000;
        let outcome = run(&executor(&path), j, CancellationToken::new()).await;
        let Outcome::Failed { reason, .. } = &outcome else {
            panic!("expected Failed, got {outcome:?}");
        };
        assert_eq!(
            reason,
            "stdout exceeded executor.max_output_bytes (1000 bytes)"
        );
        let leader = wait_for_pid(dir.path().join("leader")).await;
        assert_gone(&[leader]);
    }

    #[tokio::test]
    async fn stdout_exactly_at_the_bound_completes() {
        let dir = TempDir::new().unwrap();
        let path = script(&dir, "four.sh", "printf abcd");
        let mut j = job(b"");
        j.max_output_bytes = 4;
        let outcome = run(&executor(&path), j, CancellationToken::new()).await;
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: "abcd".into()
            }
        );
    }

    #[tokio::test]
    async fn non_utf8_stdout_fails_with_a_reason() {
        let dir = TempDir::new().unwrap();
        let path = script(&dir, "bin.sh", r"printf 'ok\377'");
        let outcome = run(&executor(&path), job(b""), CancellationToken::new()).await;
        let Outcome::Failed {
            exit_code, reason, ..
        } = outcome
        else {
            panic!("expected Failed, got {outcome:?}");
        };
        assert_eq!(exit_code, Some(0));
        assert_eq!(
            reason,
            "stdout is not valid UTF-8 (invalid byte at offset 2)"
        );
    }

    #[tokio::test]
    async fn chatty_stderr_and_unread_large_stdin_do_not_deadlock() {
        let dir = TempDir::new().unwrap();
        // 1 MiB of stderr (far past the pipe buffer) while stdin, also 1 MiB, is never read.
        let path = script(
            &dir,
            "chatty.sh",
            "head -c 1048576 /dev/zero | tr '\\0' x >&2\necho 'last words' >&2\necho done",
        );
        let big = vec![b' '; 1 << 20];
        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            run(&executor(&path), job(&big), CancellationToken::new()),
        )
        .await
        .expect("deadlocked");
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: "done\n".into()
            }
        );
    }

    #[tokio::test]
    async fn stderr_tail_keeps_the_last_4_kib() {
        let dir = TempDir::new().unwrap();
        let path = script(
            &dir,
            "tail.sh",
            "i=0; while [ $i -lt 2000 ]; do printf 'é€x' >&2; i=$((i+1)); done\nprintf END >&2\nexit 1",
        );
        let outcome = run(&executor(&path), job(b""), CancellationToken::new()).await;
        let Outcome::Failed { stderr_tail, .. } = outcome else {
            panic!("expected Failed, got {outcome:?}");
        };
        assert!(stderr_tail.len() <= STDERR_TAIL_BYTES);
        assert!(stderr_tail.len() > STDERR_TAIL_BYTES - 6);
        assert!(stderr_tail.ends_with("é€xEND"));
        assert!(!stderr_tail.contains('\u{FFFD}'), "cut mid-character");
    }

    #[tokio::test]
    async fn leftover_background_processes_die_with_the_worker() {
        let dir = TempDir::new().unwrap();
        let d = dir.path().display();
        let path = script(
            &dir,
            "bg.sh",
            &format!("sleep 1000 &\necho $! > {d}/grandchild\necho result"),
        );
        let begun = StdInstant::now();
        let outcome = run(&executor(&path), job(b""), CancellationToken::new()).await;
        assert_eq!(
            outcome,
            Outcome::Completed {
                stdout: "result\n".into()
            }
        );
        assert!(
            begun.elapsed() < DRAIN_AFTER_EXIT,
            "waited on a pipe held by the grandchild"
        );
        let grandchild = wait_for_pid(dir.path().join("grandchild")).await;
        assert_gone(&[grandchild]);
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_stops_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let path = long_runner(&dir, "echo 'still thinking' >&2");
        let ex = executor(&path);
        let mut j = job(b"");
        j.timeout = Duration::from_secs(60);
        let handle = tokio::spawn(async move { run(&ex, j, CancellationToken::new()).await });
        // While this blocking wait is in flight the paused clock cannot jump to the deadline.
        let leader = wait_for_pid(dir.path().join("leader")).await;
        let grandchild = wait_for_pid(dir.path().join("grandchild")).await;
        let outcome = handle.await.unwrap();
        let Outcome::TimedOut { after, .. } = outcome else {
            panic!("expected TimedOut, got {outcome:?}");
        };
        assert_eq!(after, Duration::from_secs(60));
        assert_gone(&[leader, grandchild]);
    }

    #[tokio::test]
    async fn cancel_kills_the_group_and_reports_killed() {
        let dir = TempDir::new().unwrap();
        let path = long_runner(&dir, "");
        // `/bin/sh script`: no ETXTBSY retry needed, so `started` can be observed directly.
        let ex = ExecExecutor::new(
            vec!["/bin/sh".into(), path.display().to_string()],
            BTreeMap::new(),
        );
        let cancel = CancellationToken::new();
        let (tx, rx) = oneshot::channel();
        let handle = tokio::spawn(ex.run(job(b""), cancel.clone(), tx));
        rx.await.expect("started fires once the process exists");
        let leader = wait_for_pid(dir.path().join("leader")).await;
        let grandchild = wait_for_pid(dir.path().join("grandchild")).await;
        cancel.cancel();
        assert_eq!(handle.await.unwrap(), Outcome::Killed);
        assert!(!is_alive(leader), "Killed is returned only after the reap");
        assert_gone(&[grandchild]);
    }

    #[tokio::test]
    async fn a_child_that_traps_term_is_killed_after_the_grace() {
        let dir = TempDir::new().unwrap();
        let d = dir.path().display();
        let path = long_runner(&dir, &format!("trap 'echo term >> {d}/got-term' TERM"));
        let ex = executor(&path);
        let cancel = CancellationToken::new();
        let mut j = job(b"");
        let grace = Duration::from_millis(400);
        j.kill_grace = grace;
        let handle = tokio::spawn({
            let cancel = cancel.clone();
            async move { run(&ex, j, cancel).await }
        });
        let leader = wait_for_pid(dir.path().join("leader")).await;
        let grandchild = wait_for_pid(dir.path().join("grandchild")).await;
        let begun = StdInstant::now();
        cancel.cancel();
        assert_eq!(handle.await.unwrap(), Outcome::Killed);
        assert!(begun.elapsed() >= grace, "SIGKILL came before the grace");
        assert!(
            dir.path().join("got-term").exists(),
            "SIGTERM came first and was handled"
        );
        assert_gone(&[leader, grandchild]);
    }

    #[tokio::test]
    async fn dropping_the_run_future_kills_the_group() {
        let dir = TempDir::new().unwrap();
        let path = long_runner(&dir, "");
        let ex = executor(&path);
        let handle =
            tokio::spawn(async move { run(&ex, job(b""), CancellationToken::new()).await });
        let leader = wait_for_pid(dir.path().join("leader")).await;
        let grandchild = wait_for_pid(dir.path().join("grandchild")).await;
        handle.abort();
        assert!(handle.await.unwrap_err().is_cancelled());
        assert_gone(&[leader, grandchild]);
    }

    #[tokio::test]
    async fn a_job_cancelled_before_it_starts_spawns_nothing() {
        let dir = TempDir::new().unwrap();
        let d = dir.path().display();
        let path = script(&dir, "marker.sh", &format!("touch {d}/ran"));
        let cancel = CancellationToken::new();
        cancel.cancel();
        let (tx, rx) = oneshot::channel();
        let outcome = executor(&path).run(job(b""), cancel, tx).await;
        assert_eq!(outcome, Outcome::Killed);
        assert!(rx.await.is_err(), "started must not fire");
        assert!(!dir.path().join("ran").exists());
    }

    #[tokio::test]
    async fn missing_binary_could_not_start_naming_the_path() {
        let ex = ExecExecutor::new(vec!["/nope/run-agent".into()], BTreeMap::new());
        let (tx, rx) = oneshot::channel();
        let outcome = ex.run(job(b"{}"), CancellationToken::new(), tx).await;
        assert_eq!(
            outcome,
            Outcome::CouldNotStart {
                reason: "cannot start /nope/run-agent: No such file or directory (os error 2)"
                    .into()
            }
        );
        assert!(rx.await.is_err(), "started must not fire");
    }

    #[tokio::test]
    async fn non_executable_file_could_not_start() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("plain.sh");
        fs::write(&path, "#!/bin/sh\necho hi\n").unwrap();
        let outcome = run(&executor(&path), job(b""), CancellationToken::new()).await;
        let Outcome::CouldNotStart { reason } = outcome else {
            panic!("expected CouldNotStart, got {outcome:?}");
        };
        assert!(reason.starts_with(&format!("cannot start {}: ", path.display())));
        assert!(reason.contains("Permission denied"), "{reason}");
    }

    #[tokio::test]
    async fn empty_command_could_not_start() {
        let ex = ExecExecutor::new(Vec::new(), BTreeMap::new());
        let (tx, _rx) = oneshot::channel();
        let outcome = ex.run(job(b""), CancellationToken::new(), tx).await;
        assert!(
            matches!(&outcome, Outcome::CouldNotStart { reason } if reason.contains("empty")),
            "{outcome:?}"
        );
    }

    #[test]
    fn preflight_resolves_like_execvp_and_names_the_os_error() {
        let dir = TempDir::new().unwrap();
        let good = script(&dir, "agent", "cat");
        assert_eq!(executor(&good).preflight().unwrap(), good);

        let missing = executor(&dir.path().join("nope")).preflight().unwrap_err();
        assert_eq!(
            missing.to_string(),
            "No such file or directory (os error 2)"
        );

        let plain = dir.path().join("plain.sh");
        fs::write(&plain, "#!/bin/sh\necho hi\n").unwrap();
        let e = executor(&plain).preflight().unwrap_err();
        assert_eq!(e.to_string(), "Permission denied (os error 13)");

        let e = executor(dir.path()).preflight().unwrap_err();
        assert!(matches!(e, CannotRun::NotAFile), "{e:?}");

        let e = ExecExecutor::new(Vec::new(), BTreeMap::new())
            .preflight()
            .unwrap_err();
        assert!(matches!(e, CannotRun::Empty), "{e:?}");
    }

    #[test]
    fn preflight_searches_the_path_workers_get() {
        let dir = TempDir::new().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        let found = bin.join("my-agent");
        fs::write(&found, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&found, fs::Permissions::from_mode(0o755)).unwrap();
        // A non-executable file of the same name earlier on the PATH is skipped, as execvp does.
        let shadow = dir.path().join("my-agent");
        fs::write(&shadow, "#!/bin/sh\n").unwrap();
        let path = format!("{}:{}", dir.path().display(), bin.display());
        let env = BTreeMap::from([("PATH".to_owned(), path)]);
        let ex = ExecExecutor::new(vec!["my-agent".into()], env.clone());
        assert_eq!(ex.preflight().unwrap(), found);

        let ex = ExecExecutor::new(vec!["no-such-agent".into()], env);
        assert!(matches!(ex.preflight(), Err(CannotRun::NotOnPath)));
    }

    #[test]
    fn a_relative_program_path_is_made_absolute_once() {
        let ex = ExecExecutor::new(
            vec!["examples/agents/echo-agent".into(), "--flag".into()],
            BTreeMap::new(),
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            ex.command(),
            [
                cwd.join("examples/agents/echo-agent").display().to_string(),
                "--flag".to_owned()
            ]
        );
        // A bare name stays a name for the PATH lookup.
        let ex = ExecExecutor::new(vec!["run-agent".into()], BTreeMap::new());
        assert_eq!(ex.command(), ["run-agent"]);
    }

    #[test]
    fn tail_buffer_cuts_on_a_char_boundary() {
        let mut tail = TailBuffer::new(4);
        tail.push("aé€".as_bytes()); // 1 + 2 + 3 bytes: the last 4 start inside 'é'
        assert_eq!(tail.into_string(), "€");

        let mut tail = TailBuffer::new(4);
        for _ in 0..10 {
            tail.push(b"ab");
        }
        assert_eq!(tail.into_string(), "abab");

        let mut tail = TailBuffer::new(8);
        tail.push(b"short");
        assert_eq!(tail.into_string(), "short");
    }

    #[test]
    fn job_debug_hides_env_values() {
        let mut j = job(b"{\"prompt\":\"secret plan\"}");
        j.env = vec![("AGENTRY_WORKER_TOKEN".into(), "s3cr3t".into())];
        let text = format!("{j:?}");
        assert!(text.contains("AGENTRY_WORKER_TOKEN"));
        assert!(!text.contains("s3cr3t"));
        assert!(!text.contains("secret plan"));
    }
}
