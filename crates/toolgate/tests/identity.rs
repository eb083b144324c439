//! Upstream identity (issue 61): each call reaches its server as the person
//! who made it, and the receipt says as whom.
//!
//! Real parts only: a real gateway (`toolgate serve`); the upstream is an
//! MCP server written with the official Python SDK (`whoami_server.py`)
//! that verifies what it gets with PyJWT — the gateway's assertion against
//! its `/.well-known/jwks.json`, or an access token against the
//! authorization server's keys; the authorization server is `oidc-provider`
//! (npm), the certified OpenID Provider, with RFC 8693 token exchange
//! registered through its own extension API. The agents are the stock
//! Python SDK client (`call_tool`), in both eras, as two people.

mod demo_common;
mod ops_common;
mod peers_common;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use demo_common::workspace;
use ops_common::{BIN, spawn_listening, toolgate};
use peers_common::{free_port, peer, python, whoami};
use serde_json::{Value, json};
use tokio::process::Command;

const JANE: &str = "jane-token-0123456789abcdef";
const OMAR: &str = "omar-token-0123456789abcdef";
const ISSUER: &str = "toolgate.identity.test/log";
const CLIENT_SECRET: &str = "toolgate-secret";
/// The resource of the stdio server each person runs their own process of.
const PERSONAL: &str = "http://personal.identity.test/mcp";

/// The stock Python SDK's `call_tool`s, as the person whose token is `token`.
fn calls(url: &str, era: &str, token: &str, calls: &Value) -> Vec<Value> {
    let out = std::process::Command::new(python())
        .arg(workspace().join("tests/python/run_calls.py"))
        .args([url, era, &calls.to_string()])
        .env("TOOLGATE_TOKEN", token)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "run_calls.py: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    v["results"].as_array().unwrap().clone()
}

fn structured(result: &Value) -> &Value {
    assert_ne!(result["isError"], true, "{result}");
    &result["structuredContent"]
}

