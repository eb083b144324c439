//! The fault run (issue 24): `scripts/faults` runs these, and the SIGKILL
//! run of `operations_crash.rs`. Not part of `scripts/test`: they restart
//! a PostgreSQL cluster of their own and mount filesystems (root only).
//!
//! Each test sends 1,000 keyed create_ticket writes (paced over about 20 s,
//! 8 at a time) while one fault strikes again and again, then lifts the
//! fault and retries every key until it has its ticket, reconciling each
//! "unknown" with `toolgate ops reconcile`:
//!
//! - `upstream_killed_and_restarted`: the support desk is SIGKILLed and
//!   started again on the same address and files;
//! - `postgres_restarted_under_replicas`: two gateways on one PostgreSQL
//!   ledger, whose server is restarted in `immediate` mode (a crash);
//! - `disk_full_under_sqlite`: the state dir is a small tmpfs, filled to
//!   the last byte and freed;
//! - `read_only_ledger`: the gateway is killed, its state dir remounted
//!   read-only and the gateway started on it, then made writable again.
//!
//! Every test asserts: no answer outside "a ticket" or "a refusal that
//! says retry" (or a connection the fault cut); 0 duplicate effects (each
//! key has exactly one ticket at the desk, and was sent to it again only
//! after reconciliation found the earlier send not applied; a send the desk
//! had seen before is flagged by its own `deduplicated`); 0 lost outcomes (every ticket a
//! client was ever given is the key's one ticket); every unknown was
//! surfaced and reconciled; the log verifies; and the gateway came back by
//! itself where it could. Figures are printed; run with `--nocapture`.

mod ops_common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ops_common::*;
use serde_json::json;
use tokio::process::Command;

const KEYS: usize = 1000;
const WRITERS: usize = 8;
/// A writer's pause between writes: 1,000 keys over about 20 s.
const PACE: Duration = Duration::from_millis(150);

/// One fault run: the keys, what every answer said, the gateways' URLs.
struct Run {
    name: &'static str,
    urls: Mutex<Vec<String>>,
    next: AtomicUsize,
    done: AtomicBool,
    /// Writes sent and not yet answered: a fault is meant to land on them.
    in_flight: AtomicUsize,
    /// Every ticket id a client was given, per key.
    tickets: Mutex<Vec<BTreeSet<String>>>,
    answers: Mutex<BTreeMap<String, usize>>,
    /// Answers a fault must never produce.
    odd: Mutex<Vec<String>>,
    /// Per key, how often reconciliation found it not applied: each allows
    /// one more send to the desk (the one the retry after it makes).
    not_applied: Mutex<BTreeMap<usize, usize>>,
}

impl Run {
    fn new(name: &'static str, urls: Vec<String>) -> Arc<Run> {
        Arc::new(Run {
            name,
            urls: Mutex::new(urls),
            next: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            tickets: Mutex::new(vec![BTreeSet::new(); KEYS]),
            answers: Mutex::new(BTreeMap::new()),
            odd: Mutex::new(Vec::new()),
            not_applied: Mutex::new(BTreeMap::new()),
        })
    }

    fn key(&self, i: usize) -> String {
        format!("{}-{i:04}", self.name)
    }

    /// Sends key `i`'s keyed write to `url` and records its answer.
    async fn send(
        &self,
        client: &reqwest::Client,
        url: &str,
        i: usize,
        phase: &str,
    ) -> Option<Answer> {
        let key = self.key(i);
        let sent = call(client, url, &ticket_args(&key), Some(&key), json!({}), None).await;
        self.record(i, sent, phase)
    }

    fn tally(&self, what: String) {
        *self.answers.lock().unwrap().entry(what).or_default() += 1;
    }

