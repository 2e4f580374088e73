//! Discovery: which directories are read, in which order; the merge into one snapshot per
//! workspace of the agents (docs §3) and of the workflow commands (§3.6); the file watcher and the
//! snapshot cache that keep snapshots fresh.
//!
//! Depends on [`crate::persona`] and [`crate::config`] only; never on gRPC.

mod bundled;
mod load;
mod skills;
pub mod sources;
mod watch;

use std::{
    collections::HashMap,
    hash::BuildHasher,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use sha2::{Digest, Sha256};

use crate::{
    config::Config,
    persona::{Diagnostic, ParseOptions, Persona, Severity, command::Command},
};

pub use skills::SkillDef;
pub use sources::SourceDir;

/// Reads one definition file exactly as discovery does (`open` with `O_NONBLOCK`, the type and
/// the size checked on the open descriptor, one `read` into a buffer sized from `fstat`), into
/// `bytes`, and returns the descriptor's metadata; `Err` is the diagnostic discovery would
/// report for it. Public so the discovery benchmark's floor makes the same calls as the code it
/// is measured against, not a copy of them.
pub fn read_definition_file(
    path: &Path,
    bytes: &mut Vec<u8>,
) -> Result<std::fs::Metadata, Diagnostic> {
    load::read_bounded(path, &path.display(), bytes)
}

/// Where a definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// Nearest project dir of a family.
    Project,
    /// User dir of a family.
    User,
    /// A plugin's `agents/` dir.
    Plugin,
    /// A configured `agent_dirs` (or `command_dirs`) entry.
    Dir,
    /// Compiled into the binary.
    Bundled,
}

impl SourceKind {
    /// Lowercase name, used in the registry version and in `agentry check`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Project => "project",
            Self::User => "user",
            Self::Plugin => "plugin",
            Self::Dir => "dir",
            Self::Bundled => "bundled",
        }
    }
}

/// One definition with where it came from.
#[derive(Debug, Clone)]
pub struct AgentDef {
    /// The parsed file.
    pub persona: Persona,
    /// Source rule.
    pub source: SourceKind,
    /// Family or plugin name.
    pub family: String,
    /// File path (`bundled:<name>.md` for bundled agents).
    pub file_path: String,
    /// Hex sha256 of the file's bytes.
    pub content_sha256: String,
    /// For a shadowed definition, the winner's path.
    pub shadowed_by: Option<String>,
}

/// One workflow command with where it came from (docs §3.6).
#[derive(Debug, Clone)]
pub struct CommandDef {
    /// Full name: the path relative to its commands dir, `/` written `:`.
    pub name: String,
    /// Base names that also resolve to this command (a nested command answers to its base name
    /// unless a command of that name came first).
    pub aliases: Vec<String>,
    /// The parsed file.
    pub command: Command,
    /// Source rule.
    pub source: SourceKind,
    /// Family or plugin name.
    pub family: String,
    /// File path (`bundled:<name>.md` for bundled commands).
    pub file_path: String,
    /// Hex sha256 of the file's bytes.
    pub content_sha256: String,
    /// For a shadowed definition, the path of the command that holds its name.
    pub shadowed_by: Option<String>,
}

/// Why a snapshot could not be produced for a request.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The workspace is relative, missing or not a directory.
    #[error("workspace {workspace:?} {reason}")]
    InvalidWorkspace {
        /// As given.
        workspace: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `workspace_roots` is set and the workspace is outside all of them.
    #[error(
        "workspace {workspace:?} (resolved to {resolved}) is outside the configured workspace_roots"
    )]
    OutsideRoots {
        /// As given.
        workspace: String,
        /// Canonical form.
        resolved: String,
    },
    /// A bundled persona or command failed to parse (a build defect).
    #[error("bundled definition {file} is invalid: {message}")]
    Bundled {
        /// Which file.
        file: String,
        /// Its diagnostics.
        message: String,
    },
}

