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
        Presented::Ours(claim) => {
            let binding = binding(a, cx, tool, proposal);
            state_of(a, cx, claim, &binding).await
        }
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
mod tests;
