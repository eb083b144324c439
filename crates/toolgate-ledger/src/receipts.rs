//! The receipt log (see `toolgate_core::receipt` and `merkle`): receipts
//! appended at contiguous indexes, the signed checkpoints over them, the
//! key history, the tool definitions receipts name, and the archives that
//! take old receipts out of the store.

use toolgate_core::merkle::Hash;
use toolgate_core::receipt::Draft;

use crate::{LedgerError, Result, digests};

/// One leaf of the receipt log, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReceipt {
    /// Its position in the log: indexes run contiguously from 0.
    pub log_index: u64,
    /// JCS text of the logged receipt (`{"receipt"[, "sig"]}`): the leaf's
    /// bytes. The row keeps it compactly (`receipt::compact`), or as this
    /// text when it was written before that form.
    pub logged: String,
    /// What the published log holds for it, when that is not `logged`
    /// itself: a format-3 receipt's commitment (`receipt::entry_bytes`).
    pub commitment: Option<String>,
    /// RFC 6962's leaf hash of its entry: what the log's Merkle tree is
    /// built from (computed when read: a row does not keep it).
    pub leaf_hash: Hash,
    /// Private: the secret behind the receipt's salted hashes.
    pub salt: [u8; 32],
    /// Private: the record of what was asked (the caller, the tool, the arguments and how the call was decided; JSON). Column `proposal`.
    pub asked: Option<String>,
}

impl StoredReceipt {
    /// A row as a store reads it: `body` is the compact form, or the JCS
    /// text of a row written before it; `asked` as packed with the receipt's values.
    pub(crate) fn from_row(
        log_index: u64,
        body: &[u8],
        salt: [u8; 32],
        asked: Option<String>,
        digests: &digests::Dictionary,
    ) -> Result<Self> {
        use toolgate_core::receipt::compact;
        let (logged, asked) = if body.first() == Some(&b'{') {
            // Written before the compact form, so before format 3: the
            // entry is the text itself.
            let logged = String::from_utf8(body.to_vec()).map_err(|_| {
                LedgerError::Store(format!("receipt {log_index}: its stored text is not UTF-8"))
            })?;
            return Ok(Self {
                log_index,
                commitment: None,
                leaf_hash: toolgate_core::merkle::leaf_hash(logged.as_bytes()),
                logged,
                salt,
                asked,
            });
        } else {
            let decoded = digests
                .decode(body, log_index)
                .map_err(|e| LedgerError::Store(format!("receipt {log_index}: {e}")))?;
            let asked = asked.map(|a| compact::unpack_asked(&a, &asked_refs(&decoded.receipt)));
            (decoded, asked)
        };
        Ok(Self::of(log_index, &logged, salt, asked))
    }

    /// The row of `logged` at `log_index`, its entry and leaf hash computed.
    pub fn of(
        log_index: u64,
        logged: &toolgate_core::receipt::LoggedReceipt,
        salt: [u8; 32],
        asked: Option<String>,
    ) -> Self {
        use toolgate_core::receipt;
        let text = logged.to_json();
        let commitment = (logged.receipt.v >= receipt::COMMITTED_VERSION).then(|| {
            String::from_utf8(
                receipt::entry_bytes(logged, Some(&receipt::opening_key(&salt, log_index)))
                    .expect("the key is given"),
            )
            .expect("an entry is ASCII")
        });
        let leaf_hash =
            toolgate_core::merkle::leaf_hash(commitment.as_deref().unwrap_or(&text).as_bytes());
        Self { log_index, commitment, leaf_hash, logged: text, salt, asked }
    }

    /// The bytes the published log holds for it: its commitment (format 3
    /// on), or the logged receipt itself.
    pub fn entry(&self) -> &str {
        self.commitment.as_deref().unwrap_or(&self.logged)
    }

    /// The key that opens its commitment, for a format-3 receipt.
    pub fn opening_key(&self) -> Option<[u8; 32]> {
        self.commitment
            .is_some()
            .then(|| toolgate_core::receipt::opening_key(&self.salt, self.log_index))
    }

