//! The downstream edge: agents' MCP requests, routed by method. Both
//! transports (Streamable HTTP, stdio) parse and admit a message their own
//! way, then hand it here.

pub(crate) mod admin;
mod content;
pub(crate) mod edge;
pub mod http;
pub(crate) mod listen;
mod log_tiles;
pub(crate) mod probes;
pub mod stdio;
pub(crate) mod subscribe;
pub mod tls;
pub(crate) mod well_known;

use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Value, json};

use std::sync::Arc;

use crate::gateway::Gateway;
use crate::telemetry::{self, INSTRUMENTS};
use opentelemetry::KeyValue;
use tokio::sync::mpsc::UnboundedSender;
use toolgate_core::Caller;
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::pipeline::{self, Answer, Call, CallRequest};
use toolgate_core::answer::{AnswerReceipt, RECEIPT_META};
use toolgate_mcp::upstream::{Kind, ProgressRelay};
use toolgate_mcp::wire::{
    self, Era, Id, LEGACY, MODERN, RawObject, RpcError, SUPPORTED_VERSIONS, code,
};

/// One request or notification, already parsed strictly.
pub(crate) struct Inbound {
    pub(crate) id: Option<Id>,
    pub(crate) method: String,
    pub(crate) params: Value,
}

pub(crate) enum Reply {
    /// A JSON-RPC response body.
    Json(String),
    /// A JSON-RPC error for a method this gateway does not serve (HTTP 404).
    NotFound(String),
    /// A JSON-RPC error the transport reports as HTTP 400 (`code::bad_request`).
    BadRequest(String),
    /// A notification: nothing to answer (HTTP 202).
    Accepted,
}

/// Reads a JSON-RPC message out of a strictly parsed value.
pub(crate) fn inbound(message: Value) -> Result<Inbound, (Option<Id>, RpcError)> {
    let Value::Object(mut map) = message else {
        return Err((
            None,
            RpcError::new(
                code::INVALID_REQUEST,
                "expected one JSON-RPC message object (batches are not supported)",
            ),
        ));
    };
    let id = match map.remove("id") {
        None => None,
        Some(v) => Some(serde_json::from_value::<Id>(v).map_err(|_| {
            (None, RpcError::new(code::INVALID_REQUEST, "id must be a string or an integer"))
        })?),
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::new(code::INVALID_REQUEST, "jsonrpc must be \"2.0\"")));
    }
    let Some(Value::String(method)) = map.remove("method") else {
        return Err((
            id,
            RpcError::new(
                code::INVALID_REQUEST,
                "a request needs a string `method` (responses are not accepted here)",
            ),
        ));
    };
    let params = map.remove("params").unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return Err((id, RpcError::new(code::INVALID_REQUEST, "params must be an object")));
    }
    Ok(Inbound { id, method, params })
}

/// 2026-07-28 requests carry their context in `_meta` (the protocol version
/// and the client's capabilities; `clientInfo` is optional); notifications
/// and legacy requests do not.
pub(crate) fn check_modern_meta(params: &Value) -> Result<(), RpcError> {
    let meta = params.get("_meta");
    let missing: Vec<&str> = [wire::META_PROTOCOL_VERSION, wire::META_CLIENT_CAPABILITIES]
        .into_iter()
        .filter(|k| meta.and_then(|m| m.get(*k)).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("params._meta is missing {}", missing.join(", ")),
        )
        .with_data(json!({"missing": missing})));
    }
    let requested = meta.and_then(|m| m[wire::META_PROTOCOL_VERSION].as_str()).unwrap_or_default();
    if requested != MODERN {
        return Err(unsupported_version(requested));
    }
    Ok(())
}

pub(crate) fn unsupported_version(requested: &str) -> RpcError {
    RpcError::new(
        code::UNSUPPORTED_PROTOCOL_VERSION,
        format!("protocol version `{requested}` is not supported"),
    )
    .with_data(json!({"supported": SUPPORTED_VERSIONS, "requested": requested}))
}

