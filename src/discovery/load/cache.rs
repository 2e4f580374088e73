//! The caches successive discovery builds share (docs §3.5): [`BuildCache`], the map each
//! build marks and sweeps; [`ListCache`], directory listings by directory; [`ParseCache`],
//! parsed files by path, trusted again only while the file's [`Stamp`] (device, inode, size,
//! mtime, ctime) is unchanged and settled.

use std::{
    collections::HashMap,
    ffi::OsString,
    fs::Metadata,
    os::unix::fs::MetadataExt,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use sha2::{Digest, Sha256};

use crate::persona::Diagnostic;

use super::read::{read_bounded, with_read_buffer};

/// A map that successive discovery builds share. Each build takes a number ([`Self::begin`]),
/// marks what it uses, and past `capacity` drops what it did not use ([`Self::sweep`]). The
/// cache of a one-off build ([`Self::none`]) stores nothing.
pub struct BuildCache<K, V> {
    entries: Mutex<HashMap<K, V>>,
    builds: AtomicU64,
    capacity: usize,
    /// False for a one-off build: nothing is stored.
    pub(super) enabled: bool,
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
    pub(super) fn begin(&self) -> u64 {
        self.builds.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, V>> {
        // Entries are replaced whole, so a panic elsewhere leaves the map coherent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Past capacity (`files` counts what the map holds), drops the entries that build `build`
    /// did not use (`used_by` says which build last used one): files deleted, or read only by
    /// other workspaces' snapshots, which re-read them when next built.
    pub(super) fn sweep(
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

/// How recent a file's change may be for its [`Stamp`] to be trusted: a write inside the same
/// timestamp tick as the one seen could leave the stamp as it was (git's "racily clean" entry).
/// Two seconds covers the coarsest file-system clocks (FAT); an unsettled file is re-read and
/// its hash compared, so this costs a read of the files changed in the last two seconds, never
/// a stale definition.
pub(super) const SETTLE: Duration = Duration::from_secs(2);

/// What identifies a file's content without reading it: device, inode, size, and the
/// modification and status-change times to the nanosecond. Every write changes `ctime`, which no
/// user can set back, so equal stamps mean the bytes are the ones read before, once the file is
/// settled ([`SETTLE`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Stamp {
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) len: u64,
    pub(super) mtime_ns: i128,
    pub(super) ctime_ns: i128,
}

impl Stamp {
    pub(super) fn of(m: &Metadata) -> Self {
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
    pub(super) fn settled(&self, now: SystemTime) -> bool {
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
    pub(super) seen: AtomicU64,
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
    pub(super) fn get(&self, path: &Path) -> Option<Arc<Entry<T>>> {
        self.lock().get(path.as_os_str()).cloned()
    }

    /// The value for one file: the cached one when the file is unchanged, else `parse` of its
    /// bytes (or the cached value when the bytes hash the same). `fits` says whether a cached
    /// value may serve this read (an agent's source must match its directory's). `Err` is the
    /// diagnostic that says why the file could not be read; failures are not cached.
    pub(super) fn load(
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

/// Lowercase hex of the sha256 of `bytes` (what `hex::encode` writes, without its per-char
/// iterator: this runs once per file read).
pub(super) fn sha_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(2 * digest.len());
    for b in digest {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}
