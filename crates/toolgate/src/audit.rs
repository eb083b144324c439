//! `toolgate audit`: the live inventory (or a saved one) through core's
//! audit — worst regret, drift from the pins, poisoning markers, description
//! lint — printed as a table, JSON or SARIF 2.1.0, with what a client is
//! given of each tool, prompt, resource and template (listed, or why not:
//! `toolgate_gateway::listed`); `--fail-on` turns findings into an exit
//! status for CI gates; `--suggest` prints registry entries for what the
//! registry does not name, prompts and resources included.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use std::collections::BTreeMap;

use serde_json::{Value, json};
use toolgate_core::audit::{self, Inventory, Report, Severity};
use toolgate_core::visible::visible;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::listed;

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
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "inventory",
        required_unless_present = "inventory"
    )]
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
    /// Print registry entries to paste for the tools, prompts, resources and templates the registry does not name.
    #[arg(long)]
    pub suggest: bool,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (inventory, boxes, listing) = match (&args.config, &args.inventory) {
        (Some(config), _) => live(config).await?,
        (None, Some(path)) => {
            let (inventory, listing) = saved(path)?;
            (inventory, serde_json::Map::new(), listing)
        }
        (None, None) => {
            bail!("give --config FILE (the live inventory) or --inventory FILE (a saved one)")
        }
    };
    let report = audit::audit(&inventory);
    if args.suggest {
        print!("{}", audit::suggest(&report));
        print!("{}", suggest_contents(&inventory));
    } else if args.sarif {
        let config = args.config.as_deref().map(|p| p.display().to_string());
        crate::print_json(&audit::sarif::log(
            &report,
            env!("CARGO_PKG_VERSION"),
            config.as_deref(),
        ))?;
    } else if args.json {
        let listed: Vec<Value> =
            listing.iter().map(|(name, l)| json!({"name": name, "listing": l})).collect();
        crate::print_json(
            &json!({"tools": inventory.tools.len(), "regret": report.regret, "findings": report.findings, "rules": audit::RULES, "sandboxes": boxes, "listing": listed}),
        )?;
    } else {
        print_report(&inventory, &report, &listing);
        print_boxes(&boxes);
    }
    match args.fail_on {
        Some(level) if report.fails(level) => Err(GateFailed {
            count: report.findings.iter().filter(|f| f.severity >= level).count(),
            level: level.as_str(),
        }
        .into()),
        _ => Ok(()),
    }
}

/// Whether a client is given each item, by its inventory name (a tool's
/// exposed name, a prompt's, resource's or template's pin name), as
/// `toolgate_gateway::listed::listing_json` says it: `{"listed", "state",
/// "reason", "why", "to_list"}`. Empty for a saved inventory that does not
/// carry it.
type Listings = BTreeMap<String, Value>;

/// Every tool the config's upstreams list now, with its pin when it
/// drifted; each stdio server's box (`toolgate_gateway::boxes`); and what a
/// client is given of each item.
async fn live(
    path: &Path,
) -> anyhow::Result<(Inventory, serde_json::Map<String, Value>, Listings)> {
    let config = crate::serve::load_config(path, None)?;
    let gw = Gateway::start(config, Mode::Inspect).await?;
    let down = gw.wait_ready(Duration::from_secs(15)).await;
    for (server, why) in &down {
        eprintln!(
            "toolgate audit: server `{server}` is unavailable ({why}); its tools are not audited"
        );
    }
    let catalog = gw.catalogs.current();
    let tools = catalog.tools.values().map(|t| t.audit_entry()).collect();
    let contents = catalog
        .all()
        .filter(|t| t.kind != toolgate_mcp::upstream::Kind::Tool)
        .map(|t| t.audit_entry())
        .collect();
    let listing = catalog
        .all()
        .map(|t| (t.pin_name().into_owned(), listed::listing_json(t, Mode::Inspect)))
        .collect();
    let boxes = gw
        .catalogs
        .upstreams()
        .iter()
        .filter(|u| u.sandbox().is_some())
        .map(|u| (u.name.clone(), toolgate_gateway::boxes::describe_upstream(u)))
        .collect();
    gw.stop();
    Ok((Inventory { tools, contents }, boxes, listing))
}

fn saved(path: &Path) -> anyhow::Result<(Inventory, Listings)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let inventory: Inventory = serde_json::from_str(&text).with_context(|| {
        format!("{} is not an inventory (`toolgate tools --json` writes one)", path.display())
    })?;
    if let Some(t) = inventory.tools.iter().find(|t| t.definition.is_null()) {
        bail!(
            "{}: tool `{}` has no `definition` (save the inventory with this version's `toolgate tools --json`)",
            path.display(),
            t.name
        );
    }
    // What `toolgate tools --json` said a client is given, when it says.
    let raw: Value = serde_json::from_str(&text)?;
    let rows = ["tools", "contents"]
        .into_iter()
        .flat_map(|key| raw[key].as_array().cloned().unwrap_or_default());
    let listing = rows
        .filter_map(|row| Some((row["name"].as_str()?.to_string(), row.get("listing")?.clone())))
        .collect();
    Ok((inventory, listing))
}

/// Registry entries for the prompts, resources and templates the registry
/// does not name — as `toolgate import` writes them
/// (`toolgate_gateway::listed::suggest`): reads, so `automatic`, unless a
/// poisoning marker fires on the definition.
fn suggest_contents(inventory: &Inventory) -> String {
    let mut out = String::new();
    for e in inventory.contents.iter().filter(|e| e.registry_class.is_none()) {
        let s = listed::suggest(e);
        out.push_str(&format!("# {}: {}\n{}\n", audit_line(&e.name), audit_line(&s.why), s.toml));
    }
    out
}

