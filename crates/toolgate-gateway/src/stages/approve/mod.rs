//! approve: a call the decision says needs a human waits for one. The
//! first call opens a pending approval bound to {tenant, caller, server,
//! tool, proposal, policy version} and the operation key it was sent
//! under, with the receipt of the decision to wait in the same transaction;
//! the call is then held (`hold.rs`) while an approver decides out of band
//! (CLI, admin API or console). Approved meanwhile, the call is decided and
//! gated again and dispatches once; otherwise `unheld` answers (`ask.rs`: a
//! question, or a refusal naming the approval), and a re-issue — with our
//! sealed `requestState`, or the same call again — meets the approval where
//! it stands. `judge` in toolgate-core is the rule; this stage reads and
//! writes the store. The pipeline reads the call's `standing` before decide
//! and enters by one door, `approve`, which returns all it concluded.

use serde_json::{Map, Value};
use toolgate_core::approval::{self, Approval, ApprovalState, Binding, Claim, Step};
use toolgate_core::{Action, Clock, Decision, Entropy, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Draft, Ledger, LedgerError, NewApproval};

mod ask;
mod hold;

use tracing::Instrument as _;

pub(crate) use hold::Hold;

use crate::call::{Answer, Approved, Call, Context, Gate, Stop};
use crate::catalog::ExposedTool;
use crate::commit::{Commit, Committed, Receipts};
use crate::notify::Notifier;
use crate::observe::Observer;
use crate::seal::Sealer;

/// The key of toolgate's own entry in `inputRequests` / `inputResponses`.
pub(crate) const INPUT_KEY: &str = "toolgate_approval";
/// The `_meta` key describing the approval a call waits for.
pub(crate) const APPROVAL_META: &str = "io.toolgate/approval";

/// What the approve stage reads and writes.
pub(crate) struct Approvals<'a> {
    pub ledger: &'a dyn Ledger,
    pub sealer: &'a Sealer,
    /// Read to use an approval (the ledger checks its expiry at the moment
    /// it is used) and to judge it when a hold ends; everything else is
    /// judged as of the call's start.
    pub clock: &'a dyn Clock,
    pub entropy: &'a dyn Entropy,
    /// The version of the policy that decided this call.
    pub policy_version: &'a str,
    /// How long an opened approval stays decidable.
    pub ttl_ms: i64,
    /// `[approvals] max_pending_per_caller`.
    pub max_pending: usize,
    /// One approval opened at a time per caller, so the count of its
    /// pending ones is not read by two at once.
    pub openings: &'a Openings,
    /// How a call waits for its approval's decision.
    pub hold: Hold<'a>,
    /// Tells approvers that an approval was opened.
    pub notifier: &'a Notifier,
}

/// What approve does beside the store, handed in by the pipeline: the
/// call's observer, decide once more (for a call approved while held), and
/// the receipts it commits.
pub(crate) struct Around<'a> {
    pub obs: &'a Observer<'a>,
    /// decide, as the approval now stands (policy sees it approved).
    pub redecide: &'a (dyn Fn(Option<ApprovalState>) -> Decision + Sync),
    pub receipts: &'a dyn Receipts,
}

/// The approve stage, one door: deny refuses; allow runs (using an
/// approval of this call it presents); require_approval finds the approval
/// this call stands under, opening one if there is none, and holds the
/// call while it is pending. Returns all it concluded (`Approved`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn approve(
    a: &Approvals<'_>,
    around: &Around<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
    decision: &Decision,
    standing: Standing,
) -> Approved {
    let mut seen = Seen::default();
    let gate = through(a, around, (cx, call, tool, proposal), decision, standing, &mut seen).await;
    let approval_id = match &gate {
        Ok(gate) => gate.approval_id().map(str::to_string),
        Err(_) => seen.approval_id,
    };
    Approved {
        gate,
        approval_id,
        committed: seen.committed,
        redecided: seen.redecided,
        input_required: seen.input_required,
    }
}

/// What the way through approve came upon, beside the gate.
#[derive(Default)]
struct Seen {
    approval_id: Option<String>,
    committed: Option<Committed>,
    redecided: Option<(Option<ApprovalState>, Decision)>,
    input_required: bool,
}

