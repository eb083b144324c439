//! Signed notes (<https://c2sp.org/signed-note>) and checkpoints
//! (<https://c2sp.org/tlog-checkpoint>): how the receipt log publishes its
//! (origin, size, root) so that anyone can check it offline, and so that
//! the transparency-dev / Go `sumdb/note` ecosystem can read it.
//!
//! A note is a text ending in a newline, a blank line, and one or more
//! signature lines `— <key name> <base64(key id (4 bytes, big-endian) ||
//! signature)>` (em dash U+2014, then a space). The signatures cover the text
//! including its final newline, not the blank line.
//!
//! # Signature types
//!
//! * Ed25519, type byte `0x01` as the spec assigns; key id =
//!   SHA-256(name || 0x0A || 0x01 || 32-byte public key)[:4]. Byte-compatible
//!   with Go's `golang.org/x/mod/sumdb/note` (tested against its vectors).
//! * ML-DSA-65 (FIPS 204): the spec assigns no type byte to it. Its list
//!   (checked against C2SP/C2SP `signed-note.md` at 5ba5ee8, July 2026) is
//!   0x01 Ed25519, 0x02 ECDSA, 0x03 reserved, 0x04 Ed25519 cosignatures,
//!   0x05 RFC 6962 tree head signatures, **0x06 timestamped ML-DSA-44
//!   cosignatures** (c2sp.org/tlog-cosignature: another algorithm and another
//!   signed message, so 0x06 must not be reused here), 0xfa–0xfe reserved, and
//!   "`0xff` — Reserved for signature types without an identifier byte
//!   assigned by this specification. It is RECOMMENDED that this byte be
//!   followed by a longer identifier that is unlikely to collide." So the
//!   ML-DSA-65 signature type is [`MLDSA65_SIGNATURE_TYPE`] =
//!   `0xff || "toolgate/ml-dsa-65"`, and its key id =
//!   SHA-256(name || 0x0A || 0xff || "toolgate/ml-dsa-65" || 1952-byte public
//!   key)[:4]. The signature is pure ML-DSA-65 (empty context, no pre-hash)
//!   over the note text, 3309 bytes. Verifiers that do not know the type
//!   ignore the line, as the spec requires, and still check the Ed25519 line.
//!
//! # Purity
//!
//! No clocks, files or randomness are taken from the caller's environment,
//! with one exception: AWS-LC signs ML-DSA in FIPS 204's default *hedged*
//! mode, mixing 32 bytes from its internal DRBG into each signature. An
//! ML-DSA line therefore differs from one signing to the next (verification
//! is deterministic); Ed25519 lines are deterministic (RFC 8032).

use std::fmt;

use aws_lc_rs::signature::{KeyPair as _, ML_DSA_44, ML_DSA_65, ParsedPublicKey, PqdsaKeyPair};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::merkle::Hash;

/// The spec's type byte for Ed25519 note signatures.
pub const ED25519_SIGNATURE_TYPE: &[u8] = &[0x01];
/// toolgate's type for ML-DSA-65 note signatures: the spec's "no assigned
/// byte" escape 0xff followed by a longer identifier (see the module docs).
pub const MLDSA65_SIGNATURE_TYPE: &[u8] = b"\xfftoolgate/ml-dsa-65";
/// Raw ML-DSA-65 public key length (FIPS 204).
pub const MLDSA65_PUBLIC_KEY_LEN: usize = 1952;
/// ML-DSA-65 signature length (FIPS 204).
pub const MLDSA65_SIGNATURE_LEN: usize = 3309;
/// At most this many signature lines are read. The spec asks for at least 16;
/// Go's `sumdb/note` allows 100, and so do we.
pub const MAX_SIGNATURES: usize = 100;

const EM_DASH_SPACE: &str = "\u{2014} ";

/// A note signature algorithm toolgate signs and verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Ed25519 (RFC 8032): the spec's type 0x01.
    Ed25519,
    /// ML-DSA-65 (FIPS 204): type [`MLDSA65_SIGNATURE_TYPE`].
    MlDsa65,
    /// A witness's Ed25519 cosignature (c2sp.org/tlog-cosignature, type
    /// 0x04): a timestamped signature over `cosignature/v1`, the time and
    /// the checkpoint's body.
    Ed25519Cosignature,
    /// A witness's ML-DSA-44 cosignature (c2sp.org/tlog-cosignature, type
    /// 0x06): a timestamped signature over the `subtree/v1` message, which
    /// names the witness, the log, the tree size and its root.
    MlDsa44Cosignature,
}

/// The signature type of Ed25519 cosignatures (c2sp.org/tlog-cosignature).
pub const COSIGNATURE_TYPE: &[u8] = &[0x04];

/// The signature type of ML-DSA-44 cosignatures (c2sp.org/tlog-cosignature).
pub const MLDSA44_COSIGNATURE_TYPE: &[u8] = &[0x06];

/// An ML-DSA-44 public key's length (FIPS 204).
pub const MLDSA44_PUBLIC_KEY_LEN: usize = 1312;

/// An ML-DSA-44 signature's length (FIPS 204).
pub const MLDSA44_SIGNATURE_LEN: usize = 2420;

impl Algorithm {
    /// The signature type bytes that enter the key id and the vkey.
    pub fn signature_type(self) -> &'static [u8] {
        match self {
            Self::Ed25519 => ED25519_SIGNATURE_TYPE,
            Self::MlDsa65 => MLDSA65_SIGNATURE_TYPE,
            Self::Ed25519Cosignature => COSIGNATURE_TYPE,
            Self::MlDsa44Cosignature => MLDSA44_COSIGNATURE_TYPE,
        }
    }

    /// A witness's cosignature, not a log's signature.
    pub fn is_cosignature(self) -> bool {
        matches!(self, Self::Ed25519Cosignature | Self::MlDsa44Cosignature)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ed25519 => "Ed25519",
            Self::MlDsa65 => "ML-DSA-65",
            Self::Ed25519Cosignature => "Ed25519 cosignature",
            Self::MlDsa44Cosignature => "ML-DSA-44 cosignature",
        })
    }
}

