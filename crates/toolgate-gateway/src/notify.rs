//! Telling approvers that something waits. Every approval opened is
//! delivered to each `[[approvals.notify.webhooks]]`: a JSON body naming
//! the approval, the caller, the tool, the exact arguments, the proposal
//! hash, the rule and how to decide it — HMAC-signed so a receiver can check
//! it came from this gateway — or a Slack-compatible `{"text": …}`.
//!
//! Delivery never blocks the call: the call hands the approval over and
//! goes on; each delivery runs in its own task, retried with doubling
//! backoff until it is accepted (2xx) or its attempts run out. Every attempt
//! is recorded, one JSON line each, in `STATE_DIR/notify.jsonl`
//! (owner-only): when, which delivery, which approval, which webhook (by
//! name: a webhook URL may itself be a secret), and how it went.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolgate_core::approval::Approval;
use toolgate_core::{Clock, Entropy};

use crate::config::{NotifyConfig, WebhookFormat};

/// The header carrying `t=<ms>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub const SIGNATURE_HEADER: &str = "Toolgate-Signature";
/// The header naming the delivery (the same on every retry, to dedupe).
pub const DELIVERY_HEADER: &str = "Toolgate-Delivery";
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Approvals waiting to be handed to the delivery tasks; past this, a
/// notice is dropped (and recorded so) rather than grow without bound.
const QUEUE: usize = 1024;
/// Deliveries in flight at once, all webhooks together.
const IN_FLIGHT: usize = 64;

/// An approval opened, and the exposed name of the tool it is for.
type Opened = (Approval, String);

/// Hands opened approvals to the delivery tasks; does nothing without webhooks.
pub struct Notifier {
    queue: Option<(mpsc::Sender<Opened>, Arc<Courier>)>,
}

struct Hook {
    name: String,
    url: String,
    format: WebhookFormat,
    key: Option<aws_lc_rs::hmac::Key>,
    attempts: u32,
}

/// What the delivery tasks share.
struct Courier {
    hooks: Vec<Hook>,
    link: Option<String>,
    http: reqwest::Client,
    record: Mutex<std::fs::File>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    stop: CancellationToken,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl Notifier {
    /// A notifier that tells nobody.
    pub fn none() -> Self {
        Self { queue: None }
    }

    /// Reads each webhook's key from its environment variable (a missing
    /// one refuses the start) and starts delivering.
    pub(crate) fn start(config: &NotifyConfig, tls: &crate::config::TlsConfig, state_dir: &Path, clock: Arc<dyn Clock>, entropy: Arc<dyn Entropy>, stop: CancellationToken) -> anyhow::Result<Self> {
        if config.webhooks.is_empty() {
            return Ok(Self::none());
        }
        let mut hooks = Vec::new();
        for hook in &config.webhooks {
            let key = match &hook.secret_env {
                None => None,
                Some(var) => {
                    let secret = std::env::var(var).ok().filter(|s| !s.is_empty()).with_context(|| {
                        format!("approvals.notify.webhooks `{}`: the environment variable {var} (its signing key) is not set", hook.name)
                    })?;
                    Some(aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret.as_bytes()))
                }
            };
            hooks.push(Hook { name: hook.name.clone(), url: hook.url.clone(), format: hook.format, key, attempts: hook.attempts });
        }
        let path = state_dir.join("notify.jsonl");
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let record = options.open(&path).with_context(|| format!("opening {}", path.display()))?;
        // An existing file keeps its mode on open: make it owner-only too.
        #[cfg(unix)]
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).with_context(|| format!("restricting {}", path.display()))?;
        let http = reqwest::Client::builder().timeout(ATTEMPT_TIMEOUT).redirect(reqwest::redirect::Policy::none()).tls_certs_merge(tls.roots()).build()?;
        let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let courier = Arc::new(Courier { hooks, link: config.link.clone(), http, record: Mutex::new(record), clock, entropy, stop, in_flight });
        let (queue, mut opened) = mpsc::channel::<Opened>(QUEUE);
        let deliverer = courier.clone();
        tokio::spawn(async move {
            while let Some((approval, tool)) = opened.recv().await {
                for i in 0..deliverer.hooks.len() {
                    tokio::spawn(deliverer.clone().deliver(i, approval.clone(), tool.clone()));
                }
            }
        });
        Ok(Self { queue: Some((queue, courier)) })
    }

    /// Tells every webhook that `approval` (of a call to `exposed_tool`)
    /// waits. Returns at once; with the queue full, the notice is dropped
    /// and recorded as such (the approval itself is in the ledger).
    pub(crate) fn opened(&self, approval: &Approval, exposed_tool: &str) {
        if let Some((queue, courier)) = &self.queue
            && queue.try_send((approval.clone(), exposed_tool.to_string())).is_err()
        {
            for hook in &courier.hooks {
                courier.note("", &approval.id, &hook.name, 0, "dropped", None, Some("the notice queue is full"));
            }
        }
    }
}