/// The call, as approve reads it.
type Asked<'a> = (&'a Context, &'a Call, &'a ExposedTool, &'a Proposal);

async fn through(
    a: &Approvals<'_>,
    around: &Around<'_>,
    asked: Asked<'_>,
    decision: &Decision,
    standing: Standing,
    out: &mut Seen,
) -> Result<Gate, Stop> {
    let (cx, call, tool, proposal) = asked;
    let span = around.obs.stage("approve");
    let pending =
        match gate(a, cx, call, tool, proposal, decision, standing).instrument(span.clone()).await?
        {
            Gated::Run(gate) => return Ok(gate),
            Gated::Wait(pending) => pending,
            Gated::Open(new) => {
                let opened =
                    opening(a, around.receipts, tool, proposal, new, out).instrument(span).await?;
                a.notifier.opened();
                opened
            }
        };
    held(a, around, asked, pending, out).await
}

/// Opens `new` in the caller's turn, if it has room for one more, with the
/// receipt of the decision to wait in the same transaction.
async fn opening(
    a: &Approvals<'_>,
    receipts: &dyn Receipts,
    tool: &ExposedTool,
    proposal: &Proposal,
    new: NewApproval,
    out: &mut Seen,
) -> Result<Approval, Stop> {
    // The caller's turn, held until the approval is opened.
    let _turn = a.openings.turn(&new.binding.caller).await;
    room_for(a, tool, proposal, &new).await?;
    out.approval_id = Some(new.id.clone());
    let receipt = receipts.wait(&new.id);
    let (opened, committed) = open(a, receipts, tool, proposal, new, receipt).await?;
    out.committed = Some(committed);
    Ok(opened)
}

/// While the approval is pending, the call is held until it is decided or
/// the hold ends. Approved meanwhile, it is decided again as a re-issue
/// presenting the approval would be (policy now sees it approved) and runs
/// under it; otherwise it is answered (`unheld`). The wait's receipt, if
/// this call opened the approval, stays the call's receipt only for an
/// `input_required` round; what follows otherwise gets receipts of its own.
async fn held(
    a: &Approvals<'_>,
    around: &Around<'_>,
    (cx, call, tool, proposal): Asked<'_>,
    pending: Approval,
    out: &mut Seen,
) -> Result<Gate, Stop> {
    out.approval_id = Some(pending.id.clone());
    // For the hold only: a `notifications/cancelled` naming the call ends it.
    let cancellable = a.hold.cancels.register(
        call.session.as_ref(),
        &cx.caller.name,
        cx.request_id.as_ref(),
        &call.cancelled,
    );
    let approval =
        hold::hold(&a.hold, call, cx.started, pending).instrument(around.obs.stage("hold")).await;
    drop(cancellable);
    if call.cancelled.is_cancelled()
        && approval.state_at(a.clock.now_ms()) == ApprovalState::Pending
    {
        // Its own receipt says so; the approval stays for a re-issue.
        out.committed = None;
        return Err(Stop::Refused(cancelled(a, tool, &approval)));
    }
    if approval.state_at(a.clock.now_ms()) != ApprovalState::Approved {
        let answered = unheld(a, cx, call, tool, proposal, approval);
        match &answered {
            Err(Stop::Input(_)) => out.input_required = true,
            _ => out.committed = None,
        }
        return answered;
    }
    out.committed = None;
    let standing = presenting(&approval);
    let decision = (around.redecide)(standing.state);
    out.redecided = Some((standing.state, decision.clone()));
    match gate(a, cx, call, tool, proposal, &decision, standing)
        .instrument(around.obs.stage("approve"))
        .await?
    {
        Gated::Run(gate) => Ok(gate),
        // An approved approval neither waits nor opens another; should the
        // store say otherwise, nothing runs and the caller is told it waits.
        Gated::Wait(_) | Gated::Open(_) => Err(still_waiting(a, tool, &approval)),
    }
}

