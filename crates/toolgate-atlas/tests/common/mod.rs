//! Shared helpers for the Atlas tests: the shared fixture, in-process calls,
//! and real transports (the built binary over stdio and HTTP).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use toolgate_atlas::{AtlasServer, ServerKind};

/// `../shared` beside the checkout, or `TOOLGATE_SHARED_DIR`.
pub fn shared_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TOOLGATE_SHARED_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

pub fn fixture() -> Value {
    let path = shared_dir().join("fixtures/atlas-contracts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {}: {e}; set TOOLGATE_SHARED_DIR to the shared/ folder", path.display())
    });
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The fixture's entry for one server, by its id suffix (`tickets`, …).
pub fn fixture_server(kind: ServerKind) -> Value {
    fixture()["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"].as_str().unwrap().ends_with(kind.name()))
        .cloned()
        .expect("fixture lists every server")
}

pub struct Called {
    pub is_error: bool,
    pub structured: Value,
    pub text: String,
}

pub fn called(result: CallToolResult) -> Called {
    Called {
        is_error: result.is_error == Some(true),
        structured: result.structured_content.clone().unwrap_or(Value::Null),
        text: result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Calls a tool in process (validation and behaviour, no transport).
pub fn run(server: &AtlasServer, name: &str, arguments: Value) -> Called {
    let Value::Object(map) = arguments else { panic!("arguments must be an object") };
    called(server.run(name, Some(map)).expect("known tool"))
}

pub fn server(kind: ServerKind, dir: &Path) -> AtlasServer {
    toolgate_atlas::server(kind, Some(dir)).expect("server starts")
}

#[derive(Clone, Copy, Debug)]
pub enum Era {
    /// 2026-07-28: server/discover, per-request _meta, no session.
    Modern,
    /// 2025-11-25: the initialize handshake.
    Legacy,
}

pub fn lifecycle(era: Era) -> ClientLifecycleMode {
    match era {
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        Era::Legacy => ClientLifecycleMode::Initialize,
    }
}

pub type Client = RunningService<RoleClient, ()>;

pub async fn connect_http(url: &str, era: Era) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    ().serve_with_lifecycle(transport, lifecycle(era)).await.expect("client connects over HTTP")
}

pub async fn connect_stdio(kind: ServerKind, state: &Path, era: Era) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate-atlas"));
    cmd.arg(kind.name()).arg("--state").arg(state);
    let transport = TokioChildProcess::new(cmd).expect("child starts");
    ().serve_with_lifecycle(transport, lifecycle(era)).await.expect("client connects over stdio")
}

pub async fn call(client: &Client, name: &str, arguments: Value) -> Called {
    let Value::Object(map) = arguments else { panic!("arguments must be an object") };
    let name = name.to_string();
    called(
        client
            .call_tool(CallToolRequestParams::new(name).with_arguments(map))
            .await
            .expect("tools/call answers"),
    )
}

/// The Atlas binary serving Streamable HTTP on a free loopback port; killed on drop.
pub struct HttpChild {
    pub child: Child,
    pub url: String,
}

impl Drop for HttpChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn spawn_http(kind: ServerKind, state: &Path) -> HttpChild {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate-atlas"))
        .arg(kind.name())
        .args(["--http", "127.0.0.1:0", "--state"])
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolgate-atlas starts");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().expect("server announces its address").expect("stderr readable");
        if let Some(at) = line.find("http://") {
            break line[at..].trim().to_string();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    HttpChild { child, url }
}

/// The JSON-RPC `_meta` a 2026-07-28 request carries.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "atlas-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}
