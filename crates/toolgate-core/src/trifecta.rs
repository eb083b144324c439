//! The lethal trifecta, per agent run (seed 000 names it and leaves it
//! unbuilt): an agent that has taken in private data and untrusted content
//! in one run, and then calls a tool that sends data out, may be carrying
//! out an instruction planted in that content with that data. Any two legs
//! are harmless; the third is where the guard stands.
//!
//! Pure: which legs a tool's results bring in (`legs_of`), and the guard's
//! word on an egress call given the run's history (`guard`). The run's
//! history lives in the ledger; the gateway reads it before decide and
//! writes a leg once a call that brings one in has answered.

use serde::{Deserialize, Serialize};

use crate::decision::{Decision, Reason, Verdict};

/// One of the two legs a run takes in before the third (a way out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leg {
    /// Data the host holds private (registry label `private_data`).
    PrivateData,
    /// Content an outsider could have written (label `untrusted_content`,
    /// or any tool of an untrusted server).
    UntrustedContent,
}

impl Leg {
    /// The snake_case name, as labels, rules and the ledger spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PrivateData => "private_data",
            Self::UntrustedContent => "untrusted_content",
        }
    }

    /// The leg a stored name names.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "private_data" => Some(Self::PrivateData),
            "untrusted_content" => Some(Self::UntrustedContent),
            _ => None,
        }
    }
}

/// The registry label that says a tool of an untrusted server returns only
/// what the host vouches for (its content does not count as untrusted).
pub const TRUSTED_CONTENT: &str = "trusted_content";

/// The legs a tool's answers bring into a run: by its registry labels, and
/// untrusted content from any tool of an untrusted server unless the
/// registry labels it `trusted_content`.
pub fn legs_of(labels: &[String], server_trusted: bool) -> Vec<Leg> {
    let has = |l: &str| labels.iter().any(|x| x == l);
    let mut legs = Vec::new();
    if has("private_data") {
        legs.push(Leg::PrivateData);
    }
    if has("untrusted_content") || (!server_trusted && !has(TRUSTED_CONTENT)) {
        legs.push(Leg::UntrustedContent);
    }
    legs
}

/// A call that brought a leg into a run: which tool, which exact call (its
/// proposal's hash), when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegCall {
    /// The leg it brought in.
    pub leg: Leg,
    /// The exposed name of the tool called.
    pub tool: String,
    /// The SHA-256 of the call's proposal (its receipts name it too).
    pub proposal_sha256: String,
    /// When its answer came back (ms since the Unix epoch).
    pub at_ms: i64,
}

impl LegCall {
    /// How a decision's rules name it: `trifecta.LEG@TOOL#HASH16`, enough of
    /// the proposal's hash to find the call's receipts.
    pub fn rule(&self) -> String {
        format!(
            "trifecta.{}@{}#{}",
            self.leg.as_str(),
            self.tool,
            &self.proposal_sha256[..self.proposal_sha256.len().min(16)]
        )
    }
}

/// What an egress call meets once its run holds both legs
/// (`[guards.trifecta] on_exfiltration`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnExfiltration {
    /// It waits for a named approver, who sees the run's history.
    #[default]
    Approval,
    /// It is refused.
    Block,
}

