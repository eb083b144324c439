//! hold: a call whose approval is pending waits for the decision, up to
//! `[approvals] hold_ms`, so a stock client that simply calls the tool gets
//! the tool's result (approved), the refusal (denied), or — still pending —
//! an answer it can act on, instead of looping. While it waits, a client
//! that sent a `progressToken` gets `notifications/progress` every few
//! seconds. The wait holds a future and a seat (`holds.rs`), nothing more.
//! A call its approval did not let run while held is answered by `ask`.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::Clock;
use toolgate_core::approval::{Approval, ApprovalState};
use toolgate_ledger::Ledger;

use super::ask::Unrun;
use crate::call::{Call, Context};
use crate::holds::Holds;

/// How often a held call with a `progressToken` hears that it still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// What the hold stage reads.
pub(crate) struct Hold<'a> {
    pub holds: &'a Holds,
    pub ledger: &'a dyn Ledger,
    pub clock: &'a dyn Clock,
    /// `[approvals] hold_ms`.
    pub hold: Duration,
    /// `[approvals] max_held`: beyond it, a call is answered at once.
    pub max_held: usize,
    /// Cancelled when the gateway begins to shut down: held calls are
    /// answered at once rather than delay the drain.
    pub draining: &'a CancellationToken,
    /// Where a held call is registered for its client to cancel.
    pub cancels: &'a crate::cancels::Cancels,
}

/// Holds the call while `pending` is pending: returns the approval if it
/// was approved meanwhile, else how the call ends unrun (cancelled by its
/// client, or not approved while held).
pub(super) async fn held(
    h: &Hold<'_>,
    cx: &Context,
    call: &Call,
    pending: Approval,
) -> Result<Approval, Unrun> {
    let approval = hold(h, call, cx.started, pending).await;
    match approval.state_at(h.clock.now_ms()) {
        // Its own receipt says so; the approval stays for a re-issue.
        ApprovalState::Pending if call.cancelled.is_cancelled() => Err(Unrun::Cancelled(approval)),
        ApprovalState::Approved => Ok(approval),
        _ => Err(Unrun::Unheld(approval)),
    }
}

/// Waits until `pending` is decided (or expires), or the hold ends — `hold`
/// after the call `began`, so time spent before the wait counts, and the
/// caller hears back within the hold however busy the gateway was. Returns
/// the approval as last read. A store that cannot be read is read again at
/// the next ring or tick; the approval's state is never guessed.
pub(crate) async fn hold(
    h: &Hold<'_>,
    call: &Call,
    began: std::time::Instant,
    pending: Approval,
) -> Approval {
    if h.hold.is_zero() {
        return pending;
    }
    let began = Instant::from_std(began);
    let until = began + h.hold;
    // Held calls cost little, but not nothing: past the limit a call is
    // answered at once that its approval waits, as with `hold_ms = 0`.
    let Some(seat) = h.holds.seat(&pending.id, h.max_held) else {
        tracing::warn!(target: "toolgate::hold", max_held = h.max_held, approval = %pending.id, "as many calls are held as [approvals] max_held allows; this one is answered at once");
        return pending;
    };
    let mut latest = pending;
    let instant = || Instant::from_std(h.clock.instant());
    progress(call, &latest, instant().saturating_duration_since(began), h.hold);
    loop {
        // Listening before reading: a decision between the two still wakes us.
        let rung = seat.bell().notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        // A stalled store does not stretch the hold.
        if let Ok(Ok(Some(read))) =
            tokio::time::timeout_at(until, h.ledger.approval(&latest.id)).await
        {
            latest = read;
        }
        let now = instant();
        if latest.state_at(h.clock.now_ms()) != ApprovalState::Pending || now >= until {
            return latest;
        }
        let tick = (now + PROGRESS_EVERY).min(until);
        tokio::select! {
            _ = &mut rung => {}
            // At the hold's end the answer itself follows, not more progress.
            _ = tokio::time::sleep_until(tick) => if tick < until { progress(call, &latest, tick - began, h.hold) },
            // Nobody listens any more (the client went away), or the gateway
            // stops: answer now; the approval stays pending, nothing runs.
            _ = gone(call) => return latest,
            // The client cancelled the call: likewise.
            _ = call.cancelled.cancelled() => return latest,
            _ = h.draining.cancelled() => return latest,
        }
    }
}

/// Resolves when the client that sent `call` stopped listening for its answer.
async fn gone(call: &Call) {
    match &call.client {
        Some(out) => out.closed().await,
        None => std::future::pending().await,
    }
}

/// Tells a client that asked for progress that its call still waits, and for whom.
fn progress(call: &Call, approval: &Approval, waited: Duration, hold: Duration) {
    let Some(relay) = &call.progress else { return };
    let message = format!(
        "waiting for a named approver to decide approval {} ({}); held {:.1} s of {:.1} s",
        approval.id,
        approval.reason,
        waited.as_secs_f64(),
        hold.as_secs_f64()
    );
    relay.own(waited.as_millis() as f64, hold.as_millis() as f64, &message);
}

#[cfg(test)]
mod tests;
