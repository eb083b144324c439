//! The key that seals people's upstream tokens (identity mode `oauth`)
//! before they reach the ledger, where every replica reads them: a ledger
//! copied, backed up or read by its database's admin gives no token away.
//! AES-256-GCM, each value under a fresh nonce, bound by its associated
//! data to the row it belongs to (`binding`), so a value moved to another
//! person's row, or another server's, does not open.
//!
//! Sealed: `[VERSION][nonce: 12][ciphertext][tag: 16]`. The version byte
//! lets a later format (another cipher, a key id for rotation) be told
//! apart from this one.

use std::path::Path;

use anyhow::{Context as _, bail};
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use toolgate_core::Entropy;

use toolgate_mcp::owner_only::{check_owner_only, write_owner_only};

/// The format this build seals in (the first byte of every sealed value).
const VERSION: u8 = 1;

/// The smallest sealed value: the version, the nonce and the tag of an
/// empty plaintext.
const OVERHEAD: usize = 1 + NONCE_LEN + 16;

/// Seals and opens people's upstream tokens under one 32-byte key.
pub struct Vault {
    key: LessSafeKey,
}

/// Why a sealed value did not open. Nothing is told of the plaintext or
/// of which check failed inside the cipher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unopened {
    /// Shorter than any sealed value: cut.
    #[error("the sealed value is cut short ({0} bytes)")]
    Short(usize),
    /// A format this build does not know (a later release sealed it).
    #[error("the sealed value is of format {0}, which this build does not open")]
    Version(u8),
    /// Altered, sealed under another key, or for another row.
    #[error("the sealed value does not open: altered, sealed under another key, or another row's")]
    Forged,
}

impl Vault {
    /// A vault under `key`.
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            key: LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, key).expect("AES-256 takes any 32-byte key"),
            ),
        }
    }

    /// Loads the key from `path` (it must be owner-only), or creates it
    /// there, owner-only, on first use.
    pub fn load_or_create(path: &Path, entropy: &dyn Entropy) -> anyhow::Result<Self> {
        Ok(Self::new(&load_or_create_key(path, entropy, KEY_WHAT)?))
    }

    /// Loads the key from a file the config names, which must exist: replicas
    /// on several hosts share it, so one made here would be this host's alone.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        match read_key(path, KEY_WHAT)? {
            Some(key) => Ok(Self::new(&key)),
            None => bail!(
                "{} does not exist; make the {KEY_WHAT} once (`(umask 077 && head -c 32 /dev/urandom > {0})`) and give every replica the same file",
                path.display()
            ),
        }
    }

    /// Seals `plaintext` for the row `aad` names (see `binding`), under a
    /// fresh random nonce.
    pub fn seal(&self, aad: &[u8], plaintext: &[u8], entropy: &dyn Entropy) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        entropy.fill(&mut nonce);
        let mut out = Vec::with_capacity(OVERHEAD + plaintext.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[1 + NONCE_LEN..],
            )
            .expect("sealing cannot fail");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// The plaintext of a value this vault sealed for the row `aad` names.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Unopened> {
        if sealed.len() < OVERHEAD {
            return Err(Unopened::Short(sealed.len()));
        }
        if sealed[0] != VERSION {
            return Err(Unopened::Version(sealed[0]));
        }
        let (nonce, body) = sealed[1..].split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unopened::Forged)?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut body)
            .map_err(|_| Unopened::Forged)?;
        Ok(plain.to_vec())
    }
}

