//! Operations: the writes of the signed-in person's tenant by state, the
//! `unknown` ones first — each reconciled by its configured read
//! (`reconcile::reconcile`) or resolved by a person with a reason
//! (`reconcile::resolve_by_hand`), the paths the CLI and admin API take.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use toolgate_core::operation::{Operation, OperationState};
use toolgate_gateway::gateway::Gateway;

use super::extract::{Approver, Refusal, Signed, SignedForm};
use super::page::{self, Nav, csrf, notice, short, when};
use super::session::Session;

/// The newest operations the page shows (a week of them is kept).
const PAGE: usize = 500;

/// `?settled=OP` after reconcile or resolve: the page then says the state
/// the ledger holds for it.
#[derive(Deserialize)]
pub(crate) struct Said {
    settled: Option<String>,
}

/// `GET /console/operations`.
pub(crate) async fn list(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Query(q): Query<Said>,
) -> Response {
    let said = match q.settled {
        Some(id) => match gw.ledger.operation(&id).await {
            Ok(Some(op)) if op.key.tenant == signed.session.caller.tenant => Some(notice(
                true,
                &format!(
                    "{id} is now {}{}.",
                    op.state.as_str(),
                    op.resolved_by.map(|b| format!(", settled by {b}")).unwrap_or_default()
                ),
            )),
            _ => None,
        },
        None => None,
    };
    render(&gw, &signed.session, StatusCode::OK, said).await
}

