//! The runner hub (docs/runners.md): which runners are connected, which workers wait for one,
//! which runner holds which worker under which lease, and the clock that withdraws unanswered
//! offers and fails the workers of lost runners.
//!
//! The hub is the assignment seam. It decides, under one short `std::sync::Mutex` critical
//! section per call, oldest waiting worker first, to the connected runner with the most free
//! slots that serves the worker's agent and principal. A worker is offered under a fresh lease
//! token (a fencing token, STYLE rule 17): every runner message about it must carry that token,
//! and a token of an ended or withdrawn lease is refused with a reason, never applied. The hub
//! never writes a worker row: the supervisor does, through the [`RunnerExecutor`] future that
//! waits on [`RunEvent`]s, so rows, lineage, dedupe, limits, stop and watch stay the
//! supervisor's. With a shared PostgreSQL store, the claim in `State::dispatch` is what moves
//! into the store (`FOR UPDATE SKIP LOCKED` over waiting rows); the rest stays per replica.
//!
//! Depends on the executor's [`Assignment`] and on the worker model; never on tonic, the store
//! or the supervisor.
//!
//! [`RunnerExecutor`]: super::executor::RunnerExecutor

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    ops::Bound,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, watch};

use super::{
    executor::Assignment,
    model::{WorkerId, generate_token},
};

pub mod fleet;
pub mod session;

pub use session::Session;

/// Tokens of ended leases remembered to explain a refusal (`finished` twice, a withdrawn offer);
/// older ones are refused as unknown.
const ENDED_MEMORY: usize = 4096;

/// Longest accepted runner name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Most agents a `hello` may list.
pub const MAX_AGENTS: usize = 1024;
/// Most slots a runner may announce.
pub const MAX_SLOTS: u32 = 10_000;

/// Protocol timing (`runners.*`) and the stop grace.
#[derive(Debug, Clone, Copy)]
pub struct HubSettings {
    /// Told to runners in `welcome`: how often to send `heartbeat {}` when idle.
    pub heartbeat_interval: Duration,
    /// Silence (or absence) after which a runner's workers are lost.
    pub lease: Duration,
    /// How long an offer waits for `accepted`.
    pub accept_timeout: Duration,
}

/// A runner's session id, random per `hello`.
pub type RunnerId = String;

/// A message for a runner.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// The answer to `hello`.
    Welcome {
        /// This session's id.
        runner_id: RunnerId,
        /// How often to send `heartbeat {}` when idle.
        heartbeat_interval: Duration,
        /// Silence after which the runner's workers are lost.
        lease: Duration,
    },
    /// A worker for the runner to accept and run.
    Assignment {
        /// The worker.
        worker_id: WorkerId,
        /// The fencing token every message about the worker must carry.
        lease_token: String,
        /// Spec, worker token, caller scope.
        assignment: Arc<Assignment>,
        /// When the worker's own timeout passes, in unix milliseconds.
        deadline_ms: i64,
    },
    /// Stop this worker and answer `finished`.
    Cancel {
        /// The worker.
        worker_id: WorkerId,
        /// Why, for the runner's log.
        reason: String,
    },
    /// A message of the runner was refused and not applied.
    Rejected(Refusal),
    /// A message for a running worker (docs §12.6).
    Message {
        /// The worker.
        worker_id: WorkerId,
        /// Its lease token.
        lease_token: String,
        /// The message's id.
        message_id: String,
        /// The text.
        text: String,
        /// Deliver at once.
        interrupt: bool,
    },
    /// The hub ends this session (lease expired, shutdown); the stream ends with this.
    Close {
        /// UPPER_SNAKE reason.
        code: &'static str,
        /// Why, in words.
        reason: String,
    },
}

/// Why a runner's message was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The worker the message named, as sent (may be empty or malformed).
    pub worker_id: String,
    /// UPPER_SNAKE reason: `UNKNOWN_WORKER`, `STALE_LEASE`, `LEASE_ENDED`, …
    pub code: &'static str,
    /// What was wrong, precisely.
    pub reason: String,
}

