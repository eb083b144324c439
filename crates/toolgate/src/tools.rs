//! `toolgate tools`: the authority view of every upstream tool, read live —
//! each hint as declared or defaulted, the class the hints imply, the
//! registry's class, the class in force, whether they disagree, the pin,
//! and whether a client is given it (and if not, why: `toolgate_gateway::
//! listed`) — then every prompt, resource and template the same way, and
//! the registry entries that would list what only the registry's silence
//! keeps out. `--accept NAME` shows how a pinned contract changed and
//! accepts the new one.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::visible::visible;
use toolgate_core::{AuthorityClass, Hint};
use toolgate_gateway::catalog::{AcceptedFrom, ExposedTool};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::listed::{self, Listing};
use toolgate_gateway::pins::PinStatus;
use toolgate_mcp::upstream::Kind;

pub async fn run(config: Config, json_out: bool, accept: Option<String>) -> anyhow::Result<()> {
    let gw = Gateway::start(config, Mode::Inspect).await?;
    let down = gw.wait_ready(Duration::from_secs(15)).await;
    let catalog = gw.catalogs.current();
    let result = match accept {
        Some(name) => accept_tool(&gw, &name),
        None if json_out => {
            let rows: Vec<Value> = catalog.tools.values().map(|t| row_json(t)).collect();
            let contents: Vec<Value> =
                catalog.all().filter(|t| t.kind != Kind::Tool).map(|t| content_json(t)).collect();
            let down: Vec<Value> =
                down.iter().map(|(s, why)| json!({"server": s, "reason": why})).collect();
            let refused: Vec<Value> = catalog.ambiguous.iter().map(|(name, why)| json!({"name": name, "reason": why, "listing": {"listed": false, "state": "not_listed", "reason": "ambiguous", "why": why}})).collect();
            crate::print_json(
                &json!({"tools": rows, "contents": contents, "unavailable": down, "ambiguous": refused}),
            )?;
            Ok(())
        }
        None => {
            print_table(&catalog.tools.values().map(|t| t.as_ref()).collect::<Vec<_>>());
            let contents: Vec<&ExposedTool> =
                catalog.all().filter(|t| t.kind != Kind::Tool).map(|t| t.as_ref()).collect();
            print_contents(&contents);
            print_to_list(&catalog.all().map(|t| t.as_ref()).collect::<Vec<_>>());
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
        // Whether a client is given it, and if not why and what would list it.
        "listing": listed::listing_json(t, Mode::Inspect),
        // What `toolgate audit --inventory` reads: the definition as the
        // server sends it, and the pinned one when they differ.
        "definition": t.tool.definition,
        "pinned": t.pin.drifted_from(),
    })
}

/// A prompt, resource or template as `--json` lists it: what the audit's
/// inventory reads (its pin name, definition and pin), its kind, its class
/// and whether a client is given it.
fn content_json(t: &ExposedTool) -> Value {
    json!({
        "name": t.pin_name(),
        "kind": t.kind.noun(),
        "server": t.server,
        "tool": t.tool.name,
        "registry_class": t.view.registry_class,
        "effective_class": t.view.effective_class,
        "class_source": t.view.source,
        "labels": t.labels,
        "definition_sha256": t.definition_sha256,
        "pin": pin_word(&t.pin),
        "listing": listed::listing_json(t, Mode::Inspect),
        "definition": t.tool.definition,
        "pinned": t.pin.drifted_from(),
    })
}

/// The widest a name column grows; longer names are elided in the middle.
const MAX_NAME: usize = 72;

/// `name` made visible and fitted to `width` characters: cut in the middle
/// with `…` when longer, so both its server and its end stay readable.
pub(crate) fn fit(name: &str, width: usize) -> String {
    let shown = visible(name);
    let chars: Vec<char> = shown.chars().collect();
    if chars.len() <= width {
        return shown.into_owned();
    }
    let head = (width - 1) / 2;
    let tail = width - 1 - head;
    chars[..head].iter().chain(std::iter::once(&'…')).chain(&chars[chars.len() - tail..]).collect()
}

/// The width of a column of `names` under `header`: the longest, at most `MAX_NAME`.
pub(crate) fn name_width<'a>(header: &str, names: impl Iterator<Item = &'a str>) -> usize {
    names
        .map(|n| visible(n).chars().count())
        .chain([header.chars().count()])
        .max()
        .unwrap_or(0)
        .min(MAX_NAME)
}

/// `text` padded with spaces to `width` characters.
pub(crate) fn pad(text: &str, width: usize) -> String {
    format!("{text}{}", " ".repeat(width.saturating_sub(text.chars().count())))
}

