//! The downstream Streamable HTTP edge: `POST /mcp` only, with every rule of
//! the transport checked before a message reaches the router — Host and
//! Origin (DNS rebinding, browsers), content type and Accept, body size
//! while reading, strict JSON, and the routing headers against the body.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_core::strict_json::{self, JsonError};

use super::{Inbound, Reply, check_modern_meta, handle, inbound, unsupported_version};
use crate::gateway::Gateway;
use crate::wire::{self, Era, Id, MODERN, RpcError, SUPPORTED_VERSIONS, code};

pub fn router(gw: Arc<Gateway>) -> axum::Router {
    axum::Router::new().route("/mcp", axum::routing::any(endpoint)).merge(super::admin::routes()).with_state(gw)
}

/// Binds `addr` and serves until `shutdown` resolves.
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(gw).into_make_service_with_connect_info::<SocketAddr>()).with_graceful_shutdown(shutdown).await
}

pub(super) fn plain(status: StatusCode, text: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text.to_string()).into_response()
}

fn rpc_error(status: StatusCode, id: Option<&Id>, error: RpcError) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], wire::error_response(id, &error)).into_response()
}

pub(super) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The host name of a `Host` value, without its port (IPv6 in brackets kept).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.find(']').map_or(host, |i| &host[..i + 2]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `Host` against the allow-list: an entry without a port admits any port.
fn host_allowed(allowed: &[String], host: &str) -> bool {
    !host.is_empty() && allowed.iter().any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(host_name(host)))
}

/// An `Origin` is allowed when listed, or when it is an http(s) origin on an
/// allowed host (a page served from the gateway's own host, e.g. localhost).
fn origin_allowed(allowed_origins: &[String], allowed_hosts: &[String], origin: &str) -> bool {
    if allowed_origins.iter().any(|o| o == origin) {
        return true;
    }
    let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(|a| !a.contains('/') && host_allowed(allowed_hosts, a))
}

/// The checks every HTTP request passes before anything else: `Host`
/// (DNS rebinding), `Origin` (browsers), then the caller's credentials.
pub(super) fn admit_request(gw: &Gateway, headers: &HeaderMap) -> Result<Arc<toolgate_core::Caller>, Response> {
    let settings = &gw.config.gateway;
    let host = header_str(headers, "host").unwrap_or_default();
    if !host_allowed(&settings.allowed_hosts, host) {
        return Err(plain(StatusCode::FORBIDDEN, "Host not allowed (DNS-rebinding protection); add it to gateway.allowed_hosts"));
    }
    if let Some(origin) = header_str(headers, "origin")
        && !origin_allowed(&settings.allowed_origins, &settings.allowed_hosts, origin) {
            return Err(plain(StatusCode::FORBIDDEN, "Origin not allowed; add it to gateway.allowed_origins"));
        }
    gw.callers.authenticate(header_str(headers, "authorization")).map_err(|e| {
        let mut r = plain(StatusCode::UNAUTHORIZED, e.message());
        r.headers_mut().insert(header::WWW_AUTHENTICATE, "Bearer realm=\"toolgate\"".parse().expect("static header"));
        r
    })
}

