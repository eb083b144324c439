//! record: one structured log line per call, with what each stage concluded.
//! (Receipts and the ledger take over this stage in later issues.)

use std::time::Duration;

use toolgate_core::Decision;

use crate::pipeline::{Answer, CallRequest};

/// What the stages learned, for the record.
pub struct Trail {
    pub tool: String,
    pub request_id: String,
    pub proposal_sha256: Option<String>,
    pub decision: Option<Decision>,
    pub policy_version: Option<String>,
    pub approval_id: Option<String>,
    /// The operation this call ran or replayed: (id, replayed).
    pub operation: Option<(String, bool)>,
    pub caller: String,
    pub tool_error: bool,
    pub input_required: bool,
    pub output_violations: usize,
}

impl Trail {
    pub fn new(call: &CallRequest) -> Self {
        Self {
            tool: call.name.clone(),
            request_id: call.request_id.as_ref().map(|id| serde_json::to_string(id).unwrap_or_default()).unwrap_or_default(),
            proposal_sha256: None,
            decision: None,
            policy_version: None,
            approval_id: None,
            operation: None,
            caller: call.caller.name.clone(),
            tool_error: false,
            input_required: false,
            output_violations: 0,
        }
    }
}

pub fn record(trail: &Trail, answer: &Answer, elapsed: Duration) {
    let (outcome, reason, action) = match answer {
        Answer::Result(_) if trail.tool_error => ("tool_error", String::new(), String::new()),
        Answer::Result(_) if trail.input_required => ("input_required", String::new(), String::new()),
        Answer::Result(_) => ("completed", String::new(), String::new()),
        Answer::Refused(r) => ("refused", json_name(&r.reason), json_name(&r.action)),
        Answer::Error(e) => ("protocol_error", e.code.to_string(), String::new()),
    };
    let decision = trail.decision.as_ref().map(|d| json_name(&d.verdict)).unwrap_or_default();
    let proposal = match answer {
        Answer::Refused(r) => r.proposal_sha256.as_deref().or(trail.proposal_sha256.as_deref()),
        _ => trail.proposal_sha256.as_deref(),
    };
    tracing::info!(
        target: "toolgate::call",
        tool = %trail.tool,
        request_id = %trail.request_id,
        proposal_sha256 = proposal.unwrap_or(""),
        decision = %decision,
        rules = %trail.decision.as_ref().map(|d| d.rules.join(",")).unwrap_or_default(),
        caller = %trail.caller,
        policy_version = trail.policy_version.as_deref().unwrap_or(""),
        approval = trail.approval_id.as_deref().or(match answer {
            Answer::Refused(r) => r.approval_id.as_deref(),
            _ => None,
        }).unwrap_or(""),
        operation = trail.operation.as_ref().map_or("", |(id, _)| id.as_str()),
        replayed = trail.operation.as_ref().is_some_and(|(_, r)| *r),
        outcome,
        reason = %reason,
        action = %action,
        output_violations = trail.output_violations,
        elapsed_us = elapsed.as_micros() as u64,
        trace_id = %trace_id(),
        "tools/call"
    );
}

/// The wire name of a serde enum value (`require_approval`, `escalate`, …).
pub fn json_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The trace this call belongs to, when it is being traced (so a log line
/// and its span can be joined).
fn trace_id() -> String {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if sc.is_valid() { sc.trace_id().to_string() } else { String::new() }
}
