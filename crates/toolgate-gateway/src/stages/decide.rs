//! decide: the Cedar policy's word on this caller, tool and arguments; where
//! no policy applies, the tool's effective authority class (the registry's,
//! or a trusted server's annotations). Guards and budgets join here later.

use toolgate_core::approval::ApprovalState;
use toolgate_core::policy::{Outcome, PolicyEngine, ToolFacts};
use toolgate_core::{Caller, Decision, Proposal};

use crate::catalog::ExposedTool;

/// `approval` is the state of the approval the call presents, if it
/// presents one of exactly this call (policy sees `none` otherwise).
pub fn decide(policy: &PolicyEngine, caller: &Caller, tool: &ExposedTool, proposal: &Proposal, approval: Option<ApprovalState>) -> Decision {
    let facts = ToolFacts {
        exposed_name: &tool.exposed_name,
        server: &tool.server,
        name: &tool.tool.name,
        class: tool.view.effective_class.as_str(),
        labels: &tool.labels,
    };
    let outcome = policy.evaluate(caller, &facts, &proposal.arguments, approval.map_or("none", ApprovalState::as_str));
    if let Outcome::Error { rules, message } = &outcome {
        // Fail closed, and tell the operator which rule to fix.
        tracing::warn!(target: "toolgate::policy", tool = %tool.exposed_name, rules = ?rules, %message, "a policy failed to evaluate; the call is denied");
    }
    toolgate_core::decision::decide(&tool.view, &outcome)
}
