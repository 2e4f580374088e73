//! Reads directories (docs §3.2, §2.5, §3.6) and parses their files in parallel.

use std::{
    collections::{HashMap, HashSet},
    ffi::OsString,
    fs::{FileType, Metadata},
    hash::BuildHasher,
    io::Read,
    os::unix::{
        ffi::OsStrExt,
        fs::{FileTypeExt, MetadataExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::persona::{
    self, Comments, Diagnostic, MAX_FILE_BYTES, ParseOptions, Persona, Severity,
    command::{self, Command, CommandName, Dialect},
};

use super::{AgentDef, SourceKind, sources::SourceDir};

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
    dirs: Option<Vec<(PathBuf, Stamp)>>,
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

/// A map that successive discovery builds share. Each build takes a number ([`Self::begin`]),
/// marks what it uses, and past `capacity` drops what it did not use ([`Self::sweep`]). The
/// cache of a one-off build ([`Self::none`]) stores nothing.
pub struct BuildCache<K, V> {
    entries: Mutex<HashMap<K, V>>,
    builds: AtomicU64,
    capacity: usize,
    /// False for a one-off build: nothing is stored.
    enabled: bool,
}

impl<K: Eq + std::hash::Hash, V> BuildCache<K, V> {
    /// An empty cache for up to about `capacity` files.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::default(),
            builds: AtomicU64::new(0),
            capacity,
            enabled: true,
        }
    }

    /// A cache that stores nothing, for a build that is not followed by another.
    pub fn none() -> Self {
        Self {
            enabled: false,
            ..Self::new(0)
        }
    }

    /// Starts a build; its number marks the entries it uses.
    fn begin(&self) -> u64 {
        self.builds.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, V>> {
        // Entries are replaced whole, so a panic elsewhere leaves the map coherent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Past capacity (`files` counts what the map holds), drops the entries that build `build`
    /// did not use (`used_by` says which build last used one): files deleted, or read only by
    /// other workspaces' snapshots, which re-read them when next built.
    fn sweep(
        &self,
        build: u64,
        files: impl FnOnce(&HashMap<K, V>) -> usize,
        used_by: impl Fn(&V) -> u64,
    ) {
        if !self.enabled {
            return;
        }
        let mut entries = self.lock();
        if files(&entries) > self.capacity {
            entries.retain(|_, v| used_by(v) == build);
        }
    }
}

/// Listings by directory (and how it is read), so a rebuild lists only the directories that
/// changed: (directory, recursive, toml) → its listing and the last build that used it. Shared
/// by every workspace's builds; `capacity` counts the files listed.
pub type ListCache = BuildCache<(PathBuf, bool, bool, bool), (Arc<Listing>, u64)>;

/// The listings of one build, in the order of its directories.
pub struct Found {
    listings: Vec<Arc<Listing>>,
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

/// How recent a file's change may be for its [`Stamp`] to be trusted: a write inside the same
/// timestamp tick as the one seen could leave the stamp as it was (git's "racily clean" entry).
/// Two seconds covers the coarsest file-system clocks (FAT); an unsettled file is re-read and
/// its hash compared, so this costs a read of the files changed in the last two seconds, never
/// a stale definition.
const SETTLE: Duration = Duration::from_secs(2);

/// What identifies a file's content without reading it: device, inode, size, and the
/// modification and status-change times to the nanosecond. Every write changes `ctime`, which no
/// user can set back, so equal stamps mean the bytes are the ones read before, once the file is
/// settled ([`SETTLE`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(m: &Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether the file last changed at least [`SETTLE`] before `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let limit = i128::try_from(now.saturating_sub(SETTLE).as_nanos()).unwrap_or(i128::MAX);
        self.mtime_ns.max(self.ctime_ns) < limit
    }
}

/// One cached file of a [`ParseCache`].
pub struct Entry<T> {
    stamp: Stamp,
    /// The stamp can be trusted without reading ([`Stamp::settled`] when it was taken).
    settled: bool,
    /// Hex sha256 of the bytes parsed.
    sha256: String,
    value: T,
    /// The last build that used it, for [`BuildCache::sweep`].
    seen: AtomicU64,
}

/// Parsed definition files by path, so a rebuild (a `ReloadAgents`, a watcher event, the TTL)
/// re-reads and re-parses only the files that changed. A file whose [`Stamp`] is the one
/// recorded, and settled, is reused after one `stat`; any other file is read, and parsed again
/// unless its sha256 is the recorded one. Shared by every workspace's builds (user dirs are read
/// by all of them). Holds what the snapshots hold already (the definitions are shared), and is
/// bounded: past `capacity` files, a build drops every entry it did not use. Keyed by the
/// path's bytes: hashing a `Path` walks its components.
pub type ParseCache<T> = BuildCache<OsString, Arc<Entry<T>>>;

impl<T: Clone> ParseCache<T> {
    fn get(&self, path: &Path) -> Option<Arc<Entry<T>>> {
        self.lock().get(path.as_os_str()).cloned()
    }

    /// The value for one file: the cached one when the file is unchanged, else `parse` of its
    /// bytes (or the cached value when the bytes hash the same). `fits` says whether a cached
    /// value may serve this read (an agent's source must match its directory's). `Err` is the
    /// diagnostic that says why the file could not be read; failures are not cached.
    fn load(
        &self,
        build: u64,
        path: &Path,
        shown: &str,
        fits: impl Fn(&T) -> bool,
        parse: impl FnOnce(&[u8], String) -> T,
    ) -> Result<T, Diagnostic> {
        if !self.enabled {
            return with_read_buffer(|buf| {
                read_bounded(path, shown, buf)?;
                let sha256 = sha_hex(buf);
                Ok(parse(buf, sha256))
            });
        }
        let now = SystemTime::now();
        let prior = self.get(path).filter(|e| fits(&e.value));
        if let Some(e) = prior.as_ref().filter(|e| e.settled)
            && std::fs::metadata(path).is_ok_and(|m| Stamp::of(&m) == e.stamp)
        {
            e.seen.store(build, Ordering::Relaxed);
            return Ok(e.value.clone());
        }
        let (stamp, sha256, value) = with_read_buffer(|bytes| {
            let meta = read_bounded(path, shown, bytes)?;
            let sha256 = sha_hex(bytes);
            let value = match prior {
                Some(e) if e.sha256 == sha256 => e.value.clone(),
                _ => parse(bytes, sha256.clone()),
            };
            Ok((Stamp::of(&meta), sha256, value))
        })?;
        let entry = Entry {
            stamp,
            settled: stamp.settled(now),
            sha256,
            value: value.clone(),
            seen: AtomicU64::new(build),
        };
        self.lock()
            .insert(path.as_os_str().to_owned(), Arc::new(entry));
        Ok(value)
    }
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

/// Lowercase hex of the sha256 of `bytes` (what `hex::encode` writes, without its per-char
/// iterator: this runs once per file read).
fn sha_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(2 * digest.len());
    for b in digest {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Runs `f` with this thread's read buffer: files are read into it and parsed from it, so a
/// build allocates no buffer per file. A buffer grown past 64 KiB by a large file is let go.
fn with_read_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with_borrow_mut(|buf| {
        let out = f(buf);
        buf.clear();
        if buf.capacity() > 64 << 10 {
            *buf = Vec::new();
        }
        out
    })
}

/// Reads a file's bytes, at most [`MAX_FILE_BYTES`], into `bytes` (emptied first) and returns
/// its metadata as seen on the open descriptor before reading; `Err` is the diagnostic that
/// says why not, naming the file as `shown` (formatted only on that path).
pub(super) fn read_bounded(
    path: &Path,
    shown: &(impl std::fmt::Display + ?Sized),
    bytes: &mut Vec<u8>,
) -> Result<Metadata, Diagnostic> {
    bytes.clear();
    let fail = |severity, code: &'static str, message: String| Diagnostic {
        path: shown.to_string(),
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
    let meta = file
        .metadata()
        .map_err(|e| error("unreadable", format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(fail(
            Severity::Warning,
            "not_a_file",
            format!(
                "{} is {}, not a file; skipped",
                shown,
                what(meta.file_type())
            ),
        ));
    }
    let len = meta.len();
    if len > MAX_FILE_BYTES {
        return Err(error(
            "too_large",
            format!("file is {len} bytes; definition files are limited to {MAX_FILE_BYTES} bytes"),
        ));
    }
    let read = read_sized(&mut file, usize::try_from(len).unwrap_or(usize::MAX), bytes)
        .map_err(|e| error("unreadable", format!("cannot read: {e}")))?;
    if read as u64 > MAX_FILE_BYTES {
        return Err(error(
            "too_large",
            format!("file grew past the {MAX_FILE_BYTES}-byte limit while being read"),
        ));
    }
    Ok(meta)
}

/// Reads `file`, a regular file that `fstat` said holds `len` bytes, into `bytes` (emptied),
/// at most [`MAX_FILE_BYTES`] + 1 bytes, and returns how many were read. The buffer is sized
/// from `len` plus one byte, so a file that has not changed is read by one call that comes back
/// one byte short: having read the size `fstat` reported, that short read is its end, and no
/// second call is made to see end-of-file (discovery reads thousands of files, and the floor it
/// is measured against makes that second call). Any other short read, or a file that grew, is
/// read on until a read returns nothing or the bound is passed.
fn read_sized(file: &mut impl Read, len: usize, bytes: &mut Vec<u8>) -> std::io::Result<usize> {
    const BOUND: usize = MAX_FILE_BYTES as usize + 1;
    bytes.clear();
    bytes.resize(len.saturating_add(1).min(BOUND), 0);
    let mut filled = 0;
    loop {
        if filled == bytes.len() {
            if filled >= BOUND {
                break;
            }
            // Larger than `fstat` said: it grew since. Read on, within the bound.
            bytes.resize(filled.saturating_mul(2).clamp(4096, BOUND), 0);
        }
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if filled == len && filled < bytes.len() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(filled);
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_reused_only_while_no_directory_it_read_changed() {
        use super::super::SourceKind;
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("tree");
        std::fs::create_dir_all(tree.join("team/area")).unwrap();
        std::fs::write(tree.join("team/area/one.md"), "x").unwrap();
        let dirs = [SourceDir {
            kind: SourceKind::Dir,
            family: String::new(),
            path: tree.clone(),
            recursive: true,
            toml: false,
            skills: false,
        }];
        let names =
            |found: &Found| -> Vec<String> { found.files().iter().map(|f| shown(f.rel)).collect() };
        let cache = ListCache::new(100);
        // Too fresh to be trusted: listed again every time.
        let fresh = list(&dirs, &mut Vec::new(), &cache);
        assert!(fresh.listings[0].dirs.is_none());
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        let first = list(&dirs, &mut Vec::new(), &cache);
        assert!(first.listings[0].dirs.is_some());
        let again = list(&dirs, &mut Vec::new(), &cache);
        assert!(Arc::ptr_eq(&first.listings[0], &again.listings[0]));
        // A file added two levels down changes that directory's stamp.
        std::fs::write(tree.join("team/area/two.md"), "x").unwrap();
        let added = list(&dirs, &mut Vec::new(), &cache);
        assert_eq!(names(&added), ["team/area/one.md", "team/area/two.md"]);
        std::fs::remove_file(tree.join("team/area/one.md")).unwrap();
        assert_eq!(
            names(&list(&dirs, &mut Vec::new(), &cache)),
            ["team/area/two.md"]
        );
        // A symlink's target can change while no directory does: never trusted.
        std::os::unix::fs::symlink(tree.join("team/area"), tree.join("team/link")).unwrap();
        let linked = list(&dirs, &mut Vec::new(), &cache);
        assert!(linked.listings[0].dirs.is_none());
        assert_eq!(names(&linked), ["team/area/two.md"]);
    }

    /// Serves `data` at most `chunk` bytes per call, counting the calls.
    struct Chunked<'a> {
        data: &'a [u8],
        chunk: usize,
        calls: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            let n = buf.len().min(self.chunk).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_file_of_the_size_fstat_said_is_read_by_one_call_and_any_other_whole() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut bytes = b"left over".to_vec();
        let mut read = |data: &[u8], chunk: usize, len: usize| {
            let mut r = Chunked {
                data,
                chunk,
                calls: 0,
            };
            let n = read_sized(&mut r, len, &mut bytes).unwrap();
            assert_eq!(n, bytes.len());
            (bytes.clone(), r.calls)
        };
        // Unchanged since fstat: one call, one byte short of the buffer.
        assert_eq!(
            read(&data[..2000], usize::MAX, 2000),
            (data[..2000].to_vec(), 1)
        );
        assert_eq!(read(&[], usize::MAX, 0), (Vec::new(), 1));
        // Short reads before the end are read on; the end is the size fstat said.
        assert_eq!(read(&data[..100], 7, 100), (data[..100].to_vec(), 15));
        // Grown since fstat: read on to the end.
        assert_eq!(read(&data, usize::MAX, 10).0, data);
        // Shrunk since fstat: read until a call returns nothing.
        assert_eq!(read(&data[..50], usize::MAX, 100), (data[..50].to_vec(), 2));

        // A file past the bound is read only one byte past it, for the caller to refuse.
        let big = vec![b'x'; MAX_FILE_BYTES as usize + 10];
        let mut r = Chunked {
            data: &big,
            chunk: usize::MAX,
            calls: 0,
        };
        let n = read_sized(&mut r, 10, &mut bytes).unwrap();
        assert_eq!(n as u64, MAX_FILE_BYTES + 1);
    }

    #[test]
    fn sha_hex_is_lowercase_hex_of_sha256() {
        for bytes in [&b""[..], b"abc", &[0xff; 300]] {
            assert_eq!(sha_hex(bytes), hex::encode(Sha256::digest(bytes)));
        }
    }

    #[test]
    fn shown_escapes_bytes_that_are_not_utf8() {
        use std::ffi::OsStr;
        let p = Path::new(OsStr::from_bytes(b"/a/\xffb\xc3.md"));
        assert_eq!(shown(p), "/a/\\xffb\\xc3.md");
        assert_eq!(shown(Path::new("/ü/x.md")), "/ü/x.md");
    }

    #[test]
    fn a_stamp_is_trusted_only_once_the_file_has_settled() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let stamp = |mtime: i128, ctime: i128| Stamp {
            dev: 1,
            ino: 2,
            len: 3,
            mtime_ns: mtime * 1_000_000_000,
            ctime_ns: ctime * 1_000_000_000,
        };
        assert!(stamp(100, 100).settled(at(103)));
        assert!(!stamp(100, 100).settled(at(101)));
        // A modification time set into the future does not make a fresh file look old.
        assert!(!stamp(200, 100).settled(at(103)));
        assert!(!stamp(100, 102).settled(at(103)));
    }
}
