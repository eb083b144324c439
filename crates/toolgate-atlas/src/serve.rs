//! Transports: stdio (the default) and Streamable HTTP at `/mcp`.

use std::net::SocketAddr;

use anyhow::Context as _;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

use crate::server::AtlasServer;

/// Serves one MCP peer over stdin/stdout until it disconnects.
pub async fn stdio(server: AtlasServer) -> anyhow::Result<()> {
    let running =
        server.serve(rmcp::transport::stdio()).await.context("starting stdio transport")?;
    running.waiting().await.context("stdio transport")?;
    Ok(())
}

/// The axum router exposing `server` at `/mcp`, both protocol eras on one
/// endpoint. `extra_host` is added to the DNS-rebinding allow-list when the
/// server is bound to a non-loopback address.
pub fn router(
    server: AtlasServer,
    extra_host: Option<String>,
    cancel: CancellationToken,
) -> axum::Router {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(extra_host);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_cancellation_token(cancel);
    let service: StreamableHttpService<AtlasServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config);
    axum::Router::new().nest_service("/mcp", service)
}

/// Binds `addr` and serves until `cancel` fires. Returns the bound address
/// (useful with port 0) and the serving task.
pub async fn http(
    server: AtlasServer,
    addr: SocketAddr,
    cancel: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    let extra = (!local.ip().is_loopback()).then(|| local.ip().to_string());
    let app = router(server, extra, cancel.clone());
    // TCP_NODELAY: an SSE answer goes out in several small writes, which
    // Nagle would hold for the peer's delayed ACK (40 ms a call).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled_owned().await })
            .await
    });
    Ok((local, task))
}
