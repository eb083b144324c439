//! `toolgate conformance-fixture`: an rmcp MCP server offering the fixture
//! tools, prompts, resources and completions the official conformance suite
//! asks for by name, so the suite can be run through the gateway
//! (`scripts/conformance-gateway`); the gateway's own tests use it as an
//! upstream with all of them. Test equipment, not part of the product.

use std::net::SocketAddr;

use anyhow::Context as _;
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A 1×1 PNG and an empty WAV: content the suite can check by type.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

#[derive(Clone)]
struct Fixture {
    /// Flipped by `test_trigger_tool_change`: the tool list grows by one, or
    /// shrinks back (so every trigger is a change the suite can see).
    changed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Flipped by `test_trigger_prompt_change`, likewise for the prompts.
    prompts_changed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// URIs `test_update_resource` says changed, for the listen streams
    /// subscribed to them.
    updated: std::sync::Arc<tokio::sync::broadcast::Sender<String>>,
    /// Legacy sessions' `resources/subscribe`: each peer with the URIs it follows.
    subscribers: std::sync::Arc<
        std::sync::Mutex<Vec<(rmcp::Peer<RoleServer>, std::collections::BTreeSet<String>)>>,
    >,
    /// Speaks the legacy handshake only (`--legacy`): no 2026-07-28.
    legacy: bool,
}

impl Fixture {
    fn new(legacy: bool) -> Self {
        Self {
            changed: Default::default(),
            prompts_changed: Default::default(),
            updated: std::sync::Arc::new(tokio::sync::broadcast::channel(64).0),
            subscribers: Default::default(),
            legacy,
        }
    }

    /// Tells every legacy session subscribed to `uri` that it changed.
    async fn notify_subscribers(&self, uri: &str) {
        let peers: Vec<rmcp::Peer<RoleServer>> = {
            let mut subscribers = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            subscribers.retain(|(peer, uris)| !peer.is_transport_closed() && !uris.is_empty());
            subscribers
                .iter()
                .filter(|(_, uris)| uris.contains(uri))
                .map(|(peer, _)| peer.clone())
                .collect()
        };
        for peer in peers {
            let _ = peer
                .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri))
                .await;
        }
    }
}

/// Whether two handles reach one client session (they share what the
/// client said at `initialize`).
fn same_peer(a: &rmcp::Peer<RoleServer>, b: &rmcp::Peer<RoleServer>) -> bool {
    matches!((a.peer_info(), b.peer_info()), (Some(x), Some(y)) if std::sync::Arc::ptr_eq(&x, &y))
}

/// Reads a model type out of JSON (the fixture writes its answers as the
/// suite documents them).
fn model<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

fn prompts(changed: bool) -> Value {
    let arg = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
    let mut list = vec![
        json!({"name": "test_simple_prompt", "description": "A simple prompt without arguments"}),
        json!({"name": "test_prompt_with_arguments", "description": "A prompt with two arguments", "arguments": [arg("arg1", "First test argument"), arg("arg2", "Second test argument")]}),
        json!({"name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource", "arguments": [arg("resourceUri", "URI of the resource to embed")]}),
        json!({"name": "test_prompt_with_image", "description": "A prompt with an image"}),
        json!({"name": "test_input_required_result_prompt", "description": "MRTR: asks for context by elicitation"}),
    ];
    if changed {
        list.push(json!({"name": "test_dynamic_prompt", "description": "Added by test_trigger_prompt_change"}));
    }
    json!({"prompts": list})
}

/// A prompt's messages, or the `input_required` result of a prompt that asks first.
fn prompt(name: &str, arguments: &Value, answered: bool) -> Result<Value, ErrorData> {
    let user = |content: Value| json!({"role": "user", "content": content});
    let text = |t: String| user(json!({"type": "text", "text": t}));
    let messages = match name {
        "test_simple_prompt" | "test_dynamic_prompt" => {
            vec![text("This is a simple prompt for testing.".into())]
        }
        "test_prompt_with_arguments" => {
            let arg = |k: &str| arguments[k].as_str().unwrap_or_default().to_string();
            vec![text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg("arg1"),
                arg("arg2")
            ))]
        }
        "test_prompt_with_embedded_resource" => vec![
            user(
                json!({"type": "resource", "resource": {"uri": arguments["resourceUri"], "mimeType": "text/plain", "text": "Embedded resource content for testing."}}),
            ),
            text("Please process the embedded resource above.".into()),
        ],
        "test_prompt_with_image" => vec![
            user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
            text("Please analyze the image above.".into()),
        ],
        "test_input_required_result_prompt" if !answered => {
            return Ok(
                json!({"resultType": "input_required", "inputRequests": {"user_context": {"method": "elicitation/create", "params": {
                "message": "What context should the prompt use?",
                "requestedSchema": {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}}}}}),
            );
        }
        "test_input_required_result_prompt" => {
            vec![text("A prompt with the context given.".into())]
        }
        other => return Err(ErrorData::invalid_params(format!("unknown prompt {other}"), None)),
    };
    Ok(json!({"messages": messages}))
}

