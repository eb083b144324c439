//! The receipt in a stock client's answer, proven by the `toolgate` CLI: a
//! call through `toolgate demo --serve` with the official Python SDK, its
//! `_meta` receipt saved to a file, then `toolgate verify --answer` against
//! the gateway's published log and keys, and `toolgate log watch --once`;
//! and whole answers, saved as the stock Python and TypeScript SDKs hand
//! them back, proven by the CLI and by the independent Python verifier.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

mod demo_common;
mod ops_common;
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
    let vkeys: Vec<String> = String::from_utf8_lossy(&keys.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("vkey     "))
        .map(str::to_string)
        .collect();
    assert_eq!(vkeys.len(), 2, "{}", text(&keys));
    let log = format!("{}/log/", serving.endpoint.trim_end_matches("/mcp"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/answer_receipt.py");
    for mode in ["2026-07-28", "legacy"] {
        let out = Command::new(python())
            .arg(&script)
            .args([&serving.endpoint, mode, "tickets__get_ticket", r#"{"ticket_id": "SR-20031"}"#])
            .env("TOOLGATE_TOKEN", &serving.agent_token)
            .output()
            .unwrap();
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
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).ends_with("verified\n"),
            "{mode}: {}",
            text(&out)
        );
        // Without a token: refused at once, and told which variable carries one.
        let started = std::time::Instant::now();
        let mut anonymous = toolgate();
        anonymous
            .args(["verify", "--answer"])
            .arg(&saved)
            .args(["--log", &log, "--vkey", &vkeys[0]])
            .env_remove("TOOLGATE_LOG_TOKEN");
        let out = anonymous.output().unwrap();
        assert!(
            !out.status.success()
                && text(&out).contains("answered 401")
                && text(&out).contains("TOOLGATE_LOG_TOKEN"),
            "{}",
            text(&out)
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "a refusal is not waited out: {:?}",
            started.elapsed()
        );
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
        let out = Command::new(python())
            .arg(&script)
            .args([&serving.endpoint, mode, "tickets__export_service_records", "{}"])
            .env("TOOLGATE_TOKEN", &serving.agent_token)
            .output()
            .unwrap();
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
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout)
                    .contains("the answer is the refusal the receipt records, whole"),
            "{mode}: {}",
            text(&out)
        );
        let mut success = whole.clone();
        success["isError"] = Value::Bool(false);
        success["content"][0]["text"] = Value::String("Exported 412 service records.".into());
        let mut reworded = whole.clone();
        reworded["content"][0]["text"] = Value::String("Approved by dana.".into());
        for forged in [success, reworded] {
            let out = verify(&forged);
            assert_eq!(out.status.code(), Some(1), "{mode}: {}", text(&out));
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("FAIL answer"),
                "{mode}: {}",
                text(&out)
            );
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
        .args([
            "witness",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "witness.test/w1",
            "--log",
            log_vkey,
            "--dir",
        ])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first.split(" on ").nth(1).unwrap().to_string();
    let vkey = lines.next().unwrap().unwrap();
    assert!(vkey.starts_with("vkey: witness.test/w1+"), "{vkey}");
    assert_eq!(
        std::fs::metadata(dir.path().join("witness.key")).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let root = "A".repeat(43) + "=";
    let fake = "\u{2014} x AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\n";
    let post = |body: String| {
        reqwest::blocking::Client::new().post(&url).body(body).send().unwrap().status().as_u16()
    };
    assert_eq!(post("not a request".into()), 400);
    assert_eq!(post(format!("old 0\n\nanother.log\n1\n{root}\n\n{fake}")), 404);
    assert_eq!(
        post(format!(
            "old 0\n\nPeterNeumann\n1\n{root}\n\n{}",
            fake.replace(" x ", " PeterNeumann ")
        )),
        403
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A stdio MCP server (2025-11-25) whose answers hold what the SDKs treat
/// differently: every kind of content block, annotations, icons, nulls in
/// `structuredContent` and `_meta`, a tool error, a prompt, a resource's
/// contents; and (`extended`) members outside the protocol's schema.
const UPSTREAM: &str = r#"
import json, sys
REPORT = {"content": [
    {"type": "text", "text": "Pump P-7 replaced", "annotations": {"audience": ["user", "assistant"], "priority": 0.5, "lastModified": "2025-01-01T00:00:00Z"}, "_meta": {"vendor/k": None}},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav", "annotations": {"priority": 1}},
    {"type": "resource_link", "uri": "file:///manual/p7.pdf", "name": "p7", "title": "P-7 manual", "mimeType": "application/pdf", "size": 1024, "icons": [{"src": "https://example.com/i.png", "mimeType": "image/png"}]},
    {"type": "resource", "resource": {"uri": "file:///notes.txt", "text": "line\u2028two", "mimeType": "text/plain"}},
    {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAEC"}}],
  "structuredContent": {"part": "P-7", "note": None, "list": [None, 1, 2.0, 1.5e-7], "nested": {"x": None}, "big": 12345678901234567890, "text": "\u00e9"},
  "_meta": {"vendor/trace": None}}
TOOLS = {
  "report": REPORT,
  "failing": {"content": [{"type": "text", "text": "no stock"}], "isError": True},
  "extended": {"content": [{"type": "text", "text": "ok", "x-extra": 1}], "x-top": {"a": 1}},
}
PROMPT = {"description": "Diagnose a pump", "messages": [
  {"role": "user", "content": {"type": "text", "text": "What failed?", "annotations": {"audience": ["user"]}}},
  {"role": "assistant", "content": {"type": "resource", "resource": {"uri": "file:///log.txt", "text": "F-101", "mimeType": "text/plain"}}},
  {"role": "user", "content": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}}], "_meta": {"vendor/p": None}}
CONTENTS = {"contents": [{"uri": "file:///notes.txt", "text": "abc", "mimeType": "text/plain", "_meta": {"q": None}}, {"uri": "file:///notes.txt#b", "blob": "AAAA"}]}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid, params = msg.get("method"), msg["id"], msg.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "prompts": {}, "resources": {}}, "serverInfo": {"name": "up", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}
    elif method == "tools/call":
        result = TOOLS[params["name"]]
    elif method == "prompts/list":
        result = {"prompts": [{"name": "diagnose", "description": "Diagnose a pump"}]}
    elif method == "prompts/get":
        result = PROMPT
    elif method == "resources/list":
        result = {"resources": [{"uri": "file:///notes.txt", "name": "notes"}]}
    elif method == "resources/templates/list":
        result = {"resourceTemplates": []}
    elif method == "resources/read":
        result = CONTENTS
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}), flush=True)
"#;

