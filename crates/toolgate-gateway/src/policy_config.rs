//! `[policy]`: the Cedar files argument-level rules are read from (opened
//! by `process`, applied in the decide stage).

use std::path::PathBuf;

use serde::Deserialize;

/// `[policy]`: the Cedar files argument-level rules are read from.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Cedar policies, relative to the config file.
    pub policies: PathBuf,
    /// Cedar schema (human-readable `.cedarschema` syntax).
    pub schema: PathBuf,
}
