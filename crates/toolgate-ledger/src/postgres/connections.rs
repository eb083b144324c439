//! People's grants at upstream servers, their refresh leases and the
//! authorization states under way, on PostgreSQL (see
//! `crate::connections`). Each change is one statement: where it touches
//! a grant and its lease together, a data-modifying `WITH` makes the two
//! one atomic change, off the pool's single transaction connection.

use tokio_postgres::Row;

use super::PostgresLedger;
use super::pool::Db;
use crate::{Connection, ConnectionStore, Result};

fn grant(r: &Row) -> Connection {
    Connection {
        tenant: r.get("tenant"),
        subject: r.get("subject"),
        server: r.get("server"),
        sealed: r.get("sealed"),
        expires_ms: r.get("expires_ms"),
        updated_ms: r.get("updated_ms"),
    }
}

/// `INSERT INTO connections … SELECT $1…$6 FROM <from>`: the grant written
/// over any of its key, once for each row `from` yields. (The casts: a
/// parameter in a `SELECT` list takes no type from the column it fills.)
macro_rules! upsert_from {
    ($from:literal) => {
        concat!(
            "INSERT INTO connections (tenant, subject, server, sealed, expires_ms, updated_ms) SELECT $1::text, $2::text, $3::text, $4::bytea, $5::bigint, $6::bigint FROM ",
            $from,
            " ON CONFLICT (tenant, subject, server) DO UPDATE SET sealed = excluded.sealed, expires_ms = excluded.expires_ms, updated_ms = excluded.updated_ms"
        )
    };
}

pub async fn put(db: &impl Db, g: &Connection) -> Result<()> {
    // A new grant supersedes a refresh in flight: its lease goes with the same statement.
    db.execute(
        concat!("WITH released AS (DELETE FROM refresh_leases WHERE tenant = $1 AND subject = $2 AND server = $3) ", upsert_from!("(VALUES (1)) AS one")),
        &[&g.tenant, &g.subject, &g.server, &g.sealed, &g.expires_ms, &g.updated_ms],
    )
    .await?;
    Ok(())
}

pub async fn find(
    db: &impl Db,
    tenant: &str,
    subject: &str,
    server: &str,
) -> Result<Option<Connection>> {
    let row = db
        .query_opt(
            "SELECT tenant, subject, server, sealed, expires_ms, updated_ms FROM connections WHERE \
                tenant = $1 AND subject = $2 AND server = $3",
            &[&tenant, &subject, &server],
        )
        .await?;
    Ok(row.as_ref().map(grant))
}

pub async fn list(db: &impl Db, tenant: Option<&str>) -> Result<Vec<Connection>> {
    let rows = db
        .query(
            "SELECT tenant, subject, server, sealed, expires_ms, updated_ms FROM connections \
                WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant, subject, server",
            &[&tenant],
        )
        .await?;
    Ok(rows.iter().map(grant).collect())
}

pub async fn delete(db: &impl Db, tenant: &str, subject: &str, server: &str) -> Result<bool> {
    let removed = db
        .execute(
            "WITH released AS (DELETE FROM refresh_leases WHERE tenant = $1 AND subject = $2 AND \
                server = $3) DELETE FROM connections WHERE tenant = $1 AND subject = $2 AND \
                server = $3",
            &[&tenant, &subject, &server],
        )
        .await?;
    Ok(removed > 0)
}

pub async fn claim(
    db: &impl Db,
    tenant: &str,
    subject: &str,
    server: &str,
    holder: &str,
    now_ms: i64,
    until_ms: i64,
) -> Result<bool> {
    // Two claimers at once: the second waits on the first's row, then
    // checks the condition against it, and changes nothing.
    let changed = db
        .execute(
            "INSERT INTO refresh_leases (tenant, subject, server, holder, until_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (tenant, subject, server) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms \
             WHERE refresh_leases.until_ms <= $6 OR refresh_leases.holder = excluded.holder",
            &[&tenant, &subject, &server, &holder, &until_ms, &now_ms],
        )
        .await?;
    Ok(changed > 0)
}

