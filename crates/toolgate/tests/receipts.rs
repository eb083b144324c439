//! The verifiable log, end to end through the binary: after a `toolgate
//! demo` run, `export --since 0` then `verify` proves every receipt; any
//! flipped byte, another kid, a stripped PQ signature or a checkpoint of
//! another log each fail with their own reason; `log verify` passes; an
//! independent Python verifier (the `cryptography` package) agrees; a pack
//! verifies; `replay` lists what another policy would change.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

mod demo_common;
use demo_common::{python, toolgate};

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// One demo run shared by the tests (it takes a while): its state dir.
fn demo() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = toolgate().arg("demo").arg("--state").arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        dir
    })
    .path()
}

fn config() -> PathBuf {
    demo().join("toolgate.toml")
}

fn export(out: &Path) {
    let o = toolgate()
        .args(["export", "--since", "0", "--out"])
        .arg(out)
        .arg("--config")
        .arg(config())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

fn verify(path: &Path, extra: &[&str]) -> Output {
    toolgate().arg("verify").arg(path).args(extra).output().unwrap()
}

fn kid() -> String {
    let history: Value =
        serde_json::from_slice(&std::fs::read(demo().join("state/keys/keys.json")).unwrap())
            .unwrap();
    history["current"]["kid"].as_str().unwrap().to_string()
}

#[test]
fn an_exported_demo_log_verifies_offline_and_lists_each_proof() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    export(&bundle);
    let out = verify(&bundle, &["--require-pq", "--expected-kid", &kid()]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    for check in [
        "receipt signatures",
        "kid consistency",
        "inclusion",
        "checkpoint Ed25519",
        "checkpoint ML-DSA-65",
        "signer pinned",
    ] {
        assert!(
            said.lines().any(|l| l.starts_with("ok") && l.contains(check)),
            "`{check}` not proven:\n{said}"
        );
    }
    // Every call of the demo has its receipts: refusals included.
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let receipts = b["receipts"].as_array().unwrap();
    assert!(receipts.len() >= 40, "{} receipts", receipts.len());
    let statuses: Vec<&str> = receipts
        .iter()
        .map(|e| e["receipt"]["receipt"]["result_status"].as_str().unwrap())
        .collect();
    for status in ["refused", "ok", "pending", "awaiting_approval", "applied"] {
        assert!(statuses.contains(&status), "no `{status}` receipt in {statuses:?}");
    }
    for (i, e) in receipts.iter().enumerate() {
        let r = &e["receipt"]["receipt"];
        assert_eq!(r["log_index"], i as u64);
        assert_eq!(r["kid"], kid());
        // Values only as salted hashes (capture is off by default).
        assert!(r.get("arguments").is_none() && r.get("result").is_none());
    }
    // Against a later checkpoint than the first one covering a receipt,
    // and refused against one that does not cover it.
    let one = dir.path().join("one.json");
    let size = receipts.len();
    let o = toolgate()
        .args(["export", "--receipt", "3", "--checkpoint", &size.to_string(), "--out"])
        .arg(&one)
        .arg("--config")
        .arg(config())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(verify(&one, &["--require-pq"]).status.success());
    let o = toolgate()
        .args(["export", "--receipt", "3", "--checkpoint", "2", "--out"])
        .arg(&one)
        .arg("--config")
        .arg(config())
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).contains("checkpoint"), "{}", text(&o));
    // The whole log, from the ledger.
    let log = toolgate().args(["log", "verify", "--config"]).arg(config()).output().unwrap();
    assert!(log.status.success() && text(&log).contains("log verified"), "{}", text(&log));
    // The independent verifier agrees.
    let py = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/verify_bundle.py"))
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(py.status.success(), "{}", text(&py));
    // Receipts are not signed each by default: the checkpoint vouches for every one.
    assert!(
        receipts
            .iter()
            .all(|e| e["receipt"].get("sig").is_none() && e["receipt"]["receipt"]["v"] == 3)
    );
    // Format 3: each entry carries the key that opens its commitment in the log.
    assert!(
        receipts.iter().all(|e| e["opening"].as_str().is_some_and(|k| k.len() == 64)),
        "{receipts:?}"
    );
    assert!(
        text(&py).contains(&format!(
            "{0} inclusion proof(s) verified; 0 receipt signature(s), {0} vouched for by the \
                checkpoint",
            receipts.len()
        )),
        "{}",
        text(&py)
    );
}

