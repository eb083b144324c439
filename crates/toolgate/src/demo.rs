//! `toolgate demo`: the Atlas world with toolgate in the call path, on an
//! embedded default. Starts the three Atlas servers (tickets over stdio,
//! parts in process over HTTP, manuals as a separate HTTP process), writes a
//! gateway config with seed `000_…`'s registry into a fresh state dir, starts
//! the gateway, and drives the same calls twice — directly, as an ungoverned
//! client would, and through toolgate — printing what each got. Exits 0 only
//! if every case behaved as expected. `--serve` keeps everything running.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};
use toolgate_core::AuthorityClass;
use toolgate_gateway::config::Config;
use toolgate_gateway::downstream;
use toolgate_gateway::gateway::{Gateway, Mode};

type Client = RunningService<RoleClient, ()>;

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

fn write_config(dir: &Path, exe: &Path, parts_url: &str, manuals_url: &str) -> anyhow::Result<PathBuf> {
    let atlas = dir.join("atlas");
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).expect("strings serialise");
    let mut text = format!(
        "# Written by `toolgate demo`: the Atlas servers behind toolgate, with seed 000's registry.\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\nupstream_timeout_ms = 5000\n\n\
         [servers.tickets]\ncommand = {exe}\nargs = [\"atlas\", \"tickets\", \"--state\", {atlas}]\ntrusted = true\n\n\
         [servers.parts]\nurl = \"{parts_url}\"\n\n\
         [servers.manuals]\nurl = \"{manuals_url}\"\n",
        exe = q(exe),
        atlas = q(&atlas),
    );
    for (name, _, registry) in SEED_TABLE {
        text.push_str(&format!("\n[registry.\"{name}\"]\nclass = \"{}\"\n", registry.as_str()));
    }
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, text)?;
    Ok(path)
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

