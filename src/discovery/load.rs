//! Reads directories (SPEC §3.2, §2.5, §3.6) and parses their files in parallel.

use std::{
    collections::HashSet,
    fs::FileType,
    io::Read,
    os::unix::{
        ffi::OsStrExt,
        fs::{FileTypeExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::persona::{
    self, Diagnostic, MAX_FILE_BYTES, ParseOptions, Persona, Severity,
    command::{self, Command, CommandName},
};

use super::sources::SourceDir;

/// One file found in a directory, in read order.
#[derive(Debug)]
pub struct FoundFile {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// The file.
    pub path: PathBuf,
    /// The path relative to its directory (a command's name comes from it).
    pub rel: PathBuf,
}

/// A parsed persona file: the persona (if valid), its content hash and its diagnostics.
pub struct LoadedFile {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// The file as shown to people ([`shown`]).
    pub file_path: String,
    /// The persona, when the file was valid.
    pub persona: Option<Persona>,
    /// Hex sha256 of the bytes.
    pub sha256: String,
    /// Problems found.
    pub diagnostics: Vec<Diagnostic>,
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

/// A path as people see it: UTF-8 as is, every byte that is not valid UTF-8 escaped as `\xNN`
/// (never U+FFFD, which would make two different names look the same).
pub fn shown(p: &Path) -> String {
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn warn_dir(path: &Path, code: &'static str, message: String) -> Diagnostic {
    Diagnostic {
        path: shown(path),
        line: None,
        severity: Severity::Warning,
        code,
        message,
    }
}

/// Lists the files of every directory in precedence order, then byte order of the relative
/// path inside each.
pub fn list(dirs: &[SourceDir], diags: &mut Vec<Diagnostic>) -> Vec<FoundFile> {
    let mut out = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        out.extend(
            walk(d, diags)
                .into_iter()
                .map(|(rel, path)| FoundFile { dir: i, path, rel }),
        );
    }
    out
}

fn read_dir_sorted(dir: &Path, diags: &mut Vec<Diagnostic>) -> Vec<std::fs::DirEntry> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Vec::new(),
        Err(e) => {
            diags.push(warn_dir(
                dir,
                "unreadable",
                format!("cannot read directory: {e}"),
            ));
            return Vec::new();
        }
    };
    let mut entries: Vec<_> = rd.filter_map(Result::ok).collect();
    entries.sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()));
    entries
}

