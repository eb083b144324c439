//! `toolgate witness serve`: a witness any third party can run for one or
//! more logs (c2sp.org/tlog-witness). A log submits each new checkpoint with
//! a consistency proof from the last one this witness cosigned; the witness
//! checks the log's signature and that the log only grew, records the new
//! checkpoint, and answers with its cosignatures (c2sp.org/tlog-cosignature:
//! Ed25519, and ML-DSA-44, which the spec recommends for new deployments). It refuses anything else with the spec's status codes:
//!
//! - 404: a log (origin) it does not witness;
//! - 403: no signature of that log's keys verifies;
//! - 400: a malformed request, or an old size above the checkpoint's;
//! - 409: the old size is not the last it cosigned (the body says which,
//!   `text/x.tlog.size`), or the same size with another root (a fork);
//! - 422: the consistency proof does not verify.
//!
//! Its state (one checkpoint per log) is a SQLite file; checking the old
//! size and recording the new checkpoint happen in one transaction.
//!
//! A program of its own, apart from the log it witnesses: it knows the
//! log only by its keys and what it is sent (the log's side of this is
//! `cosigning`), and nothing of the running gateway.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use aws_lc_rs::signature::{ML_DSA_44_SIGNING, PqdsaKeyPair};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rusqlite::OptionalExtension as _;
use toolgate_core::merkle::{self, Hash};
use toolgate_core::note::{self, Checkpoint, Cosigner, Verifier};
use toolgate_core::visible::visible;
use toolgate_core::{Clock, SystemClock};

/// The largest request a witness reads (a checkpoint with its log's
/// signatures and 63 proof lines fits in a fraction of it).
const MAX_REQUEST: usize = 64 << 10;

/// The consistency proof lines a request may carry (the spec's bound).
const MAX_PROOF: usize = 63;

/// A running witness: its cosigning key, the logs it witnesses, its state.
pub struct Witness {
    cosigner: Cosigner,
    logs: Vec<Verifier>,
    db: Mutex<rusqlite::Connection>,
    clock: Arc<dyn Clock>,
}

/// A refusal: its status, its text, and a `text/x.tlog.size` body for 409s
/// that name the size cosigned last.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    /// The spec's status.
    pub status: StatusCode,
    /// What the submitter reads.
    pub body: String,
    /// The size the witness cosigned last, for a wrong old size.
    pub size: Option<u64>,
}

fn refused(status: StatusCode, body: impl Into<String>) -> Refused {
    Refused { status, body: body.into(), size: None }
}