/// Why a note, a key or a checkpoint is refused, or signing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// A key name is empty, or has a space, a control character or `+`.
    #[error("key name {0:?} is invalid: it must be non-empty, without spaces or '+'")]
    InvalidKeyName(String),
    /// The text to sign does not end with a newline.
    #[error("the note text must end with a newline")]
    TextWithoutFinalNewline,
    /// The note holds a control character other than newline (its code point).
    #[error("the note contains the control character U+{0:04X}; only newlines are allowed")]
    ControlCharacter(u32),
    /// No blank line separates the text from the signatures.
    #[error("no blank line separates the note text from its signatures")]
    NoSignatureBlock,
    /// The signature block is empty.
    #[error("the note has no signature lines")]
    NoSignatures,
    /// The last signature line has no final newline.
    #[error("the last signature line does not end with a newline")]
    UnterminatedSignatureLine,
    /// A signature line cannot be read.
    #[error("signature line {line}: {problem}")]
    MalformedSignatureLine {
        /// The line's number in the signature block, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// More than [`MAX_SIGNATURES`] signature lines or signers.
    #[error("the note has more than {MAX_SIGNATURES} signature lines")]
    TooManySignatures,
    /// A signature line matches two configured verifiers.
    #[error("two verifiers are configured for key {name}+{key_id:08x}")]
    AmbiguousKey {
        /// The key name.
        name: String,
        /// The key id.
        key_id: u32,
    },
    /// A signature of a known key does not verify: the note is rejected.
    #[error("the {algorithm} signature of key {name}+{key_id:08x} does not verify")]
    InvalidSignature {
        /// The key name.
        name: String,
        /// The key id.
        key_id: u32,
        /// The key's algorithm.
        algorithm: Algorithm,
    },
    /// No signature line is from a known key.
    #[error("no signature from a known key: the note is not verified")]
    NoKnownSignature,
    /// Signing was asked for with no signer.
    #[error("no signer given")]
    NoSigner,
    /// Two signers have the same name and key id.
    #[error("two signers have the same key {name}+{key_id:08x}")]
    DuplicateSigner {
        /// The key name.
        name: String,
        /// The key id.
        key_id: u32,
    },
    /// A key pair given as ML-DSA-65 is of another parameter set.
    #[error("the key is not an ML-DSA-65 key")]
    NotMlDsa65,
    /// A public key has the wrong length or does not parse.
    #[error("invalid public key: {0}")]
    InvalidPublicKey(String),
    /// The ML-DSA signing library failed.
    #[error("signing failed: {0}")]
    SigningFailed(String),
    /// A verifier key text cannot be read, or states another key id than its
    /// key's.
    #[error("malformed verifier key: {0}")]
    MalformedVerifierKey(String),
    /// A checkpoint's text or origin is invalid.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}

/// The note key id (spec, "Signatures"): the first four bytes, big-endian,
/// of SHA-256(name || 0x0A || signature type || public key).
pub fn key_id(name: &str, algorithm: Algorithm, public_key: &[u8]) -> u32 {
    let digest = Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update(b"\n")
        .chain_update(algorithm.signature_type())
        .chain_update(public_key)
        .finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// Key names are non-empty and contain neither Unicode spaces nor '+'.
fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty()
        || name.contains('+')
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(NoteError::InvalidKeyName(name.to_string()));
    }
    Ok(())
}

/// Notes carry no control characters other than newline.
fn check_controls(text: &str) -> Result<(), NoteError> {
    match text.chars().find(|&c| c < '\u{20}' && c != '\n') {
        Some(c) => Err(NoteError::ControlCharacter(u32::from(c))),
        None => Ok(()),
    }
}

enum SignerKey {
    Ed25519(SigningKey),
    MlDsa65(PqdsaKeyPair),
}

/// A named signing key.
pub struct Signer {
    name: String,
    key_id: u32,
    key: SignerKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the private key.
        f.debug_struct("Signer")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .field("algorithm", &self.algorithm())
            .finish()
    }
}

impl Signer {
    /// An Ed25519 signer: `key` under the key name `name`.
    pub fn ed25519(name: &str, key: SigningKey) -> Result<Self, NoteError> {
        check_name(name)?;
        let key_id = key_id(name, Algorithm::Ed25519, &key.verifying_key().to_bytes());
        Ok(Self { name: name.into(), key_id, key: SignerKey::Ed25519(key) })
    }

    /// `key` must be an ML-DSA-65 key pair (`ML_DSA_65_SIGNING`).
    pub fn ml_dsa_65(name: &str, key: PqdsaKeyPair) -> Result<Self, NoteError> {
        check_name(name)?;
        // The parameter sets differ in key and signature sizes.
        let algorithm = key.algorithm();
        if algorithm.public_key_len() != MLDSA65_PUBLIC_KEY_LEN
            || algorithm.signature_len() != MLDSA65_SIGNATURE_LEN
        {
            return Err(NoteError::NotMlDsa65);
        }
        let key_id = key_id(name, Algorithm::MlDsa65, key.public_key().as_ref());
        Ok(Self { name: name.into(), key_id, key: SignerKey::MlDsa65(key) })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id ([`key_id`] of the name and public key).
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The algorithm of the key.
    pub fn algorithm(&self) -> Algorithm {
        match self.key {
            SignerKey::Ed25519(_) => Algorithm::Ed25519,
            SignerKey::MlDsa65(_) => Algorithm::MlDsa65,
        }
    }

    /// The matching verifier.
    pub fn verifier(&self) -> Verifier {
        match &self.key {
            SignerKey::Ed25519(k) => {
                Verifier::ed25519(&self.name, k.verifying_key()).expect("the name was checked")
            }
            SignerKey::MlDsa65(k) => Verifier::ml_dsa_65(&self.name, k.public_key().as_ref())
                .expect("an ML-DSA-65 key pair's own public key parses"),
        }
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, NoteError> {
        match &self.key {
            SignerKey::Ed25519(k) => Ok(k.sign(message).to_bytes().to_vec()),
            SignerKey::MlDsa65(k) => {
                let mut signature = vec![0u8; MLDSA65_SIGNATURE_LEN];
                let len = k
                    .sign(message, &mut signature)
                    .map_err(|e| NoteError::SigningFailed(e.to_string()))?;
                signature.truncate(len);
                Ok(signature)
            }
        }
    }
}

#[derive(Clone)]
enum VerifierKey {
    Ed25519(VerifyingKey),
    Cosigner(VerifyingKey),
    MlDsa44Cosigner { raw: Vec<u8>, parsed: ParsedPublicKey },
    MlDsa65 { raw: Vec<u8>, parsed: ParsedPublicKey },
}

/// A named public key a note may be signed by.
#[derive(Clone)]
pub struct Verifier {
    name: String,
    key_id: u32,
    key: VerifierKey,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .field("algorithm", &self.algorithm())
            .finish()
    }
}

impl Verifier {
    /// A verifier of Ed25519 signatures by `key` under the key name `name`.
    pub fn ed25519(name: &str, key: VerifyingKey) -> Result<Self, NoteError> {
        check_name(name)?;
        let key_id = key_id(name, Algorithm::Ed25519, &key.to_bytes());
        Ok(Self { name: name.into(), key_id, key: VerifierKey::Ed25519(key) })
    }

    /// A verifier of a witness's Ed25519 cosignatures (type 0x04) by `key`
    /// under the witness's name.
    pub fn cosigner(name: &str, key: VerifyingKey) -> Result<Self, NoteError> {
        check_name(name)?;
        let key_id = key_id(name, Algorithm::Ed25519Cosignature, &key.to_bytes());
        Ok(Self { name: name.into(), key_id, key: VerifierKey::Cosigner(key) })
    }

    /// A verifier of a witness's ML-DSA-44 cosignatures (type 0x06):
    /// `public_key` is the raw 1312-byte FIPS 204 encoding.
    pub fn ml_dsa_44_cosigner(name: &str, public_key: &[u8]) -> Result<Self, NoteError> {
        check_name(name)?;
        if name.len() > 255 {
            return Err(NoteError::InvalidKeyName(name.into()));
        }
        if public_key.len() != MLDSA44_PUBLIC_KEY_LEN {
            return Err(NoteError::InvalidPublicKey(format!(
                "an ML-DSA-44 public key is {MLDSA44_PUBLIC_KEY_LEN} bytes, not {}",
                public_key.len()
            )));
        }
        let parsed = ParsedPublicKey::new(&ML_DSA_44, public_key)
            .map_err(|e| NoteError::InvalidPublicKey(e.to_string()))?;
        let key_id = key_id(name, Algorithm::MlDsa44Cosignature, public_key);
        Ok(Self {
            name: name.into(),
            key_id,
            key: VerifierKey::MlDsa44Cosigner { raw: public_key.to_vec(), parsed },
        })
    }

