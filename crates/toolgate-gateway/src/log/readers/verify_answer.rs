//! `toolgate verify --answer`: proves, from a published log alone (the
//! gateway's `/log/`, a mirror of it, or an archive folder), that the
//! receipt an answer names is in the log under a checkpoint signed by the
//! keys the verifier trusts — and, given the whole answer, that the receipt
//! commits to exactly that result, as sent or as a stock MCP SDK hands it
//! back (`answer::judge`, docs/RECEIPTS.md "An answer as an SDK hands it
//! back"). It reads only the tiles its proof needs (`tiles::tiles_read`), as
//! any tlog-tiles client would, through `source`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Value, json};
use toolgate_core::answer::{self, Saved};
use toolgate_core::merkle;
use toolgate_core::note::{self, Algorithm, Checkpoint, Verifier};
use toolgate_core::proposal::hex;
use toolgate_core::receipt::{self, LogEntry, LoggedReceipt, Placed};
use toolgate_core::strict_json::JsonLimits;
use toolgate_core::tiles::{self, WIDTH};
use toolgate_core::visible::visible;

use super::source::{MAX_FILE, Refused, Source};

/// One property checked, and what was found.
#[derive(Debug, Clone)]
pub struct Check {
    /// The property (`checkpoint`, `inclusion`, `answer`, …).
    pub name: &'static str,
    /// Whether it was proven.
    pub ok: bool,
    /// What was proven, or why not.
    pub detail: String,
}

/// What `verify_answer` proved.
#[derive(Debug, Default)]
pub struct Report {
    /// One line per property, in the order checked.
    pub checks: Vec<Check>,
    /// The answer's receipt as logged, once read from the log.
    pub receipt: Option<Value>,
}

impl Report {
    /// Every check passed (and there was one).
    pub fn ok(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.ok)
    }

    fn check(&mut self, name: &'static str, ok: bool, detail: impl Into<String>) -> bool {
        self.checks.push(Check { name, ok, detail: detail.into() });
        ok
    }
}

/// What the verifier requires.
#[derive(Default)]
pub struct Options {
    /// The log's keys (C2SP vkeys): the checkpoint must verify under one.
    pub verifiers: Vec<Verifier>,
    /// Require the checkpoint's ML-DSA-65 signature too.
    pub require_pq: bool,
    /// How long to wait for a checkpoint that covers the receipt (one is
    /// signed at most `receipts.checkpoint_ms` after it).
    pub wait: Duration,
    /// Witnesses' cosigner keys, and how many of them must have cosigned
    /// the checkpoint (a quorum: no split view shown to this verifier alone).
    pub witnesses: Vec<Verifier>,
    /// The quorum.
    pub min_witnesses: usize,
}

/// Proves the receipt `doc` names (see `answer::read_saved`) from `source`,
/// and, given the whole answer, that the answer is what the receipt records.
pub async fn verify_answer(
    doc: &Value,
    source: &Source,
    options: &Options,
) -> anyhow::Result<Report> {
    let Saved { receipt: named, result, error } =
        answer::read_saved(doc).map_err(|e| anyhow!(e))?;
    let mut report = Report::default();
    let last = named.decision.iter().chain([&named.receipt]).map(|p| p.index).max().unwrap_or(0);
    let Some((checkpoint, detail)) =
        covering(source, options, &named.origin, last, &mut report).await?
    else {
        return Ok(report);
    };
    report.check("checkpoint", true, detail);
    let logged = match prove(source, &checkpoint, &named.receipt, &mut report, "inclusion").await? {
        Some(logged) => logged,
        None => return Ok(report),
    };
    let r = &logged.receipt;
    report.receipt = serde_json::to_value(&logged).ok();
    let shown = format!(
        "{} {} → {} ({} / {}), issued {}",
        r.server, r.tool, r.decision, r.execution_status, r.result_status, r.issued_at
    );
    // The log's text reaches a terminal: escaped, bounded.
    report.check("receipt", true, visible(&shown).chars().take(300).collect::<String>());
    if let Some(decision) = &named.decision
        && let Some(first) =
            prove(source, &checkpoint, decision, &mut report, "decision inclusion").await?
    {
        let same = first.receipt.proposal_sha256 == r.proposal_sha256
            && first.receipt.log_index < r.log_index;
        report.check(
            "decision",
            same,
            if same {
                format!(
                    "receipt {} decided the same call ({})",
                    first.receipt.log_index, first.receipt.execution_status
                )
            } else {
                format!("receipt {} is of another call", first.receipt.log_index)
            },
        );
    }
    if let Some(judged) = answer::judge(r, result.as_ref(), error.as_ref()) {
        let ok = judged.is_ok();
        report.check("answer", ok, judged.unwrap_or_else(|e| e));
    }
    Ok(report)
}

