//! A whole request at the downstream HTTP edge: the method and path on the
//! first line, headers one per line, a blank line, then the body — through
//! the gateway's own router (every transport rule, admit, the pipeline) to
//! two Atlas upstreams in the same process. Whatever arrives, the answer is
//! a deliberate one (never a 500, never a panic), a JSON answer is JSON,
//! and no caller's token comes back in it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, header};
use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};
use toolgate_gateway::config::Config;
use toolgate_gateway::downstream::http::router;
use toolgate_gateway::gateway::{Gateway, Mode};
use tower::ServiceExt as _;

pub(crate) const AGENT_TOKEN: &str = "fuzz-agent-token-0123456789abcdef";
pub(crate) const APPROVER_TOKEN: &str = "fuzz-approver-token-0123456789abcd";

struct Fixture {
    rt: tokio::runtime::Runtime,
    app: axum::Router,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        // One thread: AFL wants the same path for the same input.
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let app = rt.block_on(start(state_dir()));
        Fixture { rt, app }
    })
}

/// This process's folder under the temp dir, with those of processes that
/// are gone removed (AFL restarts the target now and then).
fn state_dir() -> PathBuf {
    let base = std::env::temp_dir().join("toolgate-fuzz-edge");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            let alive = e
                .file_name()
                .to_str()
                .is_some_and(|pid| std::path::Path::new("/proc").join(pid).exists());
            if !alive {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = base.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the state dir");
    dir
}

async fn start(dir: PathBuf) -> axum::Router {
    let mut servers = String::new();
    for kind in [ServerKind::Tickets, ServerKind::Parts] {
        let server =
            toolgate_atlas::server(kind, Some(&dir.join("atlas"))).expect("an Atlas server");
        let (addr, _) = serve::http(
            server,
            "127.0.0.1:0".parse().expect("an address"),
            CancellationToken::new(),
        )
        .await
        .expect("serving");
        servers.push_str(&format!("[servers.{}]\nurl = \"http://{addr}/mcp\"\n", kind.name()));
    }
    for (file, token) in [("agent.token", AGENT_TOKEN), ("dana.token", APPROVER_TOKEN)] {
        let path = dir.join(file);
        std::fs::write(&path, token).expect("writing a token");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("owner-only");
    }
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:8700\"\nupstream_timeout_ms = 5000\n{servers}{REGISTRY}"
    );
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, text).expect("writing the config");
    let config = Config::load(&path).expect("the fuzz config loads");
    let gateway = Gateway::start(config, Mode::Serve).await.expect("the gateway starts");
    let down = gateway.wait_ready(Duration::from_secs(20)).await;
    assert!(down.is_empty(), "upstreams down: {down:?}");
    router(gateway)
}

const REGISTRY: &str = r#"
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
[callers.agent]
tenant = "atlas"
roles = ["agent"]
token_file = "agent.token"
[callers.dana]
tenant = "atlas"
roles = ["approver"]
token_file = "dana.token"
[approvals]
hold_ms = 0
"#;

/// `data` as a request: `METHOD PATH`, header lines, a blank line, the body.
fn request(data: &[u8]) -> Option<Request<Body>> {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &b""[..]),
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split('\n');
    let (method, path) = lines.next()?.split_once(' ')?;
    let mut builder = Request::builder().method(method).uri(path);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        builder = builder.header(name.trim(), value.trim());
    }
    let mut request = builder.body(Body::from(body.to_vec())).ok()?;
    request.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000))));
    Some(request)
}

pub(crate) fn run(data: &[u8]) {
    // What no HTTP parser would hand the router is not the edge's to judge.
    let Some((status, content_type, body)) = answer(data) else { return };
    assert!(status != 500, "a 500 from the edge");
    // The caller's own bytes may come back to it (an echoed header, a
    // name); its credential may not: a token counts as sent only where
    // something other than `Authorization` carried it.
    let text = String::from_utf8_lossy(data);
    let sent_body: String = text
        .split('\n')
        .filter(|l| !l.to_ascii_lowercase().starts_with("authorization:"))
        .collect::<Vec<_>>()
        .join("\n");
    for token in [AGENT_TOKEN, APPROVER_TOKEN] {
        assert!(
            sent_body.contains(token) || !body.contains(token),
            "a caller's token in the answer"
        );
    }
    if content_type.starts_with("application/json") {
        assert!(
            serde_json::from_str::<serde_json::Value>(&body).is_ok(),
            "a JSON answer that is not JSON"
        );
    }
}

