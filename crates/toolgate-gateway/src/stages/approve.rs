//! approve: a call the decision says needs a human waits for one. The
//! first call opens a pending approval bound to {tenant, caller, server,
//! tool, proposal, policy version} and answers `input_required` with a
//! sealed `requestState`; an approver decides out of band (CLI or admin
//! API); the re-issued call dispatches once if approved. `judge` in
//! toolgate-core is the rule; this stage reads and writes the store.

use serde_json::{Map, Value, json};
use toolgate_core::approval::{self, Approval, Binding, Claim, Step};
use toolgate_core::receipt::ApprovalRef;
use toolgate_core::{Action, Decision, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::LedgerError;

use crate::catalog::ExposedTool;
use crate::gateway::Gateway;
use crate::pipeline::{Answer, CallRequest, Stop};
use crate::stages::record::{self, Trail};
use crate::wire::{Era, RawObject};

/// The key of toolgate's own entry in `inputRequests` / `inputResponses`.
pub const INPUT_KEY: &str = "toolgate_approval";
/// The `_meta` key describing the approval a call waits for.
pub const APPROVAL_META: &str = "io.toolgate/approval";

/// What a call brings to the approve stage: the `requestState` it presents,
/// and the state of the approval it presents (what policy sees as
/// `context.approval`).
pub struct Standing {
    pub presented: Presented,
    pub state: String,
}

/// Most calls present nothing: no binding is built and the store is not read.
pub async fn standing(gw: &Gateway, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal) -> Standing {
    let presented = presented(gw, call);
    let state = match &presented {
        Presented::Ours(claim) => state_of(gw, claim, &binding(gw, call, tool, proposal)).await,
        _ => "none".into(),
    };
    Standing { presented, state }
}

/// The `requestState` a call presents, read once.
pub enum Presented {
    None,
    /// Sealed by this gateway (authentic, not yet checked against the call).
    Ours(Claim),
    /// Someone else's: an upstream's (passed through for tools that need no
    /// approval), or forged.
    Foreign,
}

fn presented(gw: &Gateway, call: &CallRequest) -> Presented {
    match call.input.get("requestState") {
        None | Some(Value::Null) => Presented::None,
        Some(Value::String(s)) => gw.sealer.open(s).map_or(Presented::Foreign, Presented::Ours),
        Some(_) => Presented::Foreign,
    }
}

/// What an approval of this exact call is bound to.
fn binding(gw: &Gateway, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal) -> Binding {
    Binding {
        tenant: call.caller.tenant.clone(),
        caller: call.caller.name.clone(),
        server: tool.server.clone(),
        tool: tool.tool.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        policy_version: gw.policy().version().to_string(),
    }
}

/// The state of the approval a call presents, for policy's
/// `context.approval`: `none` unless it is an approval of exactly this
/// call (an approval of another call never counts).
async fn state_of(gw: &Gateway, claim: &Claim, binding: &Binding) -> String {
    if claim.binding != *binding {
        return "none".into();
    }
    match gw.ledger.approval(&claim.approval_id).await {
        Ok(Some(a)) if a.binding == *binding => a.state_at(gw.clock.now_ms()).as_str().to_string(),
        _ => "none".into(),
    }
}

/// What the rest of the pipeline needs from this stage.
pub struct Gate {
    /// The approval this dispatch runs under.
    pub approval: Option<(String, Binding)>,
    /// `inputResponses` / `requestState` as the upstream must see them.
    pub input: Map<String, Value>,
    /// The approval presented was already used: only the operation it ran
    /// (reserve looks it up) can answer this call.
    pub used: bool,
}

pub async fn approve(gw: &Gateway, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal, decision: &Decision, standing: Standing, trail: &mut Trail) -> Result<Gate, Stop> {
    let Standing { presented, state: approval_state } = standing;
    match decision.verdict {
        Verdict::Deny => {
            let refusal = Refusal::from_decision(decision, &tool.exposed_name).expect("deny refuses");
            return Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)));
        }
        Verdict::Allow => {
            // Allowed while presenting an approved approval of this very call
            // (a policy may permit approved calls): running it uses it up, once.
            if let (Presented::Ours(claim), "approved") = (&presented, approval_state.as_str()) {
                let input = upstream_input(&call.input, &presented);
                return use_approval(gw, tool, proposal, claim.approval_id.clone(), binding(gw, call, tool, proposal), input).await;
            }
            // A state of ours has no business upstream: unwrap or drop it.
            return Ok(Gate { approval: None, input: upstream_input(&call.input, &presented), used: false });
        }
        Verdict::RequireApproval => {}
    }
    let refuse = |reason: Reason, approval: Option<&str>| refused(reason, tool, proposal, approval);
    let binding = binding(gw, call, tool, proposal);
    let claim = match &presented {
        Presented::Foreign => return Err(refuse(Reason::RequestStateInvalid, None)),
        Presented::Ours(claim) => Some(claim.clone()),
        Presented::None => None,
    };
    let found = match &claim {
        Some(c) => gw.ledger.approval(&c.approval_id).await.map(|a| (a, None)),
        None => gw.ledger.latest_approval(&binding).await.map(|a| (None, a)),
    };
    let (claimed, latest) = found.map_err(|e| store_failed(e, tool, proposal))?;
    let step = approval::judge(&binding, claim.as_ref(), claimed.as_ref(), latest.as_ref(), gw.clock.now_ms());
    let waiting = |a: &Approval| Stop::Input(input_required(gw, call, tool, a));
    match step {
        Step::Open => {
            let id = gw.entropy.id("apr_");
            let why = if decision.why.is_empty() { format!("{} requires approval ({})", tool.exposed_name, decision.rules.join(", ")) } else { decision.why.clone() };
            // The receipt of this decision commits with the approval it opens.
            let pending = ApprovalRef { approver: String::new(), decided_at: String::new(), id: id.clone() };
            trail.approval_id = Some(id.clone());
            let receipt = Some(record::awaiting(gw, trail, Some(pending)));
            let new = toolgate_ledger::NewApproval {
                id,
                binding: binding.clone(),
                arguments: proposal.arguments.clone(),
                reason: why,
                rules: decision.rules.clone(),
                now_ms: gw.clock.now_ms(),
                ttl_ms: gw.config.gateway.approval_ttl_ms as i64,
                receipt,
            };
            let opened = gw.ledger.create_approval(new).await.map_err(|e| store_failed(e, tool, proposal))?;
            trail.receipts = 1;
            gw.log.appended(1);
            tracing::info!(target: "toolgate::approval", approval = %opened.id, tool = %tool.exposed_name, caller = %binding.caller, "approval opened");
            Err(waiting(&opened))
        }
        Step::Wait(_) => {
            let pending = claimed.as_ref().or(latest.as_ref()).expect("judge waits on a known approval");
            trail.approval_id = Some(pending.id.clone());
            Err(waiting(pending))
        }
        Step::Consume(id) => use_approval(gw, tool, proposal, id, binding, upstream_input(&call.input, &presented)).await,
        Step::Continue(id) => Ok(Gate { approval: Some((id, binding)), input: upstream_input(&call.input, &presented), used: false }),
        Step::Refuse(Reason::ApprovalUsed) if claimed.is_some() => {
            let id = claimed.map(|a| a.id).expect("checked");
            Ok(Gate { approval: Some((id, binding)), input: upstream_input(&call.input, &presented), used: true })
        }
        Step::Refuse(reason) => {
            let id = claimed.as_ref().or(latest.as_ref()).map(|a| a.id.clone());
            Err(refuse(reason, id.as_deref()))
        }
    }
}

