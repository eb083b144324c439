//! `mode = "exchange"`: a token for the person from an OAuth 2.0 Token
//! Exchange (RFC 8693) at the configured token endpoint. The subject token
//! is the gateway's assertion for the person, the actor token one for the
//! agent; the token that comes back is kept per (tenant, person, agent,
//! server) until shortly before it expires, one exchange in flight per key.
//!
//! What the token endpoint says when it refuses is hostile text: it is cut
//! short and stripped of control characters before a refusal names it, and
//! no token ever reaches a message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::endpoint::{self, ClientAuth};

/// `urn:ietf:params:oauth:grant-type:token-exchange`.
const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The caller's own inbound OAuth access token, as a subject token; and
/// what the exchange asks for, unless an ID-JAG.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// An Identity Assertion JWT Authorization Grant (Enterprise-Managed Authorization).
const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";
/// RFC 7523's grant, which redeems an ID-JAG at the server's authorization server.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The type of the gateway's assertions as subject and actor tokens.
pub const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
/// A token is not used within this long of its expiry.
const MARGIN_MS: i64 = 30_000;
/// When the token endpoint gives no `expires_in`: keep it this long.
const DEFAULT_LIFE_MS: i64 = 60_000;
/// Tokens kept at most (the expired go first).
const MAX_CACHED: usize = 10_000;

/// A token from the exchange.
#[derive(Clone)]
pub struct Token {
    /// The access token the server gets as `Authorization: Bearer`.
    pub access: Arc<str>,
    /// Its hex SHA-256: what the receipt keeps.
    pub sha256: Arc<str>,
    /// When it stops being used (ms since the epoch).
    pub until_ms: i64,
}

/// One person's token at one server, as the key of the cache.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The server's name.
    pub server: String,
    /// The token endpoint (a reload may change it).
    pub endpoint: String,
    /// The caller's tenant.
    pub tenant: String,
    /// The person.
    pub subject: String,
    /// The agent.
    pub actor: String,
}

/// What one exchange sends.
pub struct Request<'a> {
    /// The token endpoint.
    pub endpoint: &'a str,
    /// The gateway's client id there, and its secret if it has one.
    pub client: (&'a str, Option<&'a str>),
    /// The person's assertion, or their own inbound access token.
    pub subject_token: &'a str,
    /// Its type (`JWT_TYPE` or `ACCESS_TOKEN_TYPE`).
    pub subject_token_type: &'a str,
    /// The agent's assertion.
    pub actor_token: &'a str,
    /// `audience`, `resource`, `scope`.
    pub audience: &'a str,
    /// `resource` (RFC 8707).
    pub resource: Option<&'a str>,
    /// `scope`.
    pub scope: Option<&'a str>,
}

/// The exchanges' client and their tokens still good.
pub struct Exchanges {
    http: reqwest::Client,
    cache: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Option<Token>>>>>,
}

#[derive(Deserialize)]
struct Answer {
    access_token: Option<String>,
    expires_in: Option<i64>,
    error: Option<String>,
    error_description: Option<String>,
}

impl Exchanges {
    /// Exchanges with `http`.
    pub fn new(http: reqwest::Client) -> Self {
        Self { http, cache: Mutex::new(HashMap::new()) }
    }

    /// The person's token for `key`: the one kept, or a new exchange
    /// (`request` is made only then). At most one exchange per key runs at a
    /// time; the others wait for its token.
    pub async fn token(
        &self,
        key: Key,
        now_ms: impl Fn() -> i64,
        request: impl FnOnce() -> Result<Owned, String>,
    ) -> Result<Token, String> {
        let slot = {
            let mut cache = self.cache.lock().expect("exchange cache");
            if cache.len() >= MAX_CACHED {
                let now = now_ms();
                cache.retain(|_, slot| {
                    slot.try_lock()
                        .map(|t| t.as_ref().is_some_and(|t| now < t.until_ms))
                        .unwrap_or(true)
                });
            }
            cache.entry(key).or_default().clone()
        };
        let mut held = slot.lock().await;
        if let Some(token) = held.as_ref().filter(|t| now_ms() < t.until_ms) {
            return Ok(token.clone());
        }
        let owned = request()?;
        let token = match &owned.id_jag {
            None => self.exchange(&owned.borrow(), ACCESS_TOKEN_TYPE, now_ms()).await?,
            Some((endpoint, (id, secret))) => {
                // The first hop's token is the ID-JAG; the second redeems it
                // where the server's own tokens are made.
                let grant = self.exchange(&owned.borrow(), ID_JAG_TYPE, now_ms()).await?;
                let form = vec![("grant_type", JWT_BEARER), ("assertion", grant.access.as_ref())];
                let (status, bytes) = endpoint::post_form(
                    &self.http,
                    endpoint,
                    form,
                    auth(id, secret.as_deref()),
                    "the authorization server's token endpoint",
                )
                .await?;
                token_of(status, &bytes, now_ms(), "the ID-JAG")?
            }
        };
        *held = Some(token.clone());
        Ok(token)
    }

