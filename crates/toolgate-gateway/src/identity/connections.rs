//! `mode = "oauth"`: each person's own grant at a server's authorization
//! server, kept in the ledger (sealed by the vault, so every replica uses
//! it and the ledger never holds a token), refreshed before it expires
//! under a fleet-wide lease, revoked on disconnect (docs/IDENTITY.md).
//!
//! The consent, in a browser:
//! 1. a call with no usable grant gets a link ([`Connections::link`]):
//!    `/console/connect?for=TICKET`, the ticket sealed, naming the person
//!    and the server. It is no credential: whoever opens it must be signed
//!    in to the console as that person (the console checks);
//! 2. [`Connections::begin`]: a fresh `state` and PKCE verifier, sealed in
//!    the ledger under the state's hash and bound to the browser that asked
//!    (a cookie whose hash the state keeps) → the authorization URL;
//! 3. [`Connections::finish`], at `/console/connect/callback`: the state is
//!    taken once (any replica), the browser must be the one that began, the
//!    code is redeemed, and the grant is sealed into the ledger.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use toolgate_core::Entropy;
use toolgate_core::proposal::sha256_hex;
use toolgate_ledger::{Connection, Ledger};

use super::oauth_client::{self, Client, Discovered, Pkce, TokenKind, TokenSet};
use super::vault::{Vault, binding};
use crate::config::{Config, IdentityMode};

/// How long a consent link, and an authorization begun from it, stay good.
const LINK_TTL_MS: i64 = 15 * 60 * 1000;
const STATE_TTL_MS: i64 = 10 * 60 * 1000;
/// A token read from the ledger is used from memory this long at most: a
/// disconnect on another replica is seen within it.
const CACHE_MS: i64 = 5_000;
/// A refresh lease: longer than a token endpoint's answer may take.
const LEASE_MS: i64 = 30_000;
/// The browser cookie that binds a consent to the browser that began it:
/// one per authorization (`toolgate_connect_` and a prefix of its state's
/// hash), so two begun at once in one browser do not undo each other.
pub fn browser_cookie(state_sha256: &str) -> String {
    format!("toolgate_connect_{}", &state_sha256[..16.min(state_sha256.len())])
}
/// Where the authorization server sends the person back.
pub const CALLBACK_PATH: &str = "/console/connect/callback";

/// Why a person's call has no token.
#[derive(Debug, Clone)]
pub enum Needed {
    /// The person has not connected (or the grant ended): the link to.
    Connect(String),
    /// The grant is there but unusable now (the token endpoint, the vault).
    Unavailable(String),
}

/// Where the gateway is, for this config: its public address and the vault key.
#[derive(Debug, Clone)]
pub struct Place {
    /// `[identity] public_url`, without a trailing `/`.
    pub public_url: String,
    vault_key: PathBuf,
    shared_key: bool,
}

impl Place {
    /// The place `config` names.
    pub fn of(config: &Config) -> Self {
        let (vault_key, shared_key) = match &config.identity.vault_key_file {
            Some(f) => (config.resolve_path(f), true),
            None => (config.state_dir().join("identity-vault.key"), false),
        };
        Self { public_url: config.public_url(), vault_key, shared_key }
    }

    /// The OAuth `redirect_uri`.
    pub fn redirect_uri(&self) -> String {
        format!("{}{CALLBACK_PATH}", self.public_url)
    }
}

/// The person and server a link, or an authorization under way, is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct For {
    /// The person's tenant.
    pub tenant: String,
    /// The person.
    pub subject: String,
    /// The server (its config name).
    pub server: String,
}

/// What the ledger's sealed value holds: the tokens, the client they were
/// issued to and the server they were got from, so any replica refreshes
/// and revokes them without discovering again.
#[derive(Serialize, Deserialize)]
struct Grant {
    tokens: TokenSet,
    client: Client,
    discovered: Discovered,
    issued_ms: i64,
}

/// An authorization under way, sealed in the ledger under its state's hash.
#[derive(Serialize, Deserialize)]
struct Pending {
    of: For,
    browser_sha256: String,
    pkce: Pkce,
    client: Client,
    discovered: Discovered,
    redirect_uri: String,
}

