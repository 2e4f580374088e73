//! gRPC: generated types, the service implementations (translation only) and the server wiring
//! (health, reflection v1 + v1alpha, graceful shutdown on a pre-bound listener).

pub mod convert;
pub mod layers;
pub mod listen;
pub mod metadata;
pub mod reply;
pub mod request;
pub mod runners;
pub mod service;
pub mod status;

use std::{future::Future, sync::Arc};

use tokio_stream::wrappers::UnixListenerStream;
use tonic_health::ServingStatus;

use crate::{
    config::{Config, StoreKind},
    discovery::Registry,
    resolve::Rules,
    workers::{
        executor::{
            ByKind, ExecExecutor, Executor, Kind, ModelExecutor, RunnerExecutor,
            model::{ModelSettings, wire::HttpModel},
        },
        runners::{HubSettings, RunnerHub},
        store::{PostgresStore, ReplicaSettings, SqliteStore, WorkerStore, redact_url},
        supervisor::Settings,
    },
};

/// How often health asks the store whether the database answers.
const STORE_HEALTH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub use listen::{BatchedWrites, Listener};

/// Generated protobuf and gRPC code for `agentry.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("agentry.v1");

    pub use super::reply::ResolveAgentResponse;

    /// Encoded descriptor set of `agentry.v1` and `lf.a2a.v1`, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/agentry_descriptor.bin"));
}

/// The A2A gRPC binding's messages and service (`lf.a2a.v1`, docs/a2a.md §13.2).
#[allow(missing_docs)]
pub mod a2a_pb {
    tonic::include_proto!("lf.a2a.v1");
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
    run_announced(cfg, listener, shutdown, |_, _| {}).await
}

