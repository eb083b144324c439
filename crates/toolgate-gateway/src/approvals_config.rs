//! `[approvals]`: how a call waiting for a named human is held
//! (`stages::approve`, `holds`), and who is told (`[approvals.notify]`,
//! `notify_config`).

use serde::Deserialize;

use crate::notify_config::NotifyConfig;

/// `[approvals]`: a call that needs a named human is held open while its
/// approval is pending (so a stock client gets the result, not a loop), and
/// approvers are told (`[approvals.notify]`).
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// How long a call waits for its approval to be decided before it is
    /// answered that it still waits (0: answer at once).
    pub hold_ms: u64,
    /// How often a held call's approval is read again when the decision may
    /// come from elsewhere (the CLI, another replica); a decision through
    /// this gateway's admin API wakes the call at once.
    pub poll_ms: u64,
    /// How many calls may be held at once; past it a call is answered at
    /// once that its approval waits (as with `hold_ms = 0`).
    pub max_held: usize,
    /// How many approvals one caller may have pending; past it, a call that
    /// would open another is refused until approvers decide some.
    pub max_pending_per_caller: usize,
    /// Who is told that an approval waits.
    pub notify: NotifyConfig,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            hold_ms: 30_000,
            poll_ms: 500,
            max_held: 1024,
            max_pending_per_caller: 100,
            notify: NotifyConfig::default(),
        }
    }
}

impl ApprovalsConfig {
    /// What is wrong with `[approvals]` on its own, where an approval
    /// lives `approval_ttl_ms` (`[gateway]`).
    pub(crate) fn problems(&self, approval_ttl_ms: u64) -> Vec<String> {
        let mut out = Vec::new();
        if self.poll_ms == 0 {
            out.push("approvals.poll_ms must be at least 1".into());
        }
        if self.hold_ms > approval_ttl_ms {
            out.push(format!(
                "approvals.hold_ms ({}) is longer than gateway.approval_ttl_ms ({}): a call would be held past its approval's life",
                self.hold_ms, approval_ttl_ms
            ));
        }
        out.extend(self.notify.problems());
        out
    }
}
