//! The service's operations in domain terms: every RPC of `AgentRegistryService` is one call
//! here, taking who is calling ([`Identity`]) and a validated request, and returning a domain
//! value or an [`Error`]. `grpc` only translates to and from the wire.
//!
//! Every operation first resolves the caller's lineage (docs/lineage.md §5.1): a worker token
//! that is not a live worker's is refused on every RPC, so a worker sees one lineage everywhere.

use std::sync::Arc;

use crate::{
    discovery::{AgentDef, CommandDef, DiscoveryError, Registry, Snapshot},
    paging::PageError,
    resolve::{
        self, Effective, Mode, Rules, SpawnDenied,
        command::CommandError,
        listing::{self, AgentPage, AgentQuery, CommandPage, CommandQuery},
    },
    review::{self, Proposal, Verdict},
    workers::{
        model::{Progress, WorkerId, WorkerRecord},
        supervisor::{
            EventStream, Identity, Lineage, SpawnRequest, Spawned, Supervisor, Visibility,
            WorkerError, WorkersPage, WorkersQuery,
        },
    },
};

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A worker operation failed (including lineage: an unknown worker token).
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The workspace was refused or the bundled agents are broken.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// No such agent, or it may not be resolved.
    #[error(transparent)]
    Denied(#[from] SpawnDenied),
    /// A page token was refused.
    #[error("page_token {0}")]
    Page(#[from] PageError),
    /// No such command, or its expansion is too large.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// `ReportProgress` without the calling worker's token.
    #[error("ReportProgress needs the calling worker's own x-agentry-worker-token")]
    WorkerTokenRequired,
    /// An operator's RPC called by another principal.
    #[error("{0} is for operators (auth.operators); principal {1:?} is not one")]
    OperatorsOnly(&'static str, String),
}

/// What `PruneWorktrees` did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Removed, with their branches.
    pub removed: Vec<String>,
    /// Of workers that have not finished: kept.
    pub kept_live: Vec<String>,
    /// `<path>: <error>`.
    pub failed: Vec<String>,
}

/// How many workers [`App::tree_usage`] visits at most.
pub const TREE_USAGE_BOUND: usize = 10_000;

/// Limits on requests that come from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `limits.max_prompt_bytes`: prompts and command arguments.
    pub max_prompt_bytes: usize,
}

/// A `ResolveAgent` request.
#[derive(Debug, Clone)]
pub struct ResolveQuery {
    /// The agent.
    pub name: String,
    /// The workspace whose snapshot it is resolved in (empty: none).
    pub workspace: String,
    /// Default or plan mode.
    pub mode: Mode,
    /// A request output schema (already checked to be a usable JSON Schema).
    pub output_schema: Option<serde_json::Value>,
}

/// What a `ResolveAgent` answer is computed from ([`App::resolve_target`]).
#[derive(Debug)]
pub struct ResolveTarget {
    /// Who is asking, after lineage and declarations.
    pub caller: resolve::Caller,
    /// The snapshot the agent was found in.
    pub snapshot: Arc<Snapshot>,
    /// The definition.
    pub agent: Arc<AgentDef>,
}

/// What `ResolveAgent` answers.
#[derive(Debug)]
pub struct Resolved {
    /// The snapshot it was resolved in (its version).
    pub snapshot: Arc<Snapshot>,
    /// The definition.
    pub agent: Arc<AgentDef>,
    /// What a worker of it gets, for this caller.
    pub effective: Effective,
}

/// A `StopWorker` request.
#[derive(Debug, Clone)]
pub struct StopRequest {
    /// The worker.
    pub worker_id: WorkerId,
    /// Why, recorded with the kill.
    pub reason: String,
}

/// A `WatchWorker` request.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The worker.
    pub worker_id: WorkerId,
    /// Resume after this sequence; 0 starts with a snapshot.
    pub after_sequence: u64,
}

