//! `toolgate ops list|show|reconcile|resolve`: the operator's view of the
//! operation ledger. Works on the ledger the config names while the gateway
//! runs. `reconcile` asks the write's configured read tool whether its
//! effect exists; `resolve` records a human's finding instead.

use anyhow::{Context as _, anyhow};
use serde_json::json;
use toolgate_core::operation::{Operation, OperationState};
use toolgate_core::visible::visible;
use toolgate_core::{Clock as _, SystemClock};
use toolgate_gateway::gateway::{Gateway, Mode};

use crate::approvals::{Listing, One, check_approver, exposed_name, open};

/// `ops list`: a listing, of at most `--limit` operations (a week of them is kept).
#[derive(clap::Args)]
pub struct OpsListing {
    #[command(flatten)]
    listing: Listing,
    /// At most this many, the newest.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// List operations, newest first; --state is one of reserved, dispatched, completed, tool_error, unknown, reconciled_applied or reconciled_not_applied.
    List(OpsListing),
    /// Show one operation: its key, proposal hash, state and recorded outcome.
    Show(One),
    /// Settle an unknown operation by asking the write's configured read tool whether its effect exists.
    Reconcile(One),
    /// Settle an unknown operation by hand: it took effect (--applied) or it did not (--not-applied; the same key may then run again).
    Resolve {
        #[arg(long, value_name = "FILE")]
        config: std::path::PathBuf,
        id: String,
        #[arg(long, conflicts_with = "not_applied", required_unless_present = "not_applied")]
        applied: bool,
        #[arg(long)]
        not_applied: bool,
        /// Who settles it: a [callers] entry with the approver role.
        #[arg(long = "as", value_name = "NAME")]
        by: String,
        /// What was checked; recorded with the resolution.
        #[arg(long)]
        reason: String,
        #[arg(long)]
        json: bool,
    },
}

fn parse_state(s: &str) -> anyhow::Result<OperationState> {
    let names: Vec<&str> = OperationState::ALL.iter().map(|s| s.as_str()).collect();
    OperationState::parse(s)
        .with_context(|| format!("unknown state `{s}`; use one of {}", names.join(", ")))
}

pub async fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::List(OpsListing { listing: Listing { config, state, json }, limit }) => {
            let state = state.as_deref().map(parse_state).transpose()?;
            let (config, ledger) = open(&config).await?;
            let all = ledger.operations(None, state, SystemClock.now_ms(), limit).await?;
            if all.len() == limit {
                eprintln!("the newest {limit} shown; --limit N shows more");
            }
            if json {
                crate::print_json(&json!({"operations": all}))?;
            } else if all.is_empty() {
                println!(
                    "no operations{}",
                    state.map(|s| format!(" in state {}", s.as_str())).unwrap_or_default()
                );
            } else {
                // The exposed name a client calls (`SERVER__TOOL`), as every listing names a tool.
                let tools: Vec<String> = all
                    .iter()
                    .map(|op| exposed_name(&config, &op.key.server, &op.key.tool))
                    .collect();
                let width = crate::tools::name_width("tool", tools.iter().map(String::as_str));
                println!(
                    "{:<37} {:<22} {:<10} {} key",
                    "id",
                    "state",
                    "caller",
                    crate::tools::pad("tool", width)
                );
                for (op, tool) in all.iter().zip(&tools) {
                    // Keys, names and callers came from agents and upstreams: escaped.
                    println!(
                        "{:<37} {:<22} {:<10} {} {}",
                        visible(&op.id),
                        op.state.as_str(),
                        visible(&op.caller),
                        crate::tools::pad(&crate::tools::fit(tool, width), width),
                        visible(&op.key.value)
                    );
                }
            }
            Ok(())
        }
        Action::Show(One { config, id, json }) => {
            let (config, ledger) = open(&config).await?;
            let op = ledger
                .operation(&id)
                .await?
                .ok_or_else(|| anyhow!("no operation `{id}`; `toolgate ops list` shows them"))?;
            print(&config, &op, json)
        }
        Action::Reconcile(One { config, id, json }) => {
            // Settled or unknown to the ledger: say so before reaching any upstream.
            let (mut config, ledger) = open(&config).await?;
            let unknown = ledger
                .operations(None, Some(OperationState::Unknown), SystemClock.now_ms(), usize::MAX)
                .await?;
            let Some(op) = unknown.into_iter().find(|o| o.id == id) else {
                let op = ledger.operation(&id).await?.ok_or_else(|| {
                    anyhow!("no operation `{id}`; `toolgate ops list` shows them")
                })?;
                anyhow::bail!(
                    "operation `{id}` is {}; only an unknown operation is reconciled",
                    op.state.as_str()
                );
            };
            drop(ledger);
            toolgate_gateway::reconcile::rule(&config, &op)?;
            // The gateway's own client for the one server that holds the effect, without serving.
            config.servers.retain(|name, _| *name == op.key.server);
            let gw = Gateway::start(config, Mode::Inspect).await?;
            let done = toolgate_gateway::reconcile::reconcile(&gw, &id).await;
            gw.stop();
            let done = done?;
            if json {
                crate::print_json(
                    &json!({"operation": done.operation, "applied": done.applied, "evidence": done.evidence}),
                )?;
                return Ok(());
            }
            println!(
                "{}: {} ({})",
                visible(&id),
                done.operation.state.as_str(),
                visible(done.operation.resolution.as_deref().unwrap_or_default())
            );
            println!("evidence   {}", visible(&done.evidence.to_string()));
            Ok(())
        }
        Action::Resolve { config, id, applied, not_applied: _, by, reason, json } => {
            let (config, ledger) = open(&config).await?;
            check_approver(&config, &by, &reason)?;
            let log = toolgate_gateway::log::receipt_log::ReceiptLog::open_configured(
                &config,
                ledger.clone(),
                &toolgate_gateway::gateway::Sources::system(),
            )
            .await?;
            let op = toolgate_gateway::reconcile::resolve_by_hand(
                &*ledger,
                &log,
                &id,
                applied,
                &by,
                &reason,
                SystemClock.now_ms(),
            )
            .await?;
            print(&config, &op, json)
        }
    }
}

fn print(
    config: &toolgate_gateway::config::Config,
    op: &Operation,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        crate::print_json(op)?;
        return Ok(());
    }
    // What agents sent and upstreams answered is escaped for the terminal.
    let v = |s: &str| visible(s).into_owned();
    println!("operation  {}", v(&op.id));
    println!("state      {} (attempt {})", op.state.as_str(), op.attempts);
    println!(
        "call       {} by {} (tenant {})",
        v(&exposed_name(config, &op.key.server, &op.key.tool)),
        v(&op.caller),
        v(&op.key.tenant)
    );
    println!("key        {}", v(&op.key.value));
    println!("arguments  {}", v(&op.arguments.to_string()));
    println!("proposal   {}", v(&op.proposal_sha256));
    if let Some(a) = &op.approval_id {
        println!("approval   {}", v(a));
    }
    if let Some(o) = &op.outcome {
        println!("outcome    {}", v(&o.to_string()));
    }
    if let (Some(by), Some(why)) = (&op.resolved_by, &op.resolution) {
        println!("resolved   by {}: {}", v(by), v(why));
    }
    Ok(())
}
