//! Level 1 and 3: each server's live `tools/list` equals the shared fixture
//! (seed `000_…`'s contracts) field by field — on the raw wire, where a hint
//! the seed marks "(default)" must be absent, not false.

mod common;

use common::*;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};

const HINTS: [&str; 4] = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];

fn assert_tool_matches(wire: &Value, expected: &Value) {
    let name = expected["name"].as_str().unwrap();
    for field in ["name", "title", "description", "inputSchema"] {
        assert_eq!(
            wire[field], expected[field],
            "{name}: field `{field}` differs from the fixture"
        );
    }
    match &expected["outputSchema"] {
        Value::Null => {
            assert!(wire.get("outputSchema").is_none(), "{name}: outputSchema must be absent")
        }
        schema => assert_eq!(&wire["outputSchema"], schema, "{name}: outputSchema differs"),
    }
    let allowed = ["name", "title", "description", "inputSchema", "outputSchema", "annotations"];
    for key in wire.as_object().unwrap().keys() {
        assert!(allowed.contains(&key.as_str()), "{name}: unexpected field `{key}` on the wire");
    }
    let annotations = wire.get("annotations").cloned().unwrap_or(json!({}));
    for key in annotations.as_object().unwrap().keys() {
        assert!(HINTS.contains(&key.as_str()), "{name}: unexpected annotation `{key}`");
    }
    for hint in HINTS {
        let declared = &expected["annotations"][hint];
        if declared["declared"] == json!(true) {
            assert_eq!(
                annotations.get(hint),
                Some(&declared["value"]),
                "{name}: {hint} must be declared as in the seed"
            );
        } else {
            assert!(
                annotations.get(hint).is_none(),
                "{name}: {hint} is a default in the seed and must be absent on the wire"
            );
        }
    }
}

fn assert_server_matches(kind: ServerKind, tools: &[Value]) {
    let expected = fixture_server(kind);
    let expected_tools = expected["tools"].as_array().unwrap();
    let names = |list: &[Value]| {
        list.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(names(tools), names(expected_tools), "{}: tool set or order differs", kind.name());
    for (wire, fx) in tools.iter().zip(expected_tools) {
        assert_tool_matches(wire, fx);
    }
}

async fn raw_post(url: &str, method: &str, id: u64) -> (reqwest::StatusCode, Value) {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": modern_meta()}});
    let response = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .json(&body)
        .send()
        .await
        .expect("POST reaches the server");
    let status = response.status();
    (status, response.json().await.expect("JSON response"))
}

#[tokio::test]
async fn live_tools_list_on_the_raw_wire_equals_the_fixture() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let mut total = 0;
    for kind in ServerKind::ALL {
        let server = server(kind, dir.path());
        let (addr, _task) =
            serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone()).await.unwrap();
        let url = format!("http://{addr}/mcp");
        let (status, discover) = raw_post(&url, "server/discover", 1).await;
        assert_eq!(status, 200);
        let fx = fixture_server(kind);
        assert_eq!(
            discover["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            fx["id"]
        );
        assert_eq!(discover["result"]["supportedVersions"], json!(["2026-07-28", "2025-11-25"]));
        let (status, listed) = raw_post(&url, "tools/list", 2).await;
        assert_eq!(status, 200);
        let result = &listed["result"];
        assert!(
            result["ttlMs"].is_u64() && result["cacheScope"].is_string(),
            "2026-07-28 lists carry cache hints: {result}"
        );
        let tools = result["tools"].as_array().expect("tools array");
        assert_server_matches(kind, tools);
        total += tools.len();
    }
    assert_eq!(total, 8, "the eight tools of seed 000");
    cancel.cancel();
}

#[tokio::test]
async fn live_tools_list_over_stdio_in_the_legacy_era_equals_the_fixture() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ServerKind::ALL {
        let client = connect_stdio(kind, dir.path(), Era::Legacy).await;
        assert_eq!(client.peer_info().unwrap().protocol_version.as_str(), "2025-11-25");
        let tools: Vec<Value> = client
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| serde_json::to_value(t).unwrap())
            .collect();
        assert_server_matches(kind, &tools);
        client.cancel().await.unwrap();
    }
}

#[test]
fn every_declared_input_schema_compiles_and_rejects_unknown_properties() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ServerKind::ALL {
        let server = server(kind, dir.path());
        for tool in fixture_server(kind)["tools"].as_array().unwrap() {
            let name = tool["name"].as_str().unwrap();
            let r = run(&server, name, json!({"unexpected_field": 1}));
            assert!(r.is_error, "{name} accepted an unknown property");
            assert!(
                r.text.contains("unexpected_field") || r.text.contains("Additional properties"),
                "{name}: {}",
                r.text
            );
        }
    }
}
