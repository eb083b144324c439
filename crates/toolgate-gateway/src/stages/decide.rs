//! decide: the Cedar policy's word on this caller, tool and arguments; where
//! no policy applies, the tool's effective authority class (the registry's,
//! or a trusted server's annotations); then the guards' word: on what the
//! call would send (the egress scan), on its run (the lethal trifecta), and
//! on its budgets. What the guards know beyond the arguments — the run's
//! legs, a budget it is over — arrives as a value (`Situation`), gathered
//! just before; deciding reads nothing and writes nothing.

use toolgate_core::approval::ApprovalState;
use toolgate_core::budget::{self, Over};
use toolgate_core::egress::{self, CustomPattern, OnConfidential};
use toolgate_core::policy::{Outcome, PolicyEngine, ToolFacts};
use toolgate_core::trifecta::{self, LegCall, OnExfiltration};
use toolgate_core::{Caller, Decision, Proposal};

use crate::catalog::ExposedTool;
use crate::config::GuardsConfig;

/// The guards as configured, compiled once at start.
pub struct Guards {
    egress: Option<(OnConfidential, Vec<CustomPattern>)>,
    trifecta: Option<OnExfiltration>,
}

/// What the guards know of a call beyond its arguments.
#[derive(Debug, Default)]
pub struct Situation {
    /// The agent run the call is part of.
    pub run: String,
    /// The calls that brought each leg of the trifecta into the run (read
    /// for calls to egress tools only).
    pub legs: Vec<LegCall>,
    /// A budget the call is over: the caller's rate, or the run's calls.
    pub over: Option<Over>,
}

impl Guards {
    /// No guard at all.
    pub fn none() -> Self {
        Self { egress: None, trifecta: None }
    }

    /// From `[guards]` (validated with the config: every pattern compiles).
    pub fn new(config: &GuardsConfig) -> Self {
        let e = &config.egress;
        let patterns = e
            .patterns
            .iter()
            .filter_map(|p| {
                regex::Regex::new(&p.regex).ok().map(|regex| CustomPattern {
                    name: p.name.clone(),
                    regex,
                    class: p.class,
                })
            })
            .collect();
        if e.enabled {
            // Compiled now, not on the first call that needs them.
            egress::warm();
        }
        let t = &config.trifecta;
        Self {
            egress: e.enabled.then_some((e.confidential, patterns)),
            trifecta: t.enabled.then_some(t.on_exfiltration),
        }
    }

    /// The egress guard's word on a call sending `arguments` out, joined to
    /// `decision` (unchanged when the guard is off).
    pub fn egress(&self, decision: Decision, arguments: &serde_json::Value) -> Decision {
        match &self.egress {
            Some((on_confidential, patterns)) => {
                egress::guard(decision, &egress::scan(arguments, patterns), *on_confidential)
            }
            None => decision,
        }
    }

    /// The trifecta guard's word on a call to an egress tool in the run
    /// `situation` describes (unchanged when the guard is off).
    pub fn trifecta(&self, decision: Decision, situation: &Situation) -> Decision {
        match self.trifecta {
            Some(on) => trifecta::guard(decision, &situation.run, &situation.legs, on),
            None => decision,
        }
    }
}

impl Situation {
    /// The situation a recorded decision was made in, as far as its rules
    /// tell (`trifecta.LEG@TOOL#HASH16`, `budget.rate`, `budget.run`):
    /// enough for `toolgate replay` to decide it again as the guards did.
    pub fn recorded(decision: &Decision) -> Self {
        let legs = decision
            .rules
            .iter()
            .filter_map(|r| {
                let (leg, rest) = r.strip_prefix("trifecta.")?.split_once('@')?;
                let (tool, hash) = rest.rsplit_once('#')?;
                Some(LegCall {
                    leg: toolgate_core::trifecta::Leg::parse(leg)?,
                    tool: tool.into(),
                    proposal_sha256: hash.into(),
                    at_ms: 0,
                })
            })
            .collect();
        let retry_after_ms = decision.retry_after_ms.unwrap_or(1);
        let over = decision.rules.iter().find_map(|r| match r.as_str() {
            "budget.rate" => Some(Over::Rate { per_minute: 0, retry_after_ms }),
            "budget.run" => Some(Over::Run { run: String::new(), limit: 0, retry_after_ms }),
            _ => None,
        });
        Self { run: String::new(), legs, over }
    }
}

/// Whether calls of `tool` send data out: the registry labels it `egress`,
/// or its effective `openWorldHint` is true.
pub fn egress_tool(tool: &ExposedTool) -> bool {
    tool.labels.iter().any(|l| l == "egress") || tool.view.hints.open_world_hint.value
}

/// `approval` is the state of the approval the call presents, if it
/// presents one of exactly this call (policy sees `none` otherwise).
pub fn decide(
    policy: &PolicyEngine,
    guards: &Guards,
    caller: &Caller,
    tool: &ExposedTool,
    proposal: &Proposal,
    approval: Option<ApprovalState>,
    situation: &Situation,
) -> Decision {
    let facts = ToolFacts {
        exposed_name: &tool.exposed_name,
        server: &tool.server,
        name: &tool.tool.name,
        class: tool.view.effective_class.as_str(),
        labels: &tool.labels,
    };
    // Cedar's one action is `call_tool`: prompts and resources are the
    // registry's to class (automatic or prohibited), not the policy's.
    let outcome = match tool.kind {
        toolgate_mcp::upstream::Kind::Tool => policy.evaluate(
            caller,
            &facts,
            &proposal.arguments,
            approval.map_or("none", ApprovalState::as_str),
        ),
        _ => Outcome::NotApplicable,
    };
    if let Outcome::Error { rules, message } = &outcome {
        // Fail closed, and tell the operator which rule to fix.
        tracing::warn!(target: "toolgate::policy", tool = %tool.exposed_name, rules = ?rules, %message, "a policy failed to evaluate; the call is denied");
    }
    weigh(
        &outcome,
        || toolgate_core::decision::decide_by_class(&tool.view),
        guards,
        egress_tool(tool),
        &proposal.arguments,
        situation,
    )
}

/// The order every decision is made in — by a call here, and by `toolgate
/// replay` for a recorded one: the policy's `outcome`, or where no policy
/// applies the class decision (`by_class`); then, for a call that sends
/// data out (`egress`), the egress scan of its `arguments` and the
/// trifecta of its run; then the budgets it is over.
pub fn weigh(
    outcome: &Outcome,
    by_class: impl FnOnce() -> Decision,
    guards: &Guards,
    egress: bool,
    arguments: &serde_json::Value,
    situation: &Situation,
) -> Decision {
    let mut decision = toolgate_core::decision::decide_or(outcome, by_class);
    if egress {
        decision = guards.egress(decision, arguments);
        decision = guards.trifecta(decision, situation);
    }
    budget::guard(decision, situation.over.as_ref())
}

#[cfg(test)]
mod tests {
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
            (
                Verdict::Deny,
                Reason::UntrustedUnregistered,
                ["untrusted_server".to_string()].as_slice()
            )
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
        let d = decide(
            &policy(),
            &Guards::none(),
            &agent(),
            &tool,
            &proposal,
            None,
            &Situation::default(),
        );
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::RequireApproval, Reason::PolicyRequiresApproval)
        );
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
            decide(
                &policy(),
                &Guards::none(),
                &agent(),
                &tool,
                &proposal,
                state,
                &Situation::default(),
            )
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
        let d = decide(
            &policy(),
            &Guards::none(),
            &agent(),
            &tool,
            &proposal,
            None,
            &Situation::default(),
        );
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
}
