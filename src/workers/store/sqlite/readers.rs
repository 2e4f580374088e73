//! Connections: the settings every connection to the file gets, and the pool of read-only
//! ones that reads run on (through `spawn_blocking`; WAL lets them proceed while a write
//! commits).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::context::Context;
use crate::workers::store::StoreError;

/// How long a statement waits for another connection's lock before failing.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Enough cached statements for every fixed query plus every shape a list builds
/// (see [`list_sql`](super::rows::list_sql)).
pub(super) const STATEMENT_CACHE_CAPACITY: usize = 256;

/// Idle read connections kept for reuse (more are opened under load and closed after).
const MAX_IDLE_READERS: usize = 4;

/// Idle read-only connections to the store file.
pub(super) struct Readers {
    /// The store file, to open more.
    pub(super) path: PathBuf,
    /// Connections kept for reuse, at most [`MAX_IDLE_READERS`].
    pub(super) idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// Runs `f` on an idle connection (or a new one), then keeps the connection for reuse.
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open_reader(&self.path)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }
}

fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("open {} for reading", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .context("set busy timeout")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(conn)
}