fn server_info() -> Value {
    json!({"name": "toolgate", "title": "toolgate MCP gateway", "version": env!("CARGO_PKG_VERSION")})
}

const INSTRUCTIONS: &str = "toolgate fronts several MCP servers. Tools and prompts are named \
    SERVER__NAME; resources are toolgate://SERVER/URI. A refused call returns isError with \
    structuredContent {decision, reason, action, proposal_sha256}: follow `action` (correct, \
    retry, reconcile, escalate, refused). A call that needs a named human's approval answers \
    input_required: re-issue it with the requestState once an approver has decided.";

/// Where a request came from, for its span.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// `network.transport`: `tcp` (Streamable HTTP) or `pipe` (stdio).
    pub(crate) transport: &'static str,
    pub(crate) address: Option<String>,
    /// The MCP session the request belongs to, where the transport has one
    /// (stdio: the connection): a call's run when it names none.
    pub(crate) session: Option<Arc<str>>,
    /// The caller's own OAuth access token, when it was admitted by one
    /// (`[oauth]`), not by a `[callers]` token.
    pub(crate) inbound_token: Option<Arc<str>>,
}

/// The SERVER span of one request, a child of the trace it carries. Field
/// values are only computed when the span is recorded at all.
fn request_span(msg: &Inbound, era: Era, id: &Id, peer: &Peer) -> tracing::Span {
    let tool = (msg.method == "tools/call")
        .then(|| msg.params.get("name").and_then(Value::as_str))
        .flatten();
    let span = tracing::info_span!(target: telemetry::TARGET, "mcp.server",
        otel.name = %tool.map_or_else(|| msg.method.clone(), |t| format!("{} {t}", msg.method)), otel.kind = "server", otel.status_code = Empty,
        mcp.method.name = %msg.method, mcp.protocol.version = if era == Era::Modern { MODERN } else { LEGACY },
        jsonrpc.request.id = %match id { Id::Number(n) => n.to_string(), Id::String(s) => s.clone() },
        network.transport = peer.transport, client.address = peer.address.as_deref(),
        gen_ai.operation.name = Empty, gen_ai.tool.name = tool, gen_ai.tool.call.id = Empty, gen_ai.tool.description = Empty,
        gen_ai.tool.type = Empty, gen_ai.provider.name = Empty, gen_ai.system = Empty, error.type = Empty,
        guardrail.name = Empty, guardrail.decision = Empty, toolgate.proposal_sha256 = Empty,
        toolgate.authority.registry_class = Empty, toolgate.authority.implied_class = Empty, toolgate.policy_version = Empty,
        toolgate.decision.reason = Empty, toolgate.decision.rules = Empty, toolgate.budget = Empty, toolgate.approval.id = Empty, toolgate.operation.id = Empty, toolgate.receipt.index = Empty,
        gen_ai.tool.call.arguments = Empty, gen_ai.tool.call.result = Empty);
    if !span.is_disabled() {
        telemetry::adopt_parent(&span, &telemetry::trace_context(&msg.params));
    }
    span
}

/// `notify` carries messages to the client before the answer (progress), when
/// the transport can: stdio always, HTTP when the answer is an SSE stream.
pub(crate) async fn handle(
    gw: &Arc<Gateway>,
    msg: Inbound,
    era: Era,
    caller: Arc<Caller>,
    peer: &Peer,
    notify: Option<UnboundedSender<String>>,
) -> Reply {
    let Some(id) = msg.id.clone() else {
        // Notifications (initialized, cancelled, …) need no answer; a
        // cancellation ends the call it names, if it is this caller's own
        // (in this session, where there is one).
        if msg.method == "notifications/cancelled"
            && let Some(request) = msg.params.get("requestId")
        {
            let ended = gw.cancels.cancel(peer.session.as_ref(), &caller.name, request);
            tracing::debug!(target: "toolgate::cancel", ended, "notifications/cancelled");
        }
        return Reply::Accepted;
    };
    let span = request_span(&msg, era, &id, peer);
    let started = std::time::Instant::now();
    let labels = telemetry::metrics_on().then(|| {
        let tool = (msg.method == "tools/call")
            .then(|| msg.params.get("name").and_then(Value::as_str).map(str::to_string))
            .flatten();
        (msg.method.clone(), tool)
    });
    let (reply, error_type) =
        respond(gw, msg, era, caller, notify, id, peer).instrument(span.clone()).await;
    if let Some(e) = &error_type {
        span.record("error.type", e.as_str());
        span.record("otel.status_code", "ERROR");
    }
    if let Some((method, tool)) = labels {
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method),
            KeyValue::new("mcp.protocol.version", if era == Era::Modern { MODERN } else { LEGACY }),
        ];
        attributes.extend(tool.map(|t| KeyValue::new("gen_ai.tool.name", t)));
        attributes.extend(error_type.map(|e| KeyValue::new("error.type", e)));
        INSTRUMENTS.server_duration.record(started.elapsed().as_secs_f64(), &attributes);
    }
    reply
}