/// A `ResolveCommand` request.
#[derive(Debug, Clone)]
pub struct CommandRequest {
    /// The command's name or the base name it also answers to.
    pub name: String,
    /// The workspace whose snapshot it is looked up in (empty: none).
    pub workspace: String,
    /// What `$ARGUMENTS` expands to.
    pub arguments: String,
}

/// What `ResolveCommand` answers.
#[derive(Debug)]
pub struct ResolvedCommand {
    /// The snapshot it was found in (its version).
    pub snapshot: Arc<Snapshot>,
    /// The command.
    pub command: Arc<CommandDef>,
    /// Its template with the arguments expanded.
    pub expanded: String,
}

/// The service: discovery, resolution and the worker supervisor behind one set of operations.
#[derive(Clone)]
pub struct App {
    /// Snapshots per workspace.
    pub registry: Arc<Registry>,
    /// Resolution settings.
    pub rules: Arc<Rules>,
    /// The worker supervisor.
    pub supervisor: Arc<Supervisor>,
    /// `auth.operators`: principals that see and stop every worker.
    pub operators: Arc<Vec<String>>,
    /// Request limits from the configuration.
    pub limits: Limits,
}

impl App {
    /// The caller's lineage: a worker token is looked up (unknown or ended → `UnknownToken`).
    async fn lineage(&self, id: &Identity) -> Result<Lineage, Error> {
        Ok(self.supervisor.lineage(id).await?)
    }

    /// Which workers the caller may see (docs/operations.md §8.2): all without authentication
    /// or for an operator, else only its own principal's. A worker token it sends must be live.
    pub async fn visibility(&self, id: &Identity) -> Result<Visibility, Error> {
        self.lineage(id).await?;
        Ok(
            if !id.authenticated || self.operators.contains(&id.principal) {
                Visibility::All
            } else {
                Visibility::Principal(id.principal.clone())
            },
        )
    }

    /// `PruneWorktrees` (docs/workers.md §6.10): removes the kept worktrees under the worktrees
    /// dir older than `older_than` whose worker has finished (or is unknown to the store: a
    /// leftover); the worktree of a worker that is pending or running is never touched. An
    /// operator's call when authentication is on.
    pub async fn prune_worktrees(
        &self,
        id: &Identity,
        older_than: std::time::Duration,
    ) -> Result<Pruned, Error> {
        if !matches!(self.visibility(id).await?, Visibility::All) {
            return Err(Error::OperatorsOnly("PruneWorktrees", id.principal.clone()));
        }
        let root = self.supervisor.worktrees_dir().to_owned();
        let mut out = Pruned::default();
        for (worker, path) in crate::workers::worktree::candidates(&root, older_than) {
            let shown = path.display().to_string();
            let live = match worker.parse::<WorkerId>() {
                // Being admitted: its worktree is made before its row (asked first, so a row
                // written meanwhile is found below).
                Ok(w) if self.supervisor.is_admitting(&w) => true,
                Ok(w) => match self.supervisor.get(&w, &Visibility::All).await {
                    Ok(rec) => !rec.state.is_terminal(),
                    Err(crate::workers::supervisor::WorkerError::NotFound(_)) => false,
                    // The store cannot say: keep it, the next call decides.
                    Err(_) => true,
                },
                Err(_) => false,
            };
            if live {
                out.kept_live.push(shown);
                continue;
            }
            match crate::workers::worktree::remove_kept(&worker, &path).await {
                Ok(()) => out.removed.push(shown),
                Err(e) => out.failed.push(format!("{shown}: {e}")),
            }
        }
        tracing::info!(
            removed = out.removed.len(),
            kept_live = out.kept_live.len(),
            failed = out.failed.len(),
            "worktrees pruned"
        );
        Ok(out)
    }

    /// `ListAgents`: one page of the merged definitions, or of the caller's catalog.
    pub async fn list_agents(&self, id: &Identity, q: AgentQuery) -> Result<AgentPage, Error> {
        let caller = self.lineage(id).await?.caller;
        let snapshot = self.registry.snapshot(&q.workspace).await?;
        Ok(listing::agents(snapshot, &caller, &self.rules, &q)?)
    }

