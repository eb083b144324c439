//! The egress scan alone, on the guards benchmark's 4-KiB ticket update
//! (prose with dates, order and part numbers, a phone number, an ISBN and a
//! UUID; no marker): `cargo bench -p toolgate-core --bench egress`. Prints
//! the p50 and p99 of 50 rounds of 2,000 scans. To compare two versions of
//! the scanner, run it on each, alternated (docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_core::egress;

const ROUNDS: usize = 50;
const PER_ROUND: usize = 2_000;

/// The guards benchmark's argument object (`crates/toolgate/benches/guards.rs`).
fn four_kib() -> Value {
    let visit = |i: usize| {
        json!({
            "when": format!("2026-11-{:02}T09:{:02}:00Z", 1 + i % 28, i % 60),
            "engineer": format!("engineer-{i:03}"),
            "note": format!("Visit {i}: replaced valve AC250-TV-{:04} under order PO-{:06}; the unit held 4.5 C for 40 minutes. Customer line +44 20 7946 {:04}. Manual ISBN 978-3-16-148410-0, section {}.", 2300 + i, 1000 + i, 100 + i, i % 9),
            "parts": [{"part_no": format!("AC250-TV-{:04}", 2300 + i), "quantity": i % 5 + 1}],
            "ref": "3f2b8c1e-9d4a-4f6b-8e2a-1c5d7e9f0a3b"
        })
    };
    let mut visits = Vec::new();
    let mut args = json!({"ticket_id": "SR-20031", "note": "Field report for the compressor alarm.", "visits": []});
    while serde_json::to_string(&args).unwrap().len() < 4_096 - 300 {
        visits.push(visit(visits.len()));
        args["visits"] = Value::Array(visits.clone());
    }
    args
}

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
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e6;
    println!("egress scan of {} bytes: p50 {:.2} µs, p99 {:.2} µs", serde_json::to_string(&args).unwrap().len(), at(0.5), at(0.99));
}
