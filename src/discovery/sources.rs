//! Which directories are read, in which order (docs §3.1 for agents, §3.6 for workflow
//! commands), including the plugin registry.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::persona::{Diagnostic, Severity};

use super::SourceKind;

/// One directory to read, in precedence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDir {
    /// Which rule produced it.
    pub kind: SourceKind,
    /// Family (`.claude`) for project/user dirs, plugin name for plugins, empty otherwise.
    pub family: String,
    /// The directory.
    pub path: PathBuf,
    /// Read `**/*.md` instead of the top level only.
    pub recursive: bool,
    /// Also read `**/*.toml`: Codex agents in `.codex` agent dirs (§2.5), Gemini CLI commands
    /// in `.gemini` command dirs (§3.6).
    pub toml: bool,
    /// A skills dir (`<family>/skills`): `<name>/SKILL.md` only, each a command too (§3.6).
    pub skills: bool,
}

/// Every directory one snapshot reads, in precedence order, and what the watcher must add.
#[derive(Debug, Default, Clone)]
pub struct Plan {
    /// Agent directories (§3.1).
    pub agents: Vec<SourceDir>,
    /// Workflow-command directories (§3.6), the skill dirs among them (each just before the
    /// commands dir of its place).
    pub commands: Vec<SourceDir>,
    /// Skill directories (`<family>/skills`, docs/personas.md §2.8), in the agents' order.
    pub skills: Vec<SourceDir>,
    /// Paths whose appearance or change matters besides the directories read.
    pub watch: WatchPlan,
}

/// Which registry a directory feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registry {
    Agents,
    Commands,
    Skills,
}

impl Registry {
    /// The directory name inside a family dir or a plugin install.
    fn dir(self) -> &'static str {
        match self {
            Self::Agents => "agents",
            Self::Commands => "commands",
            Self::Skills => "skills",
        }
    }

    /// Commands are always read recursively (§3.6), and skills (`<name>/SKILL.md`); agents only
    /// from recursive `agent_dirs`.
    fn recursive(self) -> bool {
        self != Self::Agents
    }

    /// The family whose dirs also hold TOML definitions: Codex agents, Gemini commands.
    fn toml_family(self) -> &'static str {
        match self {
            Self::Agents => ".codex",
            Self::Commands => ".gemini",
            Self::Skills => "",
        }
    }
}

/// What the file watcher must look at for one snapshot besides the directories read.
#[derive(Debug, Default, Clone)]
pub struct WatchPlan {
    /// Paths that do not exist yet but would change the result if created (closer project dirs,
    /// missing user dirs). The watcher watches their deepest existing ancestor.
    pub targets: Vec<PathBuf>,
    /// Files whose change matters (the plugin registry).
    pub files: Vec<PathBuf>,
}

/// Inputs of source planning, taken from the configuration.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Service home (user dirs, plugin registry).
    pub home: Option<PathBuf>,
    /// Families in precedence order.
    pub families: Vec<String>,
    /// Extra agent directories.
    pub agent_dirs: Vec<crate::config::AgentDir>,
    /// Extra command directories.
    pub command_dirs: Vec<crate::config::CommandDir>,
}

/// The user dir of a family: `H/.xcsh/agent/<what>` for the native family, `H/<f>/<what>` else.
fn user_dir(home: &Path, family: &str, what: Registry) -> PathBuf {
    if family == ".xcsh" {
        home.join(".xcsh/agent").join(what.dir())
    } else {
        home.join(family).join(what.dir())
    }
}

/// Plans every directory for a (canonical) workspace, in precedence order. The plugin registry
/// is read once and feeds both lists.
pub fn plan(cfg: &SourceConfig, workspace: Option<&Path>, diags: &mut Vec<Diagnostic>) -> Plan {
    let mut plan = Plan::default();
    let plugins = match &cfg.home {
        Some(home) => {
            let reg = home.join(".claude/plugins/installed_plugins.json");
            plan.watch.files.push(reg.clone());
            plugin_dirs(&reg, diags)
        }
        None => Vec::new(),
    };
    let extra_agents = cfg.agent_dirs.iter().map(|d| (&d.path, d.recursive));
    plan.agents = plan_one(
        cfg,
        workspace,
        Registry::Agents,
        &plugins,
        extra_agents,
        &mut plan.watch,
    );
    let extra_commands = cfg.command_dirs.iter().map(|d| (&d.path, d.recursive));
    plan.commands = plan_one(
        cfg,
        workspace,
        Registry::Commands,
        &plugins,
        extra_commands,
        &mut plan.watch,
    );
    plan.skills = plan_one(
        cfg,
        workspace,
        Registry::Skills,
        &plugins,
        std::iter::empty(),
        &mut plan.watch,
    );
    plan.commands = with_skills(
        cfg,
        &plugins,
        &plan.skills,
        std::mem::take(&mut plan.commands),
    );
    plan
}

