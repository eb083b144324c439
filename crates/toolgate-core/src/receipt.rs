//! Receipts: one statement per decision and per outcome, the leaves of the
//! verifiable log (C7). A receipt is JCS (RFC 8785) canonical JSON; anyone
//! holding it, its inclusion proof and a signed checkpoint of the log can
//! check, offline, what the gateway decided and what happened.
//!
//! Pure: the caller passes the signing key, the time (`issued_at`, RFC 3339)
//! and the salts; nothing here reads a clock, a file or a random source.
//!
//! # Wire form
//!
//! A logged receipt is one JSON object:
//!
//! ```text
//! {"receipt": { …the Receipt… }}                   v2, the default
//! {"receipt": { …the Receipt… }, "sig": "<base64>"}  v1; v2 with `receipts.sign_each`
//! ```
//!
//! Its authenticity is the log's: a checkpoint signed by the log's keys
//! (Ed25519 and ML-DSA-65) commits to its leaf hash, and an inclusion proof
//! shows that the leaf is in that tree (as Certificate Transparency proves a
//! certificate by a signed tree head, not by a signature of its own). Signing
//! each receipt as well (`sig`: the standard base64, RFC 4648 §4, padded, of
//! the 64-byte Ed25519 signature, RFC 8032, over the JCS bytes of the
//! `receipt` member and nothing else) makes it verifiable before a checkpoint
//! covers it, at one signature per call; format 1 always did, format 2 does
//! so only when configured. Unknown members are refused at both levels, so a
//! bundle cannot carry unsigned content that a reader might mistake for
//! logged content.
//!
//! # Field values
//!
//! `decision`, `reason`, `execution_status`, `result_status` and the
//! operation's `state` are plain strings: the gateway writes the snake_case
//! names of `Verdict`, `Reason` and `OperationState`. They are deliberately
//! not those enums here: a receipt is evidence that must stay verifiable after
//! the code has moved on, and a reason code retired in a later release must
//! not make an old receipt unparseable (and so unverifiable).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::proposal::sha256_hex;
use crate::strict_json::{self, JsonLimits};

pub mod build;
pub mod compact;

/// The receipt format this module writes: 3, which the published log holds
/// only as a commitment (see [`commitment_entry`]); `sig` is optional, as in
/// 2. It verifies 1 (every receipt signed) and 2 (logged in the clear) too.
pub const RECEIPT_VERSION: u32 = 3;

/// The first format whose leaf is a commitment to the receipt, not the
/// receipt itself.
pub const COMMITTED_VERSION: u32 = 3;

/// The oldest format it verifies.
pub const OLDEST_VERSION: u32 = 1;

/// An approval the decision relied on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRef {
    // In JCS key order: `canonical_bytes` writes fields as declared.
    /// Who decided the approval (empty while it is pending).
    pub approver: String,
    /// RFC 3339, as recorded when the approver decided.
    pub decided_at: String,
    /// The approval's id.
    pub id: String,
}

/// The ledger operation the receipt is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRef {
    /// The operation's key.
    pub key: String,
    /// An `OperationState` name (`reserved`, `completed`, `unknown`, …).
    pub state: String,
}

/// As whom a call reached its server (`[servers.NAME.identity]`): the mode,
/// and for a credential made for the person, whom it named, for which
/// audience, and the SHA-256 of its id (an assertion's `jti`, or the token
/// itself), never the credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamIdentity {
    // In JCS key order: `canonical_bytes` writes fields as declared.
    /// Whom the credential was made for (`aud`); absent for `shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// The hex SHA-256 of the credential's id; absent for `shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_sha256: Option<String>,
    /// `shared`, `assertion`, `exchange` or `oauth`.
    pub mode: String,
    /// The person the call ran as (`sub`); absent for `shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl UpstreamIdentity {
    /// One line for a person: as whom the call reached its server.
    pub fn describe(&self) -> String {
        match (&self.subject, &self.audience) {
            (Some(subject), Some(audience)) => {
                let credential = self
                    .credential_sha256
                    .as_deref()
                    .map(|c| format!(" (credential sha256 {}…)", &c[..c.len().min(12)]))
                    .unwrap_or_default();
                format!("{subject}, by {} for {audience}{credential}", self.mode)
            }
            _ => {
                format!("{}: the server's configured credential, the same for everyone", self.mode)
            }
        }
    }
}

/// One receipt. Field names are the wire names (snake_case).
///
/// `None` serializes as `null` for the fields every receipt has
/// (`approval`, `operation`, `result_sha256`, `result_hash`), so the shape of
/// a receipt is fixed; the opt-in full values `arguments` and `result` are
/// left out entirely when not captured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// Format version: [`RECEIPT_VERSION`].
    pub v: u32,
    /// [`kid`] of the key that signs this receipt.
    pub kid: String,
    /// The receipt's position in the log. Signed, so a receipt cannot be
    /// passed off as another leaf.
    pub log_index: u64,
    /// RFC 3339, given by the caller.
    pub issued_at: String,
    /// The caller's tenant (from its credentials, never from the arguments).
    pub tenant: String,
    /// The caller's name (its `[callers]` key).
    pub caller: String,
    /// The upstream server's configured name.
    pub server: String,
    /// The tool's name on that upstream (the name called, when it names no
    /// known tool).
    pub tool: String,
    /// The hash of the tool's pinned definition; empty when not known.
    pub tool_definition_sha256: String,
    /// The hash of the call's proposal, its identity; empty when the call was
    /// refused before it had one.
    pub proposal_sha256: String,
    /// A `Verdict` name: `allow`, `require_approval`, `deny`.
    pub decision: String,
    /// A `Reason` name.
    pub reason: String,
    /// Ids of the policy rules that decided.
    pub rules: Vec<String>,
    /// The version of the policy set in force.
    pub policy_version: String,
    /// The approval the call ran under or waits for, if any.
    pub approval: Option<ApprovalRef>,
    /// The operation's key and state, for a write.
    pub operation: Option<OperationRef>,
    /// An `ExecutionStatus` name: how far the call got.
    pub execution_status: String,
    /// A `ResultStatus` name: what became of the call.
    pub result_status: String,
    /// Plain SHA-256 of the canonical result, when there is one.
    pub result_sha256: Option<String>,
    /// [`salted_hash`] of the canonical arguments.
    pub arguments_hash: String,
    /// [`salted_hash`] of the canonical result, when there is one.
    pub result_hash: Option<String>,
    /// The full arguments, only when a setting opts in to capture. Numbers
    /// are carried as JCS writes them (IEEE 754 doubles): an integer beyond
    /// ±2^53 comes back as its nearest double.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub arguments: Option<Value>,
    /// The full result, only when a setting opts in to capture.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub result: Option<Value>,
    /// The box the server ran in: the hex SHA-256 of its sandbox profile's
    /// JCS, or `off` for a stdio server run unboxed. Absent for an HTTP
    /// upstream, for a receipt no server is behind, and before toolgate
    /// boxed its servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The version of the gateway's config the call ran under: the hex
    /// SHA-256 of the config file's bytes as last read (at start, or by a
    /// reload). Absent before toolgate reloaded its config, and where no
    /// config is behind the receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_version: Option<String>,
    /// As whom the call reached its server. Absent where no server was
    /// asked to act (a refusal before dispatch), and before toolgate
    /// recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<UpstreamIdentity>,
}

