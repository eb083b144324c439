//! The receipt log on PostgreSQL. An append runs in a transaction that first
//! takes the log's advisory lock: replicas append one batch at a time, each
//! reads the next index and takes it in one step, and a receipt commits (or
//! not) with the state change it attests. A replica's reads' receipts come
//! in batches (see `sequencer`): the lock is taken once per batch, not per
//! receipt.

use tokio_postgres::Row;
use toolgate_core::merkle::Hash;

use super::PostgresLedger;
use super::pool::Db;
use crate::digests::Dictionary;
use crate::receipts::{ARCHIVE_CHUNK, Row as Sealed, chunked, hashes, seal};
use crate::{
    Draft, LedgerError, LogKey, LogStore, Result, StoredArchive, StoredCheckpoint, StoredReceipt,
    ToolDefinition,
};

/// The log's lock (the migrations' is 7461001).
const LOG_LOCK: i64 = 7_461_002;

/// Inside a transaction only: the lock is held until it ends.
pub async fn append(tx: &impl Db, digests: &Dictionary, drafts: Vec<Draft>) -> Result<Vec<u64>> {
    append_each(tx, digests, vec![drafts]).await?.pop().expect("one request, one answer")
}

/// Several requests' receipts, under one take of the log's lock and in one
/// statement: each request gets its indexes, or why its receipts could not
/// be sealed (then it takes none, and the others are unaffected). Inside a
/// transaction only.
pub async fn append_each(
    tx: &impl Db,
    digests: &Dictionary,
    requests: Vec<Vec<Draft>>,
) -> Result<Vec<Result<Vec<u64>>>> {
    if requests.iter().all(Vec::is_empty) {
        return Ok(requests.into_iter().map(|_| Ok(Vec::new())).collect());
    }
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOG_LOCK]).await?;
    let mut next = log_size(tx).await?;
    let (mut indexes, mut bodies, mut salts, mut asked) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut answers = Vec::with_capacity(requests.len());
    for drafts in requests {
        // Sealed whole or not at all: a request's receipts are adjacent.
        let first = next;
        let sealed: Result<Vec<Sealed>> = drafts
            .into_iter()
            .enumerate()
            .map(|(i, d)| seal(d, first + i as u64, digests).map(|(row, _)| row))
            .collect();
        match sealed {
            Ok(rows) => {
                next = first + rows.len() as u64;
                for (i, row) in (first..).zip(rows) {
                    indexes.push(i as i64);
                    bodies.push(row.body);
                    salts.push(row.salt.to_vec());
                    asked.push(row.asked);
                }
                answers.push(Ok((first..next).collect()));
            }
            Err(e) => answers.push(Err(e)),
        }
    }
    // In index order (the table's trigger refuses a gap), one round trip.
    tx.execute(
        "INSERT INTO receipts (log_index, body, salt, proposal) \
         SELECT i, b, s, p FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::text[]) AS r(i, b, s, p) ORDER BY i",
        &[&indexes, &bodies, &salts, &asked],
    )
    .await?;
    // The digests these rows met without a number get one, in this
    // transaction; rows name them once it committed and a batch learned them.
    let pending = digests.take_pending();
    if !pending.is_empty() {
        tx.execute("INSERT INTO digests (digest) SELECT unnest($1::bytea[]) ON CONFLICT (digest) DO NOTHING", &[&pending]).await?;
    }
    Ok(answers)
}

/// Learns the numbers of the dictionary of digests above those `digests`
/// knows. `db` must not be a transaction that added some: read outside one,
/// they are all committed.
pub async fn learn_digests(db: &impl Db, digests: &Dictionary) -> Result<()> {
    let rows = db
        .query(
            "SELECT id, digest FROM digests WHERE id > $1 ORDER BY id",
            &[&(digests.max_id() as i64)],
        )
        .await?;
    digests.learn(
        rows.iter()
            .map(|r| (r.get::<_, i64>("id") as u64, r.get::<_, Vec<u8>>("digest")))
            .collect(),
    );
    Ok(())
}

/// The next index: after the last row, or after the archive when no row is left.
pub async fn log_size(db: &impl Db) -> Result<u64> {
    let row = db
        .query_opt(
            "SELECT greatest((SELECT coalesce(max(log_index) + 1, 0) FROM receipts), (SELECT \
                coalesce(max(before), 0) FROM archives)) AS n",
            &[],
        )
        .await?;
    Ok(row.map_or(0, |r| r.get::<_, i64>("n")) as u64)
}

