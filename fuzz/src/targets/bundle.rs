//! Export bundles (`toolgate_core::bundle`): parsed and verified offline as
//! `toolgate verify` does. A bundle that verifies against our kid holds only
//! receipts we logged (signed each, or vouched for by our checkpoint; in
//! format 1, as the corpus's older seeds hold, or 2), under a checkpoint we signed.

use std::sync::OnceLock;

use ed25519_dalek::SigningKey;
use toolgate_core::bundle::{self, BUNDLE_FORMAT, Bundle, BundleKey, Entry, Options};
use toolgate_core::merkle;
use toolgate_core::note::Checkpoint;
use toolgate_core::proposal::hex;
use toolgate_core::receipt::{self, LoggedReceipt, OperationRef, RECEIPT_VERSION, Receipt};

use super::note::{ORIGIN, keys};

struct Fixture {
    kid: String,
    /// The leaf bytes of every receipt we logged, in either format.
    leaves: Vec<Vec<u8>>,
    /// Bundles of our log: format 1 (each signed), format 2 signed each, format 2 not.
    bundles: Vec<String>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let k = keys();
        // The receipt key is the log's Ed25519 key, as in the gateway.
        let signing = SigningKey::from_bytes(&[0x11; 32]);
        let kid = receipt::kid(&signing.verifying_key().to_bytes());
        let keys = vec![BundleKey {
            kid: kid.clone(),
            ed25519: k.ed25519.verifier().vkey(),
            ml_dsa_65: Some(k.ml_dsa_65.verifier().vkey()),
        }];
        let mut leaves = Vec::new();
        let mut bundles = Vec::new();
        for (v, sign_each) in [(1, true), (RECEIPT_VERSION, true), (RECEIPT_VERSION, false)] {
            let logged: Vec<LoggedReceipt> = (0..3)
                .map(|i| match sign_each {
                    true => receipt::sign(draft(&kid, i, v), &signing).expect("kid matches"),
                    false => LoggedReceipt { receipt: draft(&kid, i, v), signature: None },
                })
                .collect();
            // From format 3 on, the leaf is the receipt's commitment, opened by its key.
            let key = |i: usize| receipt::opening_key(&[0; 32], i as u64);
            let bytes: Vec<Vec<u8>> = logged
                .iter()
                .enumerate()
                .map(|(i, l)| receipt::entry_bytes(l, Some(&key(i))).expect("the key is given"))
                .collect();
            let hashes: Vec<merkle::Hash> = bytes.iter().map(|l| merkle::leaf_hash(l)).collect();
            let checkpoint = Checkpoint::new(ORIGIN, hashes.len() as u64, merkle::root(&hashes))
                .expect("valid")
                .sign(&[&k.ed25519, &k.ml_dsa_65])
                .expect("signs");
            let proofs =
                merkle::inclusion_proofs(&hashes, 0, hashes.len() as u64).expect("in range");
            let receipts = logged
                .into_iter()
                .zip(proofs)
                .enumerate()
                .map(|(i, (r, p))| Entry {
                    opening: (r.receipt.v >= receipt::COMMITTED_VERSION).then(|| hex(&key(i))),
                    receipt: r,
                    inclusion: p.iter().map(|h| hex(h)).collect(),
                })
                .collect();
            bundles.push(
                Bundle { format: BUNDLE_FORMAT.into(), checkpoint, keys: keys.clone(), receipts }
                    .to_json(),
            );
            leaves.extend(bytes);
        }
        Fixture { kid, leaves, bundles }
    })
}

fn draft(kid: &str, i: u64, v: u32) -> Receipt {
    Receipt {
        v,
        kid: kid.into(),
        log_index: i,
        issued_at: "2026-12-02T12:00:00.000Z".into(),
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "parts".into(),
        tool: "raise_parts_order".into(),
        tool_definition_sha256: "d".repeat(64),
        proposal_sha256: format!("{i:064x}"),
        decision: "allow".into(),
        reason: "approved".into(),
        rules: vec!["orders_need_approval".into()],
        policy_version: "c".repeat(64),
        approval: None,
        operation: (i == 1).then(|| OperationRef { key: "k1".into(), state: "completed".into() }),
        execution_status: "dispatched".into(),
        result_status: "ok".into(),
        result_sha256: Some("e".repeat(64)),
        arguments_hash: "a".repeat(64),
        result_hash: Some("b".repeat(64)),
        arguments: (i == 2).then(|| serde_json::json!({"quantity": 8, "note": null})),
        result: None,
        sandbox: None,
        config_version: None,
        identity: None,
    }
}

pub(crate) fn run(data: &[u8]) {
    let Ok(parsed) = Bundle::from_json(data) else { return };
    let f = fixture();
    let report = bundle::verify(
        &parsed,
        &Options { expected_kids: vec![f.kid.clone()], require_pq: true, ..Default::default() },
    );
    if report.ok() {
        for entry in &parsed.receipts {
            let opening = entry.opening.as_deref().and_then(toolgate_core::proposal::unhex32);
            let leaf = receipt::entry_bytes(&entry.receipt, opening.as_ref())
                .expect("a bundle that verified opens each receipt");
            assert!(f.leaves.contains(&leaf), "a receipt we never logged verified");
        }
    }
    // Trusting the bundle's own keys never panics either.
    let _ = bundle::verify(
        &parsed,
        &Options { expected_kids: vec![], require_pq: false, ..Default::default() },
    );
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    fixture().bundles.iter().map(|b| b.clone().into_bytes()).collect()
}

/// The genuine bundles verify: the seeds are worth mutating.
pub fn genuine_bundle_verifies() -> bool {
    let f = fixture();
    f.bundles.iter().all(|b| {
        let parsed = Bundle::from_json(b.as_bytes()).expect("our bundle parses");
        bundle::verify(
            &parsed,
            &Options { expected_kids: vec![f.kid.clone()], require_pq: true, ..Default::default() },
        )
        .ok()
    })
}
