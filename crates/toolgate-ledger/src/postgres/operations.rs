//! The operations table on PostgreSQL. `begin` is an insert that yields on
//! the unique key, then conditional updates that name the state they saw:
//! of two replicas racing one key, exactly one holds it.

use tokio_postgres::Row;
use toolgate_core::operation::{self, Operation, OperationKey, OperationState, Reuse};

use super::PostgresLedger;
use super::pool::Db;
use crate::receipts::{ARCHIVE_CHUNK, chunked};
use crate::{Begun, Draft, LedgerError, NewOperation, OperationStore, Resolution, Result};

fn op(r: &Row) -> Result<Operation> {
    let state: String = r.get("state");
    Ok(Operation {
        id: r.get("id"),
        key: OperationKey {
            tenant: r.get("tenant"),
            subject: r.get("subject"),
            server: r.get("server"),
            tool: r.get("tool"),
            value: r.get("op_key"),
        },
        caller: r.get("caller"),
        proposal_sha256: r.get("proposal_sha256"),
        approval_id: r.get("approval_id"),
        state: OperationState::parse(&state)
            .ok_or_else(|| LedgerError::Store(format!("unknown operation state `{state}`")))?,
        outcome: r.get("outcome"),
        attempts: r.get("attempts"),
        created_ms: r.get("created_ms"),
        updated_ms: r.get("updated_ms"),
        lease_until_ms: r.get("lease_until_ms"),
        resolved_by: r.get("resolved_by"),
        resolution: r.get("resolution"),
        arguments: serde_json::from_str(r.get::<_, &str>("arguments"))
            .map_err(|e| LedgerError::Store(format!("stored arguments are not JSON: {e}")))?,
    })
}

pub async fn find(pool: &impl Db, id: &str) -> Result<Option<Operation>> {
    pool.query_opt("SELECT * FROM operations WHERE id = $1", &[&id])
        .await?
        .as_ref()
        .map(op)
        .transpose()
}

pub async fn find_by_key(pool: &impl Db, k: &OperationKey) -> Result<Option<Operation>> {
    pool.query_opt(
        "SELECT * FROM operations WHERE tenant = $1 AND server = $2 AND tool = $3 AND op_key = $4 AND subject = $5",
        &[&k.tenant, &k.server, &k.tool, &k.value, &k.subject],
    )
        .await?
        .as_ref()
        .map(op)
        .transpose()
}

async fn by_key(pool: &impl Db, k: &OperationKey) -> Result<Operation> {
    find_by_key(pool, k)
        .await?
        .ok_or_else(|| LedgerError::Store("an operation key conflicted but no row holds it".into()))
}

pub async fn begin(pool: &impl Db, new: &NewOperation, now_ms: i64) -> Result<Begun> {
    let k = &new.key;
    let arguments = new.arguments.to_string();
    let inserted = pool
        .query_opt(
            "INSERT INTO operations (id, tenant, server, tool, op_key, caller, proposal_sha256, \
             approval_id, state, attempts, created_ms, updated_ms, lease_until_ms, arguments, \
             subject) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'reserved', 1, $9, $9, $10, $11, $12) ON \
             CONFLICT (tenant, subject, server, tool, op_key) DO NOTHING RETURNING *",
            &[
                &new.id,
                &k.tenant,
                &k.server,
                &k.tool,
                &k.value,
                &new.caller,
                &new.proposal_sha256,
                &new.approval_id,
                &now_ms,
                &new.lease_until_ms,
                &arguments,
                &k.subject,
            ],
        )
        .await?;
    if let Some(row) = inserted {
        return Ok(Begun::Mine(op(&row)?));
    }
    let existing = by_key(pool, k).await?;
    match operation::reuse(&existing, &new.proposal_sha256, now_ms) {
        Reuse::TakeOver => {
            // Only if nobody moved it since we looked.
            let taken = pool
                .query_opt(
                    "UPDATE operations SET state = 'reserved', attempts = attempts + 1, caller = $2, approval_id = $3, lease_until_ms = $4, \
                     updated_ms = $5 WHERE id = $1 AND state = $6 AND attempts = $7 RETURNING *",
                    &[&existing.id, &new.caller, &new.approval_id, &new.lease_until_ms, &now_ms, &existing.state.as_str(), &existing.attempts],
                )
                .await?;
            match taken {
                Some(row) => Ok(Begun::Mine(op(&row)?)),
                None => Ok(Begun::Theirs(by_key(pool, k).await?)),
            }
        }
        Reuse::Unknown if existing.state == OperationState::Dispatched => {
            lapse(pool, now_ms).await?;
            Ok(Begun::Theirs(by_key(pool, k).await?))
        }
        _ => Ok(Begun::Theirs(existing)),
    }
}

async fn lapse(pool: &impl Db, now_ms: i64) -> Result<u64> {
    pool.execute("UPDATE operations SET state = 'unknown', updated_ms = $1 WHERE state = 'dispatched' AND lease_until_ms <= $1", &[&now_ms]).await
}

