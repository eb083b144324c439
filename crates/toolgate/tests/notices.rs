//! What the gateway says unprompted, heard by the official Python SDK
//! (`tests/python/notices.py`) used as its README shows: resource updates
//! after a legacy `subscribe_resource`, relayed from every kind of upstream
//! (2026-07-28 and legacy, over HTTP and stdio) under the exposed URI, to
//! a legacy client over HTTP and over stdio; and `list_changed` when a down
//! upstream is back, in both eras. Real processes throughout: `toolgate
//! serve` in front of `toolgate conformance-fixture` upstreams.

mod demo_common;
mod ops_common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use demo_common::python;
use ops_common::{BIN, Proc, spawn_listening};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

/// The four kinds of upstream, each a fixture: its name in the config, and
/// how it is reached (`url` or `command`/`args`).
fn servers(modern_url: &str, legacy_url: &str) -> String {
    format!(
        r#"[servers.modern]
url = "{modern_url}"
[servers.legacy]
url = "{legacy_url}"
[servers.smodern]
command = "{BIN}"
args = ["conformance-fixture", "--stdio"]
[servers.slegacy]
command = "{BIN}"
args = ["conformance-fixture", "--stdio", "--legacy"]
"#
    )
}

const KINDS: [&str; 4] = ["modern", "legacy", "smodern", "slegacy"];

fn config(state: &str, servers: &str, ttl_ms: u64, kinds: &[&str]) -> String {
    let mut registry = String::new();
    for kind in kinds {
        registry.push_str(&format!("[[registry_resources]]\nserver = \"{kind}\"\nuri = \"test://*\"\nclass = \"automatic\"\n"));
        registry.push_str(&format!(
            "[registry.\"{kind}__test_update_resource\"]\nclass = \"automatic\"\nread_only = true\n"
        ));
    }
    format!(
        r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "{state}"
list_ttl_ms = {ttl_ms}

{servers}
{registry}
[callers.agent]
tenant = "acme"
anonymous = true
"#
    )
}

async fn fixture(dir: &Path, name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.arg("conformance-fixture").args(args);
    spawn_listening(cmd, &dir.join(format!("{name}.log")), "serving on").await
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/notices.py")
}

