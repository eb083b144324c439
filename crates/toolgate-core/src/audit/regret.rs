//! Worst regret: what a tool could do if it acts wrongly, from its name and
//! schema (the lead verb weighs most), its hints and the registry's labels.
//! A heuristic, stated in full here so its verdicts can be argued with: it
//! ranks tools for a person's attention, it decides nothing.

use serde::Serialize;
use serde_json::Value;

use super::text::words;
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
    "pay", "transfer", "refund", "charge", "withdraw", "wire", "delete", "remove", "destroy", "drop", "purge", "wipe", "erase", "truncate", "deploy", "release",
    "publish", "exec", "execute", "run", "eval", "shell", "grant", "revoke", "promote", "elevate", "sudo", "kill", "terminate", "shutdown", "rotate", "reset",
];
const OUTWARD: &[&str] = &["send", "email", "mail", "post", "notify", "share", "export", "upload", "submit", "forward", "invite", "message", "tweet", "sms"];
const SPEND: &[&str] = &["raise", "order", "buy", "purchase", "book", "reserve", "subscribe", "approve", "cancel", "close", "merge"];
const CHANGE: &[&str] = &["create", "add", "update", "modify", "set", "write", "edit", "patch", "put", "insert", "move", "rename", "assign", "save", "upsert", "import"];
const READ: &[&str] = &[
    "get", "list", "search", "find", "read", "fetch", "check", "lookup", "describe", "show", "query", "count", "view", "preview", "validate", "inspect", "status",
    "browse", "resolve",
];

/// Parameters that name where something goes.
const RECIPIENTS: &[&str] = &["to", "recipient", "recipients", "email", "cc", "bcc", "url", "webhook", "destination", "address", "target", "channel", "phone"];
/// Parameters that count or measure something.
const QUANTITIES: &[&str] = &["quantity", "amount", "count", "limit", "total", "price", "units", "value", "sum"];

fn verb_weight(verb: &str) -> (u8, &'static str) {
    if IRREVERSIBLE.contains(&verb) {
        (85, "irreversible or privileged verb")
    } else if OUTWARD.contains(&verb) {
        (65, "sends outside the caller's reach")
    } else if SPEND.contains(&verb) {
        (60, "commits spend or a decision")
    } else if CHANGE.contains(&verb) {
        (45, "changes state")
    } else if READ.contains(&verb) {
        (10, "reads")
    } else {
        (40, "unknown verb")
    }
}

/// A parameter an agent may fill with any text: a string without enum,
/// pattern, format or const.
fn free_text(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("string") && ["enum", "pattern", "format", "const"].iter().all(|k| schema.get(k).is_none())
}

fn unbounded_number(schema: &Value) -> bool {
    matches!(schema.get("type").and_then(Value::as_str), Some("integer" | "number")) && schema.get("maximum").is_none() && schema.get("exclusiveMaximum").is_none()
}

/// A tool's regret, why, and whether it is an export: an outward verb with
/// a free-text recipient sends what it is given wherever the agent says.
fn score(e: &Entry) -> (u8, Vec<String>, bool) {
    let words = words(&e.tool);
    let verb = words.first().map(String::as_str).unwrap_or("");
    let mut recipient = false;
    let (mut score, why) = verb_weight(verb);
    let mut reasons = vec![format!("lead verb `{verb}`: {why}")];
    let mut add = |points: i32, reason: String, score: &mut u8| {
        *score = (*score as i32 + points).clamp(0, 100) as u8;
        reasons.push(reason);
    };
    // Hints can be forged, so they only ever raise the score (or lower it a
    // little); a hint left to the specification's pessimistic default
    // raises it less than one the server declares.
    let h = e.hints();
    if h.open_world_hint.value {
        let (points, how) = if h.open_world_hint.declared { (15, "declared") } else { (5, "by default") };
        add(points, format!("may reach the open world (openWorldHint, {how})"), &mut score);
    }
    if h.destructive_hint.value && !h.read_only_hint.value {
        let (points, how) = if h.destructive_hint.declared { (10, "declared") } else { (5, "by default") };
        add(points, format!("may destroy or overwrite (destructiveHint, {how})"), &mut score);
    }
    if h.read_only_hint.declared && h.read_only_hint.value {
        add(-5, "declares readOnlyHint (a claim, not a proof)".into(), &mut score);
    }
    for (name, schema) in e.properties() {
        if RECIPIENTS.contains(&name.to_lowercase().as_str()) && free_text(schema) {
            add(15, format!("free-text recipient `{name}`"), &mut score);
            recipient = true;
        }
        if QUANTITIES.contains(&name.to_lowercase().as_str()) && unbounded_number(schema) {
            add(10, format!("unbounded `{name}`"), &mut score);
        }
    }
    for (label, points) in [("egress", 10), ("exfiltration", 10), ("bulk_export", 10), ("private_data", 5)] {
        if e.labels.iter().any(|l| l == label) {
            add(points, format!("labelled `{label}`"), &mut score);
        }
    }
    (score, reasons, recipient && OUTWARD.contains(&verb))
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
    let mut ranked: Vec<Regret> = inventory
        .tools
        .iter()
        .map(|e| {
            let (score, reasons, export) = score(e);
            let level = level(score);
            let suggested_class = match level {
                _ if export => AuthorityClass::Prohibited,
                Severity::High | Severity::Medium => AuthorityClass::RequiresApproval,
                Severity::Low => AuthorityClass::Automatic,
            };
            match e.registry_class {
                Some(AuthorityClass::Automatic) if level == Severity::High => findings.push(finding(
                    &LAXER,
                    &e.name,
                    "",
                    format!("regret {score}/100 ({}), yet the registry classes it automatic", reasons.join("; ")),
                )),
                None => findings.push(finding(&UNREGISTERED, &e.name, "", format!("regret {score}/100; suggested class: {}", suggested_class.as_str()))),
                _ => {}
            }
            Regret { tool: e.name.clone(), score, level, reasons, registry_class: e.registry_class, suggested_class }
        })
        .collect();
    ranked.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.tool.cmp(&b.tool)));
    ranked
}

