//! What replicas sharing one ledger agree on beyond approvals and
//! operations: who is alive (a caller's rate is shared out among them),
//! console sessions (any replica serves any approver), and the outbox of
//! notices (delivered at least once by whichever replica is alive).

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
