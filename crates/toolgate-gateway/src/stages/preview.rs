//! preview: a call carrying `_meta["io.toolgate/preview"]: true` stops after
//! decide (seed 003's PREVIEW: decide without acting). It is admitted,
//! resolved, validated and decided like any call — the registry, Cedar and
//! the guards all speak — and answered with how it would be decided, who
//! would have to approve it, and what the guards found. Nothing is opened,
//! reserved or sent, and no receipt is recorded: a preview attests nothing,
//! and a caller may preview as often as it likes. (A refusal before decide —
//! unknown tool, invalid arguments — answers a preview as it answers a call.)

use serde_json::{Value, json};
use toolgate_core::{Decision, Proposal, Verdict};

use crate::call::Context;
use crate::catalog::ExposedTool;
use toolgate_mcp::wire::RawObject;

/// The preview's answer: a complete result whose `structuredContent` says
/// how the call would be decided. For a tool that declares an
/// `outputSchema` it is marked `isError`: the official SDKs check every
/// other result against that schema, and a preview is not the tool's
/// output (it would fail the check, and the SDK would raise).
pub(crate) fn answer(
    cx: &Context,
    tool: &ExposedTool,
    proposal: &Proposal,
    decision: &Decision,
    policy_version: &str,
) -> RawObject {
    let verdict = serde_json::to_value(decision.verdict).unwrap_or(Value::Null);
    let reason = serde_json::to_value(decision.reason).unwrap_or(Value::Null);
    let approval = match decision.verdict {
        Verdict::RequireApproval => json!({
            "needed": true,
            "by": format!("a caller with the approver role in tenant `{}`, other than {} (subject {})", cx.caller.tenant, cx.caller.name, cx.caller.subject),
            "why": decision.why,
        }),
        _ => json!({"needed": false}),
    };
    // Each guard's findings, as the decision's rules name them.
    let found =
        |prefix: &str| decision.rules.iter().filter(|r| r.starts_with(prefix)).collect::<Vec<_>>();
    let summary = match decision.verdict {
        Verdict::Allow => {
            format!("{} would run ({}).", tool.exposed_name, reason.as_str().unwrap_or(""))
        }
        Verdict::RequireApproval => format!(
            "{} would wait for a named approver ({}).",
            tool.exposed_name,
            reason.as_str().unwrap_or("")
        ),
        Verdict::Deny => {
            format!("{} would be refused ({}).", tool.exposed_name, reason.as_str().unwrap_or(""))
        }
    };
    let structured = json!({
        "preview": true,
        "decision": verdict,
        "reason": reason,
        "rules": decision.rules,
        "class": tool.view.effective_class,
        "registry_class": tool.view.registry_class,
        "approval": approval,
        "guards": {"egress": found("egress."), "trifecta": found("trifecta."), "budget": found("budget.")},
        "proposal_sha256": proposal.sha256,
        "policy_version": policy_version,
        "message": format!("{summary} Nothing was run, opened or recorded."),
    });
    let mut out = RawObject::new();
    let raw = |v: &Value| serde_json::value::to_raw_value(v).expect("serialisable");
    out.insert("content".into(), raw(&json!([{"type": "text", "text": structured["message"]}])));
    out.insert("structuredContent".into(), raw(&structured));
    if tool.output.is_some() {
        out.insert("isError".into(), raw(&json!(true)));
    }
    out
}

#[cfg(test)]
mod tests {
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
        assert!(
            allowed["message"].as_str().unwrap().starts_with("parts__raise_parts_order would run")
        );
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
        let declared =
            tool("parts", definition, Some(toolgate_core::AuthorityClass::RequiresApproval));
        let out = answer(&cx, &declared, &proposal, &decision, "p");
        assert_eq!(
            field(&out, "isError"),
            json!(true),
            "SDKs check other results against the schema"
        );
        assert_eq!(field(&out, "structuredContent")["preview"], true);
    }
}
