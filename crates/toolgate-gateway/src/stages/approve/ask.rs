//! What a call waiting for its approval is told when it does not run: a
//! question its person can answer (a 2026-07-28 client that declared
//! elicitation), or a refusal naming the approval (every other client) —
//! never an empty round that a client would repeat until it gives up.

use serde_json::{Value, json};
use toolgate_core::approval::{Approval, ApprovalState, Claim};
use toolgate_core::{Action, Reason, Refusal, Verdict};

use super::standing::Presented;
use super::{APPROVAL_META, Approvals, Asked, INPUT_KEY, raw, refused, upstream_input};
use crate::call::{Call, Context, Gate, Stop};
use crate::catalog::ExposedTool;
use toolgate_mcp::wire::{Era, RawObject};

/// How a call that waits for an approval leaves approve without running.
pub(super) enum Unrun {
    /// Its person said they will not wait (the gate saw their answer).
    Declined(Approval),
    /// Its client cancelled it while it was held.
    Cancelled(Approval),
    /// Its approval was not approved while it was held.
    Unheld(Approval),
    /// Approved while held, yet the gate did not let it run: the store
    /// disagreed, and the approval is as it was.
    StillWaiting(Approval),
}

/// The answer to a call that leaves approve unrun.
pub(super) fn answer(
    a: &Approvals<'_>,
    (cx, call, tool, proposal): Asked<'_>,
    unrun: Unrun,
) -> Result<Gate, Stop> {
    let refusal = match unrun {
        Unrun::Unheld(approval) => return unheld(a, cx, call, tool, proposal, approval),
        Unrun::Declined(known) => {
            waiting_refusal(tool, &known, cx.began_ms, "you chose not to wait for it")
        }
        Unrun::Cancelled(approval) => cancelled(a, tool, &approval),
        Unrun::StillWaiting(approval) => {
            waiting_refusal(tool, &approval, a.clock.now_ms(), "it could not be used just now")
        }
    };
    Err(Stop::Refused(refusal))
}

/// How a held call ends when its approval was not approved during the
/// hold: still pending → an elicitation the client can answer (if it can),
/// else an `escalate` refusal naming the approval; denied or expired → the
/// refusal; used meanwhile by another re-issue → its recorded outcome.
pub(super) fn unheld(
    a: &Approvals<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &toolgate_core::Proposal,
    approval: Approval,
) -> Result<Gate, Stop> {
    match approval.state_at(a.clock.now_ms()) {
        ApprovalState::Pending if elicits(cx, call) => {
            Err(Stop::Input(input_required(a, tool, &approval)))
        }
        ApprovalState::Pending => Err(Stop::Refused(waiting_refusal(
            tool,
            &approval,
            a.clock.now_ms(),
            "it was not decided while the call was held",
        ))),
        ApprovalState::Consumed => Ok(Gate {
            approval: Some((approval.id, approval.binding)),
            input: upstream_input(&call.input, &Presented::None),
            used: true,
        }),
        ApprovalState::Denied => {
            Err(refused(Reason::ApprovalDenied, tool, proposal, Some(&approval.id)))
        }
        ApprovalState::Expired => {
            Err(refused(Reason::ApprovalExpired, tool, proposal, Some(&approval.id)))
        }
        // Approved calls pass the gate again, not here.
        ApprovalState::Approved => Err(Stop::Refused(waiting_refusal(
            tool,
            &approval,
            a.clock.now_ms(),
            "it was approved as the hold ended",
        ))),
    }
}

/// The answer to a call its client cancelled while it was held (which the
/// client no longer reads): its receipt names `client.cancelled` beside
/// the approval's rules.
fn cancelled(a: &Approvals<'_>, tool: &ExposedTool, approval: &Approval) -> Refusal {
    let mut refusal = waiting_refusal(
        tool,
        approval,
        a.clock.now_ms(),
        "the client cancelled the call while it was held",
    );
    refusal.rules = approval.rules.iter().cloned().chain([CLIENT_CANCELLED.to_string()]).collect();
    refusal
}

