//! The one receipt builder. Every receipt toolgate writes — a read's single
//! one, a write's decision and outcome, a wait for approval, a replay, a
//! refusal, a protocol error, a settlement by reconcile or by hand — is
//! built by [`build`] from what the call's stages concluded, as typed
//! values. The receipt itself keeps plain strings (see the parent module:
//! old receipts must stay readable); the names are chosen only here.

use serde::Serialize;
use serde_json::Value;

use super::{
    ApprovalRef, OperationRef, RECEIPT_VERSION, Receipt, UpstreamIdentity, rfc3339_ms, salted_hash,
};
use crate::decision::{Decision, Reason, Refusal, Verdict};
use crate::operation::OperationState;
use crate::proposal::{canonical_json, sha256_hex};

/// How far a call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Decided to run; not yet sent.
    Authorized,
    /// Sent upstream.
    Dispatched,
    /// Never sent.
    NotDispatched,
    /// Answered from the recorded outcome, not sent again.
    Replayed,
    /// Settled after the fact (reconcile, or an operator's word).
    Reconciled,
}

/// What became of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultStatus {
    /// Authorized, outcome to follow.
    Pending,
    /// Answered with a result.
    Ok,
    /// Answered with a tool error (`isError: true`).
    ToolError,
    /// Known not to have taken effect.
    NotApplied,
    /// Sent; whether it took effect is not known.
    Unknown,
    /// Waits for a named human's approval.
    AwaitingApproval,
    /// Refused; not sent.
    Refused,
    /// Settled as having taken effect.
    Applied,
    /// Ended by a JSON-RPC error with this code.
    ProtocolError(i64),
}

impl ExecutionStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorized => "authorized",
            Self::Dispatched => "dispatched",
            Self::NotDispatched => "not_dispatched",
            Self::Replayed => "replayed",
            Self::Reconciled => "reconciled",
        }
    }
}

impl ResultStatus {
    /// The wire name (`protocol_error:CODE` for a JSON-RPC error).
    pub fn wire(self) -> String {
        match self {
            Self::Pending => "pending".into(),
            Self::Ok => "ok".into(),
            Self::ToolError => "tool_error".into(),
            Self::NotApplied => "not_applied".into(),
            Self::Unknown => "unknown".into(),
            Self::AwaitingApproval => "awaiting_approval".into(),
            Self::Refused => "refused".into(),
            Self::Applied => "applied".into(),
            Self::ProtocolError(code) => format!("protocol_error:{code}"),
        }
    }

    /// How a sent write ended, by the state its operation records.
    pub fn of_dispatch(state: OperationState) -> Self {
        match state {
            OperationState::Completed | OperationState::ReconciledApplied => Self::Ok,
            OperationState::ToolError => Self::ToolError,
            OperationState::ReconciledNotApplied => Self::NotApplied,
            _ => Self::Unknown,
        }
    }
}

/// The wire name of a serde enum value (`require_approval`, `escalate`, …).
pub fn wire_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// What every receipt of one call shares: when, who asked, for which
/// contract and proposal, how it was decided, and the salted hash of the
/// arguments.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// The instant the receipt states, in ms since the Unix epoch.
    pub issued_at_ms: i64,
    /// The caller's tenant (from its credentials, never from the arguments).
    pub tenant: &'a str,
    /// The caller's name (its `[callers]` key).
    pub caller: &'a str,
    /// The upstream server's configured name.
    pub server: &'a str,
    /// The tool's name on that upstream.
    pub tool: &'a str,
    /// The hash of the tool's pinned definition.
    pub tool_definition_sha256: &'a str,
    /// The hash of the call's proposal.
    pub proposal_sha256: &'a str,
    /// `None` before the call was decided (it was refused first).
    pub decision: Option<&'a Decision>,
    /// The version of the policy set in force.
    pub policy_version: &'a str,
    /// The operation's key and state as last recorded, for a write.
    pub operation: Option<OperationRef>,
    /// This call's secret salt.
    pub salt: &'a [u8; 32],
    /// `salted_hash(salt, canonical arguments)`.
    pub arguments_hash: &'a str,
    /// The full arguments, when the gateway captures values.
    pub captured: Option<&'a Value>,
    /// The box the server runs in: its profile's hash, or `off`; `None`
    /// for an HTTP upstream or where no server is behind the receipt.
    pub sandbox: Option<&'a str>,
    /// The version of the config in force (`Receipt::config_version`).
    pub config_version: Option<&'a str>,
    /// As whom the call reaches its server, once its credential is made.
    pub identity: Option<&'a UpstreamIdentity>,
}

