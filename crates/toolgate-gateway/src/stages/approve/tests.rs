use super::ask::{Unrun, WAIT_FIELD, answer, unheld};
use super::gate::gate;
use super::open::{new_approval, open};
use super::*;
use crate::call::{Answer, CallRequest};
use crate::commit::Commit;
use crate::stages::testing::{NOW_MS, Store, call, field, order_tool, passed, refused, split_at};
use serde_json::Map;
use serde_json::json;
use toolgate_core::approval::Binding;
use toolgate_core::decision::decide_by_class;
use toolgate_ledger::NewApproval;
use toolgate_mcp::wire::{Era, RawObject};

const TTL_MS: i64 = 60_000;

fn approvals(s: &Store) -> Approvals<'_> {
    s.approvals(TTL_MS, 0)
}

/// The agent's order of `quantity` units, presenting `state` as its
/// requestState, from a 2026-07-28 client that declared elicitation.
fn order(quantity: u32, state: Option<&str>) -> CallRequest {
    let mut c = call("parts__raise_parts_order", json!({"part_no": "P-1", "quantity": quantity}));
    c.call.client_capabilities = Some(json!({"elicitation": {}}));
    if let Some(state) = state {
        c.call.input.insert("requestState".into(), json!(state));
    }
    c
}

fn proposal(c: &CallRequest) -> Proposal {
    Proposal::new("parts", "raise_parts_order", c.call.arguments.clone())
}

/// The registry's requires_approval class, as decide concludes it.
fn needs_approval() -> Decision {
    decide_by_class(&order_tool().view)
}

fn decision(verdict: Verdict, reason: Reason, rule: &str) -> Decision {
    Decision::by(verdict, reason, vec![rule.into()])
}

/// The approve stage as the pipeline runs it: the call's standing, then the gate.
/// How the gate ends, as these tests read it: the approval it would open
/// is built, and a call whose person will not wait is answered as the
/// stage answers it.
enum Gated {
    Run(Gate),
    Open(NewApproval),
    Wait(Approval),
}

async fn gated(s: &Store, c: &CallRequest, decision: &Decision) -> Result<Gated, Stop> {
    let (a, (cx, call)) = (approvals(s), split_at(c, s.clock.as_ref()));
    let (tool, proposal) = (order_tool(), proposal(c));
    let standing = standing(&a, &cx, &call, &tool, &proposal).await;
    let asked = (&cx, &call, &tool, &proposal);
    Ok(match gate(&a, asked, decision, &standing).await? {
        gate::Gated::Run(gate) => Gated::Run(gate),
        gate::Gated::Open(key) => {
            Gated::Open(new_approval(&a, asked, (decision, &standing.binding, key)))
        }
        gate::Gated::Wait(pending) => Gated::Wait(pending),
        gate::Gated::Declined(known) => {
            let answer = answer(&a, asked, Unrun::Declined(known));
            return Err(answer.err().expect("declined runs nothing"));
        }
    })
}

/// An approval decided while its call was held, as the door presents it
/// to the gate once more.
fn presenting(approval: &Approval, binding: Binding) -> Standing {
    let claim = Claim {
        approval_id: approval.id.clone(),
        binding: approval.binding.clone(),
        upstream_state: None,
    };
    Standing { presented: Presented::Ours(claim), state: Some(ApprovalState::Approved), binding }
}

/// What policy would see as `context.approval` for `c`.
async fn seen_by_policy(s: &Store, c: &CallRequest) -> Option<ApprovalState> {
    let (cx, call) = split_at(c, s.clock.as_ref());
    standing(&approvals(s), &cx, &call, &order_tool(), &proposal(c)).await.state
}

fn run(gated: Gated) -> Gate {
    match gated {
        Gated::Run(gate) => gate,
        Gated::Open(new) => panic!("expected to run; opened {}", new.id),
        Gated::Wait(pending) => panic!("expected to run; waits for {}", pending.id),
    }
}

fn opened(gated: Gated) -> NewApproval {
    match gated {
        Gated::Open(new) => new,
        Gated::Run(gate) => {
            panic!("expected a new approval; runs under {:?}", gate.approval_id())
        }
        Gated::Wait(pending) => panic!("expected a new approval; waits for {}", pending.id),
    }
}