/// The associated data that binds a grant to its ledger row: each of
/// tenant, subject and server as its length (4 bytes, big-endian) and its
/// bytes, so no two rows share it whatever their names hold (a NUL too).
pub fn binding(tenant: &str, subject: &str, server: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + tenant.len() + subject.len() + server.len());
    for part in [tenant, subject, server] {
        out.extend_from_slice(&(part.len() as u32).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

/// What the key is, as messages name it.
const KEY_WHAT: &str = "key that seals upstream tokens";

/// The 32-byte key at `path`, or one made there (owner-only) if there is
/// none. Two processes making it at once agree: the file appears whole,
/// under its name, once (a link, which never replaces), and the one that
/// lost reads the winner's.
pub(crate) fn load_or_create_key(
    path: &Path,
    entropy: &dyn Entropy,
    what: &str,
) -> anyhow::Result<[u8; 32]> {
    if let Some(key) = read_key(path, what)? {
        return Ok(key);
    }
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?
        .to_string_lossy();
    let fresh = path.with_file_name(format!(".{name}.{}", entropy.id("new-")));
    let key = entropy.bytes32();
    write_owner_only(&fresh, &key)?;
    let linked = std::fs::hard_link(&fresh, path);
    let _ = std::fs::remove_file(&fresh);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path, what)?
            .with_context(|| format!("{} vanished as it was made", path.display())),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// The key at `path`, refused unless owner-only and 32 bytes; `None` if
/// there is no file.
fn read_key(path: &Path, what: &str) -> anyhow::Result<Option<[u8; 32]>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading the {what} {}", path.display())),
    };
    check_owner_only(path).with_context(|| {
        format!("the {what} must be readable by its owner only: `chmod 600 {}`", path.display())
    })?;
    let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) else {
        bail!(
            "{} is {} bytes, not a 32-byte {what}; restore it (or move it away for a new key: every stored grant then needs connecting again)",
            path.display(),
            bytes.len()
        );
    };
    Ok(Some(key))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Arc;

    use toolgate_core::SystemEntropy;

    use super::*;

    fn vault_in(dir: &Path) -> Vault {
        Vault::load_or_create(&dir.join("connections.key"), &SystemEntropy::default()).unwrap()
    }

    #[test]
    fn a_sealed_grant_opens_only_for_its_row_under_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let vault = vault_in(dir.path());
        let e = SystemEntropy::default();
        let row = binding("atlas", "dana", "github");
        let sealed = vault.seal(&row, b"access-token-and-refresh-token", &e);
        assert_eq!(sealed[0], VERSION);
        assert_eq!(sealed.len(), OVERHEAD + 30);
        assert_ne!(
            sealed,
            vault.seal(&row, b"access-token-and-refresh-token", &e),
            "a fresh nonce each time"
        );
        assert!(!sealed.windows(6).any(|w| w == b"access"), "the plaintext is not in it");
        assert_eq!(vault.open(&row, &sealed).unwrap(), b"access-token-and-refresh-token");
        assert_eq!(
            vault.open(&row, &vault.seal(&row, b"", &e)).unwrap(),
            b"",
            "an empty value too"
        );
        // Moved to another person's row, another server's, or another tenant's: it does not open.
        for other in [
            binding("atlas", "erin", "github"),
            binding("atlas", "dana", "linear"),
            binding("globex", "dana", "github"),
        ] {
            assert_eq!(vault.open(&other, &sealed), Err(Unopened::Forged));
        }
        // Another key.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(vault_in(other.path()).open(&row, &sealed), Err(Unopened::Forged));
        assert_eq!(Vault::new(&[7; 32]).open(&row, &sealed), Err(Unopened::Forged));
    }

    #[test]
    fn an_altered_or_cut_value_fails_cleanly() {
        let vault = Vault::new(&[1; 32]);
        let e = SystemEntropy::default();
        let row = binding("atlas", "dana", "github");
        let sealed = vault.seal(&row, b"tokens", &e);
        for i in 0..sealed.len() {
            let mut altered = sealed.clone();
            altered[i] ^= 0x01;
            assert!(vault.open(&row, &altered).is_err(), "byte {i} flipped");
        }
        assert_eq!(
            vault.open(&row, &[&[9u8][..], &sealed[1..]].concat()),
            Err(Unopened::Version(9))
        );
        for len in 0..sealed.len() {
            let cut = vault.open(&row, &sealed[..len]);
            assert!(
                matches!(cut, Err(Unopened::Short(_) | Unopened::Forged)),
                "cut at {len}: {cut:?}"
            );
        }
        assert_eq!(
            vault.open(&row, &[sealed.clone(), vec![0]].concat()),
            Err(Unopened::Forged),
            "a byte appended"
        );
    }

    #[test]
    fn the_key_is_made_owner_only_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("connections.key");
        let e = SystemEntropy::default();
        let first = Vault::load_or_create(&path, &e).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), 32);
        let row = binding("atlas", "dana", "github");
        let sealed = first.seal(&row, b"tokens", &e);
        assert_eq!(
            Vault::load_or_create(&path, &e).unwrap().open(&row, &sealed).unwrap(),
            b"tokens",
            "reloaded: the same key"
        );
        assert_eq!(
            Vault::load(&path).unwrap().open(&row, &sealed).unwrap(),
            b"tokens",
            "named by the config: the same key"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "nothing else left beside it"
        );
    }

    #[test]
    fn processes_making_the_key_at_once_agree_on_one() {
        for _ in 0..8 {
            let dir = tempfile::tempdir().unwrap();
            let path = Arc::new(dir.path().join("connections.key"));
            let makers: Vec<_> = (0..4)
                .map(|_| {
                    let path = path.clone();
                    std::thread::spawn(move || {
                        Vault::load_or_create(&path, &SystemEntropy::default()).unwrap()
                    })
                })
                .collect();
            let vaults: Vec<Vault> = makers.into_iter().map(|t| t.join().unwrap()).collect();
            let sealed = vaults[0].seal(b"row", b"tokens", &SystemEntropy::default());
            for v in &vaults {
                assert_eq!(v.open(b"row", &sealed).unwrap(), b"tokens", "one key for all");
            }
        }
    }

    #[test]
    fn a_key_others_can_read_or_of_the_wrong_size_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("connections.key");
        let e = SystemEntropy::default();
        Vault::load_or_create(&path, &e).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        for refused in [Vault::load_or_create(&path, &e).err(), Vault::load(&path).err()] {
            let why = format!("{:#}", refused.expect("refused"));
            assert!(why.contains(&format!("`chmod 600 {}`", path.display())), "{why}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, b"short").unwrap();
        let why = format!("{:#}", Vault::load_or_create(&path, &e).err().expect("refused"));
        assert!(why.contains("5 bytes, not a 32-byte"), "{why}");
        let missing = dir.path().join("named.key");
        let why = format!("{:#}", Vault::load(&missing).err().expect("a named key is never made"));
        assert!(why.contains("does not exist") && !missing.exists(), "{why}");
    }
}
