//! One build of a snapshot (docs §3.3, §3.6): list and parse the planned directories (agents
//! and commands side by side), merge them — first definition of a name wins, later ones kept
//! as shadowed, `duplicate_name` within a directory, command aliases in their directory's turn
//! — add the bundled definitions and skills, and hash the winners into the registry version.

use std::{collections::HashMap, hash::BuildHasher, path::Path, sync::Arc};

use sha2::{Digest, Sha256};

use crate::{
    config::Config,
    persona::{Diagnostic, ParseOptions, Severity},
};

use super::{
    AgentDef, CommandDef, SkillDef, Snapshot, SourceDir, SourceKind, load, skills, sources, watch,
};

/// What a build merges in after everything on disk.
pub(super) struct Bundled<'a> {
    pub(super) agents: &'a [Arc<AgentDef>],
    pub(super) commands: &'a [CommandDef],
}

/// The listings and parsed files a build may reuse (see [`load::ListCache`],
/// [`load::ParseCache`]).
pub(super) struct Parsed<'a> {
    pub(super) listings: &'a load::ListCache,
    pub(super) command_listings: &'a load::ListCache,
    pub(super) agents: &'a load::ParseCache<load::ParsedAgent>,
    pub(super) commands: &'a load::ParseCache<load::ParsedCommand>,
}

/// Caches of directory listings and of parsed agent and command files, shared by every build
/// of one registry.
pub(super) struct ParseCaches {
    pub(super) listings: load::ListCache,
    pub(super) command_listings: load::ListCache,
    pub(super) agents: load::ParseCache<load::ParsedAgent>,
    pub(super) commands: load::ParseCache<load::ParsedCommand>,
}

impl ParseCaches {
    /// Caches holding up to `capacity` files each.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            listings: load::ListCache::new(capacity),
            command_listings: load::ListCache::new(capacity),
            agents: load::ParseCache::new(capacity),
            commands: load::ParseCache::new(capacity),
        }
    }

    /// Caches that store nothing, for a one-off build.
    pub(super) fn none() -> Self {
        Self {
            listings: load::ListCache::none(),
            command_listings: load::ListCache::none(),
            agents: load::ParseCache::none(),
            commands: load::ParseCache::none(),
        }
    }

    pub(super) fn parsed(&self) -> Parsed<'_> {
        Parsed {
            listings: &self.listings,
            command_listings: &self.command_listings,
            agents: &self.agents,
            commands: &self.commands,
        }
    }
}

/// Builds one snapshot: plan, list, parse (parallel), merge. Blocking I/O.
pub(super) fn build(
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
pub(super) fn assemble(
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
pub(super) fn model_check(cfg: &Config) -> Option<crate::persona::ModelCheck> {
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
