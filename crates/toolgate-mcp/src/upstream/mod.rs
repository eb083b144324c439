//! Upstream MCP servers: one supervised connection each. A supervisor task
//! connects (modern era first, legacy fallback), lists the tools, re-lists
//! on ttl or on `notifications/tools/list_changed`, and restarts a dead stdio
//! child with backoff. While an upstream is down its tools leave the list.

pub(crate) mod http;
pub(crate) mod session;
pub(crate) mod stdio;

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

pub use crate::wire::Era;
use crate::wire::RpcError;
pub(crate) use session::McpSession;

/// Why a request to an upstream failed, and so whether a call may have run:
/// not after `Unavailable` or `Rejected`; unknown after `Timeout`, `Lost`
/// or `Protocol`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// Not connected, or nothing there to take the request: not run.
    #[error("upstream unavailable: {0}")]
    Unavailable(String),
    /// No answer before the deadline; the call may have run.
    #[error("the upstream did not answer before the deadline")]
    Timeout,
    /// The request was sent; the connection broke before the answer.
    #[error("the upstream connection was lost during the call: {0}")]
    Lost(String),
    /// The upstream answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(RpcError),
    /// The answer broke the protocol (not JSON-RPC, too large, …); the call
    /// may have run.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// The server refused the request at the HTTP level (4xx): not run.
    #[error("upstream refused the request: {0}")]
    Rejected(String),
    /// The server refused the request's credential (HTTP 401): not run.
    #[error("upstream refused the credential: {0}")]
    Unauthorized(String),
}

/// Where a call's progress goes: the client's own token, and the stream of
/// JSON-RPC messages back to that client.
#[derive(Clone)]
pub struct ProgressRelay {
    /// The client's own progress token.
    pub client_token: Value,
    /// The stream of messages back to the client.
    pub out: tokio::sync::mpsc::UnboundedSender<String>,
    /// The progress the gateway itself already reported for this call (a
    /// hold): the upstream's values are counted on from it, so the client
    /// sees progress only increase, as MCP requires.
    pub floor: Arc<std::sync::Mutex<f64>>,
}

impl ProgressRelay {
    /// A relay of progress for the client's `client_token` onto `out`.
    pub fn new(client_token: Value, out: tokio::sync::mpsc::UnboundedSender<String>) -> Self {
        Self { client_token, out, floor: Arc::default() }
    }

    /// Sends the gateway's own progress (`progress` of `total`), and counts
    /// what the upstream reports later on from it.
    pub fn own(&self, progress: f64, total: f64, message: &str) {
        *self.floor.lock().unwrap_or_else(|p| p.into_inner()) = progress;
        let params = serde_json::json!({"progressToken": self.client_token, "progress": progress, "total": total, "message": message});
        let _ = self.out.send(crate::wire::notification("notifications/progress", &params));
    }
}

/// The gateway's own credential at a server, for the requests it makes
/// itself (the handshake, the lists, subscriptions, the standing stream):
/// where each person's call carries its own (`[servers.NAME.identity]`),
/// the gateway still reads the server's contract, as itself.
#[derive(Clone)]
pub struct OwnCredential {
    /// The header it goes in (a request that carries a person's in the
    /// same header is sent with that one alone); for a stdio server, the
    /// environment variable its program is started with.
    pub header: String,
    /// Its value now, made (or taken from a cache) before each request.
    pub value: std::sync::Arc<
        dyn Fn() -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<String, String>> + Send>,
            > + Send
            + Sync,
    >,
}

/// What a call carries besides its arguments.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Progress wanted by the client, and where it goes.
    pub progress: Option<ProgressRelay>,
    /// `Mcp-Param-*` headers the tool's schema asks for (HTTP upstreams).
    pub headers: Vec<(String, String)>,
    /// A re-issued call's answers to the upstream's `input_required`
    /// (`inputResponses`, `requestState`), passed on unchanged.
    pub input: serde_json::Map<String, Value>,
    /// The client's own capabilities: on 2026-07-28 the client, not the
    /// gateway, fulfils an upstream's input requests.
    pub client_capabilities: Option<Value>,
    /// Trace context for the upstream's `_meta` (`traceparent`, …).
    pub meta: std::collections::BTreeMap<String, String>,
    /// The caller's own deadline: the call's deadline is the shorter of it
    /// and the server's.
    pub deadline: Option<Duration>,
}

