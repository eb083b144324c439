//! The receipt log, running (`ReceiptLog`): it holds the signing keys
//! (`keys`), drafts receipts for the record stage, and signs checkpoints —
//! every `checkpoint_every` receipts, every `checkpoint_ms`, at start
//! (covering what a crash left uncovered) and at shutdown — then hands each
//! to the witnesses (`cosigning`). It is built from the parts beside it,
//! which take what they need as values and know nothing of it: the archive
//! it signs for (`archive_before`), and the log as published (`published`).
//!
//! The gateway keeps the tree's right edge (`merkle::Frontier`) in memory:
//! a checkpoint reads only the leaves appended since the last one. With
//! replicas on one PostgreSQL ledger each keeps its own frontier over the
//! shared log; two checkpoints of one size are one row.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;
use toolgate_core::merkle::Frontier;
use toolgate_core::note::Checkpoint;
use toolgate_core::operation::{Operation, OperationState};
use toolgate_core::receipt::build::{Event, Subject, build};
use toolgate_core::receipt::{self, Draft, Receipt};
use toolgate_ledger::{Ledger, StoredCheckpoint, ToolDefinition};

use toolgate_core::{Clock, Entropy};

use super::archive::{self, Archive, Archived};
use super::cosigning::Witnesses;
use super::keys::LogKeys;
use super::published::{Kept, Published};
use crate::catalog::ExposedTool;
use crate::log_config::ReceiptsConfig;

/// How many leaves a start reads at a time to rebuild the frontier.
const LOAD_CHUNK: u64 = 50_000;

/// The receipt log of this process: its signing keys, the tree's frontier,
/// and the checkpointer.
pub struct ReceiptLog {
    pub(crate) keys: LogKeys,
    pub(crate) config: ReceiptsConfig,
    /// Where the log's archived ranges are.
    pub archive: Archive,
    ledger: Arc<dyn Ledger>,
    /// The tree as last checkpointed by this process: its frontier, and the
    /// size of the last checkpoint signed (or found).
    tree: Mutex<(Frontier, u64)>,
    uncovered: AtomicU64,
    wake: Notify,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    /// Definition hashes already in the ledger (`export --pack` reads them).
    remembered: std::sync::Mutex<HashSet<String>>,
    /// Full tiles of the published log above level 0 (`published`).
    kept: Kept,
    /// The log's witnesses and their newest cosigned checkpoint.
    pub(crate) witnesses: Witnesses,
}

impl ReceiptLog {
    /// Records the key history in the ledger and rebuilds the frontier
    /// (from the archive's, when the log was archived, and the leaves since).
    pub(crate) async fn open(
        keys: LogKeys,
        config: ReceiptsConfig,
        archive: Archive,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> anyhow::Result<Arc<Self>> {
        for key in keys.all() {
            ledger
                .add_log_key(key)
                .await
                .map_err(|e| anyhow::anyhow!("recording the signing key in the ledger: {e}"))?;
        }
        let size = ledger.log_size().await?;
        let mut frontier = match ledger.archived().await? {
            Some(a) => Frontier::from_parts(a.before, a.frontier)
                .map_err(|e| anyhow::anyhow!("the ledger's archive record: {e}"))?,
            None => Frontier::new(),
        };
        while frontier.size() < size {
            let to = (frontier.size() + LOAD_CHUNK).min(size);
            for leaf in ledger.leaf_hashes(frontier.size(), to).await? {
                frontier.push(leaf);
            }
        }
        let last = ledger.checkpoint(None).await?.map_or(0, |c| c.size);
        let uncovered = AtomicU64::new(size - last.min(size));
        let remembered = std::sync::Mutex::new(HashSet::new());
        let witnesses = Witnesses::new(&config.witnesses, archive.dir().parent())?;
        Ok(Arc::new(Self {
            keys,
            config,
            archive,
            ledger,
            tree: Mutex::new((frontier, last)),
            uncovered,
            wake: Notify::new(),
            clock,
            entropy,
            remembered,
            kept: Default::default(),
            witnesses,
        }))
    }

    /// The log of `config`'s state dir, with its keys (created on first use).
    pub async fn open_configured(
        config: &crate::config::Config,
        ledger: Arc<dyn Ledger>,
        sources: &crate::sources::Sources,
    ) -> anyhow::Result<Arc<Self>> {
        let keys = LogKeys::load_or_create(
            &config.state_dir(),
            &config.receipts.origin,
            sources.clock.as_ref(),
            sources.entropy.as_ref(),
        )?;
        Self::open(
            keys,
            config.receipts.clone(),
            Archive::in_state_dir(&config.state_dir()),
            ledger,
            sources.clock.clone(),
            sources.entropy.clone(),
        )
        .await
    }

    /// The ledger the log is kept in.
    pub(crate) fn ledger(&self) -> &dyn Ledger {
        self.ledger.as_ref()
    }

    /// The log as published (C2SP tlog-tiles): what `/log/` serves and a
    /// witness is sent proofs from.
    pub(crate) fn published(&self) -> Published<'_> {
        Published { archive: &self.archive, ledger: self.ledger(), kept: &self.kept }
    }

