//! The log's signing keys, in `STATE_DIR/keys/` (owner-only): an Ed25519
//! key that signs receipts and checkpoints, and an ML-DSA-65 key that
//! cosigns checkpoints. Both are created at first start. `keys.json`
//! records the current kid and every earlier key's public half (the key
//! history), so receipts signed before a rotation still verify.
//!
//! Fail closed: a key file whose kid is not the recorded one (replaced,
//! corrupted, or copied from another gateway), a missing key file with a
//! history, a log origin other than the recorded one, or a key file other
//! users can read — each stops the start with what to do.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use aws_lc_rs::signature::{ML_DSA_65_SIGNING, PqdsaKeyPair};
use serde::{Deserialize, Serialize};
use toolgate_core::note::Signer;
use toolgate_core::receipt::ReceiptKey;
use toolgate_ledger::LogKey;

use crate::identity::assertion::AssertionKey;
use toolgate_core::{Clock, Entropy};
use toolgate_mcp::owner_only::{check_owner_only, write_owner_only};

const ED25519_FILE: &str = "receipt-ed25519.seed";
const MLDSA_FILE: &str = "checkpoint-ml-dsa-65.seed";
const HISTORY_FILE: &str = "keys.json";

/// `keys.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    /// The log origin the keys are named by (fixed at first start).
    pub origin: String,
    /// The key that signs now.
    pub current: KeyRecord,
    /// Earlier keys, oldest first: public halves only.
    #[serde(default)]
    pub retired: Vec<KeyRecord>,
}

/// One key of the history: its kid and the public halves that verify it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRecord {
    /// The receipt key's id, as receipts and the ledger name it.
    pub kid: String,
    /// Signed-note verifier key texts.
    ed25519: String,
    ml_dsa_65: String,
    created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retired_ms: Option<i64>,
    /// The public half (JWK `x`) of the identity assertion key derived from
    /// this receipt key; absent for keys retired before assertions existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<String>,
}

impl KeyRecord {
    /// Its verifier keys (C2SP vkeys): Ed25519, then ML-DSA-65.
    pub fn vkeys(&self) -> [&str; 2] {
        [&self.ed25519, &self.ml_dsa_65]
    }

    fn log_key(&self) -> LogKey {
        LogKey {
            kid: self.kid.clone(),
            ed25519: self.ed25519.clone(),
            ml_dsa_65: Some(self.ml_dsa_65.clone()),
            created_ms: self.created_ms,
        }
    }
}

/// The keys in use.
pub struct LogKeys {
    pub(crate) origin: String,
    pub(crate) receipt: Arc<ReceiptKey>,
    pub(crate) ed25519: Signer,
    pub(crate) ml_dsa_65: Signer,
    /// Signs identity assertions (`identity/assertion.rs`); derived from
    /// the receipt key, so it rotates with it.
    pub(crate) identity: Arc<AssertionKey>,
    history: History,
}

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("keys")
}

fn read_seed(path: &Path) -> anyhow::Result<[u8; 32]> {
    check_owner_only(path)?;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    bytes.try_into().map_err(|_| {
        anyhow::anyhow!(
            "{} is not a 32-byte key seed; restore it from backup (receipts signed by it can still \
                be verified with its public key)",
            path.display()
        )
    })
}

/// The log's keys from their seeds: the receipt key, its note signer, the
/// ML-DSA-65 cosigner, the identity key, and the record of their public halves.
type Keys = (Arc<ReceiptKey>, Signer, Signer, Arc<AssertionKey>, KeyRecord);

fn keys_from(
    origin: &str,
    ed_seed: [u8; 32],
    pq_seed: [u8; 32],
    created_ms: i64,
) -> anyhow::Result<Keys> {
    let ed = ed25519_dalek::SigningKey::from_bytes(&ed_seed);
    let receipt = Arc::new(ReceiptKey::new(ed.clone()));
    let ed_signer = Signer::ed25519(origin, ed)
        .map_err(|e| anyhow::anyhow!("receipts.origin {origin:?}: {e}"))?;
    let pq = PqdsaKeyPair::from_seed(&ML_DSA_65_SIGNING, &pq_seed)
        .map_err(|_| anyhow::anyhow!("invalid ML-DSA-65 seed"))?;
    let pq_signer =
        Signer::ml_dsa_65(origin, pq).map_err(|e| anyhow::anyhow!("ML-DSA-65 key: {e}"))?;
    let identity = Arc::new(AssertionKey::derive(&ed_seed));
    let record = KeyRecord {
        kid: receipt.kid().to_string(),
        ed25519: ed_signer.verifier().vkey(),
        ml_dsa_65: pq_signer.verifier().vkey(),
        created_ms,
        retired_ms: None,
        identity: Some(identity.x()),
    };
    Ok((receipt, ed_signer, pq_signer, identity, record))
}

