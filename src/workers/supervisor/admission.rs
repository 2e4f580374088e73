//! Admitting a dispatch (docs/workers.md §6.1, §6.5): who is calling, the spawn policy, an
//! earlier dispatch with the same `request_id` or the same dedupe key (in this process, then in
//! the shared store), the pending capacity, then the row — written before anything runs — and
//! the run task.

use std::{sync::Arc, time::Duration};

use tokio::sync::{broadcast, watch};

use super::{
    Identity, Lineage, Live, SpawnRequest, Spawned, Supervisor, WorkerError, now_ms,
    outcome::OutputRule,
    run::RunCtx,
    waiting::{Binding, Hold, wait_done},
};
use crate::{
    discovery::AgentDef,
    resolve::{self, Effective},
    workers::{
        dedupe::{Claim, DedupeKey, Dispatch},
        executor::{Assignment, Job},
        model::{SpawnSpec, WorkerId, WorkerRecord, WorkerState, generate_token, hash_token},
        spec::WorkerSpec,
        store::StoreError,
        worktree,
    },
};

/// What a dispatch is for.
#[derive(Clone)]
pub enum Purpose {
    /// A worker the caller asked for: spawn policy, dedupe, output schema, its own timeout.
    Spawn,
    /// The review gate's reviewer (docs/review.md §7): reserved agents may run, no dedupe
    /// (every review gates a different moment), stdout summarised instead of a schema enforced,
    /// and the executor's bound only a backstop behind `deadline`, which the gate enforces.
    Review {
        /// Fills the structured result of a completed run.
        summarise: super::Summarise,
        /// The review deadline.
        deadline: Duration,
    },
}

/// An admitted dispatch.
pub enum Admitted {
    /// An earlier dispatch answers it (same `request_id`, or the same dedupe key).
    Reused(Spawned),
    /// A new worker was created and its run started.
    Started(Started),
}

/// A worker this dispatch created.
pub struct Started {
    /// Its record as created (`pending`).
    pub record: WorkerRecord,
    /// Becomes `Some` with the final record.
    pub done: watch::Receiver<Option<WorkerRecord>>,
    /// The caller's hold when it waits: dropping it before the end cancels the worker.
    pub hold: Option<Hold>,
}

impl Started {
    /// Waits for the final record, holding the worker meanwhile.
    pub async fn finish(self) -> WorkerRecord {
        let rec = wait_done(self.done).await;
        drop(self.hold);
        rec
    }
}

impl Supervisor {
    /// Admits and starts (or reuses) a worker. With `wait`, returns when it is terminal and the
    /// worker is cancelled if this future is dropped first (unless other callers still wait).
    pub async fn spawn(
        self: &Arc<Self>,
        id: &Identity,
        req: SpawnRequest,
    ) -> Result<Spawned, WorkerError> {
        let wait = req.wait;
        match self.admit(id, req, Purpose::Spawn).await? {
            Admitted::Reused(s) => Ok(s),
            Admitted::Started(started) => Ok(Spawned {
                worker: if wait {
                    started.finish().await
                } else {
                    started.record
                },
                deduplicated: false,
                hint: String::new(),
            }),
        }
    }

