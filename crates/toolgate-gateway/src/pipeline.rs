//! The path of one `tools/call` — and of a `prompts/get` or `resources/read`,
//! which take the same stages as a read tool's call (`Call::kind`) — top to
//! bottom:
//!
//! 1. **admit** — the call's `Context`, built once (caller, era, trace,
//!    request id, the instant it began); then the call's size, and no tenant
//!    in the arguments (the transport rules — Host/Origin, credentials,
//!    headers, versions — ran at the edge, `downstream/edge.rs`).
//! 2. **resolve** — exposed name → upstream tool, its authority and its pin.
//! 3. **validate** — the full inputSchema → the canonical `Proposal`.
//! 4. **decide** — Cedar policy on caller, tool and arguments; else the
//!    registry's class; then the guards (the egress scan, the run's lethal
//!    trifecta, the budgets) → `Decision`. What the guards know beyond the
//!    call (the run's legs and count, the caller's rate) is gathered just
//!    before, as a value (`situate`). A preview
//!    (`_meta["io.toolgate/preview"]`) ends here with the decision.
//! 5. **approve** — a call that needs a named human waits for one, held
//!    open for a bounded time while it is pending (`hold`) → `Gate`.
//! 6. **reserve** — a slot, for a tool limited in calls at once; then a
//!    write becomes an operation, once per key → `Held`.
//! 7. **dispatch** — the upstream, under its deadline; what its answer
//!    brings into the run (a leg of the trifecta) is noted before the
//!    caller hears it.
//! 8. **check** — the result against the outputSchema.
//! 9. **record** — the receipts not yet committed, and the log line.
//!
//! Each stage is a function in `stages/` that takes only what it needs and
//! returns its conclusion as a value (`call.rs`), or stops the call with a
//! refusal, an `input_required` answer or a JSON-RPC error. Only this file
//! gathers what the stages concluded (`Findings`). The receipts that commit
//! with the ledger's state (a write's two, a new approval's) are drafted
//! here and handed to the ledger call that commits them, so those commit
//! points are visible here; record appends the rest. The telemetry
//! `Observer` is told what happened.

use std::time::Duration;

use serde_json::value::RawValue;
use toolgate_core::approval::{Approval, ApprovalState};
use toolgate_core::Proposal;
use toolgate_core::operation::Operation;
use toolgate_core::policy::PolicyEngine;
use toolgate_ledger::NewApproval;
use tracing::Instrument as _;

pub use crate::call::{Answer, Call, CallRequest, Stop};
use crate::call::{Context, Gate, Held};
use crate::catalog::ExposedTool;
use crate::gateway::Gateway;
use crate::observe::Observer;
use crate::stages::approve::{Approvals, Gated};
use crate::stages::record::{self, Findings, Recorder};
use crate::stages::reserve::{Claimed, Operations};
use crate::stages::decide::Situation;
use crate::stages::hold::Hold;
use crate::stages::{admit, approve, check, decide, dispatch, hold, preview, reserve, resolve, validate};
use crate::runs::Runs;
use toolgate_ledger::RunKey;

/// `_meta` key asking for a preview: the decision, nothing acted on.
pub const PREVIEW_META: &str = "io.toolgate/preview";

/// Runs one call through the stages and records it.
pub async fn call_tool(gw: &Gateway, request: CallRequest) -> Answer {
    // 1. admit, first: the call's context, built once (who, era, trace, when).
    let (cx, call) = admit::context(request, gw.clock.as_ref());
    // One policy for the whole call, even if it is reloaded meanwhile.
    let policy = gw.policy();
    let rec = Recorder { ledger: gw.ledger.as_ref(), log: &gw.log, clock: gw.clock.as_ref(), policy_version: policy.version() };
    let mut findings = Findings::new(&cx, &call);
    let answer = run(gw, &policy, &rec, &cx, &call, &mut findings).await;
    // 9. record: for every answer, the receipts not yet committed and the log line.
    record::record(&rec, &findings, answer, cx.started.elapsed()).await
}

