//! toolgate-ledger: the gateway's durable state — approvals, operations, and
//! the receipt log with its checkpoints and key history — behind one [`Ledger`] trait
//! with two stores that pass one test suite: an embedded SQLite file (the
//! default; the gateway and the operator's CLI share it) and PostgreSQL
//! (`ledger = "postgres://…"`, for replicas).
//!
//! Both stores enforce the state machines of `toolgate_core::approval` and
//! `toolgate_core::operation` in their schema (triggers), and every change
//! is one conditional statement or one transaction, so two gateways racing
//! the same approval or key cannot both win.

#![warn(missing_docs)]

mod connections;
mod digests;
mod error;
mod fleet;
mod postgres;
mod sqlite;

pub use connections::Connection;
pub use error::LedgerError;
pub use fleet::{
    Attempt, DEFAULT_LEASE_MS, EVERY_APPROVAL, NewNotice, Notice, NoticeState, StoredSession,
};
pub use postgres::PostgresLedger;
pub use sqlite::{SqliteLedger, Synchronous};
pub use toolgate_core as core;
pub use toolgate_core::receipt::Draft;

use std::sync::Arc;

use toolgate_core::approval::{Approval, ApprovalState, Binding};
use toolgate_core::merkle::Hash;
use toolgate_core::operation::{Operation, OperationKey, OperationState};
use toolgate_core::trifecta::LegCall;

/// A ledger call's result: a [`LedgerError`] unless another error is named.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// What a new approval asks for.
#[derive(Debug, Clone)]
pub struct NewApproval {
    /// The approval's id (`apr_…`), chosen by the gateway; a taken id is refused.
    pub id: String,
    /// The one exact call it can approve: tenant, caller, server, tool, proposal and policy version.
    pub binding: Binding,
    /// The exact arguments the approver is shown.
    pub arguments: serde_json::Value,
    /// Why approval is needed (the policy's annotation, or the rules that asked for it).
    pub reason: String,
    /// The ids of the rules that required approval (policy rule ids, or `registry`).
    pub rules: Vec<String>,
    /// When it is asked for (ms since the Unix epoch): its `created_ms`.
    pub now_ms: i64,
    /// How long it can be decided and used: it expires at `now_ms + ttl_ms`.
    pub ttl_ms: i64,
    /// The receipt of the decision to wait for it, appended in the same transaction.
    pub receipt: Option<Draft>,
    /// The person behind the caller who asked (its subject): they may not
    /// decide it under any credential.
    pub subject: String,
    /// The client's own operation key the call was sent with, if any: the
    /// approval is for that operation only.
    pub operation_key: Option<String>,
    /// The notices telling approvers it waits, written to the outbox in
    /// the same transaction (so none is lost with a replica).
    pub notices: Vec<NewNotice>,
}

/// Who decides an approval: the credential (a `[callers]` name), the
/// person behind it (its subject) and the tenant it acts in.
#[derive(Debug, Clone, Copy)]
pub struct Decider<'a> {
    /// The approver's caller name, recorded as `decided_by`.
    pub name: &'a str,
    /// The approver's subject: the same person as the asker is refused.
    pub subject: &'a str,
    /// The approver's tenant: another tenant's approval is not found.
    pub tenant: &'a str,
}

/// A write about to be dispatched.
#[derive(Debug, Clone)]
pub struct NewOperation {
    /// The operation's id (`op_…`); used only when this call creates the row
    /// (a take-over keeps the existing operation's id).
    pub id: String,
    /// The idempotency key it reserves, unique per tenant, server and tool.
    pub key: OperationKey,
    /// Who makes the write; on a take-over it replaces the earlier holder.
    pub caller: String,
    /// The payload hash: the same key with another proposal is a conflict, never a take-over.
    pub proposal_sha256: String,
    /// The approval the write runs under, if any.
    pub approval_id: Option<String>,
    /// The canonical arguments, kept so a reconciler can look for the effect.
    pub arguments: serde_json::Value,
    /// Until when this call answers for the reservation; once it lapses, a
    /// reservation may be taken over.
    pub lease_until_ms: i64,
    /// The decision's receipt, appended in the same transaction when this
    /// call comes to hold the operation (and only then).
    pub receipt: Option<Draft>,
}