/// The merged set of definitions for one workspace at one moment. Immutable; swapped whole.
#[derive(Debug)]
pub struct Snapshot {
    /// Winners in precedence order.
    pub agents: Vec<Arc<AgentDef>>,
    /// Winners by name: positions in `agents`, found with [`Self::names`]'s hash of the name.
    index: hashbrown::HashTable<usize>,
    /// Hashes agent names for `index`.
    names: hashbrown::DefaultHashBuilder,
    /// Losers, each with `shadowed_by` set, in read order.
    pub shadowed: Vec<Arc<AgentDef>>,
    /// Every problem found while building the agents (and reading the plugin registry).
    pub diagnostics: Vec<Diagnostic>,
    /// Winning commands in precedence order.
    pub commands: Vec<Arc<CommandDef>>,
    /// Name or alias → index into `commands`.
    command_index: HashMap<String, usize>,
    /// Commands that lost their name, each with `shadowed_by` set, in read order.
    pub shadowed_commands: Vec<Arc<CommandDef>>,
    /// Every problem found while building the commands (the plugin registry's too, first).
    pub command_diagnostics: Vec<Diagnostic>,
    /// The skills the winning agents name, by name (docs/personas.md §2.8).
    skills: HashMap<String, Arc<SkillDef>>,
    /// How many leading entries both diagnostic lists share (the plugin registry's).
    shared_diagnostics: usize,
    /// sha256 over the winning agents and commands (name, source, content).
    pub version: String,
    /// Watcher generation this snapshot was built at.
    generation: u64,
}

/// Definitions (agents and commands, shadowed ones included) from which a snapshot is freed on
/// rayon's pool rather than on the thread that lets go of it: freeing 10,000 definitions takes
/// about 10 ms, which a request thread holding the last reference would otherwise spend before
/// it can serve anything else.
const FREE_ON_POOL: usize = 1_000;

/// Dropped snapshots that rayon's pool has not finished freeing yet.
static FREES_UNDER_WAY: AtomicUsize = AtomicUsize::new(0);

