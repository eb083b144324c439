//! Level 3: the gateway as an OAuth 2.1 resource server, against a real
//! authorization server process on loopback (`issuer.rs`: RFC 8414 metadata
//! and a JWKS that can be rotated) and JWTs signed with real Ed25519 keys.
//! A valid token admits its caller (claims and scopes mapped as `[oauth]`
//! says), also for the official Python SDK in both eras; a wrong audience,
//! an expired token, `alg: none`, a key-confusion HS256 token and a retired
//! key are refused with a 401 that points at the resource metadata; a
//! rotated key is picked up; the caller's token never reaches the upstream.

mod common;
mod issuer;

use std::borrow::Cow;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};

use common::{DANA_TOKEN, python, request, serve_gateway, workspace, write_tokens};
use issuer::{RESOURCE, authorization_server, now, oauth_config, signer, token};

/// One tool, `whoami`; remembers every `Authorization` header it was sent.
#[derive(Clone)]
struct Upstream;

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool =
            serde_json::from_value(json!({"name": "whoami", "inputSchema": {"type": "object"}}))
                .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }
    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]).into())
    }
}

async fn serve_upstream(seen: Arc<Mutex<Vec<String>>>, cancel: &CancellationToken) -> String {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let config = StreamableHttpServerConfig::default().with_cancellation_token(cancel.clone());
    let service: StreamableHttpService<Upstream, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(Upstream), Default::default(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router =
        axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let seen = seen.clone();
                async move {
                    if let Some(v) =
                        request.headers().get("authorization").and_then(|v| v.to_str().ok())
                    {
                        seen.lock().unwrap().push(v.to_string());
                    }
                    next.run(request).await
                }
            },
        ));
    let stop = cancel.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await
    });
    format!("http://{addr}/mcp")
}

