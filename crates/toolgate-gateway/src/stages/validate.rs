//! validate: the arguments against the tool's full inputSchema; every
//! violation by its path, values redacted. What passes becomes the proposal.

use serde_json::Value;
use toolgate_core::{Action, Proposal, Reason, Refusal, Verdict};

use crate::call::Stop;
use crate::catalog::ExposedTool;

/// The arguments against the tool's inputSchema: the canonical proposal, or
/// a refusal naming every violation by its path (values never echoed).
pub fn validate(tool: &ExposedTool, arguments: &Value) -> Result<Proposal, Stop> {
    let proposal = Proposal::new(&tool.server, &tool.subject(), arguments.clone());
    let validator = match &tool.input {
        Ok(v) => v,
        Err(why) => {
            return Err(Stop::Refused(
                Refusal::new(
                    Verdict::Deny,
                    Reason::ContractInvalid,
                    Action::Escalate,
                    format!("{} declares an input schema that cannot be enforced ({why}); an operator must fix the server", tool.exposed_name),
                )
                .with_proposal(&proposal.sha256),
            ));
        }
    };
    let mut violations = validator.violations(arguments);
    // Valid by the schema but not hashable exactly: the proposal must bind one call.
    violations.extend(toolgate_core::proposal::inexact_integers(arguments));
    if !violations.is_empty() {
        let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
        return Err(Stop::Refused(
            Refusal::new(
                Verdict::Deny,
                Reason::InvalidArguments,
                Action::Correct,
                format!("the arguments do not match the inputSchema of {} at {}; correct them and call again", tool.exposed_name, paths.join(", ")),
            )
            .with_proposal(&proposal.sha256)
            .with_violations(violations),
        ));
    }
    Ok(proposal)
}

#[cfg(test)]
mod tests;
