//! Level 3: signing in to the console with an OAuth 2.1 access token, end
//! to end. The harness gateway (the gateway tests' own) trusts a real
//! authorization server on loopback (their `issuer.rs`), the console is
//! served beside `/mcp` as `toolgate serve` has it, and the sign-in form is
//! posted the way a browser does. A token with the approver scope opens a
//! session that shows the approvals; a token without the role is refused
//! (403), an expired one too (401), neither with a session; no answer ever
//! carries a token back.

#[path = "../../toolgate-gateway/tests/common.rs"]
mod common;
#[path = "../../toolgate-gateway/tests/issuer.rs"]
mod issuer;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use reqwest::redirect::Policy;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolgate_console::Console;

use issuer::{RESOURCE, authorization_server, oauth_config, signer, token};

/// An answer as a browser sees it: its status, the value of the session
/// cookie it sets (if it does), and all of its headers and body as text.
struct Seen {
    status: StatusCode,
    session: Option<String>,
    text: String,
}

async fn seen(r: reqwest::Response) -> Seen {
    let mut text = String::new();
    let mut session = None;
    for (name, value) in r.headers() {
        let value = String::from_utf8_lossy(value.as_bytes());
        if name == "set-cookie" {
            session = session.or_else(|| {
                value
                    .split(';')
                    .next()
                    .and_then(|c| c.strip_prefix("toolgate_session="))
                    .map(str::to_string)
            });
        }
        text.push_str(&format!("{name}: {value}\n"));
    }
    let status = r.status();
    text.push_str(&r.text().await.unwrap());
    Seen { status, session, text }
}

/// Fetches the sign-in form (its cookie) and posts `token` with it: both answers.
async fn sign_in(base: &str, token: &str) -> [Seen; 2] {
    let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
    let form = http.get(format!("{base}/console/signin")).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let cookie =
        form.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let field =
        cookie.strip_prefix("toolgate_signin=").expect("the form sets its cookie").to_string();
    let posted = http
        .post(format!("{base}/console/signin"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("form={field}&token={token}"))
        .send()
        .await
        .unwrap();
    [seen(form).await, seen(posted).await]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approvers_access_token_signs_in_and_no_other_token_does() {
    let cancel = CancellationToken::new();
    let key = signer("k1");
    let jwks = Arc::new(Mutex::new(json!({"keys": [key.jwk.clone()]})));
    let issuer = authorization_server(jwks, Arc::new(AtomicUsize::new(0)), &cancel).await;
    let h = common::start_beside("", &oauth_config(&issuer), &[], "", |gw| {
        Console::new(gw).unwrap().beside_mcp()
    })
    .await;
    let base = h.url.trim_end_matches("/mcp").to_string();
    let approver = token(&key, &issuer, RESOURCE, "mcp toolgate:approve", 300, -10);
    let plain = token(&key, &issuer, RESOURCE, "mcp", 300, -10);
    let expired = token(&key, &issuer, RESOURCE, "mcp toolgate:approve", -120, -600);
    let mut answers = Vec::new();

    // The approver's token: a session, and with it the approvals.
    let [form, signed] = sign_in(&base, &approver).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.text);
    assert!(signed.text.contains("location: /console/approvals\n"), "{}", signed.text);
    let session = signed.session.clone().unwrap_or_default();
    assert!(session.starts_with("tgs_"), "no session cookie: {}", signed.text);
    let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
    let page = seen(
        http.get(format!("{base}/console/approvals"))
            .header("cookie", format!("toolgate_session={session}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    answers.extend([form, signed, page]);

    // A valid token without the approver role, and an expired approver's: refused, no session.
    for (what, bad, status) in [
        ("without the approver role", &plain, StatusCode::FORBIDDEN),
        ("expired", &expired, StatusCode::UNAUTHORIZED),
    ] {
        let [form, refused] = sign_in(&base, bad).await;
        assert_eq!(refused.status, status, "{what}: {}", refused.text);
        assert_eq!(refused.session, None, "{what}: a session was opened");
        answers.extend([form, refused]);
    }

    // No header or body of any answer carries a token back.
    for answer in &answers {
        for t in [&approver, &plain, &expired] {
            assert!(!answer.text.contains(t.as_str()), "a token is echoed in:\n{}", answer.text);
        }
    }
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_when_the_token_that_opened_it_does() {
    let cancel = CancellationToken::new();
    let key = signer("k1");
    let jwks = Arc::new(Mutex::new(json!({"keys": [key.jwk.clone()]})));
    let issuer = authorization_server(jwks, Arc::new(AtomicUsize::new(0)), &cancel).await;
    let config = oauth_config(&issuer)
        .replace("jwks_refresh_min_ms = 0\n", "jwks_refresh_min_ms = 0\nleeway_s = 0\n");
    let h = common::start_beside("", &config, &[], "", |gw| Console::new(gw).unwrap().beside_mcp())
        .await;
    let base = h.url.trim_end_matches("/mcp").to_string();
    let short = token(&key, &issuer, RESOURCE, "mcp toolgate:approve", 2, -10);
    let [_, signed] = sign_in(&base, &short).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.text);
    let max_age: u64 = signed
        .text
        .split("Max-Age=")
        .nth(1)
        .map(|r| r.chars().take_while(char::is_ascii_digit).collect::<String>())
        .and_then(|n| n.parse().ok())
        .expect("a Max-Age");
    assert!(max_age <= 3, "the cookie outlives the token: Max-Age={max_age}");
    let session = signed.session.unwrap();
    let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
    let page = |http: reqwest::Client| {
        let (base, session) = (base.clone(), session.clone());
        async move {
            http.get(format!("{base}/console/approvals"))
                .header("cookie", format!("toolgate_session={session}"))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(page(http.clone()).await, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    // The token is refused now at the API; the session it opened is over too.
    let (status, _) = common::admin(&h.url, Some(&short), "GET", "/admin/approvals", None).await;
    assert_eq!(status, 401);
    assert_eq!(page(http).await, StatusCode::SEE_OTHER, "the session outlived its token");
    cancel.cancel();
}
