//! Level 3: the Streamable HTTP rules and bad input. Each malformed request
//! gets a clear 4xx / JSON-RPC error, nothing reaches an upstream, and the
//! gateway keeps serving.

mod common;

use common::*;
use serde_json::{Value, json};

struct Raw<'a> {
    method: reqwest::Method,
    headers: Vec<(&'a str, String)>,
    body: Vec<u8>,
}

fn good_headers(method: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
        ("MCP-Protocol-Version", "2026-07-28".into()),
        ("Mcp-Method", method.into()),
    ]
}

fn list_body() -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}})
        .to_string()
        .into_bytes()
}

async fn send(url: &str, raw: Raw<'_>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(raw.method, url);
    for (k, v) in raw.headers {
        req = req.header(k, v);
    }
    let resp = req.body(raw.body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null))
}

fn without(headers: Vec<(&'static str, String)>, name: &str) -> Vec<(&'static str, String)> {
    headers.into_iter().filter(|(k, _)| *k != name).collect()
}

fn with(
    mut headers: Vec<(&'static str, String)>,
    name: &'static str,
    value: &str,
) -> Vec<(&'static str, String)> {
    headers.retain(|(k, _)| *k != name);
    headers.push((name, value.into()));
    headers
}

#[tokio::test]
async fn every_transport_rule_answers_with_its_status_and_code() {
    let h = start("").await;
    let url = &h.url;
    let cases: Vec<(&str, Raw, u16, Option<i64>)> = vec![
        ("GET", Raw { method: reqwest::Method::GET, headers: good_headers("tools/list"), body: vec![] }, 405, None),
        ("DELETE", Raw { method: reqwest::Method::DELETE, headers: good_headers("tools/list"), body: vec![] }, 405, None),
        ("Accept without SSE", Raw { method: reqwest::Method::POST, headers: with(good_headers("tools/list"), "Accept", "application/json"), body: list_body() }, 406, None),
        ("wrong content type", Raw { method: reqwest::Method::POST, headers: with(good_headers("tools/list"), "Content-Type", "text/plain"), body: list_body() }, 415, None),
        ("header/_meta version mismatch", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25", "io.modelcontextprotocol/clientCapabilities": {}}}}).to_string().into_bytes() }, 400, Some(-32020)),
        ("foreign Origin", Raw { method: reqwest::Method::POST, headers: with(good_headers("tools/list"), "Origin", "http://evil.example"), body: list_body() }, 403, None),
        ("foreign Host", Raw { method: reqwest::Method::POST, headers: with(good_headers("tools/list"), "Host", "evil.example"), body: list_body() }, 403, None),
        ("Mcp-Method mismatch", Raw { method: reqwest::Method::POST, headers: good_headers("tools/call"), body: list_body() }, 400, Some(-32020)),
        ("missing Mcp-Method", Raw { method: reqwest::Method::POST, headers: without(good_headers("tools/list"), "Mcp-Method"), body: list_body() }, 400, Some(-32020)),
        ("unsupported version", Raw { method: reqwest::Method::POST, headers: with(good_headers("tools/list"), "MCP-Protocol-Version", "2099-01-01"), body: list_body() }, 400, Some(-32022)),
        ("no version header", Raw { method: reqwest::Method::POST, headers: without(good_headers("tools/list"), "MCP-Protocol-Version"), body: list_body() }, 400, Some(-32600)),
        ("missing _meta", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#.to_vec() }, 400, Some(-32602)),
        ("malformed JSON", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: b"{\"jsonrpc\":".to_vec() }, 400, Some(-32700)),
        ("invalid UTF-8", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}".to_vec() }, 400, Some(-32700)),
        ("duplicate keys", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list","params":{}}"#.to_vec() }, 400, Some(-32600)),
        ("10,000-deep nesting", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: format!("{{\"x\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes() }, 400, Some(-32600)),
        ("oversized body", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: vec![b' '; (1 << 20) + 10] }, 413, None),
        ("batch", Raw { method: reqwest::Method::POST, headers: good_headers("tools/list"), body: b"[]".to_vec() }, 400, Some(-32600)),
    ];
    for (what, raw, status, code) in cases {
        let (got, body) = send(url, raw).await;
        assert_eq!(got, status, "{what}: {body}");
        if let Some(code) = code {
            assert_eq!(body["error"]["code"].as_i64(), Some(code), "{what}: {body}");
        }
    }
    let (_, body) = send(
        url,
        Raw {
            method: reqwest::Method::POST,
            headers: with(good_headers("tools/list"), "MCP-Protocol-Version", "2099-01-01"),
            body: list_body(),
        },
    )
    .await;
    assert_eq!(body["error"]["data"]["supported"], json!(["2026-07-28", "2025-11-25"]));
    // The gateway's own origin is not foreign.
    let own = url.trim_end_matches("/mcp").to_string();
    let (status, _) = send(
        url,
        Raw {
            method: reqwest::Method::POST,
            headers: with(good_headers("tools/list"), "Origin", &own),
            body: list_body(),
        },
    )
    .await;
    assert_eq!(status, 200);
    // After all of that, the gateway still serves.
    assert_eq!(list_names(url).await.len(), 10);
}

#[tokio::test]
async fn mcp_name_must_match_the_called_tool() {
    let h = start("").await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}, "_meta": meta()}});
    let mismatch = with(good_headers("tools/call"), "Mcp-Name", "tickets__search_tickets");
    let (status, reply) = send(
        &h.url,
        Raw {
            method: reqwest::Method::POST,
            headers: mismatch,
            body: body.to_string().into_bytes(),
        },
    )
    .await;
    assert_eq!((status, reply["error"]["code"].as_i64()), (400, Some(-32020)));
    let (status, reply) = send(
        &h.url,
        Raw {
            method: reqwest::Method::POST,
            headers: good_headers("tools/call"),
            body: body.to_string().into_bytes(),
        },
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].as_i64()),
        (400, Some(-32020)),
        "Mcp-Name is required for tools/call"
    );
}

