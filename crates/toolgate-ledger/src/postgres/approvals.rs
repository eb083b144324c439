//! The approvals table on PostgreSQL; each change is one conditional
//! statement, so concurrent replicas cannot both decide or both consume.

use tokio_postgres::Row;
use toolgate_core::approval::{Approval, ApprovalState, Binding};

use super::PostgresLedger;
use super::pool::Db;
use crate::{ApprovalStore, Decider, LedgerError, NewApproval, Result};

fn approval(r: &Row) -> Result<Approval> {
    let state: String = r.get("state");
    let arguments: String = r.get("arguments");
    let rules: String = r.get("rules");
    Ok(Approval {
        id: r.get("id"),
        binding: Binding {
            tenant: r.get("tenant"),
            caller: r.get("caller"),
            server: r.get("server"),
            tool: r.get("tool"),
            proposal_sha256: r.get("proposal_sha256"),
            policy_version: r.get("policy_version"),
        },
        arguments: serde_json::from_str(&arguments)
            .map_err(|e| LedgerError::Store(format!("stored arguments are not JSON: {e}")))?,
        reason: r.get("reason"),
        rules: serde_json::from_str(&rules).unwrap_or_default(),
        state: ApprovalState::parse(&state)
            .ok_or_else(|| LedgerError::Store(format!("unknown approval state `{state}`")))?,
        created_ms: r.get("created_ms"),
        expires_ms: r.get("expires_ms"),
        decided_by: r.get("decided_by"),
        decision_reason: r.get("decision_reason"),
        decided_ms: r.get("decided_ms"),
        used_ms: r.get("used_ms"),
        subject: r.get("subject"),
        operation_key: r.get("operation_key"),
    })
}

pub async fn create(pool: &impl Db, new: &NewApproval) -> Result<Approval> {
    let b = &new.binding;
    let (arguments, rules, expires) = (
        new.arguments.to_string(),
        serde_json::to_string(&new.rules).expect("strings serialise"),
        new.now_ms + new.ttl_ms,
    );
    let row = pool
        .query_opt(
            "INSERT INTO approvals (id, tenant, caller, server, tool, proposal_sha256, \
             policy_version, arguments, reason, rules, state, created_ms, expires_ms, subject, \
             operation_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13, $14) RETURNING *",
            &[&new.id, &b.tenant, &b.caller, &b.server, &b.tool, &b.proposal_sha256, &b.policy_version, &arguments, &new.reason, &rules, &new.now_ms, &expires, &new.subject, &new.operation_key],
        )
        .await?;
    approval(&row.ok_or_else(|| LedgerError::Store("the approval was not stored".into()))?)
}

pub async fn find(pool: &impl Db, id: &str) -> Result<Option<Approval>> {
    pool.query_opt("SELECT * FROM approvals WHERE id = $1", &[&id])
        .await?
        .as_ref()
        .map(approval)
        .transpose()
}

async fn get(pool: &impl Db, id: &str) -> Result<Approval> {
    find(pool, id).await?.ok_or_else(|| LedgerError::NotFound(id.to_string()))
}

/// The newest approval of this binding for this operation key (or none).
pub async fn latest(
    pool: &impl Db,
    b: &Binding,
    operation_key: Option<&str>,
) -> Result<Option<Approval>> {
    pool.query_opt(
        "SELECT * FROM approvals WHERE tenant = $1 AND caller = $2 AND server = $3 AND tool = $4 AND proposal_sha256 = $5 \
         AND policy_version = $6 AND operation_key IS NOT DISTINCT FROM $7 ORDER BY created_ms DESC, seq DESC LIMIT 1",
        &[&b.tenant, &b.caller, &b.server, &b.tool, &b.proposal_sha256, &b.policy_version, &operation_key],
    )
    .await?
    .as_ref()
    .map(approval)
    .transpose()
}

pub async fn count(pool: &impl Db, state: ApprovalState) -> Result<u64> {
    let rows = pool
        .query("SELECT count(*) AS n FROM approvals WHERE state = $1", &[&state.as_str()])
        .await?;
    Ok(rows.first().map_or(0, |r| r.get::<_, i64>("n")) as u64)
}

pub async fn list(
    pool: &impl Db,
    tenant: Option<&str>,
    state: Option<ApprovalState>,
    now_ms: i64,
) -> Result<Vec<Approval>> {
    pool.execute("UPDATE approvals SET state = 'expired' WHERE state IN ('pending', 'approved') AND expires_ms <= $1", &[&now_ms]).await?;
    let state = state.map(ApprovalState::as_str);
    let rows = pool
        .query(
            "SELECT * FROM approvals WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL \
                OR tenant = $2) ORDER BY created_ms DESC, seq DESC",
            &[&state, &tenant],
        )
        .await?;
    rows.iter().map(approval).collect()
}