/// A turn per caller for opening approvals: the check of `room_for` and the
/// opening happen in one turn, so a burst of calls from one caller cannot
/// pass `max_pending_per_caller` together. Callers come from the config, so
/// the map is bounded. (Replicas sharing a ledger each take their own turn.)
#[derive(Default)]
pub struct Openings {
    turns:
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl Openings {
    /// Waits for `caller`'s turn; it ends when the guard is dropped.
    pub(crate) async fn turn(&self, caller: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(caller.to_string())
            .or_default()
            .clone();
        lock.lock_owned().await
    }
}

/// What a call brings to the approve stage: the `requestState` it presents,
/// and the state of the approval it presents (what policy sees as
/// `context.approval`).
pub(crate) struct Standing {
    pub presented: Presented,
    pub state: Option<ApprovalState>,
}

/// Most calls present nothing: no binding is built and the store is not read.
pub(crate) async fn standing(
    a: &Approvals<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
) -> Standing {
    let presented = presented(a.sealer, call);
    let state = match &presented {
        Presented::Ours(claim) => state_of(a, cx, claim, &binding(a, cx, tool, proposal)).await,
        _ => None,
    };
    Standing { presented, state }
}

/// The `requestState` a call presents, read once.
pub(crate) enum Presented {
    None,
    /// Sealed by this gateway (authentic, not yet checked against the call).
    Ours(Claim),
    /// Someone else's: an upstream's (passed through for tools that need no
    /// approval), or forged.
    Foreign,
}

fn presented(sealer: &Sealer, call: &Call) -> Presented {
    match call.input.get("requestState") {
        None | Some(Value::Null) => Presented::None,
        Some(Value::String(s)) => sealer.open(s).map_or(Presented::Foreign, Presented::Ours),
        Some(_) => Presented::Foreign,
    }
}

/// What an approval of this exact call is bound to.
fn binding(a: &Approvals<'_>, cx: &Context, tool: &ExposedTool, proposal: &Proposal) -> Binding {
    Binding {
        tenant: cx.caller.tenant.clone(),
        caller: cx.caller.name.clone(),
        server: tool.server.clone(),
        tool: tool.tool.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        policy_version: a.policy_version.to_string(),
    }
}

/// The state of the approval a call presents, for policy's
/// `context.approval`: none unless it is an approval of exactly this
/// call (an approval of another call never counts). Judged, like the rest
/// of this stage, as of the instant the call began.
async fn state_of(
    a: &Approvals<'_>,
    cx: &Context,
    claim: &Claim,
    binding: &Binding,
) -> Option<ApprovalState> {
    if claim.binding != *binding {
        return None;
    }
    match a.ledger.approval(&claim.approval_id).await {
        Ok(Some(found)) if found.binding == *binding => Some(found.state_at(cx.began_ms)),
        _ => None,
    }
}

/// How the approval's part of the stage ends, when it does not stop the call.
enum Gated {
    /// Run the call (under an approval, if it has one).
    Run(Gate),
    /// Open this approval; its receipt commits with it (`open`).
    Open(NewApproval),
    /// An approval of this call is pending: hold the call for its decision.
    Wait(Approval),
}

/// The decision, as the approval this call stands under makes it: run,
/// open one, or wait for the pending one.
async fn gate(
    a: &Approvals<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
    decision: &Decision,
    standing: Standing,
) -> Result<Gated, Stop> {
    let Standing { presented, state: approval_state } = standing;
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
                (&presented, approval_state)
            {
                let input = upstream_input(&call.input, &presented);
                return use_approval(
                    a,
                    tool,
                    proposal,
                    claim.approval_id.clone(),
                    binding(a, cx, tool, proposal),
                    input,
                )
                .await
                .map(Gated::Run);
            }
            // A state of ours has no business upstream: unwrap or drop it.
            return Ok(Gated::Run(Gate {
                approval: None,
                input: upstream_input(&call.input, &presented),
                used: false,
            }));
        }
        Verdict::RequireApproval => {}
    }
    let refuse = |reason: Reason, approval: Option<&str>| refused(reason, tool, proposal, approval);
    let binding = binding(a, cx, tool, proposal);
    // An approval is for one operation: the client's own key, or none.
    let key = call.client_key().map_err(|r| Stop::Refused(r.with_proposal(&proposal.sha256)))?;
    let claim = match &presented {
        Presented::Foreign => return Err(refuse(Reason::RequestStateInvalid, None)),
        Presented::Ours(claim) => Some(claim.clone()),
        Presented::None => None,
    };
    let found = match &claim {
        Some(c) => a.ledger.approval(&c.approval_id).await.map(|found| (found, None)),
        None => a.ledger.latest_approval(&binding, key).await.map(|latest| (None, latest)),
    };
    let (claimed, latest) = found.map_err(|e| store_failed(e, tool, proposal))?;
    if claimed.as_ref().is_some_and(|c| c.operation_key.as_deref() != key) {
        // Presented under another operation key than it was asked under.
        return Err(refuse(Reason::ApprovalMissingOrMismatched, None));
    }
    let now_ms = cx.began_ms;
    let step = approval::judge(&binding, claim.as_ref(), claimed.as_ref(), latest.as_ref(), now_ms);
    if matches!(step, Step::Wait(_) | Step::Consume(_) | Step::Replay(_)) && ask::declined(call) {
        // The person at the client said they will not wait: end the call,
        // running nothing and using nothing (the approval stays as it is).
        let known = claimed.as_ref().or(latest.as_ref()).expect("judge names a known approval");
        return Err(Stop::Refused(ask::waiting_refusal(
            tool,
            known,
            cx.began_ms,
            "you chose not to wait for it",
        )));
    }
    match step {
        Step::Open => Ok(Gated::Open(new_approval(a, cx, tool, proposal, decision, binding, key))),
        Step::Wait(_) => {
            Ok(Gated::Wait(claimed.or(latest).expect("judge waits on a known approval")))
        }
        // The same call again after its approval let it run: the operation it
        // ran answers (reserve replays its outcome). A read records none, so
        // the same read asks anew.
        Step::Replay(_) if tool.read_only() => {
            Ok(Gated::Open(new_approval(a, cx, tool, proposal, decision, binding, key)))
        }
        Step::Replay(id) => Ok(Gated::Run(Gate {
            approval: Some((id, binding)),
            input: upstream_input(&call.input, &presented),
            used: true,
        })),
        Step::Consume(id) => {
            use_approval(a, tool, proposal, id, binding, upstream_input(&call.input, &presented))
                .await
                .map(Gated::Run)
        }
        Step::Continue(id) => Ok(Gated::Run(Gate {
            approval: Some((id, binding)),
            input: upstream_input(&call.input, &presented),
            used: false,
        })),
        Step::Refuse(Reason::ApprovalUsed) if claimed.is_some() => {
            let id = claimed.map(|found| found.id).expect("checked");
            Ok(Gated::Run(Gate {
                approval: Some((id, binding)),
                input: upstream_input(&call.input, &presented),
                used: true,
            }))
        }
        Step::Refuse(reason) => {
            let id = claimed.as_ref().or(latest.as_ref()).map(|found| found.id.clone());
            Err(refuse(reason, id.as_deref()))
        }
    }
}

