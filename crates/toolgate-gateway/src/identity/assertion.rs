//! The gateway's identity assertions: short-lived JWTs (EdDSA) that tell a
//! server which person a call is for, signed by a key derived from the log's
//! receipt key, so it rotates with it (`toolgate keys rotate`) and every
//! replica holding the log's keys signs alike. Its public halves are
//! published as a JWK Set at `/.well-known/jwks.json`.
//!
//! An assertion is made once per (person, tenant, agent, audience) and used
//! until close to its expiry: signing costs more than a call's whole hop
//! budget, a cache lookup nothing. Its `jti` is random; the receipt keeps
//! its SHA-256.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::Signer as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolgate_core::{Caller, Entropy};

/// The label the identity key's seed is derived under: never the receipt
/// key itself, so no signature of one can stand for the other.
const DERIVATION: &[u8] = b"toolgate identity assertion key v1\0";

/// Assertions kept at most; beyond, the expired go first, then all.
const MAX_CACHED: usize = 10_000;

/// The key that signs assertions.
pub struct AssertionKey {
    signing: ed25519_dalek::SigningKey,
    /// Its RFC 7638 thumbprint: the JWT's `kid`.
    pub kid: String,
    /// `{"alg":"EdDSA","kid":…,"typ":"JWT"}`, base64url: every assertion's first part.
    header: String,
}

impl AssertionKey {
    /// The identity key of the log whose receipt key has `receipt_seed`.
    pub fn derive(receipt_seed: &[u8; 32]) -> Self {
        let seed: [u8; 32] =
            Sha256::new().chain_update(DERIVATION).chain_update(receipt_seed).finalize().into();
        let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
        let x = public_x(&signing);
        let kid = thumbprint(&x);
        let header = B64.encode(json!({"alg": "EdDSA", "kid": kid, "typ": "JWT"}).to_string());
        Self { signing, kid, header }
    }

    /// Its public half as JWK `x` (base64url).
    pub fn x(&self) -> String {
        public_x(&self.signing)
    }

    /// Signs `claims` as a compact JWS.
    fn sign(&self, claims: &Value) -> String {
        let input = format!("{}.{}", self.header, B64.encode(claims.to_string()));
        let signature = self.signing.sign(input.as_bytes());
        format!("{input}.{}", B64.encode(signature.to_bytes()))
    }
}

fn public_x(key: &ed25519_dalek::SigningKey) -> String {
    B64.encode(key.verifying_key().to_bytes())
}

