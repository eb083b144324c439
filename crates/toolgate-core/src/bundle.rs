//! The export bundle: signed receipts, their inclusion proofs, the signed
//! checkpoint the proofs lead to, and the public keys — everything an
//! auditor needs to check, offline and with no ledger, what the gateway
//! decided and that it is in the log. [`verify`] is the whole check.
//!
//! # Wire form (`toolgate-bundle/1`)
//!
//! ```text
//! {"format": "toolgate-bundle/1",
//!  "checkpoint": "<C2SP signed note>",
//!  "keys": [{"kid": "…", "ed25519": "<vkey>", "ml_dsa_65": "<vkey>"}],
//!  "receipts": [{"receipt": {"receipt": {…}[, "sig": "…"]}, "inclusion": ["<hex>", …]}]}
//! ```
//!
//! A receipt with `sig` is checked under its own signature too; one without
//! (format 2, the default) is vouched for by the checkpoint alone, through
//! its inclusion proof.
//!
//! A vkey is the signed-note verifier key text (`<origin>+<key id>+<base64>`).
//! Unknown members are refused everywhere, so nothing unverified rides along.

use serde::{Deserialize, Serialize};

use crate::merkle::{self, Hash};
use crate::note::{self, Algorithm, NoteError, Verifier};
use crate::proposal::{hex, unhex32};
use crate::receipt::{self, LoggedReceipt, ReceiptError};
use crate::strict_json::{self, JsonLimits};

/// The `format` of the bundles this module writes and reads.
pub const BUNDLE_FORMAT: &str = "toolgate-bundle/1";

/// An export bundle: what an auditor is given (wire form in the module docs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Always [`BUNDLE_FORMAT`].
    pub format: String,
    /// The signed checkpoint (a C2SP signed note) the inclusion proofs lead to.
    pub checkpoint: String,
    /// The public keys of the signers of the receipts and the checkpoint.
    pub keys: Vec<BundleKey>,
    /// The receipts, each with its inclusion proof.
    pub receipts: Vec<Entry>,
}

/// One signing identity: the receipt key (by kid) and its checkpoint keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleKey {
    /// The receipt key id: [`receipt::kid`] of the Ed25519 key.
    pub kid: String,
    /// Verifier key text of the Ed25519 key that signs receipts and checkpoints.
    pub ed25519: String,
    /// Verifier key text of the ML-DSA-65 key that cosigns checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_dsa_65: Option<String>,
}

/// One receipt of the bundle and the proof that it is in the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The receipt, as signed.
    pub receipt: LoggedReceipt,
    /// For a format-3 receipt, whose leaf is a commitment to it: the hex
    /// key that opens the commitment (`receipt::opening_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opening: Option<String>,
    /// RFC 6962 audit path from the receipt's leaf to the checkpoint's root.
    pub inclusion: Vec<String>,
}

impl Bundle {
    /// The bundle as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a bundle always serializes")
    }

    /// Reads a bundle strictly (duplicate keys and unknown members refused)
    /// and checks its format. It only parses: [`verify`] checks it.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Failure> {
        // Bundles of a whole log are large; depth stays small.
        let limits = JsonLimits::sized(1 << 30, 128);
        let value =
            strict_json::parse(bytes, limits).map_err(|e| Failure::Malformed(e.to_string()))?;
        let bundle: Bundle =
            serde_json::from_value(value).map_err(|e| Failure::Malformed(e.to_string()))?;
        if bundle.format != BUNDLE_FORMAT {
            return Err(Failure::Malformed(format!(
                "format {:?} is not {BUNDLE_FORMAT}",
                bundle.format
            )));
        }
        Ok(bundle)
    }
}