/// The rule a cancelled call's receipt names.
const CLIENT_CANCELLED: &str = "client.cancelled";

/// Whether the client can be asked (2026-07-28, with `elicitation` declared).
fn elicits(cx: &Context, call: &Call) -> bool {
    cx.era == Era::Modern
        && call.client_capabilities.as_ref().is_some_and(|c| c.get("elicitation").is_some())
}

/// The person at the client declined or cancelled our question, or
/// answered that they will not wait.
pub(super) fn declined(call: &Call) -> bool {
    let Some(answer) = call.input.get("inputResponses").and_then(|r| r.get(INPUT_KEY)) else {
        return false;
    };
    let action = answer.get("action").and_then(Value::as_str);
    let wait = answer.get("content").and_then(|c| c.get(WAIT_FIELD)).and_then(Value::as_bool);
    matches!(action, Some("decline" | "cancel")) || wait == Some(false)
}

/// The field of our question: keep waiting for the approver?
pub(super) const WAIT_FIELD: &str = "wait";

/// Who decides approval `id`, and how: the same words in every answer.
fn how_to_decide(id: &str) -> String {
    format!(
        "a person with the approver role decides it with `toolgate approvals approve --config CONFIG {id} --as NAME --reason TEXT` \
         (or `deny`), or POST /admin/approvals/{id}/approve on this gateway"
    )
}

/// The refusal of a call that ends while its approval waits (both eras):
/// it names the approval, who decides and how, and what to do next.
fn waiting_refusal(tool: &ExposedTool, approval: &Approval, now_ms: i64, why: &str) -> Refusal {
    let left = ((approval.expires_ms - now_ms).max(0) / 1000).to_string();
    let message = format!(
        "{} waits for a named approver ({}); approval {} is {} and {why}. Nothing was run; {}. Once it is approved, \
         call again with the same arguments (within {left} s): the call runs once, and repeating it returns the recorded result.",
        tool.exposed_name,
        approval.reason,
        approval.id,
        approval.state_at(now_ms).as_str(),
        how_to_decide(&approval.id)
    );
    Refusal::new(Verdict::RequireApproval, Reason::ApprovalPending, Action::Escalate, message)
        .with_proposal(&approval.binding.proposal_sha256)
        .with_approval(&approval.id)
}

