//! The proposal: "this exact call" as one canonical byte string. RFC 8785
//! (JCS) canonical JSON of {server, tool, arguments}; its SHA-256 is the
//! identity approvals, the ledger and receipts bind to.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::jcs::write_string;
pub use crate::jcs::{MAX_EXACT_INTEGER, canonical_json};
pub use crate::jcs_scan::canonical_json_text;

/// The one hasher: lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
    }
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// 64 hex digits (either case) as 32 bytes; `None` for anything else.
pub fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// One proposed call, "this exact call": what approvals, operations and
/// receipts bind to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposal {
    /// The upstream server's configured name.
    pub server: String,
    /// The tool's name on that upstream (not the namespaced exposed name).
    pub tool: String,
    /// The call's arguments, as the caller sent them.
    pub arguments: Value,
    /// SHA-256 of the canonical {server, tool, arguments}.
    pub sha256: String,
    /// The JCS bytes of `arguments` alone (receipts hash them salted).
    #[serde(skip)]
    pub canonical_arguments: String,
}

impl Proposal {
    /// The proposal of calling `tool` on `server` with `arguments`.
    pub fn new(server: &str, tool: &str, arguments: Value) -> Self {
        // JCS of {arguments, server, tool} is its members' JCS in that
        // (sorted) order, so the arguments are canonicalized once for both.
        let canonical_arguments = canonical_json(&arguments);
        let mut canonical = format!("{{\"arguments\":{canonical_arguments},\"server\":");
        write_string(server, &mut canonical);
        canonical.push_str(",\"tool\":");
        write_string(tool, &mut canonical);
        canonical.push('}');
        Self {
            server: server.into(),
            tool: tool.into(),
            sha256: sha256_hex(canonical.as_bytes()),
            arguments,
            canonical_arguments,
        }
    }
}

/// Integers in `arguments` beyond ±2^53, by JSON pointer. Canonicalization
/// would round them, so two calls differing only there would share one
/// proposal hash — one approval or operation key would cover both. They
/// are refused (send such values as strings) rather than hashed inexactly.
pub fn inexact_integers(arguments: &Value) -> Vec<crate::schema::Violation> {
    fn walk(v: &Value, path: &mut String, out: &mut Vec<crate::schema::Violation>) {
        match v {
            Value::Number(n) => {
                let big = n.as_u64().is_some_and(|u| u > MAX_EXACT_INTEGER)
                    || n.as_i64().is_some_and(|i| i.unsigned_abs() > MAX_EXACT_INTEGER);
                if big {
                    let message = "an integer beyond ±2^53 cannot be canonicalized exactly (RFC 8785, I-JSON); send it as a string".to_string();
                    out.push(crate::schema::Violation {
                        path: if path.is_empty() { "/".into() } else { path.clone() },
                        message,
                    });
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    crate::pointer::push_index(path, i);
                    walk(item, path, out);
                    path.truncate(len);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let len = path.len();
                    crate::pointer::push_key(path, k);
                    walk(item, path, out);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(arguments, &mut String::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_jcs_would_round_are_found_by_path() {
        let args: Value = serde_json::from_str(r#"{"amount": 9007199254740993, "ok": 9007199254740992, "list": [1, -9007199254740993], "a/b": {"x": 18446744073709551615}}"#).unwrap();
        // The reason: JCS rounds these, so distinct calls would share a hash.
        let a = Proposal::new("s", "t", json!({"amount": 9007199254740993u64}));
        let b = Proposal::new("s", "t", json!({"amount": 9007199254740992u64}));
        assert_eq!(a.sha256, b.sha256, "JCS rounds beyond 2^53 (this is why they are refused)");
        let paths: Vec<String> = inexact_integers(&args).into_iter().map(|v| v.path).collect();
        assert_eq!(paths.len(), 3);
        for p in ["/a~1b/x", "/amount", "/list/1"] {
            assert!(paths.contains(&p.to_string()), "{p} in {paths:?}");
        }
        assert!(
            inexact_integers(&json!({"q": 8, "f": 1.5e300, "s": "9007199254740993"})).is_empty()
        );
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_the_proposal() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "é"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"\u00e9","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(Proposal::new("s", "t", a).sha256, Proposal::new("s", "t", b).sha256);
    }

    #[test]
    fn any_changed_byte_changes_the_proposal() {
        let base = Proposal::new("parts", "raise_parts_order", json!({"quantity": 2}));
        assert_ne!(
            base.sha256,
            Proposal::new("parts", "raise_parts_order", json!({"quantity": 3})).sha256
        );
        assert_ne!(
            base.sha256,
            Proposal::new("parts2", "raise_parts_order", json!({"quantity": 2})).sha256
        );
        assert_ne!(
            base.sha256,
            Proposal::new("parts", "raise_parts_orders", json!({"quantity": 2})).sha256
        );
        assert_eq!(base.sha256.len(), 64);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
        /// The proposal's bytes built from its members' JCS are the JCS of
        /// the whole object (names with escapes and non-ASCII included).
        #[test]
        fn the_proposal_is_the_jcs_of_the_whole_object(
            server in "\\PC{0,8}|[\"\\\\\u{0}-\u{1f}\u{7f}\u{2028}\u{1F600}]{0,4}",
            tool in "\\PC{0,8}",
            keys in proptest::collection::vec("\\PC{0,6}", 0..5),
            n in -1e15f64..1e15,
        ) {
            let arguments = Value::Object(keys.iter().enumerate().map(|(i, k)| (k.clone(), if i % 2 == 0 { json!(n) } else { json!([k, i, {"é": null}]) })).collect());
            let whole = canonical_json(&json!({ "server": server, "tool": tool, "arguments": arguments }));
            let p = Proposal::new(&server, &tool, arguments.clone());
            proptest::prop_assert_eq!(p.sha256, sha256_hex(whole.as_bytes()));
            proptest::prop_assert_eq!(p.canonical_arguments, canonical_json(&arguments));
        }
    }

    #[test]
    fn canonical_form_matches_rfc_8785() {
        // Numbers in their shortest form, keys sorted by UTF-16 code units.
        let v: Value =
            serde_json::from_str(r#"{"b":1.0,"a":1e2,"\u20ac":0,"c":"\u000f"}"#).unwrap();
        assert_eq!(canonical_json(&v), "{\"a\":100,\"b\":1,\"c\":\"\\u000f\",\"€\":0}");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
