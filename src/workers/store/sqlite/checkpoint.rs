//! The checkpointer thread: copies the WAL back into the database file (with its `fsync`) on a
//! connection of its own when the writes nudge it, so no commit waits for a checkpoint, and
//! truncates a WAL that passive checkpoints cannot shorten.

use std::path::Path;
use std::sync::mpsc;

use rusqlite::Connection;

use super::wal::WAL_TRUNCATE_AT;
use super::writer::WriteSide;

/// The checkpointer thread: on each nudge, copies what it can of the WAL back into the file
/// (`PASSIVE`: it waits for no reader or writer). A passive checkpoint never makes the WAL
/// shorter, and under a stream of writes with readers always on some snapshot the WAL may never
/// start over: once it has outgrown [`WAL_TRUNCATE_AT`], the checkpointer takes the write
/// connection (so no commit of ours races it for the write lock), runs a `TRUNCATE` checkpoint
/// (waiting at most [`TRUNCATE_WAIT`](super::wal::TRUNCATE_WAIT) for readers) and lets go.
/// Ends when the write side is gone.
pub(super) fn checkpoint_loop(
    conn: &Connection,
    wal: &Path,
    side: &std::sync::Weak<WriteSide>,
    nudges: &mpsc::Receiver<()>,
) {
    while nudges.recv().is_ok() {
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "sqlite checkpoint failed; the WAL grows until one succeeds");
            continue;
        }
        let size = std::fs::metadata(wal).map_or(0, |m| m.len());
        if size < WAL_TRUNCATE_AT {
            continue;
        }
        let Some(side) = side.upgrade() else { return };
        let writes = side.lock();
        // Columns: busy (1 when a reader kept it from finishing), frames in the WAL, frames
        // copied back.
        let busy = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        });
        drop(writes);
        match busy {
            Ok(0) => tracing::debug!(wal_bytes = size, "sqlite WAL truncated"),
            Ok(_) => tracing::debug!(
                wal_bytes = size,
                "sqlite WAL truncation waited out its bound; trying again at the next checkpoint"
            ),
            Err(e) => tracing::warn!(error = %e, wal_bytes = size, "sqlite WAL truncation failed"),
        }
    }
}