/// The key's note verifiers, checked against its kid.
pub fn key_verifiers(key: &BundleKey) -> Result<Vec<Verifier>, Failure> {
    let bad = |why: String| Failure::KeyKid { kid: key.kid.clone(), detail: why };
    let ed = Verifier::from_vkey(&key.ed25519).map_err(|e| bad(format!("ed25519 key: {e}")))?;
    if ed.algorithm() != Algorithm::Ed25519 {
        return Err(bad("the ed25519 entry holds another algorithm's key".into()));
    }
    let raw: [u8; 32] = ed.public_key().try_into().map_err(|_| bad("not a 32-byte key".into()))?;
    let actual = receipt::kid(&raw);
    if actual != key.kid {
        return Err(bad(format!("the Ed25519 key's kid is {actual}")));
    }
    let mut out = vec![ed];
    if let Some(pq) = &key.ml_dsa_65 {
        let v = Verifier::from_vkey(pq).map_err(|e| bad(format!("ml_dsa_65 key: {e}")))?;
        if v.algorithm() != Algorithm::MlDsa65 {
            return Err(bad("the ml_dsa_65 entry holds another algorithm's key".into()));
        }
        out.push(v);
    }
    Ok(out)
}

/// Why a bundle does not verify. Each has its own name (`name()`), so a
/// script can tell a forged receipt from a stale proof.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The bundle, or its checkpoint, cannot be read.
    #[error("malformed bundle: {0}")]
    Malformed(String),
    /// A key entry does not hold the key its kid names, or its key text is bad.
    #[error("key {kid} is inconsistent: {detail}")]
    KeyKid {
        /// The kid the key entry states.
        kid: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A receipt does not verify under the key its kid names.
    #[error("receipt {index}: {detail}")]
    ReceiptSignature {
        /// The receipt's log index.
        index: u64,
        /// Why it does not verify.
        detail: String,
    },
    /// A receipt names another kid than its signing key's.
    #[error("receipt {index}: {detail}")]
    ReceiptKid {
        /// The receipt's log index.
        index: u64,
        /// Which kids differ.
        detail: String,
    },
    /// A receipt names a kid the bundle has no key for.
    #[error("receipt {index} names kid {kid}, which is not among the bundle's keys")]
    UnknownKid {
        /// The receipt's log index.
        index: u64,
        /// The kid it names.
        kid: String,
    },
    /// A receipt's inclusion proof does not lead to the checkpoint's root.
    #[error("receipt {index}: the inclusion proof fails: {detail}")]
    Inclusion {
        /// The receipt's log index.
        index: u64,
        /// Why the proof fails.
        detail: String,
    },
    /// The checkpoint's Ed25519 signature is missing or does not verify.
    #[error("checkpoint Ed25519: {0}")]
    CheckpointEd25519(String),
    /// The checkpoint's ML-DSA-65 signature does not verify, or is missing
    /// where required.
    #[error("checkpoint ML-DSA-65: {0}")]
    CheckpointMlDsa65(String),
    /// A signer is not among the kids the auditor expects.
    #[error("signer not pinned: {0}")]
    NotPinned(String),
    /// Fewer of the witnesses given cosigned the checkpoint than required,
    /// or a known witness's cosignature does not verify.
    #[error("witnesses: {0}")]
    Witnesses(String),
}

impl Failure {
    /// The failure's stable name (`receipt_signature`, `inclusion`, …), for
    /// scripts.
    pub fn name(&self) -> &'static str {
        match self {
            Failure::Malformed(_) => "malformed",
            Failure::KeyKid { .. } => "kid_consistency",
            Failure::ReceiptSignature { .. } => "receipt_signature",
            Failure::ReceiptKid { .. } => "kid_consistency",
            Failure::UnknownKid { .. } => "unknown_kid",
            Failure::Inclusion { .. } => "inclusion",
            Failure::CheckpointEd25519(_) => "checkpoint_ed25519",
            Failure::CheckpointMlDsa65(_) => "checkpoint_ml_dsa_65",
            Failure::NotPinned(_) => "signer_pinned",
            Failure::Witnesses(_) => "witnesses",
        }
    }
}

