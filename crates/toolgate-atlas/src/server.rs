//! One Atlas MCP server: its declared contracts, argument validation against
//! them, and dispatch to the tool's behaviour. Transport-agnostic: the same
//! handler serves stdio and Streamable HTTP, both protocol eras.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use crate::contracts::{self, ArgumentValidator};
use crate::tools::{self, Context};
use crate::ServerKind;

/// The revisions Atlas speaks: the stateless core and the legacy handshake.
pub const PROTOCOL_VERSIONS: [ProtocolVersion; 2] = [ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25];

#[derive(Clone)]
pub struct AtlasServer {
    inner: Arc<Inner>,
    /// Speaks the legacy handshake only (`--legacy`).
    legacy: bool,
}

struct Inner {
    kind: ServerKind,
    id: String,
    title: String,
    tools: Vec<Tool>,
    validators: HashMap<String, ArgumentValidator>,
    ctx: Context,
}

impl AtlasServer {
    pub fn new(kind: ServerKind, ctx: Context) -> Self {
        let contract = contracts::load(kind);
        let tools = contracts::tools(&contract);
        let validators = tools
            .iter()
            .map(|t| {
                let schema = Value::Object((*t.input_schema).clone());
                let v = ArgumentValidator::new(&schema).expect("embedded input schemas compile (checked by tests)");
                (t.name.to_string(), v)
            })
            .collect();
        Self { inner: Arc::new(Inner { kind, id: contract.id, title: contract.title, tools, validators, ctx }), legacy: false }
    }

    /// The same server, speaking only the 2025-11-25 handshake: a legacy
    /// upstream, for measuring that path (`scripts/bench-gateway`).
    pub fn legacy_only(mut self) -> Self {
        self.legacy = true;
        self
    }

    pub fn kind(&self) -> ServerKind {
        self.inner.kind
    }

    /// Where this server's writes go.
    pub fn sandbox_dir(&self) -> &std::path::Path {
        self.inner.ctx.sandbox.dir()
    }

    /// Validates and runs one call; the outcome exactly as the wire will carry it.
    pub fn run(&self, name: &str, arguments: Option<serde_json::Map<String, Value>>) -> Result<CallToolResult, McpError> {
        let inner = &self.inner;
        let Some(validator) = inner.validators.get(name) else {
            let known: Vec<&str> = inner.tools.iter().map(|t| t.name.as_ref()).collect();
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`; this server has: {}", known.join(", ")),
                None,
            ));
        };
        let arguments = Value::Object(arguments.unwrap_or_default());
        let violations = validator.violations(&arguments);
        if !violations.is_empty() {
            let lines: Vec<String> = violations.iter().map(|v| format!("{}: {}", v.path, v.message)).collect();
            let text = format!("invalid arguments for {name}; correct and call again:\n{}", lines.join("\n"));
            return Ok(CallToolResult::error(vec![ContentBlock::text(text)]));
        }
        let outcome = tools::call(inner.kind, name, &arguments, &inner.ctx).expect("every declared tool has a behaviour");
        Ok(match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.0)]),
        })
    }
}

impl ServerHandler for AtlasServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new(self.inner.id.clone(), env!("CARGO_PKG_VERSION")).with_title(self.inner.title.clone()),
            )
            .with_instructions(format!(
                "{}: synthetic {} data for demonstrations and tests. Writes go to a local sandbox only.",
                self.inner.title,
                if self.inner.kind == ServerKind::Support { "support-desk" } else { "field-service" }
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(PROTOCOL_VERSIONS.iter().filter(|v| !self.legacy || v.has_initialize()).cloned().collect())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let this = self.clone();
        // File appends fsync: keep them off the async workers.
        tokio::task::spawn_blocking(move || match this.inner.kind {
            ServerKind::Notices => this.notice(request),
            _ => this.run(&request.name, request.arguments).map(Into::into),
        })
        .await
        .map_err(|e| McpError::internal_error(format!("tool task failed: {e}"), None))?
    }
}

impl AtlasServer {
    /// `send_notice`, with the fault switch (see `tools::notices`).
    pub fn notice(&self, request: CallToolRequestParams) -> Result<CallToolResponse, McpError> {
        use tools::notices::{self, Fault};
        let ctx = &self.inner.ctx;
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let valid = self.inner.validators.get(request.name.as_ref()).is_some_and(|v| v.violations(&arguments).is_empty());
        if !valid {
            return self.run(&request.name, request.arguments).map(Into::into);
        }
        // The answer to a confirmation round this server asked for.
        let confirmed = request.request_state.as_deref().is_some_and(|s| s.starts_with("confirm:"))
            && request.input_responses.as_ref().and_then(|r| r.get("confirm")).is_some_and(|c| c["action"] == "accept");
        let fault = if confirmed { None } else { notices::take_fault(ctx) };
        let recorded = notices::record_call(&arguments, ctx, fault);
        if let Err(e) = recorded {
            return Ok(CallToolResult::error(vec![ContentBlock::text(e.0)]).into());
        }
        match fault {
            Some(Fault::ToolError) => Ok(CallToolResult::error(vec![ContentBlock::text(
                "the notice relay refused the message (a simulated relay fault); nothing was sent",
            )])
            .into()),
            Some(Fault::Transport) => {
                // Sent, and then the process dies before answering.
                let _ = notices::send_notice(&arguments, ctx);
                tracing::error!("simulated transport fault: exiting mid-call");
                std::process::exit(70);
            }
            Some(Fault::InputRequired) => {
                let ask = serde_json::json!({"confirm": {"method": "elicitation/create", "params": {
                    "message": format!("Send this notice to {}?", arguments["to"].as_str().unwrap_or("?")),
                    "requestedSchema": {"type": "object", "properties": {}}
                }}});
                let requests = serde_json::from_value(ask).map_err(|e| McpError::internal_error(e.to_string(), None))?;
                Ok(InputRequiredResult::new(Some(requests), Some(format!("confirm:{}", tools::now_rfc3339()))).into())
            }
            None => self.run(&request.name, request.arguments).map(Into::into),
        }
    }
}
