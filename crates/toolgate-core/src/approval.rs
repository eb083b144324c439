//! Approvals bound to one exact call. An approval is valid only for the
//! same {tenant, caller, server, tool, proposal_sha256, policy_version},
//! once, before it expires. `judge` is the whole rule: given what the call
//! presents and what the store holds, what happens next. The store applies
//! the step atomically (a consumed approval cannot be consumed twice).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decision::{Action, Reason, Refusal, Verdict};

/// What an approval is bound to: one exact call by one caller under one
/// policy version. An approval of any other binding never counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    /// The tenant of the caller who made the call (never from the arguments).
    pub tenant: String,
    /// The name of the caller who made the call (its `[callers]` key).
    pub caller: String,
    /// The upstream server's configured name.
    pub server: String,
    /// The tool's name on that upstream (not the namespaced exposed name).
    pub tool: String,
    /// The hash of the call's proposal, so the approval covers these exact
    /// arguments and no others.
    pub proposal_sha256: String,
    /// The version of the policy that required the approval; a changed
    /// policy needs a fresh one.
    pub policy_version: String,
}

/// Where an approval is in its life. Only `pending` may be decided, and
/// only `approved` may be consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for an approver.
    Pending,
    /// Approved by an approver and not yet used.
    Approved,
    /// Denied by an approver: final for this exact call.
    Denied,
    /// Not decided, or not used, before it expired.
    Expired,
    /// Approved and used by one dispatch.
    Consumed,
}

impl ApprovalState {
    /// The snake_case name: as stored, and as policy sees it in
    /// `context.approval`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Consumed => "consumed",
        }
    }

    /// The state named by `s` (as [`ApprovalState::as_str`] writes it), if any.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Approved, Self::Denied, Self::Expired, Self::Consumed]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One request for a named human to let one exact call run, as the store
/// holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    /// The approval's id (`apr_…`), as sealed in `requestState` and named to
    /// approvers.
    pub id: String,
    /// The exact call it is bound to.
    #[serde(flatten)]
    pub binding: Binding,
    /// The exact arguments the approver sees.
    pub arguments: Value,
    /// Why approval is needed (the policy's annotation, or the registry class).
    pub reason: String,
    /// The ids of the rules that required approval (policy rule ids, or
    /// `registry`, …).
    pub rules: Vec<String>,
    /// The state as last stored; [`Approval::state_at`] also accounts for expiry.
    pub state: ApprovalState,
    /// When the approval was opened, in ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires, in ms since the Unix epoch: it must be decided and
    /// used before then.
    pub expires_ms: i64,
    /// The approver who approved or denied it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The reason the approver gave with the decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_reason: Option<String>,
    /// When the approver decided, in ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_ms: Option<i64>,
    /// When one dispatch consumed it, in ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_ms: Option<i64>,
    /// The person behind the caller who asked (its subject); empty for an
    /// approval stored before subjects were recorded.
    pub subject: String,
    /// The client's own operation key the call was sent with; none when it
    /// sent none (the approved call is then the operation `approval:<id>`).
    /// An approval is for that one operation only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
}

impl Approval {
    /// The state as of `now`: an undecided or unused approval past its
    /// expiry is expired, whether or not the store has noted it yet.
    pub fn state_at(&self, now_ms: i64) -> ApprovalState {
        match self.state {
            ApprovalState::Pending | ApprovalState::Approved if now_ms >= self.expires_ms => {
                ApprovalState::Expired
            }
            s => s,
        }
    }

    /// Whether the approver `name` with `subject` is the one who asked: the
    /// same credential, or the same person under another one.
    pub fn asked_by(&self, name: &str, subject: &str) -> bool {
        self.binding.caller == name || (!self.subject.is_empty() && self.subject == subject)
    }

    /// This approval as the gateway would act on it at `now`: its state is
    /// `state_at(now)`, so what is shown is what a re-issue would meet.
    pub fn as_of(&self, now_ms: i64) -> Approval {
        Approval { state: self.state_at(now_ms), ..self.clone() }
    }
}

