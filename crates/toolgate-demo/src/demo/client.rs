//! The demo's MCP clients (rmcp, the reference SDK) and what one call got.

use std::path::Path;
use std::process::Stdio;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientConfig, ElicitationCapability, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, Peer, RoleClient};
use serde_json::{Map, Value, json};

pub type Client = RunningService<RoleClient, ClientConfig>;

/// The demo's client says it can ask its person (elicitation), so a call
/// still waiting for an approver gets a question and a requestState it
/// re-issues with, as an interactive client would.
fn asks() -> ClientConfig {
    let mut info = ClientConfig::default();
    info.capabilities.elicitation = Some(ElicitationCapability::new());
    info
}

/// What one call produced: a result, an input round, or a protocol failure.
pub enum Got {
    Result(Value),
    /// `input_required`: the whole result (requestState, _meta, …).
    Input(Value),
    Failed(String, Option<Value>),
}

impl Got {
    pub fn is_error(&self) -> bool {
        !matches!(self, Got::Result(r) if r["isError"] != true)
    }
    pub fn structured(&self) -> Option<&Value> {
        match self {
            Got::Result(r) => r.get("structuredContent"),
            _ => None,
        }
    }
    /// toolgate's refusal, if this is one.
    pub fn refusal(&self) -> Option<&Value> {
        self.structured().filter(|s| s["action"].is_string() && self.is_error())
    }
    pub fn refused(&self, action: &str) -> bool {
        self.refusal().is_some_and(|r| r["action"] == action)
    }
    pub fn refused_for(&self, reason: &str) -> bool {
        self.refusal().is_some_and(|r| r["reason"] == reason)
    }
    pub fn request_state(&self) -> Option<String> {
        match self {
            Got::Input(v) => v["requestState"].as_str().map(str::to_string),
            _ => None,
        }
    }
    /// The approval toolgate opened or waits on (input_required `_meta`, or a refusal).
    pub fn approval(&self) -> Option<Value> {
        match self {
            Got::Input(v) => v["_meta"].get("io.toolgate/approval").cloned(),
            _ => self.refusal().and_then(|r| r.get("approval_id")).map(|id| json!({"id": id})),
        }
    }
    pub fn approval_id(&self) -> Option<String> {
        self.approval().and_then(|a| a["id"].as_str().map(str::to_string))
    }
    pub fn paths(&self) -> Vec<String> {
        self.structured()
            .and_then(|s| s["violations"].as_array())
            .map(|v| v.iter().filter_map(|x| x["path"].as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
    pub fn protocol_error_action(&self) -> Option<String> {
        match self {
            Got::Failed(_, Some(data)) => data["action"].as_str().map(str::to_string),
            _ => None,
        }
    }
    pub fn summary(&self) -> String {
        match self {
            Got::Failed(msg, data) => match data {
                Some(d) => format!(
                    "protocol error: {msg} (action: {})",
                    d["action"].as_str().unwrap_or("-")
                ),
                None if msg.contains("error sending request") => {
                    "failed: the server is gone (connection refused)".into()
                }
                None => format!("failed: {msg}"),
            },
            Got::Input(v) => match v["_meta"].get("io.toolgate/approval") {
                Some(a) => format!(
                    "input_required: approval {} is {} ({})",
                    a["id"].as_str().unwrap_or("?"),
                    a["state"].as_str().unwrap_or("?"),
                    a["rules"][0].as_str().unwrap_or("?")
                ),
                None => "input_required: the tool asks for another input round".into(),
            },
            Got::Result(r) if r["isError"] == true => match self.refusal() {
                Some(s) => {
                    let paths = self.paths();
                    let at = if paths.is_empty() {
                        String::new()
                    } else {
                        format!(" at {}", paths.join(", "))
                    };
                    format!(
                        "refused: {} → action {}{at}",
                        s["reason"].as_str().unwrap_or("?"),
                        s["action"].as_str().unwrap_or("?")
                    )
                }
                None => format!(
                    "tool error: {}",
                    r["content"][0]["text"].as_str().unwrap_or("").replace('\n', " ")
                ),
            },
            Got::Result(r) => {
                let s = &r["structuredContent"];
                if let Some(id) = s["order_id"].as_str() {
                    format!(
                        "ran: order {id} placed ({} × {}, {} {} minor units)",
                        s["quantity"],
                        s["part_no"].as_str().unwrap_or(""),
                        s["total_minor"],
                        s["currency"].as_str().unwrap_or("")
                    )
                } else if let Some(id) = s["export_id"].as_str() {
                    format!(
                        "ran: {id}, {} records with site contacts left the building",
                        s["record_count"]
                    )
                } else if let (Some(id), Some(reference)) =
                    (s["ticket_id"].as_str(), s["client_reference"].as_str())
                {
                    let replayed = r["_meta"]["io.toolgate/operation"]["replayed"] == true;
                    format!(
                        "ran: ticket {id} for {reference}{}",
                        if replayed { " (the recorded result, replayed)" } else { "" }
                    )
                } else if let (Some(note), Some(ticket)) =
                    (s["note_id"].as_str(), s["ticket_id"].as_str())
                {
                    format!("ran: note {note} on ticket {ticket} {}", who_asked(s))
                } else if let Some(id) = s["notice_id"].as_str() {
                    format!("ran: notice {id} queued to {}", s["to"].as_str().unwrap_or("?"))
                } else if let Some(t) = s["tickets"].as_array() {
                    let top: Vec<&str> =
                        t.iter().take(3).filter_map(|x| x["ticket_id"].as_str()).collect();
                    format!("{} tickets, top {}", t.len(), top.join(" "))
                } else {
                    "ran".into()
                }
            }
        }
    }
}

/// Whom the tickets server names on a note: the person toolgate asserted
/// (and its agent), or no one when the server was not told.
pub fn who_asked(note: &Value) -> String {
    match note["requested_by"].as_str() {
        Some(person) => format!(
            "for {person} (asserted by toolgate; agent `{}`)",
            note["agent"].as_str().unwrap_or("-")
        ),
        None => "for no one the server could name (it was not told who asked)".into(),
    }
}

pub async fn call(client: &Peer<RoleClient>, name: &str, arguments: &Value) -> Got {
    reissue(client, name, arguments, None, None).await
}

/// `reissue`, for a call first sent with request `_meta` of its own (an
/// operation key): a re-issue repeats it, as it repeats the arguments.
pub async fn reissue_with_meta(
    client: &Peer<RoleClient>,
    name: &str,
    arguments: &Value,
    meta: Value,
    state: Option<String>,
    responses: Option<Value>,
) -> Got {
    let Value::Object(map) = arguments.clone() else {
        return Got::Failed("arguments must be an object".into(), None);
    };
    let mut params = CallToolRequestParams::new(name.to_string()).with_arguments(map);
    params.meta = serde_json::from_value(meta).ok();
    params.request_state = state;
    params.input_responses = responses.and_then(|r| serde_json::from_value(r).ok());
    answer(client.call_tool_once(params).await)
}

/// A call with request `_meta` of the caller's own (an operation key).
pub async fn call_with_meta(
    client: &Peer<RoleClient>,
    name: &str,
    arguments: &Value,
    meta: Value,
) -> Got {
    reissue_with_meta(client, name, arguments, meta, None, None).await
}

/// A re-issued call (MRTR): the same name and arguments with the
/// `requestState` and `inputResponses` of the previous round.
pub async fn reissue(
    client: &Peer<RoleClient>,
    name: &str,
    arguments: &Value,
    state: Option<String>,
    responses: Option<Value>,
) -> Got {
    reissue_with_meta(client, name, arguments, Value::Null, state, responses).await
}

fn answer(got: Result<CallToolResponse, rmcp::ServiceError>) -> Got {
    match got {
        Ok(CallToolResponse::Complete(result)) => {
            Got::Result(serde_json::to_value(result).unwrap_or_default())
        }
        Ok(CallToolResponse::InputRequired(input)) => {
            Got::Input(serde_json::to_value(input).unwrap_or_default())
        }
        Ok(_) => Got::Failed("an answer this demo does not expect".into(), None),
        Err(rmcp::ServiceError::McpError(e)) => Got::Failed(e.message.to_string(), e.data.clone()),
        Err(e) => Got::Failed(e.to_string(), None),
    }
}

pub fn accept_all(input: &Got) -> Value {
    let keys: Map<String, Value> = match input {
        Got::Input(v) => v["inputRequests"]
            .as_object()
            .map(|m| {
                m.keys().map(|k| (k.clone(), json!({"action": "accept", "content": {}}))).collect()
            })
            .unwrap_or_default(),
        _ => Map::new(),
    };
    Value::Object(keys)
}

pub async fn http_client(url: &str, token: Option<&str>) -> anyhow::Result<Client> {
    connect(url, token, asks()).await
}

/// A client over Streamable HTTP with `handler` (its capabilities, and what
/// it does with notifications): 2026-07-28 first (`server/discover`), else
/// the legacy handshake.
pub async fn connect<H: ClientHandler>(
    url: &str,
    token: Option<&str>,
    handler: H,
) -> anyhow::Result<RunningService<RoleClient, H>> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(t) = token {
        config = config.auth_header(t.to_string());
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    let lifecycle =
        ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    Ok(handler.serve_with_lifecycle(transport, lifecycle).await?)
}

pub async fn stdio_client(exe: &Path, server: &str, state: &Path) -> anyhow::Result<Client> {
    stdio_client_with(exe, server, state, &[]).await
}

/// `stdio_client` with more arguments for the server (its identity options).
pub async fn stdio_client_with(
    exe: &Path,
    server: &str,
    state: &Path,
    extra: &[String],
) -> anyhow::Result<Client> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["atlas", server, "--state"]).arg(state).args(extra);
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn()?;
    let lifecycle =
        ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    Ok(asks().serve_with_lifecycle(transport, lifecycle).await?)
}

pub fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}
