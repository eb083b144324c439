//! The overview: calls and their decisions per minute over the last half
//! hour, refusal reasons, upstream health, and what waits for a person —
//! from the receipts of the log (the record, not a counter that can drift)
//! and the ledger. Charts are SVG drawn here; no script needed.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use toolgate_core::operation::OperationState;
use toolgate_core::receipt::Receipt;
use toolgate_gateway::gateway::Gateway;

use super::extract::{Admin, Refusal, Signed, SignedForm};
use super::page::{self, Nav, csrf, notice, short, when};
use super::receipts::{Filter, recent};
use super::session::Session;

const MINUTES: i64 = 30;
const DECISIONS: [&str; 3] = ["allow", "require_approval", "deny"];

/// `GET /console` (`?reloaded` after a reload: the version in force is
/// read here, never taken from the link).
pub(crate) async fn show(
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<Shown>,
    signed: Signed,
) -> Response {
    let said = q.reloaded.is_some().then(|| {
        notice(
            true,
            &format!(
                "The config was read again; version {} is in force.",
                cut(gw.config().version())
            ),
        )
    });
    render(&gw, &signed.session, StatusCode::OK, said).await
}

/// What the overview was sent to say.
#[derive(serde::Deserialize, Default)]
pub(crate) struct Shown {
    reloaded: Option<String>,
}