    /// What `ResolveAgent` is computed from: the caller's lineage, the workspace's current
    /// snapshot and the definition the request names (unknown → `NOT_FOUND` with suggestions).
    pub async fn resolve_target(
        &self,
        id: &Identity,
        q: &ResolveQuery,
    ) -> Result<ResolveTarget, Error> {
        let caller = self.lineage(id).await?.caller;
        let snapshot = self.registry.snapshot(&q.workspace).await?;
        let agent = snapshot
            .get(&q.name)
            .ok_or_else(|| resolve::unknown_agent(&snapshot, &q.name))?
            .clone();
        Ok(ResolveTarget {
            caller,
            snapshot,
            agent,
        })
    }

    /// Agent `name` when it is in the caller's catalog (docs §5.4: not reserved, allowed by the
    /// caller's spawn policy, not blocked) and runs here (not `kind: remote`): what an A2A card
    /// is made from (docs §13.2). `None` otherwise.
    pub async fn catalog_agent(
        &self,
        id: &Identity,
        name: &str,
    ) -> Result<Option<Arc<AgentDef>>, Error> {
        let caller = self.lineage(id).await?.caller;
        let snapshot = self.registry.snapshot("").await?;
        Ok(resolve::catalog(&snapshot, &caller, &self.rules)
            .into_iter()
            .find(|a| a.persona.name == name && !a.persona.remote)
            .cloned())
    }

    /// `ResolveAgent`'s answer for a target: what a worker of the agent would get, for this
    /// caller. A pure function of the target, the query's mode and schema, and the rules.
    pub fn resolve(&self, target: &ResolveTarget, q: &ResolveQuery) -> Resolved {
        let effective = resolve::effective(
            &target.agent,
            &target.snapshot,
            &target.caller,
            q.mode,
            q.output_schema.as_ref(),
            &self.rules,
        );
        Resolved {
            snapshot: target.snapshot.clone(),
            agent: target.agent.clone(),
            effective,
        }
    }

    /// `ReloadAgents`: rebuilds the workspace's snapshot now.
    pub async fn reload_agents(
        &self,
        id: &Identity,
        workspace: &str,
    ) -> Result<Arc<Snapshot>, Error> {
        self.lineage(id).await?;
        let snap = self.registry.reload(workspace).await?;
        tracing::info!(
            version = %snap.version,
            agents = snap.agents.len(),
            commands = snap.commands.len(),
            diagnostics = snap.all_diagnostics().count(),
            "agents reloaded"
        );
        Ok(snap)
    }

    /// `SpawnWorker` (the supervisor resolves the lineage itself, as the spawn's parent).
    pub async fn spawn_worker(&self, id: &Identity, r: SpawnRequest) -> Result<Spawned, Error> {
        Ok(self.supervisor.spawn(id, r).await?)
    }

    /// `StopWorker`.
    pub async fn stop_worker(&self, id: &Identity, r: StopRequest) -> Result<WorkerRecord, Error> {
        let vis = self.visibility(id).await?;
        Ok(self.supervisor.stop(&r.worker_id, &r.reason, &vis).await?)
    }

    /// `SendWorkerMessage` (docs §12).
    pub async fn send_message(
        &self,
        id: &Identity,
        r: crate::workers::supervisor::SendRequest,
    ) -> Result<crate::workers::supervisor::MessageSent, Error> {
        let vis = self.visibility(id).await?;
        Ok(self.supervisor.send_message(id, &vis, r).await?)
    }

    /// `GetWorker`.
    pub async fn get_worker(
        &self,
        id: &Identity,
        worker: &WorkerId,
    ) -> Result<WorkerRecord, Error> {
        let vis = self.visibility(id).await?;
        Ok(self.supervisor.get(worker, &vis).await?)
    }