pub async fn archived(db: &impl Db) -> Result<Option<StoredArchive>> {
    let Some(r) = db
        .query_opt(
            "SELECT before, root, frontier, archived_ms FROM archives ORDER BY before DESC LIMIT 1",
            &[],
        )
        .await?
    else {
        return Ok(None);
    };
    let frontier: Vec<u8> = r.get("frontier");
    Ok(Some(StoredArchive {
        before: r.get::<_, i64>("before") as u64,
        root: hash(&r, "root")?,
        frontier: hashes(&frontier)?,
        archived_ms: r.get("archived_ms"),
    }))
}

pub async fn record_archive(db: &impl Db, a: &StoredArchive) -> Result<()> {
    let before = a.before as i64;
    db.execute(
        "INSERT INTO archives (before, root, frontier, archived_ms) VALUES ($1, $2, $3, $4)",
        &[&before, &&a.root[..], &a.frontier.concat(), &a.archived_ms],
    )
    .await?;
    Ok(())
}

/// Removes up to `chunk` of the rows below `before` (archived); how many went.
pub async fn drop_archived(db: &impl Db, before: u64, chunk: u64) -> Result<u64> {
    let sql = "DELETE FROM receipts WHERE log_index IN (SELECT log_index FROM receipts WHERE log_index < $1 ORDER BY log_index LIMIT $2)";
    Ok(db.execute(sql, &[&(before as i64), &(chunk as i64)]).await?)
}

fn hash(r: &Row, column: &str) -> Result<Hash> {
    r.get::<_, Vec<u8>>(column)
        .try_into()
        .map_err(|_| LedgerError::Store(format!("a stored {column} is not 32 bytes")))
}

/// Outside a transaction only (the dictionary is read after the rows: every
/// number they name is committed by then).
pub async fn list(
    db: &impl Db,
    digests: &Dictionary,
    from: u64,
    limit: u64,
) -> Result<Vec<StoredReceipt>> {
    let (from, limit) = (from as i64, limit.min(i64::MAX as u64) as i64);
    let rows = db
        .query(
            "SELECT log_index, body, salt, proposal FROM receipts WHERE log_index >= $1 ORDER BY \
                log_index LIMIT $2",
            &[&from, &limit],
        )
        .await?;
    learn_digests(db, digests).await?;
    rows.iter()
        .map(|r| {
            StoredReceipt::from_row(
                r.get::<_, i64>("log_index") as u64,
                r.get("body"),
                hash(r, "salt")?,
                r.get("proposal"),
                digests,
            )
        })
        .collect()
}

/// The leaves' hashes, from their rows (a row keeps no hash of its own).
pub async fn leaf_hashes(
    db: &impl Db,
    digests: &Dictionary,
    from: u64,
    to: u64,
) -> Result<Vec<Hash>> {
    StoredReceipt::leaf_hashes(list(db, digests, from, to.saturating_sub(from)).await?, from, to)
}

pub async fn drop_covered_checkpoints(db: &impl Db, chunk: u64) -> Result<u64> {
    let sql = "DELETE FROM checkpoints WHERE size IN (SELECT size FROM checkpoints \
               WHERE size < (SELECT coalesce(max(before), 0) FROM archives) ORDER BY size LIMIT $1)";
    Ok(db.execute(sql, &[&(chunk as i64)]).await?)
}

pub async fn add_checkpoint(db: &impl Db, c: &StoredCheckpoint) -> Result<bool> {
    let size = c.size as i64;
    let n = db
        .execute(
            "INSERT INTO checkpoints (size, root, note, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (size) DO NOTHING",
            &[&size, &&c.root[..], &c.note, &c.created_ms],
        )
        .await?;
    Ok(n == 1)
}

pub async fn checkpoints(db: &impl Db) -> Result<Vec<StoredCheckpoint>> {
    let rows = db.query("SELECT * FROM checkpoints ORDER BY size", &[]).await?;
    rows.iter().map(stored_checkpoint).collect()
}

pub async fn checkpoint(db: &impl Db, size: Option<u64>) -> Result<Option<StoredCheckpoint>> {
    let row = match size {
        Some(size) => {
            db.query_opt("SELECT * FROM checkpoints WHERE size = $1", &[&(size as i64)]).await?
        }
        None => db.query_opt("SELECT * FROM checkpoints ORDER BY size DESC LIMIT 1", &[]).await?,
    };
    row.as_ref().map(stored_checkpoint).transpose()
}

