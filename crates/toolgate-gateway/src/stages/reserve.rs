//! reserve: a write takes effect at most once per operation key. Before a
//! write goes upstream it is reserved in the ledger, unique on (tenant,
//! sender's subject, server, tool, key), and marked dispatched; its answer
//! is recorded after.
//! A call that brings a key already used gets what
//! `toolgate_core::operation::reuse` says: the recorded outcome, a
//! conflict, "in progress", or "unknown — reconcile"; never a second effect.
//!
//! The key is the client's `_meta["io.toolgate/operationKey"]`, or else the
//! approval the call runs under (so the approved call is the operation),
//! or else a fresh one (the write is recorded, but a retry cannot be told
//! from a new call: clients that retry should send a key).
//!
//! The pipeline enters by one door, `reserve`, handing it the dispatch it
//! guards: the write's decision commits with its reservation, the dispatch
//! runs only if this call holds the operation, and how it ended commits
//! with the operation's end — each returning a `Committed` proof.

use std::future::Future;

use serde_json::value::RawValue;
use serde_json::{Value, json};
use toolgate_core::operation::{self, Operation, OperationKey, OperationState, Reuse};
use toolgate_core::receipt::OperationRef;
use toolgate_core::{Action, Clock, Entropy, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Begun, Draft, Ledger, LedgerError, NewOperation, Resolution};
use tracing::Instrument as _;

use crate::call::{Call, Context, Dispatched, Gate, Held, Reserved, Stop};
use crate::catalog::ExposedTool;
use crate::commit::{Commit, Committed, Receipts, approval_ref};
use crate::observe::Observer;
use toolgate_mcp::wire::{RawObject, code};

/// The `_meta` key a client names its operation with.
pub(crate) const KEY_META: &str = "io.toolgate/operationKey";
/// The `_meta` key of toolgate's note on a write's result.
pub(crate) const OPERATION_META: &str = "io.toolgate/operation";
/// How much longer than the upstream deadline a holder's lease runs, so a
/// live gateway always finishes its own operations before they count as lapsed.
const LEASE_GRACE_MS: i64 = 5_000;

/// What the reserve stage reads and writes.
pub(crate) struct Operations<'a> {
    pub ledger: &'a dyn Ledger,
    pub clock: &'a dyn Clock,
    pub entropy: &'a dyn Entropy,
    /// How long a holder may take before its operation counts as lapsed:
    /// the tool's upstream deadline and a grace.
    pub lease_ms: i64,
    /// The credentials the gateway holds: an answer carrying one is
    /// withheld (`crate::withheld`).
    pub held: &'a toolgate_core::credentials::Credentials,
    /// The credential this call carries for its person (present), by
    /// name: an answer that says it back is withheld too.
    pub presented: Option<(&'a str, &'a str)>,
}

impl Operations<'_> {
    /// The lease for a tool whose upstream deadline is `timeout_ms`.
    pub fn lease_for(timeout_ms: u64) -> i64 {
        timeout_ms as i64 + LEASE_GRACE_MS
    }
}

/// The reserve stage, one door, around the dispatch it guards (`send`): a
/// read is sent as it is; a write is reserved under its key, with its
/// decision's receipt, and sent only if this call holds the operation, its
/// end recorded with its outcome's receipt before the caller hears it;
/// under a key already used, the recorded outcome or a refusal answers and
/// nothing is sent. Returns all it concluded (`Reserved`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn reserve<F>(
    o: &Operations<'_>,
    receipts: &dyn Receipts,
    obs: &Observer<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
    gate: &Gate,
    send: impl FnOnce() -> F,
) -> Reserved
where
    F: Future<Output = Result<Box<RawValue>, Stop>>,
{
    let mut seen = Seen::default();
    let (operation, dispatched, result) =
        match held(o, receipts, obs, (cx, call, tool, proposal), gate, &mut seen).await {
            Err(stop) => (None, false, Err(stop)),
            Ok(held) => {
                let operation =
                    held.operation().map(|op| (op.id.clone(), matches!(held, Held::Replay { .. })));
                let dispatched = matches!(held, Held::Read | Held::Mine(_));
                let result = match held {
                    // Every answer passes here before anyone sees it: one
                    // carrying a credential the gateway holds is withheld.
                    Held::Read => withhold(o, tool, proposal, send().await).map(Dispatched::Result),
                    Held::Mine(op) => {
                        let outcome = send().await;
                        finish_sent(o, receipts, tool, proposal, op, outcome, &mut seen)
                            .await
                            .map(Dispatched::Result)
                    }
                    Held::Replay { op, raw, checked: true } => withhold(o, tool, proposal, Ok(raw))
                        .map(|raw| Dispatched::Result(annotate(raw, &op, true))),
                    // A reconciler's finding is not the tool's result: not checked against its outputSchema.
                    Held::Replay { op, raw, checked: false } => {
                        withhold(o, tool, proposal, Ok(raw))
                            .map(|raw| Dispatched::Finding(annotated(&raw, &op, true)))
                    }
                };
                (operation, dispatched, result)
            }
        };
    Reserved {
        result,
        committed: seen.committed,
        operation_ref: seen.operation_ref,
        operation,
        dispatched,
    }
}

/// What the way through reserve came upon, beside the result.
#[derive(Default)]
struct Seen {
    committed: Option<Committed>,
    operation_ref: Option<OperationRef>,
}

/// The call, as reserve reads it.
type Asked<'a> = (&'a Context, &'a Call, &'a ExposedTool, &'a Proposal);