impl Refusal {
    fn new(worker_id: &str, code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.to_owned(),
            code,
            reason: reason.into(),
        }
    }
}

/// How a runner ended a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The agent produced its result (validated against the output schema by the supervisor).
    Completed {
        /// The result text.
        result: String,
    },
    /// The agent failed.
    Failed {
        /// Why.
        error: String,
        /// An exit code, if the runtime has one.
        exit_code: Option<i32>,
    },
    /// The runner stopped it (normally after `cancel`).
    Canceled,
    /// The agent declined the task (docs §13.1).
    Rejected {
        /// Why.
        reason: String,
    },
}

/// What the executor future of one worker learns from the hub.
#[derive(Debug)]
pub enum RunEvent {
    /// The runner accepted: the worker is running. From a runner of another replica, with the
    /// hash of the token that replica minted for it when it claimed it.
    Accepted {
        /// The claim's token hash (another replica's runner), `None` from this replica's.
        token_hash: Option<String>,
    },
    /// The runner ended it.
    Finished(Finish),
    /// Its runner was lost (silent or gone for a lease); the name is for the error.
    Lost(String),
}

/// A validated `hello`.
#[derive(Debug, Clone)]
pub struct Hello {
    /// The runner's name, for logs and `runner lost: <name>`.
    pub name: String,
    /// Agents served; `*` = any.
    pub agents: Vec<String>,
    /// Workers it runs at once (≥ 1).
    pub slots: u32,
    /// Free-form labels, logged.
    pub labels: BTreeMap<String, String>,
    /// Lease tokens of workers a previous session of this runner held.
    pub resume: Vec<String>,
    /// It takes `message` (capability `messages`, docs §12.6).
    pub messages: bool,
    /// It may send `input_required` (capability `input`).
    pub input: bool,
    /// It reloads a session for a continuation (capability `resume`).
    pub resume_sessions: bool,
}

/// Where a worker waiting for or held by a runner is.
#[derive(Debug, Clone)]
enum Place {
    /// Waiting for a runner.
    Queued,
    /// Offered; withdrawn at `until` unless accepted.
    Offered {
        runner: RunnerId,
        lease: String,
        until: Instant,
    },
    /// Accepted: running on `runner`.
    Running { runner: RunnerId, lease: String },
    /// `cancel` was sent; waiting for `finished`.
    Canceling { runner: RunnerId, lease: String },
}

impl Place {
    fn lease(&self) -> Option<(&RunnerId, &String)> {
        match self {
            Place::Queued => None,
            Place::Offered { runner, lease, .. }
            | Place::Running { runner, lease }
            | Place::Canceling { runner, lease } => Some((runner, lease)),
        }
    }
}

/// One worker of the runner kind, from enqueue to the end of its executor future.
struct Work {
    assignment: Arc<Assignment>,
    deadline_ms: i64,
    /// Arrival order: oldest first.
    seq: u64,
    to_run: mpsc::UnboundedSender<RunEvent>,
    place: Place,
}

/// One runner session.
struct Runner {
    name: String,
    /// `None` = any agent.
    agents: Option<HashSet<String>>,
    slots: usize,
    /// `None` = authentication off: any worker.
    principal: Option<String>,
    /// `None` once the stream ended (its workers wait a lease for a resume).
    tx: Option<mpsc::UnboundedSender<Outbound>>,
    last_seen: Instant,
    gone_since: Option<Instant>,
    held: HashSet<WorkerId>,
    /// Capability `messages`.
    messages: bool,
    /// Capability `input`.
    input: bool,
    /// Capability `resume`.
    resume_sessions: bool,
}

impl Runner {
    fn serves(&self, a: &Assignment) -> bool {
        self.serves_agent(&a.spec.agent.name, &a.caller_scope)
            && (a.runner_resume.is_none() || self.resume_sessions)
    }

    fn serves_agent(&self, agent: &str, scope: &str) -> bool {
        self.agents.as_ref().is_none_or(|set| set.contains(agent))
            && self.principal.as_ref().is_none_or(|p| p == scope)
    }