/// The step's value, or the call ends with the stage's `Stop` as its answer.
macro_rules! step {
    ($step:expr) => {
        match $step {
            Ok(value) => value,
            Err(stop) => return Answer::from(stop),
        }
    };
}

async fn run(gw: &Gateway, policy: &PolicyEngine, rec: &Recorder<'_>, cx: &Context, call: &Call, f: &mut Findings) -> Answer {
    let obs = Observer::new(gw.config.telemetry.capture_content.then_some(&gw.redactor));
    // 1. admit: the call's own limits (a refusal before decide is the
    // call's decision, and is observed as one)
    step!(obs.stage("admit").in_scope(|| admit::admit(&gw.config.gateway, call)).inspect_err(|stop| obs.refused_early(stop, None)));
    // 2. resolve
    let tool = step!(obs.stage("resolve").in_scope(|| resolve::resolve(&gw.catalogs, &gw.config, call.kind, &call.name)).inspect_err(|stop| {
        obs.refused_early(stop, None);
        // Its server is down: the refusal says retry, and the retry should find it back.
        gw.catalogs.nudge(&call.name);
    }));
    f.resolved(&tool);
    gw.log.remember_definition(&tool).await;
    obs.resolved(cx, &tool);
    // 3. validate
    let proposal = step!(obs.stage("validate").in_scope(|| validate::validate(&tool, &call.arguments)).inspect_err(|stop| obs.refused_early(stop, Some(&tool))));
    f.validated(gw.log.salt(), gw.config.receipts.capture_values, cx, &tool, &proposal);
    obs.validated(&proposal);
    // 4. decide, on the state of the approval the call presents (if any),
    // what its run has taken in, and the budgets it would spend
    let approvals = approvals(gw, policy);
    let span = obs.stage("decide");
    let standing = approve::standing(&approvals, cx, call, &tool, &proposal).instrument(span.clone()).await;
    let run = Runs::key(cx, call);
    let situation = step!(situate(gw, cx, call, &tool, run.clone()).instrument(span.clone()).await);
    let decision = span.in_scope(|| decide::decide(policy, &gw.guards, &cx.caller, &tool, &proposal, standing.state, &situation));
    obs.decided(&tool, &decision, policy.version());
    f.decided(standing.state, &decision, policy.version());
    if call.preview {
        // A preview ends here: the decision, and nothing acted on.
        return Answer::Result(preview::answer(cx, &tool, &proposal, &decision, policy.version()));
    }
    // 5. approve: deny refuses; require_approval waits for a named human
    let span = obs.stage("approve");
    let gate = match step!(approve::approve(&approvals, cx, call, &tool, &proposal, &decision, standing).instrument(span.clone()).await) {
        Gated::Run(gate) => gate,
        // ... and is held, visibly and for a bounded time, for the decision
        Gated::Wait(pending) => step!(held(gw, policy, &approvals, &obs, cx, call, (&tool, &proposal, &situation), pending, f).await),
        Gated::Open(new) => {
            let pending = step!(open(rec, &approvals, &tool, &proposal, new, f).instrument(span).await);
            gw.notifier.opened(&pending, &tool.exposed_name);
            step!(held(gw, policy, &approvals, &obs, cx, call, (&tool, &proposal, &situation), pending, f).await)
        }
    };
    f.approval_id = gate.approval_id().map(str::to_string);
    gate.approval_id().inspect(|id| obs.approval(id));
    // 6. reserve: a tool limited in calls at once takes a slot until its
    // dispatch ends, or the call is refused to retry (before anything is
    // reserved or used up) ...
    let _slot = step!(gw.budgets.slot(&tool).inspect_err(|_| obs.budget("concurrency")));
    // ... and a write runs once per operation key; a reused key gets
    // the recorded outcome, a conflict, or "in progress" / "unknown"
    let operations = operations(gw, &tool.server);
    let span = obs.stage("reserve");
    let held = match step!(reserve::claim(&operations, cx, call, &tool, &proposal, &gate).instrument(span.clone()).await) {
        Claimed::Read => Held::Read,
        Claimed::Recorded(held) => {
            f.operation_ref = held.operation().map(reserve::reference);
            held
        }
        Claimed::New(new) => {
            // The decision to run commits with the reservation.
            f.operation_ref = Some(reserve::reserved(&new));
            let receipt = record::decided(rec, f, record::approval_ref(rec.ledger, gate.approval_id()).await);
            let begun = reserve::begin(&operations, &tool, &proposal, new, receipt).instrument(span).await;
            if begun.committed {
                rec.committed(f, 1);
            }
            f.operation_ref = begun.found.or(f.operation_ref.take());
            step!(begun.held)
        }
    };
    f.operation = held.operation().map(|op| (op.id.clone(), matches!(held, Held::Replay { .. })));
    held.operation().inspect(|op| obs.operation(&op.id));
    // 7. dispatch: the upstream, under its deadline; a write's end is
    // recorded, with its receipt, before the caller hears it
    f.dispatched = matches!(held, Held::Read | Held::Mine(_));
    let upstream = gw.catalogs.upstream(&tool.server).map(|u| u.as_ref());
    let raw = match held {
        Held::Read => step!(dispatch::dispatch(upstream, &tool, &proposal, cx, call, gate.input.clone()).instrument(obs.stage("dispatch")).await),
        Held::Mine(op) => {
            let outcome = dispatch::dispatch(upstream, &tool, &proposal, cx, call, gate.input.clone()).instrument(obs.stage("dispatch")).await;
            step!(finish(rec, &operations, &tool, &proposal, op, outcome, f).await)
        }
        Held::Replay { op, raw, checked: true } => reserve::annotate(raw, &op, true),
        // A reconciler's finding is not the tool's result: not checked against its outputSchema.
        Held::Replay { op, raw, checked: false } => return Answer::Result(reserve::annotated(&raw, &op, true)),
    };
    // What the answer brings into the run (a leg of the trifecta) is noted
    // before the caller, and so the agent, sees it.
    step!(gw.runs.took_in(gw.ledger.as_ref(), gw.clock.now_ms(), &run, &tool, &proposal).await);
    // 8. check: the result against outputSchema; an approved call's own
    // input round stays bound to its approval
    let (answer, found) = obs.stage("check").in_scope(|| check::check(&tool, &raw, gw.config.gateway.block_invalid_results, &proposal.sha256));
    (f.tool_error, f.output_violations) = (found.tool_error, found.output_violations);
    f.input_required |= found.input_required;
    let answer = approve::seal_continuation(&gw.sealer, &gate, answer);
    obs.answered(&answer);
    answer
}

