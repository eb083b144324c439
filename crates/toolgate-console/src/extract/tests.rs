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
            Gateway::start_with(config, Mode::Inspect, sources).await.expect("the gateway starts"),
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
    let ok = SignedForm::<Note>::from_request(post(&id, &format!("csrf={csrf}&note=hi"), None), &c)
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
        SignedForm::<Note>::from_request(post(&id, &body, Some("https://evil.example")), &c).await,
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
        refusal(SignedForm::<Note>::from_request(post("tgs_made_up", &body, None), &c).await).await;
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
        let as_admin = refusal(Admin::<Note>::from_request(post(&id, &form, None), &c).await).await;
        assert_eq!(as_admin, if admins { None } else { no_role.clone() }, "{roles:?} as an admin");
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