/// What the call holds before anything is sent: nothing (a read), the
/// operation (reserved now, with the decision's receipt), or another
/// call's recorded outcome.
async fn held(
    o: &Operations<'_>,
    receipts: &dyn Receipts,
    obs: &Observer<'_>,
    (cx, call, tool, proposal): Asked<'_>,
    gate: &Gate,
    r: &mut Seen,
) -> Result<Held, Stop> {
    let span = obs.stage("reserve");
    match claim(o, cx, call, tool, proposal, gate).instrument(span.clone()).await? {
        Claimed::Read => Ok(Held::Read),
        Claimed::Recorded(held) => {
            r.operation_ref = held.operation().map(reference);
            Ok(held)
        }
        Claimed::New(new) => {
            // The decision to run commits with the reservation.
            let reserved = reserved(&new);
            r.operation_ref = Some(reserved.clone());
            let receipt =
                receipts.decided(approval_ref(o.ledger, gate.approval_id()).await, reserved);
            let placement = receipt.placement.clone();
            let begun = begin(o, tool, proposal, new, receipt).instrument(span).await;
            if begun.committed {
                r.committed = Some(receipts.committed(Commit::Decision, placement.get()));
            }
            r.operation_ref = begun.found.or(r.operation_ref.take());
            begun.held
        }
    }
}

/// A sent write: records how it ended, with the receipt of that end in the
/// same transaction, before the caller hears it.
async fn finish_sent(
    o: &Operations<'_>,
    receipts: &dyn Receipts,
    tool: &ExposedTool,
    proposal: &Proposal,
    op: Operation,
    outcome: Result<Box<RawValue>, Stop>,
    r: &mut Seen,
) -> Result<Box<RawValue>, Stop> {
    // A credential in the answer is never recorded (nor replayed, nor
    // captured by the outcome's receipt): the refusal stands in for it.
    let found = found_in(o, &outcome);
    let mut settled = settled(&outcome);
    if let Some(found) = &found {
        settled.1 = settled.1.map(|_| {
            withheld_outcome(
                &crate::withheld::refusal(tool, found, true).with_proposal(&proposal.sha256),
            )
        });
    }
    let result = settled.1.clone();
    let named = r.operation_ref.clone().unwrap_or_else(|| reference(&op));
    let placement = std::sync::Mutex::new(None);
    let (appended, finished) = finish(o, tool, &op, settled, |state| {
        let draft = receipts.outcome(state, result.as_deref(), named.clone());
        *placement.lock().unwrap_or_else(|p| p.into_inner()) = Some(draft.placement.clone());
        draft
    })
    .await;
    if appended {
        let placed =
            placement.into_inner().unwrap_or_else(|p| p.into_inner()).and_then(|p| p.get());
        r.committed = Some(receipts.committed(Commit::Outcome, placed).after(r.committed.take()));
    }
    let op = finished.map_err(|unknown| Stop::Refused(unknown.with_proposal(&proposal.sha256)))?;
    if let Some(found) = found {
        return Err(Stop::Refused(withheld(tool, proposal, &found, true).with_operation(&op.id)));
    }
    Ok(annotate(outcome?, &op, false))
}

/// The credential the gateway holds that an upstream's answer (or its
/// JSON-RPC error) carries, if any.
fn found_in(
    o: &Operations<'_>,
    outcome: &Result<Box<RawValue>, Stop>,
) -> Option<toolgate_core::credentials::Found> {
    let found = match outcome {
        Ok(raw) => crate::withheld::in_answer(o.held, raw),
        Err(stop) => crate::withheld::in_stop(o.held, stop),
    };
    // The person's credential is made per call, not held at start: a
    // plain search (its characters are JWT's, or a token's, unescaped).
    let said_back = |(name, secret): (&str, &str)| {
        let carried = match outcome {
            Ok(raw) => raw.get().contains(secret),
            // A JSON-RPC error, or a refusal that quotes what the upstream said.
            Err(Stop::Error(e)) => {
                e.message.contains(secret)
                    || e.data.as_ref().is_some_and(|d| d.to_string().contains(secret))
            }
            Err(Stop::Refused(r)) => r.message.contains(secret),
            Err(Stop::Input(o)) => o.values().any(|v| v.get().contains(secret)),
        };
        carried.then(|| toolgate_core::credentials::Found { name: name.to_string() })
    };
    found.or_else(|| o.presented.and_then(said_back))
}

/// `outcome`, or its refusal when it carries a credential the gateway holds.
fn withhold(
    o: &Operations<'_>,
    tool: &ExposedTool,
    proposal: &Proposal,
    outcome: Result<Box<RawValue>, Stop>,
) -> Result<Box<RawValue>, Stop> {
    match found_in(o, &outcome) {
        None => outcome,
        Some(found) => Err(Stop::Refused(withheld(tool, proposal, &found, false))),
    }
}

/// The refusal of an answer that carried `found`, said in the log too (by name).
fn withheld(
    tool: &ExposedTool,
    proposal: &Proposal,
    found: &toolgate_core::credentials::Found,
    write: bool,
) -> Refusal {
    tracing::warn!(target: "toolgate::withheld", tool = %tool.exposed_name, credential = %found.name, "an upstream's answer carried a credential the gateway holds; withheld");
    crate::withheld::refusal(tool, found, write).with_proposal(&proposal.sha256)
}

/// What a write's operation records in place of an answer that carried a
/// credential: the refusal, as the caller got it (a replay gives it again).
fn withheld_outcome(refusal: &Refusal) -> String {
    json!({"content": [{"type": "text", "text": refusal.message}], "structuredContent": refusal, "isError": true}).to_string()
}

/// How a write stands before it is sent.
enum Claimed {
    /// A read: nothing to reserve.
    Read,
    /// A write to reserve under its key; its decision's receipt commits
    /// with the reservation (`begin`).
    New(NewOperation),
    /// Answered from the operation a used approval already ran.
    Recorded(Held),
}

