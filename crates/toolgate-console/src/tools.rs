//! The authority matrix: every tool of every upstream, read live — each
//! hint as declared or defaulted, the class the hints imply, the registry's
//! class, the class in force, disagreement, the pin, and whether clients
//! are given it (and if not, why: `toolgate_gateway::listed`) — then every
//! prompt, resource and template the same way; a changed contract shown as
//! a diff, accepted here through `Catalogs::accept`, as `toolgate tools
//! --accept` does.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;
use toolgate_core::{AuthorityClass, Hint};
use toolgate_gateway::catalog::ExposedTool;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::listed::{self, Listing};
use toolgate_gateway::pins::PinStatus;
use toolgate_mcp::upstream::Kind;

use super::extract::{Admin, Refusal, Signed, SignedForm, path_param};
use super::operations::urlencode;
use super::page::{self, Nav, csrf, notice, pretty, short};

fn class(c: Option<AuthorityClass>) -> Markup {
    match c {
        Some(c) => html! { span.class.(c.as_str()) { (c.as_str()) } },
        None => html! { span.muted { "not registered" } },
    }
}

/// A hint: its value, and whether the server declared it (else the
/// specification's default).
fn hint(h: Hint) -> Markup {
    let word = if h.value { "true" } else { "false" };
    html! {
        @if h.declared { span.hint.declared title="declared by the server" { (word) } }
        @else { span.hint.defaulted title="not declared: the specification's default" { (word) "*" } }
    }
}

fn pin(p: &PinStatus) -> Markup {
    match p {
        PinStatus::Pinned => html! { span.pin.pinned { "pinned" } },
        PinStatus::New => html! { span.pin.new { "new" } },
        PinStatus::Changed(_) => html! { span.pin.changed { "CHANGED" } },
    }
}

/// Whether clients are given it: `listed`, or `not listed` with why (in
/// full on hover). The console is the serving gateway's: what it has not
/// pinned it does not list.
fn given(t: &ExposedTool) -> Markup {
    match listed::listing(t, Mode::Serve) {
        Listing::Listed | Listing::OnceServed => html! { span.listed { "listed" } },
        Listing::NotListed(why) => html! { span.muted title=(why.text()) { "no: " (why.word()) } },
    }
}

/// `GET /console/tools`.
pub(crate) async fn matrix(State(gw): State<Arc<Gateway>>, signed: Signed) -> Response {
    let s = &signed.session;
    let catalog = gw.catalogs.current();
    let tools: Vec<&Arc<ExposedTool>> =
        catalog.tools.values().filter(|t| t.kind == Kind::Tool).collect();
    let body = html! {
        p { "Read live from each upstream's tools/list. The registry's class runs (In force); a \
            hint marked * was not declared and takes the specification's default. Rows where the \
            hints and the registry disagree are marked. Listed: whether clients are given it in \
            tools/list, and if not, why." }
        div.scroll { table.matrix {
            thead { tr {
                th { "Tool" } th { "readOnly" } th { "destructive" } th { "idempotent" } th { "openWorld" }
                th { "Hints imply" } th { "Registry says" } th { "In force" } th { "Pin" } th { "Listed" }
            } }
            tbody { @for t in &tools {
                @let h = t.view.hints;
                tr.disagrees[t.view.disagrees] {
                    td { a href={ "/console/tools/" (t.exposed_name) } { (t.exposed_name) } @if t.view.disagrees { " " span.flag { "disagree" } } }
                    td { (hint(h.read_only_hint)) } td { (hint(h.destructive_hint)) } td { (hint(h.idempotent_hint)) } td { (hint(h.open_world_hint)) }
                    td { (class(Some(t.view.implied_class))) }
                    td { (class(t.view.registry_class)) }
                    td { (class(Some(t.view.effective_class))) }
                    td { (pin(&t.pin)) }
                    td { (given(t)) }
                }
            } }
        } }
        @let contents: Vec<&Arc<ExposedTool>> = catalog.all().filter(|t| t.kind != Kind::Tool).collect();
        @if !contents.is_empty() {
            h2 { "Prompts, resources and templates" }
            p { "Pinned like tools: a prompt is instructions the model follows, so a changed one \
                is held (not listed, not served) until an admin accepts it." }
            div.scroll { table {
                thead { tr { th { "Kind" } th { "Name" } th { "In force" } th { "Pin" } th { "Listed" } } }
                tbody { @for t in &contents {
                    tr {
                        td { (t.kind.noun()) }
                        td { a href={ "/console/tools/" (urlencode(&t.pin_name())) } { (t.exposed_name) } }
                        td { (class(Some(t.view.effective_class))) }
                        td { (pin(&t.pin)) }
                        td { (given(t)) }
                    }
                } }
            } }
        }
        @if !catalog.down.is_empty() {
            h2 { "Upstreams not listed" }
            ul { @for (server, why) in &catalog.down { li { strong { (server) } ": " (why) } } }
        }
        @if !catalog.ambiguous.is_empty() {
            h2 { "Names not offered" }
            ul { @for (name, why) in &catalog.ambiguous { li { code { (name) } ": " (why) } } }
        }
    };
    page::page(
        StatusCode::OK,
        "Authority",
        s,
        Nav::Authority,
        super::pending_count(&gw, s).await,
        body,
    )
}

