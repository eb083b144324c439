//! Level 3: stdio on both edges. A stdio upstream (`toolgate atlas tickets`)
//! that dies is restarted with backoff, its tools leaving the list and its
//! calls getting `retry` meanwhile; and `toolgate serve --stdio` serves an
//! rmcp client in both protocol eras.

use std::path::Path;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::pipeline::{self, Answer, Call, CallRequest};
use toolgate_mcp::wire::Era;

fn write_config(dir: &Path) -> std::path::PathBuf {
    let exe = env!("CARGO_BIN_EXE_toolgate");
    let state = dir.join("atlas");
    let text = format!(
        "[servers.tickets]\ncommand = {}\nargs = [\"atlas\", \"tickets\", \"--state\", \
            {1}]\ntrusted = true\n[servers.tickets.sandbox]\nwrite = \
            [{1}]\n\n[registry.\"tickets__get_ticket\"]\nclass = \
            \"automatic\"\n\n[callers.local]\ntenant = \"local\"\nanonymous = true\n",
        json!(exe),
        json!(state.display().to_string())
    );
    std::fs::create_dir_all(&state).unwrap();
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn get_ticket(gw: &Gateway) -> Answer {
    get_ticket_recorded(gw).await.answer
}

async fn get_ticket_recorded(gw: &Gateway) -> toolgate_gateway::call::Recorded {
    let caller = gw.callers.stdio().expect("the config opens a local caller");
    let get = Call {
        kind: toolgate_mcp::upstream::Kind::Tool,
        name: "tickets__get_ticket".into(),
        arguments: json!({"ticket_id": "SR-20031"}),
        progress: None,
        client: None,
        preview: false,
        deadline_ms: None,
        input: Default::default(),
        client_capabilities: None,
        operation_key: None,
        run: None,
        session: None,
        inbound_token: None,
        cancelled: Default::default(),
    };
    let call = CallRequest {
        caller,
        trace: Default::default(),
        request_id: None,
        era: Era::Modern,
        call: get,
    };
    pipeline::call_tool(gw, call).await
}

#[tokio::test]
async fn a_dead_stdio_upstream_gives_retry_and_is_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(Config::load(&write_config(dir.path())).unwrap(), Mode::Serve)
        .await
        .unwrap();
    assert!(gw.wait_ready(Duration::from_secs(10)).await.is_empty());
    let recorded = get_ticket_recorded(&gw).await;
    assert!(matches!(recorded.answer, Answer::Result(_)));
    // Its receipt names the box the server ran in: the profile's hash.
    let upstream = gw.catalogs.upstreams().iter().find(|u| u.name == "tickets").cloned().unwrap();
    let toolgate_mcp::sandbox::Sandbox::Boxed(profile) = upstream.sandbox().unwrap() else {
        panic!("boxed by default")
    };
    let (placed, _) = recorded.placed.expect("the call's receipt was placed");
    let logged: Value =
        serde_json::from_str(&placed.opening.expect("a format-3 receipt's opening").logged)
            .unwrap();
    assert_eq!(logged["receipt"]["sandbox"], profile.hash.as_str(), "{logged}");
    assert_eq!(profile.hash.len(), 64);

    // Kill the child the gateway started (its argv names our unique state dir).
    let killed = std::process::Command::new("pkill")
        .args(["-9", "-f"])
        .arg(dir.path().join("atlas"))
        .status()
        .unwrap();
    assert!(killed.success(), "the upstream child was found and killed");
    let (mut saw_retry, mut saw_unlisted) = (false, false);
    for _ in 0..200 {
        match get_ticket(&gw).await {
            Answer::Refused(r) => {
                assert_eq!(serde_json::to_value(r.action).unwrap(), "retry", "{}", r.message);
                saw_retry = true;
                // The call that meets the dying pipe can be refused a moment
                // before the supervisor notices; the list follows.
                saw_unlisted |= !gw.catalogs.current().tools.contains_key("tickets__get_ticket");
            }
            Answer::Result(_) if saw_retry => break,
            Answer::Result(_) => {}
            Answer::Error(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_retry, "calls between death and restart are refused with retry");
    assert!(saw_unlisted, "a down upstream's tools leave the list");
    assert!(matches!(get_ticket(&gw).await, Answer::Result(_)), "restarted");
    gw.stop();
}

#[tokio::test]
async fn serve_stdio_answers_rmcp_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    for lifecycle in [
        ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        ClientLifecycleMode::Initialize,
    ] {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
        cmd.args(["serve", "--stdio", "--config"]).arg(&config);
        let (transport, _) =
            TokioChildProcess::builder(cmd).stderr(std::process::Stdio::null()).spawn().unwrap();
        let client = ().serve_with_lifecycle(transport, lifecycle.clone()).await.unwrap();
        let names: Vec<String> =
            client.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
        assert!(names.contains(&"tickets__get_ticket".to_string()), "{lifecycle:?}: {names:?}");
        assert!(
            !names.contains(&"tickets__export_service_records".to_string()),
            "unregistered write of a trusted server implies prohibited"
        );
        let Value::Object(args) = json!({"ticket_id": "SR-20031"}) else { unreachable!() };
        let r = client
            .call_tool(CallToolRequestParams::new("tickets__get_ticket").with_arguments(args))
            .await
            .unwrap();
        assert_eq!(r.structured_content.unwrap()["ticket_id"], "SR-20031");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn serve_stdio_survives_an_oversized_and_a_non_utf8_line() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--stdio", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let list =
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": meta}});
    let mut input = vec![b'x'; 2 << 20];
    input.extend_from_slice(b"\n\xff\xfe\n");
    input.extend_from_slice(list.to_string().as_bytes());
    input.push(b'\n');
    stdin.write_all(&input).await.unwrap();
    stdin.flush().await.unwrap();
    let mut replies = Vec::new();
    while replies.len() < 3 {
        let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
            .await
            .expect("an answer")
            .unwrap()
            .expect("a line");
        replies.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(replies[0]["error"]["code"], -32600, "{}", replies[0]);
    assert_eq!(replies[1]["error"]["code"], -32700, "{}", replies[1]);
    assert_eq!(replies[2]["id"], 9);
    assert!(
        replies[2]["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "tickets__get_ticket")
    );
    // Closing stdin ends the gateway, and with it its upstream child.
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits after stdin closes")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_wrapped_stdio_server_goes_with_its_gateway() {
    // `sh` stays the child and the Atlas server is its child, as with npx-style wrappers.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("wrapped-atlas");
    let script = format!("\"$0\" atlas tickets --state {}; true", marker.display());
    let text = format!(
        "[servers.tickets]\ncommand = \"sh\"\nargs = [\"-c\", {}, {1}]\ntrusted = \
            true\n[servers.tickets.sandbox]\nread = [{1}]\nwrite = \
            [{2}]\n\n[callers.local]\ntenant = \"local\"\nanonymous = true\n",
        json!(script),
        json!(env!("CARGO_BIN_EXE_toolgate")),
        json!(marker.display().to_string())
    );
    std::fs::create_dir_all(&marker).unwrap();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, text).unwrap();
    let gw = Gateway::start(Config::load(&path).unwrap(), Mode::Serve).await.unwrap();
    assert!(gw.wait_ready(Duration::from_secs(10)).await.is_empty());
    let running =
        || std::process::Command::new("pgrep").arg("-f").arg(&marker).status().unwrap().success();
    assert!(running(), "the wrapped server runs");
    gw.stop();
    let mut gone = false;
    for _ in 0..100 {
        if !running() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the grandchild was stopped with the gateway");
}

/// `[telemetry] log_format = "json"`: one JSON line per call, carrying the
/// request span's identifiers.
#[tokio::test]
async fn json_logs_carry_the_request_span_identifiers() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path());
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("\n[telemetry]\nlog_format = \"json\"\nlog_level = \"info\"\n");
    std::fs::write(&path, text).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--stdio", "--config"])
        .arg(&path)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}, "_meta": meta}});
    stdin.write_all(format!("{call}\n").as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = tokio::time::timeout(Duration::from_secs(20), out.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(answer.contains("SR-20031"), "{answer}");
    drop(stdin);
    let mut err = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut record = None;
    while let Ok(Some(line)) =
        tokio::time::timeout(Duration::from_secs(20), err.next_line()).await.unwrap()
    {
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a JSON log line: {line}"));
        if v["fields"]["message"] == "tools/call" {
            record = Some(v);
        }
    }
    let record = record.expect("a log line for the call");
    assert_eq!(record["fields"]["outcome"], "completed");
    assert_eq!(record["span"]["mcp.method.name"], "tools/call");
    assert_eq!(record["span"]["jsonrpc.request.id"], "41");
    assert_eq!(record["span"]["network.transport"], "pipe");
    assert_eq!(record["span"]["gen_ai.tool.name"], "tickets__get_ticket");
}

/// The official Python SDK over stdio gives up on a call held for its
/// approval (an expired cancel scope: the SDK sends `notifications/cancelled`,
/// and over stdio that is all the gateway hears). The hold ends then, not
/// at the end of its 60 s: the call's receipt says the client cancelled,
/// and the approval still waits for its approver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_over_stdio_cancels_a_held_call() {
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_toolgate");
    let text = format!(
        "[gateway]\nstate_dir = \"state\"\n[approvals]\nhold_ms = 60000\npoll_ms = \
             100\n\n[servers.parts]\ncommand = {}\nargs = [\"atlas\", \"parts\", \"--state\", \
             {1}]\ntrusted = true\n[servers.parts.sandbox]\nwrite = [{1}]\n\n\
         [registry.\"parts__raise_parts_order\"]\nclass = \"requires_approval\"\n\n[callers.local]\ntenant = \"local\"\nanonymous = true\n\
         [callers.dana]\ntenant = \"local\"\nroles = [\"approver\"]\ntoken_file = \"dana.token\"\n",
        json!(exe),
        json!(dir.path().join("atlas").display().to_string())
    );
    std::fs::create_dir_all(dir.path().join("atlas")).unwrap();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, text).unwrap();
    let token = dir.path().join("dana.token");
    std::fs::write(&token, "dana-token-0123456789abcdef").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let python =
        std::env::var("TOOLGATE_PYTHON").map(std::path::PathBuf::from).unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-sdk/bin/python")
        });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/cancel_held.py");
    let arguments =
        json!({"part_no": "AC250-TV-2303", "quantity": 2, "ticket_id": "SR-22422"}).to_string();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(python)
        .arg(script)
        .args([
            "legacy",
            "3",
            "parts__raise_parts_order",
            &arguments,
            exe,
            "serve",
            "--stdio",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("gave_up_after_s"), "the call was held, not answered: {stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "the session ended long before the hold would have: {:?}",
        started.elapsed()
    );
    // The receipt of the held call names the client's cancellation.
    let bundle = dir.path().join("bundle.json");
    let export = std::process::Command::new(exe)
        .args(["export", "--since", "0", "--out"])
        .arg(&bundle)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let orders: Vec<&Value> = b["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["receipt"]["receipt"])
        .filter(|r| r["tool"].as_str().is_some_and(|t| t.ends_with("raise_parts_order")))
        .collect();
    assert!(
        orders.iter().any(|r| r["rules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|x| x == "client.cancelled"))),
        "{orders:?}"
    );
    // And the approval still waits: the person may still decide.
    let pending = std::process::Command::new(exe)
        .args(["approvals", "list", "--state", "pending", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&pending.stdout).contains("raise_parts_order"),
        "{}",
        String::from_utf8_lossy(&pending.stdout)
    );
}

/// A stdio server that takes longer than the discover's 5 s to start (a
/// `uvx` fetching its package) reads the `server/discover` first, holds the
/// connection to 2026-07-28 and refuses the `initialize` sent after it:
/// the official Python SDK's server does. toolgate takes the discover's
/// late answer, so the server comes up at its first start.
#[test]
fn a_server_slower_to_start_than_the_discover_s_wait_comes_up_in_its_own_era() {
    let exe = env!("CARGO_BIN_EXE_toolgate");
    let dir = tempfile::tempdir().unwrap();
    let python =
        std::env::var("TOOLGATE_PYTHON").map(std::path::PathBuf::from).unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-sdk/bin/python")
        });
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/echo_credentials.py");
    let start = format!("sleep 6; exec {} {} stdio", python.display(), script.display());
    let text = format!(
        "[gateway]\nstate_dir = \"state\"\n[servers.slow]\ncommand = \"sh\"\nargs = [\"-c\", {}]\nsandbox = \"off\"\n",
        json!(start)
    );
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, text).unwrap();
    let out =
        std::process::Command::new(exe).args(["doctor", "--config"]).arg(&config).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("upstream slow"))
        .unwrap_or_else(|| panic!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(line.contains("protocol 2026-07-28") && !line.contains("-32022"), "{line}");
}
