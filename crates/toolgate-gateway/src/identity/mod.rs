//! As whom a call reaches its server (`[servers.NAME.identity]`,
//! docs/IDENTITY.md): the configured credential for everyone (`shared`),
//! the gateway's signed assertion for the person (`assertion`), or a token
//! for the person from a token exchange (`exchange`). The caller's own token
//! is never what the server gets.
//!
//! `present` turns the call's caller and its server's identity config into
//! a value: the headers (or `_meta`) the call carries, and what the receipt
//! records of it.

pub mod assertion;
pub mod connections;
mod endpoint;
pub(crate) mod exchange;
pub mod oauth_client;
pub(crate) mod vault;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::receipt::UpstreamIdentity;
use toolgate_core::{Caller, Clock, Entropy};
use toolgate_mcp::upstream::{OwnCredential, ValueSource};

use crate::config::{Config, IdentityMode, ServerConfig};
use assertion::{AssertionKey, Assertions};
use connections::{Connections, For, Needed, Place};
use exchange::Exchanges;

/// The `_meta` key a stdio server reads the assertion from.
pub const META_IDENTITY: &str = "io.toolgate/identity";

/// How long a token exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway's credentials for people: its assertion signer, its token
/// exchanges, and the public keys it publishes.
pub struct Identities {
    assertions: Assertions,
    exchanges: Exchanges,
    /// People's own grants (`oauth`); none where no ledger was given.
    connections: Option<Connections>,
    /// `/.well-known/jwks.json`.
    jwks: Value,
}

/// Why no credential could be made for a call; nothing was sent.
#[derive(Debug, Clone)]
pub enum Unmade {
    /// Said to the caller as it is (the token endpoint failed, …).
    Unavailable(String),
    /// The person has no grant at an `oauth` server: the consent link.
    Connect(String),
}

impl Unmade {
    /// The reason in one line, for a log or the gateway's own requests.
    pub fn why(&self) -> String {
        match self {
            Unmade::Unavailable(why) => why.clone(),
            Unmade::Connect(_) => {
                "no connection for this person: they connect at the link a call gives them".into()
            }
        }
    }
}

impl From<String> for Unmade {
    fn from(why: String) -> Self {
        Unmade::Unavailable(why)
    }
}

