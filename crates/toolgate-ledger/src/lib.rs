//! toolgate-ledger: the gateway's durable state — approvals now; operations,
//! receipts and checkpoints as they land — in an embedded SQLite file that
//! the gateway and the operator's CLI share (WAL, so the CLI can decide an
//! approval while the gateway serves).

pub mod approvals;
mod sqlite;

pub use approvals::{ApprovalStore, StoreError};
pub use toolgate_core as core;
