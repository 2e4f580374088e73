#![warn(missing_docs)]
//! agentry: the registry of agent personas and the supervisor of the workers spawned from them.
//!
//! A coordinator runtime asks agentry over gRPC which agents exist for a workspace, resolves one
//! into exactly what a worker must get, and (later layers) spawns, watches and stops workers.
//!
//! # Layout
//! - [`config`]: typed, strict configuration (YAML + `AGENTRY_*`).
//! - [`persona`]: one file's bytes → a persona (markdown or Codex TOML) or a workflow command,
//!   or diagnostics. Pure.
//! - [`discovery`]: which directories, in which order; merge; snapshots; file watching.
//! - [`resolve`]: caller lineage, spawn policy and the effective agent a worker gets.
//! - [`review`]: the review gate — proposal → reviewer worker → decision, failing closed.
//! - [`schema`]: the one JSON Schema check for persona and request output schemas (a leaf).
//! - [`workers`]: the worker runtime — lifecycle, store, executors, dedupe, supervisor.
//! - [`paging`]: page sizes and opaque page tokens for every listing.
//! - [`app`]: the service's operations in domain terms, one call per RPC.
//! - [`grpc`]: translation only — proto ⇄ domain, errors → `Status`, server wiring.
//! - [`auth`]: bearer tokens file → [`auth::Principal`], reloaded on change.
//! - [`telemetry`]: logs, OTLP spans and metrics, W3C trace context in and out.
//! - [`check`]: `agentry check`, the persona linter — text, JSON or GitHub annotations.
//!
//! Dependencies point one way: `grpc → app → {review, workers, discovery, resolve} → persona`.

pub mod a2a;
pub mod app;
pub mod auth;
pub mod check;
pub mod config;
pub mod confine;
pub mod console;
pub mod discovery;
pub mod grpc;
pub mod paging;
pub mod persona;
pub mod resolve;
pub mod review;
pub mod schema;
pub mod telemetry;
pub mod workers;
