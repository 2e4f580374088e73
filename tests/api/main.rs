//! One integration-test binary: every test starts the real server, in process on a listener
//! bound to 127.0.0.1:0 (`helpers`) or as the `agentry` binary that binds its own (`binary`).

mod a2a;
mod a2a_remote;
mod binary;
mod check;
mod commands;
mod console;
mod conversations;
mod deploy;
mod dialects;
mod hardening;
mod helpers;
mod hostile;
mod model;
mod ops;
mod processes;
mod progress;
mod registry;
mod replicas;
mod restart;
mod review;
mod runners;
mod untrusted;
mod workers;
mod worktrees;