    /// `public_key`: the raw 1952-byte FIPS 204 encoding (not SPKI DER: the
    /// key id is computed over exactly these bytes).
    pub fn ml_dsa_65(name: &str, public_key: &[u8]) -> Result<Self, NoteError> {
        check_name(name)?;
        if public_key.len() != MLDSA65_PUBLIC_KEY_LEN {
            return Err(NoteError::InvalidPublicKey(format!(
                "an ML-DSA-65 public key is {MLDSA65_PUBLIC_KEY_LEN} bytes, not {}",
                public_key.len()
            )));
        }
        let parsed = ParsedPublicKey::new(&ML_DSA_65, public_key)
            .map_err(|e| NoteError::InvalidPublicKey(e.to_string()))?;
        let key_id = key_id(name, Algorithm::MlDsa65, public_key);
        Ok(Self {
            name: name.into(),
            key_id,
            key: VerifierKey::MlDsa65 { raw: public_key.to_vec(), parsed },
        })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id ([`key_id`] of the name and public key).
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The algorithm of the key.
    pub fn algorithm(&self) -> Algorithm {
        match self.key {
            VerifierKey::Ed25519(_) => Algorithm::Ed25519,
            VerifierKey::Cosigner(_) => Algorithm::Ed25519Cosignature,
            VerifierKey::MlDsa44Cosigner { .. } => Algorithm::MlDsa44Cosignature,
            VerifierKey::MlDsa65 { .. } => Algorithm::MlDsa65,
        }
    }

    /// The raw public key (32 bytes for Ed25519, 1952 for ML-DSA-65).
    pub fn public_key(&self) -> &[u8] {
        match &self.key {
            VerifierKey::Ed25519(k) | VerifierKey::Cosigner(k) => k.as_bytes(),
            VerifierKey::MlDsa65 { raw, .. } | VerifierKey::MlDsa44Cosigner { raw, .. } => raw,
        }
    }

    /// The spec's verifier key text: `<name>+<hex key id>+<base64(signature
    /// type || public key)>`.
    pub fn vkey(&self) -> String {
        let mut material = self.algorithm().signature_type().to_vec();
        material.extend_from_slice(self.public_key());
        format!("{}+{:08x}+{}", self.name, self.key_id, STANDARD.encode(material))
    }

    /// Reads a verifier key (see [`Verifier::vkey`]). The key id in the text
    /// must be the one the name and key give.
    pub fn from_vkey(vkey: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::MalformedVerifierKey(why.to_string());
        // The base64 part may itself contain '+': split at the first two only.
        let mut parts = vkey.splitn(3, '+');
        let (Some(name), Some(id), Some(material)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("expected <name>+<key id>+<key>"));
        };
        // Lowercase only, as vkey() writes it: a key text has one form
        // (found by the note fuzz target: `20D0dc7b` was read as `20d0dc7b`).
        if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(bad("the key id is not 8 lowercase hex digits"));
        }
        let stated =
            u32::from_str_radix(id, 16).map_err(|_| bad("the key id is not 8 hex digits"))?;
        let material =
            STANDARD.decode(material).map_err(|_| bad("the key is not standard base64"))?;
        let verifier = if let Some(raw) = material.strip_prefix(ED25519_SIGNATURE_TYPE) {
            let raw: [u8; 32] = raw.try_into().map_err(|_| bad("an Ed25519 key is 32 bytes"))?;
            let key = VerifyingKey::from_bytes(&raw)
                .map_err(|e| NoteError::InvalidPublicKey(e.to_string()))?;
            Self::ed25519(name, key)?
        } else if let Some(raw) = material.strip_prefix(COSIGNATURE_TYPE) {
            let raw: [u8; 32] =
                raw.try_into().map_err(|_| bad("an Ed25519 cosigner key is 32 bytes"))?;
            let key = VerifyingKey::from_bytes(&raw)
                .map_err(|e| NoteError::InvalidPublicKey(e.to_string()))?;
            Self::cosigner(name, key)?
        } else if let Some(raw) = material.strip_prefix(MLDSA44_COSIGNATURE_TYPE) {
            Self::ml_dsa_44_cosigner(name, raw)?
        } else if let Some(raw) = material.strip_prefix(MLDSA65_SIGNATURE_TYPE) {
            Self::ml_dsa_65(name, raw)?
        } else {
            return Err(bad("unknown signature type"));
        };
        if verifier.key_id != stated {
            return Err(bad(&format!(
                "the key id {stated:08x} is not the key's ({:08x})",
                verifier.key_id
            )));
        }
        Ok(verifier)
    }

    fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.key {
            VerifierKey::Ed25519(k) => {
                let Ok(raw) = <[u8; 64]>::try_from(signature) else { return false };
                k.verify_strict(message, &Signature::from_bytes(&raw)).is_ok()
            }
            VerifierKey::Cosigner(k) => {
                // timestamped_signature: u64 time (big-endian, below 2^63), then Ed25519.
                let Ok(raw) = <[u8; 72]>::try_from(signature) else { return false };
                let time = u64::from_be_bytes(raw[..8].try_into().expect("8 bytes"));
                let sig: [u8; 64] = raw[8..].try_into().expect("64 bytes");
                time <= i64::MAX as u64
                    && k.verify_strict(
                        &cosigned_message(message, time),
                        &Signature::from_bytes(&sig),
                    )
                    .is_ok()
            }
            VerifierKey::MlDsa44Cosigner { parsed, .. } => {
                if signature.len() != 8 + MLDSA44_SIGNATURE_LEN {
                    return false;
                }
                let time = u64::from_be_bytes(signature[..8].try_into().expect("8 bytes"));
                let Some(signed) = std::str::from_utf8(message)
                    .ok()
                    .and_then(|body| subtree_message(&self.name, time, body))
                else {
                    return false;
                };
                time <= i64::MAX as u64 && parsed.verify_sig(&signed, &signature[8..]).is_ok()
            }
            VerifierKey::MlDsa65 { parsed, .. } => parsed.verify_sig(message, signature).is_ok(),
        }
    }
}

/// What an ML-DSA-44 cosignature signs (c2sp.org/tlog-cosignature's
/// `cosigned_message`): `subtree/v1\n\0`, the cosigner's name and the log's
/// origin each with a one-byte length, the time, start 0, the tree size and
/// its root. `None` when `body` is not a checkpoint or a name is too long.
fn subtree_message(cosigner: &str, time: u64, body: &str) -> Option<Vec<u8>> {
    let checkpoint = Checkpoint::parse(body).ok()?;
    let (name, origin) = (cosigner.as_bytes(), checkpoint.origin().as_bytes());
    let mut m = b"subtree/v1\n\0".to_vec();
    m.push(u8::try_from(name.len()).ok()?);
    m.extend_from_slice(name);
    m.extend_from_slice(&time.to_be_bytes());
    m.push(u8::try_from(origin.len()).ok()?);
    m.extend_from_slice(origin);
    m.extend_from_slice(&0u64.to_be_bytes());
    m.extend_from_slice(&checkpoint.size().to_be_bytes());
    m.extend_from_slice(checkpoint.root());
    Some(m)
}

/// What an Ed25519 cosignature signs: `cosignature/v1`, `time T`, then the
/// checkpoint's note body (c2sp.org/tlog-cosignature).
fn cosigned_message(body: &[u8], time: u64) -> Vec<u8> {
    let mut message = format!("cosignature/v1\ntime {time}\n").into_bytes();
    message.extend_from_slice(body);
    message
}

/// A witness's cosigning key: it cosigns checkpoints it has checked.
pub struct Cosigner {
    name: String,
    key_id: u32,
    key: SigningKey,
    /// Its ML-DSA-44 key and key id, when it cosigns with both.
    ml_dsa_44: Option<(PqdsaKeyPair, u32)>,
}

impl fmt::Debug for Cosigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the private key.
        f.debug_struct("Cosigner")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish()
    }
}

impl Cosigner {
    /// `key` under the witness's name `name`.
    pub fn new(name: &str, key: SigningKey) -> Result<Self, NoteError> {
        check_name(name)?;
        let key_id = key_id(name, Algorithm::Ed25519Cosignature, &key.verifying_key().to_bytes());
        Ok(Self { name: name.into(), key_id, key, ml_dsa_44: None })
    }