/// What the verifier requires beyond the bundle itself.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The kids the auditor trusts; empty: trust the bundle's own keys.
    pub expected_kids: Vec<String>,
    /// Refuse a checkpoint without a valid ML-DSA-65 signature.
    pub require_pq: bool,
    /// Witnesses' cosigner keys the auditor trusts (c2sp.org/tlog-cosignature).
    pub witnesses: Vec<Verifier>,
    /// How many of them must have cosigned the checkpoint.
    pub min_witnesses: usize,
}

/// One line of the report: a property and whether it was proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The property checked (`receipt signatures`, `inclusion`, …).
    pub name: &'static str,
    /// Whether it was proven.
    pub ok: bool,
    /// What was proven, or why not.
    pub detail: String,
}

/// What [`verify`] found: every property checked, and every failure.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One line per property, in the order checked.
    pub checks: Vec<Check>,
    /// Every failure found; none means the bundle verifies.
    pub failures: Vec<Failure>,
    /// The log's origin, from the verified checkpoint (empty without one).
    pub origin: String,
    /// The verified checkpoint's tree size.
    pub tree_size: u64,
    /// The verified checkpoint's root hash, in hex.
    pub root: String,
}

impl Report {
    /// Whether the bundle verifies: no failure at all.
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    fn check(&mut self, name: &'static str, result: Result<String, Vec<Failure>>) {
        match result {
            Ok(detail) => self.checks.push(Check { name, ok: true, detail }),
            Err(failures) => {
                let detail =
                    failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
                self.checks.push(Check { name, ok: false, detail });
                self.failures.extend(failures);
            }
        }
    }
}

