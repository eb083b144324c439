//! RFC 8785, the JSON Canonicalization Scheme (JCS): the one canonicalizer.
//! A `Value`'s JCS is written here (`canonical_json`); a JSON text's is
//! written as it is read (`jcs_scan::canonical_json_text`). Both, and the
//! proposal's own bytes, are written by the writers here — a string, a
//! number, an object's members in order — so JCS is written one way. The
//! public paths are `proposal::canonical_json` and `canonical_json_text`.

use serde_json::Value;

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

/// The largest integer magnitude JCS (and I-JSON, RFC 7493) represents
/// exactly: numbers are canonicalized as IEEE 754 doubles.
pub const MAX_EXACT_INTEGER: u64 = 1 << 53;

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