#[derive(Serialize, Deserialize)]
struct Ticket {
    #[serde(flatten)]
    of: For,
    until_ms: i64,
}

/// A token in memory: until when it is used without reading the ledger.
#[derive(Clone)]
struct Cached {
    token: Arc<str>,
    sha256: String,
    until_ms: i64,
}

/// A server's authorization server, and the client toolgate is there.
#[derive(Clone)]
struct Known {
    url: String,
    discovered: Discovered,
    client: Client,
}

type Key = (String, String, String);

/// People's grants at `oauth` servers.
pub struct Connections {
    ledger: Arc<dyn Ledger>,
    http: reqwest::Client,
    vault: Mutex<Option<(PathBuf, Arc<Vault>)>>,
    known: Mutex<HashMap<String, Known>>,
    tokens: Mutex<HashMap<Key, Cached>>,
    refreshing: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// This process, as a refresh lease's holder.
    holder: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const LINK_AAD: &[u8] = b"toolgate connect link v1";
const STATE_AAD: &[u8] = b"toolgate oauth state v1";

impl Connections {
    /// Grants kept in `ledger`, fetched over `http` (no redirects followed).
    pub fn new(ledger: Arc<dyn Ledger>, http: reqwest::Client, holder: String) -> Self {
        Self {
            ledger,
            http,
            vault: Mutex::default(),
            known: Mutex::default(),
            tokens: Mutex::default(),
            refreshing: Mutex::default(),
            holder,
        }
    }

    fn vault(&self, place: &Place, entropy: &dyn Entropy) -> Result<Arc<Vault>, String> {
        let mut v = lock(&self.vault);
        if let Some((path, vault)) = v.as_ref()
            && *path == place.vault_key
        {
            return Ok(vault.clone());
        }
        let vault = if place.shared_key {
            Vault::load(&place.vault_key)
        } else {
            Vault::load_or_create(&place.vault_key, entropy)
        };
        let vault =
            Arc::new(vault.map_err(|e| format!("the key that seals people's tokens: {e:#}"))?);
        *v = Some((place.vault_key.clone(), vault.clone()));
        Ok(vault)
    }

