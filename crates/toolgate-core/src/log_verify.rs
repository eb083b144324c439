//! Verifying a whole receipt log, as its store holds it: every receipt's
//! signature, when it was signed on its own, under the key its kid names
//! (from the key history; a receipt not signed each still names a key of
//! it), its index and its leaf hash; every checkpoint's signatures (Ed25519 and ML-DSA-65),
//! its root recomputed from the leaves, and each checkpoint consistent with
//! the one before. Pure: the caller feeds rows in log order (in chunks, so a
//! large log need not be held as text), then the checkpoints in order of
//! size. The roots come from one frontier advanced checkpoint to checkpoint,
//! so a log of n receipts and k checkpoints costs O(n + k log n) hashes, not
//! O(n·k): a gateway checkpoints often, and its log grows long.
//!
//! A bundle (`bundle.rs`) proves a few receipts to a third party; this
//! proves the operator's own copy of everything.

use std::collections::HashMap;

use crate::bundle::{BundleKey, key_verifiers};
use crate::merkle::{self, Hash};
use crate::note::{self, Algorithm, Verifier};
use crate::receipt::{self, LoggedReceipt};
use crate::strict_json::JsonLimits;

/// The most a stored receipt may be (captured values included).
const RECEIPT_LIMITS: JsonLimits = JsonLimits::sized(64 << 20, 128);

/// Checks a log row by row; `problems` says what failed, in words.
pub struct LogVerifier {
    receipt_keys: HashMap<String, ed25519_dalek::VerifyingKey>,
    verifiers: Vec<Verifier>,
    leaves: Vec<Hash>,
    /// The tree of the first leaves, as far as the checkpoints reached.
    frontier: merkle::Frontier,
    previous: Option<(u64, Hash)>,
    /// What failed so far, one line each.
    pub problems: Vec<String>,
}

impl LogVerifier {
    /// A verifier trusting the keys of the log's history.
    pub fn new(keys: &[BundleKey]) -> Result<Self, String> {
        let mut receipt_keys = HashMap::new();
        let mut verifiers = Vec::new();
        for k in keys {
            let vs = key_verifiers(k).map_err(|e| format!("key history: {e}"))?;
            let raw: [u8; 32] = vs[0].public_key().try_into().expect("an Ed25519 key");
            let key = ed25519_dalek::VerifyingKey::from_bytes(&raw)
                .map_err(|e| format!("key history: {e}"))?;
            receipt_keys.insert(k.kid.clone(), key);
            verifiers.extend(vs);
        }
        Ok(Self {
            receipt_keys,
            verifiers,
            leaves: Vec::new(),
            frontier: merkle::Frontier::new(),
            previous: None,
            problems: Vec::new(),
        })
    }

    /// How many receipts were fed.
    pub fn size(&self) -> u64 {
        self.leaves.len() as u64
    }

    /// The next stored receipt: its index, the leaf hash stored beside it
    /// (read from the log's tiles or entries), its logged text and, for a
    /// format-3 receipt, the key that opens its commitment. The leaf is
    /// recomputed from the text: the receipt's own bytes, or its commitment.
    pub fn receipt(
        &mut self,
        log_index: u64,
        stored_leaf: &Hash,
        signed: &str,
        opening: Option<&[u8; 32]>,
    ) {
        let problems = &mut self.problems;
        if log_index != self.leaves.len() as u64 {
            problems.push(format!("log index {log_index} follows {}", self.leaves.len()));
        }
        let parsed = LoggedReceipt::from_json(signed.as_bytes(), RECEIPT_LIMITS);
        let leaf = match parsed.as_ref().map(|p| receipt::entry_bytes(p, opening)) {
            Ok(Ok(entry)) => merkle::leaf_hash(&entry),
            Ok(Err(e)) => {
                problems.push(format!("receipt {log_index}: {e}"));
                *stored_leaf
            }
            Err(_) => merkle::leaf_hash(signed.as_bytes()),
        };
        if leaf != *stored_leaf {
            problems.push(format!(
                "receipt {log_index}: its stored leaf hash is not the hash of its entry"
            ));
        }
        match parsed {
            Ok(parsed) => match self.receipt_keys.get(&parsed.receipt.kid) {
                Some(key) => {
                    if let Err(e) = receipt::verify(&parsed, key) {
                        problems.push(format!("receipt {log_index}: {e}"));
                    }
                    if parsed.receipt.log_index != log_index {
                        problems.push(format!(
                            "receipt {log_index} names index {}",
                            parsed.receipt.log_index
                        ));
                    }
                    if receipt::leaf_bytes(&parsed) != signed.as_bytes() {
                        problems
                            .push(format!("receipt {log_index} is not stored in canonical form"));
                    }
                }
                None => problems.push(format!(
                    "receipt {log_index} names kid {}, which is not in the key history",
                    parsed.receipt.kid
                )),
            },
            Err(e) => problems.push(format!("receipt {log_index}: {e}")),
        }
        self.leaves.push(leaf);
    }

