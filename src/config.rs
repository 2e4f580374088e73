//! Typed, strict configuration: a YAML file plus `AGENTRY_<KEY>` overrides of the scalar
//! top-level keys (docs §8.1).
//!
//! Every key is optional and has the default the spec gives; an unknown key or a bad value is an
//! error that names the key. Environment overrides are injected as a map so tests never touch the
//! process environment. This module depends on nothing else in the crate.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;

mod models;
pub use models::{McpServer, ModelLoop, ModelsConfig, OPENAI_BASE_URL, OPENAI_MODEL, Provider};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named with `--config` could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The YAML did not match the schema (unknown key, wrong type, bad duration).
    #[error("invalid config{where_}: {message}")]
    Invalid {
        /// ` in FILE` when a file was read.
        where_: String,
        /// serde's message, which names the offending key.
        message: String,
    },
    /// An `AGENTRY_*` variable had a bad value.
    #[error("invalid value for {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What was wrong.
        message: String,
    },
    /// A value parsed but breaks a rule (e.g. a relative `agent_dirs` path).
    #[error("invalid config key {key}: {message}")]
    Rule {
        /// Dotted key path.
        key: String,
        /// What was wrong.
        message: String,
    },
}

/// One extra persona directory (`agent_dirs`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentDir {
    /// Absolute directory to read.
    pub path: PathBuf,
    /// Load `<path>/**/*.md` (minus README.md) instead of only the top level. Default false.
    #[serde(default)]
    pub recursive: bool,
}

/// One extra workflow-command directory (`command_dirs`, docs §3.6).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CommandDir {
    /// Absolute directory to read.
    pub path: PathBuf,
    /// Load `<path>/**/*.md` (minus README.md) — commands are read recursively, so the default
    /// is true; false reads only the top level.
    #[serde(default = "yes")]
    pub recursive: bool,
}

fn yes() -> bool {
    true
}

/// `plan_mode`: what MODE_PLAN does to an agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanMode {
    /// Preamble put before the agent's prompt in plan mode.
    pub prompt: String,
    /// The exact tool list a plan-mode worker gets.
    pub tools: Vec<String>,
}

impl Default for PlanMode {
    fn default() -> Self {
        Self {
            prompt: "You are in plan mode. Investigate and produce a plan; do not modify files, \
                     run mutating commands or spawn other agents. Report the plan as your result."
                .to_owned(),
            tools: ["read", "grep", "find", "ls", "lsp", "fetch", "web_search"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// `store`: where worker rows live.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// SQLite file; default `$XDG_STATE_HOME/agentry/agentry.db` (or `~/.local/state/...`).
    pub path: Option<PathBuf>,
    /// PostgreSQL URL (`postgres://user@host:5432/db`), shared by several replicas (docs §9);
    /// instead of `path`. Also `AGENTRY_STORE_URL`.
    pub url: Option<String>,
}

/// `replica`: this process among several sharing a PostgreSQL store (docs §9).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplicaConfig {
    /// Shown in logs and in `orphaned: replica <name> lost`. Default the host name.
    pub name: Option<String>,
    /// How long the replica's row stays valid without renewal (renewed every `lease / 3`);
    /// after that other replicas close its runs as orphans. Default 15 s.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long a batch of workers' writes may stay open for more while other workers of this
    /// replica are open (docs/replicas.md, "Group commit"). Default 2 ms; at most 100 ms; `0s`
    /// sends every batch at once.
    #[serde(with = "humantime_serde")]
    pub commit_window: Duration,
}

/// The longest `replica.commit_window`.
pub const MAX_COMMIT_WINDOW: Duration = Duration::from_millis(100);

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            name: None,
            lease: Duration::from_secs(15),
            commit_window: Duration::from_millis(2),
        }
    }
}

/// Where workers are stored, once the configuration is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded SQLite file.
    Sqlite(PathBuf),
    /// A shared PostgreSQL database.
    Postgres(String),
}

/// Which executor runs an agent's workers (docs/runners.md).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// A process per worker on this host (`executor.command`).
    #[default]
    Exec,
    /// A connected runner pulls the worker (`RunnerService/Connect`).
    Runner,
    /// agentry runs the agent loop itself over an OpenAI-compatible API (docs/model.md §11).
    Model,
}

/// The longest `executor.start_hold`.
pub const MAX_START_HOLD: Duration = Duration::from_secs(60);

