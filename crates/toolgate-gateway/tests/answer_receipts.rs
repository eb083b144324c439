//! The receipt in the answer (`_meta["io.toolgate/receipt"]`) and the log
//! served as tiles (`/log/`): every answer names its receipt, and whoever
//! holds the answer proves it from the published log alone.

mod common;

use std::time::Duration;

use common::{DANA_TOKEN, Harness, call, post, python, start_with};
use serde_json::{Value, json};
use toolgate_core::note::Verifier;
use toolgate_gateway::log::readers::source::Source;
use toolgate_gateway::log::readers::verify_answer::{Options, Report, verify_answer};

/// A gateway whose log is signed every 100 ms.
async fn gateway(access: &str) -> Harness {
    start_with("", &format!("[receipts]\ncheckpoint_ms = 100\nlog_access = \"{access}\"\nlog_url = \"http://example.invalid/log/\"\n"), &[]).await
}

fn base(h: &Harness) -> String {
    h.url.trim_end_matches("/mcp").to_string()
}

/// The log's keys, as `toolgate keys show` prints them.
async fn verifiers(h: &Harness) -> Vec<Verifier> {
    let keys = h.gateway.ledger.log_keys().await.unwrap();
    keys.iter()
        .flat_map(|k| [Some(k.ed25519.clone()), k.ml_dsa_65.clone()])
        .flatten()
        .map(|v| Verifier::from_vkey(&v).unwrap())
        .collect()
}

async fn prove(h: &Harness, answer: &Value, token: Option<&str>) -> Report {
    let source = Source::parse(&format!("{}/log/", base(h)), token.map(str::to_string)).unwrap();
    let options = Options {
        verifiers: verifiers(h).await,
        require_pq: true,
        wait: Duration::from_secs(5),
        ..Default::default()
    };
    verify_answer(answer, &source, &options).await.unwrap()
}

fn named(answer: &Value) -> &Value {
    &answer["result"]["_meta"]["io.toolgate/receipt"]
}

fn failed(report: &Report) -> Vec<&str> {
    report.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect()
}

