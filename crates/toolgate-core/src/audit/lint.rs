//! Description-quality lint, on the dimensions of seed 003's rubric: does
//! the tool say what it does (purpose), what each parameter means
//! (parameter semantics), what it may do to the world (behavioural
//! transparency, the annotations), and can an agent tell it from its
//! siblings — and how many tools does an agent have to choose from.

use std::collections::{BTreeMap, BTreeSet};

use super::text::{content_words, jaccard, words};
use super::{Finding, Inventory, Rule, Severity, finding};

pub(super) const NO_DESCRIPTION: Rule = Rule {
    id: "TG030",
    name: "description-missing",
    severity: Severity::Medium,
    finds: "a tool without a description: an agent guesses what it does from its name",
    fix: "describe what the tool does, when to use it, and what it returns",
};

pub(super) const RESTATES_NAME: Rule = Rule {
    id: "TG031",
    name: "description-restates-name",
    severity: Severity::Low,
    finds: "a description that only repeats the tool's name",
    fix: "say what the name does not: the effect, the inputs that matter, what comes back",
};

pub(super) const UNDOCUMENTED: Rule = Rule {
    id: "TG032",
    name: "parameters-undocumented",
    severity: Severity::Low,
    finds: "parameters without a description (medium when fewer than half are described)",
    fix: "give every property of inputSchema a description: its meaning, units and format",
};

pub(super) const CONTRADICTS: Rule = Rule {
    id: "TG033",
    name: "annotations-contradict",
    severity: Severity::High,
    finds: "annotations that contradict each other: readOnlyHint true with destructiveHint true",
    fix: "fix the annotations at the server; class the tool in the registry by what it does",
};

pub(super) const OPEN_WORLD: Rule = Rule {
    id: "TG034",
    name: "open-world-without-egress-label",
    severity: Severity::Medium,
    finds: "a tool that may reach the open world (openWorldHint, declared or by default) with no `egress` label in the registry",
    fix: "label it `egress` in [registry.\"NAME\"] (so egress guards apply), or have the server declare openWorldHint: false if it stays inside",
};

pub(super) const NAMING: Rule = Rule {
    id: "TG035",
    name: "naming-inconsistent",
    severity: Severity::Low,
    finds: "a server whose tool names mix styles (snake_case, camelCase, kebab-case)",
    fix: "name every tool of a server in one style",
};

pub(super) const SIBLINGS: Rule = Rule {
    id: "TG036",
    name: "siblings-ambiguous",
    severity: Severity::Medium,
    finds: "two tools an agent cannot tell apart: similar names and nearly the same description",
    fix: "say in each description when to use it rather than the other, or merge them",
};

pub(super) const TOO_MANY: Rule = Rule {
    id: "TG037",
    name: "too-many-tools",
    severity: Severity::Low,
    finds: "more tools than an agent chooses among well (over 30 on a server; medium over 60 in all)",
    fix: "expose fewer tools: prohibit the ones this deployment does not need (they are then not listed)",
};

const PER_SERVER: usize = 30;
const IN_ALL: usize = 60;

fn style(name: &str) -> &'static str {
    if name.contains('-') {
        "kebab-case"
    } else if name.contains('_') || name.chars().all(|c| !c.is_uppercase()) {
        "snake_case"
    } else {
        "camelCase"
    }
}

pub(super) fn check(inventory: &Inventory, findings: &mut Vec<Finding>) {
    for e in &inventory.tools {
        let description = e.description().trim();
        let name_words: BTreeSet<String> = words(&e.tool).into_iter().collect();
        if description.is_empty() {
            findings.push(finding(&NO_DESCRIPTION, &e.name, "/description", "no description"));
        } else {
            let said = content_words(description);
            if said.is_subset(&name_words)
                || (said.len() <= 3 && jaccard(&said, &name_words) >= 0.5)
            {
                findings.push(finding(
                    &RESTATES_NAME,
                    &e.name,
                    "/description",
                    format!("\"{description}\" says no more than the name"),
                ));
            }
        }
        let params = e.properties();
        let described = params
            .iter()
            .filter(|(_, s)| {
                s.get("description")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|d| !d.trim().is_empty())
            })
            .count();
        if described < params.len() {
            let coverage = described * 100 / params.len();
            let missing: Vec<&str> = params
                .iter()
                .filter(|(_, s)| s.get("description").is_none())
                .map(|(n, _)| *n)
                .collect();
            let mut f = finding(
                &UNDOCUMENTED,
                &e.name,
                "/inputSchema/properties",
                format!("{coverage}% of parameters described; without: {}", missing.join(", ")),
            );
            if coverage < 50 {
                f.severity = Severity::Medium;
            }
            findings.push(f);
        }
        let h = e.hints();
        if h.read_only_hint.value && h.destructive_hint.declared && h.destructive_hint.value {
            findings.push(finding(
                &CONTRADICTS,
                &e.name,
                "/annotations",
                "readOnlyHint and destructiveHint are both true",
            ));
        }
        if h.open_world_hint.value
            && !h.read_only_hint.value
            && !e.labels.iter().any(|l| l == "egress")
        {
            let how = if h.open_world_hint.declared { "declared" } else { "by default" };
            findings.push(finding(
                &OPEN_WORLD,
                &e.name,
                "/annotations/openWorldHint",
                format!("openWorldHint true ({how}), no `egress` label"),
            ));
        }
    }
    per_server(inventory, findings);
    siblings(inventory, findings);
    if inventory.tools.len() > IN_ALL {
        let mut f = finding(&TOO_MANY, "*", "", format!("{} tools in all", inventory.tools.len()));
        f.severity = Severity::Medium;
        findings.push(f);
    }
}