#[tokio::test]
async fn unknown_methods_and_notifications() {
    let h = start("").await;
    for method in ["unknown/method", "resources/subscribe", "initialize", "ping"] {
        let (status, body) = post(&h.url, method, json!({})).await;
        assert_eq!(
            (status, body["error"]["code"].as_i64(), body["id"].as_i64()),
            (404, Some(-32601), Some(7)),
            "{method}"
        );
    }
    // Served, and a completion of nothing the caller can see is invalid params.
    let (status, body) = post(&h.url, "completion/complete", json!({"ref": {"type": "ref/prompt", "name": "tickets__nothing"}, "argument": {"name": "a", "value": ""}})).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (200, Some(-32602)), "{body}");
    let (status, body) = post(&h.url, "prompts/list", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["prompts"], json!([]));
    assert!(body["result"]["ttlMs"].is_u64() && body["result"]["cacheScope"].is_string());
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}});
    let (status, _) = send(
        &h.url,
        Raw {
            method: reqwest::Method::POST,
            headers: good_headers("notifications/cancelled"),
            body: note.to_string().into_bytes(),
        },
    )
    .await;
    assert_eq!(status, 202);
}

#[tokio::test]
async fn the_legacy_handshake_is_served_on_the_same_endpoint() {
    let h = start("").await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}});
    let headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("Accept", "application/json, text/event-stream".to_string()),
    ];
    let (status, body) = send(
        &h.url,
        Raw {
            method: reqwest::Method::POST,
            headers: headers.clone(),
            body: init.to_string().into_bytes(),
        },
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
    assert!(body["result"].get("resultType").is_none());
    let legacy = with(headers, "MCP-Protocol-Version", "2025-11-25");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, body) = send(
        &h.url,
        Raw { method: reqwest::Method::POST, headers: legacy, body: list.to_string().into_bytes() },
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 10);
    assert!(body["result"].get("ttlMs").is_none(), "no 2026 fields for a legacy client");
}

