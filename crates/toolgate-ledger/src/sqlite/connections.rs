//! People's grants at upstream servers, their refresh leases and the
//! authorization states under way, on SQLite (see `crate::connections`):
//! each function runs in the writer's transaction, or alone for a read.

use rusqlite::{Connection as Sqlite, OptionalExtension, Row, params};

use super::SqliteLedger;
use crate::{Connection, ConnectionStore, Result};

const COLUMNS: &str = "tenant, subject, server, sealed, expires_ms, updated_ms";

fn grant(r: &Row<'_>) -> rusqlite::Result<Connection> {
    Ok(Connection {
        tenant: r.get("tenant")?,
        subject: r.get("subject")?,
        server: r.get("server")?,
        sealed: r.get("sealed")?,
        expires_ms: r.get("expires_ms")?,
        updated_ms: r.get("updated_ms")?,
    })
}

/// Writes `g` over any grant of its key; the lease stays as it is.
fn upsert(c: &Sqlite, g: &Connection) -> Result<()> {
    c.execute(
        "INSERT INTO connections (tenant, subject, server, sealed, expires_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (tenant, subject, server) DO UPDATE SET sealed = excluded.sealed, \
         expires_ms = excluded.expires_ms, updated_ms = excluded.updated_ms",
        params![g.tenant, g.subject, g.server, g.sealed, g.expires_ms, g.updated_ms],
    )?;
    Ok(())
}

/// Releases whatever lease there is on the grant (of any holder).
fn release(c: &Sqlite, tenant: &str, subject: &str, server: &str) -> Result<()> {
    c.execute(
        "DELETE FROM refresh_leases WHERE tenant = ?1 AND subject = ?2 AND server = ?3",
        [tenant, subject, server],
    )?;
    Ok(())
}

pub fn put(c: &Sqlite, g: &Connection) -> Result<()> {
    release(c, &g.tenant, &g.subject, &g.server)?;
    upsert(c, g)
}

pub fn find(c: &Sqlite, tenant: &str, subject: &str, server: &str) -> Result<Option<Connection>> {
    Ok(c.query_row(
        &format!(
            "SELECT {COLUMNS} FROM connections WHERE tenant = ?1 AND subject = ?2 AND server = ?3"
        ),
        [tenant, subject, server],
        grant,
    )
    .optional()?)
}