#[tokio::test]
async fn a_read_s_answer_names_its_receipt_and_proves_it_from_the_tiles() {
    let h = gateway("public").await;
    let answer = call(&h.url, "support__search_customers", json!({"query": "harbor"})).await;
    let receipt = named(&answer);
    assert_eq!(receipt["origin"], "toolgate.local/log", "{answer}");
    assert_eq!(receipt["log"], "http://example.invalid/log/");
    assert!(
        receipt["index"].is_u64() && receipt["leaf_hash"].as_str().is_some_and(|h| h.len() == 64),
        "{receipt}"
    );
    assert!(receipt.get("decision").is_none(), "a read has one receipt: {answer}");

    let report = prove(&h, &answer, None).await;
    assert!(report.ok(), "{report:#?}");
    let names: Vec<&str> = report.checks.iter().map(|c| c.name).collect();
    assert_eq!(names, ["checkpoint", "inclusion", "receipt", "answer"]);
    assert_eq!(report.receipt.as_ref().unwrap()["receipt"]["tool"], "search_customers");

    // The receipt alone (the `_meta` value) proves the receipt, not the result.
    let alone = prove(&h, receipt, None).await;
    assert!(alone.ok() && !alone.checks.iter().any(|c| c.name == "answer"), "{alone:#?}");

    // Another result under the same receipt is not the answer recorded.
    let mut changed = answer.clone();
    changed["result"]["content"][0]["text"] = json!("something else");
    assert_eq!(failed(&prove(&h, &changed, None).await), ["answer"]);

    // Another leaf hash is in no tree the log signed.
    let mut forged = answer.clone();
    forged["result"]["_meta"]["io.toolgate/receipt"]["leaf_hash"] = json!("00".repeat(32));
    assert_eq!(failed(&prove(&h, &forged, None).await), ["inclusion"]);

    // A checkpoint is trusted only under the keys given.
    let source = Source::parse(&format!("{}/log/", base(&h)), None).unwrap();
    let stranger =
        Verifier::from_vkey("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
            .unwrap();
    let report = verify_answer(
        &answer,
        &source,
        &Options { verifiers: vec![stranger], ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(failed(&report), ["checkpoint"]);
}

#[tokio::test]
async fn a_write_names_its_decision_and_outcome_and_a_refusal_names_its_receipt() {
    let h = gateway("public").await;
    let args = json!({"customer_id": "cust_harbor_02", "subject": "Pump leaks", "priority": "normal", "client_reference": "ref-answer-0001"});
    let (_, answer) = post(&h.url, "tools/call", json!({"name": "support__create_ticket", "arguments": args, "_meta": {"io.toolgate/operationKey": "k-answer-1"}})).await;
    let receipt = named(&answer);
    assert!(
        receipt["decision"]["index"].as_u64().unwrap() < receipt["index"].as_u64().unwrap(),
        "{answer}"
    );
    let report = prove(&h, &answer, None).await;
    assert!(report.ok(), "{report:#?}");
    assert!(report.checks.iter().any(|c| c.name == "decision" && c.ok), "{report:#?}");

    // The same key again: a replay, with a receipt of its own.
    let (_, again) = post(&h.url, "tools/call", json!({"name": "support__create_ticket", "arguments": args, "_meta": {"io.toolgate/operationKey": "k-answer-1"}})).await;
    assert!(named(&again)["index"].as_u64() > receipt["index"].as_u64(), "{again}");
    let report = prove(&h, &again, None).await;
    assert!(report.ok(), "{again}\n{report:#?}");

    // A refused call (prohibited by the registry) names its receipt too.
    let refused = call(&h.url, "tickets__export_service_records", json!({})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let report = prove(&h, &refused, None).await;
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.receipt.as_ref().unwrap()["receipt"]["decision"], "deny");
    // A refusal with another reason is not the one recorded.
    let mut other = refused.clone();
    other["result"]["structuredContent"]["reason"] = json!("budget_exceeded");
    assert_eq!(failed(&prove(&h, &other, None).await), ["answer"]);
}

#[tokio::test]
async fn the_log_is_served_as_tlog_tiles_to_whom_the_config_lets() {
    let h = gateway("approvers").await;
    let answer = call(&h.url, "support__search_customers", json!({"query": "harbor"})).await;
    let http = reqwest::Client::new();
    let get = |path: &str, token: Option<&str>| {
        let mut r = http.get(format!("{}/log/{path}", base(&h)));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    // The anonymous agent is not an approver.
    assert_eq!(get("checkpoint", None).await.unwrap().status(), 403);
    // Proving needs the approver's token here.
    assert_eq!(failed(&prove(&h, &answer, Some(DANA_TOKEN)).await), Vec::<&str>::new());
    let checkpoint = get("checkpoint", Some(DANA_TOKEN)).await.unwrap();
    assert_eq!(
        (checkpoint.status().as_u16(), checkpoint.headers()["cache-control"].to_str().unwrap()),
        (200, "no-cache")
    );
    let text = checkpoint.text().await.unwrap();
    let size: u64 = text.lines().nth(1).unwrap().parse().unwrap();
    assert!(text.starts_with("toolgate.local/log\n") && size >= 1, "{text}");

    // The level-0 tile and the entry bundle of that size, and nothing past it.
    let tile = get(&format!("tile/0/000.p/{size}"), Some(DANA_TOKEN)).await.unwrap();
    assert_eq!(tile.status(), 200);
    assert!(tile.headers()["cache-control"].to_str().unwrap().contains("immutable"));
    assert_eq!(tile.bytes().await.unwrap().len() as u64, 32 * size);
    let entries = get(&format!("tile/entries/000.p/{size}"), Some(DANA_TOKEN))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let first = u16::from_be_bytes([entries[0], entries[1]]) as usize;
    // Format 3: the published entry is a commitment, naming no tenant, caller or tool.
    let entry = std::str::from_utf8(&entries[2..2 + first]).unwrap();
    assert!(
        entry.starts_with("{\"commitment\":\"")
            && entry.ends_with("\",\"v\":3}")
            && entry.len() == 87,
        "{entry}"
    );
    for past in [
        format!("tile/0/000.p/{}", size + 1),
        "tile/0/000".into(),
        "tile/1/000.p/1".into(),
        "tile/0/00".into(),
        "tile/entries/x000/000".into(),
    ] {
        assert_eq!(get(&past, Some(DANA_TOKEN)).await.unwrap().status(), 404, "{past}");
    }

    let off = gateway("off").await;
    let r = reqwest::get(format!("{}/log/checkpoint", base(&off))).await.unwrap();
    assert_eq!(r.status(), 404);
}

/// The official Python SDK's `call_tool`, as its README shows it, hands the
/// caller the receipt unchanged; the receipt proves from the log.
#[tokio::test]
async fn a_stock_python_sdk_call_carries_a_receipt_that_verifies() {
    let h = gateway("public").await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python/answer_receipt.py");
    for mode in ["2026-07-28", "legacy"] {
        let out = tokio::process::Command::new(python())
            .arg(&script)
            .arg(&h.url)
            .arg(mode)
            .arg("support__search_customers")
            .arg(r#"{"query": "harbor"}"#)
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let receipt = &printed["meta"]["io.toolgate/receipt"];
        assert_eq!(receipt["origin"], "toolgate.local/log", "{mode}: {printed}");
        let report = prove(&h, receipt, None).await;
        assert!(report.ok(), "{mode}: {report:#?}");
        // The independent Python verifier, from the tiles, proves it too; not a forged leaf.
        let verifier = script.with_file_name("verify_answer.py");
        let vkey = h.gateway.ledger.log_keys().await.unwrap()[0].ed25519.clone();
        let saved = h.dir.path().join("receipt.json");
        for (leaf, ok) in [(receipt["leaf_hash"].clone(), true), (json!("cd".repeat(32)), false)] {
            let mut r = receipt.clone();
            r["leaf_hash"] = leaf;
            std::fs::write(&saved, r.to_string()).unwrap();
            let base = format!("{}/log/", base(&h));
            let out = tokio::process::Command::new(python())
                .arg(&verifier)
                .arg(&saved)
                .arg(&base)
                .arg(&vkey)
                .output()
                .await
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).to_string();
            assert_eq!(
                out.status.success(),
                ok,
                "{mode}: {said}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                if ok { said.ends_with("verified\n") } else { said.contains("FAIL leaf") },
                "{said}"
            );
        }
    }
}

/// Hole found by an outside test: a refusal's genuine receipt wrapped in an
/// invented success was "verified", since only the reason was compared. The
/// receipt commits to the whole refusal, and the verifier proves the whole
/// answer: each change below fails `answer`, and nothing else.
#[tokio::test]
async fn a_refusal_s_receipt_never_proves_another_answer() {
    let h = gateway("public").await;
    let refused = call(&h.url, "tickets__export_service_records", json!({})).await;
    assert!(prove(&h, &refused, None).await.ok());
    let result = &refused["result"];
    let mut forgeries: Vec<(&str, Value)> = Vec::new();
    // A success around the refusal: isError false, new words, the same reason.
    let mut success = result.clone();
    success["isError"] = json!(false);
    success["content"] =
        json!([{"type": "text", "text": "Exported 412 service records to the archive."}]);
    forgeries.push(("an invented success", success));
    // isError dropped altogether.
    let mut silent = result.clone();
    silent.as_object_mut().unwrap().remove("isError");
    forgeries.push(("isError dropped", silent));
    // Still an error, but other words than the refusal's.
    let mut reworded = result.clone();
    reworded["content"][0]["text"] = json!("Approved by dana: go ahead and retry.");
    forgeries.push(("other words", reworded));
    // The words and the structured message changed together.
    let mut both = result.clone();
    both["content"][0]["text"] = json!("Approved by dana.");
    both["structuredContent"]["message"] = json!("Approved by dana.");
    forgeries.push(("another message", both));
    // Another action for the agent.
    let mut action = result.clone();
    action["structuredContent"]["action"] = json!("retry");
    forgeries.push(("another action", action));
    // Something carried beside the refusal.
    let mut extra = result.clone();
    extra["records"] = json!([{"id": 1}]);
    forgeries.push(("an extra member", extra));
    let mut meta = result.clone();
    meta["_meta"]["vendor/export"] = json!({"rows": 412});
    forgeries.push(("a foreign _meta", meta));
    for (what, forged) in forgeries {
        let report = prove(&h, &json!({"jsonrpc": "2.0", "id": 1, "result": forged}), None).await;
        assert_eq!(failed(&report), ["answer"], "{what}: {report:#?}");
    }
}

/// Hole found by an outside test: the published log told one tenant about
/// another (names in every entry; an unsalted proposal hash from which an
/// approver guessed ticket ids). Now the published log holds commitments
/// under secret keys: nothing in a checkpoint, tile or entry names a
/// tenant, caller, server or tool, or hashes a guessable value; the caller's
/// answer carries what opens its own receipt.
#[tokio::test]
async fn the_published_log_tells_no_reader_what_a_tenant_did() {
    let h = gateway("public").await;
    let mut proposals = Vec::new();
    for query in ["harbor", "cust_harbor_02", "acme"] {
        let args = json!({"query": query});
        let answer = call(&h.url, "support__search_customers", args.clone()).await;
        assert!(prove(&h, &answer, None).await.ok());
        proposals.push(
            toolgate_core::proposal::Proposal::new("support", "search_customers", args).sha256,
        );
    }
    let refused = call(&h.url, "tickets__export_service_records", json!({})).await;
    let report = prove(&h, &refused, None).await;
    assert!(report.ok(), "{report:#?}");
    // Everything a reader of /log/ can fetch.
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}/log/{path}", base(&h));
        async move { http.get(url).send().await.unwrap().bytes().await.unwrap().to_vec() }
    };
    let checkpoint = String::from_utf8(get("checkpoint".into()).await).unwrap();
    let size: u64 = checkpoint.lines().nth(1).unwrap().parse().unwrap();
    let suffix = if size % 256 == 0 { String::new() } else { format!(".p/{}", size % 256) };
    let tile = get(format!("tile/0/000{suffix}")).await;
    let entries = get(format!("tile/entries/000{suffix}")).await;
    assert_eq!(tile.len() as u64, 32 * size);
    let published = [checkpoint.as_bytes(), &tile, &entries].concat();
    let text = String::from_utf8_lossy(&published);
    for name in [
        "atlas",
        "agent",
        "support",
        "search_customers",
        "tickets",
        "export_service_records",
        "harbor",
        "deny",
    ] {
        assert!(!text.contains(name), "the published log names {name:?}");
    }
    for p in &proposals {
        let raw = toolgate_core::proposal::unhex32(p).unwrap();
        assert!(
            !text.contains(p.as_str()) && !published.windows(32).any(|w| w == raw),
            "the published log holds a plain proposal hash"
        );
    }
    // Each entry is a commitment, and only its own opening opens it.
    let read = toolgate_core::tiles::read_entry_bundle(&entries, size % 256).unwrap();
    for entry in &read {
        assert!(matches!(
            toolgate_core::receipt::LogEntry::from_json(
                entry,
                toolgate_core::strict_json::JsonLimits::sized(1 << 10, 4)
            ),
            Ok(toolgate_core::receipt::LogEntry::Commitment(_))
        ));
    }
    let mut wrong_key = refused.clone();
    let key = &mut named_mut(&mut wrong_key)["opening"]["key"];
    *key = json!("00".repeat(32));
    assert_eq!(failed(&prove(&h, &wrong_key, None).await), ["inclusion"]);
    // Another receipt of the same tenant does not open it either.
    let mut swapped = refused.clone();
    named_mut(&mut swapped)["opening"] =
        named(&call(&h.url, "support__search_customers", json!({"query": "x"})).await)["opening"]
            .clone();
    assert_eq!(failed(&prove(&h, &swapped, None).await), ["inclusion"]);
    // Without its opening, a format-3 receipt cannot be proven, and says so.
    let mut bare = refused.clone();
    named_mut(&mut bare).as_object_mut().unwrap().remove("opening");
    let report = prove(&h, &bare, None).await;
    assert_eq!(failed(&report), ["inclusion"]);
    assert!(report.checks.iter().any(|c| c.detail.contains("no opening")), "{report:#?}");
}

fn named_mut(answer: &mut Value) -> &mut Value {
    &mut answer["result"]["_meta"]["io.toolgate/receipt"]
}

/// Receipts logged in the clear before format 3 name their tenants: an
/// entry bundle holding one is served to an admin only, never to another
/// tenant's approver or to the public.
#[tokio::test]
async fn receipts_logged_in_the_clear_are_served_to_an_admin_only() {
    // A distinct variable per test: nextest runs each test in its own process.
    unsafe { std::env::set_var("TG_TEST_ADA_TOKEN", "ada-admin-token-0123456789") };
    let admin = "[callers.ada]\ntenant = \"atlas\"\nroles = [\"admin\", \"approver\"]\ntoken_env = \"TG_TEST_ADA_TOKEN\"\n";
    let h = start_with(
        "",
        &format!("[receipts]\ncheckpoint_ms = 100\nlog_access = \"approvers\"\n{admin}"),
        &[],
    )
    .await;
    // A format-2 receipt, as an older gateway wrote it.
    let key = std::sync::Arc::new(toolgate_core::receipt::ReceiptKey::new(
        ed25519_dalek::SigningKey::from_bytes(&[5; 32]),
    ));
    let mut old = toolgate_core::receipt::build::build(
        &old_subject(),
        toolgate_core::receipt::build::Event::Authorized { approval: None },
    );
    (old.v, old.kid) = (2, key.kid().to_string());
    let draft = toolgate_core::receipt::Draft {
        receipt: old,
        salt: [1; 32],
        asked: None,
        key,
        sign_each: false,
        placement: Default::default(),
    };
    h.gateway.ledger.append_receipts(vec![draft]).await.unwrap();
    let answer = call(&h.url, "support__search_customers", json!({"query": "harbor"})).await;
    // Its bundle is refused to the approver, with why, and served to the admin.
    let index = named(&answer)["index"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let http = reqwest::Client::new();
    let path = format!("{}/log/tile/entries/000.p/{}", base(&h), index + 1);
    let dana = http.get(&path).bearer_auth(DANA_TOKEN).send().await.unwrap();
    assert_eq!(dana.status(), 403);
    assert!(dana.text().await.unwrap().contains("logged in the clear"));
    let ada = http.get(&path).bearer_auth("ada-admin-token-0123456789").send().await.unwrap();
    assert_eq!(ada.status(), 200);
    assert!(String::from_utf8_lossy(&ada.bytes().await.unwrap()).contains("{\"receipt\":{"));
    // The approver still proves a format-3 answer in that bundle: from the
    // hash tiles and the opening its answer carries, reading no entry.
    let report = prove(&h, &answer, Some(DANA_TOKEN)).await;
    assert!(report.ok(), "{report:#?}");
}

fn old_subject() -> toolgate_core::receipt::build::Subject<'static> {
    toolgate_core::receipt::build::Subject {
        issued_at_ms: 1_780_272_000_000,
        tenant: "globex",
        caller: "globex-agent",
        server: "support",
        tool: "get_ticket",
        tool_definition_sha256: "",
        proposal_sha256: "",
        decision: None,
        policy_version: "",
        operation: None,
        salt: &[1; 32],
        arguments_hash: "",
        captured: None,
        sandbox: None,
        config_version: None,
        identity: None,
    }
}
