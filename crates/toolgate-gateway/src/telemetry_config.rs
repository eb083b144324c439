//! `[telemetry]`: traces, metrics and logs (`telemetry`, `prometheus`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// Telemetry: OTLP export (HTTP/protobuf) is off unless an endpoint is
/// configured here or in `OTEL_EXPORTER_OTLP_ENDPOINT` /
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the other `OTEL_*` variables
/// (headers, sampler, service name, resource) apply as the SDK reads them.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Base URL of an OTLP/HTTP receiver, e.g. `http://127.0.0.1:4318`
    /// (traces go to `/v1/traces`, metrics to `/v1/metrics`).
    pub(crate) otlp_endpoint: Option<String>,
    /// Extra headers for the receiver (credentials: never logged).
    pub(crate) otlp_headers: BTreeMap<String, String>,
    /// Fraction of new traces sampled (a sampled parent is always followed).
    pub(crate) sample_ratio: Option<f64>,
    pub(crate) service_name: Option<String>,
    /// `text` or `json` log lines on stderr.
    pub(crate) log_format: LogFormat,
    /// Log filter when `RUST_LOG` is not set (unset: the command's own
    /// default, e.g. `error` for `demo`).
    pub(crate) log_level: Option<String>,
    /// How often metrics are exported.
    pub(crate) metrics_interval_ms: u64,
    /// Where `GET /metrics` serves the same metrics as Prometheus text
    /// (off unless set; its own listener, so it can stay inside a network).
    pub(crate) prometheus_listen: Option<String>,
    /// Record `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` on
    /// spans. Off by default; values under `redact_keys` and strings that
    /// match `redact_patterns` are replaced.
    pub(crate) capture_content: bool,
    pub(crate) redact_keys: Vec<String>,
    pub(crate) redact_patterns: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_headers: BTreeMap::new(),
            sample_ratio: None,
            service_name: None,
            log_format: LogFormat::Text,
            log_level: None,
            metrics_interval_ms: 10_000,
            prometheus_listen: None,
            capture_content: false,
            redact_keys: [
                "password",
                "passwd",
                "secret",
                "token",
                "api_key",
                "apikey",
                "authorization",
                "credential",
                "private_key",
                "card_number",
            ]
            .map(String::from)
            .to_vec(),
            redact_patterns: Vec::new(),
        }
    }
}

impl TelemetryConfig {
    /// What is wrong with `[telemetry]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = self.sample_ratio.filter(|r| !(0.0..=1.0).contains(r)) {
            out.push(format!("telemetry.sample_ratio {r} must be between 0 and 1"));
        }
        for p in &self.redact_patterns {
            if let Err(e) = regex::Regex::new(p) {
                out.push(format!(
                    "telemetry.redact_patterns: `{p}` is not a regular expression: {e}"
                ));
            }
        }
        if let Some(url) = self
            .otlp_endpoint
            .as_deref()
            .filter(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            out.push(format!(
                "telemetry.otlp_endpoint `{url}` must start with http:// or https://"
            ));
        }
        out
    }
}
