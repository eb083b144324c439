//! A pack's signed manifest. A pack (`toolgate export --pack`) holds a
//! bundle beside the policy set, the registry and the tool definitions its
//! receipts name, with `MANIFEST.json` listing each file's SHA-256. The
//! manifest is signed by the log's receipt key (`MANIFEST.sig`), so a file
//! rewritten and re-hashed in the manifest no longer verifies: whatever the
//! pack presents as the rules was vouched for by the gateway that exported
//! it. Pure: the caller reads the files.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::bundle::{BundleKey, key_verifiers};
use crate::receipt::ReceiptKey;

/// What a manifest signature covers: this prefix, then the manifest's bytes
/// (so it can never pass for a receipt's or a checkpoint's signature).
const DOMAIN: &[u8] = b"toolgate pack manifest v1\n";

/// `MANIFEST.sig`: who signed the manifest, and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSignature {
    /// The kid of the receipt key that signed it (one of the bundle's keys).
    pub kid: String,
    /// Standard base64 of the Ed25519 signature over the domain and the manifest.
    pub sig: String,
}

fn message(manifest: &[u8]) -> Vec<u8> {
    [DOMAIN, manifest].concat()
}

/// Signs `manifest` (the exact bytes of `MANIFEST.json`) with `key`.
pub fn sign_manifest(key: &ReceiptKey, manifest: &[u8]) -> ManifestSignature {
    ManifestSignature { kid: key.kid().to_string(), sig: STANDARD.encode(key.sign(&message(manifest))) }
}

/// Checks `signature` over `manifest` against the key of `keys` its kid names.
pub fn verify_manifest(keys: &[BundleKey], manifest: &[u8], signature: &ManifestSignature) -> Result<(), String> {
    let key = keys.iter().find(|k| k.kid == signature.kid).ok_or_else(|| format!("signed by kid {}, which is not among the bundle's keys", signature.kid))?;
    let verifiers = key_verifiers(key).map_err(|e| e.to_string())?;
    let raw: [u8; 32] = verifiers[0].public_key().try_into().map_err(|_| "not an Ed25519 key".to_string())?;
    let public = ed25519_dalek::VerifyingKey::from_bytes(&raw).map_err(|e| e.to_string())?;
    let bytes: [u8; 64] = STANDARD.decode(&signature.sig).ok().and_then(|b| b.try_into().ok()).ok_or_else(|| "the signature is not 64 bytes of base64".to_string())?;
    public.verify_strict(&message(manifest), &ed25519_dalek::Signature::from_bytes(&bytes)).map_err(|_| "the signature does not verify: the manifest was changed".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::tests::{bundle_key, keys};

    #[test]
    fn a_manifest_verifies_unchanged_and_fails_changed_or_under_another_key() {
        let k = keys(5);
        let manifest = br#"{"registry.json": "ab"}"#;
        let sig = sign_manifest(&k.receipt, manifest);
        assert_eq!(verify_manifest(&[bundle_key(&k)], manifest, &sig), Ok(()));
        assert!(verify_manifest(&[bundle_key(&k)], br#"{"registry.json": "cd"}"#, &sig).unwrap_err().contains("changed"));
        let other = keys(6);
        assert!(verify_manifest(&[bundle_key(&other)], manifest, &sig).unwrap_err().contains("not among"));
        let forged = ManifestSignature { kid: sig.kid.clone(), ..sign_manifest(&other.receipt, manifest) };
        assert!(verify_manifest(&[bundle_key(&k)], manifest, &forged).is_err());
    }
}