impl Witness {
    /// The witness whose key and state are in `dir` (created on first use,
    /// the key owner-only), named `name`, for the logs whose keys are `logs`
    /// (their origins are the keys' names).
    pub fn open(
        dir: &Path,
        name: &str,
        logs: Vec<Verifier>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        // Owner-only (0700) whatever the umask; a link planted there is refused.
        toolgate_mcp::owner_only::create_private_dir(dir)?;
        let ed = seed(&dir.join("witness.key"))?;
        let pq = seed(&dir.join("witness-ml-dsa-44.key"))?;
        let pq = PqdsaKeyPair::from_seed(&ML_DSA_44_SIGNING, &pq)
            .map_err(|_| anyhow::anyhow!("the witness's ML-DSA-44 seed is not usable"))?;
        let cosigner = Cosigner::new(name, ed25519_dalek::SigningKey::from_bytes(&ed))
            .and_then(|c| c.with_ml_dsa_44(pq))
            .map_err(|e| anyhow::anyhow!("witness name {name:?}: {e}"))?;
        if logs.is_empty() || logs.iter().any(|l| l.algorithm().is_cosignature()) {
            anyhow::bail!(
                "give the keys of the logs to witness (--log VKEY, from the log's `toolgate keys show`), not witnesses' keys"
            );
        }
        // Created owner-only before SQLite opens it: its -wal and -shm take its mode.
        toolgate_mcp::owner_only::create_owner_only_new(&dir.join("witness.sqlite3"))?;
        let db = rusqlite::Connection::open(dir.join("witness.sqlite3"))
            .with_context(|| format!("opening {}", dir.join("witness.sqlite3").display()))?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE IF NOT EXISTS \
                checkpoints (origin TEXT PRIMARY KEY, size INTEGER NOT NULL, root BLOB NOT NULL, \
                note TEXT NOT NULL);",
        )?;
        Ok(Self { cosigner, logs, db: Mutex::new(db), clock })
    }

    /// Its verifier keys (c2sp vkeys): Ed25519 (type 0x04), then ML-DSA-44
    /// (type 0x06); it cosigns with both.
    pub fn vkeys(&self) -> Vec<String> {
        self.cosigner.verifiers().iter().map(Verifier::vkey).collect()
    }

    /// `add-checkpoint`: the cosignature line(s), or the refusal.
    pub fn add_checkpoint(&self, request: &str) -> Result<String, Refused> {
        let (old, proof, text) =
            parse_request(request).map_err(|why| refused(StatusCode::BAD_REQUEST, why))?;
        let body = text.rfind("\n\n").map(|i| &text[..i + 1]).ok_or_else(|| {
            refused(StatusCode::BAD_REQUEST, "the checkpoint is not a signed note")
        })?;
        let stated = Checkpoint::parse(body)
            .map_err(|e| refused(StatusCode::BAD_REQUEST, format!("the checkpoint: {e}")))?;
        let keys: Vec<Verifier> =
            self.logs.iter().filter(|k| k.name() == stated.origin()).cloned().collect();
        if keys.is_empty() {
            return Err(refused(
                StatusCode::NOT_FOUND,
                format!("this witness does not witness the log {:?}", stated.origin()),
            ));
        }
        let (checkpoint, _) = note::open_checkpoint(text, &keys).map_err(|e| {
            refused(StatusCode::FORBIDDEN, format!("the checkpoint's signatures: {e}"))
        })?;
        if old > checkpoint.size() {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                format!("old size {old} is above the checkpoint's {}", checkpoint.size()),
            ));
        }
        let mut db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        let tx = db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(store)?;
        let last: Option<(i64, Vec<u8>)> = tx
            .query_row(
                "SELECT size, root FROM checkpoints WHERE origin = ?1",
                [checkpoint.origin()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(store)?;
        let (size, root) = last.map_or((0, None), |(s, r)| (s as u64, Hash::try_from(r).ok()));
        if old != size {
            return Err(Refused {
                status: StatusCode::CONFLICT,
                body: format!("{size}\n"),
                size: Some(size),
            });
        }
        match root {
            Some(root) if old == checkpoint.size() && root != *checkpoint.root() => {
                return Err(refused(
                    StatusCode::CONFLICT,
                    format!(
                        "a checkpoint of size {old} with another root was cosigned here: the log forked"
                    ),
                ));
            }
            Some(root) if old < checkpoint.size() => {
                merkle::verify_consistency(
                    old,
                    checkpoint.size(),
                    &root,
                    checkpoint.root(),
                    &proof,
                )
                .map_err(|e| {
                    refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!(
                            "the consistency proof from {old} to {} does not verify: {e}",
                            checkpoint.size()
                        ),
                    )
                })?;
            }
            _ if !proof.is_empty() && old == 0 => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    "the consistency proof must be empty from size 0",
                ));
            }
            _ => {}
        }
        tx.execute(
            "INSERT INTO checkpoints (origin, size, root, note) VALUES (?1, ?2, ?3, ?4) ON \
                CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root, note = \
                excluded.note",
            rusqlite::params![
                checkpoint.origin(),
                checkpoint.size() as i64,
                &checkpoint.root()[..],
                text
            ],
        )
        .map_err(store)?;
        tx.commit().map_err(store)?;
        let now = (self.clock.now_ms().max(0) / 1000) as u64;
        Ok(self.cosigner.cosign(&checkpoint.body(), now))
    }
}