fn waits(gated: Gated) -> Approval {
    match gated {
        Gated::Wait(pending) => pending,
        Gated::Run(gate) => panic!("expected to wait; runs under {:?}", gate.approval_id()),
        Gated::Open(new) => panic!("expected to wait; opened {}", new.id),
    }
}

/// Opens the approval `c` waits for, as the pipeline does, and answers
/// as at the end of a hold in which nobody decided.
async fn open_for(s: &Store, c: &CallRequest) -> (String, Stop) {
    let new = opened(passed(gated(s, c, &needs_approval()).await));
    let id = new.id.clone();
    let (cx, call) = split_at(c, s.clock.as_ref());
    let a = approvals(s);
    let pending = passed(open(&a, s, &order_tool(), &proposal(c), new, s.draft()).await).0;
    match unheld(&a, &cx, &call, &order_tool(), &proposal(c), pending) {
        Err(stop) => (id, stop),
        Ok(gate) => {
            panic!("a pending approval runs nothing; ran under {:?}", gate.approval_id())
        }
    }
}

fn asked(stop: Stop) -> RawObject {
    match stop {
        Stop::Input(answer) => answer,
        Stop::Refused(r) => {
            panic!("expected input_required; refused {:?}: {}", r.reason, r.message)
        }
        Stop::Error(e) => panic!("expected input_required; error {}", e.message),
    }
}

/// An order of 2 units waiting for approval: its id and sealed requestState.
async fn waiting_order(s: &Store) -> (String, String) {
    let (id, stop) = open_for(s, &order(2, None)).await;
    (id, field(&asked(stop), "requestState").as_str().expect("a sealed requestState").to_string())
}

async fn decide_as_dana(s: &Store, id: &str, approve: bool) {
    s.ledger
        .decide_approval(
            id,
            approve,
            toolgate_ledger::Decider {
                name: "dana",
                subject: "dana@atlas.example",
                tenant: "atlas",
            },
            "checked",
            s.clock.now_ms(),
        )
        .await
        .expect("dana may decide");
}

async fn stored(s: &Store, id: &str) -> Approval {
    s.ledger.approval(id).await.unwrap().expect("the approval is stored")
}

#[tokio::test]
async fn deny_refuses_with_the_decisions_rules_and_opens_nothing() {
    let s = Store::open().await;
    let c = order(2, None);
    let r =
        refused(gated(&s, &c, &decision(Verdict::Deny, Reason::PolicyForbids, "no_orders")).await);
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::PolicyForbids, Action::Refused)
    );
    assert_eq!(
        (r.rules.as_slice(), r.proposal_sha256.as_deref()),
        (["no_orders".to_string()].as_slice(), Some(proposal(&c).sha256.as_str()))
    );
    assert_eq!(s.receipts().await, 0);
}

#[tokio::test]
async fn an_allowed_call_runs_without_an_approval_and_an_upstreams_state_passes_through() {
    let s = Store::open().await;
    // Not sealed by toolgate: the upstream's own, for tools that need no approval.
    let c = order(2, Some("upstream-round-1"));
    let gate =
        run(passed(gated(&s, &c, &decision(Verdict::Allow, Reason::Automatic, "registry")).await));
    assert!(gate.approval.is_none() && !gate.used);
    assert_eq!(gate.input.get("requestState"), Some(&json!("upstream-round-1")));
}

