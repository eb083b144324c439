//! Level 4: the agent scenario end to end — `toolgate demo` starts the Atlas
//! servers and the gateway, plays every case directly and through toolgate,
//! and exits 0 only if each behaved; `demo --serve` stays up for another
//! client (the official Python SDK, both modes). Also the binary's contract.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

mod demo_common;
use demo_common::{demo_serve, orders_in, python, toolgate, valve_order};

#[test]
fn version_and_help() {
    let v = toolgate().arg("--version").output().unwrap();
    assert!(v.status.success());
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("toolgate {}", env!("CARGO_PKG_VERSION"))
    );
    let h = toolgate().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&h.stdout);
    for command in ["demo", "serve", "tools", "atlas"] {
        assert!(help.contains(command), "{command} missing from --help");
    }
    let bad = toolgate().arg("no-such-command").output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-command"));
    let missing =
        toolgate().args(["serve", "--config", "/nonexistent/toolgate.toml"]).output().unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/toolgate.toml"));
}

#[test]
fn the_demo_plays_every_case_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolgate().arg("demo").arg("--state").arg(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Every case behaved as expected."), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    // Nothing of the libraries' own between the demo's lines.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ERROR") && !stderr.contains("rmcp"), "{stderr}");
    for case in [
        "a read passes",
        "broken variant pattern",
        "an extra property",
        "a tenant in the arguments",
        "export_service_records",
        "raise_parts_order",
        "an unknown tool",
        "manuals server killed",
    ] {
        assert!(stdout.contains(case), "case `{case}` missing:\n{stdout}");
    }
    // Seed 002's eight cases, each matched against the seed's "after" column.
    for id in [
        "forged_read_only",
        "approved_destination",
        "stale_approval",
        "extra_recipient",
        "other_tool",
        "tool_error",
        "transport_unknown",
        "input_required",
    ] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(&format!("ok   {id} "))),
            "case `{id}` not ok:\n{stdout}"
        );
    }
    for step in [
        "the agent approves itself through the admin API",
        "re-issued after approval: dispatched once",
        "re-issued a second time: the recorded result, no second order",
        "9 valves under the approval for 8",
        "the same 3 valves, called afresh",
    ] {
        assert!(stdout.contains(step), "step `{step}` missing:\n{stdout}");
    }
    // Seed 001's four hard cases.
    for step in [
        "two similar customers → a clarification",
        "re-issued after the grant was withdrawn → refused at commit",
        "retried with its operation key → one ticket",
        "the same key with another subject → a conflict, no ticket",
        "→ unknown, reconcile",
        "retried with its key → the real ticket id",
    ] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with("ok") && l.contains(step)),
            "step `{step}` not ok:\n{stdout}"
        );
    }
    // The desk has exactly two tickets (the retried one and the stalled one),
    // and the ledger shows their operations settled.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("atlas/support-tickets.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    let ops = toolgate()
        .args(["ops", "list", "--json", "--config"])
        .arg(dir.path().join("toolgate.toml"))
        .output()
        .unwrap();
    let ops: Value = serde_json::from_slice(&ops.stdout).unwrap();
    let keyed: Vec<(&str, &str)> = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["key"].as_str().is_some_and(|k| k.starts_with("demo-")))
        .map(|o| (o["key"].as_str().unwrap(), o["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        keyed,
        vec![("demo-stalled-1", "reconciled_applied"), ("demo-retried-1", "completed")],
        "{ops}"
    );
    // Exactly the effects that should exist: the ungoverned export and
    // order, two approved orders through toolgate (one re-issued after its
    // approval, one approved while the call was held), and the agent's.
    let lines = |f: &str| {
        std::fs::read_to_string(dir.path().join("atlas").join(f))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    assert_eq!(lines("outbox.jsonl"), 1);
    assert_eq!(lines("orders.jsonl"), 4);
    // The agent's section: the scripted plan played as expected, its evidence verified.
    for said in [
        "9. The agent",
        "approvals: apr_",
        "✗ tickets__export_service_records → refused",
        "verified offline: inclusion in the log",
        "one order placed: true; evidence verified: true",
    ] {
        assert!(stdout.contains(said), "`{said}` missing:\n{stdout}");
    }
    // Notices: six ungoverned sends, and through toolgate the approved one,
    // the one sent before the transport broke, and the confirmed one.
    assert_eq!(lines("notices.jsonl"), 9);
    // The approvals it opened are in the ledger, decided by dana.
    let listed = toolgate()
        .args(["approvals", "list", "--json", "--config"])
        .arg(dir.path().join("toolgate.toml"))
        .output()
        .unwrap();
    let approvals: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let approvals = approvals["approvals"].as_array().unwrap();
    assert!(
        approvals.iter().filter(|a| a["state"] == "consumed").all(|a| a["decided_by"] == "dana")
    );
    assert_eq!(approvals.iter().filter(|a| a["state"] == "denied").count(), 1);
    // Its policy checks, and its table-driven cases pass.
    let check = toolgate()
        .args(["policy", "check", "--config"])
        .arg(dir.path().join("toolgate.toml"))
        .output()
        .unwrap();
    assert!(
        check.status.success()
            && String::from_utf8_lossy(&check.stdout).contains("policy version: ")
    );
    let cases = toolgate()
        .args(["policy", "test", "--config"])
        .arg(dir.path().join("toolgate.toml"))
        .arg(dir.path().join("policy-cases.toml"))
        .output()
        .unwrap();
    assert!(cases.status.success(), "{}", String::from_utf8_lossy(&cases.stdout));
    // The config it wrote is a working gateway config; its pins were recorded.
    assert!(dir.path().join("toolgate.toml").exists());
    let lock = std::fs::read_to_string(dir.path().join("toolgate.lock")).unwrap();
    assert!(lock.contains("tickets__get_ticket"));
}

#[test]
fn the_python_sdk_works_through_demo_serve_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let part = "AC250-TV-2303";
    let calls = json!([
        {"tool": "tickets__get_ticket", "arguments": {"ticket_id": "SR-20031"}},
        {"tool": "tickets__search_tickets", "arguments": {"model_variant": "AC-250-X"}},
        {"tool": "tickets__export_service_records", "arguments": {"recipient": "x@outside.example", "model_variant": "AC-250-S"}},
        {"tool": "parts__raise_parts_order", "arguments": {"part_no": part, "quantity": 1, "ticket_id": "SR-20031"}},
        {"tool": "tickets__drop_tables", "arguments": {}},
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/sdk_client.py");
    for (mode, version) in [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")] {
        let out = Command::new(python())
            .arg(&script)
            .args([&serving.endpoint, mode, &calls.to_string()])
            .env("TOOLGATE_TOKEN", &serving.agent_token)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["protocol_version"], version);
        let names: Vec<&str> =
            v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(
            names.contains(&"tickets__get_ticket") && names.contains(&"parts__raise_parts_order"),
            "{names:?}"
        );
        assert!(
            !names.contains(&"tickets__export_service_records"),
            "prohibited tools are not listed"
        );
        let r = &v["results"];
        assert_eq!(r[0]["structuredContent"]["ticket_id"], "SR-20031", "{mode}: {}", r[0]);
        let action = |i: usize| r[i]["structuredContent"]["action"].as_str().map(str::to_string);
        assert_eq!(action(1).as_deref(), Some("correct"), "{mode}: {}", r[1]);
        assert_eq!(action(2).as_deref(), Some("refused"), "{mode}: {}", r[2]);
        // The order waits for a named approver, held for the demo's hold; this
        // client cannot be asked, so in either era it is told who decides.
        assert_eq!(action(3).as_deref(), Some("escalate"), "{mode}: {}", r[3]);
        assert_eq!(r[3]["structuredContent"]["reason"], "approval_pending");
        assert!(
            r[3]["structuredContent"]["approval_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("apr_")),
            "{mode}: {}",
            r[3]
        );
        assert_eq!(r[4]["error"]["code"], -32602, "{mode}: {}", r[4]);
        assert_eq!(r[4]["error"]["data"]["action"], "correct");
    }
    // The printed config drives `toolgate tools` against the same upstreams.
    let tools =
        toolgate().args(["tools", "--json", "--config"]).arg(&serving.config).output().unwrap();
    assert!(tools.status.success(), "{}", String::from_utf8_lossy(&tools.stderr));
    let view: Value = serde_json::from_slice(&tools.stdout).unwrap();
    assert_eq!(
        view["tools"].as_array().unwrap().len(),
        12,
        "seed 000's eight, send_notice, and the support desk's three"
    );
    // And `toolgate doctor` finds nothing to fix in it.
    let doctor = toolgate().args(["doctor", "--config"]).arg(&serving.config).output().unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{report}\n{}", String::from_utf8_lossy(&doctor.stderr));
    for line in [
        "ok    config",
        "ok    policy: validates",
        "ok    keys: receipt key",
        "ok    ledger",
        "ok    upstream tickets: protocol 2026-07-28",
        "all checks passed",
    ] {
        assert!(report.contains(line), "{line} missing from:\n{report}");
    }
    // What a person reads names each tool as a client calls it (`SERVER__TOOL`), never `SERVER/TOOL`.
    let said = |args: &[&str]| {
        let out = toolgate().args(args).arg("--config").arg(&serving.config).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let receipts = said(&["receipts", "list"]);
    assert!(
        receipts.contains("tickets__get_ticket") && receipts.contains("parts__raise_parts_order"),
        "{receipts}"
    );
    assert!(!receipts.contains("tickets/") && !receipts.contains("parts/"), "{receipts}");
    let pending = said(&["approvals", "list", "--state", "pending"]);
    assert!(
        pending.contains("parts__raise_parts_order") && !pending.contains("parts/"),
        "{pending}"
    );
    let listed: Value =
        serde_json::from_str(&said(&["approvals", "list", "--state", "pending", "--json"]))
            .unwrap();
    let id = listed["approvals"][0]["id"].as_str().unwrap().to_string();
    // `approvals show`: the call by that name, and why once, its rules on a line of their own.
    let shown = said(&["approvals", "show", &id]);
    assert!(shown.contains("call       parts__raise_parts_order by agent"), "{shown}");
    let reason =
        shown.lines().find(|l| l.starts_with("reason ")).unwrap_or_else(|| panic!("{shown}"));
    let rules =
        shown.lines().find(|l| l.starts_with("rules ")).unwrap_or_else(|| panic!("{shown}"));
    let rule_ids: Vec<String> = listed["approvals"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    assert!(
        rule_ids.iter().all(|r| rules.contains(r.as_str()) && !reason.contains(&format!("({r})"))),
        "{shown}"
    );
    assert!(!shown.contains(") ("), "{shown}");
    // Without the agent's token, the SDK gets nothing.
    let anonymous = Command::new(python())
        .arg(&script)
        .args([&serving.endpoint, "2026-07-28", "[]"])
        .output()
        .unwrap();
    assert!(!anonymous.status.success(), "{}", String::from_utf8_lossy(&anonymous.stdout));
    // The printed console link signs the approver in, once.
    let link = &serving.console_sign_in;
    assert!(
        link.starts_with(serving.endpoint.trim_end_matches("/mcp"))
            && link.contains("/console/signin?link=tgl_"),
        "{link}"
    );
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let http =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let use_link = async || {
            let page = http.get(link).send().await.unwrap();
            let cookie = page.headers()["set-cookie"]
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_string();
            let html = page.text().await.unwrap();
            let field = |name: &str| {
                html.split(&format!("name=\"{name}\" value=\""))
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .to_string()
            };
            let body = format!("form={}&link={}", field("form"), field("link"));
            http.post(link.split('?').next().unwrap())
                .header("cookie", cookie)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap()
        };
        let first = use_link().await;
        assert_eq!(
            (first.status().as_u16(), first.headers()["location"].to_str().unwrap()),
            (303, "/console/approvals")
        );
        assert!(
            first.headers()["set-cookie"].to_str().unwrap().starts_with("toolgate_session=tgs_")
        );
        assert_eq!(use_link().await.status().as_u16(), 401, "the link signed in twice");
    });
}

/// The acceptance of approvals, with the Python SDK through `demo --serve`.
#[test]
fn the_python_sdk_waits_for_an_approval_and_the_call_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let orders = || orders_in(dir.path());
    let before = orders();
    let order = valve_order(2);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/approval_flow.py");
    let out = Command::new(python())
        .arg(&script)
        .args([&serving.endpoint, env!("CARGO_BIN_EXE_toolgate")])
        .arg(&serving.config)
        .arg(order.to_string())
        .env("TOOLGATE_TOKEN", &serving.agent_token)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["first"]["resultType"], "input_required", "{}", v["first"]);
    assert_eq!(v["approved"]["state"], "approved");
    assert_eq!(v["approved"]["decided_by"], "dana");
    assert!(
        v["reissued"]["structuredContent"]["order_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("PO-")),
        "{}",
        v["reissued"]
    );
    // A second re-issue: the recorded result of the one order, marked a replay.
    assert_eq!(
        v["again"]["structuredContent"]["order_id"], v["reissued"]["structuredContent"]["order_id"],
        "{}",
        v["again"]
    );
    assert_eq!(v["again"]["_meta"]["io.toolgate/operation"]["replayed"], true, "{}", v["again"]);
    assert_eq!(
        v["changed"]["structuredContent"]["reason"], "approval_missing_or_mismatched",
        "{}",
        v["changed"]
    );
    assert_eq!(orders(), before + 1, "exactly one order placed");
    let notice = &v["outside_notice"]["structuredContent"];
    assert_eq!(
        (notice["decision"].as_str(), notice["rules"][0].as_str()),
        (Some("deny"), Some("no_exact_rule")),
        "{notice}"
    );
}

/// The issue's acceptance, through `toolgate demo --serve` as an agent
/// would reach it: a keyed create_ticket twice → one ticket, the same
/// result; the key with another subject → a conflict, no ticket; `toolgate
/// ops list --json` shows the operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_serve_runs_a_keyed_write_once_and_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let create = |subject: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "support__create_ticket",
        "arguments": {"customer_id": "cust_harbor_02", "subject": subject, "priority": "normal", "client_reference": "ref-accept-0001"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "acceptance", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.toolgate/operationKey": "accept-key-1"
        }}});
        reqwest::Client::new()
            .post(&serving.endpoint)
            .bearer_auth(&serving.agent_token)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", "support__create_ticket")
            .body(body.to_string())
            .send()
    };
    let result = |v: Value| v["result"].clone();
    let first = result(create("Forklift 3 will not start").await.unwrap().json().await.unwrap());
    let second = result(create("Forklift 3 will not start").await.unwrap().json().await.unwrap());
    assert!(first["structuredContent"]["ticket_id"].is_string(), "{first}");
    assert_eq!(first["structuredContent"], second["structuredContent"], "the same result");
    assert_eq!(second["_meta"]["io.toolgate/operation"]["replayed"], true, "{second}");
    let other = result(create("Forklift 4 will not start").await.unwrap().json().await.unwrap());
    assert_eq!(other["structuredContent"]["reason"], "operation_conflict", "{other}");
    let tickets = std::fs::read_to_string(dir.path().join("atlas/support-tickets.jsonl")).unwrap();
    let ours = tickets.lines().filter(|l| l.contains("ref-accept-0001")).count();
    assert_eq!(ours, 1, "one ticket:\n{tickets}");
    let listed = toolgate()
        .args(["ops", "list", "--json", "--config"])
        .arg(&serving.config)
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let ops: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let op = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["key"] == "accept-key-1")
        .expect("listed");
    assert_eq!(
        (op["state"].as_str(), op["tool"].as_str(), op["attempts"].as_i64()),
        (Some("completed"), Some("create_ticket"), Some(1)),
        "{op}"
    );
    assert_eq!(op["id"], first["_meta"]["io.toolgate/operation"]["id"]);
}

