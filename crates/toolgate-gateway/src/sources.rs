//! Where the gateway takes the time and its randomness from: the system's,
//! or fixed ones (golden receipts, stage tests). One value, handed to
//! everything that needs either, so nothing reads them on its own.

use std::sync::Arc;

use toolgate_core::{Clock, Entropy, SystemClock, SystemEntropy};

/// The clock and the source of randomness.
#[derive(Clone)]
pub struct Sources {
    /// What "now" is.
    pub clock: Arc<dyn Clock>,
    /// Salts, identifiers, key seeds and nonces.
    pub entropy: Arc<dyn Entropy>,
}

impl Sources {
    /// The wall clock and the OS's CSPRNG.
    pub fn system() -> Self {
        Self { clock: Arc::new(SystemClock), entropy: Arc::new(SystemEntropy::default()) }
    }
}
