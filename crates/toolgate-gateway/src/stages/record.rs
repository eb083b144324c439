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
use toolgate_core::approval::ApprovalState;
use toolgate_core::operation::OperationState;
use toolgate_core::proposal::canonical_json_text;
use toolgate_core::receipt::build::{Attested, Event, Subject, build};
use toolgate_core::receipt::{self, ApprovalRef, OperationRef, Placed};
use toolgate_core::{Action, Decision, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Draft, Ledger};

use crate::call::{Answer, Approved, Call, Context, Recorded, Reserved};
use crate::catalog::ExposedTool;
use crate::commit::{Commit, Committed, Receipts, approval_ref};
use crate::log::ReceiptLog;
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

/// What the stages concluded, gathered by the pipeline (and only there)
/// for the receipts and the log line.
pub(crate) struct Findings {
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
    /// The answer asks the person to connect their account (present): the
    /// receipt records this refusal.
    pub connect_required: Option<Refusal>,
    pub output_violations: usize,
    pub tenant: String,
    /// From resolve on: the upstream tool and its definition's hash.
    pub server: String,
    pub upstream_tool: String,
    pub definition_sha256: String,
    /// The box its server runs in, as the receipt names it.
    pub sandbox: Option<std::sync::Arc<str>>,
    /// From present on: as whom the call reaches its server.
    pub identity: Option<toolgate_core::receipt::UpstreamIdentity>,
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
    /// The last receipt committed with the ledger's state, if one was and
    /// it still attests the answer: record appends none then.
    pub committed: Option<Committed>,
    /// The call asked only for a preview (no receipt is recorded).
    pub preview: bool,
}

impl Findings {
    /// `salt` is the call's fresh secret salt, drawn before anything can
    /// refuse it: every receipt's salted hashes and the key that opens its
    /// commitment in the log come from it, a refusal's too.
    pub fn new(cx: &Context, call: &Call, salt: [u8; 32]) -> Self {
        Self {
            tool: call.name.clone(),
            request_id: cx
                .request_id
                .as_ref()
                .map(|id| serde_json::to_string(id).unwrap_or_default())
                .unwrap_or_default(),
            proposal_sha256: None,
            decision: None,
            policy_version: None,
            approval_id: None,
            operation: None,
            caller: cx.caller.name.clone(),
            tool_error: false,
            input_required: false,
            connect_required: None,
            output_violations: 0,
            tenant: cx.caller.tenant.clone(),
            server: String::new(),
            upstream_tool: String::new(),
            definition_sha256: String::new(),
            sandbox: None,
            identity: None,
            salt,
            arguments_hash: String::new(),
            arguments: None,
            asked: None,
            approval_state: None,
            dispatched: false,
            operation_ref: None,
            committed: None,
            preview: call.preview,
        }
    }

    /// After present stopped the call with an `input_required` answer that
    /// asks the person to connect their account: its receipt records `refusal`.
    pub fn asked_to_connect(&mut self, refusal: Refusal) {
        self.input_required = true;
        self.connect_required = Some(refusal);
    }

    /// After present: as whom the call reaches its server.
    pub fn presented(&mut self, presented: &crate::identity::Presented) {
        self.identity = Some(presented.identity.clone());
    }

    pub fn resolved(&mut self, tool: &ExposedTool) {
        self.server = tool.server.clone();
        self.upstream_tool = tool.subject().into_owned();
        self.definition_sha256 = tool.definition_sha256.clone();
        self.sandbox = tool.sandbox.clone();
    }