/// An upstream's `notifications/progress` routes, by the progress token
/// toolgate gave each call (never the client's own: two clients may pick the
/// same one).
pub type ProgressRoutes = Arc<std::sync::Mutex<std::collections::HashMap<String, ProgressRelay>>>;

/// Passes an upstream progress notification on to its call's client, under
/// the client's token. Called by the reader before it delivers the call's
/// answer, so progress always precedes the result.
pub fn route_progress(routes: &ProgressRoutes, params: Option<&RawValue>) {
    let Some(mut params) = params.and_then(|p| serde_json::from_str::<Value>(p.get()).ok()) else {
        return;
    };
    let key = match &params["progressToken"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let routes = routes.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(relay) = routes.get(&key) {
        params["progressToken"] = relay.client_token.clone();
        let floor = *relay.floor.lock().unwrap_or_else(|p| p.into_inner());
        if floor > 0.0 {
            for field in ["progress", "total"] {
                if let Some(v) = params.get(field).and_then(Value::as_f64) {
                    params[field] = serde_json::json!(floor + v);
                }
            }
        }
        let _ = relay.out.send(crate::wire::notification("notifications/progress", &params));
    }
}

/// Where an upstream's notifications go, whichever stream they come on (a
/// stdio line, a POST's SSE answer, a listen stream, the legacy standing
/// stream): progress to its call, resource updates to the watches, and
/// every other method's name to the supervisor (list changes).
#[derive(Clone)]
pub(crate) struct Inbox {
    pub(crate) events: broadcast::Sender<String>,
    pub(crate) updates: broadcast::Sender<String>,
    pub(crate) progress: ProgressRoutes,
}

impl Inbox {
    /// Routes one notification (`method` with `params`).
    pub(crate) fn deliver(&self, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/progress" => route_progress(&self.progress, params),
            "notifications/resources/updated" => {
                let uri = params
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p["uri"].as_str().map(str::to_string));
                if let Some(uri) = uri {
                    let _ = self.updates.send(uri);
                }
            }
            _ => {
                let _ = self.events.send(method.to_string());
            }
        }
    }
}

/// What an upstream offers, each reached by its own method. A resource
/// template is read as a resource is, at a URI it expands to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `tools/call`
    Tool,
    /// `prompts/get`
    Prompt,
    /// `resources/read`, of a listed URI
    Resource,
    /// `resources/read`, of a URI a listed template expands to
    Template,
}

impl Kind {
    /// The method that uses one.
    pub fn method(self) -> &'static str {
        match self {
            Kind::Tool => "tools/call",
            Kind::Prompt => "prompts/get",
            Kind::Resource | Kind::Template => "resources/read",
        }
    }

    /// What it is called in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
            Kind::Resource => "resource",
            Kind::Template => "resource template",
        }
    }

    /// The list method, the key of its items in the answer, and the field
    /// that names an item.
    pub fn list(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Tool => ("tools/list", "tools", "name"),
            Kind::Prompt => ("prompts/list", "prompts", "name"),
            Kind::Resource => ("resources/list", "resources", "uri"),
            Kind::Template => ("resources/templates/list", "resourceTemplates", "uriTemplate"),
        }
    }
}

/// One tool, prompt, resource or resource template as the upstream declared it.
#[derive(Debug)]
pub struct UpstreamTool {
    /// Its name on the upstream (a resource's URI, a template's `uriTemplate`).
    pub name: String,
    /// The definition byte for byte, for forwarding.
    pub raw: Box<RawValue>,
    /// The same definition, parsed.
    pub definition: Value,
}

/// An upstream's tools, prompts, resources and resource templates as last
/// listed, and the protocol of the session that listed them.
#[derive(Debug)]
pub struct Listing {
    /// The tools, in the upstream's order.
    pub tools: Vec<Arc<UpstreamTool>>,
    /// Its prompts (none unless it declares `prompts`).
    pub prompts: Vec<Arc<UpstreamTool>>,
    /// Its listed resources (none unless it declares `resources`).
    pub resources: Vec<Arc<UpstreamTool>>,
    /// Its resource templates.
    pub templates: Vec<Arc<UpstreamTool>>,

