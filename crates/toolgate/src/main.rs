//! `toolgate`: the authority layer for AI agents' tool calls. A thin binary:
//! it parses arguments and calls the crates.

mod demo;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// toolgate — an MCP gateway that decides, by the host's own registry and policy, whether each
/// agent tool call runs, waits for a named human, or is refused.
#[derive(Parser)]
#[command(name = "toolgate", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Atlas field-service demo on an embedded default: starts the three Atlas MCP
    /// servers on loopback, reads their contracts live and plays the scenario case by case.
    Demo {
        /// Keep the servers' sandbox (notes, orders, outbox) in DIR instead of a temporary directory.
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo { state } => demo::run(state).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
