//! What the stages of one call concluded, gathered by the pipeline (and
//! only there), once per stage, for the record stage's receipts and its
//! log line. A stage returns its value; the pipeline hands it here; record
//! reads the whole.

use serde_json::Value;
use toolgate_core::approval::ApprovalState;
use toolgate_core::receipt::{self, OperationRef};
use toolgate_core::{Decision, Proposal, Refusal};

use crate::call::{Approved, Call, Checked, Context, Reserved};
use crate::catalog::ExposedTool;
use crate::commit::Committed;
use crate::identity::Presented;

/// What the stages concluded, gathered by the pipeline (and only there)
/// for the receipts and the log line.
pub(crate) struct Findings {
    pub tool: String,
    pub request_id: String,
    pub proposal_sha256: Option<String>,
    pub decision: Option<Decision>,
    pub policy_version: Option<String>,
    pub approval_id: Option<String>,
    /// The operation this call ran or replayed: (id, replayed).
    pub operation: Option<(String, bool)>,
    pub caller: String,
    pub tool_error: bool,
    pub input_required: bool,
    /// The answer asks the person to connect their account (present): the
    /// receipt records this refusal.
    pub connect_required: Option<Refusal>,
    pub output_violations: usize,
    pub tenant: String,
    /// From resolve on: the upstream tool and its definition's hash.
    pub server: String,
    pub upstream_tool: String,
    pub definition_sha256: String,
    /// The box its server runs in, as the receipt names it.
    pub sandbox: Option<std::sync::Arc<str>>,
    /// From present on: as whom the call reaches its server.
    pub identity: Option<toolgate_core::receipt::UpstreamIdentity>,
    /// From validate on: this call's salt and the salted hash of its arguments.
    pub salt: [u8; 32],
    pub arguments_hash: String,
    /// The full arguments, when `receipts.capture_values` is on.
    pub arguments: Option<Value>,
    /// What was asked, for the ledger's private record (`toolgate replay`):
    /// a JSON object's text without its closing brace, which `asked()`
    /// completes with how the call was decided.
    pub asked: Option<String>,
    /// The state of the approval the call presented, if it presented one of this call.
    pub approval_state: Option<ApprovalState>,
    /// The call went upstream (its outcome deserves a receipt).
    pub dispatched: bool,
    /// The operation's key and state as last recorded.
    pub operation_ref: Option<OperationRef>,
    /// The last receipt committed with the ledger's state, if one was and
    /// it still attests the answer: record appends none then.
    pub committed: Option<Committed>,
    /// The call asked only for a preview (no receipt is recorded).
    pub preview: bool,
}

impl Findings {
    /// `salt` is the call's fresh secret salt, drawn before anything can
    /// refuse it: every receipt's salted hashes and the key that opens its
    /// commitment in the log come from it, a refusal's too.
    pub fn new(cx: &Context, call: &Call, salt: [u8; 32]) -> Self {
        Self {
            tool: call.name.clone(),
            request_id: cx
                .request_id
                .as_ref()
                .map(|id| serde_json::to_string(id).unwrap_or_default())
                .unwrap_or_default(),
            proposal_sha256: None,
            decision: None,
            policy_version: None,
            approval_id: None,
            operation: None,
            caller: cx.caller.name.clone(),
            tool_error: false,
            input_required: false,
            connect_required: None,
            output_violations: 0,
            tenant: cx.caller.tenant.clone(),
            server: String::new(),
            upstream_tool: String::new(),
            definition_sha256: String::new(),
            sandbox: None,
            identity: None,
            salt,
            arguments_hash: String::new(),
            arguments: None,
            asked: None,
            approval_state: None,
            dispatched: false,
            operation_ref: None,
            committed: None,
            preview: call.preview,
        }
    }

    /// After present stopped the call with an `input_required` answer that
    /// asks the person to connect their account: its receipt records `refusal`.
    pub fn asked_to_connect(&mut self, refusal: Refusal) {
        self.input_required = true;
        self.connect_required = Some(refusal);
    }

    /// After present: as whom the call reaches its server.
    pub fn presented(&mut self, presented: &Presented) {
        self.identity = Some(presented.identity.clone());
    }