    /// Forgets `key`'s token (its server refused it): the next call exchanges again.
    pub async fn forget(&self, key: &Key) {
        let slot = self.cache.lock().expect("exchange cache").get(key).cloned();
        if let Some(slot) = slot {
            *slot.lock().await = None;
        }
    }

    async fn exchange(
        &self,
        r: &Request<'_>,
        requested: &str,
        now_ms: i64,
    ) -> Result<Token, String> {
        let mut form = vec![
            ("grant_type", GRANT),
            ("subject_token", r.subject_token),
            ("subject_token_type", r.subject_token_type),
            ("actor_token", r.actor_token),
            ("actor_token_type", JWT_TYPE),
            ("audience", r.audience),
            ("requested_token_type", requested),
        ];
        form.extend(r.resource.map(|v| ("resource", v)));
        form.extend(r.scope.map(|v| ("scope", v)));
        let (status, bytes) = endpoint::post_form(
            &self.http,
            r.endpoint,
            form,
            auth(r.client.0, r.client.1),
            "the token endpoint",
        )
        .await?;
        token_of(status, &bytes, now_ms, "the exchange")
    }
}

/// A client's credentials at a token endpoint: HTTP Basic with a secret.
fn auth<'a>(id: &'a str, secret: Option<&'a str>) -> ClientAuth<'a> {
    match secret {
        Some(secret) => ClientAuth::Basic { id, secret },
        None => ClientAuth::Public { id },
    }
}

/// The token of a token endpoint's answer, or why it gave none.
fn token_of(
    status: reqwest::StatusCode,
    bytes: &[u8],
    now_ms: i64,
    what: &str,
) -> Result<Token, String> {
    let answer: Answer = serde_json::from_slice(bytes).map_err(|_| {
        format!(
            "the token endpoint answered HTTP {status} with no token (not a JSON token response)"
        )
    })?;
    match answer.access_token {
        Some(access) if status.is_success() && !access.is_empty() => {
            let life_ms = answer.expires_in.map_or(DEFAULT_LIFE_MS, |s| s.saturating_mul(1000));
            // Used until shortly before it expires; a very short one, for half its life.
            let until_ms = now_ms + (life_ms - MARGIN_MS).max(life_ms / 2);
            let sha256 = toolgate_core::proposal::sha256_hex(access.as_bytes());
            Ok(Token { access: access.into(), sha256: sha256.into(), until_ms })
        }
        _ => Err(format!(
            "the token endpoint refused {what} ({})",
            endpoint::refusal(status, answer.error.as_deref(), answer.error_description.as_deref())
        )),
    }
}

/// A request's values, owned (made only on a miss).
pub struct Owned {
    /// See [`Request`].
    pub endpoint: String,
    /// The client id and secret.
    pub client: (String, Option<String>),
    /// The person's assertion, or their own inbound access token.
    pub subject_token: String,
    /// Its type.
    pub subject_token_type: &'static str,
    /// The agent's assertion.
    pub actor_token: String,
    /// The audience.
    pub audience: String,
    /// The resource.
    pub resource: Option<String>,
    /// The scope.
    pub scope: Option<String>,
    /// ID-JAG's second hop: the server's authorization server's token
    /// endpoint, and the gateway's client there (id, secret).
    pub id_jag: Option<(String, (String, Option<String>))>,
}

impl Owned {
    fn borrow(&self) -> Request<'_> {
        Request {
            endpoint: &self.endpoint,
            client: (&self.client.0, self.client.1.as_deref()),
            subject_token: &self.subject_token,
            subject_token_type: self.subject_token_type,
            actor_token: &self.actor_token,
            audience: &self.audience,
            resource: self.resource.as_deref(),
            scope: self.scope.as_deref(),
        }
    }
}
