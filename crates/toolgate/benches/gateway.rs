//! The gateway's cost, measured against the same upstream called directly,
//! in one process so the machine's noise hits both sides alike.
//!
//!     cargo bench -p toolgate --bench gateway
//!
//! 1. Saturation: C concurrent clients call `get_ticket` as fast as they can
//!    for D seconds, directly and through toolgate: throughput, p50, p99, ratio.
//! 2. Fixed rate: 1,000 calls/s for D seconds (open loop), directly and through
//!    toolgate, in interleaved slices: p50, p99 and the p99 toolgate adds.
//! 3. Micro: validate + decide for one call, p50 over many iterations.
//!
//! Legs 1 and 2 also run through a bare relay (axum in, reqwest out, nothing
//! else): the floor any HTTP hop costs on this machine, so what toolgate adds
//! beyond being a hop reads apart from the hop itself.
//!
//! Each leg also prints the process's CPU time per call (all threads: load
//! generator, upstream, gateway) and the cores busy, to tell work from waiting.
//!
//! To profile the gateway hop alone, `TOOLGATE_BENCH_PROFILE=1` runs only
//! the saturation through toolgate (e.g. under `perf record -e cpu-clock -g`).
//! `TOOLGATE_BENCH_EXTRA` is appended to the gateway's config (TOML, `\n`
//! for newlines), to measure a setting: e.g. `[receipts]\ncheckpoint_every = 10`.
//!
//! Targets (issue "The spine"): ≥ 0.6× direct throughput at saturation;
//! ≤ 0.3 ms added p99 at 1,000 calls/s; validate + decide ≤ 20 µs p50.
//! This is the quick check, in one process. The hop's own targets (issue
//! "The lean hop", against the bare relay) are measured with separate
//! processes and an external load generator by `scripts/bench-gateway`.

use std::time::{Duration, Instant};

/// The allocator the `toolgate` binary ships with, so the gateway is
/// measured as it runs (both legs share it: one process).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use serde_json::json;
use tokio_util::sync::CancellationToken;
mod common;
use common::percentile;
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::stages::{decide, validate};

const CONCURRENCY: usize = 16;
const SECONDS: u64 = 5;
const RATE: u64 = 1_000;

fn meta() -> serde_json::Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

#[derive(Clone)]
struct Target {
    url: String,
    tool: &'static str,
}

async fn one_call(client: &reqwest::Client, t: &Target) -> Duration {
    let started = Instant::now();
    one_answer(client, t).await;
    started.elapsed()
}

/// One `get_ticket` call; its answer, checked to be the ticket.
async fn one_answer(client: &reqwest::Client, t: &Target) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": t.tool, "arguments": {"ticket_id": "SR-20031"}, "_meta": meta()}});
    let resp = client
        .post(&t.url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", t.tool)
        .body(body.to_string())
        .send()
        .await
        .expect("call sent");
    let text = resp.text().await.expect("answer read");
    assert!(
        text.contains("SR-20031") && !text.contains("\"isError\":true"),
        "unexpected answer: {text}"
    );
    text
}

struct Figures {
    throughput: f64,
    p50: Duration,
    p99: Duration,
    /// Process CPU time (all threads: load, upstream, gateway) per call.
    cpu_per_call: Duration,
    /// Cores busy on average while the leg ran.
    cores_busy: f64,
}

/// CPU time this process has used so far, user and system, all threads.
fn cpu_used() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer for the call's duration.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn figures(mut latencies: Vec<Duration>, elapsed: Duration, cpu: Duration) -> Figures {
    latencies.sort();
    let n = latencies.len().max(1) as u32;
    Figures {
        throughput: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        cpu_per_call: cpu / n,
        cores_busy: cpu.as_secs_f64() / elapsed.as_secs_f64(),
    }
}

async fn saturate(t: &Target) -> Figures {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let (started, cpu) = (Instant::now(), cpu_used());
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, t) = (client.clone(), t.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    lat.push(one_call(&client, &t).await);
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    figures(all, started.elapsed(), cpu_used() - cpu)
}