/// What happened, for one receipt.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// The decision to run a call, before it is sent (a write's first receipt).
    Authorized {
        /// The approval it runs under, if any.
        approval: Option<ApprovalRef>,
    },
    /// How a sent write ended: the state its operation records, and the
    /// upstream's answer when there is one.
    Dispatched {
        /// The state its operation records.
        state: OperationState,
        /// The upstream's answer, when there is one.
        result: Option<&'a Value>,
    },
    /// A read, sent and answered: its decision and outcome in one receipt.
    Answered {
        /// The approval it ran under, if any.
        approval: Option<ApprovalRef>,
        /// Whether the answer is a tool error (`isError: true`).
        tool_error: bool,
        /// The upstream's answer.
        result: Attested<'a>,
    },
    /// The call waits for a named human.
    Awaiting {
        /// The approval it waits for.
        approval: Option<ApprovalRef>,
    },
    /// The recorded outcome, given again.
    Replayed {
        /// The approval the call runs under, if any.
        approval: Option<ApprovalRef>,
        /// Whether the recorded outcome is a tool error.
        tool_error: bool,
        /// The recorded outcome.
        result: Attested<'a>,
    },
    /// Refused; `dispatched` when it was sent first (its outcome is then unknown).
    Refused {
        /// The approval the call runs under, if any.
        approval: Option<ApprovalRef>,
        /// The refusal the caller gets.
        refusal: &'a Refusal,
        /// Whether the call was sent before it was refused.
        dispatched: bool,
    },
    /// Ended by a JSON-RPC error; the decision stands.
    ProtocolError {
        /// The approval the call runs under, if any.
        approval: Option<ApprovalRef>,
        /// The JSON-RPC error code.
        code: i64,
        /// Whether the call was sent upstream.
        dispatched: bool,
    },
    /// An unknown operation settled by `by` (a reconciler or an operator).
    Settled {
        /// The state it was settled to.
        state: OperationState,
        /// Who settled it: a reconciler or an operator.
        by: &'a str,
        /// The outcome recorded with it (for an applied one, the evidence found).
        result: Option<&'a Value>,
    },
}

