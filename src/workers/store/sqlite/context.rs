//! Error context for SQLite: what the store was doing, attached to a `rusqlite` error, and
//! decoding failures told apart as corruption. A leaf every other file of the backend uses.

use crate::workers::store::StoreError;

/// Attaches what the store was doing to a SQLite error, and reports decoding failures as
/// [`StoreError::Corrupt`] rather than as SQLite failures.
pub(super) trait Context<T> {
    /// Adds a fixed description.
    fn context(self, what: &str) -> Result<T, StoreError>;
    /// Adds a description built only if there is an error, for the hot path.
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> Context<T> for rusqlite::Result<T> {
    fn context(self, what: &str) -> Result<T, StoreError> {
        self.with_context(|| what.to_owned())
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|source| match source {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => {
                StoreError::Corrupt(format!("{}: {source}", what()))
            }
            source => StoreError::Sqlite {
                context: what(),
                source,
            },
        })
    }
}
