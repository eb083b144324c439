//! People's own grants at upstream servers (`[servers.NAME.identity]`
//! `mode = "oauth"`): kept in the ledger so every replica uses them, sealed
//! by the gateway before they get here (the ledger never sees a token), and
//! refreshed under a fleet-wide lease so a rotating refresh token is never
//! spent twice. And the authorization requests under way: each `state` is
//! kept only by its SHA-256 and taken once.

use crate::Result;

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

/// Connections: people's own grants at upstream servers, the leases under
/// which one replica at a time refreshes a grant, and the states of the
/// authorizations under way.
#[async_trait::async_trait]
pub trait ConnectionStore: Send + Sync {
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
}

/// Refuses a refresh's replacement that is another person's (or another
/// server's) grant: a caller's mistake, refused before anything is written.
pub(crate) fn same_grant(
    replacement: Option<&Connection>,
    tenant: &str,
    subject: &str,
    server: &str,
) -> Result<()> {
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