/// A 32-byte key seed kept at `path`, created (owner-only) on first use.
fn seed(path: &Path) -> anyhow::Result<[u8; 32]> {
    match std::fs::read(path) {
        Ok(bytes) => {
            bytes.try_into().map_err(|_| anyhow::anyhow!("{} is not a 32-byte key", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = [0u8; 32];
            aws_lc_rs::rand::fill(&mut seed)
                .map_err(|_| anyhow::anyhow!("no randomness for the witness's key"))?;
            toolgate_mcp::owner_only::write_owner_only(path, &seed)?;
            Ok(seed)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn store(e: rusqlite::Error) -> Refused {
    tracing::error!(target: "toolgate::witness", error = %e, "the witness's state");
    refused(StatusCode::SERVICE_UNAVAILABLE, "the witness's state cannot be written; retry later")
}

/// `old N`, proof lines, an empty line, the checkpoint.
fn parse_request(request: &str) -> Result<(u64, Vec<Hash>, &str), String> {
    let (first, mut rest) = request.split_once('\n').ok_or("the request has no old size line")?;
    let old = first
        .strip_prefix("old ")
        .filter(|n| *n == "0" || (!n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit())))
        .and_then(|n| n.parse().ok())
        .ok_or("the first line must be `old N`, N in decimal")?;
    let mut proof = Vec::new();
    loop {
        let (line, after) =
            rest.split_once('\n').ok_or("the request has no empty line before the checkpoint")?;
        rest = after;
        if line.is_empty() {
            break;
        }
        if proof.len() == MAX_PROOF {
            return Err(format!("more than {MAX_PROOF} consistency proof lines"));
        }
        let hash = STANDARD
            .decode(line)
            .ok()
            .and_then(|h| Hash::try_from(h).ok())
            .ok_or("a consistency proof line is not a base64 32-byte hash")?;
        proof.push(hash);
    }
    Ok((old, proof, rest))
}

/// The witness's HTTP interface: `POST /add-checkpoint`.
pub fn router(witness: Arc<Witness>) -> axum::Router {
    axum::Router::new()
        .route("/add-checkpoint", axum::routing::post(add_checkpoint))
        .with_state(witness)
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: axum::body::Bytes) -> Response {
    if body.len() > MAX_REQUEST {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a request is at most {MAX_REQUEST} bytes\n"),
        )
            .into_response();
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return (StatusCode::BAD_REQUEST, "the request is not UTF-8\n").into_response();
    };
    let witness = witness.clone();
    let text = text.to_string();
    let answer = tokio::task::spawn_blocking(move || witness.add_checkpoint(&text)).await;
    match answer {
        Ok(Ok(lines)) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], lines)
                .into_response()
        }
        Ok(Err(Refused { status, body, size: Some(_) })) => {
            (status, [(header::CONTENT_TYPE, "text/x.tlog.size")], body).into_response()
        }
        Ok(Err(Refused { status, body, size: None })) => {
            (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{body}\n"))
                .into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the witness failed\n").into_response(),
    }
}

/// `toolgate witness serve`: runs until `shutdown` (the binary's: Ctrl-C /
/// SIGTERM, `gateway::shutdown_signal`).
pub async fn serve(
    listen: &str,
    dir: &Path,
    name: &str,
    logs: &[String],
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let logs = logs
        .iter()
        .map(|k| Verifier::from_vkey(k).map_err(|e| anyhow::anyhow!("--log {k:?}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let witness = Arc::new(Witness::open(dir, name, logs, Arc::new(SystemClock))?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    println!("witness: {} on http://{}/add-checkpoint", visible(name), listener.local_addr()?);
    for vkey in witness.vkeys() {
        println!("vkey: {}", visible(&vkey));
    }
    axum::serve(listener, router(witness)).with_graceful_shutdown(shutdown).await?;
    Ok(())
}