/// The answer, and its `error.type` if it failed: the JSON-RPC code, or
/// `tool_error` for an `isError` result (refusals included).
async fn respond(
    gw: &Arc<Gateway>,
    mut msg: Inbound,
    era: Era,
    caller: Arc<Caller>,
    notify: Option<UnboundedSender<String>>,
    id: Id,
    peer: &Peer,
) -> (Reply, Option<String>) {
    let result = match msg.method.as_str() {
        "server/discover" => Ok(value_object(json!({
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": CAPABILITIES.clone(),
            "instructions": INSTRUCTIONS,
            "ttlMs": gw.config().gateway.list_ttl_ms,
            "cacheScope": "public",
            "_meta": {wire::META_SERVER_INFO: server_info()}
        }))),
        // 2026-07-28 removed the handshake and ping: not found, as for any
        // method the revision does not have.
        "initialize" | "ping" if era == Era::Modern => {
            let e = RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("`{}` does not exist in protocol 2026-07-28", msg.method),
            );
            return (
                Reply::NotFound(wire::error_response(Some(&id), &e)),
                Some(e.code.to_string()),
            );
        }
        "initialize" => Ok(value_object(json!({
            "protocolVersion": LEGACY,
            "capabilities": CAPABILITIES.clone(),
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS
        }))),
        "ping" => Ok(RawObject::new()),
        "tools/list" => list(gw, &msg.params, era, Kind::Tool),
        "prompts/list" => list(gw, &msg.params, era, Kind::Prompt),
        "resources/list" => list(gw, &msg.params, era, Kind::Resource),
        "resources/templates/list" => list(gw, &msg.params, era, Kind::Template),
        "tools/call" => call(gw, &mut msg, era, caller, notify, peer, Kind::Tool).await,
        "prompts/get" => call(gw, &mut msg, era, caller, notify, peer, Kind::Prompt).await,
        "resources/read" => call(gw, &mut msg, era, caller, notify, peer, Kind::Resource).await,
        "completion/complete" => content::complete(gw, &msg.params).await,
        other => {
            let e = RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("method `{other}` is not supported by this gateway"),
            );
            let body = wire::error_response(Some(&id), &e);
            // Over legacy Streamable HTTP a 404 means "session gone": only 2026-07-28 gets it.
            let reply = if era == Era::Modern { Reply::NotFound(body) } else { Reply::Json(body) };
            return (reply, Some(e.code.to_string()));
        }
    };
    let read = msg.method == "resources/read";
    match result {
        Ok(mut obj) => {
            if era == Era::Modern && !obj.contains_key("resultType") {
                obj.insert("resultType".into(), raw(&json!("complete")));
            }
            // A 2026-07-28 read carries how long it may be kept (a stock
            // TypeScript client refuses one without): a 2025-11-25 upstream
            // says nothing, so the most careful answer, kept by nobody.
            if era == Era::Modern && read {
                obj.entry("ttlMs".to_string()).or_insert_with(|| raw(&0));
                obj.entry("cacheScope".to_string()).or_insert_with(|| raw("private"));
            }
            let failed = obj
                .get("isError")
                .is_some_and(|v| v.get() == "true")
                .then(|| "tool_error".to_string());
            (Reply::Json(wire::response_raw(Some(&id), &obj, wire::raw_object_len(&obj))), failed)
        }
        // 2026-07-28 answers these with 400; before it, a JSON-RPC error to a
        // request that was read travels as any answer does.
        Err(e) if era == Era::Modern && code::bad_request(e.code) => {
            (Reply::BadRequest(wire::error_response(Some(&id), &e)), Some(e.code.to_string()))
        }
        Err(e) => (Reply::Json(wire::error_response(Some(&id), &e)), Some(e.code.to_string())),
    }
}

