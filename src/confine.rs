//! Files beneath one directory, reached without following a symlink anywhere on the way
//! (docs/model.md §11.11). An agent's memory directory lives in a project the caller controls:
//! any component of a path into it, the directory itself included, may have been replaced by a
//! symlink, a FIFO or a device. So every path is walked one component at a time from an open
//! directory with `openat(O_NOFOLLOW)`, a missing directory is made with `mkdirat` inside the
//! directory just opened (nothing is created before its parent is checked), and only regular
//! files are read or written, opened non-blocking so a FIFO can never stall the caller. Reads
//! are bounded. These calls block: run them off the async runtime (`spawn_blocking`).
//!
//! The kernel's own primitives through `nix` (already a dependency) were chosen over a
//! capability crate such as `cap-std`: its sandboxed lookup follows symlinks that stay beneath
//! the root, and here none may be followed at all.

use std::{
    ffi::OsStr,
    fs::File,
    io::{Read, Write},
    os::fd::{AsFd, OwnedFd},
    path::{Component, Path},
};

use std::os::unix::ffi::OsStrExt;

use nix::{
    errno::Errno,
    fcntl::{AtFlags, OFlag, openat},
    sys::stat::{Mode, SFlag, fstat, mkdirat},
};

/// Why a confined operation failed, worded for the text a model or an operator reads.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfineError {
    /// A component on the way is a symlink.
    #[error("{0} is a symlink")]
    Symlink(String),
    /// A component on the way, or the file itself, is not what was expected.
    #[error("{0} is not a {1}")]
    NotA(String, &'static str),
    /// The path is not a relative path of plain components.
    #[error("{0:?} is not a relative path of plain components")]
    NotPlain(String),
    /// The file is over the bound of a read.
    #[error("{0} is over {1} bytes")]
    TooLarge(String, usize),
    /// Anything else the kernel said.
    #[error("{0}: {1}")]
    Os(String, Errno),
}

/// An open directory; every path below it is resolved from it.
#[derive(Debug)]
pub struct Confined {
    fd: OwnedFd,
}

/// Flags of every directory step: no symlink followed, never a controlling terminal.
fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// The plain components of a relative path (`.` skipped); anything else is refused.
fn plain(rel: &Path) -> Result<Vec<&OsStr>, ConfineError> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(ConfineError::NotPlain(rel.display().to_string())),
        }
    }
    if out.is_empty() {
        return Err(ConfineError::NotPlain(rel.display().to_string()));
    }
    Ok(out)
}

/// A second descriptor of `fd`.
fn dup(fd: &OwnedFd) -> Result<OwnedFd, ConfineError> {
    fd.try_clone()
        .map_err(|e| ConfineError::Os(".".to_owned(), io_errno(&e)))
}

/// The kind of entry `name` of `parent` without following it, `None` when it does not exist.
fn kind_of(parent: &OwnedFd, name: &OsStr) -> Option<SFlag> {
    nix::sys::stat::fstatat(parent.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT)
}

/// Refuses entry `name` of `parent` unless it is missing or of kind `want`.
fn check_kind(
    parent: &OwnedFd,
    name: &OsStr,
    shown: &str,
    want: SFlag,
) -> Result<(), ConfineError> {
    match kind_of(parent, name) {
        None => Ok(()),
        Some(k) if k == want => Ok(()),
        Some(k) if k == SFlag::S_IFLNK => Err(ConfineError::Symlink(shown.to_owned())),
        Some(_) => Err(ConfineError::NotA(shown.to_owned(), kind_name(want))),
    }
}

fn kind_name(kind: SFlag) -> &'static str {
    if kind == SFlag::S_IFDIR {
        "directory"
    } else {
        "regular file"
    }
}

/// Opens directory `name` in `parent` without following a symlink, making it first when
/// `create` and it is missing. `shown` names it in errors.
fn step(
    parent: &OwnedFd,
    name: &OsStr,
    create: bool,
    shown: &str,
) -> Result<OwnedFd, ConfineError> {
    check_kind(parent, name, shown, SFlag::S_IFDIR)?;
    let open = || openat(parent.as_fd(), name, dir_flags(), Mode::empty());
    let opened = match open() {
        Err(Errno::ENOENT) if create => {
            match mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => open(),
                Err(e) => return Err(ConfineError::Os(shown.to_owned(), e)),
            }
        }
        other => other,
    };
    opened.map_err(|e| why(parent, name, shown, e, SFlag::S_IFDIR))
}

