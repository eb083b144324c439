//! Worst regret: what a tool could do if it acts wrongly, from its name and
//! schema (the lead verb weighs most), its hints and the registry's labels.
//! A heuristic, stated in full here so its verdicts can be argued with: it
//! ranks tools for a person's attention, it decides nothing.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::text::{content_words, words};
use super::{Entry, Finding, Inventory, Rule, Severity, finding};
use crate::authority::AuthorityClass;

/// A tool's worst regret.
#[derive(Debug, Clone, Serialize)]
pub struct Regret {
    /// The exposed tool name.
    pub tool: String,
    /// 0 (harmless) to 100 (irreversible harm).
    pub score: u8,
    /// The score's band: high ≥ 70, medium ≥ 40.
    pub level: Severity,
    /// Why, one phrase per contribution.
    pub reasons: Vec<String>,
    /// The registry's class, if it names the tool.
    pub registry_class: Option<AuthorityClass>,
    /// What the registry should say, for a tool it does not name.
    pub suggested_class: AuthorityClass,
}

pub(super) const LAXER: Rule = Rule {
    id: "TG001",
    name: "registry-laxer-than-regret",
    severity: Severity::High,
    finds: "the registry lets a high-regret tool run without a person (class automatic)",
    fix: "class the tool requires_approval (or prohibited) in [registry.\"NAME\"], or write a Cedar rule that bounds it",
};

pub(super) const UNREGISTERED: Rule = Rule {
    id: "TG002",
    name: "unregistered-tool",
    severity: Severity::Low,
    finds: "the registry does not name the tool, so what runs depends on the server's trust and its hints",
    fix: "add a [registry.\"NAME\"] entry (`toolgate audit --suggest` prints one to paste)",
};

/// Verbs by what they do when they go wrong.
const IRREVERSIBLE: &[&str] = &[
    "pay",
    "transfer",
    "refund",
    "charge",
    "withdraw",
    "wire",
    "delete",
    "remove",
    "destroy",
    "drop",
    "purge",
    "wipe",
    "erase",
    "truncate",
    "deploy",
    "release",
    "publish",
    "exec",
    "execute",
    "run",
    "eval",
    "evaluate",
    "shell",
    "grant",
    "revoke",
    "promote",
    "elevate",
    "sudo",
    "kill",
    "terminate",
    "shutdown",
    "rotate",
    "reset",
];
const OUTWARD: &[&str] = &[
    "send", "email", "mail", "post", "notify", "share", "export", "upload", "submit", "forward",
    "invite", "message", "tweet", "sms", "push", "reply", "comment",
];
const SPEND: &[&str] = &[
    "raise",
    "order",
    "buy",
    "purchase",
    "book",
    "reserve",
    "subscribe",
    "approve",
    "cancel",
    "close",
    "merge",
];
const CHANGE: &[&str] = &[
    "create", "add", "update", "modify", "set", "write", "edit", "patch", "put", "insert", "move",
    "rename", "assign", "save", "upsert", "import", "append", "commit", "checkout", "switch",
    "fork",
];
const READ: &[&str] = &[
    "get",
    "list",
    "search",
    "find",
    "read",
    "fetch",
    "check",
    "lookup",
    "describe",
    "show",
    "query",
    "count",
    "view",
    "preview",
    "validate",
    "inspect",
    "status",
    "browse",
    "resolve",
    "diff",
    "compare",
    "calculate",
    "compute",
    "simulate",
    "screenshot",
];