#[test]
fn any_flipped_byte_of_a_receipt_fails_and_names_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    export(&bundle);
    let good = std::fs::read(&bundle).unwrap();
    // The bytes of one whole receipt entry (from its `"receipt": {` to its proof).
    let s = String::from_utf8(good.clone()).unwrap();
    let start = s.find("\"receipts\"").unwrap()
        + s[s.find("\"receipts\"").unwrap()..].find("\"receipt\"").unwrap();
    let end = start + s[start..].find("\"inclusion\"").unwrap();
    let step = ((end - start) / 40).max(1);
    let mut tried = 0;
    for at in (start..end).step_by(step) {
        if good[at].is_ascii_whitespace() {
            continue;
        }
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        let tampered = dir.path().join("tampered.json");
        std::fs::write(&tampered, &bad).unwrap();
        let out = verify(&tampered, &[]);
        let said = text(&out);
        assert!(
            !out.status.success(),
            "flipping byte {at} ({:?}) went unnoticed:\n{said}",
            good[at] as char
        );
        assert!(
            said.contains("NOT VERIFIED:") || said.contains("malformed"),
            "flipping byte {at}: no named failure:\n{said}"
        );
        // The Python verifier rejects it too (or cannot even read it).
        let py = Command::new(python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/verify_bundle.py"))
            .arg(&tampered)
            .output()
            .unwrap();
        assert!(!py.status.success(), "python accepted byte {at} flipped:\n{}", text(&py));
        tried += 1;
    }
    assert!(tried >= 20, "only {tried} positions tried");
}

#[test]
fn another_kid_a_stripped_pq_signature_and_a_foreign_checkpoint_each_fail_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    export(&bundle);
    let other = "0123456789abcdef0123456789abcdef";
    let out = verify(&bundle, &["--expected-kid", other]);
    assert!(!out.status.success());
    assert!(text(&out).contains("NOT VERIFIED: signer_pinned"), "{}", text(&out));
    // The ML-DSA-65 line stripped from the checkpoint: fine unless required.
    let mut b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let note = b["checkpoint"].as_str().unwrap().to_string();
    let kept: Vec<&str> =
        note.split_inclusive('\n').filter(|l| !(l.starts_with('—') && l.len() > 200)).collect();
    assert_eq!(
        kept.len(),
        note.split_inclusive('\n').count() - 1,
        "exactly the long PQ line removed"
    );
    b["checkpoint"] = Value::String(kept.concat());
    let stripped = dir.path().join("stripped.json");
    std::fs::write(&stripped, serde_json::to_vec(&b).unwrap()).unwrap();
    assert!(verify(&stripped, &[]).status.success());
    let out = verify(&stripped, &["--require-pq"]);
    assert!(
        !out.status.success() && text(&out).contains("NOT VERIFIED: checkpoint_ml_dsa_65"),
        "{}",
        text(&out)
    );
    // A proof for another tree: the receipts against an earlier checkpoint's tree size.
    let mut b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let last = b["receipts"].as_array().unwrap().len() - 1;
    let proof = b["receipts"][0]["inclusion"].clone();
    b["receipts"][last]["inclusion"] = proof;
    let other_tree = dir.path().join("other-tree.json");
    std::fs::write(&other_tree, serde_json::to_vec(&b).unwrap()).unwrap();
    let out = verify(&other_tree, &[]);
    assert!(
        !out.status.success() && text(&out).contains("NOT VERIFIED: inclusion"),
        "{}",
        text(&out)
    );
    // The bundle's keys swapped for another key under the same kid.
    let mut b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    b["keys"][0]["ed25519"] = Value::String(
        b["keys"][0]["ed25519"]
            .as_str()
            .unwrap()
            .replace("toolgate.local/log", "other.example/log"),
    );
    let swapped = dir.path().join("swapped.json");
    std::fs::write(&swapped, serde_json::to_vec(&b).unwrap()).unwrap();
    let out = verify(&swapped, &[]);
    assert!(!out.status.success() && text(&out).contains("kid_consistency"), "{}", text(&out));
}

