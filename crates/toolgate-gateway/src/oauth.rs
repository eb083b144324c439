//! The gateway as an OAuth 2.1 resource server, as MCP authorization asks:
//! Protected Resource Metadata (RFC 9728) naming the one authorization
//! server it trusts, `WWW-Authenticate` pointing at it, and JWT access
//! tokens checked against that issuer's published keys (JWKS, fetched,
//! cached and fetched again on rotation): the signature (asymmetric
//! algorithms only: never `none`, never a shared secret), `iss`, `aud`
//! (this gateway's resource URI, RFC 8707), `exp` and `nbf` on the
//! gateway's one clock with a small leeway. Claims and scopes name the
//! caller, its tenant and roles, as `[oauth]` says. A token is never passed
//! upstream: upstreams get their own credentials (`[servers.NAME]`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value, json};
use toolgate_core::{Caller, Clock};

use crate::config::OAuthConfig;

/// The algorithms a token may be signed with: public-key ones only, so a
/// published key can never be used as a shared secret.
const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Why a bearer token was not accepted; the message is safe to show (it
/// never repeats the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a valid access token for this gateway: 401 `invalid_token`.
    #[error("{0}")]
    Invalid(String),
    /// Valid, but without a scope every call needs: 403 `insufficient_scope`.
    #[error("{0}")]
    InsufficientScope(String),
    /// The issuer's keys could not be fetched: 503, retry later.
    #[error("{0}")]
    Unavailable(String),
}

/// A verifying key and the one algorithm it verifies.
type Key = (DecodingKey, Algorithm);

#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Key>,
    /// Keys published without a `kid`: usable only when they are all there is.
    unnamed: Vec<Key>,
    fetched: Option<Instant>,
    jwks_uri: Option<String>,
}

/// The most of an authorization server's metadata or key set read. A JWKS
/// of a few dozen RSA keys is tens of KiB; 1 MiB is far past any real one.
const MAX_DOCUMENT: usize = 1 << 20;

/// The resource server: its metadata, and the check of each token.
pub struct OAuth {
    config: OAuthConfig,
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    /// The `[callers]` names: principals of the gateway's own, which no
    /// token of the issuer may name (one namespace of principals).
    reserved: std::collections::BTreeSet<String>,
    keys: tokio::sync::RwLock<Keys>,
    /// One fetch of the keys at a time.
    fetching: tokio::sync::Mutex<()>,
}

