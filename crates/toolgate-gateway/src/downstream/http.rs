//! The downstream Streamable HTTP edge: `POST /mcp` (and, beside it, the
//! admin API, the probes and whatever routes the caller of `serve_with`
//! adds, such as the console). Every rule of the
//! transport is an extractor of `edge.rs`, checked before a message reaches
//! the router — Host and Origin (DNS rebinding, browsers), credentials,
//! content type and Accept, body size while reading, strict JSON, and the
//! routing headers against the body — so this file is only about answering.
//!
//! Routes served beside `/mcp` keep its rules with [`host_and_origin`] and
//! answer as it does with [`plain`] and [`store_error_status`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

pub use super::admin::store_error_status;
use super::edge::{Admitted, JsonRpcMedia, McpMessage, rpc_error};
pub use super::edge::{header_str, host_and_origin, plain};
use super::{Inbound, Peer, Reply, handle};
use crate::gateway::Gateway;
use toolgate_mcp::wire::{Era, RpcError, code};

/// The routes `serve` answers: `/mcp`, the admin API, the probes and the
/// well-known documents. Public for in-process drivers (the edge fuzz target).
pub fn router(gw: Arc<Gateway>) -> axum::Router {
    let mcp = axum::routing::post(endpoint).get(standing).delete(end_session).fallback(post_only);
    let routes = axum::Router::new()
        .route("/mcp", mcp)
        .merge(super::admin::routes())
        .merge(super::log_tiles::routes())
        .merge(super::probes::routes())
        .merge(super::well_known::routes());
    routes.with_state(gw)
}

/// Serves `/mcp` and the admin API on `listener` until `shutdown` resolves.
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(gw, listener, axum::Router::new(), shutdown).await
}

/// `serve`, with the routes of `beside` answered on the same listener (the
/// console). Their paths must not be the gateway's own.
pub async fn serve_with(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    beside: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(router(gw).merge(beside), listener, shutdown).await
}

/// `serve_with` over TLS (`[tls] cert_file`).
pub async fn serve_with_tls(
    gw: Arc<Gateway>,
    listener: super::tls::TlsListener,
    beside: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_tls(router(gw).merge(beside), listener, shutdown).await
}

/// `serve_router` over TLS.
pub async fn serve_router_tls(
    routes: axum::Router,
    listener: super::tls::TlsListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Through `tap_io` (doing nothing): axum knows a tapped listener's peer
    // address as `ConnectInfo<SocketAddr>`, as it knows a TcpListener's.
    fn untouched(_: &mut tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {}
    let listener = axum::serve::ListenerExt::tap_io(listener, untouched as fn(&mut _));
    axum::serve(listener, routes.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves `routes` on `listener` until `shutdown` resolves, with each
/// request's peer address known (as `serve` does): for routes that have an
/// address of their own, such as the console's `[console] listen`.
pub async fn serve_router(
    routes: axum::Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(no_delay(listener), routes.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await
}

/// `listener` with TCP_NODELAY on every socket it accepts: an answer (an
/// SSE event, a JSON body after its headers) goes out in several small
/// writes, which Nagle's algorithm would hold back for the peer's delayed
/// ACK — some 40 ms a call.
pub fn no_delay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    fn set(tcp: &mut tokio::net::TcpStream) {
        let _ = tcp.set_nodelay(true);
    }
    axum::serve::ListenerExt::tap_io(listener, set as fn(&mut tokio::net::TcpStream))
}

async fn post_only() -> Response {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "this MCP endpoint accepts POST only");
    r.headers_mut().insert(header::ALLOW, "GET, POST, DELETE".parse().expect("static header"));
    r
}

/// The header of a legacy session (`sessions.rs`).
const SESSION_HEADER: &str = "mcp-session-id";

/// `GET /mcp`: a legacy session's stream (list changes, updates of the
/// resources it follows), with a comment every `KEEP_ALIVE` while nothing
/// is said. Without a session there is nothing to stream: 405, as before.
async fn standing(
    State(gw): State<Arc<Gateway>>,
    Admitted(caller): Admitted,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET opens a legacy session's stream: send the Mcp-Session-Id that initialize issued (2026-07-28 clients use subscriptions/listen)",
        );
        r.headers_mut().insert(header::ALLOW, "POST".parse().expect("static header"));
        return r;
    };
    if !header_str(&headers, "accept")
        .unwrap_or_default()
        .to_ascii_lowercase()
        .contains("text/event-stream")
    {
        return plain(StatusCode::NOT_ACCEPTABLE, "Accept must list text/event-stream");
    }
    let Some(session) = gw.sessions.get(id, &caller.name, gw.clock.now_ms()) else {
        return plain(
            StatusCode::NOT_FOUND,
            "no such session (it ended, or the gateway restarted): initialize again",
        );
    };
    let rx = super::subscribe::stream(gw.clone(), session);
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let said = tokio::select! {
            message = rx.recv() => toolgate_mcp::sse::message(&message?),
            _ = tokio::time::sleep(KEEP_ALIVE) => ": nothing new\n\n".to_string(),
        };
        Some((Ok::<_, std::convert::Infallible>(said), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")],
        Body::from_stream(events),
    )
        .into_response()
}

/// `DELETE /mcp`: the client ends its legacy session.
async fn end_session(
    State(gw): State<Arc<Gateway>>,
    Admitted(caller): Admitted,
    headers: axum::http::HeaderMap,
) -> Response {
    match header_str(&headers, SESSION_HEADER) {
        None => plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "DELETE ends a legacy session: send the Mcp-Session-Id that initialize issued",
        ),
        Some(id) if gw.sessions.close(id, &caller.name) => StatusCode::NO_CONTENT.into_response(),
        Some(_) => plain(StatusCode::NOT_FOUND, "no such session"),
    }
}

