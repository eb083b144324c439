//! Notices: the outbox of approval notices of the signed-in person's
//! tenant — dead ones first (their webhook's attempts ran out; nobody was
//! told), then those still pending — each with its delivery id, attempts
//! and how the last one went. An admin delivers a dead one again once the
//! receiver is fixed: the same delivery id, so a receiver that did get it
//! after all can tell.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use toolgate_gateway::gateway::Gateway;
use toolgate_ledger::{LedgerError, Notice, NoticeState};

use super::extract::{Admin, Refusal, Signed, SignedForm};
use super::operations::urlencode;
use super::page::{self, Nav, csrf, notice, when};
use super::session::Session;

/// The most notices of each state the page shows.
const PAGE: usize = 200;

/// `?again=DLV` after a notice is sent again.
#[derive(Deserialize)]
pub(crate) struct Said {
    again: Option<String>,
}

/// `GET /console/notices`.
pub(crate) async fn list(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Query(q): Query<Said>,
) -> Response {
    // The query is anyone's link: only a delivery id's shape is echoed.
    let said = q.again.filter(|id| delivery_id_shaped(id)).map(|id| {
        notice(
            true,
            &format!("{id} is due again; it goes out within a second under the same delivery id."),
        )
    });
    render(&gw, &signed.session, StatusCode::OK, said).await
}

/// `dlv_` and at most 60 letters, digits or underscores: what `Entropy::id` makes.
fn delivery_id_shaped(id: &str) -> bool {
    id.strip_prefix("dlv_").is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 60
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

async fn render(gw: &Gateway, s: &Session, status: StatusCode, said: Option<Markup>) -> Response {
    let pending = super::pending_count(gw, s).await;
    let tenant = Some(s.caller.tenant.as_str());
    let listed = async {
        Ok::<_, toolgate_ledger::LedgerError>((
            gw.ledger.notices(tenant, Some(NoticeState::Dead), PAGE).await?,
            gw.ledger.notices(tenant, Some(NoticeState::Pending), PAGE).await?,
        ))
    };
    let (dead, waiting) = match listed.await {
        Ok(both) => both,
        Err(e) => {
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Notices",
                s,
                Nav::Notices,
                pending,
                notice(false, &format!("The ledger could not be read ({e}); reload in a moment.")),
            );
        }
    };
    let body = html! {
        @if let Some(m) = said { (m) }
        p { "Every approval opened is told to each configured webhook through this outbox: written \
            with the approval, sent by whichever replica is alive, retried with backoff until the \
            webhook's attempts run out." }
        h2 { "Dead (" (dead.len()) ")" }
        @if dead.is_empty() { p.empty { "None: every notice was delivered or is still being tried." } } @else {
            p { "Nobody was told of these approvals by their webhook. Fix the receiver, then send each again." }
            (table(s, &dead, true))
        }
        h2 { "Being tried (" (waiting.len()) ")" }
        @if waiting.is_empty() { p.empty { "None." } } @else { (table(s, &waiting, false)) }
    };
    page::page(status, "Notices", s, Nav::Notices, pending, body)
}

fn table(s: &Session, notices: &[Notice], dead: bool) -> Markup {
    html! {
        div.scroll { table {
            thead { tr { th { "Delivery" } th { "Approval" } th { "Webhook" } th { "Attempts" } th { "Last attempt" } th { "Opened" } th { (if dead { "Gave up" } else { "Next" }) } @if dead { th {} } } }
            tbody { @for n in notices { tr {
                td { code { (n.id) } }
                td { a href={ "/console/approvals/" (urlencode(&n.approval_id)) } { code { (n.approval_id) } } }
                td { (n.webhook) }
                td { (n.attempts) }
                td { @if let Some(st) = n.last_status { "HTTP " (st) } @if let Some(e) = &n.last_error { (e) } }
                td { (when(n.created_ms)) }
                td { (when(if dead { n.updated_ms } else { n.next_ms })) }
                @if dead { td {
                    @if s.admin() {
                        form method="post" action={ "/console/notices/" (urlencode(&n.id)) "/again" } { (csrf(s)) button type="submit" { "Send again" } }
                    } @else { span.muted { "an admin can send it again" } }
                } }
            } } }
        } }
    }
}

/// The form of "send again": nothing beside its CSRF token.
#[derive(Deserialize)]
pub(crate) struct Again {}

impl Refusal for Again {
    async fn refusal(gw: &Gateway, signed: &Signed, _: &mut Parts) -> Response {
        render(
            gw,
            &signed.session,
            StatusCode::FORBIDDEN,
            Some(notice(false, "Sending a notice again needs the admin role; nothing was sent.")),
        )
        .await
    }
}

/// `POST /console/notices/{id}/again` (admin): a dead notice of this tenant is due again.
pub(crate) async fn again(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Admin(SignedForm { signed, .. }): Admin<Again>,
) -> Response {
    let s = &signed.session;
    match gw.ledger.redeliver_notice(&id, Some(&s.caller.tenant), gw.clock.now_ms()).await {
        Ok(_) => {
            tracing::info!(target: "toolgate::notify", delivery = %id, by = %s.caller.name, "a dead notice is due again");
            Redirect::to(&format!("/console/notices?again={}", urlencode(&id))).into_response()
        }
        Err(LedgerError::NoticeNotFound(_)) => {
            render(
                &gw,
                s,
                StatusCode::NOT_FOUND,
                Some(notice(false, &format!("No dead notice `{id}` here; nothing was sent."))),
            )
            .await
        }
        Err(e) => {
            render(
                &gw,
                s,
                StatusCode::SERVICE_UNAVAILABLE,
                Some(notice(
                    false,
                    &format!("The ledger could not be reached ({e}); nothing was sent."),
                )),
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_delivery_id_is_echoed_from_the_query() {
        assert!(super::delivery_id_shaped("dlv_0a1b2c3d4e5f"));
        for forged in [
            "",
            "dlv_",
            "apr_1",
            "dlv_<script>",
            "dlv_a\r\nb",
            "dlv_a is not; your bank",
            &format!("dlv_{}", "a".repeat(61)),
        ] {
            assert!(!super::delivery_id_shaped(forged), "{forged:?}");
        }
    }
}