    /// The era the session agreed on.
    pub era: Era,
    /// The protocol revision in force: 2026-07-28, or what `initialize` agreed.
    pub protocol_version: String,
    /// The shortest `ttlMs` the server gave its lists: they are listed again
    /// within it, if it is shorter than `[gateway] list_ttl_ms`.
    pub ttl: Option<Duration>,
}

impl Listing {
    /// The items of one kind.
    pub fn of(&self, kind: Kind) -> &[Arc<UpstreamTool>] {
        match kind {
            Kind::Tool => &self.tools,
            Kind::Prompt => &self.prompts,
            Kind::Resource => &self.resources,
            Kind::Template => &self.templates,
        }
    }

    fn same_as(&self, other: &Listing) -> bool {
        [Kind::Tool, Kind::Prompt, Kind::Resource, Kind::Template].into_iter().all(|k| {
            let (a, b) = (self.of(k), other.of(k));
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.raw.get() == b.raw.get())
        })
    }
}

#[derive(Default)]
struct State {
    session: Option<Arc<McpSession>>,
    listing: Option<Arc<Listing>>,
    down: Option<String>,
}

/// One configured upstream server and the supervisor of its connection.
pub struct Upstream {
    /// Its `[servers]` name.
    pub name: String,
    /// Whether its annotations may decide for tools the registry does not name.
    pub trusted: bool,
    transport: Transport,
    timeout: Duration,
    ttl: Duration,
    client_version: String,
    state: RwLock<State>,
    wake: Notify,
    /// Bumped whenever the listing changes (or the upstream goes down/up).
    generation: watch::Sender<u64>,
    /// Its box's connections through toolgate's proxy, across restarts.
    network: Arc<crate::sandbox::proxy::Counts>,
    progress: ProgressRoutes,
    next_progress: std::sync::atomic::AtomicU64,
    /// A listing of more tools than this is refused (`[gateway] max_tools_per_upstream`).
    max_tools: std::sync::atomic::AtomicUsize,
    /// An answer longer than this is refused (`[gateway] max_upstream_message_bytes`).
    max_message: std::sync::atomic::AtomicUsize,
    /// The upstream's URIs listen streams watch, each with how many watch it.
    watched: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
    /// Wakes the relay of updates when what is watched changes.
    watch_changed: Notify,
    /// The URIs the upstream said were updated.
    updates: broadcast::Sender<String>,
    /// The gateway's own credential at an HTTP server, where people carry theirs.
    own: std::sync::OnceLock<OwnCredential>,
}

/// A listen stream's watch of some of an upstream's resources: their
/// updates arrive on `updates` (the upstream's URIs) while it is held.
pub struct Watch {
    upstream: Arc<Upstream>,
    uris: Vec<String>,
    /// The upstream's URIs, as it says they were updated.
    pub updates: broadcast::Receiver<String>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = self.upstream.watched.lock().unwrap_or_else(|p| p.into_inner());
        for uri in &self.uris {
            if let Some(n) = watched.get_mut(uri) {
                *n -= 1;
                if *n == 0 {
                    watched.remove(uri);
                }
            }
        }
        drop(watched);
        self.upstream.watch_changed.notify_one();
    }
}

/// The shortest re-list interval a server's `ttlMs` can ask for: `0` ("do
/// not cache", rmcp's default) must not mean listing without pause.
const MIN_LIST_TTL_MS: u64 = 1000;

/// The shortest time between two listings of one upstream, however often it
/// says its lists changed (a server cannot make the gateway list it without
/// pause).
const MIN_RELIST: Duration = Duration::from_millis(500);

/// How long one upstream answer may be, unless configured.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// How many tools one upstream may list, unless configured.
pub const DEFAULT_MAX_TOOLS: usize = 1000;

/// Removes a call's progress route when the call ends, however it ends.
struct ProgressRoute {
    routes: ProgressRoutes,
    token: String,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.token);
    }
}

