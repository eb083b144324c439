//! Telemetry by the OpenTelemetry MCP and GenAI semantic conventions (status
//! Development; MCP and GenAI conventions live in semantic-conventions-genai).
//!
//! - Traces: a SERVER span per downstream request, named
//!   `{mcp.method.name} {gen_ai.tool.name}`; one child span per pipeline
//!   stage; a CLIENT span per upstream call. `traceparent`, `tracestate` and
//!   `baggage` are read from the request's `params._meta` and written into
//!   the upstream request's `_meta`.
//! - Metrics: `mcp.server.operation.duration` and
//!   `mcp.client.operation.duration` (seconds), `toolgate.decisions`, and the
//!   `toolgate.approvals.pending` gauge.
//! - Logs: text or JSON lines on stderr; with JSON, each line carries the
//!   fields of the spans it is in (method, request id, tool, decision).
//!
//! Custom attributes are namespaced: `guardrail.*` and `toolgate.*`
//! (documented in docs/TELEMETRY.md). Export is OTLP over HTTP/protobuf,
//! off unless configured.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::global;
use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde_json::Value;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::{LogFormat, TelemetryConfig};

/// The target of every span toolgate exports.
pub(crate) const TARGET: &str = "toolgate::mcp";
/// The `_meta` keys that carry trace context (W3C trace context, baggage).
const TRACE_KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// Owns the providers; `shutdown` flushes what is buffered.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    /// The Prometheus scrape, until `serve` starts it.
    scrape: Option<crate::prometheus::Scrape>,
}

/// Whether OTLP export is configured (config, else the standard variables).
fn otlp_base(cfg: &TelemetryConfig) -> Option<String> {
    cfg.otlp_endpoint.clone().or_else(|| {
        ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
            .map(|_| String::new())
    })
}

impl Telemetry {
    /// Installs the global subscriber (and, when configured, the OTLP
    /// exporters and the propagator). `default_level` applies when neither
    /// `RUST_LOG` nor `telemetry.log_level` says otherwise.
    pub fn init(
        cfg: &TelemetryConfig,
        tls: &crate::config::TlsConfig,
        default_level: &str,
    ) -> anyhow::Result<Self> {
        global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ]));
        let level = cfg.log_level.clone().unwrap_or_else(|| default_level.to_string());
        let filter =
            || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&level));
        // Log lines are written with every credential the gateway holds
        // withheld (an upstream's stderr, an error it sent, …).
        let fmt = match cfg.log_format {
            // No colours: the writer escapes every control character, ESC included.
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(crate::withheld::Logs { json: false })
                .with_filter(filter())
                .boxed(),
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(crate::withheld::Logs { json: true })
                .with_filter(filter())
                .boxed(),
        };
        let resource = resource(cfg);
        let (tracer, periodic) = match otlp_base(cfg) {
            None => (None, None),
            Some(base) => {
                let (t, m) = exporters(cfg, &base, &resource, tls)?;
                (Some(t), Some(m))
            }
        };
        let scrape = cfg
            .prometheus_listen
            .as_deref()
            .map(crate::prometheus::listen_of)
            .transpose()?
            .map(crate::prometheus::reader);
        // One meter provider, read by OTLP, by the scrape, or both.
        let meter = (periodic.is_some() || scrape.is_some()).then(|| {
            let mut builder = SdkMeterProvider::builder().with_resource(resource);
            if let Some(reader) = periodic {
                builder = builder.with_reader(reader);
            }
            if let Some((reader, _)) = &scrape {
                builder = builder.with_reader(reader.clone());
            }
            builder.build()
        });
        let scrape = scrape.map(|(_, s)| s);
        let otel = tracer.as_ref().map(|p| span_layer(p.tracer("toolgate")));
        tracing_subscriber::registry()
            .with(fmt)
            .with(otel)
            .try_init()
            .context("installing the log subscriber")?;
        if let Some(m) = &meter {
            install_meter_provider(m.clone());
        }
        Ok(Self { tracer, meter, scrape })
    }

    /// The Prometheus scrape, when `telemetry.prometheus_listen` is set:
    /// `serve` starts it.
    pub fn take_scrape(&mut self) -> Option<crate::prometheus::Scrape> {
        self.scrape.take()
    }

    /// Flushes and stops the exporters (at shutdown: nothing buffered is lost).
    pub fn shutdown(self) {
        if let Some(t) = self.tracer {
            let _ = t.shutdown();
        }
        if let Some(m) = self.meter {
            let _ = m.shutdown();
        }
    }
}

/// The layer that turns toolgate's spans into OpenTelemetry spans.
pub fn span_layer<S, T>(tracer: T) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    T: opentelemetry::trace::Tracer + Send + Sync + 'static,
    T::Span: Send + Sync,
{
    // Only the documented attributes: none of the bridge's own.
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::INFO),
        )
}

