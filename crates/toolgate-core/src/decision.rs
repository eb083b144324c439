//! Decisions and refusals: what the gateway concluded about one call, and
//! what it tells the caller to do next. Pure: a function of the authority
//! view and the policy's outcome (guards and budgets join here as they land).

use serde::{Deserialize, Serialize};

use crate::authority::{AuthorityClass, AuthorityView, ClassSource};
use crate::policy::Outcome;
use crate::schema::Violation;

/// The gateway's conclusion about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The call may run.
    Allow,
    /// The call runs only once a named human approves this exact call.
    RequireApproval,
    /// The call must not run.
    Deny,
}

/// What the caller can do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Fix the arguments and call again.
    Correct,
    /// Transient; the same call is safe to retry later.
    Retry,
    /// The outcome is unknown; reconcile before anything else.
    Reconcile,
    /// A human must act (approve, accept a changed contract).
    Escalate,
    /// Not permitted; do not retry.
    Refused,
}

/// Why a call was decided as it was: one code per cause, the same in
/// results, logs and (later) receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The registry (or trusted annotations) class is automatic.
    Automatic,
    /// The effective class is requires_approval.
    ApprovalRequired,
    /// The registry class is prohibited.
    Prohibited,
    /// Not in the registry and the server is not trusted.
    UntrustedUnregistered,
    /// Not in the registry; the hints of a trusted server imply prohibited.
    AnnotationsImplyProhibited,
    /// The exposed name names no tool (nor prompt, nor resource, for those requests).
    UnknownTool,
    /// The arguments do not match the tool's inputSchema (or cannot be
    /// hashed exactly), or the operation key is not valid.
    InvalidArguments,
    /// The arguments exceed the size limit (`max_argument_bytes`).
    ArgumentsTooLarge,
    /// The tool's definition differs from its pinned contract; an operator
    /// must review and accept it.
    ContractChanged,
    /// The contract could not be pinned (the lock file is not writable).
    ContractUnpinned,
    /// The tool declares an inputSchema that cannot be enforced.
    ContractInvalid,
    /// The upstream server (or the approvals store) is unavailable or refused
    /// the request; nothing was run.
    UpstreamUnavailable,
    /// The upstream did not answer before the deadline.
    UpstreamTimeout,
    /// The call was sent and the connection was lost before an answer.
    OutcomeUnknown,
    /// The upstream's result violates the tool's outputSchema.
    InvalidResult,
    /// A policy permits the call.
    PolicyPermits,
    /// A policy forbids the call.
    PolicyForbids,
    /// A policy requires a named human's approval.
    PolicyRequiresApproval,
    /// A policy failed to evaluate; denied, fail closed.
    PolicyError,
    /// The arguments carry a tenant key; the tenant comes from the caller.
    TenantInArguments,
    /// The call waits for an approver.
    ApprovalPending,
    /// An approver denied this exact call; it stays denied.
    ApprovalDenied,
    /// The approval expired before it was used.
    ApprovalExpired,
    /// The approval presented is for other content, another caller or
    /// another policy version.
    ApprovalMissingOrMismatched,
    /// The approval was already used by one dispatch.
    ApprovalUsed,
    /// The `requestState` presented was not issued by this gateway, or was altered.
    RequestStateInvalid,
    /// The operation key was used for another payload.
    OperationConflict,
    /// The operation under this key is still running.
    OperationInProgress,
    /// The operation ledger could not be read or written; nothing was run.
    LedgerUnavailable,
    /// An operation whose outcome was unknown, settled after the fact (by a
    /// reconciler's read or an operator's word): a settlement receipt's reason.
    Reconciled,
    /// The arguments of a call to an egress tool carry restricted data
    /// (payment cards, national ids, private keys, tokens): it may not leave.
    EgressRestricted,
    /// The arguments of a call to an egress tool carry confidential data
    /// (JWTs, password pairs): held for approval or refused, as configured.
    EgressConfidential,
    /// The call would send data out of a run that has taken in both private
    /// data and untrusted content (the lethal trifecta): held for approval
    /// or refused, as configured.
    LethalTrifecta,
    /// The caller is over its rate (`[budgets] rate_per_minute`): retry later.
    RateLimited,
    /// The run has used its call budget (`[budgets] run_calls`).
    RunBudgetExhausted,
    /// The tool is running as many calls at once as it may
    /// (`[budgets.concurrency]`): retry shortly.
    ConcurrencyLimited,
    /// The caller has as many approvals pending as it may
    /// (`[approvals] max_pending_per_caller`): approvers decide some first.
    TooManyPendingApprovals,
    /// The upstream's answer (a result, a tool error, a resource, a prompt,
    /// a JSON-RPC error) carries a credential toolgate holds (a header or
    /// variable it gives an upstream, a caller's token, one of its keys):
    /// the answer is withheld.
    CredentialWithheld,
    /// The credential for the person (`[servers.NAME.identity]`) could not
    /// be made (the token exchange failed); nothing was sent.
    IdentityUnavailable,
    /// The server acts for each person with their own grant
    /// (`mode = "oauth"`), and the caller's person has not connected one:
    /// the answer carries the link to connect; nothing was sent.
    ConnectRequired,
}

