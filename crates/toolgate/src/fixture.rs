//! `toolgate conformance-fixture`: an rmcp MCP server offering the fixture
//! tools the official conformance suite calls by name, so the suite can be
//! run through the gateway (`scripts/conformance-gateway`). Test equipment,
//! not part of the product.

use std::net::SocketAddr;

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A 1×1 PNG and an empty WAV: content the suite can check by type.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

#[derive(Clone, Default)]
struct Fixture {
    /// Set by `test_trigger_tool_change`: the tool list grows by one.
    changed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

fn tools() -> Vec<Value> {
    let empty = json!({"type": "object", "properties": {}});
    let mut list: Vec<Value> = [
        ("test_simple_text", "Tests simple text content response"),
        ("test_image_content", "Tests image content response"),
        ("test_audio_content", "Tests audio content response"),
        ("test_embedded_resource", "Tests embedded resource content response"),
        ("test_multiple_content_types", "Tests response with multiple content types (text, image, resource)"),
        ("test_error_handling", "Tests error response handling"),
        ("test_missing_capability", "Test tool requiring sampling"),
        ("test_logging_tool", "Logs only when the request sets a log level"),
        ("test_streaming_elicitation", "Answers without sending requests on the response stream"),
        ("test_trigger_tool_change", "Adds a tool to the list"),
        ("test_tool_with_progress", "Reports progress three times, then answers"),
    ]
    .into_iter()
    .map(|(name, description)| json!({"name": name, "description": description, "inputSchema": empty}))
    .collect();
    list.push(json!({
        "name": "test_custom_header",
        "description": "Mirrors its region argument in the Mcp-Param-Region header (SEP-2243)",
        "inputSchema": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}
    }));
    list.push(json!({
        "name": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        }
    }));
    list
}

fn content(name: &str) -> Option<Vec<Value>> {
    let image = json!({"type": "image", "data": PNG, "mimeType": "image/png"});
    Some(match name {
        "test_simple_text" => vec![json!({"type": "text", "text": "This is a simple text response for testing."})],
        "test_image_content" => vec![image],
        "test_audio_content" => vec![json!({"type": "audio", "data": WAV, "mimeType": "audio/wav"})],
        "test_embedded_resource" => vec![json!({"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}})],
        "test_multiple_content_types" => vec![
            json!({"type": "text", "text": "Multiple content types test:"}),
            image,
            json!({"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}),
        ],
        "json_schema_2020_12_tool" => vec![json!({"type": "text", "text": "JSON Schema 2020-12 tool called"})],
        "test_logging_tool" | "test_streaming_elicitation" | "test_trigger_tool_change" | "test_dynamic_tool" | "test_tool_with_progress" | "test_custom_header" => {
            vec![json!({"type": "text", "text": format!("{name} done")})]
        }
        _ => return None,
    })
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        let mut list = tools();
        if self.changed.load(std::sync::atomic::Ordering::Relaxed) {
            list.push(json!({"name": "test_dynamic_tool", "description": "Added by test_trigger_tool_change", "inputSchema": {"type": "object", "properties": {}}}));
        }
        let tools: Vec<Tool> = list.into_iter().map(serde_json::from_value).collect::<Result<_, _>>().map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        if request.name == "test_tool_with_progress" {
            if let Some(token) = context.meta.get_progress_token() {
                for step in [0.0, 50.0, 100.0] {
                    let note = rmcp::model::ProgressNotificationParam::new(token.clone(), step).with_total(100.0);
                    let _ = context.peer.notify_progress(note).await;
                }
            }
        }
        if request.name == "test_missing_capability" {
            // The gateway relays no server-to-client requests, so it never
            // declares sampling: this tool must refuse with -32021.
            let meta = serde_json::to_value(&request.meta).unwrap_or_default();
            if meta["io.modelcontextprotocol/clientCapabilities"].get("sampling").is_none() {
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode(-32021),
                    "MissingRequiredClientCapabilityError",
                    Some(json!({"requiredCapabilities": {"sampling": {}}})),
                ));
            }
        }
        if request.name == "test_trigger_tool_change" {
            self.changed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if request.name == "test_error_handling" {
            return Ok(CallToolResult::error(vec![ContentBlock::text("This tool intentionally returns an error for testing")]).into());
        }
        let blocks = content(&request.name).ok_or_else(|| ErrorData::invalid_params(format!("unknown tool {}", request.name), None))?;
        let blocks: Vec<ContentBlock> = blocks.into_iter().map(serde_json::from_value).collect::<Result<_, _>>().map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::success(blocks).into())
    }
}

pub async fn run(addr: SocketAddr) -> anyhow::Result<()> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let fixture = Fixture::default();
    let config = StreamableHttpServerConfig::default().with_json_response(true).with_cancellation_token(cancel.clone());
    let service: StreamableHttpService<Fixture, LocalSessionManager> = StreamableHttpService::new(move || Ok(fixture.clone()), Default::default(), config);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    eprintln!("toolgate conformance-fixture: serving on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, axum::Router::new().nest_service("/mcp", service))
        .with_graceful_shutdown(async move {
            crate::serve::shutdown_signal().await;
            cancel.cancel();
        })
        .await?;
    Ok(())
}
