//! Telling approvers that something waits. Every approval opened is
//! delivered to each `[[approvals.notify.webhooks]]`: a JSON body naming
//! the approval, the caller, the tool, the exact arguments, the proposal
//! hash, the rule and how to decide it — HMAC-signed so a receiver can check
//! it came from this gateway — or a Slack-compatible `{"text": …}`.
//!
//! The notices go through an outbox in the ledger: each is written in the
//! transaction that opens its approval (`notices_for`), so none is lost
//! with the replica that opened it. Every replica with webhooks runs a
//! courier that claims due notices for [`CLAIM_MS`] — whichever replica is
//! alive delivers, and one that dies holding a claim lets it lapse — and
//! POSTs each under its delivery id (`Toolgate-Delivery`, the same on every
//! attempt by any replica, for the receiver to deduplicate: delivery is at
//! least once). A failed attempt is due again after a doubling backoff
//! (from 500 ms, capped at 30 s); when the webhook's attempts run out the
//! notice is dead, shown in the console and by `toolgate doctor` until an
//! operator delivers it again. Every attempt is logged (the webhook by
//! name: a webhook URL may itself be a secret). The call never waits for
//! a delivery: the courier is woken as the approval commits.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolgate_core::{Clock, Entropy};
use toolgate_ledger::{Attempt, Ledger, NewApproval, NewNotice, Notice};

use crate::config::{NotifyConfig, WebhookFormat};

/// The header carrying `t=<ms>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub const SIGNATURE_HEADER: &str = "Toolgate-Signature";
/// The header naming the delivery (the same on every retry, to dedupe).
pub const DELIVERY_HEADER: &str = "Toolgate-Delivery";
const FIRST_BACKOFF_MS: i64 = 500;
const MAX_BACKOFF_MS: i64 = 30_000;
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a claimed notice is this replica's: longer than an attempt
/// can take, so two replicas never send it at once unless one stalled.
pub const CLAIM_MS: i64 = 30_000;
/// How often the courier looks for due notices when nobody wakes it: the
/// bound on how late a retry, or a notice a dead replica left, is sent.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// Notices claimed (and so in flight) at once by one replica.
const IN_FLIGHT: u32 = 32;
/// Attempts at a notice whose webhook this replica does not know (its
/// config differs, e.g. mid-deploy): another replica may know it.
const UNKNOWN_HOOK_ATTEMPTS: u32 = 8;

/// Writes notices with their approvals and wakes the courier; does nothing
/// without webhooks.
pub struct Notifier {
    courier: Option<Arc<Courier>>,
}

struct Hook {
    name: String,
    url: String,
    format: WebhookFormat,
    key: Option<aws_lc_rs::hmac::Key>,
    attempts: u32,
}

/// What delivers the outbox's notices from this replica.
struct Courier {
    hooks: Vec<Hook>,
    link: Option<String>,
    http: reqwest::Client,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    wake: Notify,
}

impl Notifier {
    /// A notifier that tells nobody.
    pub fn none() -> Self {
        Self { courier: None }
    }

    /// Reads each webhook's key from its environment variable (a missing
    /// one refuses the start) and starts the courier.
    pub(crate) fn start(
        config: &NotifyConfig,
        tls: &crate::config::TlsConfig,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
        stop: CancellationToken,
    ) -> anyhow::Result<Self> {
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
            hooks.push(Hook {
                name: hook.name.clone(),
                url: hook.url.clone(),
                format: hook.format,
                key,
                attempts: hook.attempts,
            });
        }
        let http = reqwest::Client::builder()
            .timeout(ATTEMPT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tls_certs_merge(tls.roots())
            .build()?;
        let courier = Arc::new(Courier {
            hooks,
            link: config.link.clone(),
            http,
            ledger,
            clock,
            entropy,
            wake: Notify::new(),
        });
        tokio::spawn(courier.clone().run(stop));
        Ok(Self { courier: Some(courier) })
    }

    /// The notices of approval `new` (of a call to `exposed_tool`), one per
    /// webhook, to be written with it.
    pub(crate) fn notices_for(&self, new: &NewApproval, exposed_tool: &str) -> Vec<NewNotice> {
        let Some(courier) = &self.courier else { return Vec::new() };
        courier
            .hooks
            .iter()
            .map(|hook| {
                let id = courier.entropy.id("dlv_");
                let body = match hook.format {
                    WebhookFormat::Toolgate => {
                        toolgate_body(&id, new, exposed_tool, courier.link.as_deref())
                    }
                    WebhookFormat::Slack => slack_body(new, exposed_tool, courier.link.as_deref()),
                };
                NewNotice { id, webhook: hook.name.clone(), body: body.to_string() }
            })
            .collect()
    }

    /// An approval with notices committed: deliver now, not at the next look.
    pub(crate) fn opened(&self) {
        if let Some(courier) = &self.courier {
            courier.wake.notify_one();
        }
    }
}

