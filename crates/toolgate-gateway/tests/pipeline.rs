//! Level 3: the gateway in the call path, over real HTTP, in front of the
//! Atlas servers with the seed's registry — what passes, what is refused and
//! with which next action, and that refused calls never reach the upstream.

mod common;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn discovery_follows_authority_in_name_order() {
    let h = start("").await;
    let names = list_names(&h.url).await;
    assert_eq!(
        names,
        [
            "manuals__search_manual",
            "parts__check_availability",
            "parts__find_part",
            "parts__raise_parts_order",
            "support__create_ticket",
            "support__get_ticket",
            "support__search_customers",
            "tickets__get_ticket",
            "tickets__post_ticket_update",
            "tickets__search_tickets"
        ],
        "the prohibited export is not listed"
    );
    let (_, body) = post(&h.url, "tools/list", json!({})).await;
    let result = &body["result"];
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].is_u64() && result["cacheScope"] == "private");
    // Definitions are the upstream's, under the exposed name.
    let find_part = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "parts__find_part")
        .unwrap();
    assert_eq!(
        find_part["inputSchema"]["properties"]["category"]["enum"].as_array().unwrap().len(),
        22
    );
    assert_eq!(find_part["annotations"]["readOnlyHint"], true);
    assert_eq!(find_part["title"], "Find catalogue parts");
}

#[tokio::test]
async fn pagination_walks_every_tool_once() {
    let h = start("list_page_size = 3").await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let (_, body) = post(&h.url, "tools/list", params).await;
        let page = body["result"]["tools"].as_array().unwrap();
        assert!(page.len() <= 3);
        names.extend(page.iter().map(|t| t["name"].as_str().unwrap().to_string()));
        match body["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(names, list_names(&start("").await.url).await);
    let (status, body) = post(&h.url, "tools/list", json!({"cursor": "garbage"})).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (200, Some(-32602)));
}

#[tokio::test]
async fn an_automatic_read_passes_with_the_upstream_result() {
    let h = start("").await;
    let args = json!({"model_variant": "AC-250-S", "symptom": "oil in the air line", "limit": 3});
    let via = call(&h.url, "tickets__search_tickets", args.clone()).await;
    let direct = call_direct(&h.atlas_urls["tickets"], "search_tickets", args).await;
    assert_eq!(via["result"]["structuredContent"], direct["result"]["structuredContent"]);
    assert_eq!(via["result"]["content"], direct["result"]["content"]);
}

async fn call_direct(url: &str, tool: &str, arguments: Value) -> Value {
    call(url, tool, arguments).await
}

fn refusal(body: &Value) -> &Value {
    assert_eq!(body["result"]["isError"], true, "{body}");
    &body["result"]["structuredContent"]
}

