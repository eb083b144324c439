//! A credential toolgate holds never reaches an agent (issue 58, hole 9):
//! a real MCP server written with the official Python SDK
//! (`tests/python/echo_credentials.py`) says back the API key `toolgate
//! import` put in `secrets/` — in a tool's text, its `structuredContent`,
//! a tool error, a JSON-RPC error, a resource, a prompt and its stderr — and
//! a second one, over Streamable HTTP, echoes the `Authorization` header the
//! gateway sends it. Through a real gateway (`toolgate serve`), the stock
//! Python SDK client gets `credential_withheld` refusals naming the tool and
//! never the value; the log has `[withheld]` in its place; the receipts
//! (values captured) name the tool and why, and hold no value either.

mod demo_common;
mod ops_common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use base64::Engine as _;
use demo_common::workspace;
use ops_common::{BIN, spawn_listening, toolgate};
use serde_json::{Value, json};
use tokio::process::Command;

const SECRET: &str = "sk-echo-7Hq2xR9vLm4Pz8Wd-3f1c";
const HEADER_TOKEN: &str = "web-token-9f8e7d6c5b4a3210";

/// The venv's Python by its own path (its symlink is what makes it the venv's).
fn python() -> PathBuf {
    match std::env::var("TOOLGATE_PYTHON") {
        Ok(p) => PathBuf::from(p),
        Err(_) => demo_common::python().parent().unwrap().canonicalize().unwrap().join("python"),
    }
}