impl Courier {
    /// Claims what is due, as many as may be in flight, and delivers each
    /// in a task of its own (a slow receiver holds back no other), until `stop`.
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT as usize));
        let mut warned = false;
        loop {
            let now = self.clock.now_ms();
            let free = in_flight.available_permits() as u32;
            let claimed = if free == 0 {
                Ok(Vec::new())
            } else {
                self.ledger.claim_notices(now, now + CLAIM_MS, free).await
            };
            match claimed {
                Ok(claimed) => {
                    warned = false;
                    let full = free > 0 && claimed.len() as u32 == free;
                    for notice in claimed {
                        let Ok(slot) = in_flight.clone().try_acquire_owned() else { break };
                        let courier = self.clone();
                        tokio::spawn(async move {
                            courier.deliver(notice).await;
                            drop(slot);
                        });
                    }
                    if full {
                        continue;
                    }
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!(target: "toolgate::notify", error = %e, "cannot read the outbox; its notices wait in the ledger");
                    }
                    warned = true;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(LOOK_EVERY) => {}
            }
        }
    }

    /// One attempt at `notice`, and its outcome in the ledger.
    async fn deliver(&self, notice: Notice) {
        let hook = self.hooks.iter().find(|h| h.name == notice.webhook);
        let (status, error) = match hook {
            Some(hook) => self.post(hook, &notice).await,
            None => (
                None,
                Some(format!("webhook `{}` is not configured on this replica", notice.webhook)),
            ),
        };
        let delivered = status.is_some_and(|s| (200..300).contains(&s));
        let attempts = notice.attempts + 1;
        let now = self.clock.now_ms();
        let attempt = if delivered {
            Attempt::Delivered
        } else if attempts >= hook.map_or(UNKNOWN_HOOK_ATTEMPTS, |h| h.attempts) {
            Attempt::Dead
        } else {
            Attempt::Retry { next_ms: now + backoff_ms(attempts) }
        };
        let outcome = match attempt {
            Attempt::Delivered => "delivered",
            Attempt::Retry { .. } => "failed",
            Attempt::Dead => "dead",
        };
        tracing::info!(target: "toolgate::notify", delivery = %notice.id, approval = %notice.approval_id, webhook = %notice.webhook, attempt = attempts, outcome, status, error = error.as_deref(), "approval notice");
        if let Err(e) = self.ledger.notice_attempted(&notice.id, attempt, status, error, now).await
        {
            // Its claim lapses and it is sent again: at least once.
            tracing::warn!(target: "toolgate::notify", delivery = %notice.id, error = %e, "cannot record a notice's attempt; it will be sent again");
        }
    }

    /// POSTs `notice` to `hook`: the status, or why there was none.
    async fn post(&self, hook: &Hook, notice: &Notice) -> (Option<u16>, Option<String>) {
        let mut request = self
            .http
            .post(&hook.url)
            .header("Content-Type", "application/json")
            .header(DELIVERY_HEADER, &notice.id)
            .header("Toolgate-Event", "approval.pending");
        if let Some(key) = &hook.key {
            request =
                request.header(SIGNATURE_HEADER, signature(key, self.clock.now_ms(), &notice.body));
        }
        match request.body(notice.body.clone()).send().await {
            Ok(r) => (Some(r.status().as_u16()), None),
            // Without the URL: it may hold the webhook's own secret.
            Err(e) => (None, Some(e.without_url().to_string())),
        }
    }
}

/// How long after failed attempt `n` (from 1) the next is due: doubling
/// from 500 ms, capped at 30 s.
fn backoff_ms(n: u32) -> i64 {
    (FIRST_BACKOFF_MS << n.saturating_sub(1).min(16)).min(MAX_BACKOFF_MS)
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

fn toolgate_body(delivery: &str, a: &NewApproval, tool: &str, link: Option<&str>) -> Value {
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
            "created_ms": a.now_ms,
            "expires_ms": a.now_ms + a.ttl_ms,
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

fn slack_body(a: &NewApproval, tool: &str, link: Option<&str>) -> Value {
    let arguments = slack_text(&serde_json::to_string_pretty(&a.arguments).unwrap_or_default());
    let how = match link {
        Some(l) => format!(
            "<{}|Decide it here>, or `toolgate approvals approve {}`",
            l.replace("{id}", &a.id),
            a.id
        ),
        None => format!(
            "Decide it with `toolgate approvals approve --config CONFIG {} --as NAME --reason TEXT` (or `deny`)",
            a.id
        ),
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
        let tag: Vec<u8> =
            (0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        assert!(aws_lc_rs::hmac::verify(&key, b"1700000000000.{\"a\":1}", &tag).is_ok());
        assert!(
            aws_lc_rs::hmac::verify(&key, b"1700000000001.{\"a\":1}", &tag).is_err(),
            "the time is signed"
        );
    }

    #[test]
    fn backoff_doubles_from_half_a_second_to_thirty() {
        let waits: Vec<i64> = (1..=9).map(backoff_ms).collect();
        assert_eq!(waits, [500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
        assert_eq!(backoff_ms(u32::MAX), 30_000);
    }

    #[test]
    fn an_argument_cannot_mention_a_channel_forge_a_link_or_leave_the_code_block() {
        let hostile = "```\n<!channel> <https://evil.example|Decide it here> & more";
        let text = slack_text(hostile);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('`'), "{text}");
        assert!(text.contains("&lt;!channel&gt;") && text.contains("&amp; more"), "{text}");
    }
}