/// [`run`], calling `ready` with the listener and the HTTP listener's address (with
/// `http.listen`) once everything the service needs is open (the store, the registry, the
/// executors, both listeners) and it starts serving; never when it fails first. A `listening`
/// line printed from here means the service came up (`serve --print-addr`). With
/// `http.listen` on port 0 the system picks the HTTP port, and this is where it is told.
pub async fn run_announced(
    cfg: Config,
    listener: impl Into<Listener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&Listener, Option<std::net::SocketAddr>),
) -> anyhow::Result<()> {
    let listener = listener.into();
    // TLS for model providers and MCP servers over https: rustls on ring, installed once for
    // the process (a second install, as in tests running several servers, is a no-op).
    let _ = rustls::crypto::ring::default_provider().install_default();
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
    let (store, store_desc): (Arc<dyn WorkerStore>, String) = match cfg.store_kind() {
        StoreKind::Sqlite(path) => (
            Arc::new(SqliteStore::open(&path)?),
            format!("sqlite {}", path.display()),
        ),
        StoreKind::Postgres(url) => {
            let replica = ReplicaSettings {
                name: cfg.replica_name(),
                lease: cfg.replica.lease,
                commit_window: cfg.replica.commit_window,
            };
            let name = replica.name.clone();
            (
                Arc::new(PostgresStore::open(&url, replica).await?),
                format!("postgres {} as replica {name}", redact_url(&url)),
            )
        }
    };
    let exec = Arc::new(ExecExecutor::new(
        cfg.executor.command.clone(),
        cfg.executor.env.clone(),
    ));
    let kind = |k: crate::config::ExecutorKind| match k {
        crate::config::ExecutorKind::Exec => Kind::Exec,
        crate::config::ExecutorKind::Runner => Kind::Runner,
        crate::config::ExecutorKind::Model => Kind::Model,
    };
    let default_kind = if cfg.executor_unconfigured {
        tracing::warn!("{}", crate::workers::executor::route::NO_EXECUTOR);
        Kind::Unconfigured
    } else {
        kind(cfg.executor.kind)
    };
    let uses_exec = (!cfg.executor_unconfigured
        && cfg.executor.kind == crate::config::ExecutorKind::Exec)
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
    // On a shared store, runners are shared across replicas (docs/runners.md).
    let fleet = store.clone().shared().map(|shared| {
        crate::workers::runners::fleet::Fleet::new(store.clone(), shared, hub.clone())
    });
    let model = Arc::new(ModelExecutor::new(
        ModelSettings {
            models: cfg.models.clone(),
            looping: cfg.model.clone(),
            servers: cfg.mcp_servers.clone(),
            review_tools: cfg.review.tools.clone(),
            spawn_tool: cfg.spawn_tool.clone(),
            transcript_max_bytes: cfg.workers.transcript_max_bytes,
        },
        Arc::new(HttpModel::new().map_err(anyhow::Error::msg)?),
    ));
    // Remote personas' workers on their A2A agents (docs/a2a.md §13.4).
    let a2a = Arc::new(
        crate::workers::executor::a2a::A2aExecutor::new(
            crate::workers::executor::a2a::A2aSettings {
                card_timeout: cfg.a2a.card_timeout,
                remotes: cfg.a2a.remotes.clone(),
                max_card_bytes: 256 << 10,
                max_event_bytes: 1 << 20,
                max_result_bytes: cfg.executor.max_output_bytes,
            },
        )
        .map_err(anyhow::Error::msg)?,
    );
    let executor: Arc<dyn Executor> = Arc::new(ByKind::new(
        exec,
        Arc::new(RunnerExecutor::new(hub.clone(), fleet.clone())),
        model.clone(),
        a2a.clone(),
        default_kind,
        cfg.executor
            .by_agent
            .iter()
            .map(|(a, k)| (a.clone(), kind(*k)))
            .collect(),
    ));
    let supervisor = crate::workers::supervise(
        store.clone(),
        executor,
        registry.clone(),
        rules.clone(),
        Settings::from_config(&cfg, dial.clone()),
    )
    .await?;
    tracing::info!(store = %store_desc, "worker store open");
    if let Some(fleet) = &fleet {
        fleet.start(supervisor.shutdown_token());
    }

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
    let app = crate::app::App {
        registry: registry.clone(),
        rules,
        supervisor: supervisor.clone(),
        operators: Arc::new(cfg.auth.operators.clone()),
        limits: crate::app::Limits {
            max_prompt_bytes: cfg.limits.max_prompt_bytes,
        },
    };
    // The model executor reaches agentry through the same operations as the RPCs.
    model.bind(Arc::new(crate::app::AsWorker::new(&app)));
    a2a.bind(Arc::new(crate::app::AsWorker::new(&app)));
    // A2A (docs/a2a.md §13.2): its gRPC binding on this port, and the HTTP listener, bound
    // before serving so a bad address fails the start instead of a later request.
    let a2a = crate::a2a::A2a::new(
        app.clone(),
        tokens.clone(),
        cfg.a2a.default_agent.clone(),
        dial.clone(),
    );
    // The console (docs/console.md §14) shares the listener.
    let http = match cfg.http.bind_address(tokens.is_some()) {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr.as_str())
                .await
                .map_err(|e| anyhow::anyhow!("http.listen {addr}: cannot listen: {e}"))?;
            let bound = l.local_addr()?;
            let console =
                crate::console::Console::new(app.clone(), tokens.clone(), bound.ip().is_loopback());
            Some((l, bound, a2a.clone().router().merge(console.router())))
        }
        None => None,
    };
    let svc = service::Service::new(app);

    // Serving = first discovery done, the database answers, and not shutting down (docs §8,
    // §9). One task owns the status so the three never race.
    let (discovered_tx, mut discovered) = tokio::sync::watch::channel(false);
    let health_stopping = tokio_util::sync::CancellationToken::new();
    {
        let (health, store, stopping) = (health.clone(), store.clone(), health_stopping.clone());
        let backlog = supervisor.clone();
        // Held here, so `changed()` only ever reports a real change.
        let _keep = discovered_tx.clone();
        tokio::spawn(async move {
            let _keep = _keep;
            let mut serving = false;
            let mut store_ok = true;
            let mut tick = tokio::time::interval(STORE_HEALTH_EVERY);
            loop {
                tokio::select! {
                    () = stopping.cancelled() => return,
                    _ = tick.tick() => {
                        let ok = store.ping().await;
                        // Reachable is not enough: a replica whose outcomes wait for the
                        // database to take them is not serving even if a ping gets through.
                        let waiting = backlog.unrecorded_outcomes();
                        match (&ok, store_ok) {
                            (Err(e), true) => tracing::error!(error = %e, "worker store unreachable; health is NOT_SERVING"),
                            (Ok(()), true) if waiting > 0 => tracing::error!(outcomes = waiting, "worker outcomes wait for the store; health is NOT_SERVING"),
                            (Ok(()), false) if waiting == 0 => tracing::info!("worker store reachable again"),
                            _ => {}
                        }
                        store_ok = ok.is_ok() && waiting == 0;
                    }
                    _ = discovered.changed() => {}
                }
                let want = store_ok && *discovered.borrow();
                if want != serving && !stopping.is_cancelled() {
                    serving = want;
                    let status = if want {
                        ServingStatus::Serving
                    } else {
                        ServingStatus::NotServing
                    };
                    health.set_service_status("", status).await;
                    health.set_service_status(SERVICE_NAME, status).await;
                }
            }
        });
    }

    // First discovery in the background; readiness flips when it is done.
    {
        let registry = registry.clone();
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
                    let _ = discovered_tx.send(true);
                }
                Err(e) => tracing::error!(error = %e, "first discovery failed"),
            }
        });
    }

    tracing::info!(addr = %listener.describe(), "agentry listening");
    ready(&listener, http.as_ref().map(|&(_, bound, _)| bound));
    let health_for_shutdown = health.clone();
    let supervisor_for_auth = supervisor.clone();
    let grace = cfg.shutdown_grace;
    // One shutdown sequence under one deadline (docs/operations.md §8): on the signal, health
    // goes NOT_SERVING and the server stops accepting at once; meanwhile every worker is stopped
    // (recorded `killed`) and watch streams end, which lets the calls in flight finish; the drain
    // of connections is bounded by `shutdown_grace` from the signal. Flushing telemetry is the
    // caller's last step.
    let stopping = tokio_util::sync::CancellationToken::new();
    {
        let stopping = stopping.clone();
        tokio::spawn(async move {
            shutdown.await;
            stopping.cancel();
        });
    }
    if let Some((l, addr, router)) = http {
        if cfg.auth.tokens_file.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the HTTP listener is not on loopback and authentication is off: anyone who reaches it runs agents as anonymous");
        }
        tracing::info!(%addr, "http listening (A2A, console at /console)");
        let stopping = stopping.clone();
        tokio::spawn(async move {
            if let Err(e) =
                crate::a2a::serve(l, router, async move { stopping.cancelled().await }).await
            {
                tracing::error!(error = %e, "the HTTP listener failed");
            }
        });
    }
    let stop_accepting = {
        let stopping = stopping.clone();
        async move {
            stopping.cancelled().await;
            tracing::info!("shutting down: no new connections, stopping workers");
            // The store-health task must not turn SERVING back on.
            health_stopping.cancel();
            health_for_shutdown
                .set_service_status("", ServingStatus::NotServing)
                .await;
            health_for_shutdown
                .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
                .await;
        }
    };
    let stop_workers = {
        let stopping = stopping.clone();
        async move {
            stopping.cancelled().await;
            // Runners get a cancel for each of their workers and may answer; then their
            // streams end.
            supervisor.shutdown(grace).await;
            hub.close();
        }
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
            Arc::new(move |token: String| {
                let supervisor = supervisor.clone();
                Box::pin(async move {
                    // Live here, or open on another replica sharing the store; the handler's
                    // lineage uses what is found here instead of looking it up again.
                    Ok(supervisor
                        .calling_worker(&token)
                        .await
                        .ok()
                        .flatten()
                        .map(|w| {
                            let principal = w.record.spec.caller_scope.as_str().into();
                            (crate::auth::Principal(principal), w)
                        }))
                })
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
            a2a_pb::a2a_service_server::A2aServiceServer::new(crate::a2a::grpc::A2aGrpc::new(a2a))
                .max_decoding_message_size(max_message),
        )
        .add_service(
            pb::runner_service_server::RunnerServiceServer::new(runner_svc)
                .max_decoding_message_size(
                    max_message.max(cfg.executor.max_output_bytes + (1 << 20)),
                ),
        );
    let serving = async move {
        match listener {
            Listener::Tcp(l) => {
                router
                    // TCP_NODELAY: without it small responses wait out delayed ACKs (~40 ms).
                    .serve_with_incoming_shutdown(
                        BatchedWrites::incoming(
                            tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true)),
                        ),
                        stop_accepting,
                    )
                    .await
            }
            Listener::Unix(l, _) => {
                router
                    .serve_with_incoming_shutdown(
                        BatchedWrites::incoming(UnixListenerStream::new(l)),
                        stop_accepting,
                    )
                    .await
            }
        }
    };
    let both = async { tokio::join!(serving, stop_workers).0 };
    tokio::select! {
        served = both => served?,
        () = async { stopping.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(
                grace = ?grace,
                "calls or workers still open after shutdown_grace; closing them"
            );
        }
    }
    Ok(())
}
