//! Logs, traces and metrics (docs §8): one `tracing` subscriber with a human or JSON log layer
//! and, when OTLP export is on, a `tracing-opentelemetry` layer plus an OTLP/gRPC metric pipeline.
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; the exporters then honour the standard
//! `OTEL_*` variables (signal-specific endpoints, headers, timeouts, `OTEL_BSP_*`,
//! `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). Only the
//! gRPC transport is built in (the same tonic/hyper stack the service uses, no TLS).
//!
//! W3C trace context flows in through [`parent_from_headers`] (the RPC layer makes it the parent
//! of each call's span) and out through [`current_traceparent`] (handed to worker processes).
//! [`Metrics`] is the handle the rest of the crate records numbers with; without export its
//! instruments are no-ops.
//!
//! This module depends on nothing else in the crate.

use std::{collections::HashMap, io::IsTerminal, time::Duration};

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Gauge, Histogram, UpDownCounter},
    propagation::{Extractor, TextMapPropagator},
    trace::{TraceContextExt, TracerProvider as _},
};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{
    Resource, metrics::SdkMeterProvider, propagation::TraceContextPropagator,
    trace::SdkTracerProvider,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt, util::SubscriberInitExt};

/// The variable whose presence turns OTLP export on.
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The service name reported when `OTEL_SERVICE_NAME` is not set.
pub const SERVICE_NAME: &str = "agentry";
/// How long [`Telemetry::shutdown`] waits for each pipeline to flush.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// An OTLP exporter could not be built (e.g. a malformed endpoint).
    #[error("cannot set up OTLP {signal} export: {message}")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The exporter's message.
        message: String,
    },
    /// A global `tracing` subscriber was already installed.
    #[error("cannot install the log subscriber: {0}")]
    Subscriber(String),
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where spans and metrics go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Otlp {
    /// Nowhere: only logs.
    #[default]
    Off,
    /// OTLP/gRPC, configured by the standard `OTEL_*` variables.
    FromEnv,
    /// OTLP/gRPC to this endpoint (`http://host:port`); other settings from `OTEL_*`.
    Endpoint(String),
}

/// What [`init`] sets up.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Log line format.
    pub log_format: LogFormat,
    /// Span and metric export.
    pub otlp: Otlp,
    /// `service.name` of the exported resource.
    pub service_name: String,
}

impl Settings {
    /// Settings from the environment (normally `std::env::vars()`): export is on when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is non-empty and `OTEL_SDK_DISABLED` is not `true`.
    pub fn from_env(
        log_format: LogFormat,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        let vars: HashMap<String, String> = vars.into_iter().collect();
        let set = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let otlp = if set(ENDPOINT_VAR).is_some() && !disabled {
            Otlp::FromEnv
        } else {
            Otlp::Off
        };
        Self {
            log_format,
            otlp,
            service_name: set("OTEL_SERVICE_NAME").unwrap_or(SERVICE_NAME).to_owned(),
        }
    }
}

/// The installed pipelines. [`Telemetry::shutdown`] (or dropping it) flushes what is buffered.
///
/// Flushing blocks the calling thread while the exporters, which run on the tokio runtime that
/// was current during [`init`], send: call it from outside async code (e.g. after
/// `Runtime::block_on` returned), never from a current-thread runtime's own thread.
#[must_use = "dropping the guard shuts the exporters down"]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Whether spans and metrics are exported.
    pub fn exporting(&self) -> bool {
        self.tracer.is_some()
    }

    /// Exports every finished span and the current metrics now.
    pub fn flush(&self) {
        if let Some(t) = &self.tracer
            && let Err(e) = t.force_flush()
        {
            tracing::warn!(error = %e, "span flush failed");
        }
        if let Some(m) = &self.meter
            && let Err(e) = m.force_flush()
        {
            tracing::warn!(error = %e, "metric flush failed");
        }
    }

    /// Flushes and stops the exporters, each bounded by [`FLUSH_TIMEOUT`].
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(t) = self.tracer.take()
            && let Err(e) = t.shutdown_with_timeout(FLUSH_TIMEOUT)
        {
            eprintln!("agentry: span export shutdown: {e}");
        }
        if let Some(m) = self.meter.take()
            && let Err(e) = m.shutdown_with_timeout(FLUSH_TIMEOUT)
        {
            eprintln!("agentry: metric export shutdown: {e}");
        }
        flush_logs();
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Targets of the transport stack the exporter itself uses; their spans are never exported, so
/// an export cannot produce more spans to export.
fn is_transport(target: &str) -> bool {
    [
        "h2",
        "hyper",
        "hyper_util",
        "tonic",
        "tower",
        "opentelemetry",
    ]
    .iter()
    .any(|t| target == *t || target.starts_with(&format!("{t}::")))
}

