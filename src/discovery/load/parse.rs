//! Parsing the files listed (docs §2, §2.5, §3.6), in parallel and in input order: personas
//! (markdown or Codex TOML) and commands (markdown, Gemini TOML, skills), each through the
//! [`ParseCache`](super::cache::ParseCache).

use std::{
    collections::HashMap,
    hash::BuildHasher,
    path::Path,
    sync::{Arc, atomic::Ordering},
};

use rayon::prelude::*;

use crate::persona::{
    self, Comments, Diagnostic, ParseOptions, Persona, Severity,
    command::{self, Command, CommandName, Dialect},
};

use super::super::{AgentDef, SourceKind, sources::SourceDir};
use super::cache::ParseCache;
use super::shown;
use super::walk::FoundFile;

/// A parsed persona file: its definition (if valid) and its diagnostics.
pub struct LoadedFile {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// What the file parsed to.
    pub parsed: ParsedAgent,
    /// The definition's name hashed with the build's hasher (0 without a definition), taken
    /// while the name is still in this thread's cache.
    pub name_hash: u64,
}

/// What one persona file parsed to, as kept by the [`ParseCache`]: shared with every snapshot
/// that holds it, so an unchanged file costs a `stat` and no copy.
#[derive(Clone)]
pub struct ParsedAgent {
    /// The definition, with the source and family of the directory it was read from, when the
    /// file was valid.
    pub def: Option<Arc<AgentDef>>,
    /// Problems found.
    pub diagnostics: Vec<Diagnostic>,
}

/// What one command file parsed to, as kept by the [`ParseCache`].
#[derive(Clone)]
pub struct ParsedCommand {
    /// The command, when the file was valid.
    command: Option<Command>,
    /// Hex sha256 of the bytes.
    sha256: String,
    /// Problems found.
    diagnostics: Vec<Diagnostic>,
}