    /// Admits a dispatch: reuses an earlier one when it may, else creates the worker and starts
    /// its run.
    pub async fn admit(
        self: &Arc<Self>,
        id: &Identity,
        req: SpawnRequest,
        purpose: Purpose,
    ) -> Result<Admitted, WorkerError> {
        if self.shutdown.is_cancelled() {
            return Err(WorkerError::ShuttingDown);
        }
        if self.unrecorded_outcomes() > 0 {
            return Err(WorkerError::StoreBacklog);
        }
        let lineage = self.lineage(id).await?;
        let snap = self.registry.snapshot(&req.workspace).await?;
        let checked = match purpose {
            Purpose::Review { .. } => resolve::check_review(&snap, &lineage.caller, &req.agent),
            Purpose::Spawn => resolve::check_spawn(&snap, &lineage.caller, &req.agent, &self.rules),
        };
        let def = checked.inspect_err(|denied| {
            self.metrics
                .worker_spawned(&req.agent, &format!("denied_{}", denied.reason()));
        })?;
        let parent_id = lineage.parent.as_ref().map(|p| p.id.clone());
        // Reviews are never deduplicated: each one gates a different moment. The key needs only
        // the mode and the effective schema; the effective agent is composed once it is known
        // that a worker will be created.
        let key = matches!(purpose, Purpose::Spawn).then(|| {
            DedupeKey::new(&Dispatch {
                caller_scope: &lineage.scope,
                parent_worker_id: parent_id.as_ref().map_or("", WorkerId::as_str),
                agent: &req.agent,
                mode: req.mode.as_str(),
                workspace: &req.workspace,
                output_schema: resolve::output_schema(
                    def,
                    req.output_schema.as_ref(),
                    &lineage.caller,
                )
                .map(|(s, _)| s),
                prompt: &req.prompt,
            })
        });
        if let Some(rid) = &req.request_id
            && let Some(existing) = self.store.find_by_request_id(&lineage.scope, rid).await?
        {
            return self.reuse_request_id(rid, existing, key, &req).await;
        }
        // The common hit: an identical dispatch this process answers for. It needs neither a
        // pending place nor a new id.
        if let Some(key) = key
            && let Some(reused) = self.reuse_known(key, &req).await?
        {
            return Ok(Admitted::Reused(reused));
        }
        let pending = self.pending.clone().try_acquire_owned().map_err(|_| {
            self.metrics.worker_spawned(&req.agent, "denied_capacity");
            WorkerError::Capacity(format!(
                "{} workers are already waiting for a run slot (limits.max_pending); retry later",
                self.settings.max_pending
            ))
        })?;
        let new_id = WorkerId::generate();
        // A git worktree of its own (docs/workers.md §6.10), made before the row so that a
        // workspace that cannot have one refuses the spawn.
        let isolate = matches!(purpose, Purpose::Spawn)
            && req
                .isolation
                .or(def.persona.worktree)
                .unwrap_or(self.settings.worktree_default);
        // A shared store's claim normally goes with the row (one statement); a worker that gets
        // a worktree claims first, so that a dispatch another replica already runs never pays
        // for a checkout it then throws away.
        if let Some(key) = key
            && let Some(reused) = self.reuse_dispatch(key, &new_id, &req, isolate).await?
        {
            return Ok(Admitted::Reused(reused));
        }
        let mut eff = resolve::effective(
            def,
            &snap,
            &lineage.caller,
            req.mode,
            req.output_schema.as_ref(),
            &self.rules,
        );
        eff.interactive = req.interactive && matches!(purpose, Purpose::Spawn);
        if let Some(scope) = &def.persona.memory
            && matches!(purpose, Purpose::Spawn)
        {
            let (scope, name, workspace, home) = (
                scope.clone(),
                def.persona.name.clone(),
                req.workspace.clone(),
                self.settings.home.clone(),
            );
            // Off the runtime: the directory is in a project the caller controls, and its
            // files are walked and read one by one.
            let memory = tokio::task::spawn_blocking(move || {
                open_memory(&scope, &name, &workspace, home.as_deref())
            })
            .await
            .unwrap_or_else(|e| Err(format!("the memory directory was not opened: {e}")));
            match memory {
                Ok((dir, notes)) => compose_memory(&mut eff, &dir, &notes),
                Err(why) => {
                    self.forget_claim(key, &new_id).await;
                    return Err(WorkerError::Unrunnable(why));
                }
            }
        }
        let inherited: Vec<String> = lineage
            .parent
            .as_ref()
            .map(|p| p.spec.effective.model.clone())
            .unwrap_or_default();
        if let Err(why) = self.executor.admit(&eff, &inherited) {
            self.forget_claim(key, &new_id).await;
            self.metrics.worker_spawned(&req.agent, "denied_executor");
            return Err(WorkerError::Unrunnable(why));
        }
        // From here until its row exists, the worker is known to be on its way.
        let _admitting = Admitting::new(self, &new_id);
        let worktree = if isolate {
            match worktree::create(
                &self.settings.worktrees_dir,
                new_id.as_str(),
                &req.workspace,
                self.settings.worktree_base,
            )
            .await
            {
                Ok(w) => Some(w),
                Err(why) => {
                    self.forget_claim(key, &new_id).await;
                    self.metrics.worker_spawned(&req.agent, "denied_worktree");
                    return Err(WorkerError::Worktree(why));
                }
            }
        } else {
            None
        };
        match self
            .create(
                id, &req, &purpose, lineage, def, eff, new_id, key, pending, worktree,
            )
            .await?
        {
            Created::Started(started) => Ok(Admitted::Started(started)),
            Created::Held(rec) => {
                let age = Self::age(&rec);
                Ok(Admitted::Reused(self.reused(rec, age, &req).await?))
            }
        }
    }

