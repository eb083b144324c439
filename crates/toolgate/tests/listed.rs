//! One effective class, everywhere: what `toolgate doctor`, `toolgate tools
//! --json` and `toolgate audit --json` say a client is given of each
//! server's tools, prompts, resources and templates is what a client of a
//! gateway serving the same config is given — counted by the official
//! Python SDK through `tools/list`, `prompts/list`, `resources/list` and
//! `resources/templates/list`, every page. Real upstreams (two conformance
//! fixtures, one trusted, and the Atlas parts server, trusted) under a
//! registry that lists some items, prohibits some, is silent on others,
//! and pins two at contracts they no longer have.

mod demo_common;
mod ops_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command as StdCommand;

use demo_common::{python, workspace};
use ops_common::{BIN, spawn_listening};
use serde_json::{Value, json};
use tokio::process::Command;

const SERVERS: [&str; 3] = ["fixture", "parts", "trusted"];
const KINDS: [&str; 4] = ["tools", "prompts", "resources", "templates"];

/// Per server, per list: (given, offered) — offered only where the place says it.
type Counts = BTreeMap<String, [usize; 4]>;

fn config(fixture: &str, trusted: &str, parts: &str) -> String {
    format!(
        r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"
# Small pages: a client reads every page, as the SDK is driven to here.
list_page_size = 7

[servers.fixture]
url = "{fixture}"

[servers.trusted]
url = "{trusted}"
trusted = true

[servers.parts]
url = "{parts}"
trusted = true

[registry."fixture__test_simple_text"]
class = "automatic"
[registry."fixture__test_image_content"]
class = "requires_approval"
[registry."fixture__test_error_handling"]
class = "prohibited"
# Pinned (toolgate.lock) at a contract it no longer has.
[registry."fixture__test_audio_content"]
class = "automatic"
[registry."trusted__test_logging_tool"]
class = "automatic"

[registry_prompts."fixture__test_simple_prompt"]
class = "automatic"
# Pinned at a contract it no longer has.
[registry_prompts."fixture__test_prompt_with_arguments"]
class = "automatic"
[registry_prompts."fixture__test_prompt_with_image"]
class = "prohibited"
[registry_prompts."trusted__test_simple_prompt"]
class = "prohibited"

[[registry_resources]]
server = "fixture"
uri = "test://static-binary"
class = "prohibited"
[[registry_resources]]
server = "fixture"
uri = "test://*"
class = "automatic"

[callers.agent]
tenant = "acme"
anonymous = true
"#
    )
}

/// The server an exposed name or URI belongs to.
fn server_of(name: &str) -> String {
    let name = name
        .strip_prefix("prompt:")
        .or_else(|| name.strip_prefix("resource:"))
        .or_else(|| name.strip_prefix("template:"))
        .unwrap_or(name);
    match name.strip_prefix("toolgate://") {
        Some(rest) => rest.split('/').next().unwrap().to_string(),
        None => name.split("__").next().unwrap().to_string(),
    }
}

/// Counts what the Python SDK is given, per server and list.
fn sdk_counts(url: &str, mode: &str) -> Counts {
    let out = StdCommand::new(python())
        .arg(workspace().join("tests/python/list_all.py"))
        .args([url, mode])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let mut counts: Counts = SERVERS.iter().map(|s| (s.to_string(), [0; 4])).collect();
    for (i, kind) in KINDS.iter().enumerate() {
        for name in v[kind].as_array().unwrap() {
            counts
                .get_mut(&server_of(name.as_str().unwrap()))
                .unwrap_or_else(|| panic!("{name}"))[i] += 1;
        }
    }
    counts
}