    pub fn resolved(&mut self, tool: &ExposedTool) {
        self.server = tool.server.clone();
        self.upstream_tool = tool.subject().into_owned();
        self.definition_sha256 = tool.definition_sha256.clone();
        self.sandbox = tool.sandbox.clone();
    }

    /// After validate: the salted hash, and what `toolgate replay` needs to
    /// decide this call again (the caller, the tool's facts, the arguments,
    /// and the class decision that applies where no policy does).
    /// `capture` keeps the arguments themselves in the receipts
    /// (`receipts.capture_values`).
    pub fn validated(
        &mut self,
        capture: bool,
        cx: &Context,
        tool: &ExposedTool,
        proposal: &Proposal,
    ) {
        self.proposal_sha256 = Some(proposal.sha256.clone());
        self.arguments_hash =
            receipt::salted_hash(&self.salt, proposal.canonical_arguments.as_bytes());
        if capture {
            self.arguments = Some(proposal.arguments.clone());
        }
        let fallback = toolgate_core::decision::decide_by_class(&tool.view);
        let c = &cx.caller;
        // Serialized from borrows, once: building it as a `Value` copied the
        // arguments twice per call.
        let asked = Asked {
            caller: AskedCaller {
                name: &c.name,
                subject: &c.subject,
                tenant: &c.tenant,
                roles: &c.roles,
            },
            tool: AskedTool {
                exposed_name: &tool.exposed_name,
                server: &tool.server,
                name: &tool.tool.name,
                class: tool.view.effective_class.as_str(),
                labels: &tool.labels,
            },
            arguments: &proposal.arguments,
            class_decision: &fallback,
        };
        self.asked =
            serde_json::to_string(&asked).ok().and_then(|mut text| text.pop().map(|_| text));
    }

    /// After decide: how the call was decided, under which policy, and the
    /// state of the approval it presented.
    pub fn decided(
        &mut self,
        approval_state: Option<ApprovalState>,
        decision: &Decision,
        policy_version: &str,
    ) {
        self.approval_state = approval_state;
        self.decision = Some(decision.clone());
        self.policy_version = Some(policy_version.to_string());
    }

    /// After approve: the approval the call runs under (or waited on), the
    /// receipt its wait committed, and the decision once more when it was
    /// approved while held.
    pub fn approved(&mut self, approved: &Approved, policy_version: &str) {
        self.approval_id = approved.approval_id.clone();
        self.committed = approved.committed.clone();
        self.input_required |= approved.input_required;
        if let Some((state, decision)) = &approved.redecided {
            self.decided(*state, decision, policy_version);
        }
    }

    /// After reserve and dispatch: the operation, whether the call went
    /// upstream, and the receipts committed with its operation.
    pub fn reserved(&mut self, reserved: &Reserved) {
        self.operation_ref = reserved.operation_ref.clone();
        self.operation = reserved.operation.clone();
        self.dispatched = reserved.dispatched;
        self.committed = reserved.committed.clone().or(self.committed.take());
    }

    /// After check: what the answer was found to be.
    pub fn checked(&mut self, checked: &Checked) {
        self.tool_error = checked.tool_error;
        self.output_violations = checked.output_violations;
        self.input_required |= checked.input_required;
    }

    /// The private record of what was asked and how it was decided, kept
    /// with the call's first receipt.
    pub fn asked(&self) -> Option<String> {
        let decision = serde_json::to_string(self.decision.as_ref()?).ok()?;
        let state =
            serde_json::to_string(self.approval_state.map_or("none", ApprovalState::as_str))
                .ok()?;
        Some(format!(
            "{},\"approval_state\":{state},\"decision\":{decision}}}",
            self.asked.as_ref()?
        ))
    }
}

#[derive(serde::Serialize)]
struct Asked<'a> {
    caller: AskedCaller<'a>,
    tool: AskedTool<'a>,
    arguments: &'a Value,
    class_decision: &'a Decision,
}

#[derive(serde::Serialize)]
struct AskedCaller<'a> {
    name: &'a str,
    subject: &'a str,
    tenant: &'a str,
    roles: &'a [String],
}

#[derive(serde::Serialize)]
struct AskedTool<'a> {
    exposed_name: &'a str,
    server: &'a str,
    name: &'a str,
    class: &'a str,
    labels: &'a [String],
}