    /// Gives up this dispatch's dedupe claim on `key` (its worker will not be created).
    async fn forget_claim(&self, key: Option<DedupeKey>, new_id: &WorkerId) {
        if let Some(key) = key {
            self.dedupe.forget(key, new_id.as_str());
            if let Some(shared) = &self.shared {
                let _ = shared.release_dedupe(&key.to_string(), new_id).await;
            }
        }
    }

    /// The same `request_id` names the same dispatch: agent, prompt, mode, workspace and
    /// effective schema must all agree, or it is a different request reusing the key.
    async fn reuse_request_id(
        &self,
        rid: &str,
        existing: WorkerRecord,
        key: Option<DedupeKey>,
        req: &SpawnRequest,
    ) -> Result<Admitted, WorkerError> {
        if key.is_none_or(|k| dispatch_key(&existing) != k) || existing.spec.prompt != req.prompt {
            return Err(WorkerError::RequestIdReused {
                request_id: rid.to_owned(),
                existing: existing.id.to_string(),
            });
        }
        let worker = self.finish_wait(existing, req.wait).await?;
        Ok(Admitted::Reused(Spawned {
            hint: format!(
                "request_id {rid:?} was already used for worker {}; returning it",
                worker.id
            ),
            worker,
            deduplicated: true,
        }))
    }

    /// An identical dispatch made within the dedupe window: this process's claim first, then
    /// (shared store) the database's, which decides between replicas (docs §9). `None` when
    /// this dispatch now holds the key and must create the worker.
    async fn reuse_dispatch(
        &self,
        key: DedupeKey,
        new_id: &WorkerId,
        req: &SpawnRequest,
        claim_first: bool,
    ) -> Result<Option<Spawned>, WorkerError> {
        let claim = self.dedupe.claim(key, new_id.as_str(), |existing| {
            WorkerId::parse(existing).is_ok_and(|w| self.reusable(&w))
        });
        if let Claim::Existing { worker_id, age } = claim {
            let wid = WorkerId::parse(&worker_id).expect("dedupe holds valid ids");
            if let Some(reused) = self.reuse_local(&wid, age, req).await? {
                return Ok(Some(reused));
            }
        }
        // The in-process claim above is the only one of a store of one process; a shared
        // store's claim is taken with the row (`create`), one statement and one commit, unless
        // it must be known first (`claim_first`).
        let holder = match &self.shared {
            Some(shared) if claim_first => shared
                .claim_dedupe(&key.to_string(), new_id, self.settings.dedupe_ttl)
                .await
                .inspect_err(|_| self.dedupe.forget(key, new_id.as_str()))?,
            _ => None,
        };
        let Some(holder) = holder else {
            return Ok(None);
        };
        self.dedupe.forget(key, new_id.as_str());
        let Some(rec) = self.wait_for_row(&holder).await? else {
            return Ok(None);
        };
        let age = Self::age(&rec);
        self.reused(rec, age, req).await.map(Some)
    }

