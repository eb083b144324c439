//! Level 2–3: the egress guard in the path, through the running gateway
//! with the Atlas notices server behind it (its `send_notice` sends mail
//! out; the registry labels it `egress`). Restricted data is refused before
//! anything is sent, in any encoding; confidential data waits for a named
//! approver, who is told what it carries; a configured pattern counts; and
//! no marker value reaches the answer, the approval, the receipts or the log.

mod common;

use base64::Engine as _;
use common::*;
use serde_json::{Value, json};

const NOTICE: &str = "notices__send_notice";
const CARD: &str = "4111 1111 1111 1111";
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";

const GUARDED: &str = "[registry.\"notices__send_notice\"]\nclass = \"automatic\"\nlabels = [\"egress\"]\n\
    [guards.egress]\nconfidential = \"approval\"\n\
    [[guards.egress.patterns]]\nname = \"project_codename\"\nregex = '\\bPROJECT-[A-Z]{4}\\b'\nclass = \"restricted\"\n";

/// The refusal a call's answer carries.
fn refusal(answer: &Value) -> &Value {
    assert_eq!(answer["result"]["isError"], true, "expected a refusal: {answer}");
    &answer["result"]["structuredContent"]
}

fn sent(h: &Harness) -> usize {
    lines(&h.sandbox().join("notices.jsonl"))
}

async fn notice(h: &Harness, body: &str) -> Value {
    call(&h.url, NOTICE, json!({"to": "team@example.test", "body": body})).await
}

#[tokio::test]
async fn restricted_data_is_refused_before_anything_is_sent_in_any_encoding() {
    let h = start_with("", GUARDED, &[]).await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("the card is {CARD}"));
    for (body, kind) in [
        (format!("Please charge {CARD} for the repair."), "payment_card"),
        (b64, "payment_card"),
        ("Status of PROJECT-ORCA, for your eyes only".to_string(), "project_codename"),
        (
            "key: -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----".to_string(),
            "private_key",
        ),
    ] {
        let got = notice(&h, &body).await;
        let r = refusal(&got);
        assert_eq!(
            (r["decision"].as_str(), r["reason"].as_str(), r["action"].as_str()),
            (Some("deny"), Some("egress_restricted"), Some("refused")),
            "{got}"
        );
        assert_eq!(r["rules"], json!([format!("egress.{kind}@/body")]), "{got}");
        assert!(r["message"].as_str().unwrap().contains(&format!("{kind} at /body")), "{got}");
    }
    assert_eq!(sent(&h), 0, "nothing left");
    // A notice without markers goes out.
    assert_ne!(notice(&h, "Build passed.").await["result"]["isError"], true);
    assert_eq!(sent(&h), 1);
    // The signed receipts name the marker, never its value (the arguments
    // are in receipts only as salted hashes unless `capture_values` is on).
    let receipts = h.gateway.ledger.receipts(0, 1_000).await.unwrap();
    let signed: String = receipts.iter().map(|r| r.logged.as_str()).collect();
    assert!(
        signed.contains("egress.payment_card@/body") && signed.contains("egress_restricted"),
        "the receipts name the marker"
    );
    // Long enough (and with spaces) that no hash or signature holds one by chance.
    for value in [CARD, "PROJECT-ORCA", "RSA PRIVATE KEY"] {
        assert!(!signed.contains(value), "{value} reached a signed receipt");
    }
}

#[tokio::test]
async fn confidential_data_waits_for_a_named_approver_who_is_told_what_it_carries() {
    let h = start_with("", GUARDED, &[]).await;
    let got = notice(&h, &format!("token for the partner: {JWT}")).await;
    let r = refusal(&got);
    assert_eq!(
        (r["reason"].as_str(), r["action"].as_str()),
        (Some("approval_pending"), Some("escalate")),
        "{got}"
    );
    let id = r["approval_id"].as_str().unwrap();
    let (_, approval) =
        admin(&h.url, Some(DANA_TOKEN), "GET", &format!("/admin/approvals/{id}"), None).await;
    assert_eq!(approval["rules"], json!(["egress.jwt@/body"]), "{approval}");
    assert!(
        approval["reason"].as_str().unwrap().contains("confidential data (jwt at /body)"),
        "{approval}"
    );
    assert_eq!(sent(&h), 0);
    // Approved, the same call runs once.
    let (status, _) = admin(
        &h.url,
        Some(DANA_TOKEN),
        "POST",
        &format!("/admin/approvals/{id}/approve"),
        Some(json!({"reason": "the partner needs it"})),
    )
    .await;
    assert_eq!(status, 200);
    assert_ne!(
        notice(&h, &format!("token for the partner: {JWT}")).await["result"]["isError"],
        true
    );
    assert_eq!(sent(&h), 1);
}

