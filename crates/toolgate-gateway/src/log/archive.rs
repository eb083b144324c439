//! The log's archive: sealed ranges of receipts moved out of the ledger into
//! C2SP tlog-tiles files under `STATE_DIR/archive` (`toolgate log archive`),
//! so the ledger stays bounded while the log keeps every receipt.
//!
//! An archive of the log's first `before` receipts (a multiple of 256, no more
//! than a checkpoint covers) holds, by the spec's paths:
//! - `checkpoint`: a checkpoint of size `before`, signed by the log's keys;
//! - `tile/<L>/…`: the hash tiles of the tree at that size;
//! - `tile/entries/…`: the entry bundles, each entry what the published log
//!   holds (its leaf's bytes): a format-3 receipt's commitment, or an older
//!   receipt's JCS bytes;
//! - `private/…`: per bundle, owner-only, each receipt's salt, private
//!   record of what was asked and, for a format-3 receipt, its JCS text
//!   (never served: the salts, records and receipts are what the ledger
//!   kept private).
//!
//! Files are written, flushed to disk and read back and verified (the new
//! entries against their leaf hashes, the tiles the run wrote, the right
//! edge's tiles against the tree's root before and after, the checkpoint's
//! signatures against the key history) before the ledger records the
//! archive and removes the rows, in one transaction. A run computes and
//! reads only the tiles that change and the edge (a few files), so its cost
//! follows the receipts it moves, not the log's size; `toolgate log verify`
//! reads the whole archive. A run cut off anywhere leaves the rows in place;
//! the next run writes the same files again.
//!
//! Readers take the log whole: `leaf_hashes` and `leaves` give what the
//! archive holds, then what the ledger does.
//!
//! It knows nothing of the running log (`receipt_log`): a run is given the
//! archive, the ledger, and what signs its checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use toolgate_core::bundle::{BundleKey, key_verifiers};
use toolgate_core::merkle::{self, Frontier, Hash};
use toolgate_core::note;
use toolgate_core::proposal::hex;
use toolgate_core::receipt::{self, LogEntry};
use toolgate_core::strict_json::JsonLimits;
use toolgate_core::tiles::{self, WIDTH};
use toolgate_ledger::{Ledger, StoredArchive, StoredCheckpoint, StoredReceipt};

/// Where a state dir's archive lives.
#[derive(Debug, Clone)]
pub struct Archive {
    dir: PathBuf,
}

/// One leaf of the log as read back.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// Its index.
    pub index: u64,
    /// Its leaf hash (over `entry`).
    pub hash: Hash,
    /// What the published log holds: a format-3 receipt's commitment, or
    /// the logged receipt itself (formats 1 and 2).
    pub entry: String,
    /// The logged receipt's JCS text.
    pub logged: String,
    /// The key that opens its commitment (format 3).
    pub opening: Option<[u8; 32]>,
}

impl From<StoredReceipt> for Leaf {
    fn from(r: StoredReceipt) -> Self {
        let opening = r.opening_key();
        Leaf {
            index: r.log_index,
            hash: r.leaf_hash,
            entry: r.entry().to_string(),
            logged: r.logged,
            opening,
        }
    }
}

impl Archive {
    /// The archive of the gateway whose state dir is `state`.
    pub fn in_state_dir(state: &Path) -> Self {
        Self { dir: state.join("archive") }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn read(&self, rel: &str) -> anyhow::Result<Vec<u8>> {
        let path = self.dir.join(rel);
        std::fs::read(&path).with_context(|| {
            format!("reading the archive's {} (the ledger says it is archived)", path.display())
        })
    }

    /// Writes a file of the archive and flushes it to disk. A full tile or
    /// bundle already there must hold these bytes (it never changes); the
    /// checkpoint is replaced. Every file and folder is owner-only (the
    /// gateway serves the public ones at `/log/`; `private/` never), and
    /// none is written through a link planted in the archive.
    fn write(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.dir.join(rel);
        if rel != "checkpoint" && std::fs::read(&path).is_ok_and(|had| had == bytes) {
            return Ok(());
        }
        let parent = path.parent().expect("a file of the archive is in a folder");
        toolgate_mcp::owner_only::create_private_dir(parent)?;
        toolgate_mcp::owner_only::write_owner_only(&path, bytes)
    }

    /// Leaf hashes `from..to`, all archived, from the level-0 tiles.
    pub fn leaf_hashes(&self, from: u64, to: u64) -> anyhow::Result<Vec<Hash>> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        for tile in from / WIDTH..to.div_ceil(WIDTH) {
            let hashes = tiles::read_tile(&self.read(&tiles::tile_path(0, tile, WIDTH))?, WIDTH)?;
            let (lo, hi) =
                (from.max(tile * WIDTH) - tile * WIDTH, to.min((tile + 1) * WIDTH) - tile * WIDTH);
            out.extend_from_slice(&hashes[lo as usize..hi as usize]);
        }
        Ok(out)
    }

