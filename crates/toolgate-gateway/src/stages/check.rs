//! check: the upstream's result against the tool's outputSchema. A violating
//! result is never passed off as valid: it is flagged in the result's `_meta`
//! and the log, or refused when `block_invalid_results` is set.

use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value, json};
use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::call::Answer;
use crate::catalog::ExposedTool;
use toolgate_mcp::wire::RawObject;

/// The `_meta` key of what toolgate's check found in a result.
pub(crate) const CHECK_META: &str = "io.toolgate/check";

/// What the check stage found in a result.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// The tool said it failed (`isError`).
    pub tool_error: bool,
    /// The upstream asks for input (MRTR): there is no result yet.
    pub input_required: bool,
    /// How many places of `structuredContent` violate the outputSchema.
    pub output_violations: usize,
}

/// The answer to give, and what was found on the way.
pub(crate) fn check(
    tool: &ExposedTool,
    raw: &RawValue,
    block: bool,
    proposal_sha256: &str,
) -> (Answer, Found) {
    let mut found = Found::default();
    let answer = conclude(tool, raw, block, proposal_sha256, &mut found);
    (answer, found)
}

fn conclude(
    tool: &ExposedTool,
    raw: &RawValue,
    block: bool,
    proposal_sha256: &str,
    found: &mut Found,
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
mod tests {
    use super::*;
    use crate::stages::testing::{field, raw, tool};
    use toolgate_core::AuthorityClass;

    const SHA: &str = "5eb63bbbe01eeed093cb22bb8f5acdc3e5eb63bbbe01eeed093cb22bb8f5acdc";

    /// A read-only tool (or a write) promising `{part_no, stock >= 0, price?}`.
    fn stock_tool(read_only: bool) -> ExposedTool {
        let mut t = tool(
            "parts",
            json!({
                "name": "check_availability",
                "inputSchema": {"type": "object"},
                "outputSchema": {
                    "type": "object",
                    "properties": {"part_no": {"type": "string"}, "stock": {"type": "integer", "minimum": 0}, "price": {"type": "number"}},
                    "required": ["part_no", "stock"]
                }
            }),
            Some(AuthorityClass::Automatic),
        );
        t.registry_read_only = read_only;
        t
    }

    fn result(answer: Answer) -> RawObject {
        match answer {
            Answer::Result(r) => r,
            Answer::Refused(r) => panic!("refused ({:?}): {}", r.reason, r.message),
            Answer::Error(e) => panic!("{e}"),
        }
    }

    fn refusal(answer: Answer) -> Refusal {
        match answer {
            Answer::Refused(r) => r,
            Answer::Result(r) => panic!("passed: {}", serde_json::to_string(&r).unwrap()),
            Answer::Error(e) => panic!("{e}"),
        }
    }

    /// The answer's fields as the upstream wrote them.
    fn verbatim(object: &RawObject) -> Vec<(&str, &str)> {
        object.iter().map(|(k, v)| (k.as_str(), v.get())).collect()
    }

    #[test]
    fn a_valid_result_passes_untouched() {
        let text = r#"{"content":[{"type":"text","text":"3 in stock"}],"structuredContent":{"part_no":"P-1","stock":3,"price":12.50},"_meta":{"x":1}}"#;
        let (answer, found) = check(&stock_tool(true), &raw(text), true, SHA);
        let expected: RawObject = serde_json::from_str(text).unwrap();
        assert_eq!(verbatim(&result(answer)), verbatim(&expected));
        assert_eq!(found, Found::default());
    }

    #[test]
    fn a_violating_result_is_flagged_in_meta_by_path() {
        let text = r#"{"content":[],"structuredContent":{"stock":-1},"_meta":{"x":1}}"#;
        let (answer, found) = check(&stock_tool(true), &raw(text), false, SHA);
        let answer = result(answer);
        assert_eq!(found, Found { output_violations: 2, ..Found::default() });
        let meta = field(&answer, "_meta");
        assert_eq!(meta["x"], 1, "the upstream's own _meta stays");
        assert_eq!(meta[CHECK_META]["outputSchema"], "violated");
        let mut paths: Vec<&str> = meta[CHECK_META]["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["path"].as_str().unwrap())
            .collect();
        paths.sort();
        assert_eq!(paths, ["/", "/stock"]);
        // The result itself is not altered, only flagged.
        assert_eq!(answer["structuredContent"].get(), r#"{"stock":-1}"#);
    }

    #[test]
    fn a_violating_result_is_withheld_when_blocking() {
        let (answer, found) = check(
            &stock_tool(true),
            &raw(r#"{"content":[],"structuredContent":{"stock":-1}}"#),
            true,
            SHA,
        );
        let r = refusal(answer);
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::Allow, Reason::InvalidResult, Action::Refused)
        );
        assert_eq!((r.proposal_sha256.as_deref(), r.violations.len()), (Some(SHA), 2));
        assert_eq!(found.output_violations, 2);
    }

    #[test]
    fn a_result_without_structured_content_violates_a_declared_output_schema() {
        let (answer, found) = check(
            &stock_tool(true),
            &raw(r#"{"content":[{"type":"text","text":"3"}]}"#),
            false,
            SHA,
        );
        assert_eq!(found.output_violations, 1);
        let violations = &field(&result(answer), "_meta")[CHECK_META]["violations"];
        assert_eq!(violations[0]["path"], "/");
        assert!(
            violations[0]["message"].as_str().unwrap().contains("structuredContent is missing")
        );
    }

    #[test]
    fn an_output_schema_that_does_not_compile_vouches_for_nothing() {
        let broken = tool(
            "parts",
            json!({"name": "check_availability", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}}),
            Some(AuthorityClass::Automatic),
        );
        assert!(matches!(broken.output, Some(Err(_))), "the fixture must not compile");
        let (answer, found) =
            check(&broken, &raw(r#"{"content":[],"structuredContent":{"a":"x"}}"#), true, SHA);
        assert_eq!(refusal(answer).reason, Reason::InvalidResult);
        assert_eq!(found.output_violations, 1);
    }

    #[test]
    fn a_tool_without_an_output_schema_has_nothing_checked() {
        let plain = tool(
            "parts",
            json!({"name": "find_part", "inputSchema": {"type": "object"}}),
            Some(AuthorityClass::Automatic),
        );
        let (answer, found) = check(
            &plain,
            &raw(r#"{"content":[],"structuredContent":{"anything":true}}"#),
            true,
            SHA,
        );
        assert_eq!(field(&result(answer), "structuredContent"), json!({"anything": true}));
        assert_eq!(found, Found::default());
    }

    #[test]
    fn a_tool_error_is_not_checked_and_is_noted() {
        let text = r#"{"isError":true,"content":[{"type":"text","text":"no such part"}]}"#;
        let (answer, found) = check(&stock_tool(true), &raw(text), true, SHA);
        assert_eq!(verbatim(&result(answer)), verbatim(&serde_json::from_str(text).unwrap()));
        assert_eq!(found, Found { tool_error: true, ..Found::default() });
    }

    #[test]
    fn an_upstream_asking_for_input_has_no_result_to_check_yet() {
        let text = r#"{"resultType":"input_required","inputRequests":{"confirm":{}},"requestState":"up-1"}"#;
        let (answer, found) = check(&stock_tool(true), &raw(text), true, SHA);
        assert_eq!(verbatim(&result(answer)), verbatim(&serde_json::from_str(text).unwrap()));
        assert_eq!(found, Found { input_required: true, ..Found::default() });
        // "complete" is a result like any other: checked.
        let (answer, found) = check(
            &stock_tool(true),
            &raw(r#"{"resultType":"complete","content":[],"structuredContent":{"stock":-1}}"#),
            true,
            SHA,
        );
        assert_eq!((refusal(answer).reason, found.input_required), (Reason::InvalidResult, false));
    }

    #[test]
    fn something_that_is_not_a_result_object_is_refused() {
        for text in ["[1,2]", r#""done""#, "null"] {
            // After a read, retrying is safe; after a write, its effect must be checked first.
            for (read_only, action) in [(true, Action::Retry), (false, Action::Reconcile)] {
                let (answer, _) = check(&stock_tool(read_only), &raw(text), false, SHA);
                let r = refusal(answer);
                assert_eq!(
                    (r.verdict, r.reason, r.action, r.proposal_sha256.as_deref()),
                    (Verdict::Allow, Reason::InvalidResult, action, Some(SHA)),
                    "{text}"
                );
            }
        }
    }
}
