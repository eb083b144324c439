//! `[receipts]`: the receipt log's section of the config (the log itself is
//! `log/`): its origin, when checkpoints are signed, what receipts hold,
//! where the log is published and who may read it, and its witnesses.

use serde::Deserialize;

/// `[receipts]`: every decision and outcome is a receipt, a leaf of the
/// log; checkpoints sign the log's root, and so every receipt they cover.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiptsConfig {
    /// The log's origin: the first line of every checkpoint and the name of
    /// its signing keys. Keep it unique per log (e.g. `toolgate.example.com/prod`).
    pub origin: String,
    /// Sign a checkpoint once this many receipts are not yet covered by one.
    pub(crate) checkpoint_every: u64,
    /// …and at most this long (ms) after a receipt is appended: the most a
    /// receipt waits to be vouched for by a signed checkpoint.
    /// (`checkpoint_interval_ms` is its former name.)
    #[serde(alias = "checkpoint_interval_ms")]
    pub(crate) checkpoint_ms: u64,
    /// Sign each receipt on its own as well (Ed25519), so it verifies before
    /// a checkpoint covers it. Off by default: one signature per call is
    /// the largest cost of a receipt, and the checkpoint vouches for it
    /// within `checkpoint_ms`.
    pub(crate) sign_each: bool,
    /// Put the full arguments and result values in receipts, not only their
    /// salted hashes. Off by default: receipts leave the host in bundles.
    pub(crate) capture_values: bool,
    /// Where the log is published for whoever holds an answer (this
    /// gateway's `https://HOST/log/`, or a mirror): each answer's receipt
    /// names it. Unset: answers name their receipts without it.
    pub log_url: Option<String>,
    /// Who may read the log served at `/log/` (C2SP tlog-tiles):
    /// `approvers` (a credential with the approver role), `public` (anyone:
    /// receipts hold salted hashes, never values, but they do name callers,
    /// tenants and tools), or `off`.
    pub log_access: LogAccess,
    /// Witnesses each new checkpoint is submitted to (c2sp.org/tlog-witness);
    /// their cosignatures are served with the checkpoint.
    pub witnesses: Vec<WitnessConfig>,
}

/// One witness of the log: where it takes checkpoints and its key.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WitnessConfig {
    /// Its submission prefix (`POST URL/add-checkpoint`).
    pub url: String,
    /// Its cosigner vkey (what `toolgate witness serve` prints).
    pub vkey: String,
}

/// Who may read the log at `/log/`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogAccess {
    /// Credentials with the approver role.
    #[default]
    Approvers,
    /// Anyone who can reach the listener.
    Public,
    /// Not served.
    Off,
}

impl Default for ReceiptsConfig {
    fn default() -> Self {
        Self {
            origin: "toolgate.local/log".into(),
            checkpoint_every: 1000,
            checkpoint_ms: 1000,
            sign_each: false,
            capture_values: false,
            log_url: None,
            log_access: LogAccess::default(),
            witnesses: Vec::new(),
        }
    }
}
