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
use toolgate_core::receipt::OperationRef;
use toolgate_core::{Action, Clock, Entropy, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Begun, Draft, Ledger, LedgerError, NewOperation, Resolution};

use crate::call::{CallRequest, Gate, Held, Stop};
use crate::catalog::ExposedTool;
use crate::wire::RawObject;

/// The `_meta` key a client names its operation with.
pub const KEY_META: &str = "io.toolgate/operationKey";
/// The `_meta` key of toolgate's note on a write's result.
pub const OPERATION_META: &str = "io.toolgate/operation";
/// How much longer than the upstream deadline a holder's lease runs, so a
/// live gateway always finishes its own operations before they count as lapsed.
const LEASE_GRACE_MS: i64 = 5_000;

/// What the reserve stage reads and writes.
pub struct Operations<'a> {
    pub ledger: &'a dyn Ledger,
    pub clock: &'a dyn Clock,
    pub entropy: &'a dyn Entropy,
    /// How long a holder may take before its operation counts as lapsed:
    /// the tool's upstream deadline and a grace.
    pub lease_ms: i64,
}

impl Operations<'_> {
    /// The lease for a tool whose upstream deadline is `timeout_ms`.
    pub fn lease_for(timeout_ms: u64) -> i64 {
        timeout_ms as i64 + LEASE_GRACE_MS
    }
}

/// How a write stands before it is sent.
pub enum Claimed {
    /// A read: nothing to reserve.
    Read,
    /// A write to reserve under its key; its decision's receipt commits
    /// with the reservation (`begin`).
    New(NewOperation),
    /// Answered from the operation a used approval already ran.
    Recorded(Held),
}

/// The operation key of this call and what stands under it already.
pub async fn claim(o: &Operations<'_>, call: &CallRequest, tool: &ExposedTool, proposal: &Proposal, gate: &Gate) -> Result<Claimed, Stop> {
    let refuse = |r: Refusal| Stop::Refused(r.with_proposal(&proposal.sha256));
    if tool.read_only() {
        return if gate.used { Err(refuse(gate.used_refusal(&tool.exposed_name))) } else { Ok(Claimed::Read) };
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
    let id = o.entropy.id("op_");
    let key = client_key.or_else(|| gate.approval_id().map(|a| format!("approval:{a}"))).unwrap_or_else(|| format!("auto:{id}"));
    let key = OperationKey { tenant: call.caller.tenant.clone(), server: tool.server.clone(), tool: tool.tool.name.clone(), key };
    // A re-issue presenting an approval already used: only its recorded
    // operation can answer it; it never opens a new one. (If that operation
    // is known never to have run, this call runs it, below.)
    if gate.used {
        if let Some(answer) = used_answer(o, &key, tool, proposal, gate).await? {
            return Ok(Claimed::Recorded(answer));
        }
    }
    let new = NewOperation {
        id,
        key,
        caller: call.caller.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        approval_id: gate.approval_id().map(str::to_string),
        arguments: proposal.arguments.clone(),
        lease_until_ms: o.clock.now_ms() + o.lease_ms,
        receipt: None,
    };
    Ok(Claimed::New(new))
}

/// The operation's key and state, as a receipt names it.
pub fn reference(op: &Operation) -> OperationRef {
    OperationRef { key: op.key.key.clone(), state: op.state.as_str().into() }
}

/// A new operation's key, in the state its first receipt names.
pub fn reserved(new: &NewOperation) -> OperationRef {
    OperationRef { key: new.key.key.clone(), state: OperationState::Reserved.as_str().into() }
}

/// How `begin` ended.
pub struct Begin {
    /// The receipt given to `begin` was committed (this call holds the operation).
    pub committed: bool,
    /// Another call's operation under the key, as this call found it.
    pub found: Option<OperationRef>,
    /// What dispatch does next.
    pub held: Result<Held, Stop>,
}

/// Reserves `new` with `receipt` (the decision to run it, in the same
/// transaction) and marks it dispatched, or answers from the operation
/// another call holds under the key.
pub async fn begin(o: &Operations<'_>, tool: &ExposedTool, proposal: &Proposal, mut new: NewOperation, receipt: Draft) -> Begin {
    new.receipt = Some(receipt);
    let now_ms = o.clock.now_ms();
    match o.ledger.begin_operation(new, now_ms).await {
        Err(e) => Begin { committed: false, found: None, held: Err(ledger_failed(e, tool, proposal)) },
        Ok(Begun::Mine(op)) => {
            // Durable before the upstream can see the call: after a crash,
            // `dispatched` means "maybe sent", `reserved` means "not sent".
            let marked = o.ledger.mark_dispatched(&op.id, op.attempts, o.clock.now_ms() + o.lease_ms, o.clock.now_ms()).await;
            Begin { committed: true, found: None, held: marked.map(Held::Mine).map_err(|e| ledger_failed(e, tool, proposal)) }
        }
        Ok(Begun::Theirs(op)) => Begin { committed: false, found: Some(reference(&op)), held: answer_existing(op, tool, proposal, now_ms) },
    }
}

/// For a call presenting a used approval: the recorded outcome, or a
/// refusal; `None` when its operation is known never to have run (a
/// reservation left by a crash, or reconciled as not applied), so this
/// call runs it.
async fn used_answer(o: &Operations<'_>, key: &OperationKey, tool: &ExposedTool, proposal: &Proposal, gate: &Gate) -> Result<Option<Held>, Stop> {
    let now_ms = o.clock.now_ms();
    if let Some(op) = o.ledger.operation_by_key(key).await.map_err(|e| ledger_failed(e, tool, proposal))? {
        // Only the operation this very approval ran may run again under it.
        let own = op.approval_id.as_deref() == gate.approval_id();
        if operation::reuse(&op, &proposal.sha256, now_ms) == Reuse::TakeOver {
            return if own { Ok(None) } else { Err(Stop::Refused(gate.used_refusal(&tool.exposed_name).with_proposal(&proposal.sha256))) };
        }
        return answer_existing(op, tool, proposal, now_ms).map(Some);
    }
    // The re-issue that used it may not have reserved its operation yet.
    let id = gate.approval_id().unwrap_or_default();
    let used = o.ledger.approval(id).await.map_err(|e| ledger_failed(e, tool, proposal))?.and_then(|a| a.used_ms);
    let refusal = match used {
        Some(at) if now_ms - at < o.lease_ms => {
            Refusal::new(Verdict::Allow, Reason::OperationInProgress, Action::Retry, format!("the call approved by {id} is being run by another re-issue; call again shortly to get its outcome"))
                .with_approval(id)
                .with_retry_after(250)
        }
        _ => gate.used_refusal(&tool.exposed_name),
    };
    Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)))
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

