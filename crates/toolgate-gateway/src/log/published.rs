//! The log as published (C2SP tlog-tiles): its newest checkpoint, its hash
//! tiles and its entry bundles, read from the archive and the ledger alike,
//! for the `/log/` routes and for anyone who mirrors them. Only what the
//! newest checkpoint covers is published: a tile past it does not exist yet.
//!
//! A hash tile at level 0 is 256 leaf hashes, read (and hashed) from the
//! rows; above, each hash is the root of a full tile of the level below.
//! Full tiles above level 0 never change, so they are kept once computed
//! (a bounded set: a level-1 tile stands for 65,536 receipts).
//!
//! What it reads is a `Published`: the archive, the ledger and the kept
//! tiles, as the running log gives them (`ReceiptLog::published`). It knows
//! nothing of that log, nor of its witnesses (`served` is given their
//! cosigned checkpoint).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use toolgate_core::merkle::{self, Hash};
use toolgate_core::tiles::{self, WIDTH};
use toolgate_ledger::{Ledger, StoredCheckpoint};

use super::archive::{self, Archive};

/// How many full tiles above level 0 are kept (32 bytes × 256 each).
const KEPT: usize = 512;

/// Full tiles above level 0, by (level, index).
#[derive(Default)]
pub struct Kept(Mutex<HashMap<(u8, u64), Arc<Vec<Hash>>>>);

impl Kept {
    fn get(&self, key: (u8, u64)) -> Option<Arc<Vec<Hash>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned()
    }

    fn keep(&self, key: (u8, u64), hashes: Arc<Vec<Hash>>) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= KEPT {
            // The lowest level goes first: it is the cheapest to compute again.
            if let Some(k) = kept.keys().min().copied() {
                kept.remove(&k);
            }
        }
        kept.insert(key, hashes);
    }
}

/// The log as published: where its receipts are read from (the archive,
/// then the ledger), and the full tiles kept.
#[derive(Clone, Copy)]
pub struct Published<'a> {
    /// The log's archive.
    pub archive: &'a Archive,
    /// The ledger the log is kept in.
    pub ledger: &'a dyn Ledger,
    /// Full tiles above level 0, once computed.
    pub kept: &'a Kept,
}

/// The newest checkpoint: what the published log covers.
pub async fn checkpoint(log: &Published<'_>) -> anyhow::Result<Option<StoredCheckpoint>> {
    Ok(log.ledger.checkpoint(None).await?)
}

/// The checkpoint served at `/log/checkpoint`: the newest, with the
/// witnesses' cosignatures once they have cosigned it (`cosigned`: the size
/// and note of the newest they cosigned). Never an older cosigned one
/// instead: a witness that is down must not stop new receipts from being
/// proven (a verifier that requires a quorum waits for it).
pub async fn served(
    log: &Published<'_>,
    cosigned: Option<(u64, String)>,
) -> anyhow::Result<Option<String>> {
    let newest = checkpoint(log).await?;
    Ok(match (newest, cosigned) {
        (Some(n), Some((size, note))) if size == n.size && note.starts_with(&n.note) => Some(note),
        (newest, _) => newest.map(|c| c.note),
    })
}

/// The consistency proof from the tree of `old` leaves to the tree of
/// `size`, from the published tiles (what a witness is sent).
pub async fn consistency_proof(
    log: &Published<'_>,
    old: u64,
    size: u64,
) -> anyhow::Result<Vec<Hash>> {
    let mut read = HashMap::new();
    for (level, index, width) in tiles::tiles_read(|r| tiles::consistency_proof(old, size, r))? {
        read.insert((level, index, width), hashes(log, level, index, width).await?);
    }
    Ok(tiles::consistency_proof::<tiles::TileError>(old, size, &mut |l, i, w| {
        read.get(&(l, i, w))
            .map(|h| h.to_vec())
            .ok_or_else(|| tiles::TileError::Malformed(format!("tile {l}/{i} was not read")))
    })?)
}