/// Parameters that name where something goes.
const RECIPIENTS: &[&str] = &[
    "to",
    "recipient",
    "recipients",
    "email",
    "cc",
    "bcc",
    "url",
    "webhook",
    "destination",
    "address",
    "target",
    "channel",
    "phone",
];
/// Recipient names that as often name a place in the tool's own data: with
/// no words of their own, the tool's description says which.
const PLACE_OR_PARTY: &[&str] = &["target", "destination"];
/// Words that say a parameter names a revision or a path.
const PLACES: &[&str] = &[
    "branch",
    "branches",
    "commit",
    "commits",
    "revision",
    "revisions",
    "ref",
    "refs",
    "sha",
    "tag",
    "tags",
    "path",
    "paths",
    "file",
    "files",
    "directory",
    "directories",
    "folder",
    "folders",
    "dir",
];
/// Words that say something goes to a party, which no place overrides.
const PARTIES: &[&str] = &[
    "email",
    "mail",
    "recipient",
    "recipients",
    "user",
    "users",
    "person",
    "people",
    "channel",
    "webhook",
    "phone",
    "url",
    "endpoint",
    "host",
    "send",
    "sends",
    "sent",
    "notify",
    "message",
];
/// Parameters that count or measure something.
const QUANTITIES: &[&str] =
    &["quantity", "amount", "count", "limit", "total", "price", "units", "value", "sum"];

/// The weight of a verb the audit knows, and what it does.
fn known_verb(verb: &str) -> Option<(u8, &'static str)> {
    if IRREVERSIBLE.contains(&verb) {
        Some((85, "irreversible or privileged verb"))
    } else if OUTWARD.contains(&verb) {
        Some((65, "sends outside the caller's reach"))
    } else if SPEND.contains(&verb) {
        Some((60, "commits spend or a decision"))
    } else if CHANGE.contains(&verb) {
        Some((45, "changes state"))
    } else if READ.contains(&verb) {
        Some((10, "reads"))
    } else {
        None
    }
}

fn verb_weight(verb: &str) -> (u8, &'static str) {
    known_verb(verb).unwrap_or((40, "unknown verb"))
}

/// A tool's verb, and where in its name (or description) it was read.
#[derive(Debug, PartialEq)]
struct Verb {
    word: String,
    /// How it was reached, for the reason: `None` when it is the name's first word.
    how: Option<String>,
}

/// The verb of a tool. A first word that is no verb the audit knows and
/// is the server's name, or a prefix every tool of the server shares
/// (`git_`, `slack_`, `maps_`), is skipped. Then the verb is the first word
/// the audit knows as one (`brave_web_search`: `search`; `issue_create`:
/// `create`); a name without one takes the description's first word if the
/// audit knows it (`Shows the commit logs`: `show`); else the word after
/// the prefix stands, an unknown verb.
fn lead_verb(e: &Entry, shared_prefix: Option<&str>) -> Verb {
    let server = words(&e.server);
    let name = words(&e.tool);
    let Some(first) = name.first() else { return Verb { word: String::new(), how: None } };
    let skip = name.len() > 1
        && known_verb(first).is_none()
        && (server.contains(first) || shared_prefix == Some(first.as_str()));
    let rest = &name[usize::from(skip)..];
    let prefix = skip.then(|| format!("after the server's prefix `{first}`"));
    let joined = |parts: Vec<Option<String>>| {
        let parts: Vec<String> = parts.into_iter().flatten().collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    };
    if let Some(at) = rest.iter().position(|w| known_verb(w).is_some()) {
        let past = (at > 0).then(|| format!("past `{}`", rest[..at].join("_")));
        return Verb { word: rest[at].clone(), how: joined(vec![prefix, past]) };
    }
    let lead = e
        .description()
        .split(|c: char| !c.is_alphanumeric())
        .find(|w| !w.is_empty())
        .unwrap_or("")
        .to_lowercase();
    let stems = [Some(lead.as_str()), lead.strip_suffix('s'), lead.strip_suffix("es")];
    if let Some(verb) = stems.into_iter().flatten().find(|w| known_verb(w).is_some()) {
        return Verb {
            word: verb.to_string(),
            how: Some("from the description: the name has no verb the audit knows".into()),
        };
    }
    Verb { word: rest[0].clone(), how: prefix }
}

/// The first word every tool of each server shares, when there are at
/// least two and it is no verb the audit knows: a product prefix.
fn shared_prefixes(inventory: &Inventory) -> HashMap<&str, String> {
    let mut firsts: HashMap<&str, Vec<Option<String>>> = HashMap::new();
    for e in &inventory.tools {
        let w = words(&e.tool);
        firsts.entry(e.server.as_str()).or_default().push((w.len() > 1).then(|| w[0].clone()));
    }
    firsts
        .into_iter()
        .filter_map(|(server, firsts)| {
            let first = firsts.first()?.clone()?;
            (firsts.len() > 1
                && firsts.iter().all(|f| f.as_deref() == Some(first.as_str()))
                && known_verb(&first).is_none())
            .then_some((server, first))
        })
        .collect()
}