/// How a dispatch ended, as the operation records it: its state, and the
/// upstream's answer to keep (to replay) when there is one.
pub fn settled(outcome: &Result<Box<RawValue>, Stop>) -> (OperationState, Option<String>) {
    match outcome {
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
    }
}

/// Records how a dispatch of `op` ended (`settled`), with the receipt
/// `draft` makes of that state, in the same transaction. Returns whether a
/// receipt was appended, and the operation as recorded or, for an outcome
/// that is now unknown, the refusal that names the operation to reconcile.
pub async fn finish(
    o: &Operations<'_>,
    tool: &ExposedTool,
    op: &Operation,
    (state, recorded): (OperationState, Option<String>),
    draft: impl Fn(OperationState) -> Draft,
) -> (bool, Result<Operation, Refusal>) {
    let finished = o.ledger.finish_operation(&op.id, op.attempts, state, recorded.clone(), o.clock.now_ms(), Some(draft(state))).await;
    let (appended, recorded) = match finished {
        Ok(op) => (true, op),
        // Its lease lapsed while it ran (another replica or the CLI marked
        // it unknown), and now the answer is here: that settles it.
        Err(LedgerError::WrongState { state: "unknown", .. }) if state == OperationState::Completed => {
            let receipt = Some(draft(OperationState::ReconciledApplied));
            let settle = Resolution { applied: true, by: "toolgate".into(), reason: "its answer arrived after its lease lapsed".into(), outcome: recorded, now_ms: o.clock.now_ms(), receipt };
            match o.ledger.resolve_operation(&op.id, settle).await {
                Ok(settled) => (true, settled),
                Err(e) => {
                    tracing::error!(target: "toolgate::operation", operation = %op.id, error = %e, "cannot record a late answer");
                    (false, op.clone())
                }
            }
        }
        Err(e) => {
            // The answer still goes to the caller; the operation stays
            // dispatched and will read as unknown once its lease lapses.
            tracing::error!(target: "toolgate::operation", operation = %op.id, error = %e, "cannot record an operation's outcome");
            (false, op.clone())
        }
    };
    if state == OperationState::Unknown {
        tracing::warn!(target: "toolgate::operation", operation = %op.id, tool = %tool.exposed_name, "operation outcome unknown; reconcile it");
        return (appended, Err(unknown(op, &tool.exposed_name)));
    }
    (appended, Ok(recorded))
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
