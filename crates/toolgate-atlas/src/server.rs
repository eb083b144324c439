//! One Atlas MCP server: its declared contracts, argument validation against
//! them, and dispatch to the tool's behaviour. Transport-agnostic: the same
//! handler serves stdio and Streamable HTTP, both protocol eras. With an
//! identity verifier, a call runs only for the person toolgate asserts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use crate::ServerKind;
use crate::contracts::{self, ArgumentValidator};
use crate::identity::{self, Asserted, Verifier};
use crate::tools::{self, Context};

/// The revisions Atlas speaks: the stateless core and the legacy handshake.
pub const PROTOCOL_VERSIONS: [ProtocolVersion; 2] =
    [ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25];

#[derive(Clone)]
pub struct AtlasServer {
    inner: Arc<Inner>,
    /// Speaks the legacy handshake only (`--legacy`).
    legacy: bool,
    /// Requires toolgate's identity assertion on every call (`--identity-jwks`).
    identity: Option<Arc<Verifier>>,
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
                let v = ArgumentValidator::new(&schema)
                    .expect("embedded input schemas compile (checked by tests)");
                (t.name.to_string(), v)
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                kind,
                id: contract.id,
                title: contract.title,
                tools,
                validators,
                ctx,
            }),
            legacy: false,
            identity: None,
        }
    }

    /// The same server, running a call only when it carries toolgate's
    /// assertion of who asked, verified by `verifier`.
    pub fn with_identity(mut self, verifier: Verifier) -> Self {
        self.identity = Some(Arc::new(verifier));
        self
    }

    pub fn identity(&self) -> Option<&Verifier> {
        self.identity.as_deref()
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
    pub fn run(
        &self,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
    ) -> Result<CallToolResult, McpError> {
        self.run_as(name, arguments, None)
    }

    /// [`run`](Self::run) for `who`, the person a verified assertion names:
    /// what the call writes records them.
    pub fn run_as(
        &self,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        who: Option<&Asserted>,
    ) -> Result<CallToolResult, McpError> {
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
            let lines: Vec<String> =
                violations.iter().map(|v| format!("{}: {}", v.path, v.message)).collect();
            let text = format!(
                "invalid arguments for {name}; correct and call again:\n{}",
                lines.join("\n")
            );
            return Ok(CallToolResult::error(vec![ContentBlock::text(text)]));
        }
        let outcome = tools::call(inner.kind, name, &arguments, &inner.ctx, who)
            .expect("every declared tool has a behaviour");
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
        Cow::Owned(
            PROTOCOL_VERSIONS
                .iter()
                .filter(|v| !self.legacy || v.has_initialize())
                .cloned()
                .collect(),
        )
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
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let who = match &self.identity {
            None => None,
            Some(verifier) => match verifier.verify(assertion(&request, &context)).await {
                Ok(who) => Some(who),
                Err(refused) => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(refused.0)]).into());
                }
            },
        };
        let this = self.clone();
        // File appends fsync: keep them off the async workers.
        tokio::task::spawn_blocking(move || match this.inner.kind {
            ServerKind::Notices => this.notice(request),
            _ => this.run_as(&request.name, request.arguments, who.as_ref()).map(Into::into),
        })
        .await
        .map_err(|e| McpError::internal_error(format!("tool task failed: {e}"), None))?
    }
}

/// The assertion a call carries: the HTTP header (how toolgate sends it to
/// an HTTP upstream), else the request's `_meta` (stdio). rmcp hands the
/// request's `_meta` to the handler either in the params or in the
/// context, so both are read.
fn assertion<'a>(
    request: &'a CallToolRequestParams,
    context: &'a RequestContext<RoleServer>,
) -> Option<&'a str> {
    let header = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get(identity::HEADER))
        .and_then(|v| v.to_str().ok());
    let meta = request
        .meta
        .as_ref()
        .and_then(|m| m.get(identity::META_KEY))
        .or_else(|| context.meta.get(identity::META_KEY));
    header.or_else(|| meta.and_then(Value::as_str))
}

impl AtlasServer {
    /// `send_notice`, with the fault switch (see `tools::notices`).
    pub fn notice(&self, request: CallToolRequestParams) -> Result<CallToolResponse, McpError> {
        use tools::notices::{self, Fault};
        let ctx = &self.inner.ctx;
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let valid = self
            .inner
            .validators
            .get(request.name.as_ref())
            .is_some_and(|v| v.violations(&arguments).is_empty());
        if !valid {
            return self.run(&request.name, request.arguments).map(Into::into);
        }
        // The answer to a confirmation round this server asked for.
        let confirmed = request.request_state.as_deref().is_some_and(|s| s.starts_with("confirm:"))
            && request
                .input_responses
                .as_ref()
                .and_then(|r| r.get("confirm"))
                .is_some_and(|c| c["action"] == "accept");
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
                let requests = serde_json::from_value(ask)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                Ok(InputRequiredResult::new(
                    Some(requests),
                    Some(format!("confirm:{}", tools::now_rfc3339())),
                )
                .into())
            }
            None => self.run(&request.name, request.arguments).map(Into::into),
        }
    }
}