async fn changed_or_wrong(
    pool: &impl Db,
    id: &str,
    row: Option<Row>,
    what: &'static str,
) -> Result<Operation> {
    if let Some(row) = row {
        return op(&row);
    }
    let current =
        find(pool, id).await?.ok_or_else(|| LedgerError::OperationNotFound(id.to_string()))?;
    Err(LedgerError::WrongState { id: id.to_string(), state: current.state.as_str(), what })
}

pub async fn dispatched(
    pool: &impl Db,
    id: &str,
    attempt: i64,
    lease_until_ms: i64,
    now_ms: i64,
) -> Result<Operation> {
    let row = pool
        .query_opt(
            "UPDATE operations SET state = 'dispatched', lease_until_ms = $2, updated_ms = $3 \
                WHERE id = $1 AND state = 'reserved' AND attempts = $4 RETURNING *",
            &[&id, &lease_until_ms, &now_ms, &attempt],
        )
        .await?;
    changed_or_wrong(pool, id, row, "only the holder of a reserved operation can dispatch it").await
}

pub async fn finish(
    pool: &impl Db,
    id: &str,
    attempt: i64,
    state: OperationState,
    outcome: Option<String>,
    now_ms: i64,
) -> Result<Operation> {
    let row = pool
        .query_opt(
            "UPDATE operations SET state = $2, outcome = $3, updated_ms = $4 WHERE id = $1 AND state = 'dispatched' AND attempts = $5 RETURNING *",
            &[&id, &state.as_str(), &outcome, &now_ms, &attempt],
        )
        .await?;
    changed_or_wrong(pool, id, row, "only the holder of a dispatched operation can finish it").await
}

pub async fn resolve(pool: &impl Db, id: &str, r: &Resolution) -> Result<Operation> {
    lapse(pool, r.now_ms).await?;
    let state = if r.applied {
        OperationState::ReconciledApplied
    } else {
        OperationState::ReconciledNotApplied
    };
    let row = pool
        .query_opt(
            "UPDATE operations SET state = $2, outcome = $3, resolved_by = $4, resolution = $5, updated_ms = $6 \
             WHERE id = $1 AND state = 'unknown' AND ($7 OR lease_until_ms <= $6) RETURNING *",
            &[&id, &state.as_str(), &r.outcome, &r.by, &r.reason, &r.now_ms, &r.applied],
        )
        .await?;
    changed_or_wrong(pool, id, row, crate::operations::settle_rule(r.applied)).await
}

pub async fn list(
    pool: &impl Db,
    tenant: Option<&str>,
    state: Option<OperationState>,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<Operation>> {
    lapse(pool, now_ms).await?;
    let (state, limit) = (state.map(OperationState::as_str), limit.min(i64::MAX as usize) as i64);
    let rows = pool
        .query(
            "SELECT * FROM operations WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL \
                OR tenant = $2) ORDER BY created_ms DESC, seq DESC LIMIT $3",
            &[&state, &tenant, &limit],
        )
        .await?;
    rows.iter().map(op).collect()
}

/// Settled operations last changed before `before_ms`, up to `chunk` of them.
pub async fn prune(pool: &impl Db, before_ms: i64, chunk: u64) -> Result<u64> {
    const SQL: &str = crate::operations::prune_operations_sql!("$");
    Ok(pool.execute(SQL, &[&before_ms, &(chunk as i64)]).await?)
}

#[async_trait::async_trait]
impl OperationStore for PostgresLedger {
    async fn begin_operation(&self, mut new: NewOperation, now_ms: i64) -> Result<Begun> {
        let Some(draft) = new.receipt.take() else {
            return begin(&*self.pool, &new, now_ms).await;
        };
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let begun = begin(tx, &new, now_ms).await?;
                    if let Begun::Mine(_) = &begun {
                        super::receipts::append(tx, &digests, vec![draft]).await?;
                    }
                    Ok(begun)
                })
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
        dispatched(&*self.pool, id, attempt, lease_until_ms, now_ms).await
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
        let Some(draft) = receipt else {
            return finish(&*self.pool, id, attempt, state, outcome, now_ms).await;
        };
        let id = id.to_string();
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let op = finish(tx, &id, attempt, state, outcome, now_ms).await?;
                    super::receipts::append(tx, &digests, vec![draft]).await?;
                    Ok(op)
                })
            })
            .await
    }
    async fn operation(&self, id: &str) -> Result<Option<Operation>> {
        find(&*self.pool, id).await
    }
    async fn operation_by_key(&self, key: &OperationKey) -> Result<Option<Operation>> {
        find_by_key(&*self.pool, key).await
    }
    async fn operations(
        &self,
        tenant: Option<&str>,
        state: Option<OperationState>,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Operation>> {
        list(&*self.pool, tenant, state, now_ms, limit).await
    }
    async fn resolve_operation(&self, id: &str, mut resolution: Resolution) -> Result<Operation> {
        let Some(draft) = resolution.receipt.take() else {
            return resolve(&*self.pool, id, &resolution).await;
        };
        let id = id.to_string();
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let op = resolve(tx, &id, &resolution).await?;
                    super::receipts::append(tx, &digests, vec![draft]).await?;
                    Ok(op)
                })
            })
            .await
    }
    async fn prune_operations(&self, settled_before_ms: i64) -> Result<u64> {
        chunked(|| prune(&*self.pool, settled_before_ms, ARCHIVE_CHUNK)).await
    }
}
