//! Durable operations per second: what the ledger lets the gateway sustain
//! for write calls.
//!
//!     cargo bench -p toolgate-ledger --bench ledger
//!
//! One operation is the three durable writes the gateway makes per write
//! call: `begin_operation` (a new key) → `mark_dispatched` →
//! `finish_operation(Completed, ~200 bytes of result JSON)`. N tasks (64,
//! then 256) on a 2-worker multi-thread runtime run a fixed number of
//! operations between them; the figures are throughput and the p50/p99 of
//! one whole operation, against:
//!
//! 1. SQLite, synchronous=FULL, group commit (`SqliteLedger::open`, the
//!    default): the writer thread commits whatever queued as one
//!    transaction, so one fsync is shared by many requests.
//! 2. SQLite, synchronous=FULL, one commit per request
//!    (`open_with(.., Full, false)`): the baseline, one fsync per request.
//! 3. PostgreSQL (a fresh schema, dropped afterwards), same workload
//!    (`TOOLGATE_TEST_POSTGRES`, default
//!    `postgres://postgres@127.0.0.1:5432/test`; skipped if it does not
//!    answer).
//!
//! Durable writes are bound by fsync, and group commit exists to amortise
//! it; the baseline runs in the same process so the comparison is a ratio
//! (group / one each; PostgreSQL / SQLite group) — on a shared, noisy
//! machine ratios move far less than absolute figures. The SQLite file is
//! in the temporary directory (`TMPDIR`): put that on the disk the ledger
//! would live on, not a tmpfs, or fsync costs nothing.
//!
//! `TOOLGATE_BENCH_OPS` sets the operations per group-commit run (default
//! 50,000); the slower configurations run a tenth of it so each run takes a
//! few seconds. `TOOLGATE_BENCH_ONLY=group`
//! (`single`, `postgres`) runs one configuration, e.g. under `perf`.
//!
//! Target: SQLite group commit ≥ 5,000
//! durable operations/s.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use toolgate_ledger::core::operation::{OperationKey, OperationState};
use toolgate_ledger::{Begun, Ledger, NewOperation, PostgresLedger, SqliteLedger, Synchronous};

const IN_FLIGHT: [usize; 2] = [64, 256];
const DEFAULT_OPS: usize = 50_000;
const TARGET_OPS_PER_SEC: f64 = 5_000.0;

/// A typical tool result (~200 bytes), stored as the operation's outcome.
const RESULT: &str = r#"{"content":[{"type":"text","text":"Created ticket SUP-004217"}],"structuredContent":{"ticket_id":"SUP-004217","status":"open","queue":"hardware","assignee":"dana","created_at":"2026-11-30T12:00:00Z"},"isError":false}"#;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// One durable operation, as the gateway runs it for a write call.
async fn one_operation(ledger: &dyn Ledger, run: &str, i: usize) -> Duration {
    let started = Instant::now();
    let id = format!("op_{run}_{i}");
    let now = now_ms();
    let new = NewOperation {
        id: id.clone(),
        key: OperationKey {
            tenant: "atlas".into(),
            subject: "agent".into(),
            server: "support".into(),
            tool: "create_ticket".into(),
            value: format!("{run}-{i}"),
        },
        caller: "agent".into(),
        proposal_sha256: "a".repeat(64),
        approval_id: None,
        arguments: json!({"subject": "Printer jam on floor 3", "priority": "high", "queue": "hardware"}),
        lease_until_ms: now + 60_000,
        receipt: None,
    };
    match ledger.begin_operation(new, now).await.expect("begin_operation") {
        Begun::Mine(op) => assert_eq!(op.id, id),
        Begun::Theirs(op) => panic!("a fresh key was held by {}", op.id),
    }
    ledger.mark_dispatched(&id, 1, now + 60_000, now).await.expect("mark_dispatched");
    let done = ledger
        .finish_operation(
            &id,
            1,
            OperationState::Completed,
            Some(RESULT.to_string()),
            now_ms(),
            None,
        )
        .await
        .expect("finish_operation");
    assert_eq!(done.state, OperationState::Completed);
    started.elapsed()
}

