//! The executor seam: how the supervisor asks for one agent run, and what it gets back.
//!
//! This module owns the [`Executor`] trait and its plain-data [`Job`] and [`Outcome`] types, so
//! that a new way of running an agent (`exec`, `runner`, `model`) is a new submodule, not a
//! change to the supervisor. It must not depend on the worker store, the lifecycle state
//! machine or `tonic`: the supervisor translates its configuration into a [`Job`] and an
//! [`Outcome`] into a state transition. The one configuration it reads is the model executor's
//! plain-data keys (`models`, `model`, `mcp_servers`), from the leaf `config` module.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub mod a2a;
pub mod exec;
pub mod model;
pub mod route;
pub mod runner;
pub(crate) mod sse;
pub mod sweep;

pub use exec::ExecExecutor;
pub use model::{Meter, ModelExecutor};
pub use route::{ByKind, Kind};
pub use runner::RunnerExecutor;

use std::sync::Arc;

use crate::workers::spec::WorkerSpec;

/// What a runner needs beyond the stdin document (docs/runners.md): the spec as a value, the
/// worker's own token (handed to the runner, as `exec` hands it in the environment) and the
/// caller scope that decides which runners may be offered the worker.
#[derive(Clone)]
pub struct Assignment {
    /// The effective agent and the prompt.
    pub spec: WorkerSpec,
    /// The worker's `x-agentry-worker-token`.
    pub worker_token: String,
    /// The principal the worker belongs to (tenancy, docs/operations.md §8.2).
    pub caller_scope: String,
    /// The parent worker's models, for a persona whose model is `inherit` (docs/model.md
    /// §11.2); empty for a top-level caller.
    pub inherited_model: Vec<String>,
    /// The worker runs in plan mode (only read-only tools, docs/model.md §11.4).
    pub plan: bool,
    /// The worker is at the depth limit (its spawn tool's calls get the depth message).
    pub at_max_depth: bool,
    /// The worker is the review gate's reviewer, whose output schema is shown but not enforced
    /// (docs/review.md §7).
    pub review: bool,
    /// The worker whose transcript this run's conversation starts from (docs §12): its own (an
    /// answered question) or its predecessor's (a continuation); `None` for a fresh run.
    pub resume_from: Option<String>,
    /// Spawned with `interactive`: it may ask its caller (docs §12.4).
    pub interactive: bool,
    /// Where the supervisor posts that a message arrived for it (docs §12.2).
    pub mail: Arc<Mailbox>,
    /// For a continuation of a runner's worker: the worker it continues and the session
    /// reference its runner returned (docs §12.6).
    pub runner_resume: Option<(String, String)>,
    /// The session reference the runner returns with `finished`, recorded with the worker's
    /// end.
    pub session_ref: SessionRef,
}

/// A runner's session reference, set by the runner's `finished` and read by the supervisor
/// when it records the end (docs §12.6).
#[derive(Debug, Clone, Default)]
pub struct SessionRef(Arc<std::sync::Mutex<Option<String>>>);

impl SessionRef {
    /// Records the reference.
    pub fn set(&self, value: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }

    /// The reference, if one was recorded.
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The wake-up between a sent message and the run of its worker: the messages themselves are
/// in the store; this says there is something to take, and whether to interrupt.
#[derive(Debug, Default)]
pub struct Mailbox {
    pending: std::sync::atomic::AtomicBool,
    interrupt: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
}

impl Mailbox {
    /// A mailbox that already has something to take (a run that starts from messages).
    pub fn full() -> Self {
        let m = Self::default();
        m.pending.store(true, std::sync::atomic::Ordering::Release);
        m
    }

    /// A message was accepted for the worker; `interrupt` asks the run to take it at once.
    pub fn post(&self, interrupt: bool) {
        use std::sync::atomic::Ordering;
        self.pending.store(true, Ordering::Release);
        if interrupt {
            self.interrupt.store(true, Ordering::Release);
            self.wake.notify_waiters();
        }
    }

    /// Whether a message was posted since the last call; also clears a pending interruption
    /// (the messages are about to be taken).
    pub fn take_pending(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.interrupt.store(false, Ordering::Release);
        self.pending.swap(false, Ordering::AcqRel)
    }

