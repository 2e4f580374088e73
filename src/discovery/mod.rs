//! Discovery: which directories are read, in which order; the merge into one snapshot per
//! workspace of the agents (docs §3) and of the workflow commands (§3.6); the file watcher and the
//! snapshot cache that keep snapshots fresh.
//!
//! Depends on [`crate::persona`] and [`crate::config`] only; never on gRPC.

mod bundled;
mod load;
mod merge;
mod skills;
mod snapshot;
pub mod sources;
mod watch;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use crate::{
    config::Config,
    persona::{Diagnostic, ParseOptions},
};

pub use skills::SkillDef;
pub use snapshot::{AgentDef, CommandDef, Snapshot, SourceKind, frees_under_way};
pub use sources::SourceDir;

use merge::{Bundled, ParseCaches, assemble, build, model_check};

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

    /// Changes whenever the watcher (or a reload) may have made a snapshot stale; `None`
    /// without a watcher (a registry built for one check), when nothing announces a change.
    pub fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.watcher.as_ref().map(watch::Watcher::changes)
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