/// The name of the span the gRPC layer opens for every RPC.
pub const RPC_SPAN: &str = "rpc";
/// The target (module path) of that span.
pub const RPC_SPAN_TARGET: &str = "agentry::grpc::layers";

/// Where [`rpc_line`] writes: the log thread's queue, set by [`init`] for plain-text logs.
static RPC_LINES: std::sync::OnceLock<tracing_appender::non_blocking::NonBlocking> =
    std::sync::OnceLock::new();

/// One finished RPC, as the log line every RPC gets.
#[derive(Debug, Clone, Copy)]
pub struct RpcLine<'a> {
    /// `INFO`, or `DEBUG` for health checks.
    pub level: tracing::Level,
    /// The gRPC service, as in the path.
    pub service: &'a str,
    /// The method.
    pub method: &'a str,
    /// The status code's name.
    pub code: &'a str,
    /// Headers in to end of response.
    pub latency_ms: f64,
    /// The authenticated caller, if authentication is on.
    pub principal: Option<&'a str>,
}

/// Writes the line of a finished RPC straight into the log thread's queue, in exactly the
/// layout the text formatter gives an event (`<time> <LEVEL> agentry::rpc: rpc finished
/// rpc.service=… rpc.method=… code=… latency_ms=… principal=…`), at a fraction of an event's
/// cost: it is the one line logged for every call. Returns `false` when the logs are JSON or
/// coloured, or before [`init`]: then the caller logs it as an event. The caller has checked
/// that `RUST_LOG` lets the line through.
pub fn rpc_line(l: &RpcLine<'_>) -> bool {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let Some(writer) = RPC_LINES.get() else {
        return false;
    };
    let level = match l.level {
        tracing::Level::ERROR => "ERROR",
        tracing::Level::WARN => " WARN",
        tracing::Level::INFO => " INFO",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::TRACE => "TRACE",
    };
    let mut line = String::with_capacity(192);
    let _ = write!(
        line,
        "{} {level} {RPC_LOG_TARGET}: rpc finished rpc.service={} rpc.method={} code={} latency_ms={:?}",
        humantime::format_rfc3339_micros(std::time::SystemTime::now()),
        l.service,
        l.method,
        l.code,
        l.latency_ms,
    );
    if let Some(p) = l.principal {
        let _ = write!(line, " principal={p}");
    }
    line.push('\n');
    // Not lossy: a full queue makes this wait, like every other line.
    let _ = writer.clone().write_all(line.as_bytes());
    true
}

/// The target of the line each finished RPC logs, so that it can be filtered on its own
/// (`RUST_LOG=info,agentry::rpc=warn` keeps everything but those lines).
pub const RPC_LOG_TARGET: &str = "agentry::rpc";

/// How many bytes of log lines the log thread gathers into one write.
const LOG_BUFFER_BYTES: usize = 64 * 1024;

/// The log thread's guard: dropping it writes out every queued line and ends the thread.
fn log_guard() -> std::sync::MutexGuard<'static, Option<tracing_appender::non_blocking::WorkerGuard>>
{
    static GUARD: std::sync::Mutex<Option<tracing_appender::non_blocking::WorkerGuard>> =
        std::sync::Mutex::new(None);
    GUARD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes out every log line queued so far and stops the log thread; lines logged afterwards
/// are lost. For exits that skip [`Telemetry`]'s drop (`std::process::exit`).
pub fn flush_logs() {
    drop(log_guard().take());
}

/// The log filter for a `RUST_LOG` value (default `info`; an unusable value means `info` too).
/// A plain list of `target=level` directives, which is nearly every setting, becomes a
/// [`Targets`](tracing_subscriber::filter::Targets) filter: it decides once per call site and
/// keeps no state per span, where an `EnvFilter` takes a lock on every span entry and exit.
/// Directives that need that state (span names, field values) get the `EnvFilter`.
fn log_filter<S>(rust_log: Option<&str>) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let spec = rust_log
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("info");
    if let Ok(targets) = spec.parse::<tracing_subscriber::filter::Targets>() {
        return targets.boxed();
    }
    EnvFilter::try_new(spec)
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .boxed()
}

