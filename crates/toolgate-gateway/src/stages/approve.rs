//! approve: a call the decision says needs a human waits for one. The
//! first call opens a pending approval bound to {tenant, caller, server,
//! tool, proposal, policy version} and answers `input_required` with a
//! sealed `requestState`; an approver decides out of band (CLI or admin
//! API); the re-issued call dispatches once if approved. `judge` in
//! toolgate-core is the rule; this stage reads and writes the store.

use serde_json::{Map, Value, json};
use toolgate_core::approval::{self, Approval, ApprovalState, Binding, Claim, Step};
use toolgate_core::{Action, Clock, Decision, Entropy, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Draft, Ledger, LedgerError, NewApproval};

use crate::call::{Answer, CallRequest, Gate, Stop};
use crate::catalog::ExposedTool;
use crate::seal::Sealer;
use crate::wire::{Era, RawObject};

/// The key of toolgate's own entry in `inputRequests` / `inputResponses`.
pub const INPUT_KEY: &str = "toolgate_approval";
/// The `_meta` key describing the approval a call waits for.
pub const APPROVAL_META: &str = "io.toolgate/approval";

/// What the approve stage reads and writes.
pub struct Approvals<'a> {
    pub ledger: &'a dyn Ledger,
    pub sealer: &'a Sealer,
    pub clock: &'a dyn Clock,
    pub entropy: &'a dyn Entropy,
    /// The version of the policy that decided this call.
    pub policy_version: &'a str,
    /// How long an opened approval stays decidable.
    pub ttl_ms: i64,
}

/// What a call brings to the approve stage: the `requestState` it presents,
/// and the state of the approval it presents (what policy sees as
/// `context.approval`).
pub struct Standing {
    pub presented: Presented,
    pub state: Option<ApprovalState>,
}

/// Most calls present nothing: no binding is built and the store is not read.
pub async fn standing(a: &Approvals<'_>, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal) -> Standing {
    let presented = presented(a.sealer, call);
    let state = match &presented {
        Presented::Ours(claim) => state_of(a, claim, &binding(a, call, tool, proposal)).await,
        _ => None,
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

fn presented(sealer: &Sealer, call: &CallRequest) -> Presented {
    match call.input.get("requestState") {
        None | Some(Value::Null) => Presented::None,
        Some(Value::String(s)) => sealer.open(s).map_or(Presented::Foreign, Presented::Ours),
        Some(_) => Presented::Foreign,
    }
}

/// What an approval of this exact call is bound to.
fn binding(a: &Approvals<'_>, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal) -> Binding {
    Binding {
        tenant: call.caller.tenant.clone(),
        caller: call.caller.name.clone(),
        server: tool.server.clone(),
        tool: tool.tool.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        policy_version: a.policy_version.to_string(),
    }
}

/// The state of the approval a call presents, for policy's
/// `context.approval`: none unless it is an approval of exactly this
/// call (an approval of another call never counts).
async fn state_of(a: &Approvals<'_>, claim: &Claim, binding: &Binding) -> Option<ApprovalState> {
    if claim.binding != *binding {
        return None;
    }
    match a.ledger.approval(&claim.approval_id).await {
        Ok(Some(found)) if found.binding == *binding => Some(found.state_at(a.clock.now_ms())),
        _ => None,
    }
}

/// How the approve stage ends, when it does not stop the call.
pub enum Gated {
    /// Run the call (under an approval, if it has one).
    Run(Gate),
    /// Open this approval; its receipt commits with it (`open`).
    Open(NewApproval),
    /// An approval of this call is pending: answer that it waits.
    Wait { id: String, answer: RawObject },
}

pub async fn approve(a: &Approvals<'_>, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal, decision: &Decision, standing: Standing) -> Result<Gated, Stop> {
    let Standing { presented, state: approval_state } = standing;
    match decision.verdict {
        Verdict::Deny => {
            let refusal = Refusal::from_decision(decision, &tool.exposed_name).expect("deny refuses");
            return Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)));
        }
        Verdict::Allow => {
            // Allowed while presenting an approved approval of this very call
            // (a policy may permit approved calls): running it uses it up, once.
            if let (Presented::Ours(claim), Some(ApprovalState::Approved)) = (&presented, approval_state) {
                let input = upstream_input(&call.input, &presented);
                return use_approval(a, tool, proposal, claim.approval_id.clone(), binding(a, call, tool, proposal), input).await.map(Gated::Run);
            }
            // A state of ours has no business upstream: unwrap or drop it.
            return Ok(Gated::Run(Gate { approval: None, input: upstream_input(&call.input, &presented), used: false }));
        }
        Verdict::RequireApproval => {}
    }
    let refuse = |reason: Reason, approval: Option<&str>| refused(reason, tool, proposal, approval);
    let binding = binding(a, call, tool, proposal);
    let claim = match &presented {
        Presented::Foreign => return Err(refuse(Reason::RequestStateInvalid, None)),
        Presented::Ours(claim) => Some(claim.clone()),
        Presented::None => None,
    };
    let found = match &claim {
        Some(c) => a.ledger.approval(&c.approval_id).await.map(|found| (found, None)),
        None => a.ledger.latest_approval(&binding).await.map(|latest| (None, latest)),
    };
    let (claimed, latest) = found.map_err(|e| store_failed(e, tool, proposal))?;
    let now_ms = a.clock.now_ms();
    match approval::judge(&binding, claim.as_ref(), claimed.as_ref(), latest.as_ref(), now_ms) {
        Step::Open => {
            let reason = if decision.why.is_empty() { format!("{} requires approval ({})", tool.exposed_name, decision.rules.join(", ")) } else { decision.why.clone() };
            let id = a.entropy.id("apr_");
            let arguments = proposal.arguments.clone();
            Ok(Gated::Open(NewApproval { id, binding, arguments, reason, rules: decision.rules.clone(), now_ms, ttl_ms: a.ttl_ms, receipt: None }))
        }
        Step::Wait(_) => {
            let pending = claimed.as_ref().or(latest.as_ref()).expect("judge waits on a known approval");
            Ok(Gated::Wait { id: pending.id.clone(), answer: input_required(a, call, tool, pending) })
        }
        Step::Consume(id) => use_approval(a, tool, proposal, id, binding, upstream_input(&call.input, &presented)).await.map(Gated::Run),
        Step::Continue(id) => Ok(Gated::Run(Gate { approval: Some((id, binding)), input: upstream_input(&call.input, &presented), used: false })),
        Step::Refuse(Reason::ApprovalUsed) if claimed.is_some() => {
            let id = claimed.map(|found| found.id).expect("checked");
            Ok(Gated::Run(Gate { approval: Some((id, binding)), input: upstream_input(&call.input, &presented), used: true }))
        }
        Step::Refuse(reason) => {
            let id = claimed.as_ref().or(latest.as_ref()).map(|found| found.id.clone());
            Err(refuse(reason, id.as_deref()))
        }
    }
}