/// What a re-issued call presents: the content of a `requestState` this
/// gateway sealed (so already known to be authentic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The id of the approval the `requestState` was issued for.
    pub approval_id: String,
    /// The call that approval is bound to, as sealed; it must equal the
    /// re-issued call's binding.
    #[serde(flatten)]
    pub binding: Binding,
    /// The upstream's own `requestState`, when the approved call is in an
    /// input round of its own (the tool asked for more input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_state: Option<String>,
}

/// What happens next to a call that needs approval: the outcome of [`judge`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Open a new pending approval and wait for it.
    Open,
    /// Still waiting for this approval.
    Wait(String),
    /// Dispatch, consuming this approval (once: a lost race refuses).
    Consume(String),
    /// Dispatch the next input round of a call this approval already let
    /// through.
    Continue(String),
    /// The same call again after this approval let it run, within the
    /// approval's life: answer with the outcome it recorded, never run it
    /// twice (whichever era the client speaks).
    Replay(String),
    /// Refuse the call, for this reason (see [`refusal`]).
    Refuse(Reason),
}

/// The rule. `claimed` is the approval the claim names (if any was found),
/// `latest` the newest approval with this call's binding.
pub fn judge(
    binding: &Binding,
    claim: Option<&Claim>,
    claimed: Option<&Approval>,
    latest: Option<&Approval>,
    now_ms: i64,
) -> Step {
    if let Some(claim) = claim {
        let Some(approval) = claimed.filter(|a| {
            a.id == claim.approval_id && claim.binding == *binding && a.binding == *binding
        }) else {
            return Step::Refuse(Reason::ApprovalMissingOrMismatched);
        };
        if claim.upstream_state.is_some() {
            return match approval.state {
                ApprovalState::Consumed => Step::Continue(approval.id.clone()),
                _ => Step::Refuse(Reason::ApprovalMissingOrMismatched),
            };
        }
        return match approval.state_at(now_ms) {
            ApprovalState::Pending => Step::Wait(approval.id.clone()),
            ApprovalState::Approved => Step::Consume(approval.id.clone()),
            ApprovalState::Denied => Step::Refuse(Reason::ApprovalDenied),
            ApprovalState::Expired => Step::Refuse(Reason::ApprovalExpired),
            ApprovalState::Consumed => Step::Refuse(Reason::ApprovalUsed),
        };
    }
    match latest.filter(|a| a.binding == *binding).map(|a| (a, a.state_at(now_ms))) {
        Some((a, ApprovalState::Pending)) => Step::Wait(a.id.clone()),
        Some((a, ApprovalState::Approved)) => Step::Consume(a.id.clone()),
        // A denial is terminal for this exact proposal.
        Some((_, ApprovalState::Denied)) => Step::Refuse(Reason::ApprovalDenied),
        // A retry of the call it let run (a lost answer, a legacy client
        // re-issuing): its recorded outcome, until the approval's life ends.
        Some((a, ApprovalState::Consumed)) if now_ms < a.expires_ms => Step::Replay(a.id.clone()),
        // Nothing usable: a fresh call opens a fresh approval.
        None | Some((_, ApprovalState::Expired | ApprovalState::Consumed)) => Step::Open,
    }
}

