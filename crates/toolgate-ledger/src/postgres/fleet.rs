//! The fleet's tables on PostgreSQL (see `crate::fleet`), and the listener
//! that hears every replica's decisions (`LISTEN toolgate_approvals`).

use std::time::Duration;

use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls, Row};

use super::PostgresLedger;
use super::pool::Db;
use crate::{
    Attempt, EVERY_APPROVAL, FleetStore, LedgerError, NewNotice, Notice, NoticeState, Result,
    StoredSession,
};

pub async fn heartbeat(
    db: &impl Db,
    replica: &str,
    started_ms: i64,
    now_ms: i64,
    lease_ms: i64,
) -> Result<u32> {
    db.execute(
        "INSERT INTO replicas (id, started_ms, seen_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET seen_ms = excluded.seen_ms",
        &[&replica, &started_ms, &now_ms],
    )
    .await?;
    db.execute(
        "DELETE FROM replicas WHERE seen_ms < $1::bigint - $2::bigint",
        &[&now_ms, &lease_ms],
    )
    .await?;
    // Counted as of this beat: a replica whose row the sweep above has not
    // reached (another's clock) still counts until it is swept.
    let row = db
        .query_opt(
            "SELECT count(*) AS n FROM replicas WHERE seen_ms >= $1::bigint - $2::bigint",
            &[&now_ms, &lease_ms],
        )
        .await?
        .expect("a count has a row");
    Ok(row.get::<_, i64>("n").max(1) as u32)
}

pub async fn leave(db: &impl Db, replica: &str) -> Result<()> {
    db.execute("DELETE FROM replicas WHERE id = $1", &[&replica]).await?;
    Ok(())
}

fn session_of(r: &Row) -> StoredSession {
    StoredSession {
        id_sha256: r.get("id_sha256"),
        tenant: r.get("tenant"),
        subject: r.get("subject"),
        caller: r.get("caller"),
        created_ms: r.get("created_ms"),
        expires_ms: r.get("expires_ms"),
    }
}

pub async fn open_session(db: &impl Db, s: &StoredSession) -> Result<()> {
    db.execute("DELETE FROM sessions WHERE expires_ms <= $1", &[&s.created_ms]).await?;
    db.execute(
        "INSERT INTO sessions (id_sha256, tenant, subject, caller, created_ms, expires_ms) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&s.id_sha256, &s.tenant, &s.subject, &s.caller, &s.created_ms, &s.expires_ms],
    )
    .await?;
    Ok(())
}

pub async fn session(db: &impl Db, id_sha256: &str, now_ms: i64) -> Result<Option<StoredSession>> {
    let row = db
        .query_opt(
            "SELECT id_sha256, tenant, subject, caller, created_ms, expires_ms FROM sessions WHERE \
                id_sha256 = $1 AND expires_ms > $2",
            &[&id_sha256, &now_ms],
        )
        .await?;
    Ok(row.as_ref().map(session_of))
}

pub async fn end_session(db: &impl Db, id_sha256: &str) -> Result<bool> {
    Ok(db.execute("DELETE FROM sessions WHERE id_sha256 = $1", &[&id_sha256]).await? > 0)
}

pub async fn end_sessions_of(db: &impl Db, tenant: &str, subject: &str) -> Result<u64> {
    db.execute("DELETE FROM sessions WHERE tenant = $1 AND subject = $2", &[&tenant, &subject])
        .await
}

pub async fn add_notices(
    db: &impl Db,
    approval_id: &str,
    notices: &[NewNotice],
    now_ms: i64,
) -> Result<()> {
    for n in notices {
        db.execute(
            "INSERT INTO notices (id, approval_id, webhook, body, state, next_ms, created_ms, \
                updated_ms) VALUES ($1, $2, $3, $4, 'pending', $5, $5, $5)",
            &[&n.id, &approval_id, &n.webhook, &n.body, &now_ms],
        )
        .await?;
    }
    Ok(())
}

fn notice(r: &Row) -> Result<Notice> {
    let state: String = r.get("state");
    Ok(Notice {
        id: r.get("id"),
        approval_id: r.get("approval_id"),
        webhook: r.get("webhook"),
        body: r.get("body"),
        state: NoticeState::parse(&state)
            .ok_or_else(|| LedgerError::Store(format!("unknown notice state `{state}`")))?,
        attempts: r.get::<_, i32>("attempts").max(0) as u32,
        next_ms: r.get("next_ms"),
        created_ms: r.get("created_ms"),
        updated_ms: r.get("updated_ms"),
        last_status: r.get::<_, Option<i32>>("last_status").map(|s| s as u16),
        last_error: r.get("last_error"),
    })
}

pub async fn claim(
    db: &impl Db,
    now_ms: i64,
    claimed_until_ms: i64,
    limit: u32,
) -> Result<Vec<Notice>> {
    // SKIP LOCKED: replicas claiming at once take different notices.
    let rows = db
        .query(
            "UPDATE notices SET claimed_until_ms = $2 WHERE id IN (SELECT id FROM notices WHERE \
             state = 'pending' AND next_ms <= $1 AND claimed_until_ms <= $1 \
             ORDER BY next_ms LIMIT $3 FOR UPDATE SKIP LOCKED) AND claimed_until_ms <= $1 RETURNING *",
            &[&now_ms, &claimed_until_ms, &(limit as i64)],
        )
        .await?;
    rows.iter().map(notice).collect()
}

