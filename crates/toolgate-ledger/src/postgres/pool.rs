//! A few pipelined connections with their prepared statements, and one
//! more for transactions (the receipt log): a pipelined connection is
//! shared, so a transaction on it would take in other callers' statements.
//! A connection that broke (the server restarted) is replaced on next use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

use crate::migrations::Migration;
use crate::{LedgerError, Result};

pub struct Conn {
    client: Client,
    statements: Mutex<HashMap<&'static str, Statement>>,
}

pub struct Pool {
    config: tokio_postgres::Config,
    slots: Vec<Mutex<Arc<Conn>>>,
    next: AtomicUsize,
    /// The transaction connection: one transaction at a time.
    tx: tokio::sync::Mutex<Option<Conn>>,
}

/// Statements, on the pool or inside a transaction.
pub trait Db: Sync {
    fn query(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>>> + Send;
    fn query_opt(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>>> + Send;
    fn execute(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64>> + Send;
}

impl Conn {
    async fn statement(&self, sql: &'static str) -> Result<Statement> {
        let cached = self.statements.lock().unwrap_or_else(|p| p.into_inner()).get(sql).cloned();
        Ok(match cached {
            Some(s) => s,
            None => {
                let s = self.client.prepare(sql).await?;
                self.statements.lock().unwrap_or_else(|p| p.into_inner()).insert(sql, s.clone());
                s
            }
        })
    }
}

/// A statement inside [`Pool::transaction`].
impl Db for Conn {
    async fn query(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        Ok(self.client.query(&self.statement(sql).await?, params).await?)
    }
    async fn query_opt(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        Ok(self.client.query_opt(&self.statement(sql).await?, params).await?)
    }
    async fn execute(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        Ok(self.client.execute(&self.statement(sql).await?, params).await?)
    }
}

pub type Work<'c, T> = std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 'c>>;

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
    /// How its connections are made (the listener makes one more).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    pub async fn connect(url: &str, size: usize) -> Result<Self> {
        let config: tokio_postgres::Config =
            url.parse().map_err(|e| LedgerError::Store(format!("invalid ledger URL: {e}")))?;
        let mut slots = Vec::with_capacity(size);
        for _ in 0..size {
            slots.push(Mutex::new(Arc::new(open(&config).await?)));
        }
        Ok(Self { config, slots, next: AtomicUsize::new(0), tx: tokio::sync::Mutex::new(None) })
    }

    /// Runs `work` in one transaction on the transaction connection:
    /// committed if it returns Ok, rolled back otherwise.
    pub async fn transaction<T>(
        &self,
        work: impl for<'c> FnOnce(&'c Conn) -> Work<'c, T>,
    ) -> Result<T> {
        let mut slot = self.tx.lock().await;
        if slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            *slot = Some(open(&self.config).await?);
        }
        let conn = slot.as_ref().expect("opened above");
        conn.client.batch_execute("BEGIN").await?;
        match work(conn).await {
            Ok(value) => {
                conn.client.batch_execute("COMMIT").await?;
                Ok(value)
            }
            Err(e) => {
                if conn.client.batch_execute("ROLLBACK").await.is_err() {
                    // The connection is in doubt: open a fresh one next time.
                    *slot = None;
                }
                Err(e)
            }
        }
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
}

/// A statement on the next pipelined connection.
impl Db for Pool {
    async fn query(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.conn().await?.query(sql, params).await
    }
    async fn query_opt(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        self.conn().await?.query_opt(sql, params).await
    }
    async fn execute(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.conn().await?.execute(sql, params).await
    }
}

impl Pool {
    /// Applies the migrations not yet applied, one transaction each, under
    /// an advisory lock so replicas starting together apply them once.
    pub async fn migrate(&self, migrations: &[Migration]) -> Result<()> {
        let mut conn = open(&self.config).await?;
        let tx = conn.client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock(7461001)", &[]).await?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS toolgate_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)").await?;
        let applied: i32 = tx
            .query_one("SELECT coalesce(max(version), 0) AS applied FROM toolgate_migrations", &[])
            .await?
            .get("applied");
        for (i, (_, sql)) in migrations.iter().enumerate().skip(applied as usize) {
            tx.batch_execute(sql).await?;
            let version = i as i32 + 1;
            tx.execute(
                "INSERT INTO toolgate_migrations (version, applied_ms) VALUES ($1, (extract(epoch \
                    from now()) * 1000)::bigint)",
                &[&version],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
