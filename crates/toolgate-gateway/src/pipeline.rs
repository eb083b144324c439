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
//!    open for a bounded time while it is pending, and is decided again
//!    once approved → `Approved` (its `Gate`).
//! 6. **reserve** — a slot, for a tool limited in calls at once; …
//! 7. **present** — the credential the call carries for its person, as
//!    its server's `identity` says (shared, an assertion, an exchanged
//!    token, the person's own OAuth grant) → `Presented`, or the link to
//!    connect one; then (reserve again) a write becomes an operation, once
//!    per key, around …
//! 8. **dispatch** — the upstream, under its deadline → `Reserved`. What
//!    its answer brings into the run (a leg of the trifecta) is noted
//!    before the caller hears it.
//! 9. **check** — the result against the outputSchema.
//! 10. **record** — the receipts not yet committed, and the log line.
//!
//! Each stage is a function in `stages/` that takes only what it needs and
//! returns its conclusion as a value (`call.rs`), or stops the call with a
//! refusal, an `input_required` answer or a JSON-RPC error; approve and
//! reserve, which do several things in turn, return one value each, matched
//! here once. Only this file gathers what the stages concluded
//! (`Findings`). The receipts that commit with the ledger's state (a new
//! approval's, a write's two) are drafted by record and handed to those
//! stages (`commit::Receipts`), which return a `Committed` proof; record
//! appends the rest. The telemetry `Observer` is told what happened.

use serde_json::value::RawValue;
use toolgate_core::approval::ApprovalState;
use toolgate_core::policy::PolicyEngine;
use toolgate_core::{Decision, Proposal};
use tracing::Instrument as _;

pub use crate::call::{Answer, Call, CallRequest, Recorded, Stop};
use crate::call::{Context, Dispatched};
use crate::catalog::{Catalog, ExposedTool, Live};
use crate::config::Config;
use crate::findings::Findings;
use crate::gateway::Gateway;
use crate::identity::Presented;
use crate::observe::Observer;
use crate::runs::Runs;
use crate::stages::approve::{Approvals, Around, Hold};
use crate::stages::decide::Situation;
use crate::stages::record::{self, Recorder};
use crate::stages::reserve::Operations;
use crate::stages::{
    admit, approve, check, decide, dispatch, present, preview, reserve, resolve, validate,
};
use toolgate_ledger::RunKey;

/// `_meta` key asking for a preview: the decision, nothing acted on.
pub const PREVIEW_META: &str = "io.toolgate/preview";

/// Runs one call through the stages and records it.
pub async fn call_tool(gw: &Gateway, request: CallRequest) -> Recorded {
    // 1. admit, first: the call's context, built once (who, era, trace, when).
    let (cx, call) = admit::context(request, gw.clock.as_ref());
    // One catalog, config and policy for the whole call, even if a reload
    // puts others in force meanwhile: the call holds them to its end.
    let catalog = gw.catalogs.current();
    let live = catalog.live().cloned().unwrap_or_else(|| gw.catalogs.live());
    run(gw, (&catalog, &live), &cx, &call).await
}

/// The step's value, or the call ends (the labelled block is left) with
/// the stage's `Stop` as its answer.
macro_rules! step {
    ($call:lifetime, $step:expr) => {
        match $step {
            Ok(value) => value,
            Err(stop) => break $call Answer::from(stop),
        }
    };
}