/// Runs `notices.py` to its end and returns its JSON.
fn notices(target: &str, mode: &str, action: &str, args: &Value) -> Value {
    let out = std::process::Command::new(python())
        .arg(script())
        .args([target, mode, action, &args.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{target} {mode} {action}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// A subscription to each kind's `test://static-text`, poked by that kind's `test_update_resource`.
fn every_kind() -> Value {
    json!(KINDS.map(|k| json!({"uri": format!("toolgate://{k}/test://static-text"), "tool": format!("{k}__test_update_resource"), "arguments": {"uri": "test://static-text"}})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_hears_resource_updates_from_every_kind_of_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let modern = fixture(dir.path(), "modern", &[]).await;
    let legacy = fixture(dir.path(), "legacy", &["--legacy"]).await;
    let servers = servers(&modern.url, &legacy.url);
    let http_config = dir.path().join("http.toml");
    std::fs::write(&http_config, config("state-http", &servers, 60_000, &KINDS)).unwrap();
    let mut gateway = Command::new(BIN);
    gateway.current_dir(dir.path()).args(["serve", "--config"]).arg(&http_config);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;

    // Over HTTP: the session initialize issued, its GET stream.
    let heard = notices(&gateway.url, "legacy", "subscribe", &every_kind());
    assert_eq!(
        heard["updated"],
        json!(KINDS.map(|k| format!("toolgate://{k}/test://static-text"))),
        "{heard}"
    );
    assert_eq!(heard["after_unsubscribe"], 0, "no update after resources/unsubscribe: {heard}");

    // Over stdio: the connection is the session.
    let stdio_config = dir.path().join("stdio.toml");
    std::fs::write(
        &stdio_config,
        config(dir.path().join("state-stdio").to_str().unwrap(), &servers, 60_000, &KINDS),
    )
    .unwrap();
    let command = json!([BIN, "serve", "--stdio", "--config", stdio_config]);
    let heard = notices(&command.to_string(), "legacy", "subscribe", &every_kind());
    assert_eq!(heard["updated"].as_array().map(Vec::len), Some(4), "{heard}");
    assert_eq!(heard["after_unsubscribe"], 0, "{heard}");
    drop((gateway, modern, legacy));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_subscription_needs_a_readable_resource_and_its_own_session() {
    let dir = tempfile::tempdir().unwrap();
    let modern = fixture(dir.path(), "modern", &[]).await;
    let legacy = fixture(dir.path(), "legacy", &["--legacy"]).await;
    let config_path = dir.path().join("toolgate.toml");
    std::fs::write(
        &config_path,
        config("state", &servers(&modern.url, &legacy.url), 60_000, &KINDS),
    )
    .unwrap();
    let mut gateway = Command::new(BIN);
    gateway.current_dir(dir.path()).args(["serve", "--config"]).arg(&config_path);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;
    let http = reqwest::Client::new();
    let post = |body: Value, session: Option<&str>| {
        let mut req = http
            .post(&gateway.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25");
        if let Some(s) = session {
            req = req.header("Mcp-Session-Id", s);
        }
        req.body(body.to_string()).send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let resp = post(init, None).await.unwrap();
    let session = resp.headers()["mcp-session-id"].to_str().unwrap().to_string();
    assert!(session.len() >= 32, "an unguessable id: {session}");
    let subscribe = |uri: &str| json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": uri}});
    // A URI that is no readable resource: refused, saying where to look.
    let body: Value = post(subscribe("toolgate://modern/test://nothing-here"), Some(&session))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("resources/list"), "{body}");
    // No session, or one this gateway did not issue: refused, nothing followed.
    let body: Value = post(subscribe("toolgate://modern/test://static-text"), None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("Mcp-Session-Id"), "{body}");
    let resp = post(subscribe("toolgate://modern/test://static-text"), Some("not-a-session"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // The session's stream opens for it alone; DELETE ends it.
    let get = |s: &str| {
        http.get(&gateway.url)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", s.to_string())
            .send()
    };
    let resp = get(&session).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    drop(resp);
    assert_eq!(get("not-a-session").await.unwrap().status(), 404);
    assert_eq!(
        http.get(&gateway.url).header("Accept", "text/event-stream").send().await.unwrap().status(),
        405,
        "no session, no stream"
    );
    let ended =
        http.delete(&gateway.url).header("Mcp-Session-Id", session.clone()).send().await.unwrap();
    assert_eq!(ended.status(), 204);
    assert_eq!(get(&session).await.unwrap().status(), 404, "an ended session is gone");
    drop((gateway, modern, legacy));
}

/// Starts `notices.py … lists 2` and waits for its `ready` line.
async fn listening(
    url: &str,
    mode: &str,
) -> (tokio::process::Child, tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>) {
    let mut child = Command::new(python())
        .arg(script())
        .args([url, mode, "lists", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("ready in time")
        .unwrap()
        .unwrap_or_default();
    assert!(ready.contains("ready"), "{mode}: {ready}");
    (child, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_goes_out_when_a_down_upstream_is_back_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = fixture(dir.path(), "fixture", &[]).await;
    let address = upstream.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let config_path = dir.path().join("toolgate.toml");
    // The upstream alone; listed every second, so its going is seen soon.
    let only = format!("[servers.modern]\nurl = \"{}\"\n", upstream.url);
    std::fs::write(&config_path, config("state", &only, 1_000, &["modern"])).unwrap();
    let mut gateway = Command::new(BIN);
    gateway.current_dir(dir.path()).args(["serve", "--config"]).arg(&config_path);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;

    let (mut modern, mut modern_out) = listening(&gateway.url, "2026-07-28").await;
    let (mut legacy, mut legacy_out) = listening(&gateway.url, "legacy").await;
    // Down: its tools leave the list (one change). Back: they return (another).
    drop(upstream);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let back = fixture(dir.path(), "back", &["--http", &address]).await;
    for (mode, child, out) in
        [("2026-07-28", &mut modern, &mut modern_out), ("legacy", &mut legacy, &mut legacy_out)]
    {
        let last = tokio::time::timeout(Duration::from_secs(30), out.next_line())
            .await
            .expect("in time")
            .unwrap()
            .unwrap_or_default();
        let heard: Value = serde_json::from_str(&last).unwrap_or(json!({"unreadable": last}));
        assert_eq!(heard["list_changed"], 2, "{mode}: {heard}");
        assert!(child.wait().await.unwrap().success(), "{mode}");
    }
    drop((gateway, back));
}
