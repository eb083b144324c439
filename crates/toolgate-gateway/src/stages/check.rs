//! check: the upstream's result against the tool's outputSchema. A violating
//! result is never passed off as valid: it is flagged in the result's `_meta`
//! and the log, or refused when `block_invalid_results` is set.

use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value, json};
use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::call::{Answer, Checked};
use crate::catalog::ExposedTool;
use toolgate_mcp::wire::RawObject;

/// The `_meta` key of what toolgate's check found in a result.
pub(crate) const CHECK_META: &str = "io.toolgate/check";

/// The answer to give, and what was found on the way.
pub(crate) fn check(
    tool: &ExposedTool,
    raw: &RawValue,
    block: bool,
    proposal_sha256: &str,
) -> (Answer, Checked) {
    let mut found = Checked::default();
    let answer = conclude(tool, raw, block, proposal_sha256, &mut found);
    (answer, found)
}

fn conclude(
    tool: &ExposedTool,
    raw: &RawValue,
    block: bool,
    proposal_sha256: &str,
    found: &mut Checked,
) -> Answer {
    let mut result: RawObject = match serde_json::from_str(raw.get()) {
        Ok(map) => map,
        Err(_) => {
            return Answer::Refused(
                Refusal::new(
                    Verdict::Allow,
                    Reason::InvalidResult,
                    if tool.read_only() { Action::Retry } else { Action::Reconcile },
                    format!(
                        "{} answered with something that is not a result object",
                        tool.exposed_name
                    ),
                )
                .with_proposal(proposal_sha256),
            );
        }
    };
    let is_error = result.get("isError").is_some_and(|v| v.get() == "true");
    found.tool_error = is_error;
    // An upstream asking for input (MRTR) has no result to check yet.
    if result.get("resultType").is_some_and(|t| t.get() != "\"complete\"") {
        found.input_required = true;
        return Answer::Result(result);
    }
    let (Some(output), false) = (&tool.output, is_error) else { return Answer::Result(result) };
    let structured: Option<Value> =
        result.get("structuredContent").and_then(|v| serde_json::from_str(v.get()).ok());
    let violation =
        |message: String| vec![toolgate_core::schema::Violation { path: "/".into(), message }];
    let violations = match (output, &structured) {
        // A schema that cannot be enforced cannot vouch for the result either.
        (Err(why), _) => violation(format!("the outputSchema does not compile ({why})")),
        (Ok(validator), Some(value)) => validator.violations(value),
        (Ok(_), None) => violation("structuredContent is missing".into()),
    };
    if violations.is_empty() {
        return Answer::Result(result);
    }
    found.output_violations = violations.len();
    if block {
        return Answer::Refused(
            Refusal::new(
                Verdict::Allow,
                Reason::InvalidResult,
                Action::Refused,
                format!(
                    "{} returned a result that violates its outputSchema; it was withheld",
                    tool.exposed_name
                ),
            )
            .with_proposal(proposal_sha256)
            .with_violations(violations),
        );
    }
    let mut meta: Map<String, Value> =
        result.get("_meta").and_then(|m| serde_json::from_str(m.get()).ok()).unwrap_or_default();
    meta.insert(CHECK_META.into(), json!({"outputSchema": "violated", "violations": violations}));
    if let Ok(raw_meta) = to_raw_value(&meta) {
        result.insert("_meta".into(), raw_meta);
    }
    Answer::Result(result)
}

#[cfg(test)]
mod tests;