/// `resources/subscribe` and `resources/unsubscribe` (legacy): about the
/// session `initialize` issued, whose stream carries the updates.
fn subscription(
    gw: &Gateway,
    msg: &Inbound,
    caller: &toolgate_core::Caller,
    session: Option<&str>,
) -> Response {
    let Some(id) = msg.id.as_ref() else { return StatusCode::ACCEPTED.into_response() };
    let Some(session) = session else {
        let e = RpcError::new(
            code::INVALID_REQUEST,
            format!(
                "{} is about the session initialize issued: send its Mcp-Session-Id, and open its stream with GET",
                msg.method
            ),
        );
        return plain_reply(Reply::Json(toolgate_mcp::wire::error_response(Some(id), &e)));
    };
    let Some(session) = gw.sessions.get(session, &caller.name, gw.clock.now_ms()) else {
        return rpc_error(
            StatusCode::NOT_FOUND,
            Some(id),
            RpcError::new(
                code::INVALID_REQUEST,
                "no such session (it ended, or the gateway restarted): initialize again",
            ),
        );
    };
    match session.answer(gw, msg) {
        Some(answer) => plain_reply(Reply::Json(answer)),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// The extractors run in this order: who may call, what it sends, the message.
async fn endpoint(
    State(gw): State<Arc<Gateway>>,
    mut peer: Peer,
    Admitted(caller): Admitted,
    _: JsonRpcMedia,
    headers: axum::http::HeaderMap,
    McpMessage { mut msg, era }: McpMessage,
) -> Response {
    peer.inbound_token = inbound_token(&gw, &headers);
    if era == Era::Legacy && msg.method != "initialize" {
        let session = header_str(&headers, SESSION_HEADER)
            .and_then(|id| gw.sessions.get(id, &caller.name, gw.clock.now_ms()));
        super::subscribe::carry_capabilities(&mut msg, session.and_then(|s| s.capabilities()));
    }
    if msg.method == "subscriptions/listen" {
        let Some(id) = msg.id.clone().filter(|_| era == Era::Modern) else {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                msg.id.as_ref(),
                RpcError::new(
                    code::INVALID_REQUEST,
                    "subscriptions/listen is a 2026-07-28 request",
                ),
            );
        };
        let body = Body::from_stream(super::listen::listen_stream(gw.clone(), id, &msg.params));
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")],
            body,
        )
            .into_response();
    }
    if msg.method == "tools/call" {
        return call_stream(gw, msg, era, caller, peer).await;
    }
    if era == Era::Legacy && super::subscribe::about_subscriptions(&msg.method) {
        return subscription(&gw, &msg, &caller, header_str(&headers, SESSION_HEADER));
    }
    let initialize = msg.method == "initialize";
    let capabilities = initialize.then(|| msg.params.get("capabilities").cloned()).flatten();
    let name = caller.name.clone();
    let mut response = plain_reply(handle(&gw, msg, era, caller, &peer, None).await);
    // A legacy handshake opens a session, for the stream its client may open.
    if initialize && response.status() == StatusCode::OK {
        let id = gw.sessions.open(&name, gw.clock.now_ms(), capabilities);
        response
            .headers_mut()
            .insert(SESSION_HEADER, id.parse().expect("a token is a header value"));
    }
    response
}

