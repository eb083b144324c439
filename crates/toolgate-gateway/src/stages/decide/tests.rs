use super::*;
use crate::stages::testing::{SCHEMA, agent, order_definition, tool};
use serde_json::{Value, json};
use toolgate_core::{AuthorityClass, Reason, Verdict};

const POLICIES: &str = r#"
        @id("no_other_recipients")
        forbid (principal, action == Action::"call_tool", resource == Tool::"notices__send_notice")
        unless { context.arguments has to && context.arguments.to == "team@example.test" };

        @id("order_above_five_units")
        @approval("an order above five units needs a named approver")
        forbid (principal, action == Action::"call_tool", resource == Tool::"parts__raise_parts_order")
        when { context.arguments has quantity && context.arguments.quantity > 5 && context.approval != "approved" };

        @id("approved_orders")
        permit (principal, action == Action::"call_tool", resource == Tool::"parts__raise_parts_order")
        when { context.approval == "approved" };

        @id("no_exports")
        forbid (principal in Role::"agent", action == Action::"call_tool", resource)
        when { resource.labels.contains("bulk_export") };
    "#;

fn policy() -> PolicyEngine {
    PolicyEngine::load(POLICIES, SCHEMA).expect("the test policy validates")
}

fn notice_tool() -> ExposedTool {
    tool(
        "notices",
        json!({"name": "send_notice", "inputSchema": {"type": "object"}}),
        Some(AuthorityClass::Automatic),
    )
}

fn order(quantity: Value) -> (ExposedTool, Proposal) {
    (
        tool("parts", order_definition(), Some(AuthorityClass::RequiresApproval)),
        Proposal::new(
            "parts",
            "raise_parts_order",
            json!({"part_no": "P-1", "quantity": quantity}),
        ),
    )
}

fn decided(
    policy: &PolicyEngine,
    tool: &ExposedTool,
    arguments: Value,
    approval: Option<ApprovalState>,
) -> Decision {
    let proposal = Proposal::new(&tool.server, &tool.tool.name, arguments);
    decide(policy, &Guards::none(), &agent(), tool, &proposal, approval, &Situation::default())
}

#[test]
fn without_a_policy_the_registry_class_decides() {
    let cases = [
        (AuthorityClass::Automatic, Verdict::Allow, Reason::Automatic),
        (AuthorityClass::RequiresApproval, Verdict::RequireApproval, Reason::ApprovalRequired),
        (AuthorityClass::Prohibited, Verdict::Deny, Reason::Prohibited),
    ];
    for (class, verdict, reason) in cases {
        let d = decided(
            &PolicyEngine::empty(),
            &tool("parts", order_definition(), Some(class)),
            json!({}),
            None,
        );
        assert_eq!(
            (d.verdict, d.reason, d.rules.as_slice()),
            (verdict, reason, ["registry".to_string()].as_slice()),
            "{class:?}"
        );
    }
}

#[test]
fn an_unregistered_tool_of_an_untrusted_server_is_denied_whatever_its_hints() {
    let hinted = json!({"name": "find_part", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true, "openWorldHint": false}});
    let d = decided(&PolicyEngine::empty(), &tool("parts", hinted, None), json!({}), None);
    assert_eq!(
        (d.verdict, d.reason, d.rules.as_slice()),
        (Verdict::Deny, Reason::UntrustedUnregistered, ["untrusted_server".to_string()].as_slice())
    );
}

#[test]
fn a_forbid_on_an_argument_denies_and_names_its_rule() {
    let d = decided(&policy(), &notice_tool(), json!({"to": "outside@example.test"}), None);
    assert_eq!(
        (d.verdict, d.reason, d.rules.as_slice()),
        (Verdict::Deny, Reason::PolicyForbids, ["no_other_recipients".to_string()].as_slice())
    );
    // The permitted recipient: no policy applies, the registry's automatic class allows.
    let d = decided(&policy(), &notice_tool(), json!({"to": "team@example.test"}), None);
    assert_eq!((d.verdict, d.reason), (Verdict::Allow, Reason::Automatic));
}

#[test]
fn a_forbid_with_approval_requires_one_and_says_why() {
    let (tool, proposal) = order(json!(9));
    let d =
        decide(&policy(), &Guards::none(), &agent(), &tool, &proposal, None, &Situation::default());
    assert_eq!((d.verdict, d.reason), (Verdict::RequireApproval, Reason::PolicyRequiresApproval));
    assert_eq!(
        (d.rules.as_slice(), d.why.as_str()),
        (
            ["order_above_five_units".to_string()].as_slice(),
            "an order above five units needs a named approver"
        )
    );
}

#[test]
fn policy_sees_the_state_of_the_approval_the_call_presents() {
    let (tool, proposal) = order(json!(9));
    let by_state = |state| {
        decide(&policy(), &Guards::none(), &agent(), &tool, &proposal, state, &Situation::default())
    };
    let approved = by_state(Some(ApprovalState::Approved));
    assert_eq!(
        (approved.verdict, approved.reason, approved.rules.as_slice()),
        (Verdict::Allow, Reason::PolicyPermits, ["approved_orders".to_string()].as_slice())
    );
    // Anything but approved is what it is, not approved.
    for state in [
        None,
        Some(ApprovalState::Pending),
        Some(ApprovalState::Expired),
        Some(ApprovalState::Consumed),
        Some(ApprovalState::Denied),
    ] {
        assert_eq!(by_state(state).verdict, Verdict::RequireApproval, "{state:?}");
    }
}

