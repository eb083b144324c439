//! Receipts that commit with the ledger's state. A stage that changes
//! durable state — approve opening an approval, reserve reserving and
//! finishing a write — hands the ledger a receipt drafted by the record
//! stage, so the state and its receipt land in one transaction. What it
//! gets back is a `Committed`: the proof that this call's receipt is in,
//! which record reads instead of appending it again. Stages see record
//! only through `Receipts`, so no stage imports another.

use toolgate_core::operation::OperationState;
use toolgate_core::receipt::{self, ApprovalRef, OperationRef, Placed};
use toolgate_ledger::{Draft, Ledger};

use crate::log::receipt_log::ReceiptLog;

/// Which receipt of the call committed with the ledger's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// The decision to wait, with the approval it opened.
    Wait,
    /// The decision to run a write, with its operation's reservation.
    Decision,
    /// How a write ended, with its operation's end.
    Outcome,
}

/// Proof that a receipt of this call committed with the ledger's state:
/// made only once the ledger accepted it, and counted by the log then.
/// It carries where the receipt was placed (and, for a write's outcome,
/// where its decision was), which the answer names.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Committed {
    what: Commit,
    placed: Option<Placed>,
    decision: Option<Placed>,
}

impl Committed {
    /// The proof of `what`, placed at `placed`, the log told that it grew
    /// by one receipt.
    pub(crate) fn counted(log: &ReceiptLog, what: Commit, placed: Option<Placed>) -> Self {
        log.appended(1);
        Self { what, placed, decision: None }
    }

    /// A proof for a stage's tests, which commit drafts of their own.
    #[cfg(test)]
    pub(crate) fn for_test(what: Commit) -> Self {
        Self { what, placed: None, decision: None }
    }

    /// This proof, keeping where `earlier`'s decision to run was placed (a
    /// write's outcome follows its decision).
    pub(crate) fn after(self, earlier: Option<Committed>) -> Self {
        let decision =
            earlier.and_then(|e| if e.what == Commit::Decision { e.placed } else { e.decision });
        Self { decision, ..self }
    }

    /// Which receipt it was.
    pub fn what(&self) -> Commit {
        self.what
    }

    /// Where it was placed in the log.
    pub fn placed(&self) -> Option<Placed> {
        self.placed.clone()
    }

    /// Where the write's decision to run was placed, for its outcome.
    pub fn decision(&self) -> Option<Placed> {
        self.decision.clone()
    }
}

/// The receipts a stage commits with the ledger's state, drafted by the
/// record stage from what the call has gathered so far.
pub(crate) trait Receipts: Sync {
    /// The decision to wait for approval `approval_id`, just opened.
    fn wait(&self, approval_id: &str) -> Draft;
    /// The decision to run a write, reserved as `operation`.
    fn decided(&self, approval: Option<ApprovalRef>, operation: OperationRef) -> Draft;
    /// How the write reserved as `operation` ended: `state`, and the
    /// upstream's answer when there is one.
    fn outcome(
        &self,
        state: OperationState,
        result: Option<&str>,
        operation: OperationRef,
    ) -> Draft;
    /// The ledger committed the draft of `what`, placed at `placed`: the proof.
    fn committed(&self, what: Commit, placed: Option<Placed>) -> Committed;
}

/// The approval a call ran under, as the ledger recorded its decision and
/// a receipt names it.
pub(crate) async fn approval_ref(ledger: &dyn Ledger, id: Option<&str>) -> Option<ApprovalRef> {
    let a = ledger.approval(id?).await.ok()??;
    Some(ApprovalRef {
        id: a.id,
        approver: a.decided_by.unwrap_or_default(),
        decided_at: a.decided_ms.map(receipt::rfc3339_ms).unwrap_or_default(),
    })
}