/// `input_required` for a call still waiting on pending `approval`, to a
/// 2026-07-28 client that declared elicitation: a question it can show its
/// person — what is asked, the proposal hash, who must decide — and a
/// sealed `requestState`. Accepting holds the call again; declining ends
/// it with a refusal.
fn input_required(a: &Approvals<'_>, tool: &ExposedTool, approval: &Approval) -> RawObject {
    // Only a call whose approval is pending is asked.
    let state = ApprovalState::Pending.as_str();
    let message = format!(
        "{} waits for a named approver: {}. Approval {} (proposal {}) is {state}; {}. Keep waiting for the decision?",
        tool.exposed_name,
        approval.reason,
        approval.id,
        approval.binding.proposal_sha256,
        how_to_decide(&approval.id)
    );
    let claim = Claim {
        approval_id: approval.id.clone(),
        binding: approval.binding.clone(),
        upstream_state: None,
    };
    let mut out = RawObject::new();
    out.insert("resultType".into(), raw("input_required"));
    out.insert(
        "inputRequests".into(),
        raw(&json!({INPUT_KEY: {"method": "elicitation/create", "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {
                WAIT_FIELD: {"type": "boolean", "title": "Keep waiting", "description": format!("Wait for approval {} to be decided", approval.id), "default": true}
            }, "required": [WAIT_FIELD]}
        }}})),
    );
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolgate_core::approval::Approval;
    use toolgate_core::{Action, Reason, Verdict};

    use super::*;
    use crate::stages::testing::{NOW_MS, Store, call, field, order_tool, split};

    const TTL_MS: i64 = 60_000;

    async fn pending(s: &Store) -> Approval {
        s.pending_approval("apr_ask").await
    }

    fn order(
        era: Era,
        capabilities: Option<serde_json::Value>,
        answer: Option<serde_json::Value>,
    ) -> (Context, Call) {
        let mut c = call("parts__raise_parts_order", json!({"part_no": "P-1", "quantity": 8}));
        c.era = era;
        c.call.client_capabilities = capabilities;
        if let Some(answer) = answer {
            c.call.input.insert("inputResponses".into(), json!({INPUT_KEY: answer}));
        }
        split(&c)
    }

    #[test]
    fn only_a_2026_client_that_declared_elicitation_is_asked() {
        let asks = |era, caps| {
            let (cx, call) = order(era, caps, None);
            elicits(&cx, &call)
        };
        assert!(asks(Era::Modern, Some(json!({"elicitation": {}}))));
        assert!(!asks(Era::Modern, Some(json!({"sampling": {}}))));
        assert!(!asks(Era::Modern, None));
        assert!(
            !asks(Era::Legacy, Some(json!({"elicitation": {}}))),
            "a legacy client cannot answer an input_required round"
        );
    }

    #[test]
    fn declining_cancelling_or_answering_no_means_do_not_wait() {
        let declined_with = |answer| declined(&order(Era::Modern, None, answer).1);
        assert!(declined_with(Some(json!({"action": "decline"}))));
        assert!(declined_with(Some(json!({"action": "cancel"}))));
        assert!(declined_with(Some(json!({"action": "accept", "content": {WAIT_FIELD: false}}))));
        assert!(!declined_with(Some(json!({"action": "accept", "content": {WAIT_FIELD: true}}))));
        assert!(!declined_with(Some(json!({"action": "accept"}))));
        assert!(!declined_with(None), "a call that was never asked declined nothing");
    }

    #[tokio::test]
    async fn a_refusal_while_waiting_names_the_approval_who_decides_and_the_time_left() {
        let s = Store::open().await;
        let approval = pending(&s).await;
        let r = waiting_refusal(
            &order_tool(),
            &approval,
            NOW_MS + 15_000,
            "it was not decided while the call was held",
        );
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::RequireApproval, Reason::ApprovalPending, Action::Escalate)
        );
        assert_eq!(
            (r.approval_id.as_deref(), r.proposal_sha256.as_deref()),
            (Some("apr_ask"), Some("p".repeat(64).as_str()))
        );
        for said in [
            "approval apr_ask is pending",
            "it was not decided while the call was held",
            "toolgate approvals approve",
            "POST /admin/approvals/apr_ask/approve",
            "within 45 s",
        ] {
            assert!(r.message.contains(said), "{said:?} in {}", r.message);
        }
    }

    #[tokio::test]
    async fn the_question_carries_the_approval_and_a_sealed_state_that_names_it() {
        let s = Store::open().await;
        let approval = pending(&s).await;
        let out = input_required(&s.approvals(TTL_MS, 0), &order_tool(), &approval);
        assert_eq!(field(&out, "resultType"), "input_required");
        let asked = &field(&out, "inputRequests")[INPUT_KEY];
        assert_eq!(
            (&asked["method"], &asked["params"]["requestedSchema"]["required"]),
            (&json!("elicitation/create"), &json!([WAIT_FIELD]))
        );
        assert!(
            asked["params"]["message"]
                .as_str()
                .unwrap()
                .contains(&approval.binding.proposal_sha256),
            "the person sees which exact call waits"
        );
        let claim = s
            .sealer
            .open(field(&out, "requestState").as_str().unwrap())
            .expect("sealed by this gateway");
        assert_eq!(
            (claim.approval_id.as_str(), &claim.binding, claim.upstream_state),
            ("apr_ask", &approval.binding, None)
        );
        let meta = &field(&out, "_meta")[APPROVAL_META];
        assert_eq!(
            (&meta["id"], &meta["state"], &meta["expires_ms"]),
            (&json!("apr_ask"), &json!("pending"), &json!(NOW_MS + TTL_MS))
        );
    }
}