/// `executor`: how workers are run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    /// `exec` (default) or `runner`: the executor of every agent not named in `by_agent`.
    pub kind: ExecutorKind,
    /// Per-agent overrides of `kind`, e.g. `{reviewer: exec}`.
    pub by_agent: BTreeMap<String, ExecutorKind>,
    /// argv of the agent runtime started per worker (never through a shell).
    pub command: Vec<String>,
    /// Extra environment for every worker process.
    pub env: BTreeMap<String, String>,
    /// Default and maximum run time of one worker. Default 10 minutes.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL when stopping. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub kill_grace: Duration,
    /// Bound on a worker's stdout, in bytes. Default 1 MiB.
    pub max_output_bytes: usize,
    /// How long the start of a worker's process may wait for its end, to be written with it
    /// (docs/workers.md §6.2). Default 5 ms; at most 1 minute; `0s` writes every start at once.
    #[serde(with = "humantime_serde")]
    pub start_hold: Duration,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            kind: ExecutorKind::Exec,
            by_agent: BTreeMap::new(),
            command: vec!["/usr/local/bin/run-agent".to_owned()],
            env: BTreeMap::new(),
            timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(5),
            max_output_bytes: 1 << 20,
            start_hold: Duration::from_millis(5),
        }
    }
}

/// `runners`: the timing of the runner protocol (docs/runners.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnersConfig {
    /// How often an idle runner must send `heartbeat {}`, told to it in `welcome`. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// A runner silent (or disconnected and not back) this long loses its workers, which fail
    /// with `runner lost: <name>`. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long an assignment waits for `accepted` before it is withdrawn and offered again.
    /// Default 5 s.
    #[serde(with = "humantime_serde")]
    pub accept_timeout: Duration,
}

impl Default for RunnersConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(5),
            lease: Duration::from_secs(30),
            accept_timeout: Duration::from_secs(5),
        }
    }
}

/// `dedupe`: the identical-dispatch cache.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DedupeConfig {
    /// How long a dispatch is remembered. Default 120 s.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Bound on remembered dispatches. Default 100 000.
    pub max_entries: u64,
}

impl Default for DedupeConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(120),
            max_entries: 100_000,
        }
    }
}

/// `limits`: admission bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Workers running at once. Default 32.
    pub max_running: usize,
    /// Workers waiting in `pending`. Default 1024.
    pub max_pending: usize,
    /// Largest accepted prompt, in bytes. Default 256 KiB.
    pub max_prompt_bytes: usize,
    /// Events (transitions and progress reports) one worker may have; a progress report beyond
    /// it is refused (docs/workers.md §6.9). Default 10 000.
    pub max_events_per_worker: u64,
    /// Bytes of one `ListWorkers` page (results, errors and the rest of each worker, about as
    /// sent): a page ends before it would go over, and always holds at least one worker. Under
    /// gRPC's default 4 MiB message limit of clients. Default 3 MiB.
    pub max_page_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_running: 32,
            max_pending: 1024,
            max_prompt_bytes: 256 * 1024,
            max_events_per_worker: 10_000,
            max_page_bytes: 3 << 20,
        }
    }
}

/// `review`: the review gate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewConfig {
    /// Persona run as the reviewer. Default `reviewer`.
    pub agent: String,
    /// Bound on one review, independent of the executor timeout. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Offered tool names (`mcp__fs__write_file`) the model executor always has reviewed,
    /// whatever their annotations say (docs/model.md §11.7).
    pub tools: Vec<String>,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        Self {
            agent: "reviewer".to_owned(),
            timeout: Duration::from_secs(60),
            tools: Vec::new(),
        }
    }
}

/// `mcp`: what persona files may say about MCP servers (docs/personas.md §2.9).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Whether a project persona file (one in the workspace, written by whoever can write
    /// there) may define its own MCP servers, which start programs; user, plugin and
    /// configured dirs always may. Default false.
    pub allow_inline: bool,
}

/// `workers`: how workers are placed (docs/workers.md §6.10), and their conversations (docs
/// §12.7).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersConfig {
    /// `none` (default) or `worktree`: the isolation of a worker whose request and persona say
    /// nothing.
    pub isolation: IsolationKind,
    /// Where a worktree branches from: `head` (default) or `default_branch`.
    pub worktree_base: crate::workers::worktree::Base,
    /// Where worktrees are made; default `worktrees/` beside the SQLite store.
    pub worktrees_dir: Option<PathBuf>,
    /// Undelivered messages one worker may hold (default 100).
    pub inbox_max: u32,
    /// Bound on one model worker's persisted conversation (default 8 MiB).
    pub transcript_max_bytes: usize,
    /// How long a finished worker's transcript is kept (default 7 days).
    #[serde(with = "humantime_serde")]
    pub transcript_ttl: Duration,
    /// How long a worker waits in `input_required` (default 24 h).
    #[serde(with = "humantime_serde")]
    pub input_timeout: Duration,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        Self {
            isolation: IsolationKind::default(),
            worktree_base: crate::workers::worktree::Base::default(),
            worktrees_dir: None,
            inbox_max: 100,
            transcript_max_bytes: 8 << 20,
            transcript_ttl: Duration::from_secs(7 * 24 * 3600),
            input_timeout: Duration::from_secs(24 * 3600),
        }
    }
}

