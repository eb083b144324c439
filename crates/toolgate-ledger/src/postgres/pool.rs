//! A few pipelined connections with their prepared statements. A connection
//! that broke (the server restarted) is replaced on next use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

use crate::{LedgerError, Result};

struct Conn {
    client: Client,
    statements: Mutex<HashMap<&'static str, Statement>>,
}

pub struct Pool {
    config: tokio_postgres::Config,
    slots: Vec<Mutex<Arc<Conn>>>,
    next: AtomicUsize,
}

async fn open(config: &tokio_postgres::Config) -> Result<Conn> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(target: "toolgate::ledger", error = %e, "a PostgreSQL connection ended");
        }
    });
    Ok(Conn { client, statements: Mutex::new(HashMap::new()) })
}

impl Pool {
    pub async fn connect(url: &str, size: usize) -> Result<Self> {
        let config: tokio_postgres::Config = url.parse().map_err(|e| LedgerError::Store(format!("invalid ledger URL: {e}")))?;
        let mut slots = Vec::with_capacity(size);
        for _ in 0..size {
            slots.push(Mutex::new(Arc::new(open(&config).await?)));
        }
        Ok(Self { config, slots, next: AtomicUsize::new(0) })
    }

    async fn conn(&self) -> Result<Arc<Conn>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let current = self.slots[i].lock().unwrap_or_else(|p| p.into_inner()).clone();
        if !current.client.is_closed() {
            return Ok(current);
        }
        let fresh = Arc::new(open(&self.config).await?);
        *self.slots[i].lock().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        Ok(fresh)
    }

    async fn prepared(&self, sql: &'static str) -> Result<(Arc<Conn>, Statement)> {
        let conn = self.conn().await?;
        let cached = conn.statements.lock().unwrap_or_else(|p| p.into_inner()).get(sql).cloned();
        let statement = match cached {
            Some(s) => s,
            None => {
                let s = conn.client.prepare(sql).await?;
                conn.statements.lock().unwrap_or_else(|p| p.into_inner()).insert(sql, s.clone());
                s
            }
        };
        Ok((conn, statement))
    }

    pub async fn query(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let (conn, statement) = self.prepared(sql).await?;
        Ok(conn.client.query(&statement, params).await?)
    }

    pub async fn query_opt(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        let (conn, statement) = self.prepared(sql).await?;
        Ok(conn.client.query_opt(&statement, params).await?)
    }

    pub async fn execute(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let (conn, statement) = self.prepared(sql).await?;
        Ok(conn.client.execute(&statement, params).await?)
    }

    /// Applies the migrations not yet applied, one transaction each, under
    /// an advisory lock so replicas starting together apply them once.
    pub async fn migrate(&self, migrations: &[&str]) -> Result<()> {
        let mut conn = open(&self.config).await?;
        let tx = conn.client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock(7461001)", &[]).await?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS toolgate_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)").await?;
        let applied: i32 = tx.query_one("SELECT coalesce(max(version), 0) FROM toolgate_migrations", &[]).await?.get(0);
        for (i, sql) in migrations.iter().enumerate().skip(applied as usize) {
            tx.batch_execute(sql).await?;
            let version = i as i32 + 1;
            tx.execute("INSERT INTO toolgate_migrations (version, applied_ms) VALUES ($1, (extract(epoch from now()) * 1000)::bigint)", &[&version]).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
