//! Seed `001_…`'s support desk through toolgate: its four hard cases — two
//! customers with similar names, a grant withdrawn between approval and
//! commit, a retried write, and a reply lost after the ticket was created —
//! each against what must hold (a clarification, a refusal at commit, one
//! ticket, and "unknown" reconciled to the real ticket id).

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Value, json};
use toolgate_gateway::gateway::Gateway;

use super::approver::Approver;
use super::client::{Client, Got, accept_all, call, count_lines, reissue};
use super::flow::Steps;

const CREATE: &str = "support__create_ticket";

pub struct Desk<'a> {
    pub gateway: &'a Gateway,
    pub via: &'a Client,
    pub sandbox: &'a Path,
    pub approver: &'a Approver<'a>,
    /// The policy file the gateway reads (the grant is edited there).
    pub policy: &'a Path,
}

fn ticket(customer: &str, subject: &str, priority: &str, reference: &str) -> Value {
    json!({"customer_id": customer, "subject": subject, "priority": priority, "client_reference": reference})
}

/// A `tools/call` carrying an operation key in `_meta`.
pub async fn keyed(client: &Client, name: &str, arguments: &Value, key: &str) -> Got {
    super::client::call_with_meta(client, name, arguments, json!({"io.toolgate/operationKey": key}))
        .await
}

pub async fn run(d: &Desk<'_>) -> anyhow::Result<bool> {
    println!("\n5. Seed 001's support desk: the four hard cases, through toolgate\n");
    let mut s = Steps(true);
    let tickets = || count_lines(&d.sandbox.join("support-tickets.jsonl"));
    let invocations = || count_lines(&d.sandbox.join("support-calls.jsonl"));

    // 1. Similar names: both come back, marked ambiguous; the agent asks.
    let found = call(d.via, "support__search_customers", &json!({"query": "North Region"})).await;
    let names: Vec<String> = found
        .structured()
        .and_then(|v| v["customers"].as_array())
        .map(|c| {
            c.iter()
                .map(|c| {
                    format!(
                        "{} ({})",
                        c["display_name"].as_str().unwrap_or("?"),
                        c["customer_id"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let ambiguous =
        found.structured().is_some_and(|v| v["status"] == "ambiguous") && names.len() == 2;
    s.step(
        "\"North Region\": two similar customers → a clarification, no silent first pick",
        format!("the agent asks: which one — {}?", names.join(" or ")),
        ambiguous,
    );

    // 2. A grant withdrawn between approval and commit: refused at commit.
    let args =
        ticket("cust_southfield_05", "Freezer alarm in store room 2", "high", "ref-demo-withdrawn");
    let asked = call(d.via, CREATE, &args).await;
    let id = asked.approval_id().unwrap_or_default();
    s.step(
        "a high-priority ticket waits for an approver",
        asked.summary(),
        matches!(asked, Got::Input(_)) && !id.is_empty(),
    );
    d.approver.approve(&id, "on-call confirmed the freezer alarm")?;
    let granted = std::fs::read_to_string(d.policy)?;
    std::fs::write(
        d.policy,
        granted.replace("\"cust_southfield_05\"", "\"cust_southfield_05_withdrawn\""),
    )?;
    d.gateway.reload_policy().context("reloading the policy")?;
    println!(
        "   ---- approved by dana; then the host withdraws cust_southfield_05 from the agent's grant (policy reloaded)"
    );
    let before = tickets();
    let commit =
        reissue(d.via, CREATE, &args, asked.request_state(), Some(accept_all(&asked))).await;
    let rule = commit
        .refusal()
        .and_then(|r| r["rules"][0].as_str().map(str::to_string))
        .unwrap_or_default();
    s.step(
        "the approved call, re-issued after the grant was withdrawn → refused at commit",
        format!("{} (rule {rule}); tickets created: {}", commit.summary(), tickets() - before),
        commit.refused_for("policy_forbids")
            && rule == "support_authorised_customers"
            && tickets() == before,
    );
    std::fs::write(d.policy, granted)?;
    d.gateway.reload_policy()?;

    // 3. A retried write: one ticket, the same result; other content under the key is a conflict.
    let args = ticket("cust_harbor_02", "Forklift 3 will not start", "normal", "ref-demo-retried");
    let (before, sent) = (tickets(), invocations());
    let first = keyed(d.via, CREATE, &args, "demo-retried-1").await;
    let again = keyed(d.via, CREATE, &args, "demo-retried-1").await;
    let id_of = |g: &Got| g.structured().and_then(|v| v["ticket_id"].as_str()).map(str::to_string);
    s.step(
        "create_ticket retried with its operation key → one ticket, the same result",
        format!(
            "{} then {}; tickets created: {}, upstream calls: {}",
            first.summary(),
            again.summary(),
            tickets() - before,
            invocations() - sent
        ),
        id_of(&first).is_some()
            && id_of(&first) == id_of(&again)
            && tickets() == before + 1
            && invocations() == sent + 1,
    );
    let other = keyed(
        d.via,
        CREATE,
        &ticket("cust_harbor_02", "Forklift 4 will not start", "normal", "ref-demo-retried"),
        "demo-retried-1",
    )
    .await;
    s.step(
        "the same key with another subject → a conflict, no ticket",
        other.summary(),
        other.refused_for("operation_conflict") && tickets() == before + 1,
    );

    // 4. The reply lost after the ticket was created: unknown, then reconciled.
    std::fs::write(d.sandbox.join("support.fault"), "stall:3000")?;
    let args = ticket("cust_training_17", "Projector bulb replacement", "low", "ref-demo-stalled");
    let before = tickets();
    let lost = keyed(d.via, CREATE, &args, "demo-stalled-1").await;
    let op = lost
        .refusal()
        .and_then(|r| r["operation_id"].as_str().map(str::to_string))
        .unwrap_or_default();
    s.step(
        "the desk stalls past the gateway's deadline after committing → unknown, reconcile",
        lost.summary(),
        lost.refused_for("outcome_unknown") && lost.refused("reconcile") && !op.is_empty(),
    );
    let settled = d.approver.cli(&["ops", "reconcile", "--json"], &op)?;
    let settled: Value = serde_json::from_str(&settled).context("ops reconcile --json")?;
    let real = std::fs::read_to_string(d.sandbox.join("support-tickets.jsonl"))?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|t| t["client_reference"] == "ref-demo-stalled")
        .and_then(|t| t["ticket_id"].as_str().map(str::to_string))
        .unwrap_or_default();
    println!("   ---- `toolgate ops reconcile {op}`: get_ticket by client_reference");
    s.step(
        "reconciled: the effect exists",
        format!(
            "{} ({})",
            settled["operation"]["state"].as_str().unwrap_or("?"),
            settled["operation"]["resolution"].as_str().unwrap_or("")
        ),
        settled["applied"] == true && tickets() == before + 1,
    );
    let after = keyed(d.via, CREATE, &args, "demo-stalled-1").await;
    let reported = after
        .structured()
        .and_then(|v| v["evidence"]["ticket"]["ticket_id"].as_str())
        .map(str::to_string)
        .unwrap_or_default();
    s.step(
        "retried with its key → the real ticket id, no second ticket",
        format!("ticket {reported} (the desk has {real})"),
        !real.is_empty() && reported == real && tickets() == before + 1,
    );
    Ok(s.0)
}
