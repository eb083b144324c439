//! Golden receipts: with a fixed clock, a fixed source of randomness (so a
//! fixed signing key and fixed salts) and a deterministic upstream, every
//! kind of call leaves exactly the same signed receipts and private records,
//! byte for byte. Any change to what a receipt says — or how it is
//! drafted, canonicalized or signed — shows here as a diff.
//!
//! `UPDATE_GOLDEN=1 cargo test -p toolgate-gateway --test golden_receipts`
//! rewrites `tests/golden/*.jsonl` (review the diff before committing).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_core::operation::OperationState;
use toolgate_core::{FixedClock, SeededEntropy};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode, Sources};
use toolgate_ledger::Resolution;

const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
/// 2026-06-01T00:00:00Z.
const START_MS: i64 = 1_780_272_000_000;

/// A desk whose every answer is a function of the calls so far.
#[derive(Clone, Default)]
struct Desk {
    filed: Arc<AtomicU64>,
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
        let object = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
        let tools = [
            json!({"name": "lookup", "description": "Look a word up.", "annotations": {"readOnlyHint": true},
                   "inputSchema": object(json!({"q": {"type": "string"}}), json!(["q"])),
                   "outputSchema": object(json!({"answer": {"type": "string"}}), json!(["answer"]))}),
            json!({"name": "file", "description": "File a ticket.", "annotations": {"readOnlyHint": false, "destructiveHint": false},
                   "inputSchema": object(json!({"title": {"type": "string"}}), json!(["title"]))}),
            json!({"name": "pay", "description": "Pay an amount.", "annotations": {"readOnlyHint": false, "destructiveHint": true},
                   "inputSchema": object(json!({"amount": {"type": "integer"}}), json!(["amount"]))}),
            json!({"name": "wipe", "description": "Wipe everything.", "annotations": {"destructiveHint": true}, "inputSchema": object(json!({}), json!([]))}),
            json!({"name": "flaky", "description": "Fails after acting.", "annotations": {"readOnlyHint": false}, "inputSchema": object(json!({}), json!([]))}),
        ];
        Ok(ListToolsResult::with_all_items(
            tools.into_iter().map(|t| serde_json::from_value::<Tool>(t).unwrap()).collect(),
        ))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        Ok(match request.name.as_ref() {
            "lookup" => CallToolResult::structured(json!({"answer": format!("{} means {}", args["q"].as_str().unwrap_or(""), "a thing")})),
            "file" => CallToolResult::structured(json!({"ticket": format!("F-{}", self.filed.fetch_add(1, Ordering::SeqCst) + 1)})),
            "pay" => CallToolResult::structured(json!({"paid": args["amount"]})),
            "flaky" => return Err(ErrorData::internal_error("committed, then fell over", None)),
            _ => CallToolResult::error(vec![rmcp::model::ContentBlock::text("no such tool")]),
        }
        .into())
    }
}

async fn call_with(url: &str, name: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Value::Object(more) = extra {
        for (k, v) in more {
            params[k.as_str()] = v;
        }
    }
    let resp = request(url, json!(3), "tools/call", params).send().await.unwrap();
    answer_of(&resp.text().await.unwrap())
}

fn key(k: &str) -> Value {
    json!({"_meta": {"io.toolgate/operationKey": k}})
}

