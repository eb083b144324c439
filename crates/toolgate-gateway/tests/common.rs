//! Shared set-up for gateway tests: Atlas servers in process over HTTP, a
//! gateway in front of them with the seed's registry, and raw HTTP helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};
use toolgate_gateway::config::Config;
use toolgate_gateway::downstream;
use toolgate_gateway::gateway::{Gateway, Mode};

/// The registry of seed 000 (the fixture's `registry_class`).
pub const REGISTRY: &str = r#"
[registry."tickets__export_service_records"]
class = "prohibited"
[registry."tickets__get_ticket"]
class = "automatic"
[registry."tickets__post_ticket_update"]
class = "automatic"
[registry."tickets__search_tickets"]
class = "automatic"
[registry."parts__check_availability"]
class = "automatic"
[registry."parts__find_part"]
class = "automatic"
[registry."parts__raise_parts_order"]
class = "requires_approval"
[registry."manuals__search_manual"]
class = "automatic"
[registry."support__search_customers"]
class = "automatic"
read_only = true
[registry."support__get_ticket"]
class = "automatic"
read_only = true
[registry."support__create_ticket"]
class = "automatic"
[registry."support__create_ticket".reconcile]
tool = "get_ticket"
arguments = { client_reference = "client_reference" }
"#;

/// An anonymous agent, for configs of tests that send no token.
pub const ANONYMOUS: &str =
    "\n[callers.agent]\ntenant = \"atlas\"\nroles = [\"agent\"]\nanonymous = true\n";

/// Callers of the harness gateway: an anonymous agent (the raw-HTTP tests
/// send no token), an approver and a caller who is both (for self-approval).
pub const CALLERS: &str = r#"
[callers.agent]
tenant = "atlas"
roles = ["agent"]
anonymous = true
[callers.dana]
subject = "dana@atlas.example"
tenant = "atlas"
roles = ["approver"]
token_file = "dana.token"
[callers.sam]
tenant = "atlas"
roles = ["agent", "approver"]
token_file = "sam.token"
"#;
pub const DANA_TOKEN: &str = "dana-token-0123456789abcdef";
pub const SAM_TOKEN: &str = "sam-token-0123456789abcdef";

/// Writes the harness callers' token files (owner-only) into `dir`.
pub fn write_tokens(dir: &Path) {
    for (file, token) in [("dana.token", DANA_TOKEN), ("sam.token", SAM_TOKEN)] {
        let path = dir.join(file);
        std::fs::write(&path, token).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
}

pub struct Harness {
    pub url: String,
    pub gateway: Arc<Gateway>,
    pub atlas_urls: BTreeMap<&'static str, String>,
    pub atlas_cancel: BTreeMap<&'static str, CancellationToken>,
    pub dir: tempfile::TempDir,
    cancel: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.gateway.stop();
        for c in self.atlas_cancel.values() {
            c.cancel();
        }
    }
}

impl Harness {
    pub fn sandbox(&self) -> std::path::PathBuf {
        self.dir.path().join("atlas")
    }
}

/// Atlas tickets, parts and manuals over HTTP, and a gateway in front.
/// `extra` is appended to the `[gateway]` table.
pub async fn start(extra: &str) -> Harness {
    start_with(extra, "", &[]).await
}

/// `start`, with more config appended after the servers and registry, and
/// files written beside the config first.
pub async fn start_with(extra: &str, more: &str, files: &[(&str, &str)]) -> Harness {
    start_full(extra, more, files, "").await
}

/// `start_with`, with `support` appended to the `[servers.support]` table.
pub async fn start_full(extra: &str, more: &str, files: &[(&str, &str)], support: &str) -> Harness {
    start_beside(extra, more, files, support, |_| axum::Router::new()).await
}

/// `start_full`, with the routes `beside` makes for the gateway served
/// beside `/mcp` (another crate's tests include this file: the console's).
pub async fn start_beside(
    extra: &str,
    more: &str,
    files: &[(&str, &str)],
    support: &str,
    beside: impl FnOnce(Arc<Gateway>) -> axum::Router,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let mut atlas_urls = BTreeMap::new();
    let mut atlas_cancel = BTreeMap::new();
    let mut servers = String::new();
    for kind in ServerKind::ALL.into_iter().chain([ServerKind::Notices, ServerKind::Support]) {
        let cancel = CancellationToken::new();
        let server = toolgate_atlas::server(kind, Some(&dir.path().join("atlas"))).unwrap();
        let (addr, _) =
            serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone()).await.unwrap();
        let url = format!("http://{addr}/mcp");
        servers.push_str(&format!("[servers.{}]\nurl = \"{url}\"\n", kind.name()));
        if kind == ServerKind::Support {
            servers.push_str(&format!("{support}\n"));
        }
        atlas_urls.insert(kind.name(), url);
        atlas_cancel.insert(kind.name(), cancel);
    }
    // Calls are not held for their approval unless a test says so (`HOLD`).
    let hold = if more.contains("[approvals]") { "" } else { "[approvals]\nhold_ms = 0\n" };
    let registry = registry_without(more);
    let text = format!(
        "[gateway]\nlist_ttl_ms = 200\nupstream_timeout_ms = 5000\n{extra}\n{servers}{registry}{CALLERS}{hold}{more}"
    );
    write_tokens(dir.path());
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, &text).unwrap();
    let config = Config::load(&path).unwrap();
    let gateway = Gateway::start(config, Mode::Serve).await.unwrap();
    let down = gateway.wait_ready(Duration::from_secs(10)).await;
    assert!(down.is_empty(), "{down:?}");
    let (url, cancel) = serve_gateway_with(gateway.clone(), beside(gateway.clone())).await;
    Harness { url, gateway, atlas_urls, atlas_cancel, dir, cancel }
}

