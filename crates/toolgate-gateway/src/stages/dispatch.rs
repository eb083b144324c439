//! dispatch: the call goes upstream under its deadline. When the outcome of a
//! write cannot be known (a timeout, a connection lost after sending), the
//! caller is told to reconcile, never to retry blindly.

use serde_json::value::RawValue;
use tracing::Instrument as _;
use toolgate_core::{Action, Proposal, Reason, Refusal, Verdict};

use crate::call::{CallRequest, Stop};
use crate::catalog::ExposedTool;
use crate::downstream::param_headers;
use crate::upstream::{CallOptions, Upstream, UpstreamError};

/// `input` is the client's `inputResponses`/`requestState` as the upstream
/// may see them (the approve stage removed toolgate's own).
pub async fn dispatch(upstream: Option<&Upstream>, tool: &ExposedTool, proposal: &Proposal, call: &CallRequest, input: serde_json::Map<String, serde_json::Value>) -> Result<Box<RawValue>, Stop> {
    let Some(upstream) = upstream else {
        return Err(unavailable(tool, proposal, "not configured"));
    };
    // The upstream may route on Mcp-Param-* headers too: send what its schema declares.
    let headers = param_headers::declared(tool.tool.definition.get("inputSchema").unwrap_or(&serde_json::Value::Null))
        .into_iter()
        .filter_map(|(header, arg)| {
            let value = proposal.arguments.get(&arg)?;
            let text = value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
            Some((header, param_headers::encode(&text)))
        })
        .collect();
    // The CLIENT span of the upstream call; the upstream joins its trace.
    let span = tracing::info_span!(target: crate::telemetry::TARGET, "mcp.client",
        otel.name = %format!("tools/call {}", tool.tool.name), otel.kind = "client", otel.status_code = tracing::field::Empty,
        mcp.method.name = "tools/call", gen_ai.operation.name = "execute_tool", gen_ai.tool.name = %tool.tool.name,
        server.address = %tool.server, error.type = tracing::field::Empty);
    let options = CallOptions {
        progress: call.progress.clone(),
        headers,
        input,
        client_capabilities: call.client_capabilities.clone(),
        meta: crate::telemetry::outgoing(&span, &call.trace),
    };
    let started = std::time::Instant::now();
    let outcome = upstream.call_tool(&tool.tool.name, &proposal.arguments, options).instrument(span.clone()).await;
    let observed = !span.is_disabled() || crate::telemetry::metrics_on();
    let error_type = match &outcome {
        _ if !observed => None,
        Ok(raw) if raw.get().contains("\"isError\":true") => Some("tool_error".to_string()),
        Ok(_) => None,
        Err(UpstreamError::Rpc(e)) => Some(e.code.to_string()),
        Err(UpstreamError::Timeout) => Some("timeout".into()),
        Err(_) => Some("transport_error".into()),
    };
    if let Some(e) = &error_type {
        span.record("error.type", e.as_str());
        span.record("otel.status_code", "ERROR");
    }
    if crate::telemetry::metrics_on() {
        let mut attributes = vec![
            opentelemetry::KeyValue::new("mcp.method.name", "tools/call"),
            opentelemetry::KeyValue::new("gen_ai.tool.name", tool.tool.name.clone()),
            opentelemetry::KeyValue::new("server.address", tool.server.clone()),
        ];
        attributes.extend(error_type.map(|e| opentelemetry::KeyValue::new("error.type", e)));
        crate::telemetry::INSTRUMENTS.client_duration.record(started.elapsed().as_secs_f64(), &attributes);
    }
    match outcome {
        Ok(raw) => Ok(raw),
        Err(UpstreamError::Rpc(e)) => Err(Stop::Error(e)),
        Err(UpstreamError::Unavailable(why)) | Err(UpstreamError::Rejected(why)) => Err(unavailable(tool, proposal, &why)),
        // Sent, and then no usable answer: for a write, the effect is unknown.
        Err(e @ (UpstreamError::Timeout | UpstreamError::Lost(_) | UpstreamError::Protocol(_))) => {
            tracing::warn!(server = %tool.server, tool = %tool.exposed_name, error = %e, "upstream outcome unknown");
            let (reason, what) = match &e {
                UpstreamError::Timeout => (Reason::UpstreamTimeout, "did not answer before the deadline".to_string()),
                _ => (Reason::OutcomeUnknown, "gave no usable answer".to_string()),
            };
            let refusal = if tool.read_only() {
                Refusal::new(Verdict::Allow, reason, Action::Retry, format!("{} {what}; it is read-only, so retrying is safe", tool.exposed_name))
            } else {
                Refusal::new(
                    Verdict::Allow,
                    Reason::OutcomeUnknown,
                    Action::Reconcile,
                    format!("{} {what}; it may or may not have taken effect — check before calling again", tool.exposed_name),
                )
            };
            Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)))
        }
    }
}

fn unavailable(tool: &ExposedTool, proposal: &Proposal, why: &str) -> Stop {
    tracing::warn!(server = %tool.server, tool = %tool.exposed_name, %why, "upstream unavailable for a call");
    Stop::Refused(
        Refusal::new(
            Verdict::Allow,
            Reason::UpstreamUnavailable,
            Action::Retry,
            format!("the server `{}` is unavailable; nothing was run, retry later", tool.server),
        )
        .with_proposal(&proposal.sha256),
    )
}
