//! The audit of a live inventory: what each tool could do if it acts
//! wrongly (worst regret), where its contract drifted from its pin, markers
//! of poisoning in what the model reads, and lint on how well a tool tells
//! an agent what it does. A function of the inventory only: the CLI reads
//! the inventory live (or from `toolgate tools --json`) and prints the
//! report as a table, JSON or SARIF.

mod drift;
mod lint;
mod poison;
mod regret;
pub mod sarif;
mod text;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::authority::{AuthorityClass, Hints};

pub use regret::{Regret, suggest, toml_string};

/// Every tool the gateway sees, as `toolgate tools --json` lists them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Inventory {
    /// The tools, each under its exposed name.
    pub tools: Vec<Entry>,
    /// The prompts, resources and templates, each under its pin name
    /// (`prompt:NAME`, `resource:URI`, `template:URI`): checked for drift
    /// from their pins only, since they grant nothing.
    #[serde(default)]
    pub contents: Vec<Entry>,
}

/// One tool of the inventory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// The exposed name (`SERVER__TOOL`).
    pub name: String,
    /// The upstream server's configured name.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// The definition as the server sends it now.
    pub definition: Value,
    /// The pinned definition, when the live one differs from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Value>,
    /// The registry's class, if the registry names the tool.
    #[serde(default)]
    pub registry_class: Option<AuthorityClass>,
    /// The registry's labels.
    #[serde(default)]
    pub labels: Vec<String>,
}

impl Entry {
    /// The annotation hints, as declared or defaulted.
    pub fn hints(&self) -> Hints {
        Hints::from_annotations(self.definition.get("annotations"))
    }

    fn description(&self) -> &str {
        self.definition.get("description").and_then(Value::as_str).unwrap_or("")
    }

    /// The input schema's top-level properties.
    fn properties(&self) -> Vec<(&str, &Value)> {
        self.definition
            .pointer("/inputSchema/properties")
            .and_then(Value::as_object)
            .map(|p| p.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default()
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth a look.
    Low,
    /// Fix it before agents rely on the tool.
    Medium,
    /// Fix it before the tool runs unattended.
    High,
}

impl Severity {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

impl std::str::FromStr for Severity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "low" => Ok(Self::Low),
            "medium" => Ok(Self::Medium),
            "high" => Ok(Self::High),
            other => Err(format!("`{other}` is not a severity; use low, medium or high")),
        }
    }
}

/// One rule of the audit: what it looks for and how to fix what it finds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    /// Its stable id (`TG-…`), as SARIF and `--json` name it.
    pub id: &'static str,
    /// A short name.
    pub name: &'static str,
    /// Its usual severity (some findings of a rule are graver).
    pub severity: Severity,
    /// What it finds, in a sentence.
    pub finds: &'static str,
    /// How to fix what it finds, in one line.
    pub fix: &'static str,
}

/// One finding: a rule that fired on a tool, where, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule's id.
    pub rule: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// The exposed tool name (`*` for the whole inventory, `SERVER/*` for a server).
    pub tool: String,
    /// Where in the tool's definition, as a JSON pointer (empty: the whole definition).
    pub pointer: String,
    /// What was found, never quoting a long text in full.
    pub message: String,
}

/// What the audit concludes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every tool by worst regret, highest first.
    pub regret: Vec<Regret>,
    /// Every finding, gravest first.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Whether any finding is at least `level`.
    pub fn fails(&self, level: Severity) -> bool {
        self.findings.iter().any(|f| f.severity >= level)
    }
}

/// Every rule, in the order the docs list them.
pub const RULES: &[Rule] = &[
    regret::LAXER,
    regret::UNREGISTERED,
    drift::DRIFT,
    drift::SAFER,
    poison::INVISIBLE,
    poison::CONFUSABLE,
    poison::INSTRUCTION,
    poison::CROSS_TOOL,
    poison::EXFILTRATION,
    poison::OVERLONG,
    lint::NO_DESCRIPTION,
    lint::RESTATES_NAME,
    lint::UNDOCUMENTED,
    lint::CONTRADICTS,
    lint::OPEN_WORLD,
    lint::NAMING,
    lint::SIBLINGS,
    lint::TOO_MANY,
];

/// The rule with id `id`.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}

/// Audits `inventory`.
pub fn audit(inventory: &Inventory) -> Report {
    let mut findings = Vec::new();
    let regret = regret::rank(inventory, &mut findings);
    drift::check(inventory, &mut findings);
    poison::check(inventory, &mut findings);
    lint::check(inventory, &mut findings);
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.tool.cmp(&b.tool))
            .then_with(|| a.rule.cmp(b.rule))
            .then_with(|| a.pointer.cmp(&b.pointer))
    });
    Report { regret, findings }
}

fn finding(
    rule: &Rule,
    tool: &str,
    pointer: impl Into<String>,
    message: impl Into<String>,
) -> Finding {
    Finding {
        rule: rule.id,
        severity: rule.severity,
        tool: tool.to_string(),
        pointer: pointer.into(),
        message: message.into(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A tool of server `server` with this definition (its name is taken from it).
    pub(crate) fn entry(server: &str, definition: Value) -> Entry {
        let tool = definition["name"].as_str().unwrap().to_string();
        Entry {
            name: format!("{server}__{tool}"),
            server: server.into(),
            tool,
            definition,
            pinned: None,
            registry_class: None,
            labels: vec![],
        }
    }

    pub(crate) fn fired<'a>(report: &'a Report, rule: &str) -> Vec<&'a Finding> {
        report.findings.iter().filter(|f| f.rule == rule).collect()
    }

    #[test]
    fn every_rule_has_a_unique_id_and_a_fix() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
        assert!(
            RULES
                .iter()
                .all(|r| r.id.starts_with("TG") && !r.fix.is_empty() && !r.finds.is_empty())
        );
    }

    #[test]
    fn findings_come_gravest_first_and_fail_at_their_level() {
        let inv = Inventory {
            tools: vec![
                entry(
                    "s",
                    json!({"name": "get_thing", "description": "Reads one thing by its id, without \
                        changing anything.", "annotations": {"readOnlyHint": true},
                    "inputSchema": {"type": "object", "properties": {"id": {"type": "string", "description": "The thing's id."}}}}),
                ),
                entry("s", json!({"name": "wipe", "inputSchema": {"type": "object"}})),
            ],
            ..Default::default()
        };
        let report = audit(&inv);
        let severities: Vec<Severity> = report.findings.iter().map(|f| f.severity).collect();
        assert!(severities.windows(2).all(|w| w[0] >= w[1]), "{severities:?}");
        assert!(report.fails(Severity::Low) && report.fails(Severity::Medium));
        assert_eq!(report.regret[0].tool, "s__wipe", "the destructive verb ranks first");
    }
}
