//! dispatch: the call goes upstream under its deadline. When the outcome of a
//! write cannot be known (a timeout, a connection lost after sending), the
//! caller is told to reconcile, never to retry blindly.

use serde_json::value::RawValue;
use toolgate_core::{Action, Clock, Proposal, Reason, Refusal, Verdict};
use tracing::Instrument as _;

use crate::call::{Call, Context, Stop};
use crate::catalog::ExposedTool;
use crate::identity::Presented;
use toolgate_mcp::param_headers;
use toolgate_mcp::upstream::{CallOptions, Kind, Upstream, UpstreamError};

/// `input` is the client's `inputResponses`/`requestState` as the upstream
/// may see them (the approve stage removed toolgate's own).
/// `presented` is what the call carries for its person (present).
pub(crate) async fn dispatch(
    upstream: Option<&Upstream>,
    tool: &ExposedTool,
    proposal: &Proposal,
    (cx, call): (&Context, &Call),
    input: serde_json::Map<String, serde_json::Value>,
    presented: &Presented,
    clock: &dyn Clock,
) -> Result<Box<RawValue>, Stop> {
    let Some(upstream) = upstream else {
        return Err(unavailable(tool, proposal, "not configured"));
    };
    // The upstream may route on Mcp-Param-* headers too: send what its schema declares.
    let mut headers: Vec<(String, String)> = param_headers::declared(
        tool.tool.definition.get("inputSchema").unwrap_or(&serde_json::Value::Null),
    )
    .into_iter()
    .filter_map(|(header, arg)| {
        let value = proposal.arguments.get(&arg)?;
        let text = value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
        Some((header, param_headers::encode(&text)))
    })
    .collect();
    headers.extend(presented.headers.iter().cloned());
    // The CLIENT span of the upstream call; the upstream joins its trace.
    let method = tool.kind.method();
    let span = tracing::info_span!(target: crate::telemetry::TARGET, "mcp.client",
        otel.name = %format!("{method} {}", tool.tool.name), otel.kind = "client", otel.status_code = tracing::field::Empty,
        mcp.method.name = method, gen_ai.operation.name = tracing::field::Empty, gen_ai.tool.name = tracing::field::Empty,
        server.address = %tool.server, error.type = tracing::field::Empty);
    if tool.kind == Kind::Tool {
        span.record("gen_ai.operation.name", "execute_tool");
        span.record("gen_ai.tool.name", tool.tool.name.as_str());
    }
    let mut meta = crate::telemetry::outgoing(&span, &cx.trace);
    if let Some((key, value)) = &presented.meta {
        meta.insert(key.to_string(), value.clone());
    }
    let options = CallOptions {
        progress: call.progress.clone(),
        headers,
        input,
        // Only a 2026-07-28 client answers an upstream's input requests; a
        // legacy client's (its session's, kept for toolgate's own question) stay here.
        client_capabilities: call
            .client_capabilities
            .clone()
            .filter(|_| cx.era == toolgate_mcp::wire::Era::Modern),
        meta,
        // Checked by admit; the caller may only shorten the server's deadline.
        deadline: call.deadline().ok().flatten(),
    };
    let started = clock.instant();
    // A resource is read at the upstream's own URI, behind the exposed one.
    let arguments = match tool.kind {
        Kind::Resource | Kind::Template => std::borrow::Cow::Owned(
            serde_json::json!({"uri": tool.upstream_uri(proposal.arguments["uri"].as_str().unwrap_or_default())}),
        ),
        Kind::Tool | Kind::Prompt => std::borrow::Cow::Borrowed(&proposal.arguments),
    };
    let outcome = upstream
        .call(tool.kind, &tool.tool.name, &arguments, options)
        .instrument(span.clone())
        .await;
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
            opentelemetry::KeyValue::new("mcp.method.name", method),
            opentelemetry::KeyValue::new("gen_ai.tool.name", tool.tool.name.clone()),
            opentelemetry::KeyValue::new("server.address", tool.server.clone()),
        ];
        attributes.extend(error_type.map(|e| opentelemetry::KeyValue::new("error.type", e)));
        crate::telemetry::INSTRUMENTS
            .client_duration
            .record(clock.instant().saturating_duration_since(started).as_secs_f64(), &attributes);
    }
    match outcome {
        Ok(raw) => Ok(raw),
        Err(UpstreamError::Rpc(e)) => Err(Stop::Error(e)),
        Err(UpstreamError::Unavailable(why)) | Err(UpstreamError::Rejected(why)) => {
            Err(unavailable(tool, proposal, &why))
        }
        // The credential made for the person was refused: their own
        // (`identity`), which the pipeline then stops trusting; else the
        // server's configured one.
        Err(UpstreamError::Unauthorized(why)) if presented.identity.mode != "shared" => {
            tracing::warn!(server = %tool.server, tool = %tool.exposed_name, %why, "the server refused the person's credential");
            Err(Stop::Refused(
                Refusal::new(
                    Verdict::Allow,
                    Reason::IdentityUnavailable,
                    Action::Retry,
                    format!(
                        "the server `{}` refused the credential made for you (HTTP 401); nothing \
                            was run: call again, which renews it (or asks you to connect again)",
                        tool.server
                    ),
                )
                .with_proposal(&proposal.sha256),
            ))
        }
        Err(UpstreamError::Unauthorized(why)) => Err(unavailable(tool, proposal, &why)),
        // Sent, and then no usable answer: for a write, the effect is unknown.
        Err(e @ (UpstreamError::Timeout | UpstreamError::Lost(_) | UpstreamError::Protocol(_))) => {
            tracing::warn!(server = %tool.server, tool = %tool.exposed_name, error = %e, "upstream outcome unknown");
            let (reason, what) = match &e {
                UpstreamError::Timeout => {
                    (Reason::UpstreamTimeout, "did not answer before the deadline".to_string())
                }
                _ => (Reason::OutcomeUnknown, "gave no usable answer".to_string()),
            };
            let refusal = if tool.read_only() {
                Refusal::new(
                    Verdict::Allow,
                    reason,
                    Action::Retry,
                    format!("{} {what}; it is read-only, so retrying is safe", tool.exposed_name),
                )
            } else {
                Refusal::new(
                    Verdict::Allow,
                    Reason::OutcomeUnknown,
                    Action::Reconcile,
                    format!(
                        "{} {what}; it may or may not have taken effect — check before calling again",
                        tool.exposed_name
                    ),
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

#[cfg(test)]
mod tests;