async fn endpoint(State(gw): State<Arc<Gateway>>, request: Request) -> Response {
    let settings = &gw.config.gateway;
    if request.method() != Method::POST {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "this MCP endpoint accepts POST only");
        r.headers_mut().insert(header::ALLOW, "POST".parse().expect("static header"));
        return r;
    }
    let (parts, body) = request.into_parts();
    let peer = super::Peer {
        transport: "tcp",
        address: parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string()),
    };
    let headers = parts.headers;
    let caller = match admit_request(&gw, &headers) {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let content_type = header_str(&headers, "content-type").unwrap_or_default();
    if !content_type.trim().to_ascii_lowercase().starts_with("application/json") {
        return plain(StatusCode::UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json");
    }
    let accept = header_str(&headers, "accept").unwrap_or_default().to_ascii_lowercase();
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        return plain(StatusCode::NOT_ACCEPTABLE, "Accept must list application/json and text/event-stream");
    }
    let body: Bytes = match axum::body::to_bytes(body, settings.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, None, RpcError::new(code::INVALID_REQUEST, format!("the body exceeds {} bytes", settings.max_body_bytes))),
    };
    let value = match strict_json::parse(&body, gw.limits) {
        Ok(v) => v,
        Err(JsonError::TooLarge { .. }) => return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, None, RpcError::new(code::INVALID_REQUEST, "the body is too large")),
        Err(e @ JsonError::Syntax(_)) => return rpc_error(StatusCode::BAD_REQUEST, None, RpcError::new(code::PARSE_ERROR, e.to_string())),
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, None, RpcError::new(code::INVALID_REQUEST, e.to_string())),
    };
    let msg = match inbound(value) {
        Ok(m) => m,
        Err((id, e)) => return rpc_error(StatusCode::BAD_REQUEST, id.as_ref(), e),
    };
    let era = match admit_headers(&headers, &msg) {
        Ok(era) => era,
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, msg.id.as_ref(), e),
    };
    if let Err(e) = check_param_headers(&gw, &headers, &msg, era) {
        return rpc_error(StatusCode::BAD_REQUEST, msg.id.as_ref(), e);
    }
    if msg.method == "subscriptions/listen" {
        let Some(id) = msg.id.clone().filter(|_| era == Era::Modern) else {
            return rpc_error(StatusCode::BAD_REQUEST, msg.id.as_ref(), RpcError::new(code::INVALID_REQUEST, "subscriptions/listen is a 2026-07-28 request"));
        };
        let body = Body::from_stream(super::listen::listen_stream(gw.clone(), id, &msg.params));
        return (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response();
    }
    if msg.method == "tools/call" && super::progress_token(&msg.params).is_some() {
        return progress_stream(gw, msg, era, caller, peer).await;
    }
    plain_reply(handle(&gw, msg, era, caller, &peer, None).await)
}

/// A reply as one HTTP response, with the status the transport gives it.
fn plain_reply(reply: Reply) -> Response {
    match reply {
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Json(body) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], Body::from(body)).into_response(),
        Reply::NotFound(body) => (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "application/json")], Body::from(body)).into_response(),
        Reply::BadRequest(body) => (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], Body::from(body)).into_response(),
    }
}

/// `Mcp-Param-*` headers must agree with the arguments they mirror (only a
/// listed tool's schema can say which those are).
fn check_param_headers(gw: &Gateway, headers: &HeaderMap, msg: &Inbound, era: Era) -> Result<(), RpcError> {
    if era != Era::Modern || msg.method != "tools/call" {
        return Ok(());
    }
    let Some(name) = msg.params.get("name").and_then(Value::as_str) else { return Ok(()) };
    let catalog = gw.catalogs.current();
    let Some(tool) = catalog.tools.get(name) else { return Ok(()) };
    let schema = tool.tool.definition.get("inputSchema").unwrap_or(&Value::Null);
    let arguments = msg.params.get("arguments").unwrap_or(&Value::Null);
    super::param_headers::check(schema, arguments, |h| header_str(headers, h).map(str::to_string))
        .map_err(|why| RpcError::new(code::HEADER_MISMATCH, format!("header/body mismatch: {why}")))
}

/// A call that asked for progress answers with an SSE stream — progress
/// notifications as the upstream sends them, then the result — once there
/// is progress to send. A call answered before any progress gets a plain
/// response, so an error keeps its HTTP status (a missing client
/// capability is 400, not an event inside a 200 stream).
async fn progress_stream(gw: Arc<Gateway>, msg: Inbound, era: Era, caller: Arc<toolgate_core::Caller>, peer: super::Peer) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (done_tx, mut done) = tokio::sync::oneshot::channel::<Reply>();
    tokio::spawn(async move {
        let _ = done_tx.send(handle(&gw, msg, era, caller, &peer, Some(tx)).await);
    });
    let first = tokio::select! {
        biased;
        first = rx.recv() => first,
        reply = &mut done => return plain_reply(reply.unwrap_or(Reply::Accepted)),
    };
    let Some(first) = first else {
        // The call ended without progress: its reply is on the way.
        return plain_reply(done.await.unwrap_or(Reply::Accepted));
    };
    let rest = futures_util::stream::unfold((Some(first), rx, Some(done)), |(first, mut rx, done)| async move {
        if let Some(f) = first {
            return Some((f, (None, rx, done)));
        }
        if let Some(message) = rx.recv().await {
            return Some((message, (None, rx, done)));
        }
        match done?.await {
            Ok(Reply::Json(body) | Reply::NotFound(body) | Reply::BadRequest(body)) => Some((body, (None, rx, None))),
            _ => None,
        }
    });
    let events = futures_util::StreamExt::map(rest, |message| Ok::<_, std::convert::Infallible>(format!("event: message\ndata: {message}\n\n")));
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from_stream(events)).into_response()
}

