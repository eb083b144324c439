//! approve: a call the decision says needs a human waits for one. The
//! first call opens a pending approval bound to {tenant, caller, server,
//! tool, proposal, policy version} and the operation key it was sent
//! under, with the receipt of the decision to wait in the same transaction;
//! the call is then held while an approver decides out of band (CLI, admin
//! API or console). Approved meanwhile, the call is decided and gated again
//! and dispatches once; otherwise it is answered unrun (a question, or a
//! refusal naming the approval), and a re-issue — with our sealed
//! `requestState`, or the same call again — meets the approval where it
//! stands. `judge` in toolgate-core is the rule; this stage reads and
//! writes the store.
//!
//! The pipeline reads the call's `standing` before decide (`standing.rs`)
//! and enters by one door, `approve`, which returns all it concluded. The
//! door walks the phases in order, each in its own file and each entered
//! from here: `gate.rs` (run, open, wait, or stop), `open.rs`, `hold.rs`,
//! and `ask.rs` for a call that leaves unrun. A call approved while held
//! passes the same gate once more.

use std::borrow::Cow;

use serde_json::{Map, Value};
use toolgate_core::approval::{self, Approval, ApprovalState, Claim};
use toolgate_core::{Action, Clock, Decision, Entropy, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Ledger, LedgerError};
use tracing::Instrument as _;

mod ask;
mod gate;
mod hold;
mod open;
mod standing;

use ask::Unrun;
use gate::Gated;
pub(crate) use gate::seal_continuation;
pub(crate) use hold::Hold;
pub(crate) use open::Openings;
pub(crate) use standing::{Presented, Standing, standing};

use crate::call::{Approved, Call, Context, Gate, Stop};
use crate::catalog::ExposedTool;
use crate::commit::{Committed, Receipts};
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

/// The call, as approve reads it.
type Asked<'a> = (&'a Context, &'a Call, &'a ExposedTool, &'a Proposal);

/// What the way through approve came upon, beside the gate.
#[derive(Default)]
struct Seen {
    approval_id: Option<String>,
    committed: Option<Committed>,
    redecided: Option<(Option<ApprovalState>, Decision)>,
    input_required: bool,
}

/// How a call leaves approve's phases: through the gate (to run, or
/// stopped there), or unrun while its approval waits (`ask` answers).
enum Left {
    Gated(Result<Gate, Stop>),
    Unrun(Unrun),
}

/// The approve stage, one door: deny refuses; allow runs (using an
/// approval of this call it presents); require_approval finds the approval
/// this call stands under, opening one if there is none, and holds the
/// call while it is pending. Approved meanwhile, it is decided again as a
/// re-issue presenting the approval would be (policy now sees it approved)
/// and passes the gate once more. Returns all it concluded (`Approved`).
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
    let asked = (cx, call, tool, proposal);
    let mut seen = Seen::default();
    let (mut standing, mut decision) = (standing, Cow::Borrowed(decision));
    // The approval approved while the call was held, for its second pass.
    let mut approved: Option<Approval> = None;
    let left = loop {
        let span = around.obs.stage("approve");
        let gated = gate::gate(a, asked, &decision, &standing).instrument(span.clone()).await;
        let pending = match (gated, approved.take()) {
            (Err(stop), _) => break Left::Gated(Err(stop)),
            (Ok(Gated::Run(gate)), _) => break Left::Gated(Ok(gate)),
            (Ok(Gated::Declined(known)), _) => break Left::Unrun(Unrun::Declined(known)),
            // An approved approval neither waits nor opens another; should the
            // store say otherwise, nothing runs and the caller is told it waits.
            (Ok(Gated::Wait(_) | Gated::Open(_)), Some(held)) => {
                break Left::Unrun(Unrun::StillWaiting(held));
            }
            (Ok(Gated::Wait(pending)), None) => pending,
            (Ok(Gated::Open(key)), None) => {
                let decided = (decision.as_ref(), &standing.binding, key);
                let opening = open::opening(a, around.receipts, asked, decided, &mut seen);
                match opening.instrument(span).await {
                    Ok(opened) => opened,
                    Err(stop) => break Left::Gated(Err(stop)),
                }
            }
        };
        seen.approval_id = Some(pending.id.clone());
        // For the hold only: a `notifications/cancelled` naming the call ends it.
        let cancellable = a.hold.cancels.register(
            call.session.as_ref(),
            &cx.caller.name,
            cx.request_id.as_ref(),
            &call.cancelled,
        );
        let held = hold::held(&a.hold, cx, call, pending).instrument(around.obs.stage("hold"));
        let held = held.await;
        drop(cancellable);
        let approval = match held {
            Ok(approval) => approval,
            Err(unrun) => break Left::Unrun(unrun),
        };
        // Approved while held: the wait's receipt is no longer this call's,
        // and the call now stands as a re-issue presenting the approval.
        seen.committed = None;
        let claim = Claim {
            approval_id: approval.id.clone(),
            binding: approval.binding.clone(),
            upstream_state: None,
        };
        let state = Some(ApprovalState::Approved);
        standing = Standing { presented: Presented::Ours(claim), state, binding: standing.binding };
        let again = (around.redecide)(state);
        seen.redecided = Some((state, again.clone()));
        decision = Cow::Owned(again);
        approved = Some(approval);
    };
    let gate = match left {
        Left::Gated(gate) => gate,
        Left::Unrun(unrun) => {
            let answered = ask::answer(a, asked, unrun);
            // The wait's receipt, if this call opened the approval, stays the
            // call's receipt only for an `input_required` round; what follows
            // otherwise gets receipts of its own.
            match &answered {
                Err(Stop::Input(_)) => seen.input_required = true,
                _ => seen.committed = None,
            }
            answered
        }
    };
    let approval_id = match &gate {
        Ok(gate) => gate.approval_id().map(str::to_string),
        Err(_) => seen.approval_id,
    };
    let Seen { committed, redecided, input_required, .. } = seen;
    Approved { gate, approval_id, committed, redecided, input_required }
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

fn raw<T: serde::Serialize + ?Sized>(v: &T) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).expect("serialisable")
}

#[cfg(test)]
mod tests;