/// The receipt of `event`, unsigned and unplaced (the ledger assigns
/// `log_index`; the log's key fills `kid` and signs).
pub fn build(subject: &Subject, event: Event) -> Receipt {
    let (verdict, reason, rules) = match subject.decision {
        Some(d) => (wire_name(&d.verdict), wire_name(&d.reason), d.rules.clone()),
        None => (String::new(), String::new(), Vec::new()),
    };
    let mut r = Receipt {
        v: RECEIPT_VERSION,
        kid: String::new(),
        log_index: 0,
        issued_at: rfc3339_ms(subject.issued_at_ms),
        tenant: subject.tenant.to_string(),
        caller: subject.caller.to_string(),
        server: subject.server.to_string(),
        tool: subject.tool.to_string(),
        tool_definition_sha256: subject.tool_definition_sha256.to_string(),
        proposal_sha256: subject.proposal_sha256.to_string(),
        decision: verdict,
        reason,
        rules,
        policy_version: subject.policy_version.to_string(),
        approval: None,
        operation: subject.operation.clone(),
        execution_status: String::new(),
        result_status: String::new(),
        result_sha256: None,
        arguments_hash: subject.arguments_hash.to_string(),
        result_hash: None,
        arguments: subject.captured.cloned(),
        result: None,
        sandbox: subject.sandbox.map(str::to_string),
        config_version: subject.config_version.map(str::to_string),
        identity: subject.identity.cloned(),
    };
    let tool_status =
        |tool_error: bool| if tool_error { ResultStatus::ToolError } else { ResultStatus::Ok };
    let (execution, result) = match event {
        Event::Authorized { approval } => {
            r.approval = approval;
            (ExecutionStatus::Authorized, ResultStatus::Pending)
        }
        Event::Dispatched { state, result } => {
            set_state(&mut r, state);
            if let Some(value) = result {
                attest(&mut r, subject, Attested::Value(value), true);
            }
            (ExecutionStatus::Dispatched, ResultStatus::of_dispatch(state))
        }
        Event::Answered { approval, tool_error, result } => {
            r.approval = approval;
            attest(&mut r, subject, result, true);
            (ExecutionStatus::Dispatched, tool_status(tool_error))
        }
        Event::Awaiting { approval } => {
            r.approval = approval;
            (ExecutionStatus::NotDispatched, ResultStatus::AwaitingApproval)
        }
        Event::Replayed { approval, tool_error, result } => {
            // Only the plain hash: the replay attests which recorded result
            // it gave, not a new one.
            r.approval = approval;
            r.result_sha256 = Some(sha256_hex(result.canonical().as_bytes()));
            (ExecutionStatus::Replayed, tool_status(tool_error))
        }
        Event::Refused { approval, refusal, dispatched } => {
            // The refusal's own verdict and reason: it may come before any
            // decision (invalid arguments) or after an allow (a conflict).
            r.approval = approval;
            r.decision = wire_name(&refusal.verdict);
            r.reason = wire_name(&refusal.reason);
            if !refusal.rules.is_empty() {
                r.rules = refusal.rules.clone();
            }
            if r.proposal_sha256.is_empty() {
                r.proposal_sha256 = refusal.proposal_sha256.clone().unwrap_or_default();
            }
            // The receipt commits to the refusal exactly as the caller is
            // given it (a tool call's `structuredContent`, a prompt's or a
            // resource's error `data`), so a verifier proves the whole
            // answer, not only its reason.
            r.result_sha256 = Some(refusal_sha256(refusal));
            if dispatched {
                (ExecutionStatus::Dispatched, ResultStatus::Unknown)
            } else {
                (ExecutionStatus::NotDispatched, ResultStatus::Refused)
            }
        }
        Event::ProtocolError { approval, code, dispatched } => {
            r.approval = approval;
            let execution = if dispatched {
                ExecutionStatus::Dispatched
            } else {
                ExecutionStatus::NotDispatched
            };
            (execution, ResultStatus::ProtocolError(code))
        }
        Event::Settled { state, by, result } => {
            r.decision = wire_name(&Verdict::Allow);
            r.reason = wire_name(&Reason::Reconciled);
            r.rules = vec![by.to_string()];
            set_state(&mut r, state);
            if let Some(value) = result {
                attest(&mut r, subject, Attested::Value(value), false);
            }
            let settled = if state == OperationState::ReconciledApplied {
                ResultStatus::Applied
            } else {
                ResultStatus::NotApplied
            };
            (ExecutionStatus::Reconciled, settled)
        }
    };
    r.execution_status = execution.as_str().to_string();
    r.result_status = result.wire();
    r
}

fn set_state(r: &mut Receipt, state: OperationState) {
    if let Some(op) = &mut r.operation {
        op.state = state.as_str().into();
    }
}

/// SHA-256 of the JCS of a refusal as the caller is given it: what a
/// refusal's receipt names as its `result_sha256`.
pub fn refusal_sha256(refusal: &Refusal) -> String {
    sha256_hex(
        canonical_json(&serde_json::to_value(refusal).expect("a refusal serializes")).as_bytes(),
    )
}

