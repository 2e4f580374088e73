//! Statements prepared once per connection (deadpool's statement cache), for the hot
//! statements: one round trip each, not a prepare and an execute.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

/// `execute` of a statement prepared once per connection (deadpool's statement cache): a hot
/// statement costs one round trip, not a prepare and an execute.
pub(super) async fn exec_cached(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.execute(&statement, params).await
}

/// `query_opt` of a statement prepared once per connection.
pub(super) async fn query_opt_cached(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.query_opt(&statement, params).await
}

/// `query` of a statement prepared once per connection.
pub(super) async fn query_cached(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.query(&statement, params).await
}
