//! Level 2/3: the upstream client against real MCP servers over Streamable
//! HTTP — Atlas (2026-07-28) and an rmcp server that only speaks the legacy
//! handshake — and against an address where nothing listens.

mod common;

use std::borrow::Cow;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};
use toolgate_gateway::config::ServerConfig as UpstreamConfig;
use toolgate_mcp::upstream::{Era, Upstream, UpstreamError};

use common::{serve_rmcp, serve_rmcp_admitting};

fn http_upstream(name: &str, url: &str) -> std::sync::Arc<Upstream> {
    let config = UpstreamConfig { url: Some(url.into()), ..Default::default() };
    Upstream::new(name, config.server(), Duration::from_secs(5), Duration::from_secs(60), "test")
}

/// The Atlas tickets server (2026-07-28) over HTTP, until `cancel`; its URL.
async fn atlas_tickets(dir: &std::path::Path, cancel: &CancellationToken) -> String {
    let server = toolgate_atlas::server(ServerKind::Tickets, Some(dir)).unwrap();
    let (addr, _) =
        serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone()).await.unwrap();
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn a_modern_http_upstream_is_listed_and_called_verbatim() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let upstream = http_upstream("tickets", &atlas_tickets(dir.path(), &cancel).await);
    upstream.start(cancel.clone());
    assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    let listing = upstream.listing().unwrap();
    assert_eq!(listing.era, Era::Modern);
    let names: Vec<&str> = listing.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["export_service_records", "get_ticket", "post_ticket_update", "search_tickets"]
    );
    // The definition arrives byte for byte as the server sent it.
    let get_ticket = &listing.tools[1];
    assert_eq!(serde_json::from_str::<Value>(get_ticket.raw.get()).unwrap(), get_ticket.definition);
    assert!(get_ticket.definition["annotations"].get("title").is_none());

    let raw = upstream
        .call(
            toolgate_mcp::upstream::Kind::Tool,
            "get_ticket",
            &json!({"ticket_id": "SR-20031"}),
            Default::default(),
        )
        .await
        .unwrap();
    let result: Value = serde_json::from_str(raw.get()).unwrap();
    assert_eq!(result["structuredContent"]["ticket_id"], "SR-20031");
    let missing: Value = serde_json::from_str(
        upstream
            .call(
                toolgate_mcp::upstream::Kind::Tool,
                "get_ticket",
                &json!({"ticket_id": "SR-99999"}),
                Default::default(),
            )
            .await
            .unwrap()
            .get(),
    )
    .unwrap();
    assert_eq!(missing["isError"], true);
    cancel.cancel();
}

#[derive(Clone)]
struct LegacyOnly;

impl ServerHandler for LegacyOnly {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("legacy-only", "1"))
    }
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![ProtocolVersion::V_2025_11_25])
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool =
            serde_json::from_value(json!({"name": "echo", "inputSchema": {"type": "object"}}))
                .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = Value::Object(request.arguments.unwrap_or_default()).to_string();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[tokio::test]
async fn a_legacy_only_upstream_gets_the_initialize_handshake() {
    let cancel = CancellationToken::new();
    let url = serve_rmcp(LegacyOnly, &cancel).await;
    let upstream = http_upstream("legacy", &url);
    upstream.start(cancel.clone());
    assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    let listing = upstream.listing().unwrap();
    assert_eq!((listing.era, listing.protocol_version.as_str()), (Era::Legacy, "2025-11-25"));
    let raw = upstream
        .call(toolgate_mcp::upstream::Kind::Tool, "echo", &json!({"x": 1}), Default::default())
        .await
        .unwrap();
    let result: Value = serde_json::from_str(raw.get()).unwrap();
    assert_eq!(result["content"][0]["text"], "{\"x\":1}");
    cancel.cancel();
}

#[tokio::test]
async fn an_unreachable_upstream_is_down_with_a_reason_and_calls_say_unavailable() {
    let cancel = CancellationToken::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let upstream = http_upstream("gone", &format!("http://127.0.0.1:{port}/mcp"));
    upstream.start(cancel.clone());
    assert!(!upstream.ready(Duration::from_millis(500)).await);
    assert!(upstream.listing().is_none());
    assert!(
        upstream.down_reason().unwrap().contains("cannot reach"),
        "{:?}",
        upstream.down_reason()
    );
    let err = upstream
        .call(toolgate_mcp::upstream::Kind::Tool, "x", &json!({}), Default::default())
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Unavailable(_)), "{err}");
    cancel.cancel();
}