#[tokio::test]
async fn a_call_needing_approval_opens_one_bound_to_exactly_this_call() {
    let s = Store::open().await;
    let c = order(2, None);
    let new = opened(passed(gated(&s, &c, &needs_approval()).await));
    assert!(new.id.starts_with("apr_"), "{}", new.id);
    let binding = Binding {
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "parts".into(),
        tool: "raise_parts_order".into(),
        proposal_sha256: proposal(&c).sha256,
        policy_version: "policy-v1".into(),
    };
    assert_eq!(new.binding, binding);
    assert_eq!(
        (new.now_ms, new.ttl_ms, new.rules.as_slice()),
        (NOW_MS, TTL_MS, ["registry".to_string()].as_slice())
    );
    assert_eq!(new.reason, "parts__raise_parts_order requires approval (registry)");
    // Nothing is stored until `open` commits it, with its receipt.
    assert!(s.ledger.approval(&new.id).await.unwrap().is_none());
    let (cx, call) = split_at(&c, s.clock.as_ref());
    let a = approvals(&s);
    let pending =
        passed(open(&a, &s, &order_tool(), &proposal(&c), new.clone(), s.draft()).await).0;
    assert_eq!((stored(&s, &new.id).await.state, s.receipts().await), (ApprovalState::Pending, 1));
    let waiting = asked(
        unheld(&a, &cx, &call, &order_tool(), &proposal(&c), pending).err().expect("it waits"),
    );
    assert_eq!(field(&waiting, "resultType"), "input_required");
    let meta = &field(&waiting, "_meta")[APPROVAL_META];
    assert_eq!(
        (&meta["id"], &meta["state"], &meta["expires_ms"]),
        (&json!(new.id), &json!("pending"), &json!(NOW_MS + TTL_MS))
    );
    // The requestState carries the binding, sealed.
    let claim = s
        .sealer
        .open(field(&waiting, "requestState").as_str().unwrap())
        .expect("sealed by this gateway");
    assert_eq!((claim.approval_id, claim.binding, claim.upstream_state), (new.id, binding, None));
}

#[tokio::test]
async fn what_a_waiting_client_is_told_depends_on_what_it_can_do() {
    let s = Store::open().await;
    // A client that can be asked gets a real question: what, which
    // proposal, who decides; never an empty round.
    let (id, stop) = open_for(&s, &order(2, None)).await;
    let answer = asked(stop);
    let question = &field(&answer, "inputRequests")[INPUT_KEY];
    assert_eq!(question["method"], "elicitation/create");
    let message = question["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(&id)
            && message.contains(&proposal(&order(2, None)).sha256)
            && message.contains("toolgate approvals approve"),
        "{message}"
    );
    assert_eq!(question["params"]["requestedSchema"]["properties"][WAIT_FIELD]["type"], "boolean");
    // A client that cannot (no elicitation declared, or legacy): an
    // escalate refusal naming the approval, in either era.
    for (era, quantity) in [(Era::Modern, 3), (Era::Legacy, 4)] {
        let mut plain = order(quantity, None);
        plain.era = era;
        plain.call.client_capabilities = None;
        let (id, stop) = open_for(&s, &plain).await;
        let Stop::Refused(r) = stop else { panic!("{era:?}: expected a refusal") };
        assert_eq!(
            (r.reason, r.action, r.approval_id.as_deref()),
            (Reason::ApprovalPending, Action::Escalate, Some(id.as_str())),
            "{era:?}"
        );
        assert!(
            r.message.contains("call again with the same arguments")
                && !r.message.contains("requestState"),
            "{}",
            r.message
        );
    }
}

#[tokio::test]
async fn a_declined_question_ends_the_call_with_a_refusal_not_another_round() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    for answer in [
        json!({"action": "decline"}),
        json!({"action": "cancel"}),
        json!({"action": "accept", "content": {WAIT_FIELD: false}}),
    ] {
        let mut c = order(2, Some(state.as_str()));
        c.call.input.insert("inputResponses".into(), json!({INPUT_KEY: answer.clone()}));
        let r = refused(gated(&s, &c, &needs_approval()).await);
        assert_eq!(
            (r.reason, r.action, r.approval_id.as_deref()),
            (Reason::ApprovalPending, Action::Escalate, Some(id.as_str())),
            "{answer}"
        );
    }
    // Accepting keeps waiting (the pipeline holds it again).
    let mut c = order(2, Some(state.as_str()));
    c.call.input.insert(
        "inputResponses".into(),
        json!({INPUT_KEY: {"action": "accept", "content": {WAIT_FIELD: true}}}),
    );
    assert_eq!(waits(passed(gated(&s, &c, &needs_approval()).await)).id, id);
    assert_eq!(
        stored(&s, &id).await.state,
        ApprovalState::Pending,
        "declining the question decides nothing"
    );
    // Declined after it was approved meanwhile: still nothing runs, and
    // the approval stays usable by a later re-issue.
    decide_as_dana(&s, &id, true).await;
    let mut c = order(2, Some(state.as_str()));
    c.call.input.insert("inputResponses".into(), json!({INPUT_KEY: {"action": "decline"}}));
    let r = refused(gated(&s, &c, &needs_approval()).await);
    assert_eq!((r.reason, r.approval_id.as_deref()), (Reason::ApprovalPending, Some(id.as_str())));
    assert_eq!(stored(&s, &id).await.state, ApprovalState::Approved);
}

