//! Level 3: real MCP peers. rmcp as the client over stdio and Streamable
//! HTTP, in both protocol eras, against the built `toolgate-atlas` binary;
//! and the HTTP rules the endpoint enforces on its own.

mod common;

use common::*;
use serde_json::json;
use toolgate_atlas::ServerKind;

/// One representative read per server, with what its answer must contain.
fn probe(kind: ServerKind) -> (&'static str, serde_json::Value) {
    match kind {
        ServerKind::Tickets => ("get_ticket", json!({"ticket_id": "SR-20031"})),
        ServerKind::Parts => {
            ("find_part", json!({"model_variant": "RS-90-S", "category": "fan-blade"}))
        }
        ServerKind::Manuals => {
            ("search_manual", json!({"query": "bearing noise", "product_family": "RS-90", "k": 2}))
        }
        ServerKind::Notices => {
            ("send_notice", json!({"to": "team@example.test", "body": "Build passed."}))
        }
        ServerKind::Support => ("search_customers", json!({"query": "Harbor Freight"})),
    }
}

async fn exercise(client: &Client, kind: ServerKind, era: Era) {
    let expected_version = match era {
        Era::Modern => "2026-07-28",
        Era::Legacy => "2025-11-25",
    };
    assert_eq!(
        client.peer_info().unwrap().protocol_version.as_str(),
        expected_version,
        "{kind:?} {era:?}"
    );
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), fixture_server(kind)["tools"].as_array().unwrap().len());
    let (name, args) = probe(kind);
    let r = call(client, name, args).await;
    assert!(!r.is_error, "{kind:?} {era:?}: {}", r.text);
    match kind {
        ServerKind::Tickets => assert_eq!(r.structured["ticket_id"], "SR-20031"),
        ServerKind::Parts => assert!(
            r.structured["parts"][0]["fitment"].as_array().unwrap().contains(&json!("RS-90-S"))
        ),
        ServerKind::Manuals => assert_eq!(r.structured["passages"][0]["product_family"], "RS-90"),
        ServerKind::Notices => assert_eq!(r.structured["status"], "queued"),
        ServerKind::Support => assert_eq!(r.structured["status"], "complete"),
    }
    // A tool error travels as an isError result; a tool this server lacks
    // is a protocol error.
    if kind == ServerKind::Tickets {
        let missing = call(client, "get_ticket", json!({"ticket_id": "SR-99999"})).await;
        assert!(missing.is_error && missing.text.contains("SR-99999"), "{}", missing.text);
    } else {
        let Value::Object(map) = json!({"ticket_id": "SR-20031"}) else { unreachable!() };
        let err = client
            .call_tool(rmcp::model::CallToolRequestParams::new("get_ticket").with_arguments(map))
            .await;
        assert!(err.is_err(), "calling a tool this server lacks is a protocol error");
    }
}

use serde_json::Value;

#[tokio::test]
async fn rmcp_over_stdio_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ServerKind::ALL {
        for era in [Era::Modern, Era::Legacy] {
            let client = connect_stdio(kind, dir.path(), era).await;
            exercise(&client, kind, era).await;
            client.cancel().await.unwrap();
        }
    }
}

#[tokio::test]
async fn rmcp_over_http_in_both_eras_against_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ServerKind::ALL {
        let child = spawn_http(kind, dir.path());
        assert!(child.url.ends_with("/mcp"), "{}", child.url);
        for era in [Era::Modern, Era::Legacy] {
            let client = connect_http(&child.url, era).await;
            exercise(&client, kind, era).await;
            client.cancel().await.unwrap();
        }
    }
}

#[tokio::test]
async fn writes_over_the_wire_land_in_the_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_http(ServerKind::Tickets, dir.path());
    let client = connect_http(&child.url, Era::Modern).await;
    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open)
        .unwrap()
        .ticket_id
        .clone();
    let r =
        call(&client, "post_ticket_update", json!({"ticket_id": open, "note": "over HTTP"})).await;
    assert!(!r.is_error, "{}", r.text);
    let notes = std::fs::read_to_string(dir.path().join("notes.jsonl"))
        .expect("the note is in --state DIR");
    assert!(notes.contains("over HTTP") && notes.contains(&open));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_http_endpoint_is_post_only_and_checks_host() {
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_http(ServerKind::Parts, dir.path());
    let http = reqwest::Client::new();
    let put = http.put(&child.url).send().await.unwrap();
    assert_eq!(put.status(), 405, "only POST (and the legacy session's GET/DELETE) are served");
    let rebinding = http
        .post(&child.url)
        .header("Host", "attacker.example")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}}))
        .send()
        .await
        .unwrap();
    assert_eq!(rebinding.status(), 403, "a foreign Host header is refused (DNS rebinding)");
}
