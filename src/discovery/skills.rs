//! Skills (docs/personas.md §2.8): the `skills: [name…]` of a persona name directories
//! `<skills dir>/<name>/` holding a `SKILL.md`, looked up in the skill dirs in precedence order
//! (per family the nearest project dir, then the user dir, then plugin installs); the first dir
//! that has the file wins. Only the skills some winning agent names are read, so a workspace
//! pays for the skills it uses. Problems are warnings on the persona that names the skill: the
//! agent still loads, without that skill.

use std::{collections::HashMap, path::Path, sync::Arc};

use sha2::{Digest, Sha256};

use crate::persona::{self, Comments, Diagnostic, MAX_FILE_BYTES, Severity};

use super::{AgentDef, SourceKind, sources::SourceDir};

/// One skill as composed into a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillDef {
    /// The name personas use: its directory's name.
    pub name: String,
    /// `description` of its frontmatter (empty when it has none).
    pub description: String,
    /// The body: the instructions composed after the persona body.
    pub body: String,
    /// Path of the `SKILL.md` read.
    pub file_path: String,
    /// Which rule the skill dir came from.
    pub source: SourceKind,
    /// Hex sha256 of the file's bytes (part of the registry version).
    pub content_sha256: String,
}

/// Why a skill a persona names could not be had.
enum Missing {
    /// No skill dir holds `<name>/SKILL.md`.
    NotFound,
    /// The name cannot be a directory name.
    BadName(&'static str),
    /// The file exists but could not be used.
    Unusable(String),
}

/// Finds and reads every skill that the `agents` name; a skill that cannot be had is a
/// `missing_skill` warning on each agent that names it.
pub(super) fn load(
    dirs: &[SourceDir],
    agents: &[Arc<AgentDef>],
    diagnostics: &mut Vec<Diagnostic>,
) -> HashMap<String, Arc<SkillDef>> {
    let mut found: HashMap<String, Result<Arc<SkillDef>, Missing>> = HashMap::new();
    for a in agents {
        for name in &a.persona.skills {
            let skill = found
                .entry(name.clone())
                .or_insert_with(|| find(dirs, name).map(Arc::new));
            if let Err(why) = skill {
                let searched: Vec<String> =
                    dirs.iter().map(|d| d.path.display().to_string()).collect();
                let message = match why {
                    Missing::NotFound if searched.is_empty() => format!(
                        "skill {name:?} not found: there is no skills directory (<family>/skills) for this workspace; the agent runs without it"
                    ),
                    Missing::NotFound => format!(
                        "skill {name:?} not found: no {name}/SKILL.md in {}; the agent runs without it",
                        searched.join(", ")
                    ),
                    Missing::BadName(why) => {
                        format!("skill {name:?} cannot name a directory ({why}); ignored")
                    }
                    Missing::Unusable(why) => {
                        format!("skill {name:?}: {why}; the agent runs without it")
                    }
                };
                diagnostics.push(Diagnostic {
                    path: a.file_path.clone(),
                    line: a.persona.skills_line,
                    severity: Severity::Warning,
                    code: "missing_skill",
                    message,
                });
            }
        }
    }
    found
        .into_iter()
        .filter_map(|(name, skill)| skill.ok().map(|s| (name, s)))
        .collect()
}

/// The first `<dir>/<name>/SKILL.md` of `dirs`, read.
fn find(dirs: &[SourceDir], name: &str) -> Result<SkillDef, Missing> {
    check_name(name).map_err(Missing::BadName)?;
    for d in dirs {
        let path = d.path.join(name).join("SKILL.md");
        match read(&path, name, d) {
            Err(Missing::NotFound) => {}
            other => return other,
        }
    }
    Err(Missing::NotFound)
}

/// A skill name is one path segment: not empty, not `.` or `..`, no `/`, `\`, NUL or control
/// characters.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name == "." || name == ".." {
        return Err("it is a relative path");
    }
    if name.contains(['/', '\\']) {
        return Err("it holds a path separator");
    }
    if name.chars().any(char::is_control) {
        return Err("it holds a control character");
    }
    Ok(())
}

fn read(path: &Path, name: &str, dir: &SourceDir) -> Result<SkillDef, Missing> {
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Missing::NotFound),
        Err(e) => return Err(Missing::Unusable(format!("cannot read {shown}: {e}"))),
    };
    if !meta.is_file() {
        return Err(Missing::Unusable(format!("{shown} is not a file")));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(Missing::Unusable(format!(
            "{shown} is {} bytes, over the {MAX_FILE_BYTES}-byte limit",
            meta.len()
        )));
    }
    let bytes =
        std::fs::read(path).map_err(|e| Missing::Unusable(format!("cannot read {shown}: {e}")))?;
    let skill = persona::parse_skill(&bytes, Comments::for_family(&dir.family))
        .map_err(|why| Missing::Unusable(format!("{shown}: {why}")))?;
    Ok(SkillDef {
        name: name.to_owned(),
        description: skill.description,
        body: skill.body,
        file_path: shown,
        source: dir.kind,
        content_sha256: hex::encode(Sha256::digest(&bytes)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_path_segment() {
        assert!(check_name("lint").is_ok());
        assert!(check_name("svelte:a11y").is_ok());
        for bad in ["", ".", "..", "a/b", "..\\x", "a\u{0}", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