#[tokio::test]
async fn an_approval_is_for_one_operation_key_and_no_other() {
    let s = Store::open().await;
    let keyed = |key: Option<&str>, state: Option<&str>| {
        let mut c = order(2, state);
        c.call.operation_key = key.map(|k| json!(k));
        c
    };
    // A keyless order runs under its approval.
    let (plain, state) = waiting_order(&s).await;
    decide_as_dana(&s, &plain, true).await;
    run(passed(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await));
    // The same content under the client's own key is a second operation:
    // an approval of its own, which a keyless retry never waits on or uses.
    let new = opened(passed(gated(&s, &keyed(Some("order-2"), None), &needs_approval()).await));
    assert_eq!(new.operation_key.as_deref(), Some("order-2"));
    let second = passed(
        open(&approvals(&s), &s, &order_tool(), &proposal(&order(2, None)), new, s.draft()).await,
    )
    .0
    .id;
    let retry = run(passed(gated(&s, &order(2, None), &needs_approval()).await));
    assert_eq!(
        (retry.approval_id(), retry.used),
        (Some(plain.as_str()), true),
        "the keyless retry replays the first order"
    );
    assert_eq!(
        waits(passed(gated(&s, &keyed(Some("order-2"), None), &needs_approval()).await)).id,
        second
    );
    // Presented under another key than it was asked under: not this approval.
    let r =
        refused(gated(&s, &keyed(Some("order-3"), Some(state.as_str())), &needs_approval()).await);
    assert_eq!(r.reason, Reason::ApprovalMissingOrMismatched);
}

#[tokio::test]
async fn the_same_call_after_its_approval_ran_replays_in_every_era() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    run(passed(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await));
    // Re-issued without any requestState (a legacy client, a lost answer):
    // the operation the approval ran answers; nothing opens, nothing runs.
    for era in [Era::Legacy, Era::Modern] {
        let mut again = order(2, None);
        again.era = era;
        let gate = run(passed(gated(&s, &again, &needs_approval()).await));
        assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), true), "{era:?}");
    }
    // A client's own new operation key is a new operation: a new approval.
    let mut keyed = order(2, None);
    keyed.call.operation_key = Some(json!("order-2"));
    assert_ne!(opened(passed(gated(&s, &keyed, &needs_approval()).await)).id, id);
    // Once the approval's life is over, the same content asks anew.
    s.clock.advance(TTL_MS);
    assert_ne!(opened(passed(gated(&s, &order(2, None), &needs_approval()).await)).id, id);
}

#[tokio::test]
async fn a_held_call_ends_as_its_approval_was_decided() {
    let s = Store::open().await;
    let a = approvals(&s);
    let c = order(2, None);
    let (cx, call) = split_at(&c, s.clock.as_ref());
    let (id, _) = waiting_order(&s).await;
    decide_as_dana(&s, &id, false).await;
    let r = refused(unheld(&a, &cx, &call, &order_tool(), &proposal(&c), stored(&s, &id).await));
    assert_eq!((r.reason, r.approval_id.as_deref()), (Reason::ApprovalDenied, Some(id.as_str())));
    // Approved during the hold: presented as if the client had presented it.
    let (id, _) = open_for(&s, &order(5, None)).await;
    decide_as_dana(&s, &id, true).await;
    let approval = stored(&s, &id).await;
    let five = order(5, None);
    let (cx, call) = split_at(&five, s.clock.as_ref());
    let (tool, five_units) = (order_tool(), proposal(&five));
    let call_binding = standing(&a, &cx, &call, &tool, &five_units).await.binding;
    let standing = presenting(&approval, call_binding);
    let asked = (&cx, &call, &tool, &five_units);
    let gate = match gate(&a, asked, &needs_approval(), &standing).await {
        Ok(gate::Gated::Run(gate)) => gate,
        _ => panic!("an approval approved while held lets its call run"),
    };
    assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), false));
    assert_eq!(stored(&s, &id).await.state, ApprovalState::Consumed);
    // Expired while held: refused as expired.
    let (id, _) = open_for(&s, &order(6, None)).await;
    s.clock.advance(TTL_MS);
    let r = refused(unheld(&a, &cx, &call, &order_tool(), &proposal(&c), stored(&s, &id).await));
    assert_eq!(r.reason, Reason::ApprovalExpired);
}