/// How many dropped snapshots rayon's pool is still freeing (a snapshot of 1,000 definitions or
/// more is freed there, not on the thread that drops it): a benchmark waits for none before it
/// times the next thing, so that freeing does not share its CPUs.
pub fn frees_under_way() -> usize {
    FREES_UNDER_WAY.load(Ordering::Acquire)
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let defs = self.agents.len()
            + self.shadowed.len()
            + self.commands.len()
            + self.shadowed_commands.len();
        if defs < FREE_ON_POOL {
            return;
        }
        let parts = (
            std::mem::take(&mut self.agents),
            std::mem::take(&mut self.index),
            std::mem::take(&mut self.shadowed),
            std::mem::take(&mut self.diagnostics),
            std::mem::take(&mut self.commands),
            std::mem::take(&mut self.command_index),
            std::mem::take(&mut self.shadowed_commands),
            std::mem::take(&mut self.command_diagnostics),
        );
        FREES_UNDER_WAY.fetch_add(1, Ordering::AcqRel);
        rayon::spawn(move || {
            drop(parts);
            FREES_UNDER_WAY.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

impl Snapshot {
    /// Looks up a winner by exact name.
    pub fn get(&self, name: &str) -> Option<&Arc<AgentDef>> {
        let agents = &self.agents;
        self.index
            .find(self.names.hash_one(name), |&i| {
                agents[i].persona.name == name
            })
            .map(|&i| &agents[i])
    }

    /// The skills of `def` that were found, in the order its `skills` names them.
    pub fn skills_of<'a>(&'a self, def: &'a AgentDef) -> impl Iterator<Item = &'a Arc<SkillDef>> {
        def.persona
            .skills
            .iter()
            .filter_map(|name| self.skills.get(name))
    }

    /// Looks up a winning command by exact name, or by the base name it also answers to.
    pub fn command(&self, name: &str) -> Option<&Arc<CommandDef>> {
        self.command_index.get(name).map(|i| &self.commands[*i])
    }

    /// Every diagnostic once: the agents', then the commands' (without the shared ones again).
    pub fn all_diagnostics(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .chain(&self.command_diagnostics[self.shared_diagnostics..])
    }

    /// Number of error diagnostics.
    pub fn error_count(&self) -> usize {
        self.all_diagnostics()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }
}

/// What a build merges in after everything on disk.
struct Bundled<'a> {
    agents: &'a [Arc<AgentDef>],
    commands: &'a [CommandDef],
}

/// The listings and parsed files a build may reuse (see [`load::ListCache`],
/// [`load::ParseCache`]).
struct Parsed<'a> {
    listings: &'a load::ListCache,
    command_listings: &'a load::ListCache,
    agents: &'a load::ParseCache<load::ParsedAgent>,
    commands: &'a load::ParseCache<load::ParsedCommand>,
}

/// Caches of directory listings and of parsed agent and command files, shared by every build
/// of one registry.
struct ParseCaches {
    listings: load::ListCache,
    command_listings: load::ListCache,
    agents: load::ParseCache<load::ParsedAgent>,
    commands: load::ParseCache<load::ParsedCommand>,
}

impl ParseCaches {
    /// Caches holding up to `capacity` files each.
    fn new(capacity: usize) -> Self {
        Self {
            listings: load::ListCache::new(capacity),
            command_listings: load::ListCache::new(capacity),
            agents: load::ParseCache::new(capacity),
            commands: load::ParseCache::new(capacity),
        }
    }

    /// Caches that store nothing, for a one-off build.
    fn none() -> Self {
        Self {
            listings: load::ListCache::none(),
            command_listings: load::ListCache::none(),
            agents: load::ParseCache::none(),
            commands: load::ParseCache::none(),
        }
    }

    fn parsed(&self) -> Parsed<'_> {
        Parsed {
            listings: &self.listings,
            command_listings: &self.command_listings,
            agents: &self.agents,
            commands: &self.commands,
        }
    }
}

/// Builds one snapshot: plan, list, parse (parallel), merge. Blocking I/O.
fn build(
    cfg: &sources::SourceConfig,
    opts: &ParseOptions,
    bundled: Bundled<'_>,
    parsed: Parsed<'_>,
    workspace: Option<&Path>,
    generation: u64,
    watcher: Option<&watch::Watcher>,
) -> Snapshot {
    let mut diagnostics = Vec::new();
    let plan = sources::plan(cfg, workspace, &mut diagnostics);
    if let Some(w) = watcher {
        w.register(&plan.agents, &plan.watch);
        w.register(&plan.commands, &sources::WatchPlan::default());
        w.register(&plan.skills, &sources::WatchPlan::default());
    }
    assemble(&plan, diagnostics, opts, bundled, parsed, generation)
}

