//! `toolgate-atlas tickets|parts|manuals|notices|support [--http ADDR] [--state DIR]`

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = toolgate_atlas::cli::Args::parse();
    // stdout carries the protocol on stdio: logs go to stderr, always.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    toolgate_atlas::cli::run(args).await
}
