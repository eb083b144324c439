//! The receipt log, a room of its own, in three parts kept apart (the map
//! and the life of a receipt: `README.md` beside this file).
//!
//! 1. What the running gateway does with the log, lowest first (each file
//!    imports only those above it in this list):
//!    - `keys`: the signing keys and their history, in `STATE_DIR/keys/`;
//!    - `archive`: sealed ranges of receipts moved out of the ledger into
//!      tlog-tiles files, and the log read whole (archive, then ledger);
//!    - `published`: the log as published (C2SP tlog-tiles), what `/log/`
//!      serves (`downstream::log_tiles`) and witnesses are sent proofs from;
//!    - `cosigning`: the log's side of witnessing, submitting checkpoints
//!      and keeping the cosignatures that verify;
//!    - `receipt_log`: `ReceiptLog`, built from the parts above: drafts
//!      receipts, signs checkpoints, archives, hands checkpoints to the
//!      witnesses;
//!    - `evidence`: bundles for a third party, under a covering checkpoint.
//! 2. `readers`: the verifier (`toolgate verify --answer`) and the monitor
//!    (`toolgate log watch`), which read a published log as anyone would.
//! 3. `witness_server`: `toolgate witness serve`, a witness a third party
//!    runs for the logs it is given.
//!
//! The readers and the witness server import nothing of part 1. The log's
//! section of the config, `[receipts]`, is `crate::log_config`, beside this
//! folder as every section is beside its code.

pub mod archive;
pub(crate) mod cosigning;
pub mod evidence;
pub mod keys;
pub(crate) mod published;
pub mod readers;
pub mod receipt_log;
pub mod witness_server;
