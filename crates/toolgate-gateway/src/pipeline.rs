//! The path of one `tools/call`, top to bottom. Each stage is a function in
//! `stages/`; a stage either hands its conclusion to the next or stops the
//! call with a refusal (a tool result the caller can act on), an
//! `input_required` answer (the call waits for a named human), or a JSON-RPC
//! error (where the protocol demands one).

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;
use serde_json::Value;
use toolgate_core::{Caller, Refusal, Verdict};
use tracing::Instrument as _;

use crate::gateway::Gateway;
use crate::stages::reserve::{self, Held};
use crate::stages::{admit, approve, check, decide, dispatch, record, resolve, validate};
use crate::upstream::ProgressRelay;
use crate::wire::{Era, Id, RawObject, RpcError};

/// A `tools/call` as it arrived.
pub struct CallRequest {
    /// Who is calling, from the request's credentials.
    pub caller: Arc<Caller>,
    /// The trace context the request carried in `_meta`.
    pub trace: std::collections::BTreeMap<String, String>,
    pub request_id: Option<Id>,
    pub name: String,
    pub arguments: Value,
    pub era: Era,
    /// Set when the client asked for progress and the transport can carry it.
    pub progress: Option<ProgressRelay>,
    /// `inputResponses` / `requestState` of a re-issued call (MRTR).
    pub input: serde_json::Map<String, Value>,
    /// `_meta["io.toolgate/operationKey"]`, as sent.
    pub operation_key: Option<Value>,
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
    record::record(gw, &trail, answer, started.elapsed()).await
}

/// One child span per stage, so a trace shows where the time went.
fn stage(name: &'static str) -> tracing::Span {
    tracing::info_span!(target: crate::telemetry::TARGET, "toolgate.stage", otel.name = name, toolgate.stage = name)
}

