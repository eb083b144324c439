//! One error type for both stores. Messages say what the operator or the
//! caller can do next; store internals (SQL, paths) stay in the gateway's
//! log, not in answers to agents.

/// Why a ledger call failed, each phrased for whoever acts on it.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The store failed or refused (I/O, a lost connection, a trigger); the detail is for the gateway's log.
    #[error("the ledger failed: {0}")]
    Store(String),
    /// No approval has this id.
    #[error("no approval `{0}`; `toolgate approvals list` shows them")]
    NotFound(String),
    /// No dead notice has this id.
    #[error("no dead notice `{0}`; `toolgate doctor` and the console's Notices page list them")]
    NoticeNotFound(String),
    /// No operation has this id.
    #[error("no operation `{0}`; `toolgate ops list` shows them")]
    OperationNotFound(String),
    /// The approval was already decided or used, so it cannot be decided again.
    #[error("approval `{id}` is {state}, not pending; it can no longer be decided")]
    NotPending {
        /// The approval's id.
        id: String,
        /// Its state now: `approved`, `denied` or `consumed`.
        state: &'static str,
    },
    /// The approval cannot be used for a dispatch: it is not approved, has expired, or was used already.
    #[error("approval `{id}` is {state}, not approved; it cannot be used")]
    NotApproved {
        /// The approval's id.
        id: String,
        /// Its state as of the attempt: `pending`, `denied`, `expired` or `consumed`.
        state: &'static str,
    },
    /// The approval had expired when the decision came; one still pending
    /// is recorded as expired even though the call fails.
    #[error("approval `{0}` expired before it was decided")]
    Expired(String),
    /// The approver is the caller who asked for the call: nobody decides their own call.
    #[error(
        "`{approver}` asked for this call and cannot approve or deny it; another approver must"
    )]
    SelfApproval {
        /// The approver who was refused.
        approver: String,
    },
    /// The operation is not in the state the change needs: its attempt was
    /// superseded, it has moved on, or "not applied" came before its lease ended.
    #[error("operation `{id}` is {state}; {what}")]
    WrongState {
        /// The operation's id.
        id: String,
        /// Its state now.
        state: &'static str,
        /// The rule the change broke, as the message states it.
        what: &'static str,
    },
}

impl LedgerError {
    /// Whether the writes made before this error still stand (an approval
    /// found expired is recorded as expired).
    pub(crate) fn keeps_writes(&self) -> bool {
        matches!(self, LedgerError::Expired(_))
    }
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        LedgerError::Store(e.to_string())
    }
}

impl From<tokio_postgres::Error> for LedgerError {
    fn from(e: tokio_postgres::Error) -> Self {
        // The server's own message (e.g. a trigger's refusal) when there is one.
        match e.as_db_error() {
            Some(db) => LedgerError::Store(db.message().to_string()),
            None => LedgerError::Store(e.to_string()),
        }
    }
}
