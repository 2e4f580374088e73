//! `agentry check`, the persona linter (docs §8): loads agents exactly like the service, then
//! reports the merged list, shadowed definitions, every diagnostic and hints — as text for people,
//! one JSON document for tools, or GitHub workflow commands that annotate a pull request.
//!
//! Depends on [`crate::config`], [`crate::discovery`] and [`crate::persona`]; never on gRPC or
//! the worker runtime. Argument parsing stays in `main.rs`: this module takes plain [`Options`]
//! and writes to any [`io::Write`], so each format is testable without a process. A new kind of
//! definition (workflow commands, TOML agents) is one more field of [`Report`] and one more
//! section in each of [`write_text`], [`write_json`] and [`write_github`].

use std::{
    collections::HashSet,
    io::{self, Write},
    path::{Path, PathBuf},
};

use serde_json::json;

use crate::{
    config::Config,
    discovery::{self, DiscoveryError, Registry, Snapshot},
    persona::Severity,
};

/// Exit status: no error diagnostics (warnings are allowed).
pub const EXIT_OK: u8 = 0;
/// Exit status: at least one error diagnostic, i.e. a persona file that does not load.
pub const EXIT_ERRORS: u8 = 1;
/// Exit status: nothing was linted — a bad option, a directory that does not exist, a bad config.
/// Distinct from [`EXIT_ERRORS`] so a CI job can tell "your personas are broken" from "your CI
/// step is".
pub const EXIT_USAGE: u8 = 2;

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Sections for people: agents, shadowed, diagnostics as `file:line: severity[code]: …`.
    Text,
    /// One JSON document: `agents`, `shadowed`, `diagnostics`, `hints`, `summary`.
    Json,
    /// One `::error`/`::warning` workflow command per diagnostic, then a summary line.
    Github,
}

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Also read the project dirs found walking up from here (only without `dirs`).
    pub workspace: Option<PathBuf>,
    /// Read only these directories, in this order, instead of the configured sources.
    pub dirs: Vec<PathBuf>,
    /// Read `dirs` as `**/*.md`, like a recursive `agent_dirs` entry.
    pub recursive: bool,
}

/// Why nothing could be linted; the binary exits with [`EXIT_USAGE`].
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A directory argument (or `--workspace`) that cannot be read as a directory. Linting it as
    /// empty would pass a typo in a CI path.
    #[error("{what} {} {problem}", path.display())]
    BadPath {
        /// `directory` or `--workspace`.
        what: &'static str,
        /// As given.
        path: PathBuf,
        /// `does not exist`, `is not a directory`, `cannot be read: …`.
        problem: String,
    },
    /// The bundled agents did not parse (a build defect).
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

/// Something worth saying that is not a problem in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// The directory it is about, as given.
    pub path: String,
    /// What to do.
    pub message: String,
}

/// Everything one run found.
#[derive(Debug)]
pub struct Report {
    /// The merged definitions, as the service would build them.
    pub snapshot: Snapshot,
    /// Advice, such as `--recursive` for a directory whose personas sit in subfolders.
    pub hints: Vec<Hint>,
}

impl Report {
    /// Number of error diagnostics.
    pub fn errors(&self) -> usize {
        self.snapshot.error_count()
    }

    /// Number of warning diagnostics.
    pub fn warnings(&self) -> usize {
        self.snapshot
            .all_diagnostics()
            .filter(|d| d.severity == Severity::Warning)
            .count()
    }

    /// [`EXIT_ERRORS`] when any diagnostic is an error, else [`EXIT_OK`].
    pub fn exit_code(&self) -> u8 {
        if self.errors() > 0 {
            EXIT_ERRORS
        } else {
            EXIT_OK
        }
    }

    /// Prints the report in `format`.
    pub fn write(&self, format: Format, out: &mut impl Write) -> io::Result<()> {
        match format {
            Format::Text => write_text(self, out),
            Format::Json => write_json(self, out),
            Format::Github => write_github(self, out),
        }
    }
}

