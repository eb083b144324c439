//! Operations under crashes and replicas, with real processes:
//!
//! 1. `keyed_writes_survive_sigkill`: a gateway child on SQLite takes keyed
//!    create_ticket writes while it is SIGKILLed at random moments (≥ 50
//!    kills over 1,000 keys), restarted on the same state, and every key is
//!    then retried until it has a final answer (reconciling the unknown
//!    ones with `toolgate ops reconcile`). Exactly one upstream invocation
//!    per key, no outcome a client was given lost or changed, every
//!    interrupted operation surfaced as completed or unknown.
//! 2. `replicas_on_postgres_run_each_key_once_and_share_approvals`: two
//!    gateway processes on one PostgreSQL schema race the same 1,000 keys:
//!    one invocation per key, the same ticket through both; then an
//!    approval opened on one replica, granted through the other's admin
//!    API, runs once and is replayed by the first.
//!
//! The support desk upstream (`toolgate atlas support`) logs every
//! create_ticket invocation to `support-calls.jsonl` — and deduplicates on
//! client_reference itself, so counting tickets alone would hide a second
//! send: the tests count invocations.
//!
//! Figures are printed (run with `--nocapture` to see them). Environment:
//! `TOOLGATE_CRASH_SEED` replays a crash run; `TOOLGATE_TEST_POSTGRES`
//! overrides `postgres://postgres@127.0.0.1:5432/test`.

mod ops_common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ops_common::*;
use serde_json::{Value, json};
use tokio::sync::watch;

// ───────────────────────────── 1. crash safety ─────────────────────────────

const KEYS: usize = 1000;
const MIN_KILLS: usize = 50;
/// Writes in flight at once during the crashes.
const IN_FLIGHT: usize = 8;
/// How long a gateway generation lives before its SIGKILL.
const UPTIME_MS: (u64, u64) = (40, 200);
/// How many never-tried keys each generation may start: about
/// KEYS / MIN_KILLS on average, so first attempts are spread over all the
/// kills instead of being over after the first few. They are released
/// evenly over the generation's planned uptime, so its kill tends to find
/// first attempts in flight (the windows around reserve, dispatch and
/// finish), not only retries of keys already started.
const NEW_PER_GENERATION: (u64, u64) = (5, 35);

fn crash_key(i: usize) -> String {
    format!("crash-{i:04}")
}

/// What the chaos phase shares between the killer and the writers.
struct Chaos {
    /// The serving gateway (generation, URL), or None while it is down.
    gateway: watch::Sender<Option<(u64, String)>>,
    next_key: AtomicUsize,
    /// Keys taken but refused at connect (nothing sent): tried again first.
    requeue: Mutex<Vec<usize>>,
    /// This generation's plan: when it began serving, how long it lives,
    /// how many new keys it may start.
    plan: Mutex<(Instant, u64, usize)>,
    started_in_generation: AtomicUsize,
    /// Set by the killer while it waits for a first attempt in flight.
    want_first: AtomicBool,
    /// A request for the key was sent (answered or cut off by a kill).
    attempted: Vec<AtomicBool>,
    /// A request for the key was cut off by a kill after it was sent.
    interrupted: Vec<AtomicBool>,
    in_flight: AtomicUsize,
    first_attempts_in_flight: AtomicUsize,
    stop: AtomicBool,
    writes: AtomicUsize,
    cut_off: AtomicUsize,
    /// Writes cut off, per generation of the gateway they were sent to.
    cut_by_generation: Mutex<BTreeMap<u64, usize>>,
    answers: Mutex<BTreeMap<String, usize>>,
    /// Every ticket answer a client got, per key: (ticket_id, replayed, op state).
    seen: Mutex<Vec<Vec<(String, bool, String)>>>,
    /// Answers no client should ever get (wrong ticket, odd refusal, HTTP error…).
    odd: Mutex<Vec<String>>,
}

impl Chaos {
    fn all_attempted(&self) -> bool {
        self.next_key.load(SeqCst) >= KEYS
            && self.requeue.lock().unwrap().is_empty()
            && self.attempted.iter().all(|a| a.load(SeqCst))
    }

    /// The next write: a requeued key, a new key within this generation's
    /// budget, else a retry of a random key already started (replays, and
    /// "in progress"/"unknown" for those a kill cut off, also under kills).
    fn pick(&self, rng: &mut Rng) -> Option<(usize, bool)> {
        if let Some(i) = self.requeue.lock().unwrap().pop() {
            return Some((i, true));
        }
        let (since, uptime_ms, budget) = *self.plan.lock().unwrap();
        let elapsed = (since.elapsed().as_millis() as u64 + 1).min(uptime_ms);
        let allowed = (budget as u64 * elapsed).div_ceil(uptime_ms) as usize;
        let started = self.started_in_generation.load(SeqCst);
        // The killer may ask for one more new key, to kill while it runs.
        let allowed = allowed + self.want_first.load(SeqCst) as usize;
        if self.next_key.load(SeqCst) < KEYS
            && started < allowed
            && self
                .started_in_generation
                .compare_exchange(started, started + 1, SeqCst, SeqCst)
                .is_ok()
        {
            let i = self.next_key.fetch_add(1, SeqCst);
            if i < KEYS {
                return Some((i, true));
            }
        }
        let started = self.next_key.load(SeqCst).min(KEYS);
        (started > 0).then(|| (rng.range(0, started as u64 - 1) as usize, false))
    }

