//! Listing directories (docs §3.2): which files a directory holds, in byte order of their
//! relative paths, top level or recursive, with the `not_a_file` and symlink diagnostics, and
//! the listing's directory stamps so a rebuild lists only what changed.

use std::{
    collections::HashSet,
    fs::FileType,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::SystemTime,
};

use rayon::prelude::*;

use crate::persona::{Diagnostic, Severity};

use super::super::sources::SourceDir;
use super::cache::{BuildCache, Stamp};
use super::read::what;
use super::shown;

/// One file found in a directory, in read order.
#[derive(Debug, Clone, Copy)]
pub struct FoundFile<'a> {
    /// Index of the directory in the planned list.
    pub dir: usize,
    /// The file.
    pub path: &'a Path,
    /// The path relative to its directory (a command's name comes from it).
    pub rel: &'a Path,
}

/// What [`walk`] found in one directory, and what it takes to trust that again without reading
/// the directory: the stamp of every directory it read.
#[derive(Debug)]
pub struct Listing {
    /// `(relative path, path)` in read order.
    files: Vec<(PathBuf, PathBuf)>,
    /// Problems found while listing.
    diags: Vec<Diagnostic>,
    /// Every directory read with its stamp, taken before reading it; `None` when the listing
    /// cannot be trusted again (a symlink was met, whose target can change while no directory
    /// does; a directory that changed too recently or could not be stat'ed).
    pub(super) dirs: Option<Vec<(PathBuf, Stamp)>>,
}

impl Listing {
    /// Whether every directory read still has its stamp: no entry was added, removed or renamed
    /// in any of them, so a walk would find the same files.
    fn unchanged(&self) -> bool {
        self.dirs.as_ref().is_some_and(|dirs| {
            dirs.iter().all(|(p, stamp)| {
                std::fs::metadata(p).is_ok_and(|m| m.is_dir() && Stamp::of(&m) == *stamp)
            })
        })
    }
}

/// The listings of one build, in the order of its directories.
pub struct Found {
    pub(super) listings: Vec<Arc<Listing>>,
}

impl Found {
    /// Every file, in precedence order of the directories, then read order inside each.
    pub fn files(&self) -> Vec<FoundFile<'_>> {
        let mut out = Vec::with_capacity(self.listings.iter().map(|l| l.files.len()).sum());
        for (dir, l) in self.listings.iter().enumerate() {
            out.extend(
                l.files
                    .iter()
                    .map(|(rel, path)| FoundFile { dir, path, rel }),
            );
        }
        out
    }
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

/// Lists the files of every directory (in parallel) in precedence order, then byte order of
/// the relative path inside each. A directory whose listing in `cache` is
/// [`Listing::unchanged`] is not read again.
pub fn list(dirs: &[SourceDir], diags: &mut Vec<Diagnostic>, cache: &ListCache) -> Found {
    let build = cache.begin();
    // Directories are listed in parallel (a deep one takes many `getdents`), kept in order.
    let listings: Vec<Arc<Listing>> = dirs
        .par_iter()
        .map(|d| {
            let key = (d.path.clone(), d.recursive, d.toml, d.skills);
            let prior = if cache.enabled {
                cache.lock().get(&key).map(|(l, _)| l.clone())
            } else {
                None
            };
            let listing = match prior.filter(|l| l.unchanged()) {
                Some(l) => l,
                None => Arc::new(walk(d)),
            };
            if cache.enabled {
                cache.lock().insert(key, (listing.clone(), build));
            }
            listing
        })
        .collect();
    for listing in &listings {
        diags.extend(listing.diags.iter().cloned());
    }
    cache.sweep(
        build,
        |entries| entries.values().map(|(l, _)| l.files.len()).sum(),
        |(_, seen)| *seen,
    );
    Found { listings }
}