    /// This cosigner, cosigning with an ML-DSA-44 key (`ML_DSA_44_SIGNING`)
    /// as well: each checkpoint gets both lines.
    pub fn with_ml_dsa_44(mut self, key: PqdsaKeyPair) -> Result<Self, NoteError> {
        if key.algorithm().public_key_len() != MLDSA44_PUBLIC_KEY_LEN || self.name.len() > 255 {
            return Err(NoteError::InvalidPublicKey(
                "not an ML-DSA-44 key pair, or a name over 255 bytes".into(),
            ));
        }
        let id = key_id(&self.name, Algorithm::MlDsa44Cosignature, key.public_key().as_ref());
        self.ml_dsa_44 = Some((key, id));
        Ok(self)
    }

    /// Its verifiers: Ed25519, then ML-DSA-44 when it has that key.
    pub fn verifiers(&self) -> Vec<Verifier> {
        let mut out = vec![self.verifier()];
        if let Some((k, _)) = &self.ml_dsa_44 {
            out.push(
                Verifier::ml_dsa_44_cosigner(&self.name, k.public_key().as_ref())
                    .expect("its own key"),
            );
        }
        out
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its verifier (whose vkey third parties are given).
    pub fn verifier(&self) -> Verifier {
        Verifier::cosigner(&self.name, self.key.verifying_key()).expect("the name was checked")
    }

    /// The note signature line cosigning `body` (a checkpoint's note body,
    /// final newline included) at `time` (seconds since the epoch).
    pub fn cosign(&self, body: &str, time: u64) -> String {
        let mut blob = self.key_id.to_be_bytes().to_vec();
        blob.extend_from_slice(&time.to_be_bytes());
        blob.extend_from_slice(&self.key.sign(&cosigned_message(body.as_bytes(), time)).to_bytes());
        let mut lines = format!("{EM_DASH_SPACE}{} {}\n", self.name, STANDARD.encode(blob));
        if let Some((key, id)) = &self.ml_dsa_44
            && let Some(message) = subtree_message(&self.name, time, body)
        {
            let mut signature = vec![0u8; MLDSA44_SIGNATURE_LEN];
            if let Ok(len) = key.sign(&message, &mut signature) {
                let mut blob = id.to_be_bytes().to_vec();
                blob.extend_from_slice(&time.to_be_bytes());
                blob.extend_from_slice(&signature[..len]);
                lines.push_str(&format!(
                    "{EM_DASH_SPACE}{} {}\n",
                    self.name,
                    STANDARD.encode(blob)
                ));
            }
        }
        lines
    }
}

/// One signature that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSignature {
    /// The key name on the signature line.
    pub name: String,
    /// The key id on the signature line.
    pub key_id: u32,
    /// The algorithm of the key that verified it.
    pub algorithm: Algorithm,
}

/// An opened note: its text and who verifiably signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedNote {
    /// The note text, final newline included.
    pub body: String,
    /// One entry per known key whose signature verified, in the order of
    /// their first lines. Lines of unknown keys are not listed.
    pub verified: Vec<VerifiedSignature>,
}

impl OpenedNote {
    /// Whether a signature of `algorithm` verified.
    #[cfg(test)]
    pub(crate) fn verified_by(&self, algorithm: Algorithm) -> bool {
        self.verified.iter().any(|s| s.algorithm == algorithm)
    }
}

/// Signs `body` with every signer: `body || "\n" || one line per signer`.
/// `body` must end with a newline and carry no other control characters.
pub fn sign_note(body: &str, signers: &[&Signer]) -> Result<String, NoteError> {
    if !body.ends_with('\n') {
        return Err(NoteError::TextWithoutFinalNewline);
    }
    check_controls(body)?;
    if signers.is_empty() {
        return Err(NoteError::NoSigner);
    }
    if signers.len() > MAX_SIGNATURES {
        return Err(NoteError::TooManySignatures);
    }
    let mut note = String::with_capacity(body.len() + 1 + signers.len() * 96);
    note.push_str(body);
    note.push('\n');
    for (i, signer) in signers.iter().enumerate() {
        if signers[..i].iter().any(|s| s.name == signer.name && s.key_id == signer.key_id) {
            return Err(NoteError::DuplicateSigner {
                name: signer.name.clone(),
                key_id: signer.key_id,
            });
        }
        let mut blob = signer.key_id.to_be_bytes().to_vec();
        blob.extend(signer.sign(body.as_bytes())?);
        note.push_str(EM_DASH_SPACE);
        note.push_str(&signer.name);
        note.push(' ');
        note.push_str(&STANDARD.encode(blob));
        note.push('\n');
    }
    Ok(note)
}

/// Opens a signed note: splits it, verifies every line from a known key,
/// and returns the text with the signatures that verified.
///
/// Per the spec: a line whose (name, key id) matches no verifier is ignored,
/// even when it shares the name or the id with a known key; a line that
/// matches a known key is verified and, if it fails, the whole note is
/// rejected (the spec's SHOULD — and unlike Go's `sumdb/note`, a repeated
/// line of the same key is verified too, not skipped); a note with no line
/// from a known key is rejected. A line that matches two configured
/// verifiers is an error (ambiguous configuration).
pub fn open_note(text: &str, verifiers: &[Verifier]) -> Result<OpenedNote, NoteError> {
    check_controls(text)?;
    // The text is separated from the signatures by the last blank line.
    let split = text.rfind("\n\n").ok_or(NoteError::NoSignatureBlock)?;
    let (body, signatures) = (&text[..split + 1], &text[split + 2..]);
    if signatures.is_empty() {
        return Err(NoteError::NoSignatures);
    }
    if !signatures.ends_with('\n') {
        return Err(NoteError::UnterminatedSignatureLine);
    }
    let mut verified: Vec<VerifiedSignature> = Vec::new();
    for (i, line) in signatures[..signatures.len() - 1].split('\n').enumerate() {
        let number = i + 1;
        if number > MAX_SIGNATURES {
            return Err(NoteError::TooManySignatures);
        }
        let malformed = |problem: &str| NoteError::MalformedSignatureLine {
            line: number,
            problem: problem.to_string(),
        };
        let rest = line
            .strip_prefix(EM_DASH_SPACE)
            .ok_or_else(|| malformed("does not start with an em dash (U+2014) and a space"))?;
        let (name, encoded) = rest
            .split_once(' ')
            .ok_or_else(|| malformed("expected a key name, a space and a base64 signature"))?;
        check_name(name).map_err(|_| malformed(&format!("invalid key name {name:?}")))?;
        let blob = STANDARD
            .decode(encoded)
            .map_err(|_| malformed("the signature is not standard base64"))?;
        if blob.len() < 5 {
            return Err(malformed("the signature is shorter than a key id and one byte"));
        }
        let id = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]);
        let mut matching = verifiers.iter().filter(|v| v.name == name && v.key_id == id);
        let Some(verifier) = matching.next() else { continue };
        if matching.next().is_some() {
            return Err(NoteError::AmbiguousKey { name: name.into(), key_id: id });
        }
        if !verifier.verify(body.as_bytes(), &blob[4..]) {
            return Err(NoteError::InvalidSignature {
                name: name.into(),
                key_id: id,
                algorithm: verifier.algorithm(),
            });
        }
        if !verified.iter().any(|s| s.name == name && s.key_id == id) {
            verified.push(VerifiedSignature {
                name: name.into(),
                key_id: id,
                algorithm: verifier.algorithm(),
            });
        }
    }
    if verified.is_empty() {
        return Err(NoteError::NoKnownSignature);
    }
    Ok(OpenedNote { body: body.to_string(), verified })
}