    /// Records one answer for key `i`; anything unexpected goes to `odd`.
    fn record(&self, i: usize, status: u16, body: &Value, phase: &str) -> Answer {
        let key = crash_key(i);
        let answer = classify(body);
        if status != 200 {
            self.odd.lock().unwrap().push(format!("{phase} {key}: HTTP {status}: {body}"));
        }
        let label = match &answer {
            Answer::Ticket { ticket_id, client_reference, replayed, state, op_key, .. } => {
                // The answer must be this key's operation and this key's ticket.
                if client_reference != &reference(&key) || op_key != &key {
                    self.odd
                        .lock()
                        .unwrap()
                        .push(format!("{phase} {key}: another key's answer: {body}"));
                }
                // The desk marks a second send of a reference it already
                // took: a dispatch of an effect that existed.
                if body["result"]["structuredContent"]["deduplicated"] == json!(true) {
                    self.odd
                        .lock()
                        .unwrap()
                        .push(format!("{phase} {key}: the desk saw this reference before: {body}"));
                }
                self.seen.lock().unwrap()[i].push((ticket_id.clone(), *replayed, state.clone()));
                match (replayed, state.as_str()) {
                    (false, _) => "ticket (fresh)".to_string(),
                    (true, s) => format!("ticket (replay of {s})"),
                }
            }
            Answer::Refused { reason, .. } => {
                // "in progress" (held by a gateway that may be dead, until
                // its lease lapses) and "unknown" (sent, no answer recorded)
                // are what a crash leaves; nothing else is.
                if !matches!(reason.as_str(), "operation_in_progress" | "outcome_unknown") {
                    self.odd
                        .lock()
                        .unwrap()
                        .push(format!("{phase} {key}: refused {reason}: {body}"));
                }
                reason.clone()
            }
            Answer::Other(v) => {
                self.odd.lock().unwrap().push(format!("{phase} {key}: unexpected answer: {v}"));
                "other".to_string()
            }
        };
        *self.answers.lock().unwrap().entry(format!("{phase}: {label}")).or_default() += 1;
        answer
    }
}

/// A writer of the chaos phase: one keyed write at a time, whatever
/// generation of the gateway is serving, until the killer says stop.
async fn writer(chaos: Arc<Chaos>, seed: u64) {
    let client = client();
    let mut rng = Rng::new(seed);
    let mut gateway = chaos.gateway.subscribe();
    while !chaos.stop.load(SeqCst) {
        let Some((generation, url)) = gateway.wait_for(Option::is_some).await.unwrap().clone()
        else {
            unreachable!()
        };
        let Some((i, first)) = chaos.pick(&mut rng) else {
            tokio::task::yield_now().await;
            continue;
        };
        let key = crash_key(i);
        chaos.in_flight.fetch_add(1, SeqCst);
        if first {
            chaos.first_attempts_in_flight.fetch_add(1, SeqCst);
        }
        let sent = call(&client, &url, &ticket_args(&key), Some(&key), json!({}), None).await;
        chaos.in_flight.fetch_sub(1, SeqCst);
        if first {
            chaos.first_attempts_in_flight.fetch_sub(1, SeqCst);
        }
        match sent {
            // Refused at connect: this generation is dead and nothing was
            // sent. Wait for the next one; a first attempt is not one yet.
            Err(e) if e.is_connect() => {
                if first {
                    chaos.requeue.lock().unwrap().push(i);
                }
                // Bounded: should a live gateway ever refuse a connection,
                // the writer tries again rather than wait for a kill that
                // may not come (the last generation is never killed).
                let next = gateway.wait_for(|g| matches!(g, Some((n, _)) if *n != generation));
                let _ = tokio::time::timeout(Duration::from_millis(500), next).await;
            }
            Err(e) if e.is_builder() => {
                panic!("{key}: the request could not be built for {url}: {e}")
            }
            // Sent, and the kill cut the answer off: its effect is for the
            // ledger to tell after the restart.
            Err(e) => {
                *chaos
                    .answers
                    .lock()
                    .unwrap()
                    .entry(format!("chaos: cut off ({})", error_kind(&e)))
                    .or_default() += 1;
                chaos.writes.fetch_add(1, SeqCst);
                chaos.cut_off.fetch_add(1, SeqCst);
                *chaos.cut_by_generation.lock().unwrap().entry(generation).or_default() += 1;
                chaos.attempted[i].store(true, SeqCst);
                chaos.interrupted[i].store(true, SeqCst);
            }
            Ok((status, body)) => {
                chaos.writes.fetch_add(1, SeqCst);
                chaos.attempted[i].store(true, SeqCst);
                chaos.record(i, status, &body, "chaos");
            }
        }
    }
}

