//! A Streamable HTTP upstream: one POST per JSON-RPC message; the answer is
//! a JSON body or an SSE stream that ends with the response. Bodies are read
//! with a size cap: upstreams are not trusted to be small.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::UpstreamError;
use super::ValueSource;
use crate::body::without_url;
use crate::wire::{self, Id, Message};

const SESSION_HEADER: &str = "mcp-session-id";

pub(crate) struct HttpChannel {
    client: reqwest::Client,
    /// Parsed once: parsing (IDNA included) on every call showed in profiles.
    url: reqwest::Url,
    headers: HeaderMap,
    next_id: AtomicI64,
    /// The `Mcp-Session-Id` the server last issued (a legacy server's, at
    /// `initialize`), sent back on every later request whatever the era.
    session: Mutex<Option<String>>,
    /// The revision in force, sent as `MCP-Protocol-Version` once agreed.
    protocol_version: Mutex<Option<String>>,
    inbox: super::Inbox,
    /// An answer (a body, an SSE event) longer than this is refused.
    max_message: usize,
    /// The gateway's own credential, on the requests no person's call makes.
    own: Option<super::OwnCredential>,
}

/// `url` with `query`'s parameters appended, each value read now (a
/// credential kept out of the config). The result is never shown: errors
/// print `<upstream>` in its place (`without_url`).
fn with_query(
    url: &str,
    query: &BTreeMap<String, ValueSource>,
) -> Result<reqwest::Url, UpstreamError> {
    let mut url = reqwest::Url::parse(url)
        .map_err(|e| UpstreamError::Protocol(format!("invalid upstream URL: {e}")))?;
    if !query.is_empty() {
        let mut pairs = url.query_pairs_mut();
        for (name, source) in query {
            pairs.append_pair(name, &source.read(&format!("query parameter `{name}`"))?);
        }
    }
    Ok(url)
}

