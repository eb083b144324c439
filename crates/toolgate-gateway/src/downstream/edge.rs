//! The HTTP edge's rules as axum extractors, each one concern, run in the
//! order a handler lists them (and only for the methods it serves):
//!
//! - [`Admitted`] — `Host` (DNS rebinding), `Origin` (browsers), then the
//!   caller's bearer credentials → the trusted `Caller`.
//! - [`Approver`] — `Admitted`, with the `approver` role (the admin API).
//! - [`JsonRpcMedia`] — `Content-Type` and `Accept` of an MCP POST.
//! - [`McpMessage`] — the body, bounded while it is read, parsed strictly;
//!   the protocol version and the routing headers checked against it.
//!
//! A rejection is the response the transport rules prescribe (403, 401,
//! 415, 406, 413, 400 with a JSON-RPC error), so a handler sees only
//! requests that passed.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_core::Caller;
use toolgate_core::strict_json::{self, JsonError};

use super::{Inbound, Peer, check_modern_meta, inbound, unsupported_version};
use crate::callers::AuthError;
use crate::config::APPROVER_ROLE;
use crate::gateway::Gateway;
use crate::oauth::TokenError;
use toolgate_mcp::wire::{self, Era, Id, MODERN, RpcError, SUPPORTED_VERSIONS, code};

/// A plain-text response: how the edge's rules refuse a request.
pub fn plain(status: StatusCode, text: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text.to_string())
        .into_response()
}

/// A JSON-RPC error response with an HTTP status.
pub(crate) fn rpc_error(status: StatusCode, id: Option<&Id>, error: RpcError) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], wire::error_response(id, &error))
        .into_response()
}

/// Header `name` of a request, when it is present and visible ASCII.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
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
    !host.is_empty()
        && allowed
            .iter()
            .any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(host_name(host)))
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

/// `Host` against the allow-list (DNS rebinding) and `Origin`, when a
/// browser sends one: the first rule of every route but the probes. The
/// refusal is a 403 that names the setting to change.
pub fn host_and_origin(gw: &Gateway, headers: &HeaderMap) -> Result<(), Response> {
    let settings = &gw.config().gateway;
    let host = header_str(headers, "host").unwrap_or_default();
    if !host_allowed(&settings.allowed_hosts, host) {
        return Err(plain(
            StatusCode::FORBIDDEN,
            "Host not allowed (DNS-rebinding protection); add it to gateway.allowed_hosts",
        ));
    }
    if let Some(origin) = header_str(headers, "origin")
        && !origin_allowed(&settings.allowed_origins, &settings.allowed_hosts, origin)
    {
        return Err(plain(
            StatusCode::FORBIDDEN,
            "Origin not allowed; add it to gateway.allowed_origins",
        ));
    }
    Ok(())
}

/// A request that passed `Host`, `Origin` and authentication: its caller.
pub struct Admitted(pub Arc<Caller>);

impl FromRequestParts<Arc<Gateway>> for Admitted {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, gw: &Arc<Gateway>) -> Result<Self, Response> {
        let headers = &parts.headers;
        host_and_origin(gw, headers)?;
        let authorization = header_str(headers, "authorization");
        let error = match gw.callers.authenticate(authorization) {
            Ok(caller) => return Ok(Admitted(caller)),
            Err(e) => e,
        };
        let Some(oauth) = &gw.oauth else {
            let mut r = plain(StatusCode::UNAUTHORIZED, error.message());
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                "Bearer realm=\"toolgate\"".parse().expect("static header"),
            );
            return Err(r);
        };
        // Not a `[callers]` token: an OAuth access token, or nothing.
        let bearer = authorization
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        let failed = match (error, bearer) {
            (AuthError::Unknown, Some(token)) => match oauth.authenticate(token).await {
                Ok(caller) => return Ok(Admitted(caller)),
                Err(e) => Some(e),
            },
            _ => None,
        };
        let (status, text) = match &failed {
            None => (
                StatusCode::UNAUTHORIZED,
                "authentication required: send `Authorization: Bearer TOKEN`, an access token from \
                    the authorization server the resource metadata names",
            ),
            Some(TokenError::Invalid(why)) => (StatusCode::UNAUTHORIZED, why.as_str()),
            Some(TokenError::InsufficientScope(why)) => (StatusCode::FORBIDDEN, why.as_str()),
            Some(TokenError::Unavailable(why)) => (StatusCode::SERVICE_UNAVAILABLE, why.as_str()),
        };
        let mut r = plain(status, text);
        if status != StatusCode::SERVICE_UNAVAILABLE {
            let challenge = oauth.challenge(failed.as_ref());
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                challenge.parse().unwrap_or_else(|_| "Bearer".parse().expect("static header")),
            );
        }
        Err(r)
    }
}