const TEMPLATE: &str = "test://template/{id}/data";

fn resource(uri: &str) -> Result<Value, ErrorData> {
    let content = match uri {
        "test://static-text" => {
            json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
        }
        "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
        _ => match uri
            .strip_prefix("test://template/")
            .and_then(|r| r.strip_suffix("/data"))
            .filter(|id| !id.is_empty() && !id.contains('/'))
        {
            Some(id) => {
                json!({"uri": uri, "mimeType": "application/json", "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()})
            }
            None => {
                return Err(ErrorData::invalid_params(
                    "Resource not found",
                    Some(json!({"uri": uri})),
                ));
            }
        },
    };
    Ok(json!({"contents": [content]}))
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
        ("test_trigger_prompt_change", "Adds a prompt to the list"),
        ("test_tool_with_progress", "Reports progress three times, then answers"),
        ("test_input_required_result_elicitation", "MRTR: asks for a name by elicitation"),
        ("test_input_required_result_sampling", "MRTR: asks for a sample"),
        ("test_input_required_result_list_roots", "MRTR: asks for the roots"),
        ("test_input_required_result_request_state", "MRTR: asks to confirm, with request state"),
        ("test_input_required_result_multiple_inputs", "MRTR: asks for three inputs at once"),
        ("test_input_required_result_multi_round", "MRTR: two rounds of input"),
        ("test_input_required_result_tampered_state", "MRTR: signed request state"),
        ("test_input_required_result_capabilities", "MRTR: asks only for what the client declared"),
    ]
    .into_iter()
    .map(|(name, description)| json!({"name": name, "description": description, "inputSchema": empty}))
    .collect();
    list.push(json!({
        "name": "test_update_resource",
        "description": "Says the resource at uri changed, to the listen streams subscribed to it",
        "inputSchema": {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
    }));
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
        "test_simple_text" => {
            vec![json!({"type": "text", "text": "This is a simple text response for testing."})]
        }
        "test_image_content" => vec![image],
        "test_audio_content" => {
            vec![json!({"type": "audio", "data": WAV, "mimeType": "audio/wav"})]
        }
        "test_embedded_resource" => vec![
            json!({"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}),
        ],
        "test_multiple_content_types" => vec![
            json!({"type": "text", "text": "Multiple content types test:"}),
            image,
            json!({"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}),
        ],
        "json_schema_2020_12_tool" => {
            vec![json!({"type": "text", "text": "JSON Schema 2020-12 tool called"})]
        }
        "test_logging_tool"
        | "test_streaming_elicitation"
        | "test_trigger_tool_change"
        | "test_trigger_prompt_change"
        | "test_dynamic_tool"
        | "test_tool_with_progress"
        | "test_custom_header" => {
            vec![json!({"type": "text", "text": format!("{name} done")})]
        }
        _ => return None,
    })
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities =
            serde_json::from_value(json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true}, "resources": {"subscribe": true}, "completions": {}})).expect("capabilities");
        ServerConfig::new(capabilities)
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        if self.legacy {
            std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::known_up_to(
                &rmcp::model::ProtocolVersion::V_2025_11_25,
            ))
        } else {
            std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        match subscribers.iter_mut().find(|(peer, _)| same_peer(peer, &context.peer)) {
            Some((_, uris)) => drop(uris.insert(request.uri)),
            None => subscribers.push((context.peer.clone(), [request.uri].into())),
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, uris)) =
            subscribers.iter_mut().find(|(peer, _)| same_peer(peer, &context.peer))
        {
            uris.remove(&request.uri);
        }
        Ok(())
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        model(prompts(self.prompts_changed.load(std::sync::atomic::Ordering::Relaxed)))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = serde_json::to_value(&request.arguments).unwrap_or_default();
        let answer = prompt(&request.name, &arguments, request.input_responses.is_some())?;
        if answer["resultType"] == "input_required" {
            return Ok(GetPromptResponse::InputRequired(model(answer)?));
        }
        Ok(GetPromptResponse::Complete(model(answer)?))
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        model(json!({"resources": [
            {"uri": "test://static-text", "name": "static-text", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary", "mimeType": "image/png"}
        ]}))
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        model(
            json!({"resourceTemplates": [{"uriTemplate": TEMPLATE, "name": "template-data", "mimeType": "application/json"}]}),
        )
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResponse::Complete(model(resource(&request.uri)?)?))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    /// A listen stream: `notifications/resources/updated` for each URI
    /// `test_update_resource` names (the SDK's sink sends only accepted ones).
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut updated = self.updated.subscribe();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                uri = updated.recv() => match uri {
                    Ok(uri) => {
                        if context.accepted().resource_subscriptions.as_ref().is_some_and(|list| list.contains(&uri)) {
                            let _ = context.sink().notify_resource_updated(uri).await;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return Ok(()),
                },
            }
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let asked = serde_json::to_value(&request).unwrap_or_default();
        let candidates: &[&str] = match (
            asked["ref"]["type"].as_str(),
            asked["ref"]["name"].as_str().or(asked["ref"]["uri"].as_str()),
            asked["argument"]["name"].as_str(),
        ) {
            (Some("ref/prompt"), Some("test_prompt_with_arguments"), Some("arg1")) => {
                &["paris", "park", "party"]
            }
            (Some("ref/resource"), Some(TEMPLATE), Some("id")) => &["123", "124", "200"],
            _ => &[],
        };
        let typed = asked["argument"]["value"].as_str().unwrap_or_default();
        let values: Vec<&str> =
            candidates.iter().copied().filter(|c| c.starts_with(typed)).collect();
        model(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut list = tools();
        if self.changed.load(std::sync::atomic::Ordering::Relaxed) {
            list.push(json!({"name": "test_dynamic_tool", "description": "Added by test_trigger_tool_change", "inputSchema": {"type": "object", "properties": {}}}));
        }
        let tools: Vec<Tool> = list
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "test_tool_with_progress"
            && let Some(token) = context.meta.get_progress_token()
        {
            for step in [0.0, 50.0, 100.0] {
                let note = rmcp::model::ProgressNotificationParam::new(token.clone(), step)
                    .with_total(100.0);
                let _ = context.peer.notify_progress(note).await;
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
            self.changed.fetch_xor(true, std::sync::atomic::Ordering::Relaxed);
        }
        if request.name == "test_update_resource" {
            let uri = request
                .arguments
                .as_ref()
                .and_then(|a| a.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let _ = self.updated.send(uri.clone());
            self.notify_subscribers(&uri).await;
            return Ok(
                CallToolResult::success(vec![ContentBlock::text(format!("updated {uri}"))]).into()
            );
        }
        if request.name == "test_trigger_prompt_change" {
            self.prompts_changed.fetch_xor(true, std::sync::atomic::Ordering::Relaxed);
        }
        if request.name.starts_with("test_input_required_result_") {
            let responses = serde_json::to_value(&request.input_responses).unwrap_or_default();
            let meta = serde_json::to_value(&context.meta).unwrap_or_default();
            let caps = meta["io.modelcontextprotocol/clientCapabilities"].clone();
            return match mrtr(&request.name, &responses, request.request_state.as_deref(), &caps)? {
                Ok(input_required) => {
                    let result: rmcp::model::InputRequiredResult =
                        serde_json::from_value(input_required)
                            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                    Ok(result.into())
                }
                Err(text) => Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into()),
            };
        }
        if request.name == "test_error_handling" {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "This tool intentionally returns an error for testing",
            )])
            .into());
        }
        let blocks = content(&request.name).ok_or_else(|| {
            ErrorData::invalid_params(format!("unknown tool {}", request.name), None)
        })?;
        let blocks: Vec<ContentBlock> = blocks
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::success(blocks).into())
    }
}