/// `toolgate doctor`'s line for each upstream: `a client is given N of M tools, …`.
fn doctor_counts(config: &Path) -> (Counts, Counts, String) {
    let out = StdCommand::new(BIN).args(["doctor", "--config"]).arg(config).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (mut given, mut offered) = (Counts::new(), Counts::new());
    for server in SERVERS {
        let line = stdout
            .lines()
            .find(|l| l.contains(&format!("upstream {server}: protocol")))
            .unwrap_or_else(|| panic!("no line for {server}:\n{stdout}"));
        let said = line.split("a client is given ").nth(1).unwrap().split(';').next().unwrap();
        let parts: Vec<&str> = said.split(", ").collect();
        assert_eq!(parts.len(), 4, "{line}");
        let (mut g, mut o) = ([0; 4], [0; 4]);
        for (i, (part, kind)) in parts.iter().zip(KINDS).enumerate() {
            let words: Vec<&str> = part.split(' ').collect();
            assert_eq!((words.len(), words[1], words[3]), (4, "of", kind), "{line}");
            (g[i], o[i]) = (words[0].parse().unwrap(), words[2].parse().unwrap());
        }
        given.insert(server.to_string(), g);
        offered.insert(server.to_string(), o);
    }
    (given, offered, stdout)
}

/// What a place that prints `listing` per item (`tools --json`, `audit
/// --json`) says is given, per server and list.
fn listed_counts(items: impl Iterator<Item = (String, &'static str, bool)>) -> Counts {
    let mut counts: Counts = SERVERS.iter().map(|s| (s.to_string(), [0; 4])).collect();
    for (name, kind, listed) in items {
        let i = KINDS.iter().position(|k| *k == kind).unwrap_or_else(|| panic!("{kind}"));
        if listed {
            counts.get_mut(&server_of(&name)).unwrap()[i] += 1;
        }
    }
    counts
}

/// A pin name's list: `prompt:` → prompts, …; anything else is a tool.
fn kind_of(name: &str) -> &'static str {
    ["prompt:", "resource:", "template:"]
        .iter()
        .zip(["prompts", "resources", "templates"])
        .find(|(p, _)| name.starts_with(**p))
        .map_or("tools", |(_, k)| k)
}

