//! reserve: a write takes effect at most once per operation key. Before a
//! write goes upstream it is reserved in the ledger, unique on (tenant,
//! server, tool, key), and marked dispatched; its answer is recorded after.
//! A call that brings a key already used gets what
//! `toolgate_core::operation::reuse` says: the recorded outcome, a
//! conflict, "in progress", or "unknown — reconcile"; never a second effect.
//!
//! The key is the client's `_meta["io.toolgate/operationKey"]`, or else the
//! approval the call runs under (so the approved call is the operation),
//! or else a fresh one (the write is recorded, but a retry cannot be told
//! from a new call: clients that retry should send a key).

use serde_json::value::RawValue;
use serde_json::{Value, json};
use toolgate_core::operation::{self, Operation, OperationKey, OperationState, Reuse};
use toolgate_core::{Action, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Begun, LedgerError, NewOperation, Resolution};

use crate::catalog::ExposedTool;
use crate::gateway::Gateway;
use crate::pipeline::{CallRequest, Stop};
use crate::stages::record::{self, Trail};
use toolgate_core::receipt::OperationRef;
use crate::stages::approve::Gate;
use crate::wire::RawObject;

/// The `_meta` key a client names its operation with.
pub const KEY_META: &str = "io.toolgate/operationKey";
/// The `_meta` key of toolgate's note on a write's result.
pub const OPERATION_META: &str = "io.toolgate/operation";
/// How much longer than the upstream deadline a holder's lease runs, so a
/// live gateway always finishes its own operations before they count as lapsed.
const LEASE_GRACE_MS: i64 = 5_000;

/// What the dispatch stage does next.
pub enum Held {
    /// A read: nothing to record.
    Read,
    /// This call holds the operation and may send it.
    Mine(Operation),
    /// The recorded outcome; `checked` is false for a reconciler's finding,
    /// which is not the tool's own result.
    Replay { op: Operation, raw: Box<RawValue>, checked: bool },
}

pub async fn reserve(gw: &Gateway, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal, gate: &Gate, trail: &mut Trail) -> Result<Held, Stop> {
    let refuse = |r: Refusal| Stop::Refused(r.with_proposal(&proposal.sha256));
    if tool.read_only() {
        return if gate.used { Err(refuse(crate::stages::approve::used_refusal(tool, gate))) } else { Ok(Held::Read) };
    }
    let client_key = match call.operation_key.as_ref() {
        None | Some(Value::Null) => None,
        // `approval:` and `auto:` are the gateway's own: a client key there
        // could stand in for another call's approved operation.
        Some(Value::String(k)) if (1..=200).contains(&k.chars().count()) && !k.starts_with("approval:") && !k.starts_with("auto:") => Some(k.clone()),
        Some(_) => {
            return Err(refuse(Refusal::new(
                Verdict::Allow,
                Reason::InvalidArguments,
                Action::Correct,
                format!("_meta[\"{KEY_META}\"] must be a string of 1 to 200 characters not starting with `approval:` or `auto:`; nothing was run"),
            )));
        }
    };
    let id = gw.entropy.id("op_");
    let key = client_key.or_else(|| gate.approval.as_ref().map(|(a, _)| format!("approval:{a}"))).unwrap_or_else(|| format!("auto:{id}"));
    let key = OperationKey { tenant: call.caller.tenant.clone(), server: tool.server.clone(), tool: tool.tool.name.clone(), key };
    let lease = gw.clock.now_ms() + lease_ms(gw, tool);
    // A re-issue presenting an approval already used: only its recorded
    // operation can answer it; it never opens a new one. (If that operation
    // is known never to have run, this call runs it, below.)
    if gate.used {
        if let Some(answer) = used_answer(gw, &key, tool, proposal, gate).await? {
            note(trail, &answer);
            return Ok(answer);
        }
    }
    // The decision's receipt commits with the reservation.
    trail.operation_ref = Some(OperationRef { key: key.key.clone(), state: OperationState::Reserved.as_str().into() });
    let approval = record::approval_ref(gw, gate.approval.as_ref().map(|(a, _)| a.as_str())).await;
    let receipt = Some(record::decided(gw, trail, approval));
    let new = NewOperation {
        id,
        key,
        caller: call.caller.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        approval_id: gate.approval.as_ref().map(|(a, _)| a.clone()),
        arguments: proposal.arguments.clone(),
        lease_until_ms: lease,
        receipt,
    };
    match gw.ledger.begin_operation(new, gw.clock.now_ms()).await.map_err(|e| ledger_failed(e, tool, proposal))? {
        Begun::Mine(op) => {
            trail.receipts = 1;
            gw.log.appended(1);
            // Durable before the upstream can see the call: after a crash,
            // `dispatched` means "maybe sent", `reserved` means "not sent".
            let op = gw.ledger.mark_dispatched(&op.id, op.attempts, gw.clock.now_ms() + lease_ms(gw, tool), gw.clock.now_ms()).await.map_err(|e| ledger_failed(e, tool, proposal))?;
            Ok(Held::Mine(op))
        }
        Begun::Theirs(op) => {
            trail.operation_ref = Some(OperationRef { key: op.key.key.clone(), state: op.state.as_str().into() });
            answer_existing(op, tool, proposal, gw.clock.now_ms())
        }
    }
}

