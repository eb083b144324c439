//! `toolgate replay`: a recorded call decided again under another policy,
//! in the order every call is decided (`decide::weigh`). What was asked —
//! the caller, the tool's facts, the arguments, the class decision and the
//! decision made — is the ledger's private record kept with the call's
//! first receipt. The guards are the config's, not the policy's: a call a
//! guard judged is judged by it again, so only the policy's part can
//! change; the run's legs and the budgets are facts of the moment it was
//! decided (its rules record them), not of the policy.

use anyhow::Context as _;
use serde_json::Value;
use toolgate_core::policy::{PolicyEngine, ToolFacts};
use toolgate_core::{Caller, Decision};

use crate::stages::decide::{Guards, Situation, weigh};

/// One recorded call, decided again.
pub struct Replayed {
    /// Who called.
    pub caller: Caller,
    /// The exposed tool name it called.
    pub exposed_name: String,
    /// How it was decided then.
    pub recorded: Decision,
    /// How `policy` decides it now.
    pub now: Decision,
}

impl Replayed {
    /// Whether the decision would change (its verdict or its reason).
    pub fn changed(&self) -> bool {
        self.now.verdict != self.recorded.verdict || self.now.reason != self.recorded.reason
    }
}

/// A policy to decide recorded calls again with, beside the configured guards.
pub struct Replay {
    policy: PolicyEngine,
    guards: Guards,
}

impl Replay {
    /// `policy`, with the guards `config` sets (`[guards]`).
    pub fn new(policy: PolicyEngine, config: &crate::config::Config) -> Self {
        Self { policy, guards: Guards::new(&config.guards) }
    }

    /// The version of the policy calls are decided again under.
    pub fn policy_version(&self) -> &str {
        self.policy.version()
    }

    /// Decides the call recorded as `asked` (a receipt's private record) again.
    pub fn decide_again(&self, asked: &Value) -> anyhow::Result<Replayed> {
        decide_again(&self.policy, &self.guards, asked)
    }
}

fn decide_again(policy: &PolicyEngine, guards: &Guards, asked: &Value) -> anyhow::Result<Replayed> {
    let caller: Caller =
        serde_json::from_value(asked["caller"].clone()).context("the record's caller")?;
    let recorded: Decision =
        serde_json::from_value(asked["decision"].clone()).context("the record's decision")?;
    let by_class: Decision = serde_json::from_value(asked["class_decision"].clone())
        .context("the record's class decision")?;
    let t = &asked["tool"];
    let labels: Vec<String> = serde_json::from_value(t["labels"].clone()).unwrap_or_default();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (exposed_name, server, name, class) =
        (s(&t["exposed_name"]), s(&t["server"]), s(&t["name"]), s(&t["class"]));
    let facts = ToolFacts {
        exposed_name: &exposed_name,
        server: &server,
        name: &name,
        class: &class,
        labels: &labels,
    };
    let outcome = policy.evaluate(
        &caller,
        &facts,
        &asked["arguments"],
        asked["approval_state"].as_str().unwrap_or("none"),
    );
    let situation = Situation::recorded(&recorded);
    // Whether the call sends data out is known from what its guards said then.
    let egress =
        recorded.rules.iter().any(|r| r.starts_with("egress.")) || !situation.legs.is_empty();
    let now = weigh(&outcome, || by_class, guards, egress, &asked["arguments"], &situation);
    Ok(Replayed { caller, exposed_name, recorded, now })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolgate_core::{Reason, Verdict};

    use super::*;
    use crate::config::Config;
    use crate::stages::testing::SCHEMA;

    fn asked(quantity: i64, decision: Value) -> Value {
        json!({
            "caller": {"name": "agent", "subject": "agent-7", "tenant": "atlas", "roles": ["agent"]},
            "tool": {"exposed_name": "parts__raise_parts_order", "server": "parts", "name": "raise_parts_order", "class": "requires_approval", "labels": []},
            "arguments": {"part_no": "P-1", "quantity": quantity},
            "class_decision": {"verdict": "require_approval", "reason": "approval_required", "rules": ["registry"]},
            "approval_state": "none",
            "decision": decision,
        })
    }

    #[test]
    fn a_recorded_call_is_decided_again_by_the_new_policy_and_the_same_guards() {
        let policy = PolicyEngine::load(r#"@id("small_orders") permit(principal, action, resource) when { context.arguments has quantity && context.arguments.quantity <= 5 };"#, SCHEMA).expect("the policy loads");
        let recorded = json!({"verdict": "require_approval", "reason": "approval_required", "rules": ["registry"]});
        let again = decide_again(&policy, &Guards::none(), &asked(2, recorded.clone())).unwrap();
        assert_eq!(
            (again.now.verdict, again.now.reason, again.changed()),
            (Verdict::Allow, Reason::PolicyPermits, true)
        );
        assert_eq!(
            (again.exposed_name.as_str(), again.caller.name.as_str()),
            ("parts__raise_parts_order", "agent")
        );
        // Where the policy says nothing, the class decision recorded then stands.
        let same = decide_again(&policy, &Guards::none(), &asked(8, recorded)).unwrap();
        assert_eq!((same.now.verdict, same.changed()), (Verdict::RequireApproval, false));
    }

    #[test]
    fn a_budget_the_call_was_over_still_refuses_it_and_a_broken_record_is_an_error() {
        let config = Config::parse("", std::path::Path::new("/tmp/toolgate.toml")).unwrap();
        let guards = Guards::new(&config.guards);
        let over = json!({"verdict": "deny", "reason": "rate_limited", "rules": ["registry", "budget.rate"], "retry_after_ms": 800});
        let again = decide_again(&PolicyEngine::empty(), &guards, &asked(2, over)).unwrap();
        assert_eq!(
            (again.now.reason, again.now.retry_after_ms, again.changed()),
            (Reason::RateLimited, Some(800), false)
        );
        assert!(decide_again(&PolicyEngine::empty(), &guards, &json!({"caller": 7})).is_err());
    }
}
