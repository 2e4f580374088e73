//! Discovery: which directories are read, in which order; the merge into one snapshot per
//! workspace; the file watcher and the snapshot cache that keep snapshots fresh (SPEC §3).
//!
//! Depends on [`crate::persona`] and [`crate::config`] only; never on gRPC.

mod bundled;
mod load;
pub mod sources;
mod watch;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use sha2::{Digest, Sha256};

use crate::{
    config::Config,
    persona::{Diagnostic, ParseOptions, Persona, Severity},
};

pub use sources::SourceDir;

/// Where a definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// Nearest project dir of a family.
    Project,
    /// User dir of a family.
    User,
    /// A plugin's `agents/` dir.
    Plugin,
    /// A configured `agent_dirs` entry.
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
    /// A bundled persona failed to parse (a build defect).
    #[error("bundled persona {file} is invalid: {message}")]
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
    /// Name → index into `agents`.
    index: HashMap<String, usize>,
    /// Losers, each with `shadowed_by` set, in read order.
    pub shadowed: Vec<Arc<AgentDef>>,
    /// Every problem found while building.
    pub diagnostics: Vec<Diagnostic>,
    /// sha256 over the winners (name, source, content).
    pub version: String,
    /// Watcher generation this snapshot was built at.
    generation: u64,
    /// When it was built (for logs).
    pub built_at: Instant,
}

impl Snapshot {
    /// Looks up a winner by exact name.
    pub fn get(&self, name: &str) -> Option<&Arc<AgentDef>> {
        self.index.get(name).map(|i| &self.agents[*i])
    }

    /// Number of error diagnostics.
    pub fn error_count(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }
}

/// Builds one snapshot: plan, list, parse (parallel), merge. Blocking I/O.
fn build(
    cfg: &sources::SourceConfig,
    opts: &ParseOptions,
    bundled: &[Arc<AgentDef>],
    workspace: Option<&Path>,
    generation: u64,
    watcher: Option<&watch::Watcher>,
) -> Snapshot {
    let mut diagnostics = Vec::new();
    let (dirs, plan) = sources::plan(cfg, workspace, &mut diagnostics);
    if let Some(w) = watcher {
        w.register(&dirs, &plan);
    }
    let files = load::list(&dirs, &mut diagnostics);
    let loaded = load::parse_all(files, opts);

    let mut agents: Vec<Arc<AgentDef>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut shadowed = Vec::new();
    // (dir, name) → first path in that dir, for `duplicate_name`.
    let mut in_dir: HashMap<(usize, String), String> = HashMap::new();
    for f in loaded {
        diagnostics.extend(f.diagnostics);
        let Some(persona) = f.persona else { continue };
        let d = &dirs[f.dir];
        let file_path = f.path.display().to_string();
        let key = (f.dir, persona.name.clone());
        if let Some(first) = in_dir.get(&key) {
            diagnostics.push(Diagnostic {
                path: file_path.clone(),
                line: None,
                severity: Severity::Warning,
                code: "duplicate_name",
                message: format!(
                    "agent {:?} is also defined by {first} in the same directory, which wins",
                    persona.name
                ),
            });
        } else {
            in_dir.insert(key, file_path.clone());
        }
        let def = AgentDef {
            persona,
            source: d.kind,
            family: d.family.clone(),
            file_path,
            content_sha256: f.sha256,
            shadowed_by: None,
        };
        merge(&mut agents, &mut index, &mut shadowed, Arc::new(def));
    }
    for b in bundled {
        merge(&mut agents, &mut index, &mut shadowed, b.clone());
    }
    let version = version_of(&agents);
    Snapshot {
        agents,
        index,
        shadowed,
        diagnostics,
        version,
        generation,
        built_at: Instant::now(),
    }
}

/// First definition of a name wins; later ones are kept as shadowed.
fn merge(
    agents: &mut Vec<Arc<AgentDef>>,
    index: &mut HashMap<String, usize>,
    shadowed: &mut Vec<Arc<AgentDef>>,
    def: Arc<AgentDef>,
) {
    match index.get(&def.persona.name) {
        Some(&i) => {
            let mut lost = (*def).clone();
            lost.shadowed_by = Some(agents[i].file_path.clone());
            shadowed.push(Arc::new(lost));
        }
        None => {
            index.insert(def.persona.name.clone(), agents.len());
            agents.push(def);
        }
    }
}