impl HttpChannel {
    pub(crate) fn new(
        url: &str,
        headers: &BTreeMap<String, ValueSource>,
        query: &BTreeMap<String, ValueSource>,
        ca: Option<&[u8]>,
        inbox: super::Inbox,
        max_message: usize,
    ) -> Result<Self, UpstreamError> {
        let mut map = HeaderMap::new();
        for (k, source) in headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| UpstreamError::Protocol(format!("invalid header name `{k}`")))?;
            // The value may be a credential: never echo it.
            let mut value = HeaderValue::from_str(&source.read(&format!("header `{k}`"))?)
                .map_err(|_| UpstreamError::Protocol(format!("invalid value for header `{k}`")))?;
            value.set_sensitive(true);
            map.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            // A redirect is not followed: it would re-send the call, and the
            // configured headers (credentials among them), to another place.
            // It also saves the redirect policy's work on every call.
            .redirect(reqwest::redirect::Policy::none())
            .tls_certs_merge(
                ca.map(reqwest::Certificate::from_pem_bundle)
                    .transpose()
                    .map_err(|e| UpstreamError::Protocol(format!("[tls] ca_file: {e}")))?
                    .unwrap_or_default(),
            )
            .build()
            .map_err(|e| UpstreamError::Unavailable(format!("HTTP client: {e}")))?;
        Ok(Self {
            client,
            url: with_query(url, query)?,
            headers: map,
            next_id: AtomicI64::new(1),
            session: Mutex::new(None),
            protocol_version: Mutex::new(None),
            inbox,
            max_message,
            own: None,
        })
    }

    /// Sends the gateway's own credential with the requests that carry no
    /// person's.
    pub(crate) fn with_own(mut self, own: Option<super::OwnCredential>) -> Self {
        self.own = own;
        self
    }

    /// The gateway's own credential's header, unless `extra` (a person's,
    /// on a call) carries that header already.
    async fn own_headers(
        &self,
        what: &str,
        extra: &[(String, String)],
    ) -> Result<Option<(String, String)>, UpstreamError> {
        let Some(own) = self
            .own
            .as_ref()
            .filter(|own| !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case(&own.header)))
        else {
            return Ok(None);
        };
        let value = (own.value)().await.map_err(|why| {
            UpstreamError::Unavailable(format!(
                "{what}: no credential for the gateway itself ({why})"
            ))
        })?;
        Ok(Some((own.header.clone(), value)))
    }

    pub(crate) fn set_protocol_version(&self, version: &str) {
        *self.protocol_version.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(version.to_string());
    }

    /// Sends a request; `modern` adds the 2026-07-28 routing headers.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: &Value,
        modern: bool,
        extra: &[(String, String)],
    ) -> Result<Message, UpstreamError> {
        let id = Id::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let body = wire::request(&id, method, params);
        let response = self.post(method, params, body, modern, extra).await?;
        if let Some(session) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
        {
            *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.to_string());
        }
        let status = response.status();
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if is_sse && status.is_success() {
            return self.read_sse(response, Some(&id)).await;
        }
        let body = read_capped(response, self.max_message).await?;
        match serde_json::from_slice::<Message>(&body) {
            Ok(message) if message.is_response() && message.id.as_ref() == Some(&id) => Ok(message),
            _ if status.is_success() => Err(UpstreamError::Protocol(format!(
                "{method}: the answer is not a JSON-RPC response"
            ))),
            _ if status.is_redirection() => Err(UpstreamError::Rejected(format!(
                "{method}: HTTP {status}, a redirect, which toolgate does not follow: set the server's url to where it points"
            ))),
            _ if status.as_u16() == 404 => Err(UpstreamError::Unavailable(format!(
                "{method}: HTTP 404 (endpoint or session gone)"
            ))),
            _ if status.as_u16() == 401 => {
                Err(UpstreamError::Unauthorized(format!("{method}: HTTP 401")))
            }
            // The server received the request and failed: it may have acted.
            _ if status.is_server_error() => {
                Err(UpstreamError::Lost(format!("{method}: HTTP {status}")))
            }
            _ => Err(UpstreamError::Rejected(format!("{method}: HTTP {status}"))),
        }
    }

    pub(crate) async fn notify(
        &self,
        method: &str,
        params: &Value,
        modern: bool,
    ) -> Result<(), UpstreamError> {
        let response =
            self.post(method, params, wire::notification(method, params), modern, &[]).await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(UpstreamError::Unavailable(format!("{method}: HTTP {}", response.status())))
        }
    }

    async fn post(
        &self,
        method: &str,
        params: &Value,
        body: String,
        modern: bool,
        extra: &[(String, String)],
    ) -> Result<reqwest::Response, UpstreamError> {
        let mut req = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json");
        // Modern requests name their revision on every request; legacy ones
        // once the handshake agreed one.
        let version = if modern {
            Some(crate::wire::MODERN.to_string())
        } else {
            self.protocol_version.lock().unwrap_or_else(|p| p.into_inner()).clone()
        };
        if let Some(v) = version {
            req = req.header("MCP-Protocol-Version", v);
        }
        if let Some(s) = self.session.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            req = req.header(SESSION_HEADER, s);
        }
        for (k, v) in extra.iter().chain(&self.own_headers(method, extra).await?) {
            req = req.header(k.as_str(), v.as_str());
        }
        if modern {
            req = req.header("Mcp-Method", method);
            if let Some(name) = crate::wire::named_by(method)
                .and_then(|field| params.get(field))
                .and_then(Value::as_str)
            {
                req = req.header("Mcp-Name", crate::param_headers::encode(name));
            }
        }
        req.body(body).send().await.map_err(|e| {
            if e.is_timeout() {
                UpstreamError::Timeout
            } else if e.is_connect() {
                UpstreamError::Unavailable(format!(
                    "{method}: cannot reach the upstream ({})",
                    without_url(&e)
                ))
            } else {
                // The request may have arrived: its effect is unknown.
                UpstreamError::Lost(format!("{method}: {}", without_url(&e)))
            }
        })
    }

    /// A `subscriptions/listen` stream (2026-07-28), until it ends; what it
    /// carries goes to the inbox, as on any stream.
    pub(crate) async fn listen(&self, params: &Value) -> Result<(), UpstreamError> {
        let id =
            Id::String(format!("toolgate-listen-{}", self.next_id.fetch_add(1, Ordering::Relaxed)));
        let response = self
            .post(
                "subscriptions/listen",
                params,
                wire::request(&id, "subscriptions/listen", params),
                true,
                &[],
            )
            .await?;
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !(response.status().is_success() && is_sse) {
            return Err(UpstreamError::Rejected(format!(
                "subscriptions/listen: HTTP {}, not a stream",
                response.status()
            )));
        }
        self.read_sse(response, Some(&id)).await.map(|_| ())
    }

    /// A legacy session's standing stream (`GET`, for the server's own
    /// messages: list changes, resource updates), until it ends. A server
    /// that offers none (405) is waited on for ever: it has nothing to say
    /// but what comes on the answers to requests.
    pub(crate) async fn standing(&self) -> Result<(), UpstreamError> {
        let mut req = self
            .client
            .get(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "text/event-stream");
        if let Some((k, v)) = self.own_headers("GET stream", &[]).await? {
            req = req.header(k, v);
        }
        if let Some(v) = self.protocol_version.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            req = req.header("MCP-Protocol-Version", v);
        }
        if let Some(s) = self.session.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            req = req.header(SESSION_HEADER, s);
        }
        let response = req
            .send()
            .await
            .map_err(|e| UpstreamError::Lost(format!("GET stream: {}", without_url(&e))))?;
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED
            || (response.status().is_success() && !is_sse)
        {
            return std::future::pending().await;
        }
        if !response.status().is_success() {
            return Err(UpstreamError::Rejected(format!("GET stream: HTTP {}", response.status())));
        }
        self.read_sse(response, None).await.map(|_| ())
    }

    /// Reads SSE events until the response to `id` (or the stream's end);
    /// notifications on the way go to the inbox.
    async fn read_sse(
        &self,
        response: reqwest::Response,
        id: Option<&Id>,
    ) -> Result<Message, UpstreamError> {
        let mut stream = response.bytes_stream();
        let mut events = Events::default();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                UpstreamError::Lost(format!("SSE stream broke: {}", without_url(&e)))
            })?;
            events.push(&chunk);
            if events.pending() > self.max_message {
                return Err(UpstreamError::Protocol(format!(
                    "an event of the upstream's SSE stream exceeds [gateway] max_upstream_message_bytes ({})",
                    self.max_message
                )));
            }
            while let Some(event) = events.next_event() {
                let data = sse_data(&event);
                if data.is_empty() {
                    continue;
                }
                let Ok(message) = serde_json::from_str::<Message>(&data) else { continue };
                if message.is_response() && id.is_some() && message.id.as_ref() == id {
                    return Ok(message);
                }
                if let (Some(method), None) = (&message.method, &message.id) {
                    self.inbox.deliver(method, message.params.as_deref());
                }
            }
        }
        Err(UpstreamError::Lost(
            if id.is_some() {
                "the SSE stream ended without a response"
            } else {
                "the stream ended"
            }
            .into(),
        ))
    }
}

