//! The one source of randomness: salts, identifiers, key seeds and nonces
//! all come from an injected `Entropy`, so a test can make every receipt
//! byte-for-byte repeatable.

use sha2::{Digest, Sha256};

/// Fills buffers with unpredictable bytes.
pub trait Entropy: Send + Sync {
    /// Fills `buf` entirely.
    fn fill(&self, buf: &mut [u8]);

    /// A fresh identifier: `prefix` and 128 bits in hex.
    fn id(&self, prefix: &str) -> String {
        let mut bytes = [0u8; 16];
        self.fill(&mut bytes);
        let mut out = String::with_capacity(prefix.len() + 32);
        out.push_str(prefix);
        for b in bytes {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// 32 fresh bytes (a salt or a key seed).
    fn bytes32(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        self.fill(&mut out);
        out
    }
}

/// The operating system's CSPRNG (through aws-lc).
#[derive(Default)]
pub struct SystemEntropy(aws_lc_rs::rand::SystemRandom);

impl Entropy for SystemEntropy {
    fn fill(&self, buf: &mut [u8]) {
        aws_lc_rs::rand::SecureRandom::fill(&self.0, buf).expect("system randomness");
    }
}

/// A repeatable stream (SHA-256 of a seed and a counter): for tests only.
/// It is not secret — anyone with the seed knows every byte.
pub struct SeededEntropy {
    seed: [u8; 32],
    counter: std::sync::Mutex<u64>,
}

impl SeededEntropy {
    /// The stream named by `seed`.
    pub fn new(seed: [u8; 32]) -> Self {
        Self { seed, counter: std::sync::Mutex::new(0) }
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) {
        let mut counter = self.counter.lock().unwrap_or_else(|p| p.into_inner());
        for chunk in buf.chunks_mut(32) {
            let block = Sha256::new().chain_update(self.seed).chain_update(counter.to_be_bytes()).finalize();
            chunk.copy_from_slice(&block[..chunk.len()]);
            *counter += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_stream_repeats_and_never_stands_still() {
        let (a, b) = (SeededEntropy::new([7; 32]), SeededEntropy::new([7; 32]));
        assert_eq!(a.id("op_"), b.id("op_"));
        assert_ne!(a.bytes32(), a.bytes32());
        let id = SystemEntropy::default().id("apr_");
        assert_eq!(id.len(), 4 + 32);
        assert_ne!(id, SystemEntropy::default().id("apr_"));
    }
}