/// Registry entries to paste for the tools the registry does not name.
pub fn suggest(report: &super::Report) -> String {
    let mut out = String::new();
    for r in report.regret.iter().filter(|r| r.registry_class.is_none()) {
        out.push_str(&format!("# regret {}/100: {}\n[registry.\"{}\"]\nclass = \"{}\"\n", r.score, r.reasons.join("; "), r.tool, r.suggested_class.as_str()));
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
        score(&entry("s", definition)).0
    }

    #[test]
    fn an_export_to_where_the_agent_says_is_suggested_prohibited() {
        let export = entry("s", json!({"name": "export_records", "inputSchema": {"properties": {"recipient": {"type": "string"}}}}));
        let fixed = entry("s", json!({"name": "export_records", "inputSchema": {"properties": {"recipient": {"type": "string", "enum": ["audit"]}}}}));
        let report = audit(&Inventory { tools: vec![export, fixed], ..Default::default() });
        let class = |r: usize| report.regret[r].suggested_class;
        let open = report.regret.iter().position(|r| r.reasons.iter().any(|x| x.contains("free-text recipient"))).unwrap();
        assert_eq!(class(open), AuthorityClass::Prohibited);
        assert_eq!(class(1 - open), AuthorityClass::RequiresApproval, "a recipient the schema fixes is a write, not an export");
    }

    #[test]
    fn the_lead_verb_weighs_most_and_the_schema_adds_to_it() {
        let read = scored(json!({"name": "get_ticket", "annotations": {"readOnlyHint": true}}));
        let change = scored(json!({"name": "update_ticket"}));
        let pay = scored(json!({"name": "pay_invoice"}));
        assert!(read < 40 && (40..70).contains(&change) && pay >= 70, "{read} {change} {pay}");
        let plain = scored(json!({"name": "send_notice", "inputSchema": {"properties": {"to": {"type": "string", "enum": ["team"]}}}}));
        let open = scored(json!({"name": "send_notice", "inputSchema": {"properties": {"to": {"type": "string"}}}}));
        assert!(open > plain, "a free-text recipient raises it: {plain} → {open}");
        let bounded = scored(json!({"name": "raise_order", "inputSchema": {"properties": {"quantity": {"type": "integer", "maximum": 20}}}}));
        let unbounded = scored(json!({"name": "raise_order", "inputSchema": {"properties": {"quantity": {"type": "integer"}}}}));
        assert!(unbounded > bounded);
    }

    #[test]
    fn a_high_regret_tool_the_registry_runs_automatically_is_flagged_and_unregistered_ones_get_a_suggestion() {
        let mut lax = entry("s", json!({"name": "delete_records"}));
        lax.registry_class = Some(AuthorityClass::Automatic);
        let mut held = entry("s", json!({"name": "drop_tables"}));
        held.registry_class = Some(AuthorityClass::RequiresApproval);
        let free = entry("s", json!({"name": "list_records", "annotations": {"readOnlyHint": true}}));
        let report = audit(&Inventory { tools: vec![lax, held, free], ..Default::default() });
        let laxer = fired(&report, LAXER.id);
        assert_eq!(laxer.len(), 1);
        assert_eq!(laxer[0].tool, "s__delete_records");
        assert_eq!(fired(&report, UNREGISTERED.id).iter().map(|f| f.tool.as_str()).collect::<Vec<_>>(), ["s__list_records"]);
        let toml = suggest(&report);
        assert!(toml.contains("[registry.\"s__list_records\"]\nclass = \"automatic\"\nread_only = true"), "{toml}");
    }
}
