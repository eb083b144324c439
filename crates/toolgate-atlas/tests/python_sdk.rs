//! Level 3: the official MCP Python SDK (`mcp` 2.3.0) lists and calls on
//! each Atlas server over Streamable HTTP, in the 2026-07-28 mode, the
//! legacy mode and the auto mode (server/discover probe).
//!
//! The interpreter comes from `TOOLGATE_PYTHON`, else `.venv-sdk/` at the
//! workspace root, which `scripts/test` creates from
//! `tests/python/requirements.txt`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::{Value, json};
use toolgate_atlas::ServerKind;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("TOOLGATE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace().join(".venv-sdk/bin/python");
    assert!(
        venv.exists(),
        "no Python with the MCP SDK: run scripts/test (it creates .venv-sdk with tests/python/requirements.txt) or set TOOLGATE_PYTHON"
    );
    venv
}

fn sdk(url: &str, mode: &str, tool: &str, args: &Value) -> Value {
    let mut invalid = args.clone();
    invalid["not_in_the_schema"] = json!(true);
    let calls = json!([{"tool": tool, "arguments": args}, {"tool": tool, "arguments": invalid}]);
    let out = Command::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([url, mode, &calls.to_string()])
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "SDK client failed in mode {mode}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).expect("SDK client prints JSON")
}

#[test]
fn the_python_sdk_lists_and_calls_every_server_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            ServerKind::Tickets,
            "search_tickets",
            json!({"model_variant": "AC-250-S", "symptom": "oil in the air line", "limit": 4}),
        ),
        (
            ServerKind::Parts,
            "check_availability",
            json!({"part_no": toolgate_atlas::dataset().parts[0].part_no}),
        ),
        (
            ServerKind::Manuals,
            "search_manual",
            json!({"query": "fan blade clearance", "product_family": "AC-180", "variant": "S"}),
        ),
    ];
    for (kind, tool, args) in cases {
        let child = spawn_http(kind, dir.path());
        let expected_names: Vec<Value> = fixture_server(kind)["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        for (mode, version) in
            [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25"), ("auto", "2026-07-28")]
        {
            let out = sdk(&child.url, mode, tool, &args);
            assert_eq!(out["protocol_version"], version, "{kind:?} {mode}");
            let names: Vec<Value> =
                out["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
            assert_eq!(names, expected_names, "{kind:?} {mode}");
            let call = &out["results"][0];
            assert_ne!(call["isError"], json!(true), "{kind:?} {mode}: {call}");
            match kind {
                ServerKind::Tickets => {
                    let tickets = call["structuredContent"]["tickets"].as_array().unwrap();
                    assert_eq!(tickets.len(), 4);
                    assert!(tickets.iter().all(|t| t["model_variant"] == "AC-250-S" && t["fault_code"] == "F-102"));
                }
                ServerKind::Parts => {
                    assert_eq!(call["structuredContent"]["part_no"], args["part_no"])
                }
                ServerKind::Manuals => {
                    let p = &call["structuredContent"]["passages"][0];
                    assert_eq!(p["product_family"], "AC-180");
                    assert_eq!(p["variant"], "S");
                }
                ServerKind::Notices => unreachable!("the notices server has its own tests"),
                ServerKind::Support => unreachable!("the support desk has its own tests"),
            }
            assert_eq!(call["content"][0]["type"], "text");
            let invalid = &out["results"][1];
            assert_eq!(invalid["isError"], json!(true), "{kind:?} {mode}: {invalid}");
            assert!(
                invalid["content"][0]["text"].as_str().unwrap().contains("not_in_the_schema"),
                "{invalid}"
            );
        }
    }
}
