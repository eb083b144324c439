//! What a stranger sends reaches the `toolgate` CLI's terminal escaped and
//! its memory bounded: `verify --answer` prints an answer's log location with
//! its control and bidi characters made visible; `probe` follows no redirect
//! (it names where it pointed) and reads only the head of an error's body.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The c2sp.org/signed-note example key: any well-formed vkey will do, the
/// hostile log's checkpoint verifies under none.
const VKEY: &str = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k";

/// The characters that drive a terminal or reorder what it shows.
const RAW: [char; 5] = ['\u{1b}', '\u{7}', '\r', '\u{202e}', '\u{9b}'];

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A server that answers every request with `head` and then `body_len` bytes
/// of body (`\x1b[2J` over and over), counting the bytes it wrote before the
/// client hung up.
fn hostile(head: String, body_len: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let written = Arc::new(AtomicUsize::new(0));
    let count = written.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (head, count) = (head.clone(), count.clone());
            std::thread::spawn(move || {
                let mut request = [0u8; 8192];
                let _ = stream.read(&mut request);
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = "\u{1b}[2J\u{202e}".repeat(8 << 10);
                let mut left = body_len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if stream.write_all(&chunk.as_bytes()[..n]).is_err() {
                        return;
                    }
                    count.fetch_add(n, Ordering::Relaxed);
                    left -= n;
                }
            });
        }
    });
    (base, written)
}

fn assert_no_raw(what: &str, bytes: &[u8]) {
    let shown = String::from_utf8_lossy(bytes);
    for c in RAW {
        assert!(!shown.contains(c), "{what} holds U+{:04X} raw: {shown:?}", c as u32);
    }
}

#[test]
fn verify_answer_prints_the_answer_s_log_location_escaped() {
    // A log that answers anything: its "checkpoint" verifies under no key,
    // so verify reports and prints (rather than failing before printing).
    let (base, _) =
        hostile("HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\n".into(), 9);
    let location = format!("{base}/log\u{1b}]0;owned\u{7}\r\u{202e}gol\u{9b}/");
    let answer = serde_json::json!({
        "content": [],
        "_meta": {"io.toolgate/receipt": {"origin": "example.com/foo", "index": 0, "leaf_hash": "ab".repeat(32), "log": location}},
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("answer.json");
    std::fs::write(&file, answer.to_string()).unwrap();
    let out = toolgate()
        .args(["verify", "--answer"])
        .arg(&file)
        .args(["--vkey", VKEY, "--wait-ms", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("log        ")
            && stdout.contains("\\u{1b}]0;owned\\u{7}\\u{d}\\u{202e}gol\\u{9b}/"),
        "{}",
        text(&out)
    );
    assert_no_raw("stdout", &out.stdout);
    assert_no_raw("stderr", &out.stderr);
}

#[test]
fn probe_follows_no_redirect_and_names_where_it_pointed() {
    // Where the redirect points: it must never be asked.
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    target.set_nonblocking(true).unwrap();
    let elsewhere = format!("http://{}/healthz", target.local_addr().unwrap());
    let head = format!(
        "HTTP/1.1 302 Found\r\nLocation: {elsewhere}?\u{202e}evil\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let (base, _) = hostile(head, 0);
    let out = toolgate().args(["probe", &format!("{base}/readyz")]).output().unwrap();
    assert!(!out.status.success(), "a redirect is not a healthy answer: {}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("302") && stderr.contains(&format!("{elsewhere}?\\u{{202e}}evil")),
        "{stderr}"
    );
    assert_no_raw("stderr", &out.stderr);
    assert!(target.accept().is_err(), "the probe went where the redirect pointed");
}

#[test]
fn probe_reads_only_the_head_of_an_endless_error_body() {
    const BODY: usize = 512 << 20;
    let (base, written) =
        hostile("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n".into(), BODY);
    let started = Instant::now();
    let out = toolgate()
        .args(["probe", &format!("{base}/readyz"), "--timeout-ms", "20000"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("503") && stderr.contains("\\u{1b}[2J"), "{stderr}");
    assert_no_raw("stderr", &out.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the probe read on for {:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(300));
    let sent = written.load(Ordering::Relaxed);
    assert!(
        sent < 64 << 20,
        "the server wrote {sent} of {BODY} bytes before the probe hung up: it read the body whole"
    );
}
