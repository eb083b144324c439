//! The one clock. Everything that needs "now" takes a `&dyn Clock` (as
//! rustls takes a `TimeProvider`), so a test can fix the instant and a call
//! can read it once where one instant is meant. Nothing else in toolgate
//! reads the system time, the wall clock or the monotonic one (`instant`).

use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch, as toolgate stores every instant.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Now on the monotonic clock, for how long something took or may still
    /// take (a call's duration, a hold's end), which the wall clock's jumps
    /// must not stretch or cut. Every clock reads the system's: a fixed
    /// date still lets real time pass for timers.
    fn instant(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock that reads what it was set to: for tests and golden files.
#[derive(Debug, Default)]
pub struct FixedClock(AtomicI64);

impl FixedClock {
    /// A clock standing at `ms`.
    pub fn new(ms: i64) -> Self {
        Self(AtomicI64::new(ms))
    }

    /// Moves the clock by `ms` (negative goes back).
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_clock_moves_only_when_told() {
        let c = FixedClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(250);
        assert_eq!(c.now_ms(), 1_250);
        assert!(SystemClock.now_ms() > 1_700_000_000_000);
    }
}
