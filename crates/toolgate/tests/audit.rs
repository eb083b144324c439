//! `toolgate audit` against a live upstream that carries every marker the
//! audit looks for (`fixtures/poisoned-tools.json`: one tool per marker, a
//! clean control, and a rug pull between its two lists), against a saved
//! inventory, and on the demo's Atlas servers, whose findings are the ones
//! `docs/AUDIT.md` lists and explains.

mod demo_common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use demo_common::{demo_serve, toolgate};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const FIXTURE: &str = include_str!("fixtures/poisoned-tools.json");

/// The fixture upstream: its first list, or (after `pull`) its second; as
/// `mail`, a second server with one clean tool that the lab's poisoned one
/// names.
#[derive(Clone, Default)]
struct Lab {
    pulled: Arc<AtomicBool>,
    mail: bool,
}

impl ServerHandler for Lab {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
        let list = if self.mail {
            &fixture["mail"]
        } else if self.pulled.load(Ordering::SeqCst) {
            &fixture["v2"]
        } else {
            &fixture["v1"]
        };
        let tools: Vec<Tool> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let mut t = t.clone();
                if t.get("inputSchema").is_none() {
                    t["inputSchema"] = json!({"type": "object"});
                }
                serde_json::from_value(t).unwrap()
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }
    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured(json!({})).into())
    }
}

async fn serve_lab(lab: Lab, cancel: &CancellationToken) -> String {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let config = StreamableHttpServerConfig::default().with_cancellation_token(cancel.clone());
    let service: StreamableHttpService<Lab, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(lab.clone()), Default::default(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = cancel.clone();
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().nest_service("/mcp", service))
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    });
    format!("http://{addr}/mcp")
}