/// The request's bearer token when it is an OAuth access token (`[oauth]`)
/// rather than a `[callers]` token: an exchange may present it as the
/// person's subject token.
fn inbound_token(gw: &Gateway, headers: &axum::http::HeaderMap) -> Option<Arc<str>> {
    gw.oauth.as_ref()?;
    let bearer = header_str(headers, "authorization")
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)?;
    gw.callers.by_token(bearer).is_none().then(|| bearer.into())
}

/// A reply as one HTTP response, with the status the transport gives it.
fn plain_reply(reply: Reply) -> Response {
    match reply {
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Json(body) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], Body::from(body))
                .into_response()
        }
        Reply::NotFound(body) => {
            (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "application/json")], Body::from(body))
                .into_response()
        }
        Reply::BadRequest(body) => (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(body),
        )
            .into_response(),
    }
}

/// How long a call may run before its answer becomes an SSE stream.
const SSE_AFTER: Duration = Duration::from_secs(1);
/// How often an open stream with nothing to say sends an SSE comment, so
/// that proxies and clients do not take a held call for a dead one.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A `tools/call` answered quickly gets a plain response, so an error keeps
/// its HTTP status (a missing client capability is 400, not an event inside
/// a 200 stream). Once the call has something to say first (progress from
/// the upstream, or from a call held for its approval) or has run for
/// `SSE_AFTER`, its answer is an SSE stream: those messages, a comment every
/// `KEEP_ALIVE` while nothing else is said, then the result.
async fn call_stream(
    gw: Arc<Gateway>,
    msg: Inbound,
    era: Era,
    caller: Arc<toolgate_core::Caller>,
    peer: Peer,
) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (done_tx, mut done) = tokio::sync::oneshot::channel::<Reply>();
    // Kept to answer with if the call's task dies; the answer itself is
    // written only then (writing it for every call showed in profiles).
    let id = msg.id.clone();
    tokio::spawn(async move {
        let _ = done_tx.send(handle(&gw, msg, era, caller, &peer, Some(tx)).await);
    });
    // Before anything is said, only the reply or the clock decides.
    let first = tokio::select! {
        biased;
        Some(message) = rx.recv() => toolgate_mcp::sse::message(&message),
        reply = &mut done => return plain_reply(reply.unwrap_or_else(|_| failed(id.as_ref()))),
        _ = tokio::time::sleep(SSE_AFTER) => ": the call is still running\n\n".to_string(),
    };
    let state = Streaming { first: Some(first), rx: Some(rx), done: Some(done), id: Some(id) };
    let events = futures_util::stream::unfold(state, |mut s| async move {
        if let Some(f) = s.first.take() {
            return Some((f, s));
        }
        let done = s.done.as_mut()?;
        let next = tokio::select! {
            biased;
            // Progress first: what the call said before its answer precedes it.
            Some(message) = recv(&mut s.rx) => Ok(toolgate_mcp::sse::message(&message)),
            reply = done => Err(reply),
            _ = tokio::time::sleep(KEEP_ALIVE) => Ok(": still waiting\n\n".to_string()),
        };
        match next {
            Ok(said) => Some((said, s)),
            Err(Ok(Reply::Json(body) | Reply::NotFound(body) | Reply::BadRequest(body))) => {
                s.done = None;
                Some((toolgate_mcp::sse::message(&body), s))
            }
            Err(Ok(Reply::Accepted)) => None,
            // The call's task died: the client still gets an answer to its id.
            Err(Err(_)) => {
                s.done = None;
                match s.id.take().map(|id| failed(id.as_ref())) {
                    Some(Reply::Json(body)) => Some((toolgate_mcp::sse::message(&body), s)),
                    _ => None,
                }
            }
        }
    });
    let events = futures_util::StreamExt::map(events, Ok::<_, std::convert::Infallible>);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")],
        Body::from_stream(events),
    )
        .into_response()
}

struct Streaming {
    first: Option<String>,
    rx: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    done: Option<tokio::sync::oneshot::Receiver<Reply>>,
    /// The request's id, until the answer for a dead task is sent.
    id: Option<Option<toolgate_mcp::wire::Id>>,
}

/// The answer to request `id` when the task running it died.
fn failed(id: Option<&toolgate_mcp::wire::Id>) -> Reply {
    Reply::Json(toolgate_mcp::wire::error_response(
        id,
        &RpcError::new(code::INTERNAL_ERROR, "the call failed inside the gateway; retry it"),
    ))
}

/// The next message, or never once the call has no more to say.
async fn recv(rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match rx {
        Some(r) => match r.recv().await {
            Some(m) => Some(m),
            None => {
                *rx = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}