/// What a call carries to its server about who it is for.
#[derive(Debug, Clone)]
pub struct Presented {
    /// Headers for an HTTP server.
    pub headers: Vec<(String, String)>,
    /// `_meta` members for a stdio server.
    pub meta: Option<(&'static str, String)>,
    /// For a stdio server with `identity.env`: the variable and the
    /// person's token, which the call's process of their own is started with.
    pub env: Option<(String, Arc<str>)>,
    /// What the receipt records.
    pub identity: UpstreamIdentity,
    /// The credential made for the person (an assertion, a token), by the
    /// name a refusal gives it: an answer that says it back is withheld.
    pub secret: Option<(String, Arc<str>)>,
}

impl Presented {
    /// The configured credential, for everyone.
    pub fn shared() -> Self {
        Self {
            headers: Vec::new(),
            meta: None,
            env: None,
            identity: UpstreamIdentity {
                mode: IdentityMode::Shared.word().into(),
                audience: None,
                credential_sha256: None,
                subject: None,
            },
            secret: None,
        }
    }
}

impl Identities {
    /// Signs with `key`; publishes it and the `retired` keys' public halves
    /// (JWK `x`), so an assertion signed before a rotation still verifies.
    pub fn new(
        key: Arc<AssertionKey>,
        retired: &[String],
        roots: Vec<reqwest::Certificate>,
    ) -> anyhow::Result<Self> {
        let keys: Vec<Value> = std::iter::once(key.x())
            .chain(retired.iter().cloned())
            .map(|x| assertion::jwk(&x))
            .collect();
        let http = reqwest::Client::builder()
            .timeout(EXCHANGE_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tls_certs_merge(roots)
            .build()?;
        Ok(Self {
            assertions: Assertions::new(key),
            exchanges: Exchanges::new(http.clone()),
            connections: None,
            jwks: json!({"keys": keys}),
        })
    }

    /// With people's grants kept in `ledger` (`oauth`), this process
    /// refreshing them as `holder`.
    pub fn with_connections(
        mut self,
        ledger: Arc<dyn toolgate_ledger::Ledger>,
        roots: Vec<reqwest::Certificate>,
        holder: String,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(EXCHANGE_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tls_certs_merge(roots)
            .build()?;
        self.connections = Some(Connections::new(ledger, http, holder));
        Ok(self)
    }

    /// The credential made for `caller` at `server` was refused there (HTTP
    /// 401): an exchanged token is exchanged again at the next call, a
    /// person's own grant refreshed (or, if it cannot be, connected again).
    pub async fn distrust(
        &self,
        config: &Config,
        server: &str,
        (caller, refused): (&Caller, &UpstreamIdentity),
        now_ms: i64,
        entropy: &dyn Entropy,
    ) {
        let Some(s) = config.servers.get(server) else { return };
        match s.identity.mode {
            IdentityMode::Exchange => {
                let endpoint = s.identity.token_endpoint.clone().unwrap_or_default();
                let key = exchange::Key {
                    server: server.into(),
                    endpoint,
                    tenant: caller.tenant.clone(),
                    subject: caller.subject.clone(),
                    actor: caller.name.clone(),
                };
                self.exchanges.forget(&key).await;
            }
            IdentityMode::Oauth => {
                let of = For {
                    tenant: caller.tenant.clone(),
                    subject: caller.subject.clone(),
                    server: server.to_string(),
                };
                if let Some(c) = &self.connections
                    && let Some(refused) = &refused.credential_sha256
                    && let Err(why) =
                        c.distrust(&Place::of(config), &of, refused, now_ms, entropy).await
                {
                    tracing::warn!(target: "toolgate::identity", server, %why, "cannot mark a refused grant for renewal");
                }
            }
            IdentityMode::Shared | IdentityMode::Assertion => {}
        }
    }

    /// People's grants (`oauth`), where this gateway keeps them.
    pub fn connections(&self) -> Option<&Connections> {
        self.connections.as_ref()
    }

    /// The JWK Set of the identity keys, current first.
    pub fn jwks(&self) -> &Value {
        &self.jwks
    }

    /// What a call by `caller` to `server` carries under `config`. An error
    /// says why no credential could be made; nothing was sent.
    /// `inbound`: the caller's own OAuth access token, if it came with one,
    /// which an exchange presents as the person's subject token.
    pub async fn present(
        &self,
        config: &Config,
        server: &str,
        (caller, inbound): (&Caller, Option<&str>),
        now_ms: impl Fn() -> i64,
        entropy: &dyn Entropy,
    ) -> Result<Presented, Unmade> {
        let Some(s) = config.servers.get(server) else { return Ok(Presented::shared()) };
        let secret = |file: &Path| config.resolve_path(file);
        let place = (s.identity.mode == IdentityMode::Oauth).then(|| Place::of(config));
        self.credential(
            config.issuer(),
            place.as_ref(),
            server,
            s,
            &secret,
            (caller, inbound),
            now_ms,
            entropy,
        )
        .await
    }

    /// The gateway's own credential at `server`, for the requests it makes
    /// itself (the handshake, the lists): where each person's call carries
    /// theirs, the gateway reads the contract as itself — an assertion, or
    /// an exchanged token, whose `sub` is the gateway's issuer (for a stdio
    /// server with `identity.env`, in that variable of its process). `None`
    /// for a shared server (its configured credential serves) and a stdio
    /// one whose calls carry the person in `_meta`.
    pub fn own_credential(
        self: &Arc<Self>,
        config: &Config,
        server: &str,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Option<OwnCredential> {
        let s = config.servers.get(server)?.clone();
        let header = match (s.identity.mode, &s.url, &s.identity.env) {
            (IdentityMode::Shared, _, _) => return None,
            (_, None, Some(var)) => var.clone(),
            (_, None, None) => return None,
            (IdentityMode::Assertion, Some(_), _) => s.identity.header().to_string(),
            (_, Some(_), _) => "Authorization".to_string(),
        };
        let issuer = config.issuer().to_string();
        let gateway = gateway_caller(config);
        let place = (s.identity.mode == IdentityMode::Oauth).then(|| Place::of(config));
        let secret_file = s.identity.client_secret_file.as_ref().map(|f| config.resolve_path(f));
        let (identities, server) = (self.clone(), server.to_string());
        let value = Arc::new(move || {
            let (identities, server, s, issuer, gateway, clock, entropy, secret_file, place) = (
                identities.clone(),
                server.clone(),
                s.clone(),
                issuer.clone(),
                gateway.clone(),
                clock.clone(),
                entropy.clone(),
                secret_file.clone(),
                place.clone(),
            );
            Box::pin(async move {
                let secret = |_: &Path| secret_file.clone().unwrap_or_default();
                let presented = identities
                    .credential(
                        &issuer,
                        place.as_ref(),
                        &server,
                        &s,
                        &secret,
                        (&gateway, None),
                        || clock.now_ms(),
                        entropy.as_ref(),
                    )
                    .await
                    .map_err(|e| match e {
                        Unmade::Connect(_) => format!(
                            "the gateway has no connection of its own at `{server}`, so it cannot \
                                read the server's tools: an admin connects it on the console's \
                                Connections page"
                        ),
                        Unmade::Unavailable(why) => why,
                    })?;
                match presented.env {
                    Some((_, token)) => Ok(token.to_string()),
                    None => presented
                        .headers
                        .into_iter()
                        .next()
                        .map(|(_, v)| v)
                        .ok_or_else(|| "no header".to_string()),
                }
            })
                as std::pin::Pin<
                    Box<dyn std::future::Future<Output = Result<String, String>> + Send>,
                >
        });
        Some(OwnCredential { header, value })
    }

    /// What a call by `caller` to `server` (`s`) carries; `secret` resolves
    /// the exchange client's secret file.
    #[allow(clippy::too_many_arguments)]
    async fn credential(
        &self,
        issuer: &str,
        place: Option<&Place>,
        server: &str,
        s: &ServerConfig,
        secret: &(dyn Fn(&Path) -> PathBuf + Sync),
        (caller, inbound): (&Caller, Option<&str>),
        now_ms: impl Fn() -> i64,
        entropy: &dyn Entropy,
    ) -> Result<Presented, Unmade> {
        let identity = &s.identity;
        let audience = || audience(server, s);
        match identity.mode {
            IdentityMode::Shared => Ok(Presented::shared()),
            IdentityMode::Assertion => {
                let audience = audience();
                let made = self.assertions.assert(
                    issuer,
                    &audience,
                    caller,
                    identity.ttl_ms(),
                    now_ms(),
                    entropy,
                );
                let (headers, meta) = match s.url {
                    Some(_) => {
                        let header = identity.header();
                        let value = if header.eq_ignore_ascii_case("authorization") {
                            format!("Bearer {}", made.token)
                        } else {
                            made.token.to_string()
                        };
                        (vec![(header.to_string(), value)], None)
                    }
                    None => (Vec::new(), Some((META_IDENTITY, made.token.to_string()))),
                };
                let secret = Some((format!("servers.{server}.identity"), made.token.clone()));
                Ok(Presented {
                    headers,
                    meta,
                    env: None,
                    identity: person(IdentityMode::Assertion, audience, &made.jti_sha256, caller),
                    secret,
                })
            }
            IdentityMode::Exchange => {
                let audience = audience();
                let endpoint = identity.token_endpoint.clone().unwrap_or_default();
                let key = exchange::Key {
                    server: server.into(),
                    endpoint: endpoint.clone(),
                    tenant: caller.tenant.clone(),
                    subject: caller.subject.clone(),
                    actor: caller.name.clone(),
                };
                let request = || {
                    let client_secret = read_secret(server, identity, secret)?;
                    let now = now_ms();
                    let id_jag = match &identity.id_jag {
                        None => None,
                        Some(j) => {
                            let source = match (&j.client_secret_env, &j.client_secret_file) {
                                (Some(var), _) => Some(ValueSource::Env(var.clone())),
                                (None, Some(file)) => Some(ValueSource::File(secret(file))),
                                (None, None) => None,
                            };
                            let jag_secret = source
                                .map(|s| {
                                    s.read(&format!(
                                        "servers.{server}.identity.id_jag client secret"
                                    ))
                                })
                                .transpose()
                                .map_err(|e| e.to_string())?;
                            Some((j.token_endpoint.clone(), (j.client_id.clone(), jag_secret)))
                        }
                    };
                    Ok(exchange::Owned {
                        endpoint,
                        client: (identity.client_id.clone().unwrap_or_default(), client_secret),
                        // The person's own inbound token where they came with
                        // one (the IdP's, for this gateway); else the
                        // gateway's assertion for them.
                        subject_token: inbound.map_or_else(
                            || {
                                self.assertions
                                    .assert(
                                        issuer,
                                        &audience,
                                        caller,
                                        assertion_ttl(),
                                        now,
                                        entropy,
                                    )
                                    .token
                                    .to_string()
                            },
                            str::to_string,
                        ),
                        subject_token_type: if inbound.is_some() {
                            exchange::ACCESS_TOKEN_TYPE
                        } else {
                            exchange::JWT_TYPE
                        },
                        actor_token: self.assertions.actor(
                            issuer,
                            &audience,
                            caller,
                            assertion_ttl(),
                            now,
                            entropy,
                        ),
                        audience: audience.clone(),
                        resource: identity.resource.clone(),
                        scope: identity.scope.clone(),
                        id_jag,
                    })
                };
                let token = self.exchanges.token(key, &now_ms, request).await?;
                Ok(bearer(
                    server,
                    s,
                    token.access.clone(),
                    person(IdentityMode::Exchange, audience, &token.sha256, caller),
                ))
            }
            IdentityMode::Oauth => {
                let connections = self.connections.as_ref().ok_or_else(|| {
                    format!("servers.{server}.identity: this process keeps no connections")
                })?;
                let place = place.ok_or_else(|| "no place".to_string())?;
                let of = For {
                    tenant: caller.tenant.clone(),
                    subject: caller.subject.clone(),
                    server: server.to_string(),
                };
                let (token, sha256) =
                    connections.token(place, &of, &now_ms, entropy).await.map_err(|n| match n {
                        Needed::Connect(link) => Unmade::Connect(link),
                        Needed::Unavailable(why) => Unmade::Unavailable(why),
                    })?;
                let audience = identity
                    .resource
                    .clone()
                    .or_else(|| s.url.clone())
                    .unwrap_or_else(|| server.to_string());
                Ok(bearer(server, s, token, person(IdentityMode::Oauth, audience, &sha256, caller)))
            }
        }
    }
}

/// A person's token: `Authorization: Bearer` for an HTTP server, the
/// variable `identity.env` names for a stdio one (their own process).
fn bearer(
    server: &str,
    s: &ServerConfig,
    token: Arc<str>,
    identity: UpstreamIdentity,
) -> Presented {
    let secret = Some((format!("servers.{server}.identity"), token.clone()));
    match (&s.url, &s.identity.env) {
        (None, Some(var)) => Presented {
            headers: Vec::new(),
            meta: None,
            env: Some((var.clone(), token)),
            identity,
            secret,
        },
        _ => Presented {
            headers: vec![("Authorization".to_string(), format!("Bearer {token}"))],
            meta: None,
            env: None,
            identity,
            secret,
        },
    }
}

/// The gateway itself, as the caller of its own requests (the handshake,
/// the lists) and the person whose connection an `oauth` server's are made with.
pub fn gateway_caller(config: &Config) -> Caller {
    Caller {
        name: "toolgate".into(),
        subject: config.issuer().to_string(),
        tenant: String::new(),
        roles: Vec::new(),
    }
}

/// The client secret `identity` names, read now.
fn read_secret(
    server: &str,
    identity: &crate::config::IdentityConfig,
    secret: &(dyn Fn(&Path) -> PathBuf + Sync),
) -> Result<Option<String>, String> {
    let source = match (&identity.client_secret_env, &identity.client_secret_file) {
        (Some(var), _) => Some(ValueSource::Env(var.clone())),
        (None, Some(file)) => Some(ValueSource::File(secret(file))),
        (None, None) => None,
    };
    source
        .map(|s| s.read(&format!("servers.{server}.identity client secret")))
        .transpose()
        .map_err(|e| e.to_string())
}

/// The client secret of server `server`'s identity, read now.
pub(crate) fn client_secret(
    config: &Config,
    server: &str,
    identity: &crate::config::IdentityConfig,
) -> Result<Option<String>, String> {
    read_secret(server, identity, &|file: &Path| config.resolve_path(file))
}

/// The assertion a token exchange presents lives one minute: it is spent at once.
fn assertion_ttl() -> u64 {
    60_000
}

/// Whom a credential for `server` is for: its `audience`, or its URL, or its name.
pub fn audience(server: &str, s: &ServerConfig) -> String {
    s.identity.audience.clone().or_else(|| s.url.clone()).unwrap_or_else(|| server.to_string())
}

fn person(
    mode: IdentityMode,
    audience: String,
    credential_sha256: &str,
    caller: &Caller,
) -> UpstreamIdentity {
    UpstreamIdentity {
        mode: mode.word().into(),
        audience: Some(audience),
        credential_sha256: Some(credential_sha256.into()),
        subject: Some(caller.subject.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use toolgate_core::SeededEntropy;

    /// A token endpoint that keeps every form it is sent and answers each
    /// with a token good for an hour.
    async fn token_endpoint(
        seen: Arc<Mutex<Vec<std::collections::HashMap<String, String>>>>,
    ) -> String {
        let app = axum::Router::new().route(
            "/token",
            axum::routing::post(move |axum::Form(form): axum::Form<std::collections::HashMap<String, String>>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(form);
                    axum::Json(json!({"access_token": "exchanged-token-0123456789abcdef", "token_type": "Bearer", "expires_in": 3600}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn an_exchange_presents_the_persons_own_inbound_token_where_they_came_with_one() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let endpoint = token_endpoint(seen.clone()).await;
        let text = format!(
            "[servers.crm]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.crm.identity]\nmode = \
                \"exchange\"\ntoken_endpoint = \"{endpoint}\"\nclient_id = \"gw\"\n"
        );
        let config = Config::parse(&text, Path::new("/tmp/toolgate.toml")).unwrap();
        let identities =
            Identities::new(Arc::new(AssertionKey::derive(&[3; 32])), &[], Vec::new()).unwrap();
        let (entropy, now) = (SeededEntropy::new([4; 32]), || 1_800_000_000_000);
        let person = |subject: &str| Caller {
            name: "agent".into(),
            subject: subject.into(),
            tenant: "atlas".into(),
            roles: vec![],
        };
        let inbound = identities
            .present(
                &config,
                "crm",
                (&person("jane"), Some("idp-access-token-of-jane")),
                now,
                &entropy,
            )
            .await
            .unwrap_or_else(|e| panic!("{}", e.why()));
        let assertion = identities
            .present(&config, "crm", (&person("omar"), None), now, &entropy)
            .await
            .unwrap_or_else(|e| panic!("{}", e.why()));
        assert_eq!(inbound.headers[0].1, "Bearer exchanged-token-0123456789abcdef");
        assert_eq!(
            (inbound.identity.subject.as_deref(), assertion.identity.subject.as_deref()),
            (Some("jane"), Some("omar"))
        );
        let seen = seen.lock().unwrap();
        assert_eq!(
            (seen[0]["subject_token"].as_str(), seen[0]["subject_token_type"].as_str()),
            ("idp-access-token-of-jane", exchange::ACCESS_TOKEN_TYPE)
        );
        assert_eq!(
            seen[1]["subject_token_type"],
            exchange::JWT_TYPE,
            "no inbound token: the gateway's assertion for the person"
        );
        assert_eq!(seen[1]["subject_token"].matches('.').count(), 2);
        assert!(
            seen.iter().all(|f| f["actor_token_type"] == exchange::JWT_TYPE),
            "the agent is the actor either way"
        );
    }
}
