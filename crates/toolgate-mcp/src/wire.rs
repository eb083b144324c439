//! toolgate's own MCP wire types. Only what the gateway inspects is parsed;
//! everything else stays a `RawValue` and is forwarded byte for byte.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The stateless core revision.
pub const MODERN: &str = "2026-07-28";
/// The last revision with the `initialize` handshake.
pub const LEGACY: &str = "2025-11-25";
/// What toolgate speaks, newest first.
pub const SUPPORTED_VERSIONS: [&str; 2] = [MODERN, LEGACY];

/// `_meta` key: the protocol revision a 2026-07-28 request speaks.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: who the client is.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: what the client can do (elicitation, …).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: who the server is.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// A JSON object whose field values stay verbatim: the gateway can add or
/// replace a field without re-encoding the others.
pub type RawObject = std::collections::BTreeMap<String, Box<RawValue>>;

/// The two protocol eras toolgate speaks, on both edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Era {
    /// 2026-07-28: stateless, per-request `_meta`, `server/discover`.
    Modern,
    /// 2025-11-25 and before: the `initialize` handshake.
    Legacy,
}

/// JSON-RPC error codes toolgate sends.
pub mod code {
    /// The message is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The message is not a valid request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The method's params are invalid (an unknown tool, among others).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Something failed inside.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The routing headers disagree with the body (2026-07-28).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request needs a capability the client did not declare.
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// The request speaks a protocol revision not supported here.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// toolgate refused a prompt get or resource read by its authority (the
    /// refusal, with what to do next, is the error's `data`). A tool's
    /// refusal is an `isError` result instead.
    pub const REFUSED: i64 = -32010;
    /// The request cannot run until the person completes a URL elicitation
    /// the error's `data.elicitations` names (2025-11-25; toolgate: connect
    /// an account). Retired by 2026-07-28, which asks with `input_required`.
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;

    /// The errors that say a request was refused before it ran: it could not
    /// be read, named no method, had invalid params, headers that disagree
    /// with its body, a capability or a protocol version missing. Nothing
    /// happened; any other error (an internal one may come after a commit)
    /// or a lost answer may hide an effect.
    pub fn refused_before_running(code: i64) -> bool {
        matches!(
            code,
            PARSE_ERROR
                | INVALID_REQUEST
                | METHOD_NOT_FOUND
                | INVALID_PARAMS
                | HEADER_MISMATCH
                | MISSING_CLIENT_CAPABILITY
                | UNSUPPORTED_PROTOCOL_VERSION
                | URL_ELICITATION_REQUIRED
        )
    }

    /// The errors Streamable HTTP answers with 400 Bad Request, whoever
    /// raised them (toolgate at its edge, or an upstream it passes on).
    pub fn bad_request(code: i64) -> bool {
        matches!(
            code,
            PARSE_ERROR
                | INVALID_REQUEST
                | HEADER_MISMATCH
                | MISSING_CLIENT_CAPABILITY
                | UNSUPPORTED_PROTOCOL_VERSION
        )
    }
}

/// The param a 2026-07-28 request's `Mcp-Name` header mirrors (SEP-2243):
/// the tool's or prompt's `name`, the resource's `uri`.
pub fn named_by(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// A JSON-RPC id: a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// A numeric id.
    Number(i64),
    /// A string id.
    String(String),
}

/// Any JSON-RPC message, parsed only as far as routing needs.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// The request's id; none for a notification.
    #[serde(default)]
    pub id: Option<Id>,
    /// The method of a request or notification.
    #[serde(default)]
    pub method: Option<String>,
    /// Its params, unparsed.
    #[serde(default)]
    pub params: Option<Box<RawValue>>,
    /// A response's result, unparsed.
    #[serde(default)]
    pub result: Option<Box<RawValue>>,
    /// A response's error.
    #[serde(default)]
    pub error: Option<RpcError>,
}

impl Message {
    /// A response (no method; a result or an error).
    pub fn is_response(&self) -> bool {
        self.method.is_none() && (self.result.is_some() || self.error.is_some())
    }
}

/// A JSON-RPC error object: its code, message and optional data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The code (`code::…`).
    pub code: i64,
    /// What went wrong, for a person.
    pub message: String,
    /// More, for a program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// The same error, carrying `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

/// A request as toolgate sends it upstream (serialised from borrows: the
/// arguments are not copied on the way out).
pub fn request(id: &Id, method: &str, params: &Value) -> String {
    #[derive(Serialize)]
    struct Request<'a> {
        jsonrpc: &'static str,
        id: &'a Id,
        method: &'a str,
        params: &'a Value,
    }
    serde_json::to_string(&Request { jsonrpc: "2.0", id, method, params })
        .expect("JSON values serialise")
}

/// A notification.
pub fn notification(method: &str, params: &Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// A success response carrying `result` (a `RawValue`, or a `RawObject`
/// of them, is written verbatim). Serialized into one buffer sized for
/// `result_len` bytes of result: every answer passes here, and building
/// the result's text first, then the response around it, copied it twice.
pub fn response_raw<T: serde::Serialize + ?Sized>(
    id: Option<&Id>,
    result: &T,
    result_len: usize,
) -> String {
    let mut out = Vec::with_capacity(result_len + 64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut out, &id).expect("ids serialise");
    out.extend_from_slice(br#","result":"#);
    serde_json::to_writer(&mut out, result).expect("a result serialises");
    out.push(b'}');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// The bytes `object` takes as JSON, near enough to size a buffer.
pub fn raw_object_len(object: &RawObject) -> usize {
    object.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>() + 2
}

/// A success response carrying `result`.
pub fn response(id: Option<&Id>, result: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// An error response.
pub fn error_response(id: Option<&Id>, error: &RpcError) -> String {
    match id {
        Some(id) => json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string(),
        // 2026-07-28: the id is omitted when the request's could not be read.
        None => json!({"jsonrpc": "2.0", "error": error}).to_string(),
    }
}

/// The per-request `_meta` a 2026-07-28 request carries.
pub fn modern_meta(client_name: &str, client_version: &str) -> Value {
    json!({
        META_PROTOCOL_VERSION: MODERN,
        META_CLIENT_INFO: {"name": client_name, "version": client_version},
        META_CLIENT_CAPABILITIES: {}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsed_parts_are_forwarded_byte_for_byte() {
        let text = r#"{"jsonrpc":"2.0","id":"a-1","result":{"z":1,"a":[1.50,  2],"x-unknown":{"kept":true}}}"#;
        let m: Message = serde_json::from_str(text).unwrap();
        assert!(m.is_response());
        let result = m.result.as_ref().unwrap();
        let out = response_raw(m.id.as_ref(), result, result.get().len());
        assert!(out.contains(r#"{"z":1,"a":[1.50,  2],"x-unknown":{"kept":true}}"#), "{out}");
        assert!(out.contains(r#""id":"a-1""#));
    }

    #[test]
    fn an_unreadable_request_gets_an_error_without_id() {
        let e = RpcError::new(code::PARSE_ERROR, "bad");
        let v: Value = serde_json::from_str(&error_response(None, &e)).unwrap();
        assert!(v.get("id").is_none() && v["error"]["code"] == -32700);
    }
}
