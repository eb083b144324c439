//! The proposal: "this exact call" as one canonical byte string. RFC 8785
//! (JCS) canonical JSON of {server, tool, arguments}; its SHA-256 is the
//! identity approvals, the ledger and receipts bind to.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The one canonicalizer: RFC 8785 JSON Canonicalization Scheme.
///
/// Written directly over the value: every result a call returns goes
/// through it, and `serde_json_canonicalizer` (which boxes a writer per
/// token and re-parses every key) took 17 µs for a 1.75 KB ticket — 4–5 %
/// of a call's CPU in the gateway benchmark. Tests hold this to
/// `serde_json_canonicalizer` and to `serde_jcs` on arbitrary JSON.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Members sorted by their names' UTF-16 code units (§3.2.3);
            // that differs from byte order only past the BMP.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| utf16_order(a.0, b.0));
            out.push('{');
            for (i, (name, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(name, out);
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
    }
}

/// Names in the order of their UTF-16 code units (§3.2.3). That is their
/// bytes' order except where a character past the BMP meets one in
/// U+E000..U+FFFF, so only the first differing characters are compared as
/// UTF-16.
fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    let same = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    // Back to the start of the character the names differ in.
    let start =
        (0..=same).rev().find(|&i| a.is_char_boundary(i) && b.is_char_boundary(i)).unwrap_or(0);
    match (a[start..].chars().next(), b[start..].chars().next()) {
        (Some(x), Some(y)) if x != y => {
            let (mut ux, mut uy) = ([0u16; 2], [0u16; 2]);
            let (ux, uy): (&[u16], &[u16]) = (x.encode_utf16(&mut ux), y.encode_utf16(&mut uy));
            ux.cmp(uy)
        }
        _ => a.len().cmp(&b.len()),
    }
}

/// The JCS text of a JSON text, written as it is read: no value is built,
/// and a name given twice keeps its last value (as parsing it into a
/// `Value` would). A read's receipt hashes its answer this way. Most text
/// takes the quick way (`jcs_scan`: what JCS writes as it stands is copied);
/// the rest, and whatever is not JSON, is read by serde_json's parser.
/// For the bench's 1.1 KB answer: 3.7 µs through the parser, where building
/// a `Value` and writing its JCS took 5.1–5.8 µs.
pub fn canonical_json_text(text: &str) -> serde_json::Result<String> {
    if let Some(out) = crate::jcs_scan::canonical(text) {
        return Ok(out);
    }
    let mut out = String::with_capacity(text.len());
    let mut de = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Canon(&mut out), &mut de)?;
    de.end()?;
    Ok(out)
}

/// Writes the JCS of the value it is handed to its string.
struct Canon<'o>(&'o mut String);

impl<'de> serde::de::DeserializeSeed<'de> for Canon<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Canon<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_bool<E>(self, b: bool) -> Result<(), E> {
        self.0.push_str(if b { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E>(self, i: i64) -> Result<(), E> {
        write_number(&i.into(), self.0);
        Ok(())
    }
    fn visit_u64<E>(self, u: u64) -> Result<(), E> {
        write_number(&u.into(), self.0);
        Ok(())
    }
    fn visit_f64<E>(self, f: f64) -> Result<(), E> {
        match serde_json::Number::from_f64(f) {
            Some(n) => write_number(&n, self.0),
            None => self.0.push_str("null"),
        }
        Ok(())
    }
    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        write_string(s, self.0);
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let empty = self.0.len();
        while seq.next_element_seed(Canon(self.0))?.is_some() {
            self.0.push(',');
        }
        if self.0.len() > empty {
            self.0.pop(); // the last element's comma
        }
        self.0.push(']');
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Each member's value is written once, into one scratch string, and
        // placed by its name's order afterwards.
        let mut scratch = String::new();
        let mut members: Vec<(std::borrow::Cow<'de, str>, std::ops::Range<usize>)> = Vec::new();
        while let Some(Name(name)) = map.next_key()? {
            let start = scratch.len();
            map.next_value_seed(Canon(&mut scratch))?;
            members.push((name, start..scratch.len()));
        }
        write_members(members, &scratch, self.0);
        Ok(())
    }
}

/// An object's JCS from its members as read: each name, and where its
/// value's JCS lies in `scratch`. They are put in their names' order, and of
/// a name given twice the last value stays (as a parse into a `Value` keeps).
pub(crate) fn write_members(
    mut members: Vec<(std::borrow::Cow<'_, str>, std::ops::Range<usize>)>,
    scratch: &str,
    out: &mut String,
) {
    // Stable, so of a name given twice the last stays last.
    members.sort_by(|a, b| utf16_order(&a.0, &b.0));
    out.push('{');
    let mut first = true;
    for (i, (name, range)) in members.iter().enumerate() {
        if members.get(i + 1).is_some_and(|next| next.0 == *name) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_string(name, out);
        out.push(':');
        out.push_str(&scratch[range.clone()]);
    }
    out.push('}');
}

/// A member's name, borrowed from the text when it has no escapes.
struct Name<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Name<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(s.into()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(s.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A number as ECMAScript prints the IEEE 754 double it denotes (§3.2.2.3):
/// integers beyond 2^53 round, as they do in JavaScript.
pub(crate) fn write_number(n: &serde_json::Number, out: &mut String) {
    match (n.as_i64(), n.as_f64()) {
        // Exact integers print as themselves.
        (Some(i), _) if i.unsigned_abs() <= MAX_EXACT_INTEGER => {
            use std::fmt::Write as _;
            let _ = write!(out, "{i}");
        }
        (_, Some(f)) if f.is_finite() => out.push_str(ryu_js::Buffer::new().format_finite(f)),
        // serde_json holds no NaN or infinity; a u64 always has an f64.
        _ => out.push_str("null"),
    }
}

/// A string with exactly the escapes of §3.2.2.2: `"`, `\\`, and the
/// control characters (the five short forms, else `\u00xx`); nothing else.
pub(crate) fn write_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

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

/// The largest integer magnitude JCS (and I-JSON, RFC 7493) represents
/// exactly: numbers are canonicalized as IEEE 754 doubles.
pub const MAX_EXACT_INTEGER: u64 = 1 << 53;

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