    fn kid(&self) -> &str {
        self.keys.receipt.kid()
    }

    /// Signs a pack's manifest with the current receipt key.
    pub fn sign_manifest(&self, manifest: &[u8]) -> toolgate_core::pack::ManifestSignature {
        toolgate_core::pack::sign_manifest(&self.keys.receipt, manifest)
    }

    /// A fresh secret salt for one call's salted hashes.
    pub(crate) fn salt(&self) -> [u8; 32] {
        self.entropy.bytes32()
    }

    /// `receipt` under the current key, to be sealed (and, with
    /// `receipts.sign_each`, signed) once the ledger places it.
    pub(crate) fn draft(
        &self,
        mut receipt: Receipt,
        salt: [u8; 32],
        asked: Option<String>,
    ) -> Draft {
        receipt.kid = self.kid().to_string();
        Draft {
            receipt,
            salt,
            asked,
            key: self.keys.receipt.clone(),
            sign_each: self.config.sign_each,
            placement: receipt::Placement::tracked(),
        }
    }

    /// Keeps the definition a receipt names by hash, once per process.
    pub(crate) async fn remember_definition(&self, tool: &ExposedTool) {
        if self
            .remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&tool.definition_sha256)
        {
            return;
        }
        let definition = ToolDefinition {
            sha256: tool.definition_sha256.clone(),
            server: tool.server.clone(),
            tool: tool.subject().into_owned(),
            definition: toolgate_core::proposal::canonical_json(&tool.tool.definition),
        };
        match self.ledger.add_tool_definitions(vec![definition], self.clock.now_ms()).await {
            Ok(()) => drop(
                self.remembered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tool.definition_sha256.clone()),
            ),
            // Only the pack misses it; the call and its receipts go on.
            Err(e) => {
                tracing::warn!(target: "toolgate::log", tool = %tool.exposed_name, error = %e, "cannot record a tool definition")
            }
        }
    }

    /// The receipt of an operator's or a reconciler's settlement of `op`.
    pub fn settlement(
        &self,
        op: &Operation,
        state: OperationState,
        by: &str,
        outcome: Option<&str>,
    ) -> Draft {
        let salt = self.salt();
        let arguments_hash = receipt::salted_value_hash(&salt, &op.arguments);
        let subject = Subject {
            issued_at_ms: self.clock.now_ms(),
            tenant: &op.key.tenant,
            caller: &op.caller,
            server: &op.key.server,
            tool: &op.key.tool,
            tool_definition_sha256: "",
            proposal_sha256: &op.proposal_sha256,
            decision: None,
            policy_version: "",
            operation: Some(receipt::OperationRef {
                key: op.key.value.clone(),
                state: state.as_str().into(),
            }),
            salt: &salt,
            arguments_hash: &arguments_hash,
            captured: self.config.capture_values.then_some(&op.arguments),
            // An operator's settlement: no server ran for it.
            sandbox: None,
            config_version: None,
            identity: None,
        };
        let result =
            outcome.map(|text| serde_json::from_str(text).unwrap_or(serde_json::Value::Null));
        self.draft(
            build(&subject, Event::Settled { state, by, result: result.as_ref() }),
            salt,
            None,
        )
    }

    /// Counts receipts appended; wakes the checkpointer every `checkpoint_every`.
    pub fn appended(&self, n: u64) {
        let every = self.config.checkpoint_every.max(1);
        let before = self.uncovered.fetch_add(n, Ordering::Relaxed);
        // Once, as the count crosses: every append past it, while the
        // checkpoint runs, would leave a wake behind for a second checkpoint
        // of a handful of receipts (twice the signing: measured, one of
        // every two checkpoints at 1,000 calls/s covered 6–8 receipts).
        if before < every && before + n >= every {
            self.wake.notify_one();
        }
    }

    /// Signs a checkpoint of the log as it is now, if it grew since the
    /// last one. Returns it, or `None` when there was nothing new.
    pub async fn checkpoint(self: &Arc<Self>) -> anyhow::Result<Option<StoredCheckpoint>> {
        let mut tree = self.tree.lock().await;
        // What is appended from now on counts toward the next checkpoint.
        self.uncovered.store(0, Ordering::Relaxed);
        let size = self.ledger.log_size().await?;
        let (frontier, last) = &mut *tree;
        if frontier.size() < size {
            for leaf in self.ledger.leaf_hashes(frontier.size(), size).await? {
                frontier.push(leaf);
            }
        }
        if size == 0 || size <= *last {
            return Ok(None);
        }
        let checkpoint = self.sign(size, frontier.root()).await?;
        // Another replica may have signed this size already: one row either way.
        self.ledger.add_checkpoint(checkpoint.clone()).await?;
        *last = size;
        tracing::debug!(target: "toolgate::log", size, "checkpoint signed");
        Ok(Some(checkpoint))
    }

    /// A checkpoint of the log at `size` with `root`, signed by the log's keys.
    async fn sign(
        self: &Arc<Self>,
        size: u64,
        root: toolgate_core::merkle::Hash,
    ) -> anyhow::Result<StoredCheckpoint> {
        let body = Checkpoint::new(&self.keys.origin, size, root)
            .map_err(|e| anyhow::anyhow!("checkpoint: {e}"))?;
        // ML-DSA-65 signing takes a while: off the workers that serve calls.
        let log = self.clone();
        let note = tokio::task::spawn_blocking(move || {
            body.sign(&[&log.keys.ed25519, &log.keys.ml_dsa_65])
        })
        .await?
        .map_err(|e| anyhow::anyhow!("signing a checkpoint: {e}"))?;
        Ok(StoredCheckpoint { size, root, note, created_ms: self.clock.now_ms() })
    }

    /// The checkpoint of the log at exactly `size` (an archive's), whose root
    /// the caller computed: the ledger's, or one signed and recorded now. A
    /// recorded one with another root is a fork, refused.
    pub(crate) async fn checkpoint_at(
        self: &Arc<Self>,
        size: u64,
        root: toolgate_core::merkle::Hash,
    ) -> anyhow::Result<StoredCheckpoint> {
        if let Some(had) = self.ledger.checkpoint(Some(size)).await? {
            if had.root != root {
                anyhow::bail!(
                    "the ledger's checkpoint of size {size} has another root than its leaves: the log is damaged; run `toolgate log verify`"
                );
            }
            return Ok(had);
        }
        let checkpoint = self.sign(size, root).await?;
        self.ledger.add_checkpoint(checkpoint.clone()).await?;
        Ok(checkpoint)
    }

    /// `toolgate log archive`: archives the log's receipts before `before`
    /// (`archive::run`), the archive's checkpoint signed by this log.
    pub async fn archive_before(
        self: &Arc<Self>,
        before: u64,
        now_ms: i64,
    ) -> anyhow::Result<Archived> {
        archive::run(&self.archive, self.ledger(), before, now_ms, async |size, root| {
            self.checkpoint_at(size, root).await
        })
        .await
    }

    /// Checkpoints every interval or when woken, until `cancel`; then once more.
    pub(crate) fn spawn(self: &Arc<Self>, cancel: CancellationToken) {
        let log = self.clone();
        let interval = Duration::from_millis(self.config.checkpoint_ms.max(10));
        tokio::spawn(async move {
            loop {
                let stop = tokio::select! {
                    _ = tokio::time::sleep(interval) => false,
                    _ = log.wake.notified() => false,
                    _ = cancel.cancelled() => true,
                };
                match log.checkpoint().await {
                    // Witnesses are asked beside the checkpointer, never in its way.
                    Ok(Some(signed)) if log.witnesses.any() => {
                        let log = log.clone();
                        tokio::spawn(async move {
                            log.witnesses.submit(&log.published(), &signed).await
                        });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(target: "toolgate::log", error = %format!("{e:#}"), "cannot sign a checkpoint; will retry")
                    }
                }
                if stop {
                    break;
                }
            }
        });
    }
}
