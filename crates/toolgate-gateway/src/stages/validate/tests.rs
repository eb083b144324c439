use super::*;
use crate::stages::testing::{order_tool, passed, refused, tool};
use serde_json::json;

#[test]
fn valid_arguments_become_the_proposal_of_the_upstream_tool() {
    let arguments = json!({"part_no": "P-17", "quantity": 3});
    let proposal = passed(validate(&order_tool(), &arguments));
    // Bound to the upstream's own names, not the exposed `parts__raise_parts_order`.
    let expected = Proposal::new("parts", "raise_parts_order", arguments.clone());
    assert_eq!(proposal, expected);
    assert_eq!(proposal.sha256.len(), 64);
    assert_ne!(
        proposal.sha256,
        Proposal::new("parts", "raise_parts_order", json!({"part_no": "P-17", "quantity": 4}))
            .sha256
    );
}

#[test]
fn every_violation_is_reported_by_its_path_without_its_value() {
    let arguments = json!({"part_no": "SECRET-4111", "quantity": 99, "colour": "red"});
    let r = refused(validate(&order_tool(), &arguments));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::InvalidArguments, Action::Correct)
    );
    assert_eq!(
        r.proposal_sha256.as_deref(),
        Some(Proposal::new("parts", "raise_parts_order", arguments).sha256.as_str())
    );
    let mut paths: Vec<&str> = r.violations.iter().map(|v| v.path.as_str()).collect();
    paths.sort();
    // `/` is the root: the property it does not allow.
    assert_eq!(paths, ["/", "/part_no", "/quantity"]);
    for path in ["/part_no", "/quantity"] {
        assert!(r.message.contains(path), "{}", r.message);
    }
    // (The proposal's hex may hold any digits: only the words are checked.)
    let told: Vec<&str> =
        r.violations.iter().map(|v| v.message.as_str()).chain([r.message.as_str()]).collect();
    assert!(told.iter().all(|m| !m.contains("SECRET-4111") && !m.contains("99")), "{told:?}");
}

#[test]
fn a_missing_required_argument_is_a_violation_at_the_root() {
    let r = refused(validate(&order_tool(), &json!({"part_no": "P-17"})));
    assert_eq!(r.reason, Reason::InvalidArguments);
    assert_eq!(r.violations.iter().map(|v| v.path.as_str()).collect::<Vec<_>>(), ["/"]);
}

#[test]
fn integers_beyond_two_to_the_53_are_refused_though_the_schema_allows_them() {
    // 2^53 itself is exact; 2^53 + 1 would hash as 2^53, so two calls would share a proposal.
    passed(validate(
        &order_tool(),
        &json!({"part_no": "P-1", "quantity": 1, "reference": 9_007_199_254_740_992_u64}),
    ));
    for reference in [json!(9_007_199_254_740_993_u64), json!(-9_007_199_254_740_993_i64)] {
        let r = refused(validate(
            &order_tool(),
            &json!({"part_no": "P-1", "quantity": 1, "reference": reference}),
        ));
        assert_eq!(r.reason, Reason::InvalidArguments);
        assert_eq!(
            r.violations.iter().map(|v| v.path.as_str()).collect::<Vec<_>>(),
            ["/reference"]
        );
        assert!(r.violations[0].message.contains("string"), "{}", r.violations[0].message);
    }
}

#[test]
fn a_tool_without_an_enforceable_input_schema_is_refused_for_the_operator() {
    let unenforceable = tool("parts", json!({"name": "raise_parts_order"}), None);
    let r = refused(validate(&unenforceable, &json!({})));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::ContractInvalid, Action::Escalate)
    );
    assert_eq!(
        r.proposal_sha256.as_deref(),
        Some(Proposal::new("parts", "raise_parts_order", json!({})).sha256.as_str())
    );
}
