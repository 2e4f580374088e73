//! Reads directories (SPEC §3.2) and parses their files in parallel.

use std::{
    collections::HashSet,
    io::Read,
    os::unix::{ffi::OsStrExt, fs::OpenOptionsExt},
    path::{Path, PathBuf},
};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::persona::{self, Diagnostic, MAX_FILE_BYTES, ParseOptions, Persona, Severity};

use super::sources::SourceDir;

/// One file found in a directory, in read order.
#[derive(Debug)]
pub struct FoundFile {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// The file.
    pub path: PathBuf,
}

/// A parsed file: the persona (if valid), its content hash and its diagnostics.
pub struct LoadedFile {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// The file.
    pub path: PathBuf,
    /// The persona, when the file was valid.
    pub persona: Option<Persona>,
    /// Hex sha256 of the bytes.
    pub sha256: String,
    /// Problems found.
    pub diagnostics: Vec<Diagnostic>,
}

fn warn_dir(path: &Path, code: &'static str, message: String) -> Diagnostic {
    Diagnostic {
        path: path.display().to_string(),
        line: None,
        severity: Severity::Warning,
        code,
        message,
    }
}

/// Lists the `.md` files of every directory in precedence order, then byte order inside each.
pub fn list(dirs: &[SourceDir], diags: &mut Vec<Diagnostic>) -> Vec<FoundFile> {
    let mut out = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let mut files = Vec::new();
        if d.recursive {
            list_recursive(&d.path, &mut files, diags);
        } else {
            list_flat(&d.path, &mut files, diags);
        }
        out.extend(files.into_iter().map(|path| FoundFile { dir: i, path }));
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

fn list_flat(dir: &Path, out: &mut Vec<PathBuf>, diags: &mut Vec<Diagnostic>) {
    for e in read_dir_sorted(dir, diags) {
        if !e.file_name().as_bytes().ends_with(b".md") {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_file() || t.is_symlink() => out.push(e.path()),
            _ => {}
        }
    }
}

/// `**/*.md` minus README.md (any case) and hidden entries (as a shell glob would), in byte
/// order of the relative path; directory symlinks are followed only when they stay inside the
/// root, and never twice (no loops).
fn list_recursive(root: &Path, out: &mut Vec<PathBuf>, diags: &mut Vec<Diagnostic>) {
    let Ok(canon_root) = root.canonicalize() else {
        return;
    };
    let mut visited = HashSet::new();
    visited.insert(canon_root.clone());
    let mut found: Vec<(Vec<u8>, PathBuf)> = Vec::new();
    let mut stack = vec![(root.to_path_buf(), PathBuf::new())];
    while let Some((dir, rel)) = stack.pop() {
        for e in read_dir_sorted(&dir, diags) {
            let name = e.file_name();
            let nb = name.as_bytes();
            if nb.starts_with(b".") {
                continue;
            }
            let Ok(t) = e.file_type() else { continue };
            let rel_path = rel.join(&name);
            let is_dir = if t.is_symlink() {
                std::fs::metadata(e.path())
                    .map(|m| m.is_dir())
                    .unwrap_or(false)
            } else {
                t.is_dir()
            };
            if is_dir {
                if t.is_symlink() {
                    match e.path().canonicalize() {
                        Ok(c) if c.starts_with(&canon_root) && visited.insert(c.clone()) => {}
                        Ok(c) if !c.starts_with(&canon_root) => {
                            diags.push(warn_dir(
                                &e.path(),
                                "symlink_outside_root",
                                format!(
                                    "directory symlink leads outside {} to {}; not followed",
                                    root.display(),
                                    c.display()
                                ),
                            ));
                            continue;
                        }
                        _ => continue,
                    }
                } else if let Ok(c) = e.path().canonicalize()
                    && !visited.insert(c)
                {
                    continue;
                }
                stack.push((e.path(), rel_path));
                continue;
            }
            if !nb.ends_with(b".md") || nb.eq_ignore_ascii_case(b"readme.md") {
                continue;
            }
            found.push((rel_path.as_os_str().as_bytes().to_vec(), e.path()));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    out.extend(found.into_iter().map(|(_, p)| p));
}

/// Reads and parses every file, in parallel, keeping the input order.
pub fn parse_all(files: Vec<FoundFile>, opts: &ParseOptions) -> Vec<LoadedFile> {
    files.into_par_iter().map(|f| load_one(f, opts)).collect()
}

fn load_one(f: FoundFile, opts: &ParseOptions) -> LoadedFile {
    let shown = f.path.display().to_string();
    let fail = |code: &'static str, message: String| LoadedFile {
        dir: f.dir,
        path: f.path.clone(),
        persona: None,
        sha256: String::new(),
        diagnostics: vec![Diagnostic {
            path: shown.clone(),
            line: None,
            severity: Severity::Error,
            code,
            message,
        }],
    };
    // O_NONBLOCK: opening a FIFO named `*.md` must not block discovery; for a regular file the
    // flag changes nothing. The type is checked on the open descriptor (no second stat).
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&f.path)
    {
        Ok(file) => file,
        Err(e) => return fail("unreadable", format!("cannot open: {e}")),
    };
    let len = match file.metadata() {
        Ok(m) if !m.is_file() => {
            return fail("unreadable", "not a regular file".to_owned());
        }
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            return fail(
                "too_large",
                format!(
                    "file is {} bytes; persona files are limited to {MAX_FILE_BYTES} bytes",
                    m.len()
                ),
            );
        }
        Ok(m) => m.len(),
        Err(e) => return fail("unreadable", format!("cannot stat: {e}")),
    };
    // Sized from fstat (+1 to see EOF in the same call): one read for the file, one for EOF.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0) + 1);
    // The bound also holds if the file grows between stat and read.
    if let Err(e) = (&mut file).take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        return fail("unreadable", format!("cannot read: {e}"));
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return fail(
            "too_large",
            format!("file grew past the {MAX_FILE_BYTES}-byte limit while being read"),
        );
    }
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let parsed = persona::parse(&bytes, &shown, opts);
    LoadedFile {
        dir: f.dir,
        path: f.path,
        persona: parsed.persona,
        sha256,
        diagnostics: parsed.diagnostics,
    }
}
