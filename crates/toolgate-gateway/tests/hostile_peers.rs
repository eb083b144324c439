//! What answers the gateway's requests is not trusted to be small or
//! honest: a log (for `verify --answer`) that sends an endless checkpoint or
//! an oversized tile is refused at the limit of what such a file can hold,
//! and one that redirects is not followed (its token stays home); a witness
//! whose answer is endless is refused at a few KiB, and of what a witness
//! answers only the lines that verify under its configured key are served.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use toolgate_core::note::Cosigner;
use toolgate_gateway::log::readers::source::Source;

/// A server that answers every request with `head` and then `body_len`
/// bytes of body; it counts the bytes written before the client hung up,
/// and the connections it finished (written whole or cut off).
struct Hostile {
    base: String,
    written: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}

async fn hostile(head: String, body_len: usize) -> Hostile {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (written, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (w, e) = (written.clone(), ended.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (head, w, e) = (head.clone(), w.clone(), e.clone());
            tokio::spawn(async move {
                let mut request = vec![0u8; 64 << 10];
                let _ = socket.read(&mut request).await;
                if socket.write_all(head.as_bytes()).await.is_ok() {
                    let chunk = vec![b'x'; 64 << 10];
                    let mut left = body_len;
                    while left > 0 {
                        let n = left.min(chunk.len());
                        if socket.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                        w.fetch_add(n, Ordering::Relaxed);
                        left -= n;
                    }
                }
                e.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    Hostile { base, written, ended }
}

const ENDLESS: usize = 512 << 20;

/// What the sockets' buffers on loopback can hold: anything past this was
/// read by the client.
const BUFFERED: usize = 64 << 20;

async fn wait_ended(h: &Hostile, at_least: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.ended.load(Ordering::Relaxed) < at_least && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_log_s_endless_checkpoint_is_refused_at_the_limit_and_not_read_on() {
    let h = hostile("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".into(), ENDLESS).await;
    let source = Source::parse(&format!("{}/log/", h.base), None).unwrap();
    let err = format!("{:#}", source.get("checkpoint").await.unwrap_err());
    assert!(err.contains("checkpoint") && err.contains("1048576 bytes"), "{err}");
    wait_ended(&h, 1).await;
    let sent = h.written.load(Ordering::Relaxed);
    assert!(
        sent < BUFFERED,
        "the log wrote {sent} of {ENDLESS} bytes: the checkpoint was read on past its limit"
    );
}

#[tokio::test]
async fn a_tile_or_bundle_longer_than_one_can_be_is_refused_by_its_declared_length() {
    // A hash tile is at most 256 hashes of 32 bytes.
    let h = hostile(
        "HTTP/1.1 200 OK\r\nContent-Length: 8193\r\nConnection: close\r\n\r\n".into(),
        8193,
    )
    .await;
    let source = Source::parse(&format!("{}/log/", h.base), None).unwrap();
    let err = format!("{:#}", source.get("tile/0/000").await.unwrap_err());
    assert!(err.contains("hash tile") && err.contains("8192 bytes"), "{err}");
    // An entry bundle: 256 entries of at most 65,535 bytes, each after a 2-byte length.
    let declared = 256 * 65_537 + 1;
    let h = hostile(
        format!("HTTP/1.1 200 OK\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"),
        0,
    )
    .await;
    let source = Source::parse(&format!("{}/log/", h.base), None).unwrap();
    let err = format!("{:#}", source.get("tile/entries/000").await.unwrap_err());
    assert!(
        err.contains("entry bundle")
            && err.contains(&format!("{declared} bytes"))
            && err.contains("16777472 bytes"),
        "{err}"
    );
    // A folder mirror is held to the same limits.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tile/0")).unwrap();
    std::fs::write(dir.path().join("tile/0/000"), vec![0u8; 8193]).unwrap();
    let err = format!(
        "{:#}",
        Source::parse(dir.path().to_str().unwrap(), None)
            .unwrap()
            .get("tile/0/000")
            .await
            .unwrap_err()
    );
    assert!(err.contains("8192 bytes"), "{err}");
}

#[tokio::test]
async fn a_log_that_redirects_is_not_followed_and_its_token_stays_home() {
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}/steal/\u{202e}", elsewhere.local_addr().unwrap());
    let h = hostile(format!("HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"), 0).await;
    let source =
        Source::parse(&format!("{}/log/", h.base), Some("the-approver-token".into())).unwrap();
    let err = format!("{:#}", source.get("checkpoint").await.unwrap_err());
    assert!(err.contains("302") && err.contains("not followed"), "{err}");
    assert!(
        err.contains("/steal/\\u{202e}") && !err.contains('\u{202e}'),
        "the Location is named, escaped: {err}"
    );
    let asked = tokio::time::timeout(Duration::from_millis(300), elsewhere.accept()).await;
    assert!(asked.is_err(), "the verifier went where the redirect pointed, with its token");
}

/// A gateway whose one witness is served by `witness` (its url and key).
async fn gateway_with_witness(url: &str, vkey: &str) -> common::Harness {
    let more = format!(
        "[receipts]\ncheckpoint_ms = 100\nlog_access = \"public\"\n[[receipts.witnesses]]\nurl = \"{url}\"\nvkey = \"{vkey}\"\n"
    );
    common::start_with("", &more, &[]).await
}

#[tokio::test]
async fn a_witness_s_endless_answer_is_refused_at_a_few_kib() {
    let key = Cosigner::new("witness.test/w1", ed25519_dalek::SigningKey::from_bytes(&[41; 32]))
        .unwrap()
        .verifier()
        .vkey();
    let witness = hostile(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n".into(),
        ENDLESS,
    )
    .await;
    let h = gateway_with_witness(&witness.base, &key).await;
    common::call(&h.url, "support__search_customers", json!({"query": "harbor"})).await;
    wait_ended(&witness, 1).await;
    assert!(witness.ended.load(Ordering::Relaxed) >= 1, "the gateway never submitted");
    let sent = witness.written.load(Ordering::Relaxed);
    assert!(
        sent < BUFFERED,
        "the witness wrote {sent} of {ENDLESS} bytes: the gateway read its answer on past the limit"
    );
    let served = reqwest::get(format!("{}/log/checkpoint", h.url.trim_end_matches("/mcp")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!served.contains("witness.test/w1"), "{served}");
}

/// What the fake witness sent: the lines that verify under its configured
/// key, and the others.
#[derive(Default)]
struct Sent {
    valid: Vec<String>,
    extra: Vec<String>,
}

#[tokio::test]
async fn only_the_witness_s_lines_that_verify_under_its_configured_key_are_served() {
    let configured =
        Cosigner::new("witness.test/w1", ed25519_dalek::SigningKey::from_bytes(&[41; 32])).unwrap();
    // The same name under a key nobody configured, and another name.
    let unconfigured =
        Cosigner::new("witness.test/w1", ed25519_dalek::SigningKey::from_bytes(&[42; 32])).unwrap();
    let stranger =
        Cosigner::new("witness.test/other", ed25519_dalek::SigningKey::from_bytes(&[43; 32]))
            .unwrap();
    let vkey = configured.verifier().vkey();
    let sent = Arc::new(Mutex::new(Sent::default()));
    let record = sent.clone();
    let answer = move |request: String| {
        // The request: `old N`, proof lines, a blank line, the signed note;
        // the note's text is what a cosignature signs.
        let note = &request[request.find("\n\n").unwrap() + 2..];
        let body = &note[..note.find("\n\n").unwrap() + 1];
        let valid = configured.cosign(body, 1_700_000_000);
        let extra = [
            unconfigured.cosign(body, 1_700_000_000),
            stranger.cosign(body, 1_700_000_000),
            "\u{2014} witness.test/w1 AAAAAAAAAA==\n".to_string(),
        ];
        let mut sent = record.lock().unwrap();
        sent.valid.push(valid.clone());
        sent.extra.extend(extra.iter().cloned());
        // The valid line twice: it is served once.
        format!("{}{valid}{}{}{valid}", extra[0], extra[1], extra[2])
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    let router = axum::Router::new().route(
        "/add-checkpoint",
        axum::routing::post(move |body: String| std::future::ready(answer(body))),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    let h = gateway_with_witness(&url, &vkey).await;
    common::call(&h.url, "support__search_customers", json!({"query": "harbor"})).await;
    let checkpoint = format!("{}/log/checkpoint", h.url.trim_end_matches("/mcp"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let served = loop {
        let served = reqwest::get(&checkpoint).await.unwrap().text().await.unwrap();
        if served.contains("witness.test/") || Instant::now() > deadline {
            break served;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let sent = sent.lock().unwrap();
    let witness_lines: Vec<String> = served
        .lines()
        .filter(|l| l.starts_with("\u{2014} witness.test/"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(witness_lines.len(), 1, "one line, the configured key's: {served}");
    assert!(sent.valid.contains(&witness_lines[0]), "{served}");
    for extra in &sent.extra {
        assert!(!served.contains(extra.trim_end()), "a line nobody configured is served: {extra}");
    }
    // Kept as served, for a restart and for bundles.
    let kept = std::fs::read_to_string(h.gateway.config().state_dir().join("checkpoint.cosigned"))
        .unwrap();
    assert_eq!(
        kept.lines().filter(|l| l.starts_with("\u{2014} witness.test/")).count(),
        1,
        "{kept}"
    );
}
