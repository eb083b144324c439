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
        ("key: -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----".to_string(), "private_key"),
    ] {
        let got = notice(&h, &body).await;
        let r = refusal(&got);
        assert_eq!((r["decision"].as_str(), r["reason"].as_str(), r["action"].as_str()), (Some("deny"), Some("egress_restricted"), Some("refused")), "{got}");
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
    let signed: String = receipts.iter().map(|r| r.signed.as_str()).collect();
    assert!(signed.contains("egress.payment_card@/body") && signed.contains("egress_restricted"), "the receipts name the marker");
    for value in ["4111", "PROJECT-ORCA", "MIIE"] {
        assert!(!signed.contains(value), "{value} reached a signed receipt");
    }
}

#[tokio::test]
async fn confidential_data_waits_for_a_named_approver_who_is_told_what_it_carries() {
    let h = start_with("", GUARDED, &[]).await;
    let got = notice(&h, &format!("token for the partner: {JWT}")).await;
    let r = refusal(&got);
    assert_eq!((r["reason"].as_str(), r["action"].as_str()), (Some("approval_pending"), Some("escalate")), "{got}");
    let id = r["approval_id"].as_str().unwrap();
    let (_, approval) = admin(&h.url, Some(DANA_TOKEN), "GET", &format!("/admin/approvals/{id}"), None).await;
    assert_eq!(approval["rules"], json!(["egress.jwt@/body"]), "{approval}");
    assert!(approval["reason"].as_str().unwrap().contains("confidential data (jwt at /body)"), "{approval}");
    assert_eq!(sent(&h), 0);
    // Approved, the same call runs once.
    let (status, _) = admin(&h.url, Some(DANA_TOKEN), "POST", &format!("/admin/approvals/{id}/approve"), Some(json!({"reason": "the partner needs it"}))).await;
    assert_eq!(status, 200);
    assert_ne!(notice(&h, &format!("token for the partner: {JWT}")).await["result"]["isError"], true);
    assert_eq!(sent(&h), 1);
}

#[tokio::test]
async fn with_the_guard_off_nothing_is_scanned() {
    let h = start_with("", "[registry.\"notices__send_notice\"]\nclass = \"automatic\"\nlabels = [\"egress\"]\n[guards.egress]\nenabled = false\n", &[]).await;
    assert_ne!(notice(&h, &format!("card {CARD}")).await["result"]["isError"], true);
    assert_eq!(sent(&h), 1);
}
