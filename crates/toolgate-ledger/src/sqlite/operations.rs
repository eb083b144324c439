//! The operations table on SQLite; each function runs inside the writer's
//! transaction, so `begin` reads and writes as one step.

use rusqlite::{Connection, OptionalExtension, Row, params};
use toolgate_core::operation::{self, Operation, OperationKey, OperationState, Reuse};

use super::SqliteLedger;
use crate::receipts::{ARCHIVE_CHUNK, chunked};
use crate::{Begun, Draft, LedgerError, NewOperation, OperationStore, Resolution, Result};

const COLUMNS: &str = "id, tenant, server, tool, op_key, caller, proposal_sha256, approval_id, state, outcome, attempts, \
                       created_ms, updated_ms, lease_until_ms, resolved_by, resolution, arguments, subject";

fn row(r: &Row<'_>) -> rusqlite::Result<Operation> {
    let state: String = r.get("state")?;
    Ok(Operation {
        id: r.get("id")?,
        key: OperationKey {
            tenant: r.get("tenant")?,
            subject: r.get("subject")?,
            server: r.get("server")?,
            tool: r.get("tool")?,
            value: r.get("op_key")?,
        },
        caller: r.get("caller")?,
        proposal_sha256: r.get("proposal_sha256")?,
        approval_id: r.get("approval_id")?,
        state: OperationState::parse(&state).ok_or_else(|| {
            let i = r.as_ref().column_index("state").unwrap_or_default();
            rusqlite::Error::InvalidColumnType(i, state, rusqlite::types::Type::Text)
        })?,
        outcome: r.get("outcome")?,
        attempts: r.get("attempts")?,
        created_ms: r.get("created_ms")?,
        updated_ms: r.get("updated_ms")?,
        lease_until_ms: r.get("lease_until_ms")?,
        resolved_by: r.get("resolved_by")?,
        resolution: r.get("resolution")?,
        arguments: {
            let text: String = r.get("arguments")?;
            serde_json::from_str(&text).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    r.as_ref().column_index("arguments").unwrap_or_default(),
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?
        },
    })
}

pub fn find(conn: &Connection, id: &str) -> Result<Option<Operation>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM operations WHERE id = ?1"))?
        .query_row([id], row)
        .optional()?)
}

fn get(conn: &Connection, id: &str) -> Result<Operation> {
    find(conn, id)?.ok_or_else(|| LedgerError::OperationNotFound(id.to_string()))
}

pub fn by_key(conn: &Connection, k: &OperationKey) -> Result<Option<Operation>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM operations WHERE tenant = ?1 AND server = ?2 AND tool = ?3 AND \
                op_key = ?4 AND subject = ?5"
        ))?
        .query_row(params![k.tenant, k.server, k.tool, k.value, k.subject], row)
        .optional()?)
}

pub fn begin(conn: &Connection, new: &NewOperation, now_ms: i64) -> Result<Begun> {
    let k = &new.key;
    let inserted = conn.prepare_cached(&format!(
        "INSERT INTO operations ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'reserved', NULL, 1, ?9, ?9, ?10, NULL, NULL, ?11, ?12) \
         ON CONFLICT (tenant, subject, server, tool, op_key) DO NOTHING"
    ))?
    .execute(params![new.id, k.tenant, k.server, k.tool, k.value, new.caller, new.proposal_sha256, new.approval_id, now_ms, new.lease_until_ms, new.arguments.to_string(), k.subject])?;
    if inserted == 1 {
        return Ok(Begun::Mine(get(conn, &new.id)?));
    }
    let existing = by_key(conn, k)?.ok_or_else(|| {
        LedgerError::Store("an operation key conflicted but no row holds it".into())
    })?;
    match operation::reuse(&existing, &new.proposal_sha256, now_ms) {
        Reuse::TakeOver => {
            conn.execute(
                "UPDATE operations SET state = 'reserved', attempts = attempts + 1, caller = ?2, approval_id = ?3, lease_until_ms = ?4, \
                 updated_ms = ?5 WHERE id = ?1",
                params![existing.id, new.caller, new.approval_id, new.lease_until_ms, now_ms],
            )?;
            Ok(Begun::Mine(get(conn, &existing.id)?))
        }
        Reuse::Unknown if existing.state == OperationState::Dispatched => {
            lapse(conn, now_ms)?;
            Ok(Begun::Theirs(get(conn, &existing.id)?))
        }
        _ => Ok(Begun::Theirs(existing)),
    }
}

/// Dispatched operations whose holder's lease lapsed: their outcome is unknown.
fn lapse(conn: &Connection, now_ms: i64) -> Result<usize> {
    Ok(conn
        .prepare_cached("UPDATE operations SET state = 'unknown', updated_ms = ?1 WHERE state = 'dispatched' AND lease_until_ms <= ?1")?
        .execute([now_ms])?)
}

pub fn dispatched(
    conn: &Connection,
    id: &str,
    attempt: i64,
    lease_until_ms: i64,
    now_ms: i64,
) -> Result<Operation> {
    let changed = conn
        .prepare_cached(
            "UPDATE operations SET state = 'dispatched', lease_until_ms = ?2, updated_ms = ?3 \
                WHERE id = ?1 AND state = 'reserved' AND attempts = ?4",
        )?
        .execute(params![id, lease_until_ms, now_ms, attempt])?;
    changed_or_wrong(conn, id, changed, "only the holder of a reserved operation can dispatch it")
}

