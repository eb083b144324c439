//! Argument validation against a schema an upstream sent: the schema on the
//! first line, the arguments after it. A hostile schema (catastrophic
//! patterns, `$ref` cycles, huge enums) must compile or be refused, never
//! hang or crash; a violation's message never carries the value refused.

use serde_json::Value;
use toolgate_core::schema::SchemaValidator;
use toolgate_core::strict_json::{self, JsonLimits};

pub(crate) fn run(data: &[u8]) {
    let (schema, instance) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"{}"[..]),
    };
    // Both arrive through the strict reader in the gateway.
    let limits = JsonLimits::sized(64 << 10, 64);
    let (Ok(schema), Ok(instance)) =
        (strict_json::parse(schema, limits), strict_json::parse(instance, limits))
    else {
        return;
    };
    let Ok(validator) = SchemaValidator::compile(&schema) else { return };
    let violations = validator.violations(&instance);
    assert_eq!(
        validator.is_valid(&instance),
        violations.is_empty(),
        "is_valid and violations disagree"
    );
    let schema_text = schema.to_string();
    for secret in strings(&instance) {
        // A value the schema itself spells out may be named (an enum, a
        // const); any other is the caller's, and stays out of the message.
        if secret.len() < 6 || schema_text.contains(secret.as_str()) {
            continue;
        }
        for v in &violations {
            assert!(
                !v.message.contains(secret.as_str()),
                "a violation at {} echoes the value",
                v.path
            );
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Object(o) => o.values().flat_map(strings).collect(),
        _ => vec![],
    }
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let line = |schema: &str, instance: &str| format!("{schema}\n{instance}").into_bytes();
    vec![
        line(
            r#"{"type":"object","properties":{"model_variant":{"type":"string","pattern":"^(AC-250|AC-180|RS-90)-(A|B|S)$"},"quantity":{"type":"integer","minimum":1,"maximum":50}},"required":["model_variant"],"additionalProperties":false}"#,
            r#"{"model_variant":"AC-250-X-secretvalue","quantity":0,"extra":"hiddenthing"}"#,
        ),
        line(
            r##"{"type":"string","pattern":"^(a+)+$"}"##,
            r##""aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!""##,
        ),
        line(
            r##"{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}"##,
            r##"{"next":{"next":{"next":1}}}"##,
        ),
        line(r##"{"$ref":"#"}"##, "1"),
        line(r##"{"enum":["a","b","c","d"],"format":"email"}"##, r##""not-an-email""##),
        line(
            r##"{"type":"string","format":"date-time","minLength":3,"maxLength":5}"##,
            r##""2026-13-45Tnope""##,
        ),
        line(
            r##"{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#"},"uniqueItems":true}]}"##,
            r##"[["x"],["x"],1]"##,
        ),
        line(r##"{"$ref":"https://example.invalid/schema.json"}"##, "{}"),
        line(
            r##"{"type":"object","propertyNames":{"pattern":"^[a-z]+$"},"dependentRequired":{"a":["b"]}}"##,
            r##"{"a":1,"B2":"secretkeyvalue"}"##,
        ),
    ]
}