/// The recorded operation a used approval's re-issue is answered from.
fn note(trail: &mut Trail, held: &Held) {
    if let Held::Replay { op, .. } = held {
        trail.operation_ref = Some(OperationRef { key: op.key.key.clone(), state: op.state.as_str().into() });
    }
}

/// For a call presenting a used approval: the recorded outcome, or a
/// refusal; `None` when its operation is known never to have run (a
/// reservation left by a crash, or reconciled as not applied), so this
/// call runs it.
async fn used_answer(gw: &Gateway, key: &OperationKey, tool: &ExposedTool, proposal: &Proposal, gate: &Gate) -> Result<Option<Held>, Stop> {
    if let Some(op) = gw.ledger.operation_by_key(key).await.map_err(|e| ledger_failed(e, tool, proposal))? {
        // Only the operation this very approval ran may run again under it.
        let own = op.approval_id.as_deref() == gate.approval.as_ref().map(|(a, _)| a.as_str());
        if operation::reuse(&op, &proposal.sha256, gw.clock.now_ms()) == Reuse::TakeOver {
            return if own { Ok(None) } else { Err(Stop::Refused(crate::stages::approve::used_refusal(tool, gate).with_proposal(&proposal.sha256))) };
        }
        return answer_existing(op, tool, proposal, gw.clock.now_ms()).map(Some);
    }
    // The re-issue that used it may not have reserved its operation yet.
    let id = gate.approval.as_ref().map(|(a, _)| a.as_str()).unwrap_or_default();
    let used = gw.ledger.approval(id).await.map_err(|e| ledger_failed(e, tool, proposal))?.and_then(|a| a.used_ms);
    let refusal = match used {
        Some(at) if gw.clock.now_ms() - at < lease_ms(gw, tool) => {
            Refusal::new(Verdict::Allow, Reason::OperationInProgress, Action::Retry, format!("the call approved by {id} is being run by another re-issue; call again shortly to get its outcome"))
                .with_approval(id)
                .with_retry_after(250)
        }
        _ => crate::stages::approve::used_refusal(tool, gate),
    };
    Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)))
}

fn lease_ms(gw: &Gateway, tool: &ExposedTool) -> i64 {
    gw.config.timeout_ms(&tool.server) as i64 + LEASE_GRACE_MS
}

/// Another call's operation under this key, as `reuse` says.
fn answer_existing(op: Operation, tool: &ExposedTool, proposal: &Proposal, now_ms: i64) -> Result<Held, Stop> {
    let name = &tool.exposed_name;
    let refusal = match operation::reuse(&op, &proposal.sha256, now_ms) {
        Reuse::Replay => {
            let Some(raw) = op.outcome.as_deref().and_then(|o| RawValue::from_string(o.to_string()).ok()) else {
                return Err(Stop::Refused(unknown(&op, name)));
            };
            let checked = op.state != OperationState::ReconciledApplied;
            return Ok(Held::Replay { op, raw, checked });
        }
        Reuse::Conflict => Refusal::new(
            Verdict::Allow,
            Reason::OperationConflict,
            Action::Correct,
            format!(
                "this operation key was already used for a call to {name} with other arguments (operation {}, {}); nothing was run. \
                 Use a new key for a new operation, or repeat the original arguments to get its outcome",
                op.id,
                op.state.as_str()
            ),
        ),
        Reuse::InProgress { retry_after_ms } => Refusal::new(
            Verdict::Allow,
            Reason::OperationInProgress,
            Action::Retry,
            format!("operation {} under this key is still running; call again with the same key after {retry_after_ms} ms to get its outcome", op.id),
        )
        .with_retry_after(retry_after_ms),
        Reuse::Unknown => unknown(&op, name),
        // `begin_operation` takes these over itself; seen here only if
        // another call took it first.
        Reuse::TakeOver => Refusal::new(
            Verdict::Allow,
            Reason::OperationInProgress,
            Action::Retry,
            format!("operation {} under this key was just taken up by another call; call again with the same key to get its outcome", op.id),
        )
        .with_retry_after(1_000),
    };
    Err(Stop::Refused(refusal.with_proposal(&proposal.sha256).with_operation(&op.id)))
}

/// The refusal for an operation whose effect is not known.
pub fn unknown(op: &Operation, exposed: &str) -> Refusal {
    Refusal::new(
        Verdict::Allow,
        Reason::OutcomeUnknown,
        Action::Reconcile,
        format!(
            "{exposed} was sent as operation {} and its outcome is unknown: it may or may not have taken effect. Do not retry it blindly; \
             an operator reconciles it (`toolgate ops reconcile {}`), after which the same key gets the outcome",
            op.id, op.id
        ),
    )
    .with_operation(&op.id)
}

