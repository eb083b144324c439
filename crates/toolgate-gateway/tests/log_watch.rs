//! `toolgate log watch`: a monitor that follows a published log's
//! checkpoints and alerts when the log does anything but grow — two
//! checkpoints of one size with different roots (a split view), a larger
//! tree that does not extend the last, a shrink, a checkpoint under
//! another key. Logs are made here as tile folders, and one is a live
//! gateway's `/log/`.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use serde_json::{Value, json};
use toolgate_core::merkle;
use toolgate_core::note::{Checkpoint, Signer};
use toolgate_core::tiles;
use toolgate_gateway::log::readers::monitor::Monitor;
use toolgate_gateway::log::readers::source::Source;

const ORIGIN: &str = "witness.test/log";

fn signer(seed: u8) -> Signer {
    Signer::ed25519(ORIGIN, ed25519_dalek::SigningKey::from_bytes(&[seed; 32])).unwrap()
}

/// Writes a log of `entries` into `dir` as tlog-tiles files, its checkpoint signed by `by`.
fn publish(dir: &Path, entries: &[Vec<u8>], by: &Signer) {
    let _ = std::fs::remove_dir_all(dir);
    let hashes: Vec<_> = entries.iter().map(|e| merkle::leaf_hash(e)).collect();
    for tile in tiles::tiles(&hashes) {
        let path = dir.join(tile.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, tile.bytes()).unwrap();
    }
    let note = Checkpoint::new(ORIGIN, entries.len() as u64, merkle::root(&hashes))
        .unwrap()
        .sign(&[by])
        .unwrap();
    std::fs::write(dir.join("checkpoint"), note).unwrap();
}

fn entries(n: usize, forked_at: Option<usize>) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            if Some(i) == forked_at { format!("other {i}") } else { format!("entry {i}") }
                .into_bytes()
        })
        .collect()
}

#[tokio::test]
async fn a_monitor_accepts_growth_and_alerts_on_a_fork_a_shrink_and_a_foreign_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, state) = (tmp.path().join("log"), tmp.path().join("watch.state"));
    let key = signer(1);
    let posted: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = posted.clone();
    let hook = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |Json(body): Json<Value>| async move {
            seen.lock().unwrap().push(body)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await });
    let watch = |webhook: bool| Monitor {
        source: Source::parse(log.to_str().unwrap(), None).unwrap(),
        location: "the test's log".into(),
        verifiers: vec![key.verifier()],
        webhook: webhook.then(|| hook_url.clone()),
        state: Some(state.clone()),
    };
    let once = |w: Monitor| async move { w.run(Duration::ZERO, true).await.unwrap() };

    // Growth, across tile boundaries and levels, kept in the state file.
    for n in [10, 256, 300, 65_536 + 300] {
        publish(&log, &entries(n, None), &key);
        assert!(once(watch(false)).await, "{n}");
        assert!(std::fs::read_to_string(&state).unwrap().contains(&format!("\n{n}\n")));
    }
    let honest = entries(65_536 + 300, None);

    // The same size, another root: a split view.
    publish(&log, &entries(65_536 + 300, Some(5)), &key);
    let alert = watch(false).step(Some(&last(&state))).await.unwrap().unwrap_err();
    assert_eq!(alert.kind, "fork", "{alert:?}");
    assert!(!once(watch(true)).await);
    assert_eq!(posted.lock().unwrap().last().unwrap()["alert"], "fork");

    // A larger tree that rewrote an old entry: no consistency proof holds.
    publish(&log, &entries(65_536 + 700, Some(70)), &key);
    assert_eq!(watch(false).step(Some(&last(&state))).await.unwrap().unwrap_err().kind, "fork");

    // Fewer receipts than before.
    publish(&log, &honest[..200], &key);
    assert_eq!(watch(false).step(Some(&last(&state))).await.unwrap().unwrap_err().kind, "shrink");

    // A checkpoint under another key.
    publish(&log, &entries(65_536 + 700, None), &signer(2));
    assert_eq!(
        watch(false).step(Some(&last(&state))).await.unwrap().unwrap_err().kind,
        "bad_checkpoint"
    );

    // The honest log, grown: still accepted after all that.
    publish(&log, &entries(65_536 + 701, None), &key);
    assert!(once(watch(false)).await);
    let kinds: Vec<Value> = posted.lock().unwrap().iter().map(|p| p["alert"].clone()).collect();
    assert_eq!(kinds, [json!("fork")], "only the run with a webhook posted");
}

fn last(state: &Path) -> Checkpoint {
    Checkpoint::parse(&std::fs::read_to_string(state).unwrap()).unwrap()
}

/// A live gateway's `/log/`, followed as it grows.
#[tokio::test]
async fn a_monitor_follows_a_gateway_s_published_log() {
    let h =
        common::start_with("", "[receipts]\ncheckpoint_ms = 100\nlog_access = \"public\"\n", &[])
            .await;
    let keys = h.gateway.ledger.log_keys().await.unwrap();
    let verifiers = keys
        .iter()
        .map(|k| toolgate_core::note::Verifier::from_vkey(&k.ed25519).unwrap())
        .collect();
    let base = format!("{}/log/", h.url.trim_end_matches("/mcp"));
    let watch = Monitor {
        source: Source::parse(&base, None).unwrap(),
        location: base.clone(),
        verifiers,
        webhook: None,
        state: None,
    };
    let mut last: Option<Checkpoint> = None;
    for round in 0..3 {
        for i in 0..5 {
            common::call(
                &h.url,
                "support__search_customers",
                json!({"query": format!("harbor {round} {i}")}),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        let seen = watch.step(last.as_ref()).await.unwrap().unwrap();
        assert!(
            last.as_ref().is_none_or(|l| seen.size() > l.size()),
            "round {round}: {}",
            seen.size()
        );
        last = Some(seen);
    }
}