/// `workers.isolation`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IsolationKind {
    /// The worker runs in the workspace itself.
    #[default]
    None,
    /// A git worktree per worker.
    Worktree,
}

/// `http`: the HTTP listener (docs/a2a.md §13.2, docs/console.md §14.4).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `host:port` of the HTTP listener (A2A, the console); unset = off (default).
    pub listen: Option<String>,
}

impl HttpConfig {
    /// The address to bind: `listen` as given, or for `:port` loopback without authentication
    /// (`authenticated` false) and every address with it.
    pub fn bind_address(&self, authenticated: bool) -> Option<String> {
        let listen = self.listen.as_deref()?;
        Some(match listen.strip_prefix(':') {
            Some(port) if authenticated => format!("0.0.0.0:{port}"),
            Some(port) => format!("127.0.0.1:{port}"),
            None => listen.to_owned(),
        })
    }
}

/// `a2a`: agentry as an A2A server and client (docs/a2a.md §13.5).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// The agent whose card `/.well-known/agent-card.json` serves; unset = none.
    pub default_agent: Option<String>,
    /// Bound on fetching a remote agent's card (default 10 s).
    #[serde(with = "humantime_serde")]
    pub card_timeout: Duration,
    /// Per remote persona (by name): how to authenticate to its A2A agent.
    pub remotes: BTreeMap<String, A2aRemote>,
    /// Whether a persona file in a project directory (written by whoever can write the
    /// workspace) may be a remote A2A agent, which makes agentry call its URL. Default false.
    pub allow_project_remotes: bool,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            default_agent: None,
            card_timeout: Duration::from_secs(10),
            remotes: BTreeMap::new(),
            allow_project_remotes: false,
        }
    }
}

/// `a2a.remotes.<persona>`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aRemote {
    /// A variable holding the bearer token sent to the remote agent (read when a worker
    /// starts, never logged).
    pub bearer_env: Option<String>,
}

/// `auth`: bearer tokens.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// YAML map token → principal; unset = no auth, every caller is `anonymous`.
    pub tokens_file: Option<PathBuf>,
    /// Principals that see and stop every worker; everyone else only sees its own (default
    /// none). Meaningful only with `tokens_file`.
    pub operators: Vec<String>,
}

/// `discovery`: snapshot caching (an agentry addition to docs §8.1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// Second line of defence behind the file watcher: a snapshot older than this is rebuilt.
    /// Default 30 s.
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    /// Bound on cached snapshots, counted in agent definitions held (winners + shadowed) across
    /// all cached workspaces, so memory stays bounded however large each snapshot is.
    /// Default 50 000 (about 200 MB at the measured ~4 KB per definition).
    pub cache_max_agents: u64,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            cache_ttl: Duration::from_secs(30),
            cache_max_agents: 50_000,
        }
    }
}