#[tokio::test]
async fn with_the_guard_off_nothing_is_scanned() {
    let h = start_with(
        "",
        "[registry.\"notices__send_notice\"]\nclass = \"automatic\"\nlabels = \
            [\"egress\"]\n[guards.egress]\nenabled = false\n",
        &[],
    )
    .await;
    assert_ne!(notice(&h, &format!("card {CARD}")).await["result"]["isError"], true);
    assert_eq!(sent(&h), 1);
}

/// A call with `_meta["io.toolgate/preview"]: true`.
async fn preview(h: &Harness, name: &str, arguments: Value) -> Value {
    let (status, body) = post(
        &h.url,
        "tools/call",
        json!({"name": name, "arguments": arguments, "_meta": {"io.toolgate/preview": true}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["result"]["structuredContent"].clone()
}

#[tokio::test]
async fn a_preview_decides_and_acts_on_nothing() {
    let h = start_with("", GUARDED, &[]).await;
    let receipts = h.gateway.ledger.log_size().await.unwrap();
    // An order that needs approval: said so, with who must approve; nothing opened.
    let part = toolgate_atlas::dataset().parts[0].part_no.clone();
    let order = preview(
        &h,
        "parts__raise_parts_order",
        json!({"part_no": part, "quantity": 2, "ticket_id": "SR-20031"}),
    )
    .await;
    assert_eq!(
        (order["preview"].clone(), order["decision"].as_str(), order["approval"]["needed"].clone()),
        (json!(true), Some("require_approval"), json!(true)),
        "{order}"
    );
    assert!(
        order["approval"]["by"].as_str().unwrap().contains("approver role in tenant `atlas`"),
        "{order}"
    );
    assert!(order["proposal_sha256"].as_str().is_some_and(|p| p.len() == 64));
    // A card to the team: what the guard would do.
    let card =
        preview(&h, NOTICE, json!({"to": "team@example.test", "body": format!("card {CARD}")}))
            .await;
    assert_eq!(
        (card["decision"].as_str(), card["reason"].as_str(), card["guards"]["egress"].clone()),
        (Some("deny"), Some("egress_restricted"), json!(["egress.payment_card@/body"])),
        "{card}"
    );
    // A clean notice: it would run, and it is not sent.
    let clean =
        preview(&h, NOTICE, json!({"to": "team@example.test", "body": "Build passed."})).await;
    assert_eq!(clean["decision"], "allow", "{clean}");
    assert_eq!(sent(&h), 0, "a preview sends nothing");
    assert_eq!(lines(&h.sandbox().join("orders.jsonl")), 0);
    let (_, pending) =
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/approvals?state=pending", None).await;
    assert_eq!(pending["approvals"], json!([]), "a preview opens no approval");
    assert_eq!(
        h.gateway.ledger.log_size().await.unwrap(),
        receipts,
        "a preview records no receipt"
    );
}

#[tokio::test]
async fn a_preview_flag_of_the_wrong_type_or_a_misspelt_one_runs_nothing() {
    let h = start_with("", GUARDED, &[]).await;
    let receipts = h.gateway.ledger.log_size().await.unwrap();
    let part = toolgate_atlas::dataset().parts[0].part_no.clone();
    let order = json!({"part_no": part, "quantity": 2, "ticket_id": "SR-20031"});
    for meta in [
        json!({"io.toolgate/preview": "true"}),
        json!({"io.toolgate/preview": 1}),
        json!({"io.toolgate/preview": null}),
        json!({"io.toolgate/previw": true}),
    ] {
        let (status, body) = post(
            &h.url,
            "tools/call",
            json!({"name": "parts__raise_parts_order", "arguments": order, "_meta": meta}),
        )
        .await;
        assert_eq!((status, body["error"]["code"].as_i64()), (200, Some(-32602)), "{meta}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("nothing was run"), "{body}");
    }
    let (_, pending) =
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/approvals?state=pending", None).await;
    assert_eq!(pending["approvals"], json!([]), "no approval was opened");
    assert_eq!(h.gateway.ledger.log_size().await.unwrap(), receipts);
    // `false` is a plain call.
    let (_, body) = post(&h.url, "tools/call", json!({"name": NOTICE, "arguments": {"to": "team@example.test", "body": "Build passed."}, "_meta": {"io.toolgate/preview": false}})).await;
    assert_eq!(body["result"]["isError"], false, "{body}");
    assert_eq!(sent(&h), 1);
}
