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
        // Without a token: refused at once, and told which variable carries one.
        let started = std::time::Instant::now();
        let mut anonymous = toolgate();
        anonymous.args(["verify", "--answer"]).arg(&saved).args(["--log", &log, "--vkey", &vkeys[0]]).env_remove("TOOLGATE_LOG_TOKEN");
        let out = anonymous.output().unwrap();
        assert!(!out.status.success() && text(&out).contains("answered 401") && text(&out).contains("TOOLGATE_LOG_TOKEN"), "{}", text(&out));
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "a refusal is not waited out: {:?}", started.elapsed());
        // Another leaf under the same index: not verified, exit 1.
        let mut forged: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
        forged["leaf_hash"] = Value::String("ab".repeat(32));
        std::fs::write(&saved, forged.to_string()).unwrap();
        let out = verify(&saved);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL inclusion"), "{}", text(&out));
    }
    // A refusal, saved whole as the SDK's model dumps it, proves whole; the
    // same receipt around an invented success, or other words, does not.
    for mode in ["2026-07-28", "legacy"] {
        let out = Command::new(python()).arg(&script).args([&serving.endpoint, mode, "tickets__export_service_records", "{}"]).env("TOOLGATE_TOKEN", &serving.agent_token).output().unwrap();
        assert!(out.status.success(), "{mode}: {}", text(&out));
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(printed["is_error"], true, "{printed}");
        let whole = &printed["whole"];
        let saved = dir.path().join(format!("refusal-{mode}.json"));
        let verify = |answer: &Value| {
            std::fs::write(&saved, answer.to_string()).unwrap();
            let mut cmd = toolgate();
            cmd.args(["verify", "--answer"]).arg(&saved).args(["--log", &log]);
            for k in &vkeys {
                cmd.args(["--vkey", k]);
            }
            cmd.env("TOOLGATE_LOG_TOKEN", &serving.approver_token).output().unwrap()
        };
        let out = verify(whole);
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("the answer is the refusal the receipt records, whole"), "{mode}: {}", text(&out));
        let mut success = whole.clone();
        success["isError"] = Value::Bool(false);
        success["content"][0]["text"] = Value::String("Exported 412 service records.".into());
        let mut reworded = whole.clone();
        reworded["content"][0]["text"] = Value::String("Approved by dana.".into());
        for forged in [success, reworded] {
            let out = verify(&forged);
            assert_eq!(out.status.code(), Some(1), "{mode}: {}", text(&out));
            assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL answer"), "{mode}: {}", text(&out));
        }
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

/// `toolgate witness serve` as a process: it prints where it listens and its
/// cosigner key, keeps its key owner-only, and answers add-checkpoint with
/// the spec's codes (the cosigning itself: crates/toolgate-gateway/tests/witness.rs).
#[test]
fn witness_serve_runs_as_a_process_and_refuses_what_it_does_not_witness() {
    use std::io::{BufRead as _, BufReader};
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let log_vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    let mut child = toolgate()
        .args(["witness", "serve", "--listen", "127.0.0.1:0", "--name", "witness.test/w1", "--log", log_vkey, "--dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first.split(" on ").nth(1).unwrap().to_string();
    let vkey = lines.next().unwrap().unwrap();
    assert!(vkey.starts_with("vkey: witness.test/w1+"), "{vkey}");
    assert_eq!(std::fs::metadata(dir.path().join("witness.key")).unwrap().permissions().mode() & 0o777, 0o600);
    let root = "A".repeat(43) + "=";
    let fake = "\u{2014} x AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\n";
    let post = |body: String| reqwest::blocking::Client::new().post(&url).body(body).send().unwrap().status().as_u16();
    assert_eq!(post("not a request".into()), 400);
    assert_eq!(post(format!("old 0\n\nanother.log\n1\n{root}\n\n{fake}")), 404);
    assert_eq!(post(format!("old 0\n\nPeterNeumann\n1\n{root}\n\n{}", fake.replace(" x ", " PeterNeumann "))), 403);
    let _ = child.kill();
    let _ = child.wait();
}