/// sha256 over (name, source, content hash) of the winners in order.
fn version_of(agents: &[Arc<AgentDef>]) -> String {
    let mut h = Sha256::new();
    for a in agents {
        h.update(a.persona.name.as_bytes());
        h.update([0]);
        h.update(a.source.as_str().as_bytes());
        h.update([0]);
        h.update(a.content_sha256.as_bytes());
        h.update([b'\n']);
    }
    hex::encode(h.finalize())
}

/// The registry: snapshots per workspace, kept fresh by the watcher and bounded by a TTL cache.
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    sources: sources::SourceConfig,
    opts: ParseOptions,
    bundled: Vec<Arc<AgentDef>>,
    roots: Vec<PathBuf>,
    watcher: Option<watch::Watcher>,
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
        };
        let bundled = if cfg.bundled_agents {
            bundled::load(&opts)?
        } else {
            Vec::new()
        };
        let snapshots = moka::future::Cache::builder()
            .weigher(|_, s: &Arc<Snapshot>| {
                u32::try_from(s.agents.len() + s.shadowed.len() + 1).unwrap_or(u32::MAX)
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
                },
                opts,
                bundled,
                // Resolved once: a request compares canonical paths without touching the disk.
                roots: cfg
                    .workspace_roots
                    .iter()
                    .map(|r| r.canonicalize().unwrap_or_else(|_| r.clone()))
                    .collect(),
                watcher,
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
        let canon = match self.inner.canonical.get(workspace) {
            Some(c) => c,
            None => {
                let invalid = |reason: String| DiscoveryError::InvalidWorkspace {
                    workspace: workspace.to_owned(),
                    reason,
                };
                let p = Path::new(workspace);
                if !p.is_absolute() {
                    return Err(invalid("must be an absolute path".to_owned()));
                }
                let c = p.canonicalize().map_err(|e| {
                    invalid(if e.kind() == std::io::ErrorKind::NotFound {
                        "does not exist".to_owned()
                    } else {
                        format!("cannot be resolved: {e}")
                    })
                })?;
                if !c.is_dir() {
                    return Err(invalid("is not a directory".to_owned()));
                }
                self.inner.canonical.insert(workspace.to_owned(), c.clone());
                c
            }
        };
        if !self.inner.roots.is_empty() && !self.inner.roots.iter().any(|r| canon.starts_with(r)) {
            return Err(DiscoveryError::OutsideRoots {
                workspace: workspace.to_owned(),
                resolved: canon.display().to_string(),
            });
        }
        Ok(Some(canon))
    }

    /// The current snapshot for a workspace (empty = none), building it if needed.
    pub async fn snapshot(&self, workspace: &str) -> Result<Arc<Snapshot>, DiscoveryError> {
        let key = self.workspace_key(workspace)?;
        let generation = self.generation();
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
                            &inner.bundled,
                            build_key.as_deref(),
                            gen_at_start,
                            inner.watcher.as_ref(),
                        );
                        inner
                            .metrics
                            .discovery(started.elapsed(), snap.diagnostics.len());
                        tracing::debug!(
                            workspace = ?build_key,
                            agents = snap.agents.len(),
                            diagnostics = snap.diagnostics.len(),
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
            &self.inner.bundled,
            workspace,
            0,
            None,
        )
    }

    /// Builds a snapshot of explicit directories only (for `agentry check DIR…`), in order, each
    /// read flat or, with `recursive`, as `**/*.md` under the rules of a recursive `agent_dirs`
    /// entry. Bundled agents are left out so the listing shows exactly what the directories hold.
    pub fn build_dirs(&self, dirs: &[PathBuf], recursive: bool) -> Snapshot {
        let sources = sources::SourceConfig {
            home: None,
            families: Vec::new(),
            agent_dirs: dirs
                .iter()
                .map(|p| crate::config::AgentDir {
                    path: p.clone(),
                    recursive,
                })
                .collect(),
        };
        build(&sources, &self.inner.opts, &[], None, 0, None)
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
    };
    load::list(&[source], &mut Vec::new())
        .into_iter()
        .map(|f| f.path)
        .collect()
}

impl Inner {
    fn generation(&self) -> u64 {
        self.watcher.as_ref().map_or(0, watch::Watcher::generation)
    }
}

#[cfg(test)]
mod tests;