async fn run(gw: &Gateway, call: &CallRequest, trail: &mut record::Trail) -> Answer {
    // The request's SERVER span: stages record what they concluded on it.
    let server = tracing::Span::current();
    // 1. admit: the call's size; no tenant in the arguments (transport rules ran at the edge).
    if let Err(stop) = stage("admit").in_scope(|| admit::admit(&gw.config.gateway, call)) {
        return stop.into();
    }
    // 2. resolve: exposed name → upstream tool, its authority and pin.
    let tool = match stage("resolve").in_scope(|| resolve::resolve(gw, &call.name)) {
        Ok(tool) => tool,
        Err(stop) => return stop.into(),
    };
    trail.resolved(&tool);
    gw.log.remember_definition(&tool).await;
    server.record("gen_ai.operation.name", "execute_tool");
    server.record("gen_ai.tool.type", "function");
    server.record("gen_ai.provider.name", tool.server.as_str());
    server.record("gen_ai.system", tool.server.as_str());
    if let Some(d) = tool.tool.definition.get("description").and_then(Value::as_str) {
        server.record("gen_ai.tool.description", d);
    }
    if let (Some(id), false) = (&call.request_id, server.is_disabled()) {
        server.record("gen_ai.tool.call.id", serde_json::to_string(id).unwrap_or_default().trim_matches('"'));
    }
    server.record("toolgate.authority.registry_class", tool.view.registry_class.map_or("none", |c| c.as_str()));
    server.record("toolgate.authority.implied_class", tool.view.implied_class.as_str());
    // 3. validate: the full inputSchema → the canonical proposal.
    let proposal = match stage("validate").in_scope(|| validate::validate(&tool, &call.arguments)) {
        Ok(proposal) => proposal,
        Err(stop) => return stop.into(),
    };
    trail.validated(gw, call, &tool, &proposal);
    server.record("toolgate.proposal_sha256", proposal.sha256.as_str());
    if gw.config.telemetry.capture_content {
        server.record("gen_ai.tool.call.arguments", gw.redactor.redact(&proposal.arguments).to_string());
    }
    // 4. decide: Cedar policy on caller, tool and arguments; else the registry.
    let decide_span = stage("decide");
    let standing = approve::standing(gw, call, &tool, &proposal).instrument(decide_span.clone()).await;
    trail.approval_state = standing.state.clone();
    let decision = decide_span.in_scope(|| decide::decide(gw, &call.caller, &tool, &proposal, &standing.state));
    trail.decision = Some(decision.clone());
    trail.policy_version = Some(gw.policy().version().to_string());
    let guardrail = match decision.verdict {
        Verdict::Allow => "allow",
        Verdict::RequireApproval => "require_approval",
        Verdict::Deny => "block",
    };
    server.record("guardrail.name", "toolgate.policy");
    server.record("guardrail.decision", guardrail);
    server.record("toolgate.policy_version", gw.policy().version());
    // The reason's wire name only when something listens (span or metrics).
    let reason = (!server.is_disabled() || crate::telemetry::metrics_on()).then(|| record::json_name(&decision.reason));
    if let (Some(reason), false) = (&reason, server.is_disabled()) {
        server.record("toolgate.decision.reason", reason.as_str());
        server.record("toolgate.decision.rules", decision.rules.join(",").as_str());
    }
    if let (Some(reason), true) = (reason, crate::telemetry::metrics_on()) {
        crate::telemetry::INSTRUMENTS.decisions.add(
            1,
            &[
                KeyValue::new("guardrail.decision", guardrail),
                KeyValue::new("toolgate.decision.reason", reason),
                KeyValue::new("toolgate.authority.class", tool.view.effective_class.as_str()),
            ],
        );
    }
    // 5. approve: deny refuses; require_approval waits for a named human.
    let gate = match approve::approve(gw, call, &tool, &proposal, &decision, standing, trail).instrument(stage("approve")).await {
        Ok(gate) => gate,
        Err(stop) => {
            if let Stop::Input(_) = stop {
                trail.input_required = true;
            }
            return stop.into();
        }
    };
    trail.approval_id = gate.approval.as_ref().map(|(id, _)| id.clone());
    if let Some(id) = &trail.approval_id {
        server.record("toolgate.approval.id", id.as_str());
    }
    // 6. reserve: a write runs once per operation key; a reused key gets
    // the recorded outcome, a conflict, or "in progress" / "unknown".
    let held = match reserve::reserve(gw, call, &tool, &proposal, &gate, trail).instrument(stage("reserve")).await {
        Ok(held) => held,
        Err(stop) => return stop.into(),
    };
    if let Held::Mine(op) | Held::Replay { op, .. } = &held {
        trail.operation = Some((op.id.clone(), matches!(held, Held::Replay { .. })));
        server.record("toolgate.operation.id", op.id.as_str());
    }
    // 7. dispatch: the upstream, under its deadline (the CLIENT span); the
    // operation's end is recorded before the caller hears it.
    trail.dispatched = matches!(held, Held::Read | Held::Mine(_));
    let raw = match held {
        Held::Read => match dispatch::dispatch(gw, &tool, &proposal, call, gate.input.clone()).instrument(stage("dispatch")).await {
            Ok(raw) => raw,
            Err(stop) => return stop.into(),
        },
        Held::Mine(op) => {
            let outcome = dispatch::dispatch(gw, &tool, &proposal, call, gate.input.clone()).instrument(stage("dispatch")).await;
            match reserve::finish(gw, &tool, &op, &outcome, trail).await {
                Err(unknown) => return Stop::Refused(unknown.with_proposal(&proposal.sha256)).into(),
                Ok(op) => match outcome {
                    Ok(raw) => reserve::annotate(raw, &op, false),
                    Err(stop) => return stop.into(),
                },
            }
        }
        Held::Replay { op, raw, checked: true } => reserve::annotate(raw, &op, true),
        // A reconciler's finding is not the tool's result: not checked against its outputSchema.
        Held::Replay { op, raw, checked: false } => return Answer::Result(reserve::annotated(&raw, &op, true)),
    };
    // 8. check: the result against outputSchema; an approved call's own
    // input round stays bound to its approval.
    // 9. record: by `call_tool`, for every answer: the receipts not yet
    // appended, and the log line.
    let answer = stage("check").in_scope(|| check::check(&tool, &raw, gw.config.gateway.block_invalid_results, &proposal.sha256, trail));
    let answer = approve::seal_continuation(gw, &gate, answer);
    if gw.config.telemetry.capture_content {
        if let Answer::Result(result) = &answer {
            let value = serde_json::to_value(result).unwrap_or_default();
            server.record("gen_ai.tool.call.result", gw.redactor.redact(&value).to_string());
        }
    }
    answer
}