/// What the decide stage concluded about one call: the verdict, its cause
/// and the rules behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Whether the call may run.
    pub verdict: Verdict,
    /// Why, as one code.
    pub reason: Reason,
    /// Which rules decided: policy rule ids, or one of `registry`,
    /// `annotations`, `untrusted_server` when the class decided.
    pub rules: Vec<String>,
    /// Why approval is needed, from the policy's `@approval` annotation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
    /// For a budget's refusal: how long until the same call may be accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
}

impl Decision {
    /// A decision by `rules`, with no more to say.
    pub fn by(verdict: Verdict, reason: Reason, rules: Vec<String>) -> Self {
        Self { verdict, reason, rules, why: String::new(), retry_after_ms: None }
    }

    /// The same decision, saying why.
    pub fn because(mut self, why: impl Into<String>) -> Self {
        self.why = why.into();
        self
    }
}

/// The decide stage: the policy's outcome when one applies, else the
/// effective class of the tool. A policy that fails to evaluate denies.
pub fn decide(view: &AuthorityView, policy: &Outcome) -> Decision {
    decide_or(policy, || decide_by_class(view))
}

/// The policy's word, or `fallback` where no policy applies (`toolgate
/// replay` passes the class decision recorded with the proposal).
pub fn decide_or(policy: &Outcome, fallback: impl FnOnce() -> Decision) -> Decision {
    let by = |verdict, reason, rules: &Vec<String>| Decision::by(verdict, reason, rules.clone());
    match policy {
        Outcome::Permit { rules } => by(Verdict::Allow, Reason::PolicyPermits, rules),
        Outcome::Forbid { rules } => by(Verdict::Deny, Reason::PolicyForbids, rules),
        Outcome::Error { rules, .. } => by(Verdict::Deny, Reason::PolicyError, rules),
        Outcome::RequireApproval { rules, why } => {
            Decision::by(Verdict::RequireApproval, Reason::PolicyRequiresApproval, rules.clone())
                .because(why.clone())
        }
        Outcome::NotApplicable => fallback(),
    }
}

/// The effective class of the tool decides.
pub fn decide_by_class(view: &AuthorityView) -> Decision {
    let rule = match view.source {
        ClassSource::Registry => "registry",
        ClassSource::Annotations => "annotations",
        ClassSource::UntrustedServer => "untrusted_server",
    };
    let (verdict, reason) = match (view.effective_class, view.source) {
        (AuthorityClass::Automatic, _) => (Verdict::Allow, Reason::Automatic),
        (AuthorityClass::RequiresApproval, _) => {
            (Verdict::RequireApproval, Reason::ApprovalRequired)
        }
        (AuthorityClass::Prohibited, ClassSource::UntrustedServer) => {
            (Verdict::Deny, Reason::UntrustedUnregistered)
        }
        (AuthorityClass::Prohibited, ClassSource::Annotations) => {
            (Verdict::Deny, Reason::AnnotationsImplyProhibited)
        }
        (AuthorityClass::Prohibited, ClassSource::Registry) => (Verdict::Deny, Reason::Prohibited),
    };
    Decision::by(verdict, reason, vec![rule.to_string()])
}

