use super::*;
use crate::bundle::tests::{Keys, bundle, bundle_key, keys};

#[test]
fn a_manifest_verifies_unchanged_and_fails_changed_or_under_another_key() {
    let k = keys(5);
    let manifest = br#"{"registry.json": "ab"}"#;
    let sig = sign_manifest(&k.receipt, manifest);
    assert_eq!(verify_manifest(&[bundle_key(&k)], manifest, &sig), Ok(()));
    assert!(
        verify_manifest(&[bundle_key(&k)], br#"{"registry.json": "cd"}"#, &sig)
            .unwrap_err()
            .contains("changed")
    );
    let other = keys(6);
    assert!(
        verify_manifest(&[bundle_key(&other)], manifest, &sig).unwrap_err().contains("not among")
    );
    let forged =
        ManifestSignature { kid: sig.kid.clone(), ..sign_manifest(&other.receipt, manifest) };
    assert!(verify_manifest(&[bundle_key(&k)], manifest, &forged).is_err());
}

const DEFINITION: &str = r#"{"name": "get_ticket", "inputSchema": {"type": "object"}}"#;
const SCHEMA: &str = "entity Caller; entity Tool; action call_tool appliesTo { principal: [Caller], resource: [Tool] };";
const POLICY: &str = "permit (principal, action == Action::\"call_tool\", resource);";

/// `MANIFEST.json` over every other file, and `MANIFEST.sig` by `k`.
fn sign(files: &mut Files, k: &Keys) {
    files.retain(|name, _| !name.starts_with("MANIFEST."));
    let manifest: serde_json::Map<String, Value> =
        files.iter().map(|(name, bytes)| (name.clone(), Value::from(sha256_hex(bytes)))).collect();
    let manifest = serde_json::to_vec_pretty(&manifest).unwrap();
    let signature = serde_json::to_vec(&sign_manifest(&k.receipt, &manifest)).unwrap();
    files
        .extend([("MANIFEST.json".to_string(), manifest), ("MANIFEST.sig".to_string(), signature)]);
}

/// A pack as `toolgate export --pack` writes one: two receipts that name
/// DEFINITION under the empty policy set, the files, a signed manifest.
/// (The pack's checks read the receipts; their signatures are the bundle's.)
fn pack() -> (Files, Bundle, Keys) {
    let k = keys(7);
    let mut b = bundle(&k, 3, &[0, 2], &[&k.ed, &k.pq]);
    let sha = sha256_hex(canonical_json(&serde_json::from_str(DEFINITION).unwrap()).as_bytes());
    for e in &mut b.receipts {
        e.receipt.receipt.tool_definition_sha256 = sha.clone();
        e.receipt.receipt.policy_version = PolicyEngine::empty().version().into();
    }
    let mut files = Files::from([
        ("bundle.json".into(), b.to_json().into_bytes()),
        ("registry.json".into(), b"{}".to_vec()),
        (format!("tools/{sha}.json"), DEFINITION.into()),
    ]);
    sign(&mut files, &k);
    (files, b, k)
}

fn checked(files: &Files, b: &Bundle) -> Report {
    let mut report = Report::default();
    verify(files, b, &mut report);
    report
}

/// The one failed check: its name and why, also the report's one failure.
fn failed(files: &Files, b: &Bundle) -> (&'static str, String) {
    let report = checked(files, b);
    let [failure] = report.failures.as_slice() else {
        panic!("one failure expected: {:?}", report.failures)
    };
    let last = report.checks.last().unwrap();
    assert!(!last.ok);
    assert_eq!(failure.to_string(), format!("malformed bundle: pack: {}", last.detail));
    (last.name, last.detail.clone())
}

#[test]
fn a_pack_as_exported_verifies_with_its_policy_or_without_one() {
    let (mut files, mut b, k) = pack();
    let report = checked(&files, &b);
    assert!(report.ok(), "{:?}", report.failures);
    let lines: Vec<_> = report.checks.iter().map(|c| (c.name, c.ok, c.detail.as_str())).collect();
    let empty = PolicyEngine::empty().version().to_string();
    assert_eq!(
        lines,
        [
            (
                "tool definitions",
                true,
                "2 receipt(s) name a definition the pack holds under its hash"
            ),
            (
                "policy set",
                true,
                format!("version {empty}: in force for 2 of 2 receipt(s)").as_str()
            ),
        ]
    );
    let version = PolicyEngine::load(POLICY, SCHEMA).unwrap().version().to_string();
    b.receipts[1].receipt.receipt.policy_version = version.clone();
    files.insert("policy/policy.cedar".into(), POLICY.into());
    files.insert("policy/policy.cedarschema".into(), SCHEMA.into());
    sign(&mut files, &k);
    let report = checked(&files, &b);
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(
        report.checks[1].detail,
        format!("version {version}: in force for 1 of 2 receipt(s)")
    );
}

#[test]
fn a_missing_unsigned_or_changed_manifest_fails() {
    let (files, b, k) = pack();
    let without = |name: &str| {
        files
            .iter()
            .filter(|(n, _)| *n != name)
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect::<Files>()
    };
    assert_eq!(
        failed(&without("MANIFEST.json"), &b),
        ("pack manifest", "MANIFEST.json is missing".into())
    );
    assert_eq!(
        failed(&without("MANIFEST.sig"), &b),
        ("pack manifest", "MANIFEST.sig is missing or not a manifest signature".into())
    );
    let mut garbled = files.clone();
    garbled.insert("MANIFEST.json".into(), b"{".to_vec());
    assert_eq!(failed(&garbled, &b), ("pack manifest", "MANIFEST.json is not JSON".into()));
    // A file rewritten and re-hashed in the manifest: the signature no longer covers it.
    let mut rehashed = files.clone();
    rehashed.insert("registry.json".into(), br#"{"x": 1}"#.to_vec());
    let signature = rehashed["MANIFEST.sig"].clone();
    sign(&mut rehashed, &k);
    rehashed.insert("MANIFEST.sig".into(), signature);
    assert_eq!(
        failed(&rehashed, &b),
        (
            "pack manifest",
            "MANIFEST.sig: the signature does not verify: the manifest was changed".into()
        )
    );
    // Signed by a key that is not the bundle's.
    let mut foreign = files.clone();
    sign(&mut foreign, &keys(8));
    let (name, why) = failed(&foreign, &b);
    assert_eq!(name, "pack manifest");
    assert!(why.contains("which is not among the bundle's keys"), "{why}");
}

#[test]
fn a_file_unlike_its_manifest_a_missing_definition_or_another_policy_fails() {
    let (files, b, k) = pack();
    let mut changed = files.clone();
    changed.insert("registry.json".into(), br#"{"x": 1}"#.to_vec());
    assert_eq!(
        failed(&changed, &b),
        ("pack manifest", "registry.json does not match its manifest hash".into())
    );
    let sha = b.receipts[0].receipt.receipt.tool_definition_sha256.clone();
    let mut undefined = files.clone();
    undefined.remove(&format!("tools/{sha}.json"));
    sign(&mut undefined, &k);
    assert_eq!(
        failed(&undefined, &b),
        (
            "tool definitions",
            format!("receipt 0 names tool definition {sha}, which the pack does not hold")
        )
    );
    let mut other = files.clone();
    other.insert("policy/policy.cedar".into(), POLICY.into());
    other.insert("policy/policy.cedarschema".into(), SCHEMA.into());
    sign(&mut other, &k);
    let version = PolicyEngine::load(POLICY, SCHEMA).unwrap().version().to_string();
    assert_eq!(
        failed(&other, &b),
        ("policy set", format!("version {version} is the policy of none of the 2 receipt(s)"))
    );
    other.insert("policy/policy.cedar".into(), b"permit (".to_vec());
    sign(&mut other, &k);
    let (name, why) = failed(&other, &b);
    assert_eq!(name, "policy set");
    assert!(why.starts_with("the pack's policy does not load: "), "{why}");
}