    /// The recorded token usage of `root` and every descendant (docs/model.md §11.8), read
    /// breadth first from the store; at most [`TREE_USAGE_BOUND`] workers are visited.
    pub async fn tree_usage(&self, root: &WorkerRecord) -> Result<Vec<String>, Error> {
        use crate::workers::store::{ListQuery, ParentFilter};
        let mut found: Vec<String> = root.usage.iter().cloned().collect();
        let mut queue = vec![root.id.clone()];
        let mut visited = 1;
        while let Some(parent) = queue.pop() {
            let mut after = None;
            loop {
                let page = self
                    .supervisor
                    .store()
                    .list(&ListQuery {
                        parent: ParentFilter::Worker(parent.clone()),
                        states: Vec::new(),
                        caller_scope: None,
                        context_id: None,
                        agent: None,
                        newest_first: false,
                        after: after.clone(),
                        limit: 500,
                    })
                    .await
                    .map_err(WorkerError::from)?;
                let full = page.len() == 500;
                for child in page {
                    visited += 1;
                    after = Some((child.spec.create_time_ms, child.id.clone()));
                    found.extend(child.usage.clone());
                    queue.push(child.id);
                }
                if !full || visited >= TREE_USAGE_BOUND {
                    break;
                }
            }
            if visited >= TREE_USAGE_BOUND {
                break;
            }
        }
        Ok(found)
    }

    /// `ListWorkers`.
    pub async fn list_workers(&self, id: &Identity, q: WorkersQuery) -> Result<WorkersPage, Error> {
        let vis = self.visibility(id).await?;
        Ok(self.supervisor.list(&vis, &q).await?)
    }

    /// `WatchWorker`.
    pub async fn watch_worker(&self, id: &Identity, r: WatchRequest) -> Result<EventStream, Error> {
        let vis = self.visibility(id).await?;
        Ok(self
            .supervisor
            .watch(&r.worker_id, &vis, r.after_sequence)
            .await?)
    }

    /// `Review`: the gate's verdict. Only the caller's lineage can fail (an unknown worker
    /// token); past that the gate never fails, a gate that cannot run rejects.
    pub async fn review(&self, id: &Identity, p: Proposal) -> Result<Verdict, Error> {
        self.lineage(id).await?;
        Ok(review::review(&self.supervisor, id, p).await)
    }

    /// `ListCommands`.
    pub async fn list_commands(
        &self,
        id: &Identity,
        q: CommandQuery,
    ) -> Result<CommandPage, Error> {
        self.lineage(id).await?;
        let snapshot = self.registry.snapshot(&q.workspace).await?;
        Ok(listing::commands(snapshot, &q)?)
    }

    /// `ResolveCommand`.
    pub async fn resolve_command(
        &self,
        id: &Identity,
        r: CommandRequest,
    ) -> Result<ResolvedCommand, Error> {
        self.lineage(id).await?;
        let snapshot = self.registry.snapshot(&r.workspace).await?;
        let (command, expanded) = resolve::command::resolve(
            &snapshot,
            &r.name,
            &r.arguments,
            self.limits.max_prompt_bytes,
        )?;
        Ok(ResolvedCommand {
            command: command.clone(),
            expanded,
            snapshot,
        })
    }

    /// `ReportProgress`: appends to the calling worker's log; returns the event's sequence.
    /// The worker is found like every caller's lineage (live here, else in the shared store), so
    /// any replica takes the report: the event goes to the shared log and every replica's
    /// watchers see it.
    pub async fn report_progress(&self, id: &Identity, p: Progress) -> Result<u64, Error> {
        // A caller without a worker token has no parent worker.
        let worker = self
            .lineage(id)
            .await?
            .parent
            .ok_or(Error::WorkerTokenRequired)?;
        Ok(self
            .supervisor
            .report_progress(&worker.id, p)
            .await?
            .sequence)
    }
}

/// The service as a model-executor worker sees it (docs/model.md §11.4, §11.7, §11.8): the spawn
/// tool, the review gate and progress are the operations of the RPCs, called with the worker's
/// own token, so lineage, depth, policy, dedupe, limits and tenancy apply exactly as to any
/// caller.
///
/// It holds the supervisor weakly: the supervisor holds the executor that holds this, and a
/// strong cycle would keep the store (and its lock) alive after the service ends.
pub struct AsWorker {
    registry: Arc<Registry>,
    rules: Arc<Rules>,
    supervisor: std::sync::Weak<Supervisor>,
    operators: Arc<Vec<String>>,
    limits: Limits,
}