/// The process as telemetry names it: `service_name`, else `OTEL_SERVICE_NAME`, else `toolgate`.
fn resource(cfg: &TelemetryConfig) -> opentelemetry_sdk::Resource {
    let mut resource = opentelemetry_sdk::Resource::builder();
    if let Some(name) = &cfg.service_name {
        resource = resource.with_service_name(name.clone());
    } else if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("toolgate");
    }
    resource.build()
}

/// The exporters' HTTP client: `https://` trusts the system's roots and
/// `[tls] ca_file`. Built on a thread of its own, as the exporter's default
/// is: a blocking client may not be made or dropped on the async runtime.
fn http_client(tls: &crate::config::TlsConfig) -> anyhow::Result<reqwest::blocking::Client> {
    let roots = tls.roots();
    // No redirect: the exporter's headers (an API key among them) would
    // follow it to a place the config does not name.
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .tls_certs_merge(roots)
            .build()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("building the OTLP HTTP client panicked"))?
    .context("the OTLP HTTP client")
}

fn exporters(
    cfg: &TelemetryConfig,
    base: &str,
    resource: &opentelemetry_sdk::Resource,
    tls: &crate::config::TlsConfig,
) -> anyhow::Result<(
    SdkTracerProvider,
    opentelemetry_sdk::metrics::PeriodicReader<opentelemetry_otlp::MetricExporter>,
)> {
    let http = http_client(tls)?;
    let headers: HashMap<String, String> =
        cfg.otlp_headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    // An empty base means: the endpoint comes from the OTEL_* variables.
    let signal =
        |path: &str| (!base.is_empty()).then(|| format!("{}/{path}", base.trim_end_matches('/')));
    let mut spans = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(http.clone())
        .with_headers(headers.clone());
    if let Some(url) = signal("v1/traces") {
        spans = spans.with_endpoint(url);
    }
    let spans = spans.build().context("the OTLP span exporter")?;
    let mut metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_http_client(http)
        .with_headers(headers);
    if let Some(url) = signal("v1/metrics") {
        metrics = metrics.with_endpoint(url);
    }
    let metrics = metrics.build().context("the OTLP metric exporter")?;
    let mut tracer =
        SdkTracerProvider::builder().with_batch_exporter(spans).with_resource(resource.clone());
    if let Some(ratio) = cfg.sample_ratio {
        tracer =
            tracer.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))));
    }
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(metrics)
        .with_interval(Duration::from_millis(cfg.metrics_interval_ms))
        .build();
    Ok((tracer.build(), reader))
}

/// The trace context a request carries in `params._meta`.
pub(crate) fn trace_context(params: &Value) -> BTreeMap<String, String> {
    let meta = params.get("_meta");
    TRACE_KEYS
        .iter()
        .filter_map(|k| Some((k.to_string(), meta?.get(*k)?.as_str()?.to_string())))
        .collect()
}

/// Makes `span` a child of the trace the request carries, if any.
pub(crate) fn adopt_parent(span: &tracing::Span, carried: &BTreeMap<String, String>) {
    if carried.is_empty() {
        return;
    }
    let carrier: HashMap<String, String> = carried.clone().into_iter().collect();
    let parent = global::get_text_map_propagator(|p| p.extract(&carrier));
    let _ = span.set_parent(parent);
}

