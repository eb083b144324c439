//! The tickets server behind toolgate's identity assertion (issue 61): a
//! call runs only with an assertion that verifies against the gateway's
//! published keys, and the note it writes names the technician, not a
//! service account. Assertions are signed here as the gateway signs them
//! (EdDSA, `kid`), and the keys served from a local JWKS endpoint.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use base64::Engine as _;
use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rmcp::model::CallToolRequestParams;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use toolgate_atlas::identity::{IdentityConfig, Verifier};
use toolgate_atlas::{ServerKind, dataset};

const ISSUER: &str = "toolgate.test/log";
const AUDIENCE: &str = "tickets";
const TECHNICIAN: &str = "sam@atlas.example";

/// A signing key as the gateway holds one.
struct Key {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

fn key(kid: &str) -> Key {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&aws_lc_rs::rand::SystemRandom::new()).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    let jwk =
        json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "use": "sig", "alg": "EdDSA"});
    Key { kid: kid.into(), encoding: EncodingKey::from_ed_der(pkcs8.as_ref()), jwk }
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

/// The claims the gateway makes for the technician's agent.
fn claims() -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": TECHNICIAN, "tenant": "atlas", "act": {"sub": "agent"},
           "jti": "j-1", "iat": now(), "exp": now() + 300})
}