impl OAuth {
    pub(crate) fn new(
        config: OAuthConfig,
        reserved: std::collections::BTreeSet<String>,
        roots: Vec<reqwest::Certificate>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        // No redirect is followed: the issuer's metadata and keys are read
        // from where the config names them, not from wherever a response
        // points (an address inside the gateway's network, say).
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .tls_certs_merge(roots)
            .build()
            .expect("an HTTP client");
        let keys = Keys { jwks_uri: config.jwks_uri.clone(), ..Keys::default() };
        Self {
            config,
            http,
            clock,
            reserved,
            keys: tokio::sync::RwLock::new(keys),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The Protected Resource Metadata document (RFC 9728).
    pub fn metadata(&self) -> Value {
        let mut scopes: Vec<&String> =
            self.config.required_scopes.iter().chain(self.config.scope_roles.keys()).collect();
        scopes.sort();
        scopes.dedup();
        json!({
            "resource": self.config.resource,
            "authorization_servers": [self.config.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": scopes,
            "resource_name": "toolgate",
        })
    }

    /// Where the metadata is: `/.well-known/oauth-protected-resource`
    /// inserted before the resource's path (RFC 9728 §3.1).
    pub fn metadata_url(&self) -> String {
        well_known(&self.config.resource, "oauth-protected-resource")
    }

    /// The `WWW-Authenticate` value of a 401 (or 403): where the metadata
    /// is, and what was wrong with the token, if one was sent.
    pub fn challenge(&self, error: Option<&TokenError>) -> String {
        let mut value = format!("Bearer resource_metadata=\"{}\"", self.metadata_url());
        let quoted = |s: &str| s.replace(['"', '\\'], "'");
        match error {
            Some(TokenError::Invalid(why)) => value.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{}\"",
                quoted(why)
            )),
            Some(TokenError::InsufficientScope(why)) => value.push_str(&format!(
                ", error=\"insufficient_scope\", scope=\"{}\", error_description=\"{}\"",
                self.config.required_scopes.join(" "),
                quoted(why)
            )),
            Some(TokenError::Unavailable(_)) | None => {}
        }
        value
    }

    /// The caller a JWT access token names, if it is valid here.
    pub async fn authenticate(&self, token: &str) -> Result<Arc<Caller>, TokenError> {
        self.admit(token).await.map(|(caller, _)| caller)
    }

    /// The caller a JWT access token names, and the instant (ms, on the
    /// gateway's clock) from which the same token is refused: its `exp`
    /// and the leeway. What the token opened (a console session) ends then.
    pub async fn admit(&self, token: &str) -> Result<(Arc<Caller>, i64), TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            TokenError::Invalid(
                "the bearer token is not a JWT access token this gateway accepts".into(),
            )
        })?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(TokenError::Invalid(format!(
                "tokens signed with {:?} are not accepted",
                header.alg
            )));
        }
        let key = self.key(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        // Time is checked below, on the gateway's one clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| TokenError::Invalid(describe(&e)))?
            .claims;
        let until_ms = self.in_time(&claims)?;
        Ok((self.caller(&claims)?, until_ms))
    }

    /// Fetches the issuer's keys now; how many can verify tokens
    /// (`toolgate doctor`).
    pub async fn published_keys(&self) -> Result<usize, TokenError> {
        self.fetch().await?;
        let keys = self.keys.read().await;
        Ok(keys.by_kid.len() + keys.unnamed.len())
    }

    /// Whether the token is valid now; the instant (ms) it stops being.
    fn in_time(&self, claims: &Map<String, Value>) -> Result<i64, TokenError> {
        let now = self.clock.now_ms() / 1000;
        let leeway = self.config.leeway_s as i64;
        let at = |claim: &str| claims.get(claim).and_then(Value::as_f64).map(|t| t as i64);
        let until = match at("exp") {
            Some(exp) if now > exp + leeway => {
                return Err(TokenError::Invalid("the token has expired".into()));
            }
            Some(exp) => (exp + leeway + 1).saturating_mul(1000),
            None => return Err(TokenError::Invalid("the token has no numeric `exp`".into())),
        };
        if at("nbf").is_some_and(|nbf| now + leeway < nbf) {
            return Err(TokenError::Invalid("the token is not valid yet (`nbf`)".into()));
        }
        Ok(until)
    }

    /// Claims and scopes → the caller, as `[oauth]` maps them.
    fn caller(&self, claims: &Map<String, Value>) -> Result<Arc<Caller>, TokenError> {
        let c = &self.config;
        let text = |claim: &str| {
            claims.get(claim).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
        };
        let name = text(&c.caller_claim).ok_or_else(|| {
            TokenError::Invalid(format!(
                "the token has no `{}` claim to name its caller",
                c.caller_claim
            ))
        })?;
        // A token naming a `[callers]` principal would act as it: re-issue
        // its approved calls, use up its approvals, pass its budgets.
        if self.reserved.contains(&name) {
            let shown = toolgate_core::pointer::tame(&name, toolgate_core::pointer::MAX_KEY_CHARS);
            return Err(TokenError::Invalid(format!(
                "the token's `{}` claim names `{shown}`, a caller of this gateway's own [callers]; \
                    a token cannot act as one. The issuer must name its principals apart (or the \
                    operator rename the [callers] entry)",
                c.caller_claim
            )));
        }
        let tenant = match (&c.tenant, &c.tenant_claim) {
            (Some(fixed), _) => fixed.clone(),
            (None, Some(claim)) => text(claim).ok_or_else(|| {
                TokenError::Invalid(format!("the token has no `{claim}` claim to name its tenant"))
            })?,
            (None, None) => unreachable!("the config requires one of tenant and tenant_claim"),
        };
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_string).collect(),
            (_, Some(Value::Array(list))) => {
                list.iter().filter_map(Value::as_str).map(str::to_string).collect()
            }
            _ => Vec::new(),
        };
        let missing: Vec<&str> =
            c.required_scopes.iter().filter(|s| !scopes.contains(s)).map(String::as_str).collect();
        if !missing.is_empty() {
            return Err(TokenError::InsufficientScope(format!(
                "the token lacks the scope(s) {}",
                missing.join(", ")
            )));
        }
        let mut roles: Vec<String> =
            scopes.iter().filter_map(|s| c.scope_roles.get(s)).flatten().cloned().collect();
        roles.sort();
        roles.dedup();
        let subject = text("sub").unwrap_or_else(|| name.clone());
        Ok(Arc::new(Caller { name, subject, tenant, roles }))
    }

    /// The issuer's key for `kid`: from the cache while it is fresh; a key
    /// not there fetches the keys again (a rotation), at most every
    /// `jwks_refresh_min_ms`.
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, TokenError> {
        let ttl = Duration::from_secs(self.config.jwks_ttl_s);
        let stale = self.keys.read().await.fetched.is_none_or(|at| at.elapsed() >= ttl);
        if stale {
            self.fetch().await?;
        }
        if let Some(found) = self.lookup(kid, alg).await? {
            return Ok(found);
        }
        let cooldown = Duration::from_millis(self.config.jwks_refresh_min_ms);
        if self.keys.read().await.fetched.is_none_or(|at| at.elapsed() >= cooldown) {
            self.fetch().await?;
            if let Some(found) = self.lookup(kid, alg).await? {
                return Ok(found);
            }
        }
        Err(TokenError::Invalid("the token is signed by a key the issuer does not publish".into()))
    }

    async fn lookup(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Option<DecodingKey>, TokenError> {
        let keys = self.keys.read().await;
        let found = match kid {
            Some(kid) => keys.by_kid.get(kid),
            None if keys.by_kid.len() + keys.unnamed.len() == 1 => {
                keys.by_kid.values().chain(&keys.unnamed).next()
            }
            None => {
                return Err(TokenError::Invalid(
                    "the token names no key (`kid`) and the issuer publishes several".into(),
                ));
            }
        };
        match found {
            Some((key, published)) if *published == alg => Ok(Some(key.clone())),
            Some(_) => {
                Err(TokenError::Invalid(format!("the token's algorithm {alg:?} is not its key's")))
            }
            None => Ok(None),
        }
    }

    /// Fetches the issuer's keys (finding `jwks_uri` first, if not configured).
    async fn fetch(&self) -> Result<(), TokenError> {
        let _one = self.fetching.lock().await;
        let uri = match self.keys.read().await.jwks_uri.clone() {
            Some(uri) => uri,
            None => self.discover().await?,
        };
        let set: Value = self.get_json(&uri).await?;
        let (by_kid, unnamed) = parse_keys(&set);
        tracing::info!(target: "toolgate::oauth", keys = by_kid.len() + unnamed.len(), "fetched the issuer's keys");
        let mut keys = self.keys.write().await;
        *keys = Keys { by_kid, unnamed, fetched: Some(Instant::now()), jwks_uri: Some(uri) };
        Ok(())
    }

    /// `jwks_uri` from the issuer's metadata: RFC 8414, else OpenID discovery.
    async fn discover(&self) -> Result<String, TokenError> {
        let issuer = &self.config.issuer;
        let candidates = [
            well_known(issuer, "oauth-authorization-server"),
            format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
        ];
        for url in candidates {
            if let Ok(meta) = self.get_json(&url).await
                && meta["issuer"].as_str() == Some(issuer.as_str())
                && let Some(uri) = meta["jwks_uri"].as_str()
            {
                return Ok(uri.to_string());
            }
        }
        Err(TokenError::Unavailable(
            "the authorization server's metadata (and so its keys) cannot be fetched; retry later"
                .into(),
        ))
    }

    async fn get_json(&self, url: &str) -> Result<Value, TokenError> {
        let unavailable = |why: String| {
            tracing::warn!(target: "toolgate::oauth", %url, %why, "cannot fetch from the authorization server");
            TokenError::Unavailable(
                "the authorization server's keys cannot be fetched; retry later".into(),
            )
        };
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| unavailable(e.without_url().to_string()))?;
        if response.status().is_redirection() {
            let to = toolgate_core::visible::visible(&toolgate_mcp::body::location(&response))
                .into_owned();
            return Err(unavailable(format!(
                "HTTP {}, a redirect to {to}, which is not followed: configure the URL it points to",
                response.status()
            )));
        }
        if !response.status().is_success() {
            return Err(unavailable(format!("HTTP {}", response.status())));
        }
        let body = toolgate_mcp::body::read_limited(
            response,
            MAX_DOCUMENT,
            "the authorization server's document",
        )
        .await
        .map_err(|e| unavailable(e.to_string()))?;
        serde_json::from_slice(&body).map_err(|e| unavailable(format!("not JSON: {e}")))
    }
}