async fn run(
    gw: &Gateway,
    (catalog, live): (&Catalog, &Live),
    cx: &Context,
    call: &Call,
) -> Recorded {
    let (config, policy) = (live.config.as_ref(), live.policy.as_ref());
    let obs = Observer::new(config.telemetry.capture_content.then_some(&gw.redactor));
    let rec = recorder(gw, config, policy);
    let mut f = Findings::new(cx, call, gw.log.salt());
    let answer = 'call: {
        // 1. admit: the call's own limits (a refusal before decide is the call's decision, observed as one)
        step!('call, obs.stage("admit").in_scope(|| admit::admit(&config.gateway, call)).inspect_err(|stop| obs.refused_early(stop, None)));
        // 2. resolve; a server that is down is nudged, so the retry the refusal asks for finds it back
        let tool = step!('call, obs.stage("resolve").in_scope(|| resolve::resolve(&gw.catalogs, catalog, config, call.kind, &call.name)).inspect_err(|stop| {
            obs.refused_early(stop, None);
            gw.catalogs.nudge(&call.name);
        }));
        f.resolved(&tool);
        gw.log.remember_definition(&tool).await;
        obs.resolved(cx, &tool);
        // 3. validate
        let proposal = step!('call, obs.stage("validate").in_scope(|| validate::validate(&tool, &call.arguments)).inspect_err(|stop| obs.refused_early(stop, Some(&tool))));
        f.validated(config.receipts.capture_values, cx, &tool, &proposal);
        obs.validated(&proposal);
        // 4. decide, on the state of the approval the call presents (if any),
        // what its run has taken in, and the budgets it would spend
        let approvals = approvals(gw, config, policy);
        let span = obs.stage("decide");
        let standing = approve::standing(&approvals, cx, call, &tool, &proposal)
            .instrument(span.clone())
            .await;
        let run = Runs::key(cx, call);
        let situation =
            step!('call, situate(gw, cx, call, &tool, run.clone()).instrument(span.clone()).await);
        // One way to decide this call, on the state of an approval: now, and
        // again once approve saw its approval approved while held
        let decide = |span: &tracing::Span, state| {
            decided(gw, policy, &obs, cx, (&tool, &proposal, &situation), span, state)
        };
        let decision = decide(&span, standing.state);
        f.decided(standing.state, &decision, policy.version());
        if call.preview {
            // A preview ends here: the decision, and nothing acted on.
            let preview = preview::answer(cx, &tool, &proposal, &decision, policy.version());
            break 'call Answer::Result(preview);
        }
        // 5. approve: deny refuses; require_approval waits for a named human
        let redecide = |state| decide(&obs.stage("decide"), state);
        let around = Around { obs: &obs, redecide: &redecide, receipts: &record::drafts(&rec, &f) };
        let approved =
            approve::approve(&approvals, &around, cx, call, &tool, &proposal, &decision, standing)
                .await;
        f.approved(&approved, policy.version());
        let gate = step!('call, approved.gate);
        gate.approval_id().inspect(|id| obs.approval(id));
        // 6. reserve: a tool limited in calls at once takes a slot until its
        // dispatch ends, or the call is refused to retry (before anything is
        // reserved or used up); …
        let _slot = step!('call, gw.budgets.slot(&tool).inspect_err(|_| obs.budget("concurrency")));
        // 7. present: the credential the call carries for its person (or the
        // link to connect one); then a write runs once per operation key, around …
        let (presented, personal) = step!('call, presented(gw, config, &tool.server, (cx, call), &proposal, &mut f).instrument(obs.stage("present")).await);
        // 8. … dispatch: the upstream (the person's own process, for a stdio
        // server that takes their token), under its deadline
        let upstream = personal.as_deref().or(live.upstream(&tool.server).map(|u| u.as_ref()));
        let input = present::upstream_input(&gate.input);
        let send = || {
            dispatch::dispatch(
                upstream,
                &tool,
                &proposal,
                (cx, call),
                input.clone(),
                &presented,
                gw.clock.as_ref(),
            )
            .instrument(obs.stage("dispatch"))
        };
        let reserved = reserve::reserve(
            &operations(gw, config, &tool.server, &presented),
            &record::drafts(&rec, &f),
            &obs,
            cx,
            call,
            &tool,
            &proposal,
            &gate,
            send,
        )
        .await;
        f.reserved(&reserved);
        renew_if_refused(gw, config, &tool.server, cx, &presented, &reserved).await;
        reserved.operation.as_ref().inspect(|(id, _)| obs.operation(id));
        let raw: Box<RawValue> = match step!('call, reserved.result) {
            Dispatched::Result(raw) => raw,
            Dispatched::Finding(recorded) => break 'call Answer::Result(recorded),
        };
        // What the answer brings into the run (a leg of the trifecta) is
        // noted before the caller, and so the agent, sees it.
        step!('call, gw.runs.took_in(gw.ledger.as_ref(), gw.clock.now_ms(), &run, &tool, &proposal).await);
        // 9. check: the result against outputSchema; an approved call's own
        // input round stays bound to its approval
        let (answer, found) = obs.stage("check").in_scope(|| {
            check::check(&tool, &raw, config.gateway.block_invalid_results, &proposal.sha256)
        });
        f.checked(&found);
        let answer = approve::seal_continuation(&gw.sealer, &gate, answer);
        obs.answered(&answer);
        answer
    };
    // 10. record: for every answer, the receipts not yet committed and the
    // log line; the answer then names where its receipts are.
    record::record(&rec, &f, answer, gw.clock.instant().saturating_duration_since(cx.started)).await
}

/// What record drafts and appends the call's receipts with.
fn recorder<'a>(gw: &'a Gateway, config: &'a Config, policy: &'a PolicyEngine) -> Recorder<'a> {
    Recorder {
        ledger: gw.ledger.as_ref(),
        log: &gw.log,
        clock: gw.clock.as_ref(),
        policy_version: policy.version(),
        config_version: config.version(),
    }
}

/// decide's inputs beyond the call itself: what its run has taken in (for
/// a call to an egress tool), whether the run has calls left, and the
/// caller's rate. A preview spends nothing.
async fn situate(
    gw: &Gateway,
    cx: &Context,
    call: &Call,
    tool: &ExposedTool,
    run: RunKey,
) -> Result<Situation, Stop> {
    let mut situation = gw
        .runs
        .view(gw.ledger.as_ref(), cx.began_ms, run, decide::egress_tool(tool), call.preview)
        .await?;
    if situation.over.is_none() && !call.preview {
        situation.over = gw.budgets.spend(&cx.caller);
    }
    Ok(situation)
}

/// decide, in `span`, on the state of the approval the call presents; once
/// more for a call whose approval was approved while it was held, as a
/// re-issue presenting the approval would be (policy now sees it approved).
fn decided(
    gw: &Gateway,
    policy: &PolicyEngine,
    obs: &Observer<'_>,
    cx: &Context,
    (tool, proposal, situation): (&ExposedTool, &Proposal, &Situation),
    span: &tracing::Span,
    state: Option<ApprovalState>,
) -> Decision {
    let decision = span.in_scope(|| {
        decide::decide(policy, &gw.guards, &cx.caller, tool, proposal, state, situation)
    });
    obs.decided(tool, &decision, policy.version());
    decision
}

/// present, and then the person's own process where their token goes in
/// its environment. A question to connect is noted for the receipt.
async fn presented(
    gw: &Gateway,
    config: &Config,
    server: &str,
    (cx, call): (&Context, &Call),
    proposal: &toolgate_core::Proposal,
    f: &mut Findings,
) -> Result<(Presented, Option<std::sync::Arc<toolgate_mcp::upstream::Upstream>>), Stop> {
    let presented = present::present(
        &gw.identities,
        config,
        server,
        (cx, call),
        proposal,
        || gw.clock.now_ms(),
        gw.entropy.as_ref(),
    )
    .await
    .inspect_err(|stop| {
        if let Some(refusal) = present::asked_to_connect(stop) {
            f.asked_to_connect(refusal);
        }
    })?;
    f.presented(&presented);
    let personal = personal(gw, config, server, cx, &presented, proposal).await?;
    Ok((presented, personal))
}

/// The server refused the credential made for the person (HTTP 401): it is
/// renewed at their next call.
async fn renew_if_refused(
    gw: &Gateway,
    config: &Config,
    server: &str,
    cx: &Context,
    presented: &Presented,
    reserved: &crate::call::Reserved,
) {
    if let Err(Stop::Refused(r)) = &reserved.result
        && r.reason == toolgate_core::Reason::IdentityUnavailable
    {
        gw.identities
            .distrust(
                config,
                server,
                (&cx.caller, &presented.identity),
                gw.clock.now_ms(),
                gw.entropy.as_ref(),
            )
            .await;
    }
}

/// The person's own process of `server`, where its calls carry their token
/// in its environment (`identity.env`); a process that cannot be started
/// refuses the call before anything is sent.
async fn personal(
    gw: &Gateway,
    config: &Config,
    server: &str,
    cx: &Context,
    presented: &Presented,
    proposal: &toolgate_core::Proposal,
) -> Result<Option<std::sync::Arc<toolgate_mcp::upstream::Upstream>>, Stop> {
    let Some((var, token)) = &presented.env else { return Ok(None) };
    gw.personal
        .upstream(config, server, &cx.caller, (var, token), gw.clock.now_ms(), &gw.cancel)
        .await
        .map(Some)
        .map_err(|why| {
            Stop::Refused(
                toolgate_core::Refusal::new(
                    toolgate_core::Verdict::Allow,
                    toolgate_core::Reason::UpstreamUnavailable,
                    toolgate_core::Action::Retry,
                    format!("{why}; nothing was run: retry later"),
                )
                .with_proposal(&proposal.sha256),
            )
        })
}

/// What approve reads and writes for a call decided under `policy`.
fn approvals<'a>(gw: &'a Gateway, config: &'a Config, policy: &'a PolicyEngine) -> Approvals<'a> {
    let c = &config.approvals;
    let hold = Hold {
        holds: &gw.holds,
        ledger: gw.ledger.as_ref(),
        clock: gw.clock.as_ref(),
        hold: std::time::Duration::from_millis(c.hold_ms),
        max_held: c.max_held,
        draining: gw.draining_ref(),
        cancels: &gw.cancels,
    };
    Approvals {
        ledger: gw.ledger.as_ref(),
        sealer: &gw.sealer,
        clock: gw.clock.as_ref(),
        entropy: gw.entropy.as_ref(),
        policy_version: policy.version(),
        ttl_ms: config.gateway.approval_ttl_ms as i64,
        max_pending: c.max_pending_per_caller,
        openings: &gw.openings,
        hold,
        notifier: &gw.notifier,
    }
}

/// What reserve reads and writes for a call to `server` (its lease follows
/// the server's deadline), and the credentials no answer may carry: those
/// the gateway holds, and the one `presented` for the call's person.
fn operations<'a>(
    gw: &'a Gateway,
    config: &Config,
    server: &str,
    presented: &'a Presented,
) -> Operations<'a> {
    let lease_ms = Operations::lease_for(config.timeout_ms(server));
    let presented =
        presented.secret.as_ref().map(|(name, secret)| (name.as_str(), secret.as_ref()));
    Operations {
        ledger: gw.ledger.as_ref(),
        clock: gw.clock.as_ref(),
        entropy: gw.entropy.as_ref(),
        lease_ms,
        held: &gw.held,
        presented,
    }
}
