//! `[approvals.notify]`: the webhooks `notify` tells of every approval
//! opened.

use serde::Deserialize;

/// `[approvals.notify]`: webhooks told of every approval opened.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// `[[approvals.notify.webhooks]]`, each told of every approval.
    pub webhooks: Vec<WebhookConfig>,
    /// A link an approver can open, with `{id}` for the approval's id (e.g.
    /// the console's page for it); without it, the message names the CLI
    /// command and the admin API.
    pub link: Option<String>,
}

/// One webhook: where, in which body, signed with which secret.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Its name in the delivery records and logs (the URL may hold a secret
    /// and is never logged).
    pub name: String,
    /// Where to POST (`http://` or `https://`, checked as `[tls]` says).
    pub url: String,
    /// `toolgate` (the approval as JSON, HMAC-signed) or `slack` (an
    /// incoming-webhook `{"text": …}` body).
    #[serde(default)]
    pub format: WebhookFormat,
    /// The environment variable holding the HMAC-SHA256 key; the body is
    /// signed in `Toolgate-Signature` so a receiver can check it came from
    /// this gateway. Required for the `toolgate` format.
    pub secret_env: Option<String>,
    /// Attempts before a delivery is given up (backoff doubles from 500 ms,
    /// capped at 30 s).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
}

fn default_attempts() -> u32 {
    8
}

/// The body a webhook gets.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// `{"event": "approval.pending", "approval": {…}, "decide": {…}}`.
    #[default]
    Toolgate,
    /// A Slack-compatible incoming-webhook body: `{"text": "…"}`.
    Slack,
}

impl NotifyConfig {
    /// What is wrong with `[approvals.notify]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut hooks = std::collections::BTreeSet::new();
        for hook in &self.webhooks {
            let name = &hook.name;
            if !hooks.insert(name) {
                out.push(format!("approvals.notify.webhooks: the name `{name}` is used twice"));
            }
            if !(hook.url.starts_with("http://") || hook.url.starts_with("https://")) {
                out.push(format!(
                    "approvals.notify.webhooks `{name}`: url must start with http:// or https://"
                ));
            }
            if hook.format == WebhookFormat::Toolgate && hook.secret_env.is_none() {
                out.push(format!(
                    "approvals.notify.webhooks `{name}`: the toolgate format is signed; set \
                        `secret_env` to the variable holding the key"
                ));
            }
            if hook.attempts == 0 {
                out.push(format!(
                    "approvals.notify.webhooks `{name}`: attempts must be at least 1"
                ));
            }
        }
        out
    }
}
