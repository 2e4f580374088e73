//! Error context for PostgreSQL: what the store was doing, attached to a driver or pool error,
//! and a lost connection (retryable) told apart from a refused statement. A leaf every other
//! file of the backend uses.

use crate::workers::store::StoreError;

/// Attaches what the store was doing to a driver or pool error.
pub(super) trait PgContext<T> {
    /// Adds a fixed description.
    fn pg(self, what: &str) -> Result<T, StoreError>;
    /// Adds a description built only on error.
    fn pg_with(self, what: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T, E: std::error::Error + 'static> PgContext<T> for Result<T, E> {
    fn pg(self, what: &str) -> Result<T, StoreError> {
        self.pg_with(|| what.to_owned())
    }

    fn pg_with(self, what: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| {
            let (context, message) = (what(), error_text(&e));
            if connection_lost(&e) {
                StoreError::Lost { context, message }
            } else {
                StoreError::Postgres { context, message }
            }
        })
    }
}

/// Whether `e` (anywhere in its chain) says the connection is gone rather than that the
/// statement was refused: a closed client, an I/O failure, or a server that ended the session
/// (`57P01` admin shutdown — `pg_terminate_backend` —, `57P02`, `57P03`, class `08`).
fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
            if pg.is_closed() {
                return true;
            }
            if let Some(code) = pg.code().map(tokio_postgres::error::SqlState::code) {
                return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
            }
        }
        if err.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// An error's message with its causes: tokio-postgres's own text says only "db error", and
/// the server's message (what was refused, and why) is in its source; a pool error's says only
/// "backend error".
pub(super) fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}
