//! Workers: the lifecycle state machine, the domain types, the durable store, the executors, the
//! dedupe cache and the supervisor that ties them together (docs §6).
//!
//! Owns everything about a worker that is not transport: it must not depend on tonic or the
//! gRPC layer.

pub mod artifacts;
pub mod dedupe;
pub mod executor;
pub mod lifecycle;
pub mod model;
pub mod replica;
pub mod runners;
pub mod spec;
pub mod store;
pub mod supervisor;
pub mod worktree;

use std::sync::Arc;

use crate::{
    discovery::Registry,
    resolve::Rules,
    workers::{
        executor::Executor,
        store::{StoreError, WorkerStore},
        supervisor::{Settings, Supervisor},
    },
};

/// Starts the supervisor over `store` — closing the rows a previous process left open — and,
/// when other replicas share the store, this replica's duties towards them ([`replica`]: lease,
/// orphan sweeper, stop requests). The supervisor knows nothing of replicas; the duties drive
/// it from outside.
pub async fn supervise(
    store: Arc<dyn WorkerStore>,
    executor: Arc<dyn Executor>,
    registry: Arc<Registry>,
    rules: Arc<Rules>,
    settings: Settings,
) -> Result<Arc<Supervisor>, StoreError> {
    let lease = settings.replica_lease;
    let sup = Supervisor::new(store, executor, registry, rules, settings).await?;
    replica::start(&sup, lease);
    supervisor::start_duties(&sup);
    Ok(sup)
}