/// What `begin_operation` found.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// This call holds the operation (new, or taken over): it may dispatch.
    Mine(Operation),
    /// Another call's operation under the key; `toolgate_core::operation::reuse`
    /// says what this call gets.
    Theirs(Operation),
}

/// How an operator or a reconciler settles an `unknown` operation.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// Whether the effect happened: `true` settles it `reconciled_applied`
    /// (final), `false` `reconciled_not_applied` (the key may run again).
    pub applied: bool,
    /// Who settled it (an operator, `reconciler:<tool>`, or `toolgate`), kept as its `resolved_by`.
    pub by: String,
    /// Why, kept as its `resolution`.
    pub reason: String,
    /// For `applied`: the result a replay returns (the evidence found).
    pub outcome: Option<String>,
    /// When it is settled; "not applied" is refused while the lease has not ended by then.
    pub now_ms: i64,
    /// The settlement's receipt, appended in the same transaction.
    pub receipt: Option<Draft>,
}

/// One leaf of the receipt log, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReceipt {
    /// Its position in the log: indexes run contiguously from 0.
    pub log_index: u64,
    /// JCS text of the logged receipt (`{"receipt"[, "sig"]}`): the leaf's
    /// bytes. The row keeps it compactly (`receipt::compact`), or as this
    /// text when it was written before that form.
    pub logged: String,
    /// What the published log holds for it, when that is not `logged`
    /// itself: a format-3 receipt's commitment (`receipt::entry_bytes`).
    pub commitment: Option<String>,
    /// RFC 6962's leaf hash of its entry: what the log's Merkle tree is
    /// built from (computed when read: a row does not keep it).
    pub leaf_hash: Hash,
    /// Private: the secret behind the receipt's salted hashes.
    pub salt: [u8; 32],
    /// Private: the record of what was asked (the caller, the tool, the arguments and how the call was decided; JSON). Column `proposal`.
    pub asked: Option<String>,
}

impl StoredReceipt {
    /// A row as a store reads it: `body` is the compact form, or the JCS
    /// text of a row written before it; `asked` as packed with the receipt's values.
    pub(crate) fn from_row(
        log_index: u64,
        body: &[u8],
        salt: [u8; 32],
        asked: Option<String>,
        digests: &digests::Dictionary,
    ) -> Result<Self> {
        use toolgate_core::receipt::compact;
        let (logged, asked) = if body.first() == Some(&b'{') {
            // Written before the compact form, so before format 3: the
            // entry is the text itself.
            let logged = String::from_utf8(body.to_vec()).map_err(|_| {
                LedgerError::Store(format!("receipt {log_index}: its stored text is not UTF-8"))
            })?;
            return Ok(Self {
                log_index,
                commitment: None,
                leaf_hash: toolgate_core::merkle::leaf_hash(logged.as_bytes()),
                logged,
                salt,
                asked,
            });
        } else {
            let decoded = digests
                .decode(body, log_index)
                .map_err(|e| LedgerError::Store(format!("receipt {log_index}: {e}")))?;
            let asked = asked.map(|a| compact::unpack_asked(&a, &asked_refs(&decoded.receipt)));
            (decoded, asked)
        };
        Ok(Self::of(log_index, &logged, salt, asked))
    }

    /// The row of `logged` at `log_index`, its entry and leaf hash computed.
    pub fn of(
        log_index: u64,
        logged: &toolgate_core::receipt::LoggedReceipt,
        salt: [u8; 32],
        asked: Option<String>,
    ) -> Self {
        use toolgate_core::receipt;
        let text = logged.to_json();
        let commitment = (logged.receipt.v >= receipt::COMMITTED_VERSION).then(|| {
            String::from_utf8(
                receipt::entry_bytes(logged, Some(&receipt::opening_key(&salt, log_index)))
                    .expect("the key is given"),
            )
            .expect("an entry is ASCII")
        });
        let leaf_hash =
            toolgate_core::merkle::leaf_hash(commitment.as_deref().unwrap_or(&text).as_bytes());
        Self { log_index, commitment, leaf_hash, logged: text, salt, asked }
    }