/// A member that is present is `Some`, even when its value is JSON `null`
/// (plain `Option<Value>` would read `null` as `None`, drop it on
/// re-serialization and so break the signature of a captured `null`).
/// Absence is handled by `#[serde(default)]`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Receipt {
    /// The JCS (RFC 8785) bytes: what the signature covers.
    ///
    /// Written directly, members in JCS order (the keys are fixed ASCII
    /// names, so byte order is UTF-16 order), rather than through a generic
    /// canonicalizer that builds and sorts a tree first: this is on the path
    /// of every call. Strings and integers as serde_json writes them are
    /// already canonical (the same escapes; integers here are far below
    /// 2^53); the captured values go through the full canonicalizer. The
    /// tests hold this to `serde_json_canonicalizer` and to `serde_jcs`.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        fn member<T: Serialize + ?Sized>(out: &mut Vec<u8>, name: &str, value: &T) {
            if out.len() > 1 {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            serde_json::to_writer(&mut *out, value)
                .expect("strings, integers and lists always serialize");
        }
        fn captured(out: &mut Vec<u8>, name: &str, value: &Option<Value>) {
            if let Some(v) = value {
                member(
                    out,
                    name,
                    &serde_json::value::RawValue::from_string(crate::proposal::canonical_json(v))
                        .expect("JCS output is JSON"),
                );
            }
        }
        let mut out = Vec::with_capacity(1024);
        out.push(b'{');
        member(&mut out, "approval", &self.approval);
        captured(&mut out, "arguments", &self.arguments);
        member(&mut out, "arguments_hash", &self.arguments_hash);
        member(&mut out, "caller", &self.caller);
        if let Some(version) = &self.config_version {
            member(&mut out, "config_version", version);
        }
        member(&mut out, "decision", &self.decision);
        member(&mut out, "execution_status", &self.execution_status);
        if let Some(identity) = &self.identity {
            member(&mut out, "identity", identity);
        }
        member(&mut out, "issued_at", &self.issued_at);
        member(&mut out, "kid", &self.kid);
        member(&mut out, "log_index", &self.log_index);
        member(&mut out, "operation", &self.operation);
        member(&mut out, "policy_version", &self.policy_version);
        member(&mut out, "proposal_sha256", &self.proposal_sha256);
        member(&mut out, "reason", &self.reason);
        captured(&mut out, "result", &self.result);
        member(&mut out, "result_hash", &self.result_hash);
        member(&mut out, "result_sha256", &self.result_sha256);
        member(&mut out, "result_status", &self.result_status);
        member(&mut out, "rules", &self.rules);
        if let Some(sandbox) = &self.sandbox {
            member(&mut out, "sandbox", sandbox);
        }
        member(&mut out, "server", &self.server);
        member(&mut out, "tenant", &self.tenant);
        member(&mut out, "tool", &self.tool);
        member(&mut out, "tool_definition_sha256", &self.tool_definition_sha256);
        member(&mut out, "v", &self.v);
        out.push(b'}');
        out
    }
}

/// A receipt as the log holds it, its leaf: `{"receipt": {...}}`, with
/// `"sig": "..."` when it was signed on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggedReceipt {
    /// The receipt.
    pub receipt: Receipt,
    /// Standard base64 of the Ed25519 signature over `receipt.canonical_bytes()`,
    /// when it was signed on its own (always in format 1; with
    /// `receipts.sign_each` in format 2). `"sig": null` is refused, not read
    /// as absent: it would not survive re-serialization, and so not the leaf.
    #[serde(
        rename = "sig",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "signature_text"
    )]
    pub signature: Option<String>,
}

/// A present `sig` is a string.
fn signature_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    String::deserialize(d).map(Some)
}

impl LoggedReceipt {
    /// The canonical wire form (the same bytes as [`leaf_bytes`]).
    pub fn to_json(&self) -> String {
        String::from_utf8(leaf_bytes(self)).expect("JCS output is UTF-8")
    }

    /// Reads the wire form. Duplicate keys (anywhere, including inside
    /// captured values), unknown members, and documents beyond `limits` are
    /// refused. This only parses: call [`verify`] before trusting anything.
    pub fn from_json(bytes: &[u8], limits: JsonLimits) -> Result<Self, ReceiptError> {
        let value = strict_json::parse(bytes, limits)
            .map_err(|e| ReceiptError::Malformed(e.to_string()))?;
        serde_json::from_value(value).map_err(|e| ReceiptError::Malformed(e.to_string()))
    }
}

/// Why a receipt cannot be read, signed or verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// The document is not a logged receipt.
    #[error("not a logged receipt: {0}")]
    Malformed(String),
    /// The signature is not standard base64 of 64 bytes.
    #[error("the signature is not standard base64 of 64 bytes")]
    MalformedSignature,
    /// The signature does not verify under the key.
    #[error(
        "the receipt signature does not verify under the key with kid {key_kid} (the receipt names kid {receipt_kid})"
    )]
    BadSignature {
        /// The kid the receipt names.
        receipt_kid: String,
        /// The kid of the key it was checked under.
        key_kid: String,
    },
    /// The receipt's format version is not one this verifier knows.
    #[error(
        "receipt format v{0} is not supported (this verifier knows v{OLDEST_VERSION} to v{RECEIPT_VERSION})"
    )]
    UnsupportedVersion(u32),
    /// A format-3 receipt's leaf is its commitment, and opening it needs
    /// the receipt's opening key, which was not given.
    #[error(
        "a format-3 receipt is logged as a commitment: proving it needs its opening key (the answer's `opening.key`, or the bundle entry's `opening`)"
    )]
    NoOpening,
    /// A format-1 receipt without its signature: in format 1 every receipt is signed.
    #[error("a format-1 receipt must carry its signature (`sig`)")]
    Unsigned,
    /// The receipt names another kid than the key's.
    #[error("the receipt names kid {receipt_kid} but the key's kid is {key_kid}")]
    KidMismatch {
        /// The kid the receipt names.
        receipt_kid: String,
        /// The kid of the key.
        key_kid: String,
    },
}

/// The key id: the first 32 hex digits (16 bytes) of SHA-256 of the raw
/// 32-byte Ed25519 public key.
pub fn kid(public_key: &[u8; 32]) -> String {
    let mut hex = sha256_hex(public_key);
    hex.truncate(32);
    hex
}