/// decide's inputs beyond the call itself: what its run has taken in (for
/// a call to an egress tool), whether the run has calls left, and the
/// caller's rate. A preview spends nothing.
async fn situate(gw: &Gateway, cx: &Context, call: &Call, tool: &ExposedTool, run: RunKey) -> Result<Situation, Stop> {
    let mut situation = gw.runs.view(gw.ledger.as_ref(), cx.began_ms, run, decide::egress_tool(tool), call.preview).await?;
    if situation.over.is_none() && !call.preview {
        situation.over = gw.budgets.spend(&cx.caller);
    }
    Ok(situation)
}

/// approve, when the call must wait: opens the approval, with the receipt
/// of the decision to wait in the same transaction.
async fn open(rec: &Recorder<'_>, a: &Approvals<'_>, tool: &ExposedTool, proposal: &Proposal, new: NewApproval, f: &mut Findings) -> Result<Approval, Stop> {
    // The caller's turn, held until the approval is opened.
    let _turn = a.openings.turn(&new.binding.caller).await;
    approve::room_for(a, tool, proposal, &new).await?;
    f.approval_id = Some(new.id.clone());
    let receipt = record::awaiting(rec, f, Some(record::pending(&new.id)));
    let opened = approve::open(a, tool, proposal, new, receipt).await?;
    rec.committed(f, 1);
    Ok(opened)
}