    /// How long ago `rec` was created.
    fn age(rec: &WorkerRecord) -> Duration {
        Duration::from_millis(
            u64::try_from(now_ms().saturating_sub(rec.spec.create_time_ms)).unwrap_or(0),
        )
    }

    /// The worker this process's dedupe cache already points `key` at, if it may be reused: a
    /// read, no claim. A miss (or a worker that may not be reused) goes on to
    /// [`Self::reuse_dispatch`], which claims the key.
    async fn reuse_known(
        &self,
        key: DedupeKey,
        req: &SpawnRequest,
    ) -> Result<Option<Spawned>, WorkerError> {
        let Some(entry) = self.dedupe.get(&key) else {
            return Ok(None);
        };
        let Ok(wid) = WorkerId::parse(&entry.worker_id) else {
            return Ok(None);
        };
        let age = entry.inserted.elapsed();
        if self.creating_lock().contains_key(&wid) {
            return self.reuse_local(&wid, age, req).await;
        }
        match self.reusable_record(&wid) {
            Some(rec) => self.reused(rec, age, req).await.map(Some),
            None => Ok(None),
        }
    }

    /// Answers with worker `wid` of this process (once it is created), if it is still in
    /// memory.
    async fn reuse_local(
        &self,
        wid: &WorkerId,
        age: Duration,
        req: &SpawnRequest,
    ) -> Result<Option<Spawned>, WorkerError> {
        let creating = self.creating_lock().get(wid).cloned();
        if let Some(mut created) = creating {
            let _ = created.wait_for(|done| *done).await;
        }
        match self.cached(wid) {
            Some(rec) => self.reused(rec, age, req).await.map(Some),
            None => Ok(None),
        }
    }

    /// Answers a dispatch with the identical one made `age` ago.
    async fn reused(
        &self,
        rec: WorkerRecord,
        age: Duration,
        req: &SpawnRequest,
    ) -> Result<Spawned, WorkerError> {
        self.metrics.dedupe_hit();
        let worker = self.finish_wait(rec, req.wait).await?;
        Ok(Spawned {
            hint: format!(
                "an identical dispatch of {} with the same prompt was made {}s ago as worker {}; its result is returned instead of starting a duplicate",
                req.agent,
                age.as_secs(),
                worker.id
            ),
            worker,
            deduplicated: true,
        })
    }