fn stored_checkpoint(r: &Row) -> Result<StoredCheckpoint> {
    Ok(StoredCheckpoint {
        size: r.get::<_, i64>("size") as u64,
        root: hash(r, "root")?,
        note: r.get("note"),
        created_ms: r.get("created_ms"),
    })
}

pub async fn add_key(db: &impl Db, k: &LogKey) -> Result<()> {
    db.execute(
        "INSERT INTO log_keys (kid, ed25519, ml_dsa_65, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (kid) DO NOTHING",
        &[&k.kid, &k.ed25519, &k.ml_dsa_65, &k.created_ms],
    )
    .await?;
    let stored = db.query_opt("SELECT ed25519 FROM log_keys WHERE kid = $1", &[&k.kid]).await?;
    match stored.map(|r| r.get::<_, String>("ed25519")) {
        Some(ed) if ed == k.ed25519 => Ok(()),
        _ => Err(LedgerError::Store(format!(
            "the key history already holds another key under kid {}",
            k.kid
        ))),
    }
}

pub async fn keys(db: &impl Db) -> Result<Vec<LogKey>> {
    let rows = db.query("SELECT * FROM log_keys ORDER BY created_ms, kid", &[]).await?;
    Ok(rows
        .iter()
        .map(|r| LogKey {
            kid: r.get("kid"),
            ed25519: r.get("ed25519"),
            ml_dsa_65: r.get("ml_dsa_65"),
            created_ms: r.get("created_ms"),
        })
        .collect())
}

pub async fn add_definitions(db: &impl Db, defs: &[ToolDefinition], now_ms: i64) -> Result<()> {
    for d in defs {
        db.execute(
            "INSERT INTO tool_definitions (sha256, server, tool, definition, first_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (sha256) DO NOTHING",
            &[&d.sha256, &d.server, &d.tool, &d.definition, &now_ms],
        )
        .await?;
    }
    Ok(())
}

pub async fn definitions(db: &impl Db) -> Result<Vec<ToolDefinition>> {
    let rows =
        db.query("SELECT * FROM tool_definitions ORDER BY server, tool, first_ms", &[]).await?;
    Ok(rows
        .iter()
        .map(|r| ToolDefinition {
            sha256: r.get("sha256"),
            server: r.get("server"),
            tool: r.get("tool"),
            definition: r.get("definition"),
        })
        .collect())
}

#[async_trait::async_trait]
impl LogStore for PostgresLedger {
    async fn append_receipts(&self, drafts: Vec<Draft>) -> Result<Vec<u64>> {
        self.sequencer.append(drafts).await
    }
    async fn receipts(&self, from: u64, limit: u64) -> Result<Vec<StoredReceipt>> {
        list(&*self.pool, &self.digests, from, limit).await
    }
    async fn log_size(&self) -> Result<u64> {
        log_size(&*self.pool).await
    }
    async fn leaf_hashes(&self, from: u64, to: u64) -> Result<Vec<Hash>> {
        leaf_hashes(&*self.pool, &self.digests, from, to).await
    }
    async fn archived(&self) -> Result<Option<StoredArchive>> {
        archived(&*self.pool).await
    }
    async fn archive(&self, archive: StoredArchive) -> Result<u64> {
        record_archive(&*self.pool, &archive).await?;
        chunked(|| drop_archived(&*self.pool, archive.before, ARCHIVE_CHUNK)).await
    }
    async fn drop_covered_checkpoints(&self) -> Result<u64> {
        chunked(|| drop_covered_checkpoints(&*self.pool, ARCHIVE_CHUNK)).await
    }
    async fn add_checkpoint(&self, checkpoint: StoredCheckpoint) -> Result<bool> {
        add_checkpoint(&*self.pool, &checkpoint).await
    }
    async fn checkpoints(&self) -> Result<Vec<StoredCheckpoint>> {
        checkpoints(&*self.pool).await
    }
    async fn checkpoint(&self, size: Option<u64>) -> Result<Option<StoredCheckpoint>> {
        checkpoint(&*self.pool, size).await
    }
    async fn add_log_key(&self, key: LogKey) -> Result<()> {
        add_key(&*self.pool, &key).await
    }
    async fn log_keys(&self) -> Result<Vec<LogKey>> {
        keys(&*self.pool).await
    }
    async fn add_tool_definitions(
        &self,
        definitions: Vec<ToolDefinition>,
        now_ms: i64,
    ) -> Result<()> {
        add_definitions(&*self.pool, &definitions, now_ms).await
    }
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>> {
        definitions(&*self.pool).await
    }
}