/// What toolgate offers downstream: what its upstreams offer, aggregated.
static CAPABILITIES: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true}, "resources": {"listChanged": true, "subscribe": true}, "completions": {}}),
);

fn raw<T: serde::Serialize + ?Sized>(v: &T) -> Box<RawValue> {
    to_raw_value(v).expect("serialisable")
}

fn value_object(v: Value) -> RawObject {
    match v {
        Value::Object(map) => map.into_iter().map(|(k, v)| (k, raw(&v))).collect(),
        _ => RawObject::new(),
    }
}

/// `_meta` key of the caller's own deadline for a call (ms; it may only lower the server's).
pub const DEADLINE_META: &str = "io.toolgate/deadlineMs";

/// How long a client may keep a list (`ttlMs`): the configured time, but
/// while any upstream is down the list lacks its items, so at most about
/// the time a reconnect takes — a client asks again soon after the server
/// is back, rather than keep the short list for the whole TTL.
fn list_ttl_ms(configured: u64, any_down: bool) -> u64 {
    if any_down { configured.min(DOWN_LIST_TTL_MS) } else { configured }
}

/// `ttlMs` while an upstream is down: about one reconnect attempt.
const DOWN_LIST_TTL_MS: u64 = 1_000;

/// toolgate's own keys a request's `_meta` may carry.
const REQUEST_META: [&str; 4] = [
    crate::stages::reserve::KEY_META,
    crate::pipeline::PREVIEW_META,
    DEADLINE_META,
    crate::runs::RUN_META,
];

/// Whether the call asks for a preview (`_meta["io.toolgate/preview"]`).
/// A caller who asked for one must never get an effect, so anything but
/// `true` or `false` there is refused, and so is any other `io.toolgate/`
/// key than ours: a misspelt `preview` would otherwise run the call.
fn preview_asked(params: &Value) -> Result<bool, RpcError> {
    let Some(Value::Object(meta)) = params.get("_meta") else { return Ok(false) };
    if let Some(unknown) =
        meta.keys().find(|k| k.starts_with("io.toolgate/") && !REQUEST_META.contains(&k.as_str()))
    {
        let unknown = toolgate_core::pointer::tame(unknown, toolgate_core::pointer::MAX_KEY_CHARS);
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "_meta[\"{unknown}\"] is not a key toolgate reads; a request may carry {}; nothing was run",
                REQUEST_META.join(", ")
            ),
        ));
    }
    match meta.get(crate::pipeline::PREVIEW_META) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RpcError::new(
            code::INVALID_PARAMS,
            "_meta[\"io.toolgate/preview\"] must be true or false; nothing was run",
        )),
    }
}

/// The client's `_meta.progressToken`, when it asked for progress.
pub(crate) fn progress_token(params: &Value) -> Option<Value> {
    params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_number())
        .cloned()
}

