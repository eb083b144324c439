//! Level 2: approvers are told. A real HTTP receiver on loopback gets one
//! delivery per approval opened, per webhook: the toolgate body, signed with
//! HMAC-SHA256 under the configured key (checked here with an independent
//! implementation), and a Slack-compatible body. A receiver that is down
//! delays no call, and is retried until it answers; every notice is in the
//! ledger's outbox, written with its approval, and no webhook URL is. A
//! notice outlives the gateway that opened its approval: another replica
//! on the same ledger delivers it.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use common::*;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ORDER: &str = "parts__raise_parts_order";
const KEY: &str = "a-webhook-key-known-to-the-receiver";

/// What the receiver got: (path, headers, body).
type Got = Arc<Mutex<Vec<(String, HeaderMap, String)>>>;

/// A webhook receiver on `addr` that answers 200 and keeps what it got.
async fn receiver(addr: SocketAddr, got: Got, stop: CancellationToken) {
    let app = axum::Router::new().route(
        "/{hook}",
        axum::routing::post(
            move |axum::extract::Path(hook): axum::extract::Path<String>,
                  headers: HeaderMap,
                  body: String| {
                let got = got.clone();
                async move {
                    got.lock().unwrap().push((hook, headers, body));
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await.unwrap()
    });
}

/// A loopback address nothing listens on (yet).
async fn free_addr() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

fn webhooks(addr: SocketAddr, secret_env: &str) -> String {
    format!(
        "[approvals]\nhold_ms = 0\n\
         [[approvals.notify.webhooks]]\nname = \"desk\"\nurl = \"http://{addr}/desk\"\nsecret_env = \"{secret_env}\"\n\
         [[approvals.notify.webhooks]]\nname = \"chat\"\nurl = \"http://{addr}/chat\"\nformat = \"slack\"\n"
    )
}

fn order(quantity: u32) -> Value {
    let data = toolgate_atlas::dataset();
    let ticket = data
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == "AC-250-S")
        .unwrap();
    let part = data
        .parts
        .iter()
        .find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"))
        .unwrap();
    json!({"part_no": part.part_no, "quantity": quantity, "ticket_id": ticket.ticket_id})
}

/// Checks `Toolgate-Signature: t=…,v1=…` over `"<t>.<body>"`, with the
/// `cryptography`-free reference: HMAC-SHA256 from the `hmac` definition
/// (RFC 2104) over SHA-256.
fn signature_verifies(header: &str, body: &str) -> bool {
    let Some((t, v1)) = header.split_once(",v1=") else { return false };
    let Some(t) = t.strip_prefix("t=") else { return false };
    hmac_sha256(KEY.as_bytes(), format!("{t}.{body}").as_bytes()) == v1
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let pad = |byte: u8| k.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    let outer = Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

async fn wait_for(got: &Got, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while got.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The outbox, as the ledger holds it.
async fn outbox(gw: &toolgate_gateway::gateway::Gateway) -> Vec<toolgate_ledger::Notice> {
    gw.ledger.notices(None, None, 100).await.unwrap()
}

/// Waits until every notice of the outbox is delivered.
async fn all_delivered(
    gw: &toolgate_gateway::gateway::Gateway,
    within: Duration,
) -> Vec<toolgate_ledger::Notice> {
    let deadline = Instant::now() + within;
    loop {
        let notices = outbox(gw).await;
        if notices.iter().all(|n| n.state == toolgate_ledger::NoticeState::Delivered)
            || Instant::now() > deadline
        {
            return notices;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_webhook_gets_one_signed_delivery_per_approval() {
    let addr = free_addr().await;
    let got = Got::default();
    let stop = CancellationToken::new();
    receiver(addr, got.clone(), stop.clone()).await;
    // SAFETY: set before the gateway starts, read once at its start; no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("TOOLGATE_TEST_HOOK_KEY_ONE", KEY) };
    let h = start_with("", &webhooks(addr, "TOOLGATE_TEST_HOOK_KEY_ONE"), &[]).await;
    let asked = call(&h.url, ORDER, order(7)).await;
    let id = asked["result"]["structuredContent"]["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{asked}"))
        .to_string();
    // The same call again while it waits: the same approval, no new notice.
    call(&h.url, ORDER, order(7)).await;
    wait_for(&got, 2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = got.lock().unwrap().clone();
    assert_eq!(
        got.len(),
        2,
        "one delivery per webhook: {:?}",
        got.iter().map(|g| &g.0).collect::<Vec<_>>()
    );

    let (_, headers, body) = got.iter().find(|g| g.0 == "desk").expect("the toolgate webhook");
    let signature = headers["toolgate-signature"].to_str().unwrap();
    assert!(signature_verifies(signature, body), "the signature verifies: {signature}");
    assert!(
        !signature_verifies(signature, &body.replace("\"quantity\":7", "\"quantity\":70")),
        "and not over another body"
    );
    let body: Value = serde_json::from_str(body).unwrap();
    let a = &body["approval"];
    assert_eq!(
        (body["event"].as_str(), a["id"].as_str(), a["caller"].as_str(), a["tool"].as_str()),
        (Some("approval.pending"), Some(id.as_str()), Some("agent"), Some(ORDER))
    );
    assert_eq!(a["arguments"], order(7), "the exact arguments");
    assert_eq!(a["proposal_sha256"], asked["result"]["structuredContent"]["proposal_sha256"]);
    assert_eq!(a["rules"], json!(["registry"]));
    assert!(
        body["decide"]["cli"]
            .as_str()
            .unwrap()
            .contains(&format!("toolgate approvals approve --config CONFIG {id}")),
        "{body}"
    );
    assert_eq!(headers["toolgate-delivery"].to_str().unwrap(), body["delivery"].as_str().unwrap());

    let (_, headers, chat) = got.iter().find(|g| g.0 == "chat").expect("the slack webhook");
    assert!(headers.get("toolgate-signature").is_none(), "no key configured for it");
    let chat: Value = serde_json::from_str(chat).unwrap();
    let text = chat["text"].as_str().unwrap();
    assert!(
        text.contains(&id) && text.contains(ORDER) && text.contains("\"quantity\": 7"),
        "{text}"
    );

    let notices = all_delivered(&h.gateway, Duration::from_secs(5)).await;
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices.iter().all(|n| n.state == toolgate_ledger::NoticeState::Delivered
            && n.attempts == 1
            && n.approval_id == id),
        "{notices:?}"
    );
    let desk = notices.iter().find(|n| n.webhook == "desk").unwrap();
    assert_eq!(desk.id, headers_delivery(&got, "desk"), "the outbox's id is the delivery header");
    assert!(!format!("{notices:?}").contains(&addr.to_string()), "no webhook URL is recorded");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_is_down_delays_nothing_and_is_retried() {
    let addr = free_addr().await;
    // SAFETY: as above.
    unsafe { std::env::set_var("TOOLGATE_TEST_HOOK_KEY_TWO", KEY) };
    let h = start_with("", &webhooks(addr, "TOOLGATE_TEST_HOOK_KEY_TWO"), &[]).await;
    let started = Instant::now();
    let asked = call(&h.url, ORDER, order(9)).await;
    assert_eq!(asked["result"]["structuredContent"]["reason"], "approval_pending", "{asked}");
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "the call waited for its notice: {:?}",
        started.elapsed()
    );
    // The receiver comes up a moment later; the retries reach it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let got = Got::default();
    let stop = CancellationToken::new();
    receiver(addr, got.clone(), stop.clone()).await;
    wait_for(&got, 2, Duration::from_secs(10)).await;
    assert_eq!(got.lock().unwrap().len(), 2, "each webhook delivered once it was up");
    let notices = all_delivered(&h.gateway, Duration::from_secs(5)).await;
    for hook in ["desk", "chat"] {
        let mine: Vec<_> = notices.iter().filter(|n| n.webhook == hook).collect();
        assert_eq!(mine.len(), 1, "one notice per webhook, retried: {mine:?}");
        assert!(
            mine[0].state == toolgate_ledger::NoticeState::Delivered && mine[0].attempts >= 2,
            "{hook}: failed first, then delivered: {mine:?}"
        );
        assert_eq!(
            mine[0].id,
            headers_delivery(&got.lock().unwrap(), hook),
            "retried under the one delivery id"
        );
    }
    stop.cancel();
}

/// The `Toolgate-Delivery` of what webhook `hook` got (one delivery).
fn headers_delivery(got: &[(String, HeaderMap, String)], hook: &str) -> String {
    let ids: std::collections::BTreeSet<String> = got
        .iter()
        .filter(|g| g.0 == hook)
        .map(|g| g.1["toolgate-delivery"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{hook} got one delivery id: {ids:?}");
    ids.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_outlives_the_gateway_that_opened_its_approval() {
    let addr = free_addr().await;
    // SAFETY: as above.
    unsafe { std::env::set_var("TOOLGATE_TEST_HOOK_KEY_THREE", KEY) };
    let ledger = postgres_ledger("tg_notify").await;
    let h = start_with(
        &format!("ledger = \"{ledger}\""),
        &webhooks(addr, "TOOLGATE_TEST_HOOK_KEY_THREE"),
        &[],
    )
    .await;
    let asked = call(&h.url, ORDER, order(6)).await;
    assert_eq!(asked["result"]["structuredContent"]["reason"], "approval_pending", "{asked}");
    // The receiver is down; the gateway that opened the approval stops.
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.gateway.stop();
    let pending = outbox(&h.gateway).await;
    assert_eq!(pending.len(), 2, "both notices are in the outbox: {pending:?}");
    assert!(
        pending.iter().all(|n| n.state == toolgate_ledger::NoticeState::Pending),
        "{pending:?}"
    );
    // Another replica of the same ledger comes up, and the receiver with it.
    let got = Got::default();
    let stop = CancellationToken::new();
    receiver(addr, got.clone(), stop.clone()).await;
    let config =
        toolgate_gateway::config::Config::load(&h.dir.path().join("toolgate.toml")).unwrap();
    let other =
        toolgate_gateway::gateway::Gateway::start(config, toolgate_gateway::gateway::Mode::Serve)
            .await
            .unwrap();
    let notices = all_delivered(&other, Duration::from_secs(40)).await;
    assert!(
        notices.iter().all(|n| n.state == toolgate_ledger::NoticeState::Delivered),
        "{notices:?}"
    );
    for n in &pending {
        assert_eq!(
            headers_delivery(&got.lock().unwrap(), &n.webhook),
            n.id,
            "delivered under the id written with the approval"
        );
    }
    other.stop();
    stop.cancel();
}

#[tokio::test]
async fn a_webhook_key_that_is_not_set_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    write_tokens(dir.path());
    let text = format!(
        "{CALLERS}{}",
        webhooks("127.0.0.1:9".parse().unwrap(), "TOOLGATE_TEST_HOOK_KEY_UNSET")
    );
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, text).unwrap();
    let config = toolgate_gateway::config::Config::load(&path).unwrap();
    let err =
        toolgate_gateway::gateway::Gateway::start(config, toolgate_gateway::gateway::Mode::Serve)
            .await
            .err()
            .expect("refused");
    assert!(format!("{err:#}").contains("TOOLGATE_TEST_HOOK_KEY_UNSET"), "{err:#}");
}
