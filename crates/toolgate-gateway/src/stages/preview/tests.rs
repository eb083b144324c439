use serde_json::json;
use toolgate_core::{Decision, Proposal, Reason, Verdict};

use super::answer;
use crate::stages::testing::{call, field, order_definition, order_tool, split, tool};

fn previewed(decision: &Decision) -> serde_json::Value {
    let c = call("parts__raise_parts_order", json!({"part_no": "P-1", "quantity": 8}));
    let (cx, _) = split(&c);
    let proposal =
        Proposal::new("parts", "raise_parts_order", json!({"part_no": "P-1", "quantity": 8}));
    let out = answer(&cx, &order_tool(), &proposal, decision, "policy-v1");
    let structured = field(&out, "structuredContent");
    assert_eq!(
        field(&out, "content")[0]["text"],
        structured["message"],
        "the text says what the structure says"
    );
    assert_eq!(
        (&structured["proposal_sha256"], &structured["policy_version"]),
        (&json!(proposal.sha256), &json!("policy-v1"))
    );
    structured
}

#[test]
fn a_call_that_would_wait_names_who_would_approve_it_and_why() {
    let mut decision = Decision::by(
        Verdict::RequireApproval,
        Reason::PolicyRequiresApproval,
        vec!["order_above_five_units".into()],
    );
    decision.why = "orders above five units need a supervisor".into();
    let p = previewed(&decision);
    assert_eq!(
        (&p["preview"], &p["decision"], &p["reason"]),
        (&json!(true), &json!("require_approval"), &json!("policy_requires_approval"))
    );
    assert_eq!(p["approval"]["needed"], true);
    let by = p["approval"]["by"].as_str().unwrap();
    assert!(
        by.contains("tenant `atlas`") && by.contains("other than agent (subject agent-7)"),
        "{by}"
    );
    assert_eq!(p["approval"]["why"], "orders above five units need a supervisor");
    let message = p["message"].as_str().unwrap();
    assert!(
        message.starts_with("parts__raise_parts_order would wait for a named approver")
            && message.ends_with("Nothing was run, opened or recorded."),
        "{message}"
    );
}

#[test]
fn each_guard_reports_the_rules_it_found_and_a_refusal_needs_no_approver() {
    let rules = vec![
        "egress.card_number".into(),
        "trifecta.private_untrusted_egress".into(),
        "budget.rate".into(),
        "registry".into(),
    ];
    let p = previewed(&Decision::by(Verdict::Deny, Reason::EgressConfidential, rules));
    assert_eq!(
        p["guards"],
        json!({"egress": ["egress.card_number"], "trifecta": ["trifecta.private_untrusted_egress"], "budget": ["budget.rate"]})
    );
    assert_eq!(p["approval"], json!({"needed": false}));
    assert!(p["message"].as_str().unwrap().contains("would be refused"));
    let allowed =
        previewed(&Decision::by(Verdict::Allow, Reason::Automatic, vec!["registry".into()]));
    assert!(allowed["message"].as_str().unwrap().starts_with("parts__raise_parts_order would run"));
    assert_eq!(
        (&allowed["class"], &allowed["registry_class"]),
        (&json!("requires_approval"), &json!("requires_approval"))
    );
}

#[test]
fn a_tool_with_an_output_schema_is_previewed_as_no_output_of_it() {
    let c = call("parts__raise_parts_order", json!({"part_no": "P-1", "quantity": 8}));
    let (cx, _) = split(&c);
    let proposal =
        Proposal::new("parts", "raise_parts_order", json!({"part_no": "P-1", "quantity": 8}));
    let decision = Decision::by(Verdict::Allow, Reason::Automatic, vec!["registry".into()]);
    assert!(
        answer(&cx, &order_tool(), &proposal, &decision, "p").get("isError").is_none(),
        "no schema: a plain result"
    );
    let mut definition = order_definition();
    definition["outputSchema"] = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    let declared = tool("parts", definition, Some(toolgate_core::AuthorityClass::RequiresApproval));
    let out = answer(&cx, &declared, &proposal, &decision, "p");
    assert_eq!(field(&out, "isError"), json!(true), "SDKs check other results against the schema");
    assert_eq!(field(&out, "structuredContent")["preview"], true);
}
