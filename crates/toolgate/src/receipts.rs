//! The receipt log from the command line: `receipts list|show`, `export`
//! (a bundle, or a pack with the policy, registry and tool definitions),
//! `verify` (offline: only the file), `log verify` (the whole ledger), and
//! `keys rotate`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use clap::Subcommand;
use serde_json::{Value, json};
use toolgate_core::bundle::{self, Bundle, BundleKey};
use toolgate_core::log_verify::LogVerifier;
use toolgate_core::proposal::sha256_hex;
use toolgate_core::receipt::build::wire_name;
use toolgate_core::visible::visible;
use toolgate_core::{Clock as _, SystemClock, SystemEntropy};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::Sources;
use toolgate_gateway::log::archive::{Archive, TileCheck};
use toolgate_gateway::log::keys::LogKeys;
use toolgate_gateway::log::receipt_log::ReceiptLog;
use toolgate_ledger::{Ledger, StoredCheckpoint};

use crate::approvals::open;
use toolgate_gateway::log::evidence::parse;

#[derive(Subcommand)]
pub enum Action {
    /// List receipts in log order.
    List {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// First log index.
        #[arg(long, default_value_t = 0)]
        since: u64,
        #[arg(long, default_value_t = 100)]
        limit: u64,
        #[arg(long)]
        json: bool,
    },
    /// Show one receipt, as logged, by its log index.
    Show {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        index: u64,
    },
}