#[test]
fn doctor_names_each_fault_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("policy.cedar"),
        r#"permit (principal, action, resource) when { context.arguments.nowhere == 1 };"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("policy.cedarschema"), "entity Caller; entity Tool; action call_tool appliesTo { principal: [Caller], resource: [Tool], context: { arguments: {} } };").unwrap();
    let config = dir.path().join("toolgate.toml");
    // Nothing listens on port 9; the policy reads an attribute the schema lacks; no callers.
    std::fs::write(&config, "[servers.away]\nurl = \"http://127.0.0.1:9/mcp\"\ntimeout_ms = 500\n[policy]\npolicies = \"policy.cedar\"\nschema = \"policy.cedarschema\"\n").unwrap();
    finds_faults(
        &config,
        &[
            "ok    config",
            "FAIL  callers",
            "FAIL  policy",
            "fix: `toolgate policy check",
            "FAIL  start",
        ],
    );
    // With the policy fixed, the start goes on to the ledger and the upstream.
    std::fs::remove_file(dir.path().join("policy.cedar")).unwrap();
    std::fs::write(&config, "[servers.away]\nurl = \"http://127.0.0.1:9/mcp\"\n[callers.agent]\ntenant = \"t\"\nanonymous = true\n").unwrap();
    let stderr = finds_faults(
        &config,
        &[
            "ok    policy: none configured",
            "ok    keys: receipt key",
            "ok    ledger",
            "FAIL  upstream away",
            "fix: start the server",
        ],
    );
    assert!(stderr.contains("1 fault(s)"), "{stderr}");
    // A signing key others can read is a fault, with the command that fixes it.
    use std::os::unix::fs::PermissionsExt as _;
    let seed = dir.path().join("state/keys/receipt-ed25519.seed");
    std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o644)).unwrap();
    finds_faults(
        &config,
        &["FAIL  keys: readable by others: receipt-ed25519.seed", "fix: chmod 600"],
    );
}

