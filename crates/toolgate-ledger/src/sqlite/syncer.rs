//! Durable commits without holding the ledger while the disk syncs.
//!
//! The writer commits every transaction with `synchronous=NORMAL`: SQLite
//! writes the WAL and does not sync it (it still syncs a new WAL's header
//! before its first frame, so no crash can corrupt the file). After a batch
//! with a durable request, the writer lets go of the connection and of the
//! sequence, and only then syncs the WAL (`fdatasync`, which makes every
//! frame written so far durable) and answers the batch. Meanwhile a read's
//! receipt is sequenced and a short request runs on its caller's thread as
//! usual: they no longer wait behind a sync they do not need. Requests that
//! queue meanwhile form the next batch, as they did while SQLite synced
//! inside its COMMIT (group commit). Measured: the signed checkpoint's
//! commit, once a second, held every call for its sync; at 1,000 calls/s
//! that was most of the calls over 5 ms (docs/BENCHMARKS.md, sixth round).
//!
//! What the others may now see before it is durable: a durable batch's rows
//! are visible from its COMMIT, a sync before they are power-safe. Nothing
//! acts on them meanwhile: every effect (a dispatch, a consumed approval)
//! waits for a durable write of its own, and that write's sync covers every
//! commit before it. A signed checkpoint is read only through a sync (see
//! `SqliteLedger::read_synced`), so none is handed out that power loss could
//! take back.
//!
//! A failed sync leaves the disk's state unknown (the kernel may have
//! dropped the pages it could not write, and a later sync would not say
//! so), so the ledger stops: the batch is answered with the error, and so
//! is every later request, until toolgate is restarted.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::{LedgerError, Result};

/// Why the ledger stopped taking requests, once a sync failed.
pub type Stopped = Arc<OnceLock<String>>;

/// The WAL of one ledger, to sync.
pub struct Wal {
    file: File,
    path: PathBuf,
    stopped: Stopped,
}

impl Wal {
    /// The WAL of the ledger at `db` (it exists: the ledger was opened and
    /// migrated). The writer's connection keeps it open for the ledger's
    /// life, so SQLite never deletes it under this descriptor (a rewind
    /// truncates or overwrites the same file).
    pub fn open(db: &Path, stopped: Stopped) -> Result<Self> {
        let mut name = db.as_os_str().to_owned();
        name.push("-wal");
        let path = PathBuf::from(name);
        let file = File::open(&path).map_err(|e| LedgerError::Store(format!("cannot open the ledger's WAL {}: {e}", path.display())))?;
        Ok(Self { file, path, stopped })
    }

    /// Makes every commit so far durable; after a failure, stops the ledger.
    pub fn sync(&self) -> std::result::Result<(), String> {
        self.file.sync_data().map_err(|e| {
            let why = format!("the ledger's disk failed to sync its log ({}: {e}); what was committed since the last sync may be lost on power failure. The ledger takes no more requests: check the disk, then restart toolgate", self.path.display());
            tracing::error!(target: "toolgate::ledger", %why);
            self.stopped.get_or_init(|| why).clone()
        })
    }
}
