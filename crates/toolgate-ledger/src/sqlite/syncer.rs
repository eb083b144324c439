//! Durable commits without holding the ledger while the disk syncs.
//!
//! The writer commits every transaction with `synchronous=NORMAL`: SQLite
//! writes the WAL and does not sync it (it still syncs a new WAL's header
//! before its first frame, so no crash can corrupt the file). A batch with
//! a durable request is handed here once committed; this thread syncs the
//! WAL file (`fdatasync`, which makes every frame written so far durable)
//! and only then answers it. Meanwhile the writer and the callers' threads
//! go on: a read's receipt, a run's count and the next batch no longer wait
//! behind a sync they do not need. Measured: the signed checkpoint's commit,
//! once a second, held every call for its sync; at 1,000 calls/s that was
//! most of the calls over 5 ms (docs/BENCHMARKS.md, sixth round).
//!
//! Batches that queue while a sync runs share the next one (group commit).
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
use std::sync::{Arc, OnceLock, mpsc};

use super::{Committed, answer_all};
use crate::{LedgerError, Result};

/// Why the ledger stopped taking requests, once a sync failed.
pub type Stopped = Arc<OnceLock<String>>;

/// Starts the syncer of the ledger at `db` (its WAL exists: the ledger was
/// opened and migrated); it ends when the returned sender is dropped.
pub fn spawn(db: &Path, stopped: Stopped) -> Result<mpsc::Sender<Committed>> {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    let path = PathBuf::from(name);
    // The writer's connection keeps the WAL file open for the ledger's
    // life, so SQLite never deletes it under this descriptor (a rewind
    // truncates or overwrites the same file).
    let wal = File::open(&path).map_err(|e| {
        LedgerError::Store(format!("cannot open the ledger's WAL {}: {e}", path.display()))
    })?;
    let (tx, rx) = mpsc::channel::<Committed>();
    std::thread::Builder::new()
        .name("toolgate-ledger-syncer".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batches = vec![first];
                batches.extend(rx.try_iter());
                let synced = wal.sync_data().map_err(|e| {
                    let why = format!(
                        "the ledger's disk failed to sync its log ({}: {e}); what was committed \
                            since the last sync may be lost on power failure. The ledger takes no \
                            more requests: check the disk, then restart toolgate",
                        path.display()
                    );
                    tracing::error!(target: "toolgate::ledger", %why);
                    stopped.get_or_init(|| why).clone()
                });
                for (committed, answers) in batches {
                    answer_all((committed.and_then(|()| synced.clone()), answers));
                }
            }
        })
        .map_err(|e| LedgerError::Store(format!("cannot start the ledger syncer: {e}")))?;
    Ok(tx)
}
