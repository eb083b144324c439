//! Operations: a write that must take effect at most once per key. Agents
//! retry and replies get lost after the effect happened; the rules here
//! (after Stripe's idempotency keys and the IETF Idempotency-Key draft) say
//! what a call that reuses a key gets. The ledger enforces the same state
//! machine in its schema; this module is the rule both the store and the
//! gateway consult.

use serde::{Deserialize, Serialize};

/// The life of an operation:
///
/// ```text
/// reserved ─► dispatched ─► completed | tool_error | unknown
///    ▲            │                                   │
///    │            └─► reconciled_not_applied ◄────────┤
///    └────────────────────────┘                       └─► reconciled_applied
/// ```
///
/// `reserved` is durable before anything is sent; `dispatched` is durable
/// before the upstream sees the call, so a crash between them is known to
/// have sent nothing. `reconciled_not_applied` (a human or a read tool found
/// no effect, or the upstream refused before running) lets the same key run
/// again; every other end state is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    /// Recorded and not yet sent.
    Reserved,
    /// About to be sent or sent, with no answer recorded yet.
    Dispatched,
    /// Answered with a result.
    Completed,
    /// Answered with a tool error (`isError: true`).
    ToolError,
    /// Sent, with no usable answer: whether it took effect is not known.
    Unknown,
    /// Settled as having taken effect (final).
    ReconciledApplied,
    /// Known not to have taken effect: the same key may run it again.
    ReconciledNotApplied,
}

impl OperationState {
    /// Every state.
    pub const ALL: [OperationState; 7] = [
        Self::Reserved,
        Self::Dispatched,
        Self::Completed,
        Self::ToolError,
        Self::Unknown,
        Self::ReconciledApplied,
        Self::ReconciledNotApplied,
    ];

    /// The snake_case name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Dispatched => "dispatched",
            Self::Completed => "completed",
            Self::ToolError => "tool_error",
            Self::Unknown => "unknown",
            Self::ReconciledApplied => "reconciled_applied",
            Self::ReconciledNotApplied => "reconciled_not_applied",
        }
    }

    /// The state named by `s` (as [`OperationState::as_str`] writes it), if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// Whether the store may move an operation from `self` to `to`.
    pub fn may_become(self, to: OperationState) -> bool {
        use OperationState::*;
        matches!(
            (self, to),
            (Reserved, Reserved | Dispatched)
                | (Dispatched, Completed | ToolError | Unknown | ReconciledNotApplied)
                | (Unknown, ReconciledApplied | ReconciledNotApplied)
                | (ReconciledNotApplied, Reserved)
        )
    }
}

/// What an operation is unique on: the same key means the same operation
/// only for the same tenant and tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OperationKey {
    /// The tenant of the caller who sent the operation (never from the arguments).
    pub tenant: String,
    /// The person who sent it (the caller's subject): a key is its sender's
    /// own, as an idempotency key belongs to one account.
    pub subject: String,
    /// The upstream server's configured name.
    pub server: String,
    /// The tool's name on that upstream (not the namespaced exposed name).
    pub tool: String,
    /// The key's own value: the client's, else `approval:<id>` for a call
    /// under an approval, else a fresh `auto:<id>`. `key` on the wire.
    #[serde(rename = "key")]
    pub value: String,
}

/// One write as the ledger records it: at most one effect per key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The operation's id (`op_…`).
    pub id: String,
    /// What it is unique on.
    #[serde(flatten)]
    pub key: OperationKey,
    /// The name of the caller who reserved it (the latest, after a take-over).
    pub caller: String,
    /// The payload hash: the same key with another proposal is a conflict.
    pub proposal_sha256: String,
    /// The approval this operation runs under, if any.
    pub approval_id: Option<String>,
    /// The canonical arguments, so a reconciler can look for the effect.
    pub arguments: serde_json::Value,
    /// Where it is in its life.
    pub state: OperationState,
    /// The upstream's result as it was answered (raw JSON), once known.
    pub outcome: Option<String>,
    /// How many times the operation was reserved (more than one only after
    /// a crash before dispatch or a `reconciled_not_applied`).
    pub attempts: i64,
    /// When it was first reserved, in ms since the Unix epoch.
    pub created_ms: i64,
    /// When it last changed, in ms since the Unix epoch.
    pub updated_ms: i64,
    /// Until when the gateway that holds it may still answer for it; an
    /// operation still dispatched after this is unknown.
    pub lease_until_ms: i64,
    /// Who settled it, if it was reconciled: an operator, `reconciler:<tool>`,
    /// or `toolgate`.
    pub resolved_by: Option<String>,
    /// Why it was settled as it was.
    pub resolution: Option<String>,
}