/// The operation key of this call and what stands under it already.
async fn claim(
    o: &Operations<'_>,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    proposal: &Proposal,
    gate: &Gate,
) -> Result<Claimed, Stop> {
    let refuse = |r: Refusal| Stop::Refused(r.with_proposal(&proposal.sha256));
    if tool.read_only() {
        return if gate.used {
            Err(refuse(gate.used_refusal(&tool.exposed_name)))
        } else {
            Ok(Claimed::Read)
        };
    }
    let client_key = call.client_key().map_err(refuse)?.map(str::to_string);
    let id = o.entropy.id("op_");
    let value = client_key
        .or_else(|| gate.approval_id().map(|a| format!("approval:{a}")))
        .unwrap_or_else(|| format!("auto:{id}"));
    let key = OperationKey {
        tenant: cx.caller.tenant.clone(),
        subject: cx.caller.subject.clone(),
        server: tool.server.clone(),
        tool: tool.tool.name.clone(),
        value,
    };
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
        caller: cx.caller.name.clone(),
        proposal_sha256: proposal.sha256.clone(),
        approval_id: gate.approval_id().map(str::to_string),
        arguments: proposal.arguments.clone(),
        lease_until_ms: o.clock.now_ms() + o.lease_ms,
        receipt: None,
    };
    Ok(Claimed::New(new))
}

/// The operation's key and state, as a receipt names it.
fn reference(op: &Operation) -> OperationRef {
    OperationRef { key: op.key.value.clone(), state: op.state.as_str().into() }
}

/// A new operation's key, in the state its first receipt names.
fn reserved(new: &NewOperation) -> OperationRef {
    OperationRef { key: new.key.value.clone(), state: OperationState::Reserved.as_str().into() }
}