    /// After validate: the salted hash, and what `toolgate replay` needs to
    /// decide this call again (the caller, the tool's facts, the arguments,
    /// and the class decision that applies where no policy does).
    /// `capture` keeps the arguments themselves in the receipts
    /// (`receipts.capture_values`).
    pub fn validated(
        &mut self,
        capture: bool,
        cx: &Context,
        tool: &ExposedTool,
        proposal: &Proposal,
    ) {
        self.proposal_sha256 = Some(proposal.sha256.clone());
        self.arguments_hash =
            receipt::salted_hash(&self.salt, proposal.canonical_arguments.as_bytes());
        if capture {
            self.arguments = Some(proposal.arguments.clone());
        }
        let fallback = toolgate_core::decision::decide_by_class(&tool.view);
        let c = &cx.caller;
        // Serialized from borrows, once: building it as a `Value` copied the
        // arguments twice per call.
        let asked = Asked {
            caller: AskedCaller {
                name: &c.name,
                subject: &c.subject,
                tenant: &c.tenant,
                roles: &c.roles,
            },
            tool: AskedTool {
                exposed_name: &tool.exposed_name,
                server: &tool.server,
                name: &tool.tool.name,
                class: tool.view.effective_class.as_str(),
                labels: &tool.labels,
            },
            arguments: &proposal.arguments,
            class_decision: &fallback,
        };
        self.asked =
            serde_json::to_string(&asked).ok().and_then(|mut text| text.pop().map(|_| text));
    }

    /// After decide: how the call was decided, under which policy, and the
    /// state of the approval it presented.
    pub fn decided(
        &mut self,
        approval_state: Option<ApprovalState>,
        decision: &Decision,
        policy_version: &str,
    ) {
        self.approval_state = approval_state;
        self.decision = Some(decision.clone());
        self.policy_version = Some(policy_version.to_string());
    }

    /// After approve: the approval the call runs under (or waited on), the
    /// receipt its wait committed, and the decision once more when it was
    /// approved while held.
    pub fn approved(&mut self, approved: &Approved, policy_version: &str) {
        self.approval_id = approved.approval_id.clone();
        self.committed = approved.committed.clone();
        self.input_required |= approved.input_required;
        if let Some((state, decision)) = &approved.redecided {
            self.decided(*state, decision, policy_version);
        }
    }

    /// After reserve and dispatch: the operation, whether the call went
    /// upstream, and the receipts committed with its operation.
    pub fn reserved(&mut self, reserved: &Reserved) {
        self.operation_ref = reserved.operation_ref.clone();
        self.operation = reserved.operation.clone();
        self.dispatched = reserved.dispatched;
        self.committed = reserved.committed.clone().or(self.committed.take());
    }