/// Every kind of receipt the gateway writes, in one fixed order.
/// With `capture`, receipts carry the full arguments and results too.
async fn scenario(capture: bool) -> Vec<String> {
    let cancel = CancellationToken::new();
    let upstream = serve_rmcp(Desk::default(), &cancel).await;
    let dir = tempfile::tempdir().unwrap();
    write_tokens(dir.path());
    let registry: String = [
        ("lookup", "automatic"),
        ("file", "automatic"),
        ("pay", "requires_approval"),
        ("wipe", "prohibited"),
        ("flaky", "automatic"),
    ]
    .iter()
    .map(|(t, c)| format!("[registry.\"desk__{t}\"]\nclass = \"{c}\"\n"))
    .collect();
    let text = format!(
        "[gateway]\nlist_ttl_ms = 60000\nupstream_timeout_ms = 5000\n[servers.desk]\nurl = \
            \"{upstream}\"\ntrusted = true\n{registry}{CALLERS}[receipts]\ncapture_values = \
            {capture}\n[approvals]\nhold_ms = 0\n"
    );
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, text).unwrap();
    let clock = Arc::new(FixedClock::new(START_MS));
    let sources = Sources { clock: clock.clone(), entropy: Arc::new(SeededEntropy::new([42; 32])) };
    let config = Config::load(&path).unwrap();
    // The config's version is the hash of its text, which names the
    // upstream's port: the golden file holds a mark in its place, and every
    // receipt a call made must name it.
    let version = config.version().to_string();
    let gw = Gateway::start_with(config, Mode::Serve, sources).await.unwrap();
    assert!(gw.wait_ready(Duration::from_secs(10)).await.is_empty());
    let (url, stop) = serve_gateway(gw.clone()).await;
    let tick = || clock.advance(1_000);

    // A read, answered: one receipt for its decision and outcome.
    assert_eq!(
        call_with(&url, "desk__lookup", json!({"q": "gate"}), json!({})).await["result"]["structuredContent"]
            ["answer"],
        "gate means a thing"
    );
    tick();
    // Refused before any decision (invalid arguments), by the registry
    // (prohibited), and an unknown tool (a protocol error).
    assert_eq!(
        call_with(&url, "desk__lookup", json!({"q": 5}), json!({})).await["result"]["structuredContent"]
            ["reason"],
        "invalid_arguments"
    );
    tick();
    assert_eq!(
        call_with(&url, "desk__wipe", json!({}), json!({})).await["result"]["structuredContent"]["reason"],
        "prohibited"
    );
    tick();
    assert_eq!(
        call_with(&url, "desk__nothing", json!({}), json!({})).await["error"]["code"],
        -32602
    );
    tick();
    // A keyed write: reserved and finished (two receipts), replayed, then
    // the same key with other arguments (a conflict).
    assert_eq!(
        call_with(&url, "desk__file", json!({"title": "leak"}), key("k-1")).await["result"]["structuredContent"]
            ["ticket"],
        "F-1"
    );
    tick();
    assert_eq!(
        call_with(&url, "desk__file", json!({"title": "leak"}), key("k-1")).await["result"]["structuredContent"]
            ["ticket"],
        "F-1"
    );
    tick();
    assert_eq!(
        call_with(&url, "desk__file", json!({"title": "flood"}), key("k-1")).await["result"]["structuredContent"]
            ["reason"],
        "operation_conflict"
    );
    tick();
    // A write without a key: the gateway names the operation itself.
    assert_eq!(
        call_with(&url, "desk__file", json!({"title": "fire"}), json!({})).await["result"]["structuredContent"]
            ["ticket"],
        "F-2"
    );
    tick();
    // Approval: asked (the approval opens with its receipt), approved by
    // dana, run once under it, and its re-issue answered from the record.
    let eliciting =
        json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    let asked =
        call_with(&url, "desk__pay", json!({"amount": 120}), eliciting).await["result"].clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let approval = asked["_meta"]["io.toolgate/approval"]["id"].as_str().unwrap().to_string();
    let state = asked["requestState"].clone();
    tick();
    let (status, _) = admin(
        &url,
        Some(DANA_TOKEN),
        "POST",
        &format!("/admin/approvals/{approval}/approve"),
        Some(json!({"reason": "budgeted"})),
    )
    .await;
    assert_eq!(status, 200);
    tick();
    let paid =
        call_with(&url, "desk__pay", json!({"amount": 120}), json!({"requestState": state})).await;
    assert_eq!(paid["result"]["structuredContent"]["paid"], 120, "{paid}");
    tick();
    let again =
        call_with(&url, "desk__pay", json!({"amount": 120}), json!({"requestState": state})).await;
    assert_eq!(again["result"]["_meta"]["io.toolgate/operation"]["replayed"], true, "{again}");
    tick();
    // A write whose upstream fails after it may have acted: unknown, then
    // settled by hand (the settlement has its own receipt).
    let flaky = call_with(&url, "desk__flaky", json!({}), key("k-2")).await;
    assert!(flaky.get("error").is_some() || flaky["result"]["isError"] == true, "{flaky}");
    tick();
    let unknown = gw
        .ledger
        .operations(None, Some(OperationState::Unknown), START_MS + 100_000, usize::MAX)
        .await
        .unwrap();
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    let op = &unknown[0];
    let receipt = Some(gw.log.settlement(op, OperationState::ReconciledNotApplied, "dana", None));
    let settle = Resolution {
        applied: false,
        by: "dana".into(),
        reason: "not in the desk".into(),
        outcome: None,
        now_ms: START_MS + 100_000,
        receipt,
    };
    gw.ledger.resolve_operation(&op.id, settle).await.unwrap();

    let stored = gw.ledger.receipts(0, 1_000).await.unwrap();
    stop.cancel();
    gw.stop();
    cancel.cancel();
    let named = stored
        .iter()
        .filter(|r| r.logged.contains(&format!("\"config_version\":\"{version}\"")))
        .count();
    assert_eq!(
        named,
        stored.len() - 1,
        "every receipt but the operator's settlement names the config it ran under"
    );
    stored
        .into_iter()
        .map(|r| {
            json!({"logged": r.logged.replace(&version, "CONFIG_VERSION"), "asked": r.asked})
                .to_string()
        })
        .collect()
}

async fn compare(capture: bool, file: &str) {
    let lines = scenario(capture).await;
    let path = std::path::Path::new(GOLDEN_DIR).join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(GOLDEN_DIR).unwrap();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing (UPDATE_GOLDEN=1 writes it)", path.display()));
    let want: Vec<&str> = golden.lines().collect();
    for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "receipt {i} differs from {file}");
    }
    assert_eq!(
        lines.len(),
        want.len(),
        "the scenario wrote {} receipts; {file} has {}",
        lines.len(),
        want.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_receipt_is_byte_identical_to_the_golden_file() {
    compare(false, "receipts.jsonl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_with_captured_values_are_byte_identical_to_the_golden_file() {
    compare(true, "receipts-captured.jsonl").await;
}
