//! `[runs]`: how long an agent run lives (`runs`).

use serde::Deserialize;

/// `[runs]`: an agent run is named by `_meta["io.toolgate/run"]`, else the
/// stdio session, else the trace id, else it is the caller's one standing run.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RunsConfig {
    /// A run ends this long after its first call (default one hour); a call
    /// under its id after that begins it anew.
    pub ttl_ms: u64,
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self { ttl_ms: 3_600_000 }
    }
}

impl RunsConfig {
    /// What is wrong with `[runs]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.ttl_ms == 0 {
            out.push("runs.ttl_ms must be at least 1".into());
        }
        out
    }
}