    /// The right edge of the archived tree of `size` leaves: its partial
    /// tiles, level 1 up (a few files, whatever the log's size).
    pub fn edge(&self, size: u64) -> anyhow::Result<Vec<(u8, Vec<Hash>)>> {
        tiles::edge_widths(size)
            .into_iter()
            .map(|(level, index, width)| {
                Ok((
                    level,
                    tiles::read_tile(&self.read(&tiles::tile_path(level, index, width))?, width)?,
                ))
            })
            .collect()
    }

    /// The archived leaves `from..to`, from the entry bundles; a format-3
    /// receipt's text and opening from the private file beside its bundle
    /// (its entry is only a commitment), checked to open it.
    pub fn leaves(&self, from: u64, to: u64) -> anyhow::Result<Vec<Leaf>> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        for tile in from / WIDTH..to.div_ceil(WIDTH) {
            let bytes = self.read(&tiles::entries_path(tile, WIDTH))?;
            let mut private = None;
            for (i, entry) in tiles::read_entry_bundle(&bytes, WIDTH)?.into_iter().enumerate() {
                let index = tile * WIDTH + i as u64;
                if !(from..to).contains(&index) {
                    continue;
                }
                let text = String::from_utf8(entry.to_vec())
                    .map_err(|_| anyhow!("archived receipt {index} is not UTF-8"))?;
                let hash = merkle::leaf_hash(entry);
                let Ok(LogEntry::Commitment(commitment)) =
                    LogEntry::from_json(entry, JsonLimits::sized(1 << 10, 4))
                else {
                    out.push(Leaf {
                        index,
                        hash,
                        logged: text.clone(),
                        entry: text,
                        opening: None,
                    });
                    continue;
                };
                if private.is_none() {
                    private = Some(self.private(tile)?);
                }
                let (salt, logged) =
                    private.as_ref().and_then(|p| p.get(&index)).cloned().ok_or_else(|| {
                        anyhow!(
                            "the archive's private/{} holds no receipt {index}, whose entry is a \
                                commitment",
                            tiles::index_path(tile)
                        )
                    })?;
                let key = receipt::opening_key(&salt, index);
                if receipt::commitment(&key, logged.as_bytes()) != commitment {
                    bail!(
                        "the archive's private record of receipt {index} does not open its entry's commitment"
                    );
                }
                out.push(Leaf { index, hash, entry: text, logged, opening: Some(key) });
            }
        }
        Ok(out)
    }

    /// The private file of bundle `tile`: each receipt's salt and, for a
    /// format-3 receipt, its logged text, by index.
    fn private(
        &self,
        tile: u64,
    ) -> anyhow::Result<std::collections::HashMap<u64, ([u8; 32], String)>> {
        let rel = format!("private/{}", tiles::index_path(tile));
        let text = String::from_utf8(self.read(&rel)?)
            .map_err(|_| anyhow!("the archive's {rel} is not UTF-8"))?;
        let mut out = std::collections::HashMap::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let v: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("the archive's {rel}"))?;
            let index = v["log_index"]
                .as_u64()
                .ok_or_else(|| anyhow!("the archive's {rel}: a line without its log_index"))?;
            let salt = v["salt"]
                .as_str()
                .and_then(toolgate_core::proposal::unhex32)
                .ok_or_else(|| anyhow!("the archive's {rel}: receipt {index}'s salt"))?;
            if let Some(logged) = v.get("logged").and_then(|l| l.as_str()) {
                out.insert(index, (salt, logged.to_string()));
            }
        }
        Ok(out)
    }
}

/// Where the ledger's rows begin: everything before is archived.
async fn archived_before(ledger: &dyn Ledger) -> anyhow::Result<u64> {
    Ok(ledger.archived().await?.map_or(0, |a| a.before))
}

/// Leaf hashes `from..to` of the whole log: the archive's, then the ledger's.
pub async fn leaf_hashes(
    archive: &Archive,
    ledger: &dyn Ledger,
    from: u64,
    to: u64,
) -> anyhow::Result<Vec<Hash>> {
    let before = archived_before(ledger).await?;
    let mut out =
        if from < before { archive.leaf_hashes(from, to.min(before))? } else { Vec::new() };
    if to > before {
        out.extend(ledger.leaf_hashes(from.max(before), to).await?);
    }
    Ok(out)
}