/// Reads and merges planned directories; `diagnostics` holds the planning's (shared by both
/// registries).
fn assemble(
    plan: &sources::Plan,
    mut diagnostics: Vec<Diagnostic>,
    opts: &ParseOptions,
    bundled: Bundled<'_>,
    parsed: Parsed<'_>,
    generation: u64,
) -> Snapshot {
    let mut command_diagnostics = diagnostics.clone();
    let shared_diagnostics = diagnostics.len();
    let names = hashbrown::DefaultHashBuilder::default();
    // Agents and commands are read side by side (each lists and parses in parallel too).
    let (loaded, loaded_commands) = rayon::join(
        || {
            let found = load::list(&plan.agents, &mut diagnostics, parsed.listings);
            load::parse_all(found.files(), &plan.agents, opts, parsed.agents, &names)
        },
        || {
            let found = load::list(
                &plan.commands,
                &mut command_diagnostics,
                parsed.command_listings,
            );
            load::parse_commands(found.files(), &plan.commands, parsed.commands)
        },
    );

    let mut winners = Winners::new(names, loaded.len() + bundled.agents.len());
    // Per winner (same index as `agents`): the last directory that defined its name and the
    // first definition of it there (`None`: the winner), for `duplicate_name`. Files come in
    // directory order, so a name's earlier definitions in the same directory are always the
    // latest directory's. A winner is not touched here: its memory has left every cache.
    let mut in_dir: Vec<(usize, Option<Arc<AgentDef>>)> = Vec::with_capacity(loaded.len());
    for f in loaded {
        diagnostics.extend(f.parsed.diagnostics);
        let Some(def) = f.parsed.def else { continue };
        match winners.merge(def, Some(f.name_hash)) {
            Ok(()) => in_dir.push((f.dir, None)),
            Err((i, lost)) => {
                let slot = &mut in_dir[i];
                if slot.0 == f.dir {
                    let first = slot.1.as_ref().unwrap_or(&winners.agents[i]);
                    diagnostics.push(duplicate(
                        &lost.file_path,
                        "agent",
                        &lost.persona.name,
                        &first.file_path,
                    ));
                } else {
                    *slot = (f.dir, Some(lost));
                }
            }
        }
    }
    drop(in_dir);
    for b in bundled.agents {
        // A bundled agent that lost was shadowed by a file: nothing more to say.
        let _ = winners.merge(b.clone(), None);
    }
    let mut commands = Commands::default();
    commands.merge_dirs(&plan.commands, loaded_commands, &mut command_diagnostics);
    for c in bundled.commands {
        commands.merge_full(c.clone());
    }
    if let Some(check) = &opts.model_check {
        for a in &winners.agents {
            if let Some(message) =
                (check.0)(&a.persona.name, a.persona.model.as_deref().unwrap_or(&[]))
            {
                diagnostics.push(Diagnostic {
                    path: a.file_path.clone(),
                    line: None,
                    severity: Severity::Warning,
                    code: "unknown_model",
                    message,
                });
            }
        }
    }
    let skills = skills::load(&plan.skills, &winners.agents, &mut diagnostics);
    let version = version_of(&winners.agents, &commands.winners, &skills);
    let Winners {
        agents,
        index,
        names,
        shadowed,
    } = winners;
    Snapshot {
        agents,
        index,
        names,
        shadowed,
        diagnostics,
        commands: commands.winners.into_iter().map(Arc::new).collect(),
        command_index: commands.index,
        shadowed_commands: commands.shadowed.into_iter().map(Arc::new).collect(),
        command_diagnostics,
        skills,
        shared_diagnostics,
        version,
        generation,
    }
}

/// The `unknown_model` check of agents that run on the model executor (docs/model.md §11.2):
/// a `model` list of which nothing resolves (`inherit` aside) is reported when it is read, not
/// only when a spawn is refused.
fn model_check(cfg: &Config) -> Option<crate::persona::ModelCheck> {
    use crate::config::ExecutorKind;
    if cfg.executor_unconfigured {
        return None;
    }
    let default = cfg.executor.kind;
    let by_agent = cfg.executor.by_agent.clone();
    if default != ExecutorKind::Model && !by_agent.values().any(|k| *k == ExecutorKind::Model) {
        return None;
    }
    let models = cfg.models.clone();
    Some(crate::persona::ModelCheck(Arc::new(
        move |name: &str, list: &[String]| {
            let on_model = by_agent.get(name).copied().unwrap_or(default) == ExecutorKind::Model;
            let named: Vec<&String> = list.iter().filter(|m| m.trim() != "inherit").collect();
            if !on_model
                || named.is_empty()
                || named.iter().any(|m| models.resolve(m.trim()).is_some())
            {
                return None;
            }
            Some(format!(
                "model {} of agent {name} is neither an alias in models.aliases nor provider/model with a configured provider; spawning it on the model executor is refused",
                named[0].trim()
            ))
        },
    )))
}