/// The bytes of an SSE stream, split into events as they arrive. Each byte
/// is looked at once: the search for an event's end resumes where the last
/// one stopped (a re-scan from the start per chunk made one large event,
/// sent in small chunks, cost quadratic time).
#[derive(Default)]
struct Events {
    buffer: Vec<u8>,
    /// How far the buffer is known to hold no event end.
    scanned: usize,
}

impl Events {
    fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// Bytes received and not yet part of a whole event.
    fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// The next complete event (up to and with its blank line), if any.
    fn next_event(&mut self) -> Option<Vec<u8>> {
        // An end straddling the last scan (`\r\n\r\n` is 4 bytes) is found
        // by starting 3 bytes back.
        let from = self.scanned.saturating_sub(3);
        match find_event_end(&self.buffer[from..]) {
            Some(end) => {
                self.scanned = 0;
                Some(self.buffer.drain(..from + end).collect())
            }
            None => {
                self.scanned = self.buffer.len();
                None
            }
        }
    }
}

/// Index just past the blank line (`\n\n` or `\r\n\r\n`) ending the first
/// complete event, in one pass that stops there.
fn find_event_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = buf[from..].iter().position(|&b| b == b'\n') {
        let n = from + at;
        if buf.get(n + 1) == Some(&b'\n') {
            return Some(n + 2);
        }
        if n >= 1 && buf[n - 1] == b'\r' && buf.get(n + 1..n + 3) == Some(b"\r\n") {
            return Some(n + 3);
        }
        from = n + 1;
    }
    None
}

/// The joined `data:` lines of one event.
fn sse_data(event: &[u8]) -> String {
    let text = String::from_utf8_lossy(event);
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn read_capped(response: reqwest::Response, max: usize) -> Result<Vec<u8>, UpstreamError> {
    crate::body::read_limited(response, max, "the upstream's answer").await.map_err(|e| match e {
        crate::body::BodyError::TooLarge { .. } => UpstreamError::Protocol(format!(
            "the upstream's answer exceeds [gateway] max_upstream_message_bytes ({max})"
        )),
        crate::body::BodyError::Broken { why, .. } => {
            UpstreamError::Lost(format!("reading the answer: {why}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_and_join() {
        let buf = b"event: message\ndata: {\"a\":\ndata: 1}\n\ndata: x\r\n\r\n";
        let end = find_event_end(buf).unwrap();
        assert_eq!(sse_data(&buf[..end]), "{\"a\":\n1}");
        assert_eq!(sse_data(&buf[end..]), "x");
    }

    #[test]
    fn events_are_found_across_chunk_boundaries_and_each_byte_is_read_once() {
        let stream = b"data: one\n\ndata: two\r\n\r\ndata: three\n\n";
        // Every split point, byte by byte included: the same three events.
        for size in 1..stream.len() {
            let mut events = Events::default();
            let mut got = Vec::new();
            for chunk in stream.chunks(size) {
                events.push(chunk);
                while let Some(e) = events.next_event() {
                    got.push(sse_data(&e));
                }
                // Nothing complete is left behind, and the scan never
                // restarts before what it already read (less 3 bytes).
                assert!(
                    events.scanned == 0 || events.scanned == events.pending(),
                    "chunk size {size}"
                );
            }
            assert_eq!(got, ["one", "two", "three"], "chunk size {size}");
            assert_eq!(events.pending(), 0);
        }
    }
}
