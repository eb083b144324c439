//! `toolgate`: the authority layer for AI agents' tool calls. A thin binary:
//! it parses arguments and makes one call into a crate per subcommand —
//! toolgate-gateway, toolgate-ledger and toolgate-core for the gateway's
//! commands (each module here is one command's reading and printing),
//! toolgate-demo for `demo`, `agent` and `conformance-fixture`,
//! toolgate-atlas for `atlas`. No crate uses it.

mod approvals;
mod audit;
mod doctor;
mod ops;
mod policy;
mod preview;
mod probe;
mod receipts;
mod serve;
mod tools;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// mimalloc: the gateway's hot path is many small short-lived allocations
/// on several threads, where glibc's arenas contend (measured in
/// docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// toolgate — an MCP gateway that decides, by the host's own registry and policy, whether each
/// agent tool call runs, waits for a named human, or is refused.
#[derive(Parser)]
#[command(name = "toolgate", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway: agents connect to one endpoint (Streamable HTTP at http://LISTEN/mcp, or
    /// stdio); toolgate fronts the configured upstream MCP servers.
    Serve {
        /// The TOML configuration ([gateway], [servers.NAME], [registry."SERVER__TOOL"], [callers.NAME], [policy]).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Also import the servers of an mcpServers JSON file (as untrusted servers).
        #[arg(long, value_name = "FILE")]
        mcp_json: Option<PathBuf>,
        /// Serve one agent over stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
    },
    /// Show the authority view of every upstream tool, read live: hints as declared or defaulted,
    /// the class they imply, the registry's class, whether they disagree, and the contract pin.
    Tools {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[arg(long, value_name = "FILE")]
        mcp_json: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Show how tool NAME's contract changed since it was pinned, and accept the live one.
        #[arg(long, value_name = "NAME")]
        accept: Option<String>,
    },
    /// Audit the tools every upstream offers: worst regret, drift from the pins, poisoning markers, description lint.
    Audit(audit::Args),
    /// Write a toolgate config from the MCP clients' configs you have (Claude Desktop, Claude Code, Cursor, Windsurf, VS Code).
    Import(toolgate_setup::import::Args),
    /// Write a toolgate config for the MCP servers you name (asked on a terminal, or given as flags).
    Init(toolgate_setup::init::Args),
    /// The config itself: `toolgate config schema` prints its JSON Schema, `config check FILE` checks one.
    #[command(subcommand)]
    Config(ConfigAction),
    /// An agent loop through the gateway: a model (any OpenAI-compatible endpoint) or a scripted
    /// plan chooses tool calls; refusals are followed as the contract says; approvals are waited for.
    Agent(toolgate_demo::agent::Args),
    /// How one exact call by one caller would be decided (registry, Cedar, guards); nothing is run or recorded.
    Preview {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The exposed tool name (SERVER__TOOL).
        tool: String,
        /// The arguments, a JSON object.
        arguments: String,
        /// The caller: a [callers] entry.
        #[arg(long = "as", value_name = "NAME")]
        as_caller: String,
        /// The agent run the call would be part of (its trifecta legs and budget).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decide pending approvals out of band: list, show, approve or deny one exact call.
    #[command(subcommand)]
    Approvals(approvals::Action),
    /// The operation ledger: list writes, reconcile one whose outcome is unknown, or settle it by hand.
    #[command(subcommand)]
    Ops(ops::Action),
    /// Signed receipts in the log: list them, or show one as signed.
    #[command(subcommand)]
    Receipts(receipts::Action),
    /// Write a self-contained bundle (receipts, inclusion proofs, a signed checkpoint, public keys)
    /// that `toolgate verify` checks offline.
    Export {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Export the receipt at this log index.
        #[arg(long, value_name = "N", conflicts_with = "since")]
        receipt: Option<u64>,
        /// Export receipts from this log index on (`--since 0`: everything).
        #[arg(long, value_name = "N")]
        since: Option<u64>,
        /// The bundle file to write.
        #[arg(long, value_name = "FILE", required_unless_present = "pack")]
        out: Option<PathBuf>,
        /// Also (or instead) write a pack: the bundle with the policy set, registry and tool definitions.
        #[arg(long, value_name = "DIR")]
        pack: Option<PathBuf>,
        /// Prove inclusion against the checkpoint of this tree size (default: the newest).
        #[arg(long, value_name = "SIZE")]
        checkpoint: Option<u64>,
    },
    /// Verify a bundle (or a pack directory) offline: receipt signatures, kids, inclusion, the
    /// checkpoint's Ed25519 and ML-DSA-65 signatures, and the pinned signer. Exit 1 if anything fails.
    Verify {
        /// A bundle written by `toolgate export --out`, or a pack directory.
        #[arg(required_unless_present = "answer", conflicts_with = "answer")]
        path: Option<PathBuf>,
        /// Instead: a saved answer (or its `_meta["io.toolgate/receipt"]`): prove its receipt from the published log.
        #[arg(long, value_name = "FILE")]
        answer: Option<PathBuf>,
        /// With --answer: the log, as an http(s) URL (the gateway's /log/, a mirror) or a folder; default: the one the receipt names.
        #[arg(long, value_name = "URL|DIR", requires = "answer")]
        log: Option<String>,
        /// With --answer: the log's public key (C2SP vkey, from `toolgate keys show`; repeatable).
        #[arg(long, value_name = "VKEY", requires = "answer")]
        vkey: Vec<String>,
        /// A witness's cosigner key (repeatable): the checkpoint must carry its cosignature.
        #[arg(long, value_name = "VKEY")]
        witness: Vec<String>,
        /// How many of the --witness keys must have cosigned (default: all of them).
        #[arg(long, value_name = "N", requires = "witness")]
        min_witnesses: Option<usize>,
        /// With --answer: how long to wait (ms) for a checkpoint that covers the receipt.
        #[arg(long, value_name = "MS", default_value_t = 3000, requires = "answer")]
        wait_ms: u64,
        /// Trust only this kid (repeatable): the checkpoint and every receipt must be signed by it.
        #[arg(long = "expected-kid", value_name = "KID")]
        expected_kid: Vec<String>,
        /// Require a valid ML-DSA-65 signature on the checkpoint.
        #[arg(long)]
        require_pq: bool,
        #[arg(long)]
        json: bool,
    },
    /// The receipt log as a whole.
    #[command(subcommand)]
    Log(receipts::LogAction),
    /// A witness of other logs (c2sp.org/tlog-witness).
    #[command(subcommand)]
    Witness(receipts::WitnessAction),
    /// The log's signing keys.
    #[command(subcommand)]
    Keys(receipts::KeysAction),
    /// Decide every recorded proposal again under another policy set and list the decisions that
    /// would change. Executes nothing.
    Replay {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// A directory with `*.cedar` policies and one `*.cedarschema`.
        #[arg(long, value_name = "DIR")]
        policy: PathBuf,
    },
    /// Check what `serve` needs — config, policy, keys, ledger, each upstream — and say what to fix.
    Doctor {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Ask a running gateway whether it is ready (`GET /readyz`; exit 1 if not): a container's HEALTHCHECK.
    Probe(probe::Args),
    /// Check the Cedar policy set against its schema, or run table-driven decision cases.
    #[command(subcommand)]
    Policy(policy::Action),
    /// Serve one Atlas demo server (tickets, parts, manuals or notices), as `toolgate-atlas` does.
    Atlas(toolgate_atlas::cli::Args),
    /// Serve the conformance suite's fixture tools over Streamable HTTP (test equipment).
    #[command(hide = true)]
    ConformanceFixture {
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
        http: std::net::SocketAddr,
        /// Speak the legacy handshake only (2025-11-25 and before), not 2026-07-28.
        #[arg(long)]
        legacy: bool,
        /// Serve on stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
        /// Serve https with this certificate chain (PEM; with --tls-key).
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
    /// Run the Atlas field-service demo on an embedded default: the three Atlas MCP servers and the
    /// gateway on loopback; each case is run directly (ungoverned) and through toolgate.
    Demo {
        /// Keep everything (gateway config, pins, the Atlas sandbox) in DIR instead of a temporary directory.
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// After the cases, keep the servers and the gateway running and print `endpoint:` and `config:`.
        #[arg(long)]
        serve: bool,
    },
}

/// `toolgate config …`.
#[derive(clap::Subcommand, Debug)]
enum ConfigAction {
    /// Print a JSON Schema of toolgate.toml, generated from its types: editors that read one
    /// (taplo, Even Better TOML: `#:schema ./toolgate.schema.json` on the first line) complete and check the file.
    Schema,
    /// Report every problem of a config at once, each with its line and what to do.
    Check {
        /// The config file.
        file: PathBuf,
    },
}

/// Prints `value` as pretty JSON, with nothing an agent or an upstream
/// wrote shown raw to the terminal (`visible_json`: still the same JSON).
pub(crate) fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    println!("{}", toolgate_core::visible::visible_json(&serde_json::to_string_pretty(value)?));
    Ok(())
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Audit(_)
            | Command::Approvals(_)
            | Command::Ops(_)
            | Command::Policy(_)
            | Command::Tools { .. }
            | Command::Receipts(_)
            | Command::Verify { .. }
            | Command::Log(_)
            | Command::Replay { .. }
    ) {
        // Listing commands end quietly when their reader goes away
        // (`toolgate approvals list | head`), as other Unix tools do.
        // SAFETY: set once, before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    // The demo prints its own account of every case, and doctor of every
    // fault; warnings about them would only interleave with it. The MCP
    // library of the demo's own servers and clients says nothing either: it
    // logs a stalled reply the demo provokes (seed 001) as an error.
    let default_level = match cli.command {
        Command::Demo { .. } => "error,rmcp=off",
        Command::Doctor { .. } => "error",
        _ => "warn",
    };
    // `serve` reads [telemetry] from its config (logs, OTLP export); the
    // other commands log text to stderr.
    let served = match &cli.command {
        Command::Serve { config, mcp_json, .. } => {
            match serve::load_config(config, mcp_json.as_deref()) {
                Ok(c) => Some(c),
                Err(e) => {
                    eprintln!("toolgate: {e:#}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    let settings = served.as_ref().map(|c| c.telemetry.clone()).unwrap_or_default();
    let tls = served.as_ref().map(|c| c.tls.clone()).unwrap_or_default();
    let mut telemetry =
        match toolgate_gateway::telemetry::Telemetry::init(&settings, &tls, default_level) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("toolgate: telemetry: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo { state, serve } => toolgate_demo::demo::run(state, serve).await,
            Command::Serve { stdio, .. } => {
                serve::run(served.expect("loaded above"), stdio, telemetry.take_scrape()).await
            }
            Command::Tools { config, mcp_json, json, accept } => {
                let config = serve::load_config(&config, mcp_json.as_deref())?;
                tools::run(config, json, accept).await
            }
            Command::Audit(args) => audit::run(args).await,
            Command::Import(args) => toolgate_setup::import::run(args).await,
            Command::Init(args) => toolgate_setup::init::run(args).await,
            Command::Config(ConfigAction::Check { file }) => {
                match toolgate_setup::check::run(&file)? {
                    0 => Ok(()),
                    n => Err(anyhow::anyhow!(
                        "{n} problem{} in {}",
                        if n == 1 { "" } else { "s" },
                        file.display()
                    )),
                }
            }
            Command::Config(ConfigAction::Schema) => {
                crate::print_json(&toolgate_setup::check::schema())?;
                Ok(())
            }
            Command::Agent(args) => toolgate_demo::agent::run(args).await,
            Command::Preview { config, tool, arguments, as_caller, run, json } => {
                preview::run(&config, &tool, &arguments, &as_caller, run.as_deref(), json).await
            }
            Command::Probe(args) => probe::run(args).await,
            Command::Approvals(action) => approvals::run(action).await,
            Command::Ops(action) => ops::run(action).await,
            Command::Policy(action) => policy::run(action),
            Command::Receipts(action) => receipts::run(action).await,
            Command::Export { config, receipt, since, out, pack, checkpoint } => {
                receipts::export(&config, receipt, since, out, pack, checkpoint).await
            }
            Command::Verify {
                answer: Some(file),
                log,
                vkey,
                witness,
                min_witnesses,
                wait_ms,
                require_pq,
                json,
                ..
            } => {
                let token = std::env::var("TOOLGATE_LOG_TOKEN").ok().filter(|t| !t.is_empty());
                match toolgate_gateway::log::readers::verify_answer::run(
                    &file,
                    log.as_deref(),
                    &vkey,
                    (&witness, min_witnesses),
                    token,
                    require_pq,
                    std::time::Duration::from_millis(wait_ms),
                    json,
                )
                .await
                {
                    Ok(true) => Ok(()),
                    Ok(false) => {
                        Err(anyhow::anyhow!("the answer in {} did not verify", file.display()))
                    }
                    Err(e) => Err(e),
                }
            }
            Command::Verify {
                path: Some(path),
                expected_kid,
                require_pq,
                json,
                witness,
                min_witnesses,
                ..
            } => match receipts::verify(
                &path,
                expected_kid,
                require_pq,
                (&witness, min_witnesses),
                json,
            ) {
                Ok(true) => Ok(()),
                Ok(false) => Err(anyhow::anyhow!("{} did not verify", path.display())),
                Err(e) => Err(e),
            },
            Command::Verify { .. } => {
                Err(anyhow::anyhow!("give a bundle to verify, or --answer FILE"))
            }
            Command::Log(receipts::LogAction::Verify { config }) => {
                match receipts::log_verify(&config).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(anyhow::anyhow!("the log did not verify")),
                    Err(e) => Err(e),
                }
            }
            Command::Log(receipts::LogAction::Archive { config, before }) => {
                receipts::log_archive(&config, before).await
            }
            Command::Log(receipts::LogAction::Watch {
                log,
                vkey,
                state,
                webhook,
                every_ms,
                once,
            }) => match receipts::log_watch(log, &vkey, state, webhook, every_ms, once).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(anyhow::anyhow!("the log did not only grow (alert above)")),
                Err(e) => Err(e),
            },
            Command::Witness(receipts::WitnessAction::Serve { listen, dir, name, logs }) => {
                toolgate_gateway::log::witness_server::serve(
                    &listen,
                    &dir,
                    &name,
                    &logs,
                    toolgate_gateway::process::shutdown_signal(),
                )
                .await
            }
            Command::Keys(action) => receipts::keys(action),
            Command::Replay { config, policy } => receipts::replay(&config, &policy).await,
            Command::Atlas(args) => toolgate_atlas::cli::run(args).await,
            Command::ConformanceFixture { http, legacy, stdio, tls_cert, tls_key } => {
                toolgate_demo::fixture::run(http, legacy, stdio, tls_cert.zip(tls_key)).await
            }
            Command::Doctor { config } => doctor::run(&config).await,
        }
    });
    // Flush what the exporters still hold (the batch exporter blocks: off the runtime).
    drop(runtime);
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // An error may quote what others sent (a URL, a body, a file
            // name): each line escaped, so none of it can drive the terminal.
            let text = format!("{e:#}");
            let shown: Vec<_> = text.split('\n').map(toolgate_core::visible::visible).collect();
            eprintln!("toolgate: {}", shown.join("\n"));
            match e.downcast_ref::<audit::GateFailed>() {
                Some(_) => std::process::ExitCode::from(audit::FAILED_GATE),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}