#[tokio::test]
async fn input_responses_that_are_no_response_objects_are_invalid_params() {
    let h = start("").await;
    for (key, bad) in [
        ("inputResponses", json!({"user_name": 12345})),
        ("inputResponses", Value::Null),
        ("inputResponses", json!([])),
        ("requestState", json!(5)),
    ] {
        let (status, body) = post(&h.url, "tools/call", json!({"name": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}, key: bad})).await;
        assert_eq!(
            (status, body["error"]["code"].as_i64()),
            (200, Some(-32602)),
            "{key}: {bad}: {body}"
        );
        assert!(body["error"]["message"].as_str().unwrap().contains(key), "{body}");
    }
    // Well-formed, they pass on (a call that asked for nothing ignores them).
    let (status, body) = post(&h.url, "tools/call", json!({"name": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}, "inputResponses": {"x": {"action": "accept"}}})).await;
    assert_eq!(status, 200);
    assert!(body["result"].is_object(), "{body}");
}

#[tokio::test]
async fn a_request_s_strings_and_lists_pass_at_their_limits_and_are_refused_just_over() {
    let h = start("max_string_bytes = 64\nmax_items = 8").await;
    let search = |symptom: String, extra: usize| json!({"name": "tickets__search_tickets", "arguments": {"model_variant": "AC-250-S", "symptom": symptom}, "extra": vec![0; extra]});
    let (status, body) = post(&h.url, "tools/call", search("a".repeat(64), 8)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"]["structuredContent"]["tickets"].is_array(), "{body}");
    let (status, body) = post(&h.url, "tools/call", search("a".repeat(65), 0)).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32600)), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a string of 65 bytes; the limit is 64"),
        "{body}"
    );
    let (status, body) = post(&h.url, "tools/call", search("a".into(), 9)).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32600)), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("more than 8 items"), "{body}");
}

#[tokio::test]
async fn the_body_and_its_nesting_pass_at_their_limits_and_are_refused_just_over() {
    let h = start("max_body_bytes = 4096\nmax_depth = 8").await;
    let list = |extra: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": meta(), "extra": extra}}).to_string()
    };
    let send_body = |body: String| {
        send(
            &h.url,
            Raw {
                method: reqwest::Method::POST,
                headers: good_headers("tools/list"),
                body: body.into_bytes(),
            },
        )
    };
    // Exactly the limit (padded with the whitespace JSON allows after a value), then one byte more.
    let body = list(json!(null));
    let (status, reply) = send_body(format!("{body}{}", " ".repeat(4096 - body.len()))).await;
    assert_eq!(status, 200, "{reply}");
    let (status, _) = send_body(format!("{body}{}", " ".repeat(4097 - body.len()))).await;
    assert_eq!(status, 413);
    // The message, its params and six arrays are eight levels; a seventh array is one too many.
    let nested = |n: usize| (0..n).fold(json!(1), |inner, _| json!([inner]));
    let (status, reply) = send_body(list(nested(6))).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = send_body(list(nested(7))).await;
    assert_eq!((status, reply["error"]["code"].as_i64()), (400, Some(-32600)), "{reply}");
    assert!(
        reply["error"]["message"].as_str().unwrap().contains("nesting deeper than 8 levels"),
        "{reply}"
    );
}

#[tokio::test]
async fn arguments_pass_at_max_argument_bytes_and_are_refused_just_over() {
    let h = start("max_argument_bytes = 200").await;
    let sized = |n: usize| {
        let bare = json!({"query": ""});
        json!({"query": "v".repeat(n - serde_json::to_string(&bare).unwrap().len())})
    };
    assert_eq!(serde_json::to_string(&sized(200)).unwrap().len(), 200);
    let reason = |body: &Value| {
        body["result"]["structuredContent"]["reason"].as_str().unwrap_or_default().to_string()
    };
    let at = call(&h.url, "manuals__search_manual", sized(200)).await;
    assert_ne!(reason(&at), "arguments_too_large", "{at}");
    let over = call(&h.url, "manuals__search_manual", sized(201)).await;
    assert_eq!(reason(&over), "arguments_too_large", "{over}");
    let message = over["result"]["structuredContent"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("201 bytes") && message.contains("limit is 200"), "{over}");
}