fn new_approval(
    a: &Approvals<'_>,
    cx: &Context,
    tool: &ExposedTool,
    proposal: &Proposal,
    decision: &Decision,
    binding: Binding,
    key: Option<&str>,
) -> NewApproval {
    let reason = if decision.why.is_empty() {
        format!("{} requires approval ({})", tool.exposed_name, decision.rules.join(", "))
    } else {
        decision.why.clone()
    };
    let id = a.entropy.id("apr_");
    let arguments = proposal.arguments.clone();
    let subject = cx.caller.subject.clone();
    let operation_key = key.map(str::to_string);
    NewApproval {
        id,
        binding,
        arguments,
        reason,
        rules: decision.rules.clone(),
        now_ms: cx.began_ms,
        ttl_ms: a.ttl_ms,
        receipt: None,
        subject,
        operation_key,
        notices: Vec::new(),
    }
}

/// Whether the caller of `new` may open another approval: fewer than
/// `max_pending` of its own are pending (called in the caller's turn,
/// `Openings`). Past it, the call is refused and nothing is opened:
/// approvers decide what waits first.
async fn room_for(
    a: &Approvals<'_>,
    tool: &ExposedTool,
    proposal: &Proposal,
    new: &NewApproval,
) -> Result<(), Stop> {
    let tenant = &new.binding.tenant;
    let pending = a
        .ledger
        .approvals(Some(tenant), Some(ApprovalState::Pending), a.clock.now_ms())
        .await
        .map_err(|e| store_failed(e, tool, proposal))?;
    let mine = pending.iter().filter(|p| p.binding.caller == new.binding.caller).count();
    if mine < a.max_pending {
        return Ok(());
    }
    Err(Stop::Refused(
        Refusal::new(
            Verdict::RequireApproval,
            Reason::TooManyPendingApprovals,
            Action::Escalate,
            format!(
                "{} needs a named approver, and caller `{}` already has {mine} approvals pending, the most [approvals] max_pending_per_caller allows; \
                 nothing was run or opened. An approver decides the pending ones first (`toolgate approvals list --state pending`), then call again",
                tool.exposed_name, new.binding.caller
            ),
        )
        .with_proposal(&proposal.sha256),
    ))
}

