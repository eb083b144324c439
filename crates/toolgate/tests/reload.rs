//! Reload without a restart (issue 60): `toolgate serve` in front of the
//! Atlas support desk (a real rmcp server over HTTP), one stock Python SDK
//! session held open across SIGHUPs, in both eras:
//! - a registry entry added to the file shows in the same session's next
//!   `tools/list`, and its tool runs;
//! - a server added is started and listed; removed, it is stopped and gone;
//! - a file that does not parse, or names what is refused, changes nothing:
//!   the log says why, and the config in force stays;
//! - each call's receipt names the version of the config it ran under: the
//!   SHA-256 of the file's bytes, which anyone can recompute;
//! - a call held for its approval when a reload prohibits its tool finishes
//!   under the config it began with; the next such call is refused.

mod demo_common;
mod ops_common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use ops_common::{BIN, DANA_TOKEN, Proc, start_gateway, start_support, tail, toolgate};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn config(upstream: &str, extra: &str) -> String {
    format!(
        r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"
upstream_timeout_ms = 5000
shutdown_grace_ms = 5000

[approvals]
hold_ms = 30000

[servers.support]
url = "{upstream}"

[registry."support__get_ticket"]
class = "automatic"
read_only = true
{extra}
[callers.agent]
tenant = "acme"
anonymous = true
[callers.dana]
tenant = "acme"
roles = ["approver"]
token_env = "TG_DANA_TOKEN"
"#
    )
}

const SEARCH: &str =
    "[registry.\"support__search_customers\"]\nclass = \"automatic\"\nread_only = true\n";
const CREATE_HELD: &str = "[registry.\"support__create_ticket\"]\nclass = \"requires_approval\"\n";
const CREATE_PROHIBITED: &str = "[registry.\"support__create_ticket\"]\nclass = \"prohibited\"\n";

fn parts_server() -> String {
    format!(
        "[servers.parts]\ncommand = \"{BIN}\"\nargs = [\"atlas\", \"parts\"]\nsandbox = \
            \"off\"\n[registry.\"parts__find_part\"]\nclass = \"automatic\"\nread_only = true\n"
    )
}

/// The config file, written as an operator edits it: the new bytes whole.
fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    toolgate_core::proposal::sha256_hex(text.as_bytes())
}

