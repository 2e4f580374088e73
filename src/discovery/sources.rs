//! Which directories are read, in which order (SPEC §3.1), including the plugin registry.

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
    /// Extra directories.
    pub agent_dirs: Vec<crate::config::AgentDir>,
}

/// The user dir of a family: `H/.xcsh/agent/agents` for the native family, `H/<f>/agents` else.
fn user_dir(home: &Path, family: &str) -> PathBuf {
    if family == ".xcsh" {
        home.join(".xcsh/agent/agents")
    } else {
        home.join(family).join("agents")
    }
}

/// Plans every directory for a (canonical) workspace, in precedence order.
pub fn plan(
    cfg: &SourceConfig,
    workspace: Option<&Path>,
    diags: &mut Vec<Diagnostic>,
) -> (Vec<SourceDir>, WatchPlan) {
    let mut dirs = Vec::new();
    let mut watch = WatchPlan::default();
    for family in &cfg.families {
        if let Some(ws) = workspace {
            for anc in ws.ancestors() {
                let cand = anc.join(family).join("agents");
                if cand.is_dir() {
                    dirs.push(SourceDir {
                        kind: SourceKind::Project,
                        family: family.clone(),
                        path: cand,
                        recursive: false,
                    });
                    break;
                }
                watch.targets.push(cand);
            }
        }
        if let Some(home) = &cfg.home {
            let u = user_dir(home, family);
            if u.is_dir() {
                dirs.push(SourceDir {
                    kind: SourceKind::User,
                    family: family.clone(),
                    path: u,
                    recursive: false,
                });
            } else {
                watch.targets.push(u);
            }
        }
    }
    if let Some(home) = &cfg.home {
        let reg = home.join(".claude/plugins/installed_plugins.json");
        watch.files.push(reg.clone());
        for (plugin, install) in plugin_dirs(&reg, diags) {
            let agents = install.join("agents");
            if !agents.is_dir() {
                watch.targets.push(agents.clone());
            }
            dirs.push(SourceDir {
                kind: SourceKind::Plugin,
                family: plugin,
                path: agents,
                recursive: false,
            });
        }
    }
    for d in &cfg.agent_dirs {
        if !d.path.is_dir() {
            watch.targets.push(d.path.clone());
        }
        dirs.push(SourceDir {
            kind: SourceKind::Dir,
            family: String::new(),
            path: d.path.clone(),
            recursive: d.recursive,
        });
    }
    (dirs, watch)
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
        })
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