pub async fn attempted(
    db: &impl Db,
    id: &str,
    attempt: Attempt,
    status: Option<u16>,
    error: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    let (state, next_ms) = attempt.leaves(now_ms);
    let status = status.map(i32::from);
    db.execute(
        "UPDATE notices SET state = $2, attempts = attempts + 1, next_ms = $3, claimed_until_ms = \
            0, updated_ms = $4, last_status = $5, last_error = $6 WHERE id = $1 AND state = \
            'pending'",
        &[&id, &state, &next_ms, &now_ms, &status, &error],
    )
    .await?;
    Ok(())
}

pub async fn list(
    db: &impl Db,
    tenant: Option<&str>,
    state: Option<NoticeState>,
    limit: usize,
) -> Result<Vec<Notice>> {
    let rows = db
        .query(
            "SELECT * FROM notices WHERE ($1::text IS NULL OR state = $1) AND ($3::text IS NULL OR \
             approval_id IN (SELECT id FROM approvals WHERE tenant = $3)) \
             ORDER BY created_ms DESC, id LIMIT $2",
            &[&state.map(NoticeState::as_str), &(limit.min(i64::MAX as usize) as i64), &tenant],
        )
        .await?;
    rows.iter().map(notice).collect()
}

pub async fn count(db: &impl Db, state: NoticeState) -> Result<u64> {
    let row = db
        .query_opt("SELECT count(*) AS n FROM notices WHERE state = $1", &[&state.as_str()])
        .await?
        .expect("a count has a row");
    Ok(row.get::<_, i64>("n") as u64)
}

pub async fn redeliver(
    db: &impl Db,
    id: &str,
    tenant: Option<&str>,
    now_ms: i64,
) -> Result<Notice> {
    let row = db
        .query_opt(
            "UPDATE notices SET state = 'pending', attempts = 0, next_ms = $2, claimed_until_ms = \
             0, updated_ms = $2 WHERE id = $1 AND state = 'dead' \
             AND ($3::text IS NULL OR approval_id IN (SELECT id FROM approvals WHERE tenant = $3)) RETURNING *",
            &[&id, &now_ms, &tenant],
        )
        .await?;
    notice(&row.ok_or_else(|| LedgerError::NoticeNotFound(id.to_string()))?)
}

pub async fn prune(db: &impl Db, before_ms: i64) -> Result<u64> {
    db.execute("DELETE FROM notices WHERE state = 'delivered' AND updated_ms < $1", &[&before_ms])
        .await
}

/// Listens on `toolgate_approvals` on a connection of its own and passes
/// each decided approval's id on; reconnects with backoff when the
/// connection is lost, then sends [`EVERY_APPROVAL`] (what was decided in
/// between went unheard). Ends when `stop` is dropped.
pub fn listen(
    config: tokio_postgres::Config,
    decided: broadcast::Sender<String>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        loop {
            let heard = async {
                let (client, mut connection) = config.connect(NoTls).await?;
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                // The connection is polled by hand: notifications arrive as its messages.
                let driver = tokio::spawn(async move {
                    while let Some(message) =
                        std::future::poll_fn(|cx| connection.poll_message(cx)).await
                    {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                drop(tx.send(n.payload().to_string()))
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                });
                client.batch_execute("LISTEN toolgate_approvals").await?;
                let _ = decided.send(EVERY_APPROVAL.to_string());
                while let Some(id) = rx.recv().await {
                    let _ = decided.send(id);
                }
                driver.abort();
                Ok::<_, tokio_postgres::Error>(())
            };
            tokio::select! {
                _ = &mut stop => return,
                ended = heard => {
                    if ended.is_ok() {
                        backoff = Duration::from_millis(100);
                    } else if let Err(e) = ended {
                        tracing::warn!(target: "toolgate::ledger", error = %e, "listening for decisions failed; held calls are woken by polling until it reconnects");
                    }
                }
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
}

#[async_trait::async_trait]
impl FleetStore for PostgresLedger {
    async fn heartbeat(
        &self,
        replica: &str,
        started_ms: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<u32> {
        heartbeat(&*self.pool, replica, started_ms, now_ms, lease_ms).await
    }
    async fn leave(&self, replica: &str) -> Result<()> {
        leave(&*self.pool, replica).await
    }
    async fn open_session(&self, session: StoredSession) -> Result<()> {
        open_session(&*self.pool, &session).await
    }
    async fn session(&self, id_sha256: &str, now_ms: i64) -> Result<Option<StoredSession>> {
        session(&*self.pool, id_sha256, now_ms).await
    }
    async fn end_session(&self, id_sha256: &str) -> Result<bool> {
        end_session(&*self.pool, id_sha256).await
    }
    async fn end_sessions_of(&self, tenant: &str, subject: &str) -> Result<u64> {
        end_sessions_of(&*self.pool, tenant, subject).await
    }
    async fn claim_notices(
        &self,
        now_ms: i64,
        claimed_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<Notice>> {
        claim(&*self.pool, now_ms, claimed_until_ms, limit).await
    }
    async fn notice_attempted(
        &self,
        id: &str,
        attempt: Attempt,
        status: Option<u16>,
        error: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        attempted(&*self.pool, id, attempt, status, error.as_deref(), now_ms).await
    }
    async fn notices(
        &self,
        tenant: Option<&str>,
        state: Option<NoticeState>,
        limit: usize,
    ) -> Result<Vec<Notice>> {
        list(&*self.pool, tenant, state, limit).await
    }
    async fn count_notices(&self, state: NoticeState) -> Result<u64> {
        count(&*self.pool, state).await
    }
    async fn redeliver_notice(
        &self,
        id: &str,
        tenant: Option<&str>,
        now_ms: i64,
    ) -> Result<Notice> {
        redeliver(&*self.pool, id, tenant, now_ms).await
    }
    async fn prune_notices(&self, before_ms: i64) -> Result<u64> {
        prune(&*self.pool, before_ms).await
    }
}
