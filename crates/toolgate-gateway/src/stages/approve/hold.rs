//! hold: a call whose approval is pending waits for the decision, up to
//! `[approvals] hold_ms`, so a stock client that simply calls the tool gets
//! the tool's result (approved), the refusal (denied), or — still pending —
//! an answer it can act on, instead of looping. While it waits, a client
//! that sent a `progressToken` gets `notifications/progress` every few
//! seconds. The wait holds a future and a seat (`holds.rs`), nothing more.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::Clock;
use toolgate_core::approval::{Approval, ApprovalState};
use toolgate_ledger::Ledger;

use crate::call::Call;
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
    progress(call, &latest, began.elapsed(), h.hold);
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
        let now = Instant::now();
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
mod tests {
    use super::*;
    use crate::stages::testing::{NOW_MS, Store};
    use serde_json::json;
    use toolgate_ledger::Decider;

    async fn pending(s: &Store) -> Approval {
        s.pending_approval("apr_held").await
    }

    fn call_with_progress() -> (Call, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (out, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut call = crate::stages::testing::call("parts__raise_parts_order", json!({})).call;
        call.progress = Some(toolgate_mcp::upstream::ProgressRelay::new(json!("tok-1"), out));
        (call, rx)
    }

    fn hold_of<'a>(s: &'a Store, holds: &'a Holds, ms: u64) -> Hold<'a> {
        Hold {
            holds,
            ledger: s.ledger.as_ref(),
            clock: s.clock.as_ref(),
            hold: Duration::from_millis(ms),
            max_held: 8,
            draining: crate::stages::testing::never_draining(),
            cancels: crate::stages::testing::no_cancels(),
        }
    }

    #[tokio::test]
    async fn a_decision_rung_during_the_hold_ends_it_at_once() {
        let s = Store::open().await;
        let holds = Holds::default();
        let approval = pending(&s).await;
        let (call, mut rx) = call_with_progress();
        let decide = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.ledger
                .decide_approval(
                    "apr_held",
                    true,
                    Decider { name: "dana", subject: "dana@atlas.example", tenant: "atlas" },
                    "ok",
                    NOW_MS,
                )
                .await
                .unwrap();
            holds.ring("apr_held");
        };
        let started = std::time::Instant::now();
        let h = hold_of(&s, &holds, 10_000);
        let (decided, ()) =
            tokio::join!(hold(&h, &call, std::time::Instant::now(), approval), decide);
        assert_eq!(decided.state, ApprovalState::Approved);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "woken by the bell, not the end of the hold: {:?}",
            started.elapsed()
        );
        assert_eq!(holds.held(), 0, "the seat is left");
        // The client that asked for progress heard, at once, what it waits for.
        let first: serde_json::Value =
            serde_json::from_str(&rx.try_recv().expect("a progress notification")).unwrap();
        assert_eq!(
            (&first["method"], &first["params"]["progressToken"]),
            (&json!("notifications/progress"), &json!("tok-1"))
        );
        assert!(first["params"]["message"].as_str().unwrap().contains("apr_held"), "{first}");
    }

    #[tokio::test]
    async fn undecided_it_ends_with_the_hold_still_pending() {
        let s = Store::open().await;
        let holds = Holds::default();
        let (call, _rx) = call_with_progress();
        let started = std::time::Instant::now();
        let after =
            hold(&hold_of(&s, &holds, 150), &call, std::time::Instant::now(), pending(&s).await)
                .await;
        assert_eq!(after.state, ApprovalState::Pending);
        assert!(
            started.elapsed() >= Duration::from_millis(150)
                && started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn past_max_held_a_call_is_answered_at_once() {
        let s = Store::open().await;
        let holds = Holds::default();
        let (call, _rx) = call_with_progress();
        let approval = pending(&s).await;
        let _others: Vec<_> =
            (0..8).map(|i| holds.seat(&format!("apr_other_{i}"), 8).unwrap()).collect();
        let started = std::time::Instant::now();
        let after =
            hold(&hold_of(&s, &holds, 10_000), &call, std::time::Instant::now(), approval.clone())
                .await;
        assert_eq!(after, approval);
        assert!(started.elapsed() < Duration::from_secs(1), "not held: {:?}", started.elapsed());
        assert_eq!(holds.held(), 8, "it took no seat");
    }

    #[tokio::test]
    async fn a_hold_of_zero_answers_at_once_and_reads_nothing() {
        let s = Store::open().await;
        let holds = Holds::default();
        let approval = pending(&s).await;
        let (call, mut rx) = call_with_progress();
        let after =
            hold(&hold_of(&s, &holds, 0), &call, std::time::Instant::now(), approval.clone()).await;
        assert_eq!(after, approval);
        assert!(rx.try_recv().is_err(), "no progress without a hold");
    }

    #[tokio::test]
    async fn the_watcher_wakes_a_call_decided_elsewhere() {
        let s = Store::open().await;
        let holds = std::sync::Arc::new(Holds::default());
        let stop = tokio_util::sync::CancellationToken::new();
        holds.watch(s.ledger.clone(), s.clock.clone(), Duration::from_millis(20), stop.clone());
        let approval = pending(&s).await;
        let (call, _rx) = call_with_progress();
        // Decided straight in the ledger (as the CLI does), without a ring.
        let decide = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.ledger
                .decide_approval(
                    "apr_held",
                    false,
                    Decider { name: "dana", subject: "dana@atlas.example", tenant: "atlas" },
                    "no",
                    NOW_MS,
                )
                .await
                .unwrap();
        };
        let started = std::time::Instant::now();
        let h = hold_of(&s, &holds, 10_000);
        let (decided, ()) =
            tokio::join!(hold(&h, &call, std::time::Instant::now(), approval), decide);
        stop.cancel();
        assert_eq!(decided.state, ApprovalState::Denied);
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }

    #[test]
    fn an_upstreams_progress_after_a_hold_counts_on_from_it() {
        let (call, mut rx) = call_with_progress();
        let relay = call.progress.clone().unwrap();
        relay.own(1_500.0, 30_000.0, "held");
        let routes = toolgate_mcp::upstream::ProgressRoutes::default();
        routes.lock().unwrap().insert("toolgate-1".into(), relay);
        let upstream = serde_json::value::to_raw_value(
            &json!({"progressToken": "toolgate-1", "progress": 1, "total": 4}),
        )
        .unwrap();
        toolgate_mcp::upstream::route_progress(&routes, Some(&upstream));
        let seen: Vec<serde_json::Value> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| serde_json::from_str(&m).unwrap())
            .collect();
        let values: Vec<(f64, f64)> = seen
            .iter()
            .map(|m| {
                (m["params"]["progress"].as_f64().unwrap(), m["params"]["total"].as_f64().unwrap())
            })
            .collect();
        assert_eq!(values, [(1_500.0, 30_000.0), (1_501.0, 1_504.0)], "progress only increases");
        assert!(seen.iter().all(|m| m["params"]["progressToken"] == "tok-1"));
    }
}