/// approve, while the approval is pending: the call is held until it is
/// decided or the hold ends. Approved meanwhile, it is decided again as a
/// re-issue presenting the approval would be (policy now sees it approved)
/// and runs under it; otherwise it is answered (`approve::unheld`). The
/// wait's receipt is already committed when the approval was opened here;
/// what follows gets receipts of its own — except an `input_required`
/// round, which the wait's receipt attests (or, on a re-issue that opened
/// nothing, record's own).
#[allow(clippy::too_many_arguments)]
async fn held(
    gw: &Gateway,
    policy: &PolicyEngine,
    a: &Approvals<'_>,
    obs: &Observer<'_>,
    cx: &Context,
    call: &Call,
    (tool, proposal, situation): (&ExposedTool, &Proposal, &Situation),
    pending: Approval,
    f: &mut Findings,
) -> Result<Gate, Stop> {
    f.approval_id = Some(pending.id.clone());
    let h = Hold { holds: &gw.holds, ledger: gw.ledger.as_ref(), clock: gw.clock.as_ref(), hold: Duration::from_millis(gw.config.approvals.hold_ms), max_held: gw.config.approvals.max_held, draining: gw.draining() };
    let approval = hold::hold(&h, call, cx.started, pending).instrument(obs.stage("hold")).await;
    if approval.state_at(gw.clock.now_ms()) != ApprovalState::Approved {
        let answered = approve::unheld(a, cx, call, tool, proposal, approval);
        match &answered {
            Err(Stop::Input(_)) => f.input_required = true,
            _ => f.receipts = 0,
        }
        return answered;
    }
    f.receipts = 0;
    let standing = approve::presenting(&approval);
    let decision = obs.stage("decide").in_scope(|| decide::decide(policy, &gw.guards, &cx.caller, tool, proposal, standing.state, situation));
    obs.decided(tool, &decision, policy.version());
    f.decided(standing.state, &decision, policy.version());
    match approve::approve(a, cx, call, tool, proposal, &decision, standing).instrument(obs.stage("approve")).await? {
        Gated::Run(gate) => Ok(gate),
        // An approved approval neither waits nor opens another; should the
        // store say otherwise, nothing runs and the caller is told it waits.
        Gated::Wait(_) | Gated::Open(_) => Err(approve::still_waiting(a, tool, &approval)),
    }
}

/// dispatch, for a write: records how it ended, with the receipt of that
/// end in the same transaction, before the caller hears it.
async fn finish(
    rec: &Recorder<'_>,
    o: &Operations<'_>,
    tool: &ExposedTool,
    proposal: &Proposal,
    op: Operation,
    outcome: Result<Box<RawValue>, Stop>,
    f: &mut Findings,
) -> Result<Box<RawValue>, Stop> {
    let settled = reserve::settled(&outcome);
    let result = settled.1.clone();
    let (appended, finished) = reserve::finish(o, tool, &op, settled, |state| record::outcome(rec, f, state, result.as_deref())).await;
    if appended {
        rec.committed(f, 2);
    }
    let op = finished.map_err(|unknown| Stop::Refused(unknown.with_proposal(&proposal.sha256)))?;
    Ok(reserve::annotate(outcome?, &op, false))
}

/// What approve reads and writes for a call decided under `policy`.
fn approvals<'a>(gw: &'a Gateway, policy: &'a PolicyEngine) -> Approvals<'a> {
    Approvals {
        ledger: gw.ledger.as_ref(),
        sealer: &gw.sealer,
        clock: gw.clock.as_ref(),
        entropy: gw.entropy.as_ref(),
        policy_version: policy.version(),
        ttl_ms: gw.config.gateway.approval_ttl_ms as i64,
        max_pending: gw.config.approvals.max_pending_per_caller,
        openings: &gw.openings,
    }
}

/// What reserve reads and writes for a call to `server` (its lease follows
/// the server's deadline).
fn operations<'a>(gw: &'a Gateway, server: &str) -> Operations<'a> {
    let lease_ms = Operations::lease_for(gw.config.timeout_ms(server));
    Operations { ledger: gw.ledger.as_ref(), clock: gw.clock.as_ref(), entropy: gw.entropy.as_ref(), lease_ms }
}