/// The leaves `from..to` of the whole log (up to `to`, or the log's end).
pub async fn leaves(
    archive: &Archive,
    ledger: &dyn Ledger,
    from: u64,
    to: u64,
) -> anyhow::Result<Vec<Leaf>> {
    let before = archived_before(ledger).await?;
    let mut out = if from < before { archive.leaves(from, to.min(before))? } else { Vec::new() };
    let mut next = from.max(before);
    while next < to {
        let rows = ledger.receipts(next, (to - next).min(10_000)).await?;
        let Some(last) = rows.last() else { break };
        next = last.log_index + 1;
        out.extend(rows.into_iter().map(Leaf::from));
    }
    Ok(out)
}

/// `toolgate log verify`'s check of the archive's hash tiles: each level-0
/// tile against the leaf hashes of the entries as they are read (in order),
/// then the levels above from the roots of those tiles. An archive run
/// checks only what it writes and the edge; this reads every tile, keeping
/// one hash per 256 leaves.
pub struct TileCheck<'a> {
    archive: &'a Archive,
    before: u64,
    tile: Vec<Hash>,
    roots: Vec<Hash>,
}

impl<'a> TileCheck<'a> {
    /// A check of the tiles of the first `before` (archived) leaves.
    pub fn new(archive: &'a Archive, before: u64) -> Self {
        Self { archive, before, tile: Vec::with_capacity(WIDTH as usize), roots: Vec::new() }
    }

    /// The next leaf's hash, in log order from 0 (past `before`, ignored).
    pub fn leaf(&mut self, index: u64, hash: Hash) -> anyhow::Result<()> {
        if index >= self.before {
            return Ok(());
        }
        self.tile.push(hash);
        if self.tile.len() as u64 == WIDTH {
            let path = tiles::tile_path(0, index / WIDTH, WIDTH);
            let same = self.archive.read(&path).map(|had| had == self.tile.concat());
            // The tree above is built from the entries either way, so one
            // bad tile is one problem.
            self.roots.push(merkle::root(&self.tile));
            self.tile.clear();
            if !same? {
                bail!("the archive's {path} is not the hashes of its entries");
            }
        }
        Ok(())
    }

    /// The levels above, once every archived leaf was given.
    pub fn finish(self) -> anyhow::Result<()> {
        if (self.roots.len() as u64) * WIDTH != self.before || !self.tile.is_empty() {
            bail!(
                "the archive's entries hold {} leaves, not {}",
                self.roots.len() as u64 * WIDTH + self.tile.len() as u64,
                self.before
            );
        }
        for tile in tiles::tiles(&self.roots) {
            let path = tiles::tile_path(tile.level + 1, tile.index, tile.hashes.len() as u64);
            if self.archive.read(&path)? != tile.bytes() {
                bail!("the archive's {path} is not the roots of the tiles below it");
            }
        }
        Ok(())
    }
}

/// What an archive run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    /// The log's first `before` receipts are archived now.
    pub before: u64,
    /// How many rows this run moved out of the ledger.
    pub moved: u64,
    /// How many checkpoints the archive now covers went from the ledger
    /// (its own, of size `before`, stays).
    pub checkpoints_dropped: u64,
}