fn config(port: u16, who: &str, stdio_args: &[String], provider: &str, oauth_who: &str) -> String {
    format!(
        r#"[gateway]
listen = "127.0.0.1:{port}"
state_dir = "state"

[receipts]
origin = "{ISSUER}"

[servers.who]
url = "{who}"
[servers.who.identity]
mode = "assertion"
audience = "whoami"

[servers.elsewhere]
url = "{who}"
[servers.elsewhere.identity]
mode = "assertion"
audience = "billing"

[servers.local]
command = {python}
args = {stdio_args}
sandbox = "off"
[servers.local.identity]
mode = "assertion"

[servers.plain]
url = "{who}"

[servers.exchanged]
url = "{oauth_who}"
[servers.exchanged.identity]
mode = "exchange"
token_endpoint = "{provider}/token"
client_id = "toolgate"
client_secret_env = "TG_EXCHANGE_SECRET"
audience = "{oauth_who}"
resource = "{oauth_who}"

[servers.personal]
command = {python}
args = {personal_args}
sandbox = "off"
[servers.personal.identity]
mode = "exchange"
env = "WHO_TOKEN"
pool = 2
token_endpoint = "{provider}/token"
client_id = "toolgate"
client_secret_env = "TG_EXCHANGE_SECRET"
audience = "{PERSONAL}"
resource = "{PERSONAL}"

[registry."personal__whoami"]
class = "automatic"
read_only = true
[registry."who__whoami"]
class = "automatic"
read_only = true
[registry."elsewhere__whoami"]
class = "automatic"
read_only = true
[registry."local__whoami"]
class = "automatic"
read_only = true
[registry."plain__whoami"]
class = "automatic"
read_only = true
[registry."exchanged__whoami"]
class = "automatic"
read_only = true

[callers.jane]
token_env = "TG_JANE"
subject = "tech-jane"
tenant = "atlas"

[callers.omar]
token_env = "TG_OMAR"
subject = "tech-omar"
tenant = "atlas"
"#,
        python = json!(python().display().to_string()),
        stdio_args = json!(stdio_args),
        personal_args = json!([
            workspace().join("tests/python/whoami_server.py").display().to_string().as_str(),
            "stdio",
            "--issuer",
            provider,
            "--token-env",
            "WHO_TOKEN",
            "--resource",
            PERSONAL
        ]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_reaches_its_server_as_the_person_who_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let jwks = format!("{base}/.well-known/jwks.json");

    // The peers, each told where the gateway's keys will be.
    let who = peer(
        whoami(&[
            "--port",
            "0",
            "--assertion-jwks",
            &jwks,
            "--assertion-issuer",
            ISSUER,
            "--audience",
            "whoami",
        ]),
        &home.join("who.log"),
    )
    .await;
    let mut provider = Command::new("node");
    provider.arg(workspace().join("tests/oidc/provider.mjs")).args([
        "--port",
        "0",
        "--client",
        &format!("toolgate:{CLIENT_SECRET}"),
        "--trust-issuer",
        ISSUER,
        "--trust-jwks",
        &jwks,
    ]);
    let provider = peer(provider, &home.join("provider.log")).await;
    let oauth_who = peer(
        whoami(&["--port", "0", "--issuer", &provider.url, "--stateless"]),
        &home.join("oauth-who.log"),
    )
    .await;
    // Enterprise-Managed Authorization: the provider above is the IdP that
    // issues ID-JAGs; a second one is the server's own authorization
    // server, which redeems them (the JWT bearer grant).
    let mut server_as = Command::new("node");
    server_as.arg(workspace().join("tests/oidc/provider.mjs")).args([
        "--port",
        "0",
        "--client",
        &format!("toolgate:{CLIENT_SECRET}"),
        "--trust-idjag-issuer",
        &provider.url,
        "--trust-idjag-jwks",
        &format!("{}/jwks", provider.url),
    ]);
    let server_as = peer(server_as, &home.join("server-as.log")).await;
    let jag_who = peer(
        whoami(&["--port", "0", "--issuer", &server_as.url, "--stateless"]),
        &home.join("jag-who.log"),
    )
    .await;
    let stdio_args: Vec<String> = [
        workspace().join("tests/python/whoami_server.py").display().to_string(),
        "stdio".into(),
        "--assertion-jwks".into(),
        jwks.clone(),
        "--assertion-issuer".into(),
        ISSUER.into(),
        "--audience".into(),
        "local".into(),
    ]
    .into();

    let config_path = home.join("toolgate.toml");
    let mut text = config(port, &who.url, &stdio_args, &provider.url, &oauth_who.url);
    text.push_str(&format!(
        r#"
[servers.jagged]
url = "{jag}"
[servers.jagged.identity]
mode = "exchange"
token_endpoint = "{idp}/token"
client_id = "toolgate"
client_secret_env = "TG_EXCHANGE_SECRET"
audience = "{server_as}"
resource = "{jag}"
[servers.jagged.identity.id_jag]
token_endpoint = "{server_as}/token"
client_id = "toolgate"
client_secret_env = "TG_EXCHANGE_SECRET"

[registry."jagged__whoami"]
class = "automatic"
read_only = true
"#,
        jag = jag_who.url,
        idp = provider.url,
        server_as = server_as.url,
    ));
    std::fs::write(&config_path, text).unwrap();
    let mut gateway = Command::new(BIN);
    gateway
        .args(["serve", "--config"])
        .arg(&config_path)
        .env("TG_JANE", JANE)
        .env("TG_OMAR", OMAR)
        .env("TG_EXCHANGE_SECRET", CLIENT_SECRET);
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;

    // The keys are published, and only public halves.
    let published: Value = reqwest::get(&jwks).await.unwrap().json().await.unwrap();
    let key = &published["keys"][0];
    assert_eq!(
        (&key["kty"], &key["crv"], &key["alg"]),
        (&json!("OKP"), &json!("Ed25519"), &json!("EdDSA")),
        "{published}"
    );
    assert!(key.get("d").is_none(), "{published}");

    let mut personal_pids = Vec::new();
    for era in ["legacy", "2026-07-28"] {
        // An assertion over HTTP: two people, two identities; the agent is the actor.
        let ask = json!([{"tool": "who__whoami", "arguments": {}}]);
        let jane = calls(&gateway.url, era, JANE, &ask);
        let omar = calls(&gateway.url, era, OMAR, &ask);
        assert_eq!(structured(&jane[0])["sub"], "tech-jane", "{era}: {jane:?}");
        assert_eq!(structured(&omar[0])["sub"], "tech-omar", "{era}: {omar:?}");
        assert_eq!(structured(&jane[0])["tenant"], "atlas");
        assert_eq!(structured(&jane[0])["act"]["sub"], "jane", "the agent caller acts: {jane:?}");

        // One for another audience is refused by the server that checks it.
        let elsewhere = calls(
            &gateway.url,
            era,
            JANE,
            &json!([{"tool": "elsewhere__whoami", "arguments": {}}]),
        );
        assert_eq!(elsewhere[0]["isError"], true, "{elsewhere:?}");
        assert!(elsewhere[0].to_string().contains("audience"), "{elsewhere:?}");

        // Over stdio, in the request's _meta.
        let local =
            calls(&gateway.url, era, OMAR, &json!([{"tool": "local__whoami", "arguments": {}}]));
        assert_eq!(structured(&local[0])["sub"], "tech-omar", "{local:?}");

        // A shared server gets no assertion at all.
        let plain =
            calls(&gateway.url, era, JANE, &json!([{"tool": "plain__whoami", "arguments": {}}]));
        assert_eq!(plain[0]["isError"], true, "{plain:?}");
        assert!(plain[0].to_string().contains("missing"), "{plain:?}");

        // Token exchange at oidc-provider: the token names the person, the agent acts.
        let exchanged = calls(
            &gateway.url,
            era,
            JANE,
            &json!([{"tool": "exchanged__whoami", "arguments": {}}]),
        );
        assert_eq!(structured(&exchanged[0])["sub"], "tech-jane", "{exchanged:?}");
        assert_eq!(structured(&exchanged[0])["act"]["sub"], "jane", "{exchanged:?}");
        let exchanged = calls(
            &gateway.url,
            era,
            OMAR,
            &json!([{"tool": "exchanged__whoami", "arguments": {}}]),
        );
        assert_eq!(structured(&exchanged[0])["sub"], "tech-omar", "{exchanged:?}");

        // ID-JAG: the IdP's grant for the person, redeemed at the server's
        // own authorization server for a token the server accepts.
        let jagged =
            calls(&gateway.url, era, OMAR, &json!([{"tool": "jagged__whoami", "arguments": {}}]));
        assert_eq!(structured(&jagged[0])["sub"], "tech-omar", "{jagged:?}");
        assert_eq!(
            structured(&jagged[0])["act"]["sub"],
            "omar",
            "the agent acts through both hops: {jagged:?}"
        );

        // A stdio server that reads the token from its environment: each
        // person gets a process of their own, started with their token;
        // the same person's next call finds theirs.
        let ask = json!([{"tool": "personal__whoami", "arguments": {}}, {"tool": "personal__whoami", "arguments": {}}]);
        let jane = calls(&gateway.url, era, JANE, &ask);
        let omar = calls(&gateway.url, era, OMAR, &ask);
        assert_eq!(
            (&structured(&jane[0])["sub"], &structured(&omar[0])["sub"]),
            (&json!("tech-jane"), &json!("tech-omar")),
            "{era}: {jane:?} {omar:?}"
        );
        assert_eq!(structured(&jane[0])["act"]["sub"], "jane", "{jane:?}");
        assert_eq!(
            structured(&jane[0])["pid"],
            structured(&jane[1])["pid"],
            "one process per person: {jane:?}"
        );
        assert_ne!(
            structured(&jane[0])["pid"],
            structured(&omar[0])["pid"],
            "two people, two processes: {jane:?} {omar:?}"
        );
        personal_pids.push(structured(&jane[0])["pid"].clone());
    }
    // Across the eras jane kept her one process (the pool holds two).
    assert_eq!(personal_pids[0], personal_pids[1], "{personal_pids:?}");

    // An expired assertion, signed with the gateway's own key, is refused
    // by the server: PyJWT checks `exp` against the published key.
    let seed: [u8; 32] =
        std::fs::read(home.join("state/keys/receipt-ed25519.seed")).unwrap().try_into().unwrap();
    let expired = assertion(
        &seed,
        &published,
        json!({"iss": ISSUER, "aud": "whoami", "sub": "tech-jane", "tenant": "atlas", "act": {"sub": "jane"}, "jti": "x", "iat": 1_000_000_000, "exp": 1_000_000_300}),
    );
    let fresh_other = {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assertion(
            &seed,
            &published,
            json!({"iss": ISSUER, "aud": "billing", "sub": "tech-jane", "tenant": "atlas", "jti": "y", "iat": now, "exp": now + 60}),
        )
    };
    for (token, why) in [(expired, "expired"), (fresh_other, "audience")] {
        let out = std::process::Command::new(python())
            .arg("-c")
            .arg(DIRECT)
            .args([&who.url, &token])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("\"isError\": true") && text.contains(why),
            "{why}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The receipts say as whom each call ran: the mode, the person, the
    // audience and the hash of the credential's id, never the credential.
    let list = toolgate(&[
        "receipts",
        "list",
        "--json",
        "--limit",
        "100000",
        "--config",
        config_path.to_str().unwrap(),
    ])
    .await;
    let list: Value = serde_json::from_str(&list).unwrap();
    let receipts: Vec<&Value> = list.as_array().unwrap().iter().map(|r| &r["receipt"]).collect();
    let of = |server: &str, caller: &str| {
        receipts
            .iter()
            .find(|r| r["server"] == server && r["caller"] == caller)
            .unwrap_or_else(|| panic!("no receipt of {server} by {caller}: {list}"))
    };
    let jane = &of("who", "jane")["identity"];
    assert_eq!(
        (&jane["mode"], &jane["subject"], &jane["audience"]),
        (&json!("assertion"), &json!("tech-jane"), &json!("whoami")),
        "{jane}"
    );
    assert_eq!(jane["credential_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(of("plain", "jane")["identity"], json!({"mode": "shared"}));
    let exchanged = &of("exchanged", "omar")["identity"];
    assert_eq!(
        (&exchanged["mode"], &exchanged["subject"], &exchanged["audience"]),
        (&json!("exchange"), &json!("tech-omar"), &json!(oauth_who.url)),
        "{exchanged}"
    );
    // `toolgate verify` shows it from the exported (signed) receipt.
    let index = of("who", "jane")["log_index"].as_u64().unwrap();
    let bundle = home.join("jane.json");
    toolgate(&[
        "export",
        "--receipt",
        &index.to_string(),
        "--out",
        bundle.to_str().unwrap(),
        "--config",
        config_path.to_str().unwrap(),
    ])
    .await;
    let verified = toolgate(&["verify", bundle.to_str().unwrap()]).await;
    assert!(
        verified.contains(&format!(
            "ran as     receipt {index}: tech-jane, by assertion for whoami (credential sha256 "
        )) && verified.contains("verified"),
        "{verified}"
    );
    // doctor says as whom each server is reached, and that the gateway's own
    // credential read its contract.
    let doctor = std::process::Command::new(BIN)
        .args(["doctor", "--config", config_path.to_str().unwrap()])
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        doctor.contains("identity who")
            && doctor.contains(
                "the gateway's assertion for its person (in the header X-Toolgate-Identity, aud \
                    whoami"
            ),
        "{doctor}"
    );
    assert!(
        doctor.contains("identity exchanged")
            && doctor.contains("the gateway's own credential read its contract"),
        "{doctor}"
    );
    assert!(!doctor.contains("identity plain"), "{doctor}");
    // No token or assertion in the receipts or the log.
    let log = std::fs::read_to_string(&gateway.log).unwrap();
    for text in [list.to_string(), log] {
        assert!(!text.contains("eyJ"), "a JWT reached the receipts or the log:\n{text}");
    }
    drop((gateway, who, provider, oauth_who));
}

/// Calls `whoami` at URL directly, with the assertion in the header, with
/// the stock SDK client.
const DIRECT: &str = r#"
import sys, json, anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
async def main(url, token):
    http = create_mcp_http_client(headers={"X-Toolgate-Identity": token})
    async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        res = await client.call_tool("whoami", {})
        print(json.dumps(res.model_dump(by_alias=True, mode="json", exclude_none=True)))
anyio.run(main, sys.argv[1], sys.argv[2])
"#;

/// An assertion made here with the gateway's identity key (derived from the
/// log's receipt key as `identity/assertion.rs` does), in the published `kid`.
fn assertion(receipt_seed: &[u8; 32], published: &Value, claims: Value) -> String {
    let seed = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        &[&b"toolgate identity assertion key v1\0"[..], receipt_seed].concat(),
    );
    let pkcs8 = [
        &[
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ][..],
        seed.as_ref(),
    ]
    .concat();
    let key = aws_lc_rs::signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pkcs8).unwrap();
    let header = B64.encode(
        json!({"alg": "EdDSA", "typ": "JWT", "kid": published["keys"][0]["kid"]}).to_string(),
    );
    let input = format!("{header}.{}", B64.encode(claims.to_string()));
    format!("{input}.{}", B64.encode(key.sign(input.as_bytes()).as_ref()))
}
