//! `toolgate agent`: a real agent loop through the gateway. An MCP client
//! (rmcp; 2026-07-28, else the legacy handshake) lists the tools the
//! gateway shows this caller, offers them to a model (or a scripted plan)
//! and runs what it chooses through the gateway, every call carrying the
//! run's id (`_meta["io.toolgate/run"]`). Refusals are read as the contract
//! they are (`act.rs`). At the end: what the run did.

mod act;
mod planner;
mod receipts;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use act::{Acted, Ended, Patience, act};
use planner::{Model, Plan, Planner, Turn};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The gateway's MCP endpoint, e.g. http://127.0.0.1:8765/mcp.
    #[arg(long, value_name = "URL")]
    gateway: String,
    /// The environment variable holding the caller's bearer token for the gateway.
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// What the agent is asked to do (a plan may carry its own).
    #[arg(long, value_name = "TEXT")]
    task: Option<String>,
    /// A scripted plan (TOML: [[step]] tool, arguments, expect; answer) instead of a model.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// The model, as the endpoint names it.
    #[arg(long, default_value = "gpt-4o-mini")]
    model: String,
    /// An OpenAI-compatible API: https://api.openai.com/v1, or a local server
    /// (llama.cpp's `llama-server`: http://127.0.0.1:8080/v1; Ollama: http://127.0.0.1:11434/v1).
    #[arg(long, value_name = "URL", default_value = "https://api.openai.com/v1")]
    base_url: String,
    /// The environment variable holding the API key (none is sent if it is not set).
    #[arg(long, value_name = "VAR", default_value = "OPENAI_API_KEY")]
    api_key_env: String,
    /// The run's id; default: a new one.
    #[arg(long)]
    run: Option<String>,
    /// At most this many planner turns.
    #[arg(long, default_value_t = 20)]
    max_steps: usize,
    /// At most this many model tokens in all.
    #[arg(long, default_value_t = 200_000)]
    max_tokens: u64,
    /// How long to wait for an approver, per call, in seconds.
    #[arg(long, default_value_t = 600)]
    approval_wait_s: u64,
    /// The gateway's config, where its ledger is reachable: at the end the
    /// run's receipts are exported as a bundle and verified offline.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where the run's bundle goes (with --config).
    #[arg(long, value_name = "FILE")]
    evidence: Option<PathBuf>,
}

const SYSTEM: &str = "You are a field-service agent. Use the tools to do the task, then answer briefly. \
Every tool call goes through toolgate, which may refuse it: a refusal says what to do next. \
`correct`: fix the arguments as the refusal says and call again. `refused`: you may not do this; do not try again. \
`reconcile`: the outcome is unknown; never call it again. A call that needed a person's approval has already been waited for.";

/// What the run did, for the summary.
#[derive(Default)]
struct Summary {
    calls: Vec<(String, Ended)>,
    /// The proposal of each call sent: its receipts name it.
    proposals: std::collections::BTreeSet<String>,
    approvals: Vec<String>,
    operations: Vec<String>,
}

impl Summary {
    fn note(&mut self, name: &str, acted: &Acted) {
        self.calls.push((name.to_string(), acted.ended));
        self.approvals.extend(acted.approval.clone().filter(|a| !self.approvals.contains(a)));
        self.operations.extend(acted.operation.clone().filter(|o| !self.operations.contains(o)));
    }