#[test]
fn a_pack_verifies_and_replay_lists_what_another_policy_changes() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    let o = toolgate()
        .args(["export", "--since", "0", "--pack"])
        .arg(&pack)
        .arg("--config")
        .arg(config())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = verify(&pack, &["--require-pq"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("tool definitions") && said.contains("policy set"), "{said}");
    for f in ["policy/policy.cedar", "policy/policy.cedarschema", "registry.json", "MANIFEST.json"]
    {
        assert!(pack.join(f).exists(), "{f} missing from the pack");
    }
    let registry = std::fs::read_to_string(pack.join("registry.json")).unwrap();
    assert!(registry.contains("post_ticket_update") && !registry.contains("token"), "{registry}");
    // A changed tool definition is caught.
    let tool = std::fs::read_dir(pack.join("tools")).unwrap().next().unwrap().unwrap().path();
    let original = std::fs::read(&tool).unwrap();
    std::fs::write(&tool, String::from_utf8(original.clone()).unwrap().replacen('"', "\"x", 1))
        .unwrap();
    assert!(!verify(&pack, &[]).status.success());
    std::fs::write(&tool, original).unwrap();
    assert!(verify(&pack, &[]).status.success());

    // Rules rewritten and re-hashed in the manifest: the manifest's signature
    // fails; re-signing is not possible without the log's key. A policy that
    // no receipt was decided under fails on its own too.
    let rewrite = |file: &str, content: &str| {
        let before = (
            std::fs::read(pack.join(file)).unwrap(),
            std::fs::read(pack.join("MANIFEST.json")).unwrap(),
        );
        std::fs::write(pack.join(file), content).unwrap();
        let mut manifest: serde_json::Value = serde_json::from_slice(&before.1).unwrap();
        manifest[file] = serde_json::json!(toolgate_core::proposal::sha256_hex(content.as_bytes()));
        std::fs::write(
            pack.join("MANIFEST.json"),
            serde_json::to_string_pretty(&manifest).unwrap(),
        )
        .unwrap();
        let out = verify(&pack, &[]);
        std::fs::write(pack.join(file), before.0).unwrap();
        std::fs::write(pack.join("MANIFEST.json"), before.1).unwrap();
        out
    };
    let permissive = rewrite("policy/policy.cedar", "permit (principal, action, resource);");
    let said = text(&permissive);
    assert!(!permissive.status.success() && said.contains("MANIFEST.sig"), "{said}");
    let lenient =
        rewrite("registry.json", r#"{"tickets__export_service_records": {"class": "automatic"}}"#);
    let said = text(&lenient);
    assert!(!lenient.status.success() && said.contains("MANIFEST.sig"), "{said}");
    let signature = std::fs::read(pack.join("MANIFEST.sig")).unwrap();
    std::fs::remove_file(pack.join("MANIFEST.sig")).unwrap();
    assert!(!verify(&pack, &[]).status.success(), "an unsigned manifest proves nothing");
    std::fs::write(pack.join("MANIFEST.sig"), signature).unwrap();
    assert!(verify(&pack, &[]).status.success());
    // A pack exported after the policy changed, with no receipt decided under
    // the new one yet: its signed policy is the policy of none of them.
    let policy = demo().join("policy.cedar");
    let in_force = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(
        &policy,
        format!(
            "{in_force}\n@id(\"never\")\nforbid (principal, action, resource) when {{ false }};\n"
        ),
    )
    .unwrap();
    let later = dir.path().join("later");
    let o = toolgate()
        .args(["export", "--since", "0", "--pack"])
        .arg(&later)
        .arg("--config")
        .arg(config())
        .output()
        .unwrap();
    std::fs::write(&policy, in_force).unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = verify(&later, &[]);
    assert!(!out.status.success() && text(&out).contains("the policy of none"), "{}", text(&out));

    // The same policy: only decisions made under another version (the demo
    // withdraws a grant for a while) would change. No policy at all: the
    // policy's refusals and approvals fall back to the registry.
    let same = dir.path().join("same");
    std::fs::create_dir(&same).unwrap();
    for f in ["policy.cedar", "policy.cedarschema"] {
        std::fs::copy(demo().join(f), same.join(f)).unwrap();
    }
    let o = toolgate()
        .args(["replay", "--config"])
        .arg(config())
        .arg("--policy")
        .arg(&same)
        .output()
        .unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    let current = said.split("(policy version ").nth(1).unwrap()[..12].to_string();
    for line in said.lines().filter(|l| l.starts_with("log ")) {
        assert!(
            !line.ends_with(&format!("[decided under policy {current}]")),
            "a decision under this very policy changed: {line}"
        );
    }
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::copy(demo().join("policy.cedarschema"), empty.join("policy.cedarschema")).unwrap();
    std::fs::write(empty.join("policy.cedar"), "").unwrap();
    let o = toolgate()
        .args(["replay", "--config"])
        .arg(config())
        .arg("--policy")
        .arg(&empty)
        .output()
        .unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    let changed: u64 = said
        .split(" would change")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(changed > 0, "{said}");
    assert!(said.contains("export_service_records") || said.contains("send_notice"), "{said}");
}

/// A pack exported by the release before receipt format 2 (`d51aa94`: every
/// receipt signed, format 1), checked in as it was written: it still verifies,
/// pinned to its kid, with `toolgate verify` and the Python verifier.
#[test]
fn a_pack_of_format_1_receipts_still_verifies() {
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1/pack");
    let b: Value =
        serde_json::from_slice(&std::fs::read(pack.join("bundle.json")).unwrap()).unwrap();
    let kid = b["keys"][0]["kid"].as_str().unwrap();
    let n = b["receipts"].as_array().unwrap().len();
    assert!(
        b["receipts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["receipt"]["receipt"]["v"] == 1 && e["receipt"]["sig"].is_string())
    );
    let out = verify(&pack, &["--require-pq", "--expected-kid", kid]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("{n} receipt(s), each signed by the key its kid names")),
        "{said}"
    );
    let py = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/verify_bundle.py"))
        .arg(pack.join("bundle.json"))
        .output()
        .unwrap();
    assert!(
        py.status.success() && text(&py).contains(&format!("{n} receipt signature(s), 0 vouched")),
        "{}",
        text(&py)
    );
    // A format-1 receipt with its signature stripped is refused, not taken for format 2.
    let mut stripped = b.clone();
    stripped["receipts"][0]["receipt"].as_object_mut().unwrap().remove("sig");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stripped.json");
    std::fs::write(&file, stripped.to_string()).unwrap();
    let out = verify(&file, &[]);
    assert!(
        !out.status.success() && text(&out).contains("format-1 receipt must carry its signature"),
        "{}",
        text(&out)
    );
}
