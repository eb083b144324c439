//! An MCP session with one upstream over either transport: the era is agreed
//! first (2026-07-28 via `server/discover`, else the 2025-11-25 `initialize`
//! handshake), then requests carry what that era requires.

use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::Transport;
use super::UpstreamError;
use super::http::HttpChannel;
use super::stdio::StdioChannel;
use crate::wire::{self, Era, LEGACY, MODERN, Message};

/// How long a server gets to answer `server/discover` before it is taken
/// for a legacy server that waits for `initialize`.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_LIST_PAGES: usize = 100;

pub(crate) enum Channel {
    Stdio(StdioChannel),
    Http(HttpChannel),
}

impl Channel {
    pub(crate) fn open(
        server: &str,
        transport: &Transport,
        inbox: super::Inbox,
        max_message: usize,
        network: std::sync::Arc<crate::sandbox::proxy::Counts>,
        own: Option<super::OwnCredential>,
    ) -> Result<Self, UpstreamError> {
        Ok(match transport {
            Transport::Stdio { .. } => {
                Channel::Stdio(StdioChannel::spawn(server, transport, inbox, max_message, network)?)
            }
            Transport::Http { url, headers, query, ca } => Channel::Http(
                HttpChannel::new(
                    url,
                    headers,
                    query,
                    ca.as_deref().map(Vec::as_slice),
                    inbox,
                    max_message,
                )?
                .with_own(own),
            ),
        })
    }

    async fn request(
        &self,
        method: &str,
        params: &Value,
        era: Option<Era>,
        headers: &[(String, String)],
    ) -> Result<Message, UpstreamError> {
        match self {
            Channel::Stdio(c) => c.request(method, params).await,
            Channel::Http(c) => c.request(method, params, era != Some(Era::Legacy), headers).await,
        }
    }

    async fn notify(&self, method: &str, params: &Value, era: Era) -> Result<(), UpstreamError> {
        match self {
            Channel::Stdio(c) => c.notify(method, params).await,
            Channel::Http(c) => c.notify(method, params, era == Era::Modern).await,
        }
    }

    /// For stdio: flips to false when the process exits. HTTP has no
    /// standing connection to lose.
    pub(crate) fn closed(&self) -> Option<watch::Receiver<bool>> {
        match self {
            Channel::Stdio(c) => Some(c.closed()),
            Channel::Http(_) => None,
        }
    }
}

pub(crate) struct McpSession {
    channel: Channel,
    pub(crate) era: Era,
    pub(crate) protocol_version: String,
    /// The `_meta` this era's requests carry (toolgate's own description).
    meta: Value,
    /// What the server said it offers (`capabilities` of its discover or
    /// initialize result): prompts and resources are listed only if declared.
    pub(crate) capabilities: Value,
}

fn into_result(message: Message) -> Result<Box<RawValue>, UpstreamError> {
    match (message.result, message.error) {
        (Some(result), _) => Ok(result),
        (None, Some(error)) => Err(UpstreamError::Rpc(error)),
        (None, None) => {
            Err(UpstreamError::Protocol("a response with neither result nor error".into()))
        }
    }
}

/// The era a server agreed to, with what it said of itself.
enum Agreed {
    /// It answered `server/discover` with 2026-07-28: its capabilities.
    Modern(Value),
    /// It took the `initialize` handshake: its version and capabilities.
    Legacy(String, Value),
}

/// The capabilities of a `server/discover` answer that offers 2026-07-28;
/// `None` for any other answer (an error, another version).
fn modern(answer: Result<Message, UpstreamError>) -> Option<Value> {
    let raw = into_result(answer.ok()?).ok()?;
    let result: Value = serde_json::from_str(raw.get()).unwrap_or_default();
    let offered =
        result["supportedVersions"].as_array().is_some_and(|v| v.iter().any(|x| x == MODERN));
    offered.then(|| result["capabilities"].clone())
}

/// The 2025-11-25 handshake's request and its answer.
async fn initialize(channel: &Channel, client_version: &str) -> Result<Agreed, UpstreamError> {
    let params = json!({
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "toolgate", "version": client_version}
    });
    let result =
        into_result(channel.request("initialize", &params, Some(Era::Legacy), &[]).await?)?;
    let result: Value = serde_json::from_str(result.get())
        .map_err(|e| UpstreamError::Protocol(format!("initialize: {e}")))?;
    let version = result["protocolVersion"].as_str().unwrap_or_default().to_string();
    if version.is_empty() {
        return Err(UpstreamError::Protocol(
            "initialize answered without a protocolVersion".into(),
        ));
    }
    Ok(Agreed::Legacy(version, result["capabilities"].clone()))
}

/// Agrees the era: `server/discover` first; an error, an HTTP refusal or
/// another version means a legacy server, and the handshake. Silence is
/// either a legacy server that never answers an unknown request, or a
/// server still starting (`uvx` fetching its package) that will read the
/// discover first, hold the connection to 2026-07-28 and refuse an
/// `initialize` sent after it. So after `DISCOVER_TIMEOUT` the handshake
/// is asked too, and whichever the server takes names the era.
async fn agree(
    channel: &Channel,
    meta: &Value,
    client_version: &str,
) -> Result<Agreed, UpstreamError> {
    let params = json!({"_meta": meta});
    let discover = channel.request("server/discover", &params, Some(Era::Modern), &[]);
    tokio::pin!(discover);
    let answer = match tokio::time::timeout(DISCOVER_TIMEOUT, &mut discover).await {
        // Nothing answered at all (no process, no listener): no point in a handshake.
        Ok(Err(e @ UpstreamError::Unavailable(_))) => return Err(e),
        Ok(answer) => answer,
        Err(_) => {
            let handshake = initialize(channel, client_version);
            tokio::pin!(handshake);
            return tokio::select! {
                answer = &mut discover => match modern(answer) {
                    Some(capabilities) => Ok(Agreed::Modern(capabilities)),
                    None => handshake.await,
                },
                legacy = &mut handshake => match legacy {
                    Ok(agreed) => Ok(agreed),
                    // Refused: it took the discover, whose answer follows.
                    Err(refused) => match tokio::time::timeout(DISCOVER_TIMEOUT, &mut discover).await {
                        Ok(answer) => modern(answer).map(Agreed::Modern).ok_or(refused),
                        Err(_) => Err(refused),
                    },
                },
            };
        }
    };
    match modern(answer) {
        Some(capabilities) => Ok(Agreed::Modern(capabilities)),
        None => initialize(channel, client_version).await,
    }
}