/// The trifecta guard's word on a call to an egress tool, joined to
/// `decision`: if the run's `history` holds both legs, the call waits for a
/// named approver or is refused, as configured, and the calls that brought
/// each leg in join the decision's rules (so the approval, the receipt and
/// the span name them). A denial stands as it is, noted. A run holding one
/// leg or none leaves the decision as it is.
pub fn guard(decision: Decision, run: &str, history: &[LegCall], on: OnExfiltration) -> Decision {
    let first = |leg| history.iter().find(|c| c.leg == leg);
    let (Some(private), Some(untrusted)) = (first(Leg::PrivateData), first(Leg::UntrustedContent))
    else {
        return decision;
    };
    // Every call of each leg, in the order they came (the history is short:
    // the ledger keeps the first few of each).
    let found: Vec<String> = history.iter().map(LegCall::rule).collect();
    let story = format!(
        "run `{run}` has taken in private data (first from {} at {}) and untrusted content (first from {} at {}), and this call sends data out",
        private.tool,
        crate::receipt::rfc3339_ms(private.at_ms),
        untrusted.tool,
        crate::receipt::rfc3339_ms(untrusted.at_ms),
    );
    let mut noted = decision;
    if noted.verdict == Verdict::Deny {
        noted.rules.extend(found);
        return noted;
    }
    match on {
        OnExfiltration::Block => Decision::by(Verdict::Deny, Reason::LethalTrifecta, found)
            .because(format!("{story}: refused (lethal trifecta); start a new run without the untrusted content, or ask an operator")),
        OnExfiltration::Approval => {
            let why = format!("{story}: a named approver must let it leave (lethal trifecta)");
            if noted.verdict == Verdict::RequireApproval {
                // Already held for a person: they are told of the run too.
                noted.why = if noted.why.is_empty() { why } else { format!("{}; {why}", noted.why) };
                noted.rules.extend(found);
                noted
            } else {
                Decision::by(Verdict::RequireApproval, Reason::LethalTrifecta, found).because(why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(leg: Leg, tool: &str) -> LegCall {
        LegCall {
            leg,
            tool: tool.into(),
            proposal_sha256: "ab".repeat(32),
            at_ms: 1_700_000_000_000,
        }
    }

    fn allowed() -> Decision {
        Decision::by(Verdict::Allow, Reason::Automatic, vec!["registry".into()])
    }

    #[test]
    fn labels_and_trust_give_the_legs() {
        let l = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(legs_of(&l(&["private_data"]), true), vec![Leg::PrivateData]);
        assert_eq!(legs_of(&l(&[]), true), Vec::<Leg>::new());
        assert_eq!(legs_of(&l(&[]), false), vec![Leg::UntrustedContent]);
        assert_eq!(legs_of(&l(&["trusted_content"]), false), Vec::<Leg>::new());
        assert_eq!(
            legs_of(&l(&["private_data", "untrusted_content"]), true),
            vec![Leg::PrivateData, Leg::UntrustedContent]
        );
    }

    #[test]
    fn two_legs_and_a_way_out_wait_for_a_person_or_are_refused() {
        let history = [
            leg(Leg::PrivateData, "tickets__get_ticket"),
            leg(Leg::UntrustedContent, "manuals__search_manual"),
        ];
        let held = guard(allowed(), "r1", &history, OnExfiltration::Approval);
        assert_eq!((held.verdict, held.reason), (Verdict::RequireApproval, Reason::LethalTrifecta));
        assert_eq!(
            held.rules,
            vec![
                format!("trifecta.private_data@tickets__get_ticket#{}", "ab".repeat(8)),
                format!("trifecta.untrusted_content@manuals__search_manual#{}", "ab".repeat(8))
            ]
        );
        assert!(
            held.why.contains("tickets__get_ticket")
                && held.why.contains("manuals__search_manual")
                && held.why.contains("`r1`"),
            "{}",
            held.why
        );
        let refused = guard(allowed(), "r1", &history, OnExfiltration::Block);
        assert_eq!((refused.verdict, refused.reason), (Verdict::Deny, Reason::LethalTrifecta));
        assert_eq!(refused.rules.len(), 2);
    }

    #[test]
    fn one_leg_or_none_leaves_the_decision() {
        for history in [
            vec![],
            vec![leg(Leg::PrivateData, "a")],
            vec![leg(Leg::UntrustedContent, "b"), leg(Leg::UntrustedContent, "c")],
        ] {
            assert_eq!(guard(allowed(), "r", &history, OnExfiltration::Block), allowed());
        }
    }

    #[test]
    fn a_denial_stands_and_a_held_call_says_both() {
        let history = [leg(Leg::UntrustedContent, "b"), leg(Leg::PrivateData, "a")];
        let denied = Decision::by(Verdict::Deny, Reason::PolicyForbids, vec!["no".into()]);
        let d = guard(denied, "r", &history, OnExfiltration::Approval);
        assert_eq!((d.verdict, d.reason, d.rules.len()), (Verdict::Deny, Reason::PolicyForbids, 3));
        let held = Decision::by(
            Verdict::RequireApproval,
            Reason::PolicyRequiresApproval,
            vec!["big".into()],
        )
        .because("big orders need a person");
        let d = guard(held, "r", &history, OnExfiltration::Approval);
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::RequireApproval, Reason::PolicyRequiresApproval)
        );
        assert!(d.why.starts_with("big orders need a person; run `r`"), "{}", d.why);
    }
}