/// Opens `new` with `receipt` (the decision to wait, in the same
/// transaction) and answers that the call waits for it.
pub async fn open(a: &Approvals<'_>, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal, mut new: NewApproval, receipt: Draft) -> Result<RawObject, Stop> {
    new.receipt = Some(receipt);
    let opened = a.ledger.create_approval(new).await.map_err(|e| store_failed(e, tool, proposal))?;
    tracing::info!(target: "toolgate::approval", approval = %opened.id, tool = %tool.exposed_name, caller = %opened.binding.caller, "approval opened");
    Ok(input_required(a, call, tool, &opened))
}

/// Uses approval `id` for this one dispatch; exactly one of any number of
/// concurrent users gets it.
async fn use_approval(a: &Approvals<'_>, tool: &ExposedTool, proposal: &Proposal, id: String, binding: Binding, input: Map<String, Value>) -> Result<Gate, Stop> {
    match a.ledger.consume_approval(&id, a.clock.now_ms()).await {
        Ok(_) => Ok(Gate { approval: Some((id, binding)), input, used: false }),
        // The approval just expired, or another re-issue won the race (its
        // operation answers this one).
        Err(LedgerError::NotApproved { state: "expired", .. }) => Err(refused(Reason::ApprovalExpired, tool, proposal, Some(&id))),
        Err(LedgerError::NotApproved { .. }) => Ok(Gate { approval: Some((id, binding)), input, used: true }),
        Err(e) => Err(store_failed(e, tool, proposal)),
    }
}

fn refused(reason: Reason, tool: &ExposedTool, proposal: &Proposal, approval: Option<&str>) -> Stop {
    let mut r = approval::refusal(reason, &tool.exposed_name).with_proposal(&proposal.sha256);
    if let Some(id) = approval {
        r = r.with_approval(id);
    }
    Stop::Refused(r)
}

/// An approved call whose tool asks for input of its own: the upstream's
/// `requestState` travels inside one of ours, so the next round is known to
/// belong to the approved call.
pub fn seal_continuation(sealer: &Sealer, gate: &Gate, answer: Answer) -> Answer {
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
    result.insert("requestState".into(), raw(&sealer.seal(&claim)));
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
fn input_required(a: &Approvals<'_>, call: &CallRequest, tool: &ExposedTool, approval: &Approval) -> RawObject {
    let state = approval.state_at(a.clock.now_ms()).as_str();
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
    out.insert("requestState".into(), raw(&a.sealer.seal(&claim)));
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
