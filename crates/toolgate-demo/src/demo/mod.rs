//! `toolgate demo`: the Atlas world with toolgate in the call path, on an
//! embedded default. Starts the Atlas servers (tickets and notices over
//! stdio, parts in process over HTTP, manuals as a separate HTTP process),
//! writes a gateway config with seed `000_…`'s registry, two callers (an
//! agent and an approver, tokens in owner-only files) and the demo Cedar
//! policy into a fresh state dir, starts the gateway, and drives the cases:
//! seed 000's calls directly (ungoverned) and through toolgate, seed 002's
//! eight notice cases, seed 000's approval flow for raise_parts_order, seed
//! 001's support desk, and the guards in the path: the egress scan, the
//! lethal trifecta of one agent run (with a preview), and a caller's rate;
//! then seed 000's field-service task run by `toolgate agent` with a
//! scripted plan, and its receipts verified offline; last, who asked: the
//! tickets server verifies toolgate's identity assertion and names the
//! technician on each note. Exits 0 only if every case behaved as expected. `--serve` keeps
//! everything running and prints the endpoint, both tokens, the console
//! and a one-time sign-in link to it for the approver.

mod agent;
mod approver;
mod asked;
pub(crate) mod client;
mod evidence;
mod flow;
mod guards;
mod runs;
mod seed002;
mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};
use toolgate_core::AuthorityClass;
use toolgate_gateway::config::Config;
use toolgate_gateway::downstream;
use toolgate_gateway::gateway::{Gateway, Mode};

use approver::Approver;
use client::{Got, call, count_lines, http_client, stdio_client};

/// Seed 000's authority table: tool, what the hints imply, what the registry says.
const SEED_TABLE: [(&str, AuthorityClass, AuthorityClass); 8] = [
    ("manuals__search_manual", AuthorityClass::Automatic, AuthorityClass::Automatic),
    ("parts__check_availability", AuthorityClass::Automatic, AuthorityClass::Automatic),
    ("parts__find_part", AuthorityClass::Automatic, AuthorityClass::Automatic),
    ("parts__raise_parts_order", AuthorityClass::Prohibited, AuthorityClass::RequiresApproval),
    ("tickets__export_service_records", AuthorityClass::Prohibited, AuthorityClass::Prohibited),
    ("tickets__get_ticket", AuthorityClass::Automatic, AuthorityClass::Automatic),
    ("tickets__post_ticket_update", AuthorityClass::RequiresApproval, AuthorityClass::Automatic),
    ("tickets__search_tickets", AuthorityClass::Automatic, AuthorityClass::Automatic),
];

/// Registry labels the demo policy reads.
fn labels(tool: &str) -> &'static str {
    match tool {
        // Both reach outside (an external recipient, a supplier): the egress guard scans them.
        "tickets__export_service_records" => "[\"bulk_export\", \"private_data\", \"egress\"]",
        "parts__raise_parts_order" => "[\"egress\"]",
        // An update is mailed to the customer's site contacts.
        "tickets__post_ticket_update" => "[\"egress\"]",
        "tickets__get_ticket" | "tickets__search_tickets" => "[\"private_data\"]",
        _ => "[]",
    }
}

pub const POLICY: &str = include_str!("../../demo/policy.cedar");
pub const SCHEMA: &str = include_str!("../../demo/policy.cedarschema");
pub const POLICY_CASES: &str = include_str!("../../demo/policy-cases.toml");

/// The agent's rate in the demo (section 8 goes over it).
const RATE_PER_MINUTE: u32 = 600;
const RATE_BURST: u32 = 30;

/// A separate `toolgate atlas manuals --http` process, so a case can kill it.
struct ManualsProcess {
    child: Child,
    url: String,
}

