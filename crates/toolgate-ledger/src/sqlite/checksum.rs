//! The checksum of the store's own bytes: a sequence file's frames (see
//! `sequence`), and the bodies of the rows this process sealed lately (see
//! `recent`). It imports nothing, so both may use it.

/// A checksum against torn writes (not against an attacker: the file is
/// the ledger's own, owner-only, and every row it holds is checked against
/// the signed log when verified).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}
