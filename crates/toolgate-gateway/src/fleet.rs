//! This replica among those sharing its ledger. It beats every
//! [`HEARTBEAT`] (its row in the ledger's `replicas`, with when it was
//! seen) and learns how many are alive — those seen within
//! [`LEASE_MS`] — so the budgets take their share (see `budgets`). A
//! replica that stops leaves at once; one that dies is forgotten when its
//! lease lapses. A ledger that cannot be reached keeps the last count.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_core::Clock;
use toolgate_ledger::Ledger;

use crate::budgets::Budgets;

/// How often a replica says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long after its last beat a replica still counts: three beats.
pub const LEASE_MS: i64 = toolgate_ledger::DEFAULT_LEASE_MS;

/// A new replica's id, `rep_` and 16 hex digits from the system's random
/// source — not from the gateway's `Entropy`: the id is in no receipt, and
/// drawing it there would shift a seeded gateway's salts.
pub fn replica_id() -> String {
    let mut bytes = [0u8; 8];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system's random source");
    format!("rep_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Beats once now (so the first calls are held to this replica's share
/// among those already alive), then every [`HEARTBEAT`] until `stop`,
/// when it leaves.
pub(crate) async fn start(
    id: String,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    budgets: Arc<Budgets>,
    stop: CancellationToken,
) {
    let started_ms = clock.now_ms();
    let mut warned = beat(&id, started_ms, &*ledger, &*clock, &budgets, false).await;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(HEARTBEAT) => warned = beat(&id, started_ms, &*ledger, &*clock, &budgets, warned).await,
            }
        }
        // Leaving at once lets the others take their larger share now
        // rather than when the lease lapses.
        let _ = tokio::time::timeout(Duration::from_secs(1), ledger.leave(&id)).await;
    });
}

/// One beat: the budgets take their share of those alive. Returns whether
/// the ledger failed (warned once until it answers again).
async fn beat(
    id: &str,
    started_ms: i64,
    ledger: &dyn Ledger,
    clock: &dyn Clock,
    budgets: &Budgets,
    warned: bool,
) -> bool {
    match ledger.heartbeat(id, started_ms, clock.now_ms(), LEASE_MS).await {
        Ok(alive) => {
            if alive != budgets.replicas() {
                tracing::info!(target: "toolgate::fleet", replica = %id, replicas = alive, "replicas alive changed; budgets take their new share");
            }
            budgets.share(alive);
            false
        }
        Err(e) => {
            if !warned {
                tracing::warn!(target: "toolgate::fleet", replica = %id, error = %e, "cannot beat in the ledger; budgets keep their last share");
            }
            true
        }
    }
}
