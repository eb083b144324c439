//! The dictionary of digests (`receipt::compact::Digests`) a store keeps for
//! its rows: the numbers it has committed in its `digests` table, learned by
//! reading the table, and the digests rows met that it has no number for
//! yet, which its next transaction adds.
//!
//! A number is learned only by reading it from the table outside the
//! transaction that added it — so only once committed. A row (a sequence
//! frame included) is encoded with learned numbers alone: no crash can leave
//! a row naming a number the table does not hold. A row that meets a new
//! digest keeps it whole; the rows after the next commit name it.

use std::collections::BTreeSet;
use std::sync::{Mutex, RwLock};

use toolgate_core::receipt::compact::{self, Digests};
use toolgate_core::receipt::{LoggedReceipt, ReceiptError};

#[derive(Default)]
pub(crate) struct Dictionary {
    known: RwLock<Digests>,
    /// Met in rows, not numbered yet: for the next transaction to add.
    pending: Mutex<BTreeSet<Vec<u8>>>,
    /// Digests were added since the table was last read (PostgreSQL reads
    /// it again before its next batch, not before every one).
    stale: std::sync::atomic::AtomicBool,
}

impl Dictionary {
    /// `logged` as a row, naming the digests this dictionary has numbers for;
    /// those it lacks are remembered for the next transaction to add.
    pub fn encode(&self, logged: &LoggedReceipt) -> Vec<u8> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let body = compact::encode(logged, &known);
        let missing = known.missing(&logged.receipt);
        drop(known);
        if !missing.is_empty() {
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).extend(missing);
        }
        body
    }

    pub fn decode(&self, body: &[u8], log_index: u64) -> Result<LoggedReceipt, ReceiptError> {
        compact::decode(body, log_index, &self.known.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The digests to add, taken: a transaction that fails to commit them
    /// loses nothing, since the next row that meets one remembers it again.
    pub fn take_pending(&self) -> Vec<Vec<u8>> {
        let taken: Vec<Vec<u8>> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
                .into_iter()
                .collect();
        if !taken.is_empty() {
            self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        taken
    }

    /// Whether digests were added since the table was last read (then
    /// cleared: the caller reads it now).
    pub fn stale(&self) -> bool {
        self.stale.swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// The largest number learned: a store reads only those above it.
    pub fn max_id(&self) -> u64 {
        self.known.read().unwrap_or_else(|p| p.into_inner()).max_id()
    }

    /// Learns committed numbers.
    pub fn learn(&self, entries: Vec<(u64, Vec<u8>)>) {
        if entries.is_empty() {
            return;
        }
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        for (id, raw) in entries {
            known.insert(id, raw);
        }
    }
}
