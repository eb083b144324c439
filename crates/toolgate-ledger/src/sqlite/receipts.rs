//! The receipt log on SQLite. Appends run on the writer thread inside the
//! batch's transaction, so the next index is read and taken in one step
//! and a receipt commits (or not) with the state change it attests.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, Row, params};
use toolgate_core::merkle::Hash;

use super::SqliteLedger;
use super::recent::RecentLeaves;
use crate::digests::Dictionary;
use crate::receipts::{ARCHIVE_CHUNK, chunked, contiguous, hashes, seal};
use crate::{
    Draft, LedgerError, LogKey, LogStore, Result, StoredArchive, StoredCheckpoint, StoredReceipt,
    ToolDefinition,
};

/// The next index: after the last row, or after the archive when no row is left.
fn size(conn: &Connection) -> Result<u64> {
    let n: i64 = conn
        .prepare_cached("SELECT max((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT coalesce(max(before), 0) FROM archives)) AS n")?
        .query_row([], |r| r.get("n"))?;
    Ok(n as u64)
}

pub fn log_size(conn: &Connection) -> Result<u64> {
    size(conn)
}

pub fn append(conn: &Connection, digests: &Dictionary, drafts: Vec<Draft>) -> Result<Vec<u64>> {
    if drafts.is_empty() {
        return Ok(Vec::new());
    }
    // Seal everything before writing anything: a seal that fails leaves no row.
    let first = size(conn)?;
    let mut rows = Vec::with_capacity(drafts.len());
    for (i, draft) in drafts.into_iter().enumerate() {
        rows.push(seal(draft, first + i as u64, digests)?.0);
    }
    let indexes: Vec<u64> = (first..first + rows.len() as u64).collect();
    for (&i, row) in indexes.iter().zip(rows) {
        insert(conn, i, row)?;
    }
    Ok(indexes)
}

/// One sealed row at `index` (the table's trigger refuses a gap).
pub fn insert(conn: &Connection, index: u64, row: crate::receipts::Row) -> Result<()> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO receipts (log_index, body, salt, proposal) VALUES (?1, ?2, ?3, ?4)",
    )?;
    insert.execute(params![index as i64, row.body, &row.salt[..], row.asked])?;
    Ok(())
}

fn hash(r: &Row<'_>, column: &str) -> rusqlite::Result<Hash> {
    let v: Vec<u8> = r.get(column)?;
    v.try_into().map_err(|_| {
        let i = r.as_ref().column_index(column).unwrap_or_default();
        rusqlite::Error::InvalidColumnType(i, "hash".into(), rusqlite::types::Type::Blob)
    })
}

#[cfg(test)]
pub fn list(
    conn: &Connection,
    digests: &Dictionary,
    from: u64,
    limit: u64,
) -> Result<Vec<StoredReceipt>> {
    learn_digests(conn, digests)?;
    raw(conn, from, limit)?.into_iter().map(|r| r.decode(digests)).collect()
}

