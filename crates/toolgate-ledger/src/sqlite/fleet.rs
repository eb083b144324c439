//! The fleet's tables on SQLite (see `crate::fleet`): each function runs in
//! the writer's transaction, or alone for a read.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteLedger;
use crate::{
    Attempt, FleetStore, LedgerError, NewNotice, Notice, NoticeState, Result, StoredSession,
};

pub fn heartbeat(
    c: &Connection,
    replica: &str,
    started_ms: i64,
    now_ms: i64,
    lease_ms: i64,
) -> Result<u32> {
    c.execute(
        "INSERT INTO replicas (id, started_ms, seen_ms) VALUES (?1, ?2, ?3) ON CONFLICT (id) DO UPDATE SET seen_ms = excluded.seen_ms",
        params![replica, started_ms, now_ms],
    )?;
    c.execute("DELETE FROM replicas WHERE seen_ms < ?1", [now_ms - lease_ms])?;
    Ok(c.query_row("SELECT count(*) AS n FROM replicas", [], |r| r.get::<_, i64>("n"))? as u32)
}

pub fn leave(c: &Connection, replica: &str) -> Result<()> {
    c.execute("DELETE FROM replicas WHERE id = ?1", [replica])?;
    Ok(())
}

pub fn open_session(c: &Connection, s: &StoredSession) -> Result<()> {
    c.execute("DELETE FROM sessions WHERE expires_ms <= ?1", [s.created_ms])?;
    c.execute(
        "INSERT INTO sessions (id_sha256, tenant, subject, caller, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![s.id_sha256, s.tenant, s.subject, s.caller, s.created_ms, s.expires_ms],
    )?;
    Ok(())
}

pub fn session(c: &Connection, id_sha256: &str, now_ms: i64) -> Result<Option<StoredSession>> {
    Ok(c.query_row(
        "SELECT id_sha256, tenant, subject, caller, created_ms, expires_ms FROM sessions WHERE id_sha256 = ?1 AND expires_ms > ?2",
        params![id_sha256, now_ms],
        |r| {
            Ok(StoredSession {
                id_sha256: r.get("id_sha256")?,
                tenant: r.get("tenant")?,
                subject: r.get("subject")?,
                caller: r.get("caller")?,
                created_ms: r.get("created_ms")?,
                expires_ms: r.get("expires_ms")?,
            })
        },
    )
    .optional()?)
}

pub fn end_session(c: &Connection, id_sha256: &str) -> Result<bool> {
    Ok(c.execute("DELETE FROM sessions WHERE id_sha256 = ?1", [id_sha256])? > 0)
}

pub fn end_sessions_of(c: &Connection, tenant: &str, subject: &str) -> Result<u64> {
    Ok(c.execute("DELETE FROM sessions WHERE tenant = ?1 AND subject = ?2", [tenant, subject])?
        as u64)
}

/// Writes the notices of approval `approval_id`, opened at `now_ms`: due at once.
pub fn add_notices(
    c: &Connection,
    approval_id: &str,
    notices: &[NewNotice],
    now_ms: i64,
) -> Result<()> {
    for n in notices {
        c.execute(
            "INSERT INTO notices (id, approval_id, webhook, body, state, next_ms, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?5, ?5)",
            params![n.id, approval_id, n.webhook, n.body, now_ms],
        )?;
    }
    Ok(())
}

const COLUMNS: &str = "id, approval_id, webhook, body, state, attempts, next_ms, created_ms, updated_ms, last_status, last_error";

fn notice(r: &Row<'_>) -> rusqlite::Result<Notice> {
    let state: String = r.get("state")?;
    Ok(Notice {
        id: r.get("id")?,
        approval_id: r.get("approval_id")?,
        webhook: r.get("webhook")?,
        body: r.get("body")?,
        state: NoticeState::parse(&state).ok_or_else(|| {
            let i = r.as_ref().column_index("state").unwrap_or_default();
            rusqlite::Error::InvalidColumnType(i, state, rusqlite::types::Type::Text)
        })?,
        attempts: r.get("attempts")?,
        next_ms: r.get("next_ms")?,
        created_ms: r.get("created_ms")?,
        updated_ms: r.get("updated_ms")?,
        last_status: r.get("last_status")?,
        last_error: r.get("last_error")?,
    })
}

