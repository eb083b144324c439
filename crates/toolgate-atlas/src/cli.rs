//! The command line of an Atlas server: `SERVER [--http ADDR] [--state DIR]
//! [--identity-jwks URL --identity-issuer ISS --identity-audience AUD]`.
//! Used by the `toolgate-atlas` binary and by `toolgate atlas`.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::identity::{IdentityConfig, Verifier};
use crate::{ServerKind, serve};
use clap::Parser;

/// Serve one Atlas field-service MCP server (synthetic data; writes stay in a local sandbox).
#[derive(Parser, Debug, Clone)]
#[command(name = "toolgate-atlas", version, about)]
pub struct Args {
    /// Which server to run.
    pub server: ServerKind,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8701; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Directory for the sandbox files (notes, orders, outbox). Default: a new temporary directory.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Speak the 2025-11-25 handshake only, not 2026-07-28 (a legacy upstream, for measurements).
    #[arg(long)]
    pub legacy: bool,
    /// Run a call only when it carries toolgate's identity assertion, verified against the keys at URL
    /// (the gateway's /.well-known/jwks.json); what the call writes names the person it asserts.
    #[arg(long, value_name = "URL", requires_all = ["identity_issuer", "identity_audience"])]
    pub identity_jwks: Option<String>,
    /// The gateway's issuer (its `[identity] issuer`, by default its `receipts.origin`).
    #[arg(long, value_name = "ISS", requires = "identity_jwks")]
    pub identity_issuer: Option<String>,
    /// This server's audience in the gateway's `[servers.NAME.identity]` (by default its name there).
    #[arg(long, value_name = "AUD", requires = "identity_jwks")]
    pub identity_audience: Option<String>,
}

impl Args {
    fn identity(&self) -> Option<IdentityConfig> {
        Some(IdentityConfig {
            jwks_url: self.identity_jwks.clone()?,
            issuer: self.identity_issuer.clone()?,
            audience: self.identity_audience.clone()?,
        })
    }
}

/// Serves until the peer disconnects (stdio) or a shutdown signal (HTTP).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut server = crate::server(args.server, args.state.as_deref())?;
    if args.legacy {
        server = server.legacy_only();
    }
    eprintln!(
        "toolgate-atlas: {} sandbox at {}",
        args.server.name(),
        server.sandbox_dir().display()
    );
    if let Some(config) = args.identity() {
        eprintln!(
            "toolgate-atlas: {} runs calls only for the person toolgate asserts (issuer {:?}, audience {:?}, keys at {})",
            args.server.name(),
            config.issuer,
            config.audience,
            config.jwks_url
        );
        server = server.with_identity(Verifier::new(config)?);
    }
    match args.http {
        None => serve::stdio(server).await,
        Some(addr) => {
            let cancel = tokio_util::sync::CancellationToken::new();
            let (local, task) = serve::http(server.clone(), addr, cancel.clone()).await?;
            // Tests and scripts read this line to learn the port.
            eprintln!("toolgate-atlas: serving {} on http://{local}/mcp", args.server.name());
            tokio::select! {
                result = task => result??,
                _ = shutdown_signal() => cancel.cancel(),
            }
            Ok(())
        }
    }
}

/// Ctrl-C or SIGTERM: stop serving and let the default sandbox be removed.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