/// The fixture's MRTR behaviour (the suite's `test_input_required_result_*`):
/// `Ok(Some(value))` is an `input_required` result, `Ok(None)` means the
/// tool answers with `text`, `Err` is a protocol error.
fn mrtr(
    name: &str,
    responses: &Value,
    state: Option<&str>,
    caps: &Value,
) -> Result<Result<Value, String>, ErrorData> {
    let ask_name = |key: &str, message: &str, field: &str| {
        json!({key: {"method": "elicitation/create", "params": {"message": message,
            "requestedSchema": {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}}}})
    };
    let text = |key: &str, field: &str| {
        responses[key]["content"][field].as_str().unwrap_or("unknown").to_string()
    };
    let confirm = json!({"confirm": {"method": "elicitation/create", "params": {"message": "Please confirm",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}});
    let sample = |key: &str, prompt: &str| json!({key: {"method": "sampling/createMessage", "params": {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 50}}});
    let input_required = |requests: Value, state: Option<String>| {
        let mut v = json!({"resultType": "input_required", "inputRequests": requests});
        if let Some(s) = state {
            v["requestState"] = json!(s);
        }
        Ok(Ok(v))
    };
    let parsed = state.and_then(|s| serde_json::from_str::<Value>(s).ok()).unwrap_or_default();
    let done = |t: String| Ok(Err(t));
    match name {
        "test_input_required_result_elicitation" if !responses["user_name"].is_null() => {
            done(format!("Hello, {}!", text("user_name", "name")))
        }
        "test_input_required_result_elicitation" => {
            input_required(ask_name("user_name", "What is your name?", "name"), None)
        }
        "test_input_required_result_sampling" if !responses["sample_request"].is_null() => {
            done(format!(
                "Sampling result: {}",
                responses["sample_request"]["content"]["text"].as_str().unwrap_or("no response")
            ))
        }
        "test_input_required_result_sampling" => {
            input_required(sample("sample_request", "What is the capital of France?"), None)
        }
        "test_input_required_result_list_roots" if !responses["roots_request"].is_null() => {
            done(format!(
                "Found {} root(s)",
                responses["roots_request"]["roots"].as_array().map_or(0, Vec::len)
            ))
        }
        "test_input_required_result_list_roots" => {
            input_required(json!({"roots_request": {"method": "roots/list", "params": {}}}), None)
        }
        "test_input_required_result_request_state"
            if parsed["kind"] == "request-state"
                && responses["confirm"]["content"]["ok"] == true =>
        {
            done("state-ok: requestState validated".into())
        }
        "test_input_required_result_request_state" => input_required(
            confirm,
            Some(json!({"kind": "request-state", "nonce": nonce()}).to_string()),
        ),
        "test_input_required_result_multiple_inputs"
            if parsed["kind"] == "multiple-inputs"
                && !responses["user_name"].is_null()
                && !responses["greeting"].is_null()
                && !responses["client_roots"].is_null() =>
        {
            let greeting =
                responses["greeting"]["content"]["text"].as_str().unwrap_or("Hello there!");
            let roots = responses["client_roots"]["roots"].as_array().map_or(0, Vec::len);
            done(format!(
                "Name: {}; Greeting: {greeting}; Roots: {roots}",
                text("user_name", "name")
            ))
        }
        "test_input_required_result_multiple_inputs" => {
            let mut requests = ask_name("user_name", "What is your name?", "name");
            requests["greeting"] = sample("greeting", "Generate a greeting")["greeting"].clone();
            requests["client_roots"] = json!({"method": "roots/list", "params": {}});
            input_required(
                requests,
                Some(json!({"kind": "multiple-inputs", "nonce": nonce()}).to_string()),
            )
        }
        "test_input_required_result_multi_round"
            if parsed["round"] == 1 && !responses["step1"].is_null() =>
        {
            input_required(
                ask_name("step2", "Step 2: What is your favorite color?", "color"),
                Some(
                    json!({"round": 2, "name": text("step1", "name"), "nonce": nonce()})
                        .to_string(),
                ),
            )
        }
        "test_input_required_result_multi_round"
            if parsed["round"] == 2 && !responses["step2"].is_null() =>
        {
            done(format!(
                "Multi-round complete for {} who likes {}",
                parsed["name"].as_str().unwrap_or("friend"),
                text("step2", "color")
            ))
        }
        "test_input_required_result_multi_round" => input_required(
            ask_name("step1", "Step 1: What is your name?", "name"),
            Some(json!({"round": 1, "nonce": nonce()}).to_string()),
        ),
        "test_input_required_result_tampered_state" => match state {
            Some(raw) => match verify(raw) {
                None => Err(ErrorData::invalid_params("requestState integrity check failed", None)),
                Some(v) if v["kind"] == "tamper-test" && !responses["confirm"].is_null() => {
                    done("integrity-ok: state verified".into())
                }
                Some(_) => input_required(
                    confirm,
                    Some(sign(&json!({"kind": "tamper-test", "nonce": nonce()}))),
                ),
            },
            None => input_required(
                confirm,
                Some(sign(&json!({"kind": "tamper-test", "nonce": nonce()}))),
            ),
        },
        "test_input_required_result_capabilities" => {
            if responses.as_object().is_some_and(|r| !r.is_empty()) {
                let keys: Vec<&String> = responses.as_object().unwrap().keys().collect();
                return done(format!(
                    "capabilities-ok: received {}",
                    keys.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",")
                ));
            }
            let mut requests = serde_json::Map::new();
            if caps.get("elicitation").is_some() {
                requests.insert(
                    "elicit_input".into(),
                    ask_name("elicit_input", "Elicitation input", "value")["elicit_input"].clone(),
                );
            }
            if caps.get("sampling").is_some() {
                requests.insert(
                    "sample_input".into(),
                    sample("sample_input", "Sample request")["sample_input"].clone(),
                );
            }
            if requests.is_empty() {
                return done("No supported capabilities declared".into());
            }
            input_required(
                Value::Object(requests),
                Some(sign(&json!({"kind": "capabilities-test", "nonce": nonce()}))),
            )
        }
        _ => Ok(Err(String::new())),
    }
}

fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    format!("n{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Test equipment's integrity seal: sha256 over a fixed secret and the data.
const STATE_SECRET: &str = "toolgate-conformance-fixture";

fn sign(payload: &Value) -> String {
    let data = payload.to_string();
    let mac = toolgate_core::proposal::sha256_hex(format!("{STATE_SECRET}{data}").as_bytes());
    json!({"data": data, "hmac": mac}).to_string()
}

fn verify(raw: &str) -> Option<Value> {
    let outer: Value = serde_json::from_str(raw).ok()?;
    let data = outer["data"].as_str()?;
    let mac = toolgate_core::proposal::sha256_hex(format!("{STATE_SECRET}{data}").as_bytes());
    (outer["hmac"].as_str()? == mac).then(|| serde_json::from_str(data).ok()).flatten()
}

pub async fn run(
    addr: SocketAddr,
    legacy: bool,
    stdio: bool,
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> anyhow::Result<()> {
    let fixture = Fixture::new(legacy);
    if stdio {
        use rmcp::ServiceExt as _;
        let running = fixture.serve(rmcp::transport::stdio()).await.context("serving on stdio")?;
        running.waiting().await.context("serving on stdio")?;
        return Ok(());
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_cancellation_token(cancel.clone());
    let service: StreamableHttpService<Fixture, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(fixture.clone()), Default::default(), config);
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let routes = axum::Router::new().nest_service("/mcp", service);
    let shutdown = async move {
        toolgate_gateway::process::shutdown_signal().await;
        cancel.cancel();
    };
    match tls {
        None => {
            eprintln!(
                "toolgate conformance-fixture: serving on http://{}/mcp",
                listener.local_addr()?
            );
            axum::serve(toolgate_gateway::downstream::http::no_delay(listener), routes)
                .with_graceful_shutdown(shutdown)
                .await?;
        }
        Some((cert, key)) => {
            // The gateway's own TLS listener (the key must be owner-only, as there).
            let certificate = toolgate_gateway::downstream::tls::Certificate::load(&cert, &key)?;
            let bound = listener.local_addr()?;
            let listener =
                toolgate_gateway::downstream::tls::TlsListener::new(listener, certificate)?;
            eprintln!("toolgate conformance-fixture: serving on https://{bound}/mcp");
            axum::serve(listener, routes).with_graceful_shutdown(shutdown).await?;
        }
    }
    Ok(())
}
