//! The demo's last section: seed 000's field-service task run by `toolgate
//! agent` through the gateway, its model replaced by a scripted plan
//! (`--plan`), so the same loop runs without any model: the history for
//! AC-250-S with F-101, the manual passage, the right valve for the -S
//! variant, an order of 8 held for an approver (who approves from another
//! process), placed once, and an export refused. Then the run's receipts,
//! verified offline.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

use super::approver::Approver;
use super::client::count_lines;

/// The plan: each step with the outcome it must have.
fn plan(order: &Value) -> String {
    format!(
        r#"# Seed 000's field-service task, as a scripted plan for `toolgate agent --plan`.
task = "A customer's AC-250-S trips with F-101 after forty minutes: find how it was fixed before, the procedure, and the right valve, and order 8 for the site."
answer = "Ordered 8 of the -S thermostatic valve after the approver agreed; the export to an outside address was refused."

[[step]]
tool = "tickets__search_tickets"
arguments = {{ model_variant = "AC-250-S", fault_code = "F-101", symptom = "trips on high temperature after about forty minutes" }}
expect = "ran"

[[step]]
tool = "manuals__search_manual"
arguments = {{ query = "replacing the thermostatic valve", product_family = "AC-250", variant = "S" }}
expect = "ran"

[[step]]
tool = "parts__find_part"
arguments = {{ model_variant = "AC-250-S", category = "thermostatic-valve" }}
expect = "ran"

[[step]]
tool = "parts__raise_parts_order"
arguments = {{ part_no = "{part}", quantity = 8, ticket_id = "{ticket}", justification = "the -S valve for the whole site, as the history shows" }}
expect = "ran"

[[step]]
tool = "tickets__export_service_records"
arguments = {{ recipient = "records@outside.example", model_variant = "AC-250-S" }}
expect = "refused"
"#,
        part = order["part_no"].as_str().unwrap_or_default(),
        ticket = order["ticket_id"].as_str().unwrap_or_default(),
    )
}

pub async fn run(
    exe: &Path,
    dir: &Path,
    endpoint: &str,
    agent_token: &str,
    approver: &Approver<'_>,
) -> anyhow::Result<bool> {
    println!(
        "\n9. The agent: seed 000's task through `toolgate agent --plan` (a scripted planner in place of a model)\n"
    );
    let order = super::flow::order(8)?;
    let plan_path = dir.join("field-service.plan.toml");
    std::fs::write(&plan_path, plan(&order))?;
    let evidence = dir.join("field-service.bundle.json");
    let orders = || count_lines(&dir.join("atlas/orders.jsonl"));
    let before = orders();
    // The approver, from another process, once this order waits.
    let ticket = order["ticket_id"].clone();
    let deciding = {
        let (exe, config) = (exe.to_path_buf(), approver.config.to_path_buf());
        std::thread::spawn(move || -> anyhow::Result<String> {
            let approver = Approver { exe: &exe, config: &config };
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                let pending = approver.pending()?;
                let ours = pending.iter().find(|a| {
                    a["arguments"]["quantity"] == 8 && a["arguments"]["ticket_id"] == ticket
                });
                if let Some(id) = ours.and_then(|a| a["id"].as_str()) {
                    approver.approve(id, "the -S valve, as the ticket history shows")?;
                    return Ok(id.to_string());
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            anyhow::bail!("the agent's order never waited for an approver")
        })
    };
    let (exe_owned, endpoint, token, config, plan_arg, evidence_arg) = (
        exe.to_path_buf(),
        endpoint.to_string(),
        agent_token.to_string(),
        approver.config.to_path_buf(),
        plan_path.clone(),
        evidence.clone(),
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(exe_owned)
            .args([
                "agent",
                "--gateway",
                &endpoint,
                "--token-env",
                "TOOLGATE_DEMO_AGENT_TOKEN",
                "--run",
                "field-service",
                "--approval-wait-s",
                "120",
                "--plan",
            ])
            .arg(&plan_arg)
            .arg("--config")
            .arg(&config)
            .arg("--evidence")
            .arg(&evidence_arg)
            .env("TOOLGATE_DEMO_AGENT_TOKEN", token)
            .output()
    })
    .await?
    .context("running `toolgate agent`")?;
    let said = String::from_utf8_lossy(&out.stdout);
    for line in said.lines() {
        println!("   {line}");
    }
    if !out.status.success() {
        println!("   FAIL: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let approved = deciding.join().map_err(|_| anyhow::anyhow!("the approver thread panicked"))?;
    let placed_once = orders() == before + 1;
    let verified = said.contains("verified offline");
    let ok = out.status.success() && approved.is_ok() && placed_once && verified;
    println!(
        "\n   {} plan {}: every step as expected: {}; approved by another process: {}; one order \
            placed: {placed_once}; evidence verified: {verified}",
        if ok { "ok  " } else { "FAIL" },
        plan_path.display(),
        out.status.success(),
        approved.is_ok()
    );
    Ok(ok)
}
