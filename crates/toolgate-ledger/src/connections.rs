//! People's own grants at upstream servers (`[servers.NAME.identity]`
//! `mode = "oauth"`): kept in the ledger so every replica uses them, sealed
//! by the gateway before they get here (the ledger never sees a token), and
//! refreshed under a fleet-wide lease so a rotating refresh token is never
//! spent twice. And the authorization requests under way: each `state` is
//! kept only by its SHA-256 and taken once.

/// One person's grant at one server: the tokens, sealed, and when the
/// access token expires (to refresh it before, and to show it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The person's tenant.
    pub tenant: String,
    /// The person (the caller's subject).
    pub subject: String,
    /// The upstream server it is a grant at (its config name).
    pub server: String,
    /// The tokens as the gateway sealed them: opaque here, opened only with
    /// the gateway's key and under this row's (tenant, subject, server).
    pub sealed: Vec<u8>,
    /// When the access token expires (ms since the Unix epoch).
    pub expires_ms: i64,
    /// When this grant was written (connected, or last refreshed).
    pub updated_ms: i64,
}

/// Refuses a refresh's replacement that is another person's (or another
/// server's) grant: a caller's mistake, refused before anything is written.
pub(crate) fn same_grant(
    replacement: Option<&Connection>,
    tenant: &str,
    subject: &str,
    server: &str,
) -> crate::Result<()> {
    match replacement {
        Some(c)
            if (c.tenant.as_str(), c.subject.as_str(), c.server.as_str())
                != (tenant, subject, server) =>
        {
            Err(crate::LedgerError::Store(format!(
                "a refresh of ({tenant}, {subject}, {server}) can only be replaced by a grant of the same person at the same server"
            )))
        }
        _ => Ok(()),
    }
}
