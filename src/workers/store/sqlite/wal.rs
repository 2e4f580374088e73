//! The WAL's bound and its measure: how large the WAL may grow ([`WAL_LIMIT`]) and the sizes
//! at which the checkpointer and the writer act on it, the commit counts and growth that nudge
//! the checkpointer, and the frame count SQLite's WAL hook reports after each commit. A leaf:
//! the writer and the checkpointer both read it.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Commits between two checkpoints. A commit of a worker transition writes about 5–10 WAL
/// frames, so this keeps the WAL near SQLite's own default of 1,000 pages.
pub(super) const CHECKPOINT_EVERY: u32 = 128;

/// WAL growth, in bytes, that nudges the checkpointer whatever the commit count: commits of
/// large events (several 130 KB events grouped into each) outgrow the WAL bound long before
/// [`CHECKPOINT_EVERY`] commits.
pub(super) const CHECKPOINT_BYTES: u64 = 4 << 20;

thread_local! {
    /// Frames in the WAL after the last commit on this thread, from SQLite's WAL hook (set
    /// during the commit, on the committing thread, and read right after it).
    pub(super) static WAL_FRAMES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The write connection's WAL hook: records the frame count (it may not capture state).
pub(super) fn wal_frames_hook(
    _: &rusqlite::hooks::Wal,
    frames: std::os::raw::c_int,
) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|f| f.set(u64::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// The bound on the WAL file, in bytes (README, "Limits"). A WAL that has grown past
/// [`WAL_TRUNCATE_AT`] is checkpointed and truncated to nothing; one that was reset in the
/// ordinary way is cut back to this size (`journal_size_limit`).
pub const WAL_LIMIT: u64 = 64 << 20;

/// The WAL size, in bytes, past which the checkpointer stops being passive. The checkpointer
/// looks every [`CHECKPOINT_EVERY`] commits, and that many commits of the largest events
/// (64 KiB of text and 64 KiB of data each, in overflow pages) add about 32 MiB: so the bound
/// holds from here.
pub(super) const WAL_TRUNCATE_AT: u64 = WAL_LIMIT / 4;

/// The WAL size past which the writer thread truncates it itself before it takes the next
/// group (see [`WriteSide::hold_wal_bound`](super::writer::WriteSide::hold_wal_bound)): under
/// [`WAL_LIMIT`] by one group and more.
pub(super) const WAL_HOLD_AT: u64 = WAL_LIMIT / 2;

/// How long one truncating checkpoint may wait for readers of older snapshots to finish (writes
/// wait meanwhile); when that is not enough it gives up and tries again on the next nudge.
pub(super) const TRUNCATE_WAIT: Duration = Duration::from_millis(500);

/// The WAL file SQLite keeps beside the database: its name with `-wal` appended.
pub fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}