/// How `begin` ended.
struct Begin {
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
async fn begin(
    o: &Operations<'_>,
    tool: &ExposedTool,
    proposal: &Proposal,
    mut new: NewOperation,
    receipt: Draft,
) -> Begin {
    new.receipt = Some(receipt);
    let now_ms = o.clock.now_ms();
    match o.ledger.begin_operation(new, now_ms).await {
        Err(e) => {
            Begin { committed: false, found: None, held: Err(ledger_failed(e, tool, proposal)) }
        }
        Ok(Begun::Mine(op)) => {
            // Durable before the upstream can see the call: after a crash,
            // `dispatched` means "maybe sent", `reserved` means "not sent".
            let marked = o
                .ledger
                .mark_dispatched(
                    &op.id,
                    op.attempts,
                    o.clock.now_ms() + o.lease_ms,
                    o.clock.now_ms(),
                )
                .await;
            Begin {
                committed: true,
                found: None,
                held: marked.map(Held::Mine).map_err(|e| ledger_failed(e, tool, proposal)),
            }
        }
        Ok(Begun::Theirs(op)) => Begin {
            committed: false,
            found: Some(reference(&op)),
            held: answer_existing(op, tool, proposal, now_ms),
        },
    }
}

/// For a call presenting a used approval: the recorded outcome, or a
/// refusal; `None` when its operation is known never to have run (a
/// reservation left by a crash, or reconciled as not applied), so this
/// call runs it.
async fn used_answer(
    o: &Operations<'_>,
    key: &OperationKey,
    tool: &ExposedTool,
    proposal: &Proposal,
    gate: &Gate,
) -> Result<Option<Held>, Stop> {
    let now_ms = o.clock.now_ms();
    if let Some(op) =
        o.ledger.operation_by_key(key).await.map_err(|e| ledger_failed(e, tool, proposal))?
    {
        // Only the operation this very approval ran may run again under it.
        let own = op.approval_id.as_deref() == gate.approval_id();
        if operation::reuse(&op, &proposal.sha256, now_ms) == Reuse::TakeOver {
            return if own {
                Ok(None)
            } else {
                Err(Stop::Refused(
                    gate.used_refusal(&tool.exposed_name).with_proposal(&proposal.sha256),
                ))
            };
        }
        return answer_existing(op, tool, proposal, now_ms).map(Some);
    }
    // The re-issue that used it may not have reserved its operation yet.
    let id = gate.approval_id().unwrap_or_default();
    let used = o
        .ledger
        .approval(id)
        .await
        .map_err(|e| ledger_failed(e, tool, proposal))?
        .and_then(|a| a.used_ms);
    let refusal = match used {
        Some(at) if now_ms - at < o.lease_ms => Refusal::new(
            Verdict::Allow,
            Reason::OperationInProgress,
            Action::Retry,
            format!(
                "the call approved by {id} is being run by another re-issue; call again shortly to \
                    get its outcome"
            ),
        )
        .with_approval(id)
        .with_retry_after(250),
        _ => gate.used_refusal(&tool.exposed_name),
    };
    Err(Stop::Refused(refusal.with_proposal(&proposal.sha256)))
}

/// Another call's operation under this key, as `reuse` says.
fn answer_existing(
    op: Operation,
    tool: &ExposedTool,
    proposal: &Proposal,
    now_ms: i64,
) -> Result<Held, Stop> {
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
fn unknown(op: &Operation, exposed: &str) -> Refusal {
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
fn settled(outcome: &Result<Box<RawValue>, Stop>) -> (OperationState, Option<String>) {
    match outcome {
        Ok(raw) => {
            let fields: serde_json::Map<String, Value> =
                serde_json::from_str(raw.get()).unwrap_or_default();
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
        Err(Stop::Refused(r))
            if matches!(r.reason, Reason::OutcomeUnknown | Reason::UpstreamTimeout) =>
        {
            (OperationState::Unknown, None)
        }
        // JSON-RPC errors that say the request was refused before it ran:
        // nothing happened. Any other (an internal error thrown after a
        // commit) may hide an effect.
        Err(Stop::Error(e)) if code::refused_before_running(e.code) => {
            (OperationState::ReconciledNotApplied, None)
        }
        Err(Stop::Error(_)) => (OperationState::Unknown, None),
        // Refused before it was sent (the upstream is down or turned it away).
        Err(_) => (OperationState::ReconciledNotApplied, None),
    }
}

/// Records how a dispatch of `op` ended (`settled`), with the receipt
/// `draft` makes of that state, in the same transaction. Returns whether a
/// receipt was appended, and the operation as recorded or, for an outcome
/// that is now unknown, the refusal that names the operation to reconcile.
async fn finish(
    o: &Operations<'_>,
    tool: &ExposedTool,
    op: &Operation,
    (state, recorded): (OperationState, Option<String>),
    draft: impl Fn(OperationState) -> Draft,
) -> (bool, Result<Operation, Refusal>) {
    let finished = o
        .ledger
        .finish_operation(
            &op.id,
            op.attempts,
            state,
            recorded.clone(),
            o.clock.now_ms(),
            Some(draft(state)),
        )
        .await;
    let (appended, recorded) = match finished {
        Ok(op) => (true, op),
        // Its lease lapsed while it ran (another replica or the CLI marked
        // it unknown), and now the answer is here: that settles it.
        Err(LedgerError::WrongState { state: "unknown", .. })
            if state == OperationState::Completed =>
        {
            let receipt = Some(draft(OperationState::ReconciledApplied));
            let settle = Resolution {
                applied: true,
                by: "toolgate".into(),
                reason: "its answer arrived after its lease lapsed".into(),
                outcome: recorded,
                now_ms: o.clock.now_ms(),
                receipt,
            };
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
fn annotated(raw: &RawValue, op: &Operation, replayed: bool) -> RawObject {
    let mut result: RawObject = serde_json::from_str(raw.get()).unwrap_or_default();
    let mut meta: serde_json::Map<String, Value> =
        result.get("_meta").and_then(|m| serde_json::from_str(m.get()).ok()).unwrap_or_default();
    meta.insert(
        OPERATION_META.into(),
        json!({"id": op.id, "key": op.key.value, "state": op.state, "replayed": replayed}),
    );
    if let Ok(m) = serde_json::value::to_raw_value(&meta) {
        result.insert("_meta".into(), m);
    }
    result
}

fn annotate(raw: Box<RawValue>, op: &Operation, replayed: bool) -> Box<RawValue> {
    // Not an object: left for the check stage to refuse as it is.
    if !raw.get().trim_start().starts_with('{') {
        return raw;
    }
    serde_json::value::to_raw_value(&annotated(&raw, op, replayed)).unwrap_or(raw)
}

fn ledger_failed(e: toolgate_ledger::LedgerError, tool: &ExposedTool, proposal: &Proposal) -> Stop {
    tracing::error!(target: "toolgate::operation", tool = %tool.exposed_name, error = %e, "the operation ledger failed");
    Stop::Refused(
        Refusal::new(
            Verdict::Allow,
            Reason::LedgerUnavailable,
            Action::Retry,
            "the operation ledger is unavailable; nothing was run, retry later with the same key",
        )
        .with_proposal(&proposal.sha256),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallRequest;
    use crate::stages::testing::{
        NOW_MS, Store, call, find_definition, find_tool, order_tool, passed, raw, refused, split,
        tool,
    };
    use toolgate_core::approval::Binding;
    use toolgate_core::{AuthorityClass, AuthorityView, Hints};
    use toolgate_ledger::NewApproval;
    use toolgate_mcp::wire::RpcError;

    const LEASE_MS: i64 = 10_000;
    const RESULT: &str =
        r#"{"content":[{"type":"text","text":"ordered"}],"structuredContent":{"order":"PO-1"}}"#;

    static NOTHING_HELD: toolgate_core::credentials::Credentials =
        toolgate_core::credentials::Credentials::none();

    fn operations(s: &Store) -> Operations<'_> {
        Operations {
            ledger: s.ledger.as_ref(),
            clock: s.clock.as_ref(),
            entropy: &s.entropy,
            lease_ms: LEASE_MS,
            held: &NOTHING_HELD,
            presented: None,
        }
    }

    /// The agent's order of `quantity` units, sending `key` as its operation key.
    fn order(quantity: u32, key: Option<Value>) -> (CallRequest, Proposal) {
        let arguments = json!({"part_no": "P-1", "quantity": quantity});
        let mut c = call("parts__raise_parts_order", arguments.clone());
        c.call.operation_key = key;
        (c, Proposal::new("parts", "raise_parts_order", arguments))
    }

    fn keyed(quantity: u32, key: &str) -> (CallRequest, Proposal) {
        order(quantity, Some(json!(key)))
    }

    fn no_approval() -> Gate {
        Gate { approval: None, input: Default::default(), used: false }
    }

    /// The gate of a call run under approval `id` of `proposal` (`used`: presented again).
    fn under_approval(id: &str, proposal: &Proposal, used: bool) -> Gate {
        let binding = Binding {
            tenant: "atlas".into(),
            caller: "agent".into(),
            server: "parts".into(),
            tool: "raise_parts_order".into(),
            proposal_sha256: proposal.sha256.clone(),
            policy_version: "v1".into(),
        };
        Gate { approval: Some((id.into(), binding)), input: Default::default(), used }
    }

    async fn claimed(
        s: &Store,
        (c, p): &(CallRequest, Proposal),
        t: &ExposedTool,
        gate: &Gate,
    ) -> Result<Claimed, Stop> {
        let (cx, call) = split(c);
        claim(&operations(s), &cx, &call, t, p, gate).await
    }

    fn new_one(claimed: Claimed) -> NewOperation {
        match claimed {
            Claimed::New(new) => new,
            Claimed::Read => panic!("expected a new operation; claimed a read"),
            Claimed::Recorded(_) => {
                panic!("expected a new operation; answered from a recorded one")
            }
        }
    }

    /// Claims and begins the call as the pipeline does, with a receipt to commit.
    async fn begun(s: &Store, call: &(CallRequest, Proposal), gate: &Gate) -> Begin {
        let new = new_one(passed(claimed(s, call, &order_tool(), gate).await));
        begin(&operations(s), &order_tool(), &call.1, new, s.draft()).await
    }

    fn mine(held: Result<Held, Stop>) -> Operation {
        match passed(held) {
            Held::Mine(op) => op,
            Held::Read => panic!("expected to hold the operation; a read"),
            Held::Replay { op, .. } => {
                panic!("expected to hold the operation; a replay of {}", op.id)
            }
        }
    }

    fn replay(held: Result<Held, Stop>) -> (Operation, Box<RawValue>, bool) {
        match passed(held) {
            Held::Replay { op, raw, checked } => (op, raw, checked),
            Held::Read => panic!("expected a replay; a read"),
            Held::Mine(op) => panic!("expected a replay; holds {}", op.id),
        }
    }

    /// Records `outcome` as how `op`'s dispatch ended.
    async fn finished(
        s: &Store,
        op: &Operation,
        outcome: Result<Box<RawValue>, Stop>,
    ) -> (bool, Result<Operation, Refusal>) {
        finish(&operations(s), &order_tool(), op, settled(&outcome), |_| s.draft()).await
    }

    /// A write sent under `key` and answered with `RESULT`.
    async fn completed(s: &Store, key: &str) -> Operation {
        let op = mine(begun(s, &keyed(2, key), &no_approval()).await.held);
        finished(s, &op, Ok(raw(RESULT))).await.1.expect("recorded")
    }

    async fn stored(s: &Store, id: &str) -> Operation {
        s.ledger.operation(id).await.unwrap().expect("the operation is stored")
    }

    #[tokio::test]
    async fn a_read_reserves_nothing_unless_it_presents_a_used_approval() {
        let s = Store::open().await;
        let read = (
            call("parts__find_part", json!({"part_no": "P-1"})),
            Proposal::new("parts", "find_part", json!({"part_no": "P-1"})),
        );
        assert!(matches!(
            passed(claimed(&s, &read, &find_tool(), &no_approval()).await),
            Claimed::Read
        ));
        let r = refused(
            claimed(&s, &read, &find_tool(), &under_approval("apr_1", &read.1, true)).await,
        );
        assert_eq!((r.reason, r.approval_id.as_deref()), (Reason::ApprovalUsed, Some("apr_1")));
    }

    #[tokio::test]
    async fn a_read_only_hint_counts_only_from_a_trusted_server() {
        let s = Store::open().await;
        let read = (
            call("parts__find_part", json!({"part_no": "P-1"})),
            Proposal::new("parts", "find_part", json!({"part_no": "P-1"})),
        );
        // The hint may be forged: from an untrusted server the tool is a write.
        let untrusted = tool("parts", find_definition(), Some(AuthorityClass::Automatic));
        assert!(matches!(
            passed(claimed(&s, &read, &untrusted, &no_approval()).await),
            Claimed::New(_)
        ));
        let mut trusted = untrusted;
        trusted.view = AuthorityView::new(
            Hints::from_annotations(find_definition().get("annotations")),
            Some(AuthorityClass::Automatic),
            true,
        );
        assert!(matches!(
            passed(claimed(&s, &read, &trusted, &no_approval()).await),
            Claimed::Read
        ));
    }

    #[tokio::test]
    async fn a_write_is_reserved_under_the_clients_key() {
        let s = Store::open().await;
        let call = keyed(2, "order-1");
        let new = new_one(passed(claimed(&s, &call, &order_tool(), &no_approval()).await));
        let key = OperationKey {
            tenant: "atlas".into(),
            subject: "agent-7".into(),
            server: "parts".into(),
            tool: "raise_parts_order".into(),
            value: "order-1".into(),
        };
        assert_eq!(new.key, key);
        assert!(new.id.starts_with("op_"), "{}", new.id);
        assert_eq!(
            (new.caller.as_str(), new.proposal_sha256.as_str(), new.approval_id.as_deref()),
            ("agent", call.1.sha256.as_str(), None)
        );
        assert_eq!((&new.arguments, new.lease_until_ms), (&call.1.arguments, NOW_MS + LEASE_MS));
        assert_eq!(
            reserved(&new),
            OperationRef { key: "order-1".into(), state: "reserved".into() }
        );
        // Nothing is written before `begin`.
        assert!(s.ledger.operation_by_key(&key).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn without_a_client_key_the_approval_or_a_fresh_id_names_the_operation() {
        let s = Store::open().await;
        let call = order(2, None);
        let new = new_one(passed(
            claimed(&s, &call, &order_tool(), &under_approval("apr_1", &call.1, false)).await,
        ));
        assert_eq!(
            (new.key.value.as_str(), new.approval_id.as_deref()),
            ("approval:apr_1", Some("apr_1"))
        );
        for call in [order(2, None), order(2, Some(Value::Null))] {
            let new = new_one(passed(claimed(&s, &call, &order_tool(), &no_approval()).await));
            assert_eq!(new.key.value, format!("auto:{}", new.id));
        }
    }

    #[tokio::test]
    async fn a_key_the_client_may_not_give_is_refused_before_anything_runs() {
        let s = Store::open().await;
        // The gateway's own prefixes could stand in for another call's operation.
        for key in [
            json!(7),
            json!(""),
            json!("auto:op_1"),
            json!("approval:apr_1"),
            json!("k".repeat(201)),
            json!(["order-1"]),
        ] {
            let call = order(2, Some(key.clone()));
            let r = refused(claimed(&s, &call, &order_tool(), &no_approval()).await);
            assert_eq!(
                (r.verdict, r.reason, r.action),
                (Verdict::Allow, Reason::InvalidArguments, Action::Correct),
                "{key}"
            );
            assert_eq!(r.proposal_sha256.as_deref(), Some(call.1.sha256.as_str()));
        }
        // 200 characters (not bytes) is the limit.
        for key in ["k".repeat(200), "é".repeat(200)] {
            let new =
                new_one(passed(claimed(&s, &keyed(2, &key), &order_tool(), &no_approval()).await));
            assert_eq!(new.key.value, key);
        }
    }

    #[tokio::test]
    async fn begin_commits_once_and_the_same_call_again_replays_the_recorded_outcome() {
        let s = Store::open().await;
        let call = keyed(2, "order-1");
        let first = begun(&s, &call, &no_approval()).await;
        assert!(first.committed && first.found.is_none());
        let op = mine(first.held);
        assert_eq!(
            (op.state, op.attempts, op.lease_until_ms),
            (OperationState::Dispatched, 1, NOW_MS + LEASE_MS)
        );
        assert_eq!(s.receipts().await, 1, "the decision's receipt commits with the reservation");
        let (appended, recorded) = finished(&s, &op, Ok(raw(RESULT))).await;
        let recorded = recorded.expect("completed");
        assert!(appended);
        assert_eq!(
            (recorded.state, recorded.outcome.as_deref()),
            (OperationState::Completed, Some(RESULT))
        );
        assert_eq!(s.receipts().await, 2);
        // Again, same key and arguments: the recorded answer; nothing held, nothing committed.
        let again = begun(&s, &call, &no_approval()).await;
        assert!(!again.committed);
        assert_eq!(
            again.found,
            Some(OperationRef { key: "order-1".into(), state: "completed".into() })
        );
        let (replayed, answer, checked) = replay(again.held);
        assert_eq!((replayed.id.as_str(), answer.get(), checked), (op.id.as_str(), RESULT, true));
        assert_eq!(s.receipts().await, 2);
    }

    #[tokio::test]
    async fn a_key_reused_for_other_arguments_is_a_conflict() {
        let s = Store::open().await;
        let op = completed(&s, "order-1").await;
        let other = begun(&s, &keyed(3, "order-1"), &no_approval()).await;
        assert!(!other.committed);
        let r = refused(other.held);
        assert_eq!(
            (r.reason, r.action, r.operation_id.as_deref()),
            (Reason::OperationConflict, Action::Correct, Some(op.id.as_str()))
        );
        assert_eq!(
            stored(&s, &op.id).await.state,
            OperationState::Completed,
            "the recorded operation is untouched"
        );
    }

    #[tokio::test]
    async fn a_key_whose_call_is_still_running_says_when_to_ask_again() {
        let s = Store::open().await;
        let op = mine(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        s.clock.advance(LEASE_MS - 400);
        let r = refused(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        assert_eq!(
            (r.reason, r.action, r.retry_after_ms),
            (Reason::OperationInProgress, Action::Retry, Some(400))
        );
        assert_eq!(r.operation_id.as_deref(), Some(op.id.as_str()));
    }

    #[tokio::test]
    async fn a_dispatch_whose_lease_lapsed_is_unknown_and_never_sent_again() {
        let s = Store::open().await;
        let op = mine(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        s.clock.advance(LEASE_MS);
        let again = begun(&s, &keyed(2, "order-1"), &no_approval()).await;
        assert_eq!(
            (again.committed, again.found.as_ref().map(|f| f.state.as_str())),
            (false, Some("unknown"))
        );
        let r = refused(again.held);
        assert_eq!(
            (r.reason, r.action, r.operation_id.as_deref()),
            (Reason::OutcomeUnknown, Action::Reconcile, Some(op.id.as_str()))
        );
        assert_eq!(stored(&s, &op.id).await.state, OperationState::Unknown);
    }

    #[test]
    fn settled_maps_each_outcome_to_what_the_operation_records() {
        let refusal =
            |reason| Err(Stop::Refused(Refusal::new(Verdict::Allow, reason, Action::Retry, "x")));
        let error = |code| Err(Stop::Error(RpcError::new(code, "x")));
        let ok = r#"{"content":[]}"#;
        let tool_error = r#"{"isError":true,"content":[]}"#;
        let cases: Vec<(Result<Box<RawValue>, Stop>, OperationState, Option<&str>)> = vec![
            (Ok(raw(ok)), OperationState::Completed, Some(ok)),
            (
                Ok(raw(r#"{"resultType":"complete","content":[]}"#)),
                OperationState::Completed,
                Some(r#"{"resultType":"complete","content":[]}"#),
            ),
            (Ok(raw(tool_error)), OperationState::ToolError, Some(tool_error)),
            // Asked for input before acting: nothing happened yet.
            (
                Ok(raw(r#"{"resultType":"input_required","inputRequests":{}}"#)),
                OperationState::ReconciledNotApplied,
                None,
            ),
            (refusal(Reason::UpstreamTimeout), OperationState::Unknown, None),
            (refusal(Reason::OutcomeUnknown), OperationState::Unknown, None),
            (error(code::INVALID_PARAMS), OperationState::ReconciledNotApplied, None),
            (error(code::METHOD_NOT_FOUND), OperationState::ReconciledNotApplied, None),
            (error(code::MISSING_CLIENT_CAPABILITY), OperationState::ReconciledNotApplied, None),
            (error(code::HEADER_MISMATCH), OperationState::ReconciledNotApplied, None),
            (error(code::UNSUPPORTED_PROTOCOL_VERSION), OperationState::ReconciledNotApplied, None),
            (error(code::PARSE_ERROR), OperationState::ReconciledNotApplied, None),
            (error(code::INVALID_REQUEST), OperationState::ReconciledNotApplied, None),
            // An application error code says nothing about whether it ran.
            (error(-32000), OperationState::Unknown, None),
            // An internal error may come after the tool committed.
            (error(code::INTERNAL_ERROR), OperationState::Unknown, None),
            (refusal(Reason::UpstreamUnavailable), OperationState::ReconciledNotApplied, None),
        ];
        for (outcome, state, kept) in cases {
            let described = match &outcome {
                Ok(r) => r.get().to_string(),
                Err(Stop::Refused(r)) => format!("{:?}", r.reason),
                Err(Stop::Error(e)) => e.code.to_string(),
                Err(Stop::Input(_)) => "input".into(),
            };
            assert_eq!(settled(&outcome), (state, kept.map(str::to_string)), "{described}");
        }
    }

    #[tokio::test]
    async fn an_outcome_that_is_unknown_is_recorded_and_names_the_operation_to_reconcile() {
        let s = Store::open().await;
        let op = mine(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        let timeout = Refusal::new(Verdict::Allow, Reason::UpstreamTimeout, Action::Retry, "late");
        let (appended, recorded) = finished(&s, &op, Err(Stop::Refused(timeout))).await;
        assert!(appended);
        let r = recorded.err().expect("the caller is told to reconcile");
        assert_eq!(
            (r.reason, r.action, r.operation_id.as_deref()),
            (Reason::OutcomeUnknown, Action::Reconcile, Some(op.id.as_str()))
        );
        assert!(r.message.contains(&format!("toolgate ops reconcile {}", op.id)), "{}", r.message);
        assert_eq!(stored(&s, &op.id).await.state, OperationState::Unknown);
        assert_eq!(s.receipts().await, 2);
    }

    #[tokio::test]
    async fn a_write_the_upstream_never_ran_leaves_its_key_free_to_run() {
        let s = Store::open().await;
        let op = mine(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        let (_, recorded) =
            finished(&s, &op, Err(Stop::Error(RpcError::new(code::INVALID_PARAMS, "bad")))).await;
        assert_eq!(recorded.expect("recorded").state, OperationState::ReconciledNotApplied);
        // The same call again takes the operation over as its next attempt.
        let again = begun(&s, &keyed(2, "order-1"), &no_approval()).await;
        assert!(again.committed);
        let retaken = mine(again.held);
        assert_eq!(
            (retaken.id.as_str(), retaken.attempts, retaken.state),
            (op.id.as_str(), 2, OperationState::Dispatched)
        );
    }

    #[tokio::test]
    async fn an_answer_after_the_lease_lapsed_settles_the_operation_as_applied() {
        let s = Store::open().await;
        let op = mine(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        s.clock.advance(LEASE_MS);
        // Someone lists operations: the lapsed dispatch is marked unknown.
        s.ledger.operations(None, None, s.clock.now_ms(), usize::MAX).await.unwrap();
        assert_eq!(stored(&s, &op.id).await.state, OperationState::Unknown);
        let (appended, late) = finished(&s, &op, Ok(raw(RESULT))).await;
        let late = late.expect("the late answer settles it");
        assert!(appended);
        assert_eq!(
            (late.state, late.resolved_by.as_deref(), late.outcome.as_deref()),
            (OperationState::ReconciledApplied, Some("toolgate"), Some(RESULT))
        );
    }

    #[tokio::test]
    async fn a_used_approval_answers_only_from_its_operation() {
        let s = Store::open().await;
        let call = order(2, None);
        let op = mine(begun(&s, &call, &under_approval("apr_1", &call.1, false)).await.held);
        finished(&s, &op, Ok(raw(RESULT))).await.1.expect("recorded");
        // Presented again: the operation it ran answers; nothing new is reserved.
        let Claimed::Recorded(held) = passed(
            claimed(&s, &call, &order_tool(), &under_approval("apr_1", &call.1, true)).await,
        ) else {
            panic!("expected the recorded operation")
        };
        let (replayed, answer, checked) = replay(Ok(held));
        assert_eq!((replayed.id.as_str(), answer.get(), checked), (op.id.as_str(), RESULT, true));
    }

    #[tokio::test]
    async fn a_used_approval_without_an_operation_is_in_progress_then_refused() {
        let s = Store::open().await;
        let call = order(2, None);
        let gate = under_approval("apr_2", &call.1, true);
        let (_, binding) = gate.approval.clone().unwrap();
        let new = NewApproval {
            id: "apr_2".into(),
            binding,
            arguments: call.1.arguments.clone(),
            reason: "test".into(),
            rules: vec![],
            now_ms: NOW_MS,
            ttl_ms: 60_000,
            receipt: None,
            subject: "agent-7".into(),
            operation_key: None,
            notices: vec![],
        };
        s.ledger.create_approval(new).await.unwrap();
        s.ledger
            .decide_approval(
                "apr_2",
                true,
                toolgate_ledger::Decider {
                    name: "dana",
                    subject: "dana@atlas.example",
                    tenant: "atlas",
                },
                "ok",
                NOW_MS,
            )
            .await
            .unwrap();
        s.ledger.consume_approval("apr_2", NOW_MS).await.unwrap();
        // Another re-issue just used it and has not reserved its operation yet.
        let r = refused(claimed(&s, &call, &order_tool(), &gate).await);
        assert_eq!(
            (r.reason, r.action, r.retry_after_ms, r.approval_id.as_deref()),
            (Reason::OperationInProgress, Action::Retry, Some(250), Some("apr_2"))
        );
        // Long after, nothing will come: the approval is simply used.
        s.clock.advance(LEASE_MS);
        let r = refused(claimed(&s, &call, &order_tool(), &gate).await);
        assert_eq!((r.reason, r.approval_id.as_deref()), (Reason::ApprovalUsed, Some("apr_2")));
    }

    #[tokio::test]
    async fn the_result_names_its_operation_in_meta() {
        let s = Store::open().await;
        let op = mine(begun(&s, &keyed(2, "order-1"), &no_approval()).await.held);
        let annotated = annotate(raw(r#"{"content":[],"_meta":{"x":1}}"#), &op, true);
        let meta: Value = serde_json::from_str::<Value>(annotated.get()).unwrap()["_meta"].clone();
        assert_eq!(
            meta,
            json!({"x": 1, OPERATION_META: {"id": op.id, "key": "order-1", "state": "dispatched", "replayed": true}})
        );
        // Not an object: left for the check stage to refuse.
        assert_eq!(annotate(raw("[1]"), &op, false).get(), "[1]");
    }

    /// The reserve stage's door, as the pipeline enters it, around a
    /// dispatch that answers `answer` (none: it must not be sent).
    async fn through_door(
        s: &Store,
        (c, p): &(CallRequest, Proposal),
        t: &ExposedTool,
        answer: Option<&'static str>,
    ) -> Reserved {
        let (cx, call) = split(c);
        let obs = Observer::new(None);
        let sent = std::sync::atomic::AtomicBool::new(false);
        let send = || async {
            sent.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(raw(answer.expect("nothing is sent for this call")))
        };
        let reserved =
            reserve(&operations(s), s, &obs, &cx, &call, t, p, &no_approval(), send).await;
        assert_eq!(
            sent.into_inner(),
            reserved.dispatched,
            "sent exactly when it says it dispatched"
        );
        reserved
    }

    fn result_of(reserved: Reserved) -> Value {
        match reserved.result {
            Ok(Dispatched::Result(raw)) => serde_json::from_str(raw.get()).unwrap(),
            Ok(Dispatched::Finding(_)) => {
                panic!("expected the tool's result, got a reconciler's finding")
            }
            Err(stop) => panic!("expected a result; {}", refused::<()>(Err(stop)).message),
        }
    }

    #[tokio::test]
    async fn through_the_door_a_write_commits_its_two_receipts_and_its_retry_sends_nothing() {
        let s = Store::open().await;
        let order = keyed(2, "order-1");
        let first = through_door(&s, &order, &order_tool(), Some(RESULT)).await;
        assert_eq!(first.committed.as_ref().map(|c| c.what()), Some(Commit::Outcome));
        assert_eq!(
            s.receipts().await,
            2,
            "the decision with the reservation, the outcome with the operation's end"
        );
        let (id, replayed) = first.operation.clone().expect("an operation");
        assert!(!replayed);
        assert_eq!(first.operation_ref.as_ref().map(|o| o.key.as_str()), Some("order-1"));
        let sent = result_of(first);
        assert_eq!(
            (&sent["_meta"][OPERATION_META]["id"], &sent["_meta"][OPERATION_META]["replayed"]),
            (&json!(id), &json!(false))
        );
        // The retry under the same key: the recorded outcome, nothing sent or committed.
        let again = through_door(&s, &order, &order_tool(), None).await;
        assert_eq!(
            (again.committed.clone(), again.operation.clone(), again.dispatched),
            (None, Some((id, true)), false)
        );
        let replay = result_of(again);
        assert_eq!(
            (&replay["structuredContent"], &replay["_meta"][OPERATION_META]["replayed"]),
            (&json!({"order": "PO-1"}), &json!(true))
        );
        assert_eq!(s.receipts().await, 2);
    }

    /// The credential made for the call's person is not held at start, yet
    /// an answer that says it back is withheld by its name, like one that is.
    #[tokio::test]
    async fn an_answer_that_says_the_persons_credential_back_is_withheld() {
        let s = Store::open().await;
        let secret = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ0ZWNoLWphbmUifQ.c2lnbmF0dXJl";
        let o =
            Operations { presented: Some(("servers.parts.identity", secret)), ..operations(&s) };
        let (t, p) = (find_tool(), Proposal::new("parts", "find_part", json!({"part_no": "P-1"})));
        let echoed =
            raw(&format!(r#"{{"content":[{{"type":"text","text":"you sent {secret}"}}]}}"#));
        let r = refused(withhold(&o, &t, &p, Ok(echoed)));
        assert_eq!(
            (r.reason, r.rules.as_slice()),
            (Reason::CredentialWithheld, &["credential.servers.parts.identity".to_string()][..])
        );
        assert!(!r.message.contains(secret), "{}", r.message);
        // An answer without it passes; without a person's credential, nothing is looked for.
        assert!(withhold(&o, &t, &p, Ok(raw(RESULT))).is_ok());
        assert!(
            withhold(&operations(&s), &t, &p, Ok(raw(&format!(r#"{{"text":"{secret}"}}"#))))
                .is_ok()
        );
        // A JSON-RPC error that says it back, in its message or its data, is withheld too.
        for error in [
            toolgate_mcp::wire::RpcError::new(-32000, format!("bad token {secret}")),
            toolgate_mcp::wire::RpcError::new(-32000, "bad token")
                .with_data(json!({"token": secret})),
        ] {
            let r = refused(withhold(&o, &t, &p, Err(Stop::Error(error))));
            assert_eq!(r.reason, Reason::CredentialWithheld);
        }
        assert!(matches!(
            withhold(
                &o,
                &t,
                &p,
                Err(Stop::Error(toolgate_mcp::wire::RpcError::new(-32000, "bad token")))
            ),
            Err(Stop::Error(_))
        ));
    }

    #[tokio::test]
    async fn through_the_door_a_read_is_sent_with_nothing_reserved_or_committed() {
        let s = Store::open().await;
        let read = (
            call("parts__find_part", json!({"part_no": "P-1"})),
            Proposal::new("parts", "find_part", json!({"part_no": "P-1"})),
        );
        let r = through_door(&s, &read, &find_tool(), Some(r#"{"content":[]}"#)).await;
        assert_eq!(
            (r.committed.clone(), r.operation.clone(), r.operation_ref.clone(), r.dispatched),
            (None, None, None, true)
        );
        assert_eq!(result_of(r), json!({"content": []}));
        assert_eq!(s.receipts().await, 0, "a read's one receipt is record's, after its answer");
        // A conflicting key stops the write before anything is sent.
        through_door(&s, &keyed(2, "order-9"), &order_tool(), Some(RESULT)).await;
        let conflict = through_door(&s, &keyed(3, "order-9"), &order_tool(), None).await;
        assert_eq!(refused(conflict.result).reason, Reason::OperationConflict);
    }
}