/// The seed's registry without the entries `more` gives again (a test's
/// own word on a tool replaces the seed's).
pub fn registry_without(more: &str) -> String {
    let mut out = String::new();
    let mut keep = true;
    for line in REGISTRY.lines() {
        if let Some(rest) = line.strip_prefix("[registry.\"") {
            let name = rest.split('"').next().unwrap_or("");
            keep = !more.contains(&format!("[registry.\"{name}\"]"));
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A gateway in front of one rmcp upstream, until dropped.
pub struct Fronted {
    pub url: String,
    pub gateway: Arc<Gateway>,
    pub lock: std::path::PathBuf,
    pub dir: tempfile::TempDir,
    cancel: CancellationToken,
}

impl Drop for Fronted {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.gateway.stop();
    }
}

/// Serves `handler` and starts a gateway whose config is `config(upstream_url)`.
pub async fn front<S>(handler: S, config: impl FnOnce(&str) -> String) -> Fronted
where
    S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    let cancel = CancellationToken::new();
    let upstream = serve_rmcp(handler, &cancel).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, config(&upstream)).unwrap();
    let config = Config::load(&path).unwrap();
    let lock = config.lock_path();
    let gateway = Gateway::start(config, Mode::Serve).await.unwrap();
    assert!(gateway.wait_ready(Duration::from_secs(10)).await.is_empty());
    let (url, stop) = serve_gateway(gateway.clone()).await;
    let both = cancel.clone();
    tokio::spawn(async move {
        both.cancelled().await;
        stop.cancel();
    });
    Fronted { url, gateway, lock, dir, cancel }
}

pub async fn serve_gateway(gateway: Arc<Gateway>) -> (String, CancellationToken) {
    serve_gateway_with(gateway, axum::Router::new()).await
}

/// `serve_gateway`, with the routes of `beside` on the same listener.
pub async fn serve_gateway_with(
    gateway: Arc<Gateway>,
    beside: axum::Router,
) -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(downstream::http::serve_with(gateway, listener, beside, async move {
        stop.cancelled_owned().await
    }));
    (format!("http://{addr}/mcp"), cancel)
}

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "gateway-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// A well-formed 2026-07-28 request, ready to send: the standard `_meta`
/// (with whatever the caller put in `params._meta` on top) and the routing
/// headers that agree with the body.
pub fn request(url: &str, id: Value, method: &str, params: Value) -> reqwest::RequestBuilder {
    request_on(&reqwest::Client::new(), url, id, method, params)
}

/// `request`, on `client` (and its pool of connections).
pub fn request_on(
    client: &reqwest::Client,
    url: &str,
    id: Value,
    method: &str,
    mut params: Value,
) -> reqwest::RequestBuilder {
    let mut merged = meta();
    if let Some(Value::Object(extra)) = params.get("_meta") {
        for (k, v) in extra {
            merged[k.as_str()] = v.clone();
        }
    }
    params["_meta"] = merged;
    let mut req = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = params["name"].as_str() {
        req = req.header("Mcp-Name", name);
    }
    req.body(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
}

/// Sends a well-formed 2026-07-28 request (id 7); returns (status, JSON body or Null).
pub async fn post(url: &str, method: &str, params: Value) -> (u16, Value) {
    let resp = request(url, json!(7), method, params).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, answer_of(&text))
}

/// The JSON-RPC answer of a Streamable HTTP response body: plain JSON, or
/// the last event of an SSE stream (a call that runs past a second answers
/// on one).
pub fn answer_of(body: &str) -> Value {
    let last = body.lines().filter_map(|l| l.strip_prefix("data: ")).next_back().unwrap_or(body);
    serde_json::from_str(last).unwrap_or(Value::Null)
}