    /// Writes the row (with its dedupe claim, in a shared store), makes the worker live and
    /// starts its run task; or, when an identical dispatch of another replica holds the
    /// claim, gives up this one for that worker.
    #[allow(clippy::too_many_arguments)]
    async fn create(
        self: &Arc<Self>,
        id: &Identity,
        req: &SpawnRequest,
        purpose: &Purpose,
        lineage: Lineage,
        def: &AgentDef,
        eff: Effective,
        new_id: WorkerId,
        key: Option<DedupeKey>,
        pending: tokio::sync::OwnedSemaphorePermit,
        worktree: Option<worktree::Worktree>,
    ) -> Result<Created, WorkerError> {
        let token = generate_token();
        let created_at = now_ms();
        let workspace = match &worktree {
            Some(w) => Some(w.workspace.clone()),
            None => (!req.workspace.is_empty()).then(|| req.workspace.clone()),
        };
        let spec = Arc::new(SpawnSpec {
            agent: req.agent.clone(),
            description: req.description.clone(),
            prompt: req.prompt.clone(),
            workspace,
            parent_id: lineage.parent.as_ref().map(|p| p.id.clone()),
            depth: eff.depth,
            create_time_ms: created_at,
            caller_scope: lineage.scope.clone(),
            request_id: req.request_id.clone(),
            continues: None,
            context_id: req.context_id.clone(),
            a2a_message: req.a2a_message.clone(),
            effective: eff,
        });
        let eff = &spec.effective;
        let mut record = WorkerRecord::new(new_id.clone(), spec.clone(), Some(hash_token(&token)));
        record.worktree = worktree
            .as_ref()
            .and_then(|w| serde_json::to_string(w).ok());
        let (created_tx, created_rx) = watch::channel(false);
        self.creating_lock().insert(new_id.clone(), created_rx);
        // Whatever happens below, waiters on the creation are released and the entry goes.
        let creation = CreationGuard {
            sup: self,
            id: new_id.clone(),
            tx: created_tx,
        };
        // A shared store's claim goes with the row, unless the worker has a worktree (its
        // claim was taken before the checkout, `reuse_dispatch`).
        let claim = key
            .filter(|_| self.shared.is_some() && worktree.is_none())
            .map(|k| k.to_string());
        let mut created = self
            .store
            .create_claimed(
                &record,
                claim.as_deref().map(|k| (k, self.settings.dedupe_ttl)),
            )
            .await;
        if let Err(StoreError::DedupeHeld { holder }) = &created {
            // An identical dispatch of another replica won the key at the same moment (docs
            // §9): its worker answers this one. Its row was written with its claim; should it
            // be gone all the same, this one runs after all.
            match self.wait_for_row(holder).await {
                Ok(Some(rec)) => {
                    if let Some(key) = key {
                        self.dedupe.forget(key, new_id.as_str());
                    }
                    if let Some(w) = worktree {
                        worktree::finish(w).await;
                    }
                    return Ok(Created::Held(rec));
                }
                Ok(None) => created = self.store.create(&record).await,
                Err(e) => {
                    self.forget_claim(key, &new_id).await;
                    if let Some(w) = worktree {
                        worktree::finish(w).await;
                    }
                    return Err(e);
                }
            }
        }
        let created = match created {
            Ok(ev) => ev,
            Err(e) => {
                self.forget_claim(key, &new_id).await;
                if let Some(w) = worktree {
                    worktree::finish(w).await;
                }
                return Err(e.into());
            }
        };
        let record = created.worker.clone();
        // Transitions and progress reports; a lagging watcher re-reads the store.
        let (events, _) = broadcast::channel(64);
        let (done_tx, done_rx) = watch::channel(None);
        let cancel = self.shutdown.child_token();
        // A waiting caller binds the worker's life; a background run belongs to the service.
        let (binding, hold) = Binding::new(&cancel, req.wait);
        let stop_reason = crate::workers::executor::StopReason::default();
        let mail = Arc::new(crate::workers::executor::Mailbox::default());
        self.live().insert(
            new_id.clone(),
            Live {
                record: record.clone(),
                cancel: cancel.clone(),
                events: events.clone(),
                done: done_rx.clone(),
                token_hash: hash_token(&token),
                binding,
                lineage: resolve::lineage::of_worker(&req.agent, eff),
                stop_reason: stop_reason.clone(),
                mail: mail.clone(),
                held_start: None,
            },
        );
        drop(creation);
        self.announce(&created);
        let _ = events.send(created);
        self.metrics.worker_state(None, "pending");
        tracing::info!(worker = %new_id, agent = %req.agent, depth = record.spec.depth, parent = ?record.spec.parent_id.as_ref().map(WorkerId::as_str), "worker created");

        let timeout = self.run_timeout(purpose, req, def);
        let review = matches!(purpose, Purpose::Review { .. });
        let inherited = lineage
            .parent
            .as_ref()
            .map(|p| p.spec.effective.model.clone())
            .unwrap_or_default();
        let mut job = self.job(
            id.traceparent.as_deref(),
            &record,
            &lineage.caller.blocked,
            inherited,
            token,
            timeout,
            review,
            Conversing {
                resume_from: None,
                mail,
                runner_resume: None,
            },
        );
        job.stop_reason = stop_reason;
        let ctx = RunCtx {
            id: new_id.clone(),
            output: match purpose {
                Purpose::Review { summarise, .. } => OutputRule::Summarise(summarise.clone()),
                Purpose::Spawn => eff
                    .output_schema
                    .clone()
                    .map_or(OutputRule::Plain, OutputRule::Schema),
            },
            cancel,
            events,
            done: done_tx,
            pending: Some(pending),
            resumed: false,
        };
        let span = tracing::info_span!(
            "worker",
            worker = %new_id,
            agent = %req.agent,
            parent = record.spec.parent_id.as_ref().map_or("", WorkerId::as_str),
            depth = record.spec.depth,
            outcome = tracing::field::Empty,
        );
        self.tasks.spawn(tracing::Instrument::instrument(
            self.clone().drive(ctx, job),
            span,
        ));
        Ok(Created::Started(Started {
            record,
            done: done_rx,
            hold,
        }))
    }

