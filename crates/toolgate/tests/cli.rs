//! Level 4: the agent scenario end to end — `toolgate demo` starts the Atlas
//! servers and the gateway, plays every case directly and through toolgate,
//! and exits 0 only if each behaved; `demo --serve` stays up for another
//! client (the official Python SDK, both modes). Also the binary's contract.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

#[test]
fn version_and_help() {
    let v = toolgate().arg("--version").output().unwrap();
    assert!(v.status.success());
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), format!("toolgate {}", env!("CARGO_PKG_VERSION")));
    let h = toolgate().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&h.stdout);
    for command in ["demo", "serve", "tools", "atlas"] {
        assert!(help.contains(command), "{command} missing from --help");
    }
    let bad = toolgate().arg("no-such-command").output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-command"));
    let missing = toolgate().args(["serve", "--config", "/nonexistent/toolgate.toml"]).output().unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/toolgate.toml"));
}

#[test]
fn the_demo_plays_every_case_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolgate().arg("demo").arg("--state").arg(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Every case behaved as expected."), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for case in ["a read passes", "broken variant pattern", "an extra property", "export_service_records", "raise_parts_order", "an unknown tool", "manuals server killed"] {
        assert!(stdout.contains(case), "case `{case}` missing:\n{stdout}");
    }
    // Only the ungoverned client's writes reached the sandbox.
    let lines = |f: &str| std::fs::read_to_string(dir.path().join("atlas").join(f)).map(|s| s.lines().count()).unwrap_or(0);
    assert_eq!(lines("outbox.jsonl"), 1);
    assert_eq!(lines("orders.jsonl"), 1);
    // The config it wrote is a working gateway config; its pins were recorded.
    assert!(dir.path().join("toolgate.toml").exists());
    let lock = std::fs::read_to_string(dir.path().join("toolgate.lock")).unwrap();
    assert!(lock.contains("tickets__get_ticket"));
}

struct Serving {
    child: Child,
    endpoint: String,
    config: PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        // SIGTERM, so the demo stops what it started (a SIGKILL would orphan
        // its manuals process).
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

fn demo_serve(state: &Path) -> Serving {
    let mut child = toolgate()
        .args(["demo", "--serve", "--state"])
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut endpoint, mut config) = (None, None);
    while endpoint.is_none() || config.is_none() {
        let line = lines.next().expect("demo --serve prints endpoint and config").unwrap();
        if let Some(v) = line.strip_prefix("endpoint: ") {
            endpoint = Some(v.to_string());
        }
        if let Some(v) = line.strip_prefix("config: ") {
            config = Some(PathBuf::from(v));
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Serving { child, endpoint: endpoint.unwrap(), config: config.unwrap() }
}

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("TOOLGATE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-sdk/bin/python");
    assert!(venv.exists(), "no Python with the MCP SDK: run scripts/test or set TOOLGATE_PYTHON");
    venv
}

#[test]
fn the_python_sdk_works_through_demo_serve_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let part = "AC250-TV-2303";
    let calls = json!([
        {"tool": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}},
        {"tool": "tickets__search_tickets", "arguments": {"model_variant": "AC-250-X"}},
        {"tool": "tickets__export_service_records", "arguments": {"recipient": "x@outside.example", "model_variant": "AC-250-S"}},
        {"tool": "parts__raise_parts_order", "arguments": {"part_no": part, "quantity": 1, "ticket_id": "SR-20031"}},
        {"tool": "tickets__drop_tables", "arguments": {}},
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/sdk_client.py");
    for (mode, version) in [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")] {
        let out = Command::new(python()).arg(&script).args([&serving.endpoint, mode, &calls.to_string()]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["protocol_version"], version);
        let names: Vec<&str> = v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"tickets__get_ticket") && names.contains(&"parts__raise_parts_order"), "{names:?}");
        assert!(!names.contains(&"tickets__export_service_records"), "prohibited tools are not listed");
        let r = &v["results"];
        assert_eq!(r[0]["structuredContent"]["ticket_id"], "SR-20031", "{mode}: {}", r[0]);
        let action = |i: usize| r[i]["structuredContent"]["action"].as_str().map(str::to_string);
        assert_eq!(action(1).as_deref(), Some("correct"), "{mode}: {}", r[1]);
        assert_eq!(action(2).as_deref(), Some("refused"), "{mode}: {}", r[2]);
        assert_eq!(action(3).as_deref(), Some("escalate"), "{mode}: {}", r[3]);
        assert_eq!(r[4]["error"]["code"], -32602, "{mode}: {}", r[4]);
        assert_eq!(r[4]["error"]["data"]["action"], "correct");
    }
    // The printed config drives `toolgate tools` against the same upstreams.
    let tools = toolgate().args(["tools", "--json", "--config"]).arg(&serving.config).output().unwrap();
    assert!(tools.status.success(), "{}", String::from_utf8_lossy(&tools.stderr));
    let view: Value = serde_json::from_slice(&tools.stdout).unwrap();
    assert_eq!(view["tools"].as_array().unwrap().len(), 8);
}