    /// Resolves once an interrupting message is posted, or at once if one was posted and not
    /// taken yet.
    pub async fn interrupted(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.interrupt.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }
}

impl fmt::Debug for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Assignment")
            .field("worker_id", &self.spec.worker_id)
            .field("agent", &self.spec.agent.name)
            .field("caller_scope", &self.caller_scope)
            .finish_non_exhaustive()
    }
}

/// A boxed, `Send` future, so [`Executor`] stays object safe (`Arc<dyn Executor>`) and the
/// supervisor can move a run onto its own task.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything an executor needs to run one worker, already resolved by the supervisor.
///
/// `Debug` prints environment variable names only: the values include the worker's bearer
/// token (`AGENTRY_WORKER_TOKEN`), which must never reach a log line.
#[derive(Clone)]
pub struct Job {
    /// The worker this run belongs to; used for log fields, never for control flow.
    pub worker_id: String,
    /// One JSON document (docs §6.4), written to the child's stdin, after which stdin is closed
    /// so the agent sees end-of-file. It carries the prompt, which never goes into argv.
    pub stdin: Vec<u8>,
    /// Variables set on top of the inherited environment and the executor's configured
    /// environment (they win over both): `AGENTRY_ADDR`, `AGENTRY_WORKER_ID`,
    /// `AGENTRY_WORKER_TOKEN`, … so the child can spawn its own workers with its lineage.
    pub env: Vec<(String, String)>,
    /// The workspace to run in. Used when given and it is an existing directory; otherwise the
    /// child inherits the service's working directory.
    pub cwd: Option<PathBuf>,
    /// Wall-clock budget from spawn; past it the run is stopped and reported as timed out.
    pub timeout: Duration,
    /// How long a stop waits between SIGTERM and SIGKILL, so an agent can clean up.
    pub kill_grace: Duration,
    /// Upper bound on stdout in bytes. Going over fails the run — output is never silently
    /// truncated (docs §8.2).
    pub max_output_bytes: usize,
    /// The spec and the worker's identity as values, for executors that do not start a
    /// process (runners); `None` only in executor tests and benchmarks.
    pub assignment: Option<Arc<Assignment>>,
    /// Where an executor that calls a model counts its tokens; the supervisor records them
    /// with the terminal state.
    pub meter: Meter,
    /// Why the run is being stopped, set by the supervisor before it cancels (a runner's
    /// `cancel` carries it, docs/runners.md).
    pub stop_reason: StopReason,
    /// The token hash the worker's row has since a runner's replica claimed it and rotated its
    /// token (docs/runners.md, "Claim"), as that replica relayed it with the runner's
    /// `accepted`: set before the run says it started, so the start is written against the row
    /// as it is (a wrong or missing one costs only a read of the row).
    pub rotated_token: Arc<std::sync::OnceLock<String>>,
}

/// The reason of a stop, shared between the supervisor (which sets it before cancelling) and the
/// run (which reads it when the cancel arrives).
#[derive(Debug, Clone, Default)]
pub struct StopReason(Arc<std::sync::Mutex<Option<String>>>);

impl StopReason {
    /// Records why the run is stopped.
    pub fn set(&self, reason: &str) {
        *self.0.lock().expect("stop reason poisoned") = Some(reason.to_owned());
    }

    /// The recorded reason, if a stop gave one.
    pub fn get(&self) -> Option<String> {
        self.0.lock().expect("stop reason poisoned").clone()
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Job")
            .field("worker_id", &self.worker_id)
            .field("stdin_bytes", &self.stdin.len())
            .field("env", &env_names)
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("kill_grace", &self.kill_grace)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("assignment", &self.assignment)
            .finish()
    }
}