/// What a non-regular entry is, for the `not_a_file` message.
fn what(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

fn not_a_file(path: &Path, t: FileType) -> Diagnostic {
    warn_dir(
        path,
        "not_a_file",
        format!(
            "{} is {}, not a file; skipped",
            shown(Path::new(path.file_name().unwrap_or_default())),
            what(t)
        ),
    )
}

/// The files of one directory as `(relative path, path)`, in byte order of the relative path:
/// `*.md` at the top level (at any depth when `recursive`, minus README.md in any case) and, when
/// `toml`, `**/*.toml`. Recursive reading skips hidden entries (as a shell glob would) and follows
/// a directory symlink only when it stays inside the root, and never twice (no loops). An entry
/// with a wanted name that is not a regular file (nor a symlink to one) is a `not_a_file`
/// warning.
fn walk(d: &SourceDir, diags: &mut Vec<Diagnostic>) -> Vec<(PathBuf, PathBuf)> {
    let deep = d.recursive || d.toml;
    let mut visited = HashSet::new();
    let canon_root = if deep {
        let Ok(c) = d.path.canonicalize() else {
            return Vec::new();
        };
        visited.insert(c.clone());
        Some(c)
    } else {
        None
    };
    let mut found: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut stack = vec![(d.path.clone(), PathBuf::new())];
    while let Some((dir, rel)) = stack.pop() {
        let top = rel.as_os_str().is_empty();
        for e in read_dir_sorted(&dir, diags) {
            let name = e.file_name();
            let nb = name.as_bytes();
            let md = nb.ends_with(b".md") && (top || d.recursive);
            let toml = d.toml && nb.ends_with(b".toml");
            // A flat directory reads every `*.md` at its top level, hidden or not.
            if nb.starts_with(b".") && (d.recursive || !(top && md)) {
                continue;
            }
            let Ok(t) = e.file_type() else { continue };
            let path = e.path();
            // What the entry is once a symlink is followed; `None` when it cannot be followed
            // (reading it will say why).
            let target = if t.is_symlink() {
                std::fs::metadata(&path).ok().map(|m| m.file_type())
            } else {
                Some(t)
            };
            if let Some(tt) = target.filter(FileType::is_dir) {
                if md && !d.recursive {
                    diags.push(not_a_file(&path, tt));
                }
                if let Some(canon_root) = &canon_root {
                    match path.canonicalize() {
                        Ok(c) if !c.starts_with(canon_root) => diags.push(warn_dir(
                            &path,
                            "symlink_outside_root",
                            format!(
                                "directory symlink leads outside {} to {}; not followed",
                                shown(&d.path),
                                shown(&c)
                            ),
                        )),
                        Ok(c) if visited.insert(c.clone()) => stack.push((path, rel.join(&name))),
                        _ => {}
                    }
                }
                continue;
            }
            if !(md || toml) || (md && d.recursive && nb.eq_ignore_ascii_case(b"readme.md")) {
                continue;
            }
            match target {
                Some(tt) if !tt.is_file() => diags.push(not_a_file(&path, tt)),
                _ => found.push((rel.join(&name), path)),
            }
        }
    }
    found.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    found
}

/// Reads and parses every persona file, in parallel, keeping the input order. `*.toml` files are
/// Codex agents, everything else markdown.
pub fn parse_all(files: Vec<FoundFile>, opts: &ParseOptions) -> Vec<LoadedFile> {
    files
        .into_par_iter()
        .map(|f| {
            let file_path = shown(&f.path);
            let (persona, sha256, diagnostics) = match read_bounded(&f.path, &file_path) {
                Ok(bytes) => {
                    let parsed = if is_toml(&f.path) {
                        persona::parse_toml(&bytes, &file_path)
                    } else {
                        persona::parse(&bytes, &file_path, opts)
                    };
                    (parsed.persona, sha_hex(&bytes), parsed.diagnostics)
                }
                Err(d) => (None, String::new(), vec![d]),
            };
            LoadedFile {
                dir: f.dir,
                file_path,
                persona,
                sha256,
                diagnostics,
            }
        })
        .collect()
}

/// Reads and parses every command file, in parallel, keeping the input order. A path that cannot
/// name a command is an `invalid_command_name` error and the file is not read.
pub fn parse_commands(files: Vec<FoundFile>) -> Vec<LoadedCommand> {
    files
        .into_par_iter()
        .map(|f| {
            let file_path = shown(&f.path);
            let mut loaded = LoadedCommand {
                dir: f.dir,
                file_path,
                name: None,
                command: None,
                sha256: String::new(),
                diagnostics: Vec::new(),
            };
            let name = match command::name_from_path(&f.rel) {
                Ok(n) => n,
                Err(why) => {
                    loaded.diagnostics.push(Diagnostic {
                        path: loaded.file_path.clone(),
                        line: None,
                        severity: Severity::Error,
                        code: "invalid_command_name",
                        message: format!("{} cannot name a command: {why}", shown(&f.rel)),
                    });
                    return loaded;
                }
            };
            match read_bounded(&f.path, &loaded.file_path) {
                Ok(bytes) => {
                    let parsed = if is_toml(&f.path) {
                        command::parse_toml(&bytes, &loaded.file_path)
                    } else {
                        command::parse_markdown(&bytes, &loaded.file_path)
                    };
                    loaded.sha256 = sha_hex(&bytes);
                    loaded.command = parsed.command;
                    loaded.diagnostics = parsed.diagnostics;
                    loaded.name = Some(name);
                }
                Err(d) => loaded.diagnostics.push(d),
            }
            loaded
        })
        .collect()
}

fn is_toml(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "toml")
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A file's bytes, at most [`MAX_FILE_BYTES`]; `Err` is the diagnostic that says why not.
fn read_bounded(path: &Path, shown: &str) -> Result<Vec<u8>, Diagnostic> {
    let fail = |severity, code: &'static str, message: String| Diagnostic {
        path: shown.to_owned(),
        line: None,
        severity,
        code,
        message,
    };
    let error = |code, message| fail(Severity::Error, code, message);
    // O_NONBLOCK: a FIFO that appears between listing and opening must not block discovery;
    // for a regular file the flag changes nothing. The type is checked on the open descriptor.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| error("unreadable", format!("cannot open: {e}")))?;
    let len = match file.metadata() {
        Ok(m) if !m.is_file() => {
            return Err(fail(
                Severity::Warning,
                "not_a_file",
                format!("{} is {}, not a file; skipped", shown, what(m.file_type())),
            ));
        }
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            return Err(error(
                "too_large",
                format!(
                    "file is {} bytes; definition files are limited to {MAX_FILE_BYTES} bytes",
                    m.len()
                ),
            ));
        }
        Ok(m) => m.len(),
        Err(e) => return Err(error("unreadable", format!("cannot stat: {e}"))),
    };
    // Sized from fstat (+1 to see EOF in the same call): one read for the file, one for EOF.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0) + 1);
    // The bound also holds if the file grows between stat and read.
    (&mut file)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| error("unreadable", format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(error(
            "too_large",
            format!("file grew past the {MAX_FILE_BYTES}-byte limit while being read"),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_bytes_that_are_not_utf8() {
        use std::ffi::OsStr;
        let p = Path::new(OsStr::from_bytes(b"/a/\xffb\xc3.md"));
        assert_eq!(shown(p), "/a/\\xffb\\xc3.md");
        assert_eq!(shown(Path::new("/ü/x.md")), "/ü/x.md");
    }
}