/// Uses approval `id` for this one dispatch; exactly one of any number of
/// concurrent users gets it.
async fn use_approval(gw: &Gateway, tool: &ExposedTool, proposal: &Proposal, id: String, binding: Binding, input: Map<String, Value>) -> Result<Gate, Stop> {
    match gw.ledger.consume_approval(&id, gw.clock.now_ms()).await {
        Ok(_) => Ok(Gate { approval: Some((id, binding)), input, used: false }),
        // The approval just expired, or another re-issue won the race (its
        // operation answers this one).
        Err(LedgerError::NotApproved { state: "expired", .. }) => Err(refused(Reason::ApprovalExpired, tool, proposal, Some(&id))),
        Err(LedgerError::NotApproved { .. }) => Ok(Gate { approval: Some((id, binding)), input, used: true }),
        Err(e) => Err(store_failed(e, tool, proposal)),
    }
}

/// A used approval with no operation to answer for it (a read-only tool's).
pub fn used_refusal(tool: &ExposedTool, gate: &Gate) -> Refusal {
    let r = refusal(Reason::ApprovalUsed, &tool.exposed_name);
    match &gate.approval {
        Some((id, _)) => r.with_approval(id),
        None => r,
    }
}

fn refused(reason: Reason, tool: &ExposedTool, proposal: &Proposal, approval: Option<&str>) -> Stop {
    let mut r = refusal(reason, &tool.exposed_name).with_proposal(&proposal.sha256);
    if let Some(id) = approval {
        r = r.with_approval(id);
    }
    Stop::Refused(r)
}

/// An approved call whose tool asks for input of its own: the upstream's
/// `requestState` travels inside one of ours, so the next round is known to
/// belong to the approved call.
pub fn seal_continuation(gw: &Gateway, gate: &Gate, answer: Answer) -> Answer {
    let Some((id, binding)) = &gate.approval else { return answer };
    let mut result = match answer {
        Answer::Result(result) => result,
        other => return other,
    };
    if result.get("resultType").is_none_or(|t| t.get() != "\"input_required\"") {
        return Answer::Result(result);
    }
    let upstream_state = result.get("requestState").and_then(|v| serde_json::from_str::<String>(v.get()).ok()).unwrap_or_default();
    let claim = Claim { approval_id: id.clone(), binding: binding.clone(), upstream_state: Some(upstream_state) };
    result.insert("requestState".into(), raw(&gw.sealer.seal(&claim)));
    Answer::Result(result)
}