/// The `duplicate_name` warning: a name defined twice in one directory.
fn duplicate(path: &str, what: &str, name: &str, first: &str) -> Diagnostic {
    Diagnostic {
        path: path.to_owned(),
        line: None,
        severity: Severity::Warning,
        code: "duplicate_name",
        message: format!(
            "{what} {name:?} is also defined by {first} in the same directory, which wins"
        ),
    }
}

/// The command merge (docs §3.6). Full names and base-name aliases share one namespace, first
/// come first served: within each directory, in precedence order, its commands claim their full
/// names first, then its nested commands that won claim their base names. So a root command of a
/// directory that comes first (or of the same directory) keeps its name, and an alias beats a
/// root command of a later directory, as any earlier definition does.
#[derive(Default)]
struct Commands {
    winners: Vec<CommandDef>,
    /// Full name or alias → index into `winners`.
    index: HashMap<String, usize>,
    shadowed: Vec<CommandDef>,
}

impl Commands {
    fn merge_dirs(
        &mut self,
        dirs: &[SourceDir],
        loaded: Vec<load::LoadedCommand>,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        let mut loaded = loaded.into_iter().peekable();
        for (i, d) in dirs.iter().enumerate() {
            // Nested winners of this directory: (base name, index).
            let mut bases: Vec<(String, usize)> = Vec::new();
            let mut in_dir: HashMap<String, String> = HashMap::new();
            while let Some(f) = loaded.next_if(|f| f.dir == i) {
                diagnostics.extend(f.diagnostics);
                let (Some(name), Some(command)) = (f.name, f.command) else {
                    continue;
                };
                // A plugin's commands are `<plugin>:<name>`, and answer to `<name>` (and a
                // nested one to its base name) like a nested command to its base name.
                let (full, also): (String, Vec<String>) = if d.kind == SourceKind::Plugin {
                    let full = format!("{}:{}", d.family, name.full);
                    (full, std::iter::once(name.full).chain(name.base).collect())
                } else {
                    (name.full, name.base.into_iter().collect())
                };
                if let Some(first) = in_dir.get(&full) {
                    diagnostics.push(duplicate(&f.file_path, "command", &full, first));
                } else {
                    in_dir.insert(full.clone(), f.file_path.clone());
                }
                let won = self.merge_full(CommandDef {
                    name: full,
                    aliases: Vec::new(),
                    command,
                    source: d.kind,
                    family: d.family.clone(),
                    file_path: f.file_path,
                    content_sha256: f.sha256,
                    shadowed_by: None,
                });
                if let Some(at) = won {
                    bases.extend(also.into_iter().map(|base| (base, at)));
                }
            }
            for (base, at) in bases {
                if !self.index.contains_key(&base) {
                    self.index.insert(base.clone(), at);
                    self.winners[at].aliases.push(base);
                }
            }
        }
    }

    /// Claims `def.name`; returns its index when it won, else keeps it as shadowed.
    fn merge_full(&mut self, mut def: CommandDef) -> Option<usize> {
        match self.index.get(&def.name) {
            Some(&i) => {
                def.shadowed_by = Some(self.winners[i].file_path.clone());
                self.shadowed.push(def);
                None
            }
            None => {
                let at = self.winners.len();
                self.index.insert(def.name.clone(), at);
                self.winners.push(def);
                Some(at)
            }
        }
    }
}

/// The agent merge: the first definition of a name wins; later ones are kept as shadowed.
struct Winners {
    agents: Vec<Arc<AgentDef>>,
    index: hashbrown::HashTable<usize>,
    names: hashbrown::DefaultHashBuilder,
    shadowed: Vec<Arc<AgentDef>>,
}

impl Winners {
    /// Room for `capacity` names, so the index never grows (growing rehashes every name, whose
    /// memory is no longer in any cache by the time the merge runs).
    fn new(names: hashbrown::DefaultHashBuilder, capacity: usize) -> Self {
        Self {
            agents: Vec::with_capacity(capacity),
            index: hashbrown::HashTable::with_capacity(capacity),
            names,
            shadowed: Vec::new(),
        }
    }

