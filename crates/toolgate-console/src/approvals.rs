//! The approvals inbox, the approver's first screen: what waits, with the
//! exact call and why it needs a person; live while the page is open (SSE);
//! approve or deny with a reason, through `Gateway::decide_approval` — the
//! admin API's own path, so nobody decides their own call here either.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use toolgate_core::approval::{Approval, ApprovalState};
use toolgate_gateway::downstream::http::store_error_status;
use toolgate_gateway::gateway::{DecideError, Gateway};
use toolgate_ledger::LedgerError;
use toolgate_mcp::sse;

use super::Console;
use super::extract::{Approver, Refusal, Signed, SignedForm, path_param};
use super::page::{self, Nav, csrf, notice, pretty, short, span, when};
use super::session::Session;

async fn of_tenant(
    gw: &Gateway,
    session: &Session,
    state: Option<ApprovalState>,
) -> Result<Vec<Approval>, LedgerError> {
    gw.ledger.approvals(Some(&session.caller.tenant), state, gw.clock.now_ms()).await
}

fn unavailable(session: &Session, e: &dyn std::fmt::Display) -> Response {
    page::page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Approvals",
        session,
        Nav::Approvals,
        0,
        notice(false, &format!("The ledger could not be read ({e}); reload in a moment.")),
    )
}

/// `GET /console/approvals`: pending ones (live), then the decided history.
pub(crate) async fn inbox(State(gw): State<Arc<Gateway>>, signed: Signed) -> Response {
    let s = &signed.session;
    let (pending, all) = match (
        of_tenant(&gw, s, Some(ApprovalState::Pending)).await,
        of_tenant(&gw, s, None).await,
    ) {
        (Ok(p), Ok(a)) => (p, a),
        (Err(e), _) | (_, Err(e)) => return unavailable(s, &e),
    };
    let now = gw.clock.now_ms();
    let mut decided: Vec<&Approval> = all.iter().filter(|a| a.decided_ms.is_some()).collect();
    decided.sort_by_key(|a| std::cmp::Reverse(a.decided_ms));
    let body = html! {
        section aria-labelledby="pending-h" {
            h2 #pending-h { "Waiting for a decision" }
            div #inbox data-live="/console/approvals/events" aria-live="polite" { (pending_list(&pending, now)) }
        }
        section aria-labelledby="history-h" {
            h2 #history-h { "Decided" }
            @if decided.is_empty() { p.empty { "Nothing decided yet." } } @else {
                div.scroll { table {
                    thead { tr { th { "Approval" } th { "Call" } th { "Caller" } th { "State" } th { "Decided by" } th { "Why" } th { "When" } } }
                    tbody { @for a in decided.iter().take(100) { tr {
                        td { a href={ "/console/approvals/" (a.id) } { code { (a.id) } } }
                        td { (a.binding.server) "/" (a.binding.tool) }
                        td { (a.binding.caller) }
                        td { span.state.(a.state_at(now).as_str()) { (a.state_at(now).as_str()) } }
                        td { (a.decided_by.as_deref().unwrap_or("")) }
                        td { (a.decision_reason.as_deref().unwrap_or("")) }
                        td { (a.decided_ms.map(when).unwrap_or_default()) }
                    } } }
                } }
            }
        }
    };
    page::page(StatusCode::OK, "Approvals", s, Nav::Approvals, pending.len(), body)
}

/// The pending approvals as cards: the part of the inbox that updates live.
fn pending_list(pending: &[Approval], now: i64) -> Markup {
    html! {
        @if pending.is_empty() { p.empty { "Nothing waits for you." } }
        @for a in pending {
            article.card.approval {
                h3 { a href={ "/console/approvals/" (a.id) } { (a.binding.server) "/" (a.binding.tool) } }
                dl {
                    dt { "Caller" } dd { (a.binding.caller) @if !a.subject.is_empty() && a.subject != a.binding.caller { " (" (a.subject) ")" } }
                    @let rules = a.rules.join(", ");
                    // A reason made from the rules ("… requires approval (registry)") names them already.
                    dt { "Why" } dd { (a.reason) @if !a.reason.contains(&format!("({rules})")) { " " small { "(" (rules) ")" } } }
                    dt { "Waiting" } dd { (span(now - a.created_ms)) ", holds until " (when(a.expires_ms)) }
                    dt { "Proposal" } dd { (short(&a.binding.proposal_sha256)) }
                    dt { "Policy" } dd { (short(&a.binding.policy_version)) }
                }
                (pretty(&a.arguments))
                p { a.button href={ "/console/approvals/" (a.id) } { "Open to decide" } }
            }
        }
    }
}

