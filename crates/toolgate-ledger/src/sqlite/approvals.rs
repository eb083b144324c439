//! The approvals table on SQLite. Each function runs inside the writer's
//! transaction (see `super`), so a read-then-write here is never interleaved
//! with another writer of this process, and `BEGIN IMMEDIATE` keeps other
//! processes (the CLI, a second gateway) out while it runs.

use rusqlite::{Connection, OptionalExtension, Row, params};
use toolgate_core::approval::{Approval, ApprovalState, Binding};

use super::SqliteLedger;
use crate::{ApprovalStore, Decider, LedgerError, NewApproval, Result};

const COLUMNS: &str = "id, tenant, caller, server, tool, proposal_sha256, policy_version, arguments, reason, rules, state, \
                       created_ms, expires_ms, decided_by, decision_reason, decided_ms, used_ms, subject, operation_key";

fn row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let text = |column: &str| r.get::<_, String>(column);
    let json = |column: &str| -> rusqlite::Result<serde_json::Value> {
        serde_json::from_str(&text(column)?).map_err(|e| {
            let i = r.as_ref().column_index(column).unwrap_or_default();
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    };
    let state = text("state")?;
    Ok(Approval {
        id: text("id")?,
        binding: Binding {
            tenant: text("tenant")?,
            caller: text("caller")?,
            server: text("server")?,
            tool: text("tool")?,
            proposal_sha256: text("proposal_sha256")?,
            policy_version: text("policy_version")?,
        },
        arguments: json("arguments")?,
        reason: text("reason")?,
        rules: serde_json::from_value(json("rules")?).unwrap_or_default(),
        state: ApprovalState::parse(&state).ok_or_else(|| {
            let i = r.as_ref().column_index("state").unwrap_or_default();
            rusqlite::Error::InvalidColumnType(i, state, rusqlite::types::Type::Text)
        })?,
        created_ms: r.get("created_ms")?,
        expires_ms: r.get("expires_ms")?,
        decided_by: r.get("decided_by")?,
        decision_reason: r.get("decision_reason")?,
        decided_ms: r.get("decided_ms")?,
        used_ms: r.get("used_ms")?,
        subject: text("subject")?,
        operation_key: r.get("operation_key")?,
    })
}

pub fn create(conn: &Connection, new: &NewApproval) -> Result<Approval> {
    let b = &new.binding;
    let rules = serde_json::to_string(&new.rules).expect("strings serialise");
    conn.execute(
        &format!(
            "INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
                'pending', ?11, ?12, NULL, NULL, NULL, NULL, ?13, ?14)"
        ),
        params![
            new.id,
            b.tenant,
            b.caller,
            b.server,
            b.tool,
            b.proposal_sha256,
            b.policy_version,
            new.arguments.to_string(),
            new.reason,
            rules,
            new.now_ms,
            new.now_ms + new.ttl_ms,
            new.subject,
            new.operation_key
        ],
    )?;
    get(conn, &new.id)
}

pub fn get(conn: &Connection, id: &str) -> Result<Approval> {
    find(conn, id)?.ok_or_else(|| LedgerError::NotFound(id.to_string()))
}

pub fn find(conn: &Connection, id: &str) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), [id], row)
        .optional()?)
}

/// The newest approval of this binding for this operation key (or none).
pub fn latest(
    conn: &Connection,
    b: &Binding,
    operation_key: Option<&str>,
) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM approvals WHERE tenant = ?1 AND caller = ?2 AND server = ?3 AND tool = ?4 \
                 AND proposal_sha256 = ?5 AND policy_version = ?6 AND operation_key IS ?7 ORDER BY created_ms DESC, rowid DESC LIMIT 1"
            ),
            params![b.tenant, b.caller, b.server, b.tool, b.proposal_sha256, b.policy_version, operation_key],
            row,
        )
        .optional()?)
}

pub fn count(conn: &Connection, state: ApprovalState) -> Result<u64> {
    Ok(conn.query_row(
        "SELECT count(*) AS n FROM approvals WHERE state = ?1",
        [state.as_str()],
        |r| r.get::<_, i64>("n"),
    )? as u64)
}

