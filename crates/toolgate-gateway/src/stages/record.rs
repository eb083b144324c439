//! record: the call's signed receipts and one structured log line.
//!
//! Every call gets a receipt for its decision and outcome, each drafted
//! here from the `Findings` the pipeline gathered (and built by core's one
//! receipt builder). A write sent upstream gets two, which reserve hands to
//! the ledger calls that reserve and finish its operation; an approval
//! opened gets its receipt in the transaction that opens it. Those stages
//! reach these drafts through `commit::Receipts` (`Drafts`) and return a
//! `Committed` proof. A read gets one receipt, after its answer, since
//! nothing durable happens in between. `record` appends whatever was not
//! committed already (refusals, reads, replays). A read whose receipt
//! cannot be written is not answered: the caller gets `ledger_unavailable`
//! instead of an unrecorded result.

use std::time::Duration;

use serde_json::Value;
use toolgate_core::Clock;
use toolgate_core::operation::OperationState;
use toolgate_core::proposal::canonical_json_text;
use toolgate_core::receipt::build::{Attested, Event, Subject, build};
use toolgate_core::receipt::{ApprovalRef, OperationRef, Placed};
use toolgate_core::{Action, Reason, Refusal, Verdict};
use toolgate_ledger::{Draft, Ledger};

use crate::call::{Answer, Recorded};
use crate::commit::{Commit, Committed, Receipts, approval_ref};
use crate::findings::Findings;
use crate::log::receipt_log::ReceiptLog;
use toolgate_mcp::wire::RawObject;

/// What the record stage drafts and appends with.
pub(crate) struct Recorder<'a> {
    pub ledger: &'a dyn Ledger,
    /// The log's current key (a draft names it) and its checkpointer.
    pub log: &'a ReceiptLog,
    pub clock: &'a dyn Clock,
    /// The policy in force for this call, named by receipts of calls
    /// refused before they were decided.
    pub policy_version: &'a str,
    /// The version of the config the call runs under (`Config::version`).
    pub config_version: &'a str,
}

/// The record stage's drafts for the stages that commit a receipt with the
/// ledger's state, from what the call has gathered so far.
pub(crate) fn drafts<'a>(rec: &'a Recorder<'a>, findings: &'a Findings) -> Drafts<'a> {
    Drafts { rec, findings }
}

/// See `drafts`.
pub(crate) struct Drafts<'a> {
    rec: &'a Recorder<'a>,
    findings: &'a Findings,
}

impl Receipts for Drafts<'_> {
    fn wait(&self, approval_id: &str) -> Draft {
        awaiting(self.rec, self.findings, Some(pending(approval_id)))
    }

    fn decided(&self, approval: Option<ApprovalRef>, operation: OperationRef) -> Draft {
        draft_for(self.rec, self.findings, Some(operation), Event::Authorized { approval }, true)
    }

    fn outcome(
        &self,
        state: OperationState,
        result: Option<&str>,
        operation: OperationRef,
    ) -> Draft {
        let value = result.map(|text| serde_json::from_str(text).unwrap_or(Value::Null));
        draft_for(
            self.rec,
            self.findings,
            Some(operation),
            Event::Dispatched { state, result: value.as_ref() },
            false,
        )
    }

    fn committed(&self, what: Commit, placed: Option<Placed>) -> Committed {
        Committed::counted(self.rec.log, what, placed)
    }
}

/// What every receipt of this call shares, for the one builder; `operation`
/// is the write's as this receipt names it.
fn subject<'a>(
    rec: &Recorder<'a>,
    findings: &'a Findings,
    operation: Option<OperationRef>,
) -> Subject<'a> {
    Subject {
        issued_at_ms: rec.clock.now_ms(),
        tenant: &findings.tenant,
        caller: &findings.caller,
        server: &findings.server,
        tool: if findings.upstream_tool.is_empty() {
            &findings.tool
        } else {
            &findings.upstream_tool
        },
        tool_definition_sha256: &findings.definition_sha256,
        proposal_sha256: findings.proposal_sha256.as_deref().unwrap_or_default(),
        decision: findings.decision.as_ref(),
        policy_version: findings.policy_version.as_deref().unwrap_or(rec.policy_version),
        operation,
        salt: &findings.salt,
        arguments_hash: &findings.arguments_hash,
        captured: findings.arguments.as_ref(),
        sandbox: findings.sandbox.as_deref(),
        config_version: Some(rec.config_version).filter(|v| !v.is_empty()),
        identity: findings.identity.as_ref(),
    }
}