/// The edge's answer to `data`: its status, content type and body (of a
/// stream, what came within 300 ms); `None` when `data` is no request.
pub fn answer(data: &[u8]) -> Option<(u16, String, String)> {
    let request = request(data)?;
    let f = fixture();
    f.rt.block_on(async {
        let response = f.app.clone().oneshot(request).await.expect("the router is infallible");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let read = axum::body::to_bytes(response.into_body(), 64 << 20);
        let body = if content_type.starts_with("text/event-stream") {
            // A listen stream stays open: what came in a moment is enough.
            match tokio::time::timeout(Duration::from_millis(300), read).await {
                Ok(body) => body.expect("the body reads"),
                Err(_) => Default::default(),
            }
        } else {
            read.await.expect("the body reads")
        };
        Some((status, content_type, String::from_utf8_lossy(&body).into_owned()))
    })
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"fuzz","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let modern = |method: &str, name: Option<&str>, params: &str| {
        let name = name.map(|n| format!("Mcp-Name: {n}\n")).unwrap_or_default();
        format!(
            "POST /mcp\nHost: 127.0.0.1:8700\nAuthorization: Bearer {AGENT_TOKEN}\nContent-Type: application/json\nAccept: application/json, text/event-stream\nMCP-Protocol-Version: 2026-07-28\nMcp-Method: {method}\n{name}\n{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"{method}\",\"params\":{{{params}{sep}{meta}}}}}",
            sep = if params.is_empty() { "" } else { "," }
        )
    };
    let legacy = |body: &str| {
        format!(
            "POST /mcp\nHost: localhost\nAuthorization: Bearer {AGENT_TOKEN}\nContent-Type: \
                application/json\nAccept: application/json, \
                text/event-stream\nMCP-Protocol-Version: 2025-11-25\n\n{body}"
        )
    };
    let mut out = vec![
        modern("tools/list", None, ""),
        modern(
            "tools/call",
            Some("parts__find_part"),
            r#""name":"parts__find_part","arguments":{"model_variant":"AC-250-S","category":"thermostatic-valve"}"#,
        ),
        modern(
            "tools/call",
            Some("parts__find_part"),
            r#""name":"parts__find_part","arguments":{"model_variant":"AC-250-X","extra":1}"#,
        ),
        modern(
            "tools/call",
            Some("parts__raise_parts_order"),
            r#""name":"parts__raise_parts_order","arguments":{"part_no":"AC250-TV-2303","quantity":8,"ticket_id":"SR-10001","justification":"valve replacement"},"requestState":"tg1.AAAA""#,
        ),
        modern(
            "tools/call",
            Some("tickets__export_service_records"),
            r#""name":"tickets__export_service_records","arguments":{"recipient":"ops@example.com","model_variant":"AC-250-S","include_site_contacts":true}"#,
        ),
        modern(
            "tools/call",
            Some("tickets__search_tickets"),
            r#""name":"tickets__search_tickets","arguments":{"model_variant":"AC-250-S","symptom":"F-101","limit":3},"inputResponses":{"x":{}}"#,
        ),
        modern("resources/list", None, ""),
        modern("prompts/list", None, ""),
        modern("server/discover", None, ""),
        modern("ping", None, ""),
        legacy(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}"#,
        ),
        legacy(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tickets__get_ticket","arguments":{"ticket_id":"SR-10001"}}}"#,
        ),
        legacy(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        format!("GET /healthz\nHost: localhost\n\n"),
        format!("GET /readyz\nHost: localhost\n\n"),
        format!("GET /.well-known/oauth-protected-resource\nHost: localhost\n\n"),
        format!(
            "GET /admin/approvals\nHost: localhost\nAuthorization: Bearer {APPROVER_TOKEN}\n\n"
        ),
        format!(
            "POST /mcp\nHost: evil.example\nOrigin: http://evil.example\nContent-Type: application/json\n\n{{}}"
        ),
    ];
    out.push(
        modern(
            "tools/call",
            Some("parts__find_part"),
            r#""name":"parts__find_part","arguments":{"model_variant":"AC-250-S"}"#,
        )
        .replace(
            "Mcp-Name: parts__find_part\n",
            "Mcp-Name: parts__find_part\nMcp-Param-Model_variant: =?base64?QUMtMjUwLVM=?=\n",
        ),
    );
    out.into_iter().map(String::into_bytes).collect()
}