/// A stdio server that never answers `tools/call` and writes down every
/// notification it receives.
const SILENT_SERVER: &str = r#"
import json, sys
log = open(sys.argv[1], "a")
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        log.write(line); log.flush(); continue
    method, rid = msg.get("method"), msg["id"]
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "silent", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "slow", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        log.write(json.dumps({"called": rid}) + "\n"); log.flush(); continue
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}), flush=True); continue
    print(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}), flush=True)
"#;

#[tokio::test]
async fn a_stdio_call_abandoned_at_its_deadline_is_cancelled_upstream() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("silent.py");
    std::fs::write(&script, SILENT_SERVER).unwrap();
    let log = dir.path().join("received.jsonl");
    let config = UpstreamConfig {
        command: Some("/usr/bin/python3".into()),
        args: vec![script.display().to_string(), log.display().to_string()],
        sandbox: writes(dir.path()),
        ..Default::default()
    };
    let upstream = Upstream::new(
        "silent",
        config.server(),
        Duration::from_millis(300),
        Duration::from_secs(60),
        "test",
    );
    upstream.start(cancel.clone());
    assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    let outcome = upstream
        .call(toolgate_mcp::upstream::Kind::Tool, "slow", &json!({}), Default::default())
        .await;
    assert!(matches!(outcome, Err(UpstreamError::Timeout)), "{outcome:?}");
    // The server hears that the answer is no longer wanted, for that request.
    let mut received = Vec::new();
    for _ in 0..50 {
        received = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        if received.iter().any(|m| m["method"] == "notifications/cancelled") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let called = received
        .iter()
        .find_map(|m| m.get("called").cloned())
        .expect("the call reached the server");
    let cancelled = received
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("no cancellation: {received:?}"));
    assert_eq!(cancelled["params"]["requestId"], called);
    cancel.cancel();
}

#[tokio::test]
async fn an_upstream_listing_more_tools_than_allowed_is_refused_whole() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let url = atlas_tickets(dir.path(), &cancel).await;
    let counted = http_upstream("tickets", &url);
    counted.start(cancel.clone());
    assert!(counted.ready(Duration::from_secs(10)).await);
    let n = counted.listing().unwrap().tools.len();
    // Exactly at the limit: listed.
    let at = http_upstream("tickets", &url);
    at.set_max_tools(n);
    at.start(cancel.clone());
    assert!(at.ready(Duration::from_secs(10)).await, "{:?}", at.down_reason());
    // One over: refused whole, and the reason says which setting.
    let over = http_upstream("tickets", &url);
    over.set_max_tools(n - 1);
    over.start(cancel.clone());
    assert!(!over.ready(Duration::from_secs(2)).await);
    let why = over.down_reason().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "it lists {n} tools, more than [gateway] max_tools_per_upstream ({})",
            n - 1
        )),
        "{why}"
    );
    cancel.cancel();
}

