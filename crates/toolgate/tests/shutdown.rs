//! Ctrl-C / SIGTERM on `toolgate serve`: a call in flight finishes within
//! `[gateway] shutdown_grace_ms` and its caller gets the result; one still
//! running when the grace ends is cut, and its write is left in the ledger
//! as `dispatched` (found `unknown` after its lease) — never lost. Real
//! processes: the Atlas support desk, whose fault switch stalls one answer.

mod ops_common;

use std::path::Path;
use std::time::{Duration, Instant};

use ops_common::*;
use serde_json::json;

/// A gateway in front of a support desk whose next create_ticket stalls
/// `stall_ms` after it took effect, with `grace_ms` to finish at shutdown.
async fn setup(dir: &Path, stall_ms: u64, grace_ms: u64) -> (Proc, Proc, std::path::PathBuf) {
    let state = dir.join("support");
    let support = start_support(&state, &dir.join("support.log")).await;
    std::fs::write(state.join("support.fault"), format!("stall:{stall_ms}")).unwrap();
    let config = dir.join("toolgate.toml");
    let text = gateway_config(&support.url, None, "automatic").replace(
        "upstream_timeout_ms = 2000",
        &format!("upstream_timeout_ms = 10000\nshutdown_grace_ms = {grace_ms}"),
    );
    std::fs::write(&config, text).unwrap();
    let gateway = start_gateway(&config, &dir.join("gateway.log")).await;
    (support, gateway, config)
}

/// A keyed create_ticket through `gateway`, running on its own.
fn create(
    gateway: &Proc,
    key: &'static str,
) -> tokio::task::JoinHandle<Result<(u16, serde_json::Value), reqwest::Error>> {
    let url = gateway.url.clone();
    tokio::spawn(async move {
        call(&client(), &url, &ticket_args(key), Some(key), json!({}), None).await
    })
}

/// SIGTERM, once the desk has taken the call (its invocation is logged).
async fn terminate_when_taken(gateway: &Proc, state: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while jsonl(&state.join("support-calls.jsonl")).is_empty() {
        assert!(Instant::now() < deadline, "the desk never took the call");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(gateway.child.id().unwrap() as i32, libc::SIGTERM) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_finishes_within_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let (_support, mut gateway, _) = setup(dir.path(), 1_500, 10_000).await;
    let call = create(&gateway, "graceful-1");
    terminate_when_taken(&gateway, &dir.path().join("support")).await;
    let (status, body) = call.await.unwrap().expect("the caller gets its answer");
    assert_eq!((status, body["result"]["isError"].as_bool()), (200, Some(false)), "{body}");
    let exit = tokio::time::timeout(Duration::from_secs(10), gateway.child.wait())
        .await
        .expect("it exits once the call is answered")
        .unwrap();
    assert!(exit.success(), "{exit}\n{}", tail(&gateway.log, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_running_when_the_grace_ends_is_cut_and_its_write_stays_in_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let (_support, mut gateway, config) = setup(dir.path(), 8_000, 300).await;
    let call = create(&gateway, "cut-short-1");
    let signalled = Instant::now();
    terminate_when_taken(&gateway, &dir.path().join("support")).await;
    let exit = tokio::time::timeout(Duration::from_secs(5), gateway.child.wait())
        .await
        .expect("it exits when the grace ends, not when the desk answers")
        .unwrap();
    assert!(exit.success(), "{exit}");
    assert!(signalled.elapsed() < Duration::from_secs(6), "{:?}", signalled.elapsed());
    assert!(call.await.unwrap().is_err(), "the cut call's connection is closed, not answered");
    let log = std::fs::read_to_string(&gateway.log).unwrap();
    assert!(log.contains("shutdown grace ended"), "{log}");
    // The write is in the ledger, to be reconciled: not lost.
    let ops = ops_list(&config).await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(matches!(ops[0]["state"].as_str(), Some("dispatched" | "unknown")), "{ops:?}");
}