/// How one run ended. Every variant is terminal: when an executor returns it, nothing it
/// started is still running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The agent exited 0; `stdout` is its result (valid UTF-8, within the bound).
    Completed {
        /// The whole of stdout, untrimmed; output-schema validation trims it.
        stdout: String,
    },
    /// The agent ran but did not produce a usable result: non-zero exit, killed by a signal the
    /// executor did not send, stdout not UTF-8, or stdout over the bound.
    Failed {
        /// The exit code, when the process exited rather than being killed by a signal.
        exit_code: Option<i32>,
        /// The signal that ended the process, when it did not exit by itself.
        signal: Option<i32>,
        /// The last few KiB of stderr, which usually say why.
        stderr_tail: String,
        /// One line for the worker's `error` field, e.g. `exit status 3`.
        reason: String,
    },
    /// The run went past [`Job::timeout`] and was stopped; the process group is gone.
    TimedOut {
        /// The budget that was exceeded (the job's timeout), for the error message.
        after: Duration,
        /// The last few KiB of stderr, often the best clue to where it hung.
        stderr_tail: String,
    },
    /// The run was stopped through its cancellation token; the process group is gone.
    Killed,
    /// The agent asked its caller this question and its run ended: the worker waits in
    /// `input_required` for the answer (docs §12.4).
    Asked {
        /// The question.
        question: String,
    },
    /// The agent declined the task (a runner's or a remote A2A agent's `rejected`, docs
    /// §13.1): the worker fails with `rejected: <reason>`, marked rejected.
    Rejected {
        /// Why, in the agent's words.
        reason: String,
    },
    /// Nothing ran: the command is empty, missing, not executable, …
    CouldNotStart {
        /// Names the path and the OS error, e.g.
        /// `cannot start /nope/run-agent: No such file or directory (os error 2)`.
        reason: String,
    },
}
/// What a run says when its agent exists (`started`): whether its start may wait a moment to
/// be written with its end (docs/workers.md §6.2, "A start written with its end").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// A process this host just started: nothing it sends can reach the service before its
    /// program has loaded, so its start may wait `executor.start_hold` for its end.
    Process,
    /// Anything else (a runner's accept, a model loop, a remote agent), which may report at
    /// once: its start is written at once.
    Elsewhere,
}

/// Runs agents. Implementations must be cheap to share (`Arc<dyn Executor>`) and must leave
/// nothing running once the returned future has finished or been dropped.
pub trait Executor: Send + Sync + 'static {
    /// Whether a worker of `eff` can run here at all, checked before its row is written so
    /// that a spawn is refused (`FAILED_PRECONDITION`) rather than a worker failed: the model
    /// executor resolves the model and the MCP servers. `inherited` is the parent worker's
    /// models. The default accepts everything.
    fn admit(&self, eff: &crate::resolve::Effective, inherited: &[String]) -> Result<(), String> {
        let _ = (eff, inherited);
        Ok(())
    }

    /// Runs one job to the end.
    ///
    /// `started` fires once the agent exists (for `exec`: the process was spawned), so the
    /// supervisor can move the worker to `running`; it is dropped unfired when the run
    /// [could not start](Outcome::CouldNotStart) or `cancel` was already cancelled (then the
    /// outcome is [`Outcome::Killed`] and nothing was started). `cancel` asks for a stop:
    /// SIGTERM to the process group, SIGKILL after [`Job::kill_grace`], and
    /// [`Outcome::Killed`] only after the child has been reaped. Dropping the future mid-run
    /// also kills whatever it started.
    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> BoxFuture<'static, Outcome>;

    /// Whether workers of `agent` take follow-up messages (docs §12.1): `Err` with the reason
    /// code and message when they do not. The default: a process has no transcript.
    fn messages(
        &self,
        agent: &str,
        worker: &crate::workers::model::WorkerRecord,
    ) -> Result<(), (&'static str, String)> {
        let (_, worker_id) = (agent, &worker.id);
        Err((
            "NOT_RESUMABLE",
            format!(
                "worker {worker_id} runs on the exec executor: a process has no transcript to continue"
            ),
        ))
    }

    /// Hands a message accepted into the inbox of running worker `worker_id` to whatever runs
    /// it outside this process (a runner, docs §12.6). The default: nothing to hand it to (the
    /// model executor's own loop takes it from the store).
    fn deliver(&self, agent: &str, worker_id: &str, message: &crate::workers::store::Message) {
        let _ = (agent, worker_id, message);
    }

    /// Kills whatever is left of runs of these workers by an earlier process of the service
    /// (which was killed before it could stop them); called at start-up, before their rows are
    /// closed as orphaned. Returns how many processes were killed. An executor that starts
    /// nothing on this host has nothing to do.
    fn reap_leftovers(&self, worker_ids: &[&str]) -> usize {
        let _ = worker_ids;
        0
    }
}