impl Drop for ManualsProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_manuals(exe: &Path, state: &Path, addr: &str) -> anyhow::Result<ManualsProcess> {
    let mut child = Command::new(exe)
        .args(["atlas", "manuals", "--http", addr, "--state"])
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the manuals server")?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let url = loop {
        let line = lines.next().context("the manuals server exited before serving")??;
        if let Some(at) = line.find("http://") {
            break line[at..].trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok(ManualsProcess { child, url })
}

/// Waits (up to 30 s) until a search through the gateway reaches the
/// restarted manuals server again (until then the gateway refuses it, or
/// does not list the tool while it reconnects).
async fn back_up(via: &client::Client) {
    for _ in 0..100 {
        if !call(via, "manuals__search_manual", &json!({"query": "valve"})).await.is_error() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// How long the scripted part holds a call for its approval: its approver
/// is another process of the script, which decides at once.
const SCRIPTED_HOLD_MS: u64 = 1_500;

/// How long `--serve` holds a call for its approval: as `toolgate serve`
/// does, long enough for a person to open the console and decide.
const SERVING_HOLD_MS: u64 = 30_000;

/// The demo's tokens, written owner-only beside the config.
pub struct Tokens {
    pub agent: String,
    pub approver: String,
}

/// Seed 000's reads: the registry says they change nothing, so they are not
/// operations (the servers are untrusted; their hints alone would not do).
fn read_only(tool: &str) -> bool {
    matches!(
        tool,
        "manuals__search_manual"
            | "parts__check_availability"
            | "parts__find_part"
            | "tickets__get_ticket"
            | "tickets__search_tickets"
    )
}

/// Seed 001's support desk: reads, and a write reconciled by its reference.
const SUPPORT_REGISTRY: &str = "\n[registry.\"support__search_customers\"]\nclass = \"automatic\"\nread_only = true\n\
    \n[registry.\"support__get_ticket\"]\nclass = \"automatic\"\nread_only = true\n\
    \n[registry.\"support__create_ticket\"]\nclass = \"automatic\"\n\
    [registry.\"support__create_ticket\".reconcile]\ntool = \"get_ticket\"\narguments = { \
        client_reference = \"client_reference\" }\nfound = \"/found\"\n";

/// `gateway`: where the gateway will listen, known before it starts so the
/// tickets server can be told where its keys are published.
fn write_config(
    dir: &Path,
    exe: &Path,
    parts_url: &str,
    manuals_url: &str,
    support_url: &str,
    gateway: SocketAddr,
) -> anyhow::Result<(PathBuf, Tokens)> {
    let atlas = dir.join("atlas");
    // The boxes' one writable folder must exist before they start.
    std::fs::create_dir_all(&atlas)?;
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).expect("strings serialise");
    let identity_args: String = asked::tickets_args(gateway)
        .iter()
        .map(|a| format!(", {}", serde_json::to_string(a).expect("strings serialise")))
        .collect();
    let tokens = Tokens {
        agent: toolgate_core::entropy::random_token(),
        approver: toolgate_core::entropy::random_token(),
    };
    toolgate_mcp::owner_only::write_owner_only(&dir.join("agent.token"), tokens.agent.as_bytes())?;
    toolgate_mcp::owner_only::write_owner_only(
        &dir.join("approver.token"),
        tokens.approver.as_bytes(),
    )?;
    std::fs::write(dir.join("policy.cedar"), POLICY)?;
    std::fs::write(dir.join("policy.cedarschema"), SCHEMA)?;
    std::fs::write(dir.join("policy-cases.toml"), POLICY_CASES)?;
    let mut text = format!(
        "# Written by `toolgate demo`: the Atlas servers behind toolgate, with seed 000's registry,\n\
         # an agent and an approver, and the demo Cedar policy.\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\nupstream_timeout_ms = 5000\n\n\
         # A call waiting for an approver is held this long for the decision (the default is 30 s;\n\
         # the demo's script decides its approvals from another process, so it holds briefly;\n\
         # `--serve` then holds calls 30 s, for a person).\n\
         [approvals]\nhold_ms = {SCRIPTED_HOLD_MS}\npoll_ms = 100\n\n\
         # Each caller's rate (section 8 goes over it).\n\
         [budgets]\nrate_per_minute = {rate}\nrate_burst = {burst}\n\n\
         # The technician's agent: the token is the agent's, the subject the technician it works for\n\
         # (toolgate asserts that person to the tickets server, the agent as the actor).\n\
         [callers.agent]\nsubject = \"{technician}\"\ntenant = \"atlas\"\nroles = [\"agent\"]\ntoken_file = \"agent.token\"\n\n\
         [callers.{approver}]\nsubject = \"dana@atlas.example\"\ntenant = \"atlas\"\nroles = \
             [\"approver\", \"admin\"]\ntoken_file = \"approver.token\"\n\n\
         [policy]\npolicies = \"policy.cedar\"\nschema = \"policy.cedarschema\"\n\n\
         # Each server toolgate starts runs in a box (docs/SANDBOX.md): it reaches the system's\n\
         # files read-only, its own folder, and what its table grants; no network.\n\
         # The tickets server acts only on toolgate's word for who asks: each call carries an assertion\n\
         # toolgate signs (the technician, the tenant, the agent), which it checks against the keys the\n\
         # gateway publishes at /.well-known/jwks.json. Its box reaches the host's network for those keys:\n\
         # the gateway listens on the host's loopback, which a box's own loopback is not.\n\
         [servers.tickets]\ncommand = {exe}\nargs = [\"atlas\", \"tickets\", \"--state\", {atlas}{identity_args}]\ntrusted = true\n\
         [servers.tickets.identity]\nmode = \"assertion\"\naudience = \"{audience}\"\n\
         [servers.tickets.sandbox]\nwrite = [{atlas}]\nnetwork = \"all\"\n\n\
         [servers.parts]\nurl = \"{parts_url}\"\n\n\
         [servers.manuals]\nurl = \"{manuals_url}\"\n\n\
         # Seed 001: the support desk; its deadline is short so a stalled reply shows.\n\
         [servers.support]\nurl = \"{support_url}\"\ntimeout_ms = 1500\n\n\
         # Seed 002: an untrusted server whose tool claims readOnlyHint: true.\n\
         [servers.notices]\ncommand = {exe}\nargs = [\"atlas\", \"notices\", \"--state\", {atlas}]\n\
         [servers.notices.sandbox]\nwrite = [{atlas}]\n",
        exe = q(exe),
        atlas = q(&atlas),
        approver = approver::APPROVER,
        technician = asked::TECHNICIAN,
        audience = asked::AUDIENCE,
        rate = RATE_PER_MINUTE,
        burst = RATE_BURST,
    );
    for (name, _, registry) in SEED_TABLE {
        text.push_str(&format!(
            "\n[registry.\"{name}\"]\nclass = \"{}\"\nlabels = {}\n",
            registry.as_str(),
            labels(name)
        ));
        if read_only(name) {
            text.push_str("read_only = true\n");
        }
    }
    text.push_str(SUPPORT_REGISTRY);
    text.push_str("\n[registry.\"notices__send_notice\"]\nclass = \"requires_approval\"\nlabels = [\"exfiltration\"]\n");
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, text)?;
    Ok((path, tokens))
}

/// What a person can try against `--serve`: a call that waits for them,
/// and what they will see.
fn try_this(agent_token: &str) -> String {
    let data = toolgate_atlas::dataset();
    let ticket = data
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == "AC-250-S");
    let part = data.parts.iter().find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"));
    let arguments = match (part, ticket) {
        (Some(p), Some(t)) => {
            serde_json::json!({"part_no": p.part_no, "quantity": 2, "ticket_id": t.ticket_id})
                .to_string()
        }
        _ => "{\"part_no\": …, \"quantity\": 2, \"ticket_id\": …}".to_string(),
    };
    format!(
        "\ntry it: from any MCP client, with `Authorization: Bearer {agent_token}`, call\n  \
         parts__raise_parts_order {arguments}\n\
         The call waits up to {} s for a person. Open console-sign-in above: the order is in the inbox.\n\
         Approve it with a reason, and the waiting call returns the order (PO-…); deny it, or let the\n\
         time pass, and it returns a refusal naming the approval. The receipts page shows the evidence.\n",
        SERVING_HOLD_MS / 1000
    )
}