/// The innermost cause of a transport error, for the figures.
fn error_kind(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

struct KillStats {
    kills: usize,
    kills_with_writes_in_flight: usize,
    kills_with_first_attempts_in_flight: usize,
    generations: u64,
}

/// Lets each generation of the gateway live 40–200 ms, then SIGKILLs it
/// (with writes in flight) and starts the next on the same config and
/// state dir, until every key was attempted and ≥ MIN_KILLS kills happened.
/// Leaves the last generation serving and returns it.
async fn killer(
    chaos: Arc<Chaos>,
    config: PathBuf,
    logs: PathBuf,
    first: Proc,
    seed: u64,
) -> (Proc, KillStats) {
    let mut rng = Rng::new(seed);
    let mut proc = first;
    let mut stats = KillStats {
        kills: 0,
        kills_with_writes_in_flight: 0,
        kills_with_first_attempts_in_flight: 0,
        generations: 1,
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let uptime_ms = rng.range(UPTIME_MS.0, UPTIME_MS.1);
        *chaos.plan.lock().unwrap() = (
            Instant::now(),
            uptime_ms,
            rng.range(NEW_PER_GENERATION.0, NEW_PER_GENERATION.1) as usize,
        );
        chaos.started_in_generation.store(0, SeqCst);
        chaos.gateway.send_replace(Some((stats.generations, proc.url.clone())));
        tokio::time::sleep(Duration::from_millis(uptime_ms)).await;
        if chaos.all_attempted() && stats.kills >= MIN_KILLS {
            chaos.stop.store(true, SeqCst);
            return (proc, stats);
        }
        assert!(
            Instant::now() < deadline,
            "the crash phase did not finish in 240 s: {} kills, {} of {KEYS} keys started; last log:\n{}",
            stats.kills,
            chaos.next_key.load(SeqCst),
            tail(&proc.log, 20)
        );
        // A kill is meant to land on work: wait (briefly) for a write in
        // flight — every other kill, for a first attempt in flight, so that
        // kills land on first attempts however fast this machine answers.
        let waiting = Instant::now();
        let first_wanted = stats.kills % 2 == 0 && !chaos.all_attempted();
        chaos.want_first.store(first_wanted, SeqCst);
        while waiting.elapsed() < Duration::from_secs(2) {
            let (busy, first) =
                (chaos.in_flight.load(SeqCst), chaos.first_attempts_in_flight.load(SeqCst));
            if (first_wanted && first > 0)
                || (busy > 0 && (!first_wanted || waiting.elapsed() > Duration::from_millis(300)))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        chaos.want_first.store(false, SeqCst);
        let (busy, first) =
            (chaos.in_flight.load(SeqCst), chaos.first_attempts_in_flight.load(SeqCst));
        chaos.gateway.send_replace(None);
        proc.sigkill().await;
        stats.kills += 1;
        stats.kills_with_writes_in_flight += usize::from(busy > 0);
        stats.kills_with_first_attempts_in_flight += usize::from(first > 0);
        stats.generations += 1;
        proc = start_gateway(&config, &logs.join(format!("gateway-{:03}.log", stats.generations)))
            .await;
    }
}

/// How the final retries of one key went.
#[derive(Default, Debug)]
struct Settled {
    /// The first answer that was not "in progress".
    first_final: String,
    in_progress_retries: usize,
    reconciled_applied: usize,
    reconciled_not_applied: usize,
    ticket_id: String,
    fresh: bool,
}

/// Retries key `i` (same key, same payload) until it has a ticket: waits out
/// "in progress", reconciles "unknown" with the operator CLI.
async fn settle(
    chaos: &Chaos,
    client: &reqwest::Client,
    url: &str,
    config: &Path,
    i: usize,
) -> Settled {
    let key = crash_key(i);
    let mut s = Settled::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "{key} has no final answer after 60 s: {s:?}");
        let (status, body) = call(client, url, &ticket_args(&key), Some(&key), json!({}), None)
            .await
            .unwrap_or_else(|e| panic!("{key}: the gateway is up, yet: {e}"));
        let answer = chaos.record(i, status, &body, "retry");
        if s.first_final.is_empty()
            && !matches!(&answer, Answer::Refused { reason, .. } if reason == "operation_in_progress")
        {
            s.first_final = match &answer {
                Answer::Ticket { replayed: false, .. } => "fresh".into(),
                Answer::Ticket { state, .. } => format!("replay of {state}"),
                Answer::Refused { reason, .. } => reason.clone(),
                Answer::Other(_) => "other".into(),
            };
        }
        match answer {
            Answer::Ticket { ticket_id, replayed, .. } => {
                s.ticket_id = ticket_id;
                s.fresh = !replayed;
                return s;
            }
            Answer::Refused { reason, retry_after_ms, .. } if reason == "operation_in_progress" => {
                // Held by a killed gateway: its lease (upstream_timeout_ms
                // + 5 s) has to lapse before the operation counts as unknown.
                s.in_progress_retries += 1;
                let wait = retry_after_ms
                    .unwrap_or_else(|| panic!("in progress without retry_after_ms: {body}"));
                tokio::time::sleep(Duration::from_millis(wait.clamp(10, 8_000))).await;
            }
            Answer::Refused { reason, operation_id, .. } if reason == "outcome_unknown" => {
                let id = operation_id
                    .unwrap_or_else(|| panic!("outcome_unknown without operation_id: {body}"));
                let done = ops_reconcile(config, &id).await;
                match done["applied"].as_bool() {
                    Some(true) => s.reconciled_applied += 1,
                    Some(false) => s.reconciled_not_applied += 1,
                    None => panic!("ops reconcile {id}: no `applied`: {done}"),
                }
            }
            other => panic!("{key}: no final answer possible from {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_writes_survive_sigkill() {
    let _serial = serial();
    let started = Instant::now();
    let seed = std::env::var("TOOLGATE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    println!(
        "crash test seed {seed} (TOOLGATE_CRASH_SEED={seed} replays its random choices; timings still vary)"
    );
    let (_dir, dir) = workdir("crash");
    let support_state = dir.join("support");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // The upstream lives through every kill of the gateway: an effect it
    // took stays taken, which is what the retries must not repeat.
    let support = start_support(&support_state, &logs.join("support.log")).await;
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, gateway_config(&support.url, None, "automatic")).unwrap();
    let first = start_gateway(&config, &logs.join("gateway-001.log")).await;

    let chaos = Arc::new(Chaos {
        gateway: watch::channel(None).0,
        next_key: AtomicUsize::new(0),
        requeue: Mutex::new(Vec::new()),
        plan: Mutex::new((Instant::now(), 1, 0)),
        started_in_generation: AtomicUsize::new(0),
        want_first: AtomicBool::new(false),
        attempted: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        interrupted: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        in_flight: AtomicUsize::new(0),
        first_attempts_in_flight: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        writes: AtomicUsize::new(0),
        cut_off: AtomicUsize::new(0),
        cut_by_generation: Mutex::new(BTreeMap::new()),
        answers: Mutex::new(BTreeMap::new()),
        seen: Mutex::new(vec![Vec::new(); KEYS]),
        odd: Mutex::new(Vec::new()),
    });

    // ── Chaos: writes from IN_FLIGHT writers, kills from the killer. ──
    let writers: Vec<_> = (0..IN_FLIGHT)
        .map(|w| {
            tokio::spawn(writer(
                chaos.clone(),
                seed ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ))
        })
        .collect();
    let (gateway, kills) =
        tokio::spawn(killer(chaos.clone(), config.clone(), logs.clone(), first, seed))
            .await
            .unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let chaos_took = started.elapsed();
    // What the upstream had taken when the crashes ended: an effect listed
    // here must never be run again, nor be declared "not applied".
    let taken_during_chaos = invocations(&support_state);
    let chaos_tickets: Vec<Vec<(String, bool, String)>> = chaos.seen.lock().unwrap().clone();

    // ── Recovery: the gateway stays up; every key is retried until final. ──
    let settled: Arc<Mutex<BTreeMap<usize, Settled>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let retriers: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (chaos, settled, next, url, config) =
                (chaos.clone(), settled.clone(), next.clone(), gateway.url.clone(), config.clone());
            tokio::spawn(async move {
                let client = client();
                loop {
                    let i = next.fetch_add(1, SeqCst);
                    if i >= KEYS {
                        break;
                    }
                    let s = settle(&chaos, &client, &url, &config, i).await;
                    settled.lock().unwrap().insert(i, s);
                }
            })
        })
        .collect();
    for r in retriers {
        r.await.unwrap();
    }
    let settled = std::mem::take(&mut *settled.lock().unwrap());
    let recovery_took = started.elapsed() - chaos_took;

    // ── Figures. ──
    let count = |f: &dyn Fn(&Settled) -> bool| settled.values().filter(|s| f(s)).count();
    let interrupted = chaos.interrupted.iter().filter(|b| b.load(SeqCst)).count();
    println!(
        "crash: {} kills ({} with writes in flight, {} with first attempts in flight), {} \
            generations; {} keyed writes sent during the kills ({} cut off by a kill, {} keys \
            interrupted); chaos {:.1} s, recovery {:.1} s",
        kills.kills,
        kills.kills_with_writes_in_flight,
        kills.kills_with_first_attempts_in_flight,
        kills.generations,
        chaos.writes.load(SeqCst),
        chaos.cut_off.load(SeqCst),
        interrupted,
        chaos_took.as_secs_f64(),
        recovery_took.as_secs_f64()
    );
    for (what, n) in chaos.answers.lock().unwrap().iter() {
        println!("  answers {what}: {n}");
    }
    let mut firsts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in settled.values() {
        *firsts.entry(s.first_final.as_str()).or_default() += 1;
    }
    println!("  recovery, first final answer per key: {firsts:?}");
    println!(
        "  recovery: {} in-progress retries over {} keys; reconciled: {} applied, {} not applied (then run once); {} keys ran fresh in recovery",
        settled.values().map(|s| s.in_progress_retries).sum::<usize>(),
        count(&|s| s.in_progress_retries > 0),
        count(&|s| s.reconciled_applied > 0),
        count(&|s| s.reconciled_not_applied > 0),
        count(&|s| s.fresh)
    );

    let most_cut = chaos
        .cut_by_generation
        .lock()
        .unwrap()
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(g, n)| (*g, *n));
    println!(
        "  most writes cut off in one generation: {most_cut:?} (generation, writes); at most {IN_FLIGHT} are in flight at a kill"
    );

    // ── Assertions. ──
    // No generation of the gateway died of a panic (only of our SIGKILLs).
    let panicked = panics(&logs);
    assert!(panicked.is_empty(), "a process panicked:\n{}", panicked.join("\n"));
    let odd = chaos.odd.lock().unwrap();
    assert!(
        odd.is_empty(),
        "{} unexpected answers, first ones:\n{}",
        odd.len(),
        odd.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(kills.kills >= MIN_KILLS, "only {} kills", kills.kills);
    // New keys are metered out over the generations, so many kills land on
    // first attempts (not only on retries of keys already started).
    assert!(
        kills.kills_with_first_attempts_in_flight >= MIN_KILLS / 2,
        "only {} kills landed on first attempts in flight",
        kills.kills_with_first_attempts_in_flight
    );
    assert!(
        chaos.attempted.iter().all(|a| a.load(SeqCst)),
        "every key was attempted during the kills"
    );
    assert!(chaos.writes.load(SeqCst) >= KEYS);

    // (a) Exactly one upstream invocation per key: the gateway never sent a
    // write twice. A key whose first attempt never reached the upstream
    // (killed before dispatch, or before the send) has its one invocation
    // from the retry. Nothing else was invoked.
    let calls = invocations(&support_state);
    let twice: Vec<_> = calls.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "invoked more than once: {twice:?}");
    let expected: BTreeSet<String> = (0..KEYS).map(|i| reference(&crash_key(i))).collect();
    assert_eq!(
        calls.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "one invocation for each key, none for anything else"
    );

    // (b) One ticket per key, 1,000 in all.
    let tickets = tickets(&support_state);
    assert_eq!(jsonl(&support_state.join("support-tickets.jsonl")).len(), KEYS);
    assert_eq!(tickets.keys().cloned().collect::<BTreeSet<_>>(), expected);

    let seen = chaos.seen.lock().unwrap();
    for i in 0..KEYS {
        let key = crash_key(i);
        let reference = reference(&key);
        let file_ticket = &tickets[&reference][0];
        let s = &settled[&i];
        // (c) Every ticket any client ever got for the key is the key's
        // ticket: no outcome lost, changed, or mixed up with another key's.
        for (ticket, _, _) in &seen[i] {
            assert_eq!(
                ticket, file_ticket,
                "{key}: a client got {ticket}, the desk has {file_ticket}"
            );
        }
        assert_eq!(&s.ticket_id, file_ticket, "{key}");
        // At most one answer ever came from a dispatch; all others replayed.
        assert!(
            seen[i].iter().filter(|(_, replayed, _)| !replayed).count() <= 1,
            "{key}: dispatched twice per its answers: {:?}",
            seen[i]
        );
        // No recorded outcome lost: a key whose result a client was given
        // during the kills is replayed as that recorded result afterwards,
        // never "unknown" again.
        if !chaos_tickets[i].is_empty() {
            assert_eq!(
                s.first_final, "replay of completed",
                "{key}: a client had its result {:?}, then the gateway answered {s:?}",
                chaos_tickets[i]
            );
        }
        // An effect the upstream had taken is never run again nor declared
        // not applied: it surfaces as completed or as unknown (reconciled
        // as applied).
        if taken_during_chaos.contains_key(&reference) {
            assert!(
                !s.fresh && s.reconciled_not_applied == 0,
                "{key}: taken upstream during the kills, yet {s:?}"
            );
            assert!(
                ["replay of completed", "outcome_unknown"].contains(&s.first_final.as_str()),
                "{key}: {s:?}"
            );
        }
        // Every write a kill cut off surfaced as completed or unknown, or
        // (never dispatched) ran now, once.
        if chaos.interrupted[i].load(SeqCst) {
            assert!(
                ["replay of completed", "outcome_unknown", "fresh"]
                    .contains(&s.first_final.as_str()),
                "{key}: {s:?}"
            );
        }
    }

    // (d) The ledger: one operation per key, each completed or reconciled as applied.
    let ops = ops_list(&config).await;
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for op in &ops {
        *states.entry(op["state"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let op_keys: BTreeSet<String> =
        ops.iter().map(|o| o["key"].as_str().unwrap().to_string()).collect();
    println!(
        "  ledger: {} operations {states:?}; {} reserved more than once; {} resolved by the reconciler",
        ops.len(),
        ops.iter().filter(|o| o["attempts"].as_i64() > Some(1)).count(),
        ops.iter().filter(|o| !o["resolved_by"].is_null()).count()
    );
    assert_eq!(ops.len(), KEYS, "one operation per key");
    assert_eq!(op_keys, (0..KEYS).map(crash_key).collect::<BTreeSet<_>>());
    assert!(
        ops.iter().all(|o| matches!(o["state"].as_str(), Some("completed" | "reconciled_applied"))),
        "{states:?}"
    );
    assert_eq!(
        states.get("reconciled_applied").copied().unwrap_or(0),
        count(&|s| s.reconciled_applied > 0)
    );

    // (e) The receipt log survived every kill whole: it verifies, and each
    // key's settled operation has the receipt of its settlement (a write's
    // receipts commit with its state, so none can be missing).
    let verified = toolgate(&["log", "verify", "--config", config.to_str().unwrap()]).await;
    assert!(verified.contains("log verified"), "{verified}");
    let receipts: Value = serde_json::from_str(
        &toolgate(&[
            "receipts",
            "list",
            "--json",
            "--limit",
            "10000000",
            "--config",
            config.to_str().unwrap(),
        ])
        .await,
    )
    .unwrap();
    let receipts = receipts.as_array().unwrap();
    let settled: BTreeSet<(String, String)> = receipts
        .iter()
        .filter_map(|r| {
            let op = &r["receipt"]["operation"];
            let state = op["state"].as_str()?;
            matches!(state, "completed" | "reconciled_applied")
                .then(|| (op["key"].as_str().unwrap().to_string(), state.to_string()))
        })
        .collect();
    for op in &ops {
        let key =
            (op["key"].as_str().unwrap().to_string(), op["state"].as_str().unwrap().to_string());
        assert!(settled.contains(&key), "no receipt of {key:?}");
    }
    println!(
        "  receipt log: {} receipts, verified; every settled operation has its receipt",
        receipts.len()
    );
    println!("crash test took {:.1} s", started.elapsed().as_secs_f64());
    drop((gateway, support));
}

// ───────────────────────── 2. replicas on PostgreSQL ─────────────────────────

const RACE_KEYS: usize = 1000;
/// Keys raced at once (each sent to both replicas at the same moment).
const RACING: usize = 16;

fn race_key(i: usize) -> String {
    format!("race-{i:04}")
}

fn postgres_base() -> String {
    std::env::var("TOOLGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn psql(base: &str, sql: &str) -> Result<(), String> {
    let out = std::process::Command::new("psql")
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-X", base, "-c", sql])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A schema of its own, dropped at the end (after the replicas: declare it first).
struct Schema {
    base: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = psql(&self.base, &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// Sends key `i` to one replica; None when cut off (cannot happen here:
/// nothing is killed, so an error fails the test).
async fn race_call(client: &reqwest::Client, url: &str, i: usize) -> Value {
    let key = race_key(i);
    let (status, body) = call(client, url, &ticket_args(&key), Some(&key), json!({}), None)
        .await
        .unwrap_or_else(|e| panic!("{key} → {url}: {e}"));
    assert_eq!(status, 200, "{key} → {url}: {body}");
    body
}

/// Retries key `i` on one replica until it has a ticket (polling "in
/// progress" with a short backoff: the holder is alive and finishes soon,
/// well before the lease the retry_after_ms hint is based on).
async fn race_settle(
    client: &reqwest::Client,
    url: &str,
    i: usize,
    mut body: Value,
    in_progress: &AtomicUsize,
) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pause = Duration::from_millis(5);
    loop {
        match classify(&body) {
            Answer::Refused { reason, retry_after_ms, .. } if reason == "operation_in_progress" => {
                in_progress.fetch_add(1, SeqCst);
                assert!(
                    Instant::now() < deadline,
                    "{} still in progress after 30 s: {body}",
                    race_key(i)
                );
                tokio::time::sleep(
                    pause.min(Duration::from_millis(retry_after_ms.unwrap_or(1_000))),
                )
                .await;
                pause = (pause * 2).min(Duration::from_millis(200));
                body = race_call(client, url, i).await;
            }
            answer => return answer,
        }
    }
}

fn ticket_of(key: &str, answer: &Answer) -> (String, bool) {
    match answer {
        Answer::Ticket { ticket_id, client_reference, replayed, op_key, .. } => {
            assert_eq!(
                (client_reference.as_str(), op_key.as_str()),
                (reference(key).as_str(), key),
                "{key}: {answer:?}"
            );
            (ticket_id.clone(), *replayed)
        }
        other => panic!("{key}: no ticket: {other:?}"),
    }
}

/// Starts a replica: its own folder (config, state dir), the shared ledger.
async fn replica(folder: &Path, upstream: &str, ledger: &str, class: &str, log: &Path) -> Proc {
    let config = folder.join("toolgate.toml");
    std::fs::write(&config, gateway_config(upstream, Some(ledger), class)).unwrap();
    start_gateway(&config, log).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgres_run_each_key_once_and_share_approvals() {
    let _serial = serial();
    let started = Instant::now();
    let base = postgres_base();
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema =
        Schema { base: base.clone(), name: format!("tg_replicas_{}_{nanos}", std::process::id()) };
    psql(&base, &format!("CREATE SCHEMA {}", schema.name)).unwrap_or_else(|e| {
        panic!(
            "PostgreSQL does not answer at {base} (start it, or set TOOLGATE_TEST_POSTGRES): {e}"
        )
    });
    let sep = if base.contains('?') { '&' } else { '?' };
    let ledger = format!("{base}{sep}options=-csearch_path%3D{}", schema.name);

    let (_dir, dir) = workdir("replicas");
    let support_state = dir.join("support");
    let logs = dir.join("logs");
    let (a_dir, b_dir) = (dir.join("a"), dir.join("b"));
    for d in [&logs, &a_dir, &b_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let support = start_support(&support_state, &logs.join("support.log")).await;

    // Replica A first: it creates the requestState key. B gets a copy
    // (state dir 0700, key 0600, as the gateway demands), so a requestState
    // sealed by one replica opens on the other.
    let a = replica(&a_dir, &support.url, &ledger, "automatic", &logs.join("a-1.log")).await;
    let b_state = b_dir.join("state");
    std::fs::DirBuilder::new().mode(0o700).create(&b_state).unwrap();
    std::fs::copy(a_dir.join("state/requeststate.key"), b_state.join("requeststate.key")).unwrap();
    std::fs::set_permissions(
        b_state.join("requeststate.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let b = replica(&b_dir, &support.url, &ledger, "automatic", &logs.join("b-1.log")).await;

    // ── The race: every key to both replicas at the same moment. ──
    let next = Arc::new(AtomicUsize::new(0));
    let results: Arc<Mutex<BTreeMap<usize, (Value, Value)>>> = Arc::default();
    let racers: Vec<_> = (0..RACING)
        .map(|_| {
            let (next, results, a_url, b_url) =
                (next.clone(), results.clone(), a.url.clone(), b.url.clone());
            tokio::spawn(async move {
                let client = client();
                loop {
                    let i = next.fetch_add(1, SeqCst);
                    if i >= RACE_KEYS {
                        break;
                    }
                    let both =
                        tokio::join!(race_call(&client, &a_url, i), race_call(&client, &b_url, i));
                    results.lock().unwrap().insert(i, both);
                }
            })
        })
        .collect();
    for r in racers {
        r.await.unwrap();
    }
    let race_took = started.elapsed();
    let results = std::mem::take(&mut *results.lock().unwrap());

    // ── Then each "in progress" is retried on its replica until final. ──
    let first_in_progress: usize = results
        .values()
        .flat_map(|(x, y)| [x, y])
        .filter(|b| matches!(classify(b), Answer::Refused { reason, .. } if reason == "operation_in_progress"))
        .count();
    let queue = Arc::new(Mutex::new(results.into_iter().collect::<Vec<_>>()));
    let in_progress = Arc::new(AtomicUsize::new(0));
    let settlers: Vec<_> = (0..RACING)
        .map(|_| {
            let (queue, in_progress, a_url, b_url) =
                (queue.clone(), in_progress.clone(), a.url.clone(), b.url.clone());
            tokio::spawn(async move {
                let client = client();
                let mut out = Vec::new();
                loop {
                    let Some((i, (from_a, from_b))) = queue.lock().unwrap().pop() else { break };
                    let key = race_key(i);
                    let (ta, fresh_a) = ticket_of(
                        &key,
                        &race_settle(&client, &a_url, i, from_a, &in_progress).await,
                    );
                    let (tb, fresh_b) = ticket_of(
                        &key,
                        &race_settle(&client, &b_url, i, from_b, &in_progress).await,
                    );
                    out.push((key, ta, fresh_a, tb, fresh_b));
                }
                out
            })
        })
        .collect();
    let (mut won_by_a, mut won_by_b) = (0, 0);
    for settler in settlers {
        for (key, ta, fresh_a, tb, fresh_b) in settler.await.unwrap() {
            // Both replicas answer with the one ticket, and exactly one of
            // the two answers came from a dispatch.
            assert_eq!(ta, tb, "{key}: A said {ta}, B said {tb}");
            assert!(
                fresh_a != fresh_b,
                "{key}: exactly one replica dispatched (A fresh: {fresh_a}, B fresh: {fresh_b})"
            );
            won_by_a += usize::from(fresh_a);
            won_by_b += usize::from(fresh_b);
        }
    }
    assert_eq!(won_by_a + won_by_b, RACE_KEYS);
    println!(
        "replicas: {RACE_KEYS} keys raced on both replicas ({} requests, {RACING} keys at once) \
            in {:.1} s; won by A {won_by_a}, by B {won_by_b}; {first_in_progress} first answers \
            were \"in progress\", {} in-progress answers in all",
        RACE_KEYS * 2,
        race_took.as_secs_f64(),
        in_progress.load(SeqCst)
    );

    // One invocation per key upstream, one ticket per key.
    let calls = invocations(&support_state);
    let expected: BTreeSet<String> = (0..RACE_KEYS).map(|i| reference(&race_key(i))).collect();
    let twice: Vec<_> = calls.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "invoked more than once: {twice:?}");
    assert_eq!(calls.keys().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(jsonl(&support_state.join("support-tickets.jsonl")).len(), RACE_KEYS);
    let ops = ops_list(&a_dir.join("toolgate.toml")).await;
    assert_eq!(ops.len(), RACE_KEYS);
    assert!(ops.iter().all(|o| o["state"] == "completed"), "every raced operation completed");

    // ── Approvals across replicas: same schema, same key, create_ticket now requires approval. ──
    a.sigkill().await;
    b.sigkill().await;
    let a =
        replica(&a_dir, &support.url, &ledger, "requires_approval", &logs.join("a-2.log")).await;
    let b =
        replica(&b_dir, &support.url, &ledger, "requires_approval", &logs.join("b-2.log")).await;
    let client = client();
    let args = ticket_args("approved-0001");
    let approved_ref = reference("approved-0001");
    let ask = |url: String, extra: Value| {
        let (client, args) = (client.clone(), args.clone());
        async move {
            let (status, body) = call(&client, &url, &args, None, extra, None).await.unwrap();
            assert_eq!(status, 200, "{body}");
            body["result"].clone()
        }
    };
    let asked = ask(a.url.clone(), json!({})).await;
    assert_eq!(asked["resultType"], "input_required", "A asks for approval: {asked}");
    let state = asked["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("no requestState: {asked}"))
        .to_string();
    let approval = asked["_meta"]["io.toolgate/approval"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval id: {asked}"))
        .to_string();
    assert_eq!(
        invocations(&support_state).get(&approved_ref),
        None,
        "nothing runs before the approval"
    );

    let decided = client
        .post(format!("{}/admin/approvals/{approval}/approve", b.base()))
        .bearer_auth(DANA_TOKEN)
        .json(&json!({"reason": "checked by the replica test"}))
        .send()
        .await
        .unwrap();
    let decided_status = decided.status().as_u16();
    let decided_body: Value = decided.json().await.unwrap_or(Value::Null);
    assert_eq!(decided_status, 200, "approved through B: {decided_body}");
    assert_eq!(decided_body["state"], "approved", "{decided_body}");

    // Re-issued to B (which did not open it): runs, once.
    let ran = ask(b.url.clone(), json!({"requestState": state})).await;
    let Answer::Ticket { ticket_id: ticket, client_reference, replayed, op_key, .. } =
        classify(&json!({"result": ran}))
    else {
        panic!("B runs the approved call: {ran}");
    };
    // The operation of an approved call is keyed by its approval.
    assert_eq!(
        (client_reference.as_str(), op_key),
        (approved_ref.as_str(), format!("approval:{approval}")),
        "{ran}"
    );
    let fresh = !replayed;
    assert!(fresh, "B dispatched it: {ran}");
    // Re-issued to A: the recorded result, not a second ticket.
    let again = ask(a.url.clone(), json!({"requestState": state})).await;
    assert_eq!(
        again["structuredContent"]["ticket_id"],
        json!(ticket),
        "A replays B's ticket: {again}"
    );
    assert_eq!(again["_meta"]["io.toolgate/operation"]["replayed"], json!(true), "{again}");
    assert_eq!(
        invocations(&support_state).get(&approved_ref),
        Some(&1),
        "exactly one invocation of the approved call"
    );
    assert_eq!(jsonl(&support_state.join("support-tickets.jsonl")).len(), RACE_KEYS + 1);
    // A sees the approval B granted, used.
    let seen_by_a: Value = client
        .get(format!("{}/admin/approvals/{approval}", a.base()))
        .bearer_auth(DANA_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(seen_by_a["state"], "consumed", "{seen_by_a}");
    assert_eq!(seen_by_a["decided_by"], "dana", "{seen_by_a}");
    let panicked = panics(&logs);
    assert!(panicked.is_empty(), "a process panicked:\n{}", panicked.join("\n"));
    println!("replica test took {:.1} s", started.elapsed().as_secs_f64());
    drop((a, b, support));
}
