//! Opening an approval of a call: built from its decision, opened in the
//! caller's turn if it has room for one more, with the receipt of the
//! decision to wait in the same transaction, and approvers told.

use toolgate_core::approval::{Approval, ApprovalState, Binding};
use toolgate_core::{Action, Decision, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Draft, NewApproval};

use super::{Approvals, Asked, Seen, store_failed};
use crate::call::Stop;
use crate::catalog::ExposedTool;
use crate::commit::{Commit, Committed, Receipts};

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

/// Opens an approval of the call `asked`, as `decided`, bound to `binding`
/// and its operation `key`: in the caller's turn, if it has room for one
/// more, with the receipt of the decision to wait in the same transaction.
pub(super) async fn opening(
    a: &Approvals<'_>,
    receipts: &dyn Receipts,
    asked: Asked<'_>,
    decided: (&Decision, &Binding, Option<String>),
    out: &mut Seen,
) -> Result<Approval, Stop> {
    let (_, _, tool, proposal) = asked;
    let new = new_approval(a, asked, decided);
    // The caller's turn, held until the approval is opened.
    let _turn = a.openings.turn(&new.binding.caller).await;
    room_for(a, tool, proposal, &new).await?;
    out.approval_id = Some(new.id.clone());
    let receipt = receipts.wait(&new.id);
    let (opened, committed) = open(a, receipts, tool, proposal, new, receipt).await?;
    out.committed = Some(committed);
    a.notifier.opened();
    Ok(opened)
}

/// The approval of the call `asked` that its decision asks for.
pub(super) fn new_approval(
    a: &Approvals<'_>,
    (cx, _, tool, proposal): Asked<'_>,
    (decision, binding, key): (&Decision, &Binding, Option<String>),
) -> NewApproval {
    let reason = if decision.why.is_empty() {
        format!("{} requires approval ({})", tool.exposed_name, decision.rules.join(", "))
    } else {
        decision.why.clone()
    };
    NewApproval {
        id: a.entropy.id("apr_"),
        binding: binding.clone(),
        arguments: proposal.arguments.clone(),
        reason,
        rules: decision.rules.clone(),
        now_ms: cx.began_ms,
        ttl_ms: a.ttl_ms,
        receipt: None,
        subject: cx.caller.subject.clone(),
        operation_key: key,
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
pub(super) async fn open(
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