/// The newest checkpoint, verified, once it covers leaf `last`; `None` (the
/// failure reported) when it does not verify or never covers it.
async fn covering(
    source: &Source,
    options: &Options,
    origin: &str,
    last: u64,
    report: &mut Report,
) -> anyhow::Result<Option<(Checkpoint, String)>> {
    let deadline = Instant::now() + options.wait;
    loop {
        // None signed yet (404) is waited for like one that does not cover it.
        let text = match source.get("checkpoint").await {
            Ok(bytes) => String::from_utf8(bytes)
                .map_err(|_| anyhow!("the log's checkpoint is not UTF-8"))?,
            // Waiting does not change the reader's rights.
            Err(e) if Instant::now() >= deadline || e.is::<Refused>() => return Err(e),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (checkpoint, signed) = match note::open_checkpoint(&text, &options.verifiers) {
            Ok(opened) => opened,
            Err(e) => {
                report.check(
                    "checkpoint",
                    false,
                    format!("does not verify under the keys given (--vkey): {e}"),
                );
                return Ok(None);
            }
        };
        if checkpoint.origin() != origin {
            report.check(
                "checkpoint",
                false,
                format!(
                    "the log's origin is {:?}, the answer's receipt names {origin:?}",
                    checkpoint.origin()
                ),
            );
            return Ok(None);
        }
        let pq = signed.iter().any(|s| s.algorithm == Algorithm::MlDsa65);
        if options.require_pq && !pq {
            report.check(
                "checkpoint",
                false,
                "no valid ML-DSA-65 signature (--require-pq); give the log's ML-DSA-65 vkey",
            );
            return Ok(None);
        }
        let cosigned = match note::cosigned_by(&text, &options.witnesses) {
            Ok(by) => by,
            Err(e) => {
                report.check(
                    "witnesses",
                    false,
                    format!("a witness's cosignature does not verify: {e}"),
                );
                return Ok(None);
            }
        };
        let quorum = cosigned.len() >= options.min_witnesses;
        if checkpoint.size() > last && quorum {
            let by: Vec<String> = signed.iter().map(|s| s.algorithm.to_string()).collect();
            if options.min_witnesses > 0 {
                let names: Vec<&str> = cosigned.iter().map(|s| s.name.as_str()).collect();
                report.check(
                    "witnesses",
                    true,
                    format!(
                        "cosigned by {} of the {} witnesses given ({}; {} required)",
                        cosigned.len(),
                        options.witnesses.len(),
                        names.join(", "),
                        options.min_witnesses
                    ),
                );
            }
            return Ok(Some((
                checkpoint.clone(),
                format!(
                    "{} size {}, root {}, signed by {}",
                    checkpoint.origin(),
                    checkpoint.size(),
                    hex(checkpoint.root()),
                    by.join(" + ")
                ),
            )));
        }
        if Instant::now() >= deadline {
            if !quorum {
                report.check(
                    "witnesses",
                    false,
                    format!(
                        "the newest checkpoint is cosigned by {} of the witnesses given, fewer \
                            than --min-witnesses {}",
                        cosigned.len(),
                        options.min_witnesses
                    ),
                );
            } else {
                report.check(
                    "checkpoint",
                    false,
                    format!(
                        "the newest checkpoint covers {} receipts, not yet receipt {last}; one is \
                            signed within receipts.checkpoint_ms: retry",
                        checkpoint.size()
                    ),
                );
            }
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Proves `placed` is in the tree `checkpoint` signs, and reads its
/// receipt: from the opening the answer carries (format 3, whose leaf is a
/// commitment: the entry is recomputed from the receipt and its key, so no
/// entry bundle is read), or else from the log's entry (formats 1 and 2).
async fn prove(
    source: &Source,
    checkpoint: &Checkpoint,
    placed: &Placed,
    report: &mut Report,
    name: &'static str,
) -> anyhow::Result<Option<LoggedReceipt>> {
    let (index, size) = (placed.index, checkpoint.size());
    let proof = source.proof(|read| tiles::inclusion_proof(index, size, read)).await?;
    if let Err(e) =
        merkle::verify_inclusion(&placed.leaf_hash, index, size, &proof, checkpoint.root())
    {
        report.check(
            name,
            false,
            format!(
                "leaf {index} ({}) is not in the signed tree of {size}: {e}",
                hex(&placed.leaf_hash)
            ),
        );
        return Ok(None);
    }
    let limits = JsonLimits::sized(MAX_FILE, 128);
    let logged = match &placed.opening {
        Some(opening) => match LoggedReceipt::from_json(opening.logged.as_bytes(), limits)
            .and_then(|l| receipt::entry_bytes(&l, Some(&opening.key)).map(|e| (l, e)))
        {
            Ok((logged, entry)) if merkle::leaf_hash(&entry) == placed.leaf_hash => logged,
            Ok(_) => {
                report.check(
                    name,
                    false,
                    format!(
                        "the receipt and key the answer carries do not open leaf {index}: it is \
                            not the receipt the log holds"
                    ),
                );
                return Ok(None);
            }
            Err(e) => {
                report.check(name, false, format!("the answer's receipt {index}: {e}"));
                return Ok(None);
            }
        },
        None => {
            let bundle = index / WIDTH;
            let bytes =
                source.get(&tiles::entries_path(bundle, tiles::width_at(size, 0, bundle))).await?;
            let entries = tiles::read_entry_bundle(&bytes, tiles::width_at(size, 0, bundle))?;
            let entry = entries[(index % WIDTH) as usize];
            if merkle::leaf_hash(entry) != placed.leaf_hash {
                report.check(
                    name,
                    false,
                    format!(
                        "the log's entry {index} does not hash to the leaf hash the answer names"
                    ),
                );
                return Ok(None);
            }
            match LogEntry::from_json(entry, limits)
                .map_err(|e| anyhow!("the log's entry {index}: {e}"))?
            {
                LogEntry::Clear(logged) => logged,
                LogEntry::Commitment(_) => {
                    report.check(
                        name,
                        false,
                        format!(
                            "the log holds only a commitment to receipt {index}, and the answer \
                                carries no opening of it (`opening`): save the whole `_meta` \
                                receipt the gateway gave"
                        ),
                    );
                    return Ok(None);
                }
            }
        }
    };
    if logged.receipt.log_index != index {
        report.check(name, false, format!("leaf {index} is receipt {}", logged.receipt.log_index));
        return Ok(None);
    }
    report.check(
        name,
        true,
        format!("leaf {index} in the signed tree of {size} ({} proof hashes)", proof.len()),
    );
    Ok(Some(logged))
}

/// The report as `toolgate verify --json` prints it.
pub fn report_json(report: &Report) -> Value {
    let checks: Vec<Value> = report
        .checks
        .iter()
        .map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail}))
        .collect();
    json!({"ok": report.ok(), "checks": checks, "receipt": report.receipt})
}

/// `--witness VKEY…` and `--min-witnesses N` as keys and a quorum: every
/// witness given, unless a smaller quorum is asked for.
pub fn witness_keys(
    vkeys: &[String],
    min: Option<usize>,
) -> anyhow::Result<(Vec<Verifier>, usize)> {
    let witnesses = vkeys
        .iter()
        .map(|k| Verifier::from_vkey(k).map_err(|e| anyhow!("--witness {k:?}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(w) = witnesses.iter().find(|w| !w.algorithm().is_cosignature()) {
        bail!(
            "--witness {:?} is not a witness's key (a cosigner vkey, as `toolgate witness serve` prints it)",
            w.name()
        );
    }
    let min = min.unwrap_or(witnesses.len());
    if min > witnesses.len() {
        bail!(
            "--min-witnesses {min} is more than the {} witnesses given (--witness VKEY)",
            witnesses.len()
        );
    }
    Ok((witnesses, min))
}

/// `toolgate verify --answer FILE`: reads the saved answer, proves it from
/// `log` (or the log its receipt names) and prints the report. Ok(false)
/// when something did not verify.
pub async fn run(
    answer_file: &std::path::Path,
    log: Option<&str>,
    vkeys: &[String],
    (witnesses, min_witnesses): (&[String], Option<usize>),
    token: Option<String>,
    require_pq: bool,
    wait: Duration,
    as_json: bool,
) -> anyhow::Result<bool> {
    let bytes =
        std::fs::read(answer_file).with_context(|| format!("reading {}", answer_file.display()))?;
    let doc: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", answer_file.display()))?;
    let named = answer::read_saved(&doc).map_err(|e| anyhow!("{}: {e}", answer_file.display()))?;
    let Some(location) = log.map(str::to_string).or(named.receipt.log.clone()) else {
        bail!(
            "the answer's receipt names no log; give its location with --log URL|DIR (the \
                gateway's https://HOST/log/, a mirror, or an archive folder)"
        );
    };
    if vkeys.is_empty() {
        bail!(
            "give the log's public key with --vkey (`toolgate keys show` prints it): a checkpoint \
                is trusted only under a key you got from its operator"
        );
    }
    let verifiers = vkeys
        .iter()
        .map(|k| Verifier::from_vkey(k).map_err(|e| anyhow!("--vkey {k:?}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (witnesses, min_witnesses) = witness_keys(witnesses, min_witnesses)?;
    let source = Source::parse(&location, token)?;
    let report = verify_answer(
        &doc,
        &source,
        &Options { verifiers, require_pq, wait, witnesses, min_witnesses },
    )
    .await?;
    if as_json {
        println!(
            "{}",
            toolgate_core::visible::visible_json(&serde_json::to_string_pretty(&report_json(
                &report
            ))?)
        );
    } else {
        // The location came with the answer, and details quote the log:
        // both reach the terminal escaped.
        println!("log        {}", visible(&location));
        for c in &report.checks {
            println!(
                "{} {:<20} {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.name,
                visible(&c.detail)
            );
        }
        // As whom the call reached its server, as its logged receipt says.
        let identity =
            report.receipt.as_ref().and_then(|r| r.pointer("/receipt/identity")).and_then(|i| {
                serde_json::from_value::<toolgate_core::receipt::UpstreamIdentity>(i.clone()).ok()
            });
        if let Some(identity) = identity {
            println!("ran as     {}", visible(&identity.describe()));
        }
        println!("{}", if report.ok() { "verified" } else { "NOT VERIFIED" });
    }
    Ok(report.ok())
}
