//! The PostgreSQL store, for replicas: every change of state is one
//! conditional statement — or, with a receipt to append, one transaction on
//! the transaction connection — so any number of gateways on
//! one database race safely — the unique key and `WHERE state = …` decide
//! who wins, and the triggers of the migrations refuse any edge the state
//! machines do not draw. Migrations run once, under an advisory lock, at
//! connect.

mod approvals;
mod connections;
mod fleet;
mod operations;
mod pool;
mod receipts;
mod runs;
mod sequencer;

use toolgate_core::approval::{Approval, ApprovalState, Binding};
use toolgate_core::operation::{Operation, OperationKey, OperationState};

use toolgate_core::merkle::Hash;

use crate::{
    Attempt, Begun, Connection, Decider, Draft, Ledger, LogKey, NewApproval, NewOperation, Notice,
    NoticeState, Resolution, Result, RunKey, RunState, StoredArchive, StoredCheckpoint,
    StoredReceipt, StoredSession, ToolDefinition, chunked,
};
use pool::Pool;
use toolgate_core::trifecta::LegCall;

/// Each entry is one schema version; never edit a shipped one, append.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_approvals.sql"),
    include_str!("../migrations/postgres/0002_operations.sql"),
    include_str!("../migrations/postgres/0003_receipts.sql"),
    include_str!("../migrations/postgres/0004_approval_subject.sql"),
    include_str!("../migrations/postgres/0005_operation_subject.sql"),
    include_str!("../migrations/postgres/0006_approval_operation_key.sql"),
    include_str!("../migrations/postgres/0007_runs.sql"),
    include_str!("../migrations/postgres/0008_compact_receipts.sql"),
    include_str!("../migrations/postgres/0009_archives.sql"),
    include_str!("../migrations/postgres/0010_digests.sql"),
    include_str!("../migrations/postgres/0011_retention.sql"),
    include_str!("../migrations/postgres/0012_fleet.sql"),
    include_str!("../migrations/postgres/0013_connections.sql"),
];

/// Connections per ledger: each pipelines concurrent statements.
const CONNECTIONS: usize = 8;

/// The PostgreSQL store, for replicas sharing one database: a few
/// pipelined connections for single statements, and one more for
/// transactions (a change with a receipt, and the receipt log).
pub struct PostgresLedger {
    pool: std::sync::Arc<Pool>,
    sequencer: sequencer::Sequencer,
    /// The numbers its rows name recurring digests by (see `digests`).
    digests: std::sync::Arc<crate::digests::Dictionary>,
    /// Every replica's decisions, as the listener hears them.
    decided: tokio::sync::broadcast::Sender<String>,
    /// Dropped with the ledger: stops the listener, started on first use.
    listening: std::sync::OnceLock<tokio::sync::oneshot::Sender<()>>,
}

impl PostgresLedger {
    /// `url`: `postgres://user@host:port/db` (a `?options=-csearch_path%3D…`
    /// puts the tables in another schema).
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = std::sync::Arc::new(Pool::connect(url, CONNECTIONS).await?);
        pool.migrate(MIGRATIONS).await?;
        let digests = std::sync::Arc::new(crate::digests::Dictionary::default());
        let decided = tokio::sync::broadcast::channel(1024).0;
        Ok(Self {
            sequencer: sequencer::Sequencer::start(pool.clone(), digests.clone()),
            pool,
            digests,
            decided,
            listening: Default::default(),
        })
    }
}