impl AsWorker {
    /// The operations of `app`, for the model executor.
    pub fn new(app: &App) -> Self {
        Self {
            registry: app.registry.clone(),
            rules: app.rules.clone(),
            supervisor: Arc::downgrade(&app.supervisor),
            operators: app.operators.clone(),
            limits: app.limits,
        }
    }

    /// The service, while it runs.
    fn app(&self) -> Option<App> {
        Some(App {
            registry: self.registry.clone(),
            rules: self.rules.clone(),
            supervisor: self.supervisor.upgrade()?,
            operators: self.operators.clone(),
            limits: self.limits,
        })
    }

    /// The identity of a call made by the worker itself: its token alone, as a worker process
    /// holding `AGENTRY_WORKER_TOKEN` would call.
    fn identity(worker: &crate::workers::executor::Assignment) -> Identity {
        Identity {
            principal: "anonymous".to_owned(),
            authenticated: false,
            worker_token: Some(worker.worker_token.clone()),
            declared: resolve::Declared::default(),
            traceparent: crate::telemetry::current_traceparent(),
            worker: None,
        }
    }
}

#[async_trait::async_trait]
impl crate::workers::executor::model::Agentry for AsWorker {
    async fn spawn(
        &self,
        worker: &crate::workers::executor::Assignment,
        agent: &str,
        description: &str,
        prompt: &str,
    ) -> Result<String, String> {
        let req = SpawnRequest {
            agent: agent.to_owned(),
            description: description.to_owned(),
            prompt: prompt.to_owned(),
            workspace: worker.spec.workspace.clone().unwrap_or_default(),
            mode: Mode::Default,
            output_schema: None,
            wait: true,
            request_id: None,
            timeout: None,
            isolation: None,
            interactive: false,
            context_id: None,
            a2a_message: None,
        };
        let app = self.app().ok_or("the service is shutting down")?;
        let spawned = match app.spawn_worker(&Self::identity(worker), req).await {
            Ok(s) => s,
            Err(Error::Worker(WorkerError::Denied(SpawnDenied::MaxDepth { .. }))) => {
                return Err("Agent depth limit reached. Solve the task yourself.".to_owned());
            }
            Err(e) => return Err(e.to_string()),
        };
        let w = spawned.worker;
        match w.state {
            crate::workers::model::WorkerState::Completed => Ok(format!(
                "worker {} (completed):\n{}",
                w.id,
                w.structured_result.or(w.result).unwrap_or_default()
            )),
            state => Err(format!(
                "agent {agent} ({}) ended {state}: {}",
                w.id,
                w.error.as_deref().unwrap_or("no error recorded")
            )),
        }
    }

    async fn review(
        &self,
        worker: &crate::workers::executor::Assignment,
        tool: &str,
        destructive: bool,
        arguments: Option<serde_json::Value>,
    ) -> Result<String, String> {
        let spec = &worker.spec;
        let proposal = Proposal {
            tool: tool.to_owned(),
            class: if destructive {
                review::ToolClass::Destructive
            } else {
                review::ToolClass::Write
            },
            action: format!("call the MCP tool {tool}"),
            target: String::new(),
            reason: spec.description.clone(),
            blast_radius: spec.workspace.clone().unwrap_or_default(),
            operator: format!("worker {} (agent {})", spec.worker_id, spec.agent.name),
            arguments,
            workspace: spec.workspace.clone().unwrap_or_default(),
        };
        let app = self.app().ok_or("the service is shutting down")?;
        let v = match app.review(&Self::identity(worker), proposal).await {
            Ok(v) => v,
            Err(e) => return Err(format!("the review gate could not run: {e}")),
        };
        match v.decision {
            review::Decision::Approve => Ok(v.reason),
            review::Decision::Reject => Err(v.reason),
        }
    }

