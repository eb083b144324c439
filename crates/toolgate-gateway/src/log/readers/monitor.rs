//! The monitor, `toolgate log watch`: it follows a published log's
//! checkpoints and checks, between each and the last it accepted, that the
//! log only grew: the same size must have the same root, a larger size a
//! consistency proof (built from the newer tree's tiles), and no size may
//! shrink. A fork, a shrink or a checkpoint that does not verify is an
//! alert: printed, posted to a webhook, and the exit status is 1.
//!
//! With `--state FILE` the last accepted checkpoint survives the monitor's
//! restarts (and a cron-style `--once` run), so a log cannot show a fresh
//! monitor another history.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use serde_json::json;
use toolgate_core::merkle;
use toolgate_core::note::{self, Checkpoint, Verifier};
use toolgate_core::proposal::hex;
use toolgate_core::tiles;
use toolgate_core::visible::visible;

use super::source::Source;

/// What the monitor watches and where it tells.
pub struct Monitor {
    /// Where the log is read.
    pub source: Source,
    /// Its location, as alerts name it.
    pub location: String,
    /// The log's keys.
    pub verifiers: Vec<Verifier>,
    /// Where alerts are posted (JSON).
    pub webhook: Option<String>,
    /// Where the last accepted checkpoint is kept.
    pub state: Option<PathBuf>,
}

/// Why the log is not to be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// `fork`, `shrink` or `bad_checkpoint`.
    pub kind: &'static str,
    /// What was seen.
    pub detail: String,
}

impl Monitor {
    /// The checkpoint accepted last (from `state`), if any.
    fn last(&self) -> anyhow::Result<Option<Checkpoint>> {
        let Some(path) = &self.state else { return Ok(None) };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                Ok(Some(Checkpoint::parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn keep(&self, checkpoint: &Checkpoint) -> anyhow::Result<()> {
        let Some(path) = &self.state else { return Ok(()) };
        toolgate_mcp::owner_only::write_owner_only(path, checkpoint.body().as_bytes())
    }

    /// One look at the log: the newest checkpoint against `last`. Ok(Err)
    /// is an alert; Err is a log that could not be read (try again later).
    pub async fn step(
        &self,
        last: Option<&Checkpoint>,
    ) -> anyhow::Result<Result<Checkpoint, Alert>> {
        let text = String::from_utf8(self.source.get("checkpoint").await?)
            .map_err(|_| anyhow!("the checkpoint is not UTF-8"))?;
        let new = match note::open_checkpoint(&text, &self.verifiers) {
            Ok((c, _)) => c,
            Err(e) => {
                return Ok(Err(Alert {
                    kind: "bad_checkpoint",
                    detail: format!(
                        "the newest checkpoint does not verify under the keys given: {e}"
                    ),
                }));
            }
        };
        let Some(old) = last else { return Ok(Ok(new)) };
        if old.origin() != new.origin() {
            return Ok(Err(Alert {
                kind: "bad_checkpoint",
                detail: format!(
                    "the log's origin was {:?} and is now {:?}",
                    old.origin(),
                    new.origin()
                ),
            }));
        }
        if new.size() < old.size() {
            return Ok(Err(Alert {
                kind: "shrink",
                detail: format!("the log had {} receipts and now has {}", old.size(), new.size()),
            }));
        }
        if new.size() == old.size() {
            if new.root() != old.root() {
                return Ok(Err(Alert {
                    kind: "fork",
                    detail: format!(
                        "two checkpoints of size {} with different roots: {} and {}",
                        new.size(),
                        hex(old.root()),
                        hex(new.root())
                    ),
                }));
            }
            return Ok(Ok(new));
        }
        let (from, to) = (old.size(), new.size());
        let proof = self.source.proof(|read| tiles::consistency_proof(from, to, read)).await?;
        match merkle::verify_consistency(old.size(), new.size(), old.root(), new.root(), &proof) {
            Ok(()) => Ok(Ok(new)),
            Err(e) => Ok(Err(Alert {
                kind: "fork",
                detail: format!(
                    "the tree of {} is not an extension of the tree of {} it showed before ({e})",
                    new.size(),
                    old.size()
                ),
            })),
        }
    }

    async fn alert(&self, alert: &Alert, last: Option<&Checkpoint>) {
        // The detail quotes what the log said (its origin): escaped.
        eprintln!("ALERT {}: {} ({})", alert.kind, visible(&alert.detail), visible(&self.location));
        let Some(url) = &self.webhook else { return };
        let body = json!({"log": self.location, "alert": alert.kind, "detail": alert.detail, "last": last.map(|c| json!({"size": c.size(), "root": hex(c.root())}))});
        // No redirect: the alert goes where `--webhook` says, or fails.
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build();
        let sent = match client {
            Ok(c) => match c.post(url).json(&body).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(format!("it answered HTTP {}", r.status())),
                Err(e) => Err(toolgate_mcp::body::without_url(&e)),
            },
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            eprintln!("the alert could not be posted to the webhook: {}", visible(&e));
        }
    }

    /// Watches until an alert (Ok(false)), or after one look with `once`
    /// (Ok(true) when the log only grew). A log that cannot be read is
    /// retried at the next look (and is an error with `once`).
    pub async fn run(&self, every: Duration, once: bool) -> anyhow::Result<bool> {
        let mut last = self.last()?;
        loop {
            match self.step(last.as_ref()).await {
                Ok(Ok(new)) => {
                    if last.as_ref().is_none_or(|l| l.size() != new.size()) {
                        let from = last.as_ref().map_or("first seen".to_string(), |l| {
                            format!("consistent with {}", l.size())
                        });
                        println!(
                            "ok   {} size {} root {} ({from})",
                            visible(new.origin()),
                            new.size(),
                            hex(new.root())
                        );
                    }
                    self.keep(&new)?;
                    last = Some(new);
                }
                Ok(Err(alert)) => {
                    self.alert(&alert, last.as_ref()).await;
                    return Ok(false);
                }
                Err(e) if once => return Err(e),
                Err(e) => {
                    eprintln!("cannot read the log now ({}); retrying", visible(&format!("{e:#}")))
                }
            }
            if once {
                return Ok(true);
            }
            tokio::time::sleep(every).await;
        }
    }
}
