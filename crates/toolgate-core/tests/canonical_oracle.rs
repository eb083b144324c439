//! Property: our one canonicalizer agrees with two independent RFC 8785
//! implementations (serde_jcs, serde_json_canonicalizer) on arbitrary JSON,
//! and a strict parse of its output gives back the same value.

use proptest::prelude::*;
use serde_json::{Map, Value};
use toolgate_core::proposal::{canonical_json, canonical_json_text};
use toolgate_core::strict_json::{JsonLimits, parse};

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-(1i64 << 54)..(1i64 << 54)).prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        // Escapes, and names ordered differently by UTF-16 and by bytes.
        "[\"\\\\/\u{0}-\u{1f}\u{7f}\u{2028}\u{e000}\u{ffff}\u{10000}\u{1f600}a-c]{0,8}"
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                "\\PC{0,6}|[\u{e000}\u{ffff}\u{10000}\u{1f600}a]{1,3}",
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #[test]
    fn agrees_with_serde_jcs(v in json()) {
        prop_assert_eq!(canonical_json(&v), serde_jcs::to_string(&v).unwrap());
    }

    #[test]
    fn agrees_with_serde_json_canonicalizer(v in json()) {
        prop_assert_eq!(canonical_json(&v), serde_json_canonicalizer::to_string(&v).unwrap());
    }

    #[test]
    fn written_from_the_text_it_is_the_values_own(v in json()) {
        let expected = canonical_json(&v);
        prop_assert_eq!(canonical_json_text(&serde_json::to_string(&v).unwrap()).unwrap(), expected.clone());
        prop_assert_eq!(canonical_json_text(&serde_json::to_string_pretty(&v).unwrap()).unwrap(), expected);
    }

    /// The same text with every character beyond ASCII, and every `/`,
    /// escaped (`\uXXXX` in upper case): none of it as JCS writes it.
    #[test]
    fn written_from_escaped_text_it_is_the_values_own(v in json()) {
        let text = ascii_escaped(&serde_json::to_string(&v).unwrap());
        prop_assert_eq!(canonical_json_text(&text).unwrap(), canonical_json(&v));
    }

    #[test]
    fn canonical_text_parses_back_to_the_same_value(v in json()) {
        let text = canonical_json(&v);
        let back = parse(text.as_bytes(), JsonLimits::sized(1 << 20, 16)).unwrap();
        prop_assert_eq!(canonical_json(&back), text);
    }
}

/// From the text: a name given twice keeps its last value, as a parse into
/// a `Value` does; escaped names and values come out unescaped where JCS
/// says so; what is not one JSON text is an error, never a hash.
#[test]
fn from_the_text_duplicates_escapes_and_errors() {
    let text = r#"{"b": [1, 2.50, -0, 1e3, {"z": null, "a": true}], "a": 1, "\u0061": 2, "c\u00e9": "\u00e9\n\u001f", "a": 3}"#;
    let value: Value = serde_json::from_str(text).unwrap();
    let canonical = canonical_json_text(text).unwrap();
    assert_eq!(canonical, canonical_json(&value));
    assert_eq!(canonical, r#"{"a":3,"b":[1,2.5,0,1000,{"a":true,"z":null}],"cé":"é\n\u001f"}"#);
    for bad in ["", "{", "[1,]", "{\"a\":1} x", "nul", "{\"a\" 1}"] {
        assert!(canonical_json_text(bad).is_err(), "{bad:?}");
    }
}

/// `text` with `/` and every character beyond ASCII escaped, as JSON
/// allows (both occur only inside strings).
fn ascii_escaped(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '/' => out.push_str("\\/"),
            c if c.is_ascii() => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04X}");
                }
            }
        }
    }
    out
}
