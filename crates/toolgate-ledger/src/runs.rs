//! Agent runs: the calls one caller makes under one run id, counted, and
//! the calls that brought each leg of the trifecta in.

use toolgate_core::trifecta::LegCall;

use crate::Result;

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

/// Runs: counts a caller's calls in a run and keeps the legs of the
/// trifecta it brought in, until the run expires.
#[async_trait::async_trait]
pub trait RunStore: Send + Sync {
    /// The run `key` as of `now_ms`. With `count`, this call is counted in
    /// it, and a run not yet begun (or expired) begins now, to last
    /// `ttl_ms`; without, nothing is written (a run not begun is empty).
    async fn run(&self, key: &RunKey, count: bool, now_ms: i64, ttl_ms: i64) -> Result<RunState>;

    /// Records that `call` brought its leg into the run `key` (beginning the
    /// run if it has not begun, as `run` with `count` would, but counting no
    /// call). Beyond `MAX_LEGS` calls of one leg, nothing more is kept.
    /// Expired runs and their legs are swept. Returns when the run ends.
    async fn add_run_leg(&self, key: &RunKey, call: LegCall, ttl_ms: i64) -> Result<i64>;
}