#[tokio::test]
async fn while_the_approval_is_pending_the_same_call_waits_for_it() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    // Re-issued with its requestState, or asked again without: the same approval.
    for presented in [Some(state.as_str()), None] {
        let pending = waits(passed(gated(&s, &order(2, presented), &needs_approval()).await));
        assert_eq!((pending.id.as_str(), pending.state), (id.as_str(), ApprovalState::Pending));
    }
    assert_eq!(
        seen_by_policy(&s, &order(2, Some(state.as_str()))).await,
        Some(ApprovalState::Pending)
    );
    // Other arguments are another call, with an approval of its own.
    assert_ne!(opened(passed(gated(&s, &order(3, None), &needs_approval()).await)).id, id);
}

#[tokio::test]
async fn an_approved_call_runs_under_its_approval_which_is_used_up() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    let c = order(2, Some(state.as_str()));
    assert_eq!(seen_by_policy(&s, &c).await, Some(ApprovalState::Approved));
    let gate = run(passed(gated(&s, &c, &needs_approval()).await));
    assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), false));
    assert_eq!(
        gate.approval.as_ref().map(|(_, b)| b.proposal_sha256.as_str()),
        Some(proposal(&c).sha256.as_str())
    );
    assert!(!gate.input.contains_key("requestState"), "toolgate's own state never goes upstream");
    let used = stored(&s, &id).await;
    assert_eq!((used.state, used.used_ms), (ApprovalState::Consumed, Some(NOW_MS)));
}

#[tokio::test]
async fn a_used_approval_presented_again_is_marked_used() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    run(passed(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await));
    // Presented again: it does not run a second time on its own; the gate
    // says the approval is used, and reserve answers from its operation.
    let again = run(passed(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await));
    assert_eq!((again.approval_id(), again.used), (Some(id.as_str()), true));
}

#[tokio::test]
async fn an_approval_is_judged_as_of_the_calls_start_but_used_only_while_still_valid() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    s.clock.advance(TTL_MS - 1);
    let c = order(2, Some(state.as_str()));
    // The call began a millisecond before expiry; the approval lapses before it is used.
    let (cx, call) = split_at(&c, s.clock.as_ref());
    s.clock.advance(1);
    let a = approvals(&s);
    let (tool, proposal) = (order_tool(), proposal(&c));
    let standing = standing(&a, &cx, &call, &tool, &proposal).await;
    assert_eq!(standing.state, Some(ApprovalState::Approved));
    let asked = (&cx, &call, &tool, &proposal);
    let r = refused(gate(&a, asked, &needs_approval(), &standing).await);
    assert_eq!((r.reason, r.approval_id.as_deref()), (Reason::ApprovalExpired, Some(id.as_str())));
    assert_eq!(stored(&s, &id).await.used_ms, None, "the ledger refused to use it");
}

#[tokio::test]
async fn an_approval_past_its_ttl_is_refused_as_expired_and_never_used() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    s.clock.advance(TTL_MS - 1);
    assert_eq!(
        seen_by_policy(&s, &order(2, Some(state.as_str()))).await,
        Some(ApprovalState::Approved)
    );
    s.clock.advance(1);
    assert_eq!(
        seen_by_policy(&s, &order(2, Some(state.as_str()))).await,
        Some(ApprovalState::Expired)
    );
    let r = refused(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await);
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::RequireApproval, Reason::ApprovalExpired, Action::Escalate)
    );
    assert_eq!(r.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(stored(&s, &id).await.used_ms, None);
}

