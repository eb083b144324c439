//! `mode = "oauth"`'s protocol core (`identity::oauth_client`) against real
//! parts: `oidc-provider` (npm), the certified OpenID Provider, started by
//! tests/oidc/provider.mjs, and the whoami MCP server written with the
//! official Python SDK in OAuth mode (tests/python/whoami_server.py), which
//! verifies the access tokens it gets with PyJWT against the provider's keys.
//!
//! Discovery from whoami's 401, dynamic registration, the code flow with
//! PKCE and `resource` — signing in and consenting by posting the
//! provider's own forms, as a browser would, and stopping at the redirect
//! to the callback —, a call as the person, refresh with rotation, and
//! revocation. Then discovery's fallbacks and refusals on the wire, against
//! a hostile server in process.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use toolgate_core::SystemEntropy;
use toolgate_gateway::identity::oauth_client::{
    self, AuthMethod, Client, Discovered, Pkce, TokenKind, TokenSet,
};

use common::{python, workspace};

/// The provider's preconfigured client (provider.mjs's default).
const CLIENT: (&str, &str) = ("toolgate", "toolgate-secret");
/// The access tokens' life: short, so that one expires within the test.
const ACCESS_TTL_S: i64 = 2;
/// whoami's clock leeway (PyJWT's `leeway`, whoami_server.py's LEEWAY).
const WHOAMI_LEEWAY_MS: i64 = 5_000;

/// A peer that prints `listening on URL` on stdout and lives while its
/// stdin, held here, is open.
struct Peer {
    _child: Child,
    _stdin: ChildStdin,
    url: String,
}

async fn peer(mut cmd: Command, log: &Path) -> Peer {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
    let Ok(Ok(Some(line))) = ready else {
        panic!(
            "{} printed no ready line ({ready:?}):\n{}",
            log.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
    };
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not a ready line: {line}"))
        .trim()
        .to_string();
    // Drained, so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Peer { _child: child, _stdin: stdin, url }
}

/// oidc-provider, its packages installed first if they are not.
async fn provider(dir: &Path) -> Peer {
    let oidc = workspace().join("tests/oidc");
    if !oidc.join("node_modules/oidc-provider").is_dir() {
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&oidc)
            .status()
            .unwrap();
        assert!(status.success(), "npm ci in tests/oidc failed");
    }
    let mut cmd = Command::new("node");
    cmd.arg(oidc.join("provider.mjs")).args([
        "--port",
        "0",
        "--access-ttl",
        &ACCESS_TTL_S.to_string(),
        "--client",
        &format!("{}:{}", CLIENT.0, CLIENT.1),
    ]);
    peer(cmd, &dir.join("provider.log")).await
}

