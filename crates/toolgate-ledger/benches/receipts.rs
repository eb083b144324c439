//! Receipts sealed and appended per second, integrated, stored bytes, and
//! bundle verification time.
//!
//!     cargo bench -p toolgate-ledger --bench receipts
//!
//! 1. Baseline, in the same process: sealing alone (JCS + leaf hash, and an
//!    Ed25519 signature with `TOOLGATE_BENCH_SIGN_EACH=1`), on one thread —
//!    the CPU cost of a receipt with no storage.
//! 2. SQLite, synchronous=FULL, group commit: 256 tasks (`TOOLGATE_BENCH_IN_FLIGHT`)
//!    on a current-thread runtime each append one receipt at a time (the
//!    gateway's pattern: one or two receipts per call). As in the gateway,
//!    each is sealed and written to the sequence file on the caller's
//!    thread, and the writer thread integrates them into the table in
//!    batches (`TOOLGATE_BENCH_SEQUENCING=0`: each joins the writer's next
//!    transaction, sealed there) — so this is receipts sequenced per second. Reported with its ratio to the baseline; then their
//!    integration (every leaf hash read back and pushed onto the tree's
//!    frontier, what the checkpointer does per batch) per second, and the
//!    database's pages per receipt. Then, on a fresh ledger, one receipt at
//!    a time at a fixed 1,000/s: how long a caller waits for its append
//!    (p50, p99, max) — the gateway's read path at that rate, with its
//!    durable checkpoint every 1,000 receipts.
//! 3. Verification of a bundle of N receipts (every signature, every
//!    inclusion proof, the checkpoint's Ed25519 and ML-DSA-65 signatures),
//!    built with the real export path (`merkle::inclusion_proofs`).
//!
//! `TOOLGATE_BENCH_RECEIPTS` sets N (default 50,000). Target: ≥ 100,000
//! receipts/s sequenced and appended (issue "Evidence at line rate").

use std::sync::Arc;
use std::time::Instant;

use aws_lc_rs::signature::{ML_DSA_65_SIGNING, PqdsaKeyPair};
use toolgate_ledger::core::bundle::{self, BUNDLE_FORMAT, Bundle, BundleKey, Entry};
use toolgate_ledger::core::merkle;
use toolgate_ledger::core::note::{Checkpoint, Signer};
use toolgate_ledger::core::proposal::hex;
use toolgate_ledger::core::receipt::{Draft, LoggedReceipt, Receipt, ReceiptKey};
use toolgate_ledger::core::strict_json::JsonLimits;
use toolgate_ledger::{Ledger, PostgresLedger, SqliteLedger};

const TARGET: f64 = 100_000.0;

fn receipt(key: &ReceiptKey, i: usize) -> Receipt {
    Receipt {
        v: 2, // in the clear: this bench verifies bundles of leaves that are the receipts themselves
        kid: key.kid().into(),
        log_index: 0,
        issued_at: "2026-11-30T12:00:00.000Z".into(),
        tenant: "atlas".into(),
        caller: "field-agent".into(),
        server: "support".into(),
        tool: "create_ticket".into(),
        tool_definition_sha256: "d".repeat(64),
        proposal_sha256: format!("{i:064x}"),
        decision: "allow".into(),
        reason: "policy_permits".into(),
        rules: vec!["support_authorised_customers".into()],
        policy_version: "c8f37a019cbb3b84ea8e10617dc8d574466692121ef81325131db106a60c7b9c".into(),
        approval: None,
        operation: Some(toolgate_ledger::core::receipt::OperationRef {
            key: format!("k{i}"),
            state: "completed".into(),
        }),
        execution_status: "dispatched".into(),
        result_status: "ok".into(),
        result_sha256: Some("e".repeat(64)),
        arguments_hash: "a".repeat(64),
        result_hash: Some("b".repeat(64)),
        arguments: None,
        result: None,
        sandbox: None,
        config_version: None,
        identity: None,
    }
}

/// The bytes a SQLite ledger's pages take, once its WAL is copied in (free pages not counted).
fn stored_bytes(file: &std::path::Path) -> u64 {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    let pragma =
        |name: &str| conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0)).unwrap();
    ((pragma("page_count") - pragma("freelist_count")) * pragma("page_size")) as u64
}

