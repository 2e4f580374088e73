//! Dedupe claims across replicas (docs §9): who holds a key another dispatch won, and the
//! release of a claim whose worker was not created. The claims themselves are written in
//! batches (`batch`).

use deadpool_postgres::Client;

use super::cached::{exec_cached, query_opt_cached};
use super::context::PgContext;
use crate::workers::model::WorkerId;
use crate::workers::store::StoreError;

/// The worker holding the dedupe claim on `key` when `worker` did not win it: `None` when that
/// is `worker` itself or the claim was released in between (`SharedStore::claim_dedupe`).
pub(super) async fn holder(
    client: &Client,
    key: &str,
    worker: &WorkerId,
) -> Result<Option<WorkerId>, StoreError> {
    let holder = query_opt_cached(
        client,
        "SELECT worker_id FROM dedupe_claims WHERE key = $1",
        &[&key],
    )
    .await
    .pg("read dedupe claim")?;
    match holder {
        Some(row) => {
            let id = WorkerId::parse(row.get::<_, &str>(0))
                .map_err(|e| StoreError::Corrupt(format!("dedupe claim: {e}")))?;
            Ok((id != *worker).then_some(id))
        }
        // Released in between: the next dispatch claims it; this one runs.
        None => Ok(None),
    }
}

/// Drops `worker`'s claim on `key` (`SharedStore::release_dedupe`).
pub(super) async fn release(
    client: &Client,
    key: &str,
    worker: &WorkerId,
) -> Result<(), StoreError> {
    exec_cached(
        client,
        "DELETE FROM dedupe_claims WHERE key = $1 AND worker_id = $2",
        &[&key, &worker.as_str()],
    )
    .await
    .pg("release dedupe claim")?;
    Ok(())
}