async fn whoami_server(issuer: &str, dir: &Path) -> Peer {
    let mut cmd = Command::new(python());
    cmd.arg(workspace().join("tests/python/whoami_server.py")).args([
        "--port",
        "0",
        "--issuer",
        issuer,
        "--stateless",
    ]);
    peer(cmd, &dir.join("whoami.log")).await
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The client toolgate would use: no redirects followed.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A browser's cookies, by hand (reqwest's cookie store is a feature this
/// build leaves off): by name and path, sent where the path matches.
#[derive(Default)]
struct Jar(HashMap<(String, String), String>);

impl Jar {
    fn keep(&mut self, response: &reqwest::Response) {
        for set in response.headers().get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
            let mut parts = set.split(';').map(str::trim);
            let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else {
                continue;
            };
            // Attribute names are case-insensitive; a path is not.
            let attributes: Vec<(String, &str)> = parts
                .map(|a| a.split_once('=').unwrap_or((a, "")))
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect();
            let path =
                attributes.iter().find(|(k, _)| k == "path").map_or("/", |(_, v)| v).to_string();
            let gone = value.is_empty()
                || attributes.iter().any(|(k, v)| k == "expires" && v.contains("1970"));
            let key = (name.to_string(), path);
            if gone {
                self.0.remove(&key);
            } else {
                self.0.insert(key, value.to_string());
            }
        }
    }

    fn header(&self, url: &Url) -> String {
        self.0
            .iter()
            .filter(|((_, path), _)| url.path().starts_with(path.as_str()))
            .map(|((name, _), value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Signs in as `login` and consents, through the provider's pages, then
/// redeems the code the callback got: what a person's browser and
/// toolgate's callback do, without either.
async fn sign_in(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Client,
    redirect_uri: &str,
    login: &str,
) -> TokenSet {
    let pkce = Pkce::new(&SystemEntropy::default());
    let state = format!("state-of-{login}");
    let mut url = Url::parse(&oauth_client::authorization_url(
        d,
        client,
        redirect_uri,
        &d.resource,
        d.scope().as_deref(),
        &state,
        &pkce,
    ))
    .unwrap();
    let mut jar = Jar::default();
    let mut form: Option<String> = None;
    let mut pages = Vec::new();
    for _ in 0..12 {
        let request = match form.take() {
            Some(body) => http
                .post(url.clone())
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body),
            None => http.get(url.clone()),
        };
        let response = request.header("cookie", jar.header(&url)).send().await.unwrap();
        jar.keep(&response);
        if response.status().is_redirection() {
            let location = response.headers()["location"].to_str().unwrap().to_string();
            if let Some(query) = location.strip_prefix(&format!("{redirect_uri}?")) {
                let got = oauth_client::callback(d, query).unwrap();
                assert_eq!(got.state, state, "the state comes back unchanged");
                assert_eq!(pages, ["login", "consent"], "{login} signed in and consented");
                return oauth_client::redeem(
                    http,
                    d,
                    client,
                    &got.code,
                    &pkce,
                    redirect_uri,
                    &d.resource,
                    now_ms(),
                )
                .await
                .unwrap();
            }
            url = url.join(&location).unwrap();
            continue;
        }
        let page = response.text().await.unwrap();
        let action = page
            .split("action=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("not a form page: {page}"));
        let (name, body) = if page.contains(r#"id="login-form""#) {
            ("login", format!("login={login}"))
        } else if page.contains(r#"id="consent-form""#) {
            ("consent", String::new())
        } else {
            panic!("neither the login nor the consent page: {page}")
        };
        pages.push(name);
        form = Some(body);
        url = url.join(action).unwrap();
    }
    panic!("the authorization did not reach the callback in 12 steps");
}

/// `tools/call whoami` with `token`, as plain JSON-RPC: the status, and
/// the structured result when there is one.
async fn whoami(http: &reqwest::Client, url: &str, token: &str) -> (StatusCode, Value) {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}});
    let response = http
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    // One JSON answer, or an SSE stream whose `data:` line holds it.
    let json = body.lines().find_map(|l| l.strip_prefix("data:")).unwrap_or(&body);
    let answer: Value = serde_json::from_str(json.trim()).unwrap_or(Value::Null);
    (status, answer["result"]["structuredContent"].clone())
}

/// Whether the provider still takes `token` (RFC 7662, as the preconfigured client).
async fn active(http: &reqwest::Client, issuer: &str, token: &str) -> bool {
    let metadata: Value = http
        .get(format!("{issuer}/.well-known/openid-configuration"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let endpoint = metadata["introspection_endpoint"].as_str().unwrap();
    let form = format!("token={token}");
    let answer: Value = http
        .post(endpoint)
        .basic_auth(CLIENT.0, Some(CLIENT.1))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["active"] == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_client_signs_a_person_in_at_the_servers_own_authorization_server() {
    let dir = tempfile::tempdir().unwrap();
    let provider = provider(dir.path()).await;
    let server = whoami_server(&provider.url, dir.path()).await;
    let http = http();

    // RFC 9728 from whoami's 401, then RFC 8414 at the provider.
    let d = oauth_client::discover(&http, &server.url).await.unwrap();
    assert_eq!(
        (d.resource.as_str(), d.issuer.as_str()),
        (server.url.as_str(), provider.url.as_str()),
        "{d:?}"
    );
    assert!(
        d.token_endpoint.starts_with(&provider.url)
            && d.authorization_endpoint.starts_with(&provider.url),
        "{d:?}"
    );
    assert!(d.registration_endpoint.is_some() && d.revocation_endpoint.is_some(), "{d:?}");
    assert!(d.scopes.is_empty(), "whoami lists no scopes: {d:?}");
    assert!(!d.client_id_metadata_document_supported, "started without --cimd: {d:?}");
    assert!(d.iss_parameter_supported, "RFC 9207: the callback's iss is checked: {d:?}");

    // RFC 7591: a confidential client, the provider offering client_secret_basic.
    let redirect_uri = "http://127.0.0.1:9/oauth/callback";
    let client = oauth_client::register(&http, &d, redirect_uri, "toolgate (oauth_client test)")
        .await
        .unwrap();
    assert_eq!(client.auth, AuthMethod::ClientSecretBasic, "{client:?}");
    assert!(client.client_secret.is_some());

    // The code flow as alice; whoami sees alice.
    let alice = sign_in(&http, &d, &client, redirect_uri, "alice").await;
    let (status, who) = whoami(&http, &server.url, &alice.access_token).await;
    assert_eq!((status, &who["sub"]), (StatusCode::OK, &json!("alice")), "{who}");
    let expires_at_ms = alice.expires_at_ms.expect("expires_in");
    assert!((expires_at_ms - now_ms()).abs() <= ACCESS_TTL_S * 1000 + 1000, "{alice:?}");
    let old_refresh = alice.refresh_token.clone().expect("a refresh token");
    let shown = format!("{alice:?}");
    assert!(!shown.contains(&alice.access_token) && !shown.contains(&old_refresh), "{shown}");

    // Revocation (RFC 7009), on bob's grant through the preconfigured client
    // (alice's is spent below: a reused refresh token revokes its grant).
    let configured = Client::configured(CLIENT.0, Some(CLIENT.1), &d).unwrap();
    let bob = sign_in(&http, &d, &configured, "http://127.0.0.1:4567/oauth/callback", "bob").await;
    assert_eq!(whoami(&http, &server.url, &bob.access_token).await.1["sub"], "bob");
    let bob_refresh = bob.refresh_token.clone().unwrap();
    assert!(active(&http, &provider.url, &bob_refresh).await, "bob's refresh token, before");
    oauth_client::revoke(&http, &d, &configured, &bob_refresh, TokenKind::Refresh).await.unwrap();
    assert!(!active(&http, &provider.url, &bob_refresh).await, "bob's refresh token, revoked");
    let refused =
        oauth_client::refresh(&http, &d, &configured, &bob_refresh, Some(&d.resource), now_ms())
            .await
            .unwrap_err();
    assert!(refused.contains("invalid_grant") && !refused.contains(&bob_refresh), "{refused}");

    // alice's access token expires (and whoami's leeway passes): refused.
    tokio::time::sleep(Duration::from_millis(
        (expires_at_ms + WHOAMI_LEEWAY_MS + 500 - now_ms()).max(0) as u64,
    ))
    .await;
    let (status, _) = whoami(&http, &server.url, &alice.access_token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "an expired access token");

    // Refresh: a new access token, and a rotated refresh token.
    let fresh =
        oauth_client::refresh(&http, &d, &client, &old_refresh, Some(&d.resource), now_ms())
            .await
            .unwrap();
    let new_refresh = fresh.refresh_token.clone().unwrap();
    assert_ne!(new_refresh, old_refresh, "rotated");
    assert_ne!(fresh.access_token, alice.access_token);
    assert_eq!(whoami(&http, &server.url, &fresh.access_token).await.1["sub"], "alice");

    // The spent one is refused on reuse, and the refusal names no token.
    let reused =
        oauth_client::refresh(&http, &d, &client, &old_refresh, Some(&d.resource), now_ms())
            .await
            .unwrap_err();
    assert!(reused.contains("invalid_grant") && !reused.contains(&old_refresh), "{reused}");
}

/// A hostile MCP server in process: its 401 names no metadata (`/a`), or
/// names metadata whose authorization server is someone else's (`/b`), or
/// metadata behind a redirect (`/c`), or an authorization server that
/// answers too much (`/d`).
async fn hostile() -> String {
    use axum::http::{HeaderMap, StatusCode as S, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let challenge = |path: &str| {
        let named = format!(
            "Basic realm=\"x\", Bearer error=\"invalid_request\", resource_metadata=\"{base}{path}\""
        );
        move || {
            let named = named.clone();
            async move { (S::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, named)]).into_response() }
        }
    };
    let json = |value: Value| {
        move || {
            let value = value.clone();
            async move { axum::Json(value).into_response() }
        }
    };
    let as_metadata = |issuer: String| {
        json!({"issuer": issuer, "authorization_endpoint": format!("{base}/auth"), "token_endpoint": format!("{base}/token"),
               "code_challenge_methods_supported": ["S256"], "response_types_supported": ["code"]})
    };
    let prm = |resource: &str, server: &str| json!({"resource": format!("{base}{resource}"), "authorization_servers": [format!("{base}{server}")], "scopes_supported": ["tickets.read"]});
    let router = axum::Router::new()
        .route("/a/mcp", post(|| async { S::UNAUTHORIZED.into_response() }))
        .route("/.well-known/oauth-protected-resource/a/mcp", get(json(prm("/a/mcp", "/as-a"))))
        .route(
            "/.well-known/oauth-authorization-server/as-a",
            get(json(as_metadata(format!("{base}/as-a")))),
        )
        .route("/b/mcp", post(challenge("/prm-b")))
        .route("/prm-b", get(json(prm("/b/mcp", "/as-b"))))
        .route(
            "/.well-known/oauth-authorization-server/as-b",
            get(json(as_metadata(format!("{base}/evil")))),
        )
        .route("/c/mcp", post(challenge("/prm-c")))
        .route(
            "/prm-c",
            get(|| async {
                let mut h = HeaderMap::new();
                h.insert(header::LOCATION, "http://169.254.169.254/".parse().unwrap());
                (S::FOUND, h).into_response()
            }),
        )
        .route("/d/mcp", post(challenge("/prm-d")))
        .route("/prm-d", get(json(prm("/d/mcp", "/as-d"))))
        .route(
            "/.well-known/oauth-authorization-server/as-d",
            get(|| async { Response::new(axum::body::Body::from(vec![b' '; 100_000])) }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

#[tokio::test]
async fn oauth_client_discovery_falls_back_and_refuses_what_it_must() {
    let base = hostile().await;
    let http = http();

    // No resource_metadata in the 401: the well-known URL, path suffix first.
    let d = oauth_client::discover(&http, &format!("{base}/a/mcp")).await.unwrap();
    assert_eq!(
        (d.resource, d.issuer, d.scopes),
        (format!("{base}/a/mcp"), format!("{base}/as-a"), vec!["tickets.read".to_string()])
    );

    // Metadata of another issuer: a mix-up, refused.
    let e = oauth_client::discover(&http, &format!("{base}/b/mcp")).await.unwrap_err();
    assert!(e.contains("mix-up") && e.contains("/evil"), "{e}");

    // A redirect is not followed.
    let e = oauth_client::discover(&http, &format!("{base}/c/mcp")).await.unwrap_err();
    assert!(e.contains("redirect") && !e.contains("169.254"), "{e}");

    // An answer past the bound is not read.
    let e = oauth_client::discover(&http, &format!("{base}/d/mcp")).await.unwrap_err();
    assert!(e.contains("over 65536 bytes"), "{e}");
}