#[derive(Deserialize)]
pub(crate) struct Accepted {
    accepted: Option<String>,
}

/// `GET /console/tools/{name}`: one tool's contract; a changed one as a diff.
pub(crate) async fn show(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Path(name): Path<String>,
    Query(q): Query<Accepted>,
) -> Response {
    // What the pin is now, not words from the address.
    let said = q.accepted.and_then(|_| {
        gw.catalogs.current().pinned(&name).filter(|t| t.pin == PinStatus::Pinned).map(|t| {
            notice(true, &format!("Accepted: {name} is pinned at {}.", t.definition_sha256))
        })
    });
    one(&gw, &signed, &name, StatusCode::OK, said).await
}

async fn one(
    gw: &Gateway,
    signed: &Signed,
    name: &str,
    status: StatusCode,
    said: Option<Markup>,
) -> Response {
    let s = &signed.session;
    let pending = super::pending_count(gw, s).await;
    let catalog = gw.catalogs.current();
    let Some(t) = catalog.pinned(name) else {
        return page::page(
            StatusCode::NOT_FOUND,
            "Tool",
            s,
            Nav::Authority,
            pending,
            notice(
                false,
                &format!(
                    "No live tool, prompt or resource `{name}`. The authority matrix lists them."
                ),
            ),
        );
    };
    let noun = t.kind.noun();
    let show = |v: &Option<Value>| {
        v.as_ref().map_or_else(
            || "(absent)".to_string(),
            |v| serde_json::to_string_pretty(v).unwrap_or_default(),
        )
    };
    let body = html! {
        @if let Some(m) = said { (m) }
        dl.facts {
            dt { "Kind" } dd { (noun) }
            dt { "Server" } dd { (t.server) }
            dt { "Upstream name" } dd { (t.tool.name) }
            dt { "Hints imply" } dd { (class(Some(t.view.implied_class))) }
            dt { "Registry says" } dd { (class(t.view.registry_class)) }
            dt { "In force" } dd { (class(Some(t.view.effective_class))) " (" (format!("{:?}", t.view.source).to_lowercase()) ")" }
            dt { "Labels" } dd { (t.labels.join(", ")) }
            dt { "Definition" } dd { (short(&t.definition_sha256)) }
            dt { "Pin" } dd { (pin(&t.pin)) }
            dt { "Listed" } dd { (given(t)) @if let Some(why) = listed::listing(t, Mode::Serve).why() { " — " (why.short()) ": " (why.text()) } }
        }
        @if let Some(fix) = listed::to_list(t, Mode::Serve) {
            h2 { "The registry entry that would list it" }
            p { "Add to the config and reload (or restart) the gateway: " (fix.why) }
            pre { (fix.toml) }
        }
        @if let PinStatus::Changed(old) = &t.pin {
            h2 { "How the contract changed since it was accepted" }
            p { "This " (noun) " is not listed and calls to it are refused (contract_changed) until the new contract is accepted." }
            div.scroll { table.diff {
                thead { tr { th { "Where" } th { "Accepted" } th { "Live now" } } }
                tbody { @for c in toolgate_core::contract::diff(&old.definition, &t.tool.definition) {
                    tr { td { code { (c.path) } } td.before { pre { (show(&c.before)) } } td.after { pre { (show(&c.after)) } } }
                } }
            } }
            @if s.admin() {
                form.card method="post" action={ "/console/tools/" (urlencode(&t.pin_name())) "/accept" } {
                    (csrf(s))
                    p { "Accepting pins the live contract: calls run under it from now on." }
                    button type="submit" { "Accept the new contract" }
                }
            } @else {
                p.notice.error { "Accepting a contract needs the admin role (or `toolgate tools --accept " (t.pin_name()) "`)." }
            }
        }
        h2 { "The live definition" }
        (pretty(&t.tool.definition))
    };
    page::page(status, &t.exposed_name, s, Nav::Authority, pending, body)
}

/// The accept form: nothing but its CSRF token.
#[derive(Deserialize)]
pub(crate) struct Accept {}

/// Accepting needs the admin role: the tool's page says so.
impl Refusal for Accept {
    async fn refusal(gw: &Gateway, signed: &Signed, parts: &mut Parts) -> Response {
        let name = path_param(parts).await;
        one(
            gw,
            signed,
            &name,
            StatusCode::FORBIDDEN,
            Some(notice(false, "Accepting a contract needs the admin role; nothing was accepted.")),
        )
        .await
    }
}

/// `POST /console/tools/{name}/accept` (admin).
pub(crate) async fn accept(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    Admin(SignedForm { signed, .. }): Admin<Accept>,
) -> Response {
    match gw.catalogs.accept(&name) {
        Ok(a) => {
            tracing::info!(target: "toolgate::console", tool = %name, by = %signed.session.caller.name, "contract accepted in the console");
            Redirect::to(&format!(
                "/console/tools/{}?accepted={}",
                urlencode(&name),
                &a.sha256[..12.min(a.sha256.len())]
            ))
            .into_response()
        }
        Err(why) => {
            one(
                &gw,
                &signed,
                &name,
                StatusCode::CONFLICT,
                Some(notice(false, &format!("Nothing was accepted: {why}"))),
            )
            .await
        }
    }
}