/// Drafts the receipt of `event`; `first` carries the private record of
/// what was asked (one per call, with its first receipt).
fn draft(rec: &Recorder<'_>, findings: &Findings, event: Event, first: bool) -> Draft {
    draft_for(rec, findings, findings.operation_ref.clone(), event, first)
}

/// `draft`, naming `operation` as the write's.
fn draft_for(
    rec: &Recorder<'_>,
    findings: &Findings,
    operation: Option<OperationRef>,
    event: Event,
    first: bool,
) -> Draft {
    let receipt = build(&subject(rec, findings, operation), event);
    rec.log.draft(receipt, findings.salt, if first { findings.asked() } else { None })
}

/// The decision to run a call, before it is sent (a write's goes with the
/// operation's reservation: `Drafts`).
fn decided(rec: &Recorder<'_>, findings: &Findings, approval: Option<ApprovalRef>) -> Draft {
    draft(rec, findings, Event::Authorized { approval }, true)
}

/// An approval just opened, as the receipt of the wait names it.
fn pending(id: &str) -> ApprovalRef {
    ApprovalRef { approver: String::new(), decided_at: String::new(), id: id.to_string() }
}

/// Appends the receipts not committed with the ledger's state (the
/// pipeline commits those), then logs the call. Returns the
/// answer, or a refusal when a result's receipts could not be written.
pub(crate) async fn record(
    rec: &Recorder<'_>,
    findings: &Findings,
    answer: Answer,
    elapsed: Duration,
) -> Recorded {
    // A preview decides and acts on nothing, so it attests nothing either:
    // no receipt, only the log line.
    let recorded = match &findings.committed {
        _ if findings.preview => Recorded { answer, placed: None },
        Some(c) if matches!(&answer, Answer::Refused(_)) => {
            refused_after(rec, findings, answer, c).await
        }
        Some(c) => Recorded { answer, placed: c.placed().map(|p| (p, c.decision())) },
        None => append(rec, findings, answer).await,
    };
    log_line(findings, &recorded.answer, elapsed);
    recorded
}

async fn append(rec: &Recorder<'_>, findings: &Findings, answer: Answer) -> Recorded {
    let approval = approval_ref(rec.ledger, findings.approval_id.as_deref()).await;
    let mut drafts = match &answer {
        Answer::Result(raw) if findings.dispatched && !findings.input_required => {
            // A read: nothing durable happens between its decision and its
            // outcome, so one receipt attests both (a write has two, each
            // committed with the state it attests).
            let result = Held::of(raw, findings.arguments.is_some());
            vec![draft(
                rec,
                findings,
                Event::Answered {
                    approval,
                    tool_error: findings.tool_error,
                    result: result.attested(),
                },
                true,
            )]
        }
        Answer::Result(_) if let Some(refusal) = &findings.connect_required => vec![draft(
            rec,
            findings,
            Event::Refused { approval, refusal, dispatched: false },
            true,
        )],
        Answer::Result(_) if findings.input_required => vec![awaiting(rec, findings, approval)],
        Answer::Result(raw) => {
            // Not sent now: a replay of the recorded outcome.
            let result = Held::of(raw, false);
            vec![draft(
                rec,
                findings,
                Event::Replayed {
                    approval,
                    tool_error: findings.tool_error,
                    result: result.attested(),
                },
                true,
            )]
        }
        Answer::Refused(refusal) if findings.dispatched => {
            vec![
                decided(rec, findings, approval.clone()),
                draft(rec, findings, Event::Refused { approval, refusal, dispatched: true }, true),
            ]
        }
        Answer::Refused(refusal) => vec![draft(
            rec,
            findings,
            Event::Refused { approval, refusal, dispatched: false },
            true,
        )],
        // The call's decision stands (a protocol error overrides none of
        // it), so one receipt carries it and how the call ended.
        Answer::Error(e) => vec![draft(
            rec,
            findings,
            Event::ProtocolError { approval, code: e.code, dispatched: findings.dispatched },
            true,
        )],
    };
    // One private record per call: with its first receipt.
    drafts.iter_mut().skip(1).for_each(|d| d.asked = None);
    let n = drafts.len() as u64;
    // The answer names where its receipt (and a refused read's decision) went.
    let placements: Vec<_> = drafts.iter().map(|d| d.placement.clone()).collect();
    match rec.ledger.append_receipts(drafts).await {
        Ok(indexes) => {
            rec.log.appended(n);
            if let Some(last) = indexes.last() {
                tracing::Span::current().record("toolgate.receipt.index", last);
            }
            let decision = if placements.len() > 1 { placements[0].get() } else { None };
            Recorded {
                answer,
                placed: placements.last().and_then(|p| p.get()).map(|p| (p, decision)),
            }
        }
        Err(e) => {
            tracing::error!(target: "toolgate::log", tool = %findings.tool, error = %e, "cannot append the call's receipts");
            let answer = match answer {
                Answer::Result(_) if !findings.input_required => Answer::Refused(
                    Refusal::new(
                        Verdict::Allow,
                        Reason::LedgerUnavailable,
                        Action::Retry,
                        "the receipt log is unavailable, so the result cannot be recorded and is \
                            withheld; retry later",
                    )
                    .with_proposal(findings.proposal_sha256.as_deref().unwrap_or_default()),
                ),
                other => other,
            };
            Recorded { answer, placed: None }
        }
    }
}

