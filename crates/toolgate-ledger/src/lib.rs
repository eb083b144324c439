//! toolgate-ledger: the gateway's durable state — operations, approvals,
//! receipts and checkpoints — behind one `Ledger` trait, with SQLite (the
//! embedded default) and PostgreSQL implementations.
//!
//! Empty until the operation ledger lands (issue "Exactly-once writes");
//! the crate exists now so the dependency direction
//! `toolgate` → `toolgate-gateway` → `toolgate-ledger` → `toolgate-core`
//! is fixed from the start.

pub use toolgate_core as core;
