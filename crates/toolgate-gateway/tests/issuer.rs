//! A test OAuth 2.1 authorization server on loopback (RFC 8414 metadata and
//! a JWKS the test may rotate), its Ed25519 signing keys, the access tokens
//! it issues, and the `[oauth]` tables of a gateway that trusts it. Shared
//! by the gateway's OAuth tests and the console's (another crate's tests
//! include this file, as they do `common.rs`).
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The resource (the gateway's `/mcp`) the tokens are for.
pub const RESOURCE: &str = "http://gateway.test/mcp";

/// The `[oauth]` tables of a gateway that trusts `issuer`: every call needs
/// the `mcp` scope, the tenant is the `tenant` claim, `toolgate:approve`
/// grants the approver role, and the keys may be fetched again at once.
pub fn oauth_config(issuer: &str) -> String {
    format!(
        r#"[oauth]
issuer = "{issuer}"
resource = "{RESOURCE}"
required_scopes = ["mcp"]
tenant_claim = "tenant"
jwks_refresh_min_ms = 0
[oauth.scope_roles]
"toolgate:approve" = ["approver"]
"#
    )
}

/// One signing key of the authorization server.
pub struct Signer {
    pub kid: String,
    pub key: EncodingKey,
    pub jwk: Value,
}

pub fn signer(kid: &str) -> Signer {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&aws_lc_rs::rand::SystemRandom::new()).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let x = URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    let jwk =
        json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig"});
    Signer { kid: kid.into(), key: EncodingKey::from_ed_der(pkcs8.as_ref()), jwk }
}

pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A token for `alice` of tenant `atlas` with `scope`, for `aud`, with `exp` and `nbf` at those offsets from now.
pub fn token(s: &Signer, issuer: &str, aud: &str, scope: &str, exp_in: i64, nbf_in: i64) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(s.kid.clone());
    let claims = json!({"iss": issuer, "aud": aud, "sub": "alice", "tenant": "atlas", "scope": scope, "exp": now() + exp_in, "nbf": now() + nbf_in, "iat": now()});
    jsonwebtoken::encode(&header, &claims, &s.key).unwrap()
}

/// The authorization server: its metadata and its JWKS (which the test may
/// rotate); counts the JWKS fetches. Returns its issuer URL.
pub async fn authorization_server(
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    cancel: &CancellationToken,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let meta = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks"), "response_types_supported": ["code"]});
    let router = axum::Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(move || async move { axum::Json(meta) }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || async move {
                fetches.fetch_add(1, Ordering::Relaxed);
                let set = jwks.lock().unwrap().clone();
                axum::Json(set)
            }),
        );
    let stop = cancel.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await
    });
    issuer
}