/// Reads what `opts` names: with `dirs`, those directories only (no other source, no bundled
/// agents, paths shown as given); without, the configured sources and the bundled agents, plus
/// the project dirs of `opts.workspace`.
pub fn run(cfg: &Config, opts: &Options) -> Result<Report, CheckError> {
    let registry = Registry::new(cfg, false)?;
    if opts.dirs.is_empty() {
        let workspace = match &opts.workspace {
            Some(w) => {
                readable_dir("--workspace", w)?;
                // The service resolves a workspace before walking up from it; so does the linter.
                Some(w.canonicalize().map_err(|e| CheckError::BadPath {
                    what: "--workspace",
                    path: w.clone(),
                    problem: format!("cannot be resolved: {e}"),
                })?)
            }
            None => None,
        };
        return Ok(Report {
            snapshot: registry.build_once(workspace.as_deref()),
            hints: Vec::new(),
        });
    }
    for d in &opts.dirs {
        readable_dir("directory", d)?;
    }
    let snapshot = registry.build_dirs(&opts.dirs, opts.recursive);
    let hints = if opts.recursive {
        Vec::new()
    } else {
        recursive_hints(&opts.dirs, &snapshot)
    };
    Ok(Report { snapshot, hints })
}

/// Refuses a path that is missing, not a directory, or not listable.
fn readable_dir(what: &'static str, path: &Path) -> Result<(), CheckError> {
    let bad = |problem: String| CheckError::BadPath {
        what,
        path: path.to_owned(),
        problem,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(bad("does not exist".to_owned())),
        Err(e) => Err(bad(format!("cannot be read: {e}"))),
        Ok(m) if !m.is_dir() => Err(bad("is not a directory".to_owned())),
        Ok(_) => std::fs::read_dir(path)
            .map(drop)
            .map_err(|e| bad(format!("cannot be read: {e}"))),
    }
}

/// For each directory that gave no definition (winner or shadowed) but holds persona files in
/// its subdirectories, a hint to pass `--recursive`.
fn recursive_hints(dirs: &[PathBuf], snapshot: &Snapshot) -> Vec<Hint> {
    let defined: HashSet<&str> = snapshot
        .agents
        .iter()
        .chain(&snapshot.shadowed)
        .map(|a| a.file_path.as_str())
        .collect();
    dirs.iter()
        .filter(|d| {
            !discovery::persona_files(d, false)
                .iter()
                .any(|f| defined.contains(f.display().to_string().as_str()))
        })
        .filter_map(|d| {
            let nested = discovery::persona_files(d, true)
                .iter()
                .filter(|f| f.parent() != Some(d.as_path()))
                .count();
            (nested > 0).then(|| Hint {
                path: d.display().to_string(),
                message: format!(
                    "no agents at the top level, but {nested} .md file{} in subdirectories; \
                     pass --recursive (-r) to read them",
                    if nested == 1 { "" } else { "s" }
                ),
            })
        })
        .collect()
}

/// The human format; `.ci/run` greps its `agents (N):` and `diagnostics (N, E errors):` lines.
pub fn write_text(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let snap = &report.snapshot;
    writeln!(out, "agents ({}):", snap.agents.len())?;
    for a in &snap.agents {
        writeln!(
            out,
            "  {:<32} {:<8} {}",
            a.persona.name,
            a.source.as_str(),
            a.file_path
        )?;
    }
    if !snap.shadowed.is_empty() {
        writeln!(out, "shadowed ({}):", snap.shadowed.len())?;
        for a in &snap.shadowed {
            writeln!(
                out,
                "  {:<32} {} (shadowed by {})",
                a.persona.name,
                a.file_path,
                a.shadowed_by.as_deref().unwrap_or("?")
            )?;
        }
    }
    // Directories given on the command line are read as agent dirs: no commands to list then.
    if !snap.commands.is_empty() {
        writeln!(out, "commands ({}):", snap.commands.len())?;
    }
    for c in &snap.commands {
        let aliases = if c.aliases.is_empty() {
            String::new()
        } else {
            format!(" (also {})", c.aliases.join(", "))
        };
        writeln!(
            out,
            "  {:<32} {:<8} {}{aliases}",
            c.name,
            c.source.as_str(),
            c.file_path
        )?;
    }
    if !snap.shadowed_commands.is_empty() {
        writeln!(out, "shadowed commands ({}):", snap.shadowed_commands.len())?;
        for c in &snap.shadowed_commands {
            writeln!(
                out,
                "  {:<32} {} (shadowed by {})",
                c.name,
                c.file_path,
                c.shadowed_by.as_deref().unwrap_or("?")
            )?;
        }
    }
    writeln!(
        out,
        "diagnostics ({}, {} errors):",
        snap.all_diagnostics().count(),
        report.errors()
    )?;
    for d in snap.all_diagnostics() {
        writeln!(out, "  {d}")?;
    }
    for h in &report.hints {
        writeln!(out, "hint: {}: {}", h.path, h.message)?;
    }
    writeln!(out, "registry_version: {}", snap.version)
}

