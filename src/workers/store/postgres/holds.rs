//! Callers waiting across replicas (docs §9): a caller of one replica waiting for a worker
//! another replica runs is a `worker_holds` row, added and released with a notice to the
//! worker's owner, counted by the owner, and pruned when its replica is lost or its worker
//! ended.

use deadpool_postgres::Client;

use super::context::PgContext;
use crate::workers::model::WorkerId;
use crate::workers::store::StoreError;

/// Adds a hold of replica `replica_id` on worker `id` and notifies its owner
/// (`SharedStore::add_hold`); the hold's id.
pub(super) async fn add(
    client: &Client,
    replica_id: &str,
    id: &WorkerId,
) -> Result<String, StoreError> {
    let hold = format!("h-{}", crate::workers::model::generate_token());
    client
        .execute(
            "WITH added AS (INSERT INTO worker_holds (id, worker_id, replica_id)
                                VALUES ($1, $2, $3) RETURNING worker_id)
                 SELECT pg_notify('agentry_holds', worker_id) FROM added",
            &[&hold, &id.as_str(), &replica_id],
        )
        .await
        .pg("add a hold on a remote worker")?;
    Ok(hold)
}

/// Ends a hold and notifies the worker's owner (`SharedStore::release_hold`).
pub(super) async fn release(client: &Client, id: &WorkerId, hold: &str) -> Result<(), StoreError> {
    client
        .execute(
            "WITH gone AS (DELETE FROM worker_holds WHERE id = $1 RETURNING worker_id)
                     SELECT pg_notify('agentry_holds', $2) FROM gone",
            &[&hold, &id.as_str()],
        )
        .await
        .pg("release a hold on a remote worker")?;
    Ok(())
}

/// How many holds of live replicas worker `id` has (`SharedStore::holds`).
pub(super) async fn count(client: &Client, id: &WorkerId) -> Result<u64, StoreError> {
    let row = client
        .query_one(
            "SELECT count(*) FROM worker_holds h JOIN replicas r ON r.id = h.replica_id
                  WHERE h.worker_id = $1 AND r.expires_at > now()",
            &[&id.as_str()],
        )
        .await
        .pg("count the holds on a worker")?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

/// Deletes the holds of lost replicas and ended workers, notifying their owners
/// (`SharedStore::prune_holds`).
pub(super) async fn prune(client: &Client) -> Result<(), StoreError> {
    client
        .execute(
            "WITH gone AS (
                     DELETE FROM worker_holds h
                      WHERE NOT EXISTS (SELECT 1 FROM replicas r
                                         WHERE r.id = h.replica_id AND r.expires_at > now())
                         OR NOT EXISTS (SELECT 1 FROM workers w
                                         WHERE w.id = h.worker_id
                                           AND w.state IN ('pending', 'running'))
                     RETURNING worker_id)
                 SELECT pg_notify('agentry_holds', worker_id) FROM (SELECT DISTINCT worker_id FROM gone) g",
            &[],
        )
        .await
        .pg("prune holds")?;
    Ok(())
}