struct Figures {
    in_flight: usize,
    ops: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

impl Figures {
    fn per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `ops` operations by `in_flight` tasks pulling from one counter.
async fn drive(ledger: &Arc<dyn Ledger>, run: &str, in_flight: usize, ops: usize) -> Figures {
    let next = Arc::new(AtomicUsize::new(0));
    let run: Arc<str> = run.into();
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (ledger, next, run) = (ledger.clone(), next.clone(), run.clone());
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(ops / in_flight + 1);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= ops {
                        break lat;
                    }
                    lat.push(one_operation(&*ledger, &run, i).await);
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(ops);
    for t in tasks {
        all.extend(t.await.expect("a bench task panicked"));
    }
    let elapsed = started.elapsed();
    all.sort();
    Figures { in_flight, ops, elapsed, p50: percentile(&all, 0.5), p99: percentile(&all, 0.99) }
}

/// Warms the store (statement caches, file growth, connections), then
/// measures each in-flight level on it.
async fn measure(ledger: Arc<dyn Ledger>, name: &str, ops: usize) -> Vec<Figures> {
    let _ = drive(&ledger, &format!("{name}-warm"), 64, (ops / 10).clamp(64, 1_000)).await;
    let mut out = Vec::new();
    for n in IN_FLIGHT {
        let f = drive(&ledger, &format!("{name}-{n}"), n, ops).await;
        // Every operation counted is on record as completed.
        let last = ledger
            .operation(&format!("op_{name}-{n}_{}", ops - 1))
            .await
            .unwrap()
            .expect("the last operation is on record");
        assert_eq!(last.state, OperationState::Completed);
        eprintln!("  {name:<10} {n:>3} in flight: {:>7.0} ops/s", f.per_sec());
        out.push(f);
    }
    out
}

async fn sqlite(name: &str, group: bool, ops: usize) -> Vec<Figures> {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open_with(
        &dir.path().join("ledger.sqlite3"),
        Synchronous::Full,
        group,
        false,
    )
    .unwrap();
    measure(Arc::new(ledger), name, ops).await
}

fn postgres_url() -> String {
    std::env::var("TOOLGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn postgres(ops: usize) -> Result<Vec<Figures>, String> {
    let base = postgres_url();
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("{base}: {e}"))?;
    tokio::spawn(conn);
    let schema = format!("tg_bench_{}_{}", std::process::id(), now_ms());
    client.batch_execute(&format!("CREATE SCHEMA {schema}")).await.map_err(|e| e.to_string())?;
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
    let settings = client
        .query_one("SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('commit_delay')", &[])
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "  postgres: synchronous_commit={} fsync={} commit_delay={}",
        settings.get::<_, String>(0),
        settings.get::<_, String>(1),
        settings.get::<_, String>(2)
    );
    let figures = match PostgresLedger::connect(&url).await {
        Ok(ledger) => Ok(measure(Arc::new(ledger), "postgres", ops).await),
        Err(e) => Err(e.to_string()),
    };
    let _ = client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await;
    figures
}

fn row(store: &str, f: &Figures) {
    println!(
        "| {store:<26} | {:>9} | {:>6} | {:>6.2} | {:>8.0} | {:>8.2} | {:>8.2} |",
        f.in_flight,
        f.ops,
        f.elapsed.as_secs_f64(),
        f.per_sec(),
        f.p50.as_secs_f64() * 1e3,
        f.p99.as_secs_f64() * 1e3
    );
}

fn main() {
    let ops = std::env::var("TOOLGATE_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_OPS);
    // One fsync per request is ~10× slower than a shared one; PostgreSQL
    // pays a round trip and a commit per statement.
    let (baseline_ops, postgres_ops) = ((ops / 10).max(256), (ops / 10).max(256));
    let only = std::env::var("TOOLGATE_BENCH_ONLY").ok();
    let runs = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        eprintln!("ledger bench: {ops} ops (group commit), {baseline_ops} (one commit each), {postgres_ops} (postgres); in flight {IN_FLIGHT:?}");
        let group = if runs("group") { Some(sqlite("group", true, ops).await) } else { None };
        let single = if runs("single") { Some(sqlite("single", false, baseline_ops).await) } else { None };
        let pg = if runs("postgres") { Some(postgres(postgres_ops).await) } else { None };

        println!();
        println!("Durable operations (begin → dispatched → completed), 2 runtime workers, synchronous=FULL:");
        println!();
        println!("| store                      | in flight |    ops |      s |    ops/s |   p50 ms |   p99 ms |");
        println!("|----------------------------|-----------|--------|--------|----------|----------|----------|");
        group.iter().flatten().for_each(|f| row("sqlite, group commit", f));
        single.iter().flatten().for_each(|f| row("sqlite, one commit each", f));
        match &pg {
            Some(Ok(pg)) => pg.iter().for_each(|f| row("postgres", f)),
            Some(Err(e)) => println!("| postgres: skipped ({e}) |"),
            None => {}
        }
        println!();
        for (i, n) in IN_FLIGHT.iter().enumerate() {
            let mut ratios = Vec::new();
            if let (Some(g), Some(s)) = (&group, &single) {
                ratios.push(format!("group / one each {:.1}×", g[i].per_sec() / s[i].per_sec()));
            }
            if let (Some(g), Some(Ok(pg))) = (&group, &pg) {
                ratios.push(format!("postgres / sqlite group {:.2}×", pg[i].per_sec() / g[i].per_sec()));
            }
            if !ratios.is_empty() {
                println!("{n:>3} in flight: {}", ratios.join("; "));
            }
        }
        if let Some(group) = &group {
            let worst = group.iter().map(Figures::per_sec).fold(f64::INFINITY, f64::min);
            let verdict = if worst >= TARGET_OPS_PER_SEC { "met" } else { "not met" };
            println!("target: sqlite group commit ≥ {TARGET_OPS_PER_SEC:.0} ops/s at every level — {verdict} (lowest {worst:.0} ops/s)");
        }
    });
}