#[test]
fn doctor_fetches_the_oauth_issuer_s_keys() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.toml");
    // No [callers] is no fault with [oauth]; an issuer that does not answer is.
    std::fs::write(&config, "[servers.away]\nurl = \"http://127.0.0.1:9/mcp\"\n[oauth]\nissuer = \"http://127.0.0.1:9\"\nresource = \"http://gw.test/mcp\"\ntenant = \"t\"\n").unwrap();
    let report = String::from_utf8_lossy(
        &toolgate().args(["doctor", "--config"]).arg(&config).output().unwrap().stdout,
    )
    .into_owned();
    assert!(!report.contains("FAIL  callers"), "{report}");
    finds_faults(
        &config,
        &[
            "FAIL  oauth: the authorization server's metadata (and so its keys) cannot be fetched",
            "fix: check [oauth] issuer",
        ],
    );
}

#[test]
fn doctor_reports_dead_notices_and_where_to_send_them_again() {
    use toolgate_ledger::core::approval::Binding;
    use toolgate_ledger::{ApprovalStore, Attempt, FleetStore, NewApproval, NewNotice};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, "[servers.away]\nurl = \"http://127.0.0.1:9/mcp\"\n[callers.agent]\ntenant = \"t\"\nanonymous = true\n").unwrap();
    // A first doctor run makes the state; no notice is dead.
    let report = String::from_utf8_lossy(
        &toolgate().args(["doctor", "--config"]).arg(&config).output().unwrap().stdout,
    )
    .into_owned();
    assert!(report.contains("ok    notices: 0 webhook(s); none dead"), "{report}");
    // An approval whose notice ran out of attempts.
    let ledger_path = dir.path().join("state/ledger.sqlite3");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let ledger = toolgate_ledger::SqliteLedger::open(&ledger_path).unwrap();
        let binding = Binding {
            tenant: "t".into(),
            caller: "agent".into(),
            server: "away".into(),
            tool: "pay".into(),
            proposal_sha256: "a".repeat(64),
            policy_version: "v".into(),
        };
        let notice =
            NewNotice { id: "dlv_dead_one".into(), webhook: "desk".into(), body: "{}".into() };
        let new = NewApproval {
            id: "apr_unheard".into(),
            binding,
            arguments: json!({}),
            reason: "r".into(),
            rules: vec![],
            now_ms: 0,
            ttl_ms: 60_000,
            receipt: None,
            subject: "agent".into(),
            operation_key: None,
            notices: vec![notice],
        };
        ledger.create_approval(new).await.unwrap();
        ledger.claim_notices(0, 30_000, 8).await.unwrap();
        ledger.notice_attempted("dlv_dead_one", Attempt::Dead, Some(502), None, 10).await.unwrap();
    });
    finds_faults(
        &config,
        &[
            "FAIL  notices: 1 dead",
            "dlv_dead_one (approval apr_unheard, webhook desk, HTTP 502)",
            "fix: fix the receiver, then send them again from the console's Notices page",
        ],
    );
}