/// SIGHUP, then the log line that says how the reload ended (the `n`th of
/// its kind), which this waits for.
async fn hangup(gw: &Proc, marker: &str, n: usize) {
    let pid = gw.child.id().expect("the gateway runs") as i32;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&gw.log).unwrap_or_default().matches(marker).count() < n {
        assert!(Instant::now() < deadline, "no `{marker}` #{n} in the log:\n{}", tail(&gw.log, 30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One stock client session, driven a request at a time.
struct Session {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    out: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Session {
    /// A session in `mode`; in 2026-07-28 one that follows the tool list's
    /// changes, as the SDK's docs show (the list it keeps for its `ttlMs`,
    /// 60 s here, is evicted when one is heard).
    async fn open(url: &str, mode: &str) -> Self {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/reload_client.py");
        let listen: &[&str] = if mode == "legacy" { &[] } else { &["listen"] };
        let mut child = tokio::process::Command::new(demo_common::python())
            .arg(script)
            .args([url, mode])
            .args(listen)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        Self { child, stdin, out: BufReader::new(stdout).lines() }
    }

    async fn ask(&mut self, request: Value) -> Value {
        self.stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
        let line = tokio::time::timeout(Duration::from_secs(60), self.out.next_line())
            .await
            .expect("the client answers within 60 s")
            .unwrap()
            .expect("the client is still running");
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v.get("raised").is_none(), "the SDK raised: {v}");
        v
    }

    async fn tools(&mut self) -> Vec<String> {
        let v = self.ask(json!({"list": true})).await;
        serde_json::from_value(v["tools"].clone()).unwrap()
    }

    /// The list, asked again until `done` holds of it: at once in the
    /// legacy era (a session keeps no list), and in 2026-07-28 once the
    /// session has heard the change (well within the list's 60 s `ttlMs`:
    /// only the change it heard can make it ask again).
    async fn list_until(&mut self, mode: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline =
            Instant::now() + Duration::from_millis(if mode == "legacy" { 0 } else { 5000 });
        loop {
            let tools = self.tools().await;
            if done(&tools) || Instant::now() >= deadline {
                return tools;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.ask(json!({"call": tool, "arguments": arguments})).await
    }
}

/// The config version an answer's receipt names.
fn version_of(answer: &Value) -> String {
    let receipt = &answer["result"]["_meta"]["io.toolgate/receipt"]["opening"]["logged"]["receipt"];
    receipt["config_version"]
        .as_str()
        .unwrap_or_else(|| panic!("the receipt names no config version: {answer:#}"))
        .to_string()
}

fn ok(answer: &Value, what: &str, log: &Path) {
    assert!(
        answer["result"]["isError"] != true && answer["result"].get("content").is_some(),
        "{what}: {answer:#}\n{}",
        tail(log, 30)
    );
}

struct Site {
    _dir: tempfile::TempDir,
    root: PathBuf,
    support: Proc,
}

impl Site {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("desk")).unwrap();
        let support = start_support(&root.join("desk"), &root.join("support.log")).await;
        Self { _dir: dir, root, support }
    }
}

async fn registry_and_servers_follow_the_file(mode: &str) {
    let site = Site::new().await;
    let path = site.root.join("toolgate.toml");
    let v1 = write(&path, &config(&site.support.url, ""));
    let gw = start_gateway(&path, &site.root.join("gateway.log")).await;
    let mut client = Session::open(&gw.url, mode).await;

    // Not in the registry, an untrusted server's tool is not listed.
    let before = client.tools().await;
    assert!(
        before.contains(&"support__get_ticket".to_string())
            && !before.contains(&"support__search_customers".to_string()),
        "{before:?}"
    );
    let read = client.call("support__get_ticket", json!({"ticket_id": "T-1"})).await;
    assert_eq!(version_of(&read), v1, "the receipt names the file it ran under");

    // The registry gains the tool and a server is added: one SIGHUP.
    let v2 = write(&path, &config(&site.support.url, &format!("{SEARCH}{}", parts_server())));
    hangup(&gw, "config reloaded", 1).await;
    // A new client's first list shows the change; the session held open
    // does at once in the legacy era, and in 2026-07-28 once the list it
    // keeps (for the `ttlMs` it was given) expires.
    let mut fresh = Session::open(&gw.url, mode).await;
    assert!(fresh.tools().await.contains(&"support__search_customers".to_string()));
    drop(fresh);
    let after =
        client.list_until(mode, |t| t.contains(&"support__search_customers".to_string())).await;
    assert!(
        after.contains(&"support__search_customers".to_string()),
        "the held session's list shows the registry's change: {after:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut listed = after;
    while !listed.contains(&"parts__find_part".to_string()) {
        assert!(
            Instant::now() < deadline,
            "the added server's tools never listed: {listed:?}\n{}",
            tail(&gw.log, 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        listed = client.tools().await;
    }
    let search = client.call("support__search_customers", json!({"query": "harbor"})).await;
    ok(&search, "a tool the reload listed runs", &gw.log);
    assert_eq!(version_of(&search), v2);
    let parts = client
        .call("parts__find_part", json!({"model_variant": "AC-250-S", "category": "bearing"}))
        .await;
    ok(&parts, "the added server runs", &gw.log);

    // A file that does not parse is refused whole: nothing changes.
    std::fs::write(&path, "[servers.support\nurl = ").unwrap();
    hangup(&gw, "config reload refused", 1).await;
    // One whose values are refused, likewise (a class that does not exist).
    let bad =
        config(&site.support.url, "[registry.\"support__create_ticket\"]\nclass = \"sometimes\"\n");
    std::fs::write(&path, &bad).unwrap();
    hangup(&gw, "config reload refused", 2).await;
    let log = std::fs::read_to_string(&gw.log).unwrap();
    assert!(log.contains("sometimes"), "the refusal says why:\n{}", tail(&gw.log, 10));
    let still = client.tools().await;
    assert!(
        still.contains(&"support__search_customers".to_string())
            && still.contains(&"parts__find_part".to_string()),
        "{still:?}"
    );
    assert_eq!(
        version_of(&client.call("support__search_customers", json!({"query": "harbor"})).await),
        v2,
        "the config in force stayed"
    );

    // The server removed: stopped, its tools gone; a table that cannot
    // change while running is named as waiting for a restart.
    let v3 = write(
        &path,
        &config(&site.support.url, SEARCH)
            .replace("upstream_timeout_ms = 5000", "upstream_timeout_ms = 6000"),
    );
    hangup(&gw, "config reloaded", 2).await;
    let gone = client.list_until(mode, |t| !t.iter().any(|t| t.starts_with("parts__"))).await;
    assert!(!gone.iter().any(|t| t.starts_with("parts__")), "{gone:?}");
    let log = std::fs::read_to_string(&gw.log).unwrap();
    assert!(log.contains("stopped: parts"), "{}", tail(&gw.log, 10));
    assert!(
        log.contains("[gateway] changed in the config file; it applies at the next restart"),
        "{}",
        tail(&gw.log, 10)
    );
    assert_eq!(
        version_of(&client.call("support__get_ticket", json!({"ticket_id": "T-1"})).await),
        v3
    );
    drop(client);
    // The stopped server's process is gone (its supervisor killed it).
    let deadline = Instant::now() + Duration::from_secs(15);
    while atlas_parts_running(&gw) {
        assert!(Instant::now() < deadline, "the removed server still runs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a child of the gateway runs `atlas parts`.
fn atlas_parts_running(gw: &Proc) -> bool {
    let pid = gw.child.id().unwrap();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children.split_whitespace().any(|c| {
        std::fs::read(format!("/proc/{c}/cmdline"))
            .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("parts"))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_puts_the_files_registry_and_servers_in_force_2026() {
    registry_and_servers_follow_the_file("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_puts_the_files_registry_and_servers_in_force_legacy() {
    registry_and_servers_follow_the_file("legacy").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_held_across_a_reload_finishes_under_the_config_it_began_with() {
    let site = Site::new().await;
    let path = site.root.join("toolgate.toml");
    let v1 = write(&path, &config(&site.support.url, CREATE_HELD));
    let gw = start_gateway(&path, &site.root.join("gateway.log")).await;
    let arguments = ops_common::ticket_args("held-1");
    let mut held = Session::open(&gw.url, "2026-07-28").await;
    held.stdin
        .write_all(
            format!("{}\n", json!({"call": "support__create_ticket", "arguments": arguments}))
                .as_bytes(),
        )
        .await
        .unwrap();
    let cfg = path.to_str().unwrap();
    let id = loop {
        let out =
            toolgate(&["approvals", "list", "--state", "pending", "--json", "--config", cfg]).await;
        let v: Value = serde_json::from_str(&out).unwrap();
        if let Some(id) =
            v["approvals"].as_array().and_then(|a| a.first()).and_then(|a| a["id"].as_str())
        {
            break id.to_string();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // While it is held, the tool is prohibited.
    let v2 = write(&path, &config(&site.support.url, CREATE_PROHIBITED));
    hangup(&gw, "config reloaded", 1).await;
    let approve = tokio::process::Command::new(BIN)
        .args([
            "approvals",
            "approve",
            &id,
            "--as",
            "dana",
            "--reason",
            "a real leak",
            "--config",
            cfg,
        ])
        .env("TG_DANA_TOKEN", DANA_TOKEN)
        .output()
        .await
        .unwrap();
    assert!(approve.status.success(), "{}", String::from_utf8_lossy(&approve.stderr));
    let line = tokio::time::timeout(Duration::from_secs(60), held.out.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    ok(&answer, "the held call, approved, runs under the config it began with", &gw.log);
    assert_eq!(version_of(&answer), v1);
    // The next one is refused under the config now in force.
    let mut next = Session::open(&gw.url, "2026-07-28").await;
    assert!(!next.tools().await.contains(&"support__create_ticket".to_string()));
    let refused = next.call("support__create_ticket", ops_common::ticket_args("held-2")).await;
    let text = refused.to_string();
    assert!(text.contains("prohibited") || refused["result"]["isError"] == true, "{refused:#}");
    assert_ne!(v1, v2);
    drop(held.child);
}
