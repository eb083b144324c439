//! Evidence in the caller's hands: the answer to section 2's first read
//! names its receipt, and the receipt is proven from the gateway's
//! published log (`/log/`, C2SP tlog-tiles) and the log's public keys
//! alone, as `toolgate verify --answer` does it.

use std::sync::Arc;
use std::time::Duration;

use toolgate_core::note::Verifier;
use toolgate_gateway::gateway::Gateway;
use toolgate_gateway::log::readers::source::Source;
use toolgate_gateway::log::readers::verify_answer::{Options, verify_answer};

use super::client::Got;
use super::flow::Steps;

pub async fn run(
    gateway: &Arc<Gateway>,
    endpoint: &str,
    approver_token: &str,
    answer: &Got,
) -> anyhow::Result<bool> {
    println!(
        "\n10. Evidence in the caller's hands: section 2's first answer, proven from the published log alone\n"
    );
    let mut s = Steps(true);
    let Got::Result(result) = answer else {
        s.step(
            "the read's answer names its receipt",
            format!("no result: {}", answer.summary()),
            false,
        );
        return Ok(false);
    };
    let named = &result["_meta"]["io.toolgate/receipt"];
    s.step(
        "the answer names its receipt (_meta io.toolgate/receipt)",
        named.to_string(),
        named["leaf_hash"].is_string(),
    );
    // The keys a verifier is given out of band (`toolgate keys show`).
    let history = toolgate_gateway::log::keys::read_history(&gateway.config().state_dir())?
        .ok_or_else(|| anyhow::anyhow!("the gateway has no keys"))?;
    let verifiers = history
        .current
        .vkeys()
        .into_iter()
        .map(Verifier::from_vkey)
        .collect::<Result<Vec<_>, _>>()?;
    // The demo's log is served to approvers (receipts.log_access's default).
    let log = format!("{}/log/", endpoint.trim_end_matches("/mcp"));
    let source = Source::parse(&log, Some(approver_token.to_string()))?;
    let report = verify_answer(
        result,
        &source,
        &Options {
            verifiers,
            require_pq: true,
            wait: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .await?;
    for c in &report.checks {
        s.step(&format!("{} (from {log})", c.name), c.detail.clone(), c.ok);
    }
    let tool = report
        .receipt
        .as_ref()
        .and_then(|r| r["receipt"]["tool"].as_str().map(str::to_string))
        .unwrap_or_default();
    s.step(
        "the proven receipt is the read's",
        tool.clone(),
        tool == "search_tickets" && report.ok(),
    );
    Ok(s.0)
}
