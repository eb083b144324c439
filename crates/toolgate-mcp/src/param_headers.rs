//! `Mcp-Param-*` headers (SEP-2243): a tool argument whose schema property
//! carries `"x-mcp-header": "NAME"` is mirrored in the header
//! `Mcp-Param-NAME`, so HTTP infrastructure can route on it without parsing
//! the body. The header must then agree with the body; a value that is not
//! plain printable ASCII travels as `=?base64?…?=`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// (header name, argument name) for each `x-mcp-header` string property.
pub fn declared(input_schema: &Value) -> Vec<(String, String)> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .filter_map(|(arg, schema)| {
            let header = schema.get("x-mcp-header")?.as_str()?;
            Some((format!("Mcp-Param-{header}"), arg.clone()))
        })
        .collect()
}

/// The header value for `value` as a client would send it.
pub fn encode(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with("=?base64?");
    if plain { value.to_string() } else { format!("=?base64?{}?=", STANDARD.encode(value)) }
}

/// The argument a header value stands for: Base64 inside `=?base64?…?=`
/// (strict alphabet and padding), anything else literally.
pub fn decode(header: &str) -> Result<String, String> {
    let header = header.trim();
    match header.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = STANDARD.decode(encoded).map_err(|_| "invalid Base64".to_string())?;
            String::from_utf8(bytes)
                .map_err(|_| "Base64 of something that is not UTF-8".to_string())
        }
        None => Ok(header.to_string()),
    }
}

/// Checks the headers of a call against its arguments; `Err` says what disagrees.
pub fn check(
    input_schema: &Value,
    arguments: &Value,
    header: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    for (name, arg) in declared(input_schema) {
        let Some(value) = arguments.get(&arg) else { continue };
        let expected = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let got = header(&name)
            .ok_or_else(|| format!("{name} is missing; it must carry the argument `{arg}`"))?;
        let decoded = decode(&got).map_err(|why| format!("{name}: {why}"))?;
        if decoded != expected {
            return Err(format!("{name} does not match the argument `{arg}`"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encoding_round_trips_and_bad_base64_is_refused() {
        for v in ["eu-west-1", "Grüße", " padded ", "=?base64?x"] {
            assert_eq!(decode(&encode(v)).unwrap(), v, "{v}");
        }
        assert_eq!(decode("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert!(decode("=?base64?SGVsbG8?=").is_err(), "padding");
        assert!(decode("=?base64?SGVs!!!bG8=?=").is_err(), "alphabet");
        assert_eq!(decode("SGVsbG8=").unwrap(), "SGVsbG8=", "no wrapper: literal");
    }

    #[test]
    fn headers_must_agree_with_the_body() {
        let schema = json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}});
        let args = json!({"region": "eu"});
        assert!(
            check(&schema, &args, |h| (h == "Mcp-Param-Region").then(|| "eu".to_string())).is_ok()
        );
        assert!(check(&schema, &args, |_| None).unwrap_err().contains("missing"));
        assert!(
            check(&schema, &args, |_| Some("us".into())).unwrap_err().contains("does not match")
        );
        assert!(check(&schema, &json!({}), |_| None).is_ok(), "no argument, no header needed");
    }
}
