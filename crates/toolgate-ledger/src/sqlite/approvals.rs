//! The approvals table on SQLite. Each function runs inside the writer's
//! transaction (see `super`), so a read-then-write here is never interleaved
//! with another writer of this process, and `BEGIN IMMEDIATE` keeps other
//! processes (the CLI, a second gateway) out while it runs.

use rusqlite::{Connection, OptionalExtension, Row, params};
use toolgate_core::approval::{Approval, ApprovalState, Binding};

use crate::{Decider, LedgerError, NewApproval, Result};

const COLUMNS: &str = "id, tenant, caller, server, tool, proposal_sha256, policy_version, arguments, reason, rules, state, \
                       created_ms, expires_ms, decided_by, decision_reason, decided_ms, used_ms, subject, operation_key";

fn row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let text = |i: usize| r.get::<_, String>(i);
    let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
        serde_json::from_str(&text(i)?).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    };
    let state = text(10)?;
    Ok(Approval {
        id: text(0)?,
        binding: Binding {
            tenant: text(1)?,
            caller: text(2)?,
            server: text(3)?,
            tool: text(4)?,
            proposal_sha256: text(5)?,
            policy_version: text(6)?,
        },
        arguments: json(7)?,
        reason: text(8)?,
        rules: serde_json::from_value(json(9)?).unwrap_or_default(),
        state: ApprovalState::parse(&state).ok_or_else(|| {
            rusqlite::Error::InvalidColumnType(10, state, rusqlite::types::Type::Text)
        })?,
        created_ms: r.get(11)?,
        expires_ms: r.get(12)?,
        decided_by: r.get(13)?,
        decision_reason: r.get(14)?,
        decided_ms: r.get(15)?,
        used_ms: r.get(16)?,
        subject: text(17)?,
        operation_key: r.get(18)?,
    })
}

pub fn create(conn: &Connection, new: &NewApproval) -> Result<Approval> {
    let b = &new.binding;
    let rules = serde_json::to_string(&new.rules).expect("strings serialise");
    conn.execute(
        &format!("INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?12, NULL, NULL, NULL, NULL, ?13, ?14)"),
        params![new.id, b.tenant, b.caller, b.server, b.tool, b.proposal_sha256, b.policy_version, new.arguments.to_string(), new.reason, rules, new.now_ms, new.now_ms + new.ttl_ms, new.subject, new.operation_key],
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
    Ok(conn.query_row("SELECT count(*) FROM approvals WHERE state = ?1", [state.as_str()], |r| {
        r.get::<_, i64>(0)
    })? as u64)
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