/// Listable tools (or prompts, resources, templates), in exposed-name
/// order, one page from `cursor` on. A definition is forwarded as the
/// upstream sent it, under its exposed name (or URI).
fn list(gw: &Gateway, params: &Value, era: Era, kind: Kind) -> Result<RawObject, RpcError> {
    let catalog = gw.catalogs.current();
    let after = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.strip_prefix("after:").ok_or_else(|| {
            RpcError::new(code::INVALID_PARAMS, "invalid cursor; start again without one")
        })?),
        Some(_) => return Err(RpcError::new(code::INVALID_PARAMS, "cursor must be a string")),
    };
    let (_, key, field) = kind.list();
    let items: Box<dyn Iterator<Item = &Arc<crate::catalog::ExposedTool>>> = match kind {
        Kind::Template => Box::new(catalog.templates.values().map(|(_, t)| t)),
        Kind::Tool => Box::new(catalog.tools.values()),
        Kind::Prompt => Box::new(catalog.prompts.values()),
        Kind::Resource => Box::new(catalog.resources.values()),
    };
    let page_size = gw.config().gateway.list_page_size;
    let listable = items
        .filter(|t| t.listable())
        .filter(|t| after.is_none_or(|a| t.exposed_name.as_str() > a));
    let mut listed = Vec::new();
    let mut last = None;
    let mut more = false;
    for item in listable {
        if listed.len() == page_size {
            more = true;
            break;
        }
        let mut definition: RawObject =
            serde_json::from_str(item.tool.raw.get()).unwrap_or_default();
        definition.insert(field.into(), raw(&item.exposed_name));
        listed.push(raw(&definition));
        last = Some(item.exposed_name.clone());
    }
    let mut out = RawObject::new();
    out.insert(key.into(), raw(&listed));
    if let (true, Some(last)) = (more, last) {
        out.insert("nextCursor".into(), raw(&format!("after:{last}")));
    }
    if era == Era::Modern {
        out.insert(
            "ttlMs".into(),
            raw(&list_ttl_ms(gw.config().gateway.list_ttl_ms, !catalog.down.is_empty())),
        );
        // Discovery follows authority, which will depend on the caller.
        out.insert("cacheScope".into(), raw("private"));
    }
    Ok(out)
}

/// `tools/call`, `prompts/get` and `resources/read`: one call through the
/// pipeline. A prompt's or resource's refusal is a JSON-RPC error (its
/// result has no `isError` to carry one), with the refusal in `data`.
#[allow(clippy::too_many_arguments)]
async fn call(
    gw: &Arc<Gateway>,
    msg: &mut Inbound,
    era: Era,
    caller: Arc<Caller>,
    notify: Option<UnboundedSender<String>>,
    peer: &Peer,
    kind: Kind,
) -> Result<RawObject, RpcError> {
    let (session, inbound_token) = (peer.session.clone(), peer.inbound_token.clone());
    let (field, what) =
        if kind == Kind::Resource { ("uri", "the resource's URI") } else { ("name", "its name") };
    // Taken, not copied: nothing reads the request's arguments after this.
    let taken = if kind == Kind::Resource {
        None
    } else {
        msg.params.get_mut("arguments").map(Value::take)
    };
    let Some(name) = msg.params.get(field).and_then(Value::as_str) else {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("{} needs params.{field}, {what}", msg.method),
        ));
    };
    let arguments = match taken {
        _ if kind == Kind::Resource => json!({"uri": name}),
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v,
        Some(_) => {
            return Err(RpcError::new(code::INVALID_PARAMS, "params.arguments must be an object"));
        }
    };
    let progress = match (progress_token(&msg.params), &notify) {
        (Some(client_token), Some(out)) => Some(ProgressRelay::new(client_token, out.clone())),
        _ => None,
    };
    // An input response is a result object (elicitation, sampling, roots):
    // anything else is refused here, before it reaches an upstream.
    match msg.params.get("inputResponses") {
        None => {}
        Some(Value::Object(responses)) if responses.values().all(Value::is_object) => {}
        Some(_) => {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "params.inputResponses must be an object mapping each input request's key to its response object",
            ));
        }
    }
    if msg.params.get("requestState").is_some_and(|s| !s.is_string()) {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "params.requestState must be the string the server gave",
        ));
    }
    let input: serde_json::Map<String, Value> = ["inputResponses", "requestState"]
        .into_iter()
        .filter_map(|k| msg.params.get(k).map(|v| (k.to_string(), v.clone())))
        .collect();
    // A legacy client's are its session's, carried here by its transport
    // (`subscribe::carry_capabilities`).
    let client_capabilities =
        msg.params.get("_meta").and_then(|m| m.get(wire::META_CLIENT_CAPABILITIES)).cloned();
    let trace = telemetry::trace_context(&msg.params);
    let operation_key =
        msg.params.get("_meta").and_then(|m| m.get(crate::stages::reserve::KEY_META)).cloned();
    let preview = preview_asked(&msg.params)?;
    let deadline_ms = msg.params.get("_meta").and_then(|m| m.get(DEADLINE_META)).cloned();
    let run = msg.params.get("_meta").and_then(|m| m.get(crate::runs::RUN_META)).cloned();
    let call = Call {
        kind,
        name: name.to_string(),
        arguments,
        progress,
        client: notify,
        input,
        operation_key,
        client_capabilities,
        preview,
        deadline_ms,
        run,
        session,
        inbound_token,
        cancelled: Default::default(),
    };
    let call = CallRequest { caller, trace, request_id: msg.id.clone(), era, call };
    // Its own task: if the caller goes away mid-call, the call still
    // finishes and is recorded.
    let gateway = gw.clone();
    let recorded = tokio::spawn(
        async move { pipeline::call_tool(&gateway, call).await }
            .instrument(tracing::Span::current()),
    )
    .await
    .map_err(|_| RpcError::new(code::INTERNAL_ERROR, "the call failed inside the gateway"))?;
    let receipt = answer_receipt(gw, &recorded);
    match recorded.answer {
        Answer::Result(mut result) => {
            if kind == Kind::Resource {
                content::expose_contents(gw, name, &mut result);
            }
            if let Some(receipt) = &receipt {
                name_receipt(&mut result, receipt);
            }
            Ok(result)
        }
        Answer::Error(e) => Err(error_with_receipt(e, receipt.as_ref())),
        Answer::Refused(refusal) if kind != Kind::Tool => {
            let code = if refusal.action == toolgate_core::Action::Correct {
                code::INVALID_PARAMS
            } else {
                code::REFUSED
            };
            Err(error_with_receipt(
                RpcError::new(code, refusal.message.clone()).with_data(json!(refusal)),
                receipt.as_ref(),
            ))
        }
        Answer::Refused(refusal) => {
            let mut result = value_object(json!({
                "content": [{"type": "text", "text": refusal.message}],
                "structuredContent": refusal,
                "isError": true
            }));
            if let Some(receipt) = &receipt {
                name_receipt(&mut result, receipt);
            }
            Ok(result)
        }
    }
}

