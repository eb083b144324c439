//! The egress scan alone, on the guards benchmark's 4-KiB ticket update
//! (prose with dates, order and part numbers, a phone number, an ISBN and a
//! UUID; no marker): `cargo bench -p toolgate-core --bench egress`. Prints
//! the p50 and p99 of 50 rounds of 2,000 scans. To compare two versions of
//! the scanner, run it on each, alternated (docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

use toolgate_core::egress;

// The guards benchmark's argument object, shared with it.
mod fixtures {
    pub mod four_kib;
}
use fixtures::four_kib::four_kib;

const ROUNDS: usize = 50;
const PER_ROUND: usize = 2_000;

fn main() {
    let args = four_kib();
    assert!(egress::scan(&args, &[]).markers.is_empty(), "the object holds no marker");
    let mut times: Vec<Duration> = Vec::with_capacity(ROUNDS * PER_ROUND);
    for _ in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            let started = Instant::now();
            std::hint::black_box(egress::scan(std::hint::black_box(&args), &[]));
            times.push(started.elapsed());
        }
    }
    times.sort();
    let at = |q: f64| {
        times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e6
    };
    println!(
        "egress scan of {} bytes: p50 {:.2} µs, p99 {:.2} µs",
        serde_json::to_string(&args).unwrap().len(),
        at(0.5),
        at(0.99)
    );
}
