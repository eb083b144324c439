//! The report as SARIF 2.1.0, so code scanning shows the findings: one run
//! of the `toolgate audit` driver with every rule, one result per finding.
//! A finding's place is logical (`SERVER/TOOL` and the JSON pointer into its
//! definition) and, when the audit read a config file, that file — the
//! registry in it is where most findings are fixed.

use serde_json::{Value, json};

use super::{RULES, Report, Severity};

fn level(s: Severity) -> &'static str {
    match s {
        Severity::High => "error",
        Severity::Medium => "warning",
        Severity::Low => "note",
    }
}

/// `report` as a SARIF 2.1.0 log; `config` is the config file's path, as
/// the repository names it, when the audit read one.
pub fn log(report: &Report, version: &str, config: Option<&str>) -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.name,
                "shortDescription": {"text": r.finds},
                "help": {"text": r.fix},
                "defaultConfiguration": {"level": level(r.severity)},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let mut location =
                json!({"logicalLocations": [{"fullyQualifiedName": f.tool, "kind": "function"}]});
            if let Some(path) = config {
                location["physicalLocation"] =
                    json!({"artifactLocation": {"uri": path}, "region": {"startLine": 1}});
            }
            let index = RULES.iter().position(|r| r.id == f.rule).unwrap_or_default();
            json!({
                "ruleId": f.rule,
                "ruleIndex": index,
                "level": level(f.severity),
                "message": {"text": format!("{}: {}", f.tool, f.message)},
                "locations": [location],
                "properties": {"severity": f.severity.as_str(), "pointer": f.pointer},
            })
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "toolgate audit", "version": version, "rules": rules}},
            "results": results,
        }],
    })
}