    /// How long the run may take: the request's, the agent's and the executor's bound for a
    /// spawn; for a review, only a backstop behind its deadline (which the gate enforces), so
    /// the row records the review's own stop reason.
    fn run_timeout(&self, purpose: &Purpose, req: &SpawnRequest, def: &AgentDef) -> Duration {
        match purpose {
            Purpose::Review { deadline, .. } => {
                *deadline + self.settings.kill_grace + Duration::from_secs(1)
            }
            Purpose::Spawn => resolve::effective_timeout(
                req.timeout,
                def.persona.timeout_mins,
                self.settings.timeout,
            ),
        }
    }

    /// What the executor gets for `record`: its spec on stdin, its environment (the caller's
    /// blocked agents plus its own), its bounds; `inherited` is the parent's models, `resume`
    /// where its conversation starts from (docs §12) and its mailbox.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn job(
        &self,
        traceparent: Option<&str>,
        record: &WorkerRecord,
        blocked: &[String],
        inherited: Vec<String>,
        token: String,
        timeout: Duration,
        review: bool,
        conversing: Conversing,
    ) -> Job {
        let spec = &record.spec;
        let eff = &spec.effective;
        let mut blocked = blocked.to_vec();
        if !blocked.contains(&spec.agent) {
            blocked.insert(0, spec.agent.clone());
        }
        let worker_spec = WorkerSpec::new(
            record.id.as_str(),
            eff,
            &spec.prompt,
            &spec.description,
            spec.workspace.as_deref(),
        )
        .with_a2a(spec.a2a_message.as_deref());
        let assignment = Arc::new(Assignment {
            worker_token: token.clone(),
            caller_scope: spec.caller_scope.clone(),
            spec: worker_spec,
            inherited_model: inherited,
            plan: eff.mode == resolve::Mode::Plan,
            at_max_depth: eff.at_max_depth,
            review,
            resume_from: conversing.resume_from,
            interactive: eff.interactive,
            mail: conversing.mail,
            runner_resume: conversing.runner_resume,
            session_ref: Default::default(),
        });
        Job {
            worker_id: record.id.to_string(),
            stdin: assignment.spec.to_json(),
            env: vec![
                ("AGENTRY_ADDR".into(), self.settings.addr.clone()),
                ("AGENTRY_WORKER_ID".into(), record.id.to_string()),
                ("AGENTRY_WORKER_TOKEN".into(), token),
                ("AGENTRY_AGENT".into(), spec.agent.clone()),
                ("AGENTRY_DEPTH".into(), eff.depth.to_string()),
                ("AGENTRY_SPAWNS".into(), eff.spawns.to_policy_string()),
                ("AGENTRY_BLOCKED_AGENT".into(), blocked.join(",")),
                (
                    "AGENTRY_MEMORY_DIR".into(),
                    eff.memory_dir.clone().unwrap_or_default(),
                ),
                (
                    "TRACEPARENT".into(),
                    crate::telemetry::current_traceparent()
                        .or_else(|| traceparent.map(str::to_owned))
                        .unwrap_or_default(),
                ),
            ],
            cwd: spec.workspace.as_ref().map(Into::into),
            timeout,
            kill_grace: self.settings.kill_grace,
            max_output_bytes: self.settings.max_output_bytes,
            assignment: Some(assignment),
            meter: crate::workers::executor::Meter::default(),
            stop_reason: crate::workers::executor::StopReason::default(),
            rotated_token: Default::default(),
        }
    }

    fn creating_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<WorkerId, watch::Receiver<bool>>> {
        self.creating.lock().expect("creating workers poisoned")
    }

    fn admitting_lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<WorkerId>> {
        self.admitting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether worker `id` is being admitted here: its worktree may exist before its row does.
    /// Asked before the store, this never misses a worker: its row is written before it stops
    /// being admitted (the mark spans the row's creation, so `creating` need not be asked).
    pub fn is_admitting(&self, id: &WorkerId) -> bool {
        self.admitting_lock().contains(id)
    }

    /// Whether a cached dispatch may be reused: being created, or [`Self::reusable_record`].
    fn reusable(&self, id: &WorkerId) -> bool {
        self.creating_lock().contains_key(id) || self.reusable_record(id).is_some()
    }

    /// The record of a worker in memory that a dispatch may be answered with: live, or
    /// finished `completed`.
    fn reusable_record(&self, id: &WorkerId) -> Option<WorkerRecord> {
        if let Some(l) = self.live().get(id) {
            return Some(l.record.clone());
        }
        self.recent
            .get(id)
            .filter(|r| r.state == WorkerState::Completed)
    }
}

