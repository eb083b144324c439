//! `toolgate import`: the configs people have (Claude Desktop's
//! `mcpServers`, VS Code's `servers` with `inputs`, Windsurf's `serverUrl`),
//! each pointing at real Atlas servers, become one toolgate config with no
//! credential in it; the official Python SDK then lists and calls through it.

mod demo_common;
mod ops_common;
mod peers_common;

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command as StdCommand;

use demo_common::{python, workspace};
use ops_common::{BIN, spawn_listening};
use serde_json::{Value, json};
use tokio::process::Command;

const SECRET: &str = "s3cret-value-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_client_configs_become_one_gateway_the_python_sdk_calls_through() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    // Parts over HTTP (VS Code), manuals over HTTP (Windsurf), tickets over stdio (Claude Desktop).
    let mut parts = Command::new(BIN);
    parts.args(["atlas", "parts", "--http", "127.0.0.1:0", "--state"]).arg(home.join("atlas"));
    let parts = spawn_listening(parts, &home.join("parts.log"), "serving parts on").await;
    let mut manuals = Command::new(BIN);
    manuals.args(["atlas", "manuals", "--http", "127.0.0.1:0", "--state"]).arg(home.join("atlas"));
    let manuals = spawn_listening(manuals, &home.join("manuals.log"), "serving manuals on").await;

    let claude = home.join("claude_desktop_config.json");
    let tickets = json!({"command": BIN, "args": ["atlas", "tickets", "--state", home.join("atlas")], "env": {"TICKETS_API_KEY": SECRET}});
    std::fs::write(&claude, json!({"mcpServers": {"Field Tickets": tickets, "remote": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}).to_string()).unwrap();
    std::fs::create_dir(home.join(".vscode")).unwrap();
    let vscode = home.join(".vscode/mcp.json");
    std::fs::write(
        &vscode,
        format!(
            "{{\n  // the parts catalog\n  \"inputs\": [{{\"type\": \"promptString\", \"id\": \
                \"parts-key\", \"description\": \"Parts API key\", \"password\": \
                true}}],\n  \"servers\": {{\n    \"parts\": {{\"type\": \"http\", \"url\": \"{}\", \
                \"headers\": {{\"X-Api-Key\": \"${{input:parts-key}}\"}}}},\n  }},\n}}\n",
            parts.url
        ),
    )
    .unwrap();
    let windsurf = home.join("mcp_config.json");
    std::fs::write(
        &windsurf,
        json!({"mcpServers": {"manuals": {"serverUrl": manuals.url}}}).to_string(),
    )
    .unwrap();

    let out = home.join("gateway");
    let imported = StdCommand::new(BIN)
        .arg("import")
        .args([&claude, &vscode, &windsurf])
        .arg("--out")
        .arg(&out)
        .args(["--listen", "127.0.0.1:0"])
        .env("TOOLGATE_INPUT_PARTS_KEY", "from-the-person")
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&imported.stdout), String::from_utf8_lossy(&imported.stderr));
    assert!(imported.status.success(), "{stdout}\n{stderr}");
    // What could not be taken is named with its file and key.
    assert!(
        stderr.contains(
            "claude_desktop_config.json: mcpServers.remote.type: the 2024-11-05 HTTP+SSE transport"
        ),
        "{stderr}"
    );
    // What replaces the servers, per client, and the variable to set.
    assert!(stdout.contains("TOOLGATE_INPUT_PARTS_KEY"), "{stdout}");
    assert!(
        stdout.contains("\"toolgate\": {")
            && stdout.contains("--stdio")
            && stdout.contains("\"type\":\"stdio\""),
        "{stdout}"
    );

    // No credential in the config; the written-out one is in an owner-only file.
    let config = std::fs::read_to_string(out.join("toolgate.toml")).unwrap();
    assert!(!config.contains(SECRET), "{config}");
    let secret = out.join("secrets/field-tickets.tickets-api-key");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), SECRET);
    assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(
        config.contains(
            "env_file = { \"TICKETS_API_KEY\" = \"secrets/field-tickets.tickets-api-key\" }"
        ),
        "{config}"
    );
    assert!(
        config.contains("headers_env = { \"X-Api-Key\" = \"TOOLGATE_INPUT_PARTS_KEY\" }"),
        "{config}"
    );
    // The stdio server runs in a box: the folder its arguments name is its
    // to write, said why, and it reaches no network; the HTTP ones take none.
    let table: toml::Table = config.parse().unwrap();
    let sandbox = &table["servers"]["field-tickets"]["sandbox"];
    let atlas = home.join("atlas").display().to_string();
    assert_eq!(
        sandbox["write"]
            .as_array()
            .map(|w| w.iter().filter_map(|p| p.as_str()).collect::<Vec<_>>()),
        Some(vec![atlas.as_str()]),
        "{config}"
    );
    assert_eq!(sandbox["network"].as_str(), Some("none"), "{config}");
    assert!(
        table["servers"]["parts"].get("sandbox").is_none()
            && table["servers"]["manuals"].get("sandbox").is_none(),
        "{config}"
    );
    assert!(
        stdout.contains(&format!("box: write {atlas}: a folder its arguments name (--state)")),
        "the grant and why, printed: {stdout}"
    );
    // Classed by regret, each with why; pinned.
    assert!(
        config.contains("[registry.\"field-tickets__get_ticket\"]\nclass = \"automatic\""),
        "{config}"
    );
    assert!(
        config.contains("[registry.\"parts__raise_parts_order\"]\nclass = \"requires_approval\"")
            || config.contains("[registry.\"parts__raise_parts_order\"]\nclass = \"prohibited\""),
        "{config}"
    );
    assert!(config.contains("# regret "), "{config}");
    let lock = std::fs::read_to_string(out.join("toolgate.lock")).unwrap();
    assert!(
        lock.contains("field-tickets__get_ticket") && lock.contains("manuals__search_manual"),
        "{lock}"
    );

    // The written config serves; the Python SDK lists and calls through it.
    let mut gateway = Command::new(BIN);
    gateway
        .args(["serve", "--config"])
        .arg(out.join("toolgate.toml"))
        .env("TOOLGATE_INPUT_PARTS_KEY", "from-the-person");
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;
    let calls = json!([
        {"tool": "field-tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}},
        {"tool": "manuals__search_manual", "arguments": {"query": "torque"}},
    ]);
    let script = workspace().join("tests/python/sdk_client.py");
    let run = StdCommand::new(python())
        .arg(&script)
        .args([gateway.url.as_str(), "legacy", &calls.to_string()])
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{got}\n{}", String::from_utf8_lossy(&run.stderr));
    let v: Value = serde_json::from_str(&got).unwrap();
    let names: Vec<&str> =
        v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"field-tickets__get_ticket") && names.contains(&"parts__find_part"),
        "{names:?}"
    );
    assert_eq!(v["results"][0]["structuredContent"]["ticket_id"], "SR-20031", "{v}");
    assert!(v["results"][1].get("isError").is_none_or(|e| e == false), "{v}");

    // Importing again into the same folder writes nothing.
    let again =
        StdCommand::new(BIN).arg("import").arg(&claude).arg("--out").arg(&out).output().unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exists already"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(out.join("toolgate.toml")).unwrap(), config);
    drop((gateway, parts, manuals));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_writes_a_config_for_the_servers_named_and_refuses_without_any() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let out = home.join("gateway");
    // The server's state folder exists before the import, as a server's
    // data folder does: the box grants only what is there (`box: write`).
    std::fs::create_dir(home.join("atlas")).unwrap();
    let tickets = format!("tickets={BIN} atlas tickets --state {}", home.join("atlas").display());
    let init = StdCommand::new(BIN)
        .args(["init", "--out"])
        .arg(&out)
        .args([
            "--server",
            &tickets,
            "--env",
            &format!("tickets.API_KEY={SECRET}"),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&init.stdout),
        String::from_utf8_lossy(&init.stderr)
    );
    let config = std::fs::read_to_string(out.join("toolgate.toml")).unwrap();
    assert!(
        !config.contains(SECRET)
            && config.contains("env_file = { \"API_KEY\" = \"secrets/tickets.api-key\" }"),
        "{config}"
    );
    assert!(
        config.contains("[registry.\"tickets__get_ticket\"]\nclass = \"automatic\""),
        "{config}"
    );
    assert!(
        String::from_utf8_lossy(&init.stdout).contains("\"toolgate\": {"),
        "the entry to add to a client"
    );

    // The Python SDK calls through it.
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(out.join("toolgate.toml"));
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;
    let calls = json!([{"tool": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}}]);
    let run = StdCommand::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([gateway.url.as_str(), "2026-07-28", &calls.to_string()])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&run.stdout)
        .unwrap_or(json!({"unreadable": String::from_utf8_lossy(&run.stdout)}));
    assert_eq!(v["results"][0]["structuredContent"]["ticket_id"], "SR-20031", "{v}");

    // Not on a terminal and no server named: it says how, and writes nothing.
    let bare = StdCommand::new(BIN)
        .args(["init", "--out"])
        .arg(home.join("empty"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!bare.status.success());
    assert!(
        String::from_utf8_lossy(&bare.stderr).contains("--server NAME=COMMAND"),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    assert!(!home.join("empty").exists());
    drop(gateway);
}

/// A server with prompts, resources and a template (the conformance
/// fixture, over stdio in its box): the import registers each as the read
/// it is, says so, and a client of the written config is given them all —
/// as it was without toolgate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_and_resources_are_registered_as_reads_and_a_client_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let client = home.join("claude_desktop_config.json");
    std::fs::write(&client, json!({"mcpServers": {"fixture": {"command": BIN, "args": ["conformance-fixture", "--stdio"]}}}).to_string()).unwrap();
    let out = home.join("gateway");
    let (ok, stdout, stderr) = import(&[&client], &out);
    assert!(ok, "{stdout}\n{stderr}");
    // The summary says what was written for each kind.
    assert!(
        stdout.contains("fixture (from ")
            && stdout.contains("23 tools classed (")
            && stdout.contains(
                "5 prompts, 2 resources, 1 template registered automatic (reads); all pinned"
            ),
        "{stdout}"
    );
    let config = std::fs::read_to_string(out.join("toolgate.toml")).unwrap();
    for prompt in [
        "test_simple_prompt",
        "test_prompt_with_arguments",
        "test_prompt_with_embedded_resource",
        "test_prompt_with_image",
        "test_input_required_result_prompt",
    ] {
        assert!(
            config.contains(&format!(
                "[registry_prompts.\"fixture__{prompt}\"]\nclass = \"automatic\""
            )),
            "{prompt}: {config}"
        );
    }
    for uri in ["test://static-text", "test://static-binary", "test://template/{id}/data"] {
        assert!(config.contains(&format!("[[registry_resources]]\nserver = \"fixture\"\nuri = \"{uri}\"\nclass = \"automatic\"")), "{uri}: {config}");
    }
    assert!(
        config.contains(
            "# prompt:fixture__test_simple_prompt: a prompt get is a read (prompts/get); pinned"
        ),
        "each entry says why: {config}"
    );
    let lock = std::fs::read_to_string(out.join("toolgate.lock")).unwrap();
    assert!(
        lock.contains("prompt:fixture__test_simple_prompt")
            && lock.contains("template:toolgate://fixture/test://template/{id}/data"),
        "{lock}"
    );
    // What `toolgate audit --suggest` prints for them is what was written:
    // nothing, now that the registry names each.
    let suggest = StdCommand::new(BIN)
        .args(["audit", "--suggest", "--config"])
        .arg(out.join("toolgate.toml"))
        .output()
        .unwrap();
    let suggested = String::from_utf8_lossy(&suggest.stdout);
    assert!(
        suggest.status.success()
            && !suggested.contains("registry_prompts")
            && !suggested.contains("registry_resources"),
        "{suggested}"
    );

    // A client of the written config is given every prompt, resource and template.
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(out.join("toolgate.toml"));
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;
    let steps = json!([{"get": "fixture__test_prompt_with_arguments", "arguments": {"arg1": "north", "arg2": "south"}}, {"read": "toolgate://fixture/test://template/7/data"}]);
    let run = StdCommand::new(python())
        .arg(workspace().join("tests/python/content_client.py"))
        .args([gateway.url.as_str(), "2026-07-28", &steps.to_string()])
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{got}\n{}", String::from_utf8_lossy(&run.stderr));
    let v: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        (
            v["prompts"].as_array().unwrap().len(),
            v["resources"].as_array().unwrap().len(),
            v["templates"].as_array().unwrap().len()
        ),
        (5, 2, 1),
        "{v}"
    );
    assert_eq!(
        v["results"][0]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='north', arg2='south'",
        "{v}"
    );
    assert!(
        v["results"][1]["contents"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Data for ID: 7"),
        "{v}"
    );
    // And doctor counts what the client was given.
    let doctor = StdCommand::new(BIN)
        .args(["doctor", "--config"])
        .arg(out.join("toolgate.toml"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(said.contains("5 of 5 prompts, 2 of 2 resources, 1 of 1 templates"), "{said}");
    drop(gateway);
}

/// Runs `toolgate import FILES --out OUT`: (success, stdout, stderr).
fn import(files: &[&std::path::Path], out: &std::path::Path) -> (bool, String, String) {
    // The variable an imported `${input:…}` asks for, so that server starts.
    let run = StdCommand::new(BIN)
        .arg("import")
        .args(files)
        .arg("--out")
        .arg(out)
        .args(["--listen", "127.0.0.1:0"])
        .env("TOOLGATE_INPUT_X_Y", "set")
        .output()
        .unwrap();
    (
        run.status.success(),
        String::from_utf8_lossy(&run.stdout).into_owned(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

/// A client config from a cloned repository, imported into a folder of that
/// repository: links planted there (at the config's temporary name, the
/// token's, a secret's, `secrets/` itself) are never written through, and
/// what they point at keeps its content and its mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_in_the_output_folder_are_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let victim = |name: &str| {
        let path = home.join(name);
        std::fs::write(&path, "the person's own file\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    };
    let (config_victim, token_victim, secret_victim) =
        (victim("bashrc"), victim("profile"), victim("ssh_config"));
    // The server's state folder, there before the import: its box's grant.
    std::fs::create_dir(home.join("atlas")).unwrap();
    let client = home.join("mcp.json");
    let tickets = json!({"command": BIN, "args": ["atlas", "tickets", "--state", home.join("atlas")], "env": {"API_KEY": SECRET}});
    std::fs::write(&client, json!({"mcpServers": {"tickets": tickets}}).to_string()).unwrap();

    // Links at the names the writers used (and use), some dangling.
    let out = home.join("repo-out");
    std::fs::create_dir_all(out.join("secrets")).unwrap();
    for (name, target) in [
        ("toolgate.toml.tmp", &config_victim),
        ("toolgate.toml.partial", &config_victim),
        ("approver.token", &token_victim),
        ("approver.token.tmp", &token_victim),
        ("secrets/tickets.api-key", &secret_victim),
        ("secrets/tickets.api-key.tmp", &secret_victim),
    ] {
        std::os::unix::fs::symlink(target, out.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(home.join("nowhere"), out.join("toolgate.lock")).unwrap();
    let (ok, stdout, stderr) = import(&[&client], &out);
    assert!(ok, "{stdout}\n{stderr}");
    for victim in [&config_victim, &token_victim, &secret_victim] {
        assert_eq!(
            (std::fs::read_to_string(victim).unwrap().as_str(), mode(victim)),
            ("the person's own file\n", 0o644),
            "{}",
            victim.display()
        );
    }
    assert!(!home.join("nowhere").exists());
    for written in ["toolgate.toml", "approver.token", "secrets/tickets.api-key", "toolgate.lock"] {
        let path = out.join(written);
        assert!(
            std::fs::symlink_metadata(&path).unwrap().is_file(),
            "{written} is a file of its own"
        );
        assert_eq!(mode(&path), 0o600, "{written}");
    }
    assert_eq!(std::fs::read_to_string(out.join("secrets/tickets.api-key")).unwrap(), SECRET);

    // `secrets/` itself a link: refused, nothing written through it, what to do said.
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let linked = home.join("linked-out");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(&elsewhere, linked.join("secrets")).unwrap();
    let (ok, _, stderr) = import(&[&client], &linked);
    assert!(
        !ok && stderr.contains("is a symbolic link") && stderr.contains("remove the link"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert!(std::fs::symlink_metadata(linked.join("toolgate.toml")).is_err(), "nothing half-done");

    // A dangling link at toolgate.toml counts as taken.
    let dangling = home.join("dangling-out");
    std::fs::create_dir(&dangling).unwrap();
    std::os::unix::fs::symlink(home.join("nowhere"), dangling.join("toolgate.toml")).unwrap();
    let (ok, _, stderr) = import(&[&client], &dangling);
    assert!(!ok && stderr.contains("exists already"), "{stderr}");
    assert!(!home.join("nowhere").exists());
}

/// `http://user:password@host/…?api_key=…` from a client config: the config
/// keeps the URL without them, each goes to an owner-only secret, and the
/// written config is one the gateway accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_an_imported_url_move_to_owner_only_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let mut parts = Command::new(BIN);
    parts.args(["atlas", "parts", "--http", "127.0.0.1:0", "--state"]).arg(home.join("atlas"));
    let parts = spawn_listening(parts, &home.join("parts.log"), "serving parts on").await;
    let (password, key, token) = ("pa55-word-0001", "api-key-value-0002", "access-token-0003");
    let url = parts.url.replacen("http://", &format!("http://dana:{password}@"), 1)
        + &format!("?region=eu&API_KEY={key}&access-token={token}");
    let client = home.join("mcp.json");
    std::fs::write(&client, json!({"mcpServers": {"parts": {"url": url}}}).to_string()).unwrap();
    let out = home.join("gateway");
    let (ok, stdout, stderr) = import(&[&client], &out);
    assert!(ok, "{stdout}\n{stderr}");
    let config = std::fs::read_to_string(out.join("toolgate.toml")).unwrap();
    for value in [password, key, token, "dana"] {
        assert!(
            !config.contains(value) && !stdout.contains(value) && !stderr.contains(value),
            "{value} stays out: {config}\n{stdout}{stderr}"
        );
    }
    assert!(config.contains(&format!("url = \"{}?region=eu\"", parts.url)), "{config}");
    assert!(
        config.contains("headers_file = { \"Authorization\" = \"secrets/parts.authorization\" }"),
        "{config}"
    );
    assert!(
        config.contains(
            "query_file = { \"API_KEY\" = \"secrets/parts.query-api-key\", \"access-token\" = \
                \"secrets/parts.query-access-token\" }"
        ),
        "{config}"
    );
    let secret = |name: &str| {
        (
            std::fs::read_to_string(out.join("secrets").join(name)).unwrap(),
            mode(&out.join("secrets").join(name)),
        )
    };
    assert_eq!(secret("parts.query-api-key"), (key.to_string(), 0o600));
    assert_eq!(secret("parts.query-access-token"), (token.to_string(), 0o600));
    // Basic base64("dana:pa55-word-0001").
    assert_eq!(
        secret("parts.authorization"),
        ("Basic ZGFuYTpwYTU1LXdvcmQtMDAwMQ==".to_string(), 0o600)
    );
    // The gateway reached it with them: its tools were listed and classed.
    assert!(config.contains("[registry.\"parts__find_part\"]"), "{config}");
    drop(parts);
}

/// Names, commands and reasons from a client config reach the terminal
/// visibly: no escape sequence, bell, carriage return or bidi override is
/// printed as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_client_config_says_is_printed_visibly() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let hostile = "tick\u{1b}[2J\u{7}ets\rOK\u{202e}exe.txt\u{2066}";
    std::fs::create_dir(home.join("atlas")).unwrap();
    let tickets = json!({"command": BIN, "args": ["atlas", "tickets", "--state", home.join("atlas")], "env": {"K\u{1b}]0;title\u{7}": "${input:x\u{202e}y}"}});
    let left_out = json!({"type": "sse", "url": "http://127.0.0.1:9/sse"});
    let client = home.join("mcp.json");
    std::fs::write(
        &client,
        json!({"mcpServers": {hostile: tickets, format!("gone\u{1b}[31m{hostile}"): left_out}})
            .to_string(),
    )
    .unwrap();
    let (ok, stdout, stderr) = import(&[&client], &home.join("gateway"));
    assert!(ok, "{stdout}\n{stderr}");
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        let raw: Vec<char> = text.chars().filter(|c| (c.is_control() && *c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')).collect();
        assert!(raw.is_empty(), "{what} holds {raw:?}: {text:?}");
    }
    assert!(
        stdout.contains("`tick\\u{1b}[2J\\u{7}ets\\u{d}OK\\u{202e}exe.txt\\u{2066}`"),
        "{stdout}"
    );
    assert!(stdout.contains("K\\u{1b}]0;title\\u{7}"), "the variable's key, visibly: {stdout}");
    assert!(stderr.contains("gone\\u{1b}[31m"), "{stderr}");
}

/// A server that fails at start costs the import what it takes to fail,
/// not a timeout, and the import says why: the last lines of its stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_at_start_is_not_waited_for_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    std::fs::create_dir(home.join("atlas")).unwrap();
    let tickets =
        json!({"command": BIN, "args": ["atlas", "tickets", "--state", home.join("atlas")]});
    let failing = json!({"command": "sh", "args": ["-c", "echo 'error: invalid peer certificate: UnknownIssuer' >&2; exit 3"]});
    let client = home.join("mcp.json");
    std::fs::write(
        &client,
        json!({"mcpServers": {"tickets": tickets, "broken": failing}}).to_string(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = import(&[&client], &home.join("gateway"));
    let took = started.elapsed();
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "the import waited {took:?} for a server that had exited"
    );
    assert!(
        stdout.contains("broken") && stdout.contains("UnknownIssuer"),
        "the reason is printed: {stdout}"
    );
    let config = std::fs::read_to_string(home.join("gateway/toolgate.toml")).unwrap();
    assert!(
        config.contains("`broken` did not start")
            && config.contains("UnknownIssuer")
            && config.contains("exit status: 3"),
        "{config}"
    );
}

/// A remote server that signs each person in with OAuth (its 401 names its
/// protected resource metadata, which names a live authorization server) is
/// imported as `mode = "oauth"`: each person reaches it as themselves. One
/// that needs no sign-in stays shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_that_signs_each_person_in_is_imported_as_oauth() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let provider =
        peers_common::peer(peers_common::provider(&["--port", "0"]), &home.join("provider.log"))
            .await;
    let who = peers_common::peer(
        peers_common::whoami(&["--port", "0", "--issuer", &provider.url, "--stateless"]),
        &home.join("who.log"),
    )
    .await;
    let mut parts = Command::new(BIN);
    parts.args(["atlas", "parts", "--http", "127.0.0.1:0", "--state"]).arg(home.join("atlas"));
    let parts = spawn_listening(parts, &home.join("parts.log"), "serving parts on").await;
    // Claude Code's `type: http` entries.
    let claude = home.join(".claude.json");
    std::fs::write(&claude, json!({"mcpServers": {"who": {"type": "http", "url": who.url}, "parts": {"type": "http", "url": parts.url}}}).to_string()).unwrap();
    let out = home.join("imported");
    let (ok, stdout, stderr) = import(&[&claude], &out);
    assert!(ok, "{stdout}\n{stderr}");
    let text = std::fs::read_to_string(out.join("toolgate.toml")).unwrap();
    let toml: toml::Value = toml::from_str(&text).unwrap();
    assert_eq!(toml["servers"]["who"]["identity"]["mode"].as_str(), Some("oauth"), "{text}");
    assert!(
        toml["servers"]["parts"].get("identity").is_none(),
        "a server with no sign-in stays shared: {text}"
    );
    assert!(text.contains("connects\n# their own account"), "{text}");
}