/// Installs the global subscriber (filter from `RUST_LOG`, default `info`) and, when export is
/// on, the global tracer and meter providers and the W3C propagator.
///
/// With export on it must run inside a tokio runtime (the gRPC exporters spawn onto it), and
/// that runtime must outlive the returned guard.
pub fn init(settings: &Settings) -> Result<Telemetry, TelemetryError> {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    // Lines go to stderr from a thread of their own, which writes every line queued meanwhile
    // in one `write`: a busy server does not pay a system call per log line on the threads
    // that serve requests. Not lossy: when the queue is full, logging waits.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("agentry-log")
        .finish(std::io::BufWriter::with_capacity(
            LOG_BUFFER_BYTES,
            std::io::stderr(),
        ));
    *log_guard() = Some(guard);
    // Colours only for a person at a terminal; a file or a pipe gets plain text.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    if !ansi && settings.log_format == LogFormat::Text {
        // Fails only when `init` ran before (tests); the first writer stays.
        let _ = RPC_LINES.set(writer.clone());
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    let fmt = match settings.log_format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    }
    // The per-RPC span is for export; its log line carries the same fields itself, so the log
    // layer does not format them when the span opens and each time one is recorded.
    .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
        !(meta.is_span() && meta.name() == RPC_SPAN && meta.target() == RPC_SPAN_TARGET)
    }));

    let (tracer, meter) = match &settings.otlp {
        Otlp::Off => (None, None),
        otlp => {
            let (t, m) = pipelines(otlp, &settings.service_name)?;
            (Some(t), Some(m))
        }
    };
    let otel = tracer.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(SERVICE_NAME))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                !is_transport(meta.target())
            }))
    });
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .with(filter)
        .try_init()
        .map_err(|e| TelemetryError::Subscriber(e.to_string()))?;

    if let (Some(t), Some(m)) = (&tracer, &meter) {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        opentelemetry::global::set_tracer_provider(t.clone());
        opentelemetry::global::set_meter_provider(m.clone());
        METRICS_EXPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(service = %settings.service_name, "exporting spans and metrics over OTLP/gRPC");
    }
    Ok(Telemetry { tracer, meter })
}

fn pipelines(
    otlp: &Otlp,
    service_name: &str,
) -> Result<(SdkTracerProvider, SdkMeterProvider), TelemetryError> {
    if let Ok(p) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
        && p != "grpc"
    {
        eprintln!("agentry: OTEL_EXPORTER_OTLP_PROTOCOL={p} is not supported; using grpc");
    }
    let resource = Resource::builder()
        .with_service_name(service_name.to_owned())
        .build();

    let spans = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    let spans = match otlp {
        Otlp::Endpoint(e) => spans.with_endpoint(e.clone()),
        _ => spans,
    }
    .build()
    .map_err(|e| TelemetryError::Exporter {
        signal: "traces",
        message: e.to_string(),
    })?;
    let tracer = SdkTracerProvider::builder()
        .with_resource(resource.clone())
        .with_batch_exporter(spans)
        .build();

    let metrics = opentelemetry_otlp::MetricExporter::builder().with_tonic();
    let metrics = match otlp {
        Otlp::Endpoint(e) => metrics.with_endpoint(e.clone()),
        _ => metrics,
    }
    .build()
    .map_err(|e| TelemetryError::Exporter {
        signal: "metrics",
        message: e.to_string(),
    })?;
    let meter = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_periodic_exporter(metrics)
        .build();
    Ok((tracer, meter))
}