/// Opens `new` with `receipt` (the decision to wait, in the same
/// transaction); the call then holds for it.
async fn open(
    a: &Approvals<'_>,
    receipts: &dyn Receipts,
    tool: &ExposedTool,
    proposal: &Proposal,
    mut new: NewApproval,
    receipt: Draft,
) -> Result<(Approval, Committed), Stop> {
    let placement = receipt.placement.clone();
    new.receipt = Some(receipt);
    new.notices = a.notifier.notices_for(&new, &tool.exposed_name);
    let opened =
        a.ledger.create_approval(new).await.map_err(|e| store_failed(e, tool, proposal))?;
    let committed = receipts.committed(Commit::Wait, placement.get());
    tracing::info!(target: "toolgate::approval", approval = %opened.id, tool = %tool.exposed_name, caller = %opened.binding.caller, "approval opened");
    Ok((opened, committed))
}

/// An approval decided while its call was held, as if the client had
/// presented it: what the call brings to decide and approve once more.
fn presenting(approval: &Approval) -> Standing {
    let claim = Claim {
        approval_id: approval.id.clone(),
        binding: approval.binding.clone(),
        upstream_state: None,
    };
    Standing { presented: Presented::Ours(claim), state: Some(ApprovalState::Approved) }
}

/// The answer to a call its client cancelled while it was held (which the
/// client no longer reads): its receipt names `client.cancelled` beside
/// the approval's rules.
fn cancelled(a: &Approvals<'_>, tool: &ExposedTool, approval: &Approval) -> Refusal {
    let mut refusal = ask::waiting_refusal(
        tool,
        approval,
        a.clock.now_ms(),
        "the client cancelled the call while it was held",
    );
    refusal.rules = approval.rules.iter().cloned().chain([CLIENT_CANCELLED.to_string()]).collect();
    refusal
}

/// The rule a cancelled call's receipt names.
pub(crate) const CLIENT_CANCELLED: &str = "client.cancelled";

/// The refusal of a call whose approved approval could not be used now
/// (the store disagreed): nothing ran, and the approval is as it was.
fn still_waiting(a: &Approvals<'_>, tool: &ExposedTool, approval: &Approval) -> Stop {
    Stop::Refused(ask::waiting_refusal(
        tool,
        approval,
        a.clock.now_ms(),
        "it could not be used just now",
    ))
}