pub async fn call(url: &str, name: &str, arguments: Value) -> Value {
    let (status, body) =
        post(url, "tools/call", json!({"name": name, "arguments": arguments})).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// A request to the admin API beside `/mcp` (GET, or POST with `body`).
pub async fn admin(
    url: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let base = url.trim_end_matches("/mcp");
    let client = reqwest::Client::new();
    let mut req = if method == "GET" {
        client.get(format!("{base}{path}"))
    } else {
        client.post(format!("{base}{path}"))
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null))
}

pub async fn list_names(url: &str) -> Vec<String> {
    let (_, body) = post(url, "tools/list", json!({})).await;
    body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

/// Serves an rmcp server handler over Streamable HTTP on a free loopback
/// port until `cancel` fires; returns its `/mcp` URL.
pub async fn serve_rmcp<S>(handler: S, cancel: &CancellationToken) -> String
where
    S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    serve_rmcp_requiring(handler, cancel, None).await
}

/// `serve_rmcp`, answering 401 to any request without header `required`
/// (name, value): an upstream that wants its own credential.
pub async fn serve_rmcp_requiring<S>(
    handler: S,
    cancel: &CancellationToken,
    required: Option<(&'static str, &'static str)>,
) -> String
where
    S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    serve_rmcp_admitting(handler, cancel, move |request| {
        required.is_none_or(|(name, value)| {
            request.headers().get(name).and_then(|v| v.to_str().ok()) == Some(value)
        })
    })
    .await
}

/// `serve_rmcp`, answering 401 to any request `admits` refuses.
pub async fn serve_rmcp_admitting<S>(
    handler: S,
    cancel: &CancellationToken,
    admits: impl Fn(&axum::extract::Request) -> bool + Clone + Send + Sync + 'static,
) -> String
where
    S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let config = StreamableHttpServerConfig::default().with_cancellation_token(cancel.clone());
    let service: StreamableHttpService<S, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(handler.clone()), Default::default(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = cancel.clone();
    let router =
        axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let admitted = admits(&request);
                async move {
                    if admitted {
                        next.run(request).await
                    } else {
                        axum::response::IntoResponse::into_response(
                            axum::http::StatusCode::UNAUTHORIZED,
                        )
                    }
                }
            },
        ));
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await
    });
    format!("http://{addr}/mcp")
}

/// The repository's root, where `tests/python` and `.venv-sdk` are.
pub fn workspace() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Python with the official MCP SDK: `TOOLGATE_PYTHON`, else the venv
/// `scripts/test` creates.
pub fn python() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("TOOLGATE_PYTHON") {
        return std::path::PathBuf::from(p);
    }
    let venv = workspace().join(".venv-sdk/bin/python");
    assert!(venv.exists(), "no Python with the MCP SDK: run scripts/test or set TOOLGATE_PYTHON");
    venv
}

/// A Python stdio MCP server (2025-11-25) named `name`, with one tool
/// `tool` taking any object, whose call answers the Python expression
/// `result` (`msg` is the request).
pub fn stdio_server(name: &str, tool: &str, result: &str) -> String {
    format!(
        r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid = msg.get("method"), msg["id"]
    if method == "initialize":
        result = {{"protocolVersion": "2025-11-25", "capabilities": {{"tools": {{}}}}, "serverInfo": {{"name": "{name}", "version": "1"}}}}
    elif method == "tools/list":
        result = {{"tools": [{{"name": "{tool}", "inputSchema": {{"type": "object"}}}}]}}
    elif method == "tools/call":
        result = {result}
    else:
        print(json.dumps({{"jsonrpc": "2.0", "id": rid, "error": {{"code": -32601, "message": "no"}}}}), flush=True); continue
    print(json.dumps({{"jsonrpc": "2.0", "id": rid, "result": result}}), flush=True)
"#
    )
}

/// A fresh schema in the machine's PostgreSQL (`TOOLGATE_TEST_POSTGRES`,
/// default `postgres://postgres@127.0.0.1:5432/test`), as a ledger URL.
pub async fn postgres_ledger(prefix: &str) -> String {
    let base = std::env::var("TOOLGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("{prefix}_{}_{nanos}", std::process::id());
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL answers (start it: see .ci/run)");
    tokio::spawn(conn);
    client.batch_execute(&format!("CREATE SCHEMA {schema}")).await.unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-csearch_path%3D{schema}")
}

/// Another replica of `h`'s gateway (its config, so its ledger), served.
pub async fn replica_of(h: &Harness) -> (Arc<Gateway>, String, CancellationToken) {
    let gateway =
        Gateway::start(Config::load(&h.dir.path().join("toolgate.toml")).unwrap(), Mode::Serve)
            .await
            .unwrap();
    assert!(gateway.wait_ready(Duration::from_secs(10)).await.is_empty());
    let (url, cancel) = serve_gateway(gateway.clone()).await;
    (gateway, url, cancel)
}
