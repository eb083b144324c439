//! toolgate-ledger: the gateway's durable state — approvals, operations,
//! agent runs, the receipt log with its checkpoints and key history, what
//! replicas share, and people's grants at upstream servers — behind one
//! [`Ledger`] trait, made of one trait per role ([`ApprovalStore`],
//! [`OperationStore`], [`RunStore`], [`LogStore`], [`FleetStore`], [`ConnectionStore`]),
//! with two stores that pass one test suite: an embedded SQLite file (the
//! default; the gateway and the operator's CLI share it) and PostgreSQL
//! (`ledger = "postgres://…"`, for replicas). Each store's README (in
//! `src/sqlite/` and `src/postgres/`) follows one receipt into it.
//!
//! Both stores enforce the state machines of `toolgate_core::approval` and
//! `toolgate_core::operation` in their schema (triggers), and every change
//! is one conditional statement or one transaction, so two gateways racing
//! the same approval or key cannot both win.

#![warn(missing_docs)]

mod approvals;
mod connections;
mod digests;
mod error;
mod fleet;
mod migrations;
mod operations;
mod postgres;
mod receipts;
mod runs;
mod sqlite;

pub use approvals::{ApprovalStore, Decider, NewApproval};
pub use connections::{Connection, ConnectionStore};
pub use error::LedgerError;
pub use fleet::{
    Attempt, DEFAULT_LEASE_MS, EVERY_APPROVAL, FleetStore, NewNotice, Notice, NoticeState,
    StoredSession,
};
pub use operations::{Begun, NewOperation, OperationStore, Resolution};
pub use postgres::PostgresLedger;
pub use receipts::{
    ARCHIVE_CHUNK, LogKey, LogStore, StoredArchive, StoredCheckpoint, StoredReceipt, ToolDefinition,
};
pub use runs::{MAX_LEGS, RunKey, RunState, RunStore};
pub use sqlite::{SqliteLedger, Synchronous};
pub use toolgate_core as core;
pub use toolgate_core::receipt::Draft;

use std::sync::Arc;

/// A ledger call's result: a [`LedgerError`] unless another error is named.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// Which store a ledger is.
pub trait Store: Send + Sync {
    /// `sqlite` or `postgres`, for logs and `ops list`.
    fn backend(&self) -> &'static str;
}

/// The gateway's durable state, as both stores implement it: every change
/// is one conditional statement or one transaction, so concurrent callers
/// (in this process or on other gateways) cannot both win, and a receipt
/// passed with a change commits with it or not at all.
///
/// Every method is one role's: a caller that holds a `dyn Ledger` calls
/// them all; code that needs one role can ask for that trait alone.
pub trait Ledger:
    Store + ApprovalStore + OperationStore + RunStore + LogStore + FleetStore + ConnectionStore
{
}

impl<T> Ledger for T where
    T: Store + ApprovalStore + OperationStore + RunStore + LogStore + FleetStore + ConnectionStore
{
}

/// Opens the ledger a config names: a `postgres://` URL, or else the path
/// of the SQLite file (any other `scheme://` is refused, not taken for a path).
pub async fn open(location: &str) -> Result<Arc<dyn Ledger>> {
    open_as(location, false).await
}

/// `open`, for the process that serves calls: on SQLite, a read's
/// receipts are sequenced rather than each committed (see
/// `SqliteLedger::open_sequencing`). Other processes (the CLI) use `open`.
pub async fn open_sequencing(location: &str) -> Result<Arc<dyn Ledger>> {
    open_as(location, true).await
}

async fn open_as(location: &str, sequences: bool) -> Result<Arc<dyn Ledger>> {
    let scheme = location.split("://").next().unwrap_or_default().to_ascii_lowercase();
    if location.contains("://") && (scheme == "postgres" || scheme == "postgresql") {
        Ok(Arc::new(PostgresLedger::connect(location).await?))
    } else if location.contains("://") {
        Err(LedgerError::Store(format!(
            "unknown ledger scheme `{scheme}`; use postgres://… or a SQLite file path"
        )))
    } else {
        Ok(Arc::new(SqliteLedger::open_with(
            std::path::Path::new(location),
            Synchronous::Full,
            true,
            sequences,
        )?))
    }
}