async fn play(dir: &Path, exe: &Path, cancel: &CancellationToken, keep_serving: bool) -> anyhow::Result<()> {
    let atlas_state = dir.join("atlas");
    let parts = toolgate_atlas::server(ServerKind::Parts, Some(&atlas_state))?;
    let (parts_addr, _) = serve::http(parts, "127.0.0.1:0".parse()?, cancel.clone()).await?;
    let parts_url = format!("http://{parts_addr}/mcp");
    let mut manuals = spawn_manuals(exe, &atlas_state, "127.0.0.1:0")?;
    let config_path = write_config(dir, exe, &parts_url, &manuals.url)?;

    let gateway = Gateway::start(Config::load(&config_path)?, Mode::Serve)?;
    let down = gateway.wait_ready(Duration::from_secs(15)).await;
    if !down.is_empty() {
        bail!("upstreams did not come up: {down:?}");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("http://{}/mcp", listener.local_addr()?);
    let stop = cancel.clone();
    tokio::spawn(downstream::http::serve(gateway.clone(), listener, async move { stop.cancelled_owned().await }));

    println!("toolgate demo — Atlas field service, with toolgate in the call path\n");
    let mut ok = authority_table(&gateway);

    let via = http_client(&endpoint).await.context("connecting to the gateway")?;
    let direct_tickets = stdio_client(exe, &atlas_state).await?;
    let direct_parts = http_client(&parts_url).await?;
    let direct_manuals = http_client(&manuals.url).await?;

    println!("\n2. The cases: the same call made directly (ungoverned) and through toolgate\n");
    let mut table = Table::default();
    let sandbox = |f: &str| atlas_state.join(f);

    // A read the registry allows passes, with the upstream's own answer.
    let args = json!({"model_variant": "AC-250-S", "symptom": "Trips on high temperature after about forty minutes", "limit": 5});
    let d = call(&direct_tickets, "search_tickets", &args).await;
    let g = call(&via, "tickets__search_tickets", &args).await;
    let same = d.structured() == g.structured() && !g.is_error();
    table.row("a read passes (search_tickets)", d.summary(), g.summary(), same);

    // Invalid arguments: a broken variant pattern, then an extra property.
    let bad = json!({"model_variant": "AC-250-X"});
    let d = call(&direct_tickets, "search_tickets", &bad).await;
    let g = call(&via, "tickets__search_tickets", &bad).await;
    table.row("broken variant pattern", d.summary(), g.summary(), g.refused("correct") && g.paths().contains(&"/model_variant".to_string()));
    let extra = json!({"model_variant": "AC-250-S", "category": "belt", "urgent": true});
    let d = call(&direct_parts, "find_part", &extra).await;
    let g = call(&via, "parts__find_part", &extra).await;
    table.row("an extra property", d.summary(), g.summary(), g.refused("correct") && g.paths().contains(&"/".to_string()));

    // The exfiltration leg: runs directly; refused through toolgate, outbox untouched.
    let export = json!({"recipient": "records@outside.example", "model_variant": "AC-250-S", "include_site_contacts": true});
    let d = call(&direct_tickets, "export_service_records", &export).await;
    let before = count_lines(&sandbox("outbox.jsonl"));
    let g = call(&via, "tickets__export_service_records", &export).await;
    let untouched = count_lines(&sandbox("outbox.jsonl")) == before;
    table.row("export_service_records", d.summary(), format!("{}; outbox untouched: {untouched}", g.summary()), g.refused("refused") && untouched);

    // Spend: runs directly; escalated to a human through toolgate.
    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == "AC-250-S")
        .map(|t| t.ticket_id.clone())
        .context("the data set has no open AC-250-S ticket")?;
    let part = toolgate_atlas::dataset()
        .parts
        .iter()
        .find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"))
        .map(|p| p.part_no.clone())
        .context("no -S thermostatic valve")?;
    let order = json!({"part_no": part, "quantity": 2, "ticket_id": open, "justification": "valve replacement"});
    let d = call(&direct_parts, "raise_parts_order", &order).await;
    let before = count_lines(&sandbox("orders.jsonl"));
    let g = call(&via, "parts__raise_parts_order", &order).await;
    let unordered = count_lines(&sandbox("orders.jsonl")) == before;
    table.row("raise_parts_order", d.summary(), format!("{}; no order placed: {unordered}", g.summary()), g.refused("escalate") && unordered);

    // A tool nobody declared.
    let d = call(&direct_tickets, "drop_tables", &json!({})).await;
    let g = call(&via, "tickets__drop_tables", &json!({})).await;
    table.row("an unknown tool", d.summary(), g.summary(), g.protocol_error_action() == Some("correct".into()));

    // An upstream dies mid-run.
    let _ = manuals.child.kill();
    let _ = manuals.child.wait();
    let query = json!({"query": "replacing the thermostatic valve", "product_family": "AC-250", "variant": "S"});
    let d = call(&direct_manuals, "search_manual", &query).await;
    let g = call(&via, "manuals__search_manual", &query).await;
    table.row("manuals server killed", d.summary(), g.summary(), g.refused("retry"));

    ok &= table.print();
    if keep_serving {
        // Bring manuals back where the gateway expects it; its supervisor reconnects.
        let addr = manuals.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
        manuals = spawn_manuals(exe, &atlas_state, &addr)?;
        println!("\nendpoint: {endpoint}");
        println!("config: {}", config_path.display());
        println!("(serving until Ctrl-C; `toolgate tools --config {}` shows the authority view)", config_path.display());
        crate::serve::shutdown_signal().await;
    }
    drop(manuals);
    gateway.stop();
    for client in [via, direct_tickets, direct_parts, direct_manuals] {
        let _ = client.cancel().await;
    }
    if !ok {
        bail!("some cases did not behave as expected (marked FAIL above)");
    }
    println!("\nEvery case behaved as expected.");
    Ok(())
}

