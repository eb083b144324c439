//! The path of one `tools/call`, top to bottom. Each stage is a function in
//! `stages/`; a stage either hands its conclusion to the next or stops the
//! call with a refusal (a tool result the caller can act on), an
//! `input_required` answer (the call waits for a named human), or a JSON-RPC
//! error (where the protocol demands one). The stage that does not exist yet
//! — reserve (the operation ledger) — is marked where it will go.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use toolgate_core::{Caller, Refusal};

use crate::gateway::Gateway;
use crate::stages::{admit, approve, check, decide, dispatch, record, resolve, validate};
use crate::upstream::ProgressRelay;
use crate::wire::{Era, Id, RawObject, RpcError};

/// A `tools/call` as it arrived.
pub struct CallRequest {
    /// Who is calling, from the request's credentials.
    pub caller: Arc<Caller>,
    pub request_id: Option<Id>,
    pub name: String,
    pub arguments: Value,
    pub era: Era,
    /// Set when the client asked for progress and the transport can carry it.
    pub progress: Option<ProgressRelay>,
    /// `inputResponses` / `requestState` of a re-issued call (MRTR).
    pub input: serde_json::Map<String, Value>,
    pub client_capabilities: Option<Value>,
}

/// How a stage ends a call early.
pub enum Stop {
    Refused(Refusal),
    /// A complete answer that is not a tool's result (`input_required`).
    Input(RawObject),
    Error(RpcError),
}

/// What the caller gets.
pub enum Answer {
    /// The upstream's result, field values verbatim.
    Result(RawObject),
    Refused(Refusal),
    Error(RpcError),
}

impl From<Stop> for Answer {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Refused(r) => Answer::Refused(r),
            Stop::Input(o) => Answer::Result(o),
            Stop::Error(e) => Answer::Error(e),
        }
    }
}

pub async fn call_tool(gw: &Gateway, call: CallRequest) -> Answer {
    let started = Instant::now();
    let mut trail = record::Trail::new(&call);
    let answer = run(gw, &call, &mut trail).await;
    record::record(&trail, &answer, started.elapsed());
    answer
}

async fn run(gw: &Gateway, call: &CallRequest, trail: &mut record::Trail) -> Answer {
    // 1. admit: the call's size; no tenant in the arguments (transport rules ran at the edge).
    if let Err(stop) = admit::admit(&gw.config.gateway, call) {
        return stop.into();
    }
    // 2. resolve: exposed name → upstream tool, its authority and pin.
    let tool = match resolve::resolve(gw, &call.name) {
        Ok(tool) => tool,
        Err(stop) => return stop.into(),
    };
    // 3. validate: the full inputSchema → the canonical proposal.
    let proposal = match validate::validate(&tool, &call.arguments) {
        Ok(proposal) => proposal,
        Err(stop) => return stop.into(),
    };
    trail.proposal_sha256 = Some(proposal.sha256.clone());
    // 4. decide: Cedar policy on caller, tool and arguments; else the registry.
    let standing = approve::standing(gw, call, &tool, &proposal).await;
    let decision = decide::decide(gw, &call.caller, &tool, &proposal, &standing.state);
    trail.decision = Some(decision.clone());
    trail.policy_version = Some(gw.policy.version().to_string());
    // 5. approve: deny refuses; require_approval waits for a named human.
    let gate = match approve::approve(gw, call, &tool, &proposal, &decision, standing).await {
        Ok(gate) => gate,
        Err(stop) => {
            if let Stop::Input(_) = stop {
                trail.input_required = true;
            }
            return stop.into();
        }
    };
    trail.approval_id = gate.approval.as_ref().map(|(id, _)| id.clone());
    // 6. reserve: the operation ledger goes here.
    // 7. dispatch: the upstream, under its deadline.
    let raw = match dispatch::dispatch(gw, &tool, &proposal, call, gate.input.clone()).await {
        Ok(raw) => raw,
        Err(stop) => return stop.into(),
    };
    // 8. check: the result against outputSchema; an approved call's own
    // input round stays bound to its approval.
    // 9. record: by `call_tool`, for every answer.
    let answer = check::check(&tool, &raw, gw.config.gateway.block_invalid_results, &proposal.sha256, trail);
    approve::seal_continuation(gw, &gate, answer)
}