fn write_history(dir: &Path, history: &History) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(history)?;
    // Through a new file renamed into place: the old history or the new, never half.
    write_owner_only(&dir.join(HISTORY_FILE), text.as_bytes())
}

/// The key history of `state_dir`; `None` until the first start creates
/// the keys.
pub fn read_history(state_dir: &Path) -> anyhow::Result<Option<History>> {
    let path = dir(state_dir).join(HISTORY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a key history", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    toolgate_mcp::owner_only::create_private_dir(dir)
}

impl LogKeys {
    /// The keys of `state_dir`, created on first start.
    pub(crate) fn load_or_create(
        state_dir: &Path,
        origin: &str,
        clock: &dyn Clock,
        entropy: &dyn Entropy,
    ) -> anyhow::Result<Self> {
        let dir = dir(state_dir);
        create_dir(&dir)?;
        let (ed_path, pq_path) = (dir.join(ED25519_FILE), dir.join(MLDSA_FILE));
        let Some(history) = read_history(state_dir)? else {
            if ed_path.exists() || pq_path.exists() {
                bail!(
                    "{} holds key files but no {HISTORY_FILE}: restore the history, or move the key files away to start a new log",
                    dir.display()
                );
            }
            let (ed_seed, pq_seed) = (entropy.bytes32(), entropy.bytes32());
            let (receipt, ed25519, ml_dsa_65, identity, record) =
                keys_from(origin, ed_seed, pq_seed, clock.now_ms())?;
            write_owner_only(&ed_path, &ed_seed)?;
            write_owner_only(&pq_path, &pq_seed)?;
            let history =
                History { origin: origin.to_string(), current: record, retired: Vec::new() };
            write_history(&dir, &history)?;
            tracing::info!(target: "toolgate::keys", kid = %history.current.kid, "created the log's signing keys");
            return Ok(Self {
                origin: origin.to_string(),
                receipt,
                ed25519,
                ml_dsa_65,
                identity,
                history,
            });
        };
        if history.origin != origin {
            bail!(
                "receipts.origin is {origin:?} but this log's keys were made for {:?}: a log keeps \
                    its origin (set it back, or start a new state dir)",
                history.origin
            );
        }
        let missing = |p: &Path| {
            anyhow::anyhow!(
                "{} records kid {} but its key file {} is missing: restore it from backup",
                dir.display(),
                history.current.kid,
                p.display()
            )
        };
        let ed_seed = read_seed(&ed_path)
            .map_err(|e| if ed_path.exists() { e } else { missing(&ed_path) })?;
        let pq_seed = read_seed(&pq_path)
            .map_err(|e| if pq_path.exists() { e } else { missing(&pq_path) })?;
        let (receipt, ed25519, ml_dsa_65, identity, record) =
            keys_from(origin, ed_seed, pq_seed, history.current.created_ms)?;
        if record.kid != history.current.kid {
            bail!(
                "the receipt key in {} has kid {} but the key history records kid {}: the key was replaced or damaged. \
                 Refusing to sign under an unrecorded key; restore the recorded key (or `toolgate keys rotate` from a good state)",
                ed_path.display(),
                record.kid,
                history.current.kid
            );
        }
        if record.ml_dsa_65 != history.current.ml_dsa_65 {
            bail!(
                "the ML-DSA-65 key in {} is not the one recorded for kid {}: restore it",
                pq_path.display(),
                history.current.kid
            );
        }
        // A history written before identity keys learns the current one's
        // public half once, so it is published after the next rotation too.
        let mut history = history;
        if history.current.identity.is_none() {
            history.current.identity = record.identity.clone();
            write_history(&dir, &history)?;
        }
        Ok(Self { origin: origin.to_string(), receipt, ed25519, ml_dsa_65, identity, history })
    }

    /// Starts new keys; the current ones' public halves join the history and
    /// their private halves are overwritten. Returns (old kid, new kid).
    pub fn rotate(
        state_dir: &Path,
        origin: &str,
        clock: &dyn Clock,
        entropy: &dyn Entropy,
    ) -> anyhow::Result<(String, String)> {
        let current = Self::load_or_create(state_dir, origin, clock, entropy)?;
        let dir = dir(state_dir);
        let (ed_seed, pq_seed) = (entropy.bytes32(), entropy.bytes32());
        let (_, _, _, _, record) = keys_from(origin, ed_seed, pq_seed, clock.now_ms())?;
        let mut history = current.history;
        let mut old = history.current.clone();
        old.retired_ms = Some(clock.now_ms());
        history.retired.push(old.clone());
        history.current = record.clone();
        // New seeds first, then the history naming them: a crash between
        // leaves seeds whose kid the history does not record, which the
        // next start refuses rather than signs under.
        write_owner_only(&dir.join(ED25519_FILE), &ed_seed)?;
        write_owner_only(&dir.join(MLDSA_FILE), &pq_seed)?;
        write_history(&dir, &history)?;
        Ok((old.kid, record.kid))
    }

    /// The public halves (JWK `x`) of the retired identity keys, newest first.
    pub(crate) fn retired_identities(&self) -> Vec<String> {
        self.history.retired.iter().rev().filter_map(|k| k.identity.clone()).collect()
    }

    /// Every key of the history, current last.
    pub(crate) fn all(&self) -> Vec<LogKey> {
        self.history
            .retired
            .iter()
            .chain(std::iter::once(&self.history.current))
            .map(KeyRecord::log_key)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{SystemClock, SystemEntropy};

    #[test]
    fn created_once_then_loaded_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let a = LogKeys::load_or_create(
            dir.path(),
            "test/log",
            &SystemClock,
            &SystemEntropy::default(),
        )
        .unwrap();
        let b = LogKeys::load_or_create(
            dir.path(),
            "test/log",
            &SystemClock,
            &SystemEntropy::default(),
        )
        .unwrap();
        assert_eq!(a.receipt.kid(), b.receipt.kid());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for f in [ED25519_FILE, MLDSA_FILE, HISTORY_FILE] {
                assert_eq!(
                    std::fs::metadata(super::dir(dir.path()).join(f)).unwrap().permissions().mode()
                        & 0o777,
                    0o600,
                    "{f}"
                );
            }
            assert_eq!(
                std::fs::metadata(super::dir(dir.path())).unwrap().permissions().mode() & 0o777,
                0o700
            );
        }
        // Another origin is refused.
        assert!(
            LogKeys::load_or_create(
                dir.path(),
                "other/log",
                &SystemClock,
                &SystemEntropy::default()
            )
            .err()
            .unwrap()
            .to_string()
            .contains("keeps its origin")
        );
    }

    #[test]
    fn a_replaced_key_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let kid = LogKeys::load_or_create(
            dir.path(),
            "test/log",
            &SystemClock,
            &SystemEntropy::default(),
        )
        .unwrap()
        .receipt
        .kid()
        .to_string();
        write_owner_only(&super::dir(dir.path()).join(ED25519_FILE), &[7u8; 32]).unwrap();
        let err = LogKeys::load_or_create(
            dir.path(),
            "test/log",
            &SystemClock,
            &SystemEntropy::default(),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains(&kid) && err.contains("replaced or damaged"), "{err}");
        std::fs::remove_file(super::dir(dir.path()).join(ED25519_FILE)).unwrap();
        assert!(
            LogKeys::load_or_create(
                dir.path(),
                "test/log",
                &SystemClock,
                &SystemEntropy::default()
            )
            .err()
            .unwrap()
            .to_string()
            .contains("missing")
        );
    }

    #[test]
    fn a_readable_key_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        LogKeys::load_or_create(dir.path(), "test/log", &SystemClock, &SystemEntropy::default())
            .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let path = super::dir(dir.path()).join(ED25519_FILE);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(
                LogKeys::load_or_create(
                    dir.path(),
                    "test/log",
                    &SystemClock,
                    &SystemEntropy::default()
                )
                .err()
                .unwrap()
                .to_string()
                .contains("chmod 600")
            );
        }
    }

    #[test]
    fn rotation_keeps_the_old_public_key() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogKeys::load_or_create(
            dir.path(),
            "test/log",
            &SystemClock,
            &SystemEntropy::default(),
        )
        .unwrap();
        let (old, new) =
            LogKeys::rotate(dir.path(), "test/log", &SystemClock, &SystemEntropy::default())
                .unwrap();
        assert_eq!(old, first.receipt.kid());
        assert_ne!(old, new);
        let after = LogKeys::load_or_create(
            dir.path(),
            "test/log",
            &SystemClock,
            &SystemEntropy::default(),
        )
        .unwrap();
        assert_eq!(after.receipt.kid(), new);
        let kids: Vec<_> = after.all().into_iter().map(|k| k.kid).collect();
        assert_eq!(kids, [old, new]);
        assert_eq!(after.history.retired[0].ed25519, first.history.current.ed25519);
        assert!(after.history.retired[0].retired_ms.is_some());
        // The identity key rotates with it; the old one's public half stays published.
        assert_ne!(after.identity.x(), first.identity.x());
        assert_eq!(after.retired_identities(), [first.identity.x()]);
    }
}