fn run_json(args: &[&str], config: &Path) -> Value {
    let out = StdCommand::new(BIN).args(args).arg("--config").arg(config).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_place_counts_what_a_client_of_the_serving_gateway_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let fixture = |name: &'static str| {
        let mut cmd = Command::new(BIN);
        cmd.args(["conformance-fixture", "--http", "127.0.0.1:0"]);
        let log = home.join(format!("{name}.log"));
        async move { spawn_listening(cmd, &log, "serving on").await }
    };
    let (untrusted, trusted) = (fixture("fixture").await, fixture("trusted").await);
    let mut parts = Command::new(BIN);
    parts.args(["atlas", "parts", "--http", "127.0.0.1:0", "--state"]).arg(home.join("atlas"));
    let parts = spawn_listening(parts, &home.join("parts.log"), "serving parts on").await;
    let config = home.join("toolgate.toml");
    std::fs::write(&config, self::config(&untrusted.url, &trusted.url, &parts.url)).unwrap();
    // Two contracts pinned at definitions they no longer have.
    let stale = |name: &str| {
        (
            name.to_string(),
            json!({"sha256": "0".repeat(64), "definition": {"name": name, "description": "as it was"}, "accepted_at": 0}),
        )
    };
    let pins: serde_json::Map<String, Value> =
        [stale("fixture__test_audio_content"), stale("prompt:fixture__test_prompt_with_arguments")]
            .into_iter()
            .collect();
    std::fs::write(home.join("toolgate.lock"), json!({"version": 1, "tools": pins}).to_string())
        .unwrap();

    // Before anything serves: the rest is not pinned yet, and is counted as
    // given (a serving gateway pins and lists it).
    let (before, offered, doctor) = doctor_counts(&config);
    println!("{doctor}");
    assert_eq!(offered["fixture"], [23, 5, 2, 1], "{doctor}");
    assert_eq!(before["fixture"], [2, 1, 1, 1], "{doctor}");
    assert_eq!(before["trusted"], [1, 4, 2, 1], "{doctor}");
    assert!(
        doctor.contains("warn  upstream fixture:")
            && doctor.contains("not pinned yet, listed once served"),
        "{doctor}"
    );
    assert!(
        doctor.contains("not listed: 19 tools, 2 prompts: untrusted server, not in the registry"),
        "{doctor}"
    );
    assert!(
        doctor.contains(
            "not listed: 1 tool, 1 prompt, 1 resource: the registry classes them prohibited"
        ),
        "{doctor}"
    );
    assert!(
        doctor.contains(
            "FAIL  upstream fixture: not listed, and refused, until accepted: 1 tool, 1 prompt: \
                contract changed since pinned"
        ),
        "{doctor}"
    );
    assert!(doctor.contains("--accept fixture__test_audio_content"), "{doctor}");
    assert!(doctor.contains("not listed: 22 tools: its annotations imply prohibited"), "{doctor}");

    // `toolgate tools --json` says the same of each item.
    let tools = run_json(&["tools", "--json"], &config);
    let rows =
        tools["tools"].as_array().unwrap().iter().chain(tools["contents"].as_array().unwrap());
    let by_tools = listed_counts(rows.map(|r| {
        (
            r["name"].as_str().unwrap().to_string(),
            kind_of(r["name"].as_str().unwrap()),
            r["listing"]["listed"] == true,
        )
    }));
    assert_eq!(by_tools, before, "tools --json");
    let audio = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "fixture__test_audio_content")
        .unwrap();
    assert_eq!(
        (audio["effective_class"].as_str(), audio["listing"]["reason"].as_str()),
        (Some("automatic"), Some("contract_changed")),
        "{audio}"
    );
    let unregistered = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "fixture__test_logging_tool")
        .unwrap();
    assert_eq!(unregistered["listing"]["reason"], "untrusted_unregistered", "{unregistered}");
    assert!(
        unregistered["listing"]["to_list"]
            .as_str()
            .unwrap()
            .starts_with("[registry.\"fixture__test_logging_tool\"]\nclass = "),
        "{unregistered}"
    );
    // …and `toolgate audit --json`.
    let audit = run_json(&["audit", "--json"], &config);
    let by_audit = listed_counts(audit["listing"].as_array().unwrap().iter().map(|r| {
        (
            r["name"].as_str().unwrap().to_string(),
            kind_of(r["name"].as_str().unwrap()),
            r["listing"]["listed"] == true,
        )
    }));
    assert_eq!(by_audit, before, "audit --json");

    // The table: columns stay aligned past 36 characters, the class in
    // force and what a client is given are shown, and the entry that would
    // list each unregistered item follows.
    let table = StdCommand::new(BIN).args(["tools", "--config"]).arg(&config).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    println!("{table}");
    let header = table.lines().next().unwrap();
    let long = table
        .lines()
        .find(|l| l.starts_with("fixture__test_input_required_result_multiple_inputs "))
        .unwrap_or_else(|| panic!("{table}"));
    let short = table.lines().find(|l| l.starts_with("fixture__test_simple_text ")).unwrap();
    for (column, in_long, in_short) in [
        ("annotations imply", "prohibited", "prohibited"),
        ("registry says", "-", "automatic"),
        ("in force", "prohibited", "automatic"),
        ("a client is given it", "no: untrusted server, not in the registry", "listed once served"),
    ] {
        let at = header.find(column).unwrap();
        assert!(at > "fixture__test_input_required_result_multiple_inputs".len(), "{header}");
        assert!(
            long[at..].starts_with(in_long) && short[at..].starts_with(in_short),
            "`{column}` is not aligned:\n{header}\n{long}\n{short}"
        );
    }
    assert!(
        table.contains("Not listed until the registry names them")
            && table.contains(
                "[registry_prompts.\"fixture__test_prompt_with_embedded_resource\"]\nclass = \
                    \"automatic\""
            ),
        "{table}"
    );

    // A gateway serving the config: the Python SDK, in both eras, is given
    // exactly what every place said.
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(&config);
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;
    for mode in ["2026-07-28", "legacy"] {
        let client = tokio::task::spawn_blocking({
            let url = gateway.url.clone();
            move || sdk_counts(&url, mode)
        })
        .await
        .unwrap();
        assert_eq!(
            client, before,
            "{mode}: what the client is given, against what doctor said before the gateway served"
        );
    }
    // While it serves (everything it saw now pinned), doctor says the same.
    let (serving, _, doctor) = doctor_counts(&config);
    assert_eq!(serving, before, "{doctor}");
    assert!(!doctor.contains("not pinned yet"), "{doctor}");
    drop((gateway, untrusted, trusted, parts));
}
