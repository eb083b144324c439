//! `toolgate tools`: the authority view of every upstream tool, read live —
//! each hint as declared or defaulted, the class the hints imply, the
//! registry's class, whether they disagree, and the pin — and the pins of
//! every prompt, resource and template. `--accept NAME` shows how a pinned
//! contract changed and accepts the new one.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::visible::visible;
use toolgate_core::{AuthorityClass, Hint};
use toolgate_gateway::catalog::{AcceptedFrom, ExposedTool};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::pins::PinStatus;
use toolgate_gateway::upstream::Kind;

pub async fn run(config: Config, json_out: bool, accept: Option<String>) -> anyhow::Result<()> {
    let gw = Gateway::start(config, Mode::Inspect).await?;
    let down = gw.wait_ready(Duration::from_secs(15)).await;
    let catalog = gw.catalogs.current();
    let result = match accept {
        Some(name) => accept_tool(&gw, &name),
        None if json_out => {
            let rows: Vec<Value> = catalog.tools.values().map(|t| row_json(t)).collect();
            let contents: Vec<Value> = catalog.all().filter(|t| t.kind != Kind::Tool).map(|t| content_json(t)).collect();
            let down: Vec<Value> = down.iter().map(|(s, why)| json!({"server": s, "reason": why})).collect();
            let refused: Vec<Value> = catalog.ambiguous.iter().map(|(name, why)| json!({"name": name, "reason": why})).collect();
            crate::print_json(&json!({"tools": rows, "contents": contents, "unavailable": down, "ambiguous": refused}))?;
            Ok(())
        }
        None => {
            print_table(catalog.tools.values().map(|t| t.as_ref()));
            print_contents(catalog.all().filter(|t| t.kind != Kind::Tool).map(|t| t.as_ref()));
            for (server, why) in &down {
                println!("\n  server `{}` is unavailable: {}", visible(server), visible(why));
            }
            for (name, why) in &catalog.ambiguous {
                println!("\n  `{}` is not offered: {}", visible(name), visible(why));
            }
            Ok(())
        }
    };
    gw.stop();
    result
}

fn class(c: Option<AuthorityClass>) -> &'static str {
    c.map(AuthorityClass::as_str).unwrap_or("-")
}

fn pin_word(p: &PinStatus) -> &'static str {
    match p {
        PinStatus::Pinned => "pinned",
        PinStatus::New => "new",
        PinStatus::Changed(_) => "CHANGED",
    }
}

fn hint_json(h: Hint) -> Value {
    json!({"value": h.value, "declared": h.declared})
}

fn row_json(t: &ExposedTool) -> Value {
    let h = t.view.hints;
    json!({
        "name": t.exposed_name,
        "server": t.server,
        "tool": t.tool.name,
        "annotations": {
            "readOnlyHint": hint_json(h.read_only_hint),
            "destructiveHint": hint_json(h.destructive_hint),
            "idempotentHint": hint_json(h.idempotent_hint),
            "openWorldHint": hint_json(h.open_world_hint),
        },
        "annotation_implied_class": t.view.implied_class,
        "registry_class": t.view.registry_class,
        "effective_class": t.view.effective_class,
        "class_source": t.view.source,
        "disagrees": t.view.disagrees,
        "labels": t.labels,
        "definition_sha256": t.definition_sha256,
        "pin": pin_word(&t.pin),
        // What `toolgate audit --inventory` reads: the definition as the
        // server sends it, and the pinned one when they differ.
        "definition": t.tool.definition,
        "pinned": t.pin.drifted_from(),
    })
}

/// A prompt, resource or template as `--json` lists it: what the audit's
/// inventory reads (its pin name, definition and pin) and its kind.
fn content_json(t: &ExposedTool) -> Value {
    json!({
        "name": t.pin_name(),
        "kind": t.kind.noun(),
        "server": t.server,
        "tool": t.tool.name,
        "definition_sha256": t.definition_sha256,
        "pin": pin_word(&t.pin),
        "definition": t.tool.definition,
        "pinned": t.pin.drifted_from(),
    })
}

/// Prompts, resources and templates under their pin names: what
/// `--accept` takes for each.
fn print_contents<'a>(items: impl Iterator<Item = &'a ExposedTool>) {
    let items: Vec<&ExposedTool> = items.collect();
    if items.is_empty() {
        return;
    }
    println!("\n{:<72} pin", "prompt, resource or template (the name --accept takes)");
    for t in items {
        println!("{:<72} {}", visible(&t.pin_name()), pin_word(&t.pin));
    }
}

fn print_table<'a>(tools: impl Iterator<Item = &'a ExposedTool>) {
    println!(
        "{:<36} {:<17} {:<18} {:<18} {:<9} pin",
        "tool", "hints r d i o", "annotations imply", "registry says", "disagree"
    );
    for t in tools {
        let flag = |h: Hint| format!("{}{}", if h.value { "T" } else { "F" }, if h.declared { "*" } else { " " });
        let h = t.view.hints;
        let hints = format!("{} {} {} {}", flag(h.read_only_hint), flag(h.destructive_hint), flag(h.idempotent_hint), flag(h.open_world_hint));
        println!(
            "{:<36} {:<17} {:<18} {:<18} {:<9} {}",
            visible(&t.exposed_name),
            hints,
            t.view.implied_class.as_str(),
            class(t.view.registry_class),
            if t.view.disagrees { "yes" } else { "" },
            pin_word(&t.pin)
        );
    }
    println!("\n* = declared by the server; unmarked hints take the specification's defaults. The registry's word runs.");
}

fn accept_tool(gw: &Gateway, name: &str) -> anyhow::Result<()> {
    let accepted = gw.catalogs.accept(name).map_err(anyhow::Error::msg)?;
    match accepted.was {
        AcceptedFrom::AlreadyPinned => {
            println!("{name}: the live contract is the pinned one; nothing to accept");
            return Ok(());
        }
        AcceptedFrom::New => println!("{name}: not pinned yet; pinning the live contract"),
        AcceptedFrom::Changed => {
            println!("{name}: the contract changed since it was accepted:");
            for change in &accepted.changes {
                let show = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), |v| v.to_string());
                println!("  {}\n    - {}\n    + {}", visible(&change.path), visible(&show(&change.before)), visible(&show(&change.after)));
            }
        }
    }
    println!("accepted: {name} is pinned at {}", accepted.sha256);
    Ok(())
}