pub fn claim(
    c: &Connection,
    now_ms: i64,
    claimed_until_ms: i64,
    limit: u32,
) -> Result<Vec<Notice>> {
    let mut stmt = c.prepare_cached(&format!(
        "UPDATE notices SET claimed_until_ms = ?2 WHERE id IN (SELECT id FROM notices WHERE state = 'pending' AND next_ms <= ?1 AND claimed_until_ms <= ?1 ORDER BY next_ms LIMIT ?3) RETURNING {COLUMNS}"
    ))?;
    let rows = stmt.query_map(params![now_ms, claimed_until_ms, limit], notice)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn attempted(
    c: &Connection,
    id: &str,
    attempt: Attempt,
    status: Option<u16>,
    error: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    let (state, next_ms) = attempt.leaves(now_ms);
    c.execute(
        "UPDATE notices SET state = ?2, attempts = attempts + 1, next_ms = ?3, claimed_until_ms = 0, updated_ms = ?4, last_status = ?5, last_error = ?6 WHERE id = ?1 AND state = 'pending'",
        params![id, state, next_ms, now_ms, status, error],
    )?;
    Ok(())
}

pub fn list(
    c: &Connection,
    tenant: Option<&str>,
    state: Option<NoticeState>,
    limit: usize,
) -> Result<Vec<Notice>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM notices WHERE (?1 IS NULL OR state = ?1) AND (?3 IS NULL OR approval_id IN (SELECT id FROM approvals WHERE tenant = ?3)) ORDER BY created_ms DESC, id LIMIT ?2"
    ))?;
    let rows = stmt.query_map(
        params![state.map(NoticeState::as_str), limit.min(i64::MAX as usize) as i64, tenant],
        notice,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn count(c: &Connection, state: NoticeState) -> Result<u64> {
    Ok(c.query_row("SELECT count(*) AS n FROM notices WHERE state = ?1", [state.as_str()], |r| {
        r.get::<_, i64>("n")
    })? as u64)
}

pub fn redeliver(c: &Connection, id: &str, tenant: Option<&str>, now_ms: i64) -> Result<Notice> {
    c.query_row(
        &format!(
            "UPDATE notices SET state = 'pending', attempts = 0, next_ms = ?2, claimed_until_ms = 0, updated_ms = ?2 WHERE id = ?1 AND state = 'dead' \
             AND (?3 IS NULL OR approval_id IN (SELECT id FROM approvals WHERE tenant = ?3)) RETURNING {COLUMNS}"
        ),
        params![id, now_ms, tenant],
        notice,
    )
    .optional()?
    .ok_or_else(|| LedgerError::NoticeNotFound(id.to_string()))
}

pub fn prune(c: &Connection, before_ms: i64) -> Result<u64> {
    Ok(c.execute("DELETE FROM notices WHERE state = 'delivered' AND updated_ms < ?1", [before_ms])?
        as u64)
}

#[async_trait::async_trait]
impl FleetStore for SqliteLedger {
    async fn heartbeat(
        &self,
        replica: &str,
        started_ms: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<u32> {
        let replica = replica.to_string();
        self.write_unsynced(move |c| heartbeat(c, &replica, started_ms, now_ms, lease_ms)).await
    }
    async fn leave(&self, replica: &str) -> Result<()> {
        let replica = replica.to_string();
        self.run(move |c| leave(c, &replica)).await
    }
    async fn open_session(&self, session: StoredSession) -> Result<()> {
        self.run(move |c| open_session(c, &session)).await
    }
    async fn session(&self, id_sha256: &str, now_ms: i64) -> Result<Option<StoredSession>> {
        let id = id_sha256.to_string();
        self.read(move |c| session(c, &id, now_ms)).await
    }
    async fn end_session(&self, id_sha256: &str) -> Result<bool> {
        let id = id_sha256.to_string();
        self.run(move |c| end_session(c, &id)).await
    }
    async fn end_sessions_of(&self, tenant: &str, subject: &str) -> Result<u64> {
        let (tenant, subject) = (tenant.to_string(), subject.to_string());
        self.run(move |c| end_sessions_of(c, &tenant, &subject)).await
    }
    async fn claim_notices(
        &self,
        now_ms: i64,
        claimed_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<Notice>> {
        self.write_unsynced(move |c| claim(c, now_ms, claimed_until_ms, limit)).await
    }
    async fn notice_attempted(
        &self,
        id: &str,
        attempt: Attempt,
        status: Option<u16>,
        error: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        let id = id.to_string();
        self.write_unsynced(move |c| attempted(c, &id, attempt, status, error.as_deref(), now_ms))
            .await
    }
    async fn notices(
        &self,
        tenant: Option<&str>,
        state: Option<NoticeState>,
        limit: usize,
    ) -> Result<Vec<Notice>> {
        let tenant = tenant.map(str::to_string);
        self.read_many(move |c| list(c, tenant.as_deref(), state, limit)).await
    }
    async fn count_notices(&self, state: NoticeState) -> Result<u64> {
        self.read(move |c| count(c, state)).await
    }
    async fn redeliver_notice(
        &self,
        id: &str,
        tenant: Option<&str>,
        now_ms: i64,
    ) -> Result<Notice> {
        let (id, tenant) = (id.to_string(), tenant.map(str::to_string));
        self.run(move |c| redeliver(c, &id, tenant.as_deref(), now_ms)).await
    }
    async fn prune_notices(&self, before_ms: i64) -> Result<u64> {
        self.run(move |c| prune(c, before_ms)).await
    }
}
