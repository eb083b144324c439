//! What a console request must be before a handler sees it, as axum
//! extractors (the way the gateway's edge admits `/mcp`), so that no
//! handler checks a rule by hand:
//!
//! - [`Signed`] — `Host` and `Origin` allowed, not cross-site, a live
//!   session cookie.
//! - [`SignedForm<T>`] — `Signed`, the form `T`, and the session's own CSRF
//!   token sent back with it: every state-changing form.
//! - [`Approver<T>`], [`Admin<T>`] — a `SignedForm<T>` from a person with
//!   that role. Whoever lacks it is answered by the screen the form came
//!   from ([`Refusal`]), saying that nothing changed.
//! - Before a session: [`Allowed`] — `Host` and `Origin` allowed (the
//!   sign-in page); [`SignInForm<T>`] — the sign-in form `T`, from an
//!   allowed origin, not cross-site, carrying the token of the cookie set
//!   with the form (login CSRF: double submit).
//!
//! A rejection is a whole response: 403 for another site or a stale form,
//! 401 (or, for a page, the sign-in form) without a session.

use std::future::Future;

use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use toolgate_gateway::downstream::http::{header_str, host_and_origin, plain};
use toolgate_gateway::gateway::Gateway;

use crate::Console;
use crate::page;
use crate::session::{self, COOKIE, FORM_COOKIE, Session, cookie, same_secret};

/// A request from a signed-in person: `Host` and `Origin` allowed, a live
/// session cookie. Without one, a page read goes to the sign-in form.
pub(crate) struct Signed {
    pub(crate) id: String,
    pub(crate) session: Session,
}

impl FromRequestParts<Console> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        let gw = &console.gw;
        host_and_origin(gw, &parts.headers)?;
        // A request another site made the browser send is never acted on,
        // whatever cookie rides along (SameSite=Strict already keeps it off).
        if header_str(&parts.headers, "sec-fetch-site") == Some("cross-site") {
            return Err(plain(
                StatusCode::FORBIDDEN,
                "cross-site requests are refused; open the console from its own address",
            ));
        }
        let now = gw.clock.now_ms();
        let id = cookie(&parts.headers, COOKIE).map(str::to_string);
        let session = match &id {
            Some(id) => session::get(gw, id, now).await,
            None => None,
        };
        match id.zip(session) {
            // A person without a role signed in to connect their accounts:
            // that screen (and signing out) is all they see. (A form of
            // theirs elsewhere is refused by its role, as it says.)
            Some((_, session))
                if parts.method == axum::http::Method::GET
                    && !session::has_a_role(&session.caller)
                    && !for_everyone(parts.uri.path()) =>
            {
                Err(Redirect::to("/console/connections").into_response())
            }
            Some((id, session)) => Ok(Signed { id, session }),
            None if parts.method == axum::http::Method::GET => {
                Err(Redirect::to("/console/signin").into_response())
            }
            None => Err(plain(
                StatusCode::UNAUTHORIZED,
                "your console session ended; sign in again at /console/signin",
            )),
        }
    }
}

/// The screens a signed-in person without a role may use.
fn for_everyone(path: &str) -> bool {
    path.starts_with("/console/connect") || path == "/console/signout"
}

/// A state-changing form from a signed-in person, carrying the session's
/// CSRF token (field `csrf`, beside `T`'s own fields): one without the
/// right token is refused (403), nothing changed.
pub(crate) struct SignedForm<T> {
    pub(crate) signed: Signed,
    pub(crate) form: T,
}

/// The form as sent: the CSRF token, and the fields `T` reads.
#[derive(Deserialize)]
struct WithCsrf<T> {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    form: T,
}

impl<T: DeserializeOwned + Send> FromRequest<Console> for SignedForm<T> {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Console) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        Self::from_parts(&mut parts, body, console).await
    }
}

impl<T: DeserializeOwned + Send> SignedForm<T> {
    /// The session first, then the form, then its token: the order the
    /// handlers checked them in, so each refusal is the one they gave.
    async fn from_parts(
        parts: &mut Parts,
        body: axum::body::Body,
        console: &Console,
    ) -> Result<Self, Response> {
        let signed = Signed::from_request_parts(parts, console).await?;
        let Form(WithCsrf { csrf, form }) =
            Form::<WithCsrf<T>>::from_request(Request::from_parts(parts.clone(), body), console)
                .await
                .map_err(IntoResponse::into_response)?;
        if !same_secret(&signed.session.csrf, &csrf) {
            return Err(plain(
                StatusCode::FORBIDDEN,
                "the form's CSRF token is missing or stale; nothing was changed. Reload the page and send the form again",
            ));
        }
        Ok(SignedForm { signed, form })
    }
}