/// An admitted caller with the `approver` role; agents' tokens get 403.
pub struct Approver(pub Arc<Caller>);

impl FromRequestParts<Arc<Gateway>> for Approver {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, gw: &Arc<Gateway>) -> Result<Self, Response> {
        let Admitted(caller) = Admitted::from_request_parts(parts, gw).await?;
        if !caller.has_role(APPROVER_ROLE) {
            return Err(plain(
                StatusCode::FORBIDDEN,
                "the approver role is required; agent tokens cannot see or decide approvals",
            ));
        }
        Ok(Approver(caller))
    }
}

/// An MCP POST that sends JSON and accepts both JSON and an event stream.
pub struct JsonRpcMedia;

impl<S: Send + Sync> FromRequestParts<S> for JsonRpcMedia {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let content_type = header_str(&parts.headers, "content-type").unwrap_or_default();
        if !content_type.trim().to_ascii_lowercase().starts_with("application/json") {
            return Err(plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json",
            ));
        }
        let accept = header_str(&parts.headers, "accept").unwrap_or_default().to_ascii_lowercase();
        if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
            return Err(plain(
                StatusCode::NOT_ACCEPTABLE,
                "Accept must list application/json and text/event-stream",
            ));
        }
        Ok(JsonRpcMedia)
    }
}

/// Where the request came from, for its span.
impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let address =
            parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string());
        // Streamable HTTP here is stateless: no session is issued.
        Ok(Peer { transport: "tcp", address, session: None, inbound_token: None })
    }
}

/// One JSON-RPC message: read within `gateway.max_body_bytes`, parsed
/// strictly, in the era its `MCP-Protocol-Version` names, with the routing
/// headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) agreeing with the body.
pub struct McpMessage {
    /// The message.
    pub msg: Inbound,
    /// The era its headers name.
    pub era: Era,
}

impl FromRequest<Arc<Gateway>> for McpMessage {
    type Rejection = Response;

    async fn from_request(request: Request, gw: &Arc<Gateway>) -> Result<Self, Response> {
        let max = gw.config().gateway.max_body_bytes;
        let (parts, body) = request.into_parts();
        let too_large = |message: String| {
            rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                RpcError::new(code::INVALID_REQUEST, message),
            )
        };
        let body = axum::body::to_bytes(body, max)
            .await
            .map_err(|_| too_large(format!("the body exceeds {max} bytes")))?;
        let value = match strict_json::parse(&body, gw.limits) {
            Ok(v) => v,
            Err(JsonError::TooLarge { .. }) => {
                return Err(too_large("the body is too large".into()));
            }
            Err(e @ JsonError::Syntax(_)) => {
                return Err(rpc_error(
                    StatusCode::BAD_REQUEST,
                    None,
                    RpcError::new(code::PARSE_ERROR, e.to_string()),
                ));
            }
            Err(e) => {
                return Err(rpc_error(
                    StatusCode::BAD_REQUEST,
                    None,
                    RpcError::new(code::INVALID_REQUEST, e.to_string()),
                ));
            }
        };
        let msg =
            inbound(value).map_err(|(id, e)| rpc_error(StatusCode::BAD_REQUEST, id.as_ref(), e))?;
        let bad = |e: RpcError| rpc_error(StatusCode::BAD_REQUEST, msg.id.as_ref(), e);
        let era = version(&parts.headers, &msg).map_err(bad)?;
        param_headers(gw, &parts.headers, &msg, era).map_err(bad)?;
        Ok(McpMessage { msg, era })
    }
}