/// The RFC 7638 thumbprint of an Ed25519 JWK with `x`.
pub fn thumbprint(x: &str) -> String {
    // The required members, in lexicographic order, no whitespace.
    B64.encode(Sha256::digest(format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#)))
}

/// The JWK of an identity key's public half `x`.
pub fn jwk(x: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": thumbprint(x), "use": "sig", "alg": "EdDSA"})
}

/// One assertion made, and what the receipt says of it.
#[derive(Clone)]
pub struct Made {
    /// The compact JWS.
    pub token: Arc<str>,
    /// The hex SHA-256 of its `jti`.
    pub jti_sha256: Arc<str>,
    /// When it expires (ms since the epoch).
    pub exp_ms: i64,
}

/// What makes one assertion differ from another.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    issuer: String,
    audience: String,
    subject: String,
    tenant: String,
    actor: String,
    ttl_ms: u64,
}

/// The signer and its assertions still good.
pub struct Assertions {
    key: Arc<AssertionKey>,
    cache: Mutex<HashMap<Key, Made>>,
}

impl Assertions {
    /// Signs with `key`.
    pub fn new(key: Arc<AssertionKey>) -> Self {
        Self { key, cache: Mutex::new(HashMap::new()) }
    }

    /// The key that signs.
    pub fn key(&self) -> &AssertionKey {
        &self.key
    }

    /// An assertion that `caller`'s subject, in its tenant, calls `audience`
    /// through the agent `caller` names: one still good for at least half
    /// its life, or a new one.
    pub fn assert(
        &self,
        issuer: &str,
        audience: &str,
        caller: &Caller,
        ttl_ms: u64,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Made {
        let key = Key {
            issuer: issuer.into(),
            audience: audience.into(),
            subject: caller.subject.clone(),
            tenant: caller.tenant.clone(),
            actor: caller.name.clone(),
            ttl_ms,
        };
        let fresh_until = |made: &Made| made.exp_ms - (ttl_ms / 2) as i64;
        if let Some(made) = self
            .cache
            .lock()
            .expect("assertion cache")
            .get(&key)
            .filter(|m| now_ms < fresh_until(m))
        {
            return made.clone();
        }
        let made = self.sign(&key, now_ms, entropy);
        let mut cache = self.cache.lock().expect("assertion cache");
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, m| now_ms < fresh_until(m));
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(key, made.clone());
        made
    }

    /// A new assertion, for `key`'s person, now.
    fn sign(&self, key: &Key, now_ms: i64, entropy: &dyn Entropy) -> Made {
        let jti = B64.encode(&entropy.bytes32()[..16]);
        let (iat, exp) = (now_ms.div_euclid(1000), (now_ms + key.ttl_ms as i64).div_euclid(1000));
        let claims = json!({
            "iss": key.issuer,
            "aud": key.audience,
            "sub": key.subject,
            "tenant": key.tenant,
            "act": {"sub": key.actor},
            "jti": jti,
            "iat": iat,
            "exp": exp,
        });
        Made {
            token: self.key.sign(&claims).into(),
            jti_sha256: toolgate_core::proposal::sha256_hex(jti.as_bytes()).into(),
            exp_ms: exp * 1000,
        }
    }

    /// An assertion that the agent `caller` itself acts (an RFC 8693
    /// `actor_token`): its `sub` is the agent, and it is not cached.
    pub fn actor(
        &self,
        issuer: &str,
        audience: &str,
        caller: &Caller,
        ttl_ms: u64,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> String {
        let jti = B64.encode(&entropy.bytes32()[..16]);
        let (iat, exp) = (now_ms.div_euclid(1000), (now_ms + ttl_ms as i64).div_euclid(1000));
        self.key.sign(&json!({"iss": issuer, "aud": audience, "sub": caller.name, "tenant": caller.tenant, "jti": jti, "iat": iat, "exp": exp}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
    use toolgate_core::SeededEntropy;

    fn caller(subject: &str) -> Caller {
        Caller {
            name: "agent".into(),
            subject: subject.into(),
            tenant: "atlas".into(),
            roles: vec![],
        }
    }

    fn verify(
        token: &str,
        x: &str,
        audience: &str,
        now_s: u64,
    ) -> Result<Value, jsonwebtoken::errors::Error> {
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk(x)).unwrap();
        let mut v = Validation::new(Algorithm::EdDSA);
        v.set_audience(&[audience]);
        v.set_issuer(&["toolgate.test/log"]);
        v.leeway = 0;
        v.validate_exp = false;
        let data = decode::<Value>(token, &DecodingKey::from_jwk(&jwk).unwrap(), &v)?;
        assert!(data.claims["exp"].as_u64().unwrap() > now_s, "expired");
        Ok(data.claims)
    }

    #[test]
    fn an_assertion_verifies_with_the_published_key_and_names_the_person_and_the_agent() {
        let key = Arc::new(AssertionKey::derive(&[7; 32]));
        let x = key.x();
        let assertions = Assertions::new(key.clone());
        let entropy = SeededEntropy::new([1; 32]);
        let now = 1_800_000_000_000;
        let made = assertions.assert(
            "toolgate.test/log",
            "tickets",
            &caller("tech-jane"),
            300_000,
            now,
            &entropy,
        );
        assert_eq!(
            decode_header(made.token.as_ref()).unwrap().kid.as_deref(),
            Some(key.kid.as_str())
        );
        let claims = verify(&made.token, &x, "tickets", 1_800_000_000).unwrap();
        assert_eq!(
            (&claims["sub"], &claims["tenant"], &claims["act"]["sub"]),
            (&json!("tech-jane"), &json!("atlas"), &json!("agent"))
        );
        assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 300);
        assert_eq!(
            made.jti_sha256.as_ref(),
            toolgate_core::proposal::sha256_hex(claims["jti"].as_str().unwrap().as_bytes())
        );
        // Another audience is refused by a verifier that expects this one.
        assert!(verify(&made.token, &x, "billing", 1_800_000_000).is_err());
        // Another key's JWK does not verify it.
        assert!(
            verify(&made.token, &AssertionKey::derive(&[8; 32]).x(), "tickets", 1_800_000_000)
                .is_err()
        );
        // The derived key is not the receipt key.
        assert_ne!(
            x,
            B64.encode(ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key().to_bytes())
        );
    }

    #[test]
    fn one_assertion_serves_a_person_for_half_its_life_and_no_one_else() {
        let assertions = Assertions::new(Arc::new(AssertionKey::derive(&[7; 32])));
        let entropy = SeededEntropy::new([2; 32]);
        let t0 = 1_800_000_000_000;
        let a = assertions.assert("i", "tickets", &caller("jane"), 300_000, t0, &entropy);
        assert_eq!(
            assertions
                .assert("i", "tickets", &caller("jane"), 300_000, t0 + 149_000, &entropy)
                .token,
            a.token
        );
        assert_ne!(
            assertions
                .assert("i", "tickets", &caller("jane"), 300_000, t0 + 150_000, &entropy)
                .token,
            a.token
        );
        assert_ne!(
            assertions.assert("i", "tickets", &caller("omar"), 300_000, t0, &entropy).token,
            a.token
        );
        assert_ne!(
            assertions.assert("i", "parts", &caller("jane"), 300_000, t0, &entropy).token,
            a.token
        );
    }

    #[test]
    fn the_thumbprint_is_rfc_7638s() {
        // RFC 8037 appendix A.3's Ed25519 key and thumbprint.
        assert_eq!(
            thumbprint("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }
}