#[tokio::test]
async fn an_upstream_gets_its_own_credential_from_the_environment_or_a_file_and_no_other() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let atlas = toolgate_atlas::server(ServerKind::Tickets, Some(dir.path())).unwrap();
    let url = common::serve_rmcp_requiring(
        atlas,
        &cancel,
        Some(("x-api-key", "upstream-key-0123456789")),
    )
    .await;
    // SAFETY: this test alone sets this variable.
    unsafe { std::env::set_var("TG_TEST_UPSTREAM_KEY", "upstream-key-0123456789") };
    let key_file = dir.path().join("upstream.key");
    std::fs::write(&key_file, "upstream-key-0123456789\n").unwrap();
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let with = |config: UpstreamConfig| {
        let upstream = Upstream::new(
            "tickets",
            config.server(),
            Duration::from_secs(5),
            Duration::from_secs(60),
            "test",
        );
        upstream.start(cancel.clone());
        upstream
    };
    let base = || UpstreamConfig { url: Some(url.clone()), ..Default::default() };
    // Without it: refused by the upstream.
    let bare = with(base());
    assert!(!bare.ready(Duration::from_secs(2)).await);
    // From the environment, and from an owner-only file (trailing newline dropped): listed.
    let from_env = with(UpstreamConfig {
        headers_env: [("x-api-key".into(), "TG_TEST_UPSTREAM_KEY".into())].into(),
        ..base()
    });
    assert!(from_env.ready(Duration::from_secs(10)).await, "{:?}", from_env.down_reason());
    let from_file = with(UpstreamConfig {
        headers_file: [("x-api-key".into(), key_file.clone())].into(),
        ..base()
    });
    assert!(from_file.ready(Duration::from_secs(10)).await, "{:?}", from_file.down_reason());
    // A missing variable, or a file others can read: down, and the reason
    // names the variable or the file — never a value.
    let unset = with(UpstreamConfig {
        headers_env: [("x-api-key".into(), "TG_TEST_UNSET_VARIABLE".into())].into(),
        ..base()
    });
    assert!(!unset.ready(Duration::from_secs(2)).await);
    assert!(
        unset
            .down_reason()
            .unwrap()
            .contains("the environment variable TG_TEST_UNSET_VARIABLE is not set")
    );
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .unwrap();
    let loose = with(UpstreamConfig {
        headers_file: [("x-api-key".into(), key_file.clone())].into(),
        ..base()
    });
    assert!(!loose.ready(Duration::from_secs(2)).await);
    let why = loose.down_reason().unwrap();
    assert!(why.contains("chmod 600") && !why.contains("upstream-key"), "{why}");
    cancel.cancel();
}

/// An upstream that takes its credential only in its URL (`?api_key=…`):
/// the config keeps it in an owner-only file (`query_file`) or a variable
/// (`query_env`), and each connect adds it to the URL, after the URL's own
/// parameters; an error never shows the URL that holds it.
#[tokio::test]
async fn a_query_credential_is_added_to_the_url_at_each_connect_from_a_file_or_a_variable() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let atlas = toolgate_atlas::server(ServerKind::Tickets, Some(dir.path())).unwrap();
    let url =
        serve_rmcp_requiring_query(atlas, &cancel, "region=eu&api_key=query-key-0123456789").await;
    // SAFETY: this test alone sets this variable.
    unsafe { std::env::set_var("TG_TEST_QUERY_KEY", "query-key-0123456789") };
    let key_file = dir.path().join("query.key");
    std::fs::write(&key_file, "query-key-0123456789\n").unwrap();
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let with = |config: UpstreamConfig| {
        let upstream = Upstream::new(
            "tickets",
            config.server(),
            Duration::from_secs(5),
            Duration::from_secs(60),
            "test",
        );
        upstream.start(cancel.clone());
        upstream
    };
    let base = || UpstreamConfig { url: Some(format!("{url}?region=eu")), ..Default::default() };
    let bare = with(base());
    assert!(!bare.ready(Duration::from_secs(2)).await);
    let from_file = with(UpstreamConfig {
        query_file: [("api_key".into(), key_file.clone())].into(),
        ..base()
    });
    assert!(from_file.ready(Duration::from_secs(10)).await, "{:?}", from_file.down_reason());
    let from_env = with(UpstreamConfig {
        query_env: [("api_key".into(), "TG_TEST_QUERY_KEY".into())].into(),
        ..base()
    });
    assert!(from_env.ready(Duration::from_secs(10)).await, "{:?}", from_env.down_reason());
    let why = bare.down_reason().unwrap_or_default();
    assert!(!why.contains("query-key"), "{why}");
    // Written into the url by hand instead: the config is refused, with where it goes.
    let text =
        format!("[servers.tickets]\nurl = \"{url}?region=eu&api_key=query-key-0123456789\"\n");
    let refused = toolgate_gateway::config::Config::parse(&text, &dir.path().join("toolgate.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("url holds a credential (the query parameter `api_key`)")
            && refused.contains("query_file")
            && !refused.contains("query-key"),
        "{refused}"
    );
    cancel.cancel();
}

/// `serve_rmcp` behind a check that the request's query is exactly `query`.
async fn serve_rmcp_requiring_query<S>(
    handler: S,
    cancel: &CancellationToken,
    query: &'static str,
) -> String
where
    S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    serve_rmcp_admitting(handler, cancel, move |request| request.uri().query() == Some(query)).await
}