    /// The consent link for `of`: `/console/connect?for=TICKET`.
    pub fn link(
        &self,
        place: &Place,
        of: &For,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<String, String> {
        let ticket = serde_json::to_vec(&Ticket { of: of.clone(), until_ms: now_ms + LINK_TTL_MS })
            .expect("a ticket serialises");
        let sealed = self.vault(place, entropy)?.seal(LINK_AAD, &ticket, entropy);
        Ok(format!("{}/console/connect?for={}", place.public_url, B64.encode(sealed)))
    }

    /// Whom the link's `ticket` is for, if it is one of this gateway's and
    /// has not expired.
    pub fn read_link(
        &self,
        place: &Place,
        ticket: &str,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<For, String> {
        let refused = || {
            "this link is not one this gateway made, or it was cut: call the tool again for a new one".to_string()
        };
        let sealed = B64.decode(ticket.trim()).map_err(|_| refused())?;
        let plain = self.vault(place, entropy)?.open(LINK_AAD, &sealed).map_err(|_| refused())?;
        let t: Ticket = serde_json::from_slice(&plain).map_err(|_| refused())?;
        if t.until_ms <= now_ms {
            return Err("this link has expired: call the tool again for a new one".into());
        }
        Ok(t.of)
    }

    /// The server's authorization server and toolgate's client there,
    /// found once (and again after the server's URL changed).
    async fn known(&self, config: &Config, place: &Place, server: &str) -> Result<Known, String> {
        let s = config
            .servers
            .get(server)
            .filter(|s| s.identity.mode == IdentityMode::Oauth)
            .ok_or_else(|| format!("`{server}` is not a server connected through OAuth here"))?;
        // A stdio server has no URL: its `resource`, else its name, stands for it.
        let url = s
            .url
            .clone()
            .or_else(|| s.identity.resource.clone())
            .unwrap_or_else(|| server.to_string());
        if let Some(k) = lock(&self.known).get(server).filter(|k| k.url == url) {
            return Ok(k.clone());
        }
        let mut discovered = match &s.identity.authorization_server {
            Some(issuer) => {
                oauth_client::authorization_server(
                    &self.http,
                    issuer,
                    s.identity.resource.as_deref().unwrap_or(&url),
                )
                .await?
            }
            None => oauth_client::discover(&self.http, &url).await?,
        };
        if let Some(scope) = &s.identity.scope {
            discovered.scopes = scope.split_whitespace().map(String::from).collect();
        }
        if let Some(resource) = &s.identity.resource {
            discovered.resource = resource.clone();
        }
        let client = match &s.identity.client_id {
            Some(id) => {
                let secret = super::client_secret(config, server, &s.identity)?;
                Client::configured(id, secret.as_deref(), &discovered)?
            }
            None => {
                oauth_client::register(&self.http, &discovered, &place.redirect_uri(), "toolgate")
                    .await?
            }
        };
        let k = Known { url, discovered, client };
        lock(&self.known).insert(server.to_string(), k.clone());
        Ok(k)
    }

    /// The authorization's state as the callback's `query` carries it.
    pub fn state_of(query: &str) -> Option<String> {
        query_value(query, "state")
    }

    /// Begins `of`'s consent: the authorization URL to send the browser to,
    /// and the cookie (name, value) that binds the consent to that browser.
    pub async fn begin(
        &self,
        config: &Config,
        of: &For,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<(String, (String, String)), String> {
        let place = Place::of(config);
        let vault = self.vault(&place, entropy)?;
        let k = self.known(config, &place, &of.server).await?;
        let (state, browser, pkce) = (entropy.id("tgst_"), entropy.id("tgb_"), Pkce::new(entropy));
        let redirect_uri = place.redirect_uri();
        let url = oauth_client::authorization_url(
            &k.discovered,
            &k.client,
            &redirect_uri,
            &k.discovered.resource,
            k.discovered.scope().as_deref(),
            &state,
            &pkce,
        );
        let pending = Pending {
            of: of.clone(),
            browser_sha256: sha256_hex(browser.as_bytes()),
            pkce,
            client: k.client,
            discovered: k.discovered,
            redirect_uri,
        };
        let id = sha256_hex(state.as_bytes());
        let sealed = vault.seal(
            &[STATE_AAD, id.as_bytes()].concat(),
            &serde_json::to_vec(&pending).expect("serialises"),
            entropy,
        );
        self.ledger
            .put_oauth_state(&id, sealed, now_ms + STATE_TTL_MS)
            .await
            .map_err(|e| format!("the ledger did not keep the authorization: {e}"))?;
        Ok((url, (browser_cookie(&id), browser)))
    }

    /// Ends a consent at the callback: `query` as the authorization server
    /// sent it, `browser` the value of a cookie of the browser it arrived in,
    /// by name. The grant is kept; returns whose it is.
    pub async fn finish(
        &self,
        config: &Config,
        query: &str,
        browser: impl Fn(&str) -> Option<String>,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<For, String> {
        let place = Place::of(config);
        let vault = self.vault(&place, entropy)?;
        let state = query_value(query, "state")
            .ok_or("the callback carries no state: start again from the link")?;
        let id = sha256_hex(state.as_bytes());
        let sealed = self
            .ledger
            .take_oauth_state(&id, now_ms)
            .await
            .map_err(|e| format!("the ledger did not answer: {e}"))?;
        let sealed = sealed.ok_or("this authorization was finished already, has expired, or was never begun here: start again from the link")?;
        let plain =
            vault.open(&[STATE_AAD, id.as_bytes()].concat(), &sealed).map_err(|e| e.to_string())?;
        let p: Pending = serde_json::from_slice(&plain)
            .map_err(|_| "the authorization's state does not read".to_string())?;
        if browser(&browser_cookie(&id)).map(|b| sha256_hex(b.as_bytes()))
            != Some(p.browser_sha256.clone())
        {
            return Err("this authorization was begun in another browser: nothing was connected. \
                Open the link again in the browser you consent in"
                .into());
        }
        let callback = oauth_client::callback(&p.discovered, query)?;
        let tokens = oauth_client::redeem(
            &self.http,
            &p.discovered,
            &p.client,
            &callback.code,
            &p.pkce,
            &p.redirect_uri,
            &p.discovered.resource,
            now_ms,
        )
        .await?;
        self.keep(&place, &p.of, tokens, (p.client, p.discovered), now_ms, entropy).await?;
        Ok(p.of)
    }

    /// Keeps `of`'s grant — its `tokens`, and the client and authorization
    /// server they were issued by — sealed in the ledger, replacing any.
    pub async fn keep(
        &self,
        place: &Place,
        of: &For,
        tokens: TokenSet,
        (client, discovered): (Client, Discovered),
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<(), String> {
        let vault = self.vault(place, entropy)?;
        let grant = Grant { tokens, client, discovered, issued_ms: now_ms };
        let row = self.seal(&vault, of, &grant, now_ms, entropy);
        self.ledger
            .put_connection(row)
            .await
            .map_err(|e| format!("the ledger did not keep the connection: {e}"))?;
        lock(&self.tokens).remove(&key(of));
        Ok(())
    }

    fn seal(
        &self,
        vault: &Vault,
        of: &For,
        grant: &Grant,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Connection {
        let sealed = vault.seal(
            &binding(&of.tenant, &of.subject, &of.server),
            &serde_json::to_vec(grant).expect("a grant serialises"),
            entropy,
        );
        Connection {
            tenant: of.tenant.clone(),
            subject: of.subject.clone(),
            server: of.server.clone(),
            sealed,
            expires_ms: grant.tokens.expires_at_ms.unwrap_or(i64::MAX),
            updated_ms: now_ms,
        }
    }

    fn open(&self, vault: &Vault, row: &Connection) -> Result<Grant, String> {
        let plain = vault
            .open(&binding(&row.tenant, &row.subject, &row.server), &row.sealed)
            .map_err(|e| {
                format!(
                    "the connection does not open ({e}): the vault key differs from the one that \
                        sealed it"
                )
            })?;
        serde_json::from_slice(&plain).map_err(|_| "the connection does not read".to_string())
    }

    /// `of`'s access token and its SHA-256: from memory, else the ledger,
    /// refreshed first when it is near its end.
    pub async fn token(
        &self,
        place: &Place,
        of: &For,
        now_ms: impl Fn() -> i64,
        entropy: &dyn Entropy,
    ) -> Result<(Arc<str>, String), Needed> {
        let k = key(of);
        if let Some(c) = lock(&self.tokens).get(&k).filter(|c| c.until_ms > now_ms()) {
            return Ok((c.token.clone(), c.sha256.clone()));
        }
        let vault = self.vault(place, entropy).map_err(Needed::Unavailable)?;
        let connect = || {
            self.link(place, of, now_ms(), entropy)
                .map_or_else(Needed::Unavailable, Needed::Connect)
        };
        let read = || async {
            self.ledger
                .connection(&of.tenant, &of.subject, &of.server)
                .await
                .map_err(|e| Needed::Unavailable(format!("the ledger did not answer: {e}")))
        };
        let Some(row) = read().await? else { return Err(connect()) };
        let mut grant = self.open(&vault, &row).map_err(Needed::Unavailable)?;
        if due(&grant, now_ms()) {
            // One refresh per person and server in this process; the ledger's
            // lease makes it one across the fleet.
            let gate = lock(&self.refreshing).entry(k.clone()).or_default().clone();
            let _one = gate.lock().await;
            let Some(row) = read().await? else { return Err(connect()) };
            grant = self.open(&vault, &row).map_err(Needed::Unavailable)?;
            if due(&grant, now_ms()) {
                grant = match self.refresh(&vault, of, grant, &now_ms, entropy).await? {
                    Some(g) => g,
                    None => return Err(connect()),
                };
            }
        }
        let token: Arc<str> = grant.tokens.access_token.as_str().into();
        let sha256 = grant.tokens.access_sha256();
        let expires = grant.tokens.expires_at_ms.unwrap_or(i64::MAX);
        let until_ms = (now_ms() + CACHE_MS).min(expires.saturating_sub(margin(&grant)));
        lock(&self.tokens)
            .insert(k, Cached { token: token.clone(), sha256: sha256.clone(), until_ms });
        Ok((token, sha256))
    }

    /// Refreshes `grant` under the fleet's lease. `None`: the grant is gone
    /// (refused by its server, or it had no refresh token and expired).
    async fn refresh(
        &self,
        vault: &Vault,
        of: &For,
        grant: Grant,
        now_ms: &impl Fn() -> i64,
        entropy: &dyn Entropy,
    ) -> Result<Option<Grant>, Needed> {
        let expired = grant.tokens.expires_at_ms.is_some_and(|e| e <= now_ms());
        let Some(refresh_token) = grant.tokens.refresh_token.clone() else {
            if !expired {
                return Ok(Some(grant));
            }
            // Over, with nothing to renew it by: the person connects again.
            let _ = self.ledger.delete_connection(&of.tenant, &of.subject, &of.server).await;
            return Ok(None);
        };
        let (t, s, v) = (&of.tenant, &of.subject, &of.server);
        let unavailable = |e: toolgate_ledger::LedgerError| {
            Needed::Unavailable(format!("the ledger did not answer: {e}"))
        };
        if !self
            .ledger
            .claim_refresh(t, s, v, &self.holder, now_ms(), now_ms() + LEASE_MS)
            .await
            .map_err(unavailable)?
        {
            // Another replica refreshes it: use what is still good, else
            // wait for its new grant.
            if !expired {
                return Ok(Some(grant));
            }
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                if let Some(row) = self.ledger.connection(t, s, v).await.map_err(unavailable)?
                    && let Ok(g) = self.open(vault, &row)
                    && !due(&g, now_ms())
                {
                    return Ok(Some(g));
                }
            }
            return Err(Needed::Unavailable(
                "another replica is refreshing this person's token and has not finished".into(),
            ));
        }
        // The grant as it stands now that the lease is ours: another replica
        // may have refreshed it (and spent the refresh token read before)
        // between that read and this claim, or the person connected again
        // or disconnected. Only a refresh token still in the ledger is spent.
        let current = self
            .ledger
            .connection(t, s, v)
            .await
            .map_err(unavailable)?
            .map(|row| self.open(vault, &row))
            .transpose()
            .map_err(Needed::Unavailable)?;
        match current {
            Some(now_kept)
                if now_kept.tokens.refresh_token.as_deref() == Some(refresh_token.as_str()) => {}
            other => {
                let _ = self.ledger.finish_refresh(t, s, v, &self.holder, None).await;
                return Ok(other);
            }
        }
        let resource = Some(grant.discovered.resource.as_str());
        match oauth_client::refresh(
            &self.http,
            &grant.discovered,
            &grant.client,
            &refresh_token,
            resource,
            now_ms(),
        )
        .await
        {
            Ok(tokens) => {
                let fresh = Grant {
                    tokens,
                    client: grant.client,
                    discovered: grant.discovered,
                    issued_ms: now_ms(),
                };
                let row = self.seal(vault, of, &fresh, now_ms(), entropy);
                if !self
                    .ledger
                    .finish_refresh(t, s, v, &self.holder, Some(row))
                    .await
                    .map_err(unavailable)?
                {
                    // The person connected again, or disconnected, meanwhile.
                    return Ok(self
                        .ledger
                        .connection(t, s, v)
                        .await
                        .map_err(unavailable)?
                        .and_then(|row| self.open(vault, &row).ok()));
                }
                tracing::info!(target: "toolgate::identity", server = %v, "refreshed a person's token");
                Ok(Some(fresh))
            }
            Err(why) if why.contains("invalid_grant") => {
                // The grant is over at its server (revoked, or its refresh
                // token spent): the person connects again.
                tracing::warn!(target: "toolgate::identity", server = %v, %why, "a person's grant ended at its server");
                // Deleted only if it is still the grant that was refused
                // (not one the person made meanwhile): under the lease.
                if self.ledger.finish_refresh(t, s, v, &self.holder, None).await.unwrap_or(false)
                    && self.holds_refresh_token(vault, of, &refresh_token).await
                {
                    let _ = self.ledger.delete_connection(t, s, v).await;
                }
                Ok(None)
            }
            Err(why) => {
                let _ = self.ledger.finish_refresh(t, s, v, &self.holder, None).await;
                if expired {
                    Err(Needed::Unavailable(format!("the token could not be refreshed: {why}")))
                } else {
                    Ok(Some(grant))
                }
            }
        }
    }

    /// `of`'s access token whose SHA-256 is `refused_sha256` was refused by
    /// its server (HTTP 401): it is no longer used from memory, and — if the
    /// ledger still holds it, and no refresh is under way anywhere — the
    /// grant is marked ended, so the next call refreshes it (or, with
    /// nothing to refresh it by, asks the person to connect again). The
    /// mark is written under the refresh lease, so it never undoes a refresh.
    pub async fn distrust(
        &self,
        place: &Place,
        of: &For,
        refused_sha256: &str,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<(), String> {
        lock(&self.tokens).remove(&key(of));
        let vault = self.vault(place, entropy)?;
        let (t, s, v) = (&of.tenant, &of.subject, &of.server);
        // This process's refreshes hold the lease under the same holder:
        // one of them at a time, this mark included.
        let gate = lock(&self.refreshing).entry(key(of)).or_default().clone();
        let _one = gate.lock().await;
        if !self
            .ledger
            .claim_refresh(t, s, v, &self.holder, now_ms, now_ms + LEASE_MS)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(()); // a refresh is under way: it replaces the token
        }
        let kept = self
            .ledger
            .connection(t, s, v)
            .await
            .map_err(|e| e.to_string())?
            .map(|row| self.open(&vault, &row))
            .transpose();
        let marked = match kept {
            Ok(Some(mut grant)) if grant.tokens.access_sha256() == refused_sha256 => {
                grant.tokens.expires_at_ms =
                    Some(now_ms.min(grant.tokens.expires_at_ms.unwrap_or(i64::MAX)) - 1);
                Some(self.seal(&vault, of, &grant, now_ms, entropy))
            }
            _ => None, // renewed already, gone, or not this vault's
        };
        self.ledger
            .finish_refresh(t, s, v, &self.holder, marked)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Whether `of`'s kept grant still holds `refresh_token`.
    async fn holds_refresh_token(&self, vault: &Vault, of: &For, refresh_token: &str) -> bool {
        match self.ledger.connection(&of.tenant, &of.subject, &of.server).await {
            Ok(Some(row)) => self
                .open(vault, &row)
                .is_ok_and(|g| g.tokens.refresh_token.as_deref() == Some(refresh_token)),
            _ => false,
        }
    }

    /// Whether a kept grant (`row`) can be refreshed when its token ends: it
    /// holds a refresh token. An error: it does not open here (another key).
    pub fn refreshable(
        &self,
        config: &Config,
        row: &Connection,
        entropy: &dyn Entropy,
    ) -> Result<bool, String> {
        let vault = self.vault(&Place::of(config), entropy)?;
        Ok(self.open(&vault, row)?.tokens.refresh_token.is_some())
    }

    /// Ends `of`'s grant: revoked at its server (refresh token first, which
    /// ends the grant; then the access token), and deleted. Returns whether
    /// there was one, and what the revocation said if it failed (the grant
    /// is deleted all the same).
    pub async fn disconnect(
        &self,
        config: &Config,
        of: &For,
        entropy: &dyn Entropy,
    ) -> Result<(bool, Option<String>), String> {
        let place = Place::of(config);
        let vault = self.vault(&place, entropy)?;
        lock(&self.tokens).remove(&key(of));
        let row = self
            .ledger
            .connection(&of.tenant, &of.subject, &of.server)
            .await
            .map_err(|e| format!("the ledger did not answer: {e}"))?;
        let Some(row) = row else { return Ok((false, None)) };
        let mut failed = None;
        if let Ok(grant) = self.open(&vault, &row) {
            let mut tokens = vec![(grant.tokens.access_token.clone(), TokenKind::Access)];
            if let Some(r) = grant.tokens.refresh_token.clone() {
                tokens.insert(0, (r, TokenKind::Refresh));
            }
            for (token, kind) in tokens {
                if let Err(e) =
                    oauth_client::revoke(&self.http, &grant.discovered, &grant.client, &token, kind)
                        .await
                {
                    failed.get_or_insert(e);
                }
            }
        }
        let deleted = self
            .ledger
            .delete_connection(&of.tenant, &of.subject, &of.server)
            .await
            .map_err(|e| format!("the ledger did not answer: {e}"))?;
        lock(&self.tokens).remove(&key(of));
        Ok((deleted, failed))
    }
}

fn key(of: &For) -> Key {
    (of.tenant.clone(), of.subject.clone(), of.server.clone())
}

/// How long before its end a token is refreshed: a minute, or a quarter of
/// its life when that is shorter.
fn margin(grant: &Grant) -> i64 {
    grant.tokens.expires_at_ms.map_or(0, |e| ((e - grant.issued_ms) / 4).clamp(0, 60_000))
}

fn due(grant: &Grant, now_ms: i64) -> bool {
    grant.tokens.expires_at_ms.is_some_and(|e| e - margin(grant) <= now_ms)
}

/// One parameter of a query string, decoded.
fn query_value(query: &str, name: &str) -> Option<String> {
    let mut url = reqwest::Url::parse("http://callback.invalid/").expect("a URL");
    url.set_query(Some(query));
    url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(issued: i64, expires: Option<i64>) -> Grant {
        let d = Discovered {
            resource: "http://r".into(),
            scopes: vec![],
            issuer: "http://as".into(),
            authorization_endpoint: "http://as/auth".into(),
            token_endpoint: "http://as/token".into(),
            registration_endpoint: None,
            revocation_endpoint: None,
            token_endpoint_auth_methods: vec![],
            client_id_metadata_document_supported: false,
            iss_parameter_supported: false,
        };
        let tokens = TokenSet {
            access_token: "a".into(),
            refresh_token: Some("r".into()),
            expires_at_ms: expires,
            scope: None,
        };
        Grant {
            tokens,
            client: Client {
                client_id: "c".into(),
                client_secret: None,
                auth: oauth_client::AuthMethod::None,
            },
            discovered: d,
            issued_ms: issued,
        }
    }

    #[test]
    fn a_token_is_refreshed_a_quarter_of_its_life_or_a_minute_before_its_end() {
        let short = grant(0, Some(8_000));
        assert!(!due(&short, 5_999) && due(&short, 6_000));
        let long = grant(0, Some(3_600_000));
        assert!(!due(&long, 3_539_999) && due(&long, 3_540_000));
        assert!(
            !due(&grant(0, None), i64::MAX - 1),
            "a token without an expiry is used until refused"
        );
    }

    fn place(dir: &std::path::Path) -> Place {
        Place {
            public_url: "https://gw.example".into(),
            vault_key: dir.join("vault.key"),
            shared_key: false,
        }
    }

    async fn connections(dir: &std::path::Path) -> Connections {
        let ledger = toolgate_ledger::open(dir.join("ledger.db").to_str().unwrap()).await.unwrap();
        Connections::new(ledger, reqwest::Client::new(), "test".into())
    }

    #[tokio::test]
    async fn a_link_names_its_person_to_this_gateway_alone_and_expires() {
        let dir = tempfile::tempdir().unwrap();
        let (c, entropy) =
            (connections(dir.path()).await, toolgate_core::SeededEntropy::new([5; 32]));
        let of = For {
            tenant: "atlas".into(),
            subject: "jane@atlas.example".into(),
            server: "who".into(),
        };
        let link = c.link(&place(dir.path()), &of, 1_000, &entropy).unwrap();
        let ticket = link
            .strip_prefix("https://gw.example/console/connect?for=")
            .expect("under the public URL");
        assert!(!link.contains("jane"), "the link does not spell the person out: {link}");
        assert_eq!(c.read_link(&place(dir.path()), ticket, 2_000, &entropy).unwrap(), of);
        assert!(
            c.read_link(&place(dir.path()), ticket, 1_000 + LINK_TTL_MS, &entropy)
                .unwrap_err()
                .contains("expired")
        );
        let mut forged = ticket.to_string();
        forged.replace_range(10..11, if &forged[10..11] == "A" { "B" } else { "A" });
        assert!(
            c.read_link(&place(dir.path()), &forged, 2_000, &entropy)
                .unwrap_err()
                .contains("not one this gateway made")
        );
        let other = tempfile::tempdir().unwrap();
        let elsewhere = connections(other.path()).await;
        assert!(
            elsewhere
                .read_link(&place(other.path()), ticket, 2_000, &entropy)
                .unwrap_err()
                .contains("not one this gateway made"),
            "another vault key opens nothing"
        );
    }

    #[tokio::test]
    async fn a_person_with_no_grant_is_given_the_link_and_a_callback_without_its_state_keeps_nothing()
     {
        let dir = tempfile::tempdir().unwrap();
        let (c, entropy) =
            (connections(dir.path()).await, toolgate_core::SeededEntropy::new([6; 32]));
        let of = For {
            tenant: "atlas".into(),
            subject: "jane@atlas.example".into(),
            server: "who".into(),
        };
        match c.token(&place(dir.path()), &of, || 1_000, &entropy).await {
            Err(Needed::Connect(link)) => {
                assert!(link.starts_with("https://gw.example/console/connect?for="))
            }
            other => panic!("not asked to connect: {:?}", other.map(|_| ())),
        }
        let config = Config::parse(
            &format!("[gateway]\nstate_dir = \"{}\"\n", dir.path().display()),
            std::path::Path::new("/tmp/toolgate.toml"),
        )
        .unwrap();
        let e = c
            .finish(&config, "code=x&state=tgst_made_up", |_| Some("tgb_x".into()), 1_000, &entropy)
            .await
            .unwrap_err();
        assert!(e.contains("never begun here"), "{e}");
    }

    #[tokio::test]
    async fn a_token_its_server_refused_is_not_used_again() {
        let dir = tempfile::tempdir().unwrap();
        let (c, entropy) =
            (connections(dir.path()).await, toolgate_core::SeededEntropy::new([7; 32]));
        let (place, of) = (
            place(dir.path()),
            For {
                tenant: "atlas".into(),
                subject: "jane@atlas.example".into(),
                server: "who".into(),
            },
        );
        let mut g = grant(1_000, Some(10_000_000));
        g.tokens.refresh_token = None;
        let vault = c.vault(&place, &entropy).unwrap();
        c.ledger.put_connection(c.seal(&vault, &of, &g, 1_000, &entropy)).await.unwrap();
        let (token, sha256) =
            c.token(&place, &of, || 2_000, &entropy).await.unwrap_or_else(|_| panic!("no token"));
        assert_eq!((token.as_ref(), sha256.len()), ("a", 64));
        c.distrust(&place, &of, &"0".repeat(64), 3_000, &entropy).await.unwrap();
        assert!(
            c.token(&place, &of, || 3_000, &entropy).await.is_ok(),
            "another token's refusal marks nothing"
        );
        c.distrust(&place, &of, &sha256_hex(b"a"), 3_000, &entropy).await.unwrap();
        // Nothing to refresh it by: the person is asked to connect again, and the grant is gone.
        assert!(matches!(c.token(&place, &of, || 3_001, &entropy).await, Err(Needed::Connect(_))));
        assert!(c.ledger.connection("atlas", "jane@atlas.example", "who").await.unwrap().is_none());
    }

    #[test]
    fn a_query_parameter_is_read_decoded() {
        assert_eq!(query_value("code=a%2Bb&state=tg_1", "code").as_deref(), Some("a+b"));
        assert_eq!(query_value("code=x", "state"), None);
    }
}