/// `toolgate log archive`: archives the log's receipts before `before`
/// (rounded down to whole tiles of 256, and to the last checkpoint's size).
/// `checkpoint_at` gives the log's signed checkpoint of a size with the
/// root computed here (the running log's, `ReceiptLog::archive_before`).
pub async fn run(
    archive: &Archive,
    ledger: &dyn Ledger,
    before: u64,
    now_ms: i64,
    checkpoint_at: impl AsyncFnOnce(u64, Hash) -> anyhow::Result<StoredCheckpoint>,
) -> anyhow::Result<Archived> {
    let last = ledger.archived().await?;
    let from = last.as_ref().map_or(0, |a| a.before);
    let checkpointed = ledger.checkpoint(None).await?.map_or(0, |c| c.size);
    let target = before.min(checkpointed) / WIDTH * WIDTH;
    if target <= from {
        bail!(
            "nothing to archive before {before}: {from} receipt(s) are archived already, and an \
                archive takes whole tiles of {WIDTH} up to the last checkpoint \
                (size {checkpointed})"
        );
    }
    // The rows to move (their leaf hashes computed as they were read).
    let mut rows: Vec<StoredReceipt> = Vec::with_capacity((target - from) as usize);
    while (rows.len() as u64) < target - from {
        let next = from + rows.len() as u64;
        let chunk = ledger.receipts(next, (target - next).min(10_000)).await?;
        if chunk.first().is_none_or(|r| r.log_index != next) {
            bail!(
                "the ledger holds no receipt {next}: the log is not contiguous; run `toolgate log verify`"
            );
        }
        rows.extend(chunk);
    }
    for (tile, chunk) in rows.chunks(WIDTH as usize).enumerate() {
        let tile = from / WIDTH + tile as u64;
        archive.write(
            &tiles::entries_path(tile, WIDTH),
            &tiles::entry_bundle(tile * WIDTH, chunk.iter().map(|r| r.entry().as_bytes()))?,
        )?;
        // A format-3 receipt's entry is only its commitment: its text is
        // kept here, as private as the ledger's row was.
        let private: String = chunk
            .iter()
            .map(|r| {
                let mut line = serde_json::json!({"log_index": r.log_index, "salt": hex(&r.salt), "asked": r.asked});
                if r.commitment.is_some() {
                    line["logged"] = serde_json::json!(r.logged);
                }
                line.to_string() + "\n"
            })
            .collect();
        archive.write(&format!("private/{}", tiles::index_path(tile)), private.as_bytes())?;
    }
    // The tree at `from` as the ledger recorded it, and its right edge as
    // the archive holds it: they must agree before anything grows on it.
    let mut frontier = match &last {
        Some(a) => Frontier::from_parts(a.before, a.frontier.clone())
            .map_err(|e| anyhow!("the ledger's record of the archive: {e}"))?,
        None => Frontier::new(),
    };
    let edge = archive.edge(from)?;
    if tiles::edge_frontier(from, &edge)?.root() != frontier.root()
        || last.as_ref().is_some_and(|a| a.root != frontier.root())
    {
        bail!(
            "the archive's tiles at the edge of receipts 0..{from} are not the ones archived \
                (their root differs from the ledger's record); restore {} from backup; nothing \
                archived",
            archive.dir().display()
        );
    }
    // Only the tiles that change: this run's leaves and the edge above them.
    let fresh: Vec<Hash> = rows.iter().map(|r| r.leaf_hash).collect();
    let grown = tiles::grown(from, &edge, &fresh)?;
    for tile in &grown {
        archive.write(&tile.path(), &tile.bytes())?;
    }
    fresh.iter().for_each(|h| frontier.push(*h));
    let checkpoint = checkpoint_at(target, frontier.root()).await?;
    archive.write("checkpoint", checkpoint.note.as_bytes())?;
    verify(archive, ledger, (from, target), &grown, &frontier, &checkpoint.note).await?;
    let moved = ledger
        .archive(StoredArchive {
            before: target,
            root: frontier.root(),
            frontier: frontier.subtrees().to_vec(),
            archived_ms: now_ms,
        })
        .await?;
    // The checkpoints below it: the archive's checkpoint signs a tree that
    // holds each, and its tiles give any proof they could.
    let checkpoints_dropped = ledger.drop_covered_checkpoints().await?;
    Ok(Archived { before: target, moved, checkpoints_dropped })
}

/// Reads back what a run wrote for receipts `from..size`: the new entries
/// against their leaf hashes, the tiles it wrote, the edge at `size` against
/// the tree's root, and the checkpoint's root and signatures (by a key of
/// the log's history). The archive below `from` was checked through its
/// edge before; `toolgate log verify` reads all of it.
pub async fn verify(
    archive: &Archive,
    ledger: &dyn Ledger,
    (from, size): (u64, u64),
    written: &[tiles::Tile],
    tree: &Frontier,
    note_text: &str,
) -> anyhow::Result<()> {
    let leaves = archive.leaf_hashes(from, size)?;
    for Leaf { index, hash, .. } in archive.leaves(from, size)? {
        if leaves[(index - from) as usize] != hash {
            bail!("the archive's entry {index} does not hash to its leaf in tile 0");
        }
    }
    for tile in written {
        if archive.read(&tile.path())? != tile.bytes() {
            bail!("the archive's {} is not the tile of its leaves", tile.path());
        }
    }
    if tree.size() != size
        || tiles::edge_frontier(size, &archive.edge(size)?)?.root() != tree.root()
    {
        bail!("the archive's edge tiles at {size} do not give the tree's root");
    }
    let keys = ledger.log_keys().await?;
    let mut verifiers = Vec::new();
    for k in keys {
        verifiers.extend(
            key_verifiers(&BundleKey { kid: k.kid, ed25519: k.ed25519, ml_dsa_65: k.ml_dsa_65 })
                .map_err(|e| anyhow!("the key history: {e}"))?,
        );
    }
    let on_disk = String::from_utf8(archive.read("checkpoint")?)
        .map_err(|_| anyhow!("the archive's checkpoint is not UTF-8"))?;
    if on_disk != note_text {
        bail!("the archive's checkpoint is not the one just signed");
    }
    let (checkpoint, _) = note::open_checkpoint(&on_disk, &verifiers)
        .map_err(|e| anyhow!("the archive's checkpoint: {e}"))?;
    if checkpoint.size() != size || *checkpoint.root() != tree.root() {
        bail!("the archive's checkpoint is not of its {size} leaves");
    }
    Ok(())
}