    async fn progress(
        &self,
        worker: &crate::workers::executor::Assignment,
        kind: crate::workers::model::ProgressKind,
        text: String,
        data: Option<serde_json::Value>,
    ) -> bool {
        let Ok(id) = WorkerId::parse(&worker.spec.worker_id) else {
            return false;
        };
        let p = Progress {
            kind,
            text,
            data_json: data.map(|d| d.to_string()),
        };
        let Some(app) = self.app() else {
            return false;
        };
        // The run starts before its `running` is recorded (the two overlap): an event of its
        // first moments (a message delivered before the first turn) waits for it.
        let mut tries = 0;
        loop {
            match app.supervisor.report_progress(&id, p.clone()).await {
                Ok(_) => return true,
                Err(WorkerError::TooManyEvents { .. }) => return false,
                Err(WorkerError::NotRunning {
                    state: crate::workers::model::WorkerState::Pending,
                    ..
                }) if tries < 200 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(e) => {
                    tracing::debug!(worker = %id, error = %e, "progress event not recorded");
                    return true;
                }
            }
        }
    }

    async fn message(
        &self,
        worker: &crate::workers::executor::Assignment,
        child: &str,
        text: &str,
    ) -> Result<String, String> {
        let child = WorkerId::parse(child).map_err(|e| e.to_string())?;
        let app = self.app().ok_or("the service is shutting down")?;
        let req = crate::workers::supervisor::SendRequest {
            worker_id: child,
            text: text.to_owned(),
            interrupt: false,
            wait: true,
            request_id: None,
        };
        let sent = app
            .send_message(&Self::identity(worker), req)
            .await
            .map_err(|e| e.to_string())?;
        let w = sent.worker;
        match w.state {
            crate::workers::model::WorkerState::Completed => Ok(format!(
                "worker {} (completed):\n{}",
                w.id,
                w.structured_result.or(w.result).unwrap_or_default()
            )),
            crate::workers::model::WorkerState::InputRequired => Ok(format!(
                "worker {} asks: {}",
                w.id,
                w.question.unwrap_or_default()
            )),
            state => Err(format!(
                "worker {} ended {state}: {}",
                w.id,
                w.error.as_deref().unwrap_or("no error recorded")
            )),
        }
    }

    async fn transcript(&self, id: &str) -> Result<Vec<String>, String> {
        let id = WorkerId::parse(id).map_err(|e| e.to_string())?;
        let app = self.app().ok_or("the service is shutting down")?;
        app.supervisor
            .store()
            .transcript(&id)
            .await
            .map_err(|e| e.to_string())
    }

    async fn save_transcript(
        &self,
        worker: &crate::workers::executor::Assignment,
        from: u32,
        entries: Vec<String>,
    ) -> Result<(), String> {
        let id = WorkerId::parse(&worker.spec.worker_id).map_err(|e| e.to_string())?;
        let app = self.app().ok_or("the service is shutting down")?;
        app.supervisor
            .store()
            .append_transcript(&id, from, &entries)
            .await
            .map_err(|e| e.to_string())
    }

    async fn messages(
        &self,
        worker: &crate::workers::executor::Assignment,
        seal: bool,
    ) -> Result<Vec<crate::workers::store::Message>, String> {
        let id = WorkerId::parse(&worker.spec.worker_id).map_err(|e| e.to_string())?;
        let app = self.app().ok_or("the service is shutting down")?;
        let store = app.supervisor.store();
        if !seal && !worker.mail.take_pending() {
            // Only a send through another replica can have left one without a wake-up here.
            if app.supervisor.shared_store().is_none() {
                return Ok(Vec::new());
            }
            match store.get(&id).await {
                Ok(Some(rec)) if rec.undelivered > 0 => {}
                _ => return Ok(Vec::new()),
            }
        }
        let taken = store
            .take_messages(&id, seal)
            .await
            .map_err(|e| e.to_string())?;
        app.supervisor.inbox_taken(&id);
        Ok(taken)
    }
}
