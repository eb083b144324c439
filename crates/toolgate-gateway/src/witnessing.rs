//! The log's side of witnessing (c2sp.org/tlog-witness): each new
//! checkpoint goes to the configured witnesses (`receipts.witnesses`) with a
//! consistency proof from the last one each cosigned, built from the
//! published tiles; the cosignatures that verify under the witnesses' keys
//! are attached to the checkpoint the log serves at `/log/checkpoint`.
//!
//! A witness that is down or refuses is logged and tried again with the next
//! checkpoint; the log never waits for witnesses to answer calls. The newest
//! cosigned checkpoint is kept in `STATE_DIR/checkpoint.cosigned`, so a
//! restart serves it and `toolgate export` puts it in bundles.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use toolgate_core::note::{self, Verifier};
use toolgate_ledger::StoredCheckpoint;

use crate::config::WitnessConfig;
use crate::log::ReceiptLog;

/// One witness the log submits to.
struct Peer {
    url: String,
    key: Verifier,
    /// The size it cosigned last, as far as the log knows (0: unknown).
    last: AtomicU64,
}

/// The configured witnesses, and the newest checkpoint they cosigned.
#[derive(Default)]
pub struct Witnesses {
    peers: Vec<Peer>,
    /// (size, the checkpoint's note with the witnesses' cosignature lines).
    cosigned: Mutex<Option<(u64, String)>>,
    /// One submission round at a time (a witness checks old sizes in order).
    turn: tokio::sync::Mutex<()>,
    /// Where the newest cosigned checkpoint is kept.
    kept: Option<PathBuf>,
}

impl Witnesses {
    /// The witnesses of `receipts.witnesses`; their keys must be cosigner
    /// vkeys (type 0x04, what `toolgate witness serve` prints).
    /// `state` is the state dir, where the newest cosigned checkpoint is kept.
    pub fn new(config: &[WitnessConfig], state: Option<&Path>) -> anyhow::Result<Self> {
        let mut peers = Vec::new();
        for w in config {
            let key = Verifier::from_vkey(&w.vkey).map_err(|e| anyhow!("receipts.witnesses: vkey {:?}: {e}", w.vkey))?;
            if !key.algorithm().is_cosignature() {
                bail!("receipts.witnesses: {:?} is not a witness's key (a cosigner vkey, signature type 0x04, as `toolgate witness serve` prints it)", w.vkey);
            }
            let url = w.url.trim_end_matches('/').to_string();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                bail!("receipts.witnesses: url {:?} must be http(s)://… (the witness's submission prefix)", w.url);
            }
            peers.push(Peer { url, key, last: AtomicU64::new(0) });
        }
        let kept = state.map(|s| s.join("checkpoint.cosigned"));
        let cosigned = kept.as_deref().and_then(read_kept);
        Ok(Self { peers, cosigned: Mutex::new(cosigned), kept, ..Default::default() })
    }

    /// Whether any witness is configured.
    pub fn any(&self) -> bool {
        !self.peers.is_empty()
    }

    /// The newest cosigned checkpoint: (size, note with cosignatures).
    pub fn cosigned(&self) -> Option<(u64, String)> {
        self.cosigned.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Submits `checkpoint` to every witness and keeps the cosignatures that verify.
    pub async fn submit(&self, log: &ReceiptLog, checkpoint: &StoredCheckpoint) {
        if self.peers.is_empty() {
            return;
        }
        let _turn = self.turn.lock().await;
        if self.cosigned().is_some_and(|(size, _)| size >= checkpoint.size) {
            return;
        }
        let Ok(http) = reqwest::Client::builder().timeout(Duration::from_secs(5)).redirect(reqwest::redirect::Policy::none()).build() else { return };
        let mut lines = String::new();
        for peer in &self.peers {
            match submit_to(&http, log, peer, checkpoint).await {
                Ok(answer) => lines.push_str(&answer),
                Err(e) => tracing::warn!(target: "toolgate::log", witness = %peer.url, size = checkpoint.size, error = %format!("{e:#}"), "a witness did not cosign the checkpoint; the next checkpoint tries again"),
            }
        }
        if !lines.is_empty() {
            let note = format!("{}{lines}", checkpoint.note);
            if let Some(path) = &self.kept {
                let tmp = path.with_extension("partial");
                if let Err(e) = std::fs::write(&tmp, &note).and_then(|()| std::fs::rename(&tmp, path)) {
                    tracing::warn!(target: "toolgate::log", error = %e, "cannot keep the cosigned checkpoint; it is served until the gateway stops");
                }
            }
            *self.cosigned.lock().unwrap_or_else(|p| p.into_inner()) = Some((checkpoint.size, note));
        }
    }
}

/// The kept cosigned checkpoint, if it reads as one.
fn read_kept(path: &Path) -> Option<(u64, String)> {
    let note = std::fs::read_to_string(path).ok()?;
    let body = &note[..note.rfind("\n\n")? + 1];
    Some((note::Checkpoint::parse(body).ok()?.size(), note))
}

/// One witness's cosignature line(s) on `checkpoint`, verified.
async fn submit_to(http: &reqwest::Client, log: &ReceiptLog, peer: &Peer, checkpoint: &StoredCheckpoint) -> anyhow::Result<String> {
    let mut old = peer.last.load(Ordering::Relaxed);
    // At most twice: a witness that cosigned another size than the log
    // thought says which (409), and the request is made again from it.
    for _ in 0..2 {
        let proof = if old == 0 || old >= checkpoint.size { Vec::new() } else { crate::published::consistency_proof(log, old, checkpoint.size).await? };
        let mut body = format!("old {old}\n");
        for hash in &proof {
            body.push_str(&STANDARD.encode(hash));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(&checkpoint.note);
        let url = format!("{}/add-checkpoint", peer.url);
        let response = http.post(&url).body(body).send().await.with_context(|| format!("submitting to {url}"))?;
        let status = response.status();
        let conflict_size = response.headers().get(reqwest::header::CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"text/x.tlog.size"));
        let text = response.text().await.unwrap_or_default();
        if status.is_success() {
            let cosigned = format!("{}{text}", checkpoint.note);
            let verified = note::cosigned_by(&cosigned, std::slice::from_ref(&peer.key)).map_err(|e| anyhow!("its cosignature does not verify: {e}"))?;
            if verified.is_empty() {
                bail!("it answered no cosignature of its configured key");
            }
            peer.last.store(checkpoint.size, Ordering::Relaxed);
            // Only its own lines (a witness's answer is not ours to pass on whole).
            return Ok(text.lines().filter(|l| l.starts_with(&format!("\u{2014} {} ", peer.key.name()))).map(|l| format!("{l}\n")).collect());
        }
        if status == reqwest::StatusCode::CONFLICT && conflict_size {
            let said = text.trim_end().parse::<u64>().map_err(|_| anyhow!("409 with a size that is not a number"))?;
            if said > checkpoint.size {
                bail!("it cosigned size {said} of this log, beyond this checkpoint's {}", checkpoint.size);
            }
            old = said;
            continue;
        }
        let shown: String = text.chars().take(200).map(|c| if c.is_control() { ' ' } else { c }).collect();
        bail!("{url} answered {status}: {shown}");
    }
    bail!("the witness kept naming another old size")
}