impl McpSession {
    pub(crate) async fn open(
        channel: Channel,
        client_version: &str,
    ) -> Result<Self, UpstreamError> {
        let meta = wire::modern_meta("toolgate", client_version);
        match agree(&channel, &meta, client_version).await? {
            Agreed::Modern(capabilities) => {
                if let Channel::Http(c) = &channel {
                    c.set_protocol_version(MODERN);
                }
                Ok(McpSession {
                    channel,
                    era: Era::Modern,
                    protocol_version: MODERN.into(),
                    meta,
                    capabilities,
                })
            }
            Agreed::Legacy(version, capabilities) => {
                if let Channel::Http(c) = &channel {
                    c.set_protocol_version(&version);
                }
                channel.notify("notifications/initialized", &json!({}), Era::Legacy).await?;
                Ok(McpSession {
                    channel,
                    era: Era::Legacy,
                    protocol_version: version,
                    meta,
                    capabilities,
                })
            }
        }
    }

    pub(crate) fn closed(&self) -> Option<watch::Receiver<bool>> {
        self.channel.closed()
    }

    /// Adds this era's per-request fields to `params`.
    fn params(&self, mut params: Value) -> Value {
        if self.era == Era::Modern {
            let meta =
                params.as_object_mut().map(|p| p.entry("_meta").or_insert_with(|| json!({})));
            if let Some(Value::Object(meta)) = meta {
                for (k, v) in self.meta.as_object().into_iter().flatten() {
                    meta.entry(k.clone()).or_insert(v.clone());
                }
            }
        }
        params
    }

    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Box<RawValue>, UpstreamError> {
        self.request_with_headers(method, params, &[]).await
    }

    /// A request with extra HTTP headers (ignored on stdio).
    pub(crate) async fn request_with_headers(
        &self,
        method: &str,
        params: Value,
        headers: &[(String, String)],
    ) -> Result<Box<RawValue>, UpstreamError> {
        into_result(
            self.channel.request(method, &self.params(params), Some(self.era), headers).await?,
        )
    }

    /// A 2026-07-28 `subscriptions/listen` for resource updates, until it
    /// ends; the updates reach the inbox as they come. Over stdio it is a
    /// request whose answer comes only at the end (dropping it cancels it).
    pub(crate) async fn listen(&self, params: Value) -> Result<(), UpstreamError> {
        match &self.channel {
            Channel::Http(c) => c.listen(&self.params(params)).await,
            Channel::Stdio(c) => c
                .request("subscriptions/listen", &self.params(params))
                .await
                .and_then(into_result)
                .map(|_| ()),
        }
    }

    /// A legacy HTTP session's standing stream, until it ends; never ends
    /// for any other (stdio carries the server's messages on its own).
    pub(crate) async fn standing(&self) -> Result<(), UpstreamError> {
        match (&self.channel, self.era) {
            (Channel::Http(c), Era::Legacy) => c.standing().await,
            _ => std::future::pending().await,
        }
    }

    /// Every item of a list (`tools/list` → `tools`, `prompts/list` →
    /// `prompts`, …), all pages, each kept verbatim; and the shortest
    /// `ttlMs` a page gave, how long the server says the list stands.
    pub(crate) async fn list_all(
        &self,
        method: &str,
        key: &str,
    ) -> Result<(Vec<Box<RawValue>>, Option<u64>), UpstreamError> {
        let mut items = Vec::new();
        let mut ttl_ms: Option<u64> = None;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let raw = self.request(method, params).await?;
            let mut page: serde_json::Map<String, Value> = serde_json::from_str(raw.get())
                .map_err(|e| UpstreamError::Protocol(format!("{method}: {e}")))?;
            let list: Vec<Box<RawValue>> = match page.remove(key) {
                Some(v) => serde_json::from_value(v)
                    .map_err(|e| UpstreamError::Protocol(format!("{method}: `{key}`: {e}")))?,
                None => {
                    return Err(UpstreamError::Protocol(format!(
                        "{method} answered without `{key}`"
                    )));
                }
            };
            items.extend(list);
            if let Some(ttl) = page.get("ttlMs").and_then(Value::as_u64) {
                ttl_ms = Some(ttl_ms.map_or(ttl, |t| t.min(ttl)));
            }
            match page.remove("nextCursor") {
                Some(Value::String(c)) if !c.is_empty() => cursor = Some(c),
                _ => return Ok((items, ttl_ms)),
            }
        }
        Err(UpstreamError::Protocol(format!("{method} did not end after {MAX_LIST_PAGES} pages")))
    }

    /// Whether the server declared `capability` (`prompts`, `resources`, `completions`).
    pub(crate) fn offers(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some_and(|c| !c.is_null())
    }
}
