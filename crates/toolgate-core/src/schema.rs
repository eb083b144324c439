//! Argument and result validation against a tool's declared JSON Schema.
//!
//! Schemas come from upstream servers, which are not trusted: regular
//! expressions run with a bounded backtracking budget, nothing is fetched
//! (no remote `$ref`), and error messages never echo the offending value —
//! a refusal must not leak what the caller sent to whoever reads the log.

use serde::Serialize;
use serde_json::Value;

/// Backtracking steps one `pattern` may take before it counts as a failure.
const BACKTRACK_LIMIT: usize = 10_000;

/// One violation: where in the instance (a JSON pointer; `/` for the root)
/// and what is wrong, with the value masked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Where: a JSON pointer into the instance (`/` for the root).
    pub path: String,
    /// What is wrong, with the value masked.
    pub message: String,
}

/// A compiled schema.
pub struct SchemaValidator(jsonschema::Validator);

/// Why a schema cannot be used: it does not compile (the message masks
/// values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the schema does not compile: {0}")]
pub struct SchemaError(pub String);

impl SchemaValidator {
    /// Compiles `schema`: patterns get a bounded backtracking budget, formats
    /// are checked, nothing remote is fetched.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        jsonschema::options()
            .with_pattern_options(
                jsonschema::PatternOptions::fancy_regex().backtrack_limit(BACKTRACK_LIMIT),
            )
            .should_validate_formats(true)
            .build(schema)
            .map(Self)
            .map_err(|e| SchemaError(e.masked().to_string()))
    }

    /// Whether `instance` satisfies the schema.
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.0.is_valid(instance)
    }

    /// Every violation, in the validator's order.
    pub fn violations(&self, instance: &Value) -> Vec<Violation> {
        // Most instances are valid, and a yes or no costs far less than
        // walking for errors with their locations (every call's arguments
        // and every structured result come through here).
        if self.0.is_valid(instance) {
            return Vec::new();
        }
        self.0
            .iter_errors(instance)
            .map(|e| {
                // The path and the message name the caller's keys: tamed.
                let path = crate::pointer::tame(
                    &e.instance_path().to_string(),
                    crate::pointer::MAX_MESSAGE_CHARS,
                );
                let message = crate::pointer::tame(
                    &e.masked_with("the value").to_string(),
                    crate::pointer::MAX_MESSAGE_CHARS,
                );
                Violation { path: if path.is_empty() { "/".into() } else { path }, message }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn variant_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "model_variant": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}-[ABS]$"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 25}
            },
            "required": ["model_variant"],
            "additionalProperties": false
        })
    }

    #[test]
    fn every_violation_is_reported_by_path_without_the_value() {
        let v = SchemaValidator::compile(&variant_schema()).unwrap();
        let secret = "4111-1111-1111-1111";
        let found = v.violations(&json!({"model_variant": secret, "limit": 99, "extra": true}));
        let paths: Vec<&str> = found.iter().map(|x| x.path.as_str()).collect();
        assert!(
            paths.contains(&"/model_variant") && paths.contains(&"/limit") && paths.contains(&"/"),
            "{found:?}"
        );
        assert!(
            found.iter().all(|x| !x.message.contains(secret) && !x.message.contains("99")),
            "{found:?}"
        );
        assert!(v.violations(&json!({"model_variant": "AC-250-S", "limit": 5})).is_empty());
    }

    #[test]
    fn a_hostile_key_is_named_tamed_and_bounded() {
        let v = SchemaValidator::compile(&variant_schema()).unwrap();
        let key = format!("x\r\revent: count\rdata: 0\r{}", "k".repeat(500));
        let found = v.violations(&json!({"model_variant": "AC-250-S", key.clone(): {"deep": 1}}));
        assert!(!found.is_empty());
        for x in &found {
            assert!(
                !x.path.contains('\r') && !x.message.contains('\r') && !x.message.contains(&key),
                "{x:?}"
            );
            assert!(x.message.chars().count() <= crate::pointer::MAX_MESSAGE_CHARS + 1, "{x:?}");
        }
    }

    #[test]
    fn catastrophic_patterns_fail_instead_of_hanging() {
        let evil =
            SchemaValidator::compile(&json!({"type": "string", "pattern": "^(a+)+\\1$"})).unwrap();
        // Exponential without a budget; with one, it ends as a violation.
        let found = evil.violations(&json!(format!("{}b", "a".repeat(64))));
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn a_remote_reference_does_not_compile() {
        let remote = json!({"$ref": "https://example.invalid/schema.json"});
        assert!(SchemaValidator::compile(&remote).is_err());
    }
}