/// How toolgate reaches an upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A program started as a child, speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the environment it inherits, each read at start.
        env: std::collections::BTreeMap<String, ValueSource>,
        /// The box it runs in, or `Off`.
        sandbox: crate::sandbox::Sandbox,
    },
    /// Streamable HTTP at `url` (`http://` or `https://`).
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request, and where their values come from.
        headers: std::collections::BTreeMap<String, ValueSource>,
        /// Query parameters added to `url` at each connect (a credential an
        /// upstream takes only in its URL, `?api_key=…`), and where their
        /// values come from: never in `url` itself, which is shown.
        query: std::collections::BTreeMap<String, ValueSource>,
        /// Certificates (a PEM bundle) trusted beside the system's roots for
        /// `https://` (`[tls] ca_file`).
        ca: Option<Arc<Vec<u8>>>,
    },
}

impl Transport {
    /// This stdio transport with `var` set to `value` in its program's
    /// environment (a person's token, `identity.env`); an HTTP one unchanged.
    pub fn with_env(&self, var: &str, value: String) -> Transport {
        let mut t = self.clone();
        if let Transport::Stdio { env, .. } = &mut t {
            env.insert(var.to_string(), ValueSource::Value(value));
        }
        t
    }
}

/// Where a configured value an upstream gets (a header, a stdio server's
/// variable: credentials, often) comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSource {
    /// Written in the config.
    Value(String),
    /// An environment variable, read at connect.
    Env(String),
    /// An owner-only file (absolute), read at connect.
    File(std::path::PathBuf),
}

impl ValueSource {
    /// The value now (at each connect, so a rotated credential is picked up
    /// by the next one). Errors name `what`, the variable or the file, never
    /// a value.
    pub fn read(&self, what: &str) -> Result<String, UpstreamError> {
        match self {
            ValueSource::Value(v) => Ok(v.clone()),
            ValueSource::Env(var) => std::env::var(var).map_err(|_| {
                UpstreamError::Unavailable(format!(
                    "{what}: the environment variable {var} is not set"
                ))
            }),
            ValueSource::File(path) => {
                let unreadable = |why: String| UpstreamError::Unavailable(format!("{what}: {why}"));
                let text = std::fs::read_to_string(path)
                    .map_err(|e| unreadable(format!("cannot read {}: {e}", path.display())))?;
                crate::owner_only::check_owner_only(path)
                    .map_err(|e| unreadable(format!("{e:#}")))?;
                Ok(text.trim_end_matches(['\r', '\n']).to_string())
            }
        }
    }
}

/// One upstream server, as the config names it (`ServerConfig::server`).
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// How it is reached.
    pub transport: Transport,
    /// Whether its annotations may decide for tools the registry does not name.
    pub trusted: bool,
}

const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