#[derive(Subcommand)]
pub enum LogAction {
    /// Check the whole log, archive and ledger: every leaf, every receipt's
    /// signature, every checkpoint's root and signatures, and consistency
    /// between checkpoints.
    Verify {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Monitor a published log: follow its checkpoints and check that it only grows (a consistency
    /// proof from its tiles between each); a fork, a shrink or a bad checkpoint is an alert (exit 1).
    Watch {
        /// The log: an http(s) URL (a gateway's /log/, a mirror) or a folder.
        log: String,
        /// The log's public key (C2SP vkey, from `toolgate keys show`; repeatable).
        #[arg(long, value_name = "VKEY", required = true)]
        vkey: Vec<String>,
        /// Keep the last accepted checkpoint here, across restarts.
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// POST each alert here as JSON.
        #[arg(long, value_name = "URL")]
        webhook: Option<String>,
        /// How often to look (ms).
        #[arg(long, value_name = "MS", default_value_t = 5000)]
        every_ms: u64,
        /// Look once (against --state) and exit: 0 when the log only grew.
        #[arg(long)]
        once: bool,
    },
    /// Move the receipts before N out of the ledger into the log's archive
    /// (STATE_DIR/archive, C2SP tlog-tiles files), verified there first; whole
    /// tiles of 256, up to the last checkpoint.
    Archive {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Archive the receipts before this log index (rounded down to a multiple of 256).
        #[arg(long, value_name = "N")]
        before: u64,
    },
}

#[derive(Subcommand)]
pub enum WitnessAction {
    /// Run a witness (c2sp.org/tlog-witness) for one or more logs: it cosigns each checkpoint a log
    /// submits once it has checked that the log only grew, and refuses any other.
    Serve {
        /// Where to listen (ADDR:PORT); it serves POST /add-checkpoint.
        #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7380")]
        listen: String,
        /// Its key (created on first start, owner-only) and state (SQLite).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Its name, e.g. witness.example.com/w1: the name its cosignatures carry.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// A log it witnesses: the log's vkey (`toolgate keys show`; repeatable).
        #[arg(long = "log", value_name = "VKEY", required = true)]
        logs: Vec<String>,
    },
}

#[derive(Subcommand)]
pub enum KeysAction {
    /// Start new signing keys; the old public keys stay in the key history
    /// (restart the gateway to sign with the new ones).
    Rotate {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// The current kid and the key history.
    Show {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
}

pub async fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::List { config, since, limit, json } => {
            let (config, ledger) = open(&config).await?;
            let rows = ledger.receipts(since, limit).await?;
            if json {
                let list: Vec<Value> = rows
                    .iter()
                    .map(|r| serde_json::from_str(&r.logged))
                    .collect::<Result<_, _>>()?;
                crate::print_json(&list)?;
                return Ok(());
            }
            if rows.is_empty() {
                println!(
                    "no receipts from index {since} (the log holds {})",
                    ledger.log_size().await?
                );
                return Ok(());
            }
            let receipts = rows
                .iter()
                .map(|row| Ok(parse(&row.logged)?.receipt))
                .collect::<anyhow::Result<Vec<_>>>()?;
            // One name per tool: the exposed name a client calls
            // (`SERVER__TOOL`; a call refused before it named a tool keeps
            // the name it called), as `toolgate tools` and approvals name it.
            let tools: Vec<String> = receipts
                .iter()
                .map(|r| crate::approvals::exposed_name(&config, &r.server, &r.tool))
                .collect();
            let width = crate::tools::name_width("TOOL", tools.iter().map(String::as_str));
            println!(
                "{:>6}  {:<24}  {}  {:<16}  {:<24}  {:<14}  RESULT",
                "INDEX",
                "ISSUED",
                crate::tools::pad("TOOL", width),
                "DECISION",
                "REASON",
                "EXECUTION"
            );
            for (r, tool) in receipts.iter().zip(&tools) {
                // Names and reasons came from upstreams and agents: escaped.
                let v = |s: &str| visible(s).into_owned();
                println!(
                    "{:>6}  {:<24}  {}  {:<16}  {:<24}  {:<14}  {}",
                    r.log_index,
                    v(&r.issued_at),
                    crate::tools::pad(&crate::tools::fit(tool, width), width),
                    v(&r.decision),
                    v(&r.reason),
                    v(&r.execution_status),
                    v(&r.result_status)
                );
            }
            Ok(())
        }
        Action::Show { config, index } => {
            let (config, ledger) = open(&config).await?;
            let found = toolgate_gateway::log::archive::leaves(
                &Archive::in_state_dir(&config.state_dir()),
                &*ledger,
                index,
                index + 1,
            )
            .await?;
            let leaf = found.into_iter().next().ok_or_else(|| {
                anyhow!("no receipt at log index {index}; `toolgate receipts list` shows them")
            })?;
            let value: Value = serde_json::from_str(&leaf.logged)?;
            crate::print_json(&value)?;
            Ok(())
        }
    }
}

/// The log's keys and a log to sign with, for commands that checkpoint.
async fn signing_log(config: &Config, ledger: Arc<dyn Ledger>) -> anyhow::Result<Arc<ReceiptLog>> {
    ReceiptLog::open_configured(config, ledger, &Sources::system()).await
}

/// `toolgate export`.
pub async fn export(
    config_path: &Path,
    receipt: Option<u64>,
    since: Option<u64>,
    out: Option<PathBuf>,
    pack: Option<PathBuf>,
    at: Option<u64>,
) -> anyhow::Result<()> {
    let (config, ledger) = open(config_path).await?;
    let size = ledger.log_size().await?;
    let (from, to) = match (receipt, since) {
        (Some(n), None) => (n, n + 1),
        (None, Some(n)) => (n, at.unwrap_or(size)),
        _ => bail!("give exactly one of --receipt N or --since N"),
    };
    if to > size || from >= to {
        bail!(
            "the log holds receipts 0..{size}; nothing to export from {from} (use --since 0 for everything)"
        );
    }
    let checkpoint = match at {
        Some(at) => {
            let all = ledger.checkpoints().await?;
            let sizes: Vec<String> = all.iter().map(|c| c.size.to_string()).collect();
            let checkpoint = all.into_iter().find(|c| c.size == at).ok_or_else(|| {
                anyhow!(
                    "no checkpoint of tree size {at}; the log has checkpoints of sizes {}",
                    sizes.join(", ")
                )
            })?;
            if to > at {
                bail!(
                    "the checkpoint of size {at} does not cover receipt {}; pick a later one",
                    to - 1
                );
            }
            checkpoint
        }
        None => covering(&config, &ledger, to).await?,
    };
    let bundle = toolgate_gateway::log::evidence::bundle(
        &Archive::in_state_dir(&config.state_dir()),
        &*ledger,
        &checkpoint,
        from,
        to,
    )
    .await?;
    write_outputs(&config, config_path, &ledger, &bundle, (from, to, checkpoint.size), out, pack)
        .await
}

/// The newest checkpoint covering the log up to `to`, signed now if needed
/// (same keys, same state dir as the gateway).
async fn covering(
    config: &Config,
    ledger: &Arc<dyn Ledger>,
    to: u64,
) -> anyhow::Result<StoredCheckpoint> {
    toolgate_gateway::log::evidence::covering_with_keys_of(config, ledger, to).await
}

/// Writes the bundle (`--out`) and/or the pack; `size` is its checkpoint's.
async fn write_outputs(
    config: &Config,
    config_path: &Path,
    ledger: &Arc<dyn Ledger>,
    bundle: &Bundle,
    (from, to, size): (u64, u64, u64),
    out: Option<PathBuf>,
    pack: Option<PathBuf>,
) -> anyhow::Result<()> {
    if let Some(dir) = pack {
        write_pack(config, config_path, ledger, bundle, &dir).await?;
        println!(
            "packed {} receipt(s) (log {from}..{to}) with checkpoint size {size} into {}",
            to - from,
            dir.display()
        );
    }
    if let Some(out) = out {
        write_atomically(&out, bundle.to_json().as_bytes())?;
        println!(
            "exported {} receipt(s) (log {from}..{to}) with checkpoint size {size} to {}",
            to - from,
            out.display()
        );
    }
    Ok(())
}

/// Owner-only, whole or not at all, never through a link (the one writer:
/// `toolgate_mcp::owner_only::write_owner_only`). A bundle holds receipts: its reader chooses
/// to share it.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    toolgate_mcp::owner_only::write_owner_only(path, bytes)
}

/// A pack: the bundle, the policy set and registry in force, and the tool
/// definitions the receipts name — with a manifest of their hashes, signed
/// by the log's receipt key.
async fn write_pack(
    config: &Config,
    config_path: &Path,
    ledger: &Arc<dyn Ledger>,
    bundle: &Bundle,
    dir: &Path,
) -> anyhow::Result<()> {
    toolgate_mcp::owner_only::create_private_dir(&dir.join("tools"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let mut files: Vec<(String, Vec<u8>)> =
        vec![("bundle.json".into(), bundle.to_json().into_bytes())];
    if let Some(p) = &config.policy {
        files
            .push(("policy/policy.cedar".into(), std::fs::read(config.resolve_path(&p.policies))?));
        files.push((
            "policy/policy.cedarschema".into(),
            std::fs::read(config.resolve_path(&p.schema))?,
        ));
    }
    // The registry as configured (only [registry]: no callers' tokens).
    let raw: toml::Table = toml::from_str(&std::fs::read_to_string(config_path)?)?;
    let registry = raw.get("registry").cloned().unwrap_or(toml::Value::Table(Default::default()));
    files.push(("registry.json".into(), serde_json::to_vec_pretty(&registry)?));
    let named: std::collections::BTreeSet<&str> = bundle
        .receipts
        .iter()
        .map(|e| e.receipt.receipt.tool_definition_sha256.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    for d in ledger.tool_definitions().await? {
        if named.contains(d.sha256.as_str()) {
            files.push((format!("tools/{}.json", d.sha256), d.definition.into_bytes()));
        }
    }
    let mut manifest = serde_json::Map::new();
    for (name, bytes) in &files {
        if let Some(parent) = dir.join(name).parent() {
            toolgate_mcp::owner_only::create_private_dir(parent)?;
        }
        write_atomically(&dir.join(name), bytes)?;
        manifest.insert(name.clone(), json!(sha256_hex(bytes)));
    }
    let manifest = serde_json::to_string_pretty(&manifest)?;
    write_atomically(&dir.join("MANIFEST.json"), manifest.as_bytes())?;
    let signature = signing_log(config, ledger.clone()).await?.sign_manifest(manifest.as_bytes());
    write_atomically(
        &dir.join("MANIFEST.sig"),
        serde_json::to_string_pretty(&signature)?.as_bytes(),
    )
}

/// `toolgate verify FILE|PACK`: offline; exit status 1 when anything required fails.
pub fn verify(
    path: &Path,
    expected_kids: Vec<String>,
    require_pq: bool,
    (witnesses, min_witnesses): (&[String], Option<usize>),
    as_json: bool,
) -> anyhow::Result<bool> {
    let is_pack = path.is_dir();
    let file = if is_pack { path.join("bundle.json") } else { path.to_path_buf() };
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let (witnesses, min_witnesses) =
        toolgate_gateway::log::readers::verify_answer::witness_keys(witnesses, min_witnesses)?;
    let options = bundle::Options { expected_kids, require_pq, witnesses, min_witnesses };
    let mut ran_as = Vec::new();
    let report = match Bundle::from_json(&bytes) {
        Ok(b) => {
            let mut report = bundle::verify(&b, &options);
            if is_pack {
                toolgate_core::pack::verify(&pack_files(path), &b, &mut report);
            }
            ran_as = b
                .receipts
                .iter()
                .filter_map(|e| {
                    e.receipt.receipt.identity.clone().map(|i| (e.receipt.receipt.log_index, i))
                })
                .collect();
            report
        }
        Err(failure) => bundle::Report {
            failures: vec![failure.clone()],
            checks: vec![bundle::Check { name: "bundle", ok: false, detail: failure.to_string() }],
            ..Default::default()
        },
    };
    if as_json {
        let checks: Vec<Value> = report
            .checks
            .iter()
            .map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail}))
            .collect();
        let failures: Vec<Value> = report
            .failures
            .iter()
            .map(|f| json!({"failure": f.name(), "detail": f.to_string()}))
            .collect();
        let ran_as: Vec<Value> = ran_as
            .iter()
            .map(|(index, identity)| json!({"index": index, "identity": identity}))
            .collect();
        crate::print_json(
            &json!({"ok": report.ok(), "origin": report.origin, "tree_size": report.tree_size, "root": report.root, "checks": checks, "failures": failures, "ran_as": ran_as}),
        )?;
    } else {
        if !report.origin.is_empty() {
            println!(
                "log        {} (tree size {}, root {})",
                visible(&report.origin),
                report.tree_size,
                visible(&report.root)
            );
        }
        for c in &report.checks {
            println!(
                "{} {:<22} {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.name,
                visible(&c.detail)
            );
        }
        // As whom each call reached its server, as its (signed) receipt says.
        for (index, identity) in &ran_as {
            println!("ran as     receipt {index}: {}", visible(&identity.describe()));
        }
        if !report.ok() {
            let names: std::collections::BTreeSet<&str> =
                report.failures.iter().map(|f| f.name()).collect();
            println!("NOT VERIFIED: {}", names.into_iter().collect::<Vec<_>>().join(", "));
        } else {
            println!("verified");
        }
    }
    Ok(report.ok())
}

/// Every file of a pack directory, by its `/`-separated path inside it, for
/// core's pack checks; what cannot be read is left out (and is missing there).
fn pack_files(dir: &Path) -> toolgate_core::pack::Files {
    let mut files = toolgate_core::pack::Files::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(sub) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&sub)) else { continue };
        for entry in entries.flatten() {
            let path = sub.join(entry.file_name());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(dir.join(&path)) {
                files.insert(path.to_string_lossy().into_owned(), bytes);
            }
        }
    }
    files
}

