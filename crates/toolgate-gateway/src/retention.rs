//! Retention: settled operations go once `gateway.operation_ttl_ms` has
//! passed since they last changed, so the ledger stays bounded however long
//! the gateway runs. Within that time a retried key gets its recorded
//! outcome (C6); after it, the key is new again — as payment APIs keep an
//! idempotency key for a set time. An operation in flight or of unknown
//! outcome is never removed (the store refuses it too). Delivered notices
//! of the outbox go on the same clock; a pending or dead one stays until it
//! is delivered or an operator sees to it. Receipts leave the
//! ledger by `toolgate log archive`, into files, not by age.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_core::clock::Clock;
use toolgate_ledger::Ledger;

/// How often the gateway prunes: an eighth of the window, between a second
/// and ten minutes, so an operation outlives its window by at most that.
pub fn interval(ttl_ms: u64) -> Duration {
    Duration::from_millis((ttl_ms / 8).clamp(1_000, 600_000))
}

/// Prunes every [`interval`] until `cancel`; `ttl_ms = 0` keeps every
/// operation forever.
pub(crate) fn spawn(
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    ttl_ms: u64,
    cancel: CancellationToken,
) {
    if ttl_ms == 0 {
        return;
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval(ttl_ms)) => {}
                _ = cancel.cancelled() => return,
            }
            let before = clock.now_ms().saturating_sub(ttl_ms.min(i64::MAX as u64) as i64);
            match ledger.prune_operations(before).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(target: "toolgate::retention", pruned = n, ttl_ms, "settled operations past their window removed")
                }
                Err(e) => {
                    tracing::error!(target: "toolgate::retention", error = %e, "cannot prune settled operations; will retry")
                }
            }
            if let Err(e) = ledger.prune_notices(before).await {
                tracing::error!(target: "toolgate::retention", error = %e, "cannot prune delivered notices; will retry");
            }
            // Authorizations begun and never finished (`mode = "oauth"`): dead once expired.
            if let Err(e) = ledger.prune_oauth_states(clock.now_ms()).await {
                tracing::error!(target: "toolgate::retention", error = %e, "cannot prune unfinished authorizations; will retry");
            }
        }
    });
}
