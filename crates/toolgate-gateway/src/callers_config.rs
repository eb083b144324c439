//! `[callers.NAME]`: who may call (`callers`), each with a token or opened
//! anonymously, and the roles that let a caller do more than call.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// The role that may decide approvals (CLI `--as`, the admin API, the console).
pub const APPROVER_ROLE: &str = "approver";

/// The role that may accept changed contracts in the console (beside
/// `toolgate tools --accept`, which needs the config file itself).
pub const ADMIN_ROLE: &str = "admin";

/// A caller: who it is, in which tenant, with which roles, and how it
/// proves it. The token is read from `token_env` or `token_file` at start
/// and never logged; `anonymous = true` opens this identity to requests
/// without a token instead.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerConfig {
    /// Default: the caller's name.
    pub subject: Option<String>,
    /// The tenant every call of this caller belongs to.
    pub tenant: String,
    /// Roles for policy; `approver` may decide approvals.
    #[serde(default)]
    pub roles: Vec<String>,
    pub(crate) token_env: Option<String>,
    pub(crate) token_file: Option<PathBuf>,
    #[serde(default)]
    pub(crate) anonymous: bool,
}

impl CallerConfig {
    /// The person behind the caller `name`: its `subject`, or its name.
    pub fn subject_of(&self, name: &str) -> String {
        self.subject.clone().unwrap_or_else(|| name.to_string())
    }
}

/// What is wrong with `[callers]` on its own.
pub(crate) fn problems(callers: &BTreeMap<String, CallerConfig>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, caller) in callers {
        let sources = [caller.token_env.is_some(), caller.token_file.is_some(), caller.anonymous]
            .into_iter()
            .filter(|x| *x)
            .count();
        if sources != 1 {
            out.push(format!("callers.{name}: give exactly one of `token_env`, `token_file` or `anonymous = true`"));
        }
        if caller.tenant.trim().is_empty() {
            out.push(format!("callers.{name}: `tenant` must not be empty"));
        }
        if caller.anonymous && caller.roles.iter().any(|r| r == APPROVER_ROLE) {
            out.push(format!(
                "callers.{name}: an anonymous caller cannot have the `{APPROVER_ROLE}` role"
            ));
        }
    }
    if callers.values().filter(|c| c.anonymous).count() > 1 {
        out.push("at most one caller may be `anonymous = true`".into());
    }
    out
}
