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
//! - `config` — `[console]`, the console's section of the config file,
//!   which the gateway keeps unread.
//! - `session` — sessions, their cookies and CSRF tokens, sign-in links.
//! - `signin` — sign-in (a token or a one-time link → a session cookie),
//!   sign-out.
//! - `extract` — what a request must be before a handler sees it: signed
//!   in, a form with its CSRF token, a role.
//! - `approvals` — the inbox (live over SSE), one approval, approve / deny.
//! - `tools` — the authority matrix, a changed contract's diff, accept.
//! - `operations` — writes by state, reconcile, resolve by hand.
//! - `notices` — the outbox of approval notices: dead ones, send again.
//! - `receipts` — the log, one receipt verified, bundles to download.
//! - `connections` — each person's own accounts at `oauth` servers: the
//!   consent link, the callback, connect and disconnect.
//! - `overview` — calls and decisions over time, upstream health, the
//!   config in force and (for an admin) reloading it.
//! - `page` — the frame every screen shares.

#![warn(missing_docs)]

mod approvals;
mod boxes;
pub mod config;
mod connections;
mod extract;
mod notices;
mod operations;
mod overview;
mod page;
mod receipts;
mod session;
mod signin;
mod tools;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use toolgate_gateway::config::ConfigError;
use toolgate_gateway::gateway::Gateway;

pub use config::ConsoleConfig;
use session::{Sessions, has_a_role};

/// The console of one gateway: the gateway it shows and acts on (sessions
/// are in its ledger), its `[console]` section, and its sign-in links (in
/// this process only). Cheap to clone: it is the state of every console
/// route.
#[derive(Clone)]
pub struct Console {
    gw: Arc<Gateway>,
    config: Arc<ConsoleConfig>,
    sessions: Arc<Sessions>,
}

/// Handlers that need only the gateway take `State<Arc<Gateway>>`.
impl FromRef<Console> for Arc<Gateway> {
    fn from_ref(console: &Console) -> Self {
        console.gw.clone()
    }
}

impl Console {
    /// The console of `gw`, with no one signed in; an error when its
    /// config's `[console]` is not one the console can read.
    pub fn new(gw: Arc<Gateway>) -> Result<Self, ConfigError> {
        let config = Arc::new(ConsoleConfig::of(&gw.config())?);
        Ok(Self { gw, config, sessions: Arc::default() })
    }

    /// Its `[console]` section, as read when it was made (a change to it
    /// waits for a restart).
    pub fn config(&self) -> &ConsoleConfig {
        &self.config
    }

    /// Every console route (`/console…`), ready to serve: merged beside
    /// `/mcp`, or alone on `[console] listen`.
    pub fn router(&self) -> Router {
        routes().with_state(self.clone())
    }

    /// The routes to serve beside `/mcp`: the console's when `[console]` is
    /// enabled without an address of its own, else none.
    pub fn beside_mcp(&self) -> Router {
        let config = &self.config;
        if config.enabled && config.listen.is_none() { self.router() } else { Router::new() }
    }

    /// A one-time sign-in path (`/console/signin?link=…`) for the caller
    /// whose bearer token is `token`, valid for ten minutes (what `toolgate
    /// demo --serve` prints for its approver).
    pub fn sign_in_link(&self, token: &str) -> anyhow::Result<String> {
        let gw = &self.gw;
        let caller = gw
            .callers
            .by_token(token)
            .ok_or_else(|| anyhow::anyhow!("no caller has that token"))?;
        anyhow::ensure!(
            has_a_role(&caller),
            "`{}` has neither the approver nor the admin role",
            caller.name
        );
        Ok(format!(
            "/console/signin?link={}",
            self.sessions.link(caller, gw.clock.now_ms(), gw.entropy.as_ref())
        ))
    }
}

/// The console's routes, with its own response headers.
fn routes() -> Router<Console> {
    Router::new()
        .route("/console", get(overview::show))
        .route("/console/reload", post(overview::reload))
        .route("/console/signin", get(signin::form).post(signin::signin))
        .route("/console/signout", post(signin::signout))
        .route("/console/approvals", get(approvals::inbox))
        .route("/console/approvals/events", get(approvals::events))
        .route("/console/approvals/{id}", get(approvals::show).post(approvals::decide))
        .route("/console/tools", get(tools::matrix))
        .route("/console/tools/{name}", get(tools::show))
        .route("/console/tools/{name}/accept", post(tools::accept))
        .route("/console/operations", get(operations::list))
        .route("/console/operations/{id}/reconcile", post(operations::reconcile))
        .route("/console/operations/{id}/resolve", post(operations::resolve))
        .route("/console/notices", get(notices::list))
        .route("/console/notices/{id}/again", post(notices::again))
        .route("/console/receipts", get(receipts::list))
        .route("/console/receipts/bundle", get(receipts::bundle))
        .route("/console/receipts/{index}", get(receipts::show))
        .route("/console/connect", get(connections::connect))
        .route("/console/connect/callback", get(connections::callback))
        .route("/console/connections", get(connections::list))
        .route("/console/connections/disconnect", post(connections::disconnect))
        .route(
            "/console/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/console/assets/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route("/console/assets/favicon.svg", get(|| async { asset("image/svg+xml", ICON) }))
        .layer(axum::middleware::map_response(headers))
}

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/console.js");
const ICON: &str = include_str!("../assets/favicon.svg");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body)
        .into_response()
}

/// A strict Content-Security-Policy (no inline script or style, nothing
/// from elsewhere, no framing), nothing cached, and no referrer sent to another site (`same-origin`: with `no-referrer` a browser sends `Origin: null` on a form POST, which the Origin rule refuses).
async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
        connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Approvals pending for the signed-in person's tenant: the badge's count.
async fn pending_count(gw: &Gateway, session: &session::Session) -> usize {
    let state = Some(toolgate_core::approval::ApprovalState::Pending);
    gw.ledger
        .approvals(Some(&session.caller.tenant), state, gw.clock.now_ms())
        .await
        .map(|a| a.len())
        .unwrap_or(0)
}