/// `toolgate log archive`.
pub async fn log_archive(config_path: &Path, before: u64) -> anyhow::Result<()> {
    let (config, ledger) = open(config_path).await?;
    let log = signing_log(&config, ledger.clone()).await?;
    let done = log.archive_before(before, SystemClock.now_ms()).await?;
    println!(
        "archived receipts 0..{} in {} (checkpoint of size {} signed there); {} row(s) moved out of the ledger, {} checkpoint(s) it covers dropped",
        done.before,
        log.archive.dir().display(),
        done.before,
        done.moved,
        done.checkpoints_dropped
    );
    Ok(())
}

/// `toolgate log verify`: the whole log, from the archive and the ledger, by core's verifier.
pub async fn log_verify(config_path: &Path) -> anyhow::Result<bool> {
    let (config, ledger) = open(config_path).await?;
    let archive = Archive::in_state_dir(&config.state_dir());
    let size = ledger.log_size().await?;
    let keys = ledger.log_keys().await?;
    let history: Vec<BundleKey> = keys
        .iter()
        .map(|k| BundleKey {
            kid: k.kid.clone(),
            ed25519: k.ed25519.clone(),
            ml_dsa_65: k.ml_dsa_65.clone(),
        })
        .collect();
    let mut verifier = LogVerifier::new(&history).map_err(|e| anyhow!(e))?;
    let archived = ledger.archived().await?.map_or(0, |a| a.before);
    let mut tiles = TileCheck::new(&archive, archived);
    while verifier.size() < size {
        let leaves = toolgate_gateway::log::archive::leaves(
            &archive,
            &*ledger,
            verifier.size(),
            size.min(verifier.size() + 10_000),
        )
        .await?;
        if leaves.is_empty() {
            break;
        }
        for leaf in &leaves {
            verifier.receipt(leaf.index, &leaf.hash, &leaf.logged, leaf.opening.as_ref());
            if let Err(e) = tiles.leaf(leaf.index, leaf.hash) {
                verifier.problems.push(format!("{e:#}"));
            }
        }
    }
    if let Err(e) = tiles.finish() {
        verifier.problems.push(format!("{e:#}"));
    }
    let checkpoints = ledger.checkpoints().await?;
    for c in &checkpoints {
        verifier.checkpoint(c.size, &c.root, &c.note);
    }
    println!(
        "receipts     {size} (every signature, index and leaf hash checked; the archive's {archived} against its hash tiles)"
    );
    println!("keys         {} in the history", keys.len());
    println!(
        "checkpoints  {} (roots recomputed; each consistent with the one before)",
        checkpoints.len()
    );
    match checkpoints.last() {
        Some(c) if c.size < size => println!(
            "uncovered    {} receipt(s) after the last checkpoint (the gateway signs the next one)",
            size - c.size
        ),
        _ => {}
    }
    for p in &verifier.problems {
        println!("FAIL {p}");
    }
    println!("{}", if verifier.problems.is_empty() { "log verified" } else { "LOG NOT VERIFIED" });
    Ok(verifier.problems.is_empty())
}

