//! Which published keys can have signed an assertion.

use serde_json::json;

use super::jwks::parse;

const X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

#[test]
fn only_ed25519_signing_keys_with_a_kid_are_kept() {
    let set = json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": X, "kid": "good", "use": "sig", "alg": "EdDSA"},
        {"kty": "OKP", "crv": "Ed25519", "x": X, "kid": "bare"},
        {"kty": "OKP", "crv": "Ed25519", "x": X},
        {"kty": "OKP", "crv": "Ed25519", "x": X, "kid": "for-encryption", "use": "enc"},
        {"kty": "EC", "crv": "P-256", "x": X, "y": X, "kid": "ec"},
        {"kty": "oct", "k": X, "kid": "hmac"},
        {"kty": "something-new", "kid": "future"},
    ]});
    let mut kept: Vec<String> = parse(&set).into_keys().collect();
    kept.sort();
    assert_eq!(kept, ["bare", "good"]);
    assert!(parse(&json!({"not": "a key set"})).is_empty());
}