/// `https://host/.well-known/NAME/path` for `https://host/path` (RFC 8414
/// §3.1, RFC 9728 §3.1); no trailing part for a bare origin.
fn well_known(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        format!("{scheme}://{host}/.well-known/{name}")
    } else {
        format!("{scheme}://{host}/.well-known/{name}/{path}")
    }
}

/// The signing keys of a JWKS, each with the one algorithm it verifies.
/// Keys for encryption, shared secrets and keys that do not parse are skipped.
fn parse_keys(set: &Value) -> (HashMap<String, Key>, Vec<Key>) {
    let mut by_kid = HashMap::new();
    let mut unnamed = Vec::new();
    for raw in set["keys"].as_array().into_iter().flatten() {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw.clone()) else { continue };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let alg = match jwk.common.key_algorithm.and_then(|a| Algorithm::try_from(a).ok()) {
            Some(alg) => alg,
            None => match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P384 => {
                    Algorithm::ES384
                }
                AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
                _ => continue,
            },
        };
        if !ACCEPTED.contains(&alg) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else { continue };
        match jwk.common.key_id {
            Some(kid) => drop(by_kid.insert(kid, (key, alg))),
            None => unnamed.push((key, alg)),
        }
    }
    (by_kid, unnamed)
}

/// What was wrong, in words a client can act on (never the token itself).
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::InvalidAudience => {
            "the token is not for this resource (`aud`); ask for a token for it".into()
        }
        ErrorKind::InvalidIssuer => {
            "the token is not from this gateway's authorization server (`iss`)".into()
        }
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            "the token's algorithm does not match its key".into()
        }
        _ => "the token is not valid".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::well_known;

    #[test]
    fn metadata_lives_under_well_known_before_the_path() {
        assert_eq!(
            well_known("https://gw.example/mcp", "oauth-protected-resource"),
            "https://gw.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            well_known("http://127.0.0.1:8765/", "oauth-authorization-server"),
            "http://127.0.0.1:8765/.well-known/oauth-authorization-server"
        );
        assert_eq!(
            well_known("https://as.example/tenant/1", "oauth-authorization-server"),
            "https://as.example/.well-known/oauth-authorization-server/tenant/1"
        );
    }
}