fn run(args: &[&str], config: &Path) -> Output {
    toolgate().args(args).arg("--config").arg(config).output().unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// (rule, tool) of every finding.
fn fired(report: &Value) -> BTreeSet<(String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap().to_string(), f["tool"].as_str().unwrap().to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_marker_fires_on_its_fixture_and_the_control_stays_clean() {
    let cancel = CancellationToken::new();
    let lab = Lab::default();
    let url = serve_lab(lab.clone(), &cancel).await;
    let mail = serve_lab(Lab { mail: true, ..Lab::default() }, &cancel).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.toml");
    let registry = "[registry.\"lab__list_items\"]\nclass = \"automatic\"\n[registry.\"lab__delete_records\"]\nclass = \"automatic\"\n\
                    [registry.\"mail__send_email\"]\nclass = \"requires_approval\"\nlabels = [\"egress\"]\n";
    std::fs::write(
        &config,
        format!("[servers.lab]\nurl = \"{url}\"\n[servers.mail]\nurl = \"{mail}\"\n{registry}"),
    )
    .unwrap();
    // The first list: fetch_page's contract is accepted (pinned)…
    let accepted = run(&["tools", "--accept", "lab__fetch_page"], &config);
    assert!(accepted.status.success(), "{}", String::from_utf8_lossy(&accepted.stderr));
    // …then the server changes it (a rug pull).
    lab.pulled.store(true, Ordering::SeqCst);
    let live = config.clone();
    let report = json_of(
        &tokio::task::spawn_blocking(move || run(&["audit", "--json"], &live)).await.unwrap(),
    );
    let fired = fired(&report);
    let expect = [
        ("TG001", "lab__delete_records"), // high regret, registry automatic
        ("TG002", "lab__do_thing"),       // unregistered
        ("TG010", "lab__fetch_page"),     // drift from its pin
        ("TG011", "lab__fetch_page"),     // readOnlyHint flipped to true
        ("TG020", "lab__weather_lookup"), // tag characters, a zero-width space
        ("TG021", "lab__sеnd_report"),    // Cyrillic е: reads as send_report
        ("TG022", "lab__add_numbers"),    // <IMPORTANT>, ~/.ssh, do not tell the user
        ("TG023", "lab__add_numbers"),    // names the mail server's send_email
        ("TG024", "lab__weather_lookup"), // a URL and an email
        ("TG025", "lab__explain_everything"),
        ("TG030", "lab__do_thing"),        // no description
        ("TG032", "lab__getForecastData"), // parameters without descriptions
        ("TG033", "lab__purge_cache"),     // readOnly and destructive
        ("TG034", "lab__send_report"),     // open world by default, no egress label
        ("TG035", "lab/*"),                // snake_case and camelCase
        ("TG036", "lab__getForecastData"), // vs get_forecast
    ];
    for (rule, tool) in expect {
        assert!(
            fired.contains(&(rule.to_string(), tool.to_string())),
            "{rule} did not fire on {tool}: {fired:?}"
        );
    }
    for control in ["lab__list_items", "mail__send_email"] {
        assert!(
            !fired.iter().any(|(_, t)| t == control),
            "the clean control {control} has no finding: {fired:?}"
        );
    }
    let drift =
        report["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "TG010").unwrap();
    assert!(
        drift["message"].as_str().unwrap().contains("/annotations/readOnlyHint")
            && drift["message"].as_str().unwrap().contains("/description"),
        "{drift}"
    );
    // Worst regret ranks the deletion first and names why.
    assert_eq!(report["regret"][0]["tool"], "lab__delete_records", "{}", report["regret"]);

    // The same from a saved inventory, offline.
    let saved = run(&["tools", "--json"], &config);
    assert!(saved.status.success());
    let inventory = dir.path().join("inv.json");
    std::fs::write(&inventory, &saved.stdout).unwrap();
    cancel.cancel();
    let offline =
        toolgate().args(["audit", "--json", "--inventory"]).arg(&inventory).output().unwrap();
    assert_eq!(crate::fired(&json_of(&offline)), fired, "the saved inventory audits the same");

    // A gate for CI: exit 3 at or above the level; the table names each finding.
    let gate = toolgate()
        .args(["audit", "--fail-on", "high", "--inventory"])
        .arg(&inventory)
        .output()
        .unwrap();
    assert_eq!(gate.status.code(), Some(3), "{}", String::from_utf8_lossy(&gate.stderr));
    let table = String::from_utf8_lossy(&gate.stdout);
    assert!(
        table.contains("Worst regret")
            && table.contains("TG022")
            && table.contains("hidden-instruction"),
        "{table}"
    );
    let clean = toolgate().args(["audit", "--inventory"]).arg(&inventory).output().unwrap();
    assert!(clean.status.success(), "without --fail-on the audit only reports");

    // --suggest prints registry entries that parse as TOML, for the unregistered tools only.
    let suggest =
        toolgate().args(["audit", "--suggest", "--inventory"]).arg(&inventory).output().unwrap();
    let toml: toml::Table =
        String::from_utf8_lossy(&suggest.stdout).parse().expect("pastable TOML");
    let registry = toml["registry"].as_table().unwrap();
    assert!(
        registry.contains_key("lab__do_thing") && !registry.contains_key("lab__list_items"),
        "{registry:?}"
    );

    // SARIF for code scanning: every result names a rule the driver lists.
    let sarif = json_of(
        &toolgate().args(["audit", "--sarif", "--inventory"]).arg(&inventory).output().unwrap(),
    );
    assert_eq!(sarif["version"], "2.1.0");
    let ids: BTreeSet<&str> = sarif["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(
        sarif["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| ids.contains(r["ruleId"].as_str().unwrap()))
    );
}

#[test]
fn the_demo_atlas_inventory_has_only_the_findings_docs_audit_lists() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let started = Instant::now();
    let out = run(&["audit"], &serving.config);
    let took = started.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    println!("audit of the demo's Atlas inventory (live, table): {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let report = json_of(&run(&["audit", "--json"], &serving.config));
    let fired: Vec<String> = fired(&report).into_iter().map(|(r, t)| format!("{r} {t}")).collect();
    // Each explained in docs/AUDIT.md ("The Atlas servers").
    let expected = include_str!("fixtures/atlas-audit.txt")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert_eq!(fired, expected, "update docs/AUDIT.md and fixtures/atlas-audit.txt together");
}