/// The result's plain and salted hashes, and the value itself when the
/// gateway captures values (and `capture_result` allows it).
fn attest(r: &mut Receipt, subject: &Subject, result: Attested, capture_result: bool) {
    let canonical = result.canonical();
    r.result_sha256 = Some(sha256_hex(canonical.as_bytes()));
    r.result_hash = Some(salted_hash(subject.salt, canonical.as_bytes()));
    if let (true, Some(_), Attested::Value(value)) = (capture_result, subject.captured, result) {
        r.result = Some(value.clone());
    }
}

/// An answer as its receipt attests it.
#[derive(Debug, Clone, Copy)]
pub enum Attested<'a> {
    /// The value: kept in the receipt too when the gateway captures values.
    Value(&'a Value),
    /// Only its JCS text (`proposal::canonical_json_text`): all a receipt
    /// that captures no values needs, without a `Value` built for it.
    Canonical(&'a str),
}

impl<'a> Attested<'a> {
    /// The JCS text the receipt's hashes are over.
    fn canonical(self) -> std::borrow::Cow<'a, str> {
        match self {
            Attested::Value(value) => canonical_json(value).into(),
            Attested::Canonical(text) => text.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Action;

    fn subject<'a>(decision: Option<&'a Decision>, captured: Option<&'a Value>) -> Subject<'a> {
        Subject {
            issued_at_ms: 1_780_272_000_000,
            tenant: "atlas",
            caller: "agent",
            server: "desk",
            tool: "file",
            tool_definition_sha256: "d",
            proposal_sha256: "p",
            decision,
            policy_version: "v1",
            operation: Some(OperationRef { key: "k".into(), state: "reserved".into() }),
            salt: &[1; 32],
            arguments_hash: "h",
            captured,
            sandbox: Some("ab"),
            config_version: None,
            identity: None,
        }
    }

    fn allow() -> Decision {
        Decision::by(Verdict::Allow, Reason::Automatic, vec!["registry".into()])
    }

    #[test]
    fn a_dispatched_write_records_its_state_and_attests_its_result() {
        let d = allow();
        let result = serde_json::json!({"ticket": "F-1"});
        let r = build(
            &subject(Some(&d), None),
            Event::Dispatched { state: OperationState::ToolError, result: Some(&result) },
        );
        assert_eq!(
            (r.execution_status.as_str(), r.result_status.as_str()),
            ("dispatched", "tool_error")
        );
        assert_eq!(r.operation.unwrap().state, "tool_error");
        assert_eq!(r.result_sha256.unwrap(), sha256_hex(canonical_json(&result).as_bytes()));
        assert_eq!(
            r.result_hash.unwrap(),
            salted_hash(&[1; 32], canonical_json(&result).as_bytes())
        );
        assert_eq!(
            (r.decision.as_str(), r.reason.as_str(), r.issued_at.as_str()),
            ("allow", "automatic", "2026-06-01T00:00:00.000Z")
        );
        assert!(r.result.is_none(), "not captured");
    }

    #[test]
    fn a_refusal_speaks_for_itself_even_before_a_decision() {
        let refusal =
            Refusal::new(Verdict::Deny, Reason::InvalidArguments, Action::Correct, "fix it")
                .with_proposal("q");
        let mut s = subject(None, None);
        s.proposal_sha256 = "";
        let r = build(&s, Event::Refused { approval: None, refusal: &refusal, dispatched: false });
        assert_eq!(
            (r.decision.as_str(), r.reason.as_str(), r.proposal_sha256.as_str()),
            ("deny", "invalid_arguments", "q")
        );
        assert_eq!(
            (r.execution_status.as_str(), r.result_status.as_str()),
            ("not_dispatched", "refused")
        );
        // It commits to the refusal the caller is given, message and all.
        assert_eq!(
            r.result_sha256.as_deref(),
            Some(
                sha256_hex(canonical_json(&serde_json::to_value(&refusal).unwrap()).as_bytes())
                    .as_str()
            )
        );
        let reworded = Refusal::new(
            Verdict::Deny,
            Reason::InvalidArguments,
            Action::Correct,
            "approved: all done",
        )
        .with_proposal("q");
        assert_ne!(
            build(&s, Event::Refused { approval: None, refusal: &reworded, dispatched: false })
                .result_sha256,
            r.result_sha256
        );
        let sent =
            build(&s, Event::Refused { approval: None, refusal: &refusal, dispatched: true });
        assert_eq!(
            (sent.execution_status.as_str(), sent.result_status.as_str()),
            ("dispatched", "unknown")
        );
    }

    #[test]
    fn captured_values_go_where_they_always_went() {
        let d = allow();
        let (args, result) = (serde_json::json!({"title": "x"}), serde_json::json!({"ok": true}));
        let s = subject(Some(&d), Some(&args));
        let answered = build(
            &s,
            Event::Answered { approval: None, tool_error: false, result: Attested::Value(&result) },
        );
        assert_eq!(
            (answered.arguments.as_ref(), answered.result.as_ref()),
            (Some(&args), Some(&result))
        );
        // A replay names the result it gave by its plain hash only; a settlement keeps the evidence out.
        let replayed = build(
            &s,
            Event::Replayed { approval: None, tool_error: false, result: Attested::Value(&result) },
        );
        assert!(
            replayed.result.is_none()
                && replayed.result_hash.is_none()
                && replayed.result_sha256.is_some()
        );
        let settled = build(
            &s,
            Event::Settled {
                state: OperationState::ReconciledApplied,
                by: "dana",
                result: Some(&result),
            },
        );
        assert!(settled.result.is_none() && settled.result_hash.is_some());
        assert_eq!(
            (settled.reason.as_str(), settled.rules.as_slice(), settled.result_status.as_str()),
            ("reconciled", &["dana".to_string()][..], "applied")
        );
    }

    #[test]
    fn an_answer_attested_by_its_text_hashes_as_its_value_and_captures_nothing() {
        let d = allow();
        let text = r#"{"structuredContent": {"b": 2, "a": [1.50, "\u00e9"]}, "content": []}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        let canonical = crate::proposal::canonical_json_text(text).unwrap();
        let s = subject(Some(&d), None);
        let by_value = build(
            &s,
            Event::Answered { approval: None, tool_error: false, result: Attested::Value(&value) },
        );
        let by_text = build(
            &s,
            Event::Answered {
                approval: None,
                tool_error: false,
                result: Attested::Canonical(&canonical),
            },
        );
        assert_eq!(
            (&by_text.result_sha256, &by_text.result_hash),
            (&by_value.result_sha256, &by_value.result_hash)
        );
        assert_eq!(canonical, r#"{"content":[],"structuredContent":{"a":[1.5,"é"],"b":2}}"#);
        assert_eq!(by_text.result_sha256.unwrap(), sha256_hex(canonical.as_bytes()));
        // With values captured, only a value can be kept.
        let args = serde_json::json!({});
        let captured = build(
            &subject(Some(&d), Some(&args)),
            Event::Answered {
                approval: None,
                tool_error: false,
                result: Attested::Canonical(&canonical),
            },
        );
        assert!(captured.result.is_none() && captured.result_hash.is_some());
    }

    #[test]
    fn statuses_have_their_wire_names() {
        assert_eq!(ResultStatus::ProtocolError(-32602).wire(), "protocol_error:-32602");
        assert_eq!(
            ExecutionStatus::NotDispatched.as_str(),
            wire_name(&ExecutionStatus::NotDispatched)
        );
        assert_eq!(
            ResultStatus::of_dispatch(OperationState::ReconciledNotApplied),
            ResultStatus::NotApplied
        );
        assert_eq!(ResultStatus::of_dispatch(OperationState::Dispatched), ResultStatus::Unknown);
    }
}
