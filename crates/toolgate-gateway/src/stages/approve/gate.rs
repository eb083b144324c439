//! The gate: the decision, as the approval this call stands under makes it.
//! Deny refuses; allow runs (using an approval of this call it presents);
//! require_approval runs under an approval that lets it, or opens one, or
//! waits for the pending one. `judge` in toolgate-core is the rule; the
//! gate reads the store and uses an approval up.

use toolgate_core::approval::{self, Approval, ApprovalState, Step};
use toolgate_core::{Decision, Reason, Refusal, Verdict};
use toolgate_ledger::LedgerError;

use super::standing::{Presented, Standing};
use super::{Approvals, Asked, ask, raw, refused, store_failed, upstream_input};
use crate::call::{Answer, Gate, Stop};
use crate::catalog::ExposedTool;
use crate::seal::Sealer;
use toolgate_core::Proposal;
use toolgate_core::approval::Claim;

/// How the gate ends, when it does not stop the call.
pub(super) enum Gated {
    /// Run the call (under an approval, if it has one).
    Run(Gate),
    /// Open an approval of this call, under its operation key (`open`).
    Open(Option<String>),
    /// An approval of this call is pending: hold the call for its decision.
    Wait(Approval),
    /// The person at the client said they will not wait for this approval
    /// (`ask` answers): nothing runs, nothing is used.
    Declined(Approval),
}

/// The decision, as the approval this call stands under makes it: run,
/// open one, or wait for the pending one.
pub(super) async fn gate(
    a: &Approvals<'_>,
    (cx, call, tool, proposal): Asked<'_>,
    decision: &Decision,
    standing: &Standing,
) -> Result<Gated, Stop> {
    let Standing { presented, state: approval_state, binding } = standing;
    let runs = |approval: Option<String>, used| Gate {
        approval: approval.map(|id| (id, binding.clone())),
        input: upstream_input(&call.input, presented),
        used,
    };
    match decision.verdict {
        Verdict::Deny => {
            let refusal =
                Refusal::from_decision(decision, &tool.exposed_name).expect("deny refuses");
            return Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)));
        }
        Verdict::Allow => {
            // Allowed while presenting an approved approval of this very call
            // (a policy may permit approved calls): running it uses it up, once.
            if let (Presented::Ours(claim), Some(ApprovalState::Approved)) =
                (presented, approval_state)
            {
                let id = claim.approval_id.clone();
                return use_approval(a, tool, proposal, id, runs).await.map(Gated::Run);
            }
            // A state of ours has no business upstream: unwrap or drop it.
            return Ok(Gated::Run(runs(None, false)));
        }
        Verdict::RequireApproval => {}
    }
    let refuse = |reason: Reason, approval: Option<&str>| refused(reason, tool, proposal, approval);
    // An approval is for one operation: the client's own key, or none.
    let key = call.client_key().map_err(|r| Stop::Refused(r.with_proposal(&proposal.sha256)))?;
    let claim = match presented {
        Presented::Foreign => return Err(refuse(Reason::RequestStateInvalid, None)),
        Presented::Ours(claim) => Some(claim.clone()),
        Presented::None => None,
    };
    let found = match &claim {
        Some(c) => a.ledger.approval(&c.approval_id).await.map(|found| (found, None)),
        None => a.ledger.latest_approval(binding, key).await.map(|latest| (None, latest)),
    };
    let (claimed, latest) = found.map_err(|e| store_failed(e, tool, proposal))?;
    if claimed.as_ref().is_some_and(|c| c.operation_key.as_deref() != key) {
        // Presented under another operation key than it was asked under.
        return Err(refuse(Reason::ApprovalMissingOrMismatched, None));
    }
    let step =
        approval::judge(binding, claim.as_ref(), claimed.as_ref(), latest.as_ref(), cx.began_ms);
    if matches!(step, Step::Wait(_) | Step::Consume(_) | Step::Replay(_)) && ask::declined(call) {
        // The person at the client said they will not wait: end the call,
        // running nothing and using nothing (the approval stays as it is).
        let known = claimed.or(latest).expect("judge names a known approval");
        return Ok(Gated::Declined(known));
    }
    let open = || Gated::Open(key.map(str::to_string));
    match step {
        Step::Open => Ok(open()),
        Step::Wait(_) => {
            Ok(Gated::Wait(claimed.or(latest).expect("judge waits on a known approval")))
        }
        // The same call again after its approval let it run: the operation it
        // ran answers (reserve replays its outcome). A read records none, so
        // the same read asks anew.
        Step::Replay(_) if tool.read_only() => Ok(open()),
        Step::Replay(id) => Ok(Gated::Run(runs(Some(id), true))),
        Step::Consume(id) => use_approval(a, tool, proposal, id, runs).await.map(Gated::Run),
        Step::Continue(id) => Ok(Gated::Run(runs(Some(id), false))),
        Step::Refuse(Reason::ApprovalUsed) if claimed.is_some() => {
            let id = claimed.map(|found| found.id).expect("checked");
            Ok(Gated::Run(runs(Some(id), true)))
        }
        Step::Refuse(reason) => {
            let id = claimed.as_ref().or(latest.as_ref()).map(|found| found.id.clone());
            Err(refuse(reason, id.as_deref()))
        }
    }
}

/// Uses approval `id` for this one dispatch (the gate `runs` makes);
/// exactly one of any number of concurrent users gets it.
async fn use_approval(
    a: &Approvals<'_>,
    tool: &ExposedTool,
    proposal: &Proposal,
    id: String,
    runs: impl Fn(Option<String>, bool) -> Gate,
) -> Result<Gate, Stop> {
    match a.ledger.consume_approval(&id, a.clock.now_ms()).await {
        Ok(_) => Ok(runs(Some(id), false)),
        // The approval just expired, or another re-issue won the race (its
        // operation answers this one).
        Err(LedgerError::NotApproved { state: "expired", .. }) => {
            Err(refused(Reason::ApprovalExpired, tool, proposal, Some(&id)))
        }
        Err(LedgerError::NotApproved { .. }) => Ok(runs(Some(id), true)),
        Err(e) => Err(store_failed(e, tool, proposal)),
    }
}

/// An approved call whose tool asks for input of its own: the upstream's
/// `requestState` travels inside one of ours, so the next round is known to
/// belong to the approved call.
pub(crate) fn seal_continuation(sealer: &Sealer, gate: &Gate, answer: Answer) -> Answer {
    let Some((id, binding)) = &gate.approval else { return answer };
    let mut result = match answer {
        Answer::Result(result) => result,
        other => return other,
    };
    if result.get("resultType").is_none_or(|t| t.get() != "\"input_required\"") {
        return Answer::Result(result);
    }
    let upstream_state = result
        .get("requestState")
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        .unwrap_or_default();
    let claim = Claim {
        approval_id: id.clone(),
        binding: binding.clone(),
        upstream_state: Some(upstream_state),
    };
    result.insert("requestState".into(), raw(&sealer.seal(&claim)));
    Answer::Result(result)
}
