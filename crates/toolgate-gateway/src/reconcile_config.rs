//! `[registry."SERVER{sep}TOOL".reconcile]`: how `reconcile` finds a
//! write's effect when its outcome is unknown.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A read tool on the same server that finds a write's effect: after
/// `create_ticket` times out, `get_ticket {client_reference}` says whether
/// the ticket exists.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileConfig {
    /// The read tool's upstream name.
    pub(crate) tool: String,
    /// The read tool's arguments: each maps to the name of an argument of
    /// the original write.
    pub(crate) arguments: BTreeMap<String, String>,
    /// A JSON pointer into the read's `structuredContent` that is `true`
    /// when the effect exists (default `/found`).
    #[serde(default = "found_pointer")]
    pub(crate) found: String,
}

fn found_pointer() -> String {
    "/found".into()
}