    fn free(&self) -> usize {
        self.slots.saturating_sub(self.held.len())
    }

    fn send(&self, msg: Outbound) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(msg);
        }
    }
}

#[derive(Default)]
struct State {
    works: HashMap<WorkerId, Work>,
    queue: BTreeSet<(u64, WorkerId)>,
    runners: HashMap<RunnerId, Runner>,
    leases: HashMap<String, WorkerId>,
    ended: HashMap<String, (WorkerId, String)>,
    ended_order: VecDeque<String>,
    next_seq: u64,
}

impl State {
    /// Remembers why a lease ended, so a late message about it gets a precise refusal.
    fn end_lease(&mut self, lease: &str, worker: &WorkerId, why: String) {
        self.leases.remove(lease);
        if self
            .ended
            .insert(lease.to_owned(), (worker.clone(), why))
            .is_none()
        {
            self.ended_order.push_back(lease.to_owned());
        }
        while self.ended_order.len() > ENDED_MEMORY {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// Takes a worker off its runner (if any) and ends its lease.
    fn release(&mut self, id: &WorkerId, why: String) {
        let Some(w) = self.works.get_mut(id) else {
            return;
        };
        let place = std::mem::replace(&mut w.place, Place::Queued);
        if let Some((runner, lease)) = place.lease() {
            if let Some(r) = self.runners.get_mut(runner) {
                r.held.remove(id);
            }
            let lease = lease.clone();
            self.end_lease(&lease, id, why);
        }
    }

    /// Puts a worker back in line, keeping its age.
    fn requeue(&mut self, id: &WorkerId, why: String) {
        self.release(id, why);
        if let Some(w) = self.works.get(id) {
            self.queue.insert((w.seq, id.clone()));
        }
    }

    /// Offers waiting workers, oldest first, to the runner with the most free slots that serves
    /// them. This claim is the part a shared store takes over. It walks the queue only while
    /// some connected runner has a free slot: with every slot taken, a queue of any length
    /// costs nothing here, and each call is made on every enqueue and every end.
    fn dispatch(&mut self, accept_timeout: Duration) {
        let mut free: usize = self
            .runners
            .values()
            .filter(|r| r.tx.is_some())
            .map(Runner::free)
            .sum();
        let now = Instant::now();
        // The last entry looked at: the walk goes on after it (entries may go meanwhile).
        let mut after: Option<(u64, WorkerId)> = None;
        while free > 0 {
            let from = after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
            let Some((seq, id)) = self.queue.range((from, Bound::Unbounded)).next().cloned() else {
                break;
            };
            after = Some((seq, id.clone()));
            let Some(w) = self.works.get(&id) else {
                self.queue.remove(&(seq, id));
                continue;
            };
            let best = self
                .runners
                .iter()
                .filter(|(_, r)| r.tx.is_some() && r.free() > 0 && r.serves(&w.assignment))
                .max_by_key(|(rid, r)| (r.free(), std::cmp::Reverse((*rid).clone())))
                .map(|(rid, _)| rid.clone());
            let Some(rid) = best else { continue };
            let lease = generate_token();
            let assignment = w.assignment.clone();
            let deadline_ms = w.deadline_ms;
            self.queue.remove(&(seq, id.clone()));
            self.leases.insert(lease.clone(), id.clone());
            let r = self.runners.get_mut(&rid).expect("chosen above");
            r.held.insert(id.clone());
            r.send(Outbound::Assignment {
                worker_id: id.clone(),
                lease_token: lease.clone(),
                assignment,
                deadline_ms,
            });
            self.works.get_mut(&id).expect("checked above").place = Place::Offered {
                runner: rid,
                lease,
                until: now + accept_timeout,
            };
            free -= 1;
        }
    }

    /// Every worker of a lost runner: an offer goes back in line (it never ran), a running
    /// worker fails `runner lost: <name>` — once, since its work entry goes with it.
    fn lose_runner(&mut self, rid: &RunnerId, why: &str) {
        let Some(r) = self.runners.get_mut(rid) else {
            return;
        };
        tracing::warn!(runner = %r.name, runner_id = %rid, workers = r.held.len(), why, "runner lost");
        r.send(Outbound::Close {
            code: "RUNNER_LOST",
            reason: format!("runner {} lost: {why}", r.name),
        });
        r.tx = None;
        let name = r.name.clone();
        let held: Vec<WorkerId> = r.held.iter().cloned().collect();
        for id in held {
            let offered = matches!(
                self.works.get(&id).map(|w| &w.place),
                Some(Place::Offered { .. })
            );
            if offered {
                self.requeue(&id, format!("withdrawn: runner {name} lost"));
            } else {
                self.release(&id, format!("runner {name} lost"));
                if let Some(w) = self.works.remove(&id) {
                    let _ = w.to_run.send(RunEvent::Lost(name.clone()));
                }
            }
        }
        self.runners.remove(rid);
    }

    /// Checks that `runner` holds `worker_id` under `lease`; returns the worker and its place.
    fn fenced(
        &self,
        rid: &RunnerId,
        worker_id: &str,
        lease: &str,
    ) -> Result<(WorkerId, &Place), Refusal> {
        let ended = |id: &str| {
            self.ended.get(lease).map(|(w, why)| {
                Refusal::new(
                    id,
                    "LEASE_ENDED",
                    format!("the lease of worker {w} ended ({why}); its token is dead"),
                )
            })
        };
        let Ok(id) = WorkerId::parse(worker_id) else {
            return Err(Refusal::new(
                worker_id,
                "UNKNOWN_WORKER",
                format!("{} is not a worker id", quote(worker_id)),
            ));
        };
        let Some(w) = self.works.get(&id) else {
            return Err(ended(worker_id).unwrap_or_else(|| {
                Refusal::new(
                    worker_id,
                    "UNKNOWN_WORKER",
                    format!("worker {id} is not assigned to this runner"),
                )
            }));
        };
        match w.place.lease() {
            Some((r, l)) if r == rid && l == lease => Ok((id, &w.place)),
            _ => {
                if let Some(refusal) = ended(worker_id).filter(|_| !lease.is_empty()) {
                    return Err(refusal);
                }
                Err(Refusal::new(
                    worker_id,
                    "STALE_LEASE",
                    format!("the lease token does not match the current lease of worker {id}"),
                ))
            }
        }
    }
}

/// Why a `hello` was refused (the stream ends with it).
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
    /// The service is shutting down.
    #[error("the service is shutting down")]
    Closed,
}

/// `value` quoted for a refusal: at most 64 characters, control characters escaped.
fn quote(value: &str) -> String {
    let cut: String = value.chars().take(64).collect();
    let more = if cut.len() < value.len() { "…" } else { "" };
    format!("{:?}{more}", cut)
}

/// The hub. Cheap to share (`Arc`).
pub struct RunnerHub {
    settings: HubSettings,
    state: Mutex<State>,
    closed: std::sync::atomic::AtomicBool,
    /// Whether a runner session is connected ([`RunnerHub::serving`]).
    serving: watch::Sender<bool>,
}

impl RunnerHub {
    /// A hub with no runners, and its clock: a task that ticks while the hub lives.
    pub fn new(settings: HubSettings) -> Arc<Self> {
        let hub = Arc::new(Self {
            settings,
            state: Mutex::new(State::default()),
            closed: false.into(),
            serving: watch::Sender::new(false),
        });
        let weak: Weak<Self> = Arc::downgrade(&hub);
        let tick = (settings.accept_timeout.min(settings.lease) / 10)
            .clamp(Duration::from_millis(10), Duration::from_millis(500));
        tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(hub) = weak.upgrade() else { return };
                hub.tick(Instant::now());
            }
        });
        hub
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("runner hub poisoned")
    }

    /// Whether a runner session is connected, kept up to date: a replica on a shared store
    /// listens for the workers other replicas publish only while one is (docs/runners.md,
    /// "Runners across replicas").
    pub fn serving(&self) -> watch::Receiver<bool> {
        self.serving.subscribe()
    }

    /// Tells [`RunnerHub::serving`]'s receivers when a session connected to an empty hub or
    /// its last one went; called with the state as a change left it.
    fn note_serving(&self, st: &State) {
        let now = st.runners.values().any(|r| r.tx.is_some());
        self.serving
            .send_if_modified(|was| std::mem::replace(was, now) != now);
    }

    /// The protocol timing.
    pub fn settings(&self) -> HubSettings {
        self.settings
    }

    /// A worker waits for a runner; its events arrive on `to_run`.
    pub fn enqueue(
        &self,
        id: WorkerId,
        assignment: Arc<Assignment>,
        deadline_ms: i64,
        to_run: mpsc::UnboundedSender<RunEvent>,
    ) {
        let mut st = self.state();
        let seq = st.next_seq;
        st.next_seq += 1;
        st.queue.insert((seq, id.clone()));
        st.works.insert(
            id,
            Work {
                assignment,
                deadline_ms,
                seq,
                to_run,
                place: Place::Queued,
            },
        );
        st.dispatch(self.settings.accept_timeout);
    }

    /// Whether a connected runner serves `agent` for principal `scope`.
    pub fn serves(&self, agent: &str, scope: &str) -> bool {
        self.state()
            .runners
            .values()
            .any(|r| r.tx.is_some() && r.serves_agent(agent, scope))
    }

    /// Whether the connected runners serving `agent` for `scope` have a free slot that no
    /// worker already waiting here for them is due to take, nor `promised` more on their way.
    pub fn can_take(&self, agent: &str, scope: &str, promised: usize) -> bool {
        let st = self.state();
        let free: usize = st
            .runners
            .values()
            .filter(|r| r.tx.is_some() && r.serves_agent(agent, scope))
            .map(Runner::free)
            .sum();
        let waiting = st
            .queue
            .iter()
            .filter_map(|(_, id)| st.works.get(id))
            .filter(|w| w.assignment.spec.agent.name == agent && w.assignment.caller_scope == scope)
            .count();
        free > waiting + promised
    }

    /// Asks the runner of a running worker to stop it (`cancel`); a waiting or offered worker is
    /// simply withdrawn. Returns whether a runner had accepted it (then wait for `finished`).
    pub fn cancel(&self, id: &WorkerId, reason: &str) -> bool {
        let mut st = self.state();
        let Some(w) = st.works.get(id) else {
            return false;
        };
        match w.place.clone() {
            Place::Queued => {
                let seq = w.seq;
                st.queue.remove(&(seq, id.clone()));
                false
            }
            Place::Offered { runner, .. } => {
                if let Some(r) = st.runners.get(&runner) {
                    r.send(Outbound::Cancel {
                        worker_id: id.clone(),
                        reason: reason.to_owned(),
                    });
                }
                st.release(id, format!("withdrawn: {reason}"));
                st.dispatch(self.settings.accept_timeout);
                false
            }
            Place::Running { runner, lease } | Place::Canceling { runner, lease } => {
                if let Some(r) = st.runners.get(&runner) {
                    r.send(Outbound::Cancel {
                        worker_id: id.clone(),
                        reason: reason.to_owned(),
                    });
                }
                st.works.get_mut(id).expect("present").place = Place::Canceling { runner, lease };
                true
            }
        }
    }

    /// The executor future of a worker ended: forget it, end its lease, free its slot.
    pub fn remove(&self, id: &WorkerId, why: &str) {
        let mut st = self.state();
        if let Some(w) = st.works.get(id) {
            let seq = w.seq;
            st.queue.remove(&(seq, id.clone()));
        }
        st.release(id, why.to_owned());
        st.works.remove(id);
        st.dispatch(self.settings.accept_timeout);
    }

    /// A runner said `hello`: a new session, its resumed workers, then a `welcome` (first on
    /// its stream) and, for resume tokens it does not hold, `rejected`.
    pub fn connect(
        &self,
        hello: Hello,
        principal: Option<String>,
    ) -> Result<(RunnerId, mpsc::UnboundedReceiver<Outbound>), HelloError> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(HelloError::Closed);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let rid = format!("rnr_{}", generate_token());
        let _ = tx.send(Outbound::Welcome {
            runner_id: rid.clone(),
            heartbeat_interval: self.settings.heartbeat_interval,
            lease: self.settings.lease,
        });
        let mut st = self.state();
        let agents = (!hello.agents.iter().any(|a| a == "*"))
            .then(|| hello.agents.iter().cloned().collect::<HashSet<_>>());
        st.runners.insert(
            rid.clone(),
            Runner {
                name: hello.name.clone(),
                agents,
                slots: hello.slots as usize,
                principal,
                tx: Some(tx.clone()),
                last_seen: Instant::now(),
                gone_since: None,
                held: HashSet::new(),
                messages: hello.messages,
                input: hello.input,
                resume_sessions: hello.resume_sessions,
            },
        );
        for token in &hello.resume {
            // The token is the secret; tenancy is checked all the same.
            let found = st.leases.get(token).cloned().filter(|id| {
                st.runners[&rid]
                    .principal
                    .as_ref()
                    .is_none_or(|p| *p == st.works[id].assignment.caller_scope)
            });
            let Some(id) = found else {
                let why = match st.ended.get(token) {
                    Some((w, why)) => format!("the lease of worker {w} ended ({why})"),
                    None => "no worker is held under this lease token".to_owned(),
                };
                let _ = tx.send(Outbound::Rejected(Refusal::new(
                    "",
                    "RESUME_REFUSED",
                    format!("cannot resume: {why}"),
                )));
                continue;
            };
            let place = st.works[&id].place.clone();
            let (old, lease) = place.lease().expect("a lease has a place");
            let (old, lease) = (old.clone(), lease.clone());
            if let Some(o) = st.runners.get_mut(&old) {
                o.held.remove(&id);
            }
            let new_place = match place {
                Place::Offered { .. } => {
                    // Offers of a gone session were already withdrawn; an offer of a session
                    // still connected moves as an offer.
                    Place::Offered {
                        runner: rid.clone(),
                        lease,
                        until: Instant::now() + self.settings.accept_timeout,
                    }
                }
                Place::Running { .. } => Place::Running {
                    runner: rid.clone(),
                    lease,
                },
                Place::Canceling { .. } => {
                    let _ = tx.send(Outbound::Cancel {
                        worker_id: id.clone(),
                        reason: "stop requested before the runner reconnected".to_owned(),
                    });
                    Place::Canceling {
                        runner: rid.clone(),
                        lease,
                    }
                }
                Place::Queued => unreachable!("a leased worker is not queued"),
            };
            st.works.get_mut(&id).expect("present").place = new_place;
            st.runners.get_mut(&rid).expect("inserted").held.insert(id);
            // A gone session with nothing left to resume is finished with.
            if st
                .runners
                .get(&old)
                .is_some_and(|o| o.tx.is_none() && o.held.is_empty())
            {
                st.runners.remove(&old);
            }
        }
        tracing::info!(
            runner = %hello.name,
            runner_id = %rid,
            slots = hello.slots,
            agents = ?hello.agents,
            labels = ?hello.labels,
            resumed = st.runners[&rid].held.len(),
            "runner connected"
        );
        self.note_serving(&st);
        st.dispatch(self.settings.accept_timeout);
        Ok((rid, rx))
    }

    /// The stream of a session ended: offers go back in line at once; running workers wait a
    /// lease for the runner to come back with `hello.resume`.
    pub fn disconnect(&self, rid: &RunnerId) {
        let mut st = self.state();
        let Some(r) = st.runners.get_mut(rid) else {
            return;
        };
        r.tx = None;
        r.gone_since = Some(Instant::now());
        let name = r.name.clone();
        let offered: Vec<WorkerId> = st
            .works
            .iter()
            .filter(|(_, w)| matches!(&w.place, Place::Offered { runner, .. } if runner == rid))
            .map(|(id, _)| id.clone())
            .collect();
        for id in offered {
            st.requeue(&id, format!("withdrawn: runner {name} disconnected"));
        }
        if st.runners.get(rid).is_some_and(|r| r.held.is_empty()) {
            st.runners.remove(rid);
        }
        tracing::info!(runner = %name, runner_id = %rid, "runner disconnected");
        self.note_serving(&st);
        st.dispatch(self.settings.accept_timeout);
    }

    /// Any message of a runner: it is alive.
    pub fn touch(&self, rid: &RunnerId) {
        if let Some(r) = self.state().runners.get_mut(rid) {
            r.last_seen = Instant::now();
        }
    }

    /// Sends a refusal to the runner.
    pub fn reject(&self, rid: &RunnerId, refusal: Refusal) {
        tracing::debug!(runner_id = %rid, worker = %refusal.worker_id, code = refusal.code, reason = %refusal.reason, "runner message refused");
        if let Some(r) = self.state().runners.get(rid) {
            r.send(Outbound::Rejected(refusal));
        }
    }

    /// `accepted`: the offered worker runs. Returns the worker id for the caller to wait until
    /// `running` is recorded.
    pub fn accept(
        &self,
        rid: &RunnerId,
        worker_id: &str,
        lease: &str,
    ) -> Result<WorkerId, Refusal> {
        let mut st = self.state();
        let (id, place) = st.fenced(rid, worker_id, lease)?;
        match place.clone() {
            Place::Offered { runner, lease, .. } => {
                let w = st.works.get_mut(&id).expect("fenced");
                w.place = Place::Running { runner, lease };
                let _ = w.to_run.send(RunEvent::Accepted { token_hash: None });
                Ok(id)
            }
            _ => Err(Refusal::new(
                worker_id,
                "ALREADY_ACCEPTED",
                format!("worker {id} was already accepted"),
            )),
        }
    }

    /// Sends a message to the runner that runs worker `id` (docs §12.6): `Err` with the refusal
    /// when the worker is not running on a runner connected here that takes messages.
    pub fn message(
        &self,
        id: &WorkerId,
        message_id: &str,
        text: &str,
        interrupt: bool,
    ) -> Result<(), String> {
        let st = self.state();
        let running = st.works.get(id).and_then(|w| match &w.place {
            Place::Running { runner, lease } => Some((runner, lease)),
            _ => None,
        });
        let Some((rid, lease)) = running else {
            return Err(format!(
                "worker {id} is not running on a runner connected to this replica"
            ));
        };
        match st.runners.get(rid) {
            Some(r) if r.messages => {
                r.send(Outbound::Message {
                    worker_id: id.clone(),
                    lease_token: lease.clone(),
                    message_id: message_id.to_owned(),
                    text: text.to_owned(),
                    interrupt,
                });
                Ok(())
            }
            _ => Err(format!(
                "worker {id} runs on a runner that does not take messages"
            )),
        }
    }

    /// Whether worker `id` runs on a runner connected here that takes messages.
    pub fn takes_messages(&self, id: &WorkerId) -> Result<(), String> {
        let st = self.state();
        match st.works.get(id).map(|w| &w.place) {
            Some(Place::Running { runner, .. })
                if st.runners.get(runner).is_some_and(|r| r.messages) =>
            {
                Ok(())
            }
            Some(Place::Running { .. }) => Err(format!(
                "worker {id} runs on a runner that does not take messages"
            )),
            _ => Err(format!(
                "worker {id} runs on a runner that does not take messages (it is not running on a runner connected to this replica)"
            )),
        }
    }

    /// Fencing for `input_required`: an accepted lease of a runner with capability `input`.
    pub fn check_input(
        &self,
        rid: &RunnerId,
        worker_id: &str,
        lease: &str,
    ) -> Result<WorkerId, Refusal> {
        let id = self.check_running(rid, worker_id, lease)?;
        if self.state().runners.get(rid).is_some_and(|r| r.input) {
            Ok(id)
        } else {
            Err(Refusal::new(
                worker_id,
                "CAPABILITY_MISSING",
                "input_required needs the capability \"input\" in hello.capabilities",
            ))
        }
    }

    /// Fencing for `progress`: the runner must hold an accepted lease.
    pub fn check_running(
        &self,
        rid: &RunnerId,
        worker_id: &str,
        lease: &str,
    ) -> Result<WorkerId, Refusal> {
        let st = self.state();
        let (id, place) = st.fenced(rid, worker_id, lease)?;
        match place {
            Place::Offered { .. } => Err(Refusal::new(
                worker_id,
                "NOT_ACCEPTED",
                format!("worker {id} has not been accepted yet: send accepted first"),
            )),
            _ => Ok(id),
        }
    }

    /// `finished`: hands the outcome to the worker's executor future and ends the lease at
    /// once, so a second `finished` (or anything else) about it is refused.
    pub fn finish(
        &self,
        rid: &RunnerId,
        worker_id: &str,
        lease: &str,
        finish: Finish,
        session_ref: Option<String>,
    ) -> Result<WorkerId, Refusal> {
        let mut st = self.state();
        let (id, place) = st.fenced(rid, worker_id, lease)?;
        if matches!(place, Place::Offered { .. }) {
            return Err(Refusal::new(
                worker_id,
                "NOT_ACCEPTED",
                format!("worker {id} has not been accepted yet: send accepted first"),
            ));
        }
        st.release(&id, "finished".to_owned());
        if let Some(w) = st.works.remove(&id) {
            if let Some(r) = session_ref {
                w.assignment.session_ref.set(r);
            }
            let _ = w.to_run.send(RunEvent::Finished(finish));
        }
        st.dispatch(self.settings.accept_timeout);
        Ok(id)
    }

    /// The clock: withdraws offers past the accept timeout (and offers them again), and loses
    /// runners silent or gone for a lease.
    pub fn tick(&self, now: Instant) {
        let mut st = self.state();
        let expired: Vec<(WorkerId, RunnerId)> = st
            .works
            .iter()
            .filter_map(|(id, w)| match &w.place {
                Place::Offered { runner, until, .. } if *until <= now => {
                    Some((id.clone(), runner.clone()))
                }
                _ => None,
            })
            .collect();
        let accept = self.settings.accept_timeout;
        for (id, rid) in expired {
            let reason = format!(
                "assignment withdrawn: not accepted within {}",
                crate::workers::supervisor::seconds(accept)
            );
            if let Some(r) = st.runners.get(&rid) {
                r.send(Outbound::Cancel {
                    worker_id: id.clone(),
                    reason: reason.clone(),
                });
            }
            tracing::info!(worker = %id, runner_id = %rid, "assignment not accepted in time; offering again");
            st.requeue(&id, reason);
        }
        let lease = self.settings.lease;
        let lost: Vec<(RunnerId, &'static str)> = st
            .runners
            .iter()
            .filter_map(|(rid, r)| match r.gone_since {
                Some(t) if now.duration_since(t) >= lease => {
                    Some((rid.clone(), "disconnected and not back within the lease"))
                }
                None if now.duration_since(r.last_seen) >= lease => {
                    Some((rid.clone(), "silent for the lease"))
                }
                _ => None,
            })
            .collect();
        if !lost.is_empty() {
            for (rid, why) in lost {
                st.lose_runner(&rid, why);
            }
            self.note_serving(&st);
        }
        st.dispatch(accept);
    }

    /// Shutdown: no new sessions; every stream ends.
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        for r in self.state().runners.values() {
            r.send(Outbound::Close {
                code: "SHUTTING_DOWN",
                reason: "the service is shutting down".to_owned(),
            });
        }
    }

    /// Connected sessions and workers waiting for a runner, for logs and tests.
    pub fn counts(&self) -> (usize, usize) {
        let st = self.state();
        (
            st.runners.values().filter(|r| r.tx.is_some()).count(),
            st.queue.len(),
        )
    }
}
