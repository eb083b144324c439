//! Fuzz targets: each a function from untrusted bytes to nothing, over one
//! library entry point, that panics when an invariant of that entry point
//! breaks. AFL++ drives them (`scripts/fuzz TARGET SECONDS`, through the
//! `toolgate-fuzz` binary); the tests run them over the seeds and the saved
//! corpora (`fuzz/corpus/TARGET`, `fuzz/regressions/TARGET`) on every CI, so
//! a crash once found stays fixed.
//!
//! Beyond "no panic, no hang", each target checks what its parser promises:
//! strict JSON accepts only what serde_json reads the same way; a signed
//! note or a bundle verifies only if it is one we signed; a sealed state
//! opens only if we sealed it; a refusal never echoes the value it refuses.

mod targets;

pub use targets::bundle::genuine_bundle_verifies;
pub use targets::edge::answer as edge_answer;
pub use targets::{TARGETS, Target, seeds};

/// Runs `target` on `data`; panics on a broken invariant.
pub fn run(target: Target, data: &[u8]) {
    match target {
        Target::Json => targets::json::run(data),
        Target::Edge => targets::edge::run(data),
        Target::Schema => targets::schema::run(data),
        Target::Seal => targets::seal::run(data),
        Target::Note => targets::note::run(data),
        Target::Bundle => targets::bundle::run(data),
        Target::Config => targets::config::run(data),
        Target::Egress => targets::egress::run(data),
        Target::Sse => targets::sse::run(data),
    }
}