/// A checkpoint (c2sp.org/tlog-checkpoint): the log's origin, its size and
/// the RFC 6962 root at that size. toolgate writes no extension lines (the
/// spec does not recommend them: monitors cannot audit them) and refuses
/// them on reading, so a checkpoint it accepts says nothing it did not check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    origin: String,
    size: u64,
    root: Hash,
}

impl Checkpoint {
    /// `origin` must be non-empty and one line (no control characters). The
    /// log's key names should equal it (the spec's SHOULD).
    pub fn new(origin: &str, size: u64, root: Hash) -> Result<Self, NoteError> {
        check_origin(origin)?;
        Ok(Self { origin: origin.into(), size, root })
    }

    /// The log's origin: the name that identifies the log.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The tree size: how many leaves the root covers.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The RFC 6962 root hash of the tree at that size.
    pub fn root(&self) -> &Hash {
        &self.root
    }

    /// The note text: `origin\nsize\nbase64(root)\n`.
    pub fn body(&self) -> String {
        format!("{}\n{}\n{}\n", self.origin, self.size, STANDARD.encode(self.root))
    }

    /// Reads a checkpoint note text, strictly: exactly three lines, each
    /// ending in a newline; a decimal size without sign or leading zeros;
    /// the standard base64 of exactly 32 bytes.
    pub fn parse(body: &str) -> Result<Self, NoteError> {
        let bad = |why: String| NoteError::Checkpoint(why);
        let Some(content) = body.strip_suffix('\n') else {
            return Err(bad("the text must end with a newline".into()));
        };
        let lines: Vec<&str> = content.split('\n').collect();
        let [origin, size, root, rest @ ..] = lines.as_slice() else {
            return Err(bad(format!(
                "expected 3 lines (origin, size, root), found {}",
                lines.len()
            )));
        };
        if !rest.is_empty() {
            return Err(bad(format!(
                "{} extension line(s) after the root; toolgate checkpoints have none",
                rest.len()
            )));
        }
        check_origin(origin)?;
        let size_ok = !size.is_empty()
            && size.bytes().all(|b| b.is_ascii_digit())
            && (size.len() == 1 || !size.starts_with('0'));
        if !size_ok {
            return Err(bad(format!(
                "the size {size:?} is not a decimal number without leading zeros"
            )));
        }
        let size: u64 =
            size.parse().map_err(|_| bad(format!("the size {size} does not fit 64 bits")))?;
        let root = STANDARD
            .decode(root)
            .map_err(|_| bad(format!("the root {root:?} is not standard base64")))?;
        let root: Hash = root
            .try_into()
            .map_err(|r: Vec<u8>| bad(format!("the root is {} bytes, not 32", r.len())))?;
        Ok(Self { origin: origin.to_string(), size, root })
    }

    /// The signed note of this checkpoint.
    pub fn sign(&self, signers: &[&Signer]) -> Result<String, NoteError> {
        sign_note(&self.body(), signers)
    }
}

fn check_origin(origin: &str) -> Result<(), NoteError> {
    if origin.is_empty() {
        return Err(NoteError::Checkpoint("the origin is empty".into()));
    }
    if let Some(c) = origin.chars().find(|c| c.is_control()) {
        return Err(NoteError::Checkpoint(format!(
            "the origin contains the control character U+{:04X}",
            u32::from(c)
        )));
    }
    Ok(())
}

/// Opens a signed checkpoint: [`open_note`], then [`Checkpoint::parse`].
pub fn open_checkpoint(
    text: &str,
    verifiers: &[Verifier],
) -> Result<(Checkpoint, Vec<VerifiedSignature>), NoteError> {
    let opened = open_note(text, verifiers)?;
    // A witness's cosignature vouches for consistency, not for the log: a
    // checkpoint needs a signature of the log's own.
    if opened.verified.iter().all(|s| s.algorithm.is_cosignature()) {
        return Err(NoteError::NoKnownSignature);
    }
    Ok((Checkpoint::parse(&opened.body)?, opened.verified))
}