impl Courier {
    /// Delivers one approval to webhook `i`, retrying until it is accepted
    /// or its attempts run out; records every attempt.
    async fn deliver(self: Arc<Self>, i: usize, approval: Approval, tool: String) {
        let hook = &self.hooks[i];
        let delivery = self.entropy.id("dlv_");
        let body = match hook.format {
            WebhookFormat::Toolgate => toolgate_body(&delivery, &approval, &tool, self.link.as_deref()),
            WebhookFormat::Slack => slack_body(&approval, &tool, self.link.as_deref()),
        }
        .to_string();
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=hook.attempts {
            let Ok(_slot) = self.in_flight.clone().acquire_owned().await else { return };
            let mut request = self.http.post(&hook.url).header("Content-Type", "application/json").header(DELIVERY_HEADER, &delivery).header("Toolgate-Event", "approval.pending");
            if let Some(key) = &hook.key {
                request = request.header(SIGNATURE_HEADER, signature(key, self.clock.now_ms(), &body));
            }
            let (outcome, status, error) = match request.body(body.clone()).send().await {
                Ok(r) if r.status().is_success() => ("delivered", Some(r.status().as_u16()), None),
                Ok(r) => ("failed", Some(r.status().as_u16()), None),
                // Without the URL: it may hold the webhook's own secret.
                Err(e) => ("failed", None, Some(e.without_url().to_string())),
            };
            let last = outcome == "delivered" || attempt == hook.attempts;
            let outcome = if outcome == "failed" && last { "gave_up" } else { outcome };
            self.note(&delivery, &approval.id, &hook.name, attempt, outcome, status, error.as_deref());
            if last {
                return;
            }
            drop(_slot);
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn note(&self, delivery: &str, approval: &str, webhook: &str, attempt: u32, outcome: &str, status: Option<u16>, error: Option<&str>) {
        let line = json!({"at_ms": self.clock.now_ms(), "delivery": delivery, "approval": approval, "webhook": webhook, "attempt": attempt, "outcome": outcome, "status": status, "error": error});
        tracing::info!(target: "toolgate::notify", delivery, approval, webhook, attempt, outcome, status, error, "approval notice");
        let mut file = self.record.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = writeln!(file, "{line}") {
            tracing::error!(target: "toolgate::notify", error = %e, "cannot record a delivery in notify.jsonl");
        }
    }
}

/// `t=<ms>,v1=<hex HMAC-SHA256 over "<ms>.<body>">`: the time is signed
/// with the body, so a receiver can refuse a stale replay.
pub fn signature(key: &aws_lc_rs::hmac::Key, at_ms: i64, body: &str) -> String {
    let tag = aws_lc_rs::hmac::sign(key, format!("{at_ms}.{body}").as_bytes());
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={at_ms},v1={hex}")
}

/// How an approver decides `id`: the CLI, the admin API, and the link if configured.
fn decide(id: &str, link: Option<&str>) -> Value {
    json!({
        "cli": format!("toolgate approvals approve --config CONFIG {id} --as NAME --reason TEXT"),
        "api": format!("POST /admin/approvals/{id}/approve"),
        "link": link.map(|l| l.replace("{id}", id)),
    })
}

fn toolgate_body(delivery: &str, a: &Approval, tool: &str, link: Option<&str>) -> Value {
    json!({
        "event": "approval.pending",
        "delivery": delivery,
        "approval": {
            "id": a.id,
            "tenant": a.binding.tenant,
            "caller": a.binding.caller,
            "tool": tool,
            "server": a.binding.server,
            "arguments": a.arguments,
            "proposal_sha256": a.binding.proposal_sha256,
            "policy_version": a.binding.policy_version,
            "reason": a.reason,
            "rules": a.rules,
            "created_ms": a.created_ms,
            "expires_ms": a.expires_ms,
        },
        "decide": decide(&a.id, link),
    })
}

/// Text for Slack's markup: `&`, `<` and `>` escaped as Slack asks, so an
/// argument cannot mention a channel or forge a link; backticks cannot close
/// the code block around the arguments.
fn slack_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('`', "\u{2032}")
}

fn slack_body(a: &Approval, tool: &str, link: Option<&str>) -> Value {
    let arguments = slack_text(&serde_json::to_string_pretty(&a.arguments).unwrap_or_default());
    let how = match link {
        Some(l) => format!("<{}|Decide it here>, or `toolgate approvals approve {}`", l.replace("{id}", &a.id), a.id),
        None => format!("Decide it with `toolgate approvals approve --config CONFIG {} --as NAME --reason TEXT` (or `deny`)", a.id),
    };
    let text = format!(
        "*Approval needed* `{}`: *{}* asks to run `{tool}` ({}).\n```{arguments}```\nRules: {}; proposal `{}`.\n{how}",
        a.id,
        slack_text(&a.binding.caller),
        slack_text(&a.reason),
        slack_text(&a.rules.join(", ")),
        a.binding.proposal_sha256
    );
    json!({"text": text})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_time_and_body() {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, b"s3cret");
        let header = signature(&key, 1_700_000_000_000, "{\"a\":1}");
        let hex = header.strip_prefix("t=1700000000000,v1=").expect("t then v1");
        assert_eq!(hex.len(), 64);
        let tag: Vec<u8> = (0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        assert!(aws_lc_rs::hmac::verify(&key, b"1700000000000.{\"a\":1}", &tag).is_ok());
        assert!(aws_lc_rs::hmac::verify(&key, b"1700000000001.{\"a\":1}", &tag).is_err(), "the time is signed");
    }

    #[test]
    fn an_argument_cannot_mention_a_channel_forge_a_link_or_leave_the_code_block() {
        let hostile = "```\n<!channel> <https://evil.example|Decide it here> & more";
        let text = slack_text(hostile);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('`'), "{text}");
        assert!(text.contains("&lt;!channel&gt;") && text.contains("&amp; more"), "{text}");
    }
}