/// (status, `WWW-Authenticate`, body) of a `tools/list` with `token`.
async fn list_with(url: &str, token: Option<&str>) -> (u16, String, String) {
    let mut req = request(url, json!(1), "tools/list", json!({}));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, challenge, resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_tokens_of_the_authorization_server_admit_their_caller_and_nothing_else_does() {
    let cancel = CancellationToken::new();
    let (k1, k2) = (signer("k1"), signer("k2"));
    let jwks = Arc::new(Mutex::new(json!({"keys": [k1.jwk.clone()]})));
    let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let issuer = authorization_server(jwks.clone(), fetches.clone(), &cancel).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = serve_upstream(seen.clone(), &cancel).await;
    let dir = tempfile::tempdir().unwrap();
    write_tokens(dir.path());
    let config = format!(
        r#"[gateway]
state_dir = "state"
[servers.lab]
url = "{upstream}"
[registry."lab__whoami"]
class = "automatic"
read_only = true
[callers.dana]
tenant = "atlas"
roles = ["approver"]
token_file = "dana.token"
{oauth}"#,
        oauth = oauth_config(&issuer)
    );
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    let gateway = Gateway::start(Config::load(&path).unwrap(), Mode::Serve).await.unwrap();
    assert!(gateway.wait_ready(Duration::from_secs(10)).await.is_empty());
    let (url, stop) = serve_gateway(gateway.clone()).await;
    let base = url.trim_end_matches("/mcp").to_string();
    let metadata_url = "http://gateway.test/.well-known/oauth-protected-resource/mcp";

    // No token: 401 pointing at the metadata, which names the issuer.
    let (status, challenge, _) = list_with(&url, None).await;
    assert_eq!(status, 401);
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata_url}\""));
    for path in
        ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
    {
        let meta: Value =
            reqwest::get(format!("{base}{path}")).await.unwrap().json().await.unwrap();
        assert_eq!(meta["resource"], RESOURCE);
        assert_eq!(meta["authorization_servers"], json!([issuer]));
        assert_eq!(meta["scopes_supported"], json!(["mcp", "toolgate:approve"]));
    }

    // A valid token: its caller is admitted; the static tokens still work.
    let alice = token(&k1, &issuer, RESOURCE, "mcp", 300, -10);
    let (status, _, body) = list_with(&url, Some(&alice)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("lab__whoami"), "{body}");
    assert_eq!(list_with(&url, Some(DANA_TOKEN)).await.0, 200);

    // Refused, each with the reason in the challenge and the metadata link.
    let forged_none = format!("{}.{}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#), URL_SAFE_NO_PAD.encode(json!({"iss": issuer, "aud": RESOURCE, "sub": "mallory", "tenant": "atlas", "scope": "mcp", "exp": now() + 300}).to_string()));
    // HS256 "signed" with the public key, as if it were a shared secret.
    let confused = {
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("k1".into());
        let claims = json!({"iss": issuer, "aud": RESOURCE, "sub": "mallory", "tenant": "atlas", "scope": "mcp", "exp": now() + 300});
        jsonwebtoken::encode(
            &h,
            &claims,
            &EncodingKey::from_secret(k1.jwk["x"].as_str().unwrap().as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let refused: [(&str, Cow<str>, &str); 6] = [
        (
            "wrong audience",
            token(&k1, &issuer, "http://other.test/mcp", "mcp", 300, -10).into(),
            "aud",
        ),
        ("expired", token(&k1, &issuer, RESOURCE, "mcp", -120, -600).into(), "expired"),
        ("not yet valid", token(&k1, &issuer, RESOURCE, "mcp", 900, 600).into(), "nbf"),
        ("another issuer", token(&k1, "http://evil.test", RESOURCE, "mcp", 300, -10).into(), "iss"),
        ("alg none", forged_none.into(), "not a JWT access token"),
        ("HS256 with the public key", confused.into(), "HS256"),
    ];
    for (what, bad, why) in &refused {
        let (status, challenge, body) = list_with(&url, Some(bad)).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(
            challenge.starts_with(&format!(
                "Bearer resource_metadata=\"{metadata_url}\", error=\"invalid_token\""
            )),
            "{what}: {challenge}"
        );
        assert!(body.contains(why), "{what}: {body}");
        assert!(
            !body.contains(bad.as_ref()) && !challenge.contains(bad.as_ref()),
            "{what}: the token is echoed"
        );
    }
    // Without the scope every call needs: 403 naming it.
    let (status, challenge, _) =
        list_with(&url, Some(&token(&k1, &issuer, RESOURCE, "other", 300, -10))).await;
    assert_eq!(status, 403);
    assert!(challenge.contains("error=\"insufficient_scope\", scope=\"mcp\""), "{challenge}");
    // A token naming a [callers] principal is not that principal: refused,
    // whatever its issuer says (one namespace of principals).
    let as_dana = {
        let mut h = Header::new(Algorithm::EdDSA);
        h.kid = Some(k1.kid.clone());
        let claims = json!({"iss": issuer, "aud": RESOURCE, "sub": "dana", "tenant": "atlas", "scope": "mcp toolgate:approve", "exp": now() + 300});
        jsonwebtoken::encode(&h, &claims, &k1.key).unwrap()
    };
    let (status, challenge, body) = list_with(&url, Some(&as_dana)).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        challenge.contains("invalid_token") && body.contains("[callers]"),
        "{challenge} {body}"
    );
    assert!(gateway.authenticate(&as_dana).await.is_none(), "nor does it sign in to the console");

    // Scopes grant roles: the approver scope opens the admin API, the plain one does not.
    let approver = token(&k1, &issuer, RESOURCE, "mcp toolgate:approve", 300, -10);
    assert_eq!(common::admin(&url, Some(&approver), "GET", "/admin/approvals", None).await.0, 200);
    assert_eq!(common::admin(&url, Some(&alice), "GET", "/admin/approvals", None).await.0, 403);
    // A token given by hand (the console's sign-in form) is the same: the approver's has the role, the plain caller's not.
    let by_hand = async |token: &str| {
        gateway.authenticate(token).await.map(|(c, _)| (c.name.clone(), c.has_role("approver")))
    };
    assert_eq!(by_hand(&approver).await, Some(("alice".to_string(), true)));
    assert_eq!(by_hand(&alice).await, Some(("alice".to_string(), false)));
    assert_eq!(by_hand(DANA_TOKEN).await, Some(("dana".to_string(), true)));
    assert_eq!(by_hand("not-a-token").await, None);

    // The issuer rotates to k2: a k2 token is accepted (the keys are fetched
    // again), and a token of the retired k1 no longer is.
    *jwks.lock().unwrap() = json!({"keys": [k2.jwk.clone()]});
    let before = fetches.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(list_with(&url, Some(&token(&k2, &issuer, RESOURCE, "mcp", 300, -10))).await.0, 200);
    assert!(fetches.load(std::sync::atomic::Ordering::Relaxed) > before);
    let (status, _, body) = list_with(&url, Some(&alice)).await;
    assert_eq!(status, 401);
    assert!(body.contains("a key the issuer does not publish"), "{body}");

    // A stock client with the token, in both eras: listed and called.
    let fresh = token(&k2, &issuer, RESOURCE, "mcp", 300, -10);
    let calls = json!([{"tool": "lab__whoami", "arguments": {}}]);
    for mode in ["2026-07-28", "legacy"] {
        let out = Command::new(python())
            .arg(workspace().join("tests/python/sdk_client.py"))
            .args([&url, mode, &calls.to_string()])
            .env("TOOLGATE_TOKEN", &fresh)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{mode}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["results"][0]["content"][0]["text"], "ok", "{mode}: {v}");
    }
    // The caller's tokens never went upstream.
    assert!(seen.lock().unwrap().is_empty(), "the upstream saw {:?}", seen.lock().unwrap());
    stop.cancel();
    gateway.stop();
    cancel.cancel();
}