#[tokio::test]
async fn a_denied_approval_keeps_the_call_denied() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, false).await;
    for presented in [Some(state.as_str()), None] {
        let r = refused(gated(&s, &order(2, presented), &needs_approval()).await);
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::Deny, Reason::ApprovalDenied, Action::Refused)
        );
    }
}

#[tokio::test]
async fn a_request_state_not_sealed_by_this_gateway_is_refused() {
    let s = Store::open().await;
    let (_, state) = waiting_order(&s).await;
    // This very claim, sealed under another gateway's key.
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = Sealer::load_or_create(
        &dir.path().join("other.key"),
        std::sync::Arc::new(toolgate_core::SeededEntropy::new([9; 32])),
    )
    .unwrap();
    let sealed_elsewhere = elsewhere.seal(&s.sealer.open(&state).unwrap());
    for forged in [
        json!(sealed_elsewhere),
        json!("tg1.AAAAAAAAAAAAAAAAAAAAAAAA"),
        json!("upstream-round-1"),
        json!(42),
    ] {
        let mut c = order(2, None);
        c.call.input.insert("requestState".into(), forged.clone());
        assert_eq!(seen_by_policy(&s, &c).await, None);
        let r = refused(gated(&s, &c, &needs_approval()).await);
        assert_eq!(
            (r.reason, r.action),
            (Reason::RequestStateInvalid, Action::Correct),
            "{forged}"
        );
    }
}

#[tokio::test]
async fn an_approval_of_other_arguments_counts_for_nothing() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    // The approval of 2 units, presented with 40.
    let c = order(40, Some(state.as_str()));
    assert_eq!(seen_by_policy(&s, &c).await, None, "policy must not see another call's approval");
    let r = refused(gated(&s, &c, &needs_approval()).await);
    assert_eq!((r.reason, r.action), (Reason::ApprovalMissingOrMismatched, Action::Escalate));
    assert_eq!(stored(&s, &id).await.state, ApprovalState::Approved, "not used up by another call");
}

#[tokio::test]
async fn a_call_policy_allows_once_approved_uses_its_approval() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    // A policy that permits approved calls: allow, yet the approval is used, once.
    let gate = run(passed(
        gated(
            &s,
            &order(2, Some(state.as_str())),
            &decision(Verdict::Allow, Reason::PolicyPermits, "approved_orders"),
        )
        .await,
    ));
    assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), false));
    assert_eq!(stored(&s, &id).await.state, ApprovalState::Consumed);
}

#[tokio::test]
async fn an_approved_calls_own_input_round_stays_bound_to_its_approval() {
    let s = Store::open().await;
    let (id, state) = waiting_order(&s).await;
    decide_as_dana(&s, &id, true).await;
    let gate = run(passed(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await));
    // The tool asks for input of its own, under its own requestState.
    let asks: RawObject = serde_json::from_str(r#"{"resultType":"input_required","requestState":"upstream-round-1","inputRequests":{"confirm":{}}}"#).unwrap();
    let Answer::Result(sealed) = seal_continuation(&s.sealer, &gate, Answer::Result(asks)) else {
        panic!("a result stays a result")
    };
    let ours = field(&sealed, "requestState").as_str().unwrap().to_string();
    let claim = s.sealer.open(&ours).expect("sealed by this gateway");
    assert_eq!(
        (claim.approval_id.as_str(), claim.upstream_state.as_deref()),
        (id.as_str(), Some("upstream-round-1"))
    );
    // The next round continues under the used approval; the upstream gets
    // its own state back, and not toolgate's input response.
    let mut next = order(2, Some(ours.as_str()));
    next.call.input.insert(
        "inputResponses".into(),
        json!({INPUT_KEY: {"action": "accept"}, "confirm": {"action": "accept"}}),
    );
    let gate = run(passed(gated(&s, &next, &needs_approval()).await));
    assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), false));
    assert_eq!(gate.input.get("requestState"), Some(&json!("upstream-round-1")));
    assert_eq!(gate.input.get("inputResponses"), Some(&json!({"confirm": {"action": "accept"}})));
    // Without an approval, or for a complete result, nothing is sealed.
    let plain = Gate { approval: None, input: Map::new(), used: false };
    let asks: RawObject = serde_json::from_str(
        r#"{"resultType":"input_required","requestState":"upstream-round-2"}"#,
    )
    .unwrap();
    let Answer::Result(untouched) = seal_continuation(&s.sealer, &plain, Answer::Result(asks))
    else {
        panic!()
    };
    assert_eq!(field(&untouched, "requestState"), "upstream-round-2");
}