/// The entries of a directory with their names, in byte order of the name (each name is taken
/// once: `DirEntry::file_name` allocates).
fn read_dir_sorted(
    dir: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(std::ffi::OsString, std::fs::DirEntry)> {
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
    let mut entries: Vec<_> = rd
        .filter_map(Result::ok)
        .map(|e| (e.file_name(), e))
        .collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries
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
fn walk(d: &SourceDir) -> Listing {
    let mut diags = Vec::new();
    let diags = &mut diags;
    let now = SystemTime::now();
    // Directories read with their stamps; `None` once the listing cannot be trusted again.
    let mut stamps: Option<Vec<(PathBuf, Stamp)>> = Some(Vec::new());
    let deep = d.recursive || d.toml;
    let mut visited = HashSet::new();
    let canon_root = if deep {
        let Ok(c) = d.path.canonicalize() else {
            return Listing {
                files: Vec::new(),
                diags: Vec::new(),
                dirs: None,
            };
        };
        visited.insert(c.clone());
        Some(c)
    } else {
        None
    };
    let mut found: Vec<(PathBuf, PathBuf)> = Vec::new();
    // (directory, its path relative to the root, its canonical form when reading deep).
    let mut stack = vec![(d.path.clone(), PathBuf::new(), canon_root.clone())];
    while let Some((dir, rel, canon_dir)) = stack.pop() {
        let top = rel.as_os_str().is_empty();
        if let Some(list) = &mut stamps {
            // Taken before reading: a change while reading leaves the stamp behind.
            match std::fs::metadata(&dir).map(|m| Stamp::of(&m)) {
                Ok(stamp) if stamp.settled(now) => list.push((dir.clone(), stamp)),
                _ => stamps = None,
            }
        }
        for (name, e) in read_dir_sorted(&dir, diags) {
            let nb = name.as_bytes();
            // `.gemini/commands/` holds `**/*.toml` only: Gemini CLI ignores a `.md` there (often a
            // file other commands include with `@{…}`), so it is not a command (docs §3.6).
            // A skills dir holds `<name>/SKILL.md`; the other files of a skill are its own.
            let md = if d.skills {
                !top && nb == b"SKILL.md" && rel.components().count() == 1
            } else {
                nb.ends_with(b".md") && (top || d.recursive) && !(d.toml && d.family == ".gemini")
            };
            let toml = d.toml && nb.ends_with(b".toml");
            // A flat directory reads every `*.md` at its top level, hidden or not.
            if nb.starts_with(b".") && (d.recursive || !(top && md)) {
                continue;
            }
            let Ok(t) = e.file_type() else {
                stamps = None;
                continue;
            };
            if t.is_symlink() {
                stamps = None;
            }
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
                if let (Some(canon_root), Some(canon_dir), true) =
                    (&canon_root, &canon_dir, top || !d.skills)
                {
                    // A real directory inside a canonical one is canonical once joined; only a
                    // symlink needs resolving.
                    let canon = if t.is_symlink() {
                        path.canonicalize()
                    } else {
                        Ok(canon_dir.join(&name))
                    };
                    match canon {
                        Ok(c) if !c.starts_with(canon_root) => diags.push(warn_dir(
                            &path,
                            "symlink_outside_root",
                            format!(
                                "directory symlink leads outside {} to {}; not followed",
                                shown(&d.path),
                                shown(&c)
                            ),
                        )),
                        Ok(c) if visited.insert(c.clone()) => {
                            stack.push((path, rel.join(&name), Some(c)));
                        }
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
                // At the top the relative path is the name itself: no second copy of it.
                _ if top => found.push((PathBuf::from(name), path)),
                _ => found.push((rel.join(&name), path)),
            }
        }
    }
    found.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    Listing {
        files: found,
        diags: std::mem::take(diags),
        dirs: stamps,
    }
}

/// Listings by directory (and how it is read), so a rebuild lists only the directories that
/// changed: (directory, recursive, toml) → its listing and the last build that used it. Shared
/// by every workspace's builds; `capacity` counts the files listed.
pub type ListCache = BuildCache<(PathBuf, bool, bool, bool), (Arc<Listing>, u64)>;
