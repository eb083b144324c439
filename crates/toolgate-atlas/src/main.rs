//! `toolgate-atlas tickets|parts|manuals [--http ADDR] [--state DIR]`

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use toolgate_atlas::{ServerKind, serve};
use tracing_subscriber::EnvFilter;

/// Serve one Atlas field-service MCP server (synthetic data; writes stay in a local sandbox).
#[derive(Parser)]
#[command(name = "toolgate-atlas", version, about)]
struct Args {
    /// Which server to run.
    server: ServerKind,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8701; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Directory for the sandbox files (notes, orders, outbox). Default: a new temporary directory.
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // stdout carries the protocol on stdio: logs go to stderr, always.
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    let server = toolgate_atlas::server(args.server, args.state.as_deref())?;
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