/// A refusal after a receipt committed with the ledger's state (a write's
/// outcome that is unknown, or whose answer carried a credential the
/// gateway holds and was withheld): the refusal the caller gets has a
/// receipt of its own, which commits to its words and names why, so the
/// whole answer is proven, not only the state. Should that append fail,
/// the answer names the committed receipt.
async fn refused_after(
    rec: &Recorder<'_>,
    findings: &Findings,
    answer: Answer,
    committed: &Committed,
) -> Recorded {
    let Answer::Refused(refusal) = &answer else {
        return Recorded { answer, placed: committed.placed().map(|p| (p, committed.decision())) };
    };
    let approval = approval_ref(rec.ledger, findings.approval_id.as_deref()).await;
    let draft = draft(
        rec,
        findings,
        Event::Refused { approval, refusal, dispatched: findings.dispatched },
        false,
    );
    let placement = draft.placement.clone();
    match rec.ledger.append_receipts(vec![draft]).await {
        Ok(_) => {
            rec.log.appended(1);
            // The decision to run is the committed one's (a write's), or the committed receipt itself.
            let decision = committed.decision().or_else(|| committed.placed());
            Recorded { answer, placed: placement.get().map(|p| (p, decision)) }
        }
        Err(e) => {
            tracing::error!(target: "toolgate::log", tool = %findings.tool, error = %e, "cannot append the receipt of a refusal after its state committed");
            Recorded { answer, placed: committed.placed().map(|p| (p, committed.decision())) }
        }
    }
}

/// An answer held for its receipt: the value when the receipt captures
/// values, else only its JCS text, written from the answer's text
/// (`canonical_json_text`: a third less time than building a `Value` of
/// every answer only to hash it).
enum Held {
    Value(Value),
    Canonical(String),
}

impl Held {
    fn of(raw: &RawObject, capture: bool) -> Held {
        if capture {
            return Held::Value(serde_json::to_value(raw).unwrap_or(Value::Null));
        }
        let text = serde_json::to_string(raw).unwrap_or_default();
        Held::Canonical(canonical_json_text(&text).unwrap_or_else(|_| "null".into()))
    }

    fn attested(&self) -> Attested<'_> {
        match self {
            Held::Value(value) => Attested::Value(value),
            Held::Canonical(text) => Attested::Canonical(text),
        }
    }
}

/// The decision to wait for a named human. With a new approval it goes in
/// the transaction that opens the approval (`Drafts`).
fn awaiting(rec: &Recorder<'_>, findings: &Findings, approval: Option<ApprovalRef>) -> Draft {
    draft(rec, findings, Event::Awaiting { approval }, true)
}

fn log_line(findings: &Findings, answer: &Answer, elapsed: Duration) {
    // Its fields are named and joined only for a log that keeps the line.
    if !tracing::enabled!(target: "toolgate::call", tracing::Level::INFO) {
        return;
    }
    let (outcome, reason, action) = match answer {
        Answer::Result(_) if findings.preview => ("preview", String::new(), String::new()),
        Answer::Result(_) if findings.tool_error => ("tool_error", String::new(), String::new()),
        Answer::Result(_) if findings.input_required => {
            ("input_required", String::new(), String::new())
        }
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

pub(crate) use toolgate_core::receipt::build::wire_name as json_name;

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

#[cfg(test)]
mod tests;