/// Reads W3C trace context from HTTP/2 headers (gRPC metadata).
struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The remote parent carried by `traceparent` (and `tracestate`) in `headers`; an empty context
/// when there is none or it is malformed.
pub fn parent_from_headers(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Makes the trace context in `headers`, if any, the parent of `span` (which must not have been
/// entered yet). A no-op without OTLP export.
pub fn set_remote_parent(span: &tracing::Span, headers: &http::HeaderMap) {
    // Most calls carry no trace context: one header lookup instead of a propagator run.
    static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
    if !headers.contains_key(&TRACEPARENT) {
        return;
    }
    let parent = parent_from_headers(headers);
    if parent.span().span_context().is_valid() {
        // Fails only when no OpenTelemetry layer is installed (export off) or the span is
        // disabled; there is nothing to link to then.
        let _ = span.set_parent(parent);
    }
}

/// The current span's context as a W3C `traceparent` value
/// (`00-<trace id>-<span id>-<flags>`), for handing to a child process as `TRACEPARENT`.
/// `None` outside a span or without OTLP export.
pub fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// Bucket bounds, in seconds, of every duration histogram: 1 ms to 2 min.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The numbers agentry reports, as OpenTelemetry instruments on the global meter.
///
/// Cheap to clone. Create it after [`init`]: instruments made before a meter provider is
/// installed stay no-ops, which is also what they are when export is off.
#[derive(Clone)]
pub struct Metrics(std::sync::Arc<Instruments>);

/// The instruments behind [`Metrics`], shared: every RPC clones the handle twice (the service
/// stack per connection call, the call's record), and one reference count is cheaper than one
/// per instrument.
struct Instruments {
    rpc_calls: Counter<u64>,
    rpc_duration: Histogram<f64>,
    workers_spawned: Counter<u64>,
    dedupe_hits: Counter<u64>,
    review_decisions: Counter<u64>,
    discovery_duration: Histogram<f64>,
    discovery_diagnostics: Gauge<u64>,
    workers_live: UpDownCounter<i64>,
    /// Whether a meter provider that exports was installed before these instruments were made.
    /// Without one the instruments do nothing, so the attributes are not even built.
    exported: bool,
}

/// Set by [`init`] once metrics are exported.
static METRICS_EXPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Instruments on the global meter `agentry`.
    pub fn new() -> Self {
        let m = opentelemetry::global::meter(SERVICE_NAME);
        let seconds = |name: &'static str, description: &'static str| {
            m.f64_histogram(name)
                .with_description(description)
                .with_unit("s")
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build()
        };
        Self(std::sync::Arc::new(Instruments {
            rpc_calls: m
                .u64_counter("agentry.rpc.calls")
                .with_description("finished RPCs by method and gRPC status code")
                .build(),
            rpc_duration: seconds(
                "agentry.rpc.duration",
                "RPC latency, request headers to end of response, by method and status code",
            ),
            workers_spawned: m
                .u64_counter("agentry.workers.spawned")
                .with_description("spawn attempts by agent and outcome")
                .build(),
            dedupe_hits: m
                .u64_counter("agentry.dedupe.hits")
                .with_description("dispatches answered by an existing identical worker")
                .build(),
            review_decisions: m
                .u64_counter("agentry.review.decisions")
                .with_description("review gate decisions by decision")
                .build(),
            discovery_duration: seconds(
                "agentry.discovery.duration",
                "time to build one discovery snapshot",
            ),
            discovery_diagnostics: m
                .u64_gauge("agentry.discovery.diagnostics")
                .with_description("diagnostics in the latest discovery snapshot")
                .build(),
            workers_live: m
                .i64_up_down_counter("agentry.workers.live")
                .with_description("workers currently in each non-terminal state")
                .build(),
            exported: METRICS_EXPORTED.load(std::sync::atomic::Ordering::Relaxed),
        }))
    }

    /// One finished RPC: `service`/`method` as in the path, `code` the gRPC status code.
    pub fn rpc(&self, service: &str, method: &str, code: tonic::Code, elapsed: Duration) {
        if !self.0.exported {
            return;
        }
        let attrs = [
            KeyValue::new("rpc.service", service.to_owned()),
            KeyValue::new("rpc.method", method.to_owned()),
            KeyValue::new("rpc.grpc.status_code", code as i64),
        ];
        self.0.rpc_calls.add(1, &attrs);
        self.0.rpc_duration.record(elapsed.as_secs_f64(), &attrs);
    }

    /// A spawn of `agent` ended with `outcome`: the final state (`completed`, `failed`, `killed`)
    /// or why it was refused (`denied_<reason>`, `denied_capacity`).
    pub fn worker_spawned(&self, agent: &str, outcome: &str) {
        self.0.workers_spawned.add(
            1,
            &[
                KeyValue::new("agent", agent.to_owned()),
                KeyValue::new("outcome", outcome.to_owned()),
            ],
        );
    }

    /// A worker left state `from` (if it was live) and entered `to`; keeps the number of workers
    /// per live state (`pending`, `running`) current.
    pub fn worker_state(&self, from: Option<&str>, to: &str) {
        if let Some(from) = from {
            self.0
                .workers_live
                .add(-1, &[KeyValue::new("state", from.to_owned())]);
        }
        if matches!(to, "pending" | "running") {
            self.0
                .workers_live
                .add(1, &[KeyValue::new("state", to.to_owned())]);
        }
    }

    /// A dispatch was answered from the dedupe cache.
    pub fn dedupe_hit(&self) {
        self.0.dedupe_hits.add(1, &[]);
    }

    /// The review gate decided (`approved`, `rejected`, `timeout`, …).
    pub fn review_decision(&self, decision: &str) {
        self.0
            .review_decisions
            .add(1, &[KeyValue::new("decision", decision.to_owned())]);
    }

    /// A discovery snapshot was built in `duration` with `diagnostics` diagnostics.
    pub fn discovery(&self, duration: Duration, diagnostics: usize) {
        self.0
            .discovery_duration
            .record(duration.as_secs_f64(), &[]);
        self.0
            .discovery_diagnostics
            .record(u64::try_from(diagnostics).unwrap_or(u64::MAX), &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn export_follows_the_endpoint_variable() {
        let s = Settings::from_env(LogFormat::Json, env(&[]));
        assert_eq!(s.otlp, Otlp::Off);
        assert_eq!(s.service_name, "agentry");
        let s = Settings::from_env(
            LogFormat::Text,
            env(&[
                (ENDPOINT_VAR, "http://c:4317"),
                ("OTEL_SERVICE_NAME", "side"),
            ]),
        );
        assert_eq!(s.otlp, Otlp::FromEnv);
        assert_eq!(s.service_name, "side");
        let s = Settings::from_env(
            LogFormat::Text,
            env(&[
                (ENDPOINT_VAR, "http://c:4317"),
                ("OTEL_SDK_DISABLED", "true"),
            ]),
        );
        assert_eq!(s.otlp, Otlp::Off);
    }

    #[test]
    fn traceparent_round_trips_through_a_span() {
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("t")));
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(current_traceparent(), None);
            let mut headers = http::HeaderMap::new();
            headers.insert(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                    .parse()
                    .unwrap(),
            );
            let span = tracing::info_span!("rpc");
            set_remote_parent(&span, &headers);
            let tp = span.in_scope(current_traceparent).expect("a traceparent");
            let parts: Vec<&str> = tp.split('-').collect();
            assert_eq!(parts[0], "00");
            assert_eq!(parts[1], "0af7651916cd43dd8448eb211c80319c");
            assert_eq!(parts[2].len(), 16);
            assert_ne!(parts[2], "b7ad6b7169203331", "a child span of its own");
            assert_eq!(parts[3], "01");
        });
    }

    #[test]
    fn log_filters_read_rust_log_like_env_filter() {
        let enabled = |rust_log: Option<&str>, level: tracing::Level| {
            let subscriber = tracing_subscriber::registry().with(log_filter(rust_log));
            tracing::subscriber::with_default(subscriber, || match level {
                tracing::Level::DEBUG => tracing::enabled!(tracing::Level::DEBUG),
                tracing::Level::INFO => tracing::enabled!(tracing::Level::INFO),
                _ => tracing::enabled!(tracing::Level::WARN),
            })
        };
        use tracing::Level;
        // The default, and an unusable value, are `info`.
        for spec in [None, Some(""), Some("info"), Some("a=b=c")] {
            assert!(enabled(spec, Level::INFO), "{spec:?}");
            assert!(!enabled(spec, Level::DEBUG), "{spec:?}");
        }
        assert!(!enabled(Some("warn"), Level::INFO));
        assert!(enabled(Some("warn"), Level::WARN));
        assert!(enabled(Some("warn,agentry=debug"), Level::DEBUG));
        assert!(!enabled(Some("warn,other=debug"), Level::DEBUG));
        assert!(!enabled(Some("off"), Level::WARN));
        // A span directive is not a plain target list: the EnvFilter takes it.
        assert!(enabled(Some("info,[rpc]=debug"), Level::INFO));
    }

    #[test]
    fn transport_targets_are_not_exported() {
        assert!(is_transport("h2::proto"));
        assert!(is_transport("tonic"));
        assert!(!is_transport("agentry::grpc"));
        assert!(!is_transport("hyperion"));
    }
}
