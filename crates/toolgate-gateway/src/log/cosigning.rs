//! Cosigning: the log's side of witnessing (c2sp.org/tlog-witness), its
//! `Witnesses`. Each new checkpoint goes to the configured witnesses
//! (`receipts.witnesses`) with a consistency proof from the last one each
//! cosigned, built from the published tiles (`published`); the
//! cosignatures that verify under the witnesses' keys are attached to the
//! checkpoint the log serves at `/log/checkpoint`. The witness those
//! checkpoints go to is another program: `witness_server`.
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
use toolgate_core::visible::visible;
use toolgate_ledger::StoredCheckpoint;
use toolgate_mcp::body;

use super::published::{self, Published};
use crate::log_config::WitnessConfig;

/// The most of a witness's answer read: its cosignature lines (an Ed25519
/// line is about 130 bytes, an ML-DSA-44 one about 3.3 KB) or, on 409, a
/// size. 16 KiB is room for several of each.
const MAX_ANSWER: usize = 16 << 10;

/// The most of a refusal's body quoted in the warning that logs it.
const ERROR_HEAD: usize = 1024;

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
            let key = Verifier::from_vkey(&w.vkey)
                .map_err(|e| anyhow!("receipts.witnesses: vkey {:?}: {e}", w.vkey))?;
            if !key.algorithm().is_cosignature() {
                bail!(
                    "receipts.witnesses: {:?} is not a witness's key (a cosigner vkey, signature type 0x04, as `toolgate witness serve` prints it)",
                    w.vkey
                );
            }
            let url = w.url.trim_end_matches('/').to_string();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                bail!(
                    "receipts.witnesses: url {:?} must be http(s)://… (the witness's submission prefix)",
                    w.url
                );
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
    pub async fn submit(&self, log: &Published<'_>, checkpoint: &StoredCheckpoint) {
        if self.peers.is_empty() {
            return;
        }
        let _turn = self.turn.lock().await;
        if self.cosigned().is_some_and(|(size, _)| size >= checkpoint.size) {
            return;
        }
        let Ok(http) = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
        else {
            return;
        };
        let mut lines = String::new();
        for peer in &self.peers {
            match submit_to(&http, log, peer, checkpoint).await {
                Ok(answer) => lines.push_str(&answer),
                Err(e) => {
                    tracing::warn!(target: "toolgate::log", witness = %peer.url, size = checkpoint.size, error = %format!("{e:#}"), "a witness did not cosign the checkpoint; the next checkpoint tries again")
                }
            }
        }
        if !lines.is_empty() {
            let note = format!("{}{lines}", checkpoint.note);
            if let Some(path) = &self.kept {
                // Owner-only, and never written through a planted link.
                if let Err(e) = toolgate_mcp::owner_only::write_owner_only(path, note.as_bytes()) {
                    tracing::warn!(target: "toolgate::log", error = %format!("{e:#}"), "cannot keep the cosigned checkpoint; it is served until the gateway stops");
                }
            }
            *self.cosigned.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((checkpoint.size, note));
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
async fn submit_to(
    http: &reqwest::Client,
    log: &Published<'_>,
    peer: &Peer,
    checkpoint: &StoredCheckpoint,
) -> anyhow::Result<String> {
    let mut old = peer.last.load(Ordering::Relaxed);
    // At most twice: a witness that cosigned another size than the log
    // thought says which (409), and the request is made again from it.
    for _ in 0..2 {
        let proof = if old == 0 || old >= checkpoint.size {
            Vec::new()
        } else {
            published::consistency_proof(log, old, checkpoint.size).await?
        };
        let mut body = format!("old {old}\n");
        for hash in &proof {
            body.push_str(&STANDARD.encode(hash));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(&checkpoint.note);
        let url = format!("{}/add-checkpoint", peer.url);
        let response = http
            .post(&url)
            .body(body)
            .send()
            .await
            .with_context(|| format!("submitting to {url}"))?;
        let status = response.status();
        let conflict_size = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"text/x.tlog.size"));
        if status.is_redirection() {
            bail!(
                "{url} answered {status}, a redirect to {}, which is not followed: set the witness's url to where it points",
                visible(&body::location(&response))
            );
        }
        let conflict = status == reqwest::StatusCode::CONFLICT && conflict_size;
        if !(status.is_success() || conflict) {
            let said = body::read_head(response, ERROR_HEAD).await;
            let shown: String = visible(said.trim()).chars().take(200).collect();
            bail!("{url} answered {status}: {shown}");
        }
        let text = body::read_limited(response, MAX_ANSWER, "the witness's answer").await?;
        let text = String::from_utf8(text).map_err(|_| anyhow!("its answer is not UTF-8"))?;
        if status.is_success() {
            let kept = verified_lines(&checkpoint.note, &text, &peer.key);
            if kept.is_empty() {
                bail!(
                    "it answered no cosignature that verifies under its configured key ({}+{:08x})",
                    peer.key.name(),
                    peer.key.key_id()
                );
            }
            peer.last.store(checkpoint.size, Ordering::Relaxed);
            return Ok(kept);
        }
        // 409: the size it cosigned last.
        let said = text
            .trim_end()
            .parse::<u64>()
            .map_err(|_| anyhow!("409 with a size that is not a number"))?;
        if said > checkpoint.size {
            bail!(
                "it cosigned size {said} of this log, beyond this checkpoint's {}",
                checkpoint.size
            );
        }
        old = said;
    }
    bail!("the witness kept naming another old size")
}

/// The lines of a witness's `answer` that are cosignatures of `checkpoint` under
/// its configured `key` — that key's name, key id and a signature that
/// verifies — each once, in the order sent. Everything else is dropped: a
/// line of another key of the witness (nobody configured it, so nobody
/// checked it), of another name, or that does not parse or verify. What the
/// log serves at `/log/checkpoint` then holds only lines it verified.
fn verified_lines(checkpoint: &str, answer: &str, key: &Verifier) -> String {
    let mut kept = String::new();
    for line in answer.split('\n').filter(|l| !l.is_empty()) {
        let line = format!("{line}\n");
        // Each line on its own: `open_note` verifies the lines of the keys it
        // is given and ignores the rest, so one line at a time says whether
        // this line is one of the configured key's and verifies.
        let alone = format!("{checkpoint}{line}");
        let verified = note::open_note(&alone, std::slice::from_ref(key)).is_ok_and(|opened| {
            opened.verified.iter().any(|s| s.name == key.name() && s.key_id == key.key_id())
        });
        if verified && !kept.contains(&line) {
            kept.push_str(&line);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::note::{Checkpoint, Cosigner, Signer};

    /// Of a witness's answer only its configured key's lines that verify are
    /// kept: not a line of its other key, of another name, one whose
    /// signature fails, a malformed one, or a repeat.
    #[test]
    fn only_lines_that_verify_under_the_configured_key_are_kept() {
        let log = Signer::ed25519("log.test/one", ed25519_dalek::SigningKey::from_bytes(&[1; 32]))
            .unwrap();
        let checkpoint = Checkpoint::new("log.test/one", 3, [7; 32]).unwrap();
        let note = checkpoint.sign(&[&log]).unwrap();
        let witness =
            Cosigner::new("w.test/w1", ed25519_dalek::SigningKey::from_bytes(&[2; 32])).unwrap();
        let other_key =
            Cosigner::new("w.test/w1", ed25519_dalek::SigningKey::from_bytes(&[3; 32])).unwrap();
        let other_name =
            Cosigner::new("w.test/w2", ed25519_dalek::SigningKey::from_bytes(&[4; 32])).unwrap();
        let valid = witness.cosign(&checkpoint.body(), 10);
        // The configured key's id, another time: its signature fails.
        let forged =
            witness.cosign(&checkpoint.body(), 10).replace(&valid[valid.len() - 6..], "AAAAA\n");
        let answer = format!(
            "{}{valid}{}{forged}\u{2014} w.test/w1 not base64\n\nplain text\n{valid}",
            other_key.cosign(&checkpoint.body(), 10),
            other_name.cosign(&checkpoint.body(), 10)
        );
        assert_eq!(verified_lines(&note, &answer, &witness.verifier()), valid);
        assert_eq!(verified_lines(&note, &forged, &witness.verifier()), "");
        assert_eq!(verified_lines(&note, "", &witness.verifier()), "");
    }
}
