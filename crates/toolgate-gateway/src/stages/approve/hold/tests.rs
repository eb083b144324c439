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
    let (decided, ()) = tokio::join!(hold(&h, &call, std::time::Instant::now(), approval), decide);
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
        hold(&hold_of(&s, &holds, 150), &call, std::time::Instant::now(), pending(&s).await).await;
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
    let (decided, ()) = tokio::join!(hold(&h, &call, std::time::Instant::now(), approval), decide);
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
