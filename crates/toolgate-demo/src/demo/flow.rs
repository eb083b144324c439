//! Seed 000's approval flow for raise_parts_order: the call waits; the agent
//! cannot approve itself; a named approver approves out of band; the
//! re-issued call runs once; a second re-issue and a changed quantity do
//! not run; a denial is terminal; a call held open while an approver
//! decides from another process returns the order, and calling it again
//! replays it.

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Value, json};

use super::Tokens;
use super::approver::Approver;
use super::client::{Client, Got, accept_all, call, count_lines, reissue};

const TOOL: &str = "parts__raise_parts_order";

/// An order for an open AC-250-S ticket, with a valve that fits it.
pub fn order(quantity: u32) -> anyhow::Result<Value> {
    let data = toolgate_atlas::dataset();
    let ticket = data
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == "AC-250-S")
        .context("the data set has no open AC-250-S ticket")?;
    let part = data
        .parts
        .iter()
        .find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"))
        .context("no -S thermostatic valve")?;
    Ok(
        json!({"part_no": part.part_no, "quantity": quantity, "ticket_id": ticket.ticket_id, "justification": "valve replacement across the site"}),
    )
}

/// A list of checked steps, printed as they happen; false once one fails.
pub(super) struct Steps(pub(super) bool);

impl Steps {
    pub(super) fn step(&mut self, what: &str, got: String, ok: bool) {
        self.0 &= ok;
        println!("   {} {what}\n        {got}", if ok { "ok  " } else { "FAIL" });
    }
}

pub async fn run(
    via: &Client,
    approver: &Approver<'_>,
    sandbox: &Path,
    endpoint: &str,
    tokens: &Tokens,
) -> anyhow::Result<bool> {
    println!(
        "\n4. Seed 000's spend: raise_parts_order waits for a named human, runs once, and never on other content\n"
    );
    let orders = || count_lines(&sandbox.join("orders.jsonl"));
    let mut s = Steps(true);
    let eight = order(8)?;
    let first = call(via, TOOL, &eight).await;
    let id = first.approval_id().unwrap_or_default();
    s.step(
        "8 valves: the call waits",
        first.summary(),
        matches!(first, Got::Input(_)) && !id.is_empty(),
    );

    // The agent's own token cannot reach the approvals API.
    let admin = endpoint.replace("/mcp", &format!("/admin/approvals/{id}/approve"));
    let status = reqwest::Client::new()
        .post(&admin)
        .bearer_auth(&tokens.agent)
        .json(&json!({"reason": "I approve myself"}))
        .send()
        .await?
        .status();
    s.step(
        "the agent approves itself through the admin API",
        format!("HTTP {status}"),
        status == reqwest::StatusCode::FORBIDDEN,
    );
    let own = approver.decide("approve", &id, "I approve myself", "agent");
    s.step(
        "the agent approves itself through the CLI",
        own.as_ref().err().map(|e| e.to_string()).unwrap_or_default().to_string(),
        own.is_err(),
    );

    let again = reissue(via, TOOL, &eight, first.request_state(), Some(accept_all(&first))).await;
    s.step(
        "re-issued before anyone decided",
        again.summary(),
        matches!(again, Got::Input(_)) && again.approval_id() == Some(id.clone()),
    );

    approver.approve(&id, "fleet-wide valve replacement is budgeted")?;
    println!("   ---- `toolgate approvals approve {id} --as dana --reason …`");
    let before = orders();
    let ran = reissue(via, TOOL, &eight, first.request_state(), Some(accept_all(&first))).await;
    let order_id = ran.structured().and_then(|v| v["order_id"].as_str()).map(str::to_string);
    s.step(
        "re-issued after approval: dispatched once",
        ran.summary(),
        order_id.is_some() && orders() == before + 1,
    );

    let twice = reissue(via, TOOL, &eight, first.request_state(), Some(accept_all(&first))).await;
    let replayed = twice.structured().and_then(|v| v["order_id"].as_str()).map(str::to_string);
    s.step(
        "re-issued a second time: the recorded result, no second order",
        format!("{}; orders: {}", twice.summary(), orders() - before),
        replayed.is_some() && replayed == order_id && orders() == before + 1,
    );

    let nine = order(9)?;
    let changed = reissue(via, TOOL, &nine, first.request_state(), Some(accept_all(&first))).await;
    s.step(
        "9 valves under the approval for 8",
        format!("{}; orders: {}", changed.summary(), orders() - before),
        changed.refused_for("approval_missing_or_mismatched") && orders() == before + 1,
    );

    let three = order(3)?;
    let asked = call(via, TOOL, &three).await;
    let denied_id = asked.approval_id().unwrap_or_default();
    approver.deny(&denied_id, "three valves were ordered yesterday")?;
    println!("   ---- `toolgate approvals deny {denied_id} --as dana --reason …`");
    let denied = reissue(via, TOOL, &three, asked.request_state(), Some(accept_all(&asked))).await;
    s.step(
        "3 valves, denied: the re-issue is refused",
        denied.summary(),
        denied.refused_for("approval_denied"),
    );
    let fresh = call(via, TOOL, &three).await;
    s.step(
        "the same 3 valves, called afresh",
        format!("{}; orders: {}", fresh.summary(), orders() - before),
        fresh.refused_for("approval_denied") && orders() == before + 1,
    );

    // The way most clients meet it: one call, held open while it waits; the
    // approver decides from another process; the call returns the order.
    let six = order(6)?;
    let before = orders();
    let (held, decided) = tokio::join!(call(via, TOOL, &six), approve_when_pending(approver, 6));
    let held_order = held.structured().and_then(|v| v["order_id"].as_str()).map(str::to_string);
    s.step(
        "6 valves: the call is held while dana approves from another process",
        format!(
            "{}; {}; orders: {}",
            decided.unwrap_or_else(|e| format!("{e:#}")),
            held.summary(),
            orders() - before
        ),
        held_order.is_some() && orders() == before + 1,
    );
    // A client that lost the answer (or never had a requestState) calls again.
    let retried = call(via, TOOL, &six).await;
    let replayed = retried.structured().and_then(|v| v["order_id"].as_str()).map(str::to_string);
    s.step(
        "the same 6 valves again: the recorded result, no second order",
        format!("{}; orders: {}", retried.summary(), orders() - before),
        replayed == held_order && orders() == before + 1,
    );
    Ok(s.0)
}

/// Dana approves the pending order of `quantity` as soon as it is listed.
async fn approve_when_pending(approver: &Approver<'_>, quantity: u64) -> anyhow::Result<String> {
    for _ in 0..50 {
        let pending = tokio::task::block_in_place(|| approver.pending())?;
        if let Some(id) = pending
            .iter()
            .find(|a| a["arguments"]["quantity"] == quantity)
            .and_then(|a| a["id"].as_str())
        {
            tokio::task::block_in_place(|| approver.approve(id, "six valves for the site"))?;
            return Ok(format!(
                "`toolgate approvals approve {id} --as dana` while the call waited"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    anyhow::bail!("no pending approval for {quantity} valves appeared")
}
