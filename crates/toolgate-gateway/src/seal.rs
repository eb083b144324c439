//! Sealed `requestState`: what toolgate hands a client to echo back on a
//! re-issued call, encrypted and authenticated (AES-256-GCM) under a key
//! that never leaves the state dir. A client can carry it but neither read
//! nor alter it; a changed byte fails to open.

use std::path::Path;

use anyhow::{Context as _, bail};
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use toolgate_core::Entropy;
use toolgate_core::approval::Claim;
use toolgate_mcp::owner_only::{check_owner_only, write_owner_only};

/// Marks toolgate's own states (an upstream's are carried inside ours).
const PREFIX: &str = "tg1.";
const AAD: &[u8] = b"toolgate requestState v1";

/// Seals and opens `requestState` values under the state dir's key.
pub struct Sealer {
    key: LessSafeKey,
    entropy: Arc<dyn Entropy>,
}

impl Sealer {
    /// Loads the key from `path`, or creates it (owner-only) on first start.
    pub fn load_or_create(path: &Path, entropy: Arc<dyn Entropy>) -> anyhow::Result<Self> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => {
                check_owner_only(path)?;
                bytes
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let bytes = entropy.bytes32().to_vec();
                write_owner_only(path, &bytes)?;
                bytes
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            bail!(
                "{} is not a 32-byte key; move it away to start with a new one (outstanding requestStates become invalid)",
                path.display()
            );
        };
        Ok(Self::new(&key, entropy))
    }

    /// A sealer under `key` (the fuzz targets' fixed key; `load_or_create`
    /// for the gateway's own).
    pub fn new(key: &[u8; 32], entropy: Arc<dyn Entropy>) -> Self {
        let key = UnboundKey::new(&AES_256_GCM, key).expect("AES-256 takes any 32-byte key");
        Self { key: LessSafeKey::new(key), entropy }
    }

    /// Seals `claim` under a fresh nonce.
    pub fn seal(&self, claim: &Claim) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.entropy.fill(&mut nonce);
        let mut data = serde_json::to_vec(claim).expect("claims serialise");
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut data,
            )
            .expect("sealing cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out))
    }

    /// The claim inside a state this gateway sealed; `None` for anything
    /// else (not ours, altered, or sealed under another key).
    pub fn open(&self, state: &str) -> Option<Claim> {
        let bytes = URL_SAFE_NO_PAD.decode(state.strip_prefix(PREFIX)?).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let mut sealed = sealed.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain = self.key.open_in_place(nonce, Aad::from(AAD), &mut sealed).ok()?;
        serde_json::from_slice(plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::approval::Binding;

    fn claim() -> Claim {
        Claim {
            approval_id: "apr_1".into(),
            binding: Binding {
                tenant: "atlas".into(),
                caller: "agent".into(),
                server: "parts".into(),
                tool: "raise_parts_order".into(),
                proposal_sha256: "ab".repeat(32),
                policy_version: "v1".into(),
            },
            upstream_state: None,
        }
    }

    #[test]
    fn a_sealed_state_opens_only_unaltered_and_only_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requeststate.key");
        let sealer =
            Sealer::load_or_create(&path, Arc::new(toolgate_core::SystemEntropy::default()))
                .unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let state = sealer.seal(&claim());
        assert_ne!(state, sealer.seal(&claim()), "a fresh nonce each time");
        assert_eq!(sealer.open(&state), Some(claim()));
        assert!(!state.contains("raise_parts_order"), "the content is not readable");
        // Reloaded from disk, the same key.
        assert_eq!(
            Sealer::load_or_create(&path, Arc::new(toolgate_core::SystemEntropy::default()))
                .unwrap()
                .open(&state),
            Some(claim())
        );
        // Any single changed character fails.
        for i in PREFIX.len()..state.len() {
            let mut altered = state.clone().into_bytes();
            altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
            assert_eq!(sealer.open(std::str::from_utf8(&altered).unwrap()), None, "position {i}");
        }
        let other = Sealer::load_or_create(
            &dir.path().join("other.key"),
            Arc::new(toolgate_core::SystemEntropy::default()),
        )
        .unwrap();
        assert_eq!(other.open(&state), None);
        assert_eq!(sealer.open("upstream-state"), None);
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        assert!(
            Sealer::load_or_create(&path, Arc::new(toolgate_core::SystemEntropy::default()))
                .is_err()
        );
    }
}