/// The witnesses among `witnesses` whose cosignatures on the checkpoint
/// `text` verify, one entry per witness name (none is not an error; a known
/// witness's failing cosignature is). Only cosigner keys are taken.
pub fn cosigned_by(
    text: &str,
    witnesses: &[Verifier],
) -> Result<Vec<VerifiedSignature>, NoteError> {
    let cosigners: Vec<Verifier> =
        witnesses.iter().filter(|w| w.algorithm().is_cosignature()).cloned().collect();
    match open_note(text, &cosigners) {
        // One per witness, whichever of its keys (Ed25519, ML-DSA-44) signed.
        Ok(mut opened) => {
            let mut seen = std::collections::HashSet::new();
            opened.verified.retain(|s| seen.insert(s.name.clone()));
            Ok(opened.verified)
        }
        Err(NoteError::NoKnownSignature) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::ML_DSA_65_SIGNING;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    // golang.org/x/mod/sumdb/note, note_test.go (TestSign, TestOpen).
    const PETER_VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    const PETER_SKEY: &str =
        "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
    const ENOCH_VKEY: &str = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop";
    const TEXT: &str = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
    const PETER_SIG: &str = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
    const ENOCH_SIG: &str = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n";

    // c2sp.org/signed-note, "Verifier keys", Example.
    const C2SP_VKEY: &str = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k";
    const C2SP_NOTE: &str = "This is an example message.\n\n— example.com/foo \
        Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";

    fn peter_signer() -> Signer {
        // The Go private key text: PRIVATE+KEY+<name>+<id>+base64(0x01 || seed);
        // the base64 part may itself contain '+'.
        let material = STANDARD.decode(PETER_SKEY.splitn(5, '+').nth(4).unwrap()).unwrap();
        assert_eq!(material[0], 0x01);
        let seed: [u8; 32] = material[1..].try_into().unwrap();
        Signer::ed25519("PeterNeumann", SigningKey::from_bytes(&seed)).unwrap()
    }

    fn ed(name: &str, seed: u8) -> Signer {
        Signer::ed25519(name, SigningKey::from_bytes(&[seed; 32])).unwrap()
    }

    /// ML-DSA key generation is slow-ish; one fixed key pair per seed.
    fn ml(name: &str, seed: u8) -> Signer {
        Signer::ml_dsa_65(name, PqdsaKeyPair::from_seed(&ML_DSA_65_SIGNING, &[seed; 32]).unwrap())
            .unwrap()
    }

    fn log_signers() -> &'static (Signer, Signer) {
        static SIGNERS: OnceLock<(Signer, Signer)> = OnceLock::new();
        SIGNERS.get_or_init(|| (ed("toolgate.example/log", 1), ml("toolgate.example/log", 2)))
    }

    #[test]
    fn ed25519_key_ids_match_the_go_and_c2sp_vectors() {
        let peter = Verifier::from_vkey(PETER_VKEY).unwrap();
        assert_eq!(peter.key_id(), 0xc74f20a3);
        assert_eq!(peter.vkey(), PETER_VKEY);
        assert_eq!(peter_signer().key_id(), 0xc74f20a3);
        assert_eq!(Verifier::from_vkey(ENOCH_VKEY).unwrap().key_id(), 0xaf0cfe78);
        let foo = Verifier::from_vkey(C2SP_VKEY).unwrap();
        assert_eq!(foo.key_id(), 0x530d903a);
        assert_eq!(foo.vkey(), C2SP_VKEY);
        // Recomputed from first principles: SHA-256("PeterNeumann\n" || 0x01 || key)[:4].
        let raw = &STANDARD.decode(PETER_VKEY.splitn(3, '+').nth(2).unwrap()).unwrap()[1..];
        let mut input = b"PeterNeumann\n\x01".to_vec();
        input.extend_from_slice(raw);
        assert_eq!(&Sha256::digest(&input)[..4], &[0xc7, 0x4f, 0x20, 0xa3]);
        assert_eq!(key_id("PeterNeumann", Algorithm::Ed25519, raw), 0xc74f20a3);
    }

    #[test]
    fn a_key_id_in_capitals_is_not_the_key_text() {
        // PeterNeumann+c74f20a3+…, with the id written C74F20A3: one key text, one form.
        let upper = PETER_VKEY.replacen("c74f20a3", "C74F20A3", 1);
        assert_ne!(upper, PETER_VKEY);
        assert!(matches!(Verifier::from_vkey(&upper), Err(NoteError::MalformedVerifierKey(_))));
    }

    #[test]
    fn signing_reproduces_the_go_note_byte_for_byte() {
        let note = sign_note(TEXT, &[&peter_signer()]).unwrap();
        assert_eq!(note, format!("{TEXT}\n{PETER_SIG}"));
    }

    #[test]
    fn the_go_and_c2sp_example_notes_open() {
        let peter = Verifier::from_vkey(PETER_VKEY).unwrap();
        let opened =
            open_note(&format!("{TEXT}\n{PETER_SIG}"), std::slice::from_ref(&peter)).unwrap();
        assert_eq!(opened.body, TEXT);
        assert_eq!(
            opened.verified,
            [VerifiedSignature {
                name: "PeterNeumann".into(),
                key_id: 0xc74f20a3,
                algorithm: Algorithm::Ed25519
            }]
        );

        let opened = open_note(C2SP_NOTE, &[Verifier::from_vkey(C2SP_VKEY).unwrap()]).unwrap();
        assert_eq!(opened.body, "This is an example message.\n");

        // Both Go signers verified; Enoch alone unknown is ignored.
        let enoch = Verifier::from_vkey(ENOCH_VKEY).unwrap();
        let both = format!("{TEXT}\n{PETER_SIG}{ENOCH_SIG}");
        let names: Vec<_> = open_note(&both, &[peter.clone(), enoch])
            .unwrap()
            .verified
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["PeterNeumann", "EnochRoot"]);
        assert_eq!(open_note(&both, std::slice::from_ref(&peter)).unwrap().verified.len(), 1);
        assert_eq!(open_note(&both, &[]), Err(NoteError::NoKnownSignature));
    }

    #[test]
    fn go_malformed_notes_are_refused() {
        let peter = [Verifier::from_vkey(PETER_VKEY).unwrap()];
        let bad: [(String, NoteError); 6] = [
            (TEXT.to_string(), NoteError::NoSignatureBlock),
            (format!("{TEXT}\n"), NoteError::NoSignatures),
            (format!("{TEXT}\n{}", PETER_SIG.trim_end()), NoteError::UnterminatedSignatureLine),
            (format!("\x01{TEXT}\n{PETER_SIG}"), NoteError::ControlCharacter(1)),
            (
                format!(
                    "{TEXT}\n— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
                ),
                NoteError::MalformedSignatureLine {
                    line: 1,
                    problem: "the signature is not standard base64".into(),
                },
            ),
            (
                format!("{TEXT}\n{PETER_SIG}Unexpected line.\n"),
                NoteError::MalformedSignatureLine {
                    line: 2,
                    problem: "does not start with an em dash (U+2014) and a space".into(),
                },
            ),
        ];
        for (note, want) in bad {
            assert_eq!(open_note(&note, &peter), Err(want), "{note:?}");
        }
        let many = format!("{TEXT}\n{}", PETER_SIG.repeat(MAX_SIGNATURES + 1));
        assert_eq!(open_note(&many, &peter), Err(NoteError::TooManySignatures));
        // Exactly the limit is fine, and a repeated line reports its key once.
        let limit = format!("{TEXT}\n{}", PETER_SIG.repeat(MAX_SIGNATURES));
        assert_eq!(open_note(&limit, &peter).unwrap().verified.len(), 1);
        // An ASCII hyphen is not the em dash.
        let hyphen = format!("{TEXT}\n{}", PETER_SIG.replacen('—', "-", 1));
        assert!(matches!(
            open_note(&hyphen, &peter),
            Err(NoteError::MalformedSignatureLine { line: 1, .. })
        ));
        // Too short to hold a key id and a signature.
        let short = format!("{TEXT}\n— PeterNeumann AAAA\n");
        assert!(matches!(
            open_note(&short, &peter),
            Err(NoteError::MalformedSignatureLine { line: 1, .. })
        ));
    }

    #[test]
    fn a_known_key_whose_signature_fails_rejects_the_note() {
        let peter = [Verifier::from_vkey(PETER_VKEY).unwrap()];
        // Go's TestOpen: "ABCD" spliced into the signature.
        let corrupted = format!("{TEXT}\n{}ABCD{}", &PETER_SIG[..60], &PETER_SIG[60..]);
        assert_eq!(
            open_note(&corrupted, &peter),
            Err(NoteError::InvalidSignature {
                name: "PeterNeumann".into(),
                key_id: 0xc74f20a3,
                algorithm: Algorithm::Ed25519
            })
        );
        // A valid line followed by a failing line of the same key: rejected
        // (Go skips the repeat; the spec says a known key's line is verified).
        let repeated = format!("{TEXT}\n{PETER_SIG}{}ABCD{}", &PETER_SIG[..60], &PETER_SIG[60..]);
        assert!(matches!(open_note(&repeated, &peter), Err(NoteError::InvalidSignature { .. })));
        // A changed text byte.
        let changed = format!("{}\n{PETER_SIG}", TEXT.replace("cryptography", "cryptographY"));
        assert!(matches!(open_note(&changed, &peter), Err(NoteError::InvalidSignature { .. })));
    }

    #[test]
    fn the_same_key_configured_twice_is_ambiguous() {
        let peter = Verifier::from_vkey(PETER_VKEY).unwrap();
        let note = format!("{TEXT}\n{PETER_SIG}");
        assert_eq!(
            open_note(&note, &[peter.clone(), peter]),
            Err(NoteError::AmbiguousKey { name: "PeterNeumann".into(), key_id: 0xc74f20a3 })
        );
    }

    #[test]
    fn vkeys_are_checked() {
        for bad in [
            "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", // wrong id
            "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  // short id
            "PeterNeumann+c74f20a3+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", // unknown type
            "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10",   // short key
            "PeterNeumann+c74f20a3",
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        ] {
            assert!(Verifier::from_vkey(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_names_are_checked() {
        for name in ["", "a+b", "a b", "a\u{2003}b", "a\nb"] {
            assert_eq!(
                Signer::ed25519(name, SigningKey::from_bytes(&[1; 32])).unwrap_err(),
                NoteError::InvalidKeyName(name.into())
            );
        }
        assert!(Signer::ed25519("example.com/log42", SigningKey::from_bytes(&[1; 32])).is_ok());
    }

    #[test]
    fn sign_note_refuses_bad_bodies_and_signer_lists() {
        let s = ed("a", 1);
        assert_eq!(sign_note("no newline", &[&s]), Err(NoteError::TextWithoutFinalNewline));
        assert_eq!(sign_note("tab\there\n", &[&s]), Err(NoteError::ControlCharacter(9)));
        assert_eq!(sign_note("x\n", &[]), Err(NoteError::NoSigner));
        assert!(matches!(sign_note("x\n", &[&s, &s]), Err(NoteError::DuplicateSigner { .. })));
    }

    #[test]
    fn a_text_with_blank_lines_splits_at_the_last_one() {
        let s = ed("a", 1);
        let body = "one\n\ntwo\n\n";
        let note = sign_note(body, &[&s]).unwrap();
        assert_eq!(open_note(&note, &[s.verifier()]).unwrap().body, body);
    }

    #[test]
    fn ml_dsa_65_key_ids_use_the_0xff_escape() {
        let (_, m) = log_signers();
        let v = m.verifier();
        assert_eq!(v.public_key().len(), MLDSA65_PUBLIC_KEY_LEN);
        let mut input = b"toolgate.example/log\n\xfftoolgate/ml-dsa-65".to_vec();
        input.extend_from_slice(v.public_key());
        let digest = Sha256::digest(&input);
        assert_eq!(m.key_id(), u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]));
        // Another type byte would give another id for the same name and key.
        assert_ne!(m.key_id(), key_id("toolgate.example/log", Algorithm::Ed25519, v.public_key()));
        let vkey = v.vkey();
        let back = Verifier::from_vkey(&vkey).unwrap();
        assert_eq!((back.key_id(), back.algorithm()), (m.key_id(), Algorithm::MlDsa65));
    }

    #[test]
    fn a_checkpoint_signed_with_both_algorithms_opens_with_both() {
        let (e, m) = log_signers();
        let checkpoint = Checkpoint::new("toolgate.example/log", 20852163, [0x5a; 32]).unwrap();
        let note = checkpoint.sign(&[e, m]).unwrap();
        let lines: Vec<&str> = note.lines().collect();
        assert_eq!(lines.len(), 6, "{note}");
        assert!(lines[4].starts_with("— toolgate.example/log "));
        assert!(lines[5].starts_with("— toolgate.example/log "));
        let ml_blob = STANDARD.decode(lines[5].rsplit(' ').next().unwrap()).unwrap();
        assert_eq!(ml_blob.len(), 4 + MLDSA65_SIGNATURE_LEN);

        let (opened, verified) = open_checkpoint(&note, &[e.verifier(), m.verifier()]).unwrap();
        assert_eq!(opened, checkpoint);
        let algorithms: Vec<_> =
            verified.iter().map(|s| (s.name.as_str(), s.key_id, s.algorithm)).collect();
        assert_eq!(
            algorithms,
            [
                ("toolgate.example/log", e.key_id(), Algorithm::Ed25519),
                ("toolgate.example/log", m.key_id(), Algorithm::MlDsa65)
            ]
        );

        // Only the Ed25519 key known: the ML-DSA line is an unknown key, ignored.
        let only_ed = open_note(&note, &[e.verifier()]).unwrap();
        assert!(
            only_ed.verified_by(Algorithm::Ed25519) && !only_ed.verified_by(Algorithm::MlDsa65)
        );
        // Only the ML-DSA key known.
        let only_ml = open_note(&note, &[m.verifier()]).unwrap();
        assert!(
            only_ml.verified_by(Algorithm::MlDsa65) && !only_ml.verified_by(Algorithm::Ed25519)
        );
        // The PQ line stripped: still opens, but not PQ-verified.
        let stripped: String = note.split_inclusive('\n').take(5).collect();
        let opened = open_note(&stripped, &[e.verifier(), m.verifier()]).unwrap();
        assert!(!opened.verified_by(Algorithm::MlDsa65));
    }

    #[test]
    fn a_changed_body_byte_fails_each_algorithm() {
        let (e, m) = log_signers();
        let note =
            Checkpoint::new("toolgate.example/log", 7, [1; 32]).unwrap().sign(&[e, m]).unwrap();
        let changed = note.replacen("\n7\n", "\n8\n", 1);
        assert_ne!(changed, note);
        for v in [e.verifier(), m.verifier()] {
            let algorithm = v.algorithm();
            assert_eq!(
                open_note(&changed, &[v.clone()]),
                Err(NoteError::InvalidSignature {
                    name: "toolgate.example/log".into(),
                    key_id: v.key_id(),
                    algorithm
                })
            );
        }
    }

    #[test]
    fn a_right_name_with_another_key_is_not_a_signer() {
        let (e, m) = log_signers();
        let note =
            Checkpoint::new("toolgate.example/log", 3, [2; 32]).unwrap().sign(&[e, m]).unwrap();
        // Same name, other keys: other key ids, so both lines are unknown.
        let impostors =
            [ed("toolgate.example/log", 9).verifier(), ml("toolgate.example/log", 9).verifier()];
        assert_eq!(open_note(&note, &impostors), Err(NoteError::NoKnownSignature));
        // A forged line carrying the right key id but made by another key
        // matches the known key and fails verification.
        let forger = ed("toolgate.example/log", 9);
        let forged_sig = forger
            .sign(Checkpoint::new("toolgate.example/log", 3, [2; 32]).unwrap().body().as_bytes())
            .unwrap();
        let mut blob = e.key_id().to_be_bytes().to_vec();
        blob.extend(forged_sig);
        let body = note.split("\n\n").next().unwrap();
        let forged = format!("{body}\n\n— toolgate.example/log {}\n", STANDARD.encode(blob));
        assert!(matches!(
            open_note(&forged, &[e.verifier()]),
            Err(NoteError::InvalidSignature { .. })
        ));
        // A line from an unknown key next to a known one is ignored.
        let extra = format!("{note}— someone.else/key {}\n", STANDARD.encode([7u8; 68]));
        assert_eq!(open_note(&extra, &[e.verifier()]).unwrap().verified.len(), 1);
        assert_eq!(open_note(&extra, &[]), Err(NoteError::NoKnownSignature));
    }

    #[test]
    fn cosignatures_verify_count_per_witness_and_never_stand_for_the_log() {
        let (e, _) = log_signers();
        let body = Checkpoint::new("toolgate.example/log", 9, [3; 32]).unwrap().body();
        let note = Checkpoint::new("toolgate.example/log", 9, [3; 32]).unwrap().sign(&[e]).unwrap();
        let w1 = Cosigner::new("witness.example/w1", SigningKey::from_bytes(&[7; 32])).unwrap();
        let w2 = Cosigner::new("witness.example/w2", SigningKey::from_bytes(&[8; 32])).unwrap();
        let line = w1.cosign(&body, 1_679_315_147);
        let blob = STANDARD.decode(line.trim_end().rsplit(' ').next().unwrap()).unwrap();
        assert_eq!((blob.len(), &blob[4..12]), (4 + 8 + 64, &1_679_315_147u64.to_be_bytes()[..]));
        let cosigned = format!("{note}{line}{}", w2.cosign(&body, 5));
        let witnesses = [w1.verifier(), w2.verifier()];
        let names: Vec<String> =
            cosigned_by(&cosigned, &witnesses).unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["witness.example/w1", "witness.example/w2"]);
        assert!(cosigned_by(&note, &witnesses).unwrap().is_empty());
        // The vkey says it is a cosigner (type 0x04).
        let back = Verifier::from_vkey(&w1.verifier().vkey()).unwrap();
        assert_eq!(
            (back.algorithm(), back.key_id()),
            (Algorithm::Ed25519Cosignature, w1.verifier().key_id())
        );
        // Another time under the same signature fails.
        let forged = cosigned.replacen(
            &line,
            &w1.cosign(&body, 1_679_315_147).replace(&STANDARD.encode(&blob), &{
                let mut b = blob.clone();
                b[11] ^= 1;
                STANDARD.encode(b)
            }),
            1,
        );
        assert!(matches!(
            cosigned_by(&forged, &witnesses),
            Err(NoteError::InvalidSignature { algorithm: Algorithm::Ed25519Cosignature, .. })
        ));
        // A cosignature of another checkpoint does not carry over.
        let other = Checkpoint::new("toolgate.example/log", 10, [3; 32]).unwrap();
        let moved = format!("{}{}", other.sign(&[e]).unwrap(), line);
        assert!(cosigned_by(&moved, &witnesses).is_err());
        // A witness's key alone never opens a checkpoint as the log's.
        assert_eq!(open_checkpoint(&cosigned, &witnesses), Err(NoteError::NoKnownSignature));
        assert_eq!(open_checkpoint(&cosigned, &[e.verifier(), w1.verifier()]).unwrap().1.len(), 2);
    }

    /// A line under a known witness's name with a key id nobody gave is
    /// ignored (c2sp.org/signed-note: verifiers ignore unknown keys): it
    /// neither counts the witness nor fails the check of the others.
    #[test]
    fn a_known_witness_s_line_under_an_unknown_key_id_neither_counts_nor_fails() {
        let (e, _) = log_signers();
        let checkpoint = Checkpoint::new("toolgate.example/log", 9, [3; 32]).unwrap();
        let note = checkpoint.sign(&[e]).unwrap();
        let w1 = Cosigner::new("witness.example/w1", SigningKey::from_bytes(&[7; 32])).unwrap();
        let unknown =
            Cosigner::new("witness.example/w1", SigningKey::from_bytes(&[9; 32])).unwrap();
        assert_ne!(w1.verifier().key_id(), unknown.verifier().key_id());
        let alone = format!("{note}{}", unknown.cosign(&checkpoint.body(), 5));
        assert_eq!(cosigned_by(&alone, &[w1.verifier()]), Ok(Vec::new()));
        let beside = format!(
            "{note}{}{}",
            unknown.cosign(&checkpoint.body(), 5),
            w1.cosign(&checkpoint.body(), 5)
        );
        let by = cosigned_by(&beside, &[w1.verifier()]).unwrap();
        assert_eq!((by.len(), by[0].key_id), (1, w1.verifier().key_id()));
    }

    #[test]
    fn ml_dsa_44_cosignatures_sign_the_subtree_message_under_a_0x06_key() {
        use aws_lc_rs::signature::ML_DSA_44_SIGNING;
        let (e, _) = log_signers();
        let checkpoint = Checkpoint::new("toolgate.example/log", 12, [4; 32]).unwrap();
        let note = checkpoint.sign(&[e]).unwrap();
        let pq = PqdsaKeyPair::from_seed(&ML_DSA_44_SIGNING, &[5; 32]).unwrap();
        let w = Cosigner::new("witness.example/w1", SigningKey::from_bytes(&[7; 32]))
            .unwrap()
            .with_ml_dsa_44(pq)
            .unwrap();
        let lines = w.cosign(&checkpoint.body(), 42);
        assert_eq!(lines.lines().count(), 2);
        let verifiers = w.verifiers();
        let pq_key = &verifiers[1];
        assert_eq!(pq_key.algorithm(), Algorithm::MlDsa44Cosignature);
        let mut input = b"witness.example/w1\n\x06".to_vec();
        input.extend_from_slice(pq_key.public_key());
        let digest = Sha256::digest(&input);
        assert_eq!(
            pq_key.key_id(),
            u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
        );
        assert_eq!(Verifier::from_vkey(&pq_key.vkey()).unwrap().key_id(), pq_key.key_id());
        let blob =
            STANDARD.decode(lines.lines().nth(1).unwrap().rsplit(' ').next().unwrap()).unwrap();
        assert_eq!(blob.len(), 4 + 8 + MLDSA44_SIGNATURE_LEN);
        let cosigned = format!("{note}{lines}");
        let by = cosigned_by(&cosigned, std::slice::from_ref(pq_key)).unwrap();
        assert_eq!((by.len(), by[0].algorithm), (1, Algorithm::MlDsa44Cosignature));
        // The key id covers the name: under another name the line is not that witness's.
        let renamed =
            Verifier::ml_dsa_44_cosigner("witness.example/w2", pq_key.public_key()).unwrap();
        let moved =
            cosigned.replace("\u{2014} witness.example/w1 ", "\u{2014} witness.example/w2 ");
        assert!(cosigned_by(&moved, &[renamed]).unwrap_or_default().is_empty());
    }

    #[test]
    fn checkpoint_body_is_the_spec_format() {
        let root = [0xab; 32];
        let c = Checkpoint::new("example.com/behind-the-sofa", 20852163, root).unwrap();
        assert_eq!(
            c.body(),
            format!("example.com/behind-the-sofa\n20852163\n{}\n", STANDARD.encode(root))
        );
        // The spec's example checkpoint text parses.
        let spec = Checkpoint::parse(
            "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
        )
        .unwrap();
        assert_eq!((spec.origin(), spec.size()), ("example.com/behind-the-sofa", 20852163));
        assert_eq!(
            Checkpoint::parse("log\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n")
                .unwrap()
                .size(),
            0
        );
    }

    #[test]
    fn checkpoint_parse_is_strict() {
        let root = STANDARD.encode([1u8; 32]);
        let cases = [
            format!("log\n5\n{root}"),                           // no trailing newline
            format!("log\n05\n{root}\n"),                        // leading zero
            format!("log\n+5\n{root}\n"),                        // sign
            format!("log\n5a\n{root}\n"),                        // not decimal
            format!("log\n\n{root}\n"),                          // empty size
            format!("log\n-1\n{root}\n"),                        // negative
            format!("log\n18446744073709551616\n{root}\n"),      // 2^64
            "log\n5\nnot base64!\n".to_string(),                 // bad base64
            format!("log\n5\n{}\n", STANDARD.encode([1u8; 31])), // 31 bytes
            format!("log\n5\n{}\n", &root[..root.len() - 1]),    // no padding
            format!("\n5\n{root}\n"),                            // empty origin
            format!("log\n5\n{root}\next\n"),                    // extension line
            format!("log\n5\n{root}\n\n"),                       // trailing empty line
            "log\n5\n".to_string(),                              // missing root
        ];
        for body in cases {
            assert!(matches!(Checkpoint::parse(&body), Err(NoteError::Checkpoint(_))), "{body:?}");
        }
        assert_eq!(
            Checkpoint::parse(&format!("log\n18446744073709551615\n{root}\n")).unwrap().size(),
            u64::MAX
        );
        assert!(Checkpoint::new("", 1, [0; 32]).is_err());
        assert!(Checkpoint::new("a\nb", 1, [0; 32]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn checkpoint_body_round_trips(origin in "[a-z0-9./-]{1,40}", size in any::<u64>(), root in any::<[u8; 32]>()) {
            let c = Checkpoint::new(&origin, size, root).unwrap();
            prop_assert_eq!(Checkpoint::parse(&c.body()).unwrap(), c);
        }

        /// Ed25519 notes over arbitrary texts open, and any changed text
        /// byte (kept valid) is caught.
        #[test]
        fn ed25519_notes_round_trip_and_catch_changes(lines in proptest::collection::vec("[ -~]{0,30}", 1..5), at in any::<prop::sample::Index>()) {
            let s = ed("example.com/p", 3);
            let body = lines.join("\n") + "\n";
            let note = sign_note(&body, &[&s]).unwrap();
            let opened = open_note(&note, &[s.verifier()]).unwrap();
            prop_assert_eq!(&opened.body, &body);

            let mut bytes = body.clone().into_bytes();
            let i = at.index(bytes.len());
            bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
            let changed = String::from_utf8(bytes).unwrap();
            prop_assume!(changed.ends_with('\n'));
            let tampered = format!("{changed}\n{}", &note[body.len() + 1..]);
            prop_assert!(open_note(&tampered, &[s.verifier()]).is_err());
        }
    }
}