    fn print(&self, run: &str) {
        let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
        for (_, ended) in &self.calls {
            *by.entry(ended.name()).or_default() += 1;
        }
        let counts: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!("run {run}: {} call(s): {}", self.calls.len(), counts.join(", "));
        println!(
            "  approvals: {}",
            if self.approvals.is_empty() { "none".into() } else { self.approvals.join(", ") }
        );
        println!(
            "  operations: {}",
            if self.operations.is_empty() { "none".into() } else { self.operations.join(", ") }
        );
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let token =
        match &args.token_env {
            Some(var) => Some(std::env::var(var).with_context(|| {
                format!("--token-env: the environment variable {var} is not set")
            })?),
            None => None,
        };
    let (mut planner, plan_task) = match &args.plan {
        Some(path) => {
            let plan = Plan::load(path)?;
            let task = plan.task.clone();
            (Planner::Plan(plan), task)
        }
        None => (
            Planner::Model(Model::new(
                &args.base_url,
                &args.model,
                std::env::var(&args.api_key_env).ok(),
            )?),
            None,
        ),
    };
    let Some(task) = args.task.clone().or(plan_task) else {
        bail!("say what to do with --task TEXT (or give a --plan that has a task)")
    };
    let client =
        crate::demo::client::connect(&args.gateway, token.as_deref(), act::Watcher::default())
            .await
            .with_context(|| format!("cannot connect to the gateway at {}", args.gateway))?;
    let tools: Vec<Value> = client
        .list_all_tools()
        .await?
        .into_iter()
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .collect();
    let run = args.run.clone().unwrap_or_else(|| format!("agent-{}", std::process::id()));
    println!("run {run}: {} tool(s) offered by the gateway; task: {task}", tools.len());
    let patience = Patience { approval: Duration::from_secs(args.approval_wait_s), retries: 5 };
    let mut messages = vec![
        json!({"role": "system", "content": SYSTEM}),
        json!({"role": "user", "content": task}),
    ];
    let mut summary = Summary::default();
    let start = match &args.config {
        Some(config) => Some(receipts::log_size(config).await?),
        None => None,
    };
    let mut answer = None;
    for _ in 0..args.max_steps {
        match planner.next(&messages, &tools).await? {
            Turn::Done(text) => {
                answer = Some(text);
                break;
            }
            Turn::Calls { assistant, calls } => {
                messages.push(assistant);
                for call in calls {
                    let acted = match &call.arguments {
                        Ok(arguments) => {
                            act(&client, client.service(), &run, &call.name, arguments, &patience)
                                .await
                        }
                        Err(raw) => Acted {
                            ended: Ended::Correct,
                            for_model: format!("the arguments are not a JSON object: {raw}"),
                            approval: None,
                            operation: None,
                            line: format!(
                                "  ✎ {} → the model's arguments are not a JSON object",
                                call.name
                            ),
                        },
                    };
                    println!("{}", acted.line);
                    summary.note(&call.name, &acted);
                    if let (Ok(arguments), Some((server, tool))) =
                        (&call.arguments, call.name.split_once("__"))
                    {
                        summary.proposals.insert(
                            toolgate_core::Proposal::new(server, tool, arguments.clone()).sha256,
                        );
                    }
                    if let Some(expected) =
                        call.expect.as_deref().filter(|e| *e != acted.ended.name())
                    {
                        summary.print(&run);
                        bail!(
                            "the plan expected {} to end `{expected}`, and it ended `{}`",
                            call.name,
                            acted.ended.name()
                        );
                    }
                    messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": acted.for_model}));
                }
            }
        }
        if planner.tokens() > args.max_tokens {
            summary.print(&run);
            bail!(
                "the model used {} tokens, more than --max-tokens {}",
                planner.tokens(),
                args.max_tokens
            );
        }
    }
    let _ = client.cancel().await;
    summary.print(&run);
    if let (Some(config), Some(from)) = (&args.config, start) {
        let out =
            args.evidence.clone().unwrap_or_else(|| PathBuf::from(format!("{run}.bundle.json")));
        evidence(config, from, &summary.proposals, &out).await?;
    }
    match answer {
        Some(text) => {
            println!("answer: {text}");
            Ok(())
        }
        None => bail!("the run reached --max-steps {} before the task was done", args.max_steps),
    }
}

/// The run's receipts from the gateway's ledger, as a bundle written to
/// `out` and verified offline: one line per receipt, then whether all of them verified.
async fn evidence(
    config: &std::path::Path,
    from: u64,
    proposals: &std::collections::BTreeSet<String>,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let bundle = receipts::bundle_of(config, from, proposals).await?;
    // Owner-only, and never written through a link planted at `out`.
    toolgate_mcp::owner_only::write_owner_only(out, bundle.to_json().as_bytes())?;
    let read = toolgate_core::bundle::Bundle::from_json(&std::fs::read(out)?)
        .map_err(|e| anyhow::anyhow!("the bundle does not read back: {e}"))?;
    let report = toolgate_core::bundle::verify(
        &read,
        &toolgate_core::bundle::Options {
            expected_kids: Vec::new(),
            require_pq: true,
            ..Default::default()
        },
    );
    println!("evidence: {} receipt(s) of this run in {}", read.receipts.len(), out.display());
    for e in &read.receipts {
        let r = &e.receipt.receipt;
        println!(
            "  #{:<5} {:<28} {:<16} {:<28} {}",
            r.log_index,
            format!("{}/{}", r.server, r.tool),
            r.decision,
            r.reason,
            r.result_status
        );
    }
    if !report.ok() {
        bail!(
            "the run's bundle does not verify: {}",
            report.failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("; ")
        );
    }
    println!(
        "  verified offline: inclusion in the log (tree size {}) under a checkpoint signed Ed25519 + ML-DSA-65",
        report.tree_size
    );
    Ok(())
}
