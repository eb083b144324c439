//! Level 2–4: the lethal trifecta per agent run, and budgets, through the
//! running gateway with the Atlas servers behind it (all untrusted here, so
//! what they return counts as untrusted content unless the registry says
//! `trusted_content`). A run that took in private data (a ticket) and
//! untrusted content (a manual passage) and then calls an egress tool
//! (`send_notice`) waits for a named approver who sees the run's history —
//! across a gateway restart (SQLite) and across two replicas (PostgreSQL).
//! Budgets refuse with `retry` and `retry_after_ms`.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate_gateway::gateway::Gateway;

const NOTICE: &str = "notices__send_notice";
const TICKET: &str = "tickets__get_ticket";
const MANUAL: &str = "manuals__search_manual";

/// A ticket is private and vouched for; a notice sends mail out.
const RUNS: &str = "[registry.\"tickets__get_ticket\"]\nclass = \"automatic\"\nread_only = true\nlabels = [\"private_data\", \"trusted_content\"]\n\
    [registry.\"notices__send_notice\"]\nclass = \"automatic\"\nlabels = [\"egress\", \"trusted_content\"]\n";

/// `tools/call` of `name` in run `run` (none: the caller's standing run).
async fn in_run(url: &str, run: Option<&str>, name: &str, arguments: Value) -> Value {
    let meta = run.map_or(json!({}), |r| json!({"io.toolgate/run": r}));
    let (status, body) =
        post(url, "tools/call", json!({"name": name, "arguments": arguments, "_meta": meta})).await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

async fn ticket(url: &str, run: Option<&str>) -> Value {
    in_run(url, run, TICKET, json!({"ticket_id": "SR-20031"})).await
}

async fn manual(url: &str, run: Option<&str>) -> Value {
    in_run(url, run, MANUAL, json!({"query": "torque"})).await
}

async fn notice(url: &str, run: Option<&str>) -> Value {
    in_run(url, run, NOTICE, json!({"to": "team@example.test", "body": "Compressor fixed."})).await
}

fn ran(result: &Value) -> bool {
    result["isError"] != true
}

fn reason(result: &Value) -> &str {
    result["structuredContent"]["reason"].as_str().unwrap_or("")
}

fn sent(dir: &std::path::Path) -> usize {
    lines(&dir.join("atlas/notices.jsonl"))
}

#[tokio::test]
async fn a_run_that_took_in_private_data_and_untrusted_content_waits_for_a_person_to_send_out() {
    let h = start_with("", RUNS, &[]).await;
    let url = &h.url;
    // One leg is harmless: private data alone, then out.
    assert!(ran(&ticket(url, Some("r1")).await));
    assert!(ran(&notice(url, Some("r1")).await), "one leg does not hold a notice");
    assert_eq!(sent(h.dir.path()), 1);
    // The second leg: a manual passage from an untrusted server.
    assert!(ran(&manual(url, Some("r1")).await));
    let held = notice(url, Some("r1")).await;
    assert_eq!(
        (reason(&held), held["structuredContent"]["action"].as_str()),
        ("approval_pending", Some("escalate")),
        "{held}"
    );
    assert_eq!(sent(h.dir.path()), 1, "nothing left while it waits");
    // The approver sees the run's history: which calls brought each leg in.
    let id = held["structuredContent"]["approval_id"].as_str().unwrap().to_string();
    let (_, approval) =
        admin(url, Some(DANA_TOKEN), "GET", &format!("/admin/approvals/{id}"), None).await;
    let rules: Vec<String> = approval["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    assert!(
        rules.iter().any(|r| r.starts_with("trifecta.private_data@tickets__get_ticket#")),
        "{approval}"
    );
    assert!(
        rules.iter().any(|r| r.starts_with("trifecta.untrusted_content@manuals__search_manual#")),
        "{approval}"
    );
    let why = approval["reason"].as_str().unwrap();
    assert!(
        why.contains("run `r1`")
            && why.contains("tickets__get_ticket")
            && why.contains("manuals__search_manual")
            && why.contains("lethal trifecta"),
        "{why}"
    );
    // Another run holds only what it took in itself.
    assert!(ran(&manual(url, Some("r2")).await));
    assert!(ran(&notice(url, Some("r2")).await), "run r2 took in no private data");
    assert_eq!(sent(h.dir.path()), 2);
    // Approved, the held call runs once; its receipts carry the reason and the legs.
    let (status, _) = admin(
        url,
        Some(DANA_TOKEN),
        "POST",
        &format!("/admin/approvals/{id}/approve"),
        Some(json!({"reason": "the customer asked for it"})),
    )
    .await;
    assert_eq!(status, 200);
    assert!(ran(&notice(url, Some("r1")).await));
    assert_eq!(sent(h.dir.path()), 3);
    let receipts = h.gateway.ledger.receipts(0, 1_000).await.unwrap();
    let signed: String = receipts.iter().map(|r| r.logged.as_str()).collect();
    assert!(
        signed.contains("\"lethal_trifecta\"")
            && signed.contains("trifecta.untrusted_content@manuals__search_manual#"),
        "the receipts name the reason and the legs"
    );
}

#[tokio::test]
async fn block_refuses_and_a_preview_says_so_without_counting() {
    let h = start_with("", &format!("{RUNS}[guards.trifecta]\non_exfiltration = \"block\"\n"), &[])
        .await;
    let url = &h.url;
    assert!(ran(&ticket(url, Some("b1")).await));
    assert!(ran(&manual(url, Some("b1")).await));
    // The preview tells what the call would meet, and sends nothing.
    let (_, preview) = post(url, "tools/call", json!({"name": NOTICE, "arguments": {"to": "team@example.test", "body": "x"}, "_meta": {"io.toolgate/run": "b1", "io.toolgate/preview": true}})).await;
    let p = &preview["result"]["structuredContent"];
    assert_eq!(
        (p["decision"].as_str(), p["reason"].as_str()),
        (Some("deny"), Some("lethal_trifecta")),
        "{preview}"
    );
    let legs: Vec<&str> =
        p["guards"]["trifecta"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        legs.len() == 2 && legs[0].starts_with("trifecta.private_data@tickets__get_ticket#"),
        "{preview}"
    );
    let refused = notice(url, Some("b1")).await;
    let r = &refused["structuredContent"];
    assert_eq!(
        (r["decision"].as_str(), r["reason"].as_str(), r["action"].as_str()),
        (Some("deny"), Some("lethal_trifecta"), Some("refused")),
        "{refused}"
    );
    assert!(r["message"].as_str().unwrap().contains("start a new run"), "{refused}");
    assert_eq!(sent(h.dir.path()), 0);
    // A caller that names no run is in its standing run: the legs count there too.
    assert!(ran(&ticket(url, None).await));
    assert!(ran(&manual(url, None).await));
    assert_eq!(reason(&notice(url, None).await), "lethal_trifecta");
}

#[tokio::test]
async fn a_runs_legs_survive_a_restart() {
    let h = start_with("", RUNS, &[]).await;
    assert!(ran(&ticket(&h.url, Some("long")).await));
    assert!(ran(&manual(&h.url, Some("long")).await));
    // The gateway goes away; a new one opens the same ledger.
    h.gateway.stop();
    let (gateway, url, cancel) = replica_of(&h).await;
    assert_eq!(
        reason(&notice(&url, Some("long")).await),
        "approval_pending",
        "the run's legs outlived the process"
    );
    assert!(ran(&notice(&url, Some("fresh")).await));
    gateway.stop();
    cancel.cancel();
}

/// A schema of its own in the machine's PostgreSQL, as a `ledger` URL.

#[tokio::test]
async fn replicas_on_postgres_share_a_runs_legs_and_its_budget() {
    let ledger = postgres_ledger("tg_runs").await;
    let h = start_with(
        &format!("ledger = \"{ledger}\""),
        &format!("{RUNS}[budgets]\nrun_calls = 5\n"),
        &[],
    )
    .await;
    let (replica, url_b, cancel) = replica_of(&h).await;
    // One leg through each replica; the egress call through the first.
    assert!(ran(&ticket(&h.url, Some("shared")).await));
    assert!(ran(&manual(&url_b, Some("shared")).await));
    let held = notice(&h.url, Some("shared")).await;
    assert_eq!(reason(&held), "approval_pending", "{held}");
    // The run's budget is counted across replicas: three calls so far,
    // two more, then the sixth is refused on either.
    assert!(ran(&ticket(&url_b, Some("shared")).await));
    assert!(ran(&ticket(&h.url, Some("shared")).await));
    let over = ticket(&url_b, Some("shared")).await;
    let r = &over["structuredContent"];
    assert_eq!(
        (r["reason"].as_str(), r["action"].as_str()),
        (Some("run_budget_exhausted"), Some("retry")),
        "{over}"
    );
    assert!(r["retry_after_ms"].as_i64().unwrap() > 0, "{over}");
    assert_eq!(reason(&ticket(&h.url, Some("shared")).await), "run_budget_exhausted");
    // Another run has its own budget.
    assert!(ran(&ticket(&url_b, Some("other")).await));
    replica.stop();
    cancel.cancel();
}

/// Waits until `gw` counts `n` replicas alive (its heartbeat, each second).
async fn replicas_become(gw: &Gateway, n: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while gw.budgets.replicas() != n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} replicas counted, not {n}",
            gw.budgets.replicas()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgres_share_a_callers_rate_and_take_it_back_when_one_stops() {
    let ledger = postgres_ledger("tg_runs").await;
    // A minute's rate of 60 with a burst of 4: each of two replicas admits 2 at once.
    let h = start_with(
        &format!("ledger = \"{ledger}\""),
        "[budgets]\nrate_per_minute = 60\nrate_burst = 4\n",
        &[],
    )
    .await;
    let (replica, url_b, cancel) = replica_of(&h).await;
    replicas_become(&h.gateway, 2).await;
    replicas_become(&replica, 2).await;
    // Round-robin over both, as a balancer would: the fleet admits the burst, not twice it.
    let mut admitted = 0;
    for i in 0..10 {
        let url = if i % 2 == 0 { &h.url } else { &url_b };
        let got = manual(url, None).await;
        if ran(&got) {
            admitted += 1;
        } else {
            assert_eq!(reason(&got), "rate_limited", "{got}");
        }
    }
    assert_eq!(admitted, 4, "the burst of 4 across both replicas, not 4 on each");
    // The second stops: it leaves the ledger, and the first takes the whole rate again.
    replica.stop();
    cancel.cancel();
    replicas_become(&h.gateway, 1).await;
}

#[tokio::test]
async fn a_caller_over_its_rate_is_told_to_retry_and_when() {
    // SAFETY: set before the gateway starts, in this test's own process (nextest runs each test alone).
    unsafe { std::env::set_var("TG_RATE_TEST_AGENT_CI", "agent-ci-token-0123456789abcdef") };
    // A second credential of the same subject as the anonymous agent.
    let second = "[callers.agent_ci]\nsubject = \"agent\"\ntenant = \"atlas\"\nroles = [\"agent\"]\ntoken_env = \"TG_RATE_TEST_AGENT_CI\"\n";
    let h =
        start_with("", &format!("{second}[budgets]\nrate_per_minute = 60\nrate_burst = 3\n"), &[])
            .await;
    let mut refused = None;
    for _ in 0..5 {
        let got = manual(&h.url, None).await;
        if !ran(&got) {
            refused = Some(got);
            break;
        }
    }
    let got = refused.expect("the fourth call within the burst is over the rate");
    let r = &got["structuredContent"];
    assert_eq!(
        (r["decision"].as_str(), r["reason"].as_str(), r["action"].as_str(), r["rules"].clone()),
        (Some("deny"), Some("rate_limited"), Some("retry"), json!(["budget.rate"])),
        "{got}"
    );
    let wait = r["retry_after_ms"].as_i64().unwrap();
    assert!((1..=1_000).contains(&wait), "one call a second: {got}");
    // The same subject with another token shares the rate: refused too.
    let again = {
        let resp = request(
            &h.url,
            json!(2),
            "tools/call",
            json!({"name": MANUAL, "arguments": {"query": "torque"}}),
        )
        .bearer_auth("agent-ci-token-0123456789abcdef")
        .send()
        .await
        .unwrap();
        answer_of(&resp.text().await.unwrap())
    };
    assert_eq!(
        again["result"]["structuredContent"]["reason"], "rate_limited",
        "a second token starts a fresh rate: {again}"
    );
    // Another caller has its own rate.
    let sam = {
        let resp = request(
            &h.url,
            json!(3),
            "tools/call",
            json!({"name": MANUAL, "arguments": {"query": "torque"}}),
        )
        .bearer_auth(SAM_TOKEN)
        .send()
        .await
        .unwrap();
        answer_of(&resp.text().await.unwrap())
    };
    assert_ne!(sam["result"]["isError"], true, "{sam}");
    // After the wait, the agent is served again.
    tokio::time::sleep(Duration::from_millis(wait as u64 + 20)).await;
    assert!(ran(&manual(&h.url, None).await));
}

#[tokio::test]
async fn a_tool_at_its_concurrency_refuses_the_next_call_to_retry() {
    let h =
        start_full("", "[budgets.concurrency]\n\"support__create_ticket\" = 1\n", &[], "").await;
    // The desk stalls: the first create holds the only slot.
    std::fs::write(h.sandbox().join("support.fault"), "stall:1500").unwrap();
    let create = |reference: &'static str| {
        let url = h.url.clone();
        async move {
            in_run(&url, None, "support__create_ticket", json!({"customer_id": "cust_harbor_02", "subject": "Compressor alarm", "priority": "normal", "client_reference": reference})).await
        }
    };
    let first = tokio::spawn(create("ref-slot-0001"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = create("ref-slot-0002").await;
    let r = &second["structuredContent"];
    assert_eq!(
        (r["reason"].as_str(), r["action"].as_str(), r["retry_after_ms"].as_i64()),
        (Some("concurrency_limited"), Some("retry"), Some(250)),
        "{second}"
    );
    // The first, holding the slot, ran to its end.
    let first = first.await.unwrap();
    assert!(ran(&first), "{first}");
    // The slot is free again once the first call ended.
    std::fs::remove_file(h.sandbox().join("support.fault")).ok();
    assert_ne!(reason(&create("ref-slot-0003").await), "concurrency_limited");
}

/// The official SDKs, as their READMEs show them (a default call with the
/// run in `_meta`): Python (`run_calls.py`) or TypeScript v2 (`run_calls.mjs`).
#[derive(Clone, Copy)]
enum Sdk {
    Python,
    TypeScript,
}

/// Runs `calls` with `sdk` in `mode` as the caller of `token` (none: the agent).
async fn sdk_calls(
    sdk: Sdk,
    url: &str,
    mode: &str,
    token: Option<&'static str>,
    calls: Value,
) -> Value {
    let (program, script) = match sdk {
        Sdk::Python => (python(), workspace().join("tests/python/run_calls.py")),
        Sdk::TypeScript => {
            let root = workspace().join("tests/ts");
            assert!(
                root.join("node_modules/@modelcontextprotocol/client").exists(),
                "no TypeScript SDK: run scripts/test (it installs tests/ts)"
            );
            ("node".into(), root.join("run_calls.mjs"))
        }
    };
    let args = [url.to_string(), mode.to_string(), calls.to_string()];
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(program);
        if let Some(t) = token {
            cmd.env("TOOLGATE_TOKEN", t);
        }
        cmd.arg(script).args(args).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn stock_client_meets_the_trifecta_and_the_rate(sdk: Sdk) {
    // One a second after a burst of four: five calls in a row spend it.
    let h =
        start_with("", &format!("{RUNS}[budgets]\nrate_per_minute = 60\nrate_burst = 4\n"), &[])
            .await;
    // Each era as another caller, so each starts with a full burst.
    for (mode, token) in [("2026-07-28", None), ("legacy", Some(SAM_TOKEN))] {
        let run = json!({"io.toolgate/run": format!("sdk-{mode}")});
        let calls = json!([
            {"tool": TICKET, "arguments": {"ticket_id": "SR-20031"}, "meta": run},
            {"tool": MANUAL, "arguments": {"query": "torque"}, "meta": run},
            {"tool": NOTICE, "arguments": {"to": "team@example.test", "body": "Compressor fixed."}, "meta": run},
            {"tool": MANUAL, "arguments": {"query": "torque"}, "meta": run},
            {"tool": MANUAL, "arguments": {"query": "torque"}, "meta": run},
        ]);
        let got = sdk_calls(sdk, &h.url, mode, token, calls).await;
        let results = got["results"].as_array().unwrap();
        assert!(results.iter().all(|r| r.get("threw").is_none()), "{mode}: the SDK threw: {got}");
        assert!(ran(&results[0]) && ran(&results[1]), "{mode}: {got}");
        // The run took in a private ticket and an untrusted manual: the
        // notice waits for a person.
        assert_eq!(reason(&results[2]), "approval_pending", "{mode}: {got}");
        assert!(
            results[2]["structuredContent"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("(lethal trifecta)") && m.contains("sdk-")),
            "{mode}: {got}"
        );
        // The burst of four is spent by the fifth call.
        assert_eq!(reason(&results[4]), "rate_limited", "{mode}: {got}");
        assert_eq!(results[4]["structuredContent"]["action"], "retry", "{mode}: {got}");
        assert!(
            results[4]["structuredContent"]["retry_after_ms"].as_i64().is_some_and(|ms| ms > 0),
            "{mode}: {got}"
        );
    }
    assert_eq!(sent(h.dir.path()), 0);
}

/// A preview through the SDK's default call, in both eras. The notice tool
/// declares an outputSchema, against which both SDKs check every result
/// not marked isError: the preview must not fail that check.
async fn stock_client_previews(sdk: Sdk) {
    let h = start_with("", RUNS, &[]).await;
    for (mode, token) in [("2026-07-28", None), ("legacy", Some(SAM_TOKEN))] {
        let calls = json!([{"tool": NOTICE, "arguments": {"to": "team@example.test", "body": "Build passed."}, "meta": {"io.toolgate/preview": true}}]);
        let got = sdk_calls(sdk, &h.url, mode, token, calls).await;
        let p = &got["results"][0];
        assert!(p.get("threw").is_none(), "{mode}: the SDK threw: {got}");
        assert_eq!(
            (
                &p["structuredContent"]["preview"],
                &p["structuredContent"]["decision"],
                &p["isError"]
            ),
            (&json!(true), &json!("allow"), &json!(true)),
            "{mode}: {got}"
        );
    }
    assert_eq!(sent(h.dir.path()), 0, "a preview sends nothing");
}

#[tokio::test]
async fn the_python_sdk_previews_a_tool_with_an_output_schema() {
    stock_client_previews(Sdk::Python).await;
}

#[tokio::test]
async fn the_typescript_sdk_previews_a_tool_with_an_output_schema() {
    stock_client_previews(Sdk::TypeScript).await;
}

#[tokio::test]
async fn the_python_sdk_meets_the_trifecta_and_the_rate_in_both_eras() {
    stock_client_meets_the_trifecta_and_the_rate(Sdk::Python).await;
}

#[tokio::test]
async fn the_typescript_sdk_meets_the_trifecta_and_the_rate_in_both_eras() {
    stock_client_meets_the_trifecta_and_the_rate(Sdk::TypeScript).await;
}

/// A preview asked with a flag of the wrong type, or a misspelt key, from
/// the official SDKs as their READMEs show them: refused as invalid params,
/// nothing opened; `true` previews. (An order: a tool without an
/// outputSchema, which the SDKs would hold a preview's answer against.)
async fn stock_client_cannot_get_an_effect_from_a_botched_preview(sdk: Sdk) {
    let h = start_with("", RUNS, &[]).await;
    let data = toolgate_atlas::dataset();
    let part = data
        .parts
        .iter()
        .find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"))
        .unwrap();
    let order = json!({"part_no": part.part_no, "quantity": 2, "ticket_id": "SR-20031"});
    let tool = "parts__raise_parts_order";
    for mode in ["2026-07-28", "legacy"] {
        let calls = json!([
            {"tool": tool, "arguments": order, "meta": {"io.toolgate/preview": "true"}},
            {"tool": tool, "arguments": order, "meta": {"io.toolgate/previw": true}},
            {"tool": tool, "arguments": order, "meta": {"io.toolgate/preview": true}},
        ]);
        let got = sdk_calls(sdk, &h.url, mode, None, calls).await;
        let results = got["results"].as_array().unwrap();
        for refused in &results[..2] {
            // Python reports the JSON-RPC error; the TypeScript SDK throws it.
            let said = refused["error"]["code"]
                .as_i64()
                .map(|c| c.to_string())
                .or_else(|| refused["threw"].as_str().map(str::to_string))
                .unwrap_or_default();
            assert!(said.contains("-32602") || said.contains("io.toolgate/"), "{mode}: {got}");
        }
        let preview = &results[2]["structuredContent"];
        assert_eq!(
            (preview["preview"].clone(), preview["decision"].as_str()),
            (json!(true), Some("require_approval")),
            "{mode}: {got}"
        );
    }
    let (_, pending) =
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/approvals?state=pending", None).await;
    assert_eq!(pending["approvals"], json!([]), "no approval was opened");
}

#[tokio::test]
async fn the_python_sdk_cannot_get_an_effect_from_a_botched_preview() {
    stock_client_cannot_get_an_effect_from_a_botched_preview(Sdk::Python).await;
}

#[tokio::test]
async fn the_typescript_sdk_cannot_get_an_effect_from_a_botched_preview() {
    stock_client_cannot_get_an_effect_from_a_botched_preview(Sdk::TypeScript).await;
}