fn per_server(inventory: &Inventory, findings: &mut Vec<Finding>) {
    let mut servers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in &inventory.tools {
        servers.entry(e.server.as_str()).or_default().push(e.tool.as_str());
    }
    for (server, tools) in servers {
        let styles: BTreeSet<&str> =
            tools.iter().filter(|t| words(t).len() > 1).map(|t| style(t)).collect();
        if styles.len() > 1 {
            findings.push(finding(
                &NAMING,
                &format!("{server}/*"),
                "",
                format!("tool names mix {}", styles.into_iter().collect::<Vec<_>>().join(" and ")),
            ));
        }
        if tools.len() > PER_SERVER {
            findings.push(finding(
                &TOO_MANY,
                &format!("{server}/*"),
                "",
                format!("{} tools on server `{server}`", tools.len()),
            ));
        }
    }
}

/// Pairs of tools with similar names and nearly the same description. The
/// word sets are built once, so a thousand tools take half a million cheap
/// comparisons.
fn siblings(inventory: &Inventory, findings: &mut Vec<Finding>) {
    let sets: Vec<(BTreeSet<String>, BTreeSet<String>)> = inventory
        .tools
        .iter()
        .map(|e| (words(&e.tool).into_iter().collect(), content_words(e.description())))
        .collect();
    for i in 0..sets.len() {
        for j in i + 1..sets.len() {
            let (names, texts) = (jaccard(&sets[i].0, &sets[j].0), jaccard(&sets[i].1, &sets[j].1));
            if names >= 0.5 && texts >= 0.7 && sets[i].1.len() >= 3 {
                let (a, b) = (&inventory.tools[i].name, &inventory.tools[j].name);
                findings.push(finding(
                    &SIBLINGS,
                    a,
                    "",
                    format!(
                        "hard to tell from `{b}` (names {:.0}% alike, descriptions {:.0}%)",
                        names * 100.0,
                        texts * 100.0
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{entry, fired};
    use super::super::{Entry, Inventory, audit};
    use super::*;
    use serde_json::json;

    fn tools(list: Vec<Entry>) -> super::super::Report {
        audit(&Inventory { tools: list, ..Default::default() })
    }

    #[test]
    fn descriptions_are_missing_or_only_restate_the_name() {
        let r = tools(vec![
            entry("s", json!({"name": "get_ticket", "description": "Get ticket."})),
            entry("s", json!({"name": "find_part"})),
        ]);
        assert_eq!(fired(&r, NO_DESCRIPTION.id)[0].tool, "s__find_part");
        assert_eq!(fired(&r, RESTATES_NAME.id)[0].tool, "s__get_ticket");
    }

    #[test]
    fn parameter_coverage_is_measured() {
        let schema = json!({"properties": {"a": {"description": "A."}, "b": {}, "c": {}}});
        let r = tools(vec![entry(
            "s",
            json!({"name": "x", "description": "Does x to the thing you name.", "inputSchema": schema}),
        )]);
        let f = fired(&r, UNDOCUMENTED.id);
        assert_eq!(
            (f[0].severity, f[0].message.as_str()),
            (Severity::Medium, "33% of parameters described; without: b, c")
        );
    }

    #[test]
    fn contradicting_annotations_and_unlabelled_open_world_writes_are_flagged() {
        let both = entry(
            "s",
            json!({"name": "purge", "annotations": {"readOnlyHint": true, "destructiveHint": true}}),
        );
        let open = entry("s", json!({"name": "post_update"}));
        let mut labelled = entry("s", json!({"name": "post_other"}));
        labelled.labels = vec!["egress".into()];
        let r = tools(vec![both, open, labelled]);
        assert_eq!(fired(&r, CONTRADICTS.id)[0].tool, "s__purge");
        assert_eq!(
            fired(&r, OPEN_WORLD.id).iter().map(|f| f.tool.as_str()).collect::<Vec<_>>(),
            ["s__post_update"]
        );
    }

    #[test]
    fn mixed_naming_siblings_and_crowds_are_found() {
        let r = tools(vec![
            entry(
                "s",
                json!({"name": "get_ticket", "description": "Fetches one service ticket by its id with its history."}),
            ),
            entry(
                "s",
                json!({"name": "getTicketInfo", "description": "Fetches one service ticket by its id with history."}),
            ),
        ]);
        assert!(fired(&r, NAMING.id)[0].message.contains("camelCase and snake_case"));
        assert_eq!(fired(&r, SIBLINGS.id).len(), 1);
        let crowd: Vec<Entry> = (0..61)
            .map(|i| {
                entry(
                    if i < 31 { "big" } else { "small" },
                    json!({"name": format!("tool_{i}"), "description": format!("Does thing {i}.")}),
                )
            })
            .collect();
        let r = tools(crowd);
        let too_many: Vec<(&str, Severity)> =
            fired(&r, TOO_MANY.id).iter().map(|f| (f.tool.as_str(), f.severity)).collect();
        assert_eq!(too_many, [("*", Severity::Medium), ("big/*", Severity::Low)]);
    }
}