/// Through the approve stage's one door, as the pipeline enters it,
/// held for `hold_ms`; `redecided` is what decide says once approved.
async fn through_door(
    s: &Store,
    c: &CallRequest,
    decision: &Decision,
    hold_ms: u64,
    redecided: Decision,
) -> Approved {
    let a = s.approvals(TTL_MS, hold_ms);
    let (cx, call) = split_at(c, s.clock.as_ref());
    let obs = Observer::new(None);
    let redecide = move |_: Option<ApprovalState>| redecided.clone();
    let around = Around { obs: &obs, redecide: &redecide, receipts: s };
    let standing = standing(&a, &cx, &call, &order_tool(), &proposal(c)).await;
    approve(&a, &around, &cx, &call, &order_tool(), &proposal(c), decision, standing).await
}

#[tokio::test]
async fn through_the_door_a_new_approval_commits_its_wait_and_the_person_is_asked() {
    let s = Store::open().await;
    let approved = through_door(&s, &order(2, None), &needs_approval(), 0, needs_approval()).await;
    let id = approved.approval_id.clone().expect("the approval opened");
    assert_eq!(stored(&s, &id).await.state, ApprovalState::Pending);
    assert_eq!(
        (
            approved.committed.map(|c| c.what()),
            approved.input_required,
            approved.redecided.is_none()
        ),
        (Some(Commit::Wait), true, true)
    );
    assert_eq!(s.receipts().await, 1, "the wait's receipt committed with the approval");
    let Err(Stop::Input(question)) = approved.gate else {
        panic!("a pending approval runs nothing and asks")
    };
    assert_eq!(field(&question, "_meta")[APPROVAL_META]["id"], json!(id));
    // A legacy client cannot be asked: it is refused, and its refusal gets a receipt of its own.
    let mut legacy = order(3, None);
    legacy.era = Era::Legacy;
    let refused_legacy = through_door(&s, &legacy, &needs_approval(), 0, needs_approval()).await;
    assert_eq!((refused_legacy.committed, refused_legacy.input_required), (None, false));
    assert_eq!(refused(refused_legacy.gate).reason, Reason::ApprovalPending);
}

#[tokio::test]
async fn through_the_door_approved_while_held_it_is_decided_again_and_runs_once() {
    let s = Store::open().await;
    let (id, _) = waiting_order(&s).await;
    let again = decision(
        Verdict::RequireApproval,
        Reason::PolicyRequiresApproval,
        "order_above_five_units",
    );
    let decide_soon = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        decide_as_dana(&s, &id, true).await;
    };
    let (c, asked) = (order(2, None), needs_approval());
    let (approved, ()) =
        tokio::join!(through_door(&s, &c, &asked, 2_000, again.clone()), decide_soon);
    assert_eq!(approved.redecided, Some((Some(ApprovalState::Approved), again)));
    assert_eq!(
        (approved.approval_id.as_deref(), approved.committed, approved.input_required),
        (Some(id.as_str()), None, false)
    );
    let gate = passed(approved.gate);
    assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), false));
    assert_eq!(stored(&s, &id).await.state, ApprovalState::Consumed);
}

#[tokio::test]
async fn through_the_door_a_denied_call_opens_nothing_and_names_no_approval() {
    let s = Store::open().await;
    let deny = decision(Verdict::Deny, Reason::PolicyForbids, "no_orders");
    let approved = through_door(&s, &order(2, None), &deny, 0, needs_approval()).await;
    assert_eq!((approved.approval_id, approved.committed, approved.redecided), (None, None, None));
    assert_eq!(refused(approved.gate).reason, Reason::PolicyForbids);
    assert_eq!(s.receipts().await, 0);
}
