//! Operations (see `toolgate_core::operation`): the idempotency keys of
//! writes, each reserved by one call, dispatched, finished, and settled by
//! an operator or a reconciler when its outcome is unknown.

use toolgate_core::operation::{Operation, OperationKey, OperationState};
use toolgate_core::receipt::Draft;

use crate::Result;

/// A write about to be dispatched.
#[derive(Debug, Clone)]
pub struct NewOperation {
    /// The operation's id (`op_…`); used only when this call creates the row
    /// (a take-over keeps the existing operation's id).
    pub id: String,
    /// The idempotency key it reserves, unique per tenant, server and tool.
    pub key: OperationKey,
    /// Who makes the write; on a take-over it replaces the earlier holder.
    pub caller: String,
    /// The payload hash: the same key with another proposal is a conflict, never a take-over.
    pub proposal_sha256: String,
    /// The approval the write runs under, if any.
    pub approval_id: Option<String>,
    /// The canonical arguments, kept so a reconciler can look for the effect.
    pub arguments: serde_json::Value,
    /// Until when this call answers for the reservation; once it lapses, a
    /// reservation may be taken over.
    pub lease_until_ms: i64,
    /// The decision's receipt, appended in the same transaction when this
    /// call comes to hold the operation (and only then).
    pub receipt: Option<Draft>,
}

/// What `begin_operation` found.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// This call holds the operation (new, or taken over): it may dispatch.
    Mine(Operation),
    /// Another call's operation under the key; `toolgate_core::operation::reuse`
    /// says what this call gets.
    Theirs(Operation),
}

/// How an operator or a reconciler settles an `unknown` operation.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// Whether the effect happened: `true` settles it `reconciled_applied`
    /// (final), `false` `reconciled_not_applied` (the key may run again).
    pub applied: bool,
    /// Who settled it (an operator, `reconciler:<tool>`, or `toolgate`), kept as its `resolved_by`.
    pub by: String,
    /// Why, kept as its `resolution`.
    pub reason: String,
    /// For `applied`: the result a replay returns (the evidence found).
    pub outcome: Option<String>,
    /// When it is settled; "not applied" is refused while the lease has not ended by then.
    pub now_ms: i64,
    /// The settlement's receipt, appended in the same transaction.
    pub receipt: Option<Draft>,
}

/// Operations: reserves a write's key for one call, follows its dispatch to
/// its end, settles an unknown one, and removes settled ones once old.
#[async_trait::async_trait]
pub trait OperationStore: Send + Sync {
    /// Reserves `new.key` for this call, or reports the operation that holds
    /// it. A reservation left by a crash, or one reconciled as not applied,
    /// is taken over (same payload only) as its next attempt — who settled
    /// the earlier attempt, and why, stays on the record; a dispatched one
    /// whose lease lapsed is marked unknown.
    async fn begin_operation(&self, new: NewOperation, now_ms: i64) -> Result<Begun>;
    /// Durable before the upstream sees the call. `attempt` is the holder's
    /// (`Operation::attempts` when it began): a holder whose attempt was
    /// superseded (its lease lapsed, the operation was settled and run
    /// again) cannot touch the new one.
    async fn mark_dispatched(
        &self,
        id: &str,
        attempt: i64,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<Operation>;
    /// The end of a dispatch: completed, tool_error, unknown, or
    /// reconciled_not_applied (the upstream refused before running it).
    /// `receipt`: the outcome's receipt, appended in the same transaction.
    async fn finish_operation(
        &self,
        id: &str,
        attempt: i64,
        state: OperationState,
        outcome: Option<String>,
        now_ms: i64,
        receipt: Option<Draft>,
    ) -> Result<Operation>;
    /// The operation with this id, as stored (a lapsed lease is not marked unknown here).
    async fn operation(&self, id: &str) -> Result<Option<Operation>>;
    /// The operation that holds `key`, if any, as stored.
    async fn operation_by_key(&self, key: &OperationKey) -> Result<Option<Operation>>;
    /// The newest `limit`, newest first, only `tenant`'s and only `state`
    /// when given (`None`: every tenant); dispatched operations whose lease
    /// lapsed are marked unknown first. By an index, so a page costs its
    /// rows, not the ledger's size (a week of operations is kept).
    async fn operations(
        &self,
        tenant: Option<&str>,
        state: Option<OperationState>,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Operation>>;
    /// Settles an unknown operation: applied (final) or not applied (the
    /// key may run again — only once its lease has ended, so a dispatch
    /// still running upstream cannot be doubled).
    async fn resolve_operation(&self, id: &str, resolution: Resolution) -> Result<Operation>;
    /// Removes settled operations (completed, tool_error, reconciled) last
    /// changed before `settled_before_ms`, [`ARCHIVE_CHUNK`](crate::ARCHIVE_CHUNK) per short
    /// transaction; returns how many went. Their keys deduplicate no longer:
    /// the gateway's `operation_ttl_ms`. One in flight or of unknown outcome
    /// stays whatever its age (the store refuses to remove it).
    async fn prune_operations(&self, settled_before_ms: i64) -> Result<u64>;
}

/// Why a settlement was refused: only an unknown operation is settled, and
/// "not applied" (which lets the key run again) only once the dispatch can
/// no longer be running upstream.
pub(crate) fn settle_rule(applied: bool) -> &'static str {
    if applied {
        "only an unknown operation is reconciled"
    } else {
        "only an unknown operation whose lease has ended is settled as not applied (until then its \
            dispatch may still be running upstream); try again shortly"
    }
}

/// `prune_operations`' statement, with the store's placeholder sign (`?`
/// or `$`): up to `2` settled operations last changed before `1`, found
/// by the index on state and creation (an operation is changed no earlier
/// than it was created). The state and age are checked again outside the
/// subquery: on PostgreSQL a row a concurrent call changed meanwhile
/// (settled as not applied, now run again) is checked anew, and stays. The
/// store's own trigger refuses the unsettled states (in flight, unknown).
macro_rules! prune_operations_sql {
    ($p:literal) => {
        concat!(
            "DELETE FROM operations WHERE id IN (SELECT id FROM operations WHERE state IN (",
            "'completed', 'tool_error', 'reconciled_applied', 'reconciled_not_applied'",
            ") AND created_ms < ",
            $p,
            "1 AND updated_ms < ",
            $p,
            "1 LIMIT ",
            $p,
            "2) AND state IN (",
            "'completed', 'tool_error', 'reconciled_applied', 'reconciled_not_applied'",
            ") AND updated_ms < ",
            $p,
            "1"
        )
    };
}
pub(crate) use prune_operations_sql;
