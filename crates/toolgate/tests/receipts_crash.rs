//! kill -9 under load loses no receipt of an answer given.
//!
//! A gateway child on SQLite serves reads from 16 clients at once (each call
//! with arguments of its own, so its receipt can be told apart by its
//! proposal hash) and is SIGKILLed mid-load, three times, each time started
//! again on the same state. A read's receipt is sequenced (written to the
//! ledger's sequence file) before its answer is given, and integrated into
//! the table later: the kills land with receipts in that file. Then the CLI
//! lists the log, and every call that got an answer must have its receipt
//! there; a last gateway started and stopped (SIGTERM) signs a checkpoint
//! over all of it, and `toolgate log verify` passes.
//!
//! Figures are printed (`--nocapture`); `TOOLGATE_CRASH_SEED` replays a run.

mod ops_common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ops_common::*;
use serde_json::{Value, json};
use toolgate_core::proposal::Proposal;

const ROUNDS: usize = 3;
const CLIENTS: usize = 16;
/// How long each gateway serves before its kill (ms).
const UPTIME_MS: (u64, u64) = (400, 1200);

fn seed() -> u64 {
    std::env::var("TOOLGATE_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_receipt_of_an_answer_given_is_lost_to_kill_9() {
    let _serial = serial();
    let seed = seed();
    println!("TOOLGATE_CRASH_SEED={seed}");
    let mut rng = Rng::new(seed);
    let (_keep, dir) = workdir("receipts-crash");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let support = start_support(&dir.join("support"), &logs.join("support.log")).await;
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, gateway_config(&support.url, None, "automatic")).unwrap();
    let sequence = dir.join("state/ledger.sqlite3.sequence");

    // The proposal hash of every call answered.
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut left_in_sequence = Vec::new();
    for round in 0..ROUNDS {
        let gateway = start_gateway(&config, &logs.join(format!("gateway-{round}.log"))).await;
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (url, stop, answered) = (gateway.url.clone(), stop.clone(), answered.clone());
                tokio::spawn(async move {
                    let client = client();
                    let mut i = 0;
                    while !stop.load(SeqCst) {
                        let args = json!({"query": format!("harbor {round} {c} {i}")});
                        i += 1;
                        if let Ok((200, body)) = call_tool(
                            &client,
                            &url,
                            "support__search_customers",
                            &args,
                            None,
                            json!({}),
                            None,
                        )
                        .await
                            && body.get("result").is_some()
                        {
                            answered
                                .lock()
                                .unwrap()
                                .push(Proposal::new("support", "search_customers", args).sha256);
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.range(UPTIME_MS.0, UPTIME_MS.1))).await;
        // The kill is meant to find receipts sequenced and not yet integrated
        // (the file is emptied at most 100 ms after an append): wait for some.
        for _ in 0..200 {
            if std::fs::metadata(&sequence).is_ok_and(|m| m.len() > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        gateway.sigkill().await;
        left_in_sequence.push(std::fs::metadata(&sequence).map_or(0, |m| m.len()));
        stop.store(true, SeqCst);
        for c in clients {
            c.await.unwrap();
        }
    }
    let answered = std::mem::take(&mut *answered.lock().unwrap());
    println!(
        "{} calls answered over {ROUNDS} kills; the sequence file held {left_in_sequence:?} bytes at each kill",
        answered.len()
    );
    assert!(
        answered.len() > 100 * ROUNDS,
        "the gateway was under load when killed ({} answers)",
        answered.len()
    );
    assert!(
        left_in_sequence.iter().any(|&b| b > 0),
        "some kill landed with receipts not yet integrated: {left_in_sequence:?}"
    );

    // The CLI integrates what the last gateway left, and lists the log.
    let cfg = config.to_str().unwrap();
    let list: Value = serde_json::from_str(
        &toolgate(&["receipts", "list", "--config", cfg, "--json", "--limit", "1000000"]).await,
    )
    .unwrap();
    let logged: BTreeSet<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["receipt"]["proposal_sha256"].as_str())
        .collect();
    let lost: Vec<&String> = answered.iter().filter(|h| !logged.contains(h.as_str())).collect();
    assert!(
        lost.is_empty(),
        "{} of {} answered calls have no receipt in the log, e.g. {:?}",
        lost.len(),
        answered.len(),
        &lost[..lost.len().min(3)]
    );
    assert_eq!(
        std::fs::metadata(&sequence).unwrap().len(),
        0,
        "the CLI integrated the sequence file"
    );

    // A gateway started and stopped signs a checkpoint over everything: the log verifies.
    let mut last = start_gateway(&config, &logs.join("gateway-last.log")).await;
    let pid = last.child.id().unwrap().to_string();
    std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), last.child.wait())
        .await
        .expect("the gateway stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{}", tail(&last.log, 20));
    let verified = toolgate(&["log", "verify", "--config", cfg]).await;
    println!("{}", verified.trim());
    assert!(panics(&logs).is_empty(), "{:?}", panics(&logs));
}
