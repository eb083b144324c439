//! `/healthz` and `/readyz`: alive, and ready to serve calls (the ledger
//! answers and at least one upstream is listed), saying states only.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};

async fn get(url: &str, path: &str) -> (u16, Value) {
    let base = url.trim_end_matches("/mcp");
    let resp = reqwest::get(format!("{base}{path}")).await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_its_upstreams_listed_is_alive_and_ready() {
    let h = start("").await;
    assert_eq!(get(&h.url, "/healthz").await, (200, json!({"status": "alive"})));
    let (status, body) = get(&h.url, "/readyz").await;
    assert_eq!(
        (status, &body["status"], &body["ledger"], &body["keys"]),
        (200, &json!("ready"), &json!("reachable"), &json!("loaded")),
        "{body}"
    );
    assert_eq!(body["upstreams"]["parts"], "ready", "{body}");
    assert!(body["upstreams"].as_object().unwrap().values().all(|s| s == "ready"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_no_upstream_listed_is_alive_and_not_ready_and_says_no_more() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 (discard): the upstream stays down.
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, format!("[servers.away]\nurl = \"http://127.0.0.1:9/mcp\"\n{ANONYMOUS}"))
        .unwrap();
    let gateway = Gateway::start(Config::load(&path).unwrap(), Mode::Serve).await.unwrap();
    let _ = gateway.wait_ready(Duration::from_millis(300)).await;
    let (url, stop) = serve_gateway(gateway.clone()).await;
    assert_eq!(get(&url, "/healthz").await.0, 200);
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        json!({"status": "not_ready", "ledger": "reachable", "keys": "loaded", "upstreams": {"away": "down"}})
    );
    assert!(
        !body.to_string().contains("127.0.0.1"),
        "no upstream address to an unauthenticated caller"
    );
    stop.cancel();
    gateway.stop();
}
