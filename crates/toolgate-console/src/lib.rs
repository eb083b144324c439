//! toolgate-console: the web console at `/console`, where an approver
//! decides and an operator sees authority. Server-rendered HTML (maud), one
//! stylesheet and one small script (`assets/`, compiled in); no build step.
//! Every screen reads the same state the CLI and the admin API read, and
//! every action goes through the same code they use: the gateway's public
//! API. The gateway does not know the console exists; `toolgate serve`
//! merges [`Console::beside_mcp`] into the gateway's listener or serves
//! [`Console::router`] on `[console] listen`. It may use `toolgate-gateway`,
//! `toolgate-ledger` and `toolgate-core`, nothing else of toolgate.
//!
//! - `session` — sign-in (a token or a one-time link → a session cookie),
//!   sessions and their CSRF tokens.
//! - `extract` — what a request must be before a handler sees it: signed
//!   in, a form with its CSRF token, a role.
//! - `approvals` — the inbox (live over SSE), one approval, approve / deny.
//! - `tools` — the authority matrix, a changed contract's diff, accept.
//! - `operations` — writes by state, reconcile, resolve by hand.
//! - `receipts` — the log, one receipt verified, bundles to download.
//! - `overview` — calls and decisions over time, upstream health.

#![warn(missing_docs)]

mod approvals;
mod extract;
mod operations;
mod overview;
mod page;
mod receipts;
mod session;
mod tools;

use std::sync::Arc;