/// The trace context to send upstream: `span`'s own when it is recorded
/// (the upstream call becomes its child), else what the client sent.
pub(crate) fn outgoing(
    span: &tracing::Span,
    carried: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    if span.is_disabled() {
        return carried.clone();
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    let cx = span.context();
    global::get_text_map_propagator(|p| p.inject_context(&cx, &mut carrier));
    if carrier.contains_key("traceparent") {
        return carrier.into_iter().collect();
    }
    carried.clone()
}

/// Set once a meter provider is installed: until then, recording is skipped
/// altogether (no attribute allocations on the call path).
static METRICS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn metrics_on() -> bool {
    METRICS_ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Installs `provider` as the global meter provider and turns recording on.
fn install_meter_provider(provider: SdkMeterProvider) {
    global::set_meter_provider(provider);
    METRICS_ON.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The instruments, created on first use (after `init` set the provider).
pub(crate) struct Instruments {
    pub(crate) server_duration: Histogram<f64>,
    pub(crate) client_duration: Histogram<f64>,
    pub(crate) decisions: Counter<u64>,
    pub(crate) budget_refusals: Counter<u64>,
}

/// Bucket boundaries of the MCP operation-duration histograms (seconds).
const DURATION_BUCKETS: [f64; 14] =
    [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

pub(crate) static INSTRUMENTS: LazyLock<Instruments> = LazyLock::new(|| {
    let meter = global::meter("toolgate");
    Instruments {
        server_duration: meter
            .f64_histogram("mcp.server.operation.duration")
            .with_unit("s")
            .with_description("Duration of MCP requests served to agents")
            .with_boundaries(DURATION_BUCKETS.to_vec())
            .build(),
        client_duration: meter
            .f64_histogram("mcp.client.operation.duration")
            .with_unit("s")
            .with_description("Duration of MCP requests toolgate sends upstream")
            .with_boundaries(DURATION_BUCKETS.to_vec())
            .build(),
        decisions: meter
            .u64_counter("toolgate.decisions")
            .with_description("Decisions on tools/call, by verdict, guardrail decision and class")
            .build(),
        budget_refusals: meter
            .u64_counter("toolgate.budget.refusals")
            .with_description(
                "Calls refused by a budget: a caller's rate, a run's calls, a tool's calls at once",
            )
            .build(),
    }
});

/// Values of keys named in `keys` (case-insensitive, at any depth) and
/// strings matching `patterns` are replaced by `[REDACTED]`.
pub(crate) struct Redactor {
    keys: Vec<String>,
    patterns: Vec<regex::Regex>,
}

impl Redactor {
    pub(crate) fn new(cfg: &TelemetryConfig) -> Self {
        Self {
            keys: cfg.redact_keys.iter().map(|k| k.to_ascii_lowercase()).collect(),
            // Validated with the config.
            patterns: cfg
                .redact_patterns
                .iter()
                .filter_map(|p| regex::Regex::new(p).ok())
                .collect(),
        }
    }

    pub(crate) fn redact(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| {
                    let secret =
                        self.keys.iter().any(|s| k.to_ascii_lowercase().contains(s.as_str()));
                    (k.clone(), if secret { Value::from("[REDACTED]") } else { self.redact(v) })
                })
                .collect::<serde_json::Map<_, _>>()
                .into(),
            Value::Array(items) => items.iter().map(|v| self.redact(v)).collect::<Vec<_>>().into(),
            Value::String(s) if self.patterns.iter().any(|p| p.is_match(s)) => {
                Value::from("[REDACTED]")
            }
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redaction_covers_keys_at_any_depth_and_patterns() {
        let cfg = TelemetryConfig {
            redact_patterns: vec![r"\b\d{4}-\d{4}-\d{4}-\d{4}\b".into()],
            ..Default::default()
        };
        let r = Redactor::new(&cfg);
        let out = r.redact(&json!({"to": "a@b.c", "Password": "x", "nested": [{"api_key": "k", "note": "card 4111-1111-1111-1111"}]}));
        assert_eq!(
            out,
            json!({"to": "a@b.c", "Password": "[REDACTED]", "nested": [{"api_key": "[REDACTED]", "note": "[REDACTED]"}]})
        );
    }

    #[test]
    fn trace_context_is_read_from_meta_only() {
        let params = json!({"_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "baggage": "a=1", "other": "x"}, "traceparent": "ignored"});
        let cx = trace_context(&params);
        assert_eq!(cx.len(), 2);
        assert_eq!(cx["baggage"], "a=1");
    }
}

/// `toolgate.approvals.pending`: approvals waiting for a decision; and
/// `toolgate.notices.dead`: notices nobody received. A gauge's callback
/// cannot wait on the ledger, so a task keeps the counts fresh and the
/// callbacks read them.
pub(crate) fn watch_approvals(
    ledger: std::sync::Arc<dyn toolgate_ledger::Ledger>,
    stop: tokio_util::sync::CancellationToken,
) {
    if !metrics_on() {
        return;
    }
    let pending = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let dead = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (seen, seen_dead) = (pending.clone(), dead.clone());
    tokio::spawn(async move {
        loop {
            if let Ok(n) =
                ledger.count_approvals(toolgate_core::approval::ApprovalState::Pending).await
            {
                seen.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            if let Ok(n) = ledger.count_notices(toolgate_ledger::NoticeState::Dead).await {
                seen_dead.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
    });
    let _gauge = global::meter("toolgate")
        .u64_observable_gauge("toolgate.approvals.pending")
        .with_description("Approvals waiting for a named approver")
        .with_callback(move |observer| {
            observer.observe(pending.load(std::sync::atomic::Ordering::Relaxed), &[])
        })
        .build();
    let _dead = global::meter("toolgate")
        .u64_observable_gauge("toolgate.notices.dead")
        .with_description("Approval notices whose webhook's attempts ran out (console: Notices)")
        .with_callback(move |observer| {
            observer.observe(dead.load(std::sync::atomic::Ordering::Relaxed), &[])
        })
        .build();
}