/// A refused call as the caller sees it: the structured content of an
/// `isError: true` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The call's verdict: `allow` too, when an allowed call failed later.
    /// On the wire it is `decision` (what refusals have always said).
    #[serde(rename = "decision")]
    pub verdict: Verdict,
    /// Why the call was refused, as one code.
    pub reason: Reason,
    /// What the caller can do next.
    pub action: Action,
    /// Says what happened and what to do, for a model or a person.
    pub message: String,
    /// The hash of the call's proposal, once the arguments made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal_sha256: Option<String>,
    /// Where the arguments violate the inputSchema, values masked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
    /// The rules that decided (policy rule ids, or `registry`, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// The approval this refusal concerns, for the approver's tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The operation this refusal concerns (`toolgate ops show`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// For `retry`: how long to wait first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
}

impl Refusal {
    /// A refusal with nothing beyond its verdict, reason, action and message.
    pub fn new(
        verdict: Verdict,
        reason: Reason,
        action: Action,
        message: impl Into<String>,
    ) -> Self {
        Self {
            verdict,
            reason,
            action,
            message: message.into(),
            proposal_sha256: None,
            violations: Vec::new(),
            rules: Vec::new(),
            approval_id: None,
            operation_id: None,
            retry_after_ms: None,
        }
    }

    /// Names the call's proposal (its SHA-256).
    pub fn with_proposal(mut self, sha256: &str) -> Self {
        self.proposal_sha256 = Some(sha256.to_string());
        self
    }

    /// Names the approval this refusal concerns.
    pub fn with_approval(mut self, id: &str) -> Self {
        self.approval_id = Some(id.to_string());
        self
    }

    /// Names the operation this refusal concerns.
    pub fn with_operation(mut self, id: &str) -> Self {
        self.operation_id = Some(id.to_string());
        self
    }

    /// Says how long to wait before retrying, in ms.
    pub fn with_retry_after(mut self, ms: i64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// Lists the schema violations of the arguments.
    pub fn with_violations(mut self, violations: Vec<Violation>) -> Self {
        self.violations = violations;
        self
    }

    /// The refusal a non-allow decision yields where no approval can be
    /// waited for: require_approval escalates, deny is final.
    pub fn from_decision(decision: &Decision, exposed_name: &str) -> Option<Self> {
        let (action, message) = match decision.verdict {
            Verdict::Allow => return None,
            Verdict::RequireApproval => (
                Action::Escalate,
                format!("{exposed_name} requires approval by a named human; this call was not run"),
            ),
            // A budget's refusal: the same call is accepted later.
            Verdict::Deny if decision.retry_after_ms.is_some() => {
                (Action::Retry, format!("{exposed_name}: {}; this call was not run", decision.why))
            }
            Verdict::Deny if !decision.why.is_empty() => (
                Action::Refused,
                format!("{exposed_name}: {}; this call was not run", decision.why),
            ),
            Verdict::Deny => {
                (Action::Refused, format!("{exposed_name} is not permitted here; do not retry"))
            }
        };
        let mut refusal = Refusal::new(decision.verdict, decision.reason, action, message);
        refusal.rules = decision.rules.clone();
        refusal.retry_after_ms = decision.retry_after_ms;
        Some(refusal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::Hints;
    use serde_json::json;

    #[test]
    fn each_class_gives_its_verdict_and_next_action() {
        let hints = Hints::from_annotations(None);
        let cases = [
            (Some(AuthorityClass::Automatic), true, Verdict::Allow, None),
            (
                Some(AuthorityClass::RequiresApproval),
                true,
                Verdict::RequireApproval,
                Some(Action::Escalate),
            ),
            (Some(AuthorityClass::Prohibited), true, Verdict::Deny, Some(Action::Refused)),
            (None, false, Verdict::Deny, Some(Action::Refused)),
            (None, true, Verdict::Deny, Some(Action::Refused)),
        ];
        for (registry, trusted, verdict, action) in cases {
            let d = decide(&AuthorityView::new(hints, registry, trusted), &Outcome::NotApplicable);
            assert_eq!(d.verdict, verdict);
            assert_eq!(Refusal::from_decision(&d, "x__y").map(|r| r.action), action);
        }
    }

    #[test]
    fn a_refusal_serialises_to_the_documented_shape() {
        let r = Refusal::new(Verdict::Deny, Reason::Prohibited, Action::Refused, "no")
            .with_proposal("ab");
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"decision": "deny", "reason": "prohibited", "action": "refused", "message": "no", "proposal_sha256": "ab"})
        );
    }
}
