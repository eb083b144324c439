//! toolgate-ledger: the gateway's durable state — approvals and operations
//! now; receipts and checkpoints as they land — behind one [`Ledger`] trait
//! with two stores that pass one test suite: an embedded SQLite file (the
//! default; the gateway and the operator's CLI share it) and PostgreSQL
//! (`ledger = "postgres://…"`, for replicas).
//!
//! Both stores enforce the state machines of `toolgate_core::approval` and
//! `toolgate_core::operation` in their schema (triggers), and every change
//! is one conditional statement or one transaction, so two gateways racing
//! the same approval or key cannot both win.

mod error;
mod postgres;
mod sqlite;

pub use error::LedgerError;
pub use postgres::PostgresLedger;
pub use sqlite::{SqliteLedger, Synchronous};
pub use toolgate_core as core;

use std::sync::Arc;

use toolgate_core::approval::{Approval, ApprovalState, Binding};
use toolgate_core::operation::{Operation, OperationKey, OperationState};

pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// What a new approval asks for.
#[derive(Debug, Clone)]
pub struct NewApproval {
    pub id: String,
    pub binding: Binding,
    pub arguments: serde_json::Value,
    pub reason: String,
    pub rules: Vec<String>,
    pub now_ms: i64,
    pub ttl_ms: i64,
}

/// A write about to be dispatched.
#[derive(Debug, Clone)]
pub struct NewOperation {
    pub id: String,
    pub key: OperationKey,
    pub caller: String,
    pub proposal_sha256: String,
    pub approval_id: Option<String>,
    pub arguments: serde_json::Value,
    pub lease_until_ms: i64,
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
    pub applied: bool,
    pub by: String,
    pub reason: String,
    /// For `applied`: the result a replay returns (the evidence found).
    pub outcome: Option<String>,
    pub now_ms: i64,
}

#[async_trait::async_trait]
pub trait Ledger: Send + Sync {
    /// `sqlite` or `postgres`, for logs and `ops list`.
    fn backend(&self) -> &'static str;

    // Approvals (see toolgate_core::approval).
    async fn create_approval(&self, new: NewApproval) -> Result<Approval>;
    async fn approval(&self, id: &str) -> Result<Option<Approval>>;
    /// The newest approval with exactly this binding.
    async fn latest_approval(&self, binding: &Binding) -> Result<Option<Approval>>;
    /// Newest first, only `state` when given; approvals past their expiry
    /// are marked expired first.
    async fn approvals(&self, state: Option<ApprovalState>, now_ms: i64) -> Result<Vec<Approval>>;
    async fn count_approvals(&self, state: ApprovalState) -> Result<u64>;
    /// An approver's decision on a pending approval; the caller who asked can
    /// never decide its own call.
    async fn decide_approval(&self, id: &str, approve: bool, approver: &str, reason: &str, now_ms: i64) -> Result<Approval>;
    /// Uses an approved approval for its one dispatch: exactly one of any
    /// number of concurrent users succeeds.
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<Approval>;

    // Operations (see toolgate_core::operation).
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
    async fn mark_dispatched(&self, id: &str, attempt: i64, lease_until_ms: i64, now_ms: i64) -> Result<Operation>;
    /// The end of a dispatch: completed, tool_error, unknown, or
    /// reconciled_not_applied (the upstream refused before running it).
    async fn finish_operation(&self, id: &str, attempt: i64, state: OperationState, outcome: Option<String>, now_ms: i64) -> Result<Operation>;
    async fn operation(&self, id: &str) -> Result<Option<Operation>>;
    async fn operation_by_key(&self, key: &OperationKey) -> Result<Option<Operation>>;
    /// Newest first, only `state` when given; dispatched operations whose
    /// lease lapsed are marked unknown first.
    async fn operations(&self, state: Option<OperationState>, now_ms: i64) -> Result<Vec<Operation>>;
    /// Settles an unknown operation: applied (final) or not applied (the
    /// key may run again — only once its lease has ended, so a dispatch
    /// still running upstream cannot be doubled).
    async fn resolve_operation(&self, id: &str, resolution: Resolution) -> Result<Operation>;
}

/// Why a settlement was refused: only an unknown operation is settled, and
/// "not applied" (which lets the key run again) only once the dispatch can
/// no longer be running upstream.
pub(crate) fn settle_rule(applied: bool) -> &'static str {
    if applied {
        "only an unknown operation is reconciled"
    } else {
        "only an unknown operation whose lease has ended is settled as not applied (until then its dispatch may still be running upstream); try again shortly"
    }
}

/// Opens the ledger a config names: a `postgres://` URL, or else the path
/// of the SQLite file (any other `scheme://` is refused, not taken for a path).
pub async fn open(location: &str) -> Result<Arc<dyn Ledger>> {
    let scheme = location.split("://").next().unwrap_or_default().to_ascii_lowercase();
    if location.contains("://") && (scheme == "postgres" || scheme == "postgresql") {
        Ok(Arc::new(PostgresLedger::connect(location).await?))
    } else if location.contains("://") {
        Err(LedgerError::Store(format!("unknown ledger scheme `{scheme}`; use postgres://… or a SQLite file path")))
    } else {
        Ok(Arc::new(SqliteLedger::open(std::path::Path::new(location))?))
    }
}
