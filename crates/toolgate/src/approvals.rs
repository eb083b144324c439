//! `toolgate approvals list|show|approve|deny`: the approver's side, out of
//! band. Works on the ledger in the config's state dir while the gateway
//! runs. `--as NAME` must be a `[callers.NAME]` entry with the `approver`
//! role, and never the caller that asked (the store refuses self-approval).

use anyhow::{Context as _, bail};
use serde_json::json;
use toolgate_core::approval::{Approval, ApprovalState};
use toolgate_gateway::config::{APPROVER_ROLE, Config};
use toolgate_gateway::stages::approve::now_ms;
use toolgate_ledger::ApprovalStore;

#[derive(clap::Subcommand)]
pub enum Action {
    /// List approvals, newest first.
    List {
        #[arg(long, value_name = "FILE")]
        config: std::path::PathBuf,
        /// Only this state: pending, approved, denied, expired or consumed.
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one approval: the exact call it is for, and its state.
    Show {
        #[arg(long, value_name = "FILE")]
        config: std::path::PathBuf,
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve one exact pending call; the agent's re-issue then runs once.
    Approve(Decide),
    /// Deny one exact pending call; that proposal stays denied.
    Deny(Decide),
}

#[derive(clap::Args)]
pub struct Decide {
    #[arg(long, value_name = "FILE")]
    config: std::path::PathBuf,
    id: String,
    /// The approver: a [callers] entry with the approver role.
    #[arg(long = "as", value_name = "NAME")]
    approver: String,
    /// Why; recorded with the decision.
    #[arg(long)]
    reason: String,
    #[arg(long)]
    json: bool,
}

fn open(config: &std::path::Path) -> anyhow::Result<(Config, ApprovalStore)> {
    let config = Config::load(config)?;
    toolgate_gateway::gateway::create_state_dir(&config)?;
    let store = ApprovalStore::open(&config.ledger_path()).with_context(|| format!("opening {}", config.ledger_path().display()))?;
    Ok((config, store))
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::List { config, state, json } => {
            let (_, store) = open(&config)?;
            let state = match state.as_deref() {
                None => None,
                Some(s) => Some(ApprovalState::parse(s).with_context(|| format!("unknown state `{s}`; use pending, approved, denied, expired or consumed"))?),
            };
            let all = store.list(state, now_ms())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&json!({"approvals": all}))?);
            } else if all.is_empty() {
                println!("no approvals{}", state.map(|s| format!(" in state {}", s.as_str())).unwrap_or_default());
            } else {
                println!("{:<37} {:<9} {:<10} {:<30} reason", "id", "state", "caller", "tool");
                for a in &all {
                    let tool = format!("{}/{}", a.binding.server, a.binding.tool);
                    println!("{:<37} {:<9} {:<10} {:<30} {}", a.id, a.state_at(now_ms()).as_str(), a.binding.caller, tool, a.reason);
                }
            }
            Ok(())
        }
        Action::Show { config, id, json } => {
            let (_, store) = open(&config)?;
            print(&store.get(&id)?, json)
        }
        Action::Approve(d) => decide(d, true),
        Action::Deny(d) => decide(d, false),
    }
}

fn decide(d: Decide, approve: bool) -> anyhow::Result<()> {
    let (config, store) = open(&d.config)?;
    let Some(approver) = config.callers.get(&d.approver) else {
        bail!("`{}` is not a [callers] entry; approvers are configured callers with the `{APPROVER_ROLE}` role", d.approver);
    };
    if !approver.roles.iter().any(|r| r == APPROVER_ROLE) {
        bail!("`{}` does not have the `{APPROVER_ROLE}` role and cannot decide approvals", d.approver);
    }
    if d.reason.trim().is_empty() {
        bail!("--reason must say why; it is recorded with the decision");
    }
    let decided = store.decide(&d.id, approve, &d.approver, &d.reason, now_ms())?;
    print(&decided, d.json)
}

fn print(a: &Approval, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(a)?);
        return Ok(());
    }
    println!("approval   {}", a.id);
    println!("state      {}", a.state_at(now_ms()).as_str());
    println!("call       {}/{} by {} (tenant {})", a.binding.server, a.binding.tool, a.binding.caller, a.binding.tenant);
    println!("arguments  {}", a.arguments);
    println!("proposal   {}", a.binding.proposal_sha256);
    println!("policy     {}", a.binding.policy_version);
    println!("reason     {} ({})", a.reason, a.rules.join(", "));
    if let (Some(by), Some(why)) = (&a.decided_by, &a.decision_reason) {
        println!("decided    by {by}: {why}");
    }
    Ok(())
}