/// Learns the numbers of the dictionary of digests above those `digests`
/// knows. Read at the start of a transaction, they are all committed.
pub fn learn_digests(conn: &Connection, digests: &Dictionary) -> Result<()> {
    let mut stmt =
        conn.prepare_cached("SELECT id, digest FROM digests WHERE id > ?1 ORDER BY id")?;
    let learned = stmt
        .query_map([digests.max_id() as i64], |r| {
            Ok((r.get::<_, i64>("id")? as u64, r.get::<_, Vec<u8>>("digest")?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    digests.learn(learned);
    Ok(())
}

/// Numbers the digests rows met without one (in the open transaction: the
/// next one learns them, once committed).
pub fn add_digests(conn: &Connection, digests: &Dictionary) -> Result<()> {
    let pending = digests.take_pending();
    if pending.is_empty() {
        return Ok(());
    }
    let mut insert = conn.prepare_cached("INSERT OR IGNORE INTO digests (digest) VALUES (?1)")?;
    for raw in pending {
        insert.execute([raw])?;
    }
    Ok(())
}

/// A row as read, not yet decoded: reading is what the connection's holder
/// does; decoding (and hashing) can be done by whoever asked, off the writer.
pub struct RawRow {
    log_index: u64,
    body: Vec<u8>,
    salt: [u8; 32],
    asked: Option<String>,
}

impl RawRow {
    pub fn decode(self, digests: &Dictionary) -> Result<StoredReceipt> {
        StoredReceipt::from_row(self.log_index, &self.body, self.salt, self.asked, digests)
    }

    pub fn log_index(&self) -> u64 {
        self.log_index
    }

    /// Its leaf hash, if this process sealed this very row lately.
    pub fn recalled(&self, recent: &RecentLeaves) -> Option<Hash> {
        recent.recall(self.log_index, &self.salt, &self.body)
    }
}

pub fn raw(conn: &Connection, from: u64, limit: u64) -> Result<Vec<RawRow>> {
    let mut stmt = conn.prepare_cached("SELECT log_index, body, salt, proposal FROM receipts WHERE log_index >= ?1 ORDER BY log_index LIMIT ?2")?;
    let mut rows = stmt.query(params![from as i64, limit.min(i64::MAX as u64) as i64])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        // A row written before the compact form holds TEXT; SQLite hands it over as bytes either way.
        let body = r
            .get_ref("body")?
            .as_bytes()
            .map_err(|e| LedgerError::Store(format!("a stored receipt body: {e}")))?
            .to_vec();
        out.push(RawRow {
            log_index: r.get::<_, i64>("log_index")? as u64,
            body,
            salt: hash(r, "salt")?,
            asked: r.get("proposal")?,
        });
    }
    Ok(out)
}

pub fn archived(conn: &Connection) -> Result<Option<StoredArchive>> {
    let mut stmt = conn.prepare_cached(
        "SELECT before, root, frontier, archived_ms FROM archives ORDER BY before DESC LIMIT 1",
    )?;
    let row = stmt
        .query_row([], |r| {
            Ok((
                r.get::<_, i64>("before")?,
                hash(r, "root")?,
                r.get::<_, Vec<u8>>("frontier")?,
                r.get::<_, i64>("archived_ms")?,
            ))
        })
        .optional()?;
    row.map(|(before, root, frontier, archived_ms)| {
        Ok(StoredArchive { before: before as u64, root, frontier: hashes(&frontier)?, archived_ms })
    })
    .transpose()
}

pub fn record_archive(conn: &Connection, a: &StoredArchive) -> Result<()> {
    conn.execute(
        "INSERT INTO archives (before, root, frontier, archived_ms) VALUES (?1, ?2, ?3, ?4)",
        params![a.before as i64, &a.root[..], a.frontier.concat(), a.archived_ms],
    )?;
    Ok(())
}

/// Removes up to `chunk` of the rows below `before` (archived); how many went.
pub fn drop_archived(conn: &Connection, before: u64, chunk: u64) -> Result<u64> {
    let sql = "DELETE FROM receipts WHERE log_index IN (SELECT log_index FROM receipts WHERE log_index < ?1 ORDER BY log_index LIMIT ?2)";
    Ok(conn.prepare_cached(sql)?.execute(params![before as i64, chunk as i64])? as u64)
}

pub fn drop_covered_checkpoints(conn: &Connection, chunk: u64) -> Result<u64> {
    let sql = "DELETE FROM checkpoints WHERE size IN (SELECT size FROM checkpoints \
               WHERE size < (SELECT coalesce(max(before), 0) FROM archives) ORDER BY size LIMIT ?1)";
    Ok(conn.prepare_cached(sql)?.execute([chunk as i64])? as u64)
}

pub fn add_checkpoint(conn: &Connection, c: &StoredCheckpoint) -> Result<bool> {
    let n = conn
        .prepare_cached("INSERT INTO checkpoints (size, root, note, created_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (size) DO NOTHING")?
        .execute(params![c.size as i64, &c.root[..], c.note, c.created_ms])?;
    Ok(n == 1)
}

pub fn checkpoints(conn: &Connection) -> Result<Vec<StoredCheckpoint>> {
    let mut stmt =
        conn.prepare_cached("SELECT size, root, note, created_ms FROM checkpoints ORDER BY size")?;
    let rows = stmt.query_map([], stored_checkpoint)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn checkpoint(conn: &Connection, size: Option<u64>) -> Result<Option<StoredCheckpoint>> {
    Ok(match size {
        Some(size) => conn
            .prepare_cached("SELECT size, root, note, created_ms FROM checkpoints WHERE size = ?1")?
            .query_row([size as i64], stored_checkpoint),
        None => conn
            .prepare_cached(
                "SELECT size, root, note, created_ms FROM checkpoints ORDER BY size DESC LIMIT 1",
            )?
            .query_row([], stored_checkpoint),
    }
    .optional()?)
}

fn stored_checkpoint(r: &Row<'_>) -> rusqlite::Result<StoredCheckpoint> {
    Ok(StoredCheckpoint {
        size: r.get::<_, i64>("size")? as u64,
        root: hash(r, "root")?,
        note: r.get("note")?,
        created_ms: r.get("created_ms")?,
    })
}

pub fn add_key(conn: &Connection, k: &LogKey) -> Result<()> {
    let existing: Option<String> = conn
        .query_row("SELECT ed25519 FROM log_keys WHERE kid = ?1", [&k.kid], |r| r.get("ed25519"))
        .optional()?;
    match existing {
        Some(ed) if ed != k.ed25519 => Err(LedgerError::Store(format!(
            "the key history already holds another key under kid {}",
            k.kid
        ))),
        Some(_) => Ok(()),
        None => {
            conn.execute(
                "INSERT INTO log_keys (kid, ed25519, ml_dsa_65, created_ms) VALUES \
                    (?1, ?2, ?3, ?4)",
                params![k.kid, k.ed25519, k.ml_dsa_65, k.created_ms],
            )?;
            Ok(())
        }
    }
}

pub fn keys(conn: &Connection) -> Result<Vec<LogKey>> {
    let mut stmt = conn.prepare_cached(
        "SELECT kid, ed25519, ml_dsa_65, created_ms FROM log_keys ORDER BY created_ms, kid",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(LogKey {
            kid: r.get("kid")?,
            ed25519: r.get("ed25519")?,
            ml_dsa_65: r.get("ml_dsa_65")?,
            created_ms: r.get("created_ms")?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn add_definitions(conn: &Connection, defs: &[ToolDefinition], now_ms: i64) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO tool_definitions (sha256, server, tool, definition, first_ms) VALUES \
            (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sha256) DO NOTHING",
    )?;
    for d in defs {
        stmt.execute(params![d.sha256, d.server, d.tool, d.definition, now_ms])?;
    }
    Ok(())
}

pub fn definitions(conn: &Connection) -> Result<Vec<ToolDefinition>> {
    let mut stmt = conn.prepare_cached("SELECT sha256, server, tool, definition FROM tool_definitions ORDER BY server, tool, first_ms")?;
    let rows = stmt.query_map([], |r| {
        Ok(ToolDefinition {
            sha256: r.get("sha256")?,
            server: r.get("server")?,
            tool: r.get("tool")?,
            definition: r.get("definition")?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[async_trait::async_trait]
impl LogStore for SqliteLedger {
    async fn append_receipts(&self, drafts: Vec<Draft>) -> Result<Vec<u64>> {
        if let Some(why) = self.stopped.get() {
            return Err(LedgerError::Store(why.clone()));
        }
        // Sequenced on this thread if the sequence is free now; else (a
        // transaction holds it) the receipts join the writer's batch.
        let drafts = match self.sequenced(drafts)? {
            Ok(indexes) => return Ok(indexes),
            Err(drafts) => drafts,
        };
        // One receipt is one row: it needs no savepoint of its own.
        let isolated = drafts.len() > 1;
        let digests = self.digests.clone();
        self.queue(move |c| append(c, &digests, drafts), false, isolated, true).await
    }
    async fn receipts(&self, from: u64, limit: u64) -> Result<Vec<StoredReceipt>> {
        decoded(self.read_many(move |c| raw(c, from, limit)).await?, self.digests.clone()).await
    }
    async fn log_size(&self) -> Result<u64> {
        self.read(log_size).await
    }
    async fn leaf_hashes(&self, from: u64, to: u64) -> Result<Vec<Hash>> {
        let rows = self.read_many(move |c| raw(c, from, to.saturating_sub(from))).await?;
        // The rows this process sealed lately are not decoded again (see `recent`).
        let first = rows.first().map(RawRow::log_index);
        let recalled: Vec<Option<Hash>> = rows.iter().map(|r| r.recalled(&self.recent)).collect();
        let missed = rows
            .into_iter()
            .zip(&recalled)
            .filter(|(_, leaf)| leaf.is_none())
            .map(|(row, _)| row)
            .collect();
        let mut decoded = decoded(missed, self.digests.clone()).await?.into_iter();
        let leaves = recalled
            .into_iter()
            .map(|leaf| leaf.or_else(|| decoded.next().map(|r| r.leaf_hash)))
            .collect::<Option<Vec<Hash>>>();
        contiguous(leaves.unwrap_or_default(), first, from, to)
    }
    async fn archived(&self) -> Result<Option<StoredArchive>> {
        self.read(archived).await
    }
    async fn archive(&self, archive: StoredArchive) -> Result<u64> {
        let before = archive.before;
        self.run(move |c| record_archive(c, &archive)).await?;
        chunked(|| self.run(move |c| drop_archived(c, before, ARCHIVE_CHUNK))).await
    }
    async fn drop_covered_checkpoints(&self) -> Result<u64> {
        chunked(|| self.run(|c| drop_covered_checkpoints(c, ARCHIVE_CHUNK))).await
    }
    async fn add_checkpoint(&self, checkpoint: StoredCheckpoint) -> Result<bool> {
        self.run(move |c| add_checkpoint(c, &checkpoint)).await
    }
    async fn checkpoints(&self) -> Result<Vec<StoredCheckpoint>> {
        self.read_synced(checkpoints).await
    }
    async fn checkpoint(&self, size: Option<u64>) -> Result<Option<StoredCheckpoint>> {
        self.read_synced(move |c| checkpoint(c, size)).await
    }
    async fn add_log_key(&self, key: LogKey) -> Result<()> {
        self.run(move |c| add_key(c, &key)).await
    }
    async fn log_keys(&self) -> Result<Vec<LogKey>> {
        self.read_many(keys).await
    }
    async fn add_tool_definitions(
        &self,
        definitions: Vec<ToolDefinition>,
        now_ms: i64,
    ) -> Result<()> {
        self.run(move |c| add_definitions(c, &definitions, now_ms)).await
    }
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>> {
        self.read_many(definitions).await
    }
}

/// Rows decoded (their leaves rebuilt and hashed) on a blocking thread: a
/// checkpoint's thousand rows take milliseconds, which neither the writer
/// (every append would wait) nor an async worker should spend.
async fn decoded(rows: Vec<RawRow>, digests: Arc<Dictionary>) -> Result<Vec<StoredReceipt>> {
    if rows.len() < 64 {
        return rows.into_iter().map(|r| r.decode(&digests)).collect();
    }
    tokio::task::spawn_blocking(move || rows.into_iter().map(|r| r.decode(&digests)).collect())
        .await
        .map_err(|e| LedgerError::Store(format!("decoding receipts: {e}")))?
}
