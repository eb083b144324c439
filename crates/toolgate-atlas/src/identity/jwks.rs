//! The gateway's published keys (`/.well-known/jwks.json`), fetched on the
//! first call and kept; fetched again when an assertion names a key not
//! seen yet (a rotation) or the copy is old (a retired key stops working),
//! at most once per `refetch_after`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use serde_json::Value;

/// After this, the copy is fetched again before it is trusted, so a key
/// the gateway retired stops verifying within minutes.
const MAX_AGE: Duration = Duration::from_secs(300);
const DEFAULT_REFETCH: Duration = Duration::from_secs(5);
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A key set is a few hundred bytes; more is not the gateway's.
const MAX_BODY: usize = 256 * 1024;

pub(super) enum KeyError {
    /// The gateway does not publish a key with that id.
    Unknown,
    /// The key set could not be fetched (why, without the body).
    Unreachable(String),
}

pub(super) struct Keys {
    url: String,
    http: reqwest::Client,
    pub(super) refetch_after: Duration,
    /// Held across a fetch: concurrent calls wait for one fetch, not make many.
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    by_kid: HashMap<String, DecodingKey>,
    fetched: Option<Instant>,
    attempted: Option<Instant>,
}

impl Keys {
    pub(super) fn new(url: &str) -> anyhow::Result<Self> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| anyhow::anyhow!("--identity-jwks {url:?} is not a URL: {e}"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "http" | "https"),
            "--identity-jwks must be an http(s) URL, not {url:?}"
        );
        let http = reqwest::Client::builder().timeout(FETCH_TIMEOUT).build()?;
        Ok(Self {
            url: url.to_string(),
            http,
            refetch_after: DEFAULT_REFETCH,
            state: Default::default(),
        })
    }

    pub(super) async fn get(&self, kid: &str) -> Result<DecodingKey, KeyError> {
        let mut state = self.state.lock().await;
        let fresh = state.fetched.is_some_and(|t| t.elapsed() < MAX_AGE);
        if fresh && let Some(key) = state.by_kid.get(kid) {
            return Ok(key.clone());
        }
        if state.attempted.is_none_or(|t| t.elapsed() >= self.refetch_after) {
            state.attempted = Some(Instant::now());
            match self.fetch().await {
                Ok(keys) => {
                    state.by_kid = keys;
                    state.fetched = Some(Instant::now());
                }
                // An old copy still holds the key: better than refusing
                // while the gateway's key endpoint is briefly away.
                Err(_) if state.by_kid.contains_key(kid) => {}
                Err(why) => {
                    tracing::warn!(url = %self.url, error = %why, "fetching the gateway's keys failed");
                    return Err(KeyError::Unreachable(why));
                }
            }
        }
        state.by_kid.get(kid).cloned().ok_or(KeyError::Unknown)
    }

    async fn fetch(&self) -> Result<HashMap<String, DecodingKey>, String> {
        let mut response = self.http.get(&self.url).send().await.map_err(|e| reason(&e))?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| reason(&e))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY {
                return Err(format!("the key set is over {MAX_BODY} bytes"));
            }
        }
        let set: Value =
            serde_json::from_slice(&body).map_err(|_| "the answer is not JSON".to_string())?;
        let keys = parse(&set);
        if keys.is_empty() {
            return Err("it publishes no Ed25519 signing key".into());
        }
        Ok(keys)
    }
}

/// The Ed25519 signing keys of a JWKS, by `kid`. Keys of other kinds, and
/// malformed ones, are skipped: they cannot have signed an assertion.
pub(super) fn parse(set: &Value) -> HashMap<String, DecodingKey> {
    let entries = set["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
    entries
        .iter()
        .filter_map(|entry| serde_json::from_value::<Jwk>(entry.clone()).ok())
        .filter(|jwk| {
            let ed25519 = matches!(&jwk.algorithm, AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519);
            let for_signing = jwk.common.public_key_use.as_ref().is_none_or(|u| *u == PublicKeyUse::Signature);
            let eddsa = jwk.common.key_algorithm.as_ref().is_none_or(|a| *a == KeyAlgorithm::EdDSA);
            ed25519 && for_signing && eddsa
        })
        .filter_map(|jwk| Some((jwk.common.key_id.clone()?, DecodingKey::from_jwk(&jwk).ok()?)))
        .collect()
}

/// What went wrong reaching the gateway, in words (reqwest's Display can
/// carry the URL, which the refusal names already).
fn reason(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {} s", FETCH_TIMEOUT.as_secs())
    } else if e.is_connect() {
        "connection refused or unreachable".into()
    } else {
        "the request failed".into()
    }
}
