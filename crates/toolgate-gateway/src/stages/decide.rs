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
mod tests;