pub fn list(
    conn: &Connection,
    tenant: Option<&str>,
    state: Option<ApprovalState>,
    now_ms: i64,
) -> Result<Vec<Approval>> {
    conn.execute("UPDATE approvals SET state = 'expired' WHERE state IN ('pending', 'approved') AND expires_ms <= ?1", [now_ms])?;
    // `state = ?1` spelled out when given, so the (state, created_ms) index
    // finds the rows: `?1 IS NULL OR …` read and sorted the whole table,
    // on the writer, on every call that counts pending approvals and every
    // poll of an approver — a cost that grew with the ledger.
    let filter = if state.is_some() { "state = ?1" } else { "?1 IS NULL" };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE {filter} AND (?2 IS NULL OR tenant = ?2) ORDER BY created_ms DESC, rowid DESC"
    ))?;
    let rows = stmt.query_map(params![state.map(ApprovalState::as_str), tenant], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn decide(
    conn: &Connection,
    id: &str,
    approve: bool,
    approver: &Decider<'_>,
    reason: &str,
    now_ms: i64,
) -> Result<Approval> {
    let current = get(conn, id)?;
    // Another tenant's approval does not exist for this approver.
    if current.binding.tenant != approver.tenant {
        return Err(LedgerError::NotFound(id.to_string()));
    }
    if current.asked_by(approver.name, approver.subject) {
        return Err(LedgerError::SelfApproval { approver: approver.name.to_string() });
    }
    match current.state_at(now_ms) {
        ApprovalState::Pending => {}
        ApprovalState::Expired => {
            conn.execute(
                "UPDATE approvals SET state = 'expired' WHERE id = ?1 AND state = 'pending'",
                [id],
            )?;
            return Err(LedgerError::Expired(id.to_string()));
        }
        state => return Err(LedgerError::NotPending { id: id.to_string(), state: state.as_str() }),
    }
    let state = if approve { "approved" } else { "denied" };
    conn.execute(
        "UPDATE approvals SET state = ?2, decided_by = ?3, decision_reason = ?4, decided_ms = ?5 WHERE id = ?1 AND state = 'pending'",
        params![id, state, approver.name, reason, now_ms],
    )?;
    get(conn, id)
}

pub fn consume(conn: &Connection, id: &str, now_ms: i64) -> Result<Approval> {
    let changed = conn.execute(
        "UPDATE approvals SET state = 'consumed', used_ms = ?2 WHERE id = ?1 AND state = 'approved' AND expires_ms > ?2",
        params![id, now_ms],
    )?;
    let current = get(conn, id)?;
    if changed == 1 {
        return Ok(current);
    }
    Err(LedgerError::NotApproved { id: id.to_string(), state: current.state_at(now_ms).as_str() })
}

#[async_trait::async_trait]
impl ApprovalStore for SqliteLedger {
    async fn create_approval(&self, mut new: NewApproval) -> Result<Approval> {
        let digests = self.digests.clone();
        self.run(move |c| {
            let receipt = new.receipt.take();
            let approval = create(c, &new)?;
            super::fleet::add_notices(c, &new.id, &new.notices, new.now_ms)?;
            super::receipts::append(c, &digests, receipt.into_iter().collect())?;
            Ok(approval)
        })
        .await
    }
    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        let id = id.to_string();
        self.read(move |c| find(c, &id)).await
    }
    async fn latest_approval(
        &self,
        binding: &Binding,
        operation_key: Option<&str>,
    ) -> Result<Option<Approval>> {
        let (b, key) = (binding.clone(), operation_key.map(str::to_string));
        self.read(move |c| latest(c, &b, key.as_deref())).await
    }
    async fn approvals(
        &self,
        tenant: Option<&str>,
        state: Option<ApprovalState>,
        now_ms: i64,
    ) -> Result<Vec<Approval>> {
        let tenant = tenant.map(str::to_string);
        self.run(move |c| list(c, tenant.as_deref(), state, now_ms)).await
    }
    async fn count_approvals(&self, state: ApprovalState) -> Result<u64> {
        self.read(move |c| count(c, state)).await
    }
    async fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        approver: Decider<'_>,
        reason: &str,
        now_ms: i64,
    ) -> Result<Approval> {
        let (id, name, subject, tenant, reason) = (
            id.to_string(),
            approver.name.to_string(),
            approver.subject.to_string(),
            approver.tenant.to_string(),
            reason.to_string(),
        );
        let decided = self
            .run(move |c| {
                decide(
                    c,
                    &id,
                    approve,
                    &Decider { name: &name, subject: &subject, tenant: &tenant },
                    &reason,
                    now_ms,
                )
            })
            .await;
        if let Ok(a) = &decided {
            let _ = self.decided.send(a.id.clone());
        }
        decided
    }
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<Approval> {
        let id = id.to_string();
        self.run(move |c| consume(c, &id, now_ms)).await
    }
    fn decisions(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        Some(self.decided.subscribe())
    }
}