/// A form whose action needs a role: how the screen it came from refuses
/// someone without it (with 403 and why nothing changed, or with what that
/// screen says first, e.g. that the thing is not there).
pub(crate) trait Refusal {
    /// The refusal; `parts` are the request's, for its path.
    fn refusal(
        gw: &Gateway,
        signed: &Signed,
        parts: &mut Parts,
    ) -> impl Future<Output = Response> + Send;
}

/// A [`SignedForm<T>`] from a person with the approver role.
pub(crate) struct Approver<T>(pub(crate) SignedForm<T>);

/// A [`SignedForm<T>`] from a person with the admin role.
pub(crate) struct Admin<T>(pub(crate) SignedForm<T>);

impl<T: DeserializeOwned + Refusal + Send> FromRequest<Console> for Approver<T> {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Console) -> Result<Self, Response> {
        with_role(request, console, Session::approver).await.map(Approver)
    }
}

impl<T: DeserializeOwned + Refusal + Send> FromRequest<Console> for Admin<T> {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Console) -> Result<Self, Response> {
        with_role(request, console, Session::admin).await.map(Admin)
    }
}

/// The signed form, if its sender has the role `has` checks; the CSRF token
/// is checked first, as the handlers did.
async fn with_role<T: DeserializeOwned + Refusal + Send>(
    request: Request,
    console: &Console,
    has: fn(&Session) -> bool,
) -> Result<SignedForm<T>, Response> {
    let (mut parts, body) = request.into_parts();
    let form = SignedForm::<T>::from_parts(&mut parts, body, console).await?;
    if !has(&form.signed.session) {
        return Err(T::refusal(&console.gw, &form.signed, &mut parts).await);
    }
    Ok(form)
}

/// A request from an allowed `Host` and `Origin`, signed in or not.
pub(crate) struct Allowed;

impl FromRequestParts<Console> for Allowed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        host_and_origin(&console.gw, &parts.headers).map(|_| Allowed)
    }
}

/// The sign-in form `T`, whose field `form` must match the cookie set with
/// the form: a sign-in another site made the browser send is refused
/// (403, the form to reload), and nobody is signed in.
pub(crate) struct SignInForm<T>(pub(crate) T);

/// The sign-in form as sent: its double-submit token, and `T`'s fields.
#[derive(Deserialize)]
struct WithFormToken<T> {
    #[serde(default)]
    form: String,
    #[serde(flatten)]
    fields: T,
}

impl<T: DeserializeOwned + Send> FromRequest<Console> for SignInForm<T> {
    type Rejection = Response;

    /// The form is read first, then its origin, then its token: the order
    /// the handler checked them in, so each refusal is the one it gave.
    async fn from_request(request: Request, console: &Console) -> Result<Self, Response> {
        let headers = request.headers().clone();
        let Form(WithFormToken { form, fields }) =
            Form::<WithFormToken<T>>::from_request(request, console)
                .await
                .map_err(IntoResponse::into_response)?;
        host_and_origin(&console.gw, &headers)?;
        if !cookie(&headers, FORM_COOKIE).is_some_and(|c| same_secret(c, &form))
            || header_str(&headers, "sec-fetch-site") == Some("cross-site")
        {
            return Err(sign_in_refused(
                StatusCode::FORBIDDEN,
                "The sign-in form expired or did not come from this console. Reload it and sign in again.",
            ));
        }
        Ok(SignInForm(fields))
    }
}

/// A sign-in refused: why, and the way back to the form.
pub(crate) fn sign_in_refused(status: StatusCode, text: &str) -> Response {
    let body = maud::html! { (page::notice(false, text)) p { a href="/console/signin" { "Back to sign-in" } } };
    page::bare(status, "Not signed in", body)
}

/// The one path parameter of a form's route (an approval's id, a tool's name).
pub(crate) async fn path_param(parts: &mut Parts) -> String {
    axum::extract::Path::<String>::from_request_parts(parts, &())
        .await
        .map(|p| p.0)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
