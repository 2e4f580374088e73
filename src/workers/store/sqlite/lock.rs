//! The store file's exclusive locks: a lock file beside it that names its holder, and an
//! `flock` on the database file itself (which catches a hard link). Two services on one file
//! would close each other's live workers as orphans, so the second one refuses to start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::workers::store::StoreError;

/// The one path of the database file, whichever path reached it: symlinks (of the file or of
/// any directory above it), `.` and `..` resolved, so the lock file beside it is the same for
/// every way of naming the file. A file that does not exist yet is named in its canonical
/// directory (created by the caller).
pub(super) fn canonical(path: &Path) -> Result<PathBuf, StoreError> {
    let io = |path: &Path, source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    match std::fs::canonicalize(path) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let dir = std::fs::canonicalize(dir).map_err(|e| io(dir, e))?;
            Ok(match path.file_name() {
                Some(name) => dir.join(name),
                None => dir,
            })
        }
        Err(e) => Err(io(path, e)),
    }
}

/// Takes an exclusive `flock` on `<db>.lock` (a file beside the database, so SQLite's own POSIX
/// locks are untouched) and writes who holds it; a held lock is [`StoreError::Locked`] naming
/// the holder.
pub(super) fn lock_exclusively(db: &Path) -> Result<Flock<std::fs::File>, StoreError> {
    use std::io::{Read, Seek, Write};
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StoreError::Locked {
                path: db.to_owned(),
                holder: if holder.is_empty() {
                    "holder unknown".to_owned()
                } else {
                    holder.to_owned()
                },
            });
        }
        Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
    };
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown host".to_owned());
    let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let note = format!("pid {} on {host}, since {since}", std::process::id());
    lock.set_len(0).map_err(io)?;
    lock.rewind().map_err(io)?;
    lock.write_all(note.as_bytes()).map_err(io)?;
    Ok(lock)
}

/// Tries of [`lock_the_file_itself`], 10 ms apart.
const FILE_LOCK_TRIES: u32 = 100;

/// Takes an exclusive `flock` on the database file (creating it empty, which SQLite reads as a
/// new database): the lock file names the holder for every path that resolves to the same
/// canonical path, and this catches the paths that do not — a hard link under another name is
/// the same inode. `flock` locks are apart from the POSIX locks SQLite takes on the file.
pub(super) fn lock_the_file_itself(db: &Path) -> Result<Flock<std::fs::File>, StoreError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(db)
        .map_err(|source| StoreError::Io {
            path: db.to_owned(),
            source,
        })?;
    // A store of this process closed just now lets go of the file when its writer thread has
    // drained (the lock file above is already free then): wait that long, not more.
    let mut file = file;
    let mut tries = 1;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, Errno::EWOULDBLOCK)) if tries < FILE_LOCK_TRIES => {
                file = f;
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(StoreError::Locked {
                    path: db.to_owned(),
                    holder: "the file itself is locked: another path to it, such as a hard link, \
                             is in use"
                        .to_owned(),
                });
            }
            Err((_, errno)) => {
                return Err(StoreError::Io {
                    path: db.to_owned(),
                    source: std::io::Error::from(errno),
                });
            }
        }
    }
}
