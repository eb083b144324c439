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
    assert_eq!(found, Checked::default());
}

#[test]
fn a_violating_result_is_flagged_in_meta_by_path() {
    let text = r#"{"content":[],"structuredContent":{"stock":-1},"_meta":{"x":1}}"#;
    let (answer, found) = check(&stock_tool(true), &raw(text), false, SHA);
    let answer = result(answer);
    assert_eq!(found, Checked { output_violations: 2, ..Checked::default() });
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
    let (answer, found) =
        check(&stock_tool(true), &raw(r#"{"content":[{"type":"text","text":"3"}]}"#), false, SHA);
    assert_eq!(found.output_violations, 1);
    let violations = &field(&result(answer), "_meta")[CHECK_META]["violations"];
    assert_eq!(violations[0]["path"], "/");
    assert!(violations[0]["message"].as_str().unwrap().contains("structuredContent is missing"));
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
    let (answer, found) =
        check(&plain, &raw(r#"{"content":[],"structuredContent":{"anything":true}}"#), true, SHA);
    assert_eq!(field(&result(answer), "structuredContent"), json!({"anything": true}));
    assert_eq!(found, Checked::default());
}

#[test]
fn a_tool_error_is_not_checked_and_is_noted() {
    let text = r#"{"isError":true,"content":[{"type":"text","text":"no such part"}]}"#;
    let (answer, found) = check(&stock_tool(true), &raw(text), true, SHA);
    assert_eq!(verbatim(&result(answer)), verbatim(&serde_json::from_str(text).unwrap()));
    assert_eq!(found, Checked { tool_error: true, ..Checked::default() });
}

#[test]
fn an_upstream_asking_for_input_has_no_result_to_check_yet() {
    let text =
        r#"{"resultType":"input_required","inputRequests":{"confirm":{}},"requestState":"up-1"}"#;
    let (answer, found) = check(&stock_tool(true), &raw(text), true, SHA);
    assert_eq!(verbatim(&result(answer)), verbatim(&serde_json::from_str(text).unwrap()));
    assert_eq!(found, Checked { input_required: true, ..Checked::default() });
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