/// How a held call ends when its approval was not approved during the
/// hold: still pending → an elicitation the client can answer (if it can),
/// else an `escalate` refusal naming the approval; denied or expired → the
/// refusal; used meanwhile by another re-issue → its recorded outcome.
fn unheld(
    a: &Approvals<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
    approval: Approval,
) -> Result<Gate, Stop> {
    match approval.state_at(a.clock.now_ms()) {
        ApprovalState::Pending if ask::elicits(cx, call) => {
            Err(Stop::Input(ask::input_required(a, cx, tool, &approval)))
        }
        ApprovalState::Pending => Err(Stop::Refused(ask::waiting_refusal(
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
        // Approved calls are decided again by the pipeline, not here.
        ApprovalState::Approved => Err(Stop::Refused(ask::waiting_refusal(
            tool,
            &approval,
            a.clock.now_ms(),
            "it was approved as the hold ended",
        ))),
    }
}

/// Uses approval `id` for this one dispatch; exactly one of any number of
/// concurrent users gets it.
async fn use_approval(
    a: &Approvals<'_>,
    tool: &ExposedTool,
    proposal: &Proposal,
    id: String,
    binding: Binding,
    input: Map<String, Value>,
) -> Result<Gate, Stop> {
    match a.ledger.consume_approval(&id, a.clock.now_ms()).await {
        Ok(_) => Ok(Gate { approval: Some((id, binding)), input, used: false }),
        // The approval just expired, or another re-issue won the race (its
        // operation answers this one).
        Err(LedgerError::NotApproved { state: "expired", .. }) => {
            Err(refused(Reason::ApprovalExpired, tool, proposal, Some(&id)))
        }
        Err(LedgerError::NotApproved { .. }) => {
            Ok(Gate { approval: Some((id, binding)), input, used: true })
        }
        Err(e) => Err(store_failed(e, tool, proposal)),
    }
}

fn refused(
    reason: Reason,
    tool: &ExposedTool,
    proposal: &Proposal,
    approval: Option<&str>,
) -> Stop {
    let mut r = approval::refusal(reason, &tool.exposed_name).with_proposal(&proposal.sha256);
    if let Some(id) = approval {
        r = r.with_approval(id);
    }
    Stop::Refused(r)
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

/// The client's input minus toolgate's own: our `requestState` is replaced
/// by the upstream's it carries (if any), our input response is dropped.
fn upstream_input(input: &Map<String, Value>, presented: &Presented) -> Map<String, Value> {
    let mut out = input.clone();
    if let Presented::Ours(claim) = presented {
        match claim.upstream_state.as_deref() {
            Some(s) if !s.is_empty() => {
                out.insert("requestState".into(), Value::String(s.to_string()))
            }
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

fn store_failed(e: LedgerError, tool: &ExposedTool, proposal: &Proposal) -> Stop {
    tracing::error!(target: "toolgate::approval", tool = %tool.exposed_name, error = %e, "approvals store failed");
    Stop::Refused(
        Refusal::new(
            Verdict::RequireApproval,
            Reason::UpstreamUnavailable,
            Action::Retry,
            "the approvals store is unavailable; nothing was run, retry later",
        )
        .with_proposal(&proposal.sha256),
    )
}

fn raw<T: serde::Serialize + ?Sized>(v: &T) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).expect("serialisable")
}

#[cfg(test)]
mod tests {
    use super::ask::WAIT_FIELD;
    use super::*;
    use crate::call::CallRequest;
    use crate::stages::testing::{
        NOW_MS, Store, call, field, order_tool, passed, refused, split_at,
    };
    use toolgate_mcp::wire::{Era, RawObject};
    use serde_json::json;
    use toolgate_core::decision::decide_by_class;

    const TTL_MS: i64 = 60_000;

    fn approvals(s: &Store) -> Approvals<'_> {
        s.approvals(TTL_MS, 0)
    }

    /// The agent's order of `quantity` units, presenting `state` as its
    /// requestState, from a 2026-07-28 client that declared elicitation.
    fn order(quantity: u32, state: Option<&str>) -> CallRequest {
        let mut c =
            call("parts__raise_parts_order", json!({"part_no": "P-1", "quantity": quantity}));
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
    async fn gated(s: &Store, c: &CallRequest, decision: &Decision) -> Result<Gated, Stop> {
        let (a, (cx, call)) = (approvals(s), split_at(c, s.clock.as_ref()));
        let standing = standing(&a, &cx, &call, &order_tool(), &proposal(c)).await;
        gate(&a, &cx, &call, &order_tool(), &proposal(c), decision, standing).await
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
        (
            id,
            field(&asked(stop), "requestState")
                .as_str()
                .expect("a sealed requestState")
                .to_string(),
        )
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
        let r = refused(
            gated(&s, &c, &decision(Verdict::Deny, Reason::PolicyForbids, "no_orders")).await,
        );
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
        let gate = run(passed(
            gated(&s, &c, &decision(Verdict::Allow, Reason::Automatic, "registry")).await,
        ));
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
        assert_eq!(
            (stored(&s, &new.id).await.state, s.receipts().await),
            (ApprovalState::Pending, 1)
        );
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
        assert_eq!(
            (claim.approval_id, claim.binding, claim.upstream_state),
            (new.id, binding, None)
        );
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
        assert_eq!(
            question["params"]["requestedSchema"]["properties"][WAIT_FIELD]["type"],
            "boolean"
        );
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
        assert_eq!(
            (r.reason, r.approval_id.as_deref()),
            (Reason::ApprovalPending, Some(id.as_str()))
        );
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
            open(&approvals(&s), &s, &order_tool(), &proposal(&order(2, None)), new, s.draft())
                .await,
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
        let r = refused(
            gated(&s, &keyed(Some("order-3"), Some(state.as_str())), &needs_approval()).await,
        );
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
        let r =
            refused(unheld(&a, &cx, &call, &order_tool(), &proposal(&c), stored(&s, &id).await));
        assert_eq!(
            (r.reason, r.approval_id.as_deref()),
            (Reason::ApprovalDenied, Some(id.as_str()))
        );
        // Approved during the hold: presented as if the client had presented it.
        let (id, _) = open_for(&s, &order(5, None)).await;
        decide_as_dana(&s, &id, true).await;
        let approval = stored(&s, &id).await;
        let standing = presenting(&approval);
        assert_eq!(standing.state, Some(ApprovalState::Approved));
        let five = order(5, None);
        let (cx, call) = split_at(&five, s.clock.as_ref());
        let gate = run(passed(
            gate(&a, &cx, &call, &order_tool(), &proposal(&five), &needs_approval(), standing)
                .await,
        ));
        assert_eq!((gate.approval_id(), gate.used), (Some(id.as_str()), false));
        assert_eq!(stored(&s, &id).await.state, ApprovalState::Consumed);
        // Expired while held: refused as expired.
        let (id, _) = open_for(&s, &order(6, None)).await;
        s.clock.advance(TTL_MS);
        let r =
            refused(unheld(&a, &cx, &call, &order_tool(), &proposal(&c), stored(&s, &id).await));
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
        assert!(
            !gate.input.contains_key("requestState"),
            "toolgate's own state never goes upstream"
        );
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
        let again =
            run(passed(gated(&s, &order(2, Some(state.as_str())), &needs_approval()).await));
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
        let standing = standing(&a, &cx, &call, &order_tool(), &proposal(&c)).await;
        assert_eq!(standing.state, Some(ApprovalState::Approved));
        let r = refused(
            gate(&a, &cx, &call, &order_tool(), &proposal(&c), &needs_approval(), standing).await,
        );
        assert_eq!(
            (r.reason, r.approval_id.as_deref()),
            (Reason::ApprovalExpired, Some(id.as_str()))
        );
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
        assert_eq!(
            seen_by_policy(&s, &c).await,
            None,
            "policy must not see another call's approval"
        );
        let r = refused(gated(&s, &c, &needs_approval()).await);
        assert_eq!((r.reason, r.action), (Reason::ApprovalMissingOrMismatched, Action::Escalate));
        assert_eq!(
            stored(&s, &id).await.state,
            ApprovalState::Approved,
            "not used up by another call"
        );
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
        let Answer::Result(sealed) = seal_continuation(&s.sealer, &gate, Answer::Result(asks))
        else {
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
        assert_eq!(
            gate.input.get("inputResponses"),
            Some(&json!({"confirm": {"action": "accept"}}))
        );
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
        let approved =
            through_door(&s, &order(2, None), &needs_approval(), 0, needs_approval()).await;
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
        let refused_legacy =
            through_door(&s, &legacy, &needs_approval(), 0, needs_approval()).await;
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
        assert_eq!(
            (approved.approval_id, approved.committed, approved.redecided),
            (None, None, None)
        );
        assert_eq!(refused(approved.gate).reason, Reason::PolicyForbids);
        assert_eq!(s.receipts().await, 0);
    }
}
