//! Evidence for a third party: receipts of the log with their inclusion
//! proofs against a signed checkpoint that covers them, as a bundle that
//! verifies offline. The CLI (`toolgate export`, the agent's run) and the
//! console's downloads build bundles here, one way.

use std::sync::Arc;

use anyhow::anyhow;
use toolgate_core::bundle::{BUNDLE_FORMAT, Bundle, BundleKey, Entry};
use toolgate_core::merkle;
use toolgate_core::proposal::hex;
use toolgate_core::receipt::LoggedReceipt;
use toolgate_core::strict_json::JsonLimits;
use toolgate_ledger::{Ledger, StoredCheckpoint};

use super::archive::{self, Archive};
use super::receipt_log::ReceiptLog;

/// A stored receipt's text, read back (ours: generous limits).
pub fn parse(stored: &str) -> anyhow::Result<LoggedReceipt> {
    let limits = JsonLimits::sized(64 << 20, 128);
    LoggedReceipt::from_json(stored.as_bytes(), limits).map_err(|e| anyhow!("{e}"))
}

/// The newest checkpoint, which must cover the log up to `to`: one is
/// signed now if the checkpointer has not yet.
pub async fn covering(
    log: &Arc<ReceiptLog>,
    ledger: &dyn Ledger,
    to: u64,
) -> anyhow::Result<StoredCheckpoint> {
    let mut checkpoint = ledger.checkpoint(None).await?;
    if checkpoint.as_ref().is_none_or(|c| c.size < to) {
        log.checkpoint().await?;
        checkpoint = ledger.checkpoint(None).await?;
    }
    let checkpoint = checkpoint
        .filter(|c| c.size >= to)
        .ok_or_else(|| anyhow!("no checkpoint covers the log up to {to}"))?;
    // The witnesses' cosigned one, when it covers as much: a bundle then
    // carries their cosignatures too.
    if let Some((size, note)) = log.witnesses.cosigned().filter(|(size, _)| *size >= to)
        && let Some(cosigned) = ledger.checkpoint(Some(size)).await?
        && note.starts_with(&cosigned.note)
    {
        return Ok(StoredCheckpoint { note, ..cosigned });
    }
    Ok(checkpoint)
}

/// `covering`, for a command beside the gateway: the log of `config`'s
/// state dir, signing with the gateway's own keys if it must.
pub async fn covering_with_keys_of(
    config: &crate::config::Config,
    ledger: &Arc<dyn Ledger>,
    to: u64,
) -> anyhow::Result<StoredCheckpoint> {
    let log =
        ReceiptLog::open_configured(config, ledger.clone(), &crate::sources::Sources::system())
            .await?;
    covering(&log, &**ledger, to).await
}

/// The receipts `from..to`, each with its inclusion proof against
/// `checkpoint`, and every key of the log's history; archived receipts are
/// read from the archive.
pub async fn bundle(
    archive: &Archive,
    ledger: &dyn Ledger,
    checkpoint: &StoredCheckpoint,
    from: u64,
    to: u64,
) -> anyhow::Result<Bundle> {
    let leaves = archive::leaf_hashes(archive, ledger, 0, checkpoint.size).await?;
    let proofs = merkle::inclusion_proofs(&leaves, from, to)?;
    let logged = archive::leaves(archive, ledger, from, to).await?;
    if logged.len() as u64 != to - from {
        return Err(anyhow!("the log holds {} of the receipts {from}..{to}", logged.len()));
    }
    let receipts = logged
        .iter()
        .zip(proofs)
        .map(|(leaf, proof)| {
            Ok(Entry {
                receipt: parse(&leaf.logged)?,
                opening: leaf.opening.map(|k| hex(&k)),
                inclusion: proof.iter().map(|h| hex(h)).collect(),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let keys = ledger
        .log_keys()
        .await?
        .into_iter()
        .map(|k| BundleKey { kid: k.kid, ed25519: k.ed25519, ml_dsa_65: k.ml_dsa_65 })
        .collect();
    Ok(Bundle { format: BUNDLE_FORMAT.into(), checkpoint: checkpoint.note.clone(), keys, receipts })
}
