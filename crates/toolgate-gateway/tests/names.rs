//! Tool names beyond ASCII in the 2026-07-28 era: `Mcp-Name` travels as
//! `=?base64?…?=` (the official Python SDK encodes it so), is decoded with
//! the same strict rules as `Mcp-Param-*`, and is compared exactly — a
//! confusable name stays another name. The gateway encodes it the same way
//! towards its upstream.

mod common;

use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

const TOOL: &str = "prix_café";
const EXPOSED: &str = "shop__prix_café";

/// An upstream whose one tool has a non-ASCII name.
#[derive(Clone)]
struct Shop;

impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": TOOL, "description": "The price of a coffee.", "annotations": {"readOnlyHint": true},
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false}
        }))
        .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured(json!({"tool": request.name, "prix": 3})).into())
    }
}

async fn setup() -> Fronted {
    front(Shop, |url| format!("[servers.shop]\nurl = \"{url}\"\ntrusted = true\n[registry.\"{EXPOSED}\"]\nclass = \"automatic\"\n{ANONYMOUS}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_calls_a_tool_named_beyond_ascii_in_both_eras() {
    let front = setup().await;
    for mode in ["2026-07-28", "legacy"] {
        let calls = json!([{"tool": EXPOSED, "arguments": {}}]);
        let out = Command::new(python())
            .arg(workspace().join("tests/python/sdk_client.py"))
            .args([&front.url, mode, &calls.to_string()])
            .output()
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "SDK client failed in mode {mode}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_str(&stdout).expect("JSON");
        assert!(got["tools"].as_array().unwrap().iter().any(|t| t["name"] == EXPOSED), "{got}");
        assert_eq!(
            got["results"][0]["structuredContent"],
            json!({"tool": TOOL, "prix": 3}),
            "mode {mode}: {got}"
        );
    }
}

#[tokio::test]
async fn mcp_name_is_decoded_strictly_and_compared_exactly() {
    let front = setup().await;
    let send = |header: String| {
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": EXPOSED, "arguments": {}, "_meta": meta()}});
        reqwest::Client::new()
            .post(&front.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", header)
            .body(body.to_string())
            .send()
    };
    let encoded = format!("=?base64?{}?=", STANDARD.encode(EXPOSED));
    let ok = send(encoded).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(answer_of(&ok.text().await.unwrap())["result"]["structuredContent"]["prix"], 3);
    // A confusable ASCII name, the name in another Unicode form (e + U+0301),
    // and Base64 that is not strict: each is another name, or no name.
    for header in [
        "shop__prix_cafe".to_string(),
        format!("=?base64?{}?=", STANDARD.encode("shop__prix_cafe\u{301}")),
        format!("=?base64?{}?=", STANDARD.encode(EXPOSED).trim_end_matches('=')),
    ] {
        let resp = send(header.clone()).await.unwrap();
        assert_eq!(resp.status(), 400, "{header}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains("header/body mismatch"),
            "{header}: {body}"
        );
    }
}