    /// The bytes the published log holds for it: its commitment (format 3
    /// on), or the logged receipt itself.
    pub fn entry(&self) -> &str {
        self.commitment.as_deref().unwrap_or(&self.logged)
    }

    /// The key that opens its commitment, for a format-3 receipt.
    pub fn opening_key(&self) -> Option<[u8; 32]> {
        self.commitment
            .is_some()
            .then(|| toolgate_core::receipt::opening_key(&self.salt, self.log_index))
    }

    /// Leaf hashes of rows read in order, checked to be exactly `from..to`.
    pub(crate) fn leaf_hashes(rows: Vec<Self>, from: u64, to: u64) -> Result<Vec<Hash>> {
        let first = rows.first().map(|r| r.log_index);
        contiguous(rows.into_iter().map(|r| r.leaf_hash).collect(), first, from, to)
    }
}

/// `leaves`, read in order from the index `first`, checked to be exactly
/// the leaves `from..to` (the rows' indexes run contiguously).
pub(crate) fn contiguous(
    leaves: Vec<Hash>,
    first: Option<u64>,
    from: u64,
    to: u64,
) -> Result<Vec<Hash>> {
    if leaves.len() as u64 != to.saturating_sub(from) || first.is_some_and(|f| f != from) {
        return Err(LedgerError::Store(format!(
            "the log holds {} of the leaves {from}..{to}",
            leaves.len()
        )));
    }
    Ok(leaves)
}

/// A signed checkpoint of the log at `size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// The tree size it covers: the first `size` receipts (never more than the log holds).
    pub size: u64,
    /// The Merkle root of the log at `size`.
    pub root: Hash,
    /// The C2SP signed note.
    pub note: String,
    /// When it was recorded (ms since the Unix epoch).
    pub created_ms: i64,
}

/// An archived range of the log: its first `before` receipts, moved to
/// tlog-tiles files and verified there before their rows were removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredArchive {
    /// How many receipts are archived: a multiple of 256, never more than a checkpoint covers.
    pub before: u64,
    /// The log's root at `before`.
    pub root: Hash,
    /// The tree's right edge at `before` (`merkle::Frontier::subtrees`).
    pub frontier: Vec<Hash>,
    /// When it was archived (ms since the Unix epoch).
    pub archived_ms: i64,
}

/// A key of the history: its kid and verifier keys (signed-note vkey text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogKey {
    /// The key's id, as receipts name it; never bound to another key.
    pub kid: String,
    /// The Ed25519 verifier key.
    pub ed25519: String,
    /// The ML-DSA-65 verifier key, when the key has one.
    pub ml_dsa_65: Option<String>,
    /// When the key was created; the history is listed in this order.
    pub created_ms: i64,
}

/// A tool definition a receipt names by `tool_definition_sha256`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDefinition {
    /// The definition's hash, as receipts name it; each is stored once.
    pub sha256: String,
    /// The upstream server that offers the tool.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The definition itself, as canonical JSON text.
    pub definition: String,
}

/// Whose run, and which: a run id is the caller's own, never shared with
/// another subject or tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunKey {
    /// The caller's tenant.
    pub tenant: String,
    /// The caller's subject.
    pub subject: String,
    /// The run's id (`_meta["io.toolgate/run"]`, the session, or the trace).
    pub run: String,
}

/// A run as the ledger holds it, as of one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunState {
    /// Calls counted in it so far (with this one, when it was counted).
    pub calls: u64,
    /// When it began (ms since the Unix epoch); it began anew once expired.
    pub started_ms: i64,
    /// When it ends.
    pub expires_ms: i64,
    /// The calls that brought each leg of the trifecta in, in order (the
    /// first `MAX_LEGS` of each leg).
    pub legs: Vec<LegCall>,
}