    /// The private record of what was asked and how it was decided, kept
    /// with the call's first receipt.
    fn asked(&self) -> Option<String> {
        let decision = serde_json::to_string(self.decision.as_ref()?).ok()?;
        let state =
            serde_json::to_string(self.approval_state.map_or("none", ApprovalState::as_str))
                .ok()?;
        Some(format!(
            "{},\"approval_state\":{state},\"decision\":{decision}}}",
            self.asked.as_ref()?
        ))
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
                    Refusal::new(Verdict::Allow, Reason::LedgerUnavailable, Action::Retry, "the receipt log is unavailable, so the result cannot be recorded and is withheld; retry later")
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
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::call::CallRequest;
    use crate::config::Config;
    use crate::gateway::Gateway;
    use crate::gateway::{Mode, Sources};
    use crate::stages::testing::{NOW_MS, call, find_tool, split};
    use toolgate_mcp::wire::{RawObject, RpcError, code};
    use serde_json::json;
    use toolgate_core::approval::Binding;
    use toolgate_core::decision::decide_by_class;
    use toolgate_core::proposal::{canonical_json, sha256_hex};
    use toolgate_core::{FixedClock, SeededEntropy};
    use toolgate_ledger::NewApproval;

    /// A gateway with no upstreams, its ledger and keys in `dir`, on a fixed clock.
    async fn gateway(dir: &std::path::Path, config: &str) -> Arc<Gateway> {
        let config = Config::parse(config, &dir.join("toolgate.toml")).expect("a valid config");
        let sources = Sources {
            clock: Arc::new(FixedClock::new(NOW_MS)),
            entropy: Arc::new(SeededEntropy::new([4; 32])),
        };
        Gateway::start_with(config, Mode::Inspect, sources).await.expect("the gateway starts")
    }

    fn find() -> (CallRequest, Proposal) {
        (
            call("parts__find_part", json!({"part_no": "P-1"})),
            Proposal::new("parts", "find_part", json!({"part_no": "P-1"})),
        )
    }

    /// What the pipeline has gathered about a read once decide allowed it.
    fn allowed(gw: &Gateway, (c, proposal): &(CallRequest, Proposal)) -> Findings {
        let tool = find_tool();
        let (cx, call) = split(c);
        let mut f = Findings::new(&cx, &call, gw.log.salt());
        f.resolved(&tool);
        f.validated(gw.config().receipts.capture_values, &cx, &tool, proposal);
        f.decision = Some(decide_by_class(&tool.view));
        f.policy_version = Some(gw.policy().version().to_string());
        f
    }

    /// Records `answer` as the pipeline does, under the policy in force.
    async fn record(
        gw: &Gateway,
        findings: &Findings,
        answer: Answer,
        elapsed: Duration,
    ) -> Answer {
        let policy = gw.policy();
        let rec = Recorder {
            ledger: gw.ledger.as_ref(),
            log: &gw.log,
            clock: gw.clock.as_ref(),
            policy_version: policy.version(),
            config_version: "",
        };
        super::record(&rec, findings, answer, elapsed).await.answer
    }

    fn result(text: &str) -> Answer {
        Answer::Result(serde_json::from_str::<RawObject>(text).expect("a result object"))
    }

    /// The receipts in the ledger, and the private record kept with each.
    async fn receipts(gw: &Gateway) -> Vec<(Value, Option<String>)> {
        let stored = gw.ledger.receipts(0, 100).await.unwrap();
        stored
            .into_iter()
            .map(|r| {
                (serde_json::from_str::<Value>(&r.logged).unwrap()["receipt"].clone(), r.asked)
            })
            .collect()
    }

    fn statuses(receipts: &[(Value, Option<String>)]) -> Vec<(String, String)> {
        receipts
            .iter()
            .map(|(r, _)| {
                (
                    r["execution_status"].as_str().unwrap().to_string(),
                    r["result_status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn pair(execution: &str, result: &str) -> (String, String) {
        (execution.to_string(), result.to_string())
    }

    #[tokio::test]
    async fn findings_follow_the_stages_and_the_private_record_completes_with_the_decision() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let (c, proposal) = find();
        let tool = find_tool();
        let (cx, request) = split(&c);
        let mut f = Findings::new(&cx, &request, gw.log.salt());
        assert_eq!(
            (f.tool.as_str(), f.caller.as_str(), f.tenant.as_str(), f.request_id.as_str()),
            ("parts__find_part", "agent", "atlas", "7")
        );
        f.resolved(&tool);
        assert_eq!(
            (f.server.as_str(), f.upstream_tool.as_str(), f.definition_sha256.as_str()),
            ("parts", "find_part", tool.definition_sha256.as_str())
        );
        f.validated(gw.config().receipts.capture_values, &cx, &tool, &proposal);
        assert_eq!(f.proposal_sha256.as_deref(), Some(proposal.sha256.as_str()));
        assert_eq!(
            f.arguments_hash,
            receipt::salted_hash(&f.salt, proposal.canonical_arguments.as_bytes())
        );
        assert!(f.arguments.is_none(), "values are not captured unless configured");
        assert!(f.asked().is_none(), "not decided yet");
        let decision =
            Decision::by(Verdict::Allow, Reason::PolicyPermits, vec!["approved_reads".into()]);
        f.decision = Some(decision.clone());
        let asked: Value =
            serde_json::from_str(&f.asked().expect("decided")).expect("a JSON object");
        assert_eq!(
            asked["caller"],
            json!({"name": "agent", "subject": "agent-7", "tenant": "atlas", "roles": ["agent"]})
        );
        assert_eq!(
            asked["tool"],
            json!({"exposed_name": "parts__find_part", "server": "parts", "name": "find_part", "class": "automatic", "labels": []})
        );
        assert_eq!(asked["arguments"], json!({"part_no": "P-1"}));
        // What `toolgate replay` falls back on where no policy applies, and what applied.
        assert_eq!(
            asked["class_decision"],
            json!({"verdict": "allow", "reason": "automatic", "rules": ["registry"]})
        );
        assert_eq!(asked["decision"], serde_json::to_value(&decision).unwrap());
        assert_eq!(asked["approval_state"], "none");
        f.approval_state = Some(ApprovalState::Approved);
        assert_eq!(
            serde_json::from_str::<Value>(&f.asked().unwrap()).unwrap()["approval_state"],
            "approved"
        );
    }

    #[tokio::test]
    async fn argument_values_are_kept_only_when_configured() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "[receipts]\ncapture_values = true\n").await;
        let f = allowed(&gw, &find());
        assert_eq!(f.arguments, Some(json!({"part_no": "P-1"})));
    }

    #[tokio::test]
    async fn a_read_gets_one_receipt_attesting_its_result_with_the_private_record() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let mut f = allowed(&gw, &find());
        f.dispatched = true;
        let text = r#"{"content":[],"structuredContent":{"stock":3}}"#;
        let Answer::Result(answered) = record(&gw, &f, result(text), Duration::ZERO).await else {
            panic!("the result is withheld")
        };
        assert_eq!(answered["structuredContent"].get(), r#"{"stock":3}"#);
        let stored = receipts(&gw).await;
        assert_eq!(statuses(&stored), [pair("dispatched", "ok")]);
        let (r, private) = &stored[0];
        assert_eq!(
            (&r["decision"], &r["reason"], &r["tool"], &r["server"]),
            (&json!("allow"), &json!("automatic"), &json!("find_part"), &json!("parts"))
        );
        assert_eq!(r["proposal_sha256"], f.proposal_sha256.clone().unwrap());
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(r["result_sha256"], sha256_hex(canonical_json(&value).as_bytes()));
        assert_eq!(private.as_deref(), f.asked().as_deref());
    }

    #[tokio::test]
    async fn a_call_refused_before_it_resolved_is_recorded_under_the_name_it_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let (cx, nope) = split(&call("parts__nope", json!({})));
        let f = Findings::new(&cx, &nope, [3; 32]);
        let refusal =
            Refusal::new(Verdict::Deny, Reason::ArgumentsTooLarge, Action::Correct, "too large");
        assert!(matches!(
            record(&gw, &f, Answer::Refused(refusal), Duration::ZERO).await,
            Answer::Refused(_)
        ));
        let stored = receipts(&gw).await;
        assert_eq!(statuses(&stored), [pair("not_dispatched", "refused")]);
        let (r, private) = &stored[0];
        assert_eq!(
            (&r["tool"], &r["decision"], &r["reason"]),
            (&json!("parts__nope"), &json!("deny"), &json!("arguments_too_large"))
        );
        assert!(private.is_none(), "nothing was asked of policy");
    }

    #[tokio::test]
    async fn a_refusal_after_dispatch_records_the_decision_and_an_unknown_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let mut f = allowed(&gw, &find());
        f.dispatched = true;
        let lost = Refusal::new(Verdict::Allow, Reason::OutcomeUnknown, Action::Retry, "lost");
        record(&gw, &f, Answer::Refused(lost), Duration::ZERO).await;
        let stored = receipts(&gw).await;
        assert_eq!(
            statuses(&stored),
            [pair("authorized", "pending"), pair("dispatched", "unknown")]
        );
        // One private record per call, with its first receipt.
        assert_eq!((stored[0].1.is_some(), stored[1].1.is_none()), (true, true));
    }