    /// Records one answer for key `i`; a ticket or a "retry" refusal is
    /// what a fault may give; anything else is odd.
    fn record(
        &self,
        i: usize,
        sent: Result<(u16, serde_json::Value), reqwest::Error>,
        phase: &str,
    ) -> Option<Answer> {
        let key = self.key(i);
        let (status, body) = match sent {
            Ok(sent) => sent,
            Err(e) => {
                self.tally(format!(
                    "{phase}: no answer ({})",
                    if e.is_connect() { "refused at connect" } else { "cut off" }
                ));
                return None;
            }
        };
        let answer = classify(&body);
        let label = match &answer {
            _ if status != 200 => {
                self.odd.lock().unwrap().push(format!("{phase} {key}: HTTP {status}: {body}"));
                format!("HTTP {status}")
            }
            Answer::Ticket { ticket_id, client_reference, op_key, replayed, state, .. } => {
                if client_reference != &reference(&key) || op_key != &key {
                    self.odd
                        .lock()
                        .unwrap()
                        .push(format!("{phase} {key}: another key's answer: {body}"));
                }
                self.tickets.lock().unwrap()[i].insert(ticket_id.clone());
                // The desk marks a send of a reference it already holds: a
                // second dispatch of an effect that existed.
                if body["result"]["structuredContent"]["deduplicated"] == json!(true) {
                    self.odd
                        .lock()
                        .unwrap()
                        .push(format!("{phase} {key}: the desk saw this reference before: {body}"));
                }
                if *replayed {
                    format!("ticket (replay of {state})")
                } else {
                    "ticket (fresh)".into()
                }
            }
            Answer::Refused { reason, body, .. } => {
                let action =
                    body["result"]["structuredContent"]["action"].as_str().unwrap_or_default();
                if action != "retry" && reason != "outcome_unknown" {
                    self.odd.lock().unwrap().push(format!(
                        "{phase} {key}: refused `{reason}` with action `{action}`: {body}"
                    ));
                }
                format!("refused {reason} ({action})")
            }
            Answer::Other(v) => {
                self.odd.lock().unwrap().push(format!("{phase} {key}: unexpected answer: {v}"));
                "other".into()
            }
        };
        self.tally(format!("{phase}: {label}"));
        Some(answer)
    }