#[async_trait::async_trait]
impl Ledger for PostgresLedger {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn create_approval(&self, mut new: NewApproval) -> Result<Approval> {
        if new.receipt.is_none() && new.notices.is_empty() {
            return approvals::create(&*self.pool, &new).await;
        }
        let draft = new.receipt.take();
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let approval = approvals::create(tx, &new).await?;
                    fleet::add_notices(tx, &new.id, &new.notices, new.now_ms).await?;
                    if let Some(draft) = draft {
                        receipts::append(tx, &digests, vec![draft]).await?;
                    }
                    Ok(approval)
                })
            })
            .await
    }
    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        approvals::find(&*self.pool, id).await
    }
    async fn latest_approval(
        &self,
        binding: &Binding,
        operation_key: Option<&str>,
    ) -> Result<Option<Approval>> {
        approvals::latest(&*self.pool, binding, operation_key).await
    }
    async fn approvals(
        &self,
        tenant: Option<&str>,
        state: Option<ApprovalState>,
        now_ms: i64,
    ) -> Result<Vec<Approval>> {
        approvals::list(&*self.pool, tenant, state, now_ms).await
    }
    async fn count_approvals(&self, state: ApprovalState) -> Result<u64> {
        approvals::count(&*self.pool, state).await
    }
    async fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        approver: Decider<'_>,
        reason: &str,
        now_ms: i64,
    ) -> Result<Approval> {
        approvals::decide(&*self.pool, id, approve, &approver, reason, now_ms).await
    }
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<Approval> {
        approvals::consume(&*self.pool, id, now_ms).await
    }

    async fn begin_operation(&self, mut new: NewOperation, now_ms: i64) -> Result<Begun> {
        let Some(draft) = new.receipt.take() else {
            return operations::begin(&*self.pool, &new, now_ms).await;
        };
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let begun = operations::begin(tx, &new, now_ms).await?;
                    if let Begun::Mine(_) = &begun {
                        receipts::append(tx, &digests, vec![draft]).await?;
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
        operations::dispatched(&*self.pool, id, attempt, lease_until_ms, now_ms).await
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
            return operations::finish(&*self.pool, id, attempt, state, outcome, now_ms).await;
        };
        let id = id.to_string();
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let op = operations::finish(tx, &id, attempt, state, outcome, now_ms).await?;
                    receipts::append(tx, &digests, vec![draft]).await?;
                    Ok(op)
                })
            })
            .await
    }
    async fn operation(&self, id: &str) -> Result<Option<Operation>> {
        operations::find(&*self.pool, id).await
    }
    async fn operation_by_key(&self, key: &OperationKey) -> Result<Option<Operation>> {
        operations::find_by_key(&*self.pool, key).await
    }
    async fn operations(
        &self,
        tenant: Option<&str>,
        state: Option<OperationState>,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Operation>> {
        operations::list(&*self.pool, tenant, state, now_ms, limit).await
    }
    async fn prune_operations(&self, settled_before_ms: i64) -> Result<u64> {
        chunked(|| operations::prune(&*self.pool, settled_before_ms, crate::ARCHIVE_CHUNK)).await
    }
    async fn resolve_operation(&self, id: &str, mut resolution: Resolution) -> Result<Operation> {
        let Some(draft) = resolution.receipt.take() else {
            return operations::resolve(&*self.pool, id, &resolution).await;
        };
        let id = id.to_string();
        let digests = self.digests.clone();
        self.pool
            .transaction(move |tx| {
                Box::pin(async move {
                    let op = operations::resolve(tx, &id, &resolution).await?;
                    receipts::append(tx, &digests, vec![draft]).await?;
                    Ok(op)
                })
            })
            .await
    }

    async fn append_receipts(&self, drafts: Vec<Draft>) -> Result<Vec<u64>> {
        self.sequencer.append(drafts).await
    }
    async fn receipts(&self, from: u64, limit: u64) -> Result<Vec<StoredReceipt>> {
        receipts::list(&*self.pool, &self.digests, from, limit).await
    }
    async fn log_size(&self) -> Result<u64> {
        receipts::log_size(&*self.pool).await
    }
    async fn leaf_hashes(&self, from: u64, to: u64) -> Result<Vec<Hash>> {
        receipts::leaf_hashes(&*self.pool, &self.digests, from, to).await
    }
    async fn archived(&self) -> Result<Option<StoredArchive>> {
        receipts::archived(&*self.pool).await
    }
    async fn archive(&self, archive: StoredArchive) -> Result<u64> {
        receipts::record_archive(&*self.pool, &archive).await?;
        chunked(|| receipts::drop_archived(&*self.pool, archive.before, crate::ARCHIVE_CHUNK)).await
    }
    async fn drop_covered_checkpoints(&self) -> Result<u64> {
        chunked(|| receipts::drop_covered_checkpoints(&*self.pool, crate::ARCHIVE_CHUNK)).await
    }
    async fn add_checkpoint(&self, checkpoint: StoredCheckpoint) -> Result<bool> {
        receipts::add_checkpoint(&*self.pool, &checkpoint).await
    }
    async fn checkpoints(&self) -> Result<Vec<StoredCheckpoint>> {
        receipts::checkpoints(&*self.pool).await
    }
    async fn checkpoint(&self, size: Option<u64>) -> Result<Option<StoredCheckpoint>> {
        receipts::checkpoint(&*self.pool, size).await
    }
    async fn add_log_key(&self, key: LogKey) -> Result<()> {
        receipts::add_key(&*self.pool, &key).await
    }
    async fn log_keys(&self) -> Result<Vec<LogKey>> {
        receipts::keys(&*self.pool).await
    }
    async fn add_tool_definitions(
        &self,
        definitions: Vec<ToolDefinition>,
        now_ms: i64,
    ) -> Result<()> {
        receipts::add_definitions(&*self.pool, &definitions, now_ms).await
    }
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>> {
        receipts::definitions(&*self.pool).await
    }
    async fn run(&self, key: &RunKey, count: bool, now_ms: i64, ttl_ms: i64) -> Result<RunState> {
        runs::run(&*self.pool, key, count, now_ms, ttl_ms).await
    }
    async fn add_run_leg(&self, key: &RunKey, call: LegCall, ttl_ms: i64) -> Result<i64> {
        runs::add_leg(&*self.pool, key, &call, ttl_ms).await
    }

    async fn heartbeat(
        &self,
        replica: &str,
        started_ms: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<u32> {
        fleet::heartbeat(&*self.pool, replica, started_ms, now_ms, lease_ms).await
    }
    async fn leave(&self, replica: &str) -> Result<()> {
        fleet::leave(&*self.pool, replica).await
    }
    async fn open_session(&self, session: StoredSession) -> Result<()> {
        fleet::open_session(&*self.pool, &session).await
    }
    async fn session(&self, id_sha256: &str, now_ms: i64) -> Result<Option<StoredSession>> {
        fleet::session(&*self.pool, id_sha256, now_ms).await
    }
    async fn end_session(&self, id_sha256: &str) -> Result<bool> {
        fleet::end_session(&*self.pool, id_sha256).await
    }
    async fn end_sessions_of(&self, tenant: &str, subject: &str) -> Result<u64> {
        fleet::end_sessions_of(&*self.pool, tenant, subject).await
    }
    async fn claim_notices(
        &self,
        now_ms: i64,
        claimed_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<Notice>> {
        fleet::claim(&*self.pool, now_ms, claimed_until_ms, limit).await
    }
    async fn notice_attempted(
        &self,
        id: &str,
        attempt: Attempt,
        status: Option<u16>,
        error: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        fleet::attempted(&*self.pool, id, attempt, status, error.as_deref(), now_ms).await
    }
    async fn notices(
        &self,
        tenant: Option<&str>,
        state: Option<NoticeState>,
        limit: usize,
    ) -> Result<Vec<Notice>> {
        fleet::list(&*self.pool, tenant, state, limit).await
    }
    async fn count_notices(&self, state: NoticeState) -> Result<u64> {
        fleet::count(&*self.pool, state).await
    }
    async fn redeliver_notice(
        &self,
        id: &str,
        tenant: Option<&str>,
        now_ms: i64,
    ) -> Result<Notice> {
        fleet::redeliver(&*self.pool, id, tenant, now_ms).await
    }
    async fn prune_notices(&self, before_ms: i64) -> Result<u64> {
        fleet::prune(&*self.pool, before_ms).await
    }
    async fn put_connection(&self, connection: Connection) -> Result<()> {
        connections::put(&*self.pool, &connection).await
    }
    async fn connection(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
    ) -> Result<Option<Connection>> {
        connections::find(&*self.pool, tenant, subject, server).await
    }
    async fn connections(&self, tenant: Option<&str>) -> Result<Vec<Connection>> {
        connections::list(&*self.pool, tenant).await
    }
    async fn delete_connection(&self, tenant: &str, subject: &str, server: &str) -> Result<bool> {
        connections::delete(&*self.pool, tenant, subject, server).await
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
        connections::claim(&*self.pool, tenant, subject, server, holder, now_ms, until_ms).await
    }
    async fn finish_refresh(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
        holder: &str,
        replacement: Option<Connection>,
    ) -> Result<bool> {
        connections::finish(&*self.pool, tenant, subject, server, holder, replacement.as_ref())
            .await
    }
    async fn put_oauth_state(
        &self,
        id_sha256: &str,
        sealed: Vec<u8>,
        expires_ms: i64,
    ) -> Result<()> {
        connections::put_state(&*self.pool, id_sha256, &sealed, expires_ms).await
    }
    async fn take_oauth_state(&self, id_sha256: &str, now_ms: i64) -> Result<Option<Vec<u8>>> {
        connections::take_state(&*self.pool, id_sha256, now_ms).await
    }
    async fn prune_oauth_states(&self, before_ms: i64) -> Result<u64> {
        connections::prune_states(&*self.pool, before_ms).await
    }
    fn decisions(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        let receiver = self.decided.subscribe();
        self.listening.get_or_init(|| {
            let (stop, stopped) = tokio::sync::oneshot::channel();
            fleet::listen(self.pool.config().clone(), self.decided.clone(), stopped);
            stop
        });
        Some(receiver)
    }
}