/// How many calls of each leg a run keeps: the first few tell the story;
/// the rest would only grow the row.
pub const MAX_LEGS: i64 = 8;

/// The gateway's durable state, as both stores implement it: every change
/// is one conditional statement or one transaction, so concurrent callers
/// (in this process or on other gateways) cannot both win, and a receipt
/// passed with a change commits with it or not at all.
#[async_trait::async_trait]
pub trait Ledger: Send + Sync {
    /// `sqlite` or `postgres`, for logs and `ops list`.
    fn backend(&self) -> &'static str;

    /// The run `key` as of `now_ms`. With `count`, this call is counted in
    /// it, and a run not yet begun (or expired) begins now, to last
    /// `ttl_ms`; without, nothing is written (a run not begun is empty).
    async fn run(&self, key: &RunKey, count: bool, now_ms: i64, ttl_ms: i64) -> Result<RunState>;

    /// Records that `call` brought its leg into the run `key` (beginning the
    /// run if it has not begun, as `run` with `count` would, but counting no
    /// call). Beyond `MAX_LEGS` calls of one leg, nothing more is kept.
    /// Expired runs and their legs are swept. Returns when the run ends.
    async fn add_run_leg(&self, key: &RunKey, call: LegCall, ttl_ms: i64) -> Result<i64>;