/// `GET /console/approvals/events`: the pending list again whenever it
/// changes (and each second while something waits, for its waiting time),
/// until the session ends or the gateway drains.
pub(crate) async fn events(State(console): State<Console>, signed: Signed) -> Response {
    let draining = console.gw.draining();
    // State: what was sent last (`None` before the first event).
    let stream = futures_util::stream::unfold(
        (console, signed, None::<String>),
        move |(console, signed, last)| {
            let draining = draining.clone();
            async move {
                let mut first = last.is_none();
                loop {
                    if !first {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = draining.cancelled() => return None,
                        }
                    }
                    first = false;
                    let gw = &console.gw;
                    let now = gw.clock.now_ms();
                    crate::session::get(gw, &signed.id, now).await?;
                    // The ledger did not answer: try again at the next tick.
                    let Ok(pending) =
                        of_tenant(gw, &signed.session, Some(ApprovalState::Pending)).await
                    else {
                        continue;
                    };
                    let fragment = pending_list(&pending, now).into_string();
                    if last.as_deref() == Some(fragment.as_str()) {
                        continue;
                    }
                    // Argument keys and values reach the fragment: every line
                    // break in it, CR included, is a `data:` line of its own.
                    let mut event = sse::frame("count", &pending.len().to_string());
                    sse::push_frame(&mut event, "inbox", &fragment);
                    return Some((
                        Ok::<_, std::convert::Infallible>(event),
                        (console, signed, Some(fragment)),
                    ));
                }
            }
        },
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// `?decided=1` after a decision: the page then says what the ledger holds
/// (never words from the address, which anyone could write).
#[derive(Deserialize)]
pub(crate) struct Done {
    decided: Option<String>,
}

/// `GET /console/approvals/{id}`: everything about one approval, and the
/// decision form while it is pending.
pub(crate) async fn show(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Path(id): Path<String>,
    Query(q): Query<Done>,
) -> Response {
    one(&gw, &signed.session, &id, StatusCode::OK, q.decided.is_some().then_some(Said::Decided))
        .await
}

/// What the approval's page says above it.
enum Said {
    /// After a decision: the state the ledger holds now.
    Decided,
    /// Why nothing was recorded.
    Refused(String),
}

async fn one(
    gw: &Gateway,
    s: &Session,
    id: &str,
    status: StatusCode,
    said: Option<Said>,
) -> Response {
    let pending = super::pending_count(gw, s).await;
    let a = match gw.ledger.approval(id).await {
        // Another tenant's approval does not exist for this person.
        Ok(Some(a)) if a.binding.tenant == s.caller.tenant => a,
        Ok(_) => {
            return page::page(
                StatusCode::NOT_FOUND,
                "Approval",
                s,
                Nav::Approvals,
                pending,
                notice(
                    false,
                    &format!("No approval `{id}` here. The inbox lists those of your tenant."),
                ),
            );
        }
        Err(e) => return unavailable(s, &e),
    };
    let now = gw.clock.now_ms();
    let state = a.state_at(now);
    let said = said.map(|m| match m {
        Said::Decided => {
            let by = a.decided_by.as_deref().unwrap_or("?");
            notice(
                true,
                &match state {
                    ApprovalState::Approved => {
                        format!("Recorded: approved by {by}. The call may run now.")
                    }
                    ApprovalState::Consumed => {
                        format!("Recorded: approved by {by}. The call it covers has run.")
                    }
                    ApprovalState::Denied => format!("Recorded: denied by {by}."),
                    other => format!("Recorded; the approval is now {}.", other.as_str()),
                },
            )
        }
        Said::Refused(why) => notice(false, &why),
    });
    let own = a.binding.caller == s.caller.name
        || (!a.subject.is_empty() && a.subject == s.caller.subject);
    let body = html! {
        @if let Some(m) = said { (m) }
        dl.facts {
            dt { "Approval" } dd { code { (a.id) } }
            dt { "State" } dd { span.state.(state.as_str()) { (state.as_str()) } }
            dt { "Tool" } dd { (a.binding.server) "/" (a.binding.tool) }
            dt { "Caller" } dd { (a.binding.caller) @if !a.subject.is_empty() { " (" (a.subject) ")" } ", tenant " (a.binding.tenant) }
            dt { "Why it needs a person" } dd { (a.reason) }
            dt { "Rules" } dd { (a.rules.join(", ")) }
            dt { "Policy version" } dd { code { (a.binding.policy_version) } }
            dt { "Proposal hash" } dd { code.hash { (a.binding.proposal_sha256) } }
            @if let Some(k) = &a.operation_key { dt { "Operation key" } dd { code { (k) } } }
            dt { "Opened" } dd { (when(a.created_ms)) " (" (span(now - a.created_ms)) " ago)" }
            dt { "Holds until" } dd { (when(a.expires_ms)) }
            @if let Some(by) = &a.decided_by { dt { "Decided by" } dd { (by) @if let Some(ms) = a.decided_ms { " at " (when(ms)) } } }
            @if let Some(why) = &a.decision_reason { dt { "Their reason" } dd { (why) } }
        }
        h2 { "The exact arguments" }
        (pretty(&a.arguments))
        @if state == ApprovalState::Pending {
            @if !s.approver() {
                p.notice.error { "Deciding needs the approver role." }
            } @else if own {
                p.notice.error { "This is your own call: another approver must decide it." }
            } @else {
                form.card.decide method="post" action={ "/console/approvals/" (a.id) } {
                    (csrf(s))
                    label for="reason" { "Reason (recorded with the decision; the receipt names you and when)" }
                    textarea #reason name="reason" rows="3" required {}
                    div.actions {
                        button.approve type="submit" name="ruling" value="approve" { "Approve" }
                        button.deny type="submit" name="ruling" value="deny" { "Deny" }
                    }
                }
            }
        }
    };
    page::page(
        status,
        &format!("Approval for {}", a.binding.tool),
        s,
        Nav::Approvals,
        pending,
        body,
    )
}

/// An approver's ruling on an approval (approve or deny), with the reason.
#[derive(Deserialize)]
pub(crate) struct Ruling {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    ruling: String,
}

/// Deciding needs the approver role: the approval's page says so.
impl Refusal for Ruling {
    async fn refusal(gw: &Gateway, signed: &Signed, parts: &mut Parts) -> Response {
        let id = path_param(parts).await;
        one(
            gw,
            &signed.session,
            &id,
            StatusCode::FORBIDDEN,
            Some(Said::Refused("Deciding needs the approver role; nothing was recorded.".into())),
        )
        .await
    }
}

/// `POST /console/approvals/{id}`: approve or deny, with the reason.
pub(crate) async fn decide(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Approver(SignedForm { signed, form: f }): Approver<Ruling>,
) -> Response {
    let s = &signed.session;
    let approve = match f.ruling.as_str() {
        "approve" => true,
        "deny" => false,
        _ => {
            return one(
                &gw,
                s,
                &id,
                StatusCode::BAD_REQUEST,
                Some(Said::Refused("Choose Approve or Deny.".into())),
            )
            .await;
        }
    };
    match gw.decide_approval(&s.caller, &id, approve, &f.reason).await {
        Ok(a) => Redirect::to(&format!("/console/approvals/{}?decided=1", a.id)).into_response(),
        Err(e) => {
            let status = match &e {
                DecideError::NoReason => StatusCode::BAD_REQUEST,
                DecideError::Ledger(l) => store_error_status(l),
            };
            one(&gw, s, &id, status, Some(Said::Refused(format!("Nothing was recorded: {e}"))))
                .await
        }
    }
}