/// Fixed rate, open loop, for each target in turn: `SLICES` rounds of
/// `SECONDS / SLICES` a target, so a burst of this VM's noise (a p99 moves
/// by milliseconds between two runs of 5 s) lands on every leg alike.
async fn fixed_rate(targets: &[&Target]) -> Vec<Figures> {
    const SLICES: u32 = 20;
    let slice = Duration::from_secs(SECONDS) / SLICES;
    let client = reqwest::Client::new();
    let mut legs: Vec<(Vec<Duration>, Duration, Duration)> =
        vec![Default::default(); targets.len()];
    for _ in 0..SLICES {
        for (t, (latencies, elapsed, cpu)) in targets.iter().zip(legs.iter_mut()) {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let (started, cpu_before) = (Instant::now(), cpu_used());
            let mut calls = Vec::new();
            for _ in 0..RATE * slice.as_millis() as u64 / 1_000 {
                tick.tick().await;
                let (client, t) = (client.clone(), (*t).clone());
                calls.push(tokio::spawn(async move { one_call(&client, &t).await }));
            }
            for c in calls {
                latencies.push(c.await.unwrap());
            }
            *elapsed += started.elapsed();
            *cpu += cpu_used() - cpu_before;
        }
    }
    legs.into_iter().map(|(latencies, elapsed, cpu)| figures(latencies, elapsed, cpu)).collect()
}

