//! The console's frame: one layout for every screen (navigation, who is
//! signed in, sign-out), and the small pieces screens share. Server-rendered
//! HTML that reads without JavaScript; the one script only adds live updates.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use super::session::Session;

/// The screens, in the navigation's order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Approvals,
    Authority,
    Operations,
    Notices,
    Receipts,
    Connections,
}

const SCREENS: [(Nav, &str, &str); 7] = [
    (Nav::Overview, "/console", "Overview"),
    (Nav::Approvals, "/console/approvals", "Approvals"),
    (Nav::Authority, "/console/tools", "Authority"),
    (Nav::Operations, "/console/operations", "Operations"),
    (Nav::Notices, "/console/notices", "Notices"),
    (Nav::Receipts, "/console/receipts", "Receipts"),
    (Nav::Connections, "/console/connections", "Connections"),
];

/// A whole page for a signed-in person; `pending` is the badge on Approvals.
pub(crate) fn page(
    status: StatusCode,
    title: &str,
    session: &Session,
    active: Nav,
    pending: usize,
    body: Markup,
) -> Response {
    let nav = html! {
        nav aria-label="Screens" {
            // A person without a role sees their connections alone.
            @for (screen, href, name) in SCREENS.into_iter().filter(|(s, _, _)| *s == Nav::Connections || session.approver() || session.admin()) {
                a href=(href) aria-current=[(screen == active).then_some("page")] {
                    (name)
                    @if screen == Nav::Approvals { " " span.badge data-pending { (pending) } }
                }
            }
        }
        form.signout method="post" action="/console/signout" {
            input type="hidden" name="csrf" value=(session.csrf);
            span.who { (session.caller.name) " (" (session.caller.tenant) ")" }
            button type="submit" { "Sign out" }
            button type="submit" name="everywhere" value="1" title="Ends your sessions in every browser, on every replica" { "Sign out everywhere" }
        }
    };
    document(status, title, Some(nav), body)
}

/// A page with no session (sign-in, refusals before it).
pub(crate) fn bare(status: StatusCode, title: &str, body: Markup) -> Response {
    document(status, title, None, body)
}

fn document(status: StatusCode, title: &str, nav: Option<Markup>, body: Markup) -> Response {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolgate" }
                link rel="stylesheet" href="/console/assets/style.css";
                link rel="icon" type="image/svg+xml" href="/console/assets/favicon.svg";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    span.brand { "toolgate" }
                    @if let Some(nav) = nav { (nav) }
                }
                main #main { h1 { (title) } (body) }
            }
        }
    };
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html.into_string())
        .into_response()
}

/// A message above a screen's content: `ok` or an error.
pub(crate) fn notice(ok: bool, text: &str) -> Markup {
    html! { p.notice.(if ok { "ok" } else { "error" }) role=(if ok { "status" } else { "alert" }) { (text) } }
}

/// JSON, pretty-printed for reading.
pub(crate) fn pretty(v: &Value) -> Markup {
    html! { pre.json { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
}

/// Milliseconds since the Unix epoch, as UTC.
pub(crate) fn when(ms: i64) -> String {
    toolgate_core::receipt::rfc3339_ms(ms)
}

/// A duration for people: `42 s`, `3 min 5 s`, `2 h 10 min`.
pub(crate) fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// A hash shortened for a table, whole on hover.
pub(crate) fn short(hash: &str) -> Markup {
    let cut: String = hash.chars().take(12).collect();
    html! { code title=(hash) { (cut) @if hash.len() > 12 { "…" } } }
}

/// The hidden CSRF field of a state-changing form.
pub(crate) fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}