    // Approvals (see toolgate_core::approval).
    /// Records a new pending approval, expiring `ttl_ms` after `now_ms`, and
    /// its `receipt` in the same transaction; a taken id is refused.
    async fn create_approval(&self, new: NewApproval) -> Result<Approval>;
    /// The approval with this id, as stored (one past its expiry may not be
    /// marked expired yet: see `Approval::state_at`).
    async fn approval(&self, id: &str) -> Result<Option<Approval>>;
    /// The newest approval with exactly this binding, opened for a call
    /// under exactly this operation key (or under none).
    async fn latest_approval(
        &self,
        binding: &Binding,
        operation_key: Option<&str>,
    ) -> Result<Option<Approval>>;
    /// Newest first, only `tenant`'s and only `state` when given (`None`:
    /// every tenant, for an operator); approvals past their expiry are
    /// marked expired first.
    async fn approvals(
        &self,
        tenant: Option<&str>,
        state: Option<ApprovalState>,
        now_ms: i64,
    ) -> Result<Vec<Approval>>;
    /// How many approvals are stored in `state`; nothing is marked expired
    /// first, so an approval past its expiry still counts as it was.
    async fn count_approvals(&self, state: ApprovalState) -> Result<u64>;
    /// An approver's decision on a pending approval of the approver's own
    /// tenant (another tenant's is `NotFound`). Nobody decides their own
    /// call: not the caller who asked, nor the same person (subject) under
    /// another credential (`SelfApproval`).
    async fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        approver: Decider<'_>,
        reason: &str,
        now_ms: i64,
    ) -> Result<Approval>;
    /// Uses an approved approval for its one dispatch: exactly one of any
    /// number of concurrent users succeeds.
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<Approval>;

    // Operations (see toolgate_core::operation).
    /// Reserves `new.key` for this call, or reports the operation that holds
    /// it. A reservation left by a crash, or one reconciled as not applied,
    /// is taken over (same payload only) as its next attempt — who settled
    /// the earlier attempt, and why, stays on the record; a dispatched one
    /// whose lease lapsed is marked unknown.
    async fn begin_operation(&self, new: NewOperation, now_ms: i64) -> Result<Begun>;
    /// Durable before the upstream sees the call. `attempt` is the holder's
    /// (`Operation::attempts` when it began): a holder whose attempt was
    /// superseded (its lease lapsed, the operation was settled and run
    /// again) cannot touch the new one.
    async fn mark_dispatched(
        &self,
        id: &str,
        attempt: i64,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<Operation>;
    /// The end of a dispatch: completed, tool_error, unknown, or
    /// reconciled_not_applied (the upstream refused before running it).
    /// `receipt`: the outcome's receipt, appended in the same transaction.
    async fn finish_operation(
        &self,
        id: &str,
        attempt: i64,
        state: OperationState,
        outcome: Option<String>,
        now_ms: i64,
        receipt: Option<Draft>,
    ) -> Result<Operation>;
    /// The operation with this id, as stored (a lapsed lease is not marked unknown here).
    async fn operation(&self, id: &str) -> Result<Option<Operation>>;
    /// The operation that holds `key`, if any, as stored.
    async fn operation_by_key(&self, key: &OperationKey) -> Result<Option<Operation>>;
    /// The newest `limit`, newest first, only `tenant`'s and only `state`
    /// when given (`None`: every tenant); dispatched operations whose lease
    /// lapsed are marked unknown first. By an index, so a page costs its
    /// rows, not the ledger's size (a week of operations is kept).
    async fn operations(
        &self,
        tenant: Option<&str>,
        state: Option<OperationState>,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Operation>>;
    /// Settles an unknown operation: applied (final) or not applied (the
    /// key may run again — only once its lease has ended, so a dispatch
    /// still running upstream cannot be doubled).
    async fn resolve_operation(&self, id: &str, resolution: Resolution) -> Result<Operation>;
    /// Removes settled operations (completed, tool_error, reconciled) last
    /// changed before `settled_before_ms`, [`ARCHIVE_CHUNK`] per short
    /// transaction; returns how many went. Their keys deduplicate no longer:
    /// the gateway's `operation_ttl_ms`. One in flight or of unknown outcome
    /// stays whatever its age (the store refuses to remove it).
    async fn prune_operations(&self, settled_before_ms: i64) -> Result<u64>;

    // The receipt log (see toolgate_core::receipt and merkle).
    /// Appends receipts at the next log indexes, in order, in one
    /// transaction; returns their indexes. For receipts that attest no
    /// change of state (reads, refusals, replays): when this returns they
    /// survive a crash of the process, and they survive power loss once
    /// the next durable commit lands — any change of state, or a checkpoint
    /// (every `checkpoint_ms`), which covers them. A later commit
    /// never survives without an earlier one, so the log stays a prefix.
    async fn append_receipts(&self, drafts: Vec<Draft>) -> Result<Vec<u64>>;
    /// Up to `limit` receipts from log index `from` on, in log order (an
    /// archived receipt has no row: the first returned may come later).
    async fn receipts(&self, from: u64, limit: u64) -> Result<Vec<StoredReceipt>>;
    /// The number of receipts (the log's tree size), archived ones included.
    async fn log_size(&self) -> Result<u64>;
    /// Leaf hashes of indexes `from..to`, in order; an error when any of
    /// them is archived (the archive holds those).
    async fn leaf_hashes(&self, from: u64, to: u64) -> Result<Vec<Hash>>;
    /// The latest archive, if the log was ever archived.
    async fn archived(&self) -> Result<Option<StoredArchive>>;
    /// Records `archive`, then removes the rows of the receipts it covers,
    /// [`ARCHIVE_CHUNK`] at a time, each chunk its own short transaction;
    /// returns how many rows went. The caller has written and verified the
    /// archive's files first. Refused unless it extends the last archive, up
    /// to a checkpointed size, by whole tiles of 256. A run cut off between
    /// chunks leaves rows below the archive, which readers of the whole log
    /// take from the archive instead and the next run removes.
    async fn archive(&self, archive: StoredArchive) -> Result<u64>;
    /// Removes the checkpoints an archive covers (of sizes below the last
    /// archive's; the archive's own stays), [`ARCHIVE_CHUNK`] per short
    /// transaction; returns how many went. The archive's checkpoint signs a
    /// tree that holds each of them, and its tiles give any proof below it.
    async fn drop_covered_checkpoints(&self) -> Result<u64>;
    /// Records a signed checkpoint; false when one of that size exists.
    async fn add_checkpoint(&self, checkpoint: StoredCheckpoint) -> Result<bool>;
    /// Every checkpoint, smallest size first.
    async fn checkpoints(&self) -> Result<Vec<StoredCheckpoint>>;
    /// The checkpoint of tree size `size`, or the latest (the largest) with
    /// `None`: one row by the key, however many checkpoints there are.
    async fn checkpoint(&self, size: Option<u64>) -> Result<Option<StoredCheckpoint>>;
    /// Adds a key to the history. The same key again is a no-op; another key under a kid already
    /// recorded is refused (`LedgerError::Store`): a kid names one key forever.
    async fn add_log_key(&self, key: LogKey) -> Result<()>;
    /// The key history, oldest first (by `created_ms`, then kid).
    async fn log_keys(&self) -> Result<Vec<LogKey>>;
    /// Remembers tool definitions (a hash already there is left as it is).
    async fn add_tool_definitions(
        &self,
        definitions: Vec<ToolDefinition>,
        now_ms: i64,
    ) -> Result<()>;
    /// Every remembered tool definition, by server and tool, first remembered first.
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>>;

    // The fleet (see `fleet`).
    /// Records that `replica` is alive at `now_ms`, forgets replicas not
    /// seen for `lease_ms`, and returns how many are alive (this one too).
    async fn heartbeat(
        &self,
        replica: &str,
        started_ms: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<u32>;
    /// `replica` stops: the others rebalance at their next heartbeat.
    async fn leave(&self, replica: &str) -> Result<()>;
    /// Opens a console session (sweeping ended ones).
    async fn open_session(&self, session: StoredSession) -> Result<()>;
    /// The session whose id hashes to `id_sha256`, unless it has ended by `now_ms`.
    async fn session(&self, id_sha256: &str, now_ms: i64) -> Result<Option<StoredSession>>;
    /// Ends one session (sign-out); false when there was none.
    async fn end_session(&self, id_sha256: &str) -> Result<bool>;
    /// Ends every session of `subject` in `tenant` (sign-out everywhere);
    /// returns how many ended.
    async fn end_sessions_of(&self, tenant: &str, subject: &str) -> Result<u64>;
    /// Claims up to `limit` pending notices due by `now_ms` until
    /// `claimed_until_ms`: no other replica takes them meanwhile (one
    /// that dies holding them lets the claim lapse, and another delivers).
    async fn claim_notices(
        &self,
        now_ms: i64,
        claimed_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<Notice>>;
    /// Records how an attempt at a pending notice ended.
    async fn notice_attempted(
        &self,
        id: &str,
        attempt: Attempt,
        status: Option<u16>,
        error: Option<String>,
        now_ms: i64,
    ) -> Result<()>;
    /// Notices, newest first: only those of `tenant`'s approvals and only
    /// `state`'s when given (`None`: every tenant, for an operator).
    async fn notices(
        &self,
        tenant: Option<&str>,
        state: Option<NoticeState>,
        limit: usize,
    ) -> Result<Vec<Notice>>;
    /// How many notices are in `state`.
    async fn count_notices(&self, state: NoticeState) -> Result<u64>;
    /// A dead notice made pending again, due now, its attempts counted
    /// afresh (an operator fixed the receiver); `NoticeNotFound` unless it
    /// is dead (and, with `tenant`, of one of that tenant's approvals).
    async fn redeliver_notice(&self, id: &str, tenant: Option<&str>, now_ms: i64)
    -> Result<Notice>;
    /// Removes delivered notices last changed before `before_ms`; returns how many went.
    async fn prune_notices(&self, before_ms: i64) -> Result<u64>;

    // People's own grants at upstream servers (see `connections`).
    /// Writes the grant of its (tenant, subject, server), replacing any:
    /// a new grant (the person connected again). A refresh in flight is
    /// superseded: its lease is released, so its `finish_refresh` writes
    /// nothing over this grant.
    async fn put_connection(&self, connection: Connection) -> Result<()>;
    /// The grant of `subject` in `tenant` at `server`, if they connected.
    async fn connection(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
    ) -> Result<Option<Connection>>;
    /// Every grant, only `tenant`'s when given (`None`: every tenant, for
    /// an operator), by tenant, subject and server. For the console and
    /// `toolgate doctor`, which show who is connected and until when, never
    /// the sealed tokens.
    async fn connections(&self, tenant: Option<&str>) -> Result<Vec<Connection>>;
    /// Removes a grant (the person disconnected); false when there was
    /// none. A refresh in flight loses its lease: its `finish_refresh`
    /// cannot bring the grant back.
    async fn delete_connection(&self, tenant: &str, subject: &str, server: &str) -> Result<bool>;
    /// Claims the refresh of a grant for `holder` (a replica, or one task of
    /// it) until `until_ms`: true when nobody holds an unexpired lease on it
    /// at `now_ms`, or `holder` does (the lease is then extended). While
    /// it is held nobody else refreshes, so a rotating refresh token is
    /// spent once across the fleet; one who dies holding it lets it lapse.
    async fn claim_refresh(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool>;
    /// Ends `holder`'s refresh: in one transaction, writes `replacement`
    /// (the refreshed grant, if the refresh produced one) and releases the
    /// lease — only if `holder` still holds it (another took over a lapsed
    /// lease, or the grant was put or deleted meanwhile): otherwise false,
    /// and nothing is written. A lapsed lease nobody took is still its
    /// holder's. A replacement of another (tenant, subject, server) is
    /// refused.
    async fn finish_refresh(
        &self,
        tenant: &str,
        subject: &str,
        server: &str,
        holder: &str,
        replacement: Option<Connection>,
    ) -> Result<bool>;
    /// Keeps an authorization request's state (sealed by the gateway) under
    /// the SHA-256 of its `state` parameter until `expires_ms`; a taken id
    /// is refused.
    async fn put_oauth_state(
        &self,
        id_sha256: &str,
        sealed: Vec<u8>,
        expires_ms: i64,
    ) -> Result<()>;
    /// Takes the state whose id hashes to `id_sha256`: it is deleted as it
    /// is returned, so of any number of takers (on any replica) one gets it.
    /// One expired by `now_ms` is deleted and not returned.
    async fn take_oauth_state(&self, id_sha256: &str, now_ms: i64) -> Result<Option<Vec<u8>>>;
    /// Removes the states expired by `before_ms` (`expires_ms` at or before
    /// it: authorizations never finished); returns how many went.
    async fn prune_oauth_states(&self, before_ms: i64) -> Result<u64>;

    /// Wake-ups: the id of each approval decided (or expired), by this
    /// process or — on PostgreSQL — by any, as it happens; or
    /// [`EVERY_APPROVAL`] when some may have been missed. `None` where the
    /// store cannot tell (polling covers it).
    fn decisions(&self) -> Option<tokio::sync::broadcast::Receiver<String>>;
}

/// A draft sealed at `log_index`, as a row holds it (no leaf hash: the
/// checkpointer computes it, off the answer's path).
pub(crate) struct Row {
    /// The compact form of the logged receipt (`receipt::compact`).
    pub body: Vec<u8>,
    pub salt: [u8; 32],
    /// The record of what was asked, packed (`compact::pack_asked`).
    pub asked: Option<String>,
}

/// Seals a draft at `log_index` into the row that stores it, naming the
/// digests `digests` has numbers for.
pub(crate) fn seal(
    draft: Draft,
    log_index: u64,
    digests: &digests::Dictionary,
) -> Result<(Row, Hash)> {
    let (sealed, salt, asked) = draft
        .seal(log_index)
        .map_err(|e| LedgerError::Store(format!("cannot seal a receipt: {e}")))?;
    let asked = asked.map(|a| {
        toolgate_core::receipt::compact::pack_asked(&a, &asked_refs(&sealed.logged.receipt))
    });
    Ok((Row { body: digests.encode(&sealed.logged), salt, asked }, sealed.leaf_hash))
}

/// 32-byte hashes, concatenated, as a list.
pub(crate) fn hashes(bytes: &[u8]) -> Result<Vec<Hash>> {
    if bytes.len() % 32 != 0 {
        return Err(LedgerError::Store(format!(
            "a stored list of hashes is {} bytes, not a multiple of 32",
            bytes.len()
        )));
    }
    Ok(bytes.chunks(32).map(|h| h.try_into().expect("32 bytes")).collect())
}

/// Why a settlement was refused: only an unknown operation is settled, and
/// "not applied" (which lets the key run again) only once the dispatch can
/// no longer be running upstream.
pub(crate) fn settle_rule(applied: bool) -> &'static str {
    if applied {
        "only an unknown operation is reconciled"
    } else {
        "only an unknown operation whose lease has ended is settled as not applied (until then its dispatch may still be running upstream); try again shortly"
    }
}

/// The receipt's values its record of what was asked is packed against.
fn asked_refs(
    r: &toolgate_core::receipt::Receipt,
) -> toolgate_core::receipt::compact::AskedRefs<'_> {
    [&r.caller, &r.tenant, &r.server, &r.tool]
}

/// How many archived rows one transaction removes: removing a whole range at
/// once held SQLite's writer, and every call's receipt behind it, for a
/// tenth of a second or more under load (the soak: maxima of 128–220 ms).
pub const ARCHIVE_CHUNK: u64 = 2048;

/// `prune_operations`' statement, with the store's placeholder sign (`?`
/// or `$`): up to `2` settled operations last changed before `1`, found
/// by the index on state and creation (an operation is changed no earlier
/// than it was created). The state and age are checked again outside the
/// subquery: on PostgreSQL a row a concurrent call changed meanwhile
/// (settled as not applied, now run again) is checked anew, and stays. The
/// store's own trigger refuses the unsettled states (in flight, unknown).
macro_rules! prune_operations_sql {
    ($p:literal) => {
        concat!(
            "DELETE FROM operations WHERE id IN (SELECT id FROM operations WHERE state IN (",
            "'completed', 'tool_error', 'reconciled_applied', 'reconciled_not_applied'",
            ") AND created_ms < ",
            $p,
            "1 AND updated_ms < ",
            $p,
            "1 LIMIT ",
            $p,
            "2) AND state IN (",
            "'completed', 'tool_error', 'reconciled_applied', 'reconciled_not_applied'",
            ") AND updated_ms < ",
            $p,
            "1"
        )
    };
}
pub(crate) use prune_operations_sql;

/// Runs `step` (a removal of at most [`ARCHIVE_CHUNK`] rows, its own short
/// transaction) until it removes fewer; returns how many went in all.
pub(crate) async fn chunked<F, Fut>(step: F) -> Result<u64>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<u64>>,
{
    let mut removed = 0;
    loop {
        let n = step().await?;
        removed += n;
        if n < ARCHIVE_CHUNK {
            return Ok(removed);
        }
    }
}

/// Opens the ledger a config names: a `postgres://` URL, or else the path
/// of the SQLite file (any other `scheme://` is refused, not taken for a path).
pub async fn open(location: &str) -> Result<Arc<dyn Ledger>> {
    open_as(location, false).await
}

/// `open`, for the process that serves calls: on SQLite, a read's
/// receipts are sequenced rather than each committed (see
/// `SqliteLedger::open_sequencing`). Other processes (the CLI) use `open`.
pub async fn open_sequencing(location: &str) -> Result<Arc<dyn Ledger>> {
    open_as(location, true).await
}

async fn open_as(location: &str, sequences: bool) -> Result<Arc<dyn Ledger>> {
    let scheme = location.split("://").next().unwrap_or_default().to_ascii_lowercase();
    if location.contains("://") && (scheme == "postgres" || scheme == "postgresql") {
        Ok(Arc::new(PostgresLedger::connect(location).await?))
    } else if location.contains("://") {
        Err(LedgerError::Store(format!(
            "unknown ledger scheme `{scheme}`; use postgres://… or a SQLite file path"
        )))
    } else {
        Ok(Arc::new(SqliteLedger::open_with(
            std::path::Path::new(location),
            Synchronous::Full,
            true,
            sequences,
        )?))
    }
}