    /// Waits (up to a second) until a write is in flight, so the fault
    /// strikes while the gateway, the ledger and the upstream are at work.
    async fn busy(&self) {
        let until = Instant::now() + Duration::from_secs(1);
        while self.in_flight.load(SeqCst) == 0 && Instant::now() < until && !self.done.load(SeqCst)
        {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }

    fn url(&self, i: usize) -> Option<String> {
        let urls = self.urls.lock().unwrap();
        (!urls.is_empty()).then(|| urls[i % urls.len()].clone())
    }
}

/// Sends every key once, paced, whatever the fault is doing.
async fn writers(run: Arc<Run>) {
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let run = run.clone();
            tokio::spawn(async move {
                let client = client();
                loop {
                    let i = run.next.fetch_add(1, SeqCst);
                    if i >= KEYS {
                        return;
                    }
                    if let Some(url) = run.url(i) {
                        run.in_flight.fetch_add(1, SeqCst);
                        run.send(&client, &url, i, "fault").await;
                        run.in_flight.fetch_sub(1, SeqCst);
                    } else {
                        run.tally("fault: no gateway serving".into());
                    }
                    tokio::time::sleep(PACE).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    run.done.store(true, SeqCst);
}

/// After the faults: every key retried until it has its ticket ("in
/// progress" waited out, "unknown" reconciled by the operator CLI).
/// Returns how many unknowns were reconciled, applied and not.
async fn settle_all(run: &Arc<Run>, configs: &[PathBuf]) -> (usize, usize) {
    let (applied, not_applied) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (run, next, configs, applied, not_applied) =
                (run.clone(), next.clone(), configs.to_vec(), applied.clone(), not_applied.clone());
            tokio::spawn(async move {
                let client = client();
                loop {
                    let i = next.fetch_add(1, SeqCst);
                    if i >= KEYS {
                        return;
                    }
                    let key = run.key(i);
                    let deadline = Instant::now() + Duration::from_secs(90);
                    loop {
                        assert!(
                            Instant::now() < deadline,
                            "{key}: no ticket after 90 s of retries"
                        );
                        let url = run.url(i).expect("a gateway serves after the faults");
                        match run.send(&client, &url, i, "settle").await {
                            Some(Answer::Ticket { .. }) => break,
                            Some(Answer::Refused { reason, operation_id, .. })
                                if reason == "outcome_unknown" =>
                            {
                                let id = operation_id.expect("outcome_unknown names its operation");
                                match reconcile(&configs[i % configs.len()], &id).await {
                                    Ok(done) if done["applied"] == json!(true) => {
                                        applied.fetch_add(1, SeqCst)
                                    }
                                    Ok(_) => {
                                        *run.not_applied.lock().unwrap().entry(i).or_default() += 1;
                                        not_applied.fetch_add(1, SeqCst)
                                    }
                                    // Its lease has not ended: the dispatch may still run.
                                    Err(why) if why.contains("try again shortly") => {
                                        tokio::time::sleep(Duration::from_millis(500)).await;
                                        0
                                    }
                                    Err(why) => panic!("{key}: ops reconcile {id}: {why}"),
                                };
                            }
                            Some(Answer::Refused { retry_after_ms, .. }) => {
                                tokio::time::sleep(Duration::from_millis(
                                    retry_after_ms.unwrap_or(200).clamp(10, 2_000),
                                ))
                                .await
                            }
                            _ => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (applied.load(SeqCst), not_applied.load(SeqCst))
}

/// `toolgate ops reconcile --json ID`, or what it said when it could not.
async fn reconcile(config: &Path, id: &str) -> Result<serde_json::Value, String> {
    let out = Command::new(BIN)
        .args(["ops", "reconcile", "--json", "--config"])
        .arg(config)
        .arg(id)
        .env("RUST_LOG", "error")
        .output()
        .await
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("not JSON ({e})"))
}

/// The checks every fault run ends with; prints the figures.
async fn checks_hold(
    run: &Run,
    support_state: &Path,
    configs: &[PathBuf],
    faults: usize,
    what: &str,
    unknowns: (usize, usize),
    logs: &Path,
) {
    let odd = run.odd.lock().unwrap().clone();
    let calls = invocations(support_state);
    let made = ops_common::tickets(support_state);
    let tickets = run.tickets.lock().unwrap().clone();
    let not_applied = run.not_applied.lock().unwrap().clone();
    let mut wrong = Vec::new();
    for (i, seen) in tickets.iter().enumerate() {
        let key = run.key(i);
        // One ticket per key at the desk; one send, plus one after each
        // "not applied" (a send the kill cut off before the desk wrote it).
        let effects = made.get(&reference(&key)).map_or(0, Vec::len);
        let ran = calls.get(&reference(&key)).copied().unwrap_or(0);
        let allowed = 1 + not_applied.get(&i).copied().unwrap_or(0);
        if effects != 1 || ran > allowed {
            wrong.push(format!("{key}: {effects} ticket(s) at the desk, sent {ran} times (at most {allowed} allowed)"));
        }
        if seen.len() != 1 {
            wrong.push(format!(
                "{key}: clients were given {} different tickets: {seen:?}",
                seen.len()
            ));
        }
    }
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for op in ops_list(&configs[0]).await {
        *states.entry(op["state"].as_str().unwrap_or_default().to_string()).or_default() += 1;
    }
    for config in configs {
        toolgate(&["log", "verify", "--config", config.to_str().unwrap()]).await;
    }
    println!("{}: {faults} × {what}; {KEYS} keyed writes", run.name);
    for (answer, n) in run.answers.lock().unwrap().iter() {
        println!("  {n:>6}  {answer}");
    }
    println!(
        "  unknowns reconciled: {} applied, {} not applied; operations now {states:?}",
        unknowns.0, unknowns.1
    );
    println!(
        "  duplicate effects: {}; keys with more than one outcome: {}; the log verifies",
        wrong.iter().filter(|w| w.contains("sent")).count(),
        wrong.iter().filter(|w| w.contains("different")).count()
    );
    assert!(
        odd.is_empty(),
        "{} answers no fault may give; the first: {:?}",
        odd.len(),
        &odd[..odd.len().min(10)]
    );
    assert!(
        wrong.is_empty(),
        "{} keys went wrong; the first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    assert!(
        states.keys().all(|s| matches!(s.as_str(), "completed" | "reconciled_applied")),
        "operations left unsettled: {states:?}"
    );
    let panicked = panics(logs);
    assert!(panicked.is_empty(), "{panicked:?}");
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

async fn support_at(addr: SocketAddr, state: &Path, log: &Path) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["atlas", "support", "--http", &addr.to_string(), "--state"]).arg(state);
    spawn_listening(cmd, log, "serving support on").await
}

fn seed() -> u64 {
    std::env::var("TOOLGATE_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
    })
}

fn folders(name: &str) -> (Option<tempfile::TempDir>, PathBuf, PathBuf, PathBuf) {
    let (keep, dir) = workdir(name);
    let (support, logs) = (dir.join("support"), dir.join("logs"));
    std::fs::create_dir_all(&logs).unwrap();
    (keep, dir, support, logs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the fault run: scripts/faults"]
async fn upstream_killed_and_restarted() {
    let mut rng = Rng::new(seed());
    let (_keep, dir, support_state, logs) = folders("fault-upstream");
    let addr = free_addr();
    let mut support = Some(support_at(addr, &support_state, &logs.join("support-01.log")).await);
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, gateway_config(&format!("http://{addr}/mcp"), None, "automatic"))
        .unwrap();
    let gateway = start_gateway(&config, &logs.join("gateway.log")).await;
    let run = Run::new("upstream", vec![gateway.url.clone()]);
    let writing = tokio::spawn(writers(run.clone()));
    let mut kills = 0;
    while !run.done.load(SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.range(300, 1500))).await;
        run.busy().await;
        support.take().unwrap().sigkill().await;
        kills += 1;
        tokio::time::sleep(Duration::from_millis(rng.range(100, 1000))).await;
        support = Some(
            support_at(addr, &support_state, &logs.join(format!("support-{:02}.log", kills + 1)))
                .await,
        );
    }
    writing.await.unwrap();
    let unknowns = settle_all(&run, std::slice::from_ref(&config)).await;
    checks_hold(
        &run,
        &support_state,
        &[config],
        kills,
        "the support desk SIGKILLed and restarted",
        unknowns,
        &logs,
    )
    .await;
    drop((gateway, support));
}

/// A PostgreSQL cluster of the test's own (initdb, as the `postgres` user
/// when run as root), so restarting it disturbs nothing else.
struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
}

impl Cluster {
    fn pg(&self, tool: &str, args: &[&str]) -> std::process::Output {
        let as_root = unsafe { libc::geteuid() } == 0;
        let mut cmd = if as_root {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(tool));
            c
        } else {
            std::process::Command::new(self.bin.join(tool))
        };
        let out = cmd.args(args).output().unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn start(dir: &Path) -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| {
                d.flatten().map(|e| e.path().join("bin")).find(|b| b.join("initdb").exists())
            })
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql");
        let data = dir.join("pg");
        std::fs::create_dir_all(&data).unwrap();
        if unsafe { libc::geteuid() } == 0 {
            let status = std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data)
                .status()
                .unwrap();
            assert!(status.success());
            // The cluster's folder must be reachable by its owner.
            let _ = std::process::Command::new("chmod").args(["o+x"]).arg(dir).status();
        }
        let cluster = Cluster { bin, data, port: free_addr().port() };
        cluster.pg(
            "initdb",
            &["-D", cluster.data.to_str().unwrap(), "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        cluster.ctl(&["start", "-w"]);
        cluster
    }

    fn ctl(&self, args: &[&str]) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on",
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log");
        let mut all =
            vec!["-D", self.data.to_str().unwrap(), "-o", &opts, "-l", log.to_str().unwrap()];
        all.extend_from_slice(args);
        self.pg("pg_ctl", &all);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "stop", "-m", "immediate"])
            .output();
        let _ = std::process::Command::new(self.bin.join("pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "stop", "-m", "immediate"])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the fault run: scripts/faults"]
async fn postgres_restarted_under_replicas() {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let mut rng = Rng::new(seed());
    let (_keep, dir, support_state, logs) = folders("fault-postgres");
    let cluster = Cluster::start(&dir);
    let support = start_support(&support_state, &logs.join("support.log")).await;
    let mut configs = Vec::new();
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        if name == "b" {
            // One requestState key for both, as replicas share it.
            let state = folder.join("state");
            std::fs::DirBuilder::new().mode(0o700).create(&state).unwrap();
            std::fs::copy(dir.join("a/state/requeststate.key"), state.join("requeststate.key"))
                .unwrap();
            std::fs::set_permissions(
                state.join("requeststate.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
        }
        let config = folder.join("toolgate.toml");
        std::fs::write(&config, gateway_config(&support.url, Some(&cluster.url()), "automatic"))
            .unwrap();
        replicas.push(start_gateway(&config, &logs.join(format!("{name}.log"))).await);
        configs.push(config);
    }
    let run = Run::new("postgres", replicas.iter().map(|r| r.url.clone()).collect());
    let writing = tokio::spawn(writers(run.clone()));
    let mut restarts = 0;
    while !run.done.load(SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.range(1000, 3000))).await;
        run.busy().await;
        cluster.ctl(&["restart", "-m", "immediate", "-w"]);
        restarts += 1;
    }
    writing.await.unwrap();
    let unknowns = settle_all(&run, &configs).await;
    checks_hold(
        &run,
        &support_state,
        &configs,
        restarts,
        "PostgreSQL restarted (immediate) under two replicas",
        unknowns,
        &logs,
    )
    .await;
    drop((replicas, support));
}

/// A tmpfs of `size` at `at` (root only).
fn mount_tmpfs(at: &Path, size: &str) {
    std::fs::create_dir_all(at).unwrap();
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
        .arg(at)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mounting a tmpfs at {} (the fault run needs root): {}",
        at.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn remount(at: &Path, opts: &str) -> Result<(), String> {
    let out = std::process::Command::new("mount")
        .args(["-o", &format!("remount,{opts}")])
        .arg(at)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Unmounts at drop (after the gateway is gone: declare it first).
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem of `at` to its last byte; returns the filler.
fn fill(at: &Path) -> PathBuf {
    use std::io::Write;
    let filler = at.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let mut byte = [0u8; 1];
    while f.write_all(&byte[..]).is_ok() {
        byte[0] = byte[0].wrapping_add(1);
    }
    filler
}

/// A support desk, and a gateway config whose state dir is a tmpfs of its own.
struct OnTmpfs {
    _keep: Option<tempfile::TempDir>,
    support_state: PathBuf,
    logs: PathBuf,
    support: Proc,
    state: PathBuf,
    /// Unmounted after the gateway (declared after this) is gone.
    _mount: Mount,
    config: PathBuf,
}

async fn on_tmpfs(name: &str, size: &str) -> OnTmpfs {
    let (_keep, dir, support_state, logs) = folders(name);
    let support = start_support(&support_state, &logs.join("support.log")).await;
    let state = dir.join("state");
    mount_tmpfs(&state, size);
    let _mount = Mount(state.clone());
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, gateway_config(&support.url, None, "automatic")).unwrap();
    OnTmpfs { _keep, support_state, logs, support, state, _mount, config }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the fault run: scripts/faults"]
async fn disk_full_under_sqlite() {
    let mut rng = Rng::new(seed());
    let OnTmpfs { _keep, support_state, logs, support, state, _mount, config } =
        on_tmpfs("fault-disk", "32m").await;
    let gateway = start_gateway(&config, &logs.join("gateway.log")).await;
    let run = Run::new("disk", vec![gateway.url.clone()]);
    let writing = tokio::spawn(writers(run.clone()));
    let mut fills = 0;
    while !run.done.load(SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.range(500, 1500))).await;
        run.busy().await;
        let filler = fill(&state);
        fills += 1;
        tokio::time::sleep(Duration::from_millis(rng.range(300, 1500))).await;
        std::fs::remove_file(filler).unwrap();
    }
    writing.await.unwrap();
    let unknowns = settle_all(&run, std::slice::from_ref(&config)).await;
    let full = run
        .answers
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("fault: refused"))
        .map(|(_, n)| n)
        .sum::<usize>();
    checks_hold(
        &run,
        &support_state,
        &[config],
        fills,
        "the state dir's tmpfs filled and freed",
        unknowns,
        &logs,
    )
    .await;
    assert!(full > 0, "no write met a full disk: the fault did not strike");
    drop((gateway, support));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the fault run: scripts/faults"]
async fn read_only_ledger() {
    let mut rng = Rng::new(seed());
    let OnTmpfs { _keep, support_state, logs, support, state, _mount, config } =
        on_tmpfs("fault-readonly", "64m").await;
    let mut gateway = start_gateway(&config, &logs.join("gateway-01.log")).await;
    let run = Run::new("readonly", vec![gateway.url.clone()]);
    let writing = tokio::spawn(writers(run.clone()));
    let (mut rounds, mut refused_to_start) = (0, Vec::new());
    while !run.done.load(SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.range(1000, 3000))).await;
        // Killed, then started on a read-only ledger: it must say so and stop.
        run.busy().await;
        run.urls.lock().unwrap().clear();
        gateway.sigkill().await;
        rounds += 1;
        remount(&state, "ro").expect("remounting read-only with no writer");
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["serve", "--config"]).arg(&config).env("TG_DANA_TOKEN", DANA_TOKEN);
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::task::spawn_blocking(move || cmd.output()),
        )
        .await
        .expect("a gateway on a read-only ledger answers within 30 s")
        .unwrap()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().to_string();
        assert!(
            !out.status.success() && said.contains("read-only"),
            "a gateway on a read-only ledger must stop at once and say why:\n{stderr}"
        );
        refused_to_start.push(said);
        remount(&state, "rw").unwrap();
        gateway =
            start_gateway(&config, &logs.join(format!("gateway-{:02}.log", rounds + 1))).await;
        *run.urls.lock().unwrap() = vec![gateway.url.clone()];
    }
    writing.await.unwrap();
    let unknowns = settle_all(&run, std::slice::from_ref(&config)).await;
    println!(
        "a gateway started on the read-only ledger said: {:?}",
        refused_to_start.iter().collect::<BTreeSet<_>>()
    );
    checks_hold(
        &run,
        &support_state,
        &[config],
        rounds,
        "killed, started on a read-only ledger (refused), then writable again",
        unknowns,
        &logs,
    )
    .await;
    drop((gateway, support));
}
