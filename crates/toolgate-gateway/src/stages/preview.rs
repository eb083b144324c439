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
            "by": format!("a caller with the approver role in tenant `{}`, other than {} \
                (subject {})", cx.caller.tenant, cx.caller.name, cx.caller.subject),
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
mod tests;
