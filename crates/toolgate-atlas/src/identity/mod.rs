//! Who asked: toolgate's identity assertion (issue 61, upstream identity).
//!
//! A gateway with `[servers.NAME.identity] mode = "assertion"` signs a
//! short-lived EdDSA JWT for each call — `sub` the person, `tenant`,
//! `act.sub` the agent that called — and sends it in the request's
//! `_meta["io.toolgate/identity"]` (stdio) or the `X-Toolgate-Identity`
//! header (HTTP). A server started with `--identity-jwks` acts on nobody's
//! word but that: every call must carry an assertion that verifies against
//! the gateway's published keys, and what it writes names the person.
//!
//! The assertion is a bearer credential for its lifetime: it is never
//! logged, stored or quoted back, not even in a refusal.

mod jwks;

use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a stdio request carries the assertion.
pub const META_KEY: &str = "io.toolgate/identity";
/// Where an HTTP request carries it (the gateway's default header name).
pub const HEADER: &str = "x-toolgate-identity";

/// Clock skew tolerated on `exp`: small, since an assertion lives minutes.
const LEEWAY_S: u64 = 10;
/// The longest an assertion may live (the contract: `exp - iat <= 300`).
/// A longer one was not minted by a gateway keeping the contract.
const MAX_LIFETIME_S: u64 = 300;

/// Whom this server trusts to say who is asking.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// The gateway's `/.well-known/jwks.json`.
    pub jwks_url: String,
    /// The gateway's `iss` (its `[identity] issuer`, by default its `receipts.origin`).
    pub issuer: String,
    /// This server's `aud` (the gateway's `[servers.NAME.identity] audience`).
    pub audience: String,
}

/// The person a verified assertion names: what the server records and shows
/// in place of a shared service account.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Asserted {
    /// The person who asked (`sub`): the technician.
    pub requested_by: String,
    /// The agent that made the call for them (`act.sub`), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    pub tenant: String,
    /// Who vouched for it: the gateway's issuer.
    pub asserted_by: String,
    /// The assertion's `jti`: the gateway's receipt for the call names its
    /// SHA-256 (`identity.credential_sha256`), so a note leads to its receipt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assertion_id: Option<String>,
}

impl Asserted {
    /// Adds who asked to a record the server writes or answers with.
    pub fn stamp(&self, record: &mut Value) {
        if let (Value::Object(record), Ok(Value::Object(who))) =
            (record, serde_json::to_value(self))
        {
            record.extend(who);
        }
    }
}

/// Absent `sub`, `iss` and `exp` default here so that jsonwebtoken's own
/// check names the missing claim, rather than a parse error.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: String,
    tenant: Option<String>,
    act: Option<Actor>,
    jti: Option<String>,
    #[serde(default)]
    iss: String,
    #[serde(default)]
    exp: u64,
}

#[derive(Deserialize)]
struct Actor {
    sub: String,
}

/// A call refused for its assertion: what is wrong and what to do, as the
/// tool error the caller reads. Never contains the assertion.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Verifies assertions for one server; keeps the gateway's keys.
pub struct Verifier {
    config: IdentityConfig,
    keys: jwks::Keys,
}

impl Verifier {
    pub fn new(config: IdentityConfig) -> anyhow::Result<Self> {
        let keys = jwks::Keys::new(&config.jwks_url)?;
        Ok(Self { config, keys })
    }

    /// How soon an unknown `kid` may fetch the keys again (default 5 s): a
    /// rotation is picked up at once, a stream of made-up kids costs the
    /// gateway one request per interval.
    pub fn with_refetch_interval(mut self, interval: Duration) -> Self {
        self.keys.refetch_after = interval;
        self
    }

    pub fn config(&self) -> &IdentityConfig {
        &self.config
    }