/// A text for a TOML comment: no control character may end it early.
fn audit_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Each stdio server's box: what it reaches, its limits, its profile's hash
/// (which its receipts name).
fn print_boxes(boxes: &serde_json::Map<String, serde_json::Value>) {
    if boxes.is_empty() {
        return;
    }
    println!("\nSandboxes (docs/SANDBOX.md)");
    for (server, b) in boxes {
        if b["sandbox"] == "off" {
            println!(
                "  {:<20} OFF: runs as toolgate's own user; it can read toolgate's keys, secrets and ledger",
                visible(server)
            );
            continue;
        }
        let list = |v: &serde_json::Value| {
            v.as_array()
                .map(|a| {
                    a.iter().filter_map(|p| p.as_str()).map(visible).collect::<Vec<_>>().join(", ")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "-".into())
        };
        let network = match &b["network"] {
            serde_json::Value::String(word) => word.clone(),
            hosts => list(hosts),
        };
        println!(
            "  {:<20} read {}; write {}; network {}; {} MiB, {} processes, {} files, {} CPU s; profile {}",
            visible(server),
            list(&b["read"]),
            list(&b["write"]),
            network,
            b["memory_mb"],
            b["processes"],
            b["open_files"],
            b["cpu_seconds"],
            b["hash"].as_str().unwrap_or_default()
        );
    }
}

/// `listed`, `once served`, or `no: WHY` for a table cell; `?` when not known (a saved inventory without it).
fn cell(listing: Option<&Value>) -> String {
    match listing {
        None => "?".into(),
        Some(l) if l["state"] == "listed" => "listed".into(),
        Some(l) if l["state"] == "listed_once_served" => "listed once served".into(),
        Some(l) => format!(
            "no: {}",
            l["reason"]
                .as_str()
                .map_or("?", |r| listed::Why::from_code(r).map_or(r, |w| w.short()))
        ),
    }
}

fn print_report(inventory: &Inventory, report: &Report, listing: &Listings) {
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    let given = |names: &mut dyn Iterator<Item = &String>| {
        let (mut listed, mut hidden, mut unknown) = (0, 0, 0);
        for name in names {
            match listing.get(name).map(|l| l["listed"] == true) {
                Some(true) => listed += 1,
                Some(false) => hidden += 1,
                None => unknown += 1,
            }
        }
        if unknown > 0 {
            String::new()
        } else {
            format!(" ({listed} given to clients, {hidden} not listed)")
        }
    };
    println!(
        "toolgate audit: {} tools{}, {} prompts, resources and templates{}; findings: {} high, {} medium, {} low\n",
        inventory.tools.len(),
        given(&mut inventory.tools.iter().map(|t| &t.name)),
        inventory.contents.len(),
        given(&mut inventory.contents.iter().map(|t| &t.name)),
        count(Severity::High),
        count(Severity::Medium),
        count(Severity::Low)
    );
    let width =
        crate::tools::name_width("tool", report.regret.iter().take(15).map(|r| r.tool.as_str()))
            .max(38);
    println!(
        "Worst regret (highest first)\n  {:<5} {:<6} {:<18} {} {:<44} why",
        "score",
        "level",
        "registry",
        crate::tools::pad("tool", width),
        "a client is given it"
    );
    for r in report.regret.iter().take(15) {
        let registry = r.registry_class.map_or("-", |c| c.as_str());
        println!(
            "  {:<5} {:<6} {:<18} {} {:<44} {}",
            r.score,
            r.level.as_str(),
            registry,
            crate::tools::pad(&crate::tools::fit(&r.tool, width), width),
            cell(listing.get(&r.tool)),
            r.reasons.join("; ")
        );
    }
    if report.regret.len() > 15 {
        println!("  … {} more (--json lists all)", report.regret.len() - 15);
    }
    // What is not listed for a reason other than the registry's own word, by reason.
    let mut hidden: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (name, l) in
        listing.iter().filter(|(_, l)| l["listed"] == false && l["reason"] != "prohibited")
    {
        hidden.entry(l["reason"].as_str().unwrap_or("?")).or_default().push(name);
    }
    for (reason, names) in &hidden {
        let why = listed::Why::from_code(reason);
        let what = if why.as_ref().is_some_and(listed::Why::registry_would_list) {
            "; `toolgate tools` prints the entry that lists each"
        } else {
            ""
        };
        let said = match &why {
            Some(w) => w.short(),
            None => reason,
        };
        println!("\nNot given to clients: {said} ({}{what})", names.len());
        for name in names {
            println!("  {}", visible(name));
        }
    }
    println!(
        "\nFindings (gravest first)\n  {:<6} {:<6} {:<38} {:<28} what",
        "sev", "rule", "tool", "where"
    );
    for f in &report.findings {
        let name = audit::rule(f.rule).map_or("", |r| r.name);
        println!(
            "  {:<6} {:<6} {:<38} {:<28} {} ({name})",
            f.severity.as_str(),
            f.rule,
            f.tool,
            if f.pointer.is_empty() { "-" } else { &f.pointer },
            f.message
        );
    }
    println!("\nEach rule's fix: `toolgate audit --json` (rules), or docs/AUDIT.md.");
}
