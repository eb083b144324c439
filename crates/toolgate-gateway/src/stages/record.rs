//! record: the call's signed receipts and one structured log line.
//!
//! Every call gets a receipt for its decision and outcome, each drafted
//! here from the `Findings` the pipeline gathered (and built by core's one
//! receipt builder). A write sent upstream gets two, which the pipeline
//! hands to the ledger calls that reserve and finish its operation; an
//! approval opened gets its receipt in the transaction that opens it; a
//! read gets one, after its answer, since nothing durable happens in
//! between. `record` appends whatever was not committed already
//! (refusals, reads, replays). A read whose receipt cannot be written is
//! not answered: the caller gets `ledger_unavailable` instead of an
//! unrecorded result.

use std::time::Duration;

use serde_json::Value;
use toolgate_core::operation::OperationState;
use toolgate_core::receipt::build::{Event, Subject, build};
use toolgate_core::receipt::{self, ApprovalRef, OperationRef};
use toolgate_core::{Action, Decision, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::Draft;

use toolgate_core::approval::ApprovalState;

use crate::call::{Answer, CallRequest};
use crate::catalog::ExposedTool;
use crate::gateway::Gateway;

/// What the stages concluded, gathered by the pipeline (and only there)
/// for the receipts and the log line.
pub struct Findings {
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
    pub tenant: String,
    /// From resolve on: the upstream tool and its definition's hash.
    pub server: String,
    pub upstream_tool: String,
    pub definition_sha256: String,
    /// From validate on: this call's salt and the salted hash of its arguments.
    pub salt: [u8; 32],
    pub arguments_hash: String,
    /// The full arguments, when `receipts.capture_values` is on.
    pub arguments: Option<Value>,
    /// What was asked, for the ledger's private record (`toolgate replay`):
    /// a JSON object's text without its closing brace, which `asked()`
    /// completes with how the call was decided.
    pub asked: Option<String>,
    /// The state of the approval the call presented, if it presented one of this call.
    pub approval_state: Option<ApprovalState>,
    /// The call went upstream (its outcome deserves a receipt).
    pub dispatched: bool,
    /// The operation's key and state as last recorded.
    pub operation_ref: Option<OperationRef>,
    /// Receipts already committed with the ledger's state (0, 1 or 2).
    pub receipts: u8,
}

impl Findings {
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
            tenant: call.caller.tenant.clone(),
            server: String::new(),
            upstream_tool: String::new(),
            definition_sha256: String::new(),
            salt: [0; 32],
            arguments_hash: String::new(),
            arguments: None,
            asked: None,
            approval_state: None,
            dispatched: false,
            operation_ref: None,
            receipts: 0,
        }
    }

    pub fn resolved(&mut self, tool: &ExposedTool) {
        self.server = tool.server.clone();
        self.upstream_tool = tool.tool.name.clone();
        self.definition_sha256 = tool.definition_sha256.clone();
    }

    /// After validate: the salted hash, and what `toolgate replay` needs to
    /// decide this call again (the caller, the tool's facts, the arguments,
    /// and the class decision that applies where no policy does).
    pub fn validated(&mut self, gw: &Gateway, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal) {
        self.proposal_sha256 = Some(proposal.sha256.clone());
        self.salt = gw.log.salt();
        self.arguments_hash = receipt::salted_hash(&self.salt, proposal.canonical_arguments.as_bytes());
        if gw.config.receipts.capture_values {
            self.arguments = Some(proposal.arguments.clone());
        }
        let fallback = toolgate_core::decision::decide_by_class(&tool.view);
        let c = &call.caller;
        // Serialized from borrows, once: building it as a `Value` copied the
        // arguments twice per call.
        let asked = Asked {
            caller: AskedCaller { name: &c.name, subject: &c.subject, tenant: &c.tenant, roles: &c.roles },
            tool: AskedTool { exposed_name: &tool.exposed_name, server: &tool.server, name: &tool.tool.name, class: tool.view.effective_class.as_str(), labels: &tool.labels },
            arguments: &proposal.arguments,
            class_decision: &fallback,
        };
        self.asked = serde_json::to_string(&asked).ok().and_then(|mut text| text.pop().map(|_| text));
    }

    /// The private record of what was asked and how it was decided, kept
    /// with the call's first receipt.
    fn asked(&self) -> Option<String> {
        let decision = serde_json::to_string(self.decision.as_ref()?).ok()?;
        let state = serde_json::to_string(self.approval_state.map_or("none", ApprovalState::as_str)).ok()?;
        Some(format!("{},\"approval_state\":{state},\"decision\":{decision}}}", self.asked.as_ref()?))
    }
}

