//! One error type for both stores. Messages say what the operator or the
//! caller can do next; store internals (SQL, paths) stay in the gateway's
//! log, not in answers to agents.

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("the ledger failed: {0}")]
    Store(String),
    #[error("no approval `{0}`; `toolgate approvals list` shows them")]
    NotFound(String),
    #[error("no operation `{0}`; `toolgate ops list` shows them")]
    OperationNotFound(String),
    #[error("approval `{id}` is {state}, not pending; it can no longer be decided")]
    NotPending { id: String, state: &'static str },
    #[error("approval `{id}` is {state}, not approved; it cannot be used")]
    NotApproved { id: String, state: &'static str },
    #[error("approval `{0}` expired before it was decided")]
    Expired(String),
    #[error("`{approver}` asked for this call and cannot approve or deny it; another approver must")]
    SelfApproval { approver: String },
    #[error("operation `{id}` is {state}; {what}")]
    WrongState { id: String, state: &'static str, what: &'static str },
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