/// Records how a dispatch of `op` ended: the upstream's answer, or how the
/// dispatch failed. Returns the operation as recorded, or, for an outcome
/// that is now unknown, the refusal that names the operation to reconcile.
pub async fn finish(gw: &Gateway, tool: &ExposedTool, op: &Operation, outcome: &Result<Box<RawValue>, Stop>, trail: &mut Trail) -> Result<Operation, Refusal> {
    let (state, recorded) = match outcome {
        Ok(raw) => {
            let fields: serde_json::Map<String, Value> = serde_json::from_str(raw.get()).unwrap_or_default();
            if fields.get("resultType").is_some_and(|t| t != "complete") {
                // The upstream asked for input before acting: nothing
                // happened yet, and the re-issue (same key) runs it.
                (OperationState::ReconciledNotApplied, None)
            } else if fields.get("isError") == Some(&Value::Bool(true)) {
                (OperationState::ToolError, Some(raw.get().to_string()))
            } else {
                (OperationState::Completed, Some(raw.get().to_string()))
            }
        }
        // Sent, then no usable answer.
        Err(Stop::Refused(r)) if matches!(r.reason, Reason::OutcomeUnknown | Reason::UpstreamTimeout) => (OperationState::Unknown, None),
        // JSON-RPC errors raised before a tool runs (unparseable, invalid
        // request, no such method, invalid params): nothing happened. Any
        // other (an internal error thrown after a commit) may hide an effect.
        Err(Stop::Error(e)) if matches!(e.code, -32700 | -32600 | -32601 | -32602) => (OperationState::ReconciledNotApplied, None),
        Err(Stop::Error(_)) => (OperationState::Unknown, None),
        // Refused before it was sent (the upstream is down or turned it away).
        Err(_) => (OperationState::ReconciledNotApplied, None),
    };
    // The outcome's receipt commits with the outcome.
    let receipt = record::outcome(gw, trail, state, recorded.as_deref());
    let finished = gw.ledger.finish_operation(&op.id, op.attempts, state, recorded.clone(), gw.clock.now_ms(), Some(receipt)).await;
    let recorded = match finished {
        Ok(op) => {
            trail.receipts = 2;
            gw.log.appended(1);
            op
        }
        // Its lease lapsed while it ran (another replica or the CLI marked
        // it unknown), and now the answer is here: that settles it.
        Err(LedgerError::WrongState { state: "unknown", .. }) if state == OperationState::Completed => {
            let receipt = Some(record::outcome(gw, trail, OperationState::ReconciledApplied, recorded.as_deref()));
            let settle = Resolution { applied: true, by: "toolgate".into(), reason: "its answer arrived after its lease lapsed".into(), outcome: recorded, now_ms: gw.clock.now_ms(), receipt };
            match gw.ledger.resolve_operation(&op.id, settle).await {
                Ok(settled) => {
                    trail.receipts = 2;
                    gw.log.appended(1);
                    settled
                }
                Err(e) => {
                    tracing::error!(target: "toolgate::operation", operation = %op.id, error = %e, "cannot record a late answer");
                    op.clone()
                }
            }
        }
        Err(e) => {
            // The answer still goes to the caller; the operation stays
            // dispatched and will read as unknown once its lease lapses.
            tracing::error!(target: "toolgate::operation", operation = %op.id, error = %e, "cannot record an operation's outcome");
            op.clone()
        }
    };
    if state == OperationState::Unknown {
        tracing::warn!(target: "toolgate::operation", operation = %op.id, tool = %tool.exposed_name, "operation outcome unknown; reconcile it");
        return Err(unknown(op, &tool.exposed_name));
    }
    Ok(recorded)
}

/// The result with toolgate's note on the operation in `_meta`: its id and
/// key, and whether this answer is a replay of the recorded one.
pub fn annotated(raw: &RawValue, op: &Operation, replayed: bool) -> RawObject {
    let mut result: RawObject = serde_json::from_str(raw.get()).unwrap_or_default();
    let mut meta: serde_json::Map<String, Value> = result.get("_meta").and_then(|m| serde_json::from_str(m.get()).ok()).unwrap_or_default();
    meta.insert(OPERATION_META.into(), json!({"id": op.id, "key": op.key.key, "state": op.state, "replayed": replayed}));
    if let Ok(m) = serde_json::value::to_raw_value(&meta) {
        result.insert("_meta".into(), m);
    }
    result
}

pub fn annotate(raw: Box<RawValue>, op: &Operation, replayed: bool) -> Box<RawValue> {
    // Not an object: left for the check stage to refuse as it is.
    if !raw.get().trim_start().starts_with('{') {
        return raw;
    }
    serde_json::value::to_raw_value(&annotated(&raw, op, replayed)).unwrap_or(raw)
}

fn ledger_failed(e: toolgate_ledger::LedgerError, tool: &ExposedTool, proposal: &Proposal) -> Stop {
    tracing::error!(target: "toolgate::operation", tool = %tool.exposed_name, error = %e, "the operation ledger failed");
    Stop::Refused(
        Refusal::new(Verdict::Allow, Reason::LedgerUnavailable, Action::Retry, "the operation ledger is unavailable; nothing was run, retry later with the same key")
            .with_proposal(&proposal.sha256),
    )
}
