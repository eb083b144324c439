//! Signing in and out. A bearer token (a `[callers]` token, or an OAuth
//! access token) or a one-time link is exchanged once for a session cookie;
//! the sign-in form carries its own token against a cookie set with it, so
//! a login cannot be forged either (login CSRF: double submit).

use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::extract::{Allowed, SignInForm, SignedForm, sign_in_refused as refused};
use crate::page;
use crate::session::{self, COOKIE, FORM_COOKIE, may_sign_in, set_cookie};

#[derive(Deserialize)]
pub(crate) struct LinkQuery {
    link: Option<String>,
    next: Option<String>,
}

/// Where to go after signing in: a console path only (never another site).
fn next_of(next: Option<&str>) -> Option<&str> {
    next.filter(|n| {
        n.starts_with("/console/")
            && !n.starts_with("//")
            && !n.contains('\\')
            && !n.chars().any(char::is_control)
    })
}

/// The sign-in form: a bearer token, or the one-time link's button.
pub(crate) async fn form(
    State(console): State<Console>,
    Query(q): Query<LinkQuery>,
    _: Allowed,
) -> Response {
    let form_token = console.gw.entropy.id("sif_");
    let body = html! {
        form.card method="post" action="/console/signin" {
            input type="hidden" name="form" value=(form_token);
            @if let Some(next) = next_of(q.next.as_deref()) { input type="hidden" name="next" value=(next); }
            @if let Some(link) = &q.link {
                input type="hidden" name="link" value=(link);
                p { "This one-time link signs you in once. It expires ten minutes after it was made." }
            } @else {
                @if q.next.as_deref().is_some_and(|n| n.starts_with("/console/connect")) {
                    p { "Sign in as yourself with your toolgate bearer token to connect your \
                        account. The token is exchanged once for a session and not kept in the \
                        browser." }
                } @else {
                    p { "Sign in with your toolgate bearer token. Only approvers and admins may \
                        use the console; the token is exchanged once for a session and not kept in \
                        the browser." }
                }
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" required autofocus;
            }
            button type="submit" { "Sign in" }
        }
    };
    let mut r = page::bare(StatusCode::OK, "Sign in", body);
    if let Ok(v) = HeaderValue::from_str(&set_cookie(&console, FORM_COOKIE, &form_token, 600)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// A bearer token, or a one-time link's code.
#[derive(Deserialize)]
pub(crate) struct SignIn {
    token: Option<String>,
    link: Option<String>,
    next: Option<String>,
}

/// Exchanges a token (or a link) for a session cookie.
pub(crate) async fn signin(
    State(console): State<Console>,
    SignInForm(f): SignInForm<SignIn>,
) -> Response {
    let gw = &console.gw;
    let now = gw.clock.now_ms();
    // A session ends with the token that opened it, if that ends sooner.
    let (caller, until) = match (f.link.as_deref(), f.token.as_deref().map(str::trim)) {
        (Some(code), _) => match console.sessions.redeem(code, now) {
            Some(c) => (c, None),
            None => {
                return refused(
                    StatusCode::UNAUTHORIZED,
                    "This sign-in link was used already or has expired. Ask for a new one, or sign in with your token.",
                );
            }
        },
        (None, Some(token)) if !token.is_empty() => match gw.authenticate(token).await {
            Some(c) => c,
            None => {
                return refused(
                    StatusCode::UNAUTHORIZED,
                    "That token is not known here. Check it and sign in again.",
                );
            }
        },
        _ => return refused(StatusCode::BAD_REQUEST, "Give your bearer token to sign in."),
    };
    if !may_sign_in(&caller, !crate::connections::oauth_servers(gw).is_empty()) {
        return refused(
            StatusCode::FORBIDDEN,
            "This token belongs to a caller without the approver or admin role (an agent). Agents cannot sign in to the console.",
        );
    }
    let ttl_ms = ((console.config.session_ttl_s.max(60) * 1000) as i64)
        .min(until.map_or(i64::MAX, |u| u - now));
    let ttl_s = (ttl_ms / 1000).max(1) as u64;
    let (id, session) = match session::open(gw, caller, now, ttl_ms).await {
        Ok(opened) => opened,
        Err(e) => {
            tracing::error!(target: "toolgate::console", error = %e, "cannot open a console session in the ledger");
            return refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "The gateway's ledger did not answer, so no session could be opened. Try again in a moment.",
            );
        }
    };
    tracing::info!(target: "toolgate::console", caller = %session.caller.name, "console sign-in");
    let to = match next_of(f.next.as_deref()) {
        Some(next) => next.to_string(),
        None if session.approver() => "/console/approvals".into(),
        None if session.admin() => "/console".into(),
        None => "/console/connections".into(),
    };
    let mut r = Redirect::to(&to).into_response();
    for value in
        [set_cookie(&console, COOKIE, &id, ttl_s), set_cookie(&console, FORM_COOKIE, "", 0)]
    {
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

/// Sign-out: this session, or with `everywhere` every session of the person.
#[derive(Deserialize)]
pub(crate) struct SignOut {
    everywhere: Option<String>,
}

/// Ends the session (or all of the person's) on every replica, and its cookie.
pub(crate) async fn signout(
    State(console): State<Console>,
    SignedForm { signed, form }: SignedForm<SignOut>,
) -> Response {
    let everywhere = form.everywhere.is_some();
    match session::close(&console.gw, &signed.id, &signed.session.caller, everywhere).await {
        Ok(ended) => {
            tracing::info!(target: "toolgate::console", caller = %signed.session.caller.name, ended, everywhere, "console sign-out")
        }
        Err(e) => {
            tracing::error!(target: "toolgate::console", error = %e, "cannot end a console session in the ledger");
            return refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "The gateway's ledger did not answer, so you are still signed in. Try signing out again in a moment.",
            );
        }
    }
    let mut r = Redirect::to("/console/signin").into_response();
    if let Ok(v) = HeaderValue::from_str(&set_cookie(&console, COOKIE, "", 0)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::next_of;

    #[test]
    fn after_sign_in_only_a_console_path_is_followed() {
        assert_eq!(next_of(Some("/console/connect?for=abc")), Some("/console/connect?for=abc"));
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/console/",
            "/console\\@evil",
            "/other",
            "/console/x\r\nSet-Cookie: a=b",
        ] {
            assert_eq!(next_of(Some(elsewhere)), None, "{elsewhere}");
        }
        assert_eq!(next_of(None), None);
    }
}
