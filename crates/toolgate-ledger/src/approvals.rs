//! Approvals (see `toolgate_core::approval`): a call held until a person
//! decides it, then used for its one dispatch. A pending approval is
//! opened with its notices (see `fleet`) and its receipt in one transaction.

use toolgate_core::approval::{Approval, ApprovalState, Binding};
use toolgate_core::receipt::Draft;

use crate::{NewNotice, Result};

/// What a new approval asks for.
#[derive(Debug, Clone)]
pub struct NewApproval {
    /// The approval's id (`apr_…`), chosen by the gateway; a taken id is refused.
    pub id: String,
    /// The one exact call it can approve: tenant, caller, server, tool, proposal and policy version.
    pub binding: Binding,
    /// The exact arguments the approver is shown.
    pub arguments: serde_json::Value,
    /// Why approval is needed (the policy's annotation, or the rules that asked for it).
    pub reason: String,
    /// The ids of the rules that required approval (policy rule ids, or `registry`).
    pub rules: Vec<String>,
    /// When it is asked for (ms since the Unix epoch): its `created_ms`.
    pub now_ms: i64,
    /// How long it can be decided and used: it expires at `now_ms + ttl_ms`.
    pub ttl_ms: i64,
    /// The receipt of the decision to wait for it, appended in the same transaction.
    pub receipt: Option<Draft>,
    /// The person behind the caller who asked (its subject): they may not
    /// decide it under any credential.
    pub subject: String,
    /// The client's own operation key the call was sent with, if any: the
    /// approval is for that operation only.
    pub operation_key: Option<String>,
    /// The notices telling approvers it waits, written to the outbox in
    /// the same transaction (so none is lost with a replica).
    pub notices: Vec<NewNotice>,
}

/// Who decides an approval: the credential (a `[callers]` name), the
/// person behind it (its subject) and the tenant it acts in.
#[derive(Debug, Clone, Copy)]
pub struct Decider<'a> {
    /// The approver's caller name, recorded as `decided_by`.
    pub name: &'a str,
    /// The approver's subject: the same person as the asker is refused.
    pub subject: &'a str,
    /// The approver's tenant: another tenant's approval is not found.
    pub tenant: &'a str,
}

/// Approvals: opens them, decides each once (never by the person who
/// asked), uses an approved one for its one dispatch, and tells held calls
/// when one is decided.
#[async_trait::async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Records a new pending approval, expiring `ttl_ms` after `now_ms`, and
    /// its `receipt` in the same transaction; a taken id is refused.
    async fn create_approval(&self, new: NewApproval) -> Result<Approval>;
    /// The approval with this id, as stored (one past its expiry may not be
    /// marked expired yet: see `Approval::state_at`).
    async fn approval(&self, id: &str) -> Result<Option<Approval>>;
    /// The newest approval with exactly this binding, opened for a call
    /// under exactly this operation key (or under none).
    async fn latest_approval(
        &self,
        binding: &Binding,
        operation_key: Option<&str>,
    ) -> Result<Option<Approval>>;
    /// Newest first, only `tenant`'s and only `state` when given (`None`:
    /// every tenant, for an operator); approvals past their expiry are
    /// marked expired first.
    async fn approvals(
        &self,
        tenant: Option<&str>,
        state: Option<ApprovalState>,
        now_ms: i64,
    ) -> Result<Vec<Approval>>;
    /// How many approvals are stored in `state`; nothing is marked expired
    /// first, so an approval past its expiry still counts as it was.
    async fn count_approvals(&self, state: ApprovalState) -> Result<u64>;
    /// An approver's decision on a pending approval of the approver's own
    /// tenant (another tenant's is `NotFound`). Nobody decides their own
    /// call: not the caller who asked, nor the same person (subject) under
    /// another credential (`SelfApproval`).
    async fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        approver: Decider<'_>,
        reason: &str,
        now_ms: i64,
    ) -> Result<Approval>;
    /// Uses an approved approval for its one dispatch: exactly one of any
    /// number of concurrent users succeeds.
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<Approval>;
    /// Wake-ups: the id of each approval decided (or expired), by this
    /// process or — on PostgreSQL — by any, as it happens; or
    /// [`EVERY_APPROVAL`](crate::EVERY_APPROVAL) when some may have been missed. `None` where the
    /// store cannot tell (polling covers it).
    fn decisions(&self) -> Option<tokio::sync::broadcast::Receiver<String>>;
}