/// Lists one tool with the `ttlMs` it is given, counting the lists.
#[derive(Clone)]
struct Hinting {
    ttl_ms: Option<u64>,
    lists: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ServerHandler for Hinting {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tool: Tool =
            serde_json::from_value(json!({"name": "echo", "inputSchema": {"type": "object"}}))
                .unwrap();
        let mut result = ListToolsResult::with_all_items(vec![tool]);
        result.ttl_ms = self.ttl_ms;
        Ok(result)
    }
}

#[tokio::test]
async fn a_server_s_shorter_ttl_hint_is_honoured_down_to_a_floor() {
    let cancel = CancellationToken::new();
    // The gateway's own list_ttl_ms is 60 s here. A hint as long, a 1.5 s
    // hint, and 0 (rmcp's default: "do not cache"), held to the 1 s floor;
    // watched side by side for 3.2 s.
    let mut watched = Vec::new();
    for ttl_ms in [60_000, 1500, 0] {
        let lists = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let url = serve_rmcp(Hinting { ttl_ms: Some(ttl_ms), lists: lists.clone() }, &cancel).await;
        let upstream = http_upstream("hinting", &url);
        upstream.start(cancel.clone());
        watched.push((upstream, lists));
    }
    for (upstream, _) in &watched {
        assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    }
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let counts: Vec<usize> =
        watched.iter().map(|(_, n)| n.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert_eq!(counts[0], 1, "listed once within list_ttl_ms ({counts:?})");
    assert!((2..=3).contains(&counts[1]), "a 1.5 s hint: every 1.5 s ({counts:?})");
    assert!((3..=4).contains(&counts[2]), "a 0 hint: no more than once a second ({counts:?})");
    cancel.cancel();
}

/// Answers `echo` with a text of `n` bytes, `n` the argument.
#[derive(Clone)]
struct Sized;

impl ServerHandler for Sized {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool =
            serde_json::from_value(json!({"name": "echo", "inputSchema": {"type": "object"}}))
                .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let n = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("n"))
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        Ok(CallToolResult::success(vec![ContentBlock::text("x".repeat(n))]).into())
    }
}

#[tokio::test]
async fn an_upstream_answer_passes_under_max_upstream_message_bytes_and_is_refused_over_it() {
    let cancel = CancellationToken::new();
    let url = serve_rmcp(Sized, &cancel).await;
    let upstream = http_upstream("sized", &url);
    let max = 64 << 10;
    upstream.set_max_message_bytes(max);
    upstream.start(cancel.clone());
    assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    let (short, long) = (json!({"n": max - 200}), json!({"n": max}));
    let call = |arguments| {
        upstream.call(toolgate_mcp::upstream::Kind::Tool, "echo", arguments, Default::default())
    };
    // The answer's envelope is well under 200 bytes: a text that leaves room passes …
    let raw = call(&short).await.unwrap();
    assert!(raw.get().len() > max - 200 && raw.get().len() <= max);
    // … and a text as long as the limit itself cannot fit.
    match call(&long).await {
        Err(UpstreamError::Protocol(why)) => {
            assert!(why.contains(&format!("max_upstream_message_bytes ({max})")), "{why}")
        }
        other => panic!("an answer over the limit: {other:?}"),
    }
    cancel.cancel();
}

/// A stdio server whose tool `echo` answers a text of `n` bytes.
fn sized_server() -> String {
    common::stdio_server(
        "sized",
        "echo",
        r#"{"content": [{"type": "text", "text": "x" * msg["params"]["arguments"]["n"]}]}"#,
    )
}

#[tokio::test]
async fn a_stdio_line_over_max_upstream_message_bytes_fails_its_call_at_once() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sized.py");
    std::fs::write(&script, sized_server()).unwrap();
    let config = UpstreamConfig {
        command: Some("/usr/bin/python3".into()),
        args: vec![script.display().to_string()],
        sandbox: writes(dir.path()),
        ..Default::default()
    };
    // A deadline far longer than the test may take: the refusal must not wait for it.
    let upstream = Upstream::new(
        "sized",
        config.server(),
        Duration::from_secs(30),
        Duration::from_secs(60),
        "test",
    );
    let max = 64 << 10;
    upstream.set_max_message_bytes(max);
    upstream.start(cancel.clone());
    assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    let (fits, over, small) = (json!({"n": max - 200}), json!({"n": max}), json!({"n": 10}));
    let call = |arguments| {
        upstream.call(toolgate_mcp::upstream::Kind::Tool, "echo", arguments, Default::default())
    };
    let raw = call(&fits).await.unwrap();
    assert!(raw.get().len() > max - 200, "{}", raw.get().len());
    let started = std::time::Instant::now();
    match call(&over).await {
        Err(UpstreamError::Protocol(why)) => {
            assert!(why.contains(&format!("max_upstream_message_bytes ({max})")), "{why}")
        }
        other => panic!("an answer over the limit: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused only after {:?}",
        started.elapsed()
    );
    // The session goes on: the next answer that fits is read.
    assert!(call(&small).await.is_ok());
    cancel.cancel();
}