pub async fn finish(
    db: &impl Db,
    tenant: &str,
    subject: &str,
    server: &str,
    holder: &str,
    replacement: Option<&Connection>,
) -> Result<bool> {
    crate::connections::same_grant(replacement, tenant, subject, server)?;
    let Some(g) = replacement else {
        return Ok(db
            .execute(
                "DELETE FROM refresh_leases WHERE tenant = $1 AND subject = $2 AND server = $3 AND \
                    holder = $4",
                &[&tenant, &subject, &server, &holder],
            )
            .await?
            > 0);
    };
    // The grant is written once for the lease released: not at all unless `holder` held it.
    let written = db
        .execute(
            concat!(
                "WITH released AS (DELETE FROM refresh_leases WHERE tenant = $1 AND subject = $2 AND server = $3 AND holder = $7 RETURNING 1) ",
                upsert_from!("released")
            ),
            &[&g.tenant, &g.subject, &g.server, &g.sealed, &g.expires_ms, &g.updated_ms, &holder],
        )
        .await?;
    Ok(written > 0)
}

pub async fn put_state(
    db: &impl Db,
    id_sha256: &str,
    sealed: &[u8],
    expires_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO oauth_states (id_sha256, sealed, expires_ms) VALUES ($1, $2, $3)",
        &[&id_sha256, &sealed, &expires_ms],
    )
    .await?;
    Ok(())
}

pub async fn take_state(db: &impl Db, id_sha256: &str, now_ms: i64) -> Result<Option<Vec<u8>>> {
    // A second taker waits on the first's delete, then finds no row.
    let row = db
        .query_opt(
            "DELETE FROM oauth_states WHERE id_sha256 = $1 RETURNING sealed, expires_ms",
            &[&id_sha256],
        )
        .await?;
    Ok(row.filter(|r| r.get::<_, i64>("expires_ms") > now_ms).map(|r| r.get("sealed")))
}

pub async fn prune_states(db: &impl Db, before_ms: i64) -> Result<u64> {
    db.execute("DELETE FROM oauth_states WHERE expires_ms <= $1", &[&before_ms]).await
}

#[async_trait::async_trait]
impl ConnectionStore for PostgresLedger {
    async fn put_connection(&self, connection: Connection) -> Result<()> {
        put(&*self.pool, &connection).await
    }
    async fn connection(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
    ) -> Result<Option<Connection>> {
        find(&*self.pool, tenant, subject, server).await
    }
    async fn connections(&self, tenant: Option<&str>) -> Result<Vec<Connection>> {
        list(&*self.pool, tenant).await
    }
    async fn delete_connection(&self, tenant: &str, subject: &str, server: &str) -> Result<bool> {
        delete(&*self.pool, tenant, subject, server).await
    }
    async fn claim_refresh(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool> {
        claim(&*self.pool, tenant, subject, server, holder, now_ms, until_ms).await
    }
    async fn finish_refresh(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
        holder: &str,
        replacement: Option<Connection>,
    ) -> Result<bool> {
        finish(&*self.pool, tenant, subject, server, holder, replacement.as_ref()).await
    }
    async fn put_oauth_state(
        &self,
        id_sha256: &str,
        sealed: Vec<u8>,
        expires_ms: i64,
    ) -> Result<()> {
        put_state(&*self.pool, id_sha256, &sealed, expires_ms).await
    }
    async fn take_oauth_state(&self, id_sha256: &str, now_ms: i64) -> Result<Option<Vec<u8>>> {
        take_state(&*self.pool, id_sha256, now_ms).await
    }
    async fn prune_oauth_states(&self, before_ms: i64) -> Result<u64> {
        prune_states(&*self.pool, before_ms).await
    }
}