/// A version's first twelve digits, as the page shows it.
fn cut(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

/// The reload form: nothing but its CSRF token.
#[derive(serde::Deserialize)]
pub(crate) struct Reload {}

/// Reloading needs the admin role: the overview says so.
impl Refusal for Reload {
    async fn refusal(gw: &Gateway, signed: &Signed, _: &mut Parts) -> Response {
        render(
            gw,
            &signed.session,
            StatusCode::FORBIDDEN,
            Some(notice(false, "Reloading the config needs the admin role; nothing changed.")),
        )
        .await
    }
}

/// `POST /console/reload` (admin): the config and policy files read again,
/// as SIGHUP does (`Gateway::reload`); a refused file changes nothing and
/// the page says why.
pub(crate) async fn reload(
    State(gw): State<Arc<Gateway>>,
    Admin(SignedForm { signed, .. }): Admin<Reload>,
) -> Response {
    match gw.reload().await {
        Ok(done) => {
            tracing::info!(target: "toolgate::console", by = %signed.session.caller.name, config_version = %done.config_version, "config reloaded from the console");
            Redirect::to("/console?reloaded").into_response()
        }
        Err(e) => {
            render(&gw, &signed.session, StatusCode::CONFLICT, Some(notice(false, &format!("{e}"))))
                .await
        }
    }
}

async fn render(gw: &Gateway, s: &Session, status: StatusCode, said: Option<Markup>) -> Response {
    let pending = super::pending_count(&gw, s).await;
    let now = gw.clock.now_ms();
    let receipts = recent(&gw, s, &Filter::default()).await;
    let unknown = gw
        .ledger
        .operations(Some(&s.caller.tenant), Some(OperationState::Unknown), now, usize::MAX)
        .await
        .map(|o| o.len());
    let catalog = gw.catalogs.current();
    let config = gw.config();
    let body = html! {
        @if let Some(said) = said { (said) }
        div.tiles {
            a.tile href="/console/approvals" { strong { (pending) } " approvals waiting" }
            a.tile href="/console/operations" { strong { (unknown.as_ref().map_or_else(|_| "?".to_string(), |n| n.to_string())) } " operations unknown" }
            a.tile href="/console/tools" { strong { (catalog.tools.len()) } " tools read live" }
        }
        @match &receipts {
            Err(e) => (notice(false, &format!("The log could not be read ({e:#}).")))
            Ok(receipts) => {
                h2 { "Calls per minute, by decision (last " (MINUTES) " minutes, UTC)" }
                (per_minute(receipts, now))
                h2 { "Decisions" }
                (totals(receipts))
                h2 { "Why calls were not simply allowed" }
                (reasons(receipts))
            }
        }
        h2 { "Upstreams" }
        (crate::boxes::host_notice(gw))
        div.scroll { table {
            thead { tr { th { "Server" } th { "State" } th { "Tools" } th { "Sandbox" } } }
            tbody { @for u in gw.catalogs.upstreams().iter() {
                @let listed = u.listing().is_some();
                tr {
                    td { (u.name) }
                    td { @if listed { span.health.up { "listed" } } @else { span.health.down { "down" } " " (u.down_reason().unwrap_or_else(|| "connecting".into())) } }
                    td { (catalog.tools.values().filter(|t| t.server == u.name).count()) }
                    td.sandbox { (crate::boxes::cell(u)) }
                }
            } }
        } }
        p.muted { "Config version " code { (short(config.version())) } " in force; as of " (when(now)) "." }
        @if s.admin() {
            form method="post" action="/console/reload" {
                (csrf(s))
                button type="submit" { "Reload the config" }
                " "
                span.muted { "Reads the config and policy files again, as SIGHUP does: the \
                    registry, servers and policy apply now; calls in flight finish as they began." }
            }
        }
    };
    page::page(status, "Overview", s, Nav::Overview, pending, body)
}

/// A stacked bar per minute: allow, require_approval, deny.
fn per_minute(receipts: &[Receipt], now: i64) -> Markup {
    let minutes: Vec<String> =
        (0..MINUTES).rev().map(|k| minute(&when(now - k * 60_000))).collect();
    let mut counts: BTreeMap<&str, [u32; 3]> =
        minutes.iter().map(|m| (m.as_str(), [0; 3])).collect();
    for r in receipts {
        let m = minute(&r.issued_at);
        if let (Some(c), Some(d)) =
            (counts.get_mut(m.as_str()), DECISIONS.iter().position(|d| *d == r.decision))
        {
            c[d] += 1;
        }
    }
    let top = counts.values().map(|c| c.iter().sum::<u32>()).max().unwrap_or(0).max(1);
    let (w, h, bar) = (600, 160, 600 / MINUTES as u32);
    // Each minute's decisions stacked from the bottom: (x, y, height, decision, title).
    let mut rects = Vec::new();
    for (i, m) in minutes.iter().enumerate() {
        let mut y = h;
        for (d, n) in counts[m.as_str()].iter().enumerate().filter(|(_, n)| **n > 0) {
            let height = (n * h / top).max(1);
            y -= height;
            rects.push((
                (i as u32) * bar + 1,
                y,
                height,
                DECISIONS[d],
                format!("{m}: {n} {}", DECISIONS[d]),
            ));
        }
    }
    html! {
        figure {
            svg.chart viewBox={ "0 0 " (w) " " (h + 20) } role="img" aria-label="Calls per minute by decision" {
                @for (x, y, height, class, title) in &rects {
                    rect.(class) x=(x) y=(y) width=(bar - 2) height=(height) { title { (title) } }
                }
                text x="0" y=(h + 16) { (minutes.first().map(|m| &m[11..]).unwrap_or("")) }
                text x=(w) y=(h + 16) text-anchor="end" { (minutes.last().map(|m| &m[11..]).unwrap_or("")) }
                text x="4" y="12" { "max " (top) "/min" }
            }
            figcaption { span.key.allow { "allow" } " " span.key.require_approval { "require_approval" } " " span.key.deny { "deny" } }
        }
    }
}

/// `2026-12-03T08:41`: a timestamp's minute.
fn minute(rfc3339: &str) -> String {
    rfc3339.chars().take(16).collect()
}

fn totals(receipts: &[Receipt]) -> Markup {
    html! {
        p.counts { @for d in DECISIONS {
            span.decision.(d) { (d) ": " (receipts.iter().filter(|r| r.decision == d).count()) } " "
        } }
    }
}

/// Horizontal bars: each reason of a call not simply allowed, by count.
fn reasons(receipts: &[Receipt]) -> Markup {
    let mut by: BTreeMap<&str, u32> = BTreeMap::new();
    for r in receipts.iter().filter(|r| r.decision != "allow") {
        *by.entry(r.reason.as_str()).or_default() += 1;
    }
    let mut rows: Vec<(&str, u32)> = by.into_iter().collect();
    rows.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let top = rows.first().map_or(1, |(_, n)| *n).max(1);
    html! {
        @if rows.is_empty() { p.empty { "Every call recorded here was allowed." } } @else {
            svg.chart viewBox={ "0 0 600 " (rows.len() * 22) } role="img" aria-label="Refusal and approval reasons by count" {
                @for (i, (reason, n)) in rows.iter().enumerate() {
                    // A call stopped before decide (an unknown tool) has a receipt without a reason.
                    text x="0" y=(i * 22 + 15) { (if reason.is_empty() { "(stopped before decide)" } else { reason }) }
                    rect.deny x="220" y=(i * 22 + 4) width=((n * 330 / top).max(1)) height="14" {}
                    text x=(224 + n * 330 / top) y=(i * 22 + 15) { (n) }
                }
            }
        }
    }
}
