//! What discovery produces (docs §3.3, §3.5): the definitions with where each came from
//! ([`AgentDef`], [`CommandDef`], [`SourceKind`]) and the [`Snapshot`] of one workspace at one
//! moment — winners, shadowed, diagnostics, version — freed off the request path when large.

use std::{
    collections::HashMap,
    hash::BuildHasher,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use crate::persona::{Diagnostic, Persona, Severity, command::Command};

use super::SkillDef;

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

/// The merged set of definitions for one workspace at one moment. Immutable; swapped whole.
#[derive(Debug)]
pub struct Snapshot {
    /// Winners in precedence order.
    pub agents: Vec<Arc<AgentDef>>,
    /// Winners by name: positions in `agents`, found with [`Self::names`]'s hash of the name.
    pub(super) index: hashbrown::HashTable<usize>,
    /// Hashes agent names for `index`.
    pub(super) names: hashbrown::DefaultHashBuilder,
    /// Losers, each with `shadowed_by` set, in read order.
    pub shadowed: Vec<Arc<AgentDef>>,
    /// Every problem found while building the agents (and reading the plugin registry).
    pub diagnostics: Vec<Diagnostic>,
    /// Winning commands in precedence order.
    pub commands: Vec<Arc<CommandDef>>,
    /// Name or alias → index into `commands`.
    pub(super) command_index: HashMap<String, usize>,
    /// Commands that lost their name, each with `shadowed_by` set, in read order.
    pub shadowed_commands: Vec<Arc<CommandDef>>,
    /// Every problem found while building the commands (the plugin registry's too, first).
    pub command_diagnostics: Vec<Diagnostic>,
    /// The skills the winning agents name, by name (docs/personas.md §2.8).
    pub(super) skills: HashMap<String, Arc<SkillDef>>,
    /// How many leading entries both diagnostic lists share (the plugin registry's).
    pub(super) shared_diagnostics: usize,
    /// sha256 over the winning agents and commands (name, source, content).
    pub version: String,
    /// Watcher generation this snapshot was built at.
    pub(super) generation: u64,
}

/// Definitions (agents and commands, shadowed ones included) from which a snapshot is freed on
/// rayon's pool rather than on the thread that lets go of it: freeing 10,000 definitions takes
/// about 10 ms, which a request thread holding the last reference would otherwise spend before
/// it can serve anything else.
pub(super) const FREE_ON_POOL: usize = 1_000;

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