/// The error of a failed `openat`: a symlink (`O_NOFOLLOW` met one: it was swapped in since
/// the check) or a wrong kind named as such, anything else as the kernel said it.
fn why(parent: &OwnedFd, name: &OsStr, shown: &str, e: Errno, want: SFlag) -> ConfineError {
    match (e, kind_of(parent, name)) {
        (_, Some(k)) if k == SFlag::S_IFLNK => ConfineError::Symlink(shown.to_owned()),
        (Errno::ELOOP, _) => ConfineError::Symlink(shown.to_owned()),
        (Errno::ENOTDIR | Errno::ENXIO, _) => ConfineError::NotA(shown.to_owned(), kind_name(want)),
        (e, _) => ConfineError::Os(shown.to_owned(), e),
    }
}

/// `path` as shown in an error: the components walked so far, joined with `/`.
fn shown_to(parts: &[&OsStr], upto: usize) -> String {
    parts[..=upto]
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

impl Confined {
    /// Opens `base/rel`, where `base` is trusted as given (the service's home, a workspace)
    /// and each component of `rel` is walked without following a symlink; missing directories
    /// are made when `create`.
    pub fn open(base: &Path, rel: &Path, create: bool) -> Result<Self, ConfineError> {
        let shown = base.display().to_string();
        let fd = nix::fcntl::open(
            base,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ENOTDIR => ConfineError::NotA(shown.clone(), "directory"),
            e => ConfineError::Os(shown.clone(), e),
        })?;
        Self { fd }.dir(rel, create)
    }

    /// The directory `rel` below this one.
    pub fn dir(&self, rel: &Path, create: bool) -> Result<Self, ConfineError> {
        let parts = plain(rel)?;
        let mut fd = dup(&self.fd)?;
        for (i, part) in parts.iter().enumerate() {
            fd = step(&fd, part, create, &shown_to(&parts, i))?;
        }
        Ok(Self { fd })
    }

    /// The parent directory of file `rel` (made when `create`) and the file's own name.
    fn parent_of<'p>(
        &self,
        rel: &'p Path,
        create: bool,
    ) -> Result<(Self, &'p OsStr, String), ConfineError> {
        let parts = plain(rel)?;
        let (name, dirs) = parts.split_last().expect("plain() is never empty");
        let mut fd = dup(&self.fd)?;
        for (i, part) in dirs.iter().enumerate() {
            fd = step(&fd, part, create, &shown_to(&parts, i))?;
        }
        Ok((Self { fd }, name, shown_to(&parts, parts.len() - 1)))
    }

    /// Opens regular file `rel` with `flags` (plus no-follow, non-blocking, close-on-exec),
    /// refusing anything that is not a regular file of one link (a device or FIFO is never
    /// opened; a hard link could be a file outside) before a byte moves.
    fn file(&self, rel: &Path, flags: OFlag, create: bool) -> Result<(File, String), ConfineError> {
        let (dir, name, shown) = self.parent_of(rel, create)?;
        check_kind(&dir.fd, name, &shown, SFlag::S_IFREG)?;
        let flags =
            flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
        let fd = openat(dir.fd.as_fd(), name, flags, Mode::from_bits_truncate(0o644))
            .map_err(|e| why(&dir.fd, name, &shown, e, SFlag::S_IFREG))?;
        let st = fstat(fd.as_fd()).map_err(|e| ConfineError::Os(shown.clone(), e))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG
            || st.st_nlink > 1
        {
            return Err(ConfineError::NotA(shown, "regular file of one link"));
        }
        // Reads and writes of a regular file never block; the flag was only for the open.
        let file = File::from(fd);
        Ok((file, shown))
    }

    /// The bytes of regular file `rel`, at most `max` of them (a larger file is refused).
    pub fn read(&self, rel: &Path, max: usize) -> Result<Vec<u8>, ConfineError> {
        let (file, shown) = self.file(rel, OFlag::O_RDONLY, false)?;
        let mut bytes = Vec::new();
        file.take(max as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ConfineError::Os(shown.clone(), io_errno(&e)))?;
        if bytes.len() > max {
            return Err(ConfineError::TooLarge(shown, max));
        }
        Ok(bytes)
    }

    /// The first `max` bytes of regular file `rel`, or `None` when it does not exist.
    pub fn read_head(&self, rel: &Path, max: usize) -> Result<Option<Vec<u8>>, ConfineError> {
        let (file, shown) = match self.file(rel, OFlag::O_RDONLY, false) {
            Ok(f) => f,
            Err(ConfineError::Os(_, Errno::ENOENT)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(max as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| ConfineError::Os(shown, io_errno(&e)))?;
        Ok(Some(bytes))
    }

    /// Writes (or appends) `content` to regular file `rel`, making it and its directories.
    pub fn write(&self, rel: &Path, content: &[u8], append: bool) -> Result<String, ConfineError> {
        let mode = if append {
            OFlag::O_APPEND
        } else {
            OFlag::empty()
        };
        let (mut file, shown) = self.file(rel, OFlag::O_WRONLY | OFlag::O_CREAT | mode, true)?;
        if !append {
            file.set_len(0)
                .map_err(|e| ConfineError::Os(shown.clone(), io_errno(&e)))?;
        }
        file.write_all(content)
            .map_err(|e| ConfineError::Os(shown.clone(), io_errno(&e)))?;
        Ok(shown)
    }

    /// Every regular file below this directory as `(relative path, size)`, in path order, at
    /// most `max` of them plus the count of the rest. Symlinks, hard-linked files and other
    /// entries are skipped;
    /// subdirectories are walked without following links.
    pub fn list(&self, max: usize) -> (Vec<(String, u64)>, usize) {
        let mut files = Vec::new();
        let mut pending: Vec<(Option<OwnedFd>, String)> =
            vec![(self.fd.try_clone().ok(), String::new())];
        let mut seen = 0usize;
        while let Some((fd, prefix)) = pending.pop() {
            let Some(fd) = fd else { continue };
            let Ok(copy) = fd.try_clone() else { continue };
            let Ok(dir) = nix::dir::Dir::from_fd(copy) else {
                continue;
            };
            for entry in dir.into_iter().flatten() {
                // A directory planted with millions of entries is not walked to its end.
                if seen >= MAX_WALK {
                    break;
                }
                let name = OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                let path = if prefix.is_empty() {
                    name.to_string_lossy().into_owned()
                } else {
                    format!("{prefix}/{}", name.to_string_lossy())
                };
                let Ok(st) =
                    nix::sys::stat::fstatat(fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
                else {
                    continue;
                };
                let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
                seen += 1;
                if kind == SFlag::S_IFDIR {
                    let sub = openat(fd.as_fd(), name, dir_flags(), Mode::empty()).ok();
                    pending.push((sub, path));
                } else if kind == SFlag::S_IFREG && st.st_nlink == 1 {
                    files.push((path, u64::try_from(st.st_size).unwrap_or(0)));
                }
            }
        }
        files.sort();
        let more = files.len().saturating_sub(max);
        files.truncate(max);
        (files, more)
    }
}

/// Entries [`Confined::list`] looks at before it stops.
const MAX_WALK: usize = 100_000;

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_followed_made_or_read_outside() {
        let root = tempfile::tempdir().unwrap();
        let (base, outside) = (root.path().join("base"), root.path().join("outside"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let dir = Confined::open(&base, Path::new("a/b"), true).unwrap();
        assert_eq!(
            dir.write(Path::new("n/x.md"), b"hi", false).unwrap(),
            "n/x.md"
        );
        assert_eq!(dir.read(Path::new("n/x.md"), 2).unwrap(), b"hi");
        assert_eq!(
            dir.read(Path::new("n/x.md"), 1).unwrap_err(),
            ConfineError::TooLarge("n/x.md".into(), 1)
        );
        // A planted symlink on the way: refused, nothing made behind it.
        std::os::unix::fs::symlink(&outside, base.join("a/b/up")).unwrap();
        assert_eq!(
            dir.write(Path::new("up/new/x.md"), b"x", false)
                .unwrap_err(),
            ConfineError::Symlink("up".into())
        );
        assert!(!outside.join("new").exists());
        std::os::unix::fs::symlink(&outside, base.join("link")).unwrap();
        assert_eq!(
            Confined::open(&base, Path::new("link/b"), true).unwrap_err(),
            ConfineError::Symlink("link".into())
        );
        // The file itself a symlink, a device, a FIFO, a second hard link.
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), base.join("a/b/s.md")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", base.join("a/b/z.md")).unwrap();
        assert_eq!(
            dir.read_head(Path::new("s.md"), 10).unwrap_err(),
            ConfineError::Symlink("s.md".into())
        );
        assert_eq!(
            dir.read(Path::new("z.md"), 10).unwrap_err(),
            ConfineError::Symlink("z.md".into())
        );
        nix::unistd::mkfifo(&base.join("a/b/f.md"), Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            dir.read_head(Path::new("f.md"), 10).unwrap_err(),
            ConfineError::NotA("f.md".into(), "regular file")
        );
        assert!(
            dir.write(Path::new("f.md"), b"x", false).is_err(),
            "a FIFO is never written"
        );
        std::fs::hard_link(outside.join("secret"), base.join("a/b/h.md")).unwrap();
        assert_eq!(
            dir.read(Path::new("h.md"), 10).unwrap_err(),
            ConfineError::NotA("h.md".into(), "regular file of one link")
        );
        assert_eq!(dir.read_head(Path::new("missing.md"), 10).unwrap(), None);
        for bad in ["../x", "/etc/passwd", "", "."] {
            assert!(matches!(
                dir.read(Path::new(bad), 10),
                Err(ConfineError::NotPlain(_))
            ));
        }
        let (files, more) = dir.list(10);
        assert_eq!((files, more), (vec![("n/x.md".to_owned(), 2)], 0));
    }
}