/// Lower-case hex SHA-256(salt || bytes), for argument and result values.
///
/// Why salted: a plain hash of a low-entropy value (an amount, a yes/no, an
/// account number) is as good as the value itself, since anyone can hash the
/// few candidates and compare. With a 32-byte secret salt that stays in the
/// ledger and never appears in the receipt, a receipt alone reveals nothing
/// guessable; whoever holds the ledger (an auditor given the salt) can still
/// prove that a given value is the one the receipt committed to. The salt
/// has a fixed length, so salt and value cannot be re-split differently.
/// `bytes` are the JCS bytes of the value (see [`salted_value_hash`]).
pub fn salted_hash(salt: &[u8; 32], bytes: &[u8]) -> String {
    crate::proposal::hex(&Sha256::new().chain_update(salt).chain_update(bytes).finalize())
}

/// [`salted_hash`] of the JCS bytes of `value`.
pub fn salted_value_hash(salt: &[u8; 32], value: &Value) -> String {
    salted_hash(salt, crate::proposal::canonical_json(value).as_bytes())
}

/// Signs `receipt`. Fails closed when `receipt.kid` is not the kid of `key`:
/// a receipt never names a key other than the one that signed it.
pub fn sign(receipt: Receipt, key: &SigningKey) -> Result<LoggedReceipt, ReceiptError> {
    let key_kid = kid(&key.verifying_key().to_bytes());
    if receipt.kid != key_kid {
        return Err(ReceiptError::KidMismatch { receipt_kid: receipt.kid, key_kid });
    }
    let signature = key.sign(&receipt.canonical_bytes());
    Ok(LoggedReceipt { receipt, signature: Some(STANDARD.encode(signature.to_bytes())) })
}

/// What vouches for a receipt that [`verify`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouched {
    /// Its own signature, under the key its kid names.
    BySignature,
    /// Nothing yet: it carries no signature, so it is evidence only once a
    /// checkpoint signed by the log's keys is shown to include it.
    ByCheckpoint,
}

/// Verifies a logged receipt against `key`, the key of the log its kid names,
/// in this order: the signature when it carries one (Ed25519 `verify_strict`:
/// no small-order keys, no malleable signatures) over the JCS bytes of the
/// receipt, then the format version, then that the receipt names this key's
/// kid. The signature comes first because nothing a receipt says — its
/// version or its kid — is worth reporting before it is known to be what the
/// key signed. A receipt without one is [`Vouched::ByCheckpoint`]: the caller
/// must prove its inclusion under a signed checkpoint before trusting it.
pub fn verify(logged: &LoggedReceipt, key: &VerifyingKey) -> Result<Vouched, ReceiptError> {
    let key_kid = kid(&key.to_bytes());
    let receipt = &logged.receipt;
    let vouched = match &logged.signature {
        Some(text) => {
            let raw = STANDARD.decode(text).map_err(|_| ReceiptError::MalformedSignature)?;
            let raw: [u8; 64] = raw.try_into().map_err(|_| ReceiptError::MalformedSignature)?;
            key.verify_strict(&receipt.canonical_bytes(), &Signature::from_bytes(&raw)).map_err(
                |_| ReceiptError::BadSignature {
                    receipt_kid: receipt.kid.clone(),
                    key_kid: key_kid.clone(),
                },
            )?;
            Vouched::BySignature
        }
        None => Vouched::ByCheckpoint,
    };
    if !(OLDEST_VERSION..=RECEIPT_VERSION).contains(&receipt.v) {
        return Err(ReceiptError::UnsupportedVersion(receipt.v));
    }
    if receipt.v == 1 && vouched == Vouched::ByCheckpoint {
        return Err(ReceiptError::Unsigned);
    }
    if receipt.kid != key_kid {
        return Err(ReceiptError::KidMismatch { receipt_kid: receipt.kid.clone(), key_kid });
    }
    Ok(vouched)
}

/// The bytes the log's leaf hash is computed over: the JCS bytes of the whole
/// logged object `{"receipt": …}` or `{"receipt": …, "sig": …}`.
///
/// Why the whole object and not the receipt alone: the log then commits to
/// exactly the artefact a holder has, signature included when there is one,
/// so an inclusion proof shows that this object was logged, and a verifier
/// recomputes the leaf from the bundle without re-deriving anything. Ed25519
/// signatures are deterministic (RFC 8032), so one receipt under one key
/// always gives one leaf. JCS makes the bytes independent of how the object
/// was formatted in transit.
pub fn leaf_bytes(logged: &LoggedReceipt) -> Vec<u8> {
    logged_bytes(&logged.receipt.canonical_bytes(), logged.signature.as_deref())
}

/// The bytes the log publishes for a logged receipt, its entry (the leaf
/// hash is over them): the logged receipt itself before format 3; from
/// format 3 on, only its commitment, opened with `opening` (the receipt's
/// [`opening_key`]). See [`commitment_entry`] for why.
pub fn entry_bytes(
    logged: &LoggedReceipt,
    opening: Option<&[u8; 32]>,
) -> Result<Vec<u8>, ReceiptError> {
    let bytes = leaf_bytes(logged);
    if logged.receipt.v < COMMITTED_VERSION {
        return Ok(bytes);
    }
    let key = opening.ok_or(ReceiptError::NoOpening)?;
    Ok(commitment_entry(&commitment(key, &bytes)))
}

/// The key that opens the commitment of the receipt at `log_index`, from
/// the call's secret salt: SHA-256 of a domain, the salt and the index.
/// Derived, not random, so the ledger keeps nothing new and every reader of
/// the ledger (export, the archive) gives the same key; one-way, so handing
/// a caller its receipt's key reveals nothing of the salt behind the
/// receipt's salted hashes.
pub fn opening_key(salt: &[u8; 32], log_index: u64) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"toolgate/receipt-opening/v1\0")
        .chain_update(salt)
        .chain_update(log_index.to_be_bytes())
        .finalize()
        .into()
}

/// The commitment to a logged receipt's JCS bytes under `key`: SHA-256 of a
/// domain, the 32-byte key and the bytes (the key has a fixed length, so
/// key and bytes cannot be re-split).
pub fn commitment(key: &[u8; 32], logged: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"toolgate/receipt-commitment/v1\0")
        .chain_update(key)
        .chain_update(logged)
        .finalize()
        .into()
}

/// A format-3 receipt's entry in the published log: the JCS bytes of
/// `{"commitment":"<64 hex>","v":3}`.
///
/// Why a commitment: the log is one for every tenant, and its tiles and
/// entries are published (to approvers, or to anyone). A receipt names its
/// tenant, caller, server and tool, and hashes a reader could test guesses
/// against; published as such, it told one tenant about another. A
/// commitment under a secret 256-bit key reveals nothing of the receipt,
/// not even to a reader who can guess all of it, yet binds the log to it:
/// whoever is given the receipt and its key (the caller, in its answer; an
/// auditor, in a bundle) proves that exactly this receipt is the leaf.
pub fn commitment_entry(commitment: &[u8; 32]) -> Vec<u8> {
    format!("{{\"commitment\":\"{}\",\"v\":{COMMITTED_VERSION}}}", crate::proposal::hex(commitment))
        .into_bytes()
}

