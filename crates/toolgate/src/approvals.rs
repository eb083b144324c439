//! `toolgate approvals list|show|approve|deny`: the approver's side, out of
//! band. Works on the ledger in the config's state dir while the gateway
//! runs. `--as NAME` must be a `[callers.NAME]` entry with the `approver`
//! role, and never the caller that asked (the store refuses self-approval).

use anyhow::{Context as _, bail};
use serde_json::json;
use toolgate_core::approval::{Approval, ApprovalState};
use toolgate_core::visible::visible;
use toolgate_core::{Clock as _, SystemClock};
use toolgate_gateway::config::{APPROVER_ROLE, Config};
use toolgate_ledger::Ledger;

#[derive(clap::Subcommand)]
pub enum Action {
    /// List approvals, newest first; --state is one of pending, approved, denied, expired or consumed.
    List(Listing),
    /// Show one approval: the exact call it is for, and its state.
    Show(One),
    /// Approve one exact pending call; the agent's re-issue then runs once.
    Approve(Decide),
    /// Deny one exact pending call; that proposal stays denied.
    Deny(Decide),
}

/// `--config FILE [--state S] [--json]`: a list from the ledger.
#[derive(clap::Args)]
pub struct Listing {
    #[arg(long, value_name = "FILE")]
    pub config: std::path::PathBuf,
    /// Only this state.
    #[arg(long)]
    pub state: Option<String>,
    #[arg(long)]
    pub json: bool,
}

/// `--config FILE ID [--json]`: one record of the ledger.
#[derive(clap::Args)]
pub struct One {
    #[arg(long, value_name = "FILE")]
    pub config: std::path::PathBuf,
    pub id: String,
    #[arg(long)]
    pub json: bool,
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

/// The config and the ledger it names (the gateway's own, shared while it runs).
pub async fn open(
    config: &std::path::Path,
) -> anyhow::Result<(Config, std::sync::Arc<dyn Ledger>)> {
    let config = crate::serve::load_config(config, None)?;
    let ledger = toolgate_gateway::process::open_ledger(&config).await?;
    Ok((config, ledger))
}

pub async fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::List(Listing { config, state, json }) => {
            let (config, store) = open(&config).await?;
            let state = match state.as_deref() {
                None => None,
                Some(s) => Some(ApprovalState::parse(s).with_context(|| {
                    format!(
                        "unknown state `{s}`; use pending, approved, denied, expired or consumed"
                    )
                })?),
            };
            let all = store.approvals(None, state, SystemClock.now_ms()).await?;
            if json {
                crate::print_json(&json!({"approvals": all}))?;
            } else if all.is_empty() {
                println!(
                    "no approvals{}",
                    state.map(|s| format!(" in state {}", s.as_str())).unwrap_or_default()
                );
            } else {
                // The exposed name a client calls (`SERVER__TOOL`), as every listing names a tool.
                let tools: Vec<String> = all
                    .iter()
                    .map(|a| exposed_name(&config, &a.binding.server, &a.binding.tool))
                    .collect();
                let width = crate::tools::name_width("tool", tools.iter().map(String::as_str));
                println!(
                    "{:<37} {:<9} {:<10} {} reason",
                    "id",
                    "state",
                    "caller",
                    crate::tools::pad("tool", width)
                );
                for (a, tool) in all.iter().zip(&tools) {
                    // Names and reasons came from agents and upstreams: escaped.
                    println!(
                        "{:<37} {:<9} {:<10} {} {}",
                        visible(&a.id),
                        a.state_at(SystemClock.now_ms()).as_str(),
                        visible(&a.binding.caller),
                        crate::tools::pad(&crate::tools::fit(tool, width), width),
                        visible(&why(a))
                    );
                }
            }
            Ok(())
        }
        Action::Show(One { config, id, json }) => {
            let (config, store) = open(&config).await?;
            let approval = store
                .approval(&id)
                .await?
                .ok_or_else(|| toolgate_ledger::LedgerError::NotFound(id.clone()))?;
            print(&config, &approval, json)
        }
        Action::Approve(d) => decide(d, true).await,
        Action::Deny(d) => decide(d, false).await,
    }
}

