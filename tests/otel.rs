//! OTLP export end to end, in its own test binary because it installs the process-wide
//! subscriber and tracer/meter providers: a real OTLP/gRPC receiver runs in the test, the
//! exporter points at it, and an RPC carrying a `traceparent` must arrive as a span of that
//! trace, with the RPC counted in the metrics.

#[allow(dead_code)]
#[path = "api/helpers.rs"]
mod helpers;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use agentry::{
    grpc::pb,
    telemetry::{self, LogFormat, Otlp, Settings},
};
use opentelemetry_proto::tonic::collector::{
    metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
        metrics_service_server::{MetricsService, MetricsServiceServer},
    },
    trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
};
use tonic::{Request, Response, Status};

use helpers::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// What the receiver got.
#[derive(Default, Clone)]
struct Received {
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.traces.lock().unwrap().push(request.into_inner());
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Received {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.metrics.lock().unwrap().push(request.into_inner());
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

impl Received {
    /// The `rpc` spans of [`TRACE_ID`]: (service name, parent span id, span name).
    fn rpc_spans(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for req in self.traces.lock().unwrap().iter() {
            for rs in &req.resource_spans {
                let service = rs
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| kv.value.as_ref())
                    .map(|v| format!("{:?}", v.value))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for span in &ss.spans {
                        if hex::encode(&span.trace_id) == TRACE_ID {
                            out.push((
                                service.clone(),
                                hex::encode(&span.parent_span_id),
                                span.name.clone(),
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    fn metric_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for req in self.metrics.lock().unwrap().iter() {
            for rm in &req.resource_metrics {
                for sm in &rm.scope_metrics {
                    out.extend(sm.metrics.iter().map(|m| m.name.clone()));
                }
            }
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_spans_and_metrics_reach_an_otlp_receiver() {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(received.clone()))
            .add_service(MetricsServiceServer::new(received.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let guard = Arc::new(
        telemetry::init(&Settings {
            log_format: LogFormat::Text,
            otlp: Otlp::Endpoint(format!("http://{collector}")),
            service_name: "agentry-test".to_owned(),
        })
        .unwrap(),
    );
    assert!(guard.exporting());

    let s = start_with(|c| {
        let root = c.home.clone().unwrap().parent().unwrap().to_path_buf();
        let script = script(
            &root,
            "run-agent",
            &format!(
                "cat > /dev/null\necho \"$TRACEPARENT\" > {}",
                root.join("traceparent").display()
            ),
        );
        c.executor.command = vec![script.display().to_string()];
    })
    .await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    s.client
        .clone()
        .list_agents(req(
            pb::ListAgentsRequest::default(),
            &[("traceparent", traceparent.as_str())],
        ))
        .await
        .unwrap();

    // A worker spawned in the same trace gets a TRACEPARENT of that trace for its own span.
    let w = s
        .client
        .clone()
        .spawn_worker(req(
            pb::SpawnWorkerRequest {
                agent: "task".into(),
                prompt: "traced".into(),
                wait: true,
                ..Default::default()
            },
            &[("traceparent", traceparent.as_str())],
        ))
        .await
        .unwrap()
        .into_inner()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32);
    let handed = std::fs::read_to_string(s.dir.path().join("traceparent")).unwrap();
    assert!(
        handed.starts_with(&format!("00-{TRACE_ID}-")),
        "worker TRACEPARENT {handed:?}"
    );
    assert!(
        !handed.contains(PARENT_SPAN_ID),
        "a span of ours, not the caller's"
    );

    let flush = || {
        let guard = guard.clone();
        async move {
            tokio::task::spawn_blocking(move || guard.flush())
                .await
                .unwrap();
        }
    };
    eventually(
        &format!("a span of trace {TRACE_ID}"),
        Duration::from_secs(10),
        || async {
            flush().await;
            (!received.rpc_spans().is_empty()).then_some(())
        },
    )
    .await;
    let spans = received.rpc_spans();
    let (service, parent, name) = &spans[0];
    assert!(service.contains("agentry-test"), "{service}");
    assert_eq!(parent, PARENT_SPAN_ID, "the caller's span is the parent");
    assert_eq!(name, "agentry.v1.AgentRegistryService/ListAgents");
    eventually("a worker span", Duration::from_secs(10), || async {
        flush().await;
        let spans = received.rpc_spans();
        spans
            .iter()
            .any(|(_, _, n)| n == "worker")
            .then_some(())
            .ok_or(format!("spans: {spans:?}"))
    })
    .await;

    // The RPCs, the worker's outcome and the discovery build are counted over one pipeline.
    for metric in [
        "agentry.rpc.calls",
        "agentry.workers.spawned",
        "agentry.discovery.duration",
    ] {
        eventually(
            &format!("metric {metric}"),
            Duration::from_secs(10),
            || async {
                flush().await;
                let names = received.metric_names();
                names
                    .iter()
                    .any(|n| n == metric)
                    .then_some(())
                    .ok_or(format!("metrics: {names:?}"))
            },
        )
        .await;
    }

    s.stop().await.unwrap();
    let guard = Arc::into_inner(guard).expect("the only handle");
    tokio::task::spawn_blocking(move || guard.shutdown())
        .await
        .unwrap();
}