#[derive(serde::Serialize)]
struct Asked<'a> {
    caller: AskedCaller<'a>,
    tool: AskedTool<'a>,
    arguments: &'a Value,
    class_decision: &'a Decision,
}

#[derive(serde::Serialize)]
struct AskedCaller<'a> {
    name: &'a str,
    subject: &'a str,
    tenant: &'a str,
    roles: &'a [String],
}

#[derive(serde::Serialize)]
struct AskedTool<'a> {
    exposed_name: &'a str,
    server: &'a str,
    name: &'a str,
    class: &'a str,
    labels: &'a [String],
}

/// What every receipt of this call shares, for the one builder.
fn subject<'a>(gw: &Gateway, findings: &'a Findings, policy_version: &'a str) -> Subject<'a> {
    Subject {
        issued_at_ms: gw.clock.now_ms(),
        tenant: &findings.tenant,
        caller: &findings.caller,
        server: &findings.server,
        tool: if findings.upstream_tool.is_empty() { &findings.tool } else { &findings.upstream_tool },
        tool_definition_sha256: &findings.definition_sha256,
        proposal_sha256: findings.proposal_sha256.as_deref().unwrap_or_default(),
        decision: findings.decision.as_ref(),
        policy_version,
        operation: findings.operation_ref.clone(),
        salt: &findings.salt,
        arguments_hash: &findings.arguments_hash,
        captured: findings.arguments.as_ref(),
    }
}

/// Drafts the receipt of `event`; `first` carries the private record of
/// what was asked (one per call, with its first receipt).
fn draft(gw: &Gateway, findings: &Findings, event: Event, first: bool) -> Draft {
    let current;
    let version = match &findings.policy_version {
        Some(v) => v.as_str(),
        None => {
            current = gw.policy();
            current.version()
        }
    };
    let receipt = build(&subject(gw, findings, version), event);
    gw.log.draft(receipt, findings.salt, if first { findings.asked() } else { None })
}

/// The decision to run a call, before it is sent. For a write it goes with
/// the operation's reservation.
pub fn decided(gw: &Gateway, findings: &Findings, approval: Option<ApprovalRef>) -> Draft {
    draft(gw, findings, Event::Authorized { approval }, true)
}

/// How a sent call ended: `state` as the operation records it, `result`
/// the upstream's answer when there is one.
pub fn outcome(gw: &Gateway, findings: &Findings, state: OperationState, result: Option<&str>) -> Draft {
    let value = result.map(|text| serde_json::from_str(text).unwrap_or(Value::Null));
    draft(gw, findings, Event::Dispatched { state, result: value.as_ref() }, false)
}

/// The approval a call ran under, as the ledger recorded its decision.
pub async fn approval_ref(gw: &Gateway, id: Option<&str>) -> Option<ApprovalRef> {
    let a = gw.ledger.approval(id?).await.ok()??;
    Some(ApprovalRef { id: a.id, approver: a.decided_by.unwrap_or_default(), decided_at: a.decided_ms.map(receipt::rfc3339_ms).unwrap_or_default() })
}

/// Appends what the reserve stage did not, then logs the call. Returns the
/// answer, or a refusal when a result's receipts could not be written.
pub async fn record(gw: &Gateway, findings: &Findings, answer: Answer, elapsed: Duration) -> Answer {
    let answer = if findings.receipts == 0 { append(gw, findings, answer).await } else { answer };
    log_line(findings, &answer, elapsed);
    answer
}

