//! What a call brings to the approve stage, read before decide: the
//! `requestState` it presents, the state of the approval that state names
//! (what policy sees as `context.approval`), and what an approval of this
//! exact call is bound to.

use serde_json::Value;
use toolgate_core::Proposal;
use toolgate_core::approval::{ApprovalState, Binding, Claim};

use super::Approvals;
use crate::call::{Call, Context};
use crate::catalog::ExposedTool;
use crate::seal::Sealer;

/// What a call brings to the approve stage.
pub(crate) struct Standing {
    /// The `requestState` it presents.
    pub presented: Presented,
    /// The state of the approval it presents, as policy sees it.
    pub state: Option<ApprovalState>,
    /// What an approval of this exact call is bound to.
    pub binding: Binding,
}

/// The `requestState` a call presents, read once.
pub(crate) enum Presented {
    None,
    /// Sealed by this gateway (authentic, not yet checked against the call).
    Ours(Claim),
    /// Someone else's: an upstream's (passed through for tools that need no
    /// approval), or forged.
    Foreign,
}

/// Most calls present nothing, and the store is not read for them.
pub(crate) async fn standing(
    a: &Approvals<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
) -> Standing {
    let presented = presented(a.sealer, call);
    let binding = Binding {
        tenant: cx.caller.tenant.clone(),
        caller: cx.caller.name.clone(),
        server: tool.server.clone(),
        tool: tool.tool.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        policy_version: a.policy_version.to_string(),
    };
    let state = match &presented {
        Presented::Ours(claim) => state_of(a, cx, claim, &binding).await,
        _ => None,
    };
    Standing { presented, state, binding }
}

fn presented(sealer: &Sealer, call: &Call) -> Presented {
    match call.input.get("requestState") {
        None | Some(Value::Null) => Presented::None,
        Some(Value::String(s)) => sealer.open(s).map_or(Presented::Foreign, Presented::Ours),
        Some(_) => Presented::Foreign,
    }
}

/// The state of the approval a call presents, for policy's
/// `context.approval`: none unless it is an approval of exactly this
/// call (an approval of another call never counts). Judged, like the rest
/// of this stage, as of the instant the call began.
async fn state_of(
    a: &Approvals<'_>,
    cx: &Context,
    claim: &Claim,
    binding: &Binding,
) -> Option<ApprovalState> {
    if claim.binding != *binding {
        return None;
    }
    match a.ledger.approval(&claim.approval_id).await {
        Ok(Some(found)) if found.binding == *binding => Some(found.state_at(cx.began_ms)),
        _ => None,
    }
}