/// Verifies a bundle: every property is checked and reported, so one
/// failure does not hide another.
pub fn verify(bundle: &Bundle, options: &Options) -> Report {
    let mut report = Report::default();
    // Keys: each kid is its Ed25519 key's.
    let mut keys: Vec<(&BundleKey, Vec<Verifier>)> = Vec::new();
    let mut key_failures = Vec::new();
    for key in &bundle.keys {
        match key_verifiers(key) {
            Ok(v) => keys.push((key, v)),
            Err(f) => key_failures.push(f),
        }
    }
    let verifiers: Vec<Verifier> = keys.iter().flat_map(|(_, v)| v.iter().cloned()).collect();
    // Receipts: each signature under the key its kid names.
    let mut sig_failures = Vec::new();
    let mut signed_each = 0;
    let mut kid_failures = key_failures;
    for entry in &bundle.receipts {
        let r = &entry.receipt.receipt;
        let Some((_, v)) = keys.iter().find(|(k, _)| k.kid == r.kid) else {
            sig_failures.push(Failure::UnknownKid { index: r.log_index, kid: r.kid.clone() });
            continue;
        };
        let ed = ed25519_key(&v[0]);
        match receipt::verify(&entry.receipt, &ed) {
            Ok(receipt::Vouched::BySignature) => signed_each += 1,
            Ok(receipt::Vouched::ByCheckpoint) => {}
            Err(e @ ReceiptError::KidMismatch { .. }) => {
                kid_failures.push(Failure::ReceiptKid { index: r.log_index, detail: e.to_string() })
            }
            Err(e) => sig_failures
                .push(Failure::ReceiptSignature { index: r.log_index, detail: e.to_string() }),
        }
    }
    let n = bundle.receipts.len();
    let signatures = match (signed_each, n - signed_each) {
        (_, 0) => format!("{n} receipt(s), each signed by the key its kid names"),
        (0, _) => format!(
            "{n} receipt(s) of the key their kid names, vouched for by the checkpoint's signature (not signed each)"
        ),
        (s, c) => format!(
            "{s} receipt(s) signed by the key their kid names; {c} vouched for by the checkpoint's signature"
        ),
    };
    report.check(
        "receipt signatures",
        if sig_failures.is_empty() { Ok(signatures) } else { Err(sig_failures) },
    );
    report.check(
        "kid consistency",
        if kid_failures.is_empty() {
            Ok(format!(
                "{} key(s): every kid is its key's; every receipt names its signer",
                keys.len()
            ))
        } else {
            Err(kid_failures)
        },
    );
    // The checkpoint: its signatures, then its content.
    let opened = match note::open_checkpoint(&bundle.checkpoint, &verifiers) {
        Ok(opened) => Some(opened),
        Err(e) => {
            let failure = match &e {
                NoteError::InvalidSignature { algorithm: Algorithm::MlDsa65, .. } => {
                    Failure::CheckpointMlDsa65(e.to_string())
                }
                NoteError::InvalidSignature { .. } => Failure::CheckpointEd25519(e.to_string()),
                NoteError::NoKnownSignature => Failure::CheckpointEd25519(
                    "the checkpoint is signed by no key in the bundle".into(),
                ),
                _ => Failure::Malformed(format!("checkpoint: {e}")),
            };
            report.check("checkpoint Ed25519", Err(vec![failure]));
            None
        }
    };
    let Some((checkpoint, signed_by)) = opened else {
        report.check(
            "inclusion",
            Err(vec![Failure::Malformed(
                "no verified checkpoint to prove inclusion against".into(),
            )]),
        );
        return report;
    };
    report.origin = checkpoint.origin().to_string();
    report.tree_size = checkpoint.size();
    report.root = hex(checkpoint.root());
    let by = |alg: Algorithm| signed_by.iter().find(|s| s.algorithm == alg);
    report.check(
        "checkpoint Ed25519",
        match by(Algorithm::Ed25519) {
            Some(s) => Ok(format!(
                "{}+{:08x} signed tree size {} root {}",
                s.name,
                s.key_id,
                checkpoint.size(),
                report.root
            )),
            None => Err(vec![Failure::CheckpointEd25519(
                "no Ed25519 signature from a key in the bundle".into(),
            )]),
        },
    );
    let pq = match (by(Algorithm::MlDsa65), options.require_pq) {
        (Some(s), _) => Ok(format!("{}+{:08x}", s.name, s.key_id)),
        (None, true) => Err(vec![Failure::CheckpointMlDsa65(
            "required (--require-pq) but the checkpoint carries no valid ML-DSA-65 signature from \
                a key in the bundle"
                .into(),
        )]),
        (None, false) => Ok("absent (not required)".into()),
    };
    report.check("checkpoint ML-DSA-65", pq);
    if options.min_witnesses > 0 {
        let cosigned = match crate::note::cosigned_by(&bundle.checkpoint, &options.witnesses) {
            Ok(by) if by.len() >= options.min_witnesses => Ok(format!(
                "cosigned by {} ({} required)",
                by.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "),
                options.min_witnesses
            )),
            Ok(by) => Err(vec![Failure::Witnesses(format!(
                "the checkpoint is cosigned by {} of the witnesses given, fewer than the {} required",
                by.len(),
                options.min_witnesses
            ))]),
            Err(e) => Err(vec![Failure::Witnesses(format!(
                "a witness's cosignature does not verify: {e}"
            ))]),
        };
        report.check("witnesses", cosigned);
    }
    // Inclusion of every receipt under the checkpoint's root.
    let mut inclusion = Vec::new();
    for entry in &bundle.receipts {
        let index = entry.receipt.receipt.log_index;
        if let Err(detail) = prove(entry, checkpoint.size(), checkpoint.root()) {
            inclusion.push(Failure::Inclusion { index, detail });
        }
    }
    report.check(
        "inclusion",
        if inclusion.is_empty() {
            Ok(format!("{n} receipt(s) in tree size {}", checkpoint.size()))
        } else {
            Err(inclusion)
        },
    );
    // Pinning: the checkpoint's signers and every receipt's kid are trusted.
    if options.expected_kids.is_empty() {
        report.checks.push(Check {
            name: "signer pinned",
            ok: true,
            detail: "not requested: the bundle's own keys were trusted (pass --expected-kid)"
                .into(),
        });
    } else {
        report.check("signer pinned", pinned(bundle, &keys, &signed_by, options));
    }
    report
}