/// How many lines of an agent's `MEMORY.md` go into its prompt.
const MEMORY_LINES: usize = 200;

/// Bytes of `MEMORY.md` read for the prompt.
const MEMORY_BYTES: usize = 64 * 1024;

/// The memory directory of agent `name` (docs/personas.md §2.7), created if missing:
/// `~/.claude/agent-memory/<name>/` (`user`), `<workspace>/.claude/agent-memory/<name>/`
/// (`project`) or `<workspace>/.claude/agent-memory-local/<name>/` (`local`), with the head of
/// its `MEMORY.md`. The base (home or workspace) is taken in its canonical form; every component
/// below it is walked without following a symlink and made only inside a directory already
/// checked ([`crate::confine`]), so a symlink planted anywhere on the way is refused and nothing
/// is created outside. The name must be one plain path component.
fn open_memory(
    scope: &str,
    name: &str,
    workspace: &str,
    home: Option<&std::path::Path>,
) -> Result<(std::path::PathBuf, String), String> {
    use std::path::{Component, Path};
    let one = {
        let mut c = Path::new(name).components();
        matches!((c.next(), c.next()), (Some(Component::Normal(n)), None) if n == name)
    };
    if !one {
        return Err(format!(
            "agent {name:?}: its name cannot name a memory directory (it must be one plain path component)"
        ));
    }
    let (base, sub) = match scope {
        "user" => (
            home.ok_or_else(|| {
                format!("agent {name}: memory: user needs a home directory (home)")
            })?
            .to_owned(),
            ".claude/agent-memory",
        ),
        _ if workspace.is_empty() => {
            return Err(format!(
                "agent {name}: memory: {scope} needs a workspace (its memory lives in the project)"
            ));
        }
        "local" => (workspace.into(), ".claude/agent-memory-local"),
        _ => (workspace.into(), ".claude/agent-memory"),
    };
    let base = std::fs::canonicalize(&base)
        .map_err(|e| format!("agent {name}: cannot resolve {}: {e}", base.display()))?;
    let rel = Path::new(sub).join(name);
    let dir = base.join(&rel);
    let root = crate::confine::Confined::open(&base, &rel, true).map_err(|e| {
        format!(
            "agent {name}: cannot use its memory directory {}: {e}",
            dir.display()
        )
    })?;
    let notes = root
        .read_head(Path::new("MEMORY.md"), MEMORY_BYTES)
        .map_err(|e| format!("agent {name}: cannot read {}/MEMORY.md: {e}", dir.display()))?
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    Ok((dir, notes))
}