use axum::extract::{FromRef, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::html;
use serde::Deserialize;
use toolgate_gateway::downstream::http::{header_str, host_and_origin};
use toolgate_gateway::gateway::Gateway;

use extract::SignedForm;
use session::{COOKIE, FORM_COOKIE, Sessions, cookie, may_sign_in, same_secret, set_cookie};

/// The console of one gateway: the gateway it shows and acts on, and its own
/// sessions and sign-in links (in this process only). Cheap to clone: it is
/// the state of every console route.
#[derive(Clone)]
pub struct Console {
    gw: Arc<Gateway>,
    sessions: Arc<Sessions>,
}

/// Handlers that need only the gateway take `State<Arc<Gateway>>`.
impl FromRef<Console> for Arc<Gateway> {
    fn from_ref(console: &Console) -> Self {
        console.gw.clone()
    }
}

impl Console {
    /// The console of `gw`, with no one signed in.
    pub fn new(gw: Arc<Gateway>) -> Self {
        Self { gw, sessions: Arc::default() }
    }

    /// Every console route (`/console…`), ready to serve: merged beside
    /// `/mcp`, or alone on `[console] listen`.
    pub fn router(&self) -> Router {
        routes().with_state(self.clone())
    }

    /// The routes to serve beside `/mcp`: the console's when `[console]` is
    /// enabled without an address of its own, else none.
    pub fn beside_mcp(&self) -> Router {
        let config = &self.gw.config.console;
        if config.enabled && config.listen.is_none() { self.router() } else { Router::new() }
    }

    /// A one-time sign-in path (`/console/signin?link=…`) for the caller
    /// whose bearer token is `token`, valid for ten minutes (what `toolgate
    /// demo --serve` prints for its approver).
    pub fn sign_in_link(&self, token: &str) -> anyhow::Result<String> {
        let gw = &self.gw;
        let caller = gw.callers.by_token(token).ok_or_else(|| anyhow::anyhow!("no caller has that token"))?;
        anyhow::ensure!(may_sign_in(&caller), "`{}` has neither the approver nor the admin role", caller.name);
        Ok(format!("/console/signin?link={}", self.sessions.link(caller, gw.clock.now_ms(), gw.entropy.as_ref())))
    }
}

/// The console's routes, with its own response headers.
fn routes() -> Router<Console> {
    Router::new()
        .route("/console", get(overview::show))
        .route("/console/signin", get(signin_form).post(signin))
        .route("/console/signout", post(signout))
        .route("/console/approvals", get(approvals::inbox))
        .route("/console/approvals/events", get(approvals::events))
        .route("/console/approvals/{id}", get(approvals::show).post(approvals::decide))
        .route("/console/tools", get(tools::matrix))
        .route("/console/tools/{name}", get(tools::show))
        .route("/console/tools/{name}/accept", post(tools::accept))
        .route("/console/operations", get(operations::list))
        .route("/console/operations/{id}/reconcile", post(operations::reconcile))
        .route("/console/operations/{id}/resolve", post(operations::resolve))
        .route("/console/receipts", get(receipts::list))
        .route("/console/receipts/bundle", get(receipts::bundle))
        .route("/console/receipts/{index}", get(receipts::show))
        .route("/console/assets/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/console/assets/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .layer(axum::middleware::map_response(headers))
}

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/console.js");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// A strict Content-Security-Policy (no inline script or style, nothing
/// from elsewhere, no framing), nothing cached, and no referrer sent to another site (`same-origin`: with `no-referrer` a browser sends `Origin: null` on a form POST, which the Origin rule refuses).
async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[derive(Deserialize)]
struct LinkQuery {
    link: Option<String>,
}

/// The sign-in form: a bearer token, or the one-time link's button.
async fn signin_form(State(gw): State<Arc<Gateway>>, headers: axum::http::HeaderMap, Query(q): Query<LinkQuery>) -> Response {
    if let Err(r) = host_and_origin(&gw, &headers) {
        return r;
    }
    let form_token = gw.entropy.id("sif_");
    let body = html! {
        form.card method="post" action="/console/signin" {
            input type="hidden" name="form" value=(form_token);
            @if let Some(link) = &q.link {
                input type="hidden" name="link" value=(link);
                p { "This one-time link signs you in once. It expires ten minutes after it was made." }
            } @else {
                p { "Sign in with your toolgate bearer token. Only approvers and admins may use the console; the token is exchanged once for a session and not kept in the browser." }
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" required autofocus;
            }
            button type="submit" { "Sign in" }
        }
    };
    let mut r = page::bare(StatusCode::OK, "Sign in", body);
    if let Ok(v) = HeaderValue::from_str(&set_cookie(&gw, FORM_COOKIE, &form_token, 600)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[derive(Deserialize)]
struct SignIn {
    #[serde(default)]
    form: String,
    token: Option<String>,
    link: Option<String>,
}

fn refused(status: StatusCode, text: &str) -> Response {
    let body = html! { (page::notice(false, text)) p { a href="/console/signin" { "Back to sign-in" } } };
    page::bare(status, "Not signed in", body)
}

/// Exchanges a token (or a link) for a session cookie.
async fn signin(State(console): State<Console>, headers: axum::http::HeaderMap, Form(f): Form<SignIn>) -> Response {
    let gw = &console.gw;
    if let Err(r) = host_and_origin(gw, &headers) {
        return r;
    }
    // Login CSRF: the form's token must match the cookie set with the form.
    if !cookie(&headers, FORM_COOKIE).is_some_and(|c| same_secret(c, &f.form)) || header_str(&headers, "sec-fetch-site") == Some("cross-site") {
        return refused(StatusCode::FORBIDDEN, "The sign-in form expired or did not come from this console. Reload it and sign in again.");
    }
    let now = gw.clock.now_ms();
    let caller = match (f.link.as_deref(), f.token.as_deref().map(str::trim)) {
        (Some(code), _) => match console.sessions.redeem(code, now) {
            Some(c) => c,
            None => return refused(StatusCode::UNAUTHORIZED, "This sign-in link was used already or has expired. Ask for a new one, or sign in with your token."),
        },
        (None, Some(token)) if !token.is_empty() => match gw.authenticate(token).await {
            Some(c) => c,
            None => return refused(StatusCode::UNAUTHORIZED, "That token is not known here. Check it and sign in again."),
        },
        _ => return refused(StatusCode::BAD_REQUEST, "Give your bearer token to sign in."),
    };
    if !may_sign_in(&caller) {
        return refused(StatusCode::FORBIDDEN, "This token belongs to a caller without the approver or admin role (an agent). Agents cannot sign in to the console.");
    }
    let ttl_s = gw.config.console.session_ttl_s.max(60);
    let (id, session) = console.sessions.open(caller, now, (ttl_s * 1000) as i64, gw.entropy.as_ref());
    tracing::info!(target: "toolgate::console", caller = %session.caller.name, "console sign-in");
    let to = if session.approver() { "/console/approvals" } else { "/console" };
    let mut r = Redirect::to(to).into_response();
    for value in [set_cookie(gw, COOKIE, &id, ttl_s), set_cookie(gw, FORM_COOKIE, "", 0)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

async fn signout(State(console): State<Console>, SignedForm { signed, .. }: SignedForm<()>) -> Response {
    console.sessions.close(&signed.id);
    let mut r = Redirect::to("/console/signin").into_response();
    if let Ok(v) = HeaderValue::from_str(&set_cookie(&console.gw, COOKIE, "", 0)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// Approvals pending for the signed-in person's tenant: the badge's count.
async fn pending_count(gw: &Gateway, session: &session::Session) -> usize {
    let state = Some(toolgate_core::approval::ApprovalState::Pending);
    gw.ledger.approvals(Some(&session.caller.tenant), state, gw.clock.now_ms()).await.map(|a| a.len()).unwrap_or(0)
}