/// Why a tile is not published.
#[derive(Debug, thiserror::Error)]
pub enum Unpublished {
    /// Not a tile of the tree the newest checkpoint covers.
    #[error("{0}")]
    NotFound(String),
    /// It may not be served to this reader.
    #[error("{0}")]
    Forbidden(String),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

/// Hash tile `level/index` of `width` hashes, if the newest checkpoint's
/// tree (of `size` leaves) has it.
pub async fn hash_tile(
    log: &Published<'_>,
    size: u64,
    (level, index, width): (u8, u64, u64),
) -> Result<Vec<u8>, Unpublished> {
    let has = tiles::width_at(size, level, index);
    if width > has {
        return Err(Unpublished::NotFound(format!(
            "tile {level}/{index} has {has} of its hashes in the checkpointed tree of {size}, not {width}"
        )));
    }
    Ok(hashes(log, level, index, width).await?.concat())
}

/// Entry bundle `index` of `width` entries (format-3 receipts' commitments;
/// older receipts' JCS bytes).
///
/// A bundle holding a receipt logged in the clear (format 1 or 2, written
/// before receipts were published as commitments) names tenants, callers and
/// tools, so it is served only to an admin (`clear_allowed`): one tenant's
/// approver must not read another's receipts.
pub async fn entry_bundle(
    log: &Published<'_>,
    size: u64,
    (index, width): (u64, u64),
    clear_allowed: bool,
) -> Result<Vec<u8>, Unpublished> {
    let has = tiles::width_at(size, 0, index);
    if width > has {
        return Err(Unpublished::NotFound(format!(
            "entry bundle {index} has {has} entries in the checkpointed tree of {size}, not {width}"
        )));
    }
    let first = index * WIDTH;
    let leaves = archive::leaves(log.archive, log.ledger, first, first + width).await?;
    if leaves.len() as u64 != width {
        return Err(Unpublished::Store(anyhow::anyhow!(
            "the log gave {} of the {width} entries from {first}",
            leaves.len()
        )));
    }
    if !clear_allowed && let Some(clear) = leaves.iter().find(|l| l.opening.is_none()) {
        return Err(Unpublished::Forbidden(format!(
            "entry bundle {index} holds receipt {} logged in the clear (before format 3), which \
                names its tenant: only an admin reads it; a holder of a later answer proves it \
                from the tiles and the opening its answer carries",
            clear.index
        )));
    }
    Ok(tiles::entry_bundle(first, leaves.iter().map(|l| l.entry.as_bytes()))
        .map_err(anyhow::Error::from)?)
}

type Hashes<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Arc<Vec<Hash>>>> + Send + 'a>>;

/// The hashes of tile `level/index`, `width` of them (all in the tree).
fn hashes<'a>(log: &'a Published<'a>, level: u8, index: u64, width: u64) -> Hashes<'a> {
    Box::pin(async move {
        let full = width == WIDTH && level > 0;
        if let Some(kept) = full.then(|| log.kept.get((level, index))).flatten() {
            return Ok(kept);
        }
        let out: Vec<Hash> = match level {
            0 => {
                archive::leaf_hashes(log.archive, log.ledger, index * WIDTH, index * WIDTH + width)
                    .await?
            }
            // One read of the leaves below, in tiles of 256.
            1 => {
                let from = index * WIDTH * WIDTH;
                archive::leaf_hashes(log.archive, log.ledger, from, from + width * WIDTH)
                    .await?
                    .chunks(WIDTH as usize)
                    .map(merkle::root)
                    .collect()
            }
            _ => {
                let mut out = Vec::with_capacity(width as usize);
                for below in index * WIDTH..index * WIDTH + width {
                    out.push(merkle::root(&hashes(log, level - 1, below, WIDTH).await?));
                }
                out
            }
        };
        if out.len() as u64 != width {
            anyhow::bail!(
                "the log gave {} of the {width} hashes of tile {level}/{index}",
                out.len()
            );
        }
        let out = Arc::new(out);
        if full {
            log.kept.keep((level, index), out.clone());
        }
        Ok(out)
    })
}