/// A parsed command file.
pub struct LoadedCommand {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// The file as shown to people ([`shown`]).
    pub file_path: String,
    /// The names it answers to, when its path can name a command.
    pub name: Option<CommandName>,
    /// The command, when the file was valid.
    pub command: Option<Command>,
    /// Hex sha256 of the bytes.
    pub sha256: String,
    /// Problems found.
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads and parses every persona file, in parallel, keeping the input order; files unchanged
/// since `cache` last saw them are reused. `*.toml` files are Codex agents, everything else
/// markdown.
pub fn parse_all(
    files: Vec<FoundFile<'_>>,
    dirs: &[SourceDir],
    opts: &ParseOptions,
    cache: &ParseCache<ParsedAgent>,
    names: &(impl BuildHasher + Sync),
) -> Vec<LoadedFile> {
    let build = cache.begin();
    let loaded = files
        .into_par_iter()
        .map(|f| {
            let d = &dirs[f.dir];
            let file_path = shown(f.path);
            let fits = |p: &ParsedAgent| {
                p.def
                    .as_ref()
                    .is_none_or(|def| def.source == d.kind && def.family == d.family)
            };
            let parse = |bytes: &[u8], sha256: String| {
                let mut parsed = if is_toml(f.path) {
                    persona::parse_toml(bytes, &file_path)
                } else {
                    persona::parse(bytes, &file_path, opts, Comments::for_family(&d.family))
                };
                if d.kind == SourceKind::Project && !opts.allow_inline_mcp {
                    refuse_inline_mcp(&mut parsed, &file_path);
                }
                ParsedAgent {
                    def: parsed.persona.map(|persona: Persona| {
                        Arc::new(AgentDef {
                            persona,
                            source: d.kind,
                            family: d.family.clone(),
                            file_path: file_path.clone(),
                            content_sha256: sha256,
                            shadowed_by: None,
                        })
                    }),
                    diagnostics: parsed.diagnostics,
                }
            };
            let parsed = cache
                .load(build, f.path, &file_path, fits, parse)
                .unwrap_or_else(|d| ParsedAgent {
                    def: None,
                    diagnostics: vec![d],
                });
            let name_hash = parsed
                .def
                .as_ref()
                .map_or(0, |def| names.hash_one(def.persona.name.as_str()));
            LoadedFile {
                dir: f.dir,
                parsed,
                name_hash,
            }
        })
        .collect();
    cache.sweep(build, HashMap::len, |e| e.seen.load(Ordering::Relaxed));
    loaded
}

/// A project file's own MCP server definitions start programs that whoever can write to the
/// workspace chose: without `mcp.allow_inline` they are dropped, each with a warning
/// `inline_mcp_refused` (docs/personas.md §2.9). Named servers stay.
fn refuse_inline_mcp(parsed: &mut persona::Parsed, file_path: &str) {
    let Some(p) = parsed.persona.as_mut() else {
        return;
    };
    let Some(servers) = p.mcp_servers.as_mut() else {
        return;
    };
    let line = p.mcp_servers_line;
    servers.retain(|s| {
        let persona::mcp::McpRef::Inline(def) = s else {
            return true;
        };
        parsed.diagnostics.push(Diagnostic {
            path: file_path.to_owned(),
            line,
            severity: Severity::Warning,
            code: "inline_mcp_refused",
            message: format!(
                "MCP server {:?} is defined in a project file, and mcp.allow_inline is off: it is not started",
                def.name
            ),
        });
        false
    });
}

/// Reads and parses every command file, in parallel, keeping the input order; files unchanged
/// since `cache` last saw them are reused. A path that cannot name a command is an
/// `invalid_command_name` error and the file is not read. A file's dialect comes from where it
/// is (docs §3.6); a skill (`<name>/SKILL.md` in a skills dir) is named after its directory, and
/// one with `user-invocable: false` is no command.
pub fn parse_commands(
    files: Vec<FoundFile<'_>>,
    dirs: &[SourceDir],
    cache: &ParseCache<ParsedCommand>,
) -> Vec<LoadedCommand> {
    let build = cache.begin();
    let loaded = files
        .into_par_iter()
        .map(|f| {
            let file_path = shown(f.path);
            let mut loaded = LoadedCommand {
                dir: f.dir,
                file_path,
                name: None,
                command: None,
                sha256: String::new(),
                diagnostics: Vec::new(),
            };
            let d = &dirs[f.dir];
            let toml = is_toml(f.path);
            let dialect = if toml {
                Dialect::Gemini
            } else {
                Dialect::of_markdown(&d.family, d.kind == SourceKind::Plugin, d.skills)
            };
            let rel = if d.skills {
                f.rel.parent().unwrap_or(f.rel)
            } else {
                f.rel
            };
            let name = match command::name_from_path(rel, dialect) {
                Ok(n) => n,
                Err(why) => {
                    loaded.diagnostics.push(Diagnostic {
                        path: loaded.file_path.clone(),
                        line: None,
                        severity: Severity::Error,
                        code: "invalid_command_name",
                        message: format!("{} cannot name a command: {why}", shown(rel)),
                    });
                    return loaded;
                }
            };
            let parse = |bytes: &[u8], sha256: String| {
                let mut parsed = if toml {
                    command::parse_toml(bytes, &loaded.file_path)
                } else {
                    command::parse_markdown(
                        bytes,
                        &loaded.file_path,
                        Comments::for_family(&d.family),
                        dialect,
                    )
                };
                if d.skills
                    && let Some(c) = &mut parsed.command
                {
                    if !c.user_invocable {
                        // Only the model may load it: not a command, and nothing wrong.
                        parsed.command = None;
                        parsed.diagnostics.clear();
                    } else {
                        c.skill_dir = f.path.parent().map(shown);
                    }
                }
                ParsedCommand {
                    command: parsed.command,
                    sha256,
                    diagnostics: parsed.diagnostics,
                }
            };
            match cache.load(build, f.path, &loaded.file_path, |_| true, parse) {
                Ok(parsed) => {
                    loaded.command = parsed.command;
                    loaded.sha256 = parsed.sha256;
                    loaded.diagnostics = parsed.diagnostics;
                    loaded.name = Some(name);
                }
                Err(d) => loaded.diagnostics.push(d),
            }
            loaded
        })
        .collect();
    cache.sweep(build, HashMap::len, |e| e.seen.load(Ordering::Relaxed));
    loaded
}

fn is_toml(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "toml")
}