fn cpu(f: &Figures) -> String {
    format!("CPU {:.0} µs/call, {:.2} cores busy", f.cpu_per_call.as_secs_f64() * 1e6, f.cores_busy)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let upstream = common::tickets(dir.path(), &cancel).await;
    let config_path = dir.path().join("toolgate.toml");
    std::fs::write(
        &config_path,
        format!(
            "[servers.tickets]\nurl = \"{upstream}\"\n[registry.\"tickets__get_ticket\"]\nclass = \
                \"automatic\"\nread_only = true\n[callers.bench]\ntenant = \"bench\"\nanonymous = \
                true\n{}",
            std::env::var("TOOLGATE_BENCH_EXTRA").unwrap_or_default().replace("\\n", "\n")
        ),
    )
    .unwrap();
    let gw = Gateway::start(Config::load(&config_path).unwrap(), Mode::Serve).await.unwrap();
    assert!(gw.wait_ready(Duration::from_secs(10)).await.is_empty());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stop = cancel.clone();
    tokio::spawn(toolgate_gateway::downstream::http::serve(gw.clone(), listener, async move {
        stop.cancelled_owned().await
    }));

    let bare = Target { url: relay(upstream.clone(), cancel.clone()).await, tool: "get_ticket" };
    let direct = Target { url: upstream, tool: "get_ticket" };
    let via = Target { url: gateway, tool: "tickets__get_ticket" };
    // Warm every path (connections, caches).
    let _ = saturate_briefly(&direct).await;
    let _ = saturate_briefly(&bare).await;
    let _ = saturate_briefly(&via).await;
    let answer = |t: &Target| {
        let (client, t) = (reqwest::Client::new(), t.clone());
        async move { one_answer(&client, &t).await.len() }
    };
    let sizes = (answer(&direct).await, answer(&via).await);

    if std::env::var_os("TOOLGATE_BENCH_PROFILE").is_some() {
        let g = saturate(&via).await;
        println!(
            "toolgate: {:.0} calls/s p50 {} p99 {}  {}",
            g.throughput,
            ms(g.p50),
            ms(g.p99),
            cpu(&g)
        );
        gw.stop();
        cancel.cancel();
        return;
    }
    println!(
        "toolgate gateway benchmark — get_ticket on Atlas tickets, {} cores",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("   answer: {} bytes direct, {} bytes through toolgate", sizes.0, sizes.1);
    let d = saturate(&direct).await;
    let r = saturate(&bare).await;
    let g = saturate(&via).await;
    println!("\n1. saturation, {CONCURRENCY} concurrent clients, {SECONDS} s each");
    println!(
        "   direct:     {:>8.0} calls/s  p50 {}  p99 {}  {}",
        d.throughput,
        ms(d.p50),
        ms(d.p99),
        cpu(&d)
    );
    println!(
        "   bare relay: {:>8.0} calls/s  p50 {}  p99 {}  {}",
        r.throughput,
        ms(r.p50),
        ms(r.p99),
        cpu(&r)
    );
    println!(
        "   toolgate:   {:>8.0} calls/s  p50 {}  p99 {}  {}",
        g.throughput,
        ms(g.p50),
        ms(g.p99),
        cpu(&g)
    );
    let ratio = g.throughput / d.throughput;
    println!(
        "   bare relay / direct {:.2}×; toolgate / bare relay {:.2}×",
        r.throughput / d.throughput,
        g.throughput / r.throughput
    );
    println!("   throughput ratio {ratio:.2}× (target ≥ 0.60×) {}", met(ratio >= 0.6));

    let [d, r, g]: [Figures; 3] =
        fixed_rate(&[&direct, &bare, &via]).await.try_into().ok().expect("three legs");
    let added = g.p99.saturating_sub(d.p99);
    println!("\n2. fixed rate {RATE} calls/s, {SECONDS} s each, in interleaved slices");
    println!(
        "   direct:     p50 {}  p99 {}  ({:.0} calls/s achieved)",
        ms(d.p50),
        ms(d.p99),
        d.throughput
    );
    println!(
        "   bare relay: p50 {}  p99 {}  ({:.0} calls/s achieved)",
        ms(r.p50),
        ms(r.p99),
        r.throughput
    );
    println!(
        "   toolgate:   p50 {}  p99 {}  ({:.0} calls/s achieved)",
        ms(g.p50),
        ms(g.p99),
        g.throughput
    );
    println!("   bare relay adds p99 {}", ms(r.p99.saturating_sub(d.p99)));
    println!(
        "   added p99 {} (target ≤ 0.300 ms) {}",
        ms(added),
        met(added <= Duration::from_micros(300))
    );

    let catalog = gw.catalogs.current();
    let tool = catalog.tools.get("tickets__get_ticket").unwrap().clone();
    let args = json!({"ticket_id": "SR-20031"});
    let caller = gw.callers.stdio().expect("the bench opens an anonymous caller");
    // The same step with the demo's Cedar policy set (four rules) evaluated.
    let demo = toolgate_core::policy::PolicyEngine::load(
        include_str!("../../toolgate-demo/demo/policy.cedar"),
        include_str!("../../toolgate-demo/demo/policy.cedarschema"),
    )
    .expect("the demo policy validates");
    let facts = toolgate_core::policy::ToolFacts {
        exposed_name: &tool.exposed_name,
        server: &tool.server,
        name: &tool.tool.name,
        class: tool.view.effective_class.as_str(),
        labels: &tool.labels,
    };
    println!("\n3. validate + decide, 100,000 iterations each");
    for with_policy in [false, true] {
        let mut lat = Vec::with_capacity(100_000);
        for _ in 0..100_000 {
            let t = Instant::now();
            let proposal = validate::validate(&tool, &args).ok().expect("valid");
            let decision = if with_policy {
                toolgate_core::decision::decide(
                    &tool.view,
                    &demo.evaluate(&caller, &facts, &proposal.arguments, "none"),
                )
            } else {
                decide::decide(
                    &gw.policy(),
                    &gw.guards,
                    &caller,
                    &tool,
                    &proposal,
                    None,
                    &decide::Situation::default(),
                )
            };
            std::hint::black_box((proposal, decision));
            lat.push(t.elapsed());
        }
        lat.sort();
        let p50 = percentile(&lat, 0.5);
        println!(
            "   {}: p50 {:.2} µs  p99 {:.2} µs (target p50 ≤ 20 µs) {}",
            if with_policy {
                "registry + Cedar (demo policy)"
            } else {
                "registry only (no [policy])"
            },
            p50.as_secs_f64() * 1e6,
            percentile(&lat, 0.99).as_secs_f64() * 1e6,
            met(p50 <= Duration::from_micros(20))
        );
    }
    gw.stop();
    cancel.cancel();
}

/// The bare relay (`common/relay.rs`) on a port of its own, until `cancel`; its URL.
async fn relay(upstream: String, cancel: CancellationToken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = common::relay::router(&upstream);
    tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(cancel.cancelled_owned()).await
    });
    url
}

async fn saturate_briefly(t: &Target) -> usize {
    let client = reqwest::Client::new();
    let mut n = 0;
    for _ in 0..200 {
        one_call(&client, t).await;
        n += 1;
    }
    n
}

fn met(ok: bool) -> &'static str {
    if ok { "MET" } else { "NOT MET" }
}