/// One entry of the published log, as a reader finds it.
#[derive(Debug, Clone, PartialEq)]
pub enum LogEntry {
    /// A receipt logged in the clear (formats 1 and 2).
    Clear(LoggedReceipt),
    /// A format-3 receipt's commitment.
    Commitment([u8; 32]),
}

impl LogEntry {
    /// Reads an entry: a commitment `{"commitment", "v": 3}` exactly, or a
    /// logged receipt of format 1 or 2 (a format-3 receipt is never logged
    /// in the clear).
    pub fn from_json(bytes: &[u8], limits: JsonLimits) -> Result<Self, ReceiptError> {
        if let Some(hex) = bytes.strip_prefix(b"{\"commitment\":\"").and_then(|rest| {
            rest.strip_suffix(format!("\",\"v\":{COMMITTED_VERSION}}}").as_bytes())
        }) {
            let text =
                std::str::from_utf8(hex).ok().and_then(crate::proposal::unhex32).ok_or_else(
                    || ReceiptError::Malformed("a commitment is 64 lower-case hex digits".into()),
                )?;
            return Ok(LogEntry::Commitment(text));
        }
        let logged = LoggedReceipt::from_json(bytes, limits)?;
        if logged.receipt.v >= COMMITTED_VERSION {
            return Err(ReceiptError::Malformed(format!(
                "a format-{} receipt is logged as its commitment, never in the clear",
                logged.receipt.v
            )));
        }
        Ok(LogEntry::Clear(logged))
    }
}

/// A receipt as its holder is given it beside the log: the logged receipt
/// and the key that opens its commitment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    /// The [`opening_key`].
    pub key: [u8; 32],
    /// The logged receipt's JCS text.
    pub logged: std::sync::Arc<str>,
}

/// `{"receipt":<canonical>[,"sig":"<sig>"]}`: JCS of the logged object from
/// the receipt's own JCS bytes ("receipt" sorts before "sig"; base64 needs
/// no escaping), so sealing canonicalizes a receipt once.
fn logged_bytes(canonical: &[u8], signature: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(canonical.len() + 110);
    out.extend_from_slice(b"{\"receipt\":");
    out.extend_from_slice(canonical);
    if let Some(signature) = signature {
        out.extend_from_slice(b",\"sig\":\"");
        out.extend_from_slice(signature.as_bytes());
        out.push(b'"');
    }
    out.push(b'}');
    out
}

/// The receipt signing key with its kid, computed once.
///
/// Signing goes through aws-lc-rs, which signs in half the time of
/// ed25519-dalek here (measured: docs/BENCHMARKS.md) — a receipt is signed
/// on every call. Ed25519 signatures are deterministic (RFC 8032), so both
/// give the same bytes (a test holds them to it); verifying stays with
/// ed25519-dalek's `verify_strict`.
pub struct ReceiptKey {
    signing: SigningKey,
    fast: aws_lc_rs::signature::Ed25519KeyPair,
    kid: String,
}

impl ReceiptKey {
    /// The key for `signing`, its kid computed once.
    pub fn new(signing: SigningKey) -> Self {
        let kid = kid(&signing.verifying_key().to_bytes());
        let fast = aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(signing.as_bytes())
            .expect("any 32-byte seed is an Ed25519 key");
        Self { signing, fast, kid }
    }

    /// The Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.fast.sign(message).as_ref().try_into().expect("an Ed25519 signature is 64 bytes")
    }

    /// The key's [`kid`].
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The Ed25519 signing key itself.
    pub fn signing_key(&self) -> &SigningKey {
        &self.signing
    }

    /// The public key receipts are verified with.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }
}

/// A receipt waiting for its place in the log: the store that appends it
/// assigns `log_index` (inside the transaction that appends it, so indexes
/// are contiguous), then seals it (signing it with `key` when `sign_each`). `salt` is the secret behind
/// the salted hashes; it stays in the ledger. `asked` is the ledger's
/// private record of what was asked ({caller, tool, arguments, and how it
/// was decided}, JSON), so a later policy can be replayed over it; it is
/// never in the receipt.
#[derive(Clone)]
pub struct Draft {
    /// The receipt, its `log_index` not yet assigned.
    pub receipt: Receipt,
    /// The secret salt of the receipt's salted hashes.
    pub salt: [u8; 32],
    /// The ledger's private record of what was asked (JSON), if any.
    pub asked: Option<String>,
    /// The key of the log: its kid is the receipt's.
    pub key: std::sync::Arc<ReceiptKey>,
    /// Sign this receipt on its own too (`receipts.sign_each`); otherwise the
    /// checkpoint that covers it is its signature.
    pub sign_each: bool,
    /// Where the store placed it, for whoever drafted it (the answer's
    /// receipt names its leaf): told by `seal`.
    pub placement: Placement,
}

/// Where a receipt was placed in the log: its leaf index and leaf hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Its leaf index (`log_index`).
    pub index: u64,
    /// RFC 6962 leaf hash of its entry (see [`entry_bytes`]).
    pub leaf_hash: crate::merkle::Hash,
    /// For a format-3 receipt, what opens its commitment: the receipt and
    /// its key, which its caller is given (the log publishes neither).
    pub opening: Option<Opening>,
}

/// A draft's way back to its drafter: `seal` writes where the store placed
/// it, and the drafter reads it once the store has committed it. The store
/// may seal one draft more than once (a transaction retried); the last
/// seal is the one committed. Untracked (`Placement::default()`, no
/// allocation) for drafts nobody asks about.
#[derive(Debug, Clone, Default)]
pub struct Placement(Option<std::sync::Arc<std::sync::Mutex<Option<Placed>>>>);

impl Placement {
    /// A placement its drafter will read.
    pub fn tracked() -> Self {
        Self(Some(Default::default()))
    }

    fn set(&self, placed: Placed) {
        if let Some(slot) = &self.0 {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(placed);
        }
    }

