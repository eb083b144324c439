//! Guards that see more than one call: the lethal trifecta per agent run
//! (a ticket's private data and an untrusted server's manual passage, then
//! a call that sends data out — a ticket update mailed to the customer's
//! site), a preview of that call, and a caller over its rate.
//!
//! The registry labels `post_ticket_update` `egress` in the demo; the
//! issue's `export_service_records` is prohibited outright by seed 000's
//! registry (section 2), so it could not show the hold.

use std::path::Path;

use serde_json::{Value, json};

use super::approver::Approver;
use super::client::{Client, Got, accept_all, call_with_meta, count_lines, reissue_with_meta};
use super::flow::Steps;

const UPDATE: &str = "tickets__post_ticket_update";

/// Searches sent at once in section 8: well over the burst.
const BURST_CALLS: u32 = 100;

/// The demo's own run ids, so these steps share no state with the rest.
fn run(id: &str) -> Value {
    json!({"io.toolgate/run": id})
}

pub async fn trifecta(
    via: &Client,
    approver: &Approver<'_>,
    sandbox: &Path,
) -> anyhow::Result<bool> {
    println!(
        "\n7. The lethal trifecta, per agent run: private data + untrusted content + a way out\n"
    );
    let mut s = Steps(true);
    let notes = || count_lines(&sandbox.join(toolgate_atlas::sandbox::NOTES));
    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open)
        .map(|t| t.ticket_id.clone())
        .unwrap_or_default();
    let update = json!({"ticket_id": open, "note": "Replaced the thermostatic valve; the unit holds temperature."});

    // A run with one leg only: the update goes out.
    let before = notes();
    call_with_meta(via, "tickets__get_ticket", &json!({"ticket_id": open}), run("demo-one-leg"))
        .await;
    let one = call_with_meta(via, UPDATE, &update, run("demo-one-leg")).await;
    s.step(
        "a run that read a ticket (private), then updates it: runs",
        one.summary(),
        !one.is_error() && notes() == before + 1,
    );

    // The same, after a manual passage from an untrusted server.
    let r = run("demo-trifecta");
    let ticket =
        call_with_meta(via, "tickets__get_ticket", &json!({"ticket_id": open}), r.clone()).await;
    let passage = call_with_meta(
        via,
        "manuals__search_manual",
        &json!({"query": "replacing the thermostatic valve"}),
        r.clone(),
    )
    .await;
    s.step(
        "the run reads the ticket and a manual passage (untrusted server)",
        format!("{} / {}", brief(&ticket), brief(&passage)),
        !ticket.is_error() && !passage.is_error(),
    );

    // A preview: what the update would meet, nothing opened or sent.
    let mut preview_meta = r.clone();
    preview_meta["io.toolgate/preview"] = json!(true);
    let pending = approver.pending()?.len();
    let preview = call_with_meta(via, UPDATE, &update, preview_meta).await;
    let p = preview.structured().cloned().unwrap_or_default();
    s.step(
        "a preview of the update: the decision, nothing opened, nothing sent",
        format!(
            "{} ({}), approval needed: {}",
            p["decision"].as_str().unwrap_or("?"),
            p["reason"].as_str().unwrap_or("?"),
            p["approval"]["needed"]
        ),
        p["reason"] == "lethal_trifecta"
            && p["approval"]["needed"] == true
            && approver.pending()?.len() == pending,
    );

    let before = notes();
    let held = call_with_meta(via, UPDATE, &update, r.clone()).await;
    let id = held.approval_id().unwrap_or_default();
    let shown =
        approver.pending()?.into_iter().find(|a| a["id"] == id.as_str()).unwrap_or_default();
    let history: Vec<&str> = shown["rules"]
        .as_array()
        .map(|r| {
            r.iter().filter_map(Value::as_str).filter(|r| r.starts_with("trifecta.")).collect()
        })
        .unwrap_or_default();
    s.step(
        "the update in that run: held for a named approver, who sees the run's history",
        format!("{}; the approval names {}", held.summary(), history.join(", ")),
        matches!(held, Got::Input(_))
            && history.iter().any(|r| r.contains("tickets__get_ticket"))
            && history.iter().any(|r| r.contains("manuals__search_manual"))
            && notes() == before,
    );
    approver.approve(&id, "the note is ours; nothing from the manual goes to the customer")?;
    println!("   ---- `toolgate approvals approve {id} --as dana --reason …`");
    let ran =
        reissue_with_meta(via, UPDATE, &update, r, held.request_state(), Some(accept_all(&held)))
            .await;
    s.step(
        "approved: the update runs once",
        ran.summary(),
        !ran.is_error() && notes() == before + 1,
    );
    Ok(s.0)
}

pub async fn rate(via: &Client) -> anyhow::Result<bool> {
    println!("\n8. Budgets: a caller over its rate is told to retry, and when\n");
    let mut s = Steps(true);
    let query = json!({"model_variant": "AC-250-S", "limit": 1});
    // At once, so the burst is spent however slow the machine is.
    let burst = futures_util::future::join_all(
        (0..BURST_CALLS)
            .map(|_| call_with_meta(via, "tickets__search_tickets", &query, run("demo-rate"))),
    )
    .await;
    let refused: Vec<&Got> = burst.iter().filter(|g| g.refused_for("rate_limited")).collect();
    // The longest wait any refusal named: calls answered later saw the
    // rate after the others had spent what came back meanwhile.
    let wait = refused
        .iter()
        .filter_map(|g| g.refusal())
        .filter_map(|r| r["retry_after_ms"].as_i64())
        .max()
        .unwrap_or(0);
    s.step(
        &format!(
            "{} searches at once; the rate is {} a minute with a burst of {}",
            burst.len(),
            super::RATE_PER_MINUTE,
            super::RATE_BURST
        ),
        format!(
            "{} ran, {} refused: rate_limited → action retry, retry_after_ms {wait}",
            burst.len() - refused.len(),
            refused.len()
        ),
        !refused.is_empty() && refused.iter().all(|g| g.refused("retry")) && wait > 0,
    );
    tokio::time::sleep(std::time::Duration::from_millis(wait as u64 + 10)).await;
    let after = call_with_meta(via, "tickets__search_tickets", &query, run("demo-rate")).await;
    s.step(&format!("after {wait} ms, the same search"), after.summary(), !after.is_error());
    // Let the burst refill, so whoever uses the agent next (`--serve`) has all of it.
    tokio::time::sleep(std::time::Duration::from_millis(
        u64::from(super::RATE_BURST) * 60_000 / u64::from(super::RATE_PER_MINUTE) + 200,
    ))
    .await;
    Ok(s.0)
}

fn brief(got: &Got) -> String {
    if got.is_error() { got.summary() } else { "ran".into() }
}