/// What `toolgate verify --answer` and `tests/python/verify_answer.py` said
/// of one saved answer: (proven, what each printed).
struct Verdicts {
    cli: (bool, String),
    python: (bool, String),
}

/// The CLI (with both of the log's keys, ML-DSA-65 required) and the
/// independent Python verifier (with its Ed25519 key) on `file`.
fn both_verify(file: &Path, log: &str, vkeys: &[String]) -> Verdicts {
    let mut cmd = toolgate();
    cmd.args(["verify", "--answer"]).arg(file).args(["--log", log, "--require-pq"]);
    for k in vkeys {
        cmd.args(["--vkey", k]);
    }
    let out = cmd.output().unwrap();
    let cli = (out.status.success(), text(&out));
    let ed25519 = vkeys.iter().min_by_key(|k| k.len()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/verify_answer.py");
    let out = Command::new(python()).arg(&script).arg(file).args([log, ed25519]).output().unwrap();
    Verdicts { cli, python: (out.status.success(), text(&out)) }
}

/// The JSON-RPC response to a raw 2026-07-28 request, as sent.
async fn raw_answer(url: &str, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let text = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Mcp-Name", params["name"].as_str().unwrap_or_default())
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // An event stream's message, or the JSON itself.
    text.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string).unwrap_or(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_saved_as_a_stock_sdk_hands_it_back_proves_whole_and_a_changed_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream.py");
    std::fs::write(&upstream, UPSTREAM).unwrap();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"

[receipts]
checkpoint_ms = 100
log_access = "public"

[servers.up]
command = {python:?}
args = [{upstream:?}]
sandbox = "off"

[registry."up__report"]
class = "automatic"
read_only = true
[registry."up__failing"]
class = "automatic"
read_only = true
[registry."up__extended"]
class = "automatic"
read_only = true
[registry_prompts."up__diagnose"]
class = "automatic"
[[registry_resources]]
server = "up"
uri = "file:///*"
class = "automatic"

[callers.agent]
tenant = "acme"
anonymous = true
"#,
            python = python().display().to_string(),
            upstream = upstream.display().to_string(),
        ),
    )
    .unwrap();
    let mut serve = tokio::process::Command::new(ops_common::BIN);
    serve.args(["serve", "--config"]).arg(&config);
    let gateway = ops_common::spawn_listening(
        serve,
        &dir.path().join("gateway.log"),
        "toolgate: serving MCP on",
    )
    .await;
    let keys = toolgate().args(["keys", "show", "--config"]).arg(&config).output().unwrap();
    let vkeys: Vec<String> = String::from_utf8_lossy(&keys.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("vkey     "))
        .map(str::to_string)
        .collect();
    assert_eq!(vkeys.len(), 2, "{}", text(&keys));
    let log = format!("{}/log/", gateway.base());
    let saved = dir.path().join("saved.json");
    let check = |what: &str, answer: &str, proven: bool| -> Verdicts {
        std::fs::write(&saved, answer).unwrap();
        let v = both_verify(&saved, &log, &vkeys);
        if proven {
            assert!(
                v.cli.0 && v.cli.1.contains("ok   answer") && v.cli.1.ends_with("verified\n"),
                "{what}: the CLI does not prove it:\n{}\n{answer}",
                v.cli.1
            );
            assert!(
                v.python.0 && v.python.1.contains("ok   answer hashes to result_sha256"),
                "{what}: the Python verifier does not prove it:\n{}\n{answer}",
                v.python.1
            );
        } else {
            assert_eq!(
                (v.cli.0, v.python.0),
                (false, false),
                "{what}: proven though changed:\n{}\n{}\n{answer}",
                v.cli.1,
                v.python.1
            );
            assert!(
                v.cli.1.contains("FAIL answer") && v.cli.1.contains("\nNOT VERIFIED\n"),
                "{what}: {}",
                v.cli.1
            );
            assert!(v.python.1.contains("FAIL answer"), "{what}: {}", v.python.1);
        }
        v
    };

    // The stock Python SDK, in both eras: a tool's result, a tool error, a
    // prompt, a resource's contents; each saved four ways.
    let cases = [
        ("up__report", "report"),
        ("up__failing", "failing"),
        ("prompt:up__diagnose", "prompt"),
        ("resource:toolgate://up/file:///notes.txt", "read"),
    ];
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/answer_receipt.py");
    for mode in ["2026-07-28", "legacy"] {
        for (target, name) in cases {
            let out = Command::new(python())
                .arg(&script)
                .args([&gateway.url, mode, target, "{}"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{mode} {name}: {}", text(&out));
            let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
            for (form, answer) in printed["forms"].as_object().unwrap() {
                let answer = answer.as_str().unwrap();
                let v = check(&format!("{mode} {name} {form}"), answer, true);
                // The Python SDK wrote its defaults in: read back as such.
                if name == "report" && form != "model_dump_json" {
                    assert!(
                        v.cli.1.contains("isError: false read as the SDK's default"),
                        "{mode} {form}: {}",
                        v.cli.1
                    );
                }
                if name == "read" {
                    assert!(
                        v.cli.1.contains("as the upstream named them"),
                        "{mode} {form}: {}",
                        v.cli.1
                    );
                }
            }
            // Changed, no form proves: the text, a value of the tool's, the
            // claim of an error, a null the tool gave.
            let mut changed: Value =
                serde_json::from_str(printed["forms"]["exclude_none"].as_str().unwrap()).unwrap();
            match name {
                "report" => changed["structuredContent"]
                    .as_object_mut()
                    .unwrap()
                    .remove("note")
                    .map(drop)
                    .unwrap(),
                "failing" => changed["isError"] = json!(false),
                "prompt" => changed["messages"][1]["content"]["resource"]["text"] = json!("F-102"),
                _ => changed["contents"][0]["text"] = json!("abd"),
            }
            check(&format!("{mode} {name} exclude_none, changed"), &changed.to_string(), false);
            let mut changed: Value =
                serde_json::from_str(printed["forms"]["model_dump_json"].as_str().unwrap())
                    .unwrap();
            match name {
                "report" => changed["content"][0]["text"] = json!("Pump P-7 not replaced"),
                "failing" => changed["is_error"] = json!(false),
                "prompt" => changed["messages"][0]["content"]["text"] = json!("What worked?"),
                _ => changed["contents"][1]["blob"] = json!("AAAB"),
            }
            check(&format!("{mode} {name} model_dump_json, changed"), &changed.to_string(), false);
        }
    }

    // The stock TypeScript SDK, in both eras: `JSON.stringify` of what it resolves.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ts");
    assert!(
        root.join("node_modules/@modelcontextprotocol/client").exists(),
        "no TypeScript SDK: run scripts/test (it installs tests/ts)"
    );
    for mode in ["2026-07-28", "legacy"] {
        // The read in 2026-07-28 too: the TypeScript SDK refuses one without
        // `ttlMs` and `cacheScope`, which the gateway puts in where a
        // 2025-11-25 upstream gave none.
        let steps = json!([{"tool": "up__report"}, {"tool": "up__failing"}, {"prompt": "up__diagnose"}, {"resource": "toolgate://up/file:///notes.txt"}]);
        let out = Command::new("node")
            .arg(root.join("answer_forms.mjs"))
            .args([&gateway.url, mode, &steps.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{mode}: {}", text(&out));
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        for (i, answer) in printed["saved"].as_array().unwrap().iter().enumerate() {
            let answer = answer
                .as_str()
                .unwrap_or_else(|| panic!("{mode} step {i}: the SDK threw: {answer}"));
            check(&format!("typescript {mode} step {i}"), answer, true);
            let mut changed: Value = serde_json::from_str(answer).unwrap();
            match i {
                0 => changed["structuredContent"]["nested"]["x"] = json!(0),
                1 => changed.as_object_mut().unwrap().remove("isError").map(drop).unwrap(),
                2 => changed["description"] = json!("Diagnose a valve"),
                _ => changed["contents"].as_array_mut().unwrap().truncate(1),
            }
            check(&format!("typescript {mode} step {i}, changed"), &changed.to_string(), false);
        }
    }

    // The raw JSON-RPC response (2026-07-28: the gateway put `resultType` in
    // after the receipt hashed the result) proves as it is.
    let raw =
        raw_answer(&gateway.url, "tools/call", json!({"name": "up__report", "arguments": {}}))
            .await;
    check("raw 2026-07-28 response", &raw, true);

    // A result holding members outside the schema: the raw response proves;
    // the SDKs' answers, which dropped them, do not, and the CLI says why.
    let raw =
        raw_answer(&gateway.url, "tools/call", json!({"name": "up__extended", "arguments": {}}))
            .await;
    assert!(raw.contains("x-extra") && raw.contains("x-top"), "{raw}");
    check("raw response with members outside the schema", &raw, true);
    let out = Command::new(python())
        .arg(&script)
        .args([&gateway.url, "legacy", "up__extended", "{}"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = check(
        "python exclude_none, members dropped",
        printed["forms"]["exclude_none"].as_str().unwrap(),
        false,
    );
    assert!(
        v.cli.1.contains("a member outside the protocol's schema")
            && v.cli.1.contains("raw JSON-RPC response"),
        "{}",
        v.cli.1
    );
    drop(gateway);
}
