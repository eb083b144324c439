//! A pack and its signed manifest. A pack (`toolgate export --pack`) holds
//! a bundle beside the policy set, the registry and the tool definitions
//! its receipts name, with `MANIFEST.json` listing each file's SHA-256. The
//! manifest is signed by the log's receipt key (`MANIFEST.sig`), so a file
//! rewritten and re-hashed in the manifest no longer verifies: whatever the
//! pack presents as the rules was vouched for by the gateway that exported
//! it. [`verify`] checks a pack's own proofs beside its bundle's. Pure: the
//! caller reads the files.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bundle::{Bundle, BundleKey, Check, Failure, Report, key_verifiers};
use crate::policy::PolicyEngine;
use crate::proposal::{canonical_json, sha256_hex};
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
    ManifestSignature {
        kid: key.kid().to_string(),
        sig: STANDARD.encode(key.sign(&message(manifest))),
    }
}

/// Checks `signature` over `manifest` against the key of `keys` its kid names.
pub fn verify_manifest(
    keys: &[BundleKey],
    manifest: &[u8],
    signature: &ManifestSignature,
) -> Result<(), String> {
    let key = keys.iter().find(|k| k.kid == signature.kid).ok_or_else(|| {
        format!("signed by kid {}, which is not among the bundle's keys", signature.kid)
    })?;
    let verifiers = key_verifiers(key).map_err(|e| e.to_string())?;
    let raw: [u8; 32] =
        verifiers[0].public_key().try_into().map_err(|_| "not an Ed25519 key".to_string())?;
    let public = ed25519_dalek::VerifyingKey::from_bytes(&raw).map_err(|e| e.to_string())?;
    let bytes: [u8; 64] = STANDARD
        .decode(&signature.sig)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| "the signature is not 64 bytes of base64".to_string())?;
    public
        .verify_strict(&message(manifest), &ed25519_dalek::Signature::from_bytes(&bytes))
        .map_err(|_| "the signature does not verify: the manifest was changed".to_string())
}

/// A pack's files by their `/`-separated path inside it (`MANIFEST.json`,
/// `bundle.json`, `tools/SHA.json`, …), as the caller read them.
pub type Files = BTreeMap<String, Vec<u8>>;

/// A pack's own proofs, added to its bundle's `report` (from
/// [`crate::bundle::verify`]): the manifest is signed by a key of the
/// bundle and the files match it, each receipt's tool definition is there
/// under its hash, and the policy set is the version at least one receipt
/// names. The first proof that fails is reported, and ends the checks.
pub fn verify(files: &Files, bundle: &Bundle, report: &mut Report) {
    if let Err((name, detail)) = proofs(files, bundle, report) {
        report.failures.push(Failure::Malformed(format!("pack: {detail}")));
        report.checks.push(Check { name, ok: false, detail });
    }
}

/// The proofs in order; a failure is its check's name and why.
fn proofs(
    files: &Files,
    bundle: &Bundle,
    report: &mut Report,
) -> Result<(), (&'static str, String)> {
    manifest(files, &bundle.keys).map_err(|why| ("pack manifest", why))?;
    let defs = definitions(files, bundle).map_err(|why| ("tool definitions", why))?;
    report.checks.push(Check {
        name: "tool definitions",
        ok: true,
        detail: format!("{defs} receipt(s) name a definition the pack holds under its hash"),
    });
    let detail = policy_set(files, bundle).map_err(|why| ("policy set", why))?;
    report.checks.push(Check { name: "policy set", ok: true, detail });
    Ok(())
}

/// The manifest is the gateway's word on what the pack holds: signed by a
/// key of the bundle, so a file rewritten and re-hashed here fails.
fn manifest(files: &Files, keys: &[BundleKey]) -> Result<(), String> {
    let bytes = files.get("MANIFEST.json").ok_or("MANIFEST.json is missing")?;
    let manifest: serde_json::Map<String, Value> =
        serde_json::from_slice(bytes).map_err(|_| "MANIFEST.json is not JSON")?;
    let signature =
        files.get("MANIFEST.sig").and_then(|s| serde_json::from_slice::<ManifestSignature>(s).ok());
    let signature = signature.ok_or("MANIFEST.sig is missing or not a manifest signature")?;
    verify_manifest(keys, bytes, &signature).map_err(|why| format!("MANIFEST.sig: {why}"))?;
    for (name, hash) in &manifest {
        let actual = files.get(name).map(|b| sha256_hex(b)).unwrap_or_default();
        if Some(actual.as_str()) != hash.as_str() {
            return Err(format!("{name} does not match its manifest hash"));
        }
    }
    Ok(())
}

/// How many receipts name a tool definition the pack holds under its hash
/// (all that name one must).
fn definitions(files: &Files, bundle: &Bundle) -> Result<usize, String> {
    let mut defs = 0;
    for e in &bundle.receipts {
        let sha = &e.receipt.receipt.tool_definition_sha256;
        if sha.is_empty() {
            continue;
        }
        let text = files.get(&format!("tools/{sha}.json")).map(Vec::as_slice).unwrap_or_default();
        let matches = serde_json::from_slice::<Value>(text)
            .is_ok_and(|v| sha256_hex(canonical_json(&v).as_bytes()) == *sha);
        if !matches {
            return Err(format!(
                "receipt {} names tool definition {sha}, which the pack does not hold",
                e.receipt.receipt.log_index
            ));
        }
        defs += 1;
    }
    Ok(defs)
}

/// The pack's policy set (none: the empty set) and the receipts decided
/// under its version: a policy no receipt was decided under is not the
/// policy of these receipts.
fn policy_set(files: &Files, bundle: &Bundle) -> Result<String, String> {
    let text = |name: &str| files.get(name).and_then(|b| std::str::from_utf8(b).ok());
    let version = match (text("policy/policy.cedar"), text("policy/policy.cedarschema")) {
        (Some(p), Some(s)) => PolicyEngine::load(p, s)
            .map_err(|e| format!("the pack's policy does not load: {e}"))?
            .version()
            .to_string(),
        _ => PolicyEngine::empty().version().to_string(),
    };
    let (under, all) = (
        bundle.receipts.iter().filter(|e| e.receipt.receipt.policy_version == version).count(),
        bundle.receipts.len(),
    );
    if under == 0 && all > 0 {
        return Err(format!("version {version} is the policy of none of the {all} receipt(s)"));
    }
    Ok(format!("version {version}: in force for {under} of {all} receipt(s)"))
}

#[cfg(test)]
mod tests;