fn main() {
    let n: usize = std::env::var("TOOLGATE_BENCH_RECEIPTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let in_flight: usize =
        std::env::var("TOOLGATE_BENCH_IN_FLIGHT").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let key = Arc::new(ReceiptKey::new(ed25519_dalek::SigningKey::from_bytes(&[7; 32])));
    // `TOOLGATE_BENCH_SIGN_EACH=1`: each receipt signed too (`receipts.sign_each`); by default not.
    let sign_each = std::env::var("TOOLGATE_BENCH_SIGN_EACH").is_ok_and(|v| v == "1");
    let draft = |i: usize| Draft {
        receipt: receipt(&key, i),
        salt: [3; 32],
        asked: Some("{\"arguments\":{}}".into()),
        key: key.clone(),
        sign_each,
        placement: Default::default(),
    };

    // 1. Sealing alone.
    let started = Instant::now();
    let mut leaves = Vec::with_capacity(n);
    let mut signed: Vec<LoggedReceipt> = Vec::with_capacity(n);
    let only_append = std::env::var("TOOLGATE_BENCH_ONLY").is_ok_and(|v| v == "append");
    for i in 0..if only_append { n / 10 } else { n } {
        let (sealed, _, _) = draft(i).seal(i as u64).unwrap();
        leaves.push(sealed.leaf_hash);
        signed.push(sealed.logged);
    }
    let seal_rate = leaves.len() as f64 / started.elapsed().as_secs_f64();
    println!(
        "seal only (JCS{} + leaf hash), 1 thread   {seal_rate:>10.0} receipts/s",
        if sign_each { " + Ed25519" } else { "" }
    );

    // Where the sealing time goes (one receipt, averaged).
    let sample = receipt(&key, 1);
    let reps = 5_000;
    let t = Instant::now();
    let mut bytes = Vec::new();
    for _ in 0..reps {
        bytes = std::hint::black_box(&sample).canonical_bytes();
    }
    let jcs = t.elapsed() / reps;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(ed25519_dalek::Signer::sign(key.signing_key(), &bytes));
    }
    let dalek = t.elapsed() / reps;
    let aws =
        aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(key.signing_key().as_bytes())
            .unwrap();
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(aws.sign(&bytes));
    }
    let aws_sign = t.elapsed() / reps;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(merkle::leaf_hash(&bytes));
    }
    let leaf = t.elapsed() / reps;
    println!(
        "  per receipt ({} bytes): JCS {jcs:?}, Ed25519 sign {dalek:?} (ed25519-dalek) / {aws_sign:?} (aws-lc-rs), leaf hash {leaf:?}",
        bytes.len()
    );

    // 2. Sealed and durably appended through the SQLite ledger.
    let dir = tempfile::tempdir().unwrap();
    // The gateway's way: a read's receipts are sequenced (see the ledger's
    // `sequence`); `TOOLGATE_BENCH_SEQUENCING=0`, each joins a transaction.
    let sequencing = !std::env::var("TOOLGATE_BENCH_SEQUENCING").is_ok_and(|v| v == "0");
    println!(
        "  sequencing: {}",
        if sequencing { "on (the gateway's way)" } else { "off (each receipt in a transaction)" }
    );
    let sync = if std::env::var("TOOLGATE_BENCH_SYNC").is_ok_and(|v| v == "normal") {
        toolgate_ledger::Synchronous::Normal
    } else {
        toolgate_ledger::Synchronous::Full
    };
    let ledger: Arc<dyn Ledger> = Arc::new(
        SqliteLedger::open_with(&dir.path().join("ledger.sqlite3"), sync, true, sequencing)
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let elapsed = rt.block_on(async {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..in_flight)
            .map(|_| {
                let (ledger, next, key) = (ledger.clone(), next.clone(), key.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        let d = Draft {
                            receipt: receipt(&key, i),
                            salt: [3; 32],
                            asked: Some("{\"arguments\":{}}".into()),
                            key: key.clone(),
                            sign_each,
                            placement: Default::default(),
                        };
                        ledger.append_receipts(vec![d]).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        started.elapsed()
    });
    let append_rate = n as f64 / elapsed.as_secs_f64();
    let verdict = if append_rate >= TARGET { "meets" } else { "MISSES" };
    println!(
        "sealed + appended (append_receipts), group commit, {in_flight} in \
            flight  {append_rate:>10.0} receipts/s  ({:.2}× seal only; {verdict} the {TARGET:.0}/s \
            target)",
        append_rate / seal_rate
    );
    // Integration: the frontier over every leaf hash appended (what the
    // checkpointer does per batch, off the answer's path), then the stored size.
    let (integrated, per_receipt) = rt.block_on(async {
        let started = Instant::now();
        let size = ledger.log_size().await.unwrap();
        let mut frontier = merkle::Frontier::new();
        let mut from = 0;
        while from < size {
            let to = (from + 10_000).min(size);
            ledger.leaf_hashes(from, to).await.unwrap().into_iter().for_each(|h| frontier.push(h));
            from = to;
        }
        std::hint::black_box(frontier.root());
        (
            size as f64 / started.elapsed().as_secs_f64(),
            stored_bytes(&dir.path().join("ledger.sqlite3")) as f64 / size as f64,
        )
    });
    println!(
        "  integrated (leaf hashes read, tree grown): {integrated:>10.0} receipts/s; \
            stored {per_receipt:.0} B/receipt (the database's pages over its receipts)"
    );

    // 2b. One receipt at a time at a fixed 1,000/s (the gateway's read
    // path at that rate): how long a caller waits for its receipt. A new
    // ledger, so this is the steady state rather than the aftermath of
    // the burst above (whose WAL the checkpointer is still copying). As in
    // the gateway, a signed checkpoint of the log is committed durably
    // every 1,000 receipts, each making the WAL written since the last one
    // power-safe: the fsync that a caller's append may queue behind.
    let rate = 1_000u64;
    let dir = tempfile::tempdir().unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(
        SqliteLedger::open_with(&dir.path().join("ledger.sqlite3"), sync, true, sequencing)
            .unwrap(),
    );
    let log_signer = Arc::new(Signer::ed25519("bench/log", key.signing_key().clone()).unwrap());
    let (latencies, checkpoints) = rt.block_on(async {
        let mut tick = tokio::time::interval(std::time::Duration::from_micros(1_000_000 / rate));
        let (mut calls, mut checkpoints) = (Vec::new(), Vec::new());
        for i in 0..rate * 10 {
            tick.tick().await;
            let (appender, key) = (ledger.clone(), key.clone());
            calls.push(tokio::spawn(async move {
                let d = Draft {
                    receipt: receipt(&key, n + i as usize),
                    salt: [3; 32],
                    asked: Some("{\"arguments\":{}}".into()),
                    key,
                    sign_each,
                    placement: Default::default(),
                };
                let t = Instant::now();
                appender.append_receipts(vec![d]).await.unwrap();
                t.elapsed()
            }));
            if i % rate == rate - 1 {
                let (ledger, signer) = (ledger.clone(), log_signer.clone());
                checkpoints.push(tokio::spawn(async move {
                    let size = ledger.log_size().await.unwrap();
                    let root = merkle::root(&ledger.leaf_hashes(0, size).await.unwrap());
                    let note = Checkpoint::new("bench/log", size, root)
                        .unwrap()
                        .sign(&[&*signer])
                        .unwrap();
                    let t = Instant::now();
                    ledger
                        .add_checkpoint(toolgate_ledger::StoredCheckpoint {
                            size,
                            root,
                            note,
                            created_ms: 0,
                        })
                        .await
                        .unwrap();
                    t.elapsed()
                }));
            }
        }
        let (mut all, mut commits) = (Vec::new(), Vec::new());
        for c in calls {
            all.push(c.await.unwrap());
        }
        for c in checkpoints {
            commits.push(c.await.unwrap());
        }
        all.sort();
        commits.sort();
        (all, commits)
    });
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    println!(
        "one receipt at a time, {rate}/s for 10 s: wait for the append p50 {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.99),
        at(1.0)
    );
    println!(
        "  with a durable checkpoint every {rate} receipts: its commit p50 {:?}, max {:?}",
        checkpoints[checkpoints.len() / 2],
        checkpoints[checkpoints.len() - 1]
    );

    // 2c. PostgreSQL, two replicas on one schema (`TOOLGATE_BENCH_POSTGRES`,
    // default the machine's `test` database; `=off` skips it): the same
    // tasks split over two ledgers. Receipts per second, and receipts per
    // transaction that appended any (the rows' distinct `xmin`): each took
    // the log's advisory lock once.
    let pg = std::env::var("TOOLGATE_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    if pg != "off" {
        let pg_n = (n / 5).max(1_000);
        let key = key.clone();
        let draft = move |i: usize| Draft {
            receipt: receipt(&key, i),
            salt: [3; 32],
            asked: Some("{\"arguments\":{}}".into()),
            key: key.clone(),
            sign_each,
            placement: Default::default(),
        };
        let (rate, per_commit) = rt.block_on(postgres_replicas(&pg, pg_n, in_flight, draft));
        println!(
            "postgres, two replicas, {in_flight} in flight: {rate:>10.0} \
                receipts/s; {per_commit:.1} receipts per transaction (one take of the log's lock \
                each)"
        );
    }

    if only_append {
        return;
    }
    // 3. Verifying a bundle of all n.
    let pq = PqdsaKeyPair::from_seed(&ML_DSA_65_SIGNING, &[5; 32]).unwrap();
    let (ed, pq) = (
        Signer::ed25519("bench/log", key.signing_key().clone()).unwrap(),
        Signer::ml_dsa_65("bench/log", pq).unwrap(),
    );
    let checkpoint = Checkpoint::new("bench/log", n as u64, merkle::root(&leaves))
        .unwrap()
        .sign(&[&ed, &pq])
        .unwrap();
    let started = Instant::now();
    let proofs = merkle::inclusion_proofs(&leaves, 0, n as u64).unwrap();
    let receipts: Vec<Entry> = signed
        .into_iter()
        .zip(proofs)
        .map(|(r, p)| Entry {
            receipt: r,
            opening: None,
            inclusion: p.iter().map(|h| hex(h)).collect(),
        })
        .collect();
    let b = Bundle {
        format: BUNDLE_FORMAT.into(),
        checkpoint,
        keys: vec![BundleKey {
            kid: key.kid().into(),
            ed25519: ed.verifier().vkey(),
            ml_dsa_65: Some(pq.verifier().vkey()),
        }],
        receipts,
    };
    let text = b.to_json();
    let built = started.elapsed();
    let started = Instant::now();
    let parsed = Bundle::from_json(text.as_bytes()).unwrap();
    let report = bundle::verify(
        &parsed,
        &bundle::Options {
            expected_kids: vec![key.kid().into()],
            require_pq: true,
            ..Default::default()
        },
    );
    let verified = started.elapsed();
    assert!(report.ok(), "{:?}", report.failures);
    println!(
        "bundle of {n} receipts ({:.1} MB): built in {:.2} s; verified offline in {:.2} s ({:.0} receipts/s, {:.2}× seal only)",
        text.len() as f64 / 1e6,
        built.as_secs_f64(),
        verified.as_secs_f64(),
        n as f64 / verified.as_secs_f64(),
        (n as f64 / verified.as_secs_f64()) / seal_rate
    );
    // Keep one parse of a single receipt honest too.
    let one = &parsed.receipts[0].receipt;
    LoggedReceipt::from_json(one.to_json().as_bytes(), JsonLimits::default()).unwrap();
}

/// Two PostgreSQL ledgers (replicas) on a fresh schema, `in_flight` tasks
/// over them appending one receipt at a time: receipts/s, and receipts per
/// transaction that appended any (the rows' distinct `xmin`).
async fn postgres_replicas(
    base: &str,
    n: usize,
    in_flight: usize,
    draft: impl Fn(usize) -> Draft + Clone + Send + Sync + 'static,
) -> (f64, f64) {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL answers (or set TOOLGATE_BENCH_POSTGRES=off)");
    tokio::spawn(conn);
    let schema = format!("tg_bench_{}", std::process::id());
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
    let replicas: Vec<Arc<dyn Ledger>> = vec![
        Arc::new(PostgresLedger::connect(&url).await.unwrap()),
        Arc::new(PostgresLedger::connect(&url).await.unwrap()),
    ];
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|t| {
            let (ledger, next, draft) = (replicas[t % 2].clone(), next.clone(), draft.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    ledger.append_receipts(vec![draft(i)]).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    assert_eq!(replicas[0].log_size().await.unwrap(), n as u64);
    // Each row's xmin is the transaction that inserted it.
    let committed: i64 = client
        .query_one(&format!("SELECT count(DISTINCT xmin::text) FROM {schema}.receipts"), &[])
        .await
        .unwrap()
        .get(0);
    drop(replicas);
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
    (rate, n as f64 / committed.max(1) as f64)
}