pub fn finish(
    conn: &Connection,
    id: &str,
    attempt: i64,
    state: OperationState,
    outcome: Option<&str>,
    now_ms: i64,
) -> Result<Operation> {
    let changed = conn
        .prepare_cached("UPDATE operations SET state = ?2, outcome = ?3, updated_ms = ?4 WHERE id = ?1 AND state = 'dispatched' AND attempts = ?5")?
        .execute(params![id, state.as_str(), outcome, now_ms, attempt])?;
    changed_or_wrong(conn, id, changed, "only the holder of a dispatched operation can finish it")
}

pub fn resolve(conn: &Connection, id: &str, r: &Resolution) -> Result<Operation> {
    lapse(conn, r.now_ms)?;
    let state = if r.applied {
        OperationState::ReconciledApplied
    } else {
        OperationState::ReconciledNotApplied
    };
    // "Not applied" lets the key run again: not while the dispatch may
    // still be running upstream (its lease is the deadline plus a grace).
    let changed = conn.execute(
        "UPDATE operations SET state = ?2, outcome = ?3, resolved_by = ?4, resolution = ?5, updated_ms = ?6 \
         WHERE id = ?1 AND state = 'unknown' AND (?7 OR lease_until_ms <= ?6)",
        params![id, state.as_str(), r.outcome, r.by, r.reason, r.now_ms, r.applied],
    )?;
    changed_or_wrong(conn, id, changed, crate::operations::settle_rule(r.applied))
}

fn changed_or_wrong(
    conn: &Connection,
    id: &str,
    changed: usize,
    what: &'static str,
) -> Result<Operation> {
    let op = get(conn, id)?;
    if changed == 1 {
        return Ok(op);
    }
    Err(LedgerError::WrongState { id: id.to_string(), state: op.state.as_str(), what })
}

pub fn list(
    conn: &Connection,
    tenant: Option<&str>,
    state: Option<OperationState>,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<Operation>> {
    lapse(conn, now_ms)?;
    // `state = ?1` spelled out when given, so the (state, created_ms) index
    // finds the rows: `?1 IS NULL OR …` read and sorted the whole table,
    // on the writer, on every call that counts pending approvals and every
    // poll of an approver — a cost that grew with the ledger. Without a
    // state, the index on creation gives the newest first (migration 11).
    let filter = if state.is_some() { "state = ?1" } else { "?1 IS NULL" };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM operations WHERE {filter} AND (?2 IS NULL OR tenant = ?2) ORDER BY created_ms DESC, rowid DESC LIMIT ?3"
    ))?;
    let limit = limit.min(i64::MAX as usize) as i64;
    let rows =
        stmt.query_map(rusqlite::params![state.map(OperationState::as_str), tenant, limit], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Settled operations last changed before `before_ms`, up to `chunk` of them.
pub fn prune(conn: &Connection, before_ms: i64, chunk: u64) -> Result<u64> {
    const SQL: &str = crate::operations::prune_operations_sql!("?");
    Ok(conn.prepare_cached(SQL)?.execute(params![before_ms, chunk as i64])? as u64)
}

#[async_trait::async_trait]
impl OperationStore for SqliteLedger {
    async fn begin_operation(&self, mut new: NewOperation, now_ms: i64) -> Result<Begun> {
        let digests = self.digests.clone();
        self.run(move |c| {
            let receipt = new.receipt.take();
            let begun = begin(c, &new, now_ms)?;
            if let (Begun::Mine(_), Some(draft)) = (&begun, receipt) {
                super::receipts::append(c, &digests, vec![draft])?;
            }
            Ok(begun)
        })
        .await
    }
    async fn mark_dispatched(
        &self,
        id: &str,
        attempt: i64,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<Operation> {
        let id = id.to_string();
        self.run(move |c| dispatched(c, &id, attempt, lease_until_ms, now_ms)).await
    }
    async fn finish_operation(
        &self,
        id: &str,
        attempt: i64,
        state: OperationState,
        outcome: Option<String>,
        now_ms: i64,
        receipt: Option<Draft>,
    ) -> Result<Operation> {
        let (id, digests) = (id.to_string(), self.digests.clone());
        self.run(move |c| {
            let op = finish(c, &id, attempt, state, outcome.as_deref(), now_ms)?;
            super::receipts::append(c, &digests, receipt.into_iter().collect())?;
            Ok(op)
        })
        .await
    }
    async fn operation(&self, id: &str) -> Result<Option<Operation>> {
        let id = id.to_string();
        self.read(move |c| find(c, &id)).await
    }
    async fn operation_by_key(&self, key: &OperationKey) -> Result<Option<Operation>> {
        let key = key.clone();
        self.read(move |c| by_key(c, &key)).await
    }
    async fn operations(
        &self,
        tenant: Option<&str>,
        state: Option<OperationState>,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Operation>> {
        let tenant = tenant.map(str::to_string);
        self.run(move |c| list(c, tenant.as_deref(), state, now_ms, limit)).await
    }
    async fn resolve_operation(&self, id: &str, mut resolution: Resolution) -> Result<Operation> {
        let (id, digests) = (id.to_string(), self.digests.clone());
        self.run(move |c| {
            let receipt = resolution.receipt.take();
            let op = resolve(c, &id, &resolution)?;
            super::receipts::append(c, &digests, receipt.into_iter().collect())?;
            Ok(op)
        })
        .await
    }
    async fn prune_operations(&self, settled_before_ms: i64) -> Result<u64> {
        chunked(|| self.run(move |c| prune(c, settled_before_ms, ARCHIVE_CHUNK))).await
    }
}
