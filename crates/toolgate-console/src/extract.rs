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
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::header;
    use toolgate_core::{Caller, FixedClock, SeededEntropy};
    use toolgate_gateway::config::Config;
    use toolgate_gateway::gateway::{Mode, Sources};

    use super::*;

    /// A console over a gateway with no upstreams, on a fixed clock; its
    /// state in the folder returned with it.
    async fn console() -> (tempfile::TempDir, Console) {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::parse("", &dir.path().join("toolgate.toml")).expect("a valid config");
        let sources = Sources {
            clock: Arc::new(FixedClock::new(1_780_000_000_000)),
            entropy: Arc::new(SeededEntropy::new([5; 32])),
        };
        (
            dir,
            Console::new(
                Gateway::start_with(config, Mode::Inspect, sources)
                    .await
                    .expect("the gateway starts"),
            )
            .expect("the default [console]"),
        )
    }

    /// A session for a caller with `roles`: (its cookie's value, its CSRF token).
    async fn session(c: &Console, roles: &[&str]) -> (String, String) {
        let caller = Arc::new(Caller {
            name: "dana".into(),
            subject: "dana@atlas.example".into(),
            tenant: "atlas".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        });
        let (id, s) = crate::session::open(&c.gw, caller, c.gw.clock.now_ms(), 60_000)
            .await
            .expect("the ledger opens a session");
        (id, s.csrf)
    }

    /// A form post to `/console/operations/op_1/resolve` from `origin` (if any).
    fn post(cookie: &str, body: &str, origin: Option<&str>) -> Request {
        let mut r = Request::builder()
            .method("POST")
            .uri("/console/operations/op_1/resolve")
            .header(header::HOST, "127.0.0.1:8765")
            .header(header::COOKIE, format!("toolgate_session={cookie}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(o) = origin {
            r = r.header(header::ORIGIN, o);
        }
        r.body(Body::from(body.to_string())).unwrap()
    }

    async fn text(r: Response) -> (StatusCode, String) {
        let status = r.status();
        (
            status,
            String::from_utf8(axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap().to_vec())
                .unwrap(),
        )
    }

    /// How an extraction was refused, if it was.
    async fn refusal<T>(extracted: Result<T, Response>) -> Option<(StatusCode, String)> {
        match extracted {
            Ok(_) => None,
            Err(r) => Some(text(r).await),
        }
    }

    #[derive(Deserialize)]
    struct Note {
        #[serde(default)]
        note: String,
    }

    /// A form that needs a role, refused with a mark of its own.
    impl Refusal for Note {
        async fn refusal(_: &Gateway, signed: &Signed, _: &mut Parts) -> Response {
            plain(StatusCode::FORBIDDEN, &format!("no role for {}", signed.session.caller.name))
        }
    }

    #[tokio::test]
    async fn a_signed_form_needs_the_session_s_own_csrf_token() {
        let (_dir, c) = console().await;
        let (id, csrf) = session(&c, &["approver"]).await;
        let (_, other) = session(&c, &["approver"]).await;
        let ok =
            SignedForm::<Note>::from_request(post(&id, &format!("csrf={csrf}&note=hi"), None), &c)
                .await
                .expect("the session's own token passes");
        assert_eq!((ok.form.note.as_str(), ok.signed.id.as_str()), ("hi", id.as_str()));
        for forged in [
            "note=hi".to_string(),
            format!("csrf={other}&note=hi"),
            "csrf=&note=hi".to_string(),
            format!("csrf={csrf}x"),
        ] {
            let (status, body) =
                refusal(SignedForm::<Note>::from_request(post(&id, &forged, None), &c).await)
                    .await
                    .expect("a forged form passed");
            assert_eq!(status, StatusCode::FORBIDDEN, "{forged}");
            assert!(
                body.starts_with("the form's CSRF token is missing or stale; nothing was changed"),
                "{body}"
            );
        }
    }

    #[tokio::test]
    async fn a_signed_form_needs_an_allowed_origin_and_a_live_session() {
        let (_dir, c) = console().await;
        let (id, csrf) = session(&c, &["approver"]).await;
        let body = format!("csrf={csrf}&note=hi");
        let foreign = refusal(
            SignedForm::<Note>::from_request(post(&id, &body, Some("https://evil.example")), &c)
                .await,
        )
        .await;
        assert_eq!(
            foreign,
            Some((
                StatusCode::FORBIDDEN,
                "Origin not allowed; add it to gateway.allowed_origins".to_string()
            ))
        );
        assert!(
            SignedForm::<Note>::from_request(post(&id, &body, Some("http://127.0.0.1:8765")), &c)
                .await
                .is_ok(),
            "the console's own origin"
        );
        let mut cross = post(&id, &body, None);
        cross.headers_mut().insert("sec-fetch-site", "cross-site".parse().unwrap());
        let cross = refusal(SignedForm::<Note>::from_request(cross, &c).await).await;
        assert_eq!(cross.map(|r| r.0), Some(StatusCode::FORBIDDEN), "a cross-site post");
        let unknown =
            refusal(SignedForm::<Note>::from_request(post("tgs_made_up", &body, None), &c).await)
                .await;
        assert_eq!(unknown.map(|r| r.0), Some(StatusCode::UNAUTHORIZED), "no session");
    }

    #[tokio::test]
    async fn a_role_s_form_refuses_whoever_lacks_the_role_after_its_token() {
        let (_dir, c) = console().await;
        let no_role = Some((StatusCode::FORBIDDEN, "no role for dana".to_string()));
        for (roles, approves, admins) in
            [(["approver"], true, false), (["admin"], false, true), (["agent"], false, false)]
        {
            let (id, csrf) = session(&c, &roles).await;
            let form = format!("csrf={csrf}&note=hi");
            let as_approver =
                refusal(Approver::<Note>::from_request(post(&id, &form, None), &c).await).await;
            assert_eq!(
                as_approver,
                if approves { None } else { no_role.clone() },
                "{roles:?} as an approver"
            );
            let as_admin =
                refusal(Admin::<Note>::from_request(post(&id, &form, None), &c).await).await;
            assert_eq!(
                as_admin,
                if admins { None } else { no_role.clone() },
                "{roles:?} as an admin"
            );
        }
        // The token is checked first: a forged form is refused as forged, whoever sends it.
        let (agent, _) = session(&c, &["agent"]).await;
        let (status, said) =
            refusal(Approver::<Note>::from_request(post(&agent, "note=hi", None), &c).await)
                .await
                .expect("a forged form passed");
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(said.starts_with("the form's CSRF token"), "{said}");
    }

    #[derive(Deserialize)]
    struct Token {
        token: String,
    }

    /// A sign-in post carrying `form`, with the form cookie `set` (if any).
    fn sign_in(form: &str, set: Option<&str>) -> Request {
        let mut r = Request::builder()
            .method("POST")
            .uri("/console/signin")
            .header(header::HOST, "127.0.0.1:8765")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(value) = set {
            r = r.header(header::COOKIE, format!("{FORM_COOKIE}={value}"));
        }
        r.body(Body::from(format!("form={form}&token=t0ken"))).unwrap()
    }

    #[tokio::test]
    async fn a_sign_in_needs_the_token_of_the_cookie_set_with_its_form() {
        let (_dir, c) = console().await;
        let SignInForm(ok) = SignInForm::<Token>::from_request(sign_in("sif_1", Some("sif_1")), &c)
            .await
            .expect("the form's own token passes");
        assert_eq!(ok.token, "t0ken");
        for (form, set) in [("sif_1", None), ("sif_1", Some("sif_2")), ("", Some("")), ("", None)] {
            let (status, page) =
                refusal(SignInForm::<Token>::from_request(sign_in(form, set), &c).await)
                    .await
                    .expect("a forged sign-in passed");
            assert_eq!(status, StatusCode::FORBIDDEN, "{form:?} {set:?}");
            assert!(
                page.contains("The sign-in form expired or did not come from this console"),
                "{page}"
            );
        }
        let mut cross = sign_in("sif_1", Some("sif_1"));
        cross.headers_mut().insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert_eq!(
            refusal(SignInForm::<Token>::from_request(cross, &c).await).await.map(|r| r.0),
            Some(StatusCode::FORBIDDEN),
            "a cross-site sign-in"
        );
        let mut foreign = sign_in("sif_1", Some("sif_1"));
        foreign.headers_mut().insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        let foreign = refusal(SignInForm::<Token>::from_request(foreign, &c).await).await;
        assert_eq!(
            foreign,
            Some((
                StatusCode::FORBIDDEN,
                "Origin not allowed; add it to gateway.allowed_origins".to_string()
            ))
        );
    }

    #[tokio::test]
    async fn an_agent_only_session_cannot_settle_an_operation() {
        let (_dir, c) = console().await;
        let (agent, csrf) = session(&c, &["agent"]).await;
        let settled = Approver::<crate::operations::Act>::from_request(
            post(&agent, &format!("csrf={csrf}&applied=yes&reason=r"), None),
            &c,
        )
        .await;
        let (status, page) = refusal(settled).await.expect("an agent settled");
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(
            page.contains("Settling an operation needs the approver role; nothing changed."),
            "{page}"
        );
    }
}
