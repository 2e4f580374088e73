//! gRPC: generated types, the service implementations (translation only) and the server wiring
//! (health, reflection v1 + v1alpha, graceful shutdown on a pre-bound listener).

pub mod commands;
pub mod convert;
pub mod layers;
pub mod listen;
pub mod metadata;
pub mod page;
pub mod progress;
pub mod registry;
pub mod request;
pub mod review;
pub mod runners;
pub mod status;
pub mod workers;

use std::{future::Future, sync::Arc};

use tokio_stream::wrappers::UnixListenerStream;
use tonic_health::ServingStatus;

use crate::{
    config::Config,
    discovery::Registry,
    resolve::Rules,
    workers::{
        executor::{ByKind, ExecExecutor, Executor, Kind, RunnerExecutor},
        runners::{HubSettings, RunnerHub},
        store::SqliteStore,
        supervisor::{Settings, Supervisor},
    },
};

pub use listen::Listener;

/// Generated protobuf and gRPC code for `agentry.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("agentry.v1");

    /// Encoded descriptor set of `agentry.v1`, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/agentry_descriptor.bin"));
}

/// The fully-qualified service name (also a health service name).
pub const SERVICE_NAME: &str = "agentry.v1.AgentRegistryService";

/// Runs the service on `listener` until `shutdown` resolves.
///
/// Health reports `NOT_SERVING` until the first discovery has finished, `SERVING` afterwards and
/// `NOT_SERVING` again once shutdown begins. Returns once every connection has drained (the
/// caller bounds that with `shutdown_grace`). With `auth.tokens_file` set, every RPC but health
/// and reflection needs a bearer token (see [`layers::AuthLayer`]).
pub async fn run(
    cfg: Config,
    listener: impl Into<Listener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = listener.into();
    let tokens = crate::auth::TokenFile::start(cfg.auth.tokens_file.as_deref())?;
    let registry = Arc::new(Registry::new(&cfg, true)?);
    let rules = Arc::new(Rules::from_config(&cfg));
    // What a worker process dials to reach us (AGENTRY_ADDR).
    let dial = match &listener {
        Listener::Tcp(l) => {
            let local = l.local_addr()?;
            if local.ip().is_unspecified() {
                std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), local.port())
                    .to_string()
            } else {
                local.to_string()
            }
        }
        Listener::Unix(_, path) => format!("unix:{}", path.display()),
    };
    let store_path = cfg.store_path(std::env::var_os("XDG_STATE_HOME").map(Into::into));
    let store = Arc::new(SqliteStore::open(&store_path)?);
    let exec = Arc::new(ExecExecutor::new(
        cfg.executor.command.clone(),
        cfg.executor.env.clone(),
    ));
    let kind = |k: crate::config::ExecutorKind| match k {
        crate::config::ExecutorKind::Exec => Kind::Exec,
        crate::config::ExecutorKind::Runner => Kind::Runner,
    };
    let uses_exec = cfg.executor.kind == crate::config::ExecutorKind::Exec
        || cfg
            .executor
            .by_agent
            .values()
            .any(|k| *k == crate::config::ExecutorKind::Exec);
    if uses_exec {
        // Not fatal: the registry serves without an executor, and every spawn looks again. But
        // a new user must hear about it now, not from the first worker's error.
        let program = exec.command().first().map_or("", String::as_str);
        match exec.preflight() {
            Ok(path) => tracing::info!(program = %path.display(), "executor.command ready"),
            Err(e) => tracing::warn!(
                program,
                error = %e,
                "executor.command cannot run, so every worker will fail to start until it can; \
                 set executor.command to your agent runtime"
            ),
        }
    }
    let hub = RunnerHub::new(HubSettings {
        heartbeat_interval: cfg.runners.heartbeat_interval,
        lease: cfg.runners.lease,
        accept_timeout: cfg.runners.accept_timeout,
    });
    let executor: Arc<dyn Executor> = Arc::new(ByKind::new(
        exec,
        Arc::new(RunnerExecutor::new(hub.clone())),
        kind(cfg.executor.kind),
        cfg.executor
            .by_agent
            .iter()
            .map(|(a, k)| (a.clone(), kind(*k)))
            .collect(),
    ));
    let supervisor = Supervisor::new(
        store,
        executor,
        registry.clone(),
        rules.clone(),
        Settings::from_config(&cfg, dial),
    )
    .await?;
    tracing::info!(path = %store_path.display(), "worker store open");

    let (health, health_svc) = tonic_health::server::health_reporter();
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    health
        .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
        .await;

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo / BadRequest, so grpcurl can decode error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo / BadRequest, so grpcurl can decode error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let runner_svc = runners::RunnerService {
        supervisor: supervisor.clone(),
        hub: hub.clone(),
        max_output_bytes: cfg.executor.max_output_bytes,
    };
    let svc = registry::RegistryService {
        registry: registry.clone(),
        rules,
        supervisor: supervisor.clone(),
        max_prompt_bytes: cfg.limits.max_prompt_bytes,
        operators: Arc::new(cfg.auth.operators.clone()),
    };

    // First discovery in the background; readiness flips when it is done.
    {
        let (registry, health) = (registry.clone(), health.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            match registry.snapshot("").await {
                Ok(s) => {
                    tracing::info!(
                        agents = s.agents.len(),
                        commands = s.commands.len(),
                        diagnostics = s.all_diagnostics().count(),
                        version = %s.version,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "first discovery done"
                    );
                    health.set_service_status("", ServingStatus::Serving).await;
                    health
                        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
                        .await;
                }
                Err(e) => tracing::error!(error = %e, "first discovery failed"),
            }
        });
    }

    tracing::info!(addr = %listener.describe(), "agentry listening");
    let health_for_shutdown = health.clone();
    let supervisor_for_auth = supervisor.clone();
    let grace = cfg.shutdown_grace;
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down");
        health_for_shutdown
            .set_service_status("", ServingStatus::NotServing)
            .await;
        health_for_shutdown
            .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
            .await;
        // Kill running workers (recorded killed; runners get cancel and may answer), end watch
        // and runner streams, so the drain finishes.
        supervisor.shutdown(grace).await;
        hub.close();
    };
    // Big enough that the prompt bound (an INVALID_ARGUMENT naming limits.max_prompt_bytes) is
    // what a caller meets, not the transport's.
    let max_message = (cfg.limits.max_prompt_bytes * 2 + (1 << 20)).max(16 << 20);
    let router = tonic::transport::Server::builder()
        .http2_max_header_list_size(layers::HTTP2_MAX_HEADER_LIST_BYTES)
        .layer(layers::TraceLayer::new(crate::telemetry::Metrics::new()))
        .layer(layers::ProtocolLayer)
        .layer(layers::AuthLayer::new(tokens).with_worker_tokens({
            let supervisor = supervisor_for_auth;
            Arc::new(move |token: &str| {
                supervisor
                    .principal_for_token(token)
                    .map(crate::auth::Principal)
            })
        }))
        .add_service(health_svc)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            pb::agent_registry_service_server::AgentRegistryServiceServer::new(svc)
                .max_decoding_message_size(max_message),
        )
        .add_service(
            pb::runner_service_server::RunnerServiceServer::new(runner_svc)
                .max_decoding_message_size(
                    max_message.max(cfg.executor.max_output_bytes + (1 << 20)),
                ),
        );
    match listener {
        Listener::Tcp(l) => {
            router
                // TCP_NODELAY: without it small responses wait out delayed ACKs (~40 ms).
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true)),
                    shutdown,
                )
                .await?
        }
        Listener::Unix(l, _) => {
            router
                .serve_with_incoming_shutdown(UnixListenerStream::new(l), shutdown)
                .await?
        }
    }
    Ok(())
}