/// An upstream that answers with a redirect is not followed: the call and
/// its configured credential would go somewhere the config never named.
/// The upstream is down, and the reason says what to change.
#[tokio::test]
async fn an_upstream_redirect_is_not_followed_and_the_reason_says_so() {
    let cancel = CancellationToken::new();
    // Where the redirect points: counts every request that reaches it.
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = reached.clone();
    let target = axum::Router::new().fallback(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async { "{}" }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, target).await });
    let redirect =
        axum::Router::new().fallback(move || {
            let to = target_url.clone();
            async move {
                (axum::http::StatusCode::TEMPORARY_REDIRECT, [(axum::http::header::LOCATION, to)])
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirect).await });
    // SAFETY: this test alone sets this variable.
    unsafe { std::env::set_var("TG_TEST_REDIRECTED_KEY", "redirected-key-0123456789") };
    let config = UpstreamConfig {
        url: Some(url),
        headers_env: [("x-api-key".into(), "TG_TEST_REDIRECTED_KEY".into())].into(),
        ..Default::default()
    };
    let upstream = Upstream::new(
        "moved",
        config.server(),
        Duration::from_secs(5),
        Duration::from_secs(60),
        "test",
    );
    upstream.start(cancel.clone());
    assert!(!upstream.ready(Duration::from_secs(2)).await);
    let why = upstream.down_reason().unwrap();
    assert!(why.contains("307") && why.contains("does not follow") && why.contains("url"), "{why}");
    assert_eq!(reached.load(std::sync::atomic::Ordering::Relaxed), 0, "the redirect was followed");
    cancel.cancel();
}

/// A stdio server that, once initialized, says every 10 ms that its tools
/// changed, and writes down each `tools/list` it is asked.
const FLOODING_SERVER: &str = r#"
import json, sys, threading, time
log = open(sys.argv[1], "a")
out = threading.Lock()
def say(msg):
    with out:
        print(json.dumps(msg), flush=True)
def flood():
    while True:
        say({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        time.sleep(0.01)
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method == "notifications/initialized":
        threading.Thread(target=flood, daemon=True).start()
        continue
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {"name": "flood", "version": "1"}}
    elif method == "tools/list":
        log.write("listed\n"); log.flush()
        result = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}
    else:
        say({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}); continue
    say({"jsonrpc": "2.0", "id": rid, "result": result})
"#;

#[tokio::test]
async fn a_flood_of_list_changed_is_listed_at_most_twice_a_second() {
    let cancel = CancellationToken::new();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("flood.py");
    std::fs::write(&script, FLOODING_SERVER).unwrap();
    let log = dir.path().join("listed.log");
    let config = UpstreamConfig {
        command: Some("/usr/bin/python3".into()),
        args: vec![script.display().to_string(), log.display().to_string()],
        sandbox: writes(dir.path()),
        ..Default::default()
    };
    let upstream = Upstream::new(
        "flood",
        config.server(),
        Duration::from_secs(5),
        Duration::from_secs(60),
        "test",
    );
    upstream.start(cancel.clone());
    assert!(upstream.ready(Duration::from_secs(10)).await, "{:?}", upstream.down_reason());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let listed = std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    // The first listing, then at most one per 500 ms for what was announced
    // (some 160 announcements).
    assert!((2..=5).contains(&listed), "{listed} listings in 1.6 s");
    cancel.cancel();
}

/// A box whose one grant is the test's folder (its script, its log).
fn writes(dir: &std::path::Path) -> Option<toolgate_gateway::config::SandboxConfig> {
    Some(toolgate_gateway::config::SandboxConfig::Boxed(toolgate_gateway::config::BoxConfig {
        write: vec![dir.to_path_buf()],
        ..Default::default()
    }))
}
