//! The leaf hashes of the receipts this process sealed lately, so that a
//! checkpoint does not decode again the rows it sealed a moment ago.
//!
//! Rebuilding a leaf from its compact row and hashing it took 3.2–3.5 ms of
//! CPU per 1,000 receipts: at 1,000 calls/s, a burst once a second on the
//! core that serves the calls, and most of the calls over 5 ms that were
//! left once the signed checkpoint's sync was off the writer
//! (docs/BENCHMARKS.md, sixth round).
//!
//! A hash is used only for the very row it was sealed into: the row read
//! back must have the remembered index, salt and body (a checksum of it).
//! A row rolled back and its index reused, a row written by another
//! process, or one remembered no longer is decoded as before; a receipt's
//! leaf is a function of its body and index alone (`StoredReceipt::from_row`),
//! so a match gives the same hash a decode would. The slots are a fixed
//! ring, allocated at the first receipt: memory stays bounded.

use std::sync::Mutex;

use toolgate_core::merkle::Hash;

use super::checksum::fnv1a;

/// How many receipts are remembered: four checkpoints' worth at the
/// default `checkpoint_every` (1,000).
const SLOTS: usize = 4096;

#[derive(Default)]
pub struct RecentLeaves {
    slots: Mutex<Vec<Option<Slot>>>,
}

#[derive(Clone, Copy)]
struct Slot {
    index: u64,
    salt: [u8; 32],
    body: u64,
    leaf: Hash,
}

impl RecentLeaves {
    /// Remembers that the row sealed at `index` with `salt` and `body` has the leaf hash `leaf`.
    pub fn remember(&self, index: u64, salt: &[u8; 32], body: &[u8], leaf: Hash) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.is_empty() {
            slots.resize(SLOTS, None);
        }
        slots[index as usize % SLOTS] = Some(Slot { index, salt: *salt, body: fnv1a(body), leaf });
    }

    /// The leaf hash of the row at `index` with `salt` and `body`, if it is the very row remembered.
    pub fn recall(&self, index: u64, salt: &[u8; 32], body: &[u8]) -> Option<Hash> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = slots.get(index as usize % SLOTS).copied().flatten()?;
        (slot.index == index && slot.salt == *salt && slot.body == fnv1a(body)).then_some(slot.leaf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_very_row_remembered_is_recalled() {
        let recent = RecentLeaves::default();
        assert_eq!(recent.recall(7, &[1; 32], b"body"), None, "nothing remembered yet");
        recent.remember(7, &[1; 32], b"body", [9; 32]);
        assert_eq!(recent.recall(7, &[1; 32], b"body"), Some([9; 32]));
        assert_eq!(
            recent.recall(7, &[2; 32], b"body"),
            None,
            "another salt: another receipt at a reused index"
        );
        assert_eq!(recent.recall(7, &[1; 32], b"bodY"), None, "another body");
        assert_eq!(
            recent.recall(7 + SLOTS as u64, &[1; 32], b"body"),
            None,
            "another index in the same slot"
        );
        recent.remember(7 + SLOTS as u64, &[3; 32], b"later", [8; 32]);
        assert_eq!(recent.recall(7, &[1; 32], b"body"), None, "overwritten by a later receipt");
        assert_eq!(recent.recall(7 + SLOTS as u64, &[3; 32], b"later"), Some([8; 32]));
    }
}