async fn render(gw: &Gateway, s: &Session, status: StatusCode, said: Option<Markup>) -> Response {
    let pending = super::pending_count(gw, s).await;
    // The newest page, and every unknown one however old: they are the
    // ones a person must settle.
    let now = gw.clock.now_ms();
    let tenant = Some(s.caller.tenant.as_str());
    let listed = async {
        let unknown =
            gw.ledger.operations(tenant, Some(OperationState::Unknown), now, usize::MAX).await?;
        Ok::<_, toolgate_ledger::LedgerError>((
            unknown,
            gw.ledger.operations(tenant, None, now, PAGE).await?,
        ))
    };
    let (unknown_ops, mut ops) = match listed.await {
        Ok(both) => both,
        Err(e) => {
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Operations",
                s,
                Nav::Operations,
                pending,
                notice(false, &format!("The ledger could not be read ({e}); reload in a moment.")),
            );
        }
    };
    let more = ops.len() == PAGE;
    ops.sort_by_key(|o| (o.state != OperationState::Unknown, std::cmp::Reverse(o.updated_ms)));
    let unknown = unknown_ops.len();
    let counts: Vec<(&str, usize)> = OperationState::ALL
        .iter()
        .map(|st| (st.as_str(), ops.iter().filter(|o| o.state == *st).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let body = html! {
        @if let Some(m) = said { (m) }
        p.counts { @for (state, n) in &counts { span.state.(state) { (state) ": " (n) } " " } }
        @if unknown > 0 {
            h2 { "Unknown: sent, no answer (" (unknown) ")" }
            p { "Each was sent to its upstream and the answer was lost. It is never sent again by \
                itself: reconcile it with its configured read, or say what you found." }
            @for op in &unknown_ops { (unknown_card(s, op)) }
        }
        h2 { @if more { "The newest " (PAGE) " writes" } @else { "All writes" } }
        @if more { p { "Older ones are in the ledger until their window ends \
            (" code { "gateway.operation_ttl_ms" } "); " code { "toolgate ops list --limit N" } " lists more." } }
        @if ops.is_empty() { p.empty { "No writes yet." } } @else {
            div.scroll { table {
                thead { tr { th { "Operation" } th { "State" } th { "Tool" } th { "Caller" } th { "Key" } th { "Proposal" } th { "Updated" } th { "Settled by" } } }
                tbody { @for op in &ops { tr {
                    td { code { (op.id) } }
                    td { span.state.(op.state.as_str()) { (op.state.as_str()) } }
                    td { (op.key.server) "/" (op.key.tool) }
                    td { (op.caller) }
                    td { (short(&op.key.value)) }
                    td { (short(&op.proposal_sha256)) }
                    td { (when(op.updated_ms)) }
                    td { @if let Some(by) = &op.resolved_by { (by) ": " (op.resolution.as_deref().unwrap_or("")) } }
                } } }
            } }
        }
    };
    page::page(status, "Operations", s, Nav::Operations, pending, body)
}

fn unknown_card(s: &Session, op: &Operation) -> Markup {
    html! {
        article.card.unknown {
            h3 { (op.key.server) "/" (op.key.tool) " " code { (op.id) } }
            p { "By " (op.caller) ", key " code { (op.key.value) } ", attempt " (op.attempts) ", last changed " (when(op.updated_ms)) }
            (page::pretty(&op.arguments))
            @if s.approver() {
                div.actions {
                    form method="post" action={ "/console/operations/" (op.id) "/reconcile" } {
                        (csrf(s))
                        button type="submit" { "Reconcile (ask the configured read)" }
                    }
                }
                form.card method="post" action={ "/console/operations/" (op.id) "/resolve" } {
                    (csrf(s))
                    fieldset {
                        legend { "Resolve by hand" }
                        label { input type="radio" name="applied" value="yes" required; " It took effect" }
                        label { input type="radio" name="applied" value="no"; " It did not take effect" }
                    }
                    label for={ "why-" (op.id) } { "What you found (recorded)" }
                    textarea id={ "why-" (op.id) } name="reason" rows="2" required {}
                    button type="submit" { "Resolve" }
                }
            } @else {
                p.muted { "Settling an operation needs the approver role." }
            }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct Act {
    #[serde(default)]
    applied: String,
    #[serde(default)]
    reason: String,
}

/// Settling needs the approver role: the operations page says so.
impl Refusal for Act {
    async fn refusal(gw: &Gateway, signed: &Signed, _: &mut Parts) -> Response {
        render(
            gw,
            &signed.session,
            StatusCode::FORBIDDEN,
            Some(notice(false, "Settling an operation needs the approver role; nothing changed.")),
        )
        .await
    }
}

/// The operation, if it is this person's tenant's.
async fn settleable(gw: &Gateway, signed: &Signed, id: &str) -> Result<(), Response> {
    let s = &signed.session;
    match gw.ledger.operation(id).await {
        Ok(Some(op)) if op.key.tenant == s.caller.tenant => Ok(()),
        Ok(_) => Err(render(
            gw,
            s,
            StatusCode::NOT_FOUND,
            Some(notice(false, &format!("No operation `{id}` here."))),
        )
        .await),
        Err(e) => Err(render(
            gw,
            s,
            StatusCode::SERVICE_UNAVAILABLE,
            Some(notice(false, &format!("The ledger could not be read ({e}); nothing changed."))),
        )
        .await),
    }
}

/// `POST /console/operations/{id}/reconcile`.
pub(crate) async fn reconcile(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Approver(SignedForm { signed, .. }): Approver<Act>,
) -> Response {
    if let Err(r) = settleable(&gw, &signed, &id).await {
        return r;
    }
    match toolgate_gateway::reconcile::reconcile(&gw, &id).await {
        Ok(_) => {
            Redirect::to(&format!("/console/operations?settled={}", urlencode(&id))).into_response()
        }
        Err(e) => {
            render(
                &gw,
                &signed.session,
                StatusCode::CONFLICT,
                Some(notice(false, &format!("Nothing was settled: {e:#}"))),
            )
            .await
        }
    }
}

/// `POST /console/operations/{id}/resolve`.
pub(crate) async fn resolve(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Approver(SignedForm { signed, form: f }): Approver<Act>,
) -> Response {
    if let Err(r) = settleable(&gw, &signed, &id).await {
        return r;
    }
    let applied = match f.applied.as_str() {
        "yes" => true,
        "no" => false,
        _ => {
            return render(
                &gw,
                &signed.session,
                StatusCode::BAD_REQUEST,
                Some(notice(false, "Say whether it took effect; nothing was settled.")),
            )
            .await;
        }
    };
    let by = &signed.session.caller.name;
    match toolgate_gateway::reconcile::resolve_by_hand(
        &*gw.ledger,
        &gw.log,
        &id,
        applied,
        by,
        &f.reason,
        gw.clock.now_ms(),
    )
    .await
    {
        Ok(_) => {
            Redirect::to(&format!("/console/operations?settled={}", urlencode(&id))).into_response()
        }
        Err(e) => {
            render(
                &gw,
                &signed.session,
                StatusCode::CONFLICT,
                Some(notice(false, &format!("Nothing was settled: {e:#}"))),
            )
            .await
        }
    }
}

/// Percent-encodes a query value (ids and state names: ASCII).
pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