    /// Claims `def`'s name (`hash`: its hash by `names`, when taken already; else it is taken
    /// here). When the name was taken already, `def` is kept as shadowed and the error is the
    /// winner's index with that shadowed copy.
    fn merge(
        &mut self,
        def: Arc<AgentDef>,
        hash: Option<u64>,
    ) -> Result<(), (usize, Arc<AgentDef>)> {
        let hash = hash.unwrap_or_else(|| self.names.hash_one(def.persona.name.as_str()));
        let agents = &self.agents;
        match self
            .index
            .find(hash, |&i| agents[i].persona.name == def.persona.name)
        {
            Some(&i) => {
                let mut lost = (*def).clone();
                lost.shadowed_by = Some(agents[i].file_path.clone());
                let lost = Arc::new(lost);
                self.shadowed.push(lost.clone());
                Err((i, lost))
            }
            None => {
                let names = &self.names;
                self.index.insert_unique(hash, agents.len(), |&i| {
                    names.hash_one(agents[i].persona.name.as_str())
                });
                self.agents.push(def);
                Ok(())
            }
        }
    }
}

/// sha256 over (name, source, content hash) of the winning agents, then of the winning commands
/// (one version covers both registries).
fn version_of(
    agents: &[Arc<AgentDef>],
    commands: &[CommandDef],
    skills: &HashMap<String, Arc<SkillDef>>,
) -> String {
    // The lines are gathered first and hashed in one call: tens of thousands of small updates
    // cost more than the hashing itself.
    let mut buf: Vec<u8> = Vec::with_capacity((agents.len() + commands.len() + 1) * 112);
    let mut add = |name: &str, source: SourceKind, sha: &str| {
        buf.extend_from_slice(name.as_bytes());
        buf.push(0);
        buf.extend_from_slice(source.as_str().as_bytes());
        buf.push(0);
        buf.extend_from_slice(sha.as_bytes());
        buf.push(b'\n');
    };
    for a in agents {
        add(&a.persona.name, a.source, &a.content_sha256);
    }
    // Agent names cannot hold `/`, so this line never looks like an agent's.
    add("/commands", SourceKind::Bundled, "");
    for c in commands {
        add(&c.name, c.source, &c.content_sha256);
    }
    // A skill's content is part of its agents' prompts: editing it is a new version. Sorted,
    // since the map has no order.
    if !skills.is_empty() {
        add("/skills", SourceKind::Bundled, "");
        let mut named: Vec<&Arc<SkillDef>> = skills.values().collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        for s in named {
            add(&s.name, s.source, &s.content_sha256);
        }
    }
    hex::encode(Sha256::digest(&buf))
}

/// The registry: snapshots per workspace, kept fresh by the watcher and bounded by a TTL cache.
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    sources: sources::SourceConfig,
    opts: ParseOptions,
    bundled: Vec<Arc<AgentDef>>,
    bundled_commands: Vec<CommandDef>,
    roots: Vec<PathBuf>,
    watcher: Option<watch::Watcher>,
    /// Parsed files by path, so a rebuild re-parses only what changed.
    parsed: ParseCaches,
    /// Canonical workspace (or none) → snapshot.
    snapshots: moka::future::Cache<Option<PathBuf>, Arc<Snapshot>>,
    /// Workspace as given → canonical form, so a hit needs no file-system call.
    canonical: moka::sync::Cache<String, PathBuf>,
    /// Build duration and diagnostics count.
    metrics: crate::telemetry::Metrics,
}