fn sign(key: &Key, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

fn with(mut claims: Value, field: &str, value: Value) -> Value {
    claims[field] = value;
    claims
}

/// A gateway's `/.well-known/jwks.json`: the keys it publishes (changeable
/// mid-test, a rotation) and how often it was asked.
struct Jwks {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    hits: Arc<AtomicUsize>,
}

async fn serve_jwks(keys: &[&Key]) -> Jwks {
    let published = Arc::new(Mutex::new(keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()));
    let hits = Arc::new(AtomicUsize::new(0));
    let (p, h) = (published.clone(), hits.clone());
    let app = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get(move || {
            h.fetch_add(1, Ordering::SeqCst);
            let keys = p.lock().unwrap().clone();
            async move { axum::Json(json!({"keys": keys})) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Jwks { url, keys: published, hits }
}

fn config(url: &str) -> IdentityConfig {
    IdentityConfig { jwks_url: url.into(), issuer: ISSUER.into(), audience: AUDIENCE.into() }
}

fn open_ticket() -> String {
    dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open)
        .unwrap()
        .ticket_id
        .clone()
}

fn notes(state: &Path) -> String {
    std::fs::read_to_string(state.join("notes.jsonl")).unwrap_or_default()
}

/// The tickets binary over stdio, as toolgate starts it in the demo.
async fn tickets_over_stdio(state: &Path, jwks: &str, era: Era) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate-atlas"));
    cmd.args([
        "tickets",
        "--identity-jwks",
        jwks,
        "--identity-issuer",
        ISSUER,
        "--identity-audience",
        AUDIENCE,
        "--state",
    ])
    .arg(state);
    let transport =
        TokioChildProcess::builder(cmd).stderr(std::process::Stdio::null()).spawn().unwrap().0;
    ().serve_with_lifecycle(transport, lifecycle(era)).await.expect("client connects over stdio")
}

/// A call carrying `assertion` where toolgate puts it for a stdio server.
async fn call_as(
    client: &rmcp::Peer<RoleClient>,
    name: &str,
    arguments: Value,
    assertion: Option<&str>,
) -> Called {
    let Value::Object(map) = arguments else { panic!("arguments must be an object") };
    let mut params = CallToolRequestParams::new(name.to_string()).with_arguments(map);
    params.meta =
        assertion.map(|a| serde_json::from_value(json!({"io.toolgate/identity": a})).unwrap());
    called(client.call_tool(params).await.expect("tools/call answers"))
}

#[tokio::test]
async fn a_valid_assertion_puts_the_technician_on_the_note() {
    let gateway = key("k1");
    let jwks = serve_jwks(&[&gateway]).await;
    let state = tempfile::tempdir().unwrap();
    let client = tickets_over_stdio(state.path(), &jwks.url, Era::Modern).await;
    let ticket = open_ticket();
    let token = sign(&gateway, &claims());

    let r = call_as(
        &client,
        "post_ticket_update",
        json!({"ticket_id": ticket, "note": "valve replaced"}),
        Some(&token),
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(
        (&r.structured["requested_by"], &r.structured["agent"], &r.structured["tenant"]),
        (&json!(TECHNICIAN), &json!("agent"), &json!("atlas"))
    );
    assert_eq!(r.structured["asserted_by"], ISSUER);

    // The read tool shows who asked, with the note.
    let read = call_as(
        &client,
        "get_ticket",
        json!({"ticket_id": ticket}),
        Some(&sign(&gateway, &claims())),
    )
    .await;
    let note = &read.structured["appended_notes"][0];
    assert_eq!(
        (&note["note"], &note["requested_by"], &note["agent"]),
        (&json!("valve replaced"), &json!(TECHNICIAN), &json!("agent"))
    );

    let written = notes(state.path());
    assert!(
        written.contains(TECHNICIAN) && !written.contains(&token),
        "the record names the person, never holds the assertion: {written}"
    );
    assert_eq!(jwks.hits.load(Ordering::SeqCst), 1, "the keys are fetched once and kept");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn refused_assertions_say_what_is_wrong_and_write_nothing() {
    let gateway = key("k1");
    let jwks = serve_jwks(&[&gateway]).await;
    let state = tempfile::tempdir().unwrap();
    let client = tickets_over_stdio(state.path(), &jwks.url, Era::Modern).await;
    let ticket = open_ticket();
    // Another key under the gateway's kid: the signature does not verify.
    let forger = Key { kid: "k1".into(), ..key("forged") };
    let mut hs256 = Header::new(Algorithm::HS256);
    hs256.kid = Some("k1".into());
    let hs256 = jsonwebtoken::encode(
        &hs256,
        &claims(),
        &EncodingKey::from_secret(b"0123456789abcdef0123456789abcdef").unwrap(),
    )
    .unwrap();

    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("missing", None, "carried no identity assertion"),
        (
            "expired",
            Some(sign(
                &gateway,
                &with(with(claims(), "iat", json!(now() - 400)), "exp", json!(now() - 100)),
            )),
            "has expired",
        ),
        (
            "wrong audience",
            Some(sign(&gateway, &with(claims(), "aud", json!("parts")))),
            "is for another server, not \"tickets\"",
        ),
        (
            "wrong issuer",
            Some(sign(&gateway, &with(claims(), "iss", json!("toolgate.elsewhere/log")))),
            "issued by another gateway",
        ),
        ("bad signature", Some(sign(&forger, &claims())), "does not verify"),
        (
            "unpublished key",
            Some(sign(&key("k9"), &claims())),
            "a key the gateway does not publish",
        ),
        ("not EdDSA", Some(hs256), "not signed with EdDSA"),
        ("not a JWT", Some("not-a-jwt".into()), "not a well-formed JWT"),
        (
            "too long-lived",
            Some(sign(&gateway, &with(claims(), "exp", json!(now() + 3600)))),
            "lives longer than the 5 minutes",
        ),
        (
            "no tenant",
            Some(sign(&gateway, &with(claims(), "tenant", Value::Null))),
            "names no tenant",
        ),
    ];
    for (case, token, says) in cases {
        let r = call_as(
            &client,
            "post_ticket_update",
            json!({"ticket_id": ticket, "note": case}),
            token.as_deref(),
        )
        .await;
        assert!(r.is_error, "{case}: not refused: {:?}", r.structured);
        assert!(
            r.text.contains(says) && r.text.contains("The call did not run."),
            "{case}: {}",
            r.text
        );
        if let Some(token) = &token {
            let signature = token.rsplit('.').next().unwrap();
            assert!(
                !r.text.contains(signature),
                "{case}: the refusal quotes the assertion: {}",
                r.text
            );
        }
    }
    // Reads are refused as well: nobody reads as nobody.
    let read = call_as(&client, "get_ticket", json!({"ticket_id": ticket}), None).await;
    assert!(read.is_error && read.text.contains("carried no identity assertion"), "{}", read.text);
    assert_eq!(notes(state.path()), "", "no refused call wrote a note");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_legacy_era_call_carries_it_in_meta_as_well() {
    let gateway = key("k1");
    let jwks = serve_jwks(&[&gateway]).await;
    let state = tempfile::tempdir().unwrap();
    let client = tickets_over_stdio(state.path(), &jwks.url, Era::Legacy).await;
    let r = call_as(
        &client,
        "post_ticket_update",
        json!({"ticket_id": open_ticket(), "note": "legacy"}),
        Some(&sign(&gateway, &claims())),
    )
    .await;
    assert!(!r.is_error && r.structured["requested_by"] == TECHNICIAN, "{}", r.text);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn over_http_the_assertion_arrives_in_the_header() {
    let gateway = key("k1");
    let jwks = serve_jwks(&[&gateway]).await;
    let state = tempfile::tempdir().unwrap();
    let server = toolgate_atlas::server(ServerKind::Tickets, Some(state.path()))
        .unwrap()
        .with_identity(Verifier::new(config(&jwks.url)).unwrap());
    let cancel = tokio_util::sync::CancellationToken::new();
    let (addr, _) =
        toolgate_atlas::serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone())
            .await
            .unwrap();
    let url = format!("http://{addr}/mcp");
    let token = sign(&gateway, &claims());
    let headers = HashMap::from([(
        axum::http::HeaderName::from_static("x-toolgate-identity"),
        token.parse().unwrap(),
    )]);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(headers),
    );
    let asserted = ().serve_with_lifecycle(transport, lifecycle(Era::Modern)).await.unwrap();
    let ticket = open_ticket();

    let r = call_as(
        &asserted,
        "post_ticket_update",
        json!({"ticket_id": ticket, "note": "over HTTP"}),
        None,
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["requested_by"], TECHNICIAN);

    let anonymous = connect_http(&url, Era::Modern).await;
    let refused = call_as(
        &anonymous,
        "post_ticket_update",
        json!({"ticket_id": ticket, "note": "who?"}),
        None,
    )
    .await;
    assert!(refused.is_error && refused.text.contains("X-Toolgate-Identity"), "{}", refused.text);
    assert!(!notes(state.path()).contains("who?"));
    cancel.cancel();
}

#[tokio::test]
async fn a_rotated_key_is_fetched_again_and_made_up_kids_do_not_hammer_the_gateway() {
    let (old, new) = (key("k1"), key("k2"));
    let jwks = serve_jwks(&[&old]).await;
    let verifier = Verifier::new(config(&jwks.url)).unwrap().with_refetch_interval(Duration::ZERO);
    assert_eq!(
        verifier.verify(Some(&sign(&old, &claims()))).await.unwrap().requested_by,
        TECHNICIAN
    );
    // The gateway rotates: an assertion under the new kid fetches the keys again.
    *jwks.keys.lock().unwrap() = vec![old.jwk.clone(), new.jwk.clone()];
    assert!(verifier.verify(Some(&sign(&new, &claims()))).await.is_ok());
    assert_eq!(jwks.hits.load(Ordering::SeqCst), 2);

    // Within the interval, unknown kids are refused from the copy held.
    let bounded =
        Verifier::new(config(&jwks.url)).unwrap().with_refetch_interval(Duration::from_secs(3600));
    assert!(bounded.verify(Some(&sign(&old, &claims()))).await.is_ok());
    for i in 0..20 {
        let refused = bounded
            .verify(Some(&sign(&key(&format!("made-up-{i}")), &claims())))
            .await
            .unwrap_err();
        assert!(refused.0.contains("does not publish"), "{refused}");
    }
    assert_eq!(
        jwks.hits.load(Ordering::SeqCst),
        3,
        "one fetch for the bounded verifier, none for the made-up kids"
    );
}

#[tokio::test]
async fn an_unreachable_key_endpoint_is_a_refusal_that_names_it() {
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let url = format!("http://{gone}/.well-known/jwks.json");
    let verifier = Verifier::new(config(&url)).unwrap();
    let refused = verifier.verify(Some(&sign(&key("k1"), &claims()))).await.unwrap_err();
    assert!(
        refused.0.contains("could not be fetched from")
            && refused.0.contains(&url)
            && refused.0.contains("retry"),
        "{refused}"
    );
}

#[test]
fn the_identity_options_come_together() {
    use clap::Parser as _;
    let parse = |args: &[&str]| {
        toolgate_atlas::cli::Args::try_parse_from([&["toolgate-atlas", "tickets"], args].concat())
    };
    assert!(
        parse(&["--identity-jwks", "http://127.0.0.1:1/.well-known/jwks.json"]).is_err(),
        "issuer and audience are required with the keys"
    );
    assert!(parse(&["--identity-issuer", ISSUER]).is_err(), "an issuer alone verifies nothing");
    assert!(
        parse(&[
            "--identity-jwks",
            "http://x/",
            "--identity-issuer",
            ISSUER,
            "--identity-audience",
            AUDIENCE
        ])
        .is_ok()
    );
    assert!(Verifier::new(config("file:///etc/keys.json")).is_err(), "keys come over http(s)");
}
