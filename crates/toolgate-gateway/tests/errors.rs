//! An upstream's JSON-RPC error read by its meaning: one that says the
//! request was refused before it ran (-32020, -32021, -32022, -32700,
//! -32600, -32601, -32602) settles a write as not applied and passes on
//! with the status the transport requires (400 in 2026-07-28 for the ones
//! it names); any other error after sending leaves the outcome unknown.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use toolgate_core::operation::OperationState;

/// An upstream with one write that may refuse it before running (it wants
/// a capability the client lacks) or fail after running (-32000).
#[derive(Clone, Default)]
struct Desk {
    wants_elicitation: Arc<AtomicBool>,
    fails_after: Arc<AtomicBool>,
    filed: Arc<AtomicUsize>,
}

impl ServerHandler for Desk {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": "file_report", "description": "Files a report.",
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false},
            "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"], "additionalProperties": false}
        }))
        .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }
    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.wants_elicitation.load(Ordering::SeqCst) {
            return Err(ErrorData::new(
                ErrorCode(-32021),
                "MissingRequiredClientCapabilityError",
                Some(json!({"requiredCapabilities": {"elicitation": {}}})),
            ));
        }
        let n = self.filed.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fails_after.load(Ordering::SeqCst) {
            return Err(ErrorData::new(
                ErrorCode(-32000),
                "the report was filed, then the desk fell over",
                None,
            ));
        }
        Ok(CallToolResult::structured(json!({"filed": n})).into())
    }
}

async fn setup(desk: &Desk) -> Fronted {
    front(desk.clone(), |url| {
        format!(
            "[servers.desk]\nurl = \"{url}\"\ntrusted = \
                true\n[registry.\"desk__file_report\"]\nclass = \"automatic\"\n{ANONYMOUS}"
        )
    })
    .await
}

fn keyed(key: &str) -> Value {
    json!({"name": "desk__file_report", "arguments": {"title": "Q3"}, "_meta": {"io.toolgate/operationKey": key}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_upstream_refused_before_running_is_400_and_not_applied() {
    let desk = Desk::default();
    let front = setup(&desk).await;
    desk.wants_elicitation.store(true, Ordering::SeqCst);
    let resp = request(&front.url, json!(1), "tools/call", keyed("report-1")).send().await.unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        (body["id"].as_i64(), body["error"]["code"].as_i64()),
        (Some(1), Some(-32021)),
        "{body}"
    );
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}}),
        "passed on as the upstream said it"
    );
    // Nothing happened, and the ledger says so: the same key runs it once
    // the upstream takes it — no reconcile, one effect.
    let ops = front.gateway.ledger.operations(None, None, i64::MAX / 2, usize::MAX).await.unwrap();
    assert_eq!(
        ops.iter().map(|o| o.state).collect::<Vec<_>>(),
        [OperationState::ReconciledNotApplied],
        "{ops:?}"
    );
    desk.wants_elicitation.store(false, Ordering::SeqCst);
    let (status, body) = post(&front.url, "tools/call", keyed("report-1")).await;
    assert_eq!(
        (status, &body["result"]["structuredContent"]),
        (200, &json!({"filed": 1})),
        "{body}"
    );
    assert_eq!(desk.filed.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_running_leaves_the_outcome_unknown() {
    let desk = Desk::default();
    let front = setup(&desk).await;
    desk.fails_after.store(true, Ordering::SeqCst);
    let (status, body) = post(&front.url, "tools/call", keyed("report-2")).await;
    assert_eq!(status, 200, "{body}");
    let refusal = &body["result"]["structuredContent"];
    assert_eq!(
        (refusal["reason"].as_str(), refusal["action"].as_str()),
        (Some("outcome_unknown"), Some("reconcile")),
        "{body}"
    );
    // The retry is not sent again: the desk holds one report.
    let (_, again) = post(&front.url, "tools/call", keyed("report-2")).await;
    assert_eq!(again["result"]["structuredContent"]["reason"], "outcome_unknown", "{again}");
    assert_eq!(desk.filed.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sees_the_upstreams_error_in_both_eras() {
    let desk = Desk::default();
    let front = setup(&desk).await;
    desk.wants_elicitation.store(true, Ordering::SeqCst);
    for mode in ["2026-07-28", "legacy"] {
        let calls = json!([{"tool": "desk__file_report", "arguments": {"title": "Q3"}}]);
        let out = Command::new(python())
            .arg(workspace().join("tests/python/sdk_client.py"))
            .args([&front.url, mode, &calls.to_string()])
            .output()
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "mode {mode}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_str(&stdout).expect("JSON");
        let error = &got["results"][0]["error"];
        assert_eq!(
            (error["code"].as_i64(), &error["data"]["requiredCapabilities"]),
            (Some(-32021), &json!({"elicitation": {}})),
            "mode {mode}: {got}"
        );
    }
    assert_eq!(desk.filed.load(Ordering::SeqCst), 0);
}
