//! The receipt in a stock client's answer, proven by the `toolgate` CLI: a
//! call through `toolgate demo --serve` with the official Python SDK, its
//! `_meta` receipt saved to a file, then `toolgate verify --answer` against
//! the gateway's published log and keys, and `toolgate log watch --once`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod demo_common;
use demo_common::{demo_serve, python, toolgate};

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_python_sdk_answer_s_receipt_verifies_with_the_cli_and_the_monitor_follows_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let config = serving.config.to_str().unwrap();
    let keys = toolgate().args(["keys", "show", "--config", config]).output().unwrap();
    let vkeys: Vec<String> = String::from_utf8_lossy(&keys.stdout).lines().filter_map(|l| l.strip_prefix("vkey     ")).map(str::to_string).collect();
    assert_eq!(vkeys.len(), 2, "{}", text(&keys));
    let log = format!("{}/log/", serving.endpoint.trim_end_matches("/mcp"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/answer_receipt.py");
    for mode in ["2026-07-28", "legacy"] {
        let out = Command::new(python()).arg(&script).args([&serving.endpoint, mode, "tickets__get_ticket", r#"{"ticket_id": "SR-20031"}"#]).env("TOOLGATE_TOKEN", &serving.agent_token).output().unwrap();
        assert!(out.status.success(), "{mode}: {}", text(&out));
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let saved = dir.path().join(format!("receipt-{mode}.json"));
        std::fs::write(&saved, printed["meta"]["io.toolgate/receipt"].to_string()).unwrap();
        let verify = |file: &Path| {
            let mut cmd = toolgate();
            cmd.args(["verify", "--answer"]).arg(file).args(["--log", &log, "--require-pq"]);
            for k in &vkeys {
                cmd.args(["--vkey", k]);
            }
            // The demo's log is served to approvers.
            cmd.env("TOOLGATE_LOG_TOKEN", &serving.approver_token).output().unwrap()
        };
        let out = verify(&saved);
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).ends_with("verified\n"), "{mode}: {}", text(&out));
        // Another leaf under the same index: not verified, exit 1.
        let mut forged: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
        forged["leaf_hash"] = Value::String("ab".repeat(32));
        std::fs::write(&saved, forged.to_string()).unwrap();
        let out = verify(&saved);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL inclusion"), "{}", text(&out));
    }
    let state = dir.path().join("watch.checkpoint");
    let mut watch = toolgate();
    watch.args(["log", "watch", &log, "--once", "--state"]).arg(&state);
    for k in &vkeys {
        watch.args(["--vkey", k]);
    }
    let out = watch.env("TOOLGATE_LOG_TOKEN", &serving.approver_token).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read_to_string(&state).unwrap().starts_with("toolgate.local/log\n"));
}
