//! `[budgets]`: rates per caller, calls per run, calls at once per tool
//! (`budgets`, and `runs` for a run's calls).

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[budgets]`: limits that refuse with `retry` and `retry_after_ms`. Zero
/// (the default) is no limit.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// Calls a minute per subject, across every replica sharing the
    /// ledger (each enforces its share of it).
    pub rate_per_minute: u32,
    /// Calls a caller may send at once before the rate applies (default:
    /// a tenth of a minute's rate, at least 1).
    pub rate_burst: Option<u32>,
    /// Calls per run, counted in the ledger (across restarts and replicas).
    pub run_calls: u64,
    /// `[budgets.concurrency]`: at most this many calls at once of a tool,
    /// by exposed name, across the replicas (each takes its share, at least 1).
    pub concurrency: BTreeMap<String, u32>,
}

impl BudgetsConfig {
    /// What is wrong with `[budgets]`, where `exposed` says whether a name
    /// is an exposed tool name (`SERVER{sep}TOOL` of a configured server).
    pub(crate) fn problems(&self, sep: &str, exposed: impl Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        if self.rate_burst == Some(0) {
            out.push("budgets.rate_burst must be at least 1 (or leave it out)".into());
        }
        for (name, limit) in &self.concurrency {
            if *limit == 0 {
                out.push(format!("budgets.concurrency `{name}`: the limit must be at least 1 (leave the tool out for no limit)"));
            }
            if !exposed(name) {
                out.push(format!("budgets.concurrency `{name}`: not an exposed name (SERVER{sep}TOOL of a configured server)"));
            }
        }
        out
    }
}