/// The era of this request, from `MCP-Protocol-Version`, with the routing
/// headers checked against the body.
fn admit_headers(headers: &HeaderMap, msg: &Inbound) -> Result<Era, RpcError> {
    let mismatch = |what: &str| RpcError::new(code::HEADER_MISMATCH, format!("header/body mismatch: {what}"));
    match header_str(headers, "mcp-protocol-version") {
        Some(MODERN) => {
            let method = header_str(headers, "mcp-method").ok_or_else(|| mismatch("Mcp-Method header is missing"))?;
            if method != msg.method {
                return Err(mismatch(&format!("Mcp-Method is `{method}` but the body's method is `{}`", msg.method)));
            }
            if msg.method == "tools/call" {
                let body_name = msg.params.get("name").and_then(Value::as_str).unwrap_or_default();
                match header_str(headers, "mcp-name") {
                    Some(name) if name.trim() == body_name => {}
                    Some(name) => return Err(mismatch(&format!("Mcp-Name is `{name}` but params.name is `{body_name}`"))),
                    None => return Err(mismatch("Mcp-Name header is missing for tools/call")),
                }
            }
            let meta_version = msg.params.get("_meta").and_then(|m| m.get(wire::META_PROTOCOL_VERSION)).and_then(Value::as_str);
            if let Some(v) = meta_version.filter(|v| *v != MODERN) {
                return Err(mismatch(&format!("MCP-Protocol-Version is `{MODERN}` but _meta says `{v}`")));
            }
            if msg.id.is_some() {
                check_modern_meta(&msg.params)?;
            }
            Ok(Era::Modern)
        }
        Some(v) if SUPPORTED_VERSIONS.contains(&v) => Ok(Era::Legacy),
        Some(other) => Err(unsupported_version(other)),
        // The legacy handshake comes before any version is agreed.
        None if matches!(msg.method.as_str(), "initialize" | "notifications/initialized") => Ok(Era::Legacy),
        None => Err(RpcError::new(code::INVALID_REQUEST, "the MCP-Protocol-Version header is required").with_data(json!({"supported": SUPPORTED_VERSIONS}))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_matching() {
        let allowed = vec!["localhost".to_string(), "127.0.0.1".to_string(), "[::1]".to_string(), "gw.example:8443".to_string()];
        assert!(host_allowed(&allowed, "localhost:8765"));
        assert!(host_allowed(&allowed, "127.0.0.1"));
        assert!(host_allowed(&allowed, "[::1]:8765"));
        assert!(host_allowed(&allowed, "gw.example:8443"));
        assert!(!host_allowed(&allowed, "gw.example:9000"));
        assert!(!host_allowed(&allowed, "evil.example"));
        assert!(!host_allowed(&allowed, ""));
    }

    #[test]
    fn origin_matching() {
        let hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let listed = vec!["https://console.example".to_string()];
        assert!(origin_allowed(&listed, &hosts, "https://console.example"));
        assert!(origin_allowed(&listed, &hosts, "http://127.0.0.1:8765"));
        assert!(origin_allowed(&[], &hosts, "http://localhost"));
        assert!(!origin_allowed(&listed, &hosts, "http://evil.example"));
        assert!(!origin_allowed(&listed, &hosts, "null"));
        assert!(!origin_allowed(&listed, &hosts, "http://127.0.0.1.evil.example"));
    }
}