/// The command dirs with the skill dirs among them (skills are commands too, docs §3.6): at each
/// place (a family's project dir, its user dir, a plugin install) the skills dir comes just
/// before the commands dir, as Claude Code prefers a skill to a command of the same name.
fn with_skills(
    cfg: &SourceConfig,
    plugins: &[(String, PathBuf)],
    skills: &[SourceDir],
    commands: Vec<SourceDir>,
) -> Vec<SourceDir> {
    let place = |d: &SourceDir| -> (usize, usize, bool) {
        let group = match d.kind {
            SourceKind::Project | SourceKind::User => cfg
                .families
                .iter()
                .position(|f| *f == d.family)
                .unwrap_or(usize::MAX),
            SourceKind::Plugin => {
                cfg.families.len()
                    + plugins
                        .iter()
                        .position(|(_, install)| Some(install.as_path()) == d.path.parent())
                        .unwrap_or(plugins.len())
            }
            SourceKind::Dir | SourceKind::Bundled => usize::MAX,
        };
        (group, usize::from(d.kind == SourceKind::User), !d.skills)
    };
    let mut all: Vec<SourceDir> = skills.iter().cloned().chain(commands).collect();
    // Stable: dirs of one place keep their order.
    all.sort_by_key(place);
    all
}

/// The directories of one registry: per family the nearest project dir and the user dir, then
/// plugin installs, then the configured extra dirs.
fn plan_one<'a>(
    cfg: &SourceConfig,
    workspace: Option<&Path>,
    what: Registry,
    plugins: &[(String, PathBuf)],
    extra: impl Iterator<Item = (&'a PathBuf, bool)>,
    watch: &mut WatchPlan,
) -> Vec<SourceDir> {
    let mut dirs = Vec::new();
    for family in &cfg.families {
        let toml = family == what.toml_family();
        if let Some(ws) = workspace {
            for anc in ws.ancestors() {
                let cand = anc.join(family).join(what.dir());
                if cand.is_dir() {
                    dirs.push(SourceDir {
                        kind: SourceKind::Project,
                        family: family.clone(),
                        path: cand,
                        recursive: what.recursive(),
                        toml,
                        skills: what == Registry::Skills,
                    });
                    break;
                }
                watch.targets.push(cand);
            }
        }
        if let Some(home) = &cfg.home {
            let u = user_dir(home, family, what);
            if u.is_dir() {
                dirs.push(SourceDir {
                    kind: SourceKind::User,
                    family: family.clone(),
                    path: u,
                    recursive: what.recursive(),
                    toml,
                    skills: what == Registry::Skills,
                });
            } else {
                watch.targets.push(u);
            }
        }
    }
    for (plugin, install) in plugins {
        let path = install.join(what.dir());
        if !path.is_dir() {
            watch.targets.push(path.clone());
        }
        dirs.push(SourceDir {
            kind: SourceKind::Plugin,
            family: plugin.clone(),
            path,
            recursive: what.recursive(),
            toml: false,
            skills: what == Registry::Skills,
        });
    }
    for (path, recursive) in extra {
        if !path.is_dir() {
            watch.targets.push(path.clone());
        }
        dirs.push(SourceDir {
            kind: SourceKind::Dir,
            family: String::new(),
            path: path.clone(),
            recursive,
            toml: false,
            skills: what == Registry::Skills,
        });
    }
    dirs
}

/// Reads `installed_plugins.json`: returns `(plugin name, installPath)` with project-scope
/// installs first, then user-scope ones, each in file order. Problems are warnings.
pub fn plugin_dirs(reg: &Path, diags: &mut Vec<Diagnostic>) -> Vec<(String, PathBuf)> {
    let path = reg.display().to_string();
    let mut warn = |message: String| {
        diags.push(Diagnostic {
            path: path.clone(),
            line: None,
            severity: Severity::Warning,
            code: "plugin_registry",
            message,
        });
    };
    let bytes = match std::fs::read(reg) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warn(format!("cannot read the plugin registry: {e}"));
            return Vec::new();
        }
    };
    let doc: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            warn(format!("the plugin registry is not valid JSON: {e}"));
            return Vec::new();
        }
    };
    if !doc.get("version").is_some_and(Value::is_number) {
        warn("the plugin registry has no numeric `version`; reading it anyway".to_owned());
    }
    let Some(plugins) = doc.get("plugins").and_then(Value::as_object) else {
        warn("the plugin registry has no `plugins` object".to_owned());
        return Vec::new();
    };
    let mut project = Vec::new();
    let mut user = Vec::new();
    for (key, installs) in plugins {
        let Some((name, _marketplace)) = key.rsplit_once('@') else {
            warn(format!(
                "plugin key {key:?} is not `<plugin>@<marketplace>`; skipped"
            ));
            continue;
        };
        let Some(list) = installs.as_array() else {
            warn(format!("plugin {key:?}: installs must be a list; skipped"));
            continue;
        };
        for (i, inst) in list.iter().enumerate() {
            let Some(ip) = inst.get("installPath").and_then(Value::as_str) else {
                warn(format!(
                    "plugin {key:?} install {i} has no `installPath`; skipped"
                ));
                continue;
            };
            if !Path::new(ip).is_absolute() {
                warn(format!(
                    "plugin {key:?} install {i} has a relative installPath {ip:?}; skipped"
                ));
                continue;
            }
            let scope = inst.get("scope").and_then(Value::as_str).unwrap_or("user");
            let entry = (name.to_owned(), PathBuf::from(ip));
            match scope {
                "project" => project.push(entry),
                "user" => user.push(entry),
                other => {
                    warn(format!(
                        "plugin {key:?} install {i} has unknown scope {other:?}; treated as user"
                    ));
                    user.push(entry);
                }
            }
        }
    }
    project.extend(user);
    project
}