/// The era of this request, from `MCP-Protocol-Version`, with the routing
/// headers checked against the body.
fn version(headers: &HeaderMap, msg: &Inbound) -> Result<Era, RpcError> {
    let mismatch =
        |what: &str| RpcError::new(code::HEADER_MISMATCH, format!("header/body mismatch: {what}"));
    match header_str(headers, "mcp-protocol-version") {
        Some(MODERN) => {
            let method = header_str(headers, "mcp-method")
                .ok_or_else(|| mismatch("Mcp-Method header is missing"))?;
            if method != msg.method {
                return Err(mismatch(&format!(
                    "Mcp-Method is `{method}` but the body's method is `{}`",
                    msg.method
                )));
            }
            if let Some(field) = wire::named_by(&msg.method) {
                let body_name = msg.params.get(field).and_then(Value::as_str).unwrap_or_default();
                // Decoded as strictly as `Mcp-Param-*` (a client sends a name
                // beyond printable ASCII as `=?base64?…?=`), then compared
                // exactly: no normalisation, so a confusable stays another name.
                let Some(header) = header_str(headers, "mcp-name") else {
                    return Err(mismatch(&format!(
                        "Mcp-Name header is missing for {}",
                        msg.method
                    )));
                };
                match toolgate_mcp::param_headers::decode(header) {
                    Ok(name) if name == body_name => {}
                    Ok(name) => {
                        return Err(mismatch(&format!(
                            "Mcp-Name is `{name}` but params.{field} is `{body_name}`"
                        )));
                    }
                    Err(why) => {
                        return Err(mismatch(&format!(
                            "Mcp-Name `{header}` is not a valid value ({why})"
                        )));
                    }
                }
            }
            let meta_version = msg
                .params
                .get("_meta")
                .and_then(|m| m.get(wire::META_PROTOCOL_VERSION))
                .and_then(Value::as_str);
            if let Some(v) = meta_version.filter(|v| *v != MODERN) {
                return Err(mismatch(&format!(
                    "MCP-Protocol-Version is `{MODERN}` but _meta says `{v}`"
                )));
            }
            if msg.id.is_some() {
                check_modern_meta(&msg.params)?;
            }
            Ok(Era::Modern)
        }
        Some(v) if SUPPORTED_VERSIONS.contains(&v) => Ok(Era::Legacy),
        Some(other) => Err(unsupported_version(other)),
        // The legacy handshake comes before any version is agreed.
        None if matches!(msg.method.as_str(), "initialize" | "notifications/initialized") => {
            Ok(Era::Legacy)
        }
        None => {
            Err(RpcError::new(code::INVALID_REQUEST, "the MCP-Protocol-Version header is required")
                .with_data(json!({"supported": SUPPORTED_VERSIONS})))
        }
    }
}

/// `Mcp-Param-*` headers must agree with the arguments they mirror (only a
/// listed tool's schema can say which those are).
fn param_headers(
    gw: &Gateway,
    headers: &HeaderMap,
    msg: &Inbound,
    era: Era,
) -> Result<(), RpcError> {
    if era != Era::Modern || msg.method != "tools/call" {
        return Ok(());
    }
    let Some(name) = msg.params.get("name").and_then(Value::as_str) else { return Ok(()) };
    let catalog = gw.catalogs.current();
    let Some(tool) = catalog.tools.get(name) else { return Ok(()) };
    let schema = tool.tool.definition.get("inputSchema").unwrap_or(&Value::Null);
    let arguments = msg.params.get("arguments").unwrap_or(&Value::Null);
    toolgate_mcp::param_headers::check(schema, arguments, |h| {
        header_str(headers, h).map(str::to_string)
    })
    .map_err(|why| RpcError::new(code::HEADER_MISMATCH, format!("header/body mismatch: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_matching() {
        let allowed = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "[::1]".to_string(),
            "gw.example:8443".to_string(),
        ];
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