    #[tokio::test]
    async fn each_other_ending_gets_the_receipt_that_says_how_it_ended() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        // A protocol error overrides none of the decision.
        let f = allowed(&gw, &find());
        record(&gw, &f, Answer::Error(RpcError::new(code::INVALID_PARAMS, "bad")), Duration::ZERO)
            .await;
        // Waiting for an approver.
        let mut waiting = allowed(&gw, &find());
        waiting.input_required = true;
        record(&gw, &waiting, result(r#"{"resultType":"input_required"}"#), Duration::ZERO).await;
        // Not sent now: the recorded outcome, replayed.
        let replayed = allowed(&gw, &find());
        record(&gw, &replayed, result(r#"{"content":[]}"#), Duration::ZERO).await;
        let stored = receipts(&gw).await;
        assert_eq!(
            statuses(&stored),
            [
                pair("not_dispatched", "protocol_error:-32602"),
                pair("not_dispatched", "awaiting_approval"),
                pair("replayed", "ok")
            ]
        );
        assert_eq!(stored[0].0["decision"], "allow");
    }

    /// A dispatched write's findings, its outcome's receipt committed with its operation.
    fn committed_outcome(gw: &Gateway) -> Findings {
        let mut f = allowed(gw, &find());
        let policy = gw.policy();
        let rec = Recorder {
            ledger: gw.ledger.as_ref(),
            log: &gw.log,
            clock: gw.clock.as_ref(),
            policy_version: policy.version(),
            config_version: "",
        };
        f.dispatched = true;
        f.committed = Some(drafts(&rec, &f).committed(Commit::Outcome, None));
        f
    }

    #[tokio::test]
    async fn receipts_already_committed_with_the_ledgers_state_are_not_appended_again() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let f = committed_outcome(&gw);
        assert!(matches!(
            record(&gw, &f, result(r#"{"content":[]}"#), Duration::ZERO).await,
            Answer::Result(_)
        ));
        assert!(receipts(&gw).await.is_empty());
    }

    #[tokio::test]
    async fn a_refusal_after_a_committed_outcome_gets_a_receipt_that_commits_to_its_words() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let f = committed_outcome(&gw);
        let refusal = Refusal::new(
            Verdict::Allow,
            Reason::CredentialWithheld,
            Action::Refused,
            "withheld: it carried a credential",
        );
        let recorded = record(&gw, &f, Answer::Refused(refusal.clone()), Duration::ZERO).await;
        assert!(matches!(recorded, Answer::Refused(_)));
        let stored = receipts(&gw).await;
        assert_eq!(stored.len(), 1, "the refusal's own receipt");
        let (r, _) = &stored[0];
        assert_eq!(
            (&r["reason"], &r["execution_status"]),
            (&json!("credential_withheld"), &json!("dispatched"))
        );
        assert_eq!(
            r["result_sha256"],
            json!(toolgate_core::receipt::build::refusal_sha256(&refusal))
        );
    }

    #[tokio::test]
    async fn a_writes_drafts_name_its_operation_and_keep_one_private_record() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let f = allowed(&gw, &find());
        let policy = gw.policy();
        let rec = Recorder {
            ledger: gw.ledger.as_ref(),
            log: &gw.log,
            clock: gw.clock.as_ref(),
            policy_version: policy.version(),
            config_version: "",
        };
        let drafts = drafts(&rec, &f);
        let op = OperationRef { key: "order-1".into(), state: "reserved".into() };
        let decided = drafts.decided(None, op.clone());
        let outcome = drafts.outcome(OperationState::Completed, Some(r#"{"content":[]}"#), op);
        assert!(
            decided.asked.is_some() && outcome.asked.is_none(),
            "the private record goes with the first receipt only"
        );
        gw.ledger.append_receipts(vec![decided, outcome]).await.unwrap();
        let stored = receipts(&gw).await;
        for (receipt, _) in &stored {
            assert_eq!(receipt["operation"]["key"], "order-1", "{receipt}");
        }
        assert_eq!(statuses(&stored)[1].0, "dispatched");
        assert_eq!(
            f.operation_ref, None,
            "drafting names the operation without changing what the call gathered"
        );
    }

    #[tokio::test]
    async fn a_receipt_names_the_approval_its_call_ran_under_and_its_approver() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let call = find();
        let binding = Binding {
            tenant: "atlas".into(),
            caller: "agent".into(),
            server: "parts".into(),
            tool: "find_part".into(),
            proposal_sha256: call.1.sha256.clone(),
            policy_version: gw.policy().version().to_string(),
        };
        let new = NewApproval {
            id: "apr_1".into(),
            binding,
            arguments: call.1.arguments.clone(),
            reason: "test".into(),
            rules: vec![],
            now_ms: NOW_MS,
            ttl_ms: 60_000,
            receipt: None,
            subject: "agent-7".into(),
            operation_key: None,
            notices: vec![],
        };
        gw.ledger.create_approval(new).await.unwrap();
        gw.ledger
            .decide_approval(
                "apr_1",
                true,
                toolgate_ledger::Decider {
                    name: "dana",
                    subject: "dana@atlas.example",
                    tenant: "atlas",
                },
                "checked",
                NOW_MS + 1_500,
            )
            .await
            .unwrap();
        let mut f = allowed(&gw, &call);
        (f.dispatched, f.approval_id) = (true, Some("apr_1".into()));
        record(&gw, &f, result(r#"{"content":[]}"#), Duration::ZERO).await;
        let stored = receipts(&gw).await;
        assert_eq!(
            stored[0].0["approval"],
            json!({"id": "apr_1", "approver": "dana", "decided_at": receipt::rfc3339_ms(NOW_MS + 1_500)})
        );
    }

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The fields of the log line written for `answer`.
    fn logged(findings: &Findings, answer: &Answer) -> Value {
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber =
            tracing_subscriber::fmt().json().with_writer(move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            log_line(findings, answer, Duration::from_micros(1_500))
        });
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("toolgate::call"))
            .unwrap_or_else(|| panic!("no log line in {text:?}"));
        serde_json::from_str::<Value>(line).unwrap()["fields"].clone()
    }

    #[tokio::test]
    async fn the_log_line_says_how_the_call_ended() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), "").await;
        let mut f = allowed(&gw, &find());
        let fields = logged(&f, &result(r#"{"content":[]}"#));
        assert_eq!(
            (&fields["outcome"], &fields["decision"], &fields["rules"], &fields["elapsed_us"]),
            (&json!("completed"), &json!("allow"), &json!("registry"), &json!(1_500))
        );
        assert_eq!(
            (&fields["tool"], &fields["caller"], &fields["proposal_sha256"]),
            (
                &json!("parts__find_part"),
                &json!("agent"),
                &json!(f.proposal_sha256.clone().unwrap())
            )
        );
        let fields = logged(&f, &Answer::Error(RpcError::new(code::INVALID_PARAMS, "bad")));
        assert_eq!(
            (&fields["outcome"], &fields["reason"]),
            (&json!("protocol_error"), &json!("-32602"))
        );
        // A refusal's own proposal and approval are the ones logged.
        let expired = Refusal::new(
            Verdict::RequireApproval,
            Reason::ApprovalExpired,
            Action::Escalate,
            "expired",
        )
        .with_proposal("ab12")
        .with_approval("apr_9");
        let fields = logged(&f, &Answer::Refused(expired));
        assert_eq!(
            (&fields["outcome"], &fields["reason"], &fields["action"]),
            (&json!("refused"), &json!("approval_expired"), &json!("escalate"))
        );
        assert_eq!(
            (&fields["proposal_sha256"], &fields["approval"]),
            (&json!("ab12"), &json!("apr_9"))
        );
        f.input_required = true;
        assert_eq!(
            logged(&f, &result(r#"{"resultType":"input_required"}"#))["outcome"],
            "input_required"
        );
        (f.input_required, f.tool_error) = (false, true);
        assert_eq!(
            logged(&f, &result(r#"{"isError":true,"content":[]}"#))["outcome"],
            "tool_error"
        );
        f.operation = Some(("op_1".into(), true));
        let fields = logged(&f, &result(r#"{"isError":true,"content":[]}"#));
        assert_eq!((&fields["operation"], &fields["replayed"]), (&json!("op_1"), &json!(true)));
    }
}
