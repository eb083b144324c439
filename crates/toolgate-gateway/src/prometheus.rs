//! The metrics OTLP exports, also as a Prometheus scrape: `GET /metrics` on
//! `[telemetry] prometheus_listen` (off unless set), in the Prometheus text
//! format 0.0.4. The meter provider gets one more reader, read on each
//! scrape (cumulative, as Prometheus expects), so a scrape is as fresh as
//! the counters and costs nothing between scrapes.
//!
//! Names follow the OpenTelemetry-to-Prometheus rules: dots become
//! underscores, a unit of seconds adds `_seconds`, a counter adds `_total`;
//! attribute keys become labels the same way.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::response::IntoResponse as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// The reader the meter provider owns; the same reader is scraped.
#[derive(Debug, Clone)]
pub(crate) struct Shared(Arc<ManualReader>);

impl MetricReader for Shared {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// A reader for the meter provider, and the scrape endpoint that reads it.
pub(crate) fn reader(listen: SocketAddr) -> (Shared, Scrape) {
    let reader =
        Shared(Arc::new(ManualReader::builder().with_temporality(Temporality::Cumulative).build()));
    (reader.clone(), Scrape { reader, listen })
}

/// The scrape endpoint, not yet listening.
pub struct Scrape {
    reader: Shared,
    listen: SocketAddr,
}

impl Scrape {
    /// Where it is to listen (`prometheus_listen`).
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// `GET /metrics`, read fresh on each request; the caller serves it on
    /// a listener of its own, as it serves its others (plain or TLS).
    pub fn router(self) -> axum::Router {
        let reader = self.reader;
        axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let reader = reader.clone();
                async move {
                    let mut rm = ResourceMetrics::default();
                    match reader.collect(&mut rm) {
                        Ok(()) => (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "text/plain; version=0.0.4; charset=utf-8",
                            )],
                            render(&rm),
                        )
                            .into_response(),
                        Err(e) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("metrics unavailable: {e}\n"),
                        )
                            .into_response(),
                    }
                }
            }),
        )
    }
}

/// The Prometheus text of everything collected.
pub(crate) fn render(rm: &ResourceMetrics) -> String {
    let mut out = String::new();
    for metric in rm.scope_metrics().flat_map(|s| s.metrics()) {
        match metric.data() {
            AggregatedMetrics::F64(data) => family(&mut out, metric, data, |v| *v),
            AggregatedMetrics::U64(data) => family(&mut out, metric, data, |v| *v as f64),
            AggregatedMetrics::I64(data) => family(&mut out, metric, data, |v| *v as f64),
        }
    }
    out
}

fn family<T: Copy>(
    out: &mut String,
    metric: &Metric,
    data: &MetricData<T>,
    num: impl Fn(&T) -> f64,
) {
    let mut name = sanitize(metric.name());
    if metric.unit() == "s" && !name.ends_with("_seconds") {
        name.push_str("_seconds");
    }
    let help = metric.description().replace('\\', "\\\\").replace('\n', "\\n");
    match data {
        MetricData::Sum(sum) => {
            let (name, kind) = if sum.is_monotonic() {
                (format!("{name}_total"), "counter")
            } else {
                (name, "gauge")
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for p in sum.data_points() {
                let _ = writeln!(
                    out,
                    "{name}{} {}",
                    labels(p.attributes(), None),
                    number(num(&p.value()))
                );
            }
        }
        MetricData::Gauge(gauge) => {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for p in gauge.data_points() {
                let _ = writeln!(
                    out,
                    "{name}{} {}",
                    labels(p.attributes(), None),
                    number(num(&p.value()))
                );
            }
        }
        MetricData::Histogram(histogram) => {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for p in histogram.data_points() {
                let mut cumulative = 0;
                let bounds: Vec<String> =
                    p.bounds().map(number).chain(["+Inf".to_string()]).collect();
                for (le, count) in bounds.iter().zip(p.bucket_counts()) {
                    cumulative += count;
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {cumulative}",
                        labels(p.attributes(), Some(le))
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_sum{} {}",
                    labels(p.attributes(), None),
                    number(num(&p.sum()))
                );
                let _ = writeln!(out, "{name}_count{} {}", labels(p.attributes(), None), p.count());
            }
        }
        // toolgate records none (its histograms have explicit buckets).
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// `{k="v",…}` of the attributes (and `le`), or nothing when there are none.
fn labels<'a>(
    attributes: impl Iterator<Item = &'a opentelemetry::KeyValue>,
    le: Option<&str>,
) -> String {
    let mut pairs: Vec<String> = attributes
        .map(|kv| format!("{}=\"{}\"", sanitize(kv.key.as_str()), escape(&kv.value.to_string())))
        .collect();
    pairs.sort();
    pairs.extend(le.map(|le| format!("le=\"{le}\"")));
    if pairs.is_empty() { String::new() } else { format!("{{{}}}", pairs.join(",")) }
}

/// A metric or label name: `[a-zA-Z_:][a-zA-Z0-9_:]*`, other characters as `_`.
fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        (if v > 0.0 { "+Inf" } else { "-Inf" }).to_string()
    } else {
        format!("{v}")
    }
}

/// Where a scrape listens, for `serve` to start it.
pub(crate) fn listen_of(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.parse()
        .map_err(|e| anyhow::anyhow!("telemetry.prometheus_listen `{addr}` is not an address: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    #[test]
    fn counters_gauges_and_histograms_render_as_prometheus_text() {
        let (reader, scrape) = reader("127.0.0.1:0".parse().unwrap());
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        let meter = provider.meter("toolgate");
        let decisions =
            meter.u64_counter("toolgate.decisions").with_description("Decisions").build();
        decisions.add(
            2,
            &[
                KeyValue::new("guardrail.decision", "allow"),
                KeyValue::new("toolgate.decision.reason", "auto\"matic"),
            ],
        );
        let duration = meter
            .f64_histogram("mcp.server.operation.duration")
            .with_unit("s")
            .with_boundaries(vec![0.01, 0.1])
            .build();
        duration.record(0.05, &[KeyValue::new("mcp.method.name", "tools/call")]);
        duration.record(0.5, &[KeyValue::new("mcp.method.name", "tools/call")]);
        let mut rm = ResourceMetrics::default();
        scrape.reader.collect(&mut rm).unwrap();
        let text = render(&rm);
        for line in [
            "# TYPE toolgate_decisions_total counter",
            r#"toolgate_decisions_total{guardrail_decision="allow",toolgate_decision_reason="auto\"matic"} 2"#,
            "# TYPE mcp_server_operation_duration_seconds histogram",
            r#"mcp_server_operation_duration_seconds_bucket{mcp_method_name="tools/call",le="0.01"} 0"#,
            r#"mcp_server_operation_duration_seconds_bucket{mcp_method_name="tools/call",le="0.1"} 1"#,
            r#"mcp_server_operation_duration_seconds_bucket{mcp_method_name="tools/call",le="+Inf"} 2"#,
            r#"mcp_server_operation_duration_seconds_sum{mcp_method_name="tools/call"} 0.55"#,
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }
}