/// One pretty-printed JSON document, for tools: every list in full plus a `summary` with the
/// counts, the registry version and the exit status the run ends with.
pub fn write_json(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let snap = &report.snapshot;
    let doc = json!({
        "agents": snap.agents.iter().map(|a| json!({
            "name": a.persona.name,
            "description": a.persona.description,
            "source": a.source.as_str(),
            "family": a.family,
            "path": a.file_path,
        })).collect::<Vec<_>>(),
        "shadowed": snap.shadowed.iter().map(|a| json!({
            "name": a.persona.name,
            "source": a.source.as_str(),
            "family": a.family,
            "path": a.file_path,
            "shadowed_by": a.shadowed_by,
        })).collect::<Vec<_>>(),
        "commands": snap.commands.iter().map(|c| json!({
            "name": c.name,
            "aliases": c.aliases,
            "source": c.source.as_str(),
            "family": c.family,
            "path": c.file_path,
        })).collect::<Vec<_>>(),
        "shadowed_commands": snap.shadowed_commands.iter().map(|c| json!({
            "name": c.name,
            "path": c.file_path,
            "shadowed_by": c.shadowed_by,
        })).collect::<Vec<_>>(),
        "diagnostics": snap.all_diagnostics().collect::<Vec<_>>(),
        "hints": report.hints.iter().map(|h| json!({
            "path": h.path,
            "message": h.message,
        })).collect::<Vec<_>>(),
        "summary": {
            "agents": snap.agents.len(),
            "shadowed": snap.shadowed.len(),
            "commands": snap.commands.len(),
            "diagnostics": snap.all_diagnostics().count(),
            "errors": report.errors(),
            "warnings": report.warnings(),
            "registry_version": snap.version,
            "exit_code": report.exit_code(),
        },
    });
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// GitHub Actions workflow commands: `::error file=…,line=…,title=<code>::<message>` (or
/// `::warning`) per diagnostic, which the runner turns into annotations on the files, a
/// `::notice` per hint, then one plain summary line for the log.
pub fn write_github(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let snap = &report.snapshot;
    for d in snap.all_diagnostics() {
        let command = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "notice",
        };
        write!(out, "::{command} file={}", escape_property(&d.path))?;
        if let Some(line) = d.line {
            write!(out, ",line={line}")?;
        }
        writeln!(
            out,
            ",title={}::{}",
            escape_property(d.code),
            escape_data(&d.message)
        )?;
    }
    for h in &report.hints {
        writeln!(
            out,
            "::notice title={}::{}",
            escape_property("agentry check"),
            escape_data(&format!("{}: {}", h.path, h.message))
        )?;
    }
    writeln!(
        out,
        "agentry check: {} agents, {} shadowed, {} commands, {} diagnostics ({} errors, \
         {} warnings), registry_version {}",
        snap.agents.len(),
        snap.shadowed.len(),
        snap.commands.len(),
        snap.all_diagnostics().count(),
        report.errors(),
        report.warnings(),
        snap.version
    )
}

/// A workflow command's message: `%`, CR and LF would end or corrupt the command.
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as [`escape_data`], plus `:` and `,`, which end a
/// property.
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_escaping_follows_the_workflow_command_rules() {
        assert_eq!(
            escape_data("50% done\r\nnext: a,b"),
            "50%25 done%0D%0Anext: a,b"
        );
        assert_eq!(escape_property("C:\\a,b%\n.md"), "C%3A\\a%2Cb%25%0A.md");
        // `%` first, so an escape is never escaped twice.
        assert_eq!(escape_property("%3A"), "%253A");
    }
}
