//! Budgets in the decide stage: a caller over its rate, or a run over its
//! call budget, is refused with `retry` and how long to wait. The counting
//! is the gateway's (a rate limiter per caller; the run's count in the
//! ledger); what it found arrives here as a value, `Over`.
//!
//! A denial by policy or registry stands (retrying would not change it); a
//! call that would run or wait for a person is refused while over budget.

use crate::decision::{Decision, Reason, Verdict};

/// A budget the call is over, and when the same call may be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Over {
    /// The caller has sent more than `per_minute` calls (with its burst).
    Rate {
        /// The configured rate.
        per_minute: u32,
        /// When the next call is accepted.
        retry_after_ms: i64,
    },
    /// The run has made `limit` calls already.
    Run {
        /// The run's id.
        run: String,
        /// The configured budget.
        limit: u64,
        /// When the run ends (and a call under the same id starts a new one).
        retry_after_ms: i64,
    },
}

/// The budgets' word, joined to `decision`.
pub fn guard(decision: Decision, over: Option<&Over>) -> Decision {
    let Some(over) = over else { return decision };
    if decision.verdict == Verdict::Deny {
        return decision;
    }
    let (reason, rule, why, retry_after_ms) = match over {
        Over::Rate { per_minute, retry_after_ms } => (
            Reason::RateLimited,
            "budget.rate",
            format!(
                "you are over your rate of {per_minute} calls a minute; wait {retry_after_ms} ms and call again"
            ),
            *retry_after_ms,
        ),
        Over::Run { run, limit, retry_after_ms } => (
            Reason::RunBudgetExhausted,
            "budget.run",
            format!(
                "run `{run}` has made its {limit} calls; it ends in {retry_after_ms} ms, or start a new run"
            ),
            *retry_after_ms,
        ),
    };
    Decision {
        retry_after_ms: Some(retry_after_ms.max(1)),
        ..Decision::by(Verdict::Deny, reason, vec![rule.into()]).because(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Action, Refusal};

    #[test]
    fn over_budget_refuses_with_retry_and_when() {
        let allowed = Decision::by(Verdict::Allow, Reason::Automatic, vec!["registry".into()]);
        let d = guard(allowed.clone(), Some(&Over::Rate { per_minute: 60, retry_after_ms: 950 }));
        assert_eq!(
            (d.verdict, d.reason, d.retry_after_ms),
            (Verdict::Deny, Reason::RateLimited, Some(950))
        );
        let r = Refusal::from_decision(&d, "parts__find_part").unwrap();
        assert_eq!(
            (r.action, r.retry_after_ms, r.rules.as_slice()),
            (Action::Retry, Some(950), ["budget.rate".to_string()].as_slice())
        );
        assert!(r.message.contains("60 calls a minute"), "{}", r.message);
        let d = guard(
            allowed.clone(),
            Some(&Over::Run { run: "r".into(), limit: 3, retry_after_ms: 0 }),
        );
        assert_eq!((d.reason, d.retry_after_ms), (Reason::RunBudgetExhausted, Some(1)));
        assert_eq!(guard(allowed.clone(), None), allowed);
    }

    #[test]
    fn a_denial_stands() {
        let denied = Decision::by(Verdict::Deny, Reason::Prohibited, vec!["registry".into()]);
        assert_eq!(
            guard(denied.clone(), Some(&Over::Rate { per_minute: 1, retry_after_ms: 5 })),
            denied
        );
        assert_eq!(Refusal::from_decision(&denied, "x").unwrap().action, Action::Refused);
    }
}
