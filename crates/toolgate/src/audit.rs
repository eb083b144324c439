//! `toolgate audit`: the live inventory (or a saved one) through core's
//! audit — worst regret, drift from the pins, poisoning markers, description
//! lint — printed as a table, JSON or SARIF 2.1.0; `--fail-on` turns
//! findings into an exit status for CI gates.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::json;
use toolgate_core::audit::{self, Inventory, Report, Severity};
use toolgate_gateway::gateway::{Gateway, Mode};

/// The exit status when a finding is at or above `--fail-on`.
pub const FAILED_GATE: u8 = 3;

/// Findings at or above the gate's level: the audit ran, and says no.
#[derive(Debug)]
pub struct GateFailed {
    pub count: usize,
    pub level: &'static str,
}

impl std::fmt::Display for GateFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "audit: {} finding(s) at or above {} (--fail-on)", self.count, self.level)
    }
}

impl std::error::Error for GateFailed {}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Audit the live inventory of this config's upstreams.
    #[arg(long, value_name = "FILE", conflicts_with = "inventory", required_unless_present = "inventory")]
    pub config: Option<PathBuf>,
    /// Audit a saved inventory instead (`toolgate tools --json > inv.json`).
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long, conflicts_with = "sarif")]
    pub json: bool,
    /// Print the report as SARIF 2.1.0 (for code scanning).
    #[arg(long)]
    pub sarif: bool,
    /// Exit with status 3 when any finding is at least this severe (low, medium or high).
    #[arg(long, value_name = "LEVEL")]
    pub fail_on: Option<Severity>,
    /// Print registry entries to paste for the tools the registry does not name.
    #[arg(long)]
    pub suggest: bool,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (inventory, boxes) = match (&args.config, &args.inventory) {
        (Some(config), _) => live(config).await?,
        (None, Some(path)) => (saved(path)?, serde_json::Map::new()),
        (None, None) => bail!("give --config FILE (the live inventory) or --inventory FILE (a saved one)"),
    };
    let report = audit::audit(&inventory);
    if args.suggest {
        print!("{}", audit::suggest(&report));
    } else if args.sarif {
        let config = args.config.as_deref().map(|p| p.display().to_string());
        crate::print_json(&audit::sarif::log(&report, env!("CARGO_PKG_VERSION"), config.as_deref()))?;
    } else if args.json {
        crate::print_json(&json!({"tools": inventory.tools.len(), "regret": report.regret, "findings": report.findings, "rules": audit::RULES, "sandboxes": boxes}))?;
    } else {
        print_report(&inventory, &report);
        print_boxes(&boxes);
    }
    match args.fail_on {
        Some(level) if report.fails(level) => Err(GateFailed { count: report.findings.iter().filter(|f| f.severity >= level).count(), level: level.as_str() }.into()),
        _ => Ok(()),
    }
}

/// Every tool the config's upstreams list now, with its pin when it
/// drifted; and each stdio server's box (`toolgate_gateway::boxes`).
async fn live(path: &Path) -> anyhow::Result<(Inventory, serde_json::Map<String, serde_json::Value>)> {
    let config = crate::serve::load_config(path, None)?;
    let gw = Gateway::start(config, Mode::Inspect).await?;
    let down = gw.wait_ready(Duration::from_secs(15)).await;
    for (server, why) in &down {
        eprintln!("toolgate audit: server `{server}` is unavailable ({why}); its tools are not audited");
    }
    let catalog = gw.catalogs.current();
    let tools = catalog.tools.values().map(|t| t.audit_entry()).collect();
    let contents = catalog.all().filter(|t| t.kind != toolgate_gateway::upstream::Kind::Tool).map(|t| t.audit_entry()).collect();
    let boxes = gw.catalogs.upstreams().iter().filter(|u| u.sandbox().is_some()).map(|u| (u.name.clone(), toolgate_gateway::boxes::describe_upstream(u))).collect();
    gw.stop();
    Ok((Inventory { tools, contents }, boxes))
}

fn saved(path: &Path) -> anyhow::Result<Inventory> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let inventory: Inventory = serde_json::from_str(&text).with_context(|| format!("{} is not an inventory (`toolgate tools --json` writes one)", path.display()))?;
    if let Some(t) = inventory.tools.iter().find(|t| t.definition.is_null()) {
        bail!("{}: tool `{}` has no `definition` (save the inventory with this version's `toolgate tools --json`)", path.display(), t.name);
    }
    Ok(inventory)
}

/// Each stdio server's box: what it reaches, its limits, its profile's hash
/// (which its receipts name).
fn print_boxes(boxes: &serde_json::Map<String, serde_json::Value>) {
    use toolgate_core::visible::visible;
    if boxes.is_empty() {
        return;
    }
    println!("\nSandboxes (docs/SANDBOX.md)");
    for (server, b) in boxes {
        if b["sandbox"] == "off" {
            println!("  {:<20} OFF: runs as toolgate's own user; it can read toolgate's keys, secrets and ledger", visible(server));
            continue;
        }
        let list = |v: &serde_json::Value| v.as_array().map(|a| a.iter().filter_map(|p| p.as_str()).map(visible).collect::<Vec<_>>().join(", ")).filter(|s| !s.is_empty()).unwrap_or_else(|| "-".into());
        let network = match &b["network"] {
            serde_json::Value::String(word) => word.clone(),
            hosts => list(hosts),
        };
        println!("  {:<20} read {}; write {}; network {}; {} MiB, {} processes, {} files, {} CPU s; profile {}", visible(server), list(&b["read"]), list(&b["write"]), network, b["memory_mb"], b["processes"], b["open_files"], b["cpu_seconds"], b["hash"].as_str().unwrap_or_default());
    }
}

fn print_report(inventory: &Inventory, report: &Report) {
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    println!("toolgate audit: {} tools; findings: {} high, {} medium, {} low\n", inventory.tools.len(), count(Severity::High), count(Severity::Medium), count(Severity::Low));
    println!("Worst regret (highest first)\n  {:<5} {:<6} {:<18} {:<38} why", "score", "level", "registry", "tool");
    for r in report.regret.iter().take(15) {
        let registry = r.registry_class.map_or("-", |c| c.as_str());
        println!("  {:<5} {:<6} {:<18} {:<38} {}", r.score, r.level.as_str(), registry, r.tool, r.reasons.join("; "));
    }
    if report.regret.len() > 15 {
        println!("  … {} more (--json lists all)", report.regret.len() - 15);
    }
    println!("\nFindings (gravest first)\n  {:<6} {:<6} {:<38} {:<28} what", "sev", "rule", "tool", "where");
    for f in &report.findings {
        let name = audit::rule(f.rule).map_or("", |r| r.name);
        println!("  {:<6} {:<6} {:<38} {:<28} {} ({name})", f.severity.as_str(), f.rule, f.tool, if f.pointer.is_empty() { "-" } else { &f.pointer }, f.message);
    }
    println!("\nEach rule's fix: `toolgate audit --json` (rules), or docs/AUDIT.md.");
}
