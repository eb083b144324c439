//! `toolgate demo`: the Atlas world on an embedded default. Starts the three
//! Atlas servers on loopback, reads their contracts live over MCP
//! (2026-07-28), and plays the field-service case: first the reads an agent
//! needs, then the writes an ungoverned client would simply perform.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};
use toolgate_core::{Hint, Hints};

type Client = RunningService<RoleClient, ()>;

const VARIANT: &str = "AC-250-S";
const SYMPTOM: &str = "Trips on high temperature after about forty minutes when the enclosure doors are closed";

pub async fn run(state: Option<PathBuf>) -> anyhow::Result<()> {
    let temp;
    let state_dir = match state {
        Some(dir) => dir,
        None => {
            // Removed at exit; `--state DIR` keeps the sandbox for inspection.
            temp = tempfile::Builder::new().prefix("toolgate-demo-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let cancel = CancellationToken::new();
    let result = play(&state_dir, &cancel).await;
    cancel.cancel();
    result
}

async fn play(state_dir: &std::path::Path, cancel: &CancellationToken) -> anyhow::Result<()> {
    println!("toolgate demo — Atlas field service\n");
    let mut clients = Vec::new();
    for kind in ServerKind::ALL {
        let server = toolgate_atlas::server(kind, Some(state_dir))?;
        let (addr, _task) = serve::http(server, "127.0.0.1:0".parse()?, cancel.clone()).await?;
        let url = format!("http://{addr}/mcp");
        let client = connect(&url).await.with_context(|| format!("connecting to the {} server", kind.name()))?;
        clients.push((kind, url, client));
    }

    println!("1. Contracts, read live with tools/list (MCP 2026-07-28)\n");
    println!("   {:<36} {:<26} {}", "server / tool", "hints r d i o (*=declared)", "annotations imply");
    for (kind, url, client) in &clients {
        let tools = client.list_all_tools().await?;
        println!("   {} at {url}", kind.name());
        for tool in tools {
            let annotations = tool.annotations.as_ref().map(serde_json::to_value).transpose()?;
            let hints = Hints::from_annotations(annotations.as_ref());
            let flag = |h: Hint| format!("{}{}", if h.value { "T" } else { "F" }, if h.declared { "*" } else { " " });
            println!(
                "     {:<34} {:<26} {}",
                tool.name,
                format!(
                    "{} {} {} {}",
                    flag(hints.read_only_hint),
                    flag(hints.destructive_hint),
                    flag(hints.idempotent_hint),
                    flag(hints.open_world_hint)
                ),
                hints.implied_class().as_str()
            );
        }
    }
    println!("\n   Unmarked hints are absent on the wire and take the specification's pessimistic defaults.");

    let tickets = &clients[0].2;
    let parts = &clients[1].2;
    let manuals = &clients[2].2;

    println!("\n2. The reads: a customer reports on an {VARIANT}: \"{SYMPTOM}\"\n");
    let found = call(tickets, "search_tickets", json!({"model_variant": VARIANT, "symptom": SYMPTOM, "limit": 5})).await?;
    let top = found["tickets"].as_array().filter(|t| !t.is_empty()).context("search_tickets found no similar ticket")?;
    println!("   search_tickets → {} similar closed tickets on {VARIANT} ({})", found["count"], found["ranking"]);
    for t in top.iter().take(3) {
        println!("     {}  {}  score {}  fitted {}", t["ticket_id"].as_str().unwrap_or("?"), t["fault_code"].as_str().unwrap_or("?"), t["score"], t["part_fitted"].as_str().unwrap_or("-"));
    }
    let ticket_id = top[0]["ticket_id"].as_str().unwrap_or_default();
    let ticket = call(tickets, "get_ticket", json!({"ticket_id": ticket_id})).await?;
    println!("   get_ticket {ticket_id} → {}", ticket["engineer_notes"].as_str().unwrap_or(""));

    let fitting = call(parts, "find_part", json!({"model_variant": VARIANT, "category": "thermostatic-valve"})).await?;
    let wrong = call(parts, "find_part", json!({"model_variant": "AC-250-A", "category": "thermostatic-valve"})).await?;
    let part = &fitting["parts"][0];
    let part_no = part["part_no"].as_str().context("find_part returned no part")?;
    println!("   find_part {VARIANT} thermostatic-valve → {part_no}: {}", part["description"].as_str().unwrap_or(""));
    println!("   find_part AC-250-A thermostatic-valve → {}: {}  (not interchangeable)", wrong["parts"][0]["part_no"].as_str().unwrap_or("?"), wrong["parts"][0]["description"].as_str().unwrap_or(""));
    let stock = call(parts, "check_availability", json!({"part_no": part_no})).await?;
    println!("   check_availability {part_no} → stock {}, lead time {} days", stock["stock"], stock["lead_time_days"]);
    let manual = call(manuals, "search_manual", json!({"query": "replacing the thermostatic valve", "product_family": "AC-250", "variant": "S", "k": 2})).await?;
    for p in manual["passages"].as_array().into_iter().flatten() {
        println!("   search_manual → {} p.{} {}: {}", p["document"].as_str().unwrap_or(""), p["page"], p["revision"].as_str().unwrap_or(""), p["section"].as_str().unwrap_or(""));
    }

    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == VARIANT)
        .map(|t| t.ticket_id.clone())
        .context("the data set has no open AC-250-S ticket")?;
    println!("\n3. The writes, as an ungoverned client performs them on open ticket {open}\n");
    let note = call(tickets, "post_ticket_update", json!({"ticket_id": open, "note": format!("Diagnosis: F-101, thermostatic valve; fit {part_no} (71 °C, -S enclosure).")})).await?;
    println!("   post_ticket_update → ran: {} appended. Annotations imply requires_approval; nobody was asked.", note["note_id"].as_str().unwrap_or("?"));
    let order = call(parts, "raise_parts_order", json!({"part_no": part_no, "quantity": 2, "ticket_id": open, "justification": "valve replacement"})).await?;
    println!("   raise_parts_order → ran: {} commits {} {} minor units. Chargeable spend, no human decided.", order["order_id"].as_str().unwrap_or("?"), order["total_minor"], order["currency"].as_str().unwrap_or(""));
    let export = call(tickets, "export_service_records", json!({"recipient": "records@outside.example", "model_variant": VARIANT, "include_site_contacts": true})).await?;
    println!("   export_service_records → ran: {} records with site contacts left for records@outside.example (stopped in the sandbox outbox).", export["record_count"]);

    println!("\n   Ungoverned, every write ran. toolgate's gateway is not in this path yet: this is the baseline");
    println!("   `toolgate serve` will govern. Sandbox writes: {}", state_dir.display());
    for (_, _, client) in clients {
        let _ = client.cancel().await;
    }
    Ok(())
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    Ok(().serve_with_lifecycle(transport, lifecycle).await?)
}

/// Calls a tool and returns its structured result; a tool error stops the demo with its text.
async fn call(client: &Client, name: &'static str, arguments: Value) -> anyhow::Result<Value> {
    let Value::Object(arguments) = arguments else { bail!("arguments must be an object") };
    let result: CallToolResult = client.call_tool(CallToolRequestParams::new(name).with_arguments(arguments)).await?;
    if result.is_error == Some(true) {
        let text: Vec<String> = result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect();
        bail!("{name} failed: {}", text.join(" "));
    }
    result.structured_content.with_context(|| format!("{name} returned no structured content"))
}
