//! Prompts, resources, templates and completions through the gateway, seen
//! by the official Python SDK in both eras: a real gateway (`toolgate
//! serve`) in front of a real rmcp upstream (`toolgate conformance-fixture`),
//! the registry classing some of them prohibited. What is listed follows
//! authority; what is read leaves a signed receipt that verifies offline.

mod demo_common;
#[path = "../../toolgate-gateway/tests/issuer.rs"]
#[allow(dead_code)]
mod issuer;
mod ops_common;

use std::path::Path;
use std::process::Command as StdCommand;

use demo_common::python;
use ops_common::{BIN, spawn_listening, toolgate};
use serde_json::{Value, json};
use tokio::process::Command;

/// The fixture's server is untrusted (the default): its unregistered
/// prompts (`test_prompt_with_image`, …) are prohibited, as its tools are.
fn config(upstream: &str) -> String {
    format!(
        r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"

[servers.fixture]
url = "{upstream}"

[registry_prompts."fixture__test_simple_prompt"]
class = "automatic"
[registry_prompts."fixture__test_prompt_with_arguments"]
class = "automatic"

# First match decides: the binary resource is prohibited, the rest automatic.
[[registry_resources]]
server = "fixture"
uri = "test://static-binary"
class = "prohibited"
[[registry_resources]]
server = "fixture"
uri = "test://*"
class = "automatic"

[registry."fixture__test_update_resource"]
class = "automatic"
read_only = true

[callers.agent]
tenant = "acme"
anonymous = true
"#
    )
}

const TEXT: &str = "toolgate://fixture/test://static-text";
const BINARY: &str = "toolgate://fixture/test://static-binary";
const TEMPLATE: &str = "toolgate://fixture/test://template/{id}/data";

/// The first event of a raw `subscriptions/listen` stream for `uris`.
async fn first_listen_event(url: &str, uris: Value) -> Value {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen", "params": {"notifications": {"resourceSubscriptions": uris}, "_meta": meta}});
    let mut resp = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    serde_json::from_str(data).unwrap()
}