    /// Where the draft was sealed last; `None` before a seal or untracked.
    /// Read it only after the store reported the draft committed.
    pub fn get(&self) -> Option<Placed> {
        self.0.as_ref()?.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn is_tracked(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for Draft {
    // Never the salt.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Draft")
            .field("receipt", &self.receipt)
            .field("kid", &self.key.kid)
            .finish_non_exhaustive()
    }
}

/// A receipt placed in the log, ready to store: the logged object and its
/// leaf hash (over its entry: [`entry_bytes`]).
pub struct Sealed {
    /// The logged receipt.
    pub logged: LoggedReceipt,
    /// Its leaf hash in the log.
    pub leaf_hash: crate::merkle::Hash,
}

impl Draft {
    /// Places the receipt at `log_index` and, with `sign_each`, signs it.
    /// Fails closed when the draft names another key than the one it carries.
    pub fn seal(
        mut self,
        log_index: u64,
    ) -> Result<(Sealed, [u8; 32], Option<String>), ReceiptError> {
        self.receipt.log_index = log_index;
        if self.receipt.kid != self.key.kid {
            return Err(ReceiptError::KidMismatch {
                receipt_kid: self.receipt.kid,
                key_kid: self.key.kid.clone(),
            });
        }
        let canonical = self.receipt.canonical_bytes();
        let signature = self.sign_each.then(|| STANDARD.encode(self.key.sign(&canonical)));
        let bytes = logged_bytes(&canonical, signature.as_deref());
        let (leaf_hash, opening) = if self.receipt.v >= COMMITTED_VERSION {
            let key = opening_key(&self.salt, log_index);
            let leaf_hash = crate::merkle::leaf_hash(&commitment_entry(&commitment(&key, &bytes)));
            // Only a drafter that reads its placement gets the opening.
            let opening = self.placement.is_tracked().then(|| Opening {
                key,
                logged: String::from_utf8(bytes).expect("JCS output is UTF-8").into(),
            });
            (leaf_hash, opening)
        } else {
            (crate::merkle::leaf_hash(&bytes), None)
        };
        self.placement.set(Placed { index: log_index, leaf_hash, opening });
        let logged = LoggedReceipt { receipt: self.receipt, signature };
        Ok((Sealed { logged, leaf_hash }, self.salt, self.asked))
    }
}

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds
/// (`2026-11-30T17:55:44.123Z`). Civil-from-days (H. Hinnant), so no clock
/// or time-zone library is needed.
pub fn rfc3339_ms(ms: i64) -> String {
    let t = Civil::of(ms);
    match t.text() {
        Some(text) => String::from_utf8(text.to_vec()).expect("ASCII digits"),
        None => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year, t.month, t.day, t.hour, t.minute, t.second, t.milli
        ),
    }
}

/// `rfc3339_ms`'s text for the years 0 to 9999 (every receipt's), on the
/// stack: a receipt's time is written once and checked once per call.
pub(crate) fn rfc3339_ms_bytes(ms: i64) -> Option<[u8; 24]> {
    Civil::of(ms).text()
}

/// A UTC instant's calendar fields.
struct Civil {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    milli: i64,
}

impl Civil {
    fn of(ms: i64) -> Self {
        let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
        let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            hour: sod / 3600,
            minute: sod % 3600 / 60,
            second: sod % 60,
            milli,
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, for a year of four digits.
    fn text(&self) -> Option<[u8; 24]> {
        if !(0..=9999).contains(&self.year) {
            return None;
        }
        let mut out = *b"0000-00-00T00:00:00.000Z";
        for (at, width, n) in [
            (0, 4, self.year),
            (5, 2, self.month),
            (8, 2, self.day),
            (11, 2, self.hour),
            (14, 2, self.minute),
            (17, 2, self.second),
            (20, 3, self.milli),
        ] {
            let mut n = n;
            for digit in out[at..at + width].iter_mut().rev() {
                *digit = b'0' + (n % 10) as u8;
                n /= 10;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn receipt_for(key: &SigningKey) -> Receipt {
        let salt = [7u8; 32];
        let arguments = json!({"part": "A-113", "quantity": 2});
        let result = json!({"order": "PO-9"});
        Receipt {
            v: RECEIPT_VERSION,
            kid: kid(&key.verifying_key().to_bytes()),
            log_index: 41,
            issued_at: "2026-05-01T12:00:00Z".into(),
            tenant: "acme".into(),
            caller: "agent-7".into(),
            server: "parts".into(),
            tool: "raise_parts_order".into(),
            tool_definition_sha256: "ab".repeat(32),
            proposal_sha256: "cd".repeat(32),
            decision: "allow".into(),
            reason: "automatic".into(),
            rules: vec!["orders.small".into(), "tenant.acme".into()],
            policy_version: "p-3".into(),
            approval: Some(ApprovalRef {
                id: "ap-1".into(),
                approver: "erin".into(),
                decided_at: "2026-05-01T11:59:00Z".into(),
            }),
            operation: Some(OperationRef { key: "op-1".into(), state: "completed".into() }),
            execution_status: "dispatched".into(),
            result_status: "ok".into(),
            result_sha256: Some(sha256_hex(crate::proposal::canonical_json(&result).as_bytes())),
            arguments_hash: salted_value_hash(&salt, &arguments),
            result_hash: Some(salted_value_hash(&salt, &result)),
            arguments: None,
            result: None,
            sandbox: None,
            config_version: None,
            identity: None,
        }
    }

    fn reparse(signed: &LoggedReceipt) -> LoggedReceipt {
        LoggedReceipt::from_json(signed.to_json().as_bytes(), JsonLimits::default()).unwrap()
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_796_060_144_999), "2026-11-30T17:35:44.999Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        // Years beyond four digits are printed whole, as before.
        assert_eq!(rfc3339_ms(-62_167_219_200_001), "-001-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
    }

    proptest! {
        /// The digits written on the stack are `format!`'s, across the calendar.
        #[test]
        fn rfc3339_digits_are_format_s(ms in -70_000_000_000_000i64..300_000_000_000_000) {
            let t = Civil::of(ms);
            let printed = format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.year, t.month, t.day, t.hour, t.minute, t.second, t.milli);
            prop_assert_eq!(rfc3339_ms(ms), printed.clone());
            prop_assert_eq!(rfc3339_ms_bytes(ms).map(|b| b.to_vec()), (0..=9999).contains(&t.year).then(|| printed.into_bytes()));
        }
    }

    #[test]
    fn the_fast_signer_gives_ed25519_dalek_s_bytes() {
        for seed in 0..16u8 {
            let k = key(seed);
            let rk = ReceiptKey::new(k.clone());
            for message in [&b""[..], b"x", &[seed; 1000]] {
                assert_eq!(rk.sign(message), k.sign(message).to_bytes());
            }
        }
    }

    #[test]
    fn a_draft_is_sealed_at_its_index_and_verifies() {
        let k = key(3);
        let rk = std::sync::Arc::new(ReceiptKey::new(k.clone()));
        for sign_each in [true, false] {
            let draft = Draft {
                receipt: receipt_for(&k),
                salt: [1; 32],
                asked: None,
                key: rk.clone(),
                sign_each,
                placement: Default::default(),
            };
            let (sealed, salt, _) = draft.seal(7).unwrap();
            assert_eq!(salt, [1; 32]);
            assert_eq!(sealed.logged.receipt.log_index, 7);
            assert_eq!(sealed.logged.signature.is_some(), sign_each);
            let vouched = if sign_each { Vouched::BySignature } else { Vouched::ByCheckpoint };
            assert_eq!(verify(&sealed.logged, &k.verifying_key()), Ok(vouched));
            // Format 3: the leaf is the commitment the salt's key opens, never the receipt itself.
            let key = opening_key(&[1; 32], 7);
            assert_eq!(
                sealed.leaf_hash,
                crate::merkle::leaf_hash(&entry_bytes(&sealed.logged, Some(&key)).unwrap())
            );
            assert_ne!(sealed.leaf_hash, crate::merkle::leaf_hash(&leaf_bytes(&sealed.logged)));
            assert_eq!(entry_bytes(&sealed.logged, None), Err(ReceiptError::NoOpening));
        }
        // A draft naming another key is refused, not sealed.
        let other = Draft {
            receipt: receipt_for(&key(4)),
            salt: [1; 32],
            asked: None,
            key: rk,
            sign_each: false,
            placement: Default::default(),
        };
        assert!(matches!(other.seal(0), Err(ReceiptError::KidMismatch { .. })));
    }

    #[test]
    fn sign_then_verify_round_trips_through_the_wire_form() {
        let k = key(1);
        let signed = sign(receipt_for(&k), &k).unwrap();
        assert_eq!(verify(&signed, &k.verifying_key()), Ok(Vouched::BySignature));
        let back = reparse(&signed);
        assert_eq!(back, signed);
        assert_eq!(verify(&back, &k.verifying_key()), Ok(Vouched::BySignature));
        // The wire form has exactly the two members.
        let wire: Value = serde_json::from_str(&signed.to_json()).unwrap();
        let mut members: Vec<_> = wire.as_object().unwrap().keys().cloned().collect();
        members.sort();
        assert_eq!(members, ["receipt", "sig"]);
        assert_eq!(STANDARD.decode(wire["sig"].as_str().unwrap()).unwrap().len(), 64);
    }

    #[test]
    fn the_signature_is_over_the_jcs_bytes_of_the_receipt() {
        let k = key(2);
        let signed = sign(receipt_for(&k), &k).unwrap();
        let jcs = serde_json_canonicalizer::to_vec(&serde_json::to_value(&signed.receipt).unwrap())
            .unwrap();
        assert_eq!(signed.receipt.canonical_bytes(), jcs);
        let raw: [u8; 64] =
            STANDARD.decode(signed.signature.as_ref().unwrap()).unwrap().try_into().unwrap();
        k.verifying_key().verify_strict(&jcs, &Signature::from_bytes(&raw)).unwrap();
    }

    #[test]
    fn wrong_key_fails_with_a_signature_error_naming_both_kids() {
        let (a, b) = (key(1), key(2));
        let signed = sign(receipt_for(&a), &a).unwrap();
        match verify(&signed, &b.verifying_key()) {
            Err(ReceiptError::BadSignature { receipt_kid, key_kid }) => {
                assert_eq!(receipt_kid, kid(&a.verifying_key().to_bytes()));
                assert_eq!(key_kid, kid(&b.verifying_key().to_bytes()));
            }
            other => panic!("expected BadSignature, got {other:?}"),
        }
    }

    #[test]
    fn a_validly_signed_receipt_naming_another_kid_fails_with_the_kid_error() {
        let (a, b) = (key(1), key(2));
        // A receipt that names b's kid, signed by a directly (sign() refuses).
        let receipt = receipt_for(&b);
        let signature = a.sign(&receipt.canonical_bytes());
        let signed =
            LoggedReceipt { receipt, signature: Some(STANDARD.encode(signature.to_bytes())) };
        assert_eq!(
            verify(&signed, &a.verifying_key()),
            Err(ReceiptError::KidMismatch {
                receipt_kid: kid(&b.verifying_key().to_bytes()),
                key_kid: kid(&a.verifying_key().to_bytes())
            })
        );
        // And sign() fails closed on the same receipt.
        assert!(matches!(sign(receipt_for(&b), &a), Err(ReceiptError::KidMismatch { .. })));
    }

    #[test]
    fn another_version_is_refused_even_when_signed() {
        let k = key(3);
        for v in [0, RECEIPT_VERSION + 1] {
            let mut receipt = receipt_for(&k);
            receipt.v = v;
            let signature = k.sign(&receipt.canonical_bytes());
            let signed =
                LoggedReceipt { receipt, signature: Some(STANDARD.encode(signature.to_bytes())) };
            assert_eq!(
                verify(&signed, &k.verifying_key()),
                Err(ReceiptError::UnsupportedVersion(v))
            );
        }
    }

    #[test]
    fn format_1_needs_its_signature_and_format_2_rests_on_a_checkpoint() {
        let k = key(3);
        let mut v1 = receipt_for(&k);
        v1.v = 1;
        let signed = sign(v1.clone(), &k).unwrap();
        assert_eq!(verify(&signed, &k.verifying_key()), Ok(Vouched::BySignature));
        let stripped = LoggedReceipt { receipt: v1, signature: None };
        assert_eq!(verify(&stripped, &k.verifying_key()), Err(ReceiptError::Unsigned));
        let v2 = LoggedReceipt { receipt: receipt_for(&k), signature: None };
        assert_eq!(verify(&v2, &k.verifying_key()), Ok(Vouched::ByCheckpoint));
        // Unsigned, it still names its log's key.
        assert!(matches!(
            verify(&v2, &key(4).verifying_key()),
            Err(ReceiptError::KidMismatch { .. })
        ));
        // The wire form has the one member, and `"sig": null` is refused.
        assert_eq!(
            serde_json::from_str::<Value>(&v2.to_json()).unwrap().as_object().unwrap().len(),
            1
        );
        let null_sig = v2.to_json().replacen('{', r#"{"sig":null,"#, 1);
        assert!(LoggedReceipt::from_json(null_sig.as_bytes(), JsonLimits::default()).is_err());
        assert_eq!(reparse(&v2), v2);
    }

    #[test]
    fn a_malformed_signature_is_its_own_error() {
        let k = key(4);
        let mut signed = sign(receipt_for(&k), &k).unwrap();
        signed.signature = Some("not base64!".into());
        assert_eq!(verify(&signed, &k.verifying_key()), Err(ReceiptError::MalformedSignature));
        signed.signature = Some(STANDARD.encode([0u8; 63]));
        assert_eq!(verify(&signed, &k.verifying_key()), Err(ReceiptError::MalformedSignature));
    }

    #[test]
    fn kid_is_the_first_32_hex_digits_of_sha256_of_the_raw_key() {
        let k = key(5);
        let pk = k.verifying_key().to_bytes();
        let full = sha256_hex(&pk);
        assert_eq!(kid(&pk), full[..32]);
        assert_eq!(kid(&pk).len(), 32);
        // Known vector: SHA-256 of 32 zero bytes is 66687aad…; the kid takes
        // its first 16 bytes.
        assert_eq!(kid(&[0u8; 32]), "66687aadf862bd776c8fc18b8e9f8e20");
    }

    #[test]
    fn jcs_bytes_do_not_depend_on_member_order_or_whitespace() {
        let k = key(6);
        let signed = sign(receipt_for(&k), &k).unwrap();
        let canonical = signed.to_json();
        // Re-emit the same object with every object's members reversed and
        // pretty-printed.
        fn reverse(v: &Value) -> Value {
            match v {
                Value::Object(m) => {
                    let mut out = serde_json::Map::new();
                    for (key, val) in m.iter().rev() {
                        out.insert(key.clone(), reverse(val));
                    }
                    Value::Object(out)
                }
                Value::Array(a) => Value::Array(a.iter().map(reverse).collect()),
                other => other.clone(),
            }
        }
        let value: Value = serde_json::from_str(&canonical).unwrap();
        let reordered = serde_json::to_string_pretty(&reverse(&value)).unwrap();
        assert_ne!(reordered, canonical);
        let back = LoggedReceipt::from_json(reordered.as_bytes(), JsonLimits::default()).unwrap();
        assert_eq!(back.to_json(), canonical);
        assert_eq!(leaf_bytes(&back), canonical.as_bytes());
        assert_eq!(verify(&back, &k.verifying_key()), Ok(Vouched::BySignature));
    }

    #[test]
    fn an_entry_is_a_commitment_or_an_older_receipt_in_the_clear() {
        let k = key(6);
        let logged = LoggedReceipt { receipt: receipt_for(&k), signature: None };
        let key = opening_key(&[9; 32], 41);
        let entry = entry_bytes(&logged, Some(&key)).unwrap();
        assert_eq!(
            LogEntry::from_json(&entry, JsonLimits::sized(1 << 10, 4)),
            Ok(LogEntry::Commitment(commitment(&key, &leaf_bytes(&logged))))
        );
        // Nothing of the receipt is in its entry, and another key gives another entry.
        let text = String::from_utf8(entry.clone()).unwrap();
        assert!(
            !text.contains("acme")
                && !text.contains("raise_parts_order")
                && !text.contains("agent-7"),
            "{text}"
        );
        assert_ne!(entry_bytes(&logged, Some(&opening_key(&[9; 32], 42))).unwrap(), entry);
        assert_ne!(entry_bytes(&logged, Some(&opening_key(&[8; 32], 41))).unwrap(), entry);
        // A format-3 receipt in the clear is not an entry; a format-2 one is.
        assert!(LogEntry::from_json(&leaf_bytes(&logged), JsonLimits::sized(1 << 16, 32)).is_err());
        let mut older = logged.clone();
        older.receipt.v = 2;
        assert_eq!(
            LogEntry::from_json(&leaf_bytes(&older), JsonLimits::sized(1 << 16, 32)),
            Ok(LogEntry::Clear(older.clone()))
        );
        assert_eq!(entry_bytes(&older, None).unwrap(), leaf_bytes(&older));
    }

    #[test]
    fn jcs_orders_receipt_members_by_code_point() {
        let k = key(6);
        let bytes = receipt_for(&k).canonical_bytes();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with(r#"{"approval":{"approver":"erin","decided_at":"#), "{text}");
        assert!(text.ends_with(r#","v":3}"#), "{text}");
    }

    #[test]
    fn leaf_bytes_cover_the_signature() {
        let (a, b) = (key(1), key(2));
        let mut ra = receipt_for(&a);
        let sa = sign(ra.clone(), &a).unwrap();
        ra.kid = kid(&b.verifying_key().to_bytes());
        let sb = sign(ra, &b).unwrap();
        assert_ne!(leaf_bytes(&sa), leaf_bytes(&sb));
        let mut forged = sa.clone();
        forged.signature = sb.signature.clone();
        assert_ne!(leaf_bytes(&forged), leaf_bytes(&sa));
        // Deterministic: signing again gives the same leaf.
        assert_eq!(leaf_bytes(&sign(receipt_for(&a), &a).unwrap()), leaf_bytes(&sa));
    }

    #[test]
    fn absent_captures_are_left_out_and_a_captured_null_survives() {
        let k = key(7);
        let plain = sign(receipt_for(&k), &k).unwrap();
        let text = plain.to_json();
        assert!(!text.contains("\"arguments\":"), "{text}");
        assert!(!text.contains("\"result\":"), "{text}");
        assert!(text.contains("\"approval\":{"), "{text}");

        let mut receipt = receipt_for(&k);
        receipt.approval = None;
        receipt.arguments = Some(json!({"quantity": 2}));
        receipt.result = Some(Value::Null);
        let captured = sign(receipt, &k).unwrap();
        let text = captured.to_json();
        assert!(text.contains("\"approval\":null"), "{text}");
        assert!(text.contains("\"result\":null"), "{text}");
        let back = reparse(&captured);
        assert_eq!(back.receipt.result, Some(Value::Null));
        assert_eq!(verify(&back, &k.verifying_key()), Ok(Vouched::BySignature));
    }

    #[test]
    fn unknown_members_and_duplicate_keys_are_refused() {
        let k = key(8);
        let signed = sign(receipt_for(&k), &k).unwrap();
        let mut value: Value = serde_json::from_str(&signed.to_json()).unwrap();
        value["receipt"]["note"] = json!("unsigned");
        let err = LoggedReceipt::from_json(value.to_string().as_bytes(), JsonLimits::default())
            .unwrap_err();
        assert!(matches!(err, ReceiptError::Malformed(ref m) if m.contains("note")), "{err}");

        let mut value: Value = serde_json::from_str(&signed.to_json()).unwrap();
        value["extra"] = json!(1);
        assert!(matches!(
            LoggedReceipt::from_json(value.to_string().as_bytes(), JsonLimits::default()),
            Err(ReceiptError::Malformed(_))
        ));

        let text = signed.to_json();
        let duplicated =
            text.replacen("\"tenant\":\"acme\"", "\"tenant\":\"evil\",\"tenant\":\"acme\"", 1);
        assert_ne!(duplicated, text);
        let err =
            LoggedReceipt::from_json(duplicated.as_bytes(), JsonLimits::default()).unwrap_err();
        assert!(matches!(err, ReceiptError::Malformed(ref m) if m.contains("duplicate")), "{err}");
    }

    #[test]
    fn salted_hashes_are_stable_and_differ_per_salt() {
        let value = json!({"amount": 100});
        let a = salted_value_hash(&[1; 32], &value);
        assert_eq!(a, salted_value_hash(&[1; 32], &json!({"amount": 100})));
        assert_ne!(a, salted_value_hash(&[2; 32], &value));
        assert_ne!(a, salted_value_hash(&[1; 32], &json!({"amount": 101})));
        // It is SHA-256(salt || JCS bytes), and not the unsalted hash.
        let mut input = vec![1u8; 32];
        input.extend_from_slice(br#"{"amount":100}"#);
        assert_eq!(a, sha256_hex(&input));
        assert_ne!(a, sha256_hex(br#"{"amount":100}"#));
        // Known vector: SHA-256 of 32 zero bytes.
        assert_eq!(
            salted_hash(&[0; 32], b""),
            "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
        );
    }

    #[test]
    fn integers_beyond_2_pow_53_are_carried_as_doubles() {
        // JCS (RFC 8785 §3.2.2.3) writes every number as an IEEE 754 double,
        // so a captured integer beyond ±2^53 comes back as its nearest
        // double. The signature still verifies (signer and verifier
        // canonicalize alike), but the captured value is not exact.
        let k = key(12);
        let mut receipt = receipt_for(&k);
        receipt.arguments = Some(json!({"n": 9007199254740993_i64}));
        let signed = sign(receipt, &k).unwrap();
        assert!(signed.to_json().contains(r#"{"n":9007199254740992}"#), "{}", signed.to_json());
        let back = reparse(&signed);
        assert_eq!(back.receipt.arguments, Some(json!({"n": 9007199254740992_i64})));
        assert_eq!(verify(&back, &k.verifying_key()), Ok(Vouched::BySignature));
    }

    /// Changes one member of the receipt object (chosen by index).
    fn tamper(receipt: &mut Value, field: usize) {
        let r = receipt.as_object_mut().unwrap();
        let names: Vec<String> = r.keys().cloned().collect();
        let name = &names[field % names.len()];
        let slot = r.get_mut(name).unwrap();
        *slot = match slot.take() {
            Value::String(s) => Value::String(format!("{s}x")),
            Value::Number(n) => json!(n.as_u64().unwrap() + 1),
            Value::Array(mut a) => {
                a.push(json!("extra.rule"));
                Value::Array(a)
            }
            Value::Object(mut m) => {
                let first = m.keys().next().unwrap().clone();
                m.insert(first, json!("changed"));
                Value::Object(m)
            }
            Value::Null => {
                json!({"id": "ap-x", "approver": "mallory", "decided_at": "2026-01-01T00:00:00Z"})
            }
            Value::Bool(b) => Value::Bool(!b),
        };
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any changed field — every member but `v`, which has its own
        /// error — fails with the signature error after a round trip
        /// through the wire form.
        #[test]
        fn any_changed_field_breaks_the_signature(field in 0usize..64, null_approval in any::<bool>()) {
            let k = key(9);
            let mut receipt = receipt_for(&k);
            if null_approval {
                receipt.approval = None;
            }
            let signed = sign(receipt, &k).unwrap();
            let mut value: Value = serde_json::from_str(&signed.to_json()).unwrap();
            let names: Vec<String> = value["receipt"].as_object().unwrap().keys().cloned().collect();
            prop_assume!(names[field % names.len()] != "v");
            tamper(&mut value["receipt"], field);
            let back = LoggedReceipt::from_json(value.to_string().as_bytes(), JsonLimits::default()).unwrap();
            prop_assert_ne!(&back, &signed);
            let is_bad_signature = matches!(verify(&back, &k.verifying_key()), Err(ReceiptError::BadSignature { .. }));
            prop_assert!(is_bad_signature);
        }

        /// The hand-written canonical form is JCS: byte for byte what two
        /// independent canonicalizers write, for any strings (quotes,
        /// controls, non-ASCII, astral), with and without the optional
        /// members and captured values (floats included).
        #[test]
        fn canonical_bytes_are_jcs(texts in proptest::collection::vec("\\PC{0,12}|[\"\\\\\u{0}-\u{1f}\u{7f}-\u{a0}\u{2028}\u{1F600}]{0,6}", 8), with in any::<(bool, bool, bool)>(), float in -1e300f64..1e300) {
            let k = key(12);
            let mut r = receipt_for(&k);
            r.caller = texts[0].clone();
            r.tool = texts[1].clone();
            r.reason = texts[2].clone();
            r.rules = vec![texts[3].clone(), texts[4].clone()];
            r.issued_at = texts[5].clone();
            if with.0 {
                r.approval = Some(ApprovalRef { approver: texts[6].clone(), decided_at: texts[7].clone(), id: "ap".into() });
            } else {
                r.approval = None;
                r.operation = None;
                r.result_hash = None;
            }
            if with.1 {
                r.arguments = Some(json!({texts[0].clone(): float, "b": [1, 2.5, texts[1].clone()], "a": {"z": null, "y": true}}));
            }
            if with.2 {
                r.result = Some(json!([float, texts[2].clone(), {"\u{1F600}": 1, "\u{e9}": 2, "e": 3}]));
            }
            r.identity = match (with.0, with.1) {
                (true, _) => Some(UpstreamIdentity { mode: "assertion".into(), audience: Some(texts[6].clone()), credential_sha256: Some("c4".repeat(32)), subject: Some(texts[7].clone()) }),
                (false, true) => Some(UpstreamIdentity { mode: "shared".into(), audience: None, credential_sha256: None, subject: None }),
                (false, false) => None,
            };
            let mine = r.canonical_bytes();
            prop_assert_eq!(&mine, &serde_json_canonicalizer::to_vec(&r).unwrap());
            prop_assert_eq!(&mine, &serde_jcs::to_vec(&serde_json::to_value(&r).unwrap()).unwrap());
            let signed = sign(r, &k).unwrap();
            prop_assert_eq!(leaf_bytes(&signed), serde_json_canonicalizer::to_vec(&signed).unwrap());
        }

        /// A flipped byte in the signature never verifies.
        #[test]
        fn any_flipped_signature_byte_fails(index in 0usize..64, bit in 0u8..8) {
            let k = key(10);
            let mut signed = sign(receipt_for(&k), &k).unwrap();
            let mut raw = STANDARD.decode(signed.signature.as_ref().unwrap()).unwrap();
            raw[index] ^= 1 << bit;
            signed.signature = Some(STANDARD.encode(&raw));
            let is_bad_signature = matches!(verify(&signed, &k.verifying_key()), Err(ReceiptError::BadSignature { .. }));
            prop_assert!(is_bad_signature);
        }

        /// Captured argument values survive the wire form exactly and
        /// verify, within I-JSON's exact integer range (see
        /// `integers_beyond_2_pow_53_are_carried_as_doubles`).
        #[test]
        fn captured_values_round_trip(entries in proptest::collection::btree_map("[a-z]{1,6}", -(1i64 << 53)..=(1i64 << 53), 0..6)) {
            let k = key(11);
            let arguments: Value = entries.iter().map(|(name, n)| (name.clone(), json!(n))).collect::<serde_json::Map<_, _>>().into();
            let mut receipt = receipt_for(&k);
            receipt.arguments_hash = salted_value_hash(&[3; 32], &arguments);
            receipt.arguments = Some(arguments);
            let signed = sign(receipt, &k).unwrap();
            let back = reparse(&signed);
            prop_assert_eq!(&back, &signed);
            prop_assert_eq!(verify(&back, &k.verifying_key()), Ok(Vouched::BySignature));
        }
    }
}
