//! Parsing JSON that came from outside: size and nesting depth bounded while
//! parsing (no unbounded buffering or recursion), and duplicate object keys
//! refused — a proposal's hash and the upstream's parse must see one object.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Limits for one JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Documents longer than this many bytes are refused before parsing.
    pub max_bytes: usize,
    /// Arrays and objects nested deeper than this are refused.
    pub max_depth: usize,
    /// A string (a value or an object's key) longer than this many bytes is refused.
    pub max_string_bytes: usize,
    /// An array or object with more items than this is refused.
    pub max_items: usize,
}

impl JsonLimits {
    /// Only a size and a depth: strings and lists may be as long as fits.
    pub const fn sized(max_bytes: usize, max_depth: usize) -> Self {
        Self { max_bytes, max_depth, max_string_bytes: usize::MAX, max_items: usize::MAX }
    }
}

impl Default for JsonLimits {
    fn default() -> Self {
        // 1 MiB bodies; 64 levels is far beyond any real tool argument.
        Self { max_bytes: 1 << 20, max_depth: 64, max_string_bytes: 256 << 10, max_items: 10_000 }
    }
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The document is longer than `max_bytes`.
    #[error("the document is {size} bytes; the limit is {limit}")]
    TooLarge {
        /// The document's length, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// Arrays and objects nest deeper than `max_depth`.
    #[error("nesting deeper than {limit} levels")]
    TooDeep {
        /// The nesting limit.
        limit: usize,
    },
    /// A string (a value or a key) is longer than `max_string_bytes`.
    #[error("a string of {size} bytes; the limit is {limit}")]
    StringTooLong {
        /// The string's length, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// An array or object holds more than `max_items` items.
    #[error("more than {limit} items in one array or object")]
    TooManyItems {
        /// The limit.
        limit: usize,
    },
    /// One object holds the same key twice.
    #[error("duplicate key `{key}` in one object")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// Not valid JSON (or something follows the value).
    #[error("not valid JSON: {0}")]
    Syntax(String),
}

/// Parses `bytes` under `limits` into a `Value`.
pub fn parse(bytes: &[u8], limits: JsonLimits) -> Result<Value, JsonError> {
    if bytes.len() > limits.max_bytes {
        return Err(JsonError::TooLarge { size: bytes.len(), limit: limits.max_bytes });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut failure = None;
    let value = StrictValue { depth: 0, limits, failure: &mut failure }.deserialize(&mut de);
    let value = match (value, failure) {
        // Our own refusal travels out of serde as a custom error; report it typed.
        (_, Some(err)) => return Err(err),
        (Err(e), None) => return Err(JsonError::Syntax(e.to_string())),
        (Ok(v), None) => v,
    };
    de.end().map_err(|e| JsonError::Syntax(e.to_string()))?;
    Ok(value)
}

struct StrictValue<'a> {
    depth: usize,
    limits: JsonLimits,
    failure: &'a mut Option<JsonError>,
}

impl StrictValue<'_> {
    fn fail<E: de::Error>(&mut self, err: JsonError) -> E {
        let msg = err.to_string();
        *self.failure = Some(err);
        E::custom(msg)
    }

    fn string<E: de::Error>(&mut self, s: &str) -> Result<(), E> {
        if s.len() > self.limits.max_string_bytes {
            return Err(self.fail(JsonError::StringTooLong {
                size: s.len(),
                limit: self.limits.max_string_bytes,
            }));
        }
        Ok(())
    }

    fn items<E: de::Error>(&mut self, n: usize) -> Result<(), E> {
        if n > self.limits.max_items {
            return Err(self.fail(JsonError::TooManyItems { limit: self.limits.max_items }));
        }
        Ok(())
    }

    fn child(&mut self) -> StrictValue<'_> {
        StrictValue { depth: self.depth + 1, limits: self.limits, failure: self.failure }
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<Value, E> {
        self.string(v)?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(mut self, v: String) -> Result<Value, E> {
        self.string(&v)?;
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth >= self.limits.max_depth {
            return Err(self.fail(JsonError::TooDeep { limit: self.limits.max_depth }));
        }
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child())? {
            out.push(v);
            self.items(out.len())?;
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        if self.depth >= self.limits.max_depth {
            return Err(self.fail(JsonError::TooDeep { limit: self.limits.max_depth }));
        }
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.string(&key)?;
            // The map itself tells a name given twice: a set of the names
            // beside it cost a copy and a hash of every name.
            match out.entry(key) {
                serde_json::map::Entry::Occupied(taken) => {
                    return Err(self.fail(JsonError::DuplicateKey { key: taken.key().clone() }));
                }
                serde_json::map::Entry::Vacant(place) => {
                    place.insert(map.next_value_seed(self.child())?);
                }
            }
            self.items(out.len())?;
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> JsonLimits {
        JsonLimits::sized(1024, 8)
    }

    #[test]
    fn accepts_ordinary_json_and_keeps_it_exact() {
        let text = br#"{"a":[1,2.5,-3,"x",null,true],"b":{"c":{}}}"#;
        let v = parse(text, limits()).unwrap();
        assert_eq!(v, serde_json::from_slice::<Value>(text).unwrap());
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth() {
        assert_eq!(
            parse(br#"{"a":1,"a":2}"#, limits()),
            Err(JsonError::DuplicateKey { key: "a".into() })
        );
        assert_eq!(
            parse(br#"{"x":{"b":1,"b":1}}"#, limits()),
            Err(JsonError::DuplicateKey { key: "b".into() })
        );
    }

    #[test]
    fn refuses_deep_nesting_without_recursing_into_it() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(
            parse(deep.as_bytes(), JsonLimits::sized(1 << 20, 64)),
            Err(JsonError::TooDeep { limit: 64 })
        );
        let ok = "[".repeat(8) + &"]".repeat(8);
        assert!(parse(ok.as_bytes(), limits()).is_ok());
        let over = "[".repeat(9) + &"]".repeat(9);
        assert_eq!(parse(over.as_bytes(), limits()), Err(JsonError::TooDeep { limit: 8 }));
    }

    #[test]
    fn refuses_oversize_before_parsing_and_reports_syntax_errors() {
        let big = vec![b' '; 2000];
        assert_eq!(parse(&big, limits()), Err(JsonError::TooLarge { size: 2000, limit: 1024 }));
        assert!(matches!(parse(b"{\"a\":", limits()), Err(JsonError::Syntax(_))));
        assert!(matches!(parse(b"{} trailing", limits()), Err(JsonError::Syntax(_))));
        assert!(matches!(parse(b"\"\xff\"", limits()), Err(JsonError::Syntax(_))));
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    const LIMITS: JsonLimits =
        JsonLimits { max_bytes: 1 << 20, max_depth: 8, max_string_bytes: 8, max_items: 3 };

    #[test]
    fn strings_and_lists_pass_at_their_limit_and_are_refused_one_over() {
        assert!(parse(br#"{"k": "12345678"}"#, LIMITS).is_ok());
        assert_eq!(
            parse(br#"{"k": "123456789"}"#, LIMITS),
            Err(JsonError::StringTooLong { size: 9, limit: 8 })
        );
        // A key is a string too; an escaped string counts its decoded bytes.
        assert_eq!(
            parse(br#"{"123456789": 1}"#, LIMITS),
            Err(JsonError::StringTooLong { size: 9, limit: 8 })
        );
        assert!(parse(br#"["\u00e9\u00e9\u00e9\u00e9"]"#, LIMITS).is_ok());
        assert!(parse(b"[1, 2, 3]", LIMITS).is_ok());
        assert_eq!(parse(b"[1, 2, 3, 4]", LIMITS), Err(JsonError::TooManyItems { limit: 3 }));
        assert!(parse(br#"{"a": 1, "b": 2, "c": 3}"#, LIMITS).is_ok());
        assert_eq!(
            parse(br#"{"a": 1, "b": 2, "c": 3, "d": 4}"#, LIMITS),
            Err(JsonError::TooManyItems { limit: 3 })
        );
        // Nested lists count each on its own.
        assert!(parse(b"[[1, 2, 3], [1, 2, 3], [1, 2, 3]]", LIMITS).is_ok());
        // The defaults: 256 KiB strings, 10,000 items.
        let d = JsonLimits::default();
        assert_eq!((d.max_string_bytes, d.max_items), (256 << 10, 10_000));
    }
}