/// The whole configuration (docs §8.1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `host:port` to listen on. Default `127.0.0.1:50051`.
    pub listen: String,
    /// Home directory for user dirs and the plugin registry. Default `$HOME`.
    pub home: Option<PathBuf>,
    /// Config-dir families in precedence order.
    pub families: Vec<String>,
    /// Extra persona directories, after plugins and before bundled agents.
    pub agent_dirs: Vec<AgentDir>,
    /// Extra workflow-command directories, after plugins and before the bundled commands.
    pub command_dirs: Vec<CommandDir>,
    /// When non-empty, a workspace must lie under one of these (after resolving symlinks).
    pub workspace_roots: Vec<PathBuf>,
    /// Include the six bundled agents and the bundled `init` command. Default true.
    pub bundled_agents: bool,
    /// Tools appended to every explicit `tools` list. Default `[submit_result]`.
    pub implicit_tools: Vec<String>,
    /// Name of the tool that spawns workers. Default `task`.
    pub spawn_tool: String,
    /// Agents that can be resolved but never spawned nor listed in a catalog.
    pub reserved_agents: Vec<String>,
    /// Deepest allowed worker depth; negative = unlimited. Default 2.
    pub max_recursion_depth: i64,
    /// Universal preamble of every composed system prompt.
    pub base_prompt: String,
    /// Plan-mode preamble and tools.
    pub plan_mode: PlanMode,
    /// Worker store.
    pub store: StoreConfig,
    /// This replica, with a shared store.
    pub replica: ReplicaConfig,
    /// Worker executor.
    pub executor: ExecutorConfig,
    /// Runner protocol timing.
    pub runners: RunnersConfig,
    /// Dispatch dedupe.
    pub dedupe: DedupeConfig,
    /// Admission limits.
    pub limits: Limits,
    /// Review gate.
    pub review: ReviewConfig,
    /// Bound on a graceful shutdown. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Bearer-token authentication.
    pub auth: AuthConfig,
    /// Snapshot caching.
    pub discovery: DiscoveryConfig,
    /// Worker placement: isolation in git worktrees (docs/workers.md §6.10).
    pub workers: WorkersConfig,
    /// Model providers, the default model and aliases (docs/model.md §11.2).
    pub models: ModelsConfig,
    /// Bounds of the model executor's loop (§11.10).
    pub model: ModelLoop,
    /// The HTTP listener (A2A, docs/a2a.md §13.2).
    pub http: HttpConfig,
    /// A2A (docs/a2a.md §13.5).
    pub a2a: A2aConfig,
    /// MCP servers the model executor may start for a worker (§11.6).
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// What persona files may say about MCP servers.
    pub mcp: McpConfig,
    /// True when the file gives no executor (`executor.kind`, `.command`, `.by_agent`) and the
    /// environment has no `OPENAI_API_KEY`: every spawn is refused, naming both ways to
    /// configure one (§11.1). Not a configuration key.
    #[serde(skip)]
    pub executor_unconfigured: bool,
    /// `XDG_STATE_HOME` from the injected environment (never read from the process itself), the
    /// base of the default store path. Not a configuration key.
    #[serde(skip)]
    pub state_home: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:50051".to_owned(),
            home: None,
            families: [".xcsh", ".claude", ".codex", ".gemini"]
                .map(String::from)
                .to_vec(),
            agent_dirs: Vec::new(),
            command_dirs: Vec::new(),
            workspace_roots: Vec::new(),
            bundled_agents: true,
            implicit_tools: vec!["submit_result".to_owned()],
            spawn_tool: "task".to_owned(),
            reserved_agents: vec!["reviewer".to_owned(), "default".to_owned()],
            max_recursion_depth: 2,
            base_prompt: String::new(),
            plan_mode: PlanMode::default(),
            store: StoreConfig::default(),
            replica: ReplicaConfig::default(),
            executor: ExecutorConfig::default(),
            runners: RunnersConfig::default(),
            dedupe: DedupeConfig::default(),
            limits: Limits::default(),
            review: ReviewConfig::default(),
            shutdown_grace: Duration::from_secs(10),
            auth: AuthConfig::default(),
            discovery: DiscoveryConfig::default(),
            workers: WorkersConfig::default(),
            http: HttpConfig::default(),
            a2a: A2aConfig::default(),
            models: ModelsConfig::default(),
            model: ModelLoop::default(),
            mcp_servers: BTreeMap::new(),
            mcp: McpConfig::default(),
            executor_unconfigured: false,
            state_home: None,
        }
    }
}

/// What the OpenAI SDKs' variables say, read from the injected environment.
#[derive(Default)]
struct OpenAiEnv {
    key: bool,
    base_url: Option<String>,
    model: Option<String>,
}

impl OpenAiEnv {
    /// The implicit executor of docs/model.md §11.1: `model`, with a provider `openai` (unless
    /// the file names one) and, without `models.default`, `openai/$OPENAI_MODEL`.
    fn apply(self, cfg: &mut Config) {
        cfg.executor.kind = ExecutorKind::Model;
        if cfg.models.provider("openai").is_none() {
            cfg.models.providers.push(Provider {
                name: "openai".to_owned(),
                base_url: self.base_url.unwrap_or_else(|| OPENAI_BASE_URL.to_owned()),
                api_key_env: Some("OPENAI_API_KEY".to_owned()),
                headers: BTreeMap::new(),
            });
        }
        if cfg.models.default.is_none() {
            let model = self.model.unwrap_or_else(|| OPENAI_MODEL.to_owned());
            cfg.models.default = Some(format!("openai/{model}"));
        }
    }
}

/// Scalar top-level keys that `AGENTRY_<KEY>` may override.
const ENV_KEYS: &[&str] = &[
    "listen",
    "home",
    "bundled_agents",
    "spawn_tool",
    "max_recursion_depth",
    "base_prompt",
    "shutdown_grace",
];

