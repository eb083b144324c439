//! `[guards]`: the checks of every call in the decide stage
//! (`stages::decide`), beside the registry and Cedar: egress markers and
//! the lethal trifecta.

use serde::Deserialize;

/// `[guards]`: checks of every call in the decide stage.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GuardsConfig {
    /// `[guards.egress]`: sensitive markers in what a call would send out.
    pub egress: EgressConfig,
    /// `[guards.trifecta]`: private data + untrusted content + a way out, per run.
    pub trifecta: TrifectaConfig,
}

/// `[guards.trifecta]`: once a run has taken in private data and untrusted
/// content, a call to an egress tool follows `on_exfiltration`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TrifectaConfig {
    /// Off: no run's legs are read or kept.
    pub enabled: bool,
    /// `approval` (default) or `block`.
    pub on_exfiltration: toolgate_core::trifecta::OnExfiltration,
}

impl Default for TrifectaConfig {
    fn default() -> Self {
        Self { enabled: true, on_exfiltration: toolgate_core::trifecta::OnExfiltration::Approval }
    }
}

/// `[guards.egress]`: arguments bound for an egress tool (registry label
/// `egress`, or an effective `openWorldHint: true`) are scanned for
/// sensitive markers; restricted data is refused, confidential data
/// follows `confidential`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Off: nothing is scanned.
    pub enabled: bool,
    /// `allow`, `approval` (default) or `block`.
    pub confidential: toolgate_core::egress::OnConfidential,
    /// `[[guards.egress.patterns]]`: markers of this deployment's own.
    pub patterns: Vec<PatternConfig>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            confidential: toolgate_core::egress::OnConfidential::Approval,
            patterns: Vec::new(),
        }
    }
}

/// One configured egress marker.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatternConfig {
    /// Its name, as findings report it (`egress.NAME@PATH`).
    pub name: String,
    /// A regular expression (the `regex` crate's syntax: linear time).
    pub regex: String,
    /// `internal`, `confidential` or `restricted`.
    pub class: toolgate_core::egress::EgressClass,
}

impl GuardsConfig {
    /// What is wrong with `[guards]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.egress.patterns {
            if let Err(e) = regex::Regex::new(&p.regex) {
                out.push(format!(
                    "guards.egress.patterns `{}`: not a regular expression: {e}",
                    p.name
                ));
            }
            if p.class == toolgate_core::egress::EgressClass::NoMarkersFound
                || p.name.trim().is_empty()
            {
                out.push(format!("guards.egress.patterns `{}`: give a name and a class of internal, confidential or restricted", p.name));
            }
        }
        out
    }
}
