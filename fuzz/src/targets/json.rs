//! The strict JSON reader (`toolgate_core::strict_json`), under small limits
//! so the fuzzer reaches every one of them.

use serde_json::Value;
use toolgate_core::strict_json::{self, JsonError, JsonLimits};

const LIMITS: JsonLimits =
    JsonLimits { max_bytes: 4096, max_depth: 8, max_string_bytes: 64, max_items: 16 };

pub(crate) fn run(data: &[u8]) {
    let lax: Result<Value, _> = serde_json::from_slice(data);
    match strict_json::parse(data, LIMITS) {
        Ok(value) => {
            // What the strict reader accepts, the upstream's ordinary parser
            // reads as the same document: one object, seen the same by both.
            let lax =
                lax.unwrap_or_else(|e| panic!("strict accepted what serde_json refuses: {e}"));
            assert_eq!(value, lax, "strict and serde_json read different documents");
            assert!(depth(&value) <= LIMITS.max_depth, "accepted nesting beyond the limit");
            assert!(within(&value), "accepted a string or a list beyond its limit");
            // Its own output reads back the same.
            let again =
                strict_json::parse(value.to_string().as_bytes(), JsonLimits::sized(1 << 20, 64))
                    .expect("its own output parses");
            assert_eq!(again, value);
        }
        // A limit or a duplicate key may stop the reader before a syntax
        // error further on: nothing more to say of a refusal but its kind.
        Err(
            JsonError::Syntax(_)
            | JsonError::DuplicateKey { .. }
            | JsonError::TooDeep { .. }
            | JsonError::StringTooLong { .. }
            | JsonError::TooManyItems { .. },
        ) => {}
        Err(JsonError::TooLarge { size, limit }) => assert!(size > limit && size == data.len()),
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn within(v: &Value) -> bool {
    match v {
        Value::String(s) => s.len() <= LIMITS.max_string_bytes,
        Value::Array(a) => a.len() <= LIMITS.max_items && a.iter().all(within),
        Value::Object(o) => {
            o.len() <= LIMITS.max_items
                && o.iter().all(|(k, v)| k.len() <= LIMITS.max_string_bytes && within(v))
        }
        _ => true,
    }
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"parts__find_part","arguments":{"model_variant":"AC-250-S"}}}"#,
        r#"{"a":1,"a":2}"#,
        r#"[[[[[[[[[1]]]]]]]]]"#,
        r#"{"s":"\u00e9\ud83d\ude00\n\"","n":-1.5e300,"t":true,"f":false,"z":null}"#,
        r#"[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]"#,
        "\"\u{7f}\"",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
