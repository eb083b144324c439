//! The command line of an Atlas server: `SERVER [--http ADDR] [--state DIR]`.
//! Used by the `toolgate-atlas` binary and by `toolgate atlas`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use crate::{ServerKind, serve};

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
}

/// Serves until the peer disconnects (stdio) or a shutdown signal (HTTP).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut server = crate::server(args.server, args.state.as_deref())?;
    if args.legacy {
        server = server.legacy_only();
    }
    eprintln!("toolgate-atlas: {} sandbox at {}", args.server.name(), server.sandbox_dir().display());
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