#[tokio::test]
async fn invalid_arguments_are_refused_with_every_path_and_never_sent() {
    let h = start("").await;
    let body = call(
        &h.url,
        "tickets__search_tickets",
        json!({"model_variant": "AC-250-X", "surprise": 1}),
    )
    .await;
    let r = refusal(&body);
    assert_eq!(
        (r["decision"].as_str(), r["reason"].as_str(), r["action"].as_str()),
        (Some("deny"), Some("invalid_arguments"), Some("correct"))
    );
    let paths: Vec<&str> =
        r["violations"].as_array().unwrap().iter().map(|v| v["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"/model_variant") && paths.contains(&"/"), "{paths:?}");
    assert!(!body.to_string().contains("AC-250-X"), "values are redacted");
    assert_eq!(r["proposal_sha256"].as_str().unwrap().len(), 64);

    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open)
        .unwrap()
        .ticket_id
        .clone();
    let write = call(
        &h.url,
        "tickets__post_ticket_update",
        json!({"ticket_id": open, "note": "x".repeat(2001)}),
    )
    .await;
    assert_eq!(refusal(&write)["action"], "correct");
    assert_eq!(lines(&h.sandbox().join("notes.jsonl")), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn prohibited_and_approval_tools_never_reach_the_upstream() {
    let h = start("").await;
    let export = call(
        &h.url,
        "tickets__export_service_records",
        json!({"recipient": "x@outside.example", "model_variant": "AC-250-S"}),
    )
    .await;
    let r = refusal(&export);
    assert_eq!(
        (r["decision"].as_str(), r["reason"].as_str(), r["action"].as_str()),
        (Some("deny"), Some("prohibited"), Some("refused"))
    );
    assert_eq!(lines(&h.sandbox().join("outbox.jsonl")), 0);

    let part = toolgate_atlas::dataset().parts[0].part_no.clone();
    let order = call(
        &h.url,
        "parts__raise_parts_order",
        json!({"part_no": part, "quantity": 2, "ticket_id": "SR-20031"}),
    )
    .await;
    // It waits for a named approver (the approvals tests follow it further);
    // this client cannot be asked, so it is told who decides, and how.
    let r = refusal(&order);
    assert_eq!(
        (r["reason"].as_str(), r["action"].as_str()),
        (Some("approval_pending"), Some("escalate")),
        "{order}"
    );
    assert!(r["approval_id"].as_str().is_some_and(|id| id.starts_with("apr_")), "{order}");
    assert_eq!(lines(&h.sandbox().join("orders.jsonl")), 0);

    // The registry said automatic: the write runs although its hints imply approval.
    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open)
        .unwrap()
        .ticket_id
        .clone();
    let note = call(
        &h.url,
        "tickets__post_ticket_update",
        json!({"ticket_id": open, "note": "through toolgate"}),
    )
    .await;
    assert_ne!(note["result"]["isError"], true, "{note}");
    assert_eq!(lines(&h.sandbox().join("notes.jsonl")), 1);
}

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error_with_a_next_action() {
    let h = start("").await;
    let (status, body) =
        post(&h.url, "tools/call", json!({"name": "tickets__drop_tables", "arguments": {}})).await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(body["error"]["data"]["action"], "correct");
    assert_eq!(body["error"]["data"]["reason"], "unknown_tool");
}

#[tokio::test]
async fn a_down_upstream_leaves_the_list_and_its_calls_get_retry() {
    let h = start("").await;
    h.atlas_cancel["manuals"].cancel();
    let body = call(&h.url, "manuals__search_manual", json!({"query": "torque"})).await;
    let r = refusal(&body);
    assert_eq!(
        (r["reason"].as_str(), r["action"].as_str()),
        (Some("upstream_unavailable"), Some("retry")),
        "{r}"
    );
    // The failed call marked it down: its tool leaves the list.
    let names = list_names(&h.url).await;
    assert!(!names.iter().any(|n| n.starts_with("manuals__")), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("tickets__")));
    let again = call(&h.url, "manuals__search_manual", json!({"query": "torque"})).await;
    assert_eq!(refusal(&again)["action"], "retry");
}

#[tokio::test]
async fn while_an_upstream_is_down_lists_are_kept_briefly() {
    let cancel = tokio_util::sync::CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let server =
        toolgate_atlas::server(toolgate_atlas::ServerKind::Parts, Some(dir.path())).unwrap();
    let (addr, _) =
        toolgate_atlas::serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone())
            .await
            .unwrap();
    // A port nothing listens on: the second server is down.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(
        &path,
        format!(
            "[servers.parts]\nurl = \"http://{addr}/mcp\"\ntrusted = true\n[servers.gone]\nurl = \
                \"http://{closed}/mcp\"\n{ANONYMOUS}"
        ),
    )
    .unwrap();
    let gw = toolgate_gateway::gateway::Gateway::start(
        toolgate_gateway::config::Config::load(&path).unwrap(),
        toolgate_gateway::gateway::Mode::Serve,
    )
    .await
    .unwrap();
    assert_eq!(gw.wait_ready(std::time::Duration::from_secs(5)).await.len(), 1, "one server down");
    let (url, stop) = serve_gateway(gw.clone()).await;
    for method in ["tools/list", "prompts/list", "resources/list"] {
        let (_, body) = post(&url, method, json!({})).await;
        assert_eq!(
            body["result"]["ttlMs"], 1000,
            "{method} while `gone` is down (the default TTL is a minute): {body}"
        );
    }
    stop.cancel();
    gw.stop();
    // All up: the configured TTL.
    std::fs::write(
        &path,
        format!("[servers.parts]\nurl = \"http://{addr}/mcp\"\ntrusted = true\n{ANONYMOUS}"),
    )
    .unwrap();
    let gw = toolgate_gateway::gateway::Gateway::start(
        toolgate_gateway::config::Config::load(&path).unwrap(),
        toolgate_gateway::gateway::Mode::Serve,
    )
    .await
    .unwrap();
    assert!(gw.wait_ready(std::time::Duration::from_secs(10)).await.is_empty());
    let (url, stop) = serve_gateway(gw.clone()).await;
    let (_, body) = post(&url, "tools/list", json!({})).await;
    assert_eq!(body["result"]["ttlMs"], 60000, "{body}");
    stop.cancel();
    gw.stop();
    cancel.cancel();
}

#[tokio::test]
async fn a_single_server_can_keep_its_tool_names() {
    let cancel = tokio_util::sync::CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let server =
        toolgate_atlas::server(toolgate_atlas::ServerKind::Parts, Some(dir.path())).unwrap();
    let (addr, _) =
        toolgate_atlas::serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone())
            .await
            .unwrap();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(
        &path,
        format!(
            "[servers.parts]\nurl = \"http://{addr}/mcp\"\nnamespace = \
                false\n[registry.\"find_part\"]\nclass = \
                \"automatic\"\n[registry.\"raise_parts_order\"]\nclass = \
                \"prohibited\"\n{ANONYMOUS}"
        ),
    )
    .unwrap();
    let gw = toolgate_gateway::gateway::Gateway::start(
        toolgate_gateway::config::Config::load(&path).unwrap(),
        toolgate_gateway::gateway::Mode::Serve,
    )
    .await
    .unwrap();
    assert!(gw.wait_ready(std::time::Duration::from_secs(10)).await.is_empty());
    let (url, stop) = serve_gateway(gw.clone()).await;
    // Unregistered tools of an untrusted server stay prohibited; registered ones keep their names.
    assert_eq!(list_names(&url).await, ["find_part"]);
    let body =
        call(&url, "find_part", json!({"model_variant": "AC-180-B", "category": "belt"})).await;
    assert!(body["result"]["structuredContent"]["count"].as_u64().unwrap() > 0, "{body}");
    let refused = call(
        &url,
        "raise_parts_order",
        json!({"part_no": "x", "quantity": 1, "ticket_id": "SR-20031"}),
    )
    .await;
    assert_eq!(refused["result"]["structuredContent"]["reason"], "prohibited");
    stop.cancel();
    gw.stop();
    cancel.cancel();
}