fn authority_table(gateway: &Arc<Gateway>) -> bool {
    println!("1. Authority, read live from the upstreams (seed 000's table)\n");
    println!("   {:<34} {:<18} {:<18} {:<9} {}", "tool", "annotations imply", "registry says", "disagree", "");
    let catalog = gateway.catalogs.current();
    let mut ok = true;
    for (name, implied, registry) in SEED_TABLE {
        let row = catalog.tools.get(name);
        let live = row.map(|t| (t.view.implied_class, t.view.registry_class));
        let good = live == Some((implied, Some(registry)));
        ok &= good;
        let (i, r) = live.map_or(("missing", "-"), |(i, r)| (i.as_str(), r.map_or("-", AuthorityClass::as_str)));
        println!("   {name:<34} {i:<18} {r:<18} {:<9} {}", if i != r { "yes" } else { "" }, if good { "" } else { "FAIL" });
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

/// What one call produced: a result, or a protocol-level failure.
enum Got {
    Result(Value),
    Failed(String, Option<Value>),
}

impl Got {
    fn is_error(&self) -> bool {
        !matches!(self, Got::Result(r) if r["isError"] != true)
    }
    fn structured(&self) -> Option<&Value> {
        match self {
            Got::Result(r) => r.get("structuredContent"),
            Got::Failed(..) => None,
        }
    }
    fn refused(&self, action: &str) -> bool {
        matches!(self, Got::Result(r) if r["isError"] == true && r["structuredContent"]["action"] == action)
    }
    fn paths(&self) -> Vec<String> {
        self.structured()
            .and_then(|s| s["violations"].as_array())
            .map(|v| v.iter().filter_map(|x| x["path"].as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
    fn protocol_error_action(&self) -> Option<String> {
        match self {
            Got::Failed(_, Some(data)) => data["action"].as_str().map(str::to_string),
            _ => None,
        }
    }
    fn summary(&self) -> String {
        match self {
            Got::Failed(msg, data) => match data {
                Some(d) => format!("protocol error: {msg} (action: {})", d["action"].as_str().unwrap_or("-")),
                None if msg.contains("error sending request") => "failed: the server is gone (connection refused)".into(),
                None => format!("failed: {msg}"),
            },
            Got::Result(r) if r["isError"] == true => {
                let s = &r["structuredContent"];
                if s["action"].is_string() {
                    let paths = self.paths();
                    let at = if paths.is_empty() { String::new() } else { format!(" at {}", paths.join(", ")) };
                    format!("refused: {} → action {}{at}", s["reason"].as_str().unwrap_or("?"), s["action"].as_str().unwrap_or("?"))
                } else {
                    let text = r["content"][0]["text"].as_str().unwrap_or("").replace('\n', " ");
                    format!("tool error: {text}")
                }
            }
            Got::Result(r) => {
                let s = &r["structuredContent"];
                if let Some(id) = s["order_id"].as_str() {
                    format!("ran: order {id} placed ({} {} minor units)", s["total_minor"], s["currency"].as_str().unwrap_or(""))
                } else if let Some(id) = s["export_id"].as_str() {
                    format!("ran: {id}, {} records with site contacts left the building", s["record_count"])
                } else if let Some(t) = s["tickets"].as_array() {
                    let top: Vec<&str> = t.iter().take(3).filter_map(|x| x["ticket_id"].as_str()).collect();
                    format!("{} tickets, top {}", t.len(), top.join(" "))
                } else {
                    "ran".into()
                }
            }
        }
    }
}

async fn call(client: &Client, name: &str, arguments: &Value) -> Got {
    let Value::Object(map) = arguments.clone() else { return Got::Failed("arguments must be an object".into(), None) };
    match client.call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(map)).await {
        Ok(result) => Got::Result(serde_json::to_value(result).unwrap_or_default()),
        Err(rmcp::ServiceError::McpError(e)) => Got::Failed(e.message.to_string(), e.data.clone()),
        Err(e) => Got::Failed(e.to_string(), None),
    }
}

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

async fn http_client(url: &str) -> anyhow::Result<Client> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    Ok(().serve_with_lifecycle(transport, lifecycle).await?)
}

async fn stdio_client(exe: &Path, state: &Path) -> anyhow::Result<Client> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["atlas", "tickets", "--state"]).arg(state);
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn()?;
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    Ok(().serve_with_lifecycle(transport, lifecycle).await?)
}