impl Registry {
    /// Creates the registry. Parses the bundled agents (errors are fatal) and starts the file
    /// watcher when `watch` is true. Builds nothing yet.
    pub fn new(cfg: &Config, watch: bool) -> Result<Self, DiscoveryError> {
        let opts = ParseOptions {
            implicit_tools: cfg.implicit_tools.clone(),
            spawn_tool: cfg.spawn_tool.clone(),
            model_check: model_check(cfg),
            allow_inline_mcp: cfg.mcp.allow_inline,
        };
        let (bundled, bundled_commands) = if cfg.bundled_agents {
            (bundled::load(&opts)?, bundled::commands()?)
        } else {
            (Vec::new(), Vec::new())
        };
        let snapshots = moka::future::Cache::builder()
            .weigher(|_, s: &Arc<Snapshot>| {
                let defs = s.agents.len()
                    + s.shadowed.len()
                    + s.commands.len()
                    + s.shadowed_commands.len();
                u32::try_from(defs + 1).unwrap_or(u32::MAX)
            })
            .max_capacity(cfg.discovery.cache_max_agents)
            .time_to_live(cfg.discovery.cache_ttl)
            .build();
        let canonical = moka::sync::Cache::builder()
            .max_capacity(4096)
            .time_to_live(cfg.discovery.cache_ttl)
            .build();
        let watcher = if watch {
            match watch::Watcher::new() {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "file watcher unavailable; relying on the cache ttl");
                    None
                }
            }
        } else {
            None
        };
        Ok(Self {
            inner: Arc::new(Inner {
                sources: sources::SourceConfig {
                    home: cfg.home.clone(),
                    families: cfg.families.clone(),
                    agent_dirs: cfg.agent_dirs.clone(),
                    command_dirs: cfg.command_dirs.clone(),
                },
                opts,
                bundled,
                bundled_commands,
                // Resolved once: a request compares canonical paths without touching the disk.
                roots: cfg
                    .workspace_roots
                    .iter()
                    .map(|r| r.canonicalize().unwrap_or_else(|_| r.clone()))
                    .collect(),
                watcher,
                parsed: ParseCaches::new(
                    usize::try_from(cfg.discovery.cache_max_agents).unwrap_or(usize::MAX),
                ),
                snapshots,
                canonical,
                metrics: crate::telemetry::Metrics::new(),
            }),
        })
    }

    /// Validates a workspace as given in a request: empty = none; otherwise absolute, existing
    /// directory, inside `workspace_roots` once symlinks are resolved.
    fn workspace_key(&self, workspace: &str) -> Result<Option<PathBuf>, DiscoveryError> {
        if workspace.is_empty() {
            return Ok(None);
        }
        // Only workspaces inside the roots are remembered, so a hit needs no check.
        if let Some(c) = self.inner.canonical.get(workspace) {
            return Ok(Some(c));
        }
        let invalid = |reason: String| DiscoveryError::InvalidWorkspace {
            workspace: workspace.to_owned(),
            reason,
        };
        let p = Path::new(workspace);
        if !p.is_absolute() {
            return Err(invalid("must be an absolute path".to_owned()));
        }
        let canon = p.canonicalize().map_err(|e| {
            invalid(if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist".to_owned()
            } else {
                format!("cannot be resolved: {e}")
            })
        })?;
        if !canon.is_dir() {
            return Err(invalid("is not a directory".to_owned()));
        }
        if !self.inner.roots.is_empty() && !self.inner.roots.iter().any(|r| canon.starts_with(r)) {
            return Err(DiscoveryError::OutsideRoots {
                workspace: workspace.to_owned(),
                resolved: canon.display().to_string(),
            });
        }
        self.inner
            .canonical
            .insert(workspace.to_owned(), canon.clone());
        Ok(Some(canon))
    }

    /// The current snapshot for a workspace (empty = none), building it if needed.
    pub async fn snapshot(&self, workspace: &str) -> Result<Arc<Snapshot>, DiscoveryError> {
        let key = self.workspace_key(workspace)?;
        let generation = self.generation();
        // The usual case, a current snapshot, without setting up a build.
        if let Some(snap) = self.inner.snapshots.get(&key).await
            && snap.generation == generation
        {
            return Ok(snap);
        }
        let inner = self.inner.clone();
        let build_key = key.clone();
        let entry = self
            .inner
            .snapshots
            .entry(key)
            .or_insert_with_if(
                async move {
                    let gen_at_start = inner.generation();
                    tokio::task::spawn_blocking(move || {
                        let started = Instant::now();
                        let snap = build(
                            &inner.sources,
                            &inner.opts,
                            inner.bundled(),
                            inner.parsed.parsed(),
                            build_key.as_deref(),
                            gen_at_start,
                            inner.watcher.as_ref(),
                        );
                        let diagnostics = snap.all_diagnostics().count();
                        inner.metrics.discovery(started.elapsed(), diagnostics);
                        tracing::debug!(
                            workspace = ?build_key,
                            agents = snap.agents.len(),
                            commands = snap.commands.len(),
                            diagnostics,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "snapshot built"
                        );
                        Arc::new(snap)
                    })
                    .await
                    .expect("snapshot build panicked")
                },
                |s| s.generation != generation,
            )
            .await;
        Ok(entry.into_value())
    }

    /// Forces every snapshot to be rebuilt, then returns the one for `workspace`.
    pub async fn reload(&self, workspace: &str) -> Result<Arc<Snapshot>, DiscoveryError> {
        self.invalidate();
        self.snapshot(workspace).await
    }

    /// Marks every cached snapshot stale.
    pub fn invalidate(&self) {
        match &self.inner.watcher {
            Some(w) => w.bump(),
            None => self.inner.snapshots.invalidate_all(),
        }
    }

    fn generation(&self) -> u64 {
        self.inner.generation()
    }

    /// Builds a snapshot once without caching or watching (for `agentry check`).
    pub fn build_once(&self, workspace: Option<&Path>) -> Snapshot {
        build(
            &self.inner.sources,
            &self.inner.opts,
            self.inner.bundled(),
            ParseCaches::none().parsed(),
            workspace,
            0,
            None,
        )
    }

    /// Builds a snapshot of explicit agent directories only (for `agentry check DIR…`), in
    /// order, each read like a Codex agents dir: `*.md` at its top level (or, with `recursive`,
    /// `**/*.md` under the rules of a recursive `agent_dirs` entry) and `*.toml` at any depth.
    /// Bundled definitions and command dirs are left out so the listing shows exactly what the
    /// directories hold.
    pub fn build_dirs(&self, dirs: &[PathBuf], recursive: bool) -> Snapshot {
        let plan = sources::Plan {
            agents: dirs
                .iter()
                .map(|p| SourceDir {
                    kind: SourceKind::Dir,
                    family: String::new(),
                    path: p.clone(),
                    recursive,
                    toml: true,
                    skills: false,
                })
                .collect(),
            ..sources::Plan::default()
        };
        let none = Bundled {
            agents: &[],
            commands: &[],
        };
        let fresh = ParseCaches::none();
        assemble(&plan, Vec::new(), &self.inner.opts, none, fresh.parsed(), 0)
    }
}

/// The persona files discovery would read from one directory, flat or recursive, in read order
/// (for `agentry check`'s hints). Problems listing it are left to the build that reports them.
pub fn persona_files(dir: &Path, recursive: bool) -> Vec<PathBuf> {
    let source = SourceDir {
        kind: SourceKind::Dir,
        family: String::new(),
        path: dir.to_owned(),
        recursive,
        toml: true,
        skills: false,
    };
    load::list(&[source], &mut Vec::new(), &load::ListCache::none())
        .files()
        .into_iter()
        .map(|f| f.path.to_owned())
        .collect()
}

impl Inner {
    fn bundled(&self) -> Bundled<'_> {
        Bundled {
            agents: &self.bundled,
            commands: &self.bundled_commands,
        }
    }

    fn generation(&self) -> u64 {
        self.watcher.as_ref().map_or(0, watch::Watcher::generation)
    }
}

#[cfg(test)]
mod tests;