    /// Leaf hashes of rows read in order, checked to be exactly `from..to`.
    pub(crate) fn leaf_hashes(rows: Vec<Self>, from: u64, to: u64) -> Result<Vec<Hash>> {
        let first = rows.first().map(|r| r.log_index);
        contiguous(rows.into_iter().map(|r| r.leaf_hash).collect(), first, from, to)
    }
}

/// `leaves`, read in order from the index `first`, checked to be exactly
/// the leaves `from..to` (the rows' indexes run contiguously).
pub(crate) fn contiguous(
    leaves: Vec<Hash>,
    first: Option<u64>,
    from: u64,
    to: u64,
) -> Result<Vec<Hash>> {
    if leaves.len() as u64 != to.saturating_sub(from) || first.is_some_and(|f| f != from) {
        return Err(LedgerError::Store(format!(
            "the log holds {} of the leaves {from}..{to}",
            leaves.len()
        )));
    }
    Ok(leaves)
}

/// A signed checkpoint of the log at `size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// The tree size it covers: the first `size` receipts (never more than the log holds).
    pub size: u64,
    /// The Merkle root of the log at `size`.
    pub root: Hash,
    /// The C2SP signed note.
    pub note: String,
    /// When it was recorded (ms since the Unix epoch).
    pub created_ms: i64,
}

/// An archived range of the log: its first `before` receipts, moved to
/// tlog-tiles files and verified there before their rows were removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredArchive {
    /// How many receipts are archived: a multiple of 256, never more than a checkpoint covers.
    pub before: u64,
    /// The log's root at `before`.
    pub root: Hash,
    /// The tree's right edge at `before` (`merkle::Frontier::subtrees`).
    pub frontier: Vec<Hash>,
    /// When it was archived (ms since the Unix epoch).
    pub archived_ms: i64,
}

/// A key of the history: its kid and verifier keys (signed-note vkey text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogKey {
    /// The key's id, as receipts name it; never bound to another key.
    pub kid: String,
    /// The Ed25519 verifier key.
    pub ed25519: String,
    /// The ML-DSA-65 verifier key, when the key has one.
    pub ml_dsa_65: Option<String>,
    /// When the key was created; the history is listed in this order.
    pub created_ms: i64,
}

/// A tool definition a receipt names by `tool_definition_sha256`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDefinition {
    /// The definition's hash, as receipts name it; each is stored once.
    pub sha256: String,
    /// The upstream server that offers the tool.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The definition itself, as canonical JSON text.
    pub definition: String,
}

/// The receipt log: appends receipts, reads them and their leaf hashes, and
/// keeps the checkpoints, the key history and the tool definitions; and
/// its retention, the archives that move old receipts out of the store.
#[async_trait::async_trait]
pub trait LogStore: Send + Sync {
    /// Appends receipts at the next log indexes, in order, in one
    /// transaction; returns their indexes. For receipts that attest no
    /// change of state (reads, refusals, replays): when this returns they
    /// survive a crash of the process, and they survive power loss once
    /// the next durable commit lands — any change of state, or a checkpoint
    /// (every `checkpoint_ms`), which covers them. A later commit
    /// never survives without an earlier one, so the log stays a prefix.
    async fn append_receipts(&self, drafts: Vec<Draft>) -> Result<Vec<u64>>;
    /// Up to `limit` receipts from log index `from` on, in log order (an
    /// archived receipt has no row: the first returned may come later).
    async fn receipts(&self, from: u64, limit: u64) -> Result<Vec<StoredReceipt>>;
    /// The number of receipts (the log's tree size), archived ones included.
    async fn log_size(&self) -> Result<u64>;
    /// Leaf hashes of indexes `from..to`, in order; an error when any of
    /// them is archived (the archive holds those).
    async fn leaf_hashes(&self, from: u64, to: u64) -> Result<Vec<Hash>>;
    /// The latest archive, if the log was ever archived.
    async fn archived(&self) -> Result<Option<StoredArchive>>;
    /// Records `archive`, then removes the rows of the receipts it covers,
    /// [`ARCHIVE_CHUNK`] at a time, each chunk its own short transaction;
    /// returns how many rows went. The caller has written and verified the
    /// archive's files first. Refused unless it extends the last archive, up
    /// to a checkpointed size, by whole tiles of 256. A run cut off between
    /// chunks leaves rows below the archive, which readers of the whole log
    /// take from the archive instead and the next run removes.
    async fn archive(&self, archive: StoredArchive) -> Result<u64>;
    /// Removes the checkpoints an archive covers (of sizes below the last
    /// archive's; the archive's own stays), [`ARCHIVE_CHUNK`] per short
    /// transaction; returns how many went. The archive's checkpoint signs a
    /// tree that holds each of them, and its tiles give any proof below it.
    async fn drop_covered_checkpoints(&self) -> Result<u64>;
    /// Records a signed checkpoint; false when one of that size exists.
    async fn add_checkpoint(&self, checkpoint: StoredCheckpoint) -> Result<bool>;
    /// Every checkpoint, smallest size first.
    async fn checkpoints(&self) -> Result<Vec<StoredCheckpoint>>;
    /// The checkpoint of tree size `size`, or the latest (the largest) with
    /// `None`: one row by the key, however many checkpoints there are.
    async fn checkpoint(&self, size: Option<u64>) -> Result<Option<StoredCheckpoint>>;
    /// Adds a key to the history. The same key again is a no-op; another key under a kid already
    /// recorded is refused (`LedgerError::Store`): a kid names one key forever.
    async fn add_log_key(&self, key: LogKey) -> Result<()>;
    /// The key history, oldest first (by `created_ms`, then kid).
    async fn log_keys(&self) -> Result<Vec<LogKey>>;
    /// Remembers tool definitions (a hash already there is left as it is).
    async fn add_tool_definitions(
        &self,
        definitions: Vec<ToolDefinition>,
        now_ms: i64,
    ) -> Result<()>;
    /// Every remembered tool definition, by server and tool, first remembered first.
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>>;
}

