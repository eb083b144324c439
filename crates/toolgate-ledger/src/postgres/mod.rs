//! The PostgreSQL store, for replicas: every change of state is one
//! conditional statement — or, with a receipt to append, one transaction on
//! the transaction connection — so any number of gateways on
//! one database race safely — the unique key and `WHERE state = …` decide
//! who wins, and the triggers of the migrations refuse any edge the state
//! machines do not draw. Migrations run once, under an advisory lock, at
//! connect.
//!
//! Each role of the ledger (`ApprovalStore`, `OperationStore`, `RunStore`,
//! `LogStore`, `FleetStore`, `ConnectionStore`) is implemented in the file of its
//! tables, on the pool (`pool`). `README.md` follows one receipt in.

mod approvals;
mod connections;
mod fleet;
mod operations;
mod pool;
mod receipts;
mod runs;
mod sequencer;

use crate::{Result, Store};
use pool::Pool;

/// Connections per ledger: each pipelines concurrent statements.
const CONNECTIONS: usize = 8;

/// The PostgreSQL store, for replicas sharing one database: a few
/// pipelined connections for single statements, and one more for
/// transactions (a change with a receipt, and the receipt log).
pub struct PostgresLedger {
    pool: std::sync::Arc<Pool>,
    sequencer: sequencer::Sequencer,
    /// The numbers its rows name recurring digests by (see `digests`).
    digests: std::sync::Arc<crate::digests::Dictionary>,
    /// Every replica's decisions, as the listener hears them.
    decided: tokio::sync::broadcast::Sender<String>,
    /// Dropped with the ledger: stops the listener, started on first use.
    listening: std::sync::OnceLock<tokio::sync::oneshot::Sender<()>>,
}

impl PostgresLedger {
    /// `url`: `postgres://user@host:port/db` (a `?options=-csearch_path%3D…`
    /// puts the tables in another schema).
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = std::sync::Arc::new(Pool::connect(url, CONNECTIONS).await?);
        pool.migrate(crate::migrations::POSTGRES).await?;
        let digests = std::sync::Arc::new(crate::digests::Dictionary::default());
        let decided = tokio::sync::broadcast::channel(1024).0;
        Ok(Self {
            sequencer: sequencer::Sequencer::start(pool.clone(), digests.clone()),
            pool,
            digests,
            decided,
            listening: Default::default(),
        })
    }
}

impl Store for PostgresLedger {
    fn backend(&self) -> &'static str {
        "postgres"
    }
}