/// `toolgate log watch`: Ok(false) on an alert.
pub async fn log_watch(
    log: String,
    vkeys: &[String],
    state: Option<PathBuf>,
    webhook: Option<String>,
    every_ms: u64,
    once: bool,
) -> anyhow::Result<bool> {
    let verifiers = vkeys
        .iter()
        .map(|k| {
            toolgate_core::note::Verifier::from_vkey(k).map_err(|e| anyhow!("--vkey {k:?}: {e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let token = std::env::var("TOOLGATE_LOG_TOKEN").ok().filter(|t| !t.is_empty());
    let source = toolgate_gateway::log::readers::source::Source::parse(&log, token)?;
    let monitor = toolgate_gateway::log::readers::monitor::Monitor {
        source,
        location: log,
        verifiers,
        webhook,
        state,
    };
    monitor.run(std::time::Duration::from_millis(every_ms.max(100)), once).await
}

pub fn keys(action: KeysAction) -> anyhow::Result<()> {
    match action {
        KeysAction::Rotate { config } => {
            let config = crate::serve::load_config(&config, None)?;
            toolgate_gateway::process::create_state_dir(&config)?;
            let (old, new) = LogKeys::rotate(
                &config.state_dir(),
                &config.receipts.origin,
                &SystemClock,
                &SystemEntropy::default(),
            )?;
            println!(
                "rotated: kid {old} → {new}; {old}'s public keys stay in the key history. Restart the gateway to sign with {new}."
            );
            Ok(())
        }
        KeysAction::Show { config } => {
            let config = crate::serve::load_config(&config, None)?;
            let history = toolgate_gateway::log::keys::read_history(&config.state_dir())?
                .ok_or_else(|| anyhow!("no keys yet: the gateway creates them at first start"))?;
            println!("origin   {}", history.origin);
            println!("current  {}", history.current.kid);
            // What `toolgate verify --answer --vkey` trusts a checkpoint under.
            for vkey in history.current.vkeys() {
                println!("vkey     {vkey}");
            }
            for k in &history.retired {
                println!("retired  {}", k.kid);
            }
            Ok(())
        }
    }
}

/// `toolgate replay`: every recorded proposal decided again under the
/// policy set in `dir`; lists the decisions that would change. Runs nothing.
pub async fn replay(config_path: &Path, dir: &Path) -> anyhow::Result<()> {
    let engine = load_policy_dir(dir)?;
    let (config, ledger) = open(config_path).await?;
    let replay = toolgate_gateway::replay::Replay::new(engine, &config);
    let (mut decided, mut changed, mut from) = (0u64, 0u64, 0u64);
    loop {
        let rows = ledger.receipts(from, 10_000).await?;
        let Some(last) = rows.last() else { break };
        from = last.log_index + 1;
        for row in &rows {
            let Some(asked) = row.asked.as_deref() else { continue };
            let asked: Value = serde_json::from_str(asked)
                .with_context(|| format!("receipt {}'s record", row.log_index))?;
            let again = replay
                .decide_again(&asked)
                .with_context(|| format!("receipt {}'s record", row.log_index))?;
            decided += 1;
            if again.changed() {
                changed += 1;
                let name = |d: &toolgate_core::Decision| {
                    format!(
                        "{} ({}; {})",
                        wire_name(&d.verdict),
                        wire_name(&d.reason),
                        d.rules.join(",")
                    )
                };
                let version = parse(&row.logged)?.receipt.policy_version;
                println!(
                    "log {:>6}  {:<32} {:<12} {} → {}  [decided under policy {}]",
                    row.log_index,
                    again.exposed_name,
                    again.caller.name,
                    name(&again.recorded),
                    name(&again.now),
                    &version[..version.len().min(12)]
                );
            }
        }
    }
    println!(
        "{decided} recorded proposal(s) decided again under {} (policy version {}); {changed} would change. Nothing was run.",
        dir.display(),
        replay.policy_version()
    );
    Ok(())
}

/// A policy directory: every `*.cedar` file (in name order) and one `*.cedarschema`.
fn load_policy_dir(dir: &Path) -> anyhow::Result<toolgate_core::policy::PolicyEngine> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let ext = |p: &PathBuf, e: &str| p.extension().is_some_and(|x| x == e);
    let mut policies = String::new();
    for p in entries.iter().filter(|p| ext(p, "cedar")) {
        policies.push_str(&std::fs::read_to_string(p)?);
        policies.push('\n');
    }
    let schemas: Vec<&PathBuf> = entries.iter().filter(|p| ext(p, "cedarschema")).collect();
    let [schema] = schemas.as_slice() else {
        bail!(
            "{} must hold exactly one *.cedarschema file (found {})",
            dir.display(),
            schemas.len()
        )
    };
    toolgate_core::policy::PolicyEngine::load(&policies, &std::fs::read_to_string(schema)?)
        .map_err(|e| anyhow!("the policy in {}: {e}", dir.display()))
}