/// A draft sealed at `log_index`, as a row holds it (no leaf hash: the
/// checkpointer computes it, off the answer's path).
pub(crate) struct Row {
    /// The compact form of the logged receipt (`receipt::compact`).
    pub body: Vec<u8>,
    pub salt: [u8; 32],
    /// The record of what was asked, packed (`compact::pack_asked`).
    pub asked: Option<String>,
}

/// Seals a draft at `log_index` into the row that stores it, naming the
/// digests `digests` has numbers for.
pub(crate) fn seal(
    draft: Draft,
    log_index: u64,
    digests: &digests::Dictionary,
) -> Result<(Row, Hash)> {
    let (sealed, salt, asked) = draft
        .seal(log_index)
        .map_err(|e| LedgerError::Store(format!("cannot seal a receipt: {e}")))?;
    let asked = asked.map(|a| {
        toolgate_core::receipt::compact::pack_asked(&a, &asked_refs(&sealed.logged.receipt))
    });
    Ok((Row { body: digests.encode(&sealed.logged), salt, asked }, sealed.leaf_hash))
}

/// 32-byte hashes, concatenated, as a list.
pub(crate) fn hashes(bytes: &[u8]) -> Result<Vec<Hash>> {
    if bytes.len() % 32 != 0 {
        return Err(LedgerError::Store(format!(
            "a stored list of hashes is {} bytes, not a multiple of 32",
            bytes.len()
        )));
    }
    Ok(bytes.chunks(32).map(|h| h.try_into().expect("32 bytes")).collect())
}

/// The receipt's values its record of what was asked is packed against.
fn asked_refs(
    r: &toolgate_core::receipt::Receipt,
) -> toolgate_core::receipt::compact::AskedRefs<'_> {
    [&r.caller, &r.tenant, &r.server, &r.tool]
}

/// How many archived rows one transaction removes: removing a whole range at
/// once held SQLite's writer, and every call's receipt behind it, for a
/// tenth of a second or more under load (the soak: maxima of 128–220 ms).
pub const ARCHIVE_CHUNK: u64 = 2048;

/// Runs `step` (a removal of at most [`ARCHIVE_CHUNK`] rows, its own short
/// transaction) until it removes fewer; returns how many went in all.
pub(crate) async fn chunked<F, Fut>(step: F) -> Result<u64>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<u64>>,
{
    let mut removed = 0;
    loop {
        let n = step().await?;
        removed += n;
        if n < ARCHIVE_CHUNK {
            return Ok(removed);
        }
    }
}
