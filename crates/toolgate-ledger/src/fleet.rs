//! What replicas sharing one ledger agree on beyond approvals and
//! operations: who is alive (a caller's rate is shared out among them),
//! console sessions (any replica serves any approver), and the outbox of
//! notices (delivered at least once by whichever replica is alive).

use crate::Result;

/// How long a replica counts as alive after its last heartbeat unless
/// the caller says otherwise: three missed beats of a second.
pub const DEFAULT_LEASE_MS: i64 = 3_000;

/// The wake-up sent when any approval may have been decided unseen (a
/// listener reconnected): every held call reads its approval again.
pub const EVERY_APPROVAL: &str = "*";

/// A notice to deliver, written in the transaction that opens its approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotice {
    /// Its delivery id (`dlv_…`): the same on every attempt, by any replica,
    /// so a receiver can deduplicate.
    pub id: String,
    /// The configured webhook's name it goes to.
    pub webhook: String,
    /// The body to POST (JSON text), made when the approval was opened.
    pub body: String,
}

/// Where a notice is in its life: pending → delivered | dead; dead →
/// pending when an operator delivers it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeState {
    /// Waiting for its first or next attempt.
    Pending,
    /// Accepted by its webhook (2xx).
    Delivered,
    /// Its attempts ran out: an operator sees it (console, `toolgate doctor`).
    Dead,
}

impl NoticeState {
    /// As stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// From its stored name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Dead].into_iter().find(|n| n.as_str() == s)
    }
}

/// A notice as the outbox holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// Its delivery id.
    pub id: String,
    /// The approval it tells of.
    pub approval_id: String,
    /// The webhook's name.
    pub webhook: String,
    /// The body to POST.
    pub body: String,
    /// Where it is.
    pub state: NoticeState,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is due (pending).
    pub next_ms: i64,
    /// When it was written (with its approval).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// The HTTP status of the last attempt, if it got one.
    pub last_status: Option<u16>,
    /// Why the last attempt failed without a status (no URL in it).
    pub last_error: Option<String>,
}

/// How an attempt at a notice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Accepted.
    Delivered,
    /// Failed; due again at `next_ms`.
    Retry {
        /// When the next attempt is due.
        next_ms: i64,
    },
    /// Failed, and its attempts ran out.
    Dead,
}

impl Attempt {
    /// The state and due time it leaves a notice in.
    pub(crate) fn leaves(self, now_ms: i64) -> (&'static str, i64) {
        match self {
            Self::Delivered => (NoticeState::Delivered.as_str(), now_ms),
            Self::Retry { next_ms } => (NoticeState::Pending.as_str(), next_ms),
            Self::Dead => (NoticeState::Dead.as_str(), now_ms),
        }
    }
}

/// A console session as the ledger keeps it: never its id, only the id's
/// SHA-256, so reading the ledger signs nobody in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// Hex SHA-256 of the session's id (the cookie's value).
    pub id_sha256: String,
    /// The signed-in person's tenant.
    pub tenant: String,
    /// The signed-in person (sign-out everywhere ends all of theirs).
    pub subject: String,
    /// The caller as JSON (name, subject, tenant, roles) at sign-in.
    pub caller: String,
    /// When it was opened.
    pub created_ms: i64,
    /// When it ends: no later than the access token it was opened with.
    pub expires_ms: i64,
}

/// The fleet: which replicas are alive, the console's sessions, and the
/// outbox of notices that tell approvers an approval waits.
#[async_trait::async_trait]
pub trait FleetStore: Send + Sync {
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
}