    /// The next checkpoint, in order of size, after every receipt.
    pub fn checkpoint(&mut self, size: u64, root: &Hash, signed_note: &str) {
        let (cp, signed) = match note::open_checkpoint(signed_note, &self.verifiers) {
            Ok(opened) => opened,
            Err(e) => return self.problems.push(format!("checkpoint of size {size}: {e}")),
        };
        let end = (size as usize).min(self.leaves.len());
        let recomputed = if end as u64 >= self.frontier.size() {
            for leaf in &self.leaves[self.frontier.size() as usize..end] {
                self.frontier.push(*leaf);
            }
            self.frontier.root()
        } else {
            // Out of order (a store should not give them so): the long way.
            merkle::root(&self.leaves[..end])
        };
        if cp.size() != size || cp.root() != root || recomputed != *root {
            self.problems.push(format!(
                "checkpoint of size {size}: its root is not the log's root at that size"
            ));
        }
        let by = |alg: Algorithm| signed.iter().any(|s| s.algorithm == alg);
        if !by(Algorithm::Ed25519) || !by(Algorithm::MlDsa65) {
            self.problems.push(format!("checkpoint of size {size}: not signed by both an Ed25519 and an ML-DSA-65 key of the history"));
        }
        // Both roots are recomputed above from the same leaves, the older a
        // prefix of the newer, so two that passed are consistent; what is
        // left to catch is a log that shrank.
        if let Some((old_size, _)) = self.previous {
            if size < old_size {
                self.problems.push(format!(
                    "checkpoints {old_size} → {size}: not consistent (the log shrank)"
                ));
            }
        }
        self.previous = Some((size, *root));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::tests::{ORIGIN, bundle_key, keys, receipt};
    use crate::note::Checkpoint;
    use crate::receipt::{Draft, Sealed};

    fn log(k: &crate::bundle::tests::Keys, n: u64) -> Vec<Sealed> {
        log_of(k, n, true)
    }

    fn log_of(k: &crate::bundle::tests::Keys, n: u64, sign_each: bool) -> Vec<Sealed> {
        (0..n)
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
            .collect()
    }

    fn text(s: &Sealed) -> String {
        s.logged.to_json()
    }

    fn checkpoint(k: &crate::bundle::tests::Keys, leaves: &[Hash]) -> (u64, Hash, String) {
        let root = merkle::root(leaves);
        let note = Checkpoint::new(ORIGIN, leaves.len() as u64, root)
            .unwrap()
            .sign(&[&k.ed, &k.pq])
            .unwrap();
        (leaves.len() as u64, root, note)
    }

    fn verify(
        k: &crate::bundle::tests::Keys,
        rows: &[(u64, Hash, String)],
        checkpoints: &[(u64, Hash, String)],
    ) -> Vec<String> {
        let mut v = LogVerifier::new(&[bundle_key(k)]).unwrap();
        for (i, leaf, signed) in rows {
            v.receipt(*i, leaf, signed, Some(&receipt::opening_key(&[0; 32], *i)));
        }
        for (size, root, note) in checkpoints {
            v.checkpoint(*size, root, note);
        }
        v.problems
    }

    #[test]
    fn a_sound_log_verifies_and_each_damage_is_named() {
        let k = keys(9);
        let sealed = log(&k, 5);
        let leaves: Vec<Hash> = sealed.iter().map(|s| s.leaf_hash).collect();
        let rows: Vec<(u64, Hash, String)> =
            sealed.iter().enumerate().map(|(i, s)| (i as u64, s.leaf_hash, text(s))).collect();
        let cps = [checkpoint(&k, &leaves[..3]), checkpoint(&k, &leaves)];
        assert_eq!(verify(&k, &rows, &cps), Vec::<String>::new());
        // A receipt's text altered in place (its stored leaf hash kept).
        let mut bad = rows.clone();
        bad[2].2 = bad[2].2.replace("\"allow\"", "\"deny\"");
        let problems = verify(&k, &bad, &cps);
        assert!(
            problems.iter().any(|p| p.contains("receipt 2: its stored leaf hash")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("receipt 2:") && p.contains("signature")),
            "{problems:?}"
        );
        // A receipt missing from the middle.
        let mut gap = rows.clone();
        gap.remove(1);
        assert!(verify(&k, &gap, &[]).iter().any(|p| p == "log index 2 follows 1"));
        // A checkpoint over other leaves, and one signed by a stranger.
        let other = keys(10);
        let forged = checkpoint(&k, &leaves[1..]);
        assert!(
            verify(&k, &rows, &[(5, forged.1, forged.2)])
                .iter()
                .any(|p| p.contains("is not the log's root"))
        );
        let foreign = checkpoint(&other, &leaves);
        assert!(
            verify(&k, &rows, &[foreign]).iter().any(|p| p.starts_with("checkpoint of size 5:"))
        );
        // A receipt signed by a key outside the history.
        let stranger = log(&other, 1).remove(0);
        assert!(
            verify(&k, &[(0, stranger.leaf_hash, text(&stranger))], &[])
                .iter()
                .any(|p| p.contains("not in the key history"))
        );
    }

    #[test]
    fn a_log_not_signed_each_verifies_by_its_checkpoints() {
        let k = keys(11);
        let sealed = log_of(&k, 6, false);
        let leaves: Vec<Hash> = sealed.iter().map(|s| s.leaf_hash).collect();
        let rows: Vec<(u64, Hash, String)> =
            sealed.iter().enumerate().map(|(i, s)| (i as u64, s.leaf_hash, text(s))).collect();
        assert!(rows.iter().all(|r| !r.2.contains("\"sig\"")));
        let cps = [checkpoint(&k, &leaves[..2]), checkpoint(&k, &leaves)];
        assert_eq!(verify(&k, &rows, &cps), Vec::<String>::new());
        // A receipt rewritten with its leaf hash to match: the checkpoint's root catches it.
        let mut bad = rows.clone();
        bad[4].2 = bad[4].2.replace("\"allow\"", "\"deny\"");
        bad[4].1 = merkle::leaf_hash(
            &receipt::entry_bytes(
                &LoggedReceipt::from_json(bad[4].2.as_bytes(), RECEIPT_LIMITS).unwrap(),
                Some(&receipt::opening_key(&[0; 32], 4)),
            )
            .unwrap(),
        );
        let problems = verify(&k, &bad, &cps);
        assert_eq!(problems, ["checkpoint of size 6: its root is not the log's root at that size"]);
        // One of another log's key is still not of this history.
        let stranger = log_of(&keys(12), 1, false).remove(0);
        assert!(
            verify(&k, &[(0, stranger.leaf_hash, text(&stranger))], &[])
                .iter()
                .any(|p| p.contains("not in the key history"))
        );
    }
}