pub async fn decide(
    pool: &impl Db,
    id: &str,
    approve: bool,
    approver: &Decider<'_>,
    reason: &str,
    now_ms: i64,
) -> Result<Approval> {
    let state = if approve { "approved" } else { "denied" };
    // Nobody decides their own call: not under the credential that asked,
    // nor as the same person (subject) under another one.
    let decided = pool
        .query_opt(
            "UPDATE approvals SET state = $2, decided_by = $3, decision_reason = $4, decided_ms = $5 \
             WHERE id = $1 AND tenant = $7 AND state = 'pending' AND expires_ms > $5 AND caller \
             <> $3 AND (subject = '' OR subject <> $6) RETURNING *",
            &[&id, &state, &approver.name, &reason, &now_ms, &approver.subject, &approver.tenant],
        )
        .await?;
    if let Some(row) = decided {
        return approval(&row);
    }
    // Not decided: say why, as SQLite's store does.
    let current = get(pool, id).await?;
    if current.binding.tenant != approver.tenant {
        return Err(LedgerError::NotFound(id.to_string()));
    }
    if current.asked_by(approver.name, approver.subject) {
        return Err(LedgerError::SelfApproval { approver: approver.name.to_string() });
    }
    match current.state_at(now_ms) {
        ApprovalState::Expired if current.state == ApprovalState::Pending => {
            pool.execute(
                "UPDATE approvals SET state = 'expired' WHERE id = $1 AND state = 'pending'",
                &[&id],
            )
            .await?;
            Err(LedgerError::Expired(id.to_string()))
        }
        ApprovalState::Expired => Err(LedgerError::Expired(id.to_string())),
        state => Err(LedgerError::NotPending { id: id.to_string(), state: state.as_str() }),
    }
}

pub async fn consume(pool: &impl Db, id: &str, now_ms: i64) -> Result<Approval> {
    let used = pool
        .query_opt(
            "UPDATE approvals SET state = 'consumed', used_ms = $2 WHERE id = $1 AND state = \
                'approved' AND expires_ms > $2 RETURNING *",
            &[&id, &now_ms],
        )
        .await?;
    if let Some(row) = used {
        return approval(&row);
    }
    let current = get(pool, id).await?;
    Err(LedgerError::NotApproved { id: id.to_string(), state: current.state_at(now_ms).as_str() })
}

#[async_trait::async_trait]
impl ApprovalStore for PostgresLedger {
    async fn create_approval(&self, mut new: NewApproval) -> Result<Approval> {
        if new.receipt.is_none() && new.notices.is_empty() {
            return create(&*self.pool, &new).await;
        }
        let draft = new.receipt.take();
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let approval = create(tx, &new).await?;
                    super::fleet::add_notices(tx, &new.id, &new.notices, new.now_ms).await?;
                    if let Some(draft) = draft {
                        super::receipts::append(tx, &digests, vec![draft]).await?;
                    }
                    Ok(approval)
                })
            })
            .await
    }
    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        find(&*self.pool, id).await
    }
    async fn latest_approval(
        &self,
        binding: &Binding,
        operation_key: Option<&str>,
    ) -> Result<Option<Approval>> {
        latest(&*self.pool, binding, operation_key).await
    }
    async fn approvals(
        &self,
        tenant: Option<&str>,
        state: Option<ApprovalState>,
        now_ms: i64,
    ) -> Result<Vec<Approval>> {
        list(&*self.pool, tenant, state, now_ms).await
    }
    async fn count_approvals(&self, state: ApprovalState) -> Result<u64> {
        count(&*self.pool, state).await
    }
    async fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        approver: Decider<'_>,
        reason: &str,
        now_ms: i64,
    ) -> Result<Approval> {
        decide(&*self.pool, id, approve, &approver, reason, now_ms).await
    }
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<Approval> {
        consume(&*self.pool, id, now_ms).await
    }
    fn decisions(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        let receiver = self.decided.subscribe();
        self.listening.get_or_init(|| {
            let (stop, stopped) = tokio::sync::oneshot::channel();
            super::fleet::listen(self.pool.config().clone(), self.decided.clone(), stopped);
            stop
        });
        Some(receiver)
    }
}