fn run_client(url: &str, mode: &str, steps: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/content_client.py");
    let out = StdCommand::new(python())
        .arg(&script)
        .args([url, mode, &steps.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_reads_gets_and_completes_under_authority_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = Command::new(BIN);
    fixture.args(["conformance-fixture", "--http", "127.0.0.1:0"]);
    let fixture = spawn_listening(fixture, &dir.path().join("fixture.log"), "serving on").await;
    let config_path = dir.path().join("toolgate.toml");
    std::fs::write(&config_path, config(&fixture.url)).unwrap();
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(&config_path);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;
    // `listen = "127.0.0.1:0"`: the console's line names the port bound, as the MCP line does.
    let console = format!("toolgate: console on {}/console", gateway.url.trim_end_matches("/mcp"));
    let printed = async || {
        std::fs::read_to_string(dir.path().join("gateway.log")).unwrap().contains(&console)
    };
    for _ in 0..40 {
        if printed().await {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(printed().await, "no `{console}` line");

    let steps = json!([
        {"read": TEXT},
        {"read": "toolgate://fixture/test://template/123/data"},
        {"read": BINARY},
        {"read": "toolgate://fixture/test://nothing-here"},
        {"get": "fixture__test_prompt_with_arguments", "arguments": {"arg1": "north", "arg2": "south"}},
        {"get": "fixture__test_prompt_with_image"},
        {"get": "fixture__test_prompt_with_arguments", "arguments": {"arg1": "north"}},
        {"complete_prompt": "fixture__test_prompt_with_arguments", "argument": "arg1", "value": "par"},
        {"complete_template": TEMPLATE, "argument": "id", "value": "12"},
        {"complete_prompt": "fixture__test_prompt_with_image", "argument": "x", "value": ""},
    ]);
    for (mode, version) in [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")] {
        let v = run_client(&gateway.url, mode, &steps);
        assert_eq!(v["protocol_version"], version, "{v}");
        // Discovery follows authority: the prohibited resource and the
        // unregistered prompts of an untrusted server are not listed.
        let uris: Vec<&str> =
            v["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
        assert_eq!(uris, [TEXT], "{mode}");
        let templates: Vec<&str> = v["templates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["uriTemplate"].as_str().unwrap())
            .collect();
        assert_eq!(templates, [TEMPLATE], "{mode}");
        let prompts: Vec<&str> =
            v["prompts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(
            prompts,
            ["fixture__test_prompt_with_arguments", "fixture__test_simple_prompt"],
            "{mode}"
        );

        let r = &v["results"];
        // A listed resource, read under its exposed URI, names it in its contents.
        assert_eq!(r[0]["contents"][0]["uri"], TEXT, "{mode}: {}", r[0]);
        assert_eq!(r[0]["contents"][0]["text"], "This is the content of the static text resource.");
        // A URI the template expands to is read at the upstream's own URI.
        assert_eq!(
            r[1]["contents"][0]["uri"], "toolgate://fixture/test://template/123/data",
            "{mode}: {}",
            r[1]
        );
        assert!(
            r[1]["contents"][0]["text"].as_str().unwrap().contains("Data for ID: 123"),
            "{mode}: {}",
            r[1]
        );
        // Prohibited: not readable, with the refusal in the error's data.
        assert_eq!(r[2]["error"]["code"], -32010, "{mode}: {}", r[2]);
        assert_eq!(
            (r[2]["error"]["data"]["decision"].as_str(), r[2]["error"]["data"]["reason"].as_str()),
            (Some("deny"), Some("prohibited")),
            "{mode}: {}",
            r[2]
        );
        // Unknown: -32602 naming the URI (SEP-2164).
        assert_eq!(r[3]["error"]["code"], -32602, "{mode}: {}", r[3]);
        assert_eq!(r[3]["error"]["data"]["uri"], "toolgate://fixture/test://nothing-here");
        // A prompt with its arguments.
        let said = r[4]["messages"][0]["content"]["text"].as_str().unwrap_or_default();
        assert_eq!(said, "Prompt with arguments: arg1='north', arg2='south'", "{mode}: {}", r[4]);
        // An unregistered prompt of an untrusted server is refused.
        assert_eq!(r[5]["error"]["code"], -32010, "{mode}: {}", r[5]);
        assert_eq!(r[5]["error"]["data"]["reason"], "untrusted_unregistered", "{mode}: {}", r[5]);
        // A missing required argument is refused before the upstream hears of it.
        assert_eq!(r[6]["error"]["code"], -32602, "{mode}: {}", r[6]);
        assert_eq!(r[6]["error"]["data"]["action"], "correct", "{mode}: {}", r[6]);
        // Completions of a listed prompt's and template's arguments; none for a prohibited prompt.
        assert_eq!(
            r[7]["completion"]["values"],
            json!(["paris", "park", "party"]),
            "{mode}: {}",
            r[7]
        );
        assert_eq!(r[8]["completion"]["values"], json!(["123", "124"]), "{mode}: {}", r[8]);
        assert_eq!(r[9]["error"]["code"], -32602, "{mode}: {}", r[9]);
    }

    // A listen stream watches only what the caller may read (the
    // acknowledgement says which), and hears of its updates.
    let ack = first_listen_event(
        &gateway.url,
        json!([TEXT, BINARY, "toolgate://fixture/test://nothing-here"]),
    )
    .await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!([TEXT]), "{ack}");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/listen_resource.py");
    let poke = json!({"uri": "test://static-text"}).to_string();
    let out = StdCommand::new(python())
        .arg(&script)
        .args([gateway.url.as_str(), TEXT, "fixture__test_update_resource", &poke])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["updated"], TEXT, "{v}");

    // Each read and get left a receipt, naming what was read; the bundle verifies offline.
    let bundle = dir.path().join("bundle.json");
    toolgate(&[
        "export",
        "--since",
        "0",
        "--out",
        bundle.to_str().unwrap(),
        "--config",
        config_path.to_str().unwrap(),
    ])
    .await;
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let receipts: Vec<&Value> =
        b["receipts"].as_array().unwrap().iter().map(|e| &e["receipt"]["receipt"]).collect();
    let of = |tool: &str, decision: &str| {
        receipts.iter().filter(|r| r["tool"] == tool && r["decision"] == decision).count()
    };
    assert_eq!(of("resource:test://static-text", "allow"), 2, "{receipts:?}");
    assert_eq!(of("resource:test://template/{id}/data", "allow"), 2);
    assert_eq!(of("resource:test://static-binary", "deny"), 2);
    assert_eq!(of("prompt:test_prompt_with_arguments", "allow"), 2);
    assert_eq!(of("prompt:test_prompt_with_image", "deny"), 2);
    // Only what resolved to nothing (the unknown URI, once per era) names no server.
    let unresolved: Vec<&str> = receipts
        .iter()
        .filter(|r| r["server"] != "fixture")
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(unresolved, ["toolgate://fixture/test://nothing-here"; 2]);
    let verified = StdCommand::new(BIN).arg("verify").arg(&bundle).output().unwrap();
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    drop((gateway, fixture));
}

/// The TypeScript SDK v2 (`tests/ts/content_client.mjs`) in `mode`, with `token`.
fn ts_client(url: &str, mode: &str, token: Option<&str>, steps: &Value) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ts");
    assert!(
        root.join("node_modules/@modelcontextprotocol/client").exists(),
        "no TypeScript SDK: run scripts/test (it installs tests/ts)"
    );
    let mut cmd = StdCommand::new("node");
    cmd.arg(root.join("content_client.mjs")).args([url, mode, &steps.to_string()]);
    if let Some(t) = token {
        cmd.env("TOOLGATE_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap()
}

/// MCP Inspector's CLI (`tests/inspector`, on the Node it brings): its
/// answer as JSON (on stdout; an error on stderr), for `args` against
/// `url` with `token`.
fn inspector(url: &str, token: &str, args: &[&str]) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/inspector/node_modules");
    assert!(
        root.join(".bin/mcp-inspector").exists(),
        "no MCP Inspector: run scripts/test (it installs tests/inspector)"
    );
    let out = StdCommand::new(root.join("node/bin/node"))
        .arg(root.join(".bin/mcp-inspector"))
        .args([
            "--cli",
            url,
            "--transport",
            "http",
            "--header",
            &format!("Authorization: Bearer {token}"),
        ])
        .args(args)
        .env(
            "PATH",
            format!(
                "{}:{}",
                root.join("node/bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env(
            "MCP_CATALOG_PATH",
            std::env::temp_dir().join(format!("toolgate-inspector-{}.json", std::process::id())),
        )
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let said =
        if stdout.trim().is_empty() { stderr.lines().last().unwrap_or_default() } else { &stdout };
    serde_json::from_str(said).unwrap_or_else(|_| panic!("{args:?}: not JSON: {stdout}\n{stderr}"))
}

/// The same gateway behind an OAuth 2.1 issuer, read by the stock clients
/// people use besides the Python SDK: the TypeScript SDK v2 in both eras
/// and MCP Inspector's CLI, each with the access token as their READMEs
/// pass one. Authority holds for them as for the Python SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_and_the_inspector_read_under_authority_with_an_access_token() {
    let cancel = tokio_util::sync::CancellationToken::new();
    let key = issuer::signer("k1");
    let jwks = std::sync::Arc::new(std::sync::Mutex::new(json!({"keys": [key.jwk.clone()]})));
    let issuer_url = issuer::authorization_server(
        jwks,
        std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        &cancel,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut fixture = Command::new(BIN);
    fixture.args(["conformance-fixture", "--http", "127.0.0.1:0"]);
    let fixture = spawn_listening(fixture, &dir.path().join("fixture.log"), "serving on").await;
    let config_path = dir.path().join("toolgate.toml");
    let anonymous = "[callers.agent]\ntenant = \"acme\"\nanonymous = true\n";
    let text = config(&fixture.url);
    assert!(text.contains(anonymous));
    std::fs::write(&config_path, text.replace(anonymous, &issuer::oauth_config(&issuer_url)))
        .unwrap();
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(&config_path);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;
    let token = issuer::token(&key, &issuer_url, issuer::RESOURCE, "mcp", 300, -10);

    let steps = json!([
        {"read": TEXT},
        {"read": BINARY},
        {"get": "fixture__test_prompt_with_arguments", "arguments": {"arg1": "north", "arg2": "south"}},
        {"complete_prompt": "fixture__test_prompt_with_arguments", "argument": "arg1", "value": "par"},
        {"complete_template": TEMPLATE, "argument": "id", "value": "12"},
    ]);
    for mode in ["2026-07-28", "legacy"] {
        let (url, steps_, token_) = (gateway.url.clone(), steps.clone(), token.clone());
        let v = tokio::task::spawn_blocking(move || ts_client(&url, mode, Some(&token_), &steps_))
            .await
            .unwrap();
        assert_eq!(v["resources"], json!([TEXT]), "{mode}: {v}");
        assert_eq!(v["templates"], json!([TEMPLATE]), "{mode}: {v}");
        assert_eq!(
            v["prompts"],
            json!(["fixture__test_prompt_with_arguments", "fixture__test_simple_prompt"]),
            "{mode}: {v}"
        );
        let r = &v["results"];
        assert_eq!(
            r[0]["contents"][0]["text"], "This is the content of the static text resource.",
            "{mode}: {v}"
        );
        assert_eq!(r[1]["code"], -32010, "{mode}: the prohibited resource: {v}");
        assert_eq!(
            r[2]["messages"][0]["content"]["text"],
            "Prompt with arguments: arg1='north', arg2='south'",
            "{mode}: {v}"
        );
        assert_eq!(r[3]["completion"]["values"], json!(["paris", "park", "party"]), "{mode}: {v}");
        assert_eq!(r[4]["completion"]["values"], json!(["123", "124"]), "{mode}: {v}");
    }
    // Without the token, the TypeScript SDK is turned away (401).
    let url = gateway.url.clone();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ts");
    let refused = tokio::task::spawn_blocking(move || {
        StdCommand::new("node")
            .arg(root.join("content_client.mjs"))
            .args([url.as_str(), "2026-07-28", "[]"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!refused.status.success(), "a client without a token was served");

    let (url, token_) = (gateway.url.clone(), token.clone());
    let seen = tokio::task::spawn_blocking(move || {
        let ask = |args: &[&str]| inspector(&url, &token_, args);
        [
            ask(&["--method", "tools/list"]),
            ask(&["--method", "resources/list"]),
            ask(&["--method", "resources/read", "--uri", TEXT]),
            ask(&["--method", "resources/read", "--uri", BINARY]),
            ask(&["--method", "prompts/list"]),
            ask(&[
                "--method",
                "prompts/get",
                "--prompt-name",
                "fixture__test_prompt_with_arguments",
                "--prompt-args",
                "arg1=north",
                "arg2=south",
            ]),
            ask(&[
                "--method",
                "tools/call",
                "--tool-name",
                "fixture__test_update_resource",
                "--tool-arg",
                "uri=test://static-text",
            ]),
        ]
    })
    .await
    .unwrap();
    let names = |v: &Value, list: &str, field: &str| {
        v[list]
            .as_array()
            .unwrap_or(&vec![])
            .iter()
            .map(|x| x[field].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&seen[0], "tools", "name"), ["fixture__test_update_resource"], "{}", seen[0]);
    assert_eq!(names(&seen[1], "resources", "uri"), [TEXT], "{}", seen[1]);
    assert_eq!(
        seen[2]["contents"][0]["text"], "This is the content of the static text resource.",
        "{}",
        seen[2]
    );
    assert!(
        seen[3]["error"]["message"].as_str().is_some_and(|m| m.contains("not permitted")),
        "{}",
        seen[3]
    );
    assert_eq!(
        names(&seen[4], "prompts", "name"),
        ["fixture__test_prompt_with_arguments", "fixture__test_simple_prompt"],
        "{}",
        seen[4]
    );
    assert_eq!(
        seen[5]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='north', arg2='south'",
        "{}",
        seen[5]
    );
    assert_ne!(seen[6]["isError"], json!(true), "{}", seen[6]);
    drop((gateway, fixture));
    cancel.cancel();
}