fn ed25519_key(v: &Verifier) -> ed25519_dalek::VerifyingKey {
    let raw: [u8; 32] = v.public_key().try_into().expect("checked by key_verifiers");
    ed25519_dalek::VerifyingKey::from_bytes(&raw).expect("checked by key_verifiers")
}

fn prove(entry: &Entry, size: u64, root: &Hash) -> Result<(), String> {
    let index = entry.receipt.receipt.log_index;
    let proof: Vec<Hash> = entry
        .inclusion
        .iter()
        .map(|h| unhex32(h).ok_or_else(|| format!("{h:?} is not a 32-byte hex hash")))
        .collect::<Result<_, _>>()?;
    let opening = entry
        .opening
        .as_deref()
        .map(|k| unhex32(k).ok_or_else(|| format!("opening {k:?} is not a 32-byte hex key")))
        .transpose()?;
    let leaf = merkle::leaf_hash(
        &receipt::entry_bytes(&entry.receipt, opening.as_ref()).map_err(|e| e.to_string())?,
    );
    merkle::verify_inclusion(&leaf, index, size, &proof, root).map_err(|e| e.to_string())
}

fn pinned(
    bundle: &Bundle,
    keys: &[(&BundleKey, Vec<Verifier>)],
    signed_by: &[note::VerifiedSignature],
    options: &Options,
) -> Result<String, Vec<Failure>> {
    let trusted = |kid: &str| options.expected_kids.iter().any(|k| k == kid);
    let mut failures = Vec::new();
    let signer_kid = |alg: Algorithm| {
        signed_by.iter().filter(|s| s.algorithm == alg).find_map(|s| {
            keys.iter()
                .find(|(_, vs)| vs.iter().any(|v| v.name() == s.name && v.key_id() == s.key_id))
                .map(|(k, _)| k.kid.as_str())
        })
    };
    let mut algs = vec![Algorithm::Ed25519];
    if options.require_pq {
        algs.push(Algorithm::MlDsa65);
    }
    for alg in algs {
        let trusted_signer = signed_by.iter().filter(|s| s.algorithm == alg).any(|s| {
            keys.iter().any(|(k, vs)| {
                trusted(&k.kid) && vs.iter().any(|v| v.name() == s.name && v.key_id() == s.key_id)
            })
        });
        if !trusted_signer {
            let by = signer_kid(alg).unwrap_or("no key");
            failures.push(Failure::NotPinned(format!(
                "the checkpoint's {alg} signature is by kid {by}, not an expected kid ({})",
                options.expected_kids.join(", ")
            )));
        }
    }
    for entry in &bundle.receipts {
        let r = &entry.receipt.receipt;
        if !trusted(&r.kid) {
            failures.push(Failure::NotPinned(format!(
                "receipt {} is signed by kid {}, not an expected kid",
                r.log_index, r.kid
            )));
        }
    }
    if failures.is_empty() {
        Ok(format!(
            "checkpoint and receipts signed by expected kid(s) {}",
            options.expected_kids.join(", ")
        ))
    } else {
        Err(failures)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::note::{Checkpoint, Signer};
    use crate::receipt::{Draft, RECEIPT_VERSION, Receipt, ReceiptKey};
    use aws_lc_rs::signature::{ML_DSA_65_SIGNING, PqdsaKeyPair};
    use ed25519_dalek::SigningKey;
    use std::sync::Arc;

    pub(crate) const ORIGIN: &str = "toolgate.test/log";

    pub(crate) struct Keys {
        pub(crate) receipt: Arc<ReceiptKey>,
        pub(crate) ed: Signer,
        pub(crate) pq: Signer,
    }

    pub(crate) fn keys(seed: u8) -> Keys {
        let sk = SigningKey::from_bytes(&[seed; 32]);
        let pq = PqdsaKeyPair::from_seed(&ML_DSA_65_SIGNING, &[seed; 32]).unwrap();
        Keys {
            receipt: Arc::new(ReceiptKey::new(sk.clone())),
            ed: Signer::ed25519(ORIGIN, sk).unwrap(),
            pq: Signer::ml_dsa_65(ORIGIN, pq).unwrap(),
        }
    }

    pub(crate) fn bundle_key(k: &Keys) -> BundleKey {
        BundleKey {
            kid: k.receipt.kid().into(),
            ed25519: k.ed.verifier().vkey(),
            ml_dsa_65: Some(k.pq.verifier().vkey()),
        }
    }

    pub(crate) fn receipt(k: &Keys, i: u64) -> Receipt {
        Receipt {
            v: RECEIPT_VERSION,
            kid: k.receipt.kid().into(),
            log_index: 0,
            issued_at: "2026-11-30T00:00:00.000Z".into(),
            tenant: "acme".into(),
            caller: "agent".into(),
            server: "tickets".into(),
            tool: "get_ticket".into(),
            tool_definition_sha256: "ab".repeat(32),
            proposal_sha256: format!("{i:064x}"),
            decision: "allow".into(),
            reason: "automatic".into(),
            rules: vec![],
            policy_version: "p".into(),
            approval: None,
            operation: None,
            execution_status: "dispatched".into(),
            result_status: "ok".into(),
            result_sha256: None,
            arguments_hash: "00".repeat(32),
            result_hash: None,
            arguments: None,
            result: None,
            sandbox: None,
            config_version: None,
            identity: None,
        }
    }

    /// A log of `n` receipts, each signed; the bundle exports `pick` against a checkpoint at the full size.
    pub(crate) fn bundle(k: &Keys, n: u64, pick: &[u64], signers: &[&Signer]) -> Bundle {
        bundle_of(k, n, pick, signers, true)
    }

    /// As [`bundle`], the receipts signed each or not.
    pub(crate) fn bundle_of(
        k: &Keys,
        n: u64,
        pick: &[u64],
        signers: &[&Signer],
        sign_each: bool,
    ) -> Bundle {
        let sealed: Vec<_> = (0..n)
            .map(|i| {
                Draft {
                    receipt: receipt(k, i),
                    salt: [0; 32],
                    asked: None,
                    key: k.receipt.clone(),
                    sign_each,
                    placement: Default::default(),
                }
                .seal(i)
                .unwrap()
                .0
            })
            .collect();
        let leaves: Vec<Hash> = sealed.iter().map(|s| s.leaf_hash).collect();
        let checkpoint =
            Checkpoint::new(ORIGIN, n, merkle::root(&leaves)).unwrap().sign(signers).unwrap();
        let receipts = pick
            .iter()
            .map(|&i| Entry {
                receipt: sealed[i as usize].logged.clone(),
                opening: Some(hex(&crate::receipt::opening_key(&[0; 32], i))),
                inclusion: merkle::inclusion_proof(&leaves, i, n)
                    .unwrap()
                    .iter()
                    .map(|h| hex(h))
                    .collect(),
            })
            .collect();
        Bundle { format: BUNDLE_FORMAT.into(), checkpoint, keys: vec![bundle_key(k)], receipts }
    }

    fn names(report: &Report) -> Vec<&'static str> {
        report.failures.iter().map(Failure::name).collect()
    }

    #[test]
    fn a_whole_bundle_verifies_and_reports_every_proof() {
        let k = keys(1);
        let b = bundle(&k, 11, &(0..11).collect::<Vec<_>>(), &[&k.ed, &k.pq]);
        let back = Bundle::from_json(b.to_json().as_bytes()).unwrap();
        let report = verify(
            &back,
            &Options {
                expected_kids: vec![k.receipt.kid().into()],
                require_pq: true,
                ..Default::default()
            },
        );
        assert!(report.ok(), "{:?}", report.failures);
        let checks: Vec<_> = report.checks.iter().map(|c| c.name).collect();
        assert_eq!(
            checks,
            [
                "receipt signatures",
                "kid consistency",
                "checkpoint Ed25519",
                "checkpoint ML-DSA-65",
                "inclusion",
                "signer pinned"
            ]
        );
        assert_eq!(report.tree_size, 11);
    }

    #[test]
    fn receipts_not_signed_each_are_proven_by_the_checkpoint_alone() {
        let k = keys(4);
        let good = bundle_of(&k, 9, &[0, 5, 8], &[&k.ed, &k.pq], false);
        assert!(good.receipts.iter().all(|e| e.receipt.signature.is_none()));
        let pinned = Options {
            expected_kids: vec![k.receipt.kid().into()],
            require_pq: true,
            ..Default::default()
        };
        let report = verify(&Bundle::from_json(good.to_json().as_bytes()).unwrap(), &pinned);
        assert!(report.ok(), "{:?}", report.failures);
        assert!(
            report.checks[0].detail.contains("vouched for by the checkpoint"),
            "{}",
            report.checks[0].detail
        );
        // A changed field is caught by its inclusion proof.
        let mut b = good.clone();
        b.receipts[1].receipt.receipt.result_status = "tool_error".into();
        assert_eq!(names(&verify(&b, &pinned)), ["inclusion"]);
        // A signature added afterwards changes the leaf: it is not a way in either.
        let mut b = good.clone();
        b.receipts[0].receipt =
            crate::receipt::sign(b.receipts[0].receipt.receipt.clone(), k.receipt.signing_key())
                .unwrap();
        assert_eq!(names(&verify(&b, &pinned)), ["inclusion"]);
        // Under a checkpoint of another key, nothing vouches for them.
        let other = keys(5);
        let mut b = good.clone();
        b.checkpoint = bundle_of(&other, 9, &[], &[&other.ed, &other.pq], false).checkpoint;
        assert!(!verify(&b, &Options::default()).ok());
        // Format 1 without its signature is refused as such.
        let mut b = good;
        b.receipts[2].receipt.receipt.v = 1;
        assert_eq!(names(&verify(&b, &Options::default())), ["receipt_signature", "inclusion"]);
    }

    #[test]
    fn each_tampering_fails_with_its_own_reason() {
        let k = keys(2);
        let good = bundle(&k, 6, &[1, 4], &[&k.ed, &k.pq]);
        let run = |b: &Bundle, o: &Options| names(&verify(b, o));
        let none = Options::default();
        // A changed field of a receipt.
        let mut b = good.clone();
        b.receipts[0].receipt.receipt.decision = "deny".into();
        assert_eq!(run(&b, &none), ["receipt_signature", "inclusion"]);
        // A proof for another tree: the checkpoint of a longer log.
        let mut b = good.clone();
        b.checkpoint = bundle(&k, 7, &[], &[&k.ed, &k.pq]).checkpoint;
        assert_eq!(run(&b, &none), ["inclusion", "inclusion"]);
        // A checkpoint signed by another key.
        let other = keys(3);
        let mut b = good.clone();
        b.checkpoint = bundle(&other, 6, &[], &[&other.ed, &other.pq]).checkpoint;
        assert_eq!(run(&b, &none), ["checkpoint_ed25519", "malformed"]);
        // The PQ signature stripped.
        let stripped = bundle(&k, 6, &[1, 4], &[&k.ed]);
        assert!(verify(&stripped, &none).ok());
        assert_eq!(
            run(&stripped, &Options { require_pq: true, ..none.clone() }),
            ["checkpoint_ml_dsa_65"]
        );
        // Another kid expected.
        assert_eq!(
            run(
                &good,
                &Options {
                    expected_kids: vec![other.receipt.kid().into()],
                    require_pq: false,
                    ..Default::default()
                }
            ),
            ["signer_pinned", "signer_pinned", "signer_pinned"]
        );
        // A key entry whose kid is not its key's.
        let mut b = good.clone();
        b.keys[0].kid = other.receipt.kid().into();
        let got = run(&b, &none);
        assert!(got.contains(&"kid_consistency") && got.contains(&"unknown_kid"), "{got:?}");
        // Unknown members are refused.
        let text = good.to_json().replacen("\"format\"", "\"extra\": 1, \"format\"", 1);
        assert!(matches!(Bundle::from_json(text.as_bytes()), Err(Failure::Malformed(_))));
    }
}
