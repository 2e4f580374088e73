//! Workers: the lifecycle state machine, the domain types, the durable store, the executors, the
//! dedupe cache and the supervisor that ties them together (docs §6).
//!
//! Owns everything about a worker that is not transport: it must not depend on tonic or the
//! gRPC layer.

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