    /// The person `assertion` names, if it is toolgate's, for this server, and current.
    pub async fn verify(&self, assertion: Option<&str>) -> Result<Asserted, Refused> {
        let token =
            assertion.map(str::trim).filter(|t| !t.is_empty()).ok_or_else(|| self.missing())?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| self.refuse("is not a well-formed JWT"))?;
        if header.alg != Algorithm::EdDSA {
            return Err(self.refuse("is not signed with EdDSA, the only algorithm toolgate uses"));
        }
        let kid = header.kid.ok_or_else(|| self.refuse("names no signing key (`kid`)"))?;
        let key = self.keys.get(&kid).await.map_err(|e| self.key_refusal(e))?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = LEEWAY_S;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| self.claim_refusal(e.kind()))?
            .claims;
        if claims.exp > jsonwebtoken::get_current_timestamp() + MAX_LIFETIME_S + LEEWAY_S {
            return Err(self.refuse("lives longer than the 5 minutes toolgate's assertions may; it was not minted by a gateway keeping the contract"));
        }
        let tenant = claims
            .tenant
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.refuse("names no tenant"))?;
        if claims.sub.is_empty() {
            return Err(self.refuse("names no person (`sub`)"));
        }
        Ok(Asserted {
            requested_by: claims.sub,
            agent: claims.act.map(|a| a.sub).filter(|a| !a.is_empty()),
            tenant,
            asserted_by: claims.iss,
            assertion_id: claims.jti,
        })
    }

    fn missing(&self) -> Refused {
        Refused(format!(
            "this server acts only on toolgate's word for who is asking, and the call carried no identity assertion \
             (`_meta[\"{META_KEY}\"]` over stdio, the `X-Toolgate-Identity` header over HTTP); call it through toolgate, \
             with `[servers.NAME.identity] mode = \"assertion\"` and audience \"{}\". The call did not run.",
            self.config.audience
        ))
    }

    /// "toolgate's identity assertion {what}; {next step}. The call did not run."
    fn refuse(&self, what: &str) -> Refused {
        Refused(format!(
            "toolgate's identity assertion {what}; call this server through the gateway whose keys are at {} \
             (issuer \"{}\"), which signs a fresh one for each call. The call did not run.",
            self.config.jwks_url, self.config.issuer
        ))
    }

    fn claim_refusal(&self, kind: &ErrorKind) -> Refused {
        let (issuer, audience) = (&self.config.issuer, &self.config.audience);
        Refused(match kind {
            ErrorKind::ExpiredSignature => "toolgate's identity assertion has expired; call again \
                 through toolgate, which signs a fresh one for each call \
                 (if it keeps happening, the gateway's clock and this server's disagree). The call did not run."
                .into(),
            ErrorKind::InvalidAudience => format!(
                "toolgate's identity assertion is for another server, not \"{audience}\"; set `audience = \"{audience}\"` in this \
                 server's `[servers.NAME.identity]` in toolgate's config, or start this server \
                 with `--identity-audience` set to the one the gateway uses. \
                 The call did not run."
            ),
            ErrorKind::InvalidIssuer => format!(
                "toolgate's identity assertion was issued by another gateway, not \"{issuer}\"; start this server with \
                 `--identity-issuer` set to the gateway's `[identity] issuer` (by default its `receipts.origin`). The call did not run."
            ),
            ErrorKind::InvalidSignature => return self.refuse("does not verify against the \
                gateway's published key it names: it was altered, or not signed by that gateway"),
            ErrorKind::MissingRequiredClaim(claim) => return self.refuse(&format!("has no `{claim}` claim")),
            ErrorKind::InvalidClaimFormat(claim) => return self.refuse(&format!("has a malformed `{claim}` claim")),
            ErrorKind::InvalidAlgorithm => return self.refuse("is not signed with EdDSA, the only algorithm toolgate uses"),
            ErrorKind::Json(_) => return self.refuse("has claims of the wrong shape (`sub`, `tenant`, `act.sub` are strings)"),
            _ => return self.refuse("could not be verified"),
        })
    }

    fn key_refusal(&self, error: jwks::KeyError) -> Refused {
        let url = &self.config.jwks_url;
        Refused(match error {
            jwks::KeyError::Unknown => format!(
                "toolgate's identity assertion is signed with a key the gateway does not publish at {url}; check that \
                 `--identity-jwks` names the gateway that calls this server, then retry. The call did not run."
            ),
            jwks::KeyError::Unreachable(why) => format!(
                "the gateway's keys could not be fetched from {url} ({why}), so toolgate's identity assertion cannot be checked; \
                 retry in a few seconds, and check that `--identity-jwks` is the gateway's `/.well-known/jwks.json` and that this \
                 server can reach it (in toolgate's box, its `[servers.NAME.sandbox] network` must). The call did not run."
            ),
        })
    }
}

#[cfg(test)]
mod tests;