fn owner_only(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn config(script: &Path, web: &str) -> String {
    let read = |tools: &[&str]| {
        tools
            .iter()
            .map(|t| format!("[registry.\"{t}\"]\nclass = \"automatic\"\nread_only = true\n"))
            .collect::<String>()
    };
    let write = |tools: &[&str]| {
        tools
            .iter()
            .map(|t| format!("[registry.\"{t}\"]\nclass = \"automatic\"\n"))
            .collect::<String>()
    };
    format!(
        r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"

[receipts]
capture_values = true

[servers.echo]
command = {python}
args = [{script}, "stdio"]
env_file = {{ "ECHO_API_KEY" = "secrets/echo.echo-api-key" }}
[servers.echo.sandbox]
read = [{script}]

[servers.web]
url = "{web}"
headers_file = {{ "Authorization" = "secrets/web.authorization" }}

[registry_prompts."echo__with_key"]
class = "automatic"
[[registry_resources]]
server = "echo"
uri = "env://*"
class = "automatic"

[callers.agent]
tenant = "acme"
anonymous = true

{reads}{writes}"#,
        python = json!(python().display().to_string()),
        script = json!(script.display().to_string()),
        reads = read(&[
            "echo__get_env",
            "echo__fail_with_key",
            "echo__rpc_error_with_key",
            "echo__harmless",
            "web__echo_authorization",
            "web__harmless"
        ]),
        writes = write(&["echo__get_env_structured", "echo__log_key"]),
    )
}

fn run(script: &str, args: &[&str]) -> Value {
    let out = StdCommand::new(python())
        .arg(workspace().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{script}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{script}: not JSON ({e}): {stdout}"))
}

/// Neither credential, in any form the matcher knows, is in `text`.
fn holds_none(text: &str, what: &str) {
    for value in [SECRET, HEADER_TOKEN] {
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        assert!(
            !text.contains(value) && !text.contains(&b64[..b64.len() - 4]),
            "{what} carries a credential:\n{text}"
        );
    }
}

/// The refusal of a tool result: reason, and the tool named in the message.
fn withheld(result: &Value, tool: &str, credential: &str) {
    assert_eq!(result["isError"], true, "{result}");
    let r = &result["structuredContent"];
    assert_eq!(r["reason"], "credential_withheld", "{result}");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.contains(tool)
            && message.contains(credential)
            && message.contains("withheld")
            && message.contains("operator"),
        "{message}"
    );
    assert_eq!(result["content"][0]["text"], r["message"], "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_an_upstream_says_back_reaches_no_agent_log_or_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let script = workspace().canonicalize().unwrap().join("tests/python/echo_credentials.py");
    let mut web = Command::new(python());
    web.arg(&script).arg("http");
    let web = spawn_listening(web, &home.join("web.log"), "serving on").await;

    std::fs::create_dir(home.join("secrets")).unwrap();
    owner_only(&home.join("secrets/echo.echo-api-key"), &format!("{SECRET}\n"));
    owner_only(&home.join("secrets/web.authorization"), &format!("Bearer {HEADER_TOKEN}\n"));
    let config_path = home.join("toolgate.toml");
    std::fs::write(&config_path, config(&script, &web.url)).unwrap();
    let mut gateway = Command::new(BIN);
    // The upstream's stderr is logged at debug.
    gateway
        .args(["serve", "--config"])
        .arg(&config_path)
        .env("RUST_LOG", "info,toolgate_mcp=debug");
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;

    // Tools, with the stock client's call_tool.
    let calls = json!([
        {"tool": "echo__get_env", "arguments": {}},
        {"tool": "echo__get_env_structured", "arguments": {}},
        {"tool": "echo__fail_with_key", "arguments": {}},
        {"tool": "echo__rpc_error_with_key", "arguments": {}},
        {"tool": "web__echo_authorization", "arguments": {}},
        {"tool": "echo__log_key", "arguments": {}},
        {"tool": "echo__harmless", "arguments": {}},
        {"tool": "web__harmless", "arguments": {}},
    ]);
    let got = run("sdk_client.py", &[&gateway.url, "legacy", &calls.to_string()]);
    holds_none(&got.to_string(), "what the client got");
    let results = got["results"].as_array().unwrap();
    let env = "servers.echo.env.ECHO_API_KEY";
    withheld(&results[0], "echo__get_env", env);
    withheld(&results[1], "echo__get_env_structured", env);
    // A write's refusal names the operation that ran.
    assert!(results[1]["structuredContent"]["operation_id"].is_string(), "{}", results[1]);
    withheld(&results[2], "echo__fail_with_key", env);
    withheld(&results[3], "echo__rpc_error_with_key", env);
    withheld(&results[4], "web__echo_authorization", "servers.web.headers.Authorization");
    assert_eq!(results[5]["content"][0]["text"], "logged", "{}", results[5]);
    for harmless in &results[6..8] {
        assert_eq!(harmless["content"][0]["text"], "nothing to see here", "{harmless}");
    }

    // A resource read and a prompt get, with read_resource and get_prompt.
    let steps = json!([{"read": "toolgate://echo/env://api-key"}, {"get": "echo__with_key", "arguments": {}}]);
    let content = run("content_client.py", &[&gateway.url, "legacy", &steps.to_string()]);
    holds_none(&content.to_string(), "what the client read");
    for (i, name) in ["env://api-key", "echo__with_key"].iter().enumerate() {
        let error = &content["results"][i]["error"];
        assert_eq!(error["data"]["reason"], "credential_withheld", "{content}");
        assert!(error["message"].as_str().unwrap().contains(name), "{content}");
    }

    // The log: the upstream's stderr line is there, with the key withheld.
    let mut log = String::new();
    for _ in 0..100 {
        log = std::fs::read_to_string(&gateway.log).unwrap();
        if log.contains("connecting with ECHO_API_KEY=") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(log.contains("connecting with ECHO_API_KEY=[withheld]"), "{log}");
    assert!(
        log.contains("credential_withheld")
            || log.contains("credential=servers.echo.env.ECHO_API_KEY"),
        "{log}"
    );
    holds_none(&log, "the gateway's log");

    // The receipts (values captured): each refusal names the tool and why; no value.
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
    holds_none(&list, "the receipts");
    let list: Value = serde_json::from_str(&list).unwrap();
    let refused: Vec<(String, Vec<Value>)> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["receipt"]["reason"] == "credential_withheld")
        .map(|r| {
            (
                r["receipt"]["tool"].as_str().unwrap().to_string(),
                r["receipt"]["rules"].as_array().cloned().unwrap_or_default(),
            )
        })
        .collect();
    for tool in ["get_env", "fail_with_key", "rpc_error_with_key", "echo_authorization"] {
        let (_, rules) = refused
            .iter()
            .find(|(t, _)| t == tool)
            .unwrap_or_else(|| panic!("no credential_withheld receipt for {tool}: {refused:?}"));
        assert!(
            rules.iter().any(|r| r.as_str().is_some_and(|r| r.starts_with("credential.servers."))),
            "{rules:?}"
        );
    }
    drop((gateway, web));
}