/// `--as NAME` must be a configured approver, and `--reason` must say why.
pub fn check_approver(config: &Config, name: &str, reason: &str) -> anyhow::Result<()> {
    let Some(approver) = config.callers.get(name) else {
        bail!(
            "`{name}` is not a [callers] entry; approvers are configured callers with the `{APPROVER_ROLE}` role"
        );
    };
    if !approver.roles.iter().any(|r| r == APPROVER_ROLE) {
        bail!("`{name}` does not have the `{APPROVER_ROLE}` role and cannot decide");
    }
    if reason.trim().is_empty() {
        bail!("--reason must say why; it is recorded with the decision");
    }
    Ok(())
}

async fn decide(d: Decide, approve: bool) -> anyhow::Result<()> {
    let (config, store) = open(&d.config).await?;
    check_approver(&config, &d.approver, &d.reason)?;
    let approver = &config.callers[&d.approver];
    let subject = approver.subject_of(&d.approver);
    let decider =
        toolgate_ledger::Decider { name: &d.approver, subject: &subject, tenant: &approver.tenant };
    let decided =
        store.decide_approval(&d.id, approve, decider, &d.reason, SystemClock.now_ms()).await?;
    print(&config, &decided, d.json)
}

/// The name a person reads for what `server` calls `subject`: the exposed
/// name a client calls (`toolgate_gateway::listed::exposed_name`).
pub(crate) fn exposed_name(config: &Config, server: &str, subject: &str) -> String {
    toolgate_gateway::listed::exposed_name(config, server, subject)
}

/// Why approval is needed, once: the gateway records the class's reason
/// with its rules in parentheses (`… requires approval (registry)`), and
/// the rules beside it; the reason is shown without that tail.
fn why(a: &Approval) -> String {
    let tail = format!(" ({})", a.rules.join(", "));
    a.reason.strip_suffix(&tail).unwrap_or(&a.reason).to_string()
}

/// What each rule id an approval names means.
fn rule_text(rule: &str) -> String {
    match rule {
        "registry" => "registry (the registry's class)".into(),
        "annotations" => "annotations (its trusted server's annotations)".into(),
        "untrusted_server" => {
            "untrusted_server (an untrusted server's tool the registry does not name)".into()
        }
        other => format!("{other} (policy rule)"),
    }
}

/// The approval as the gateway would act on it now (an approved one past
/// its expiry shows `expired`).
fn print(config: &Config, a: &Approval, json: bool) -> anyhow::Result<()> {
    let a = &a.as_of(SystemClock.now_ms());
    if json {
        crate::print_json(a)?;
        return Ok(());
    }
    // What an agent sent (arguments), an upstream named (tools) and people
    // wrote (reasons) is escaped before it reaches the terminal.
    let v = |s: &str| visible(s).into_owned();
    println!("approval   {}", v(&a.id));
    println!("state      {}", a.state.as_str());
    println!(
        "call       {} by {} (tenant {})",
        v(&exposed_name(config, &a.binding.server, &a.binding.tool)),
        v(&a.binding.caller),
        v(&a.binding.tenant)
    );
    println!("arguments  {}", v(&a.arguments.to_string()));
    println!("proposal   {}", v(&a.binding.proposal_sha256));
    println!("policy     {}", v(&a.binding.policy_version));
    println!("reason     {}", v(&why(a)));
    if !a.rules.is_empty() {
        println!(
            "rules      {}",
            v(&a.rules.iter().map(|r| rule_text(r)).collect::<Vec<_>>().join(", "))
        );
    }
    if let (Some(by), Some(why)) = (&a.decided_by, &a.decision_reason) {
        println!("decided    by {}: {}", v(by), v(why));
    }
    Ok(())
}