impl Upstream {
    /// An upstream for `server`, not yet connected (`start` connects it):
    /// `timeout` bounds every request, `ttl` how long a listing stands, and
    /// `client_version` is what toolgate reports as its own version.
    pub fn new(
        name: &str,
        server: Server,
        timeout: Duration,
        ttl: Duration,
        client_version: &str,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            trusted: server.trusted,
            transport: server.transport,
            timeout,
            ttl,
            client_version: client_version.to_string(),
            state: RwLock::new(State::default()),
            wake: Notify::new(),
            generation: watch::channel(0).0,
            network: Arc::default(),
            progress: ProgressRoutes::default(),
            next_progress: std::sync::atomic::AtomicU64::new(1),
            max_tools: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_TOOLS),
            max_message: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_MESSAGE_BYTES),
            watched: Default::default(),
            watch_changed: Notify::new(),
            updates: broadcast::channel(256).0,
            own: std::sync::OnceLock::new(),
        })
    }

    /// The gateway's own credential for the requests it makes itself at an
    /// HTTP server (set before `start`).
    pub fn set_own_credential(&self, own: OwnCredential) {
        let _ = self.own.set(own);
    }

    /// Refuses an answer longer than `max` bytes (set before `start`).
    pub fn set_max_message_bytes(&self, max: usize) {
        self.max_message.store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Refuses a listing of more than `max` tools (set before `start`).
    pub fn set_max_tools(&self, max: usize) {
        self.max_tools.store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Starts the supervisor; it stops when `cancel` fires.
    pub fn start(self: &Arc<Self>, cancel: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = this.supervise() => {}
                _ = this.relay_updates() => {}
            }
            *this.state.write().unwrap_or_else(|p| p.into_inner()) = State {
                session: None,
                listing: None,
                down: Some("the gateway is shutting down".into()),
            };
        });
    }

    /// The current listing; `None` while the upstream is down or connecting.
    pub fn listing(&self) -> Option<Arc<Listing>> {
        self.read().listing.clone()
    }

    /// A caller wanted this upstream while it was down: try to reconnect
    /// now rather than at the end of a backoff that grew while it was away
    /// (the supervisor still waits BACKOFF_START between attempts).
    pub fn nudge(&self) {
        if self.read().session.is_none() {
            self.wake.notify_one();
        }
    }

    /// The box it runs in: `None` for an HTTP upstream.
    pub fn sandbox(&self) -> Option<&crate::sandbox::Sandbox> {
        match &self.transport {
            Transport::Stdio { sandbox, .. } => Some(sandbox),
            Transport::Http { .. } => None,
        }
    }

    /// Its box's connections through toolgate's proxy, since the gateway started.
    pub fn network_counts(&self) -> &crate::sandbox::proxy::Counts {
        &self.network
    }

    /// Why the upstream is down, if it is.
    pub fn down_reason(&self) -> Option<String> {
        self.read().down.clone()
    }

    /// Changes whenever the listing changes (or the upstream goes down or up).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Bumped whenever the listing changes; cheap enough for every call.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Waits until the first listing exists or `within` passes.
    pub async fn ready(&self, within: Duration) -> bool {
        self.until(within, |s| s.listing.is_some()).await;
        self.listing().is_some()
    }

    /// Waits until the upstream is listed or has failed a first time (a
    /// server that exits at once is not waited out), or `within` passes.
    /// Whether it is listed.
    pub async fn settled(&self, within: Duration) -> bool {
        self.until(within, |s| s.listing.is_some() || s.down.is_some()).await;
        self.listing().is_some()
    }

    async fn until(&self, within: Duration, done: impl Fn(&State) -> bool) {
        let mut changes = self.changes();
        let deadline = tokio::time::Instant::now() + within;
        while !done(&self.read()) {
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Sends `name` (a tool, a prompt, a resource's URI) its `arguments`
    /// by `kind`'s method, under the deadline. The result comes back
    /// verbatim. A transport failure marks the upstream down.
    pub async fn call(
        &self,
        kind: Kind,
        name: &str,
        arguments: &Value,
        options: CallOptions,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let mut params = match kind {
            Kind::Tool | Kind::Prompt => serde_json::json!({"name": name, "arguments": arguments}),
            Kind::Resource | Kind::Template => serde_json::json!({"uri": arguments["uri"]}),
        };
        for (k, v) in &options.input {
            params[k.as_str()] = v.clone();
        }
        if let Some(caps) = &options.client_capabilities {
            params["_meta"][crate::wire::META_CLIENT_CAPABILITIES] = caps.clone();
        }
        for (k, v) in &options.meta {
            params["_meta"][k.as_str()] = Value::String(v.clone());
        }
        // Progress: our own token upstream, routed back to this call only.
        let _route = options.progress.map(|relay| {
            let token = format!(
                "toolgate-{}",
                self.next_progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            params["_meta"]["progressToken"] = serde_json::json!(token);
            self.progress.lock().unwrap_or_else(|p| p.into_inner()).insert(token.clone(), relay);
            ProgressRoute { routes: self.progress.clone(), token }
        });
        let timeout = options.deadline.map_or(self.timeout, |d| d.min(self.timeout));
        self.send(kind.method(), params, &options.headers, timeout).await
    }

    /// Watches `uris` (the upstream's own) for `notifications/resources/updated`.
    pub fn watch(self: &Arc<Self>, uris: Vec<String>) -> Watch {
        {
            let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            for uri in &uris {
                *watched.entry(uri.clone()).or_default() += 1;
            }
        }
        self.watch_changed.notify_one();
        Watch { upstream: self.clone(), uris, updates: self.updates.subscribe() }
    }

    /// Follows the watched URIs on the current session: in the 2026-07-28
    /// era with one `subscriptions/listen` for all of them (opened again
    /// when they change or it ends), in the legacy era with
    /// `resources/subscribe` and `resources/unsubscribe` as they come and
    /// go. Updates reach `updates` through the inbox, whatever stream
    /// carries them.
    async fn relay_updates(&self) {
        // The legacy subscriptions made, those the server refused, and the
        // session they were made on.
        let (mut on, mut subscribed, mut refused): (
            Option<Arc<McpSession>>,
            BTreeSet<String>,
            BTreeSet<String>,
        ) = Default::default();
        loop {
            let uris: BTreeSet<String> =
                self.watched.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
            let session = self.read().session.clone();
            match session {
                Some(session) if session.era == Era::Modern && !uris.is_empty() => {
                    let params =
                        serde_json::json!({"notifications": {"resourceSubscriptions": uris}});
                    let ended = tokio::select! {
                        ended = session.listen(params) => ended,
                        _ = self.watch_changed.notified() => continue,
                    };
                    // Opened again after a pause: at once would let a server
                    // that ends every stream keep this loop spinning.
                    let pause = match ended {
                        Ok(()) => BACKOFF_START,
                        Err(e) => {
                            tracing::warn!(server = %self.name, error = %e, "cannot follow the upstream's resource updates; trying again");
                            BACKOFF_MAX / 6
                        }
                    };
                    tokio::select! {
                        _ = self.watch_changed.notified() => {}
                        _ = tokio::time::sleep(pause) => {}
                    }
                    continue;
                }
                Some(session) if session.era == Era::Legacy => {
                    if !on.as_ref().is_some_and(|s| Arc::ptr_eq(s, &session)) {
                        (on, subscribed, refused) =
                            (Some(session.clone()), BTreeSet::new(), BTreeSet::new());
                    }
                    let new: Vec<String> = uris
                        .iter()
                        .filter(|u| !subscribed.contains(*u) && !refused.contains(*u))
                        .cloned()
                        .collect();
                    for uri in new {
                        match tokio::time::timeout(
                            self.timeout,
                            session
                                .request("resources/subscribe", serde_json::json!({"uri": &uri})),
                        )
                        .await
                        {
                            Ok(Ok(_)) => subscribed.insert(uri),
                            Ok(Err(e)) => {
                                tracing::warn!(server = %self.name, error = %e, "the upstream refused resources/subscribe; its updates are not relayed");
                                refused.insert(uri)
                            }
                            Err(_) => false, // tried again on the next round
                        };
                    }
                    for uri in subscribed
                        .iter()
                        .filter(|u| !uris.contains(*u))
                        .cloned()
                        .collect::<Vec<_>>()
                    {
                        let _ = tokio::time::timeout(
                            self.timeout,
                            session
                                .request("resources/unsubscribe", serde_json::json!({"uri": uri})),
                        )
                        .await;
                        subscribed.remove(&uri);
                    }
                    refused.retain(|u| uris.contains(u));
                }
                _ => {}
            }
            // Until what is watched changes, or (now and then) the session does.
            tokio::select! {
                _ = self.watch_changed.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Passes a `completion/complete` on (its `ref` already the upstream's own).
    pub async fn complete(&self, params: Value) -> Result<Box<RawValue>, UpstreamError> {
        self.send("completion/complete", params, &[], self.timeout).await
    }

    async fn send(
        &self,
        method: &str,
        params: Value,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let (session, down) = {
            let state = self.read();
            (state.session.clone(), state.down.clone())
        };
        let Some(session) = session else {
            self.nudge();
            return Err(UpstreamError::Unavailable(
                down.unwrap_or_else(|| "not connected yet".into()),
            ));
        };
        match tokio::time::timeout(timeout, session.request_with_headers(method, params, headers))
            .await
        {
            Err(_) => Err(UpstreamError::Timeout),
            Ok(Err(e @ (UpstreamError::Unavailable(_) | UpstreamError::Lost(_)))) => {
                // Only if the session that failed is still the current one: a
                // late failure of an old session must not take down a new one.
                let current =
                    self.read().session.as_ref().is_some_and(|s| Arc::ptr_eq(s, &session));
                if current {
                    self.set_down(e.to_string());
                }
                self.wake.notify_one();
                Err(e)
            }
            Ok(other) => other,
        }
    }

    /// How long the current listing stands: `list_ttl_ms`, or the server's
    /// own `ttlMs` when that is shorter.
    fn relist_after(&self) -> Duration {
        let hint = self.read().listing.as_ref().and_then(|l| l.ttl);
        hint.map_or(self.ttl, |h| h.min(self.ttl))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn set_down(&self, reason: String) {
        {
            let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
            if s.down.as_deref() == Some(reason.as_str()) && s.listing.is_none() {
                return;
            }
            tracing::warn!(server = %self.name, %reason, "upstream down");
            *s = State { session: None, listing: None, down: Some(reason) };
        }
        self.generation.send_modify(|g| *g += 1);
    }

    fn set_up(&self, session: Arc<McpSession>, listing: Listing) {
        let changed = {
            let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
            let same = s.listing.as_ref().is_some_and(|old| old.same_as(&listing));
            *s = State { session: Some(session), listing: Some(Arc::new(listing)), down: None };
            !same
        };
        // An unchanged re-list is not news: no rebuild, no list_changed.
        if changed {
            self.generation.send_modify(|g| *g += 1);
        }
    }

    async fn connect(
        &self,
        events: broadcast::Sender<String>,
    ) -> Result<(Arc<McpSession>, Listing), UpstreamError> {
        let max_message = self.max_message.load(std::sync::atomic::Ordering::Relaxed);
        let inbox =
            Inbox { events, updates: self.updates.clone(), progress: self.progress.clone() };
        // A stdio server reached as the gateway itself takes the gateway's
        // own credential in its environment, made afresh at each start.
        let transport = match (&self.transport, self.own.get()) {
            (Transport::Stdio { .. }, Some(own)) => {
                let value = (own.value)().await.map_err(|why| {
                    UpstreamError::Unavailable(format!(
                        "start: no credential for the gateway itself ({why})"
                    ))
                })?;
                std::borrow::Cow::Owned(self.transport.with_env(&own.header, value))
            }
            _ => std::borrow::Cow::Borrowed(&self.transport),
        };
        let channel = session::Channel::open(
            &self.name,
            &transport,
            inbox,
            max_message,
            self.network.clone(),
            self.own.get().cloned(),
        )?;
        let session =
            tokio::time::timeout(self.timeout, McpSession::open(channel, &self.client_version))
                .await
                .map_err(|_| UpstreamError::Timeout)??;
        let session = Arc::new(session);
        let listing = self.list(&session).await?;
        Ok((session, listing))
    }

    async fn list(&self, session: &McpSession) -> Result<Listing, UpstreamError> {
        let mut ttl = None;
        let tools = self.list_kind(session, Kind::Tool, &mut ttl).await?;
        let (mut prompts, mut resources, mut templates) = (Vec::new(), Vec::new(), Vec::new());
        if session.offers("prompts") {
            prompts = self.list_optional(session, Kind::Prompt, &mut ttl).await?;
        }
        if session.offers("resources") {
            resources = self.list_optional(session, Kind::Resource, &mut ttl).await?;
            templates = self.list_optional(session, Kind::Template, &mut ttl).await?;
        }
        // A server's hint is honoured down to a floor, so a server cannot
        // make the gateway list it without pause.
        let ttl = ttl.map(|ms: u64| Duration::from_millis(ms.max(MIN_LIST_TTL_MS)));
        Ok(Listing {
            tools,
            prompts,
            resources,
            templates,
            era: session.era,
            protocol_version: session.protocol_version.clone(),
            ttl,
        })
    }

    /// A list the server declared but answers with an error is taken as
    /// empty (its tools still serve); a lost connection is not.
    async fn list_optional(
        &self,
        session: &McpSession,
        kind: Kind,
        ttl: &mut Option<u64>,
    ) -> Result<Vec<Arc<UpstreamTool>>, UpstreamError> {
        match self.list_kind(session, kind, ttl).await {
            Err(UpstreamError::Rpc(e)) => {
                tracing::warn!(server = %self.name, method = kind.list().0, error = %e.message, "the list failed; it is taken as empty");
                Ok(Vec::new())
            }
            other => other,
        }
    }

    async fn list_kind(
        &self,
        session: &McpSession,
        kind: Kind,
        ttl: &mut Option<u64>,
    ) -> Result<Vec<Arc<UpstreamTool>>, UpstreamError> {
        let (method, key, field) = kind.list();
        let (raws, ttl_ms) = tokio::time::timeout(self.timeout, session.list_all(method, key))
            .await
            .map_err(|_| UpstreamError::Timeout)??;
        if let Some(t) = ttl_ms {
            *ttl = Some(ttl.map_or(t, |old| old.min(t)));
        }
        // A server that lists without end would fill memory and every
        // client's context: past the limit, the listing is refused whole.
        let max = self.max_tools.load(std::sync::atomic::Ordering::Relaxed);
        if raws.len() > max {
            return Err(UpstreamError::Protocol(format!(
                "it lists {} {key}, more than [gateway] max_tools_per_upstream ({max})",
                raws.len()
            )));
        }
        let mut items = Vec::with_capacity(raws.len());
        for raw in raws {
            let definition: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            match definition.get(field).and_then(Value::as_str) {
                Some(name) => {
                    items.push(Arc::new(UpstreamTool { name: name.to_string(), raw, definition }))
                }
                None => {
                    tracing::warn!(server = %self.name, "an item of {method} without `{field}` was ignored")
                }
            }
        }
        Ok(items)
    }

    async fn supervise(self: &Arc<Self>) {
        let mut backoff = BACKOFF_START;
        loop {
            let attempt = tokio::time::Instant::now();
            let (events_tx, mut events) = broadcast::channel(32);
            match self.connect(events_tx).await {
                Err(e) => self.set_down(e.to_string()),
                Ok((session, listing)) => {
                    tracing::info!(server = %self.name, era = ?listing.era, tools = listing.tools.len(), "upstream up");
                    self.set_up(session.clone(), listing);
                    backoff = BACKOFF_START;
                    self.serve_session(&session, &mut events).await;
                }
            }
            // A call that finds the upstream down wakes the next attempt (an
            // upstream back after a restart serves again within a moment, not
            // after a backoff grown while it was away), but never sooner than
            // BACKOFF_START after the last one: callers cannot hammer it.
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.wake.notified() => tokio::time::sleep_until(attempt + BACKOFF_START).await,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Keeps the listing fresh until the session is lost.
    async fn serve_session(
        &self,
        session: &Arc<McpSession>,
        events: &mut broadcast::Receiver<String>,
    ) {
        let mut closed = session.closed();
        // A legacy HTTP session's own messages come on its standing stream,
        // kept open (again after it ends) while the session lasts.
        let standing = async {
            let mut pause = BACKOFF_START;
            loop {
                if let Err(e) = session.standing().await {
                    tracing::debug!(server = %self.name, error = %e, "the upstream's standing stream ended");
                    pause = (pause * 2).min(BACKOFF_MAX);
                }
                tokio::time::sleep(pause).await;
            }
        };
        tokio::pin!(standing);
        let mut listed = tokio::time::Instant::now();
        loop {
            let relist = tokio::select! {
                _ = &mut standing => false,
                _ = async {
                    match closed.as_mut() {
                        Some(c) => { let _ = c.wait_for(|alive| !*alive).await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {
                    self.set_down("the upstream process exited".into());
                    return;
                }
                event = events.recv() => matches!(
                    event.as_deref(),
                    Ok("notifications/tools/list_changed" | "notifications/prompts/list_changed" | "notifications/resources/list_changed") | Err(broadcast::error::RecvError::Lagged(_))
                ),
                _ = tokio::time::sleep(self.relist_after()) => true,
                _ = self.wake.notified() => {
                    if self.read().session.is_none() {
                        return; // a call found it broken
                    }
                    // A wake left from while it was down: nothing to do.
                    false
                }
            };
            if !relist {
                continue;
            }
            // However many list changes a server announces, it is listed at
            // most once per `MIN_RELIST`; what it announced meanwhile is in
            // the listing about to be taken.
            tokio::time::sleep_until(listed + MIN_RELIST).await;
            while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = events.try_recv() {}
            listed = tokio::time::Instant::now();
            match self.list(session).await {
                Ok(listing) => self.set_up(session.clone(), listing),
                Err(e @ (UpstreamError::Unavailable(_) | UpstreamError::Lost(_))) => {
                    self.set_down(e.to_string());
                    return;
                }
                Err(e) => {
                    tracing::warn!(server = %self.name, error = %e, "re-listing failed; keeping the previous list")
                }
            }
        }
    }
}