/// Prompts, resources and templates under their pin names (what `--accept`
/// takes), with the class in force and whether a client is given each.
fn print_contents(items: &[&ExposedTool]) {
    if items.is_empty() {
        return;
    }
    let header = "prompt, resource or template (the name --accept takes)";
    let names: Vec<String> = items.iter().map(|t| t.pin_name().into_owned()).collect();
    let width = name_width(header, names.iter().map(String::as_str));
    println!("\n{} {:<18} {:<8} a client is given it", pad(header, width), "in force", "pin");
    for (t, name) in items.iter().zip(&names) {
        println!(
            "{} {:<18} {:<8} {}",
            pad(&fit(name, width), width),
            t.view.effective_class.as_str(),
            pin_word(&t.pin),
            listed::listing(t, Mode::Inspect).cell()
        );
    }
}

fn print_table(tools: &[&ExposedTool]) {
    let width = name_width("tool", tools.iter().map(|t| t.exposed_name.as_str()));
    println!(
        "{} {:<13} {:<18} {:<18} {:<18} {:<9} {:<8} a client is given it",
        pad("tool", width),
        "hints r d i o",
        "annotations imply",
        "registry says",
        "in force",
        "disagree",
        "pin"
    );
    for t in tools {
        let flag = |h: Hint| {
            format!("{}{}", if h.value { "T" } else { "F" }, if h.declared { "*" } else { " " })
        };
        let h = t.view.hints;
        let hints = format!(
            "{} {} {} {}",
            flag(h.read_only_hint),
            flag(h.destructive_hint),
            flag(h.idempotent_hint),
            flag(h.open_world_hint)
        );
        println!(
            "{} {:<13} {:<18} {:<18} {:<18} {:<9} {:<8} {}",
            pad(&fit(&t.exposed_name, width), width),
            hints,
            t.view.implied_class.as_str(),
            class(t.view.registry_class),
            t.view.effective_class.as_str(),
            if t.view.disagrees { "yes" } else { "" },
            pin_word(&t.pin),
            listed::listing(t, Mode::Inspect).cell()
        );
    }
    println!(
        "\n* = declared by the server; unmarked hints take the specification's defaults. The registry's word runs; `in force` is the class that does."
    );
    println!(
        "`listed once served`: not pinned yet — a gateway serving this config pins it when it first sees it, and lists it."
    );
}

/// What the registry's silence alone keeps from clients, with the entry
/// that would list each (`toolgate_gateway::listed::to_list`), to paste into
/// the config; and the contracts that wait to be accepted.
fn print_to_list(items: &[&ExposedTool]) {
    let fixes: Vec<(&ExposedTool, listed::Suggestion)> =
        items.iter().filter_map(|t| listed::to_list(t, Mode::Inspect).map(|s| (*t, s))).collect();
    if !fixes.is_empty() {
        println!(
            "\nNot listed until the registry names them ({}); each entry below lists one:",
            fixes.len()
        );
        for (t, fix) in &fixes {
            // Why this class, when it is not the audit's own.
            if fix.against_audit {
                println!("# {}: {}", visible(&t.pin_name()), visible(&fix.why));
            }
            for line in fix.toml.lines() {
                println!("{}", visible(line));
            }
        }
    }
    let changed: Vec<&ExposedTool> = items
        .iter()
        .copied()
        .filter(|t| {
            matches!(
                listed::listing(t, Mode::Inspect),
                Listing::NotListed(listed::Why::ContractChanged)
            )
        })
        .collect();
    if !changed.is_empty() {
        println!("\nNot listed until the change is reviewed and accepted ({}):", changed.len());
        for t in changed {
            println!("  toolgate tools --config FILE --accept {}", visible(&t.pin_name()));
        }
    }
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
                let show = |v: &Option<Value>| {
                    v.as_ref().map_or("(absent)".to_string(), |v| v.to_string())
                };
                println!(
                    "  {}\n    - {}\n    + {}",
                    visible(&change.path),
                    visible(&show(&change.before)),
                    visible(&show(&change.after))
                );
            }
        }
    }
    println!("accepted: {name} is pinned at {}", accepted.sha256);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_in_the_middle_and_the_column_stays_bounded() {
        let long = format!("fixture__{}", "x".repeat(100));
        let fitted = fit(&long, MAX_NAME);
        assert_eq!(fitted.chars().count(), MAX_NAME);
        assert!(fitted.starts_with("fixture__x") && fitted.contains('…'), "{fitted}");
        assert_eq!(fit("short", MAX_NAME), "short");
        assert_eq!(name_width("tool", [long.as_str(), "a"].into_iter()), MAX_NAME);
        assert_eq!(
            name_width("tool", ["fixture__test_input_required_result_multiple_inputs"].into_iter()),
            51
        );
        assert_eq!(pad(&fit(&long, 10), 10).chars().count(), 10);
    }
}
