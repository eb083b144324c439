//! The decide stage with every guard on, against the same stage with none,
//! in one process and alternated, on a 4 KiB argument object bound for an
//! egress tool:
//!
//!     cargo bench -p toolgate --bench guards
//!
//! "All guards": the demo's Cedar policy, the registry, the egress scan of
//! every string (with base64 and percent decoding), the lethal-trifecta
//! guard over a run holding both legs, and the budget guard. "None": the
//! same policy and registry, no guard. Both decide the same proposal; what
//! the guards add is the difference. What is gathered before decide (the
//! run's legs from the ledger, the caller's rate) is measured apart: the
//! rate's spend is in memory; the run's read is one ledger read and only
//! for egress tools.
//!
//! Target (issue "Guards in the path"): all guards ≤ 25 µs p50.

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tokio_util::sync::CancellationToken;
mod common;
use common::percentile;
use toolgate_core::Proposal;
use toolgate_core::trifecta::{Leg, LegCall};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::stages::decide::{self, Guards, Situation};

const ROUNDS: usize = 50;
const PER_ROUND: usize = 2_000;

#[path = "../../toolgate-core/benches/fixtures/four_kib.rs"]
mod four_kib;
use four_kib::four_kib;

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main]
async fn main() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let upstream = common::tickets(dir.path(), &cancel).await;
    std::fs::write(
        dir.path().join("policy.cedar"),
        include_str!("../../toolgate-demo/demo/policy.cedar"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("policy.cedarschema"),
        include_str!("../../toolgate-demo/demo/policy.cedarschema"),
    )
    .unwrap();
    let config_path = dir.path().join("toolgate.toml");
    std::fs::write(
        &config_path,
        format!(
            "[servers.tickets]\nurl = \"{upstream}\"\ntrusted = true\n\
             [registry.\"tickets__post_ticket_update\"]\nclass = \"automatic\"\nlabels = [\"egress\"]\n\
             [policy]\npolicies = \"policy.cedar\"\nschema = \"policy.cedarschema\"\n\
             [budgets]\nrate_per_minute = 6000000\nrate_burst = 1000000\n"
        ),
    )
    .unwrap();
    let gw = Gateway::start(Config::load(&config_path).unwrap(), Mode::Inspect).await.unwrap();
    assert!(gw.wait_ready(Duration::from_secs(10)).await.is_empty());
    let tool = gw
        .catalogs
        .current()
        .tools
        .get("tickets__post_ticket_update")
        .expect("the tool is listed")
        .clone();
    assert!(decide::egress_tool(&tool), "the registry labels it egress");
    let caller = toolgate_core::Caller {
        name: "agent".into(),
        subject: "field-agent".into(),
        tenant: "atlas".into(),
        roles: vec!["agent".into()],
    };
    let args = four_kib();
    let size = serde_json::to_string(&args).unwrap().len();
    let proposal = Proposal::new("tickets", "post_ticket_update", args);
    let leg = |leg, tool: &str| LegCall {
        leg,
        tool: tool.into(),
        proposal_sha256: "ab".repeat(32),
        at_ms: 1_796_000_000_000,
    };
    let run = Situation {
        run: "bench".into(),
        legs: vec![
            leg(Leg::PrivateData, "tickets__get_ticket"),
            leg(Leg::UntrustedContent, "manuals__search_manual"),
        ],
        over: None,
    };
    let (none, quiet) = (Guards::none(), Situation::default());
    println!(
        "toolgate guards benchmark — decide on a {size}-byte argument object bound for an egress tool"
    );
    let registry_only = toolgate_core::policy::PolicyEngine::empty();
    for (name, policy) in [
        ("registry only (no [policy])", &registry_only),
        ("registry + Cedar (the demo policy)", &*gw.policy()),
    ] {
        // Both decide as they would in the path: the guards hold the call.
        let guarded = decide::decide(policy, &gw.guards, &caller, &tool, &proposal, None, &run);
        let bare = decide::decide(policy, &none, &caller, &tool, &proposal, None, &quiet);
        println!(
            "\n{name}: all guards → {:?} ({:?}); no guards → {:?} ({:?})",
            guarded.verdict, guarded.reason, bare.verdict, bare.reason
        );
        let (mut with, mut without) =
            (Vec::with_capacity(ROUNDS * PER_ROUND), Vec::with_capacity(ROUNDS * PER_ROUND));
        for _ in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                let t = Instant::now();
                std::hint::black_box(decide::decide(
                    policy, &none, &caller, &tool, &proposal, None, &quiet,
                ));
                without.push(t.elapsed());
            }
            for _ in 0..PER_ROUND {
                let t = Instant::now();
                std::hint::black_box(decide::decide(
                    policy, &gw.guards, &caller, &tool, &proposal, None, &run,
                ));
                with.push(t.elapsed());
            }
        }
        with.sort();
        without.sort();
        let (p50, base) = (percentile(&with, 0.5), percentile(&without, 0.5));
        println!("   {} iterations each, alternated in rounds of {PER_ROUND}", ROUNDS * PER_ROUND);
        println!("   no guards:  p50 {}  p99 {}", us(base), us(percentile(&without, 0.99)));
        println!("   all guards: p50 {}  p99 {}", us(p50), us(percentile(&with, 0.99)));
        let met = |d: Duration| if d <= Duration::from_micros(25) { "MET" } else { "NOT MET" };
        println!(
            "   ratio all / none {:.2}×; the guards add {} at p50 (≤ 25 µs: {}); all guards p50 ≤ 25 µs: {}",
            p50.as_secs_f64() / base.as_secs_f64(),
            us(p50.saturating_sub(base)),
            met(p50.saturating_sub(base)),
            met(p50)
        );
    }

    // What situate adds before decide, in memory: one spend of the caller's rate.
    let mut spend = Vec::with_capacity(100_000);
    for _ in 0..100_000 {
        let t = Instant::now();
        std::hint::black_box(gw.budgets.spend(&caller));
        spend.push(t.elapsed());
    }
    spend.sort();
    println!(
        "\nthe caller's rate, spent once per call (governor, keyed by caller): p50 {}  p99 {}",
        us(percentile(&spend, 0.5)),
        us(percentile(&spend, 0.99))
    );
    gw.stop();
    cancel.cancel();
}