/// What a call that presents an existing operation's key gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reuse {
    /// Another payload under the same key: never a new effect, never the old
    /// result in disguise.
    Conflict,
    /// The recorded outcome (a result or a tool error), sent again; nothing
    /// goes upstream.
    Replay,
    /// Still in flight elsewhere: retry after this many milliseconds (at
    /// most a second, at most what is left of the holder's lease).
    InProgress {
        /// How long to wait before retrying, in ms.
        retry_after_ms: i64,
    },
    /// Sent, and its effect is not known: reconcile, never retry blindly.
    Unknown,
    /// Known never to have been sent (a reservation left by a crash), or
    /// reconciled as not applied: this call may run it.
    TakeOver,
}

/// The rule for a call presenting `op`'s key with `proposal_sha256` at `now_ms`.
pub fn reuse(op: &Operation, proposal_sha256: &str, now_ms: i64) -> Reuse {
    use OperationState::*;
    if op.proposal_sha256 != proposal_sha256 {
        return Reuse::Conflict;
    }
    let lapsed = op.lease_until_ms <= now_ms;
    match op.state {
        Completed | ToolError | ReconciledApplied => Reuse::Replay,
        Unknown => Reuse::Unknown,
        Dispatched if lapsed => Reuse::Unknown,
        Reserved if lapsed => Reuse::TakeOver,
        // Most writes end well within their lease: ask again soon.
        Reserved | Dispatched => {
            Reuse::InProgress { retry_after_ms: (op.lease_until_ms - now_ms).clamp(1, 1_000) }
        }
        ReconciledNotApplied => Reuse::TakeOver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op(state: OperationState, lease: i64) -> Operation {
        Operation {
            id: "op_1".into(),
            key: OperationKey {
                tenant: "t".into(),
                server: "s".into(),
                tool: "w".into(),
                value: "k".into(),
                subject: "agent".into(),
            },
            caller: "agent".into(),
            proposal_sha256: "a".repeat(64),
            approval_id: None,
            arguments: serde_json::json!({}),
            state,
            outcome: None,
            attempts: 1,
            created_ms: 0,
            updated_ms: 0,
            lease_until_ms: lease,
            resolved_by: None,
            resolution: None,
        }
    }

    #[test]
    fn states_round_trip_and_match_serde() {
        for s in OperationState::ALL {
            assert_eq!(OperationState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(s.as_str()));
        }
        assert_eq!(OperationState::parse("done"), None);
    }

    #[test]
    fn only_the_drawn_transitions_are_allowed() {
        use OperationState::*;
        let allowed: Vec<(OperationState, OperationState)> = OperationState::ALL
            .iter()
            .flat_map(|a| OperationState::ALL.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| a.may_become(*b))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Reserved, Reserved),
                (Reserved, Dispatched),
                (Dispatched, Completed),
                (Dispatched, ToolError),
                (Dispatched, Unknown),
                (Dispatched, ReconciledNotApplied),
                (Unknown, ReconciledApplied),
                (Unknown, ReconciledNotApplied),
                (ReconciledNotApplied, Reserved),
            ]
        );
    }

    #[test]
    fn reuse_follows_state_and_lease() {
        use OperationState::*;
        let p = "a".repeat(64);
        assert_eq!(reuse(&op(Completed, 0), &p, 10), Reuse::Replay);
        assert_eq!(reuse(&op(ToolError, 0), &p, 10), Reuse::Replay);
        assert_eq!(reuse(&op(ReconciledApplied, 0), &p, 10), Reuse::Replay);
        assert_eq!(reuse(&op(Dispatched, 100), &p, 10), Reuse::InProgress { retry_after_ms: 90 });
        assert_eq!(reuse(&op(Dispatched, 100), &p, 100), Reuse::Unknown);
        assert_eq!(reuse(&op(Reserved, 100), &p, 40), Reuse::InProgress { retry_after_ms: 60 });
        assert_eq!(reuse(&op(Reserved, 100), &p, 100), Reuse::TakeOver);
        assert_eq!(reuse(&op(Unknown, 1_000), &p, 10), Reuse::Unknown);
        assert_eq!(reuse(&op(ReconciledNotApplied, 0), &p, 10), Reuse::TakeOver);
    }

    proptest! {
        /// Whatever the state and time, another payload is a conflict, and
        /// nothing that may have taken effect is ever run again.
        #[test]
        fn a_possible_effect_is_never_run_again(state in 0usize..7, lease in 0i64..1000, now in 0i64..1000, same in any::<bool>()) {
            let state = OperationState::ALL[state];
            let p = if same { "a".repeat(64) } else { "b".repeat(64) };
            let r = reuse(&op(state, lease), &p, now);
            if !same {
                prop_assert_eq!(r, Reuse::Conflict);
            } else if r == Reuse::TakeOver {
                prop_assert!(matches!(state, OperationState::Reserved | OperationState::ReconciledNotApplied));
                prop_assert!(state.may_become(OperationState::Reserved));
            }
        }
    }
}