async fn append(gw: &Gateway, findings: &Findings, answer: Answer) -> Answer {
    let approval = approval_ref(gw, findings.approval_id.as_deref()).await;
    let mut drafts = match &answer {
        Answer::Result(raw) if findings.dispatched && !findings.input_required => {
            // A read: nothing durable happens between its decision and its
            // outcome, so one receipt attests both (a write has two, each
            // committed with the state it attests).
            let result = serde_json::to_value(raw).unwrap_or(Value::Null);
            vec![draft(gw, findings, Event::Answered { approval, tool_error: findings.tool_error, result: &result }, true)]
        }
        Answer::Result(_) if findings.input_required => vec![awaiting(gw, findings, approval)],
        Answer::Result(raw) => {
            // Not sent now: a replay of the recorded outcome.
            let result = serde_json::to_value(raw).unwrap_or(Value::Null);
            vec![draft(gw, findings, Event::Replayed { approval, tool_error: findings.tool_error, result: &result }, true)]
        }
        Answer::Refused(refusal) if findings.dispatched => {
            vec![decided(gw, findings, approval.clone()), draft(gw, findings, Event::Refused { approval, refusal, dispatched: true }, true)]
        }
        Answer::Refused(refusal) => vec![draft(gw, findings, Event::Refused { approval, refusal, dispatched: false }, true)],
        // The call's decision stands (a protocol error overrides none of
        // it), so one receipt carries it and how the call ended.
        Answer::Error(e) => vec![draft(gw, findings, Event::ProtocolError { approval, code: e.code, dispatched: findings.dispatched }, true)],
    };
    // One private record per call: with its first receipt.
    drafts.iter_mut().skip(1).for_each(|d| d.asked = None);
    let n = drafts.len() as u64;
    match gw.ledger.append_receipts(drafts, gw.clock.now_ms()).await {
        Ok(_) => {
            gw.log.appended(n);
            answer
        }
        Err(e) => {
            tracing::error!(target: "toolgate::log", tool = %findings.tool, error = %e, "cannot append the call's receipts");
            match answer {
                Answer::Result(_) if !findings.input_required => Answer::Refused(
                    Refusal::new(Verdict::Allow, Reason::LedgerUnavailable, Action::Retry, "the receipt log is unavailable, so the result cannot be recorded and is withheld; retry later")
                        .with_proposal(findings.proposal_sha256.as_deref().unwrap_or_default()),
                ),
                other => other,
            }
        }
    }
}

/// The decision to wait for a named human. With a new approval it goes in
/// the transaction that opens the approval.
pub fn awaiting(gw: &Gateway, findings: &Findings, approval: Option<ApprovalRef>) -> Draft {
    draft(gw, findings, Event::Awaiting { approval }, true)
}

fn log_line(findings: &Findings, answer: &Answer, elapsed: Duration) {
    let (outcome, reason, action) = match answer {
        Answer::Result(_) if findings.tool_error => ("tool_error", String::new(), String::new()),
        Answer::Result(_) if findings.input_required => ("input_required", String::new(), String::new()),
        Answer::Result(_) => ("completed", String::new(), String::new()),
        Answer::Refused(r) => ("refused", json_name(&r.reason), json_name(&r.action)),
        Answer::Error(e) => ("protocol_error", e.code.to_string(), String::new()),
    };
    let decision = findings.decision.as_ref().map(|d| json_name(&d.verdict)).unwrap_or_default();
    let proposal = match answer {
        Answer::Refused(r) => r.proposal_sha256.as_deref().or(findings.proposal_sha256.as_deref()),
        _ => findings.proposal_sha256.as_deref(),
    };
    tracing::info!(
        target: "toolgate::call",
        tool = %findings.tool,
        request_id = %findings.request_id,
        proposal_sha256 = proposal.unwrap_or(""),
        decision = %decision,
        rules = %findings.decision.as_ref().map(|d| d.rules.join(",")).unwrap_or_default(),
        caller = %findings.caller,
        policy_version = findings.policy_version.as_deref().unwrap_or(""),
        approval = findings.approval_id.as_deref().or(match answer {
            Answer::Refused(r) => r.approval_id.as_deref(),
            _ => None,
        }).unwrap_or(""),
        operation = findings.operation.as_ref().map_or("", |(id, _)| id.as_str()),
        replayed = findings.operation.as_ref().is_some_and(|(_, r)| *r),
        outcome,
        reason = %reason,
        action = %action,
        output_violations = findings.output_violations,
        elapsed_us = elapsed.as_micros() as u64,
        trace_id = %trace_id(),
        "tools/call"
    );
}

pub use toolgate_core::receipt::build::wire_name as json_name;

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
