//! The run's receipts, read from the gateway's ledger as `toolgate export`
//! reads them: where the run began in the log, and a bundle of its own.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::bail;
use toolgate_core::bundle::Bundle;
use toolgate_gateway::config::Config;
use toolgate_ledger::Ledger;

/// The config and the ledger it names (the gateway's own, shared while it runs).
async fn open(config: &Path) -> anyhow::Result<(Config, Arc<dyn Ledger>)> {
    let config = Config::load(config)?;
    let ledger = toolgate_gateway::process::open_ledger(&config).await?;
    Ok((config, ledger))
}

/// The log's size now: where a run's receipts will begin.
pub async fn log_size(config_path: &Path) -> anyhow::Result<u64> {
    let (_, ledger) = open(config_path).await?;
    Ok(ledger.log_size().await?)
}

/// A bundle of the receipts from `from` on that attest one of `proposals`
/// (a run's calls), each with its inclusion proof against a checkpoint
/// that covers them (signed now if needed, with the gateway's keys).
pub async fn bundle_of(
    config_path: &Path,
    from: u64,
    proposals: &BTreeSet<String>,
) -> anyhow::Result<Bundle> {
    let (config, ledger) = open(config_path).await?;
    let to = ledger.log_size().await?;
    if from >= to {
        bail!("the log holds no receipt from {from} on");
    }
    let checkpoint =
        toolgate_gateway::log::evidence::covering_with_keys_of(&config, &ledger, to).await?;
    let mut bundle = toolgate_gateway::log::evidence::bundle(
        &toolgate_gateway::log::archive::Archive::in_state_dir(&config.state_dir()),
        &*ledger,
        &checkpoint,
        from,
        to,
    )
    .await?;
    bundle.receipts.retain(|e| proposals.contains(&e.receipt.receipt.proposal_sha256));
    Ok(bundle)
}
