//! Connections: each person's own accounts at the servers that act for
//! each person (`[servers.NAME.identity] mode = "oauth"`).
//!
//! - `/console/connect?for=TICKET` — the link a call gives a person who
//!   has not connected. It is no credential: whoever opens it signs in as
//!   themselves first, and only the person it names may go on (the gateway's
//!   own account: an admin). The page begins the authorization (a state
//!   bound to this browser by a cookie) and links to the server's
//!   authorization server.
//! - `/console/connect/callback` — where that server sends the browser
//!   back: the state is taken once, the browser must be the one that began,
//!   the grant is kept (sealed) in the ledger. It needs no session: the
//!   state and the browser's cookie are the proof.
//! - `/console/connections` — a person's own connections, to connect or
//!   disconnect; an admin also sees who is connected and until when (never
//!   a token) and connects the gateway's own account.

use std::sync::Arc;

use axum::extract::{Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use toolgate_core::Caller;
use toolgate_gateway::config::IdentityMode;
use toolgate_gateway::gateway::Gateway;
use toolgate_gateway::identity::connections::{Connections as Grants, For, Place};
use toolgate_gateway::identity::gateway_caller;

use crate::Console;
use crate::extract::{Signed, SignedForm};
use crate::page::{self, Nav};
use crate::session::{Session, cookie};

/// The servers people connect to, in config order.
pub(crate) fn oauth_servers(gw: &Gateway) -> Vec<String> {
    gw.config()
        .servers
        .iter()
        .filter(|(_, s)| s.identity.mode == IdentityMode::Oauth)
        .map(|(n, _)| n.clone())
        .collect()
}

fn grants(gw: &Gateway) -> Result<&Grants, Response> {
    gw.identities.connections().ok_or_else(|| {
        refused(StatusCode::SERVICE_UNAVAILABLE, "This gateway keeps no connections.")
    })
}

fn refused(status: StatusCode, text: &str) -> Response {
    let body = html! { div #refused { (page::notice(false, text)) } p { a href="/console/connections" { "Your connections" } } };
    page::bare(status, "Not connected", body)
}

/// Whether `of` is the gateway's own account.
fn is_own(config: &toolgate_gateway::config::Config, of: &For) -> bool {
    let own = gateway_caller(config);
    of.tenant == own.tenant && of.subject == own.subject
}

/// Whether `caller` may connect for `of`: the person it names, or for the
/// gateway's own account an admin.
fn may_connect(gw: &Gateway, session: &Session, of: &For) -> bool {
    if is_own(&gw.config(), of) {
        return session.admin();
    }
    session.caller.tenant == of.tenant && session.caller.subject == of.subject
}

/// The person a caller connects as.
fn person(caller: &Caller, server: &str) -> For {
    For {
        tenant: caller.tenant.clone(),
        subject: caller.subject.clone(),
        server: server.to_string(),
    }
}

#[derive(Deserialize)]
pub(crate) struct Link {
    #[serde(rename = "for")]
    ticket: String,
}

/// A consent link: for its own person, the authorization begun and the way
/// to the server's authorization server; for anyone else, nothing.
pub(crate) async fn connect(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(link): Query<Link>,
) -> Response {
    let gw = &console.gw;
    if let Err(r) = toolgate_gateway::downstream::http::host_and_origin(gw, &headers) {
        return r;
    }
    let now = gw.clock.now_ms();
    let Some(session) = signed_in(gw, &headers).await else {
        // Signed in first, then back here (a link opened from another
        // site carries no session cookie: it signs in all the same).
        let next = format!("/console/connect?for={}", urlencode(&link.ticket));
        return Redirect::to(&format!("/console/signin?next={}", urlencode(&next))).into_response();
    };
    let grants = match grants(gw) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let config = gw.config();
    let of = match grants.read_link(&Place::of(&config), &link.ticket, now, gw.entropy.as_ref()) {
        Ok(of) => of,
        Err(why) => return refused(StatusCode::BAD_REQUEST, &capital(&why)),
    };
    if !may_connect(gw, &session, &of) {
        tracing::warn!(target: "toolgate::console", caller = %session.caller.name, server = %of.server, "a consent link opened by someone it is not for");
        let body = html! {
            div #not-yours { (page::notice(false, "This link was made for another person. Nothing \
                was connected: a link connects only the account of the person it was made for, \
                signed in as themselves.")) }
            p { a href="/console/connections" { "Your own connections" } }
        };
        return page::page(
            StatusCode::FORBIDDEN,
            "Not your link",
            &session,
            Nav::Connections,
            0,
            body,
        );
    }
    begin(gw, &session, &of).await
}

/// Begins `of`'s authorization and shows the way to it.
async fn begin(gw: &Gateway, session: &Session, of: &For) -> Response {
    let grants = match grants(gw) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let config = gw.config();
    let (url, (name, value)) = match grants
        .begin(&config, of, gw.clock.now_ms(), gw.entropy.as_ref())
        .await
    {
        Ok(begun) => begun,
        Err(why) => {
            tracing::warn!(target: "toolgate::console", server = %of.server, %why, "cannot begin a connection");
            return refused(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "The server `{}` cannot be connected now: {why}. Try again in a moment.",
                    of.server
                ),
            );
        }
    };
    let own = is_own(&config, of);
    let body = html! {
        p {
            @if own { "Connect the gateway's own account at " code { (of.server) } ": it reads the server's tools with it. Sign in there as the account the gateway should use." }
            @else { "Connect your account at " code { (of.server) } ": calls your agents make to \
                it then act as you, with your own permissions there." }
        }
        p { a #connect .button href=(url) { "Continue to sign in at " (host_of(&url)) } }
        p.hint { "The authorization expires in ten minutes and works in this browser only." }
    };
    let mut r = page::page(
        StatusCode::OK,
        &format!("Connect {}", of.server),
        session,
        Nav::Connections,
        0,
        body,
    );
    let secure = if page_is_secure(gw) { "; Secure" } else { "" };
    // SameSite=Lax: the authorization server sends the browser back with a
    // top-level GET from its own site, which a Strict cookie would miss.
    let cookie = format!(
        "{name}={value}; Path=/console/connect; HttpOnly; SameSite=Lax; Max-Age=600{secure}"
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// Where the authorization server sends the browser back.
pub(crate) async fn callback(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let gw = &console.gw;
    if let Err(r) = toolgate_gateway::downstream::http::host_and_origin(gw, &headers) {
        return r;
    }
    let grants = match grants(gw) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let query = query.unwrap_or_default();
    let config = gw.config();
    let browser = |name: &str| cookie(&headers, name).map(str::to_string);
    match grants.finish(&config, &query, browser, gw.clock.now_ms(), gw.entropy.as_ref()).await {
        Ok(of) => {
            tracing::info!(target: "toolgate::console", server = %of.server, "a person connected their account");
            // The gateway's own account: its server's tools can be read now,
            // rather than after the supervisor's backoff.
            if is_own(&config, &of)
                && let Some(upstream) = gw.catalogs.live().upstream(&of.server)
            {
                upstream.nudge();
            }
            let body = html! {
                div #connected { (page::notice(true, &format!("Connected: calls to `{}` now act as \
                    this account. Go back to your agent and call again.", of.server))) }
                p { a href="/console/connections" { "Your connections" } }
            };
            page::bare(StatusCode::OK, "Connected", body)
        }
        Err(why) => {
            tracing::warn!(target: "toolgate::console", %why, "a connection was not made");
            refused(StatusCode::BAD_REQUEST, &format!("Nothing was connected: {why}."))
        }
    }
}

/// A person's own connections; an admin's view adds everyone's.
pub(crate) async fn list(
    State(console): State<Console>,
    Signed { session, .. }: Signed,
) -> Response {
    let gw = &console.gw;
    let config = gw.config();
    let now = gw.clock.now_ms();
    let servers = oauth_servers(gw);
    let all = gw
        .ledger
        .connections(if session.admin() { None } else { Some(&session.caller.tenant) })
        .await;
    let all = match all {
        Ok(all) => all,
        Err(e) => {
            return refused(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("The gateway's ledger did not answer ({e}). Try again in a moment."),
            );
        }
    };
    let mine = |server: &str| {
        all.iter().find(|c| {
            c.tenant == session.caller.tenant
                && c.subject == session.caller.subject
                && c.server == server
        })
    };
    let own = gateway_caller(&config);
    let link = |of: &For| {
        gw.identities
            .connections()
            .and_then(|g| g.link(&Place::of(&config), of, now, gw.entropy.as_ref()).ok())
    };
    let body = html! {
        @if servers.is_empty() {
            p { "No server here acts for each person with their own account." }
        }
        @else {
            p { "These servers act for each person with their own account. Connect yours once; your agents' calls then reach them as you." }
            table {
                thead { tr { th { "Server" } th { "State" } th { "Token until" } th {} } }
                tbody {
                    @for server in &servers {
                        tr data-server=(server) {
                            td { code { (server) } }
                            @match mine(server) {
                                Some(c) => {
                                    td { "connected" } td { (expiry(c.expires_ms, now)) }
                                    td { (disconnect_form(&session, server, false)) }
                                }
                                None => {
                                    td { "not connected" } td { "—" }
                                    td { @if let Some(href) = link(&person(&session.caller, server)) { a id=(format!("connect-{server}")) href=(href) { "Connect" } } }
                                }
                            }
                        }
                    }
                }
            }
            @if session.admin() {
                h2 { "The gateway's own accounts" }
                p { "The gateway reads each server's tools with an account of its own; until one is connected the server's tools are not listed." }
                table {
                    thead { tr { th { "Server" } th { "State" } th { "Token until" } th {} } }
                    tbody {
                        @for server in &servers {
                            @let of = For { tenant: own.tenant.clone(), subject: own.subject.clone(), server: server.clone() };
                            tr data-own=(server) {
                                td { code { (server) } }
                                @match all.iter().find(|c| c.tenant == of.tenant && c.subject == of.subject && &c.server == server) {
                                    Some(c) => { td { "connected" } td { (expiry(c.expires_ms, now)) } td { (disconnect_form(&session, server, true)) } }
                                    None => { td { "not connected" } td { "—" } td { @if let Some(href) = link(&of) { a id=(format!("connect-gateway-{server}")) href=(href) { "Connect" } } } }
                                }
                            }
                        }
                    }
                }
                h2 { "Everyone's connections" }
                table #everyone {
                    thead { tr { th { "Tenant" } th { "Person" } th { "Server" } th { "Token until" } th { "Connected or refreshed" } } }
                    tbody {
                        @for c in &all {
                            tr { td { (c.tenant) } td { (c.subject) } td { code { (c.server) } } td { (expiry(c.expires_ms, now)) } td { (page::when(c.updated_ms)) } }
                        }
                    }
                }
            }
        }
    };
    page::page(StatusCode::OK, "Connections", &session, Nav::Connections, 0, body)
}

fn disconnect_form(session: &Session, server: &str, own: bool) -> Markup {
    html! {
        form method="post" action="/console/connections/disconnect" {
            (page::csrf(session))
            input type="hidden" name="server" value=(server);
            @if own { input type="hidden" name="own" value="1"; }
            button type="submit" id=(if own { format!("disconnect-gateway-{server}") } else { format!("disconnect-{server}") }) { "Disconnect" }
        }
    }
}

fn expiry(expires_ms: i64, now: i64) -> Markup {
    if expires_ms == i64::MAX {
        return html! { "no expiry given" };
    }
    html! { span title=(page::when(expires_ms)) { @if expires_ms > now { "in " (page::span(expires_ms - now)) } @else { "expired (refreshed at the next call)" } } }
}

#[derive(Deserialize)]
pub(crate) struct Disconnect {
    server: String,
    own: Option<String>,
}

/// Disconnects the person's account (or, for an admin, the gateway's own):
/// revoked at its server, deleted here.
pub(crate) async fn disconnect(
    State(console): State<Console>,
    SignedForm { signed, form }: SignedForm<Disconnect>,
) -> Response {
    let gw = &console.gw;
    let session = &signed.session;
    let of = match form.own {
        Some(_) if !session.admin() => {
            return refused(
                StatusCode::FORBIDDEN,
                "Only an admin disconnects the gateway's own account. Nothing was changed.",
            );
        }
        Some(_) => For {
            server: form.server.clone(),
            ..person(&gateway_caller(&gw.config()), &form.server)
        },
        None => person(&session.caller, &form.server),
    };
    let grants = match grants(gw) {
        Ok(g) => g,
        Err(r) => return r,
    };
    match grants.disconnect(&gw.config(), &of, gw.entropy.as_ref()).await {
        Ok((_, revoke_failed)) => {
            if let Some(why) = revoke_failed {
                tracing::warn!(target: "toolgate::console", server = %of.server, %why, "a disconnected grant was not revoked at its server");
            }
            tracing::info!(target: "toolgate::console", caller = %session.caller.name, server = %of.server, "disconnected");
            Redirect::to("/console/connections").into_response()
        }
        Err(why) => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("Nothing was disconnected: {why}. Try again in a moment."),
        ),
    }
}

/// The live console session of the request's cookie, if any.
async fn signed_in(gw: &Arc<Gateway>, headers: &HeaderMap) -> Option<Session> {
    let id = cookie(headers, crate::session::COOKIE)?;
    crate::session::get(gw, id, gw.clock.now_ms()).await
}

fn page_is_secure(gw: &Gateway) -> bool {
    gw.config().public_url().starts_with("https://")
}

fn host_of(url: &str) -> String {
    reqwest_host(url).unwrap_or_else(|| "the server's authorization server".into())
}

fn reqwest_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    Some(rest.split(['/', '?', '#']).next()?.to_string())
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

/// A query value, percent-encoded.
pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