/// What each approval refusal tells the caller about its call to `exposed`.
pub fn refusal(reason: Reason, exposed: &str) -> Refusal {
    let (verdict, action, message) = match reason {
        Reason::ApprovalDenied => (
            Verdict::Deny,
            Action::Refused,
            format!(
                "an approver denied this exact call to {exposed}; it stays denied — do not retry it"
            ),
        ),
        Reason::ApprovalExpired => (
            Verdict::RequireApproval,
            Action::Escalate,
            format!(
                "the approval for this call to {exposed} expired before it was used; call again without requestState to ask for a fresh one"
            ),
        ),
        Reason::ApprovalUsed => (
            Verdict::RequireApproval,
            Action::Refused,
            format!(
                "this approval was already used: the call to {exposed} ran once. To do it again, \
                    send a new _meta[\"io.toolgate/operationKey\"]: a new operation, with an \
                    approval of its own"
            ),
        ),
        Reason::ApprovalMissingOrMismatched => (
            Verdict::RequireApproval,
            Action::Escalate,
            format!(
                "the requestState is bound to another call (other arguments, caller or policy); \
                    this call to {exposed} was not run. Call without requestState to ask approval \
                    for this content"
            ),
        ),
        _ => (
            Verdict::RequireApproval,
            Action::Correct,
            format!(
                "the requestState was not issued by this gateway or was altered; call {exposed} again without it"
            ),
        ),
    };
    Refusal::new(verdict, reason, action, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn binding(proposal: &str) -> Binding {
        Binding {
            tenant: "atlas".into(),
            caller: "agent".into(),
            server: "notices".into(),
            tool: "send_notice".into(),
            proposal_sha256: proposal.into(),
            policy_version: "v1".into(),
        }
    }

    fn approval(state: ApprovalState) -> Approval {
        Approval {
            id: "apr_1".into(),
            binding: binding("p1"),
            arguments: json!({}),
            reason: "r".into(),
            rules: vec![],
            state,
            created_ms: 0,
            expires_ms: 1000,
            decided_by: None,
            decision_reason: None,
            decided_ms: None,
            used_ms: None,
            subject: "agent@atlas.example".into(),
            operation_key: None,
        }
    }

    fn claim(b: Binding) -> Claim {
        Claim { approval_id: "apr_1".into(), binding: b, upstream_state: None }
    }

    #[test]
    fn the_asker_is_the_same_credential_or_the_same_person() {
        let a = approval(ApprovalState::Pending);
        assert!(a.asked_by("agent", "someone@else"), "the credential that asked");
        assert!(
            a.asked_by("agent_human", "agent@atlas.example"),
            "the same person under another credential"
        );
        assert!(!a.asked_by("dana", "dana@atlas.example"));
        let before = Approval { subject: String::new(), ..a };
        assert!(
            !before.asked_by("dana", ""),
            "no subject recorded: only the credential is compared"
        );
    }

    #[test]
    fn shown_as_of_now_an_unused_approval_past_its_expiry_is_expired() {
        assert_eq!(approval(ApprovalState::Approved).as_of(999).state, ApprovalState::Approved);
        assert_eq!(approval(ApprovalState::Approved).as_of(1000).state, ApprovalState::Expired);
        assert_eq!(approval(ApprovalState::Pending).as_of(5000).state, ApprovalState::Expired);
        assert_eq!(approval(ApprovalState::Consumed).as_of(5000).state, ApprovalState::Consumed);
        assert_eq!(approval(ApprovalState::Denied).as_of(5000).state, ApprovalState::Denied);
    }

    #[test]
    fn a_claim_follows_its_approval_state() {
        use ApprovalState::*;
        let b = binding("p1");
        let cases = [
            (Pending, 10, Step::Wait("apr_1".into())),
            (Approved, 10, Step::Consume("apr_1".into())),
            (Denied, 10, Step::Refuse(Reason::ApprovalDenied)),
            (Consumed, 10, Step::Refuse(Reason::ApprovalUsed)),
            (Approved, 1000, Step::Refuse(Reason::ApprovalExpired)),
            (Pending, 5000, Step::Refuse(Reason::ApprovalExpired)),
        ];
        for (state, now, step) in cases {
            let a = approval(state);
            assert_eq!(
                judge(&b, Some(&claim(b.clone())), Some(&a), Some(&a), now),
                step,
                "{state:?} at {now}"
            );
        }
        // A claim whose approval the store does not have.
        assert_eq!(
            judge(&b, Some(&claim(b.clone())), None, None, 10),
            Step::Refuse(Reason::ApprovalMissingOrMismatched)
        );
    }

    #[test]
    fn without_a_claim_the_latest_approval_of_this_binding_decides() {
        use ApprovalState::*;
        let b = binding("p1");
        assert_eq!(judge(&b, None, None, None, 10), Step::Open);
        assert_eq!(judge(&b, None, None, Some(&approval(Pending)), 10), Step::Wait("apr_1".into()));
        assert_eq!(
            judge(&b, None, None, Some(&approval(Approved)), 10),
            Step::Consume("apr_1".into())
        );
        assert_eq!(
            judge(&b, None, None, Some(&approval(Denied)), 10),
            Step::Refuse(Reason::ApprovalDenied)
        );
        // The same call after it ran: its recorded outcome while the
        // approval lives (it expires at 1000), a fresh approval after.
        assert_eq!(
            judge(&b, None, None, Some(&approval(Consumed)), 999),
            Step::Replay("apr_1".into())
        );
        assert_eq!(judge(&b, None, None, Some(&approval(Consumed)), 1000), Step::Open);
        assert_eq!(judge(&b, None, None, Some(&approval(Pending)), 2000), Step::Open);
        // Another proposal's approval never counts.
        assert_eq!(judge(&binding("p2"), None, None, Some(&approval(Approved)), 10), Step::Open);
    }

    #[test]
    fn a_continuation_round_needs_the_approval_already_used() {
        let b = binding("p1");
        let mut c = claim(b.clone());
        c.upstream_state = Some("upstream".into());
        assert_eq!(
            judge(&b, Some(&c), Some(&approval(ApprovalState::Consumed)), None, 10),
            Step::Continue("apr_1".into())
        );
        assert_eq!(
            judge(&b, Some(&c), Some(&approval(ApprovalState::Approved)), None, 10),
            Step::Refuse(Reason::ApprovalMissingOrMismatched)
        );
    }

    proptest! {
        /// Change any argument value of an approved call (at any key) and
        /// its proposal hash, so its binding, no longer matches: the
        /// approval does not carry it.
        #[test]
        fn any_change_to_the_arguments_breaks_the_binding(
            args in proptest::collection::btree_map("[a-z_]{1,8}", proptest::prop_oneof![
                any::<i64>().prop_map(Value::from),
                "[ -~]{0,12}".prop_map(Value::from),
                any::<bool>().prop_map(Value::from),
            ], 1..6),
            pick in any::<proptest::sample::Index>(),
            replacement in "[ -~]{0,12}",
        ) {
            let original = Value::Object(args.clone().into_iter().collect());
            let key = pick.get(&args.keys().collect::<Vec<_>>()).to_string();
            let mut changed = original.clone();
            changed[&key] = match &original[&key] {
                Value::String(s) if *s == replacement => Value::from(format!("{replacement}!")),
                Value::String(_) => Value::from(replacement),
                other => Value::from(format!("{other}")),
            };
            let approved_proposal = crate::proposal::Proposal::new("notices", "send_notice", original);
            let changed_proposal = crate::proposal::Proposal::new("notices", "send_notice", changed);
            prop_assert_ne!(&approved_proposal.sha256, &changed_proposal.sha256);
            let mut approved = approval(ApprovalState::Approved);
            approved.binding.proposal_sha256 = approved_proposal.sha256.clone();
            let mut now = approved.binding.clone();
            now.proposal_sha256 = changed_proposal.sha256;
            prop_assert_eq!(judge(&now, Some(&claim(approved.binding.clone())), Some(&approved), None, 10), Step::Refuse(Reason::ApprovalMissingOrMismatched));
            prop_assert_eq!(judge(&now, None, None, Some(&approved), 10), Step::Open);
        }

        /// Change any one field of the binding and an approved claim no
        /// longer dispatches.
        #[test]
        fn any_change_to_the_binding_breaks_it(field in 0usize..6, value in "[a-z0-9]{1,12}") {
            let approved = approval(ApprovalState::Approved);
            let mut other = approved.binding.clone();
            let slot = match field {
                0 => &mut other.tenant,
                1 => &mut other.caller,
                2 => &mut other.server,
                3 => &mut other.tool,
                4 => &mut other.proposal_sha256,
                _ => &mut other.policy_version,
            };
            prop_assume!(*slot != value);
            *slot = value;
            let presented = claim(approved.binding.clone());
            prop_assert_eq!(judge(&other, Some(&presented), Some(&approved), Some(&approved), 10), Step::Refuse(Reason::ApprovalMissingOrMismatched));
            prop_assert_eq!(judge(&other, None, None, Some(&approved), 10), Step::Open);
        }
    }
}