/// The client's input minus toolgate's own: our `requestState` is replaced
/// by the upstream's it carries (if any), our input response is dropped.
fn upstream_input(input: &Map<String, Value>, presented: &Presented) -> Map<String, Value> {
    let mut out = input.clone();
    if let Presented::Ours(claim) = presented {
        match claim.upstream_state.as_deref() {
            Some(s) if !s.is_empty() => out.insert("requestState".into(), Value::String(s.to_string())),
            _ => out.remove("requestState"),
        };
    }
    if let Some(Value::Object(responses)) = out.get_mut("inputResponses") {
        responses.remove(INPUT_KEY);
        if responses.is_empty() {
            out.remove("inputResponses");
        }
    }
    out
}

/// `input_required` for a call waiting on `approval` (2026-07-28); a legacy
/// client cannot take another round, so it gets an `escalate` refusal that
/// names the approval, and re-issues the same call once it is approved.
fn input_required(gw: &Gateway, call: &CallRequest, tool: &ExposedTool, approval: &Approval) -> RawObject {
    let state = approval.state_at(gw.clock.now_ms()).as_str();
    let message = format!(
        "{} waits for a named approver: {}. Approval {} is {state}; an approver decides it with `toolgate approvals approve {}` \
         (or the admin API). Call again with this requestState once it is decided.",
        tool.exposed_name, approval.reason, approval.id, approval.id
    );
    let mut out = RawObject::new();
    if call.era == Era::Legacy {
        let refusal = Refusal::new(Verdict::RequireApproval, Reason::ApprovalPending, Action::Escalate, message)
            .with_proposal(&approval.binding.proposal_sha256)
            .with_approval(&approval.id);
        out.insert("content".into(), raw(&json!([{"type": "text", "text": refusal.message}])));
        out.insert("structuredContent".into(), raw(&refusal));
        out.insert("isError".into(), raw(&true));
        return out;
    }
    let claim = Claim { approval_id: approval.id.clone(), binding: approval.binding.clone(), upstream_state: None };
    out.insert("resultType".into(), raw("input_required"));
    // Ask only for what the client can answer (MRTR): an elicitation if it
    // declared elicitation; otherwise the `_meta` below says what is awaited.
    let elicits = call.client_capabilities.as_ref().is_some_and(|c| c.get("elicitation").is_some());
    if elicits {
        out.insert(
            "inputRequests".into(),
            raw(&json!({INPUT_KEY: {"method": "elicitation/create", "params": {
                "message": message,
                "requestedSchema": {"type": "object", "properties": {}}
            }}})),
        );
    }
    out.insert("requestState".into(), raw(&gw.sealer.seal(&claim)));
    out.insert(
        "_meta".into(),
        raw(&json!({APPROVAL_META: {
            "id": approval.id,
            "state": state,
            "reason": approval.reason,
            "rules": approval.rules,
            "proposal_sha256": approval.binding.proposal_sha256,
            "policy_version": approval.binding.policy_version,
            "expires_ms": approval.expires_ms,
            "message": message,
        }})),
    );
    out
}

/// What each approval refusal tells the caller to do.
fn refusal(reason: Reason, exposed: &str) -> Refusal {
    let (decision, action, message) = match reason {
        Reason::ApprovalDenied => (Verdict::Deny, Action::Refused, format!("an approver denied this exact call to {exposed}; it stays denied — do not retry it")),
        Reason::ApprovalExpired => (
            Verdict::RequireApproval,
            Action::Escalate,
            format!("the approval for this call to {exposed} expired before it was used; call again without requestState to ask for a fresh one"),
        ),
        Reason::ApprovalUsed => (
            Verdict::RequireApproval,
            Action::Refused,
            format!("this approval was already used: the call to {exposed} ran once. Doing it again needs a new approval (call without requestState)"),
        ),
        Reason::ApprovalMissingOrMismatched => (
            Verdict::RequireApproval,
            Action::Escalate,
            format!("the requestState is bound to another call (other arguments, caller or policy); this call to {exposed} was not run. Call without requestState to ask approval for this content"),
        ),
        _ => (
            Verdict::RequireApproval,
            Action::Correct,
            format!("the requestState was not issued by this gateway or was altered; call {exposed} again without it"),
        ),
    };
    Refusal::new(decision, reason, action, message)
}

fn store_failed(e: LedgerError, tool: &ExposedTool, proposal: &Proposal) -> Stop {
    tracing::error!(target: "toolgate::approval", tool = %tool.exposed_name, error = %e, "approvals store failed");
    Stop::Refused(
        Refusal::new(Verdict::RequireApproval, Reason::UpstreamUnavailable, Action::Retry, "the approvals store is unavailable; nothing was run, retry later")
            .with_proposal(&proposal.sha256),
    )
}

fn raw<T: serde::Serialize + ?Sized>(v: &T) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).expect("serialisable")
}
