//! Guards in the path: a notice to the team's own address that carries a
//! payment card is refused before it is sent (the egress guard), though the
//! policy would let that destination through with an approval.

use std::path::Path;

use serde_json::json;

use super::client::{Client, call, count_lines};
use super::flow::Steps;

pub async fn run(via: &Client, sandbox: &Path) -> anyhow::Result<bool> {
    println!("\n6. Guards in the path: what a call would send out is scanned before it is sent\n");
    let mut s = Steps(true);
    let sent = || count_lines(&sandbox.join("notices.jsonl"));
    let before = sent();
    let card = json!({"to": "team@example.test", "body": "Customer asked us to charge 4111 1111 1111 1111 for the visit."});
    let got = call(via, "notices__send_notice", &card).await;
    let rules = got.refusal().map(|r| r["rules"].to_string()).unwrap_or_default();
    s.step(
        "a card number in a notice to the team address: refused in the path, nothing sent",
        format!("{}; rules {rules}; notices sent: {}", got.summary(), sent() - before),
        got.refused_for("egress_restricted")
            && rules.contains("egress.payment_card@/body")
            && !rules.contains("4111")
            && sent() == before,
    );
    Ok(s.0)
}