pub async fn run(state: Option<PathBuf>, keep_serving: bool) -> anyhow::Result<()> {
    let temp;
    let dir = match state {
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            dir
        }
        None => {
            // Removed at exit; `--state DIR` keeps everything for inspection.
            temp = tempfile::Builder::new().prefix("toolgate-demo-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let exe = std::env::current_exe().context("locating the toolgate binary")?;
    let cancel = CancellationToken::new();
    let result = play(&dir, &exe, &cancel, keep_serving).await;
    cancel.cancel();
    result
}

async fn play(
    dir: &Path,
    exe: &Path,
    cancel: &CancellationToken,
    keep_serving: bool,
) -> anyhow::Result<()> {
    let atlas_state = dir.join("atlas");
    let parts = toolgate_atlas::server(ServerKind::Parts, Some(&atlas_state))?;
    let (parts_addr, _) = serve::http(parts, "127.0.0.1:0".parse()?, cancel.clone()).await?;
    let parts_url = format!("http://{parts_addr}/mcp");
    let support = toolgate_atlas::server(ServerKind::Support, Some(&atlas_state))?;
    let (support_addr, _) = serve::http(support, "127.0.0.1:0".parse()?, cancel.clone()).await?;
    let mut manuals = spawn_manuals(exe, &atlas_state, "127.0.0.1:0")?;
    // Bound before the config is written: the tickets server is told the
    // gateway's key URL on its command line.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let bound = listener.local_addr()?;
    let (config_path, tokens) = write_config(
        dir,
        exe,
        &parts_url,
        &manuals.url,
        &format!("http://{support_addr}/mcp"),
        bound,
    )?;

    let gateway = Gateway::start(Config::load(&config_path)?, Mode::Serve).await?;
    let down = gateway.wait_ready(Duration::from_secs(15)).await;
    if !down.is_empty() {
        bail!("upstreams did not come up: {down:?}");
    }
    let endpoint = format!("http://{bound}/mcp");
    // The scripted part's gateway stops here, or when the demo does.
    let scripted = cancel.child_token();
    let stop = scripted.clone();
    let web_console = toolgate_console::Console::new(gateway.clone())?;
    let serving = tokio::spawn(downstream::http::serve_with(
        gateway.clone(),
        listener,
        web_console.beside_mcp(),
        async move { stop.cancelled_owned().await },
    ));

    println!("toolgate demo — Atlas field service, with toolgate in the call path\n");
    let mut ok = authority_table(&gateway);

    let via =
        http_client(&endpoint, Some(&tokens.agent)).await.context("connecting to the gateway")?;
    let direct_tickets = stdio_client(exe, "tickets", &atlas_state).await?;
    let direct_parts = http_client(&parts_url, None).await?;
    let direct_manuals = http_client(&manuals.url, None).await?;
    let direct_notices = stdio_client(exe, "notices", &atlas_state).await?;
    let approver = Approver { exe, config: &config_path };

    println!(
        "\n2. Seed 000's cases: the same call made directly (ungoverned) and through toolgate\n"
    );
    let mut table = Table::default();
    let sandbox = |f: &str| atlas_state.join(f);

    // A read the registry allows passes, with the upstream's own answer.
    let args = json!({"model_variant": "AC-250-S", "symptom": "Trips on high temperature after about forty minutes", "limit": 5});
    let d = call(&direct_tickets, "search_tickets", &args).await;
    let first_read = call(&via, "tickets__search_tickets", &args).await;
    let same = d.structured() == first_read.structured() && !first_read.is_error();
    table.row("a read passes (search_tickets)", d.summary(), first_read.summary(), same);

    // Invalid arguments: a broken variant pattern, then an extra property.
    let bad = json!({"model_variant": "AC-250-X"});
    let d = call(&direct_tickets, "search_tickets", &bad).await;
    let g = call(&via, "tickets__search_tickets", &bad).await;
    table.row(
        "broken variant pattern",
        d.summary(),
        g.summary(),
        g.refused("correct") && g.paths().contains(&"/model_variant".to_string()),
    );
    let extra = json!({"model_variant": "AC-250-S", "category": "belt", "urgent": true});
    let d = call(&direct_parts, "find_part", &extra).await;
    let g = call(&via, "parts__find_part", &extra).await;
    table.row(
        "an extra property",
        d.summary(),
        g.summary(),
        g.refused("correct") && g.paths().contains(&"/".to_string()),
    );

    // A tenant named in the arguments: the tenant is the caller's.
    let tenanted = json!({"ticket_id": "SR-20031", "tenant_id": "other-tenant"});
    let g = call(&via, "tickets__get_ticket", &tenanted).await;
    table.row(
        "a tenant in the arguments",
        "(the server has no notion of tenants)".into(),
        g.summary(),
        g.refused_for("tenant_in_arguments"),
    );

    // The exfiltration leg: runs directly; refused through toolgate, outbox untouched.
    let export = json!({"recipient": "records@outside.example", "model_variant": "AC-250-S", "include_site_contacts": true});
    let d = call(&direct_tickets, "export_service_records", &export).await;
    let before = count_lines(&sandbox("outbox.jsonl"));
    let g = call(&via, "tickets__export_service_records", &export).await;
    let untouched = count_lines(&sandbox("outbox.jsonl")) == before;
    table.row(
        "export_service_records",
        d.summary(),
        format!("{}; outbox untouched: {untouched}", g.summary()),
        g.refused("refused") && untouched,
    );

    // Spend: runs directly; waits for a named human through toolgate.
    let order = flow::order(2)?;
    let d = call(&direct_parts, "raise_parts_order", &order).await;
    let before = count_lines(&sandbox("orders.jsonl"));
    let g = call(&via, "parts__raise_parts_order", &order).await;
    let unordered = count_lines(&sandbox("orders.jsonl")) == before;
    table.row(
        "raise_parts_order",
        d.summary(),
        format!("{}; no order placed: {unordered}", g.summary()),
        matches!(g, Got::Input(_)) && unordered,
    );

    // A tool nobody declared.
    let d = call(&direct_tickets, "drop_tables", &json!({})).await;
    let g = call(&via, "tickets__drop_tables", &json!({})).await;
    table.row(
        "an unknown tool",
        d.summary(),
        g.summary(),
        g.protocol_error_action() == Some("correct".into()),
    );

    // An upstream dies mid-run.
    let _ = manuals.child.kill();
    let _ = manuals.child.wait();
    let query = json!({"query": "replacing the thermostatic valve", "product_family": "AC-250", "variant": "S"});
    let d = call(&direct_manuals, "search_manual", &query).await;
    let g = call(&via, "manuals__search_manual", &query).await;
    table.row("manuals server killed", d.summary(), g.summary(), g.refused("retry"));
    ok &= table.print();

    let world = seed002::World {
        gateway: &gateway,
        via: &via,
        direct: &direct_notices,
        sandbox: &atlas_state,
        approver: Approver { exe, config: &config_path },
    };
    ok &= seed002::run(&world).await?;
    ok &= flow::run(&via, &approver, &atlas_state, &endpoint, &tokens).await?;
    let desk = support::Desk {
        gateway: &gateway,
        via: &via,
        sandbox: &atlas_state,
        approver: &approver,
        policy: &dir.join("policy.cedar"),
    };
    ok &= support::run(&desk).await?;
    ok &= guards::run(&via, &atlas_state).await?;
    // Bring manuals back where the gateway expects it; its supervisor reconnects.
    let addr = manuals.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    manuals = spawn_manuals(exe, &atlas_state, &addr)?;
    back_up(&via).await;
    ok &= runs::trifecta(&via, &approver, &atlas_state).await?;
    ok &= runs::rate(&via).await?;
    ok &= agent::run(exe, dir, &endpoint, &tokens.agent, &approver).await?;
    ok &= evidence::run(&gateway, &endpoint, &tokens.approver, &first_read).await?;
    ok &= asked::run(&via, exe, &atlas_state, bound).await?;

    for client in [via, direct_tickets, direct_parts, direct_manuals, direct_notices] {
        let _ = client.cancel().await;
    }
    let gateway = if keep_serving {
        // For a person: the same state and endpoint, a gateway that holds
        // calls as `toolgate serve` does.
        scripted.cancel();
        let _ = serving.await;
        gateway.shutdown().await;
        let text = std::fs::read_to_string(&config_path)?;
        let held = text.replace(
            &format!("hold_ms = {SCRIPTED_HOLD_MS}\n"),
            &format!("hold_ms = {SERVING_HOLD_MS}\n"),
        );
        anyhow::ensure!(held != text, "the demo's config has no hold_ms to lengthen");
        std::fs::write(&config_path, held)?;
        let gateway = Gateway::start(Config::load(&config_path)?, Mode::Serve).await?;
        let listener = tokio::net::TcpListener::bind(bound)
            .await
            .with_context(|| format!("listening on {bound} again"))?;
        let stop = cancel.clone();
        let web_console = toolgate_console::Console::new(gateway.clone())?;
        tokio::spawn(downstream::http::serve_with(
            gateway.clone(),
            listener,
            web_console.beside_mcp(),
            async move { stop.cancelled_owned().await },
        ));
        // The endpoint is announced when a first tools/list sees every upstream.
        let down = gateway.wait_ready(Duration::from_secs(30)).await;
        for (server, why) in &down {
            eprintln!(
                "warning: upstream {server} is not connected yet ({why}); its tools join the list when it is"
            );
        }
        println!("\nendpoint: {endpoint}");
        println!("config: {}", config_path.display());
        println!("agent-token: {}", tokens.agent);
        println!("approver-token: {}", tokens.approver);
        println!("approver: {}", approver::APPROVER);
        let console = endpoint.trim_end_matches("/mcp");
        println!("console: {console}/console");
        println!(
            "console-sign-in: {console}{} (one use, for {}, valid 10 minutes)",
            web_console.sign_in_link(&tokens.approver)?,
            approver::APPROVER
        );
        println!("{}", try_this(&tokens.agent));
        println!(
            "(serving until Ctrl-C; `toolgate approvals list --config {0} --state pending` shows what waits; \
             `toolgate approvals approve --config {0} ID --as {1} --reason TEXT` decides it; \
             `toolgate ops list --config {0}` shows the writes)",
            config_path.display(),
            approver::APPROVER
        );
        toolgate_gateway::process::shutdown_signal().await;
        gateway
    } else {
        gateway
    };
    drop(manuals);
    gateway.shutdown().await;
    if !ok {
        bail!("some cases did not behave as expected (marked FAIL above)");
    }
    println!("\nEvery case behaved as expected.");
    Ok(())
}

fn authority_table(gateway: &Arc<Gateway>) -> bool {
    println!("1. Authority, read live from the upstreams (seed 000's table)\n");
    println!(
        "   {:<34} {:<18} {:<18} {:<9} ",
        "tool", "annotations imply", "registry says", "disagree"
    );
    let catalog = gateway.catalogs.current();
    let mut ok = true;
    for (name, implied, registry) in SEED_TABLE {
        let row = catalog.tools.get(name);
        let live = row.map(|t| (t.view.implied_class, t.view.registry_class));
        let good = live == Some((implied, Some(registry)));
        ok &= good;
        let (i, r) = live
            .map_or(("missing", "-"), |(i, r)| (i.as_str(), r.map_or("-", AuthorityClass::as_str)));
        println!(
            "   {name:<34} {i:<18} {r:<18} {:<9} {}",
            if i != r { "yes" } else { "" },
            if good { "" } else { "FAIL" }
        );
    }
    ok
}

#[derive(Default)]
struct Table(Vec<(String, String, String, bool)>);

impl Table {
    fn row(&mut self, case: &str, direct: String, via: String, ok: bool) {
        self.0.push((case.into(), direct, via, ok));
    }

    fn print(&self) -> bool {
        for (case, direct, via, ok) in &self.0 {
            println!("   {} {case}", if *ok { "ok  " } else { "FAIL" });
            println!("        ungoverned: {direct}");
            println!("        toolgate:   {via}");
        }
        self.0.iter().all(|r| r.3)
    }
}