impl Config {
    /// Loads the optional file, then applies overrides from `env` (normally `std::env::vars()`),
    /// then fills derived defaults (`home`) and checks cross-field rules.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let (text, where_) = match file {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?,
                format!(" in {}", path.display()),
            ),
            None => (String::new(), String::new()),
        };
        let mut value: serde_yaml::Value = if text.trim().is_empty() {
            serde_yaml::Value::Mapping(Default::default())
        } else {
            serde_yaml::from_str(&text).map_err(|e| ConfigError::Invalid {
                where_: where_.clone(),
                message: e.to_string(),
            })?
        };
        let map = value.as_mapping_mut().ok_or_else(|| ConfigError::Invalid {
            where_: where_.clone(),
            message: "the top level must be a mapping".to_owned(),
        })?;
        let executor_given = map
            .get("executor")
            .and_then(serde_yaml::Value::as_mapping)
            .is_some_and(|m| {
                ["kind", "command", "by_agent"]
                    .iter()
                    .any(|k| m.contains_key(*k))
            });
        let mut home_env = None;
        let mut state_home = None;
        let mut openai = OpenAiEnv::default();
        for (var, raw) in env {
            match var.as_str() {
                "OPENAI_API_KEY" => openai.key = !raw.is_empty(),
                "OPENAI_BASE_URL" => openai.base_url = Some(raw.clone()).filter(|u| !u.is_empty()),
                "OPENAI_MODEL" => openai.model = Some(raw.clone()).filter(|m| !m.is_empty()),
                _ => {}
            }
            if var == "HOME" {
                home_env = Some(PathBuf::from(&raw));
                continue;
            }
            if var == "XDG_STATE_HOME" {
                state_home = Some(PathBuf::from(&raw)).filter(|p| p.is_absolute());
                continue;
            }
            let Some(key) = var.strip_prefix("AGENTRY_") else {
                continue;
            };
            // The one nested key with an override: the database URL is a secret that
            // deployments inject as a variable (a Kubernetes Secret), not a file.
            if key == "STORE_URL" {
                let store = map
                    .entry(serde_yaml::Value::String("store".to_owned()))
                    .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
                let Some(store) = store.as_mapping_mut() else {
                    return Err(ConfigError::Invalid {
                        where_: where_.clone(),
                        message: "store: must be a mapping".to_owned(),
                    });
                };
                store.insert(
                    serde_yaml::Value::String("url".to_owned()),
                    serde_yaml::Value::String(raw),
                );
                continue;
            }
            let key = key.to_ascii_lowercase();
            if !ENV_KEYS.contains(&key.as_str()) {
                continue;
            }
            let bad = |message: String| ConfigError::Env {
                var: var.clone(),
                message,
            };
            let parsed = match key.as_str() {
                "bundled_agents" => serde_yaml::Value::Bool(
                    raw.parse()
                        .map_err(|_| bad(format!("expected true or false, got {raw:?}")))?,
                ),
                "max_recursion_depth" => serde_yaml::Value::Number(
                    raw.parse::<i64>()
                        .map_err(|_| bad(format!("expected an integer, got {raw:?}")))?
                        .into(),
                ),
                _ => serde_yaml::Value::String(raw),
            };
            map.insert(serde_yaml::Value::String(key), parsed);
        }
        // Round-trip through text so serde_yaml's errors carry the key path (`executor.timeout`).
        let text = serde_yaml::to_string(&value).map_err(|e| ConfigError::Invalid {
            where_: where_.clone(),
            message: e.to_string(),
        })?;
        let mut cfg: Config = serde_yaml::from_str(&text).map_err(|e| ConfigError::Invalid {
            where_,
            message: e.to_string(),
        })?;
        if cfg.home.is_none() {
            cfg.home = home_env;
        }
        cfg.state_home = state_home;
        if !executor_given {
            if openai.key {
                openai.apply(&mut cfg);
            } else {
                cfg.executor_unconfigured = true;
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let rule = |key: &str, message: String| ConfigError::Rule {
            key: key.to_owned(),
            message,
        };
        if self.listen.trim().is_empty() {
            return Err(rule("listen", "must be host:port or unix:/path".into()));
        }
        // A shutdown stops every worker, each with up to kill_grace between SIGTERM and SIGKILL;
        // a grace that does not fit would end the process with workers still alive.
        if self.executor.kill_grace >= self.shutdown_grace {
            return Err(rule(
                "executor.kill_grace",
                format!(
                    "({}) must be shorter than shutdown_grace ({}), so a shutdown can stop workers",
                    humantime::format_duration(self.executor.kill_grace),
                    humantime::format_duration(self.shutdown_grace)
                ),
            ));
        }
        // Moments, not delays or states of their own: every write of a worker's life may wait
        // the commit window, and a held start shows a worker `pending` while its process runs.
        for (key, value, most) in [
            (
                "replica.commit_window",
                self.replica.commit_window,
                MAX_COMMIT_WINDOW,
            ),
            (
                "executor.start_hold",
                self.executor.start_hold,
                MAX_START_HOLD,
            ),
        ] {
            if value > most {
                return Err(rule(
                    key,
                    format!(
                        "({}) must be at most {}",
                        humantime::format_duration(value),
                        humantime::format_duration(most)
                    ),
                ));
            }
        }
        for (i, d) in self.agent_dirs.iter().enumerate() {
            if !d.path.is_absolute() {
                return Err(rule(
                    &format!("agent_dirs[{i}].path"),
                    format!("must be absolute, got {}", d.path.display()),
                ));
            }
        }
        for (i, d) in self.command_dirs.iter().enumerate() {
            if !d.path.is_absolute() {
                return Err(rule(
                    &format!("command_dirs[{i}].path"),
                    format!("must be absolute, got {}", d.path.display()),
                ));
            }
        }
        for (i, r) in self.workspace_roots.iter().enumerate() {
            if !r.is_absolute() {
                return Err(rule(
                    &format!("workspace_roots[{i}]"),
                    format!("must be absolute, got {}", r.display()),
                ));
            }
        }
        for (i, f) in self.families.iter().enumerate() {
            if f.is_empty() || f.contains('/') || f == "." || f == ".." {
                return Err(rule(
                    &format!("families[{i}]"),
                    format!("must be a single directory name, got {f:?}"),
                ));
            }
        }
        if self.spawn_tool.trim().is_empty() {
            return Err(rule("spawn_tool", "must not be empty".into()));
        }
        if self.executor.max_output_bytes == 0 {
            return Err(rule("executor.max_output_bytes", "must be positive".into()));
        }
        let r = &self.runners;
        for (key, d) in [
            ("runners.heartbeat_interval", r.heartbeat_interval),
            ("runners.lease", r.lease),
            ("runners.accept_timeout", r.accept_timeout),
        ] {
            if d.is_zero() {
                return Err(rule(key, "must be positive".into()));
            }
        }
        if r.lease <= r.heartbeat_interval {
            return Err(rule(
                "runners.lease",
                format!(
                    "must be longer than runners.heartbeat_interval ({})",
                    humantime::format_duration(r.heartbeat_interval)
                ),
            ));
        }
        if self.limits.max_running == 0 {
            return Err(rule("limits.max_running", "must be positive".into()));
        }
        for (key, zero) in [
            ("workers.inbox_max", self.workers.inbox_max == 0),
            (
                "workers.transcript_max_bytes",
                self.workers.transcript_max_bytes == 0,
            ),
            (
                "workers.transcript_ttl",
                self.workers.transcript_ttl.is_zero(),
            ),
            (
                "workers.input_timeout",
                self.workers.input_timeout.is_zero(),
            ),
        ] {
            if zero {
                return Err(rule(key, "must be positive".into()));
            }
        }
        if self.store.path.is_some() && self.store.url.is_some() {
            return Err(rule(
                "store",
                "give either store.path (SQLite) or store.url (PostgreSQL), not both".into(),
            ));
        }
        if let Some(url) = &self.store.url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(rule(
                "store.url",
                format!(
                    "must be a postgres:// or postgresql:// URL, got scheme {:?}",
                    url.split_once("://").map_or("none", |(scheme, _)| scheme)
                ),
            ));
        }
        if self.replica.lease < Duration::from_millis(300) {
            return Err(rule(
                "replica.lease",
                "must be at least 300ms (it is renewed every lease / 3)".into(),
            ));
        }
        if self.replica.name.as_ref().is_some_and(|n| {
            n.trim().is_empty() || n.len() > 253 || n.chars().any(char::is_control)
        }) {
            return Err(rule(
                "replica.name",
                "must be 1 to 253 printable characters".into(),
            ));
        }
        if self.limits.max_events_per_worker < 3 {
            return Err(rule(
                "limits.max_events_per_worker",
                "must be at least 3 (a worker's own transitions)".into(),
            ));
        }
        models::validate(&self.models, &self.model, &self.mcp_servers)
            .map_err(|(key, message)| rule(&key, message))?;
        if self.discovery.cache_max_agents == 0 {
            return Err(rule(
                "discovery.cache_max_agents",
                "must be positive".into(),
            ));
        }
        Ok(())
    }

    /// Where worker worktrees are made: `workers.worktrees_dir`, else `worktrees/` beside the
    /// SQLite store (its default place under the state directory with PostgreSQL).
    pub fn worktrees_dir(&self) -> PathBuf {
        self.workers.worktrees_dir.clone().unwrap_or_else(|| {
            self.store_path()
                .parent()
                .map_or_else(|| PathBuf::from("worktrees"), |p| p.join("worktrees"))
        })
    }

    /// Where workers are stored: PostgreSQL with `store.url`, else the SQLite file of
    /// [`Self::store_path`].
    pub fn store_kind(&self) -> StoreKind {
        match &self.store.url {
            Some(url) => StoreKind::Postgres(url.clone()),
            None => StoreKind::Sqlite(self.store_path()),
        }
    }

    /// This replica's name: `replica.name`, else the host name.
    pub fn replica_name(&self) -> String {
        self.replica.name.clone().unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "agentry".to_owned())
        })
    }

    /// The store file: `store.path`, else `$XDG_STATE_HOME/agentry/agentry.db`, else
    /// `<home>/.local/state/agentry/agentry.db`.
    pub fn store_path(&self) -> PathBuf {
        if let Some(p) = &self.store.path {
            return p.clone();
        }
        let base = self.state_home.clone().unwrap_or_else(|| {
            self.home
                .clone()
                .unwrap_or_else(|| PathBuf::from("/tmp"))
                .join(".local/state")
        });
        base.join("agentry/agentry.db")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(yaml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, yaml).unwrap();
        Config::load(
            Some(&path),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn store_url_selects_postgres_and_both_stores_are_refused() {
        let cfg = load_str(
            "store: {url: postgres://a@db/x}\nreplica: {name: a, lease: 2s}\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            cfg.store_kind(),
            StoreKind::Postgres("postgres://a@db/x".to_owned())
        );
        assert_eq!(cfg.replica_name(), "a");
        assert_eq!(cfg.replica.lease, Duration::from_secs(2));
        let env = load_str("", &[("AGENTRY_STORE_URL", "postgresql://b@db/y")]).unwrap();
        assert_eq!(
            env.store_kind(),
            StoreKind::Postgres("postgresql://b@db/y".to_owned())
        );
        let default = load_str("", &[]).unwrap();
        assert!(matches!(default.store_kind(), StoreKind::Sqlite(_)));
        assert_eq!(default.replica.lease, Duration::from_secs(15));
        assert!(!default.replica_name().is_empty());

        let err = load_str("store: {path: /tmp/a.db, url: postgres://db/x}\n", &[]).unwrap_err();
        assert!(
            err.to_string().contains("store.path") && err.to_string().contains("store.url"),
            "{err}"
        );
        let err = load_str(
            "store: {path: /tmp/a.db}\n",
            &[("AGENTRY_STORE_URL", "postgres://db/x")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        let err = load_str("store: {url: 'mysql://u:secret@db/x'}\n", &[]).unwrap_err();
        assert!(
            err.to_string().contains("\"mysql\"") && !err.to_string().contains("secret"),
            "{err}"
        );
        let err = load_str("replica: {lease: 10ms}\n", &[]).unwrap_err();
        assert!(err.to_string().contains("replica.lease"), "{err}");
        let err = load_str("replica: {name: ''}\n", &[]).unwrap_err();
        assert!(err.to_string().contains("replica.name"), "{err}");
        let err = load_str("replica: {nmae: x}\n", &[]).unwrap_err();
        assert!(err.to_string().contains("nmae"), "{err}");
    }

    #[test]
    fn defaults_without_a_file() {
        let c = Config::load(None, [("HOME".to_owned(), "/h".to_owned())]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:50051");
        assert_eq!(c.home, Some(PathBuf::from("/h")));
        assert_eq!(c.max_recursion_depth, 2);
        assert_eq!(c.dedupe.ttl, Duration::from_secs(120));
        assert_eq!(c.reserved_agents, ["reviewer", "default"]);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = load_str("listen: a:1\nlistne: b\n", &[]).unwrap_err();
        assert!(e.to_string().contains("listne"), "{e}");
        let e = load_str("executor: {comand: [x]}\n", &[]).unwrap_err();
        assert!(e.to_string().contains("comand"), "{e}");
    }

    #[test]
    fn the_hold_and_the_commit_window_are_moments() {
        let c = load_str("", &[]).unwrap();
        assert_eq!(c.executor.start_hold, Duration::from_millis(5));
        assert_eq!(c.replica.commit_window, Duration::from_millis(2));
        let c = load_str(
            "executor: {start_hold: 0s}\nreplica: {commit_window: 100ms}\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            (c.executor.start_hold, c.replica.commit_window),
            (Duration::ZERO, Duration::from_millis(100))
        );
        let e = load_str("executor: {start_hold: 2m}\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config key executor.start_hold: (2m) must be at most 1m"
        );
        let e = load_str("replica: {commit_window: 1s}\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config key replica.commit_window: (1s) must be at most 100ms"
        );
    }

    #[test]
    fn bad_duration_is_an_error() {
        let e = load_str("shutdown_grace: soon\n", &[]).unwrap_err();
        assert!(e.to_string().contains("shutdown_grace"), "{e}");
    }

    #[test]
    fn env_overrides_scalars() {
        let c = load_str(
            "listen: 1.2.3.4:5\n",
            &[
                ("AGENTRY_LISTEN", "0.0.0.0:7"),
                ("AGENTRY_MAX_RECURSION_DEPTH", "-1"),
            ],
        )
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:7");
        assert_eq!(c.max_recursion_depth, -1);
        let e = load_str("", &[("AGENTRY_MAX_RECURSION_DEPTH", "deep")]).unwrap_err();
        assert!(e.to_string().contains("AGENTRY_MAX_RECURSION_DEPTH"), "{e}");
    }

    #[test]
    fn openai_key_without_an_executor_means_the_model_executor() {
        let c = load_str(
            "",
            &[
                ("OPENAI_API_KEY", "sk-x"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ],
        )
        .unwrap();
        assert_eq!(c.executor.kind, ExecutorKind::Model);
        assert!(!c.executor_unconfigured);
        let (p, m) = c
            .models
            .resolve(c.models.default.as_deref().unwrap())
            .unwrap();
        assert_eq!(
            (p.base_url.as_str(), m.as_str()),
            ("http://127.0.0.1:9/v1", OPENAI_MODEL)
        );
        assert_eq!(p.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        // Neither: spawns are refused.
        let none = load_str("", &[]).unwrap();
        assert!(none.executor_unconfigured);
        // A configured executor wins over the key.
        let exec = load_str(
            "executor: {command: [/bin/true]}\n",
            &[("OPENAI_API_KEY", "sk-x")],
        )
        .unwrap();
        assert_eq!(exec.executor.kind, ExecutorKind::Exec);
        assert!(!exec.executor_unconfigured);
    }

    #[test]
    fn models_aliases_and_mcp_servers_are_checked() {
        let ok = load_str(
            "executor: {kind: model}\nmodels: {default: fast, providers: [{name: local, base_url: 'http://127.0.0.1:1/v1'}], aliases: {fast: local/qwen, sonnet: local/org/big}}\nmcp_servers: {fs: {command: [npx, x]}, docs: {url: 'http://h/mcp'}}\n",
            &[],
        )
        .unwrap();
        assert_eq!(ok.models.resolve("sonnet").unwrap().1, "org/big");
        assert_eq!(ok.models.resolve("local/m").unwrap().1, "m");
        assert!(ok.models.resolve("opus").is_none());
        assert!(ok.models.resolve("other/m").is_none());
        for (yaml, key) in [
            (
                "models: {aliases: {sonnet: nope/m}}",
                "models.aliases.sonnet",
            ),
            ("models: {default: haiku}", "models.default"),
            (
                "models: {providers: [{name: a, base_url: 'ftp://x'}]}",
                "models.providers[0].base_url",
            ),
            ("mcp_servers: {fs: {}}", "mcp_servers.fs"),
            (
                "mcp_servers: {fs: {command: [x], url: 'http://h'}}",
                "mcp_servers.fs",
            ),
            ("mcp_servers: {a__b: {command: [x]}}", "mcp_servers.a__b"),
            ("mcp_servers: {_a: {command: [x]}}", "mcp_servers._a"),
            ("model: {max_turns: 0}", "model.max_turns"),
        ] {
            let e = load_str(&format!("{yaml}\n"), &[]).unwrap_err();
            assert!(e.to_string().contains(key), "{yaml}: {e}");
        } // Codex names servers with `_`.
        let c = load_str("mcp_servers: {chrome_devtools: {command: [x]}}\n", &[]).unwrap();
        assert!(c.mcp_servers.contains_key("chrome_devtools"));
    }

    #[test]
    fn executor_kinds_and_runner_timing() {
        let c = load_str(
            "executor: {kind: runner, by_agent: {reviewer: exec}}\nrunners: {lease: 2s, heartbeat_interval: 500ms}\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.executor.kind, ExecutorKind::Runner);
        assert_eq!(c.executor.by_agent["reviewer"], ExecutorKind::Exec);
        assert_eq!(c.runners.lease, Duration::from_secs(2));
        assert_eq!(c.runners.accept_timeout, Duration::from_secs(5));
        let e = load_str("executor: {kind: http}\n", &[]).unwrap_err();
        assert!(e.to_string().contains("executor.kind"), "{e}");
        let e = load_str("runners: {lease: 1s, heartbeat_interval: 1s}\n", &[]).unwrap_err();
        assert!(e.to_string().contains("runners.lease"), "{e}");
        let e = load_str("limits: {max_events_per_worker: 2}\n", &[]).unwrap_err();
        assert!(e.to_string().contains("max_events_per_worker"), "{e}");
    }

    #[test]
    fn relative_agent_dir_is_refused() {
        let e = load_str("agent_dirs: [{path: rel}]\n", &[]).unwrap_err();
        assert!(e.to_string().contains("agent_dirs[0].path"), "{e}");
    }

    #[test]
    fn command_dirs_are_recursive_unless_told() {
        let c = load_str(
            "command_dirs: [{path: /a}, {path: /b, recursive: false}]\n",
            &[],
        )
        .unwrap();
        let got: Vec<_> = c.command_dirs.iter().map(|d| d.recursive).collect();
        assert_eq!(got, [true, false]);
        let e = load_str("command_dirs: [{path: rel}]\n", &[]).unwrap_err();
        assert!(e.to_string().contains("command_dirs[0].path"), "{e}");
        let e = load_str("command_dirs: [{path: /a, deep: true}]\n", &[]).unwrap_err();
        assert!(e.to_string().contains("deep"), "{e}");
    }

    #[test]
    fn an_http_listen_without_a_host_is_loopback_unless_authenticated() {
        let c = HttpConfig {
            listen: Some(":8080".into()),
        };
        assert_eq!(c.bind_address(false).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(c.bind_address(true).as_deref(), Some("0.0.0.0:8080"));
        let given = HttpConfig {
            listen: Some("10.0.0.1:80".into()),
        };
        assert_eq!(given.bind_address(false).as_deref(), Some("10.0.0.1:80"));
        assert_eq!(HttpConfig::default().bind_address(true), None);
    }
}
