//! The path of one `tools/call`, top to bottom. Each stage is a function in
//! `stages/`; a stage either hands its conclusion to the next or stops the
//! call with a refusal (a tool result the caller can act on) or a JSON-RPC
//! error (where the protocol demands one). Stages that do not exist yet —
//! approve (waits for a named human), reserve (the operation ledger) — are
//! marked where they will go.

use std::time::Instant;

use serde_json::Value;
use toolgate_core::Refusal;

use crate::gateway::Gateway;
use crate::stages::{admit, check, decide, dispatch, record, resolve, validate};
use crate::upstream::ProgressRelay;
use crate::wire::{Era, Id, RawObject, RpcError};

/// A `tools/call` as it arrived.
pub struct CallRequest {
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
    // 1. admit: the call's shape and size (transport rules ran at the edge).
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
    // 4. decide: the registry's word (policy joins here).
    let decision = decide::decide(&tool);
    trail.decision = Some(decision.clone());
    // 5. approve: until approvals land, require_approval escalates; deny refuses.
    if let Some(refusal) = Refusal::from_decision(&decision, &tool.exposed_name) {
        return Answer::Refused(refusal.with_proposal(&proposal.sha256));
    }
    // 6. reserve: the operation ledger goes here.
    // 7. dispatch: the upstream, under its deadline.
    let raw = match dispatch::dispatch(gw, &tool, &proposal, call).await {
        Ok(raw) => raw,
        Err(stop) => return stop.into(),
    };
    // 8. check: the result against outputSchema.
    // 9. record: by `call_tool`, for every answer.
    check::check(&tool, &raw, gw.config.gateway.block_invalid_results, &proposal.sha256, trail)
}