/// A parameter an agent may fill with any text: a string without enum,
/// pattern, format or const.
fn free_text(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("string")
        && ["enum", "pattern", "format", "const"].iter().all(|k| schema.get(k).is_none())
}

/// Whether a recipient-named parameter names a revision or a path rather
/// than a party: its own description and title say so (words beyond its
/// name), or, for `target` and `destination` with no words of their own,
/// the tool's description does (`git_diff`: "Shows differences between
/// branches or commits"). A word for a party (`email`, `user`, `channel`,
/// `send`, …) keeps it a recipient.
fn names_a_place(name: &str, schema: &Value, tool_description: &str) -> bool {
    let says_place = |text: &str, except: &[String]| {
        let w: Vec<String> =
            content_words(text).into_iter().filter(|w| !except.contains(w)).collect();
        (!w.is_empty()).then(|| {
            w.iter().any(|w| PLACES.contains(&w.as_str()))
                && !w.iter().any(|w| PARTIES.contains(&w.as_str()))
        })
    };
    let own = ["description", "title"]
        .iter()
        .filter_map(|k| schema.get(k).and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    match says_place(&own, &words(name)) {
        Some(place) => place,
        None => {
            PLACE_OR_PARTY.contains(&name.to_lowercase().as_str())
                && says_place(tool_description, &[]) == Some(true)
        }
    }
}

fn unbounded_number(schema: &Value) -> bool {
    matches!(schema.get("type").and_then(Value::as_str), Some("integer" | "number"))
        && schema.get("maximum").is_none()
        && schema.get("exclusiveMaximum").is_none()
}

/// A tool's regret, why, and whether it is an export: an outward verb with
/// a free-text recipient sends what it is given wherever the agent says.
fn score(e: &Entry, shared_prefix: Option<&str>) -> (u8, Vec<String>, bool) {
    let verb = lead_verb(e, shared_prefix);
    let mut recipient = false;
    let (mut score, why) = verb_weight(&verb.word);
    let how = verb.how.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
    let mut reasons = vec![format!("lead verb `{}`{how}: {why}", verb.word)];
    let mut add = |points: i32, reason: String, score: &mut u8| {
        *score = (*score as i32 + points).clamp(0, 100) as u8;
        reasons.push(reason);
    };
    // Hints can be forged, so they only ever raise the score (or lower it a
    // little); a hint left to the specification's pessimistic default
    // raises it less than one the server declares.
    let h = e.hints();
    if h.open_world_hint.value {
        let (points, how) =
            if h.open_world_hint.declared { (15, "declared") } else { (5, "by default") };
        add(points, format!("may reach the open world (openWorldHint, {how})"), &mut score);
    }
    if h.destructive_hint.value && !h.read_only_hint.value {
        let (points, how) =
            if h.destructive_hint.declared { (10, "declared") } else { (5, "by default") };
        add(points, format!("may destroy or overwrite (destructiveHint, {how})"), &mut score);
    }
    if h.read_only_hint.declared && h.read_only_hint.value {
        add(-5, "declares readOnlyHint (a claim, not a proof)".into(), &mut score);
    }
    for (name, schema) in e.properties() {
        if RECIPIENTS.contains(&name.to_lowercase().as_str())
            && free_text(schema)
            && !names_a_place(name, schema, e.description())
        {
            add(15, format!("free-text recipient `{name}`"), &mut score);
            recipient = true;
        }
        if QUANTITIES.contains(&name.to_lowercase().as_str()) && unbounded_number(schema) {
            add(10, format!("unbounded `{name}`"), &mut score);
        }
    }
    for (label, points) in
        [("egress", 10), ("exfiltration", 10), ("bulk_export", 10), ("private_data", 5)]
    {
        if e.labels.iter().any(|l| l == label) {
            add(points, format!("labelled `{label}`"), &mut score);
        }
    }
    (score, reasons, recipient && OUTWARD.contains(&verb.word.as_str()))
}

fn level(score: u8) -> Severity {
    match score {
        70.. => Severity::High,
        40.. => Severity::Medium,
        _ => Severity::Low,
    }
}

/// Ranks every tool and notes where the registry is laxer than the regret
/// suggests, or silent.
pub(super) fn rank(inventory: &Inventory, findings: &mut Vec<Finding>) -> Vec<Regret> {
    let prefixes = shared_prefixes(inventory);
    let mut ranked: Vec<Regret> = inventory
        .tools
        .iter()
        .map(|e| {
            let (score, reasons, export) =
                score(e, prefixes.get(e.server.as_str()).map(String::as_str));
            let level = level(score);
            let suggested_class = match level {
                _ if export => AuthorityClass::Prohibited,
                Severity::High | Severity::Medium => AuthorityClass::RequiresApproval,
                Severity::Low => AuthorityClass::Automatic,
            };
            match e.registry_class {
                Some(AuthorityClass::Automatic) if level == Severity::High => {
                    findings.push(finding(
                        &LAXER,
                        &e.name,
                        "",
                        format!(
                            "regret {score}/100 ({}), yet the registry classes it automatic",
                            reasons.join("; ")
                        ),
                    ))
                }
                None => findings.push(finding(
                    &UNREGISTERED,
                    &e.name,
                    "",
                    format!("regret {score}/100; suggested class: {}", suggested_class.as_str()),
                )),
                _ => {}
            }
            Regret {
                tool: e.name.clone(),
                score,
                level,
                reasons,
                registry_class: e.registry_class,
                suggested_class,
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.tool.cmp(&b.tool)));
    ranked
}

/// A TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML
/// wants escaped too. What every registry entry toolgate writes quotes a
/// name with: a tool's name is the upstream's, and must not end its key.
pub fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises").replace('\u{7f}', "\\u007F")
}

/// Registry entries to paste for the tools the registry does not name.
pub fn suggest(report: &super::Report) -> String {
    let mut out = String::new();
    for r in report.regret.iter().filter(|r| r.registry_class.is_none()) {
        // The reasons quote the upstream's words: one comment line, whatever they hold.
        let why = r.reasons.join("; ").replace(|c: char| c.is_control(), " ");
        out.push_str(&format!(
            "# regret {}/100: {why}\n[registry.{}]\nclass = \"{}\"\n",
            r.score,
            toml_string(&r.tool),
            r.suggested_class.as_str()
        ));
        if r.suggested_class == AuthorityClass::Automatic {
            out.push_str("read_only = true\n");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{entry, fired};
    use super::super::{Inventory, audit};
    use super::*;
    use serde_json::json;

    fn scored(definition: Value) -> u8 {
        score(&entry("s", definition), None).0
    }

    #[test]
    fn an_export_to_where_the_agent_says_is_suggested_prohibited() {
        let export = entry(
            "s",
            json!({"name": "export_records", "inputSchema": {"properties": {"recipient": {"type": "string"}}}}),
        );
        let fixed = entry(
            "s",
            json!({"name": "export_records", "inputSchema": {"properties": {"recipient": {"type": "string", "enum": ["audit"]}}}}),
        );
        let report = audit(&Inventory { tools: vec![export, fixed], ..Default::default() });
        let class = |r: usize| report.regret[r].suggested_class;
        let open = report
            .regret
            .iter()
            .position(|r| r.reasons.iter().any(|x| x.contains("free-text recipient")))
            .unwrap();
        assert_eq!(class(open), AuthorityClass::Prohibited);
        assert_eq!(
            class(1 - open),
            AuthorityClass::RequiresApproval,
            "a recipient the schema fixes is a write, not an export"
        );
    }

    /// A name that would end its TOML key, and words that would end the
    /// comment line, stay inside them.
    #[test]
    fn a_suggestion_quotes_the_upstream_s_name() {
        let tool = "get\"]\nclass = \"automatic\"\n[x.\"y\u{7f}";
        let hostile = format!("s__{tool}");
        let report = audit(&Inventory {
            tools: vec![entry(
                "s",
                serde_json::json!({"name": tool, "description": "gets\nthings", "inputSchema": {"type": "object"}}),
            )],
            ..Default::default()
        });
        let toml = suggest(&report);
        assert!(toml.contains(&format!("[registry.{}]", toml_string(&hostile))), "{toml}");
        assert_eq!(toml.lines().filter(|l| l.starts_with('[')).count(), 1, "{toml}");
        assert!(
            toml.lines().all(|l| l.is_empty()
                || l.starts_with('#')
                || l.starts_with('[')
                || l.starts_with("class")
                || l.starts_with("read_only")),
            "{toml}"
        );
        assert_eq!(toml_string("a\u{7f}\"\n"), "\"a\\u007F\\\"\\n\"");
    }

    #[test]
    fn the_lead_verb_weighs_most_and_the_schema_adds_to_it() {
        let read = scored(json!({"name": "get_ticket", "annotations": {"readOnlyHint": true}}));
        let change = scored(json!({"name": "update_ticket"}));
        let pay = scored(json!({"name": "pay_invoice"}));
        assert!(read < 40 && (40..70).contains(&change) && pay >= 70, "{read} {change} {pay}");
        let plain = scored(
            json!({"name": "send_notice", "inputSchema": {"properties": {"to": {"type": "string", "enum": ["team"]}}}}),
        );
        let open = scored(
            json!({"name": "send_notice", "inputSchema": {"properties": {"to": {"type": "string"}}}}),
        );
        assert!(open > plain, "a free-text recipient raises it: {plain} → {open}");
        let bounded = scored(
            json!({"name": "raise_order", "inputSchema": {"properties": {"quantity": {"type": "integer", "maximum": 20}}}}),
        );
        let unbounded = scored(
            json!({"name": "raise_order", "inputSchema": {"properties": {"quantity": {"type": "integer"}}}}),
        );
        assert!(unbounded > bounded);
    }

    #[test]
    fn a_high_regret_tool_the_registry_runs_automatically_is_flagged_and_unregistered_ones_get_a_suggestion()
     {
        let mut lax = entry("s", json!({"name": "delete_records"}));
        lax.registry_class = Some(AuthorityClass::Automatic);
        let mut held = entry("s", json!({"name": "drop_tables"}));
        held.registry_class = Some(AuthorityClass::RequiresApproval);
        let free =
            entry("s", json!({"name": "list_records", "annotations": {"readOnlyHint": true}}));
        let report = audit(&Inventory { tools: vec![lax, held, free], ..Default::default() });
        let laxer = fired(&report, LAXER.id);
        assert_eq!(laxer.len(), 1);
        assert_eq!(laxer[0].tool, "s__delete_records");
        assert_eq!(
            fired(&report, UNREGISTERED.id).iter().map(|f| f.tool.as_str()).collect::<Vec<_>>(),
            ["s__list_records"]
        );
        let toml = suggest(&report);
        assert!(
            toml.contains(
                "[registry.\"s__list_records\"]\nclass = \"automatic\"\nread_only = true"
            ),
            "{toml}"
        );
    }

    fn verb_of(server: &str, definition: Value, shared: Option<&str>) -> String {
        let v = lead_verb(&entry(server, definition), shared);
        v.word
    }

    #[test]
    fn a_servers_prefix_is_not_its_verb() {
        // The server's own name, or a word of it.
        assert_eq!(verb_of("git", json!({"name": "git_status"}), None), "status");
        assert_eq!(verb_of("google-maps", json!({"name": "maps_geocode"}), None), "geocode");
        // A prefix every tool of the server shares, whatever the server is called.
        assert_eq!(verb_of("chat", json!({"name": "slack_post_message"}), Some("slack")), "post");
        // A verb the audit knows is never skipped as a prefix.
        assert_eq!(verb_of("fetch", json!({"name": "fetch_page"}), None), "fetch");
        assert_eq!(verb_of("get", json!({"name": "get_thing"}), Some("get")), "get");
        // A one-word name is its own verb.
        assert_eq!(verb_of("fetch", json!({"name": "fetch"}), None), "fetch");
        // Past words that are no verb to the first that is: noun-first names.
        assert_eq!(verb_of("s", json!({"name": "brave_web_search"}), None), "search");
        assert_eq!(verb_of("s", json!({"name": "issue_create"}), None), "create");
        // No verb in the name: the description's first word, if it is one.
        assert_eq!(
            verb_of(
                "git",
                json!({"name": "git_log", "description": "Shows the commit logs"}),
                None
            ),
            "show"
        );
        assert_eq!(
            verb_of("s", json!({"name": "ledger", "description": "Pushes entries upstream"}), None),
            "push"
        );
        assert_eq!(
            verb_of(
                "s",
                json!({"name": "thing_doer", "description": "A tool that does things"}),
                None
            ),
            "thing"
        );
        assert_eq!(
            verb_of(
                "puppeteer",
                json!({"name": "puppeteer_hover", "description": "Hover an element"}),
                None
            ),
            "hover"
        );
        // Which prefixes a whole server shares.
        let inv = Inventory {
            tools: vec![
                entry("chat", json!({"name": "slack_get_users"})),
                entry("chat", json!({"name": "slack_post_message"})),
                entry("fs", json!({"name": "read_file"})),
                entry("fs", json!({"name": "read_dir"})),
                entry("one", json!({"name": "acme_sync"})),
            ],
            ..Default::default()
        };
        let shared = shared_prefixes(&inv);
        assert_eq!(shared.get("chat").map(String::as_str), Some("slack"));
        assert!(!shared.contains_key("fs") && !shared.contains_key("one"), "{shared:?}");
        let report = audit(&inv);
        let post = report.regret.iter().find(|r| r.tool == "chat__slack_post_message").unwrap();
        assert_eq!(
            post.reasons[0],
            "lead verb `post` (after the server's prefix `slack`): sends outside the caller's reach"
        );
    }

    #[test]
    fn a_target_that_names_a_revision_or_a_path_is_no_recipient() {
        let string = json!({"type": "string"});
        let diff = "Shows differences between branches or commits";
        assert!(
            names_a_place("target", &json!({"type": "string", "title": "Target"}), diff),
            "git_diff: the tool says what it compares"
        );
        assert!(names_a_place("destination", &string, "Move or rename files and directories."));
        assert!(names_a_place(
            "to",
            &json!({"type": "string", "description": "The branch or commit to compare to"}),
            ""
        ));
        assert!(names_a_place(
            "target",
            &json!({"type": "string", "description": "Path of the file to write"}),
            ""
        ));
        // A party stays a recipient.
        assert!(!names_a_place(
            "target",
            &json!({"type": "string", "description": "Email of the person to notify"}),
            diff
        ));
        assert!(
            !names_a_place("target", &string, "Sends a file to the user you name"),
            "a file sent to someone"
        );
        assert!(
            !names_a_place("to", &string, diff),
            "`to` with no words of its own is a recipient, whatever the tool says"
        );
        assert!(!names_a_place(
            "destination",
            &json!({"type": "string", "description": "Ending point address or coordinates"}),
            ""
        ));
        assert!(
            !names_a_place("target", &string, "Forwards the report"),
            "no word for a place: a recipient"
        );
        // In the score: a diff's target adds nothing; an export's target still does.
        let git_diff = scored(
            json!({"name": "git_diff", "description": diff, "annotations": {"readOnlyHint": true, "openWorldHint": false},
            "inputSchema": {"properties": {"target": {"type": "string", "title": "Target"}}}}),
        );
        assert!(git_diff < 40, "{git_diff}");
        let export = entry(
            "s",
            json!({"name": "export_records", "description": "Exports the records as a file to the recipient",
            "inputSchema": {"properties": {"target": {"type": "string"}}}}),
        );
        assert!(score(&export, None).2, "an outward verb to a free-text target is an export");
    }
}