/// Puts the memory directory, and the first [`MEMORY_LINES`] lines of its `MEMORY.md`, into the
/// worker's prompt, after the persona body.
fn compose_memory(eff: &mut Effective, dir: &std::path::Path, notes: &str) {
    let head: Vec<&str> = notes.lines().take(MEMORY_LINES).collect();
    let mut part = format!(
        "Your persistent memory directory is {}; keep what you learn in its MEMORY.md.",
        dir.display()
    );
    if !head.is_empty() {
        part.push_str(&format!("\n\nMEMORY.md:\n{}", head.join("\n")));
    }
    eff.system_prompt = if eff.system_prompt.trim().is_empty() {
        part
    } else {
        format!("{}\n\n{part}", eff.system_prompt)
    };
    eff.memory_dir = Some(dir.display().to_string());
}

/// The dedupe key a stored worker was admitted under, from its own record.
fn dispatch_key(rec: &WorkerRecord) -> DedupeKey {
    let spec = &rec.spec;
    // An isolated worker's workspace is its worktree; the dispatch named the caller's.
    let origin = worktree::origin(rec.worktree.as_deref());
    DedupeKey::new(&Dispatch {
        caller_scope: &spec.caller_scope,
        parent_worker_id: spec.parent_id.as_ref().map_or("", WorkerId::as_str),
        agent: &spec.agent,
        mode: spec.effective.mode.as_str(),
        workspace: origin
            .as_deref()
            .or(spec.workspace.as_deref())
            .unwrap_or(""),
        output_schema: spec.effective.output_schema.as_ref(),
        prompt: &spec.prompt,
    })
}

/// Marks a worker as being admitted for as long as it lives (see
/// [`Supervisor::is_admitting`]).
struct Admitting<'a> {
    sup: &'a Supervisor,
    id: WorkerId,
}

impl<'a> Admitting<'a> {
    fn new(sup: &'a Supervisor, id: &WorkerId) -> Self {
        sup.admitting_lock().insert(id.clone());
        Self {
            sup,
            id: id.clone(),
        }
    }
}

impl Drop for Admitting<'_> {
    fn drop(&mut self) {
        self.sup.admitting_lock().remove(&self.id);
    }
}

/// Ends a worker's "being created" phase: removes its entry and wakes the dispatches waiting on
/// it, on success (the worker is live by then) and on every early return alike.
struct CreationGuard<'a> {
    sup: &'a Supervisor,
    id: WorkerId,
    tx: watch::Sender<bool>,
}

impl Drop for CreationGuard<'_> {
    fn drop(&mut self) {
        self.sup.creating_lock().remove(&self.id);
        let _ = self.tx.send(true);
    }
}

/// What a run carries on from (docs §12): the transcript it starts from, its mailbox, the
/// runner session of a continuation.
pub(super) struct Conversing {
    /// Whose transcript its conversation starts from.
    pub(super) resume_from: Option<String>,
    /// Where messages for it are posted.
    pub(super) mail: Arc<crate::workers::executor::Mailbox>,
    /// The worker and session reference a runner continuation reloads.
    pub(super) runner_resume: Option<(String, String)>,
}

/// What [`Supervisor::create`] did: started the worker, or found the dedupe claim held by
/// another replica's worker, which answers the dispatch instead.
enum Created {
    Started(Started),
    Held(WorkerRecord),
}