#[test]
fn the_tools_labels_and_the_callers_roles_reach_policy() {
    let mut export = tool(
        "tickets",
        json!({"name": "export_service_records", "inputSchema": {"type": "object"}}),
        Some(AuthorityClass::Automatic),
    );
    assert_eq!(decided(&policy(), &export, json!({}), None).verdict, Verdict::Allow);
    export.labels = vec!["bulk_export".into()];
    let d = decided(&policy(), &export, json!({}), None);
    assert_eq!(
        (d.verdict, d.rules.as_slice()),
        (Verdict::Deny, ["no_exports".to_string()].as_slice())
    );
    // The rule is for agents: an auditor's call falls back to the class.
    let auditor = Caller { roles: vec!["auditor".into()], ..(*agent()).clone() };
    let proposal = Proposal::new("tickets", "export_service_records", json!({}));
    assert_eq!(
        decide(
            &policy(),
            &Guards::none(),
            &auditor,
            &export,
            &proposal,
            None,
            &Situation::default()
        )
        .verdict,
        Verdict::Allow
    );
}

#[test]
fn a_policy_that_fails_to_evaluate_denies() {
    // `quantity` must be a Long; a string where the policy compares fails it, closed.
    let (tool, proposal) = order(json!("nine"));
    let d =
        decide(&policy(), &Guards::none(), &agent(), &tool, &proposal, None, &Situation::default());
    assert_eq!((d.verdict, d.reason), (Verdict::Deny, Reason::PolicyError));
}

fn guarded(trifecta: &str) -> Guards {
    let config: GuardsConfig =
        toml::from_str(&format!("[trifecta]\non_exfiltration = \"{trifecta}\"")).unwrap();
    Guards::new(&config)
}

fn both_legs() -> Situation {
    let leg = |leg, tool: &str| LegCall {
        leg,
        tool: tool.into(),
        proposal_sha256: "cd".repeat(32),
        at_ms: 0,
    };
    Situation {
        run: "r".into(),
        legs: vec![
            leg(toolgate_core::trifecta::Leg::PrivateData, "t__get"),
            leg(toolgate_core::trifecta::Leg::UntrustedContent, "m__read"),
        ],
        over: None,
    }
}

#[test]
fn the_trifecta_guards_egress_tools_only_and_as_configured() {
    let mut egress = notice_tool();
    // The replay reads the same situation back from the rules.
    let recorded = Situation::recorded(&decide(
        &PolicyEngine::empty(),
        &guarded("approval"),
        &agent(),
        &egress,
        &Proposal::new("notices", "send_notice", json!({})),
        None,
        &both_legs(),
    ));
    assert_eq!(
        (
            recorded.legs.len(),
            recorded.legs[0].tool.as_str(),
            recorded.legs[0].proposal_sha256.as_str()
        ),
        (2, "t__get", "cdcdcdcdcdcdcdcd")
    );
    egress.labels = vec!["egress".into()];
    let proposal = Proposal::new("notices", "send_notice", json!({"to": "team@example.test"}));
    let held = decide(
        &PolicyEngine::empty(),
        &guarded("approval"),
        &agent(),
        &egress,
        &proposal,
        None,
        &both_legs(),
    );
    assert_eq!((held.verdict, held.reason), (Verdict::RequireApproval, Reason::LethalTrifecta));
    let refused = decide(
        &PolicyEngine::empty(),
        &guarded("block"),
        &agent(),
        &egress,
        &proposal,
        None,
        &both_legs(),
    );
    assert_eq!((refused.verdict, refused.reason), (Verdict::Deny, Reason::LethalTrifecta));
    // Not an egress tool (it declares a closed world, and no label says
    // otherwise): the run's legs do not matter.
    let closed = tool(
        "notices",
        json!({"name": "send_notice", "inputSchema": {"type": "object"}, "annotations": {"openWorldHint": false}}),
        Some(AuthorityClass::Automatic),
    );
    let d = decide(
        &PolicyEngine::empty(),
        &guarded("block"),
        &agent(),
        &closed,
        &proposal,
        None,
        &both_legs(),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    // The guard off: nothing held.
    let off: GuardsConfig = toml::from_str("[trifecta]\nenabled = false").unwrap();
    assert_eq!(
        decide(
            &PolicyEngine::empty(),
            &Guards::new(&off),
            &agent(),
            &egress,
            &proposal,
            None,
            &both_legs()
        )
        .verdict,
        Verdict::Allow
    );
}

#[test]
fn a_budget_overrun_refuses_to_retry_unless_already_denied() {
    let over = Situation {
        over: Some(Over::Rate { per_minute: 10, retry_after_ms: 600 }),
        ..Situation::default()
    };
    let d = decide(
        &PolicyEngine::empty(),
        &Guards::none(),
        &agent(),
        &notice_tool(),
        &Proposal::new("notices", "send_notice", json!({})),
        None,
        &over,
    );
    assert_eq!(
        (d.verdict, d.reason, d.retry_after_ms),
        (Verdict::Deny, Reason::RateLimited, Some(600))
    );
    // A denial stands: retrying would not change it.
    let d = decide(
        &policy(),
        &Guards::none(),
        &agent(),
        &notice_tool(),
        &Proposal::new("notices", "send_notice", json!({"to": "x@elsewhere.test"})),
        None,
        &over,
    );
    assert_eq!((d.reason, d.retry_after_ms), (Reason::PolicyForbids, None));
}
