//! Every target over its seeds, its saved corpus (`fuzz/corpus/TARGET`:
//! inputs AFL++ found new paths with, minimised) and its regressions
//! (`fuzz/regressions/TARGET`: crashes and hangs once found, each fixed).
//! No AFL here: the same functions, run once per input.

use std::path::Path;
use std::time::Instant;

use toolgate_fuzz::{Target, run, seeds};

fn replay(name: &str) {
    let target = Target::named(name).expect("a target");
    let mut inputs: Vec<(String, Vec<u8>)> =
        seeds(target).into_iter().enumerate().map(|(i, s)| (format!("seed {i}"), s)).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for folder in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(folder).join(name)) else { continue };
        let mut files: Vec<_> =
            entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        for path in files {
            inputs.push((
                path.display().to_string(),
                std::fs::read(&path).expect("reading an input"),
            ));
        }
    }
    let started = Instant::now();
    for (what, data) in &inputs {
        let outcome = std::panic::catch_unwind(|| run(target, data));
        assert!(outcome.is_ok(), "{name}: {what} breaks the target");
    }
    eprintln!("{name}: {} inputs in {:?}", inputs.len(), started.elapsed());
}

#[test]
fn json() {
    replay("json");
}

#[test]
fn edge() {
    // The seeds reach the pipeline and the upstreams, not only the
    // transport's refusals: a read answers with parts, a refusal says why.
    let seeds = seeds(Target::Edge);
    let (status, _, body) = toolgate_fuzz::edge_answer(&seeds[1]).expect("a request");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"part_no\"") && body.contains("\"isError\":false"), "{body}");
    let (_, _, body) = toolgate_fuzz::edge_answer(&seeds[2]).expect("a request");
    assert!(body.contains("\"action\":\"correct\""), "{body}");
    let (_, _, body) = toolgate_fuzz::edge_answer(&seeds[4]).expect("a request");
    assert!(body.contains("prohibited") || body.contains("refused"), "{body}");
    let without_token = String::from_utf8(seeds[0].clone())
        .unwrap()
        .replace(&format!("Authorization: Bearer {}\n", "fuzz-agent-token-0123456789abcdef"), "");
    assert_eq!(toolgate_fuzz::edge_answer(without_token.as_bytes()).expect("a request").0, 401);
    replay("edge");
}

#[test]
fn schema() {
    replay("schema");
}

#[test]
fn seal() {
    replay("seal");
}

#[test]
fn note() {
    replay("note");
}

#[test]
fn bundle() {
    assert!(
        toolgate_fuzz::genuine_bundle_verifies(),
        "the bundle seed must verify, or mutating it finds nothing"
    );
    replay("bundle");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn egress() {
    replay("egress");
}

/// The invariants can fail: each target refuses a planted violation.
#[test]
fn a_forged_state_and_a_tampered_bundle_are_caught_by_the_targets_not_passed() {
    // A state changed by one character must open to nothing; the target's
    // own check would panic if it opened.
    for seed in seeds(Target::Seal) {
        let mut altered = seed.clone();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        run(Target::Seal, &altered);
    }
    // A bundle with one receipt's decision changed does not verify.
    let bundle = String::from_utf8(seeds(Target::Bundle).remove(0)).unwrap();
    assert!(bundle.contains("\"allow\""));
    let tampered = bundle.replacen("\"allow\"", "\"deny\"", 1);
    let parsed =
        toolgate_core::bundle::Bundle::from_json(tampered.as_bytes()).expect("still a bundle");
    assert!(!toolgate_core::bundle::verify(&parsed, &Default::default()).ok());
}

#[test]
fn sse() {
    replay("sse");
}