/// What the answer says of its receipts: the log, and where they are in it.
fn answer_receipt(gw: &Gateway, recorded: &pipeline::Recorded) -> Option<AnswerReceipt> {
    let (receipt, decision) = recorded.placed.clone()?;
    Some(AnswerReceipt {
        origin: gw.config().receipts.origin.clone(),
        receipt,
        decision,
        log: gw.config().receipts.log_url.clone(),
    })
}

/// `_meta["io.toolgate/receipt"]` in a result, beside what the upstream's
/// `_meta` holds (after its receipt hashed it).
fn name_receipt(result: &mut RawObject, receipt: &AnswerReceipt) {
    // The upstream's `_meta` members kept as they came, the receipt written
    // once (its logged receipts are not parsed again).
    let mut meta: RawObject =
        result.get("_meta").and_then(|m| serde_json::from_str(m.get()).ok()).unwrap_or_default();
    meta.insert(RECEIPT_META.to_string(), receipt.to_raw());
    result.insert(
        "_meta".to_string(),
        serde_json::value::to_raw_value(&meta).expect("raw members serialize"),
    );
}

/// A JSON-RPC error answer names its receipt in `data._meta` (data that is
/// not an object is left as it is).
fn error_with_receipt(mut e: RpcError, receipt: Option<&AnswerReceipt>) -> RpcError {
    let Some(receipt) = receipt else { return e };
    match &mut e.data {
        None => e.data = Some(json!({"_meta": {RECEIPT_META: receipt.to_value()}})),
        Some(Value::Object(data)) => {
            let meta = data.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(RECEIPT_META.to_string(), receipt.to_value());
            }
        }
        Some(_) => {}
    }
    e
}