pub fn list(c: &Sqlite, tenant: Option<&str>) -> Result<Vec<Connection>> {
    let mut stmt = c.prepare_cached(&format!("SELECT {COLUMNS} FROM connections WHERE ?1 IS NULL OR tenant = ?1 ORDER BY tenant, subject, server"))?;
    let rows = stmt.query_map([tenant], grant)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn delete(c: &Sqlite, tenant: &str, subject: &str, server: &str) -> Result<bool> {
    release(c, tenant, subject, server)?;
    Ok(c.execute(
        "DELETE FROM connections WHERE tenant = ?1 AND subject = ?2 AND server = ?3",
        [tenant, subject, server],
    )? > 0)
}

pub fn claim(
    c: &Sqlite,
    tenant: &str,
    subject: &str,
    server: &str,
    holder: &str,
    now_ms: i64,
    until_ms: i64,
) -> Result<bool> {
    // Taken when free or lapsed, or extended for its own holder; else no row changes.
    Ok(c.execute(
        "INSERT INTO refresh_leases (tenant, subject, server, holder, until_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (tenant, subject, server) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms \
         WHERE refresh_leases.until_ms <= ?6 OR refresh_leases.holder = excluded.holder",
        params![tenant, subject, server, holder, until_ms, now_ms],
    )? > 0)
}

pub fn finish(
    c: &Sqlite,
    tenant: &str,
    subject: &str,
    server: &str,
    holder: &str,
    replacement: Option<&Connection>,
) -> Result<bool> {
    crate::connections::same_grant(replacement, tenant, subject, server)?;
    let released = c.execute(
        "DELETE FROM refresh_leases WHERE tenant = ?1 AND subject = ?2 AND server = ?3 AND \
            holder = ?4",
        [tenant, subject, server, holder],
    )? > 0;
    if let (true, Some(g)) = (released, replacement) {
        upsert(c, g)?;
    }
    Ok(released)
}

pub fn put_state(c: &Sqlite, id_sha256: &str, sealed: &[u8], expires_ms: i64) -> Result<()> {
    c.execute(
        "INSERT INTO oauth_states (id_sha256, sealed, expires_ms) VALUES (?1, ?2, ?3)",
        params![id_sha256, sealed, expires_ms],
    )?;
    Ok(())
}

pub fn take_state(c: &Sqlite, id_sha256: &str, now_ms: i64) -> Result<Option<Vec<u8>>> {
    let taken: Option<(Vec<u8>, i64)> = c
        .query_row(
            "DELETE FROM oauth_states WHERE id_sha256 = ?1 RETURNING sealed, expires_ms",
            [id_sha256],
            |r| Ok((r.get("sealed")?, r.get("expires_ms")?)),
        )
        .optional()?;
    Ok(taken.filter(|(_, expires_ms)| *expires_ms > now_ms).map(|(sealed, _)| sealed))
}

pub fn prune_states(c: &Sqlite, before_ms: i64) -> Result<u64> {
    Ok(c.execute("DELETE FROM oauth_states WHERE expires_ms <= ?1", [before_ms])? as u64)
}

#[async_trait::async_trait]
impl ConnectionStore for SqliteLedger {
    async fn put_connection(&self, connection: Connection) -> Result<()> {
        self.run(move |c| put(c, &connection)).await
    }
    async fn connection(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
    ) -> Result<Option<Connection>> {
        let (tenant, subject, server) =
            (tenant.to_string(), subject.to_string(), server.to_string());
        self.read(move |c| find(c, &tenant, &subject, &server)).await
    }
    async fn connections(&self, tenant: Option<&str>) -> Result<Vec<Connection>> {
        let tenant = tenant.map(str::to_string);
        self.read_many(move |c| list(c, tenant.as_deref())).await
    }
    async fn delete_connection(&self, tenant: &str, subject: &str, server: &str) -> Result<bool> {
        let (tenant, subject, server) =
            (tenant.to_string(), subject.to_string(), server.to_string());
        self.run(move |c| delete(c, &tenant, &subject, &server)).await
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
        let (tenant, subject, server, holder) =
            (tenant.to_string(), subject.to_string(), server.to_string(), holder.to_string());
        // A lease lost at power loss is harmless: the refresh it guarded died with the process.
        self.write_unsynced(move |c| {
            claim(c, &tenant, &subject, &server, &holder, now_ms, until_ms)
        })
        .await
    }
    async fn finish_refresh(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
        holder: &str,
        replacement: Option<Connection>,
    ) -> Result<bool> {
        let (tenant, subject, server, holder) =
            (tenant.to_string(), subject.to_string(), server.to_string(), holder.to_string());
        self.run(move |c| finish(c, &tenant, &subject, &server, &holder, replacement.as_ref()))
            .await
    }
    async fn put_oauth_state(
        &self,
        id_sha256: &str,
        sealed: Vec<u8>,
        expires_ms: i64,
    ) -> Result<()> {
        let id = id_sha256.to_string();
        self.run(move |c| put_state(c, &id, &sealed, expires_ms)).await
    }
    async fn take_oauth_state(&self, id_sha256: &str, now_ms: i64) -> Result<Option<Vec<u8>>> {
        let id = id_sha256.to_string();
        self.run(move |c| take_state(c, &id, now_ms)).await
    }
    async fn prune_oauth_states(&self, before_ms: i64) -> Result<u64> {
        self.run(move |c| prune_states(c, before_ms)).await
    }
}
