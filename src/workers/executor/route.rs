//! Executor selection by agent (`executor.kind`, `executor.by_agent`, docs/runners.md,
//! docs/model.md): one [`Executor`] in front of `exec`, `runner` and `model` that picks per job,
//! so the supervisor keeps a single executor and does not know there are three.

use std::{collections::BTreeMap, sync::Arc};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{BoxFuture, Executor, Job, Outcome, Started};

/// Which executor runs an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A process on this host.
    Exec,
    /// A connected runner.
    Runner,
    /// agentry's own agent loop.
    Model,
    /// A remote persona's A2A agent (docs §13.4): chosen by the persona, not the configuration.
    A2a,
    /// Nothing is configured: every spawn is refused with [`NO_EXECUTOR`].
    Unconfigured,
}

/// Why a spawn is refused when no executor is configured (docs/model.md §11.1).
pub const NO_EXECUTOR: &str = "no executor is configured: set executor.command (or executor.kind) in the config file, or set OPENAI_API_KEY to run workers on the model executor";

/// Routes each job to the executor of its agent's kind.
pub struct ByKind {
    exec: Arc<dyn Executor>,
    runner: Arc<dyn Executor>,
    model: Arc<dyn Executor>,
    a2a: Arc<dyn Executor>,
    default: Kind,
    by_agent: BTreeMap<String, Kind>,
}

impl ByKind {
    /// `default` for every agent not in `by_agent`.
    pub fn new(
        exec: Arc<dyn Executor>,
        runner: Arc<dyn Executor>,
        model: Arc<dyn Executor>,
        a2a: Arc<dyn Executor>,
        default: Kind,
        by_agent: BTreeMap<String, Kind>,
    ) -> Self {
        Self {
            exec,
            runner,
            model,
            a2a,
            default,
            by_agent,
        }
    }

    /// The kind that runs `agent` (a local persona: the configuration decides).
    pub fn kind_of(&self, agent: &str) -> Kind {
        self.by_agent.get(agent).copied().unwrap_or(self.default)
    }

    /// The kind that runs a worker: a remote persona's on the `a2a` executor, whatever the
    /// configuration says of its name.
    fn kind_for(&self, agent: &str, remote: bool) -> Kind {
        if remote {
            Kind::A2a
        } else {
            self.kind_of(agent)
        }
    }
}

impl Executor for ByKind {
    fn admit(&self, eff: &crate::resolve::Effective, inherited: &[String]) -> Result<(), String> {
        match self.kind_for(&eff.name, eff.remote.is_some()) {
            Kind::Exec => self.exec.admit(eff, inherited),
            Kind::Runner => self.runner.admit(eff, inherited),
            Kind::Model => self.model.admit(eff, inherited),
            Kind::A2a => self.a2a.admit(eff, inherited),
            Kind::Unconfigured => Err(NO_EXECUTOR.to_owned()),
        }
    }

    fn run(
        &self,
        job: Job,
        cancel: CancellationToken,
        started: oneshot::Sender<Started>,
    ) -> BoxFuture<'static, Outcome> {
        let (agent, remote) = job
            .assignment
            .as_ref()
            .map(|a| (a.spec.agent.name.clone(), a.spec.agent.remote.is_some()))
            .unwrap_or_default();
        match self.kind_for(&agent, remote) {
            Kind::Exec => self.exec.run(job, cancel, started),
            Kind::Runner => self.runner.run(job, cancel, started),
            Kind::Model => self.model.run(job, cancel, started),
            Kind::A2a => self.a2a.run(job, cancel, started),
            Kind::Unconfigured => Box::pin(async {
                Outcome::CouldNotStart {
                    reason: NO_EXECUTOR.to_owned(),
                }
            }),
        }
    }

    fn messages(
        &self,
        agent: &str,
        worker: &crate::workers::model::WorkerRecord,
    ) -> Result<(), (&'static str, String)> {
        let worker_id = &worker.id;
        match self.kind_for(agent, worker.spec.effective.remote.is_some()) {
            Kind::Model => Ok(()),
            Kind::A2a => self.a2a.messages(agent, worker),
            Kind::Runner => self.runner.messages(agent, worker),
            Kind::Exec | Kind::Unconfigured => Err((
                "NOT_RESUMABLE",
                format!(
                    "worker {worker_id} runs on the exec executor: a process has no transcript to continue"
                ),
            )),
        }
    }

    fn deliver(&self, agent: &str, worker_id: &str, message: &crate::workers::store::Message) {
        if self.kind_of(agent) == Kind::Runner {
            self.runner.deliver(agent, worker_id, message);
        }
    }

    fn reap_leftovers(&self, worker_ids: &[&str]) -> usize {
        // Runners run nothing on this host; their workers' rows are closed like any orphan.
        self.exec.reap_leftovers(worker_ids)
    }
}