/// Runs `toolgate doctor` on `config`, which must fail and report each of
/// `lines`; returns its stderr.
fn finds_faults(config: &Path, lines: &[&str]) -> String {
    let doctor = toolgate().args(["doctor", "--config"]).arg(config).output().unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(!doctor.status.success(), "{report}");
    for line in lines {
        assert!(report.contains(line), "{line} missing from:\n{report}");
    }
    String::from_utf8_lossy(&doctor.stderr).into_owned()
}

/// A `[console]` the console cannot read stops every command that reads the
/// config, named by the file and what is wrong, as the gateway's own
/// mistakes are: none of them goes on with a section it would ignore.
#[test]
fn every_command_refuses_a_console_section_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        "[callers.agent]\ntenant = \"t\"\nanonymous = true\n[console]\nlisten = \"nope\"\n",
    )
    .unwrap();
    let commands: [&[&str]; 6] = [
        &["serve", "--config"],
        &["config", "check"],
        &["doctor", "--config"],
        &["policy", "check", "--config"],
        &["approvals", "list", "--config"],
        &["keys", "show", "--config"],
    ];
    for args in commands {
        let out = toolgate().args(args).arg(&config).output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{args:?} went on: {said}");
        assert!(
            said.contains("toolgate.toml") && said.contains("invalid socket address syntax"),
            "{args:?}: {said}"
        );
    }
}
