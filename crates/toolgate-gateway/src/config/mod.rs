//! The gateway's configuration: one TOML file.
//!
//! `[gateway]` holds the endpoint and limits; `[servers.NAME]` the upstreams,
//! with the fields of the ecosystem's `mcpServers` entries (`command`/`args`/
//! `env`, or `url`/`headers`) plus `trusted`; `[registry."NAME"]` the host's
//! own class for a tool, by its exposed name. `--mcp-json FILE` imports an
//! existing `mcpServers` file as untrusted servers.

pub use crate::identity_config::{IdentityConfig, IdentityMode, IdentitySettings};
pub use crate::sandbox_config::{BoxConfig, NetworkConfig, SandboxConfig};
use toolgate_mcp::upstream::{
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TOOLS, Server, Transport, ValueSource,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toolgate_mcp::sandbox::Sandbox;

use serde::Deserialize;
use toolgate_core::AuthorityClass;

const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
const DEFAULT_SEPARATOR: &str = "__";
/// Resource URIs of a namespaced server are exposed under `toolgate://SERVER/`.
pub const URI_SCHEME: &str = "toolgate://";

/// Why a config (or an imported `mcpServers` file) cannot be used; the
/// message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file was read but is not valid: bad syntax, an unknown key, or a
    /// value (or combination) the checks refuse.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key where there is one.
        message: String,
    },
}

/// The gateway's configuration, parsed and validated (see the module docs).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[gateway]`: the downstream endpoint, its limits and timings.
    #[serde(default)]
    pub gateway: GatewaySettings,
    /// `[servers.NAME]`: the upstream MCP servers, by name.
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
    /// `[registry."SERVER{sep}TOOL"]`: the host's own word on a tool (its
    /// class and labels), by exposed name.
    #[serde(default)]
    pub registry: BTreeMap<String, RegistryEntry>,
    /// `[registry_prompts."SERVER{sep}PROMPT"]`: the host's word on a prompt, by exposed name.
    #[serde(default)]
    pub registry_prompts: BTreeMap<String, ContentEntry>,
    /// `[[registry_resources]]`: the host's word on resources, by server and
    /// URI pattern; the first entry that matches decides.
    #[serde(default)]
    pub registry_resources: Vec<ResourceEntry>,
    /// Who may call: `[callers.NAME]`, each with a token or opened anonymously.
    #[serde(default)]
    pub callers: BTreeMap<String, CallerConfig>,
    /// The Cedar policy set and its schema, when argument-level rules apply.
    pub policy: Option<PolicyConfig>,
    /// Traces, metrics and logs.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Signed receipts and the verifiable log.
    #[serde(default)]
    pub receipts: ReceiptsConfig,
    /// How a call waiting for a named human is held, and who is told.
    #[serde(default)]
    pub approvals: ApprovalsConfig,
    /// OAuth 2.1 access tokens (JWT) from one authorization server, beside
    /// the static tokens of `[callers]`.
    pub oauth: Option<OAuthConfig>,
    /// Guards in the decide stage, beside the registry and Cedar.
    #[serde(default)]
    pub guards: GuardsConfig,
    /// Agent runs: how long one lives (the trifecta and run budgets count within it).
    #[serde(default)]
    pub runs: RunsConfig,
    /// Rates per caller, calls per run, calls at once per tool.
    #[serde(default)]
    pub budgets: BudgetsConfig,
    /// The web console at `/console`.
    #[serde(default)]
    pub console: ConsoleConfig,
    /// How the gateway checks the servers it reaches over `https://`.
    #[serde(default)]
    pub tls: TlsConfig,
    /// The gateway as the issuer of the identity assertions its servers
    /// receive (`[servers.NAME.identity]`).
    #[serde(default)]
    pub identity: IdentitySettings,
    /// The file this came from; relative paths resolve against its folder.
    #[serde(skip)]
    path: PathBuf,
    /// The `mcpServers` files imported beside it (`serve --mcp-json`), in
    /// order: a reload reads them again.
    #[serde(skip)]
    imported: Vec<PathBuf>,
    /// Its version: the hex SHA-256 of the file's bytes, or, with imported
    /// `mcpServers` files, of the file's hash and each file's bytes in turn.
    /// Every receipt names the version its call ran under.
    #[serde(skip)]
    version: String,
    /// The file's top-level tables a reload cannot put in force, as read:
    /// a change to one waits for a restart (`Config::reloaded`).
    #[serde(skip)]
    fixed: BTreeMap<String, toml::Value>,
}

/// The top-level tables a reload puts in force: the servers, the registry
/// and the policy. Any other table changed waits for a restart.
pub const RELOADABLE: [&str; 5] =
    ["servers", "registry", "registry_prompts", "registry_resources", "policy"];

/// `[tls]`: outbound `https://` (upstreams, webhooks, the OAuth issuer,
/// OTLP) trusts the system's roots, and the certificates of `ca_file`
/// beside them; with `cert_file` and `key_file` the listeners serve https.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// A PEM bundle of CA certificates to trust as well (e.g. a company's
    /// own CA), relative to the config.
    pub ca_file: Option<PathBuf>,
    /// The listeners' certificate chain (PEM), read again when it changes.
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM, owner-only).
    pub key_file: Option<PathBuf>,
    /// Its bytes, read and checked when the config is loaded.
    #[serde(skip)]
    ca: Option<std::sync::Arc<Vec<u8>>>,
}

impl TlsConfig {
    /// The certificates to trust beside the system's roots.
    pub fn roots(&self) -> Vec<reqwest::Certificate> {
        self.ca
            .as_deref()
            .and_then(|pem| reqwest::Certificate::from_pem_bundle(pem).ok())
            .unwrap_or_default()
    }
}

/// `[gateway]`: how the gateway serves agents, and its limits.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GatewaySettings {
    /// Downstream Streamable HTTP address; the endpoint is `http://LISTEN/mcp`.
    pub listen: SocketAddr,
    /// Between server and tool in exposed names. LLM function-name rules
    /// forbid dots, so the default is `__`.
    pub(crate) separator: String,
    /// `Host` values accepted (DNS-rebinding defence). Loopback names by default.
    pub(crate) allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers; a request with any other
    /// `Origin` gets 403. Requests without `Origin` (non-browser clients) pass.
    pub(crate) allowed_origins: Vec<String>,
    /// Where the gateway keeps its state; relative to the config file.
    pub(crate) state_dir: PathBuf,
    /// The contract pins' lock file, relative to the config file. Default:
    /// beside it (`toolgate.toml` → `toolgate.lock`). A gateway whose config
    /// folder it may not write (a packaged service) keeps it in its state.
    pub(crate) lock_file: Option<PathBuf>,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_argument_bytes: usize,
    pub(crate) max_depth: usize,
    /// A string in a request (a value or a key) longer than this is refused.
    pub(crate) max_string_bytes: usize,
    /// An array or object in a request with more items than this is refused.
    pub(crate) max_items: usize,
    /// An upstream's answer (a body, an SSE event, a stdio line) longer
    /// than this is refused as a protocol error.
    pub(crate) max_upstream_message_bytes: usize,
    /// Deadline of one upstream call (a server's `timeout_ms` overrides it).
    pub(crate) upstream_timeout_ms: u64,
    /// Where operations and approvals are kept: a `postgres://` URL (for
    /// replicas sharing one database), or else the embedded SQLite file
    /// `STATE_DIR/ledger.sqlite3`.
    pub(crate) ledger: Option<String>,
    /// How long a tool list is trusted before it is listed again.
    pub(crate) list_ttl_ms: u64,
    /// Refuse results that violate the tool's outputSchema instead of
    /// passing them on flagged.
    pub(crate) block_invalid_results: bool,
    /// Tools per `tools/list` page.
    pub(crate) list_page_size: usize,
    /// An upstream listing more tools than this is refused (and stays down).
    pub(crate) max_tools_per_upstream: usize,
    /// The caller a `--stdio` downstream acts as (a `[callers]` key).
    pub(crate) stdio_caller: Option<String>,
    /// How long an approval stays valid once opened: it must be decided and
    /// used within this time.
    pub(crate) approval_ttl_ms: u64,
    /// After Ctrl-C or SIGTERM, how long calls in flight may take to finish
    /// before the process exits anyway.
    pub shutdown_grace_ms: u64,
    /// How long a settled operation is kept, and so how long its key
    /// answers a retry with the recorded outcome rather than running again
    /// (`toolgate_gateway::retention`); 0 keeps every operation forever.
    pub(crate) operation_ttl_ms: u64,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            separator: DEFAULT_SEPARATOR.into(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            allowed_origins: Vec::new(),
            state_dir: PathBuf::from("state"),
            lock_file: None,
            max_body_bytes: 1 << 20,
            max_argument_bytes: 64 << 10,
            max_depth: 64,
            max_string_bytes: 256 << 10,
            max_items: 10_000,
            max_upstream_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            upstream_timeout_ms: 30_000,
            ledger: None,
            list_ttl_ms: 60_000,
            block_invalid_results: false,
            list_page_size: 100,
            max_tools_per_upstream: DEFAULT_MAX_TOOLS,
            stdio_caller: None,
            approval_ttl_ms: 15 * 60 * 1000,
            shutdown_grace_ms: 30_000,
            operation_ttl_ms: 7 * 24 * 3_600_000,
        }
    }
}

/// `[servers.NAME]`: one upstream, reached over stdio (`command`) or
/// Streamable HTTP (`url`); exactly one of the two is set.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program to start as a stdio upstream.
    pub command: Option<String>,
    /// The arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the environment `command` inherits.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables whose values are read, at each start, from environment
    /// variables of the gateway: variable → variable. Credentials stay out
    /// of the file.
    #[serde(default)]
    pub env_env: BTreeMap<String, String>,
    /// Variables whose values are read, at each start, from owner-only
    /// files (relative to the config; a trailing newline is dropped):
    /// variable → file.
    #[serde(default)]
    pub env_file: BTreeMap<String, PathBuf>,
    /// The endpoint of a Streamable HTTP upstream (`http://`, or
    /// `https://` checked as `[tls]` says).
    pub url: Option<String>,
    /// Headers sent with every request to `url`, e.g. `Authorization`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read, at each connect, from environment
    /// variables: header → variable. Credentials stay out of the file.
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// Headers whose values are read, at each connect, from owner-only
    /// files (relative to the config; a trailing newline is dropped):
    /// header → file.
    #[serde(default)]
    pub headers_file: BTreeMap<String, PathBuf>,
    /// Query parameters added to `url` at each connect, their values read
    /// from environment variables: parameter → variable. For an upstream
    /// that takes its credential only in the URL (`?api_key=…`): `url`
    /// itself may hold no credential.
    #[serde(default)]
    pub query_env: BTreeMap<String, String>,
    /// Query parameters added to `url` at each connect, their values read
    /// from owner-only files (relative to the config; a trailing newline is
    /// dropped): parameter → file.
    #[serde(default)]
    pub query_file: BTreeMap<String, PathBuf>,
    /// Whether this server's annotations may decide for tools the registry
    /// does not name. Default: not trusted.
    #[serde(default)]
    pub trusted: bool,
    /// Accepted for compatibility with mcpServers files; the transport is
    /// known from `command` or `url`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Expose this server's tools under their own names, without the
    /// `SERVER{sep}` prefix. Only for a gateway fronting exactly one server,
    /// where names cannot collide. Default: true (prefixed).
    #[serde(default = "yes")]
    pub namespace: bool,
    /// This server's deadline per call, instead of `gateway.upstream_timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// The box a stdio server runs in (docs/SANDBOX.md): a table of grants
    /// and limits, or `"off"`. Default: a box with no grant, no network and
    /// the default limits.
    pub sandbox: Option<SandboxConfig>,
    /// `sandbox` resolved at load (paths absolute, its home, its hash);
    /// `None` in a config built in code (see `sandbox()`).
    #[serde(skip)]
    #[schemars(skip)]
    pub boxed: Option<Sandbox>,
    /// As whom a call reaches this server (docs/IDENTITY.md). Default:
    /// `shared`, the configured credential.
    #[serde(default)]
    pub identity: IdentityConfig,
}

fn yes() -> bool {
    true
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_env: BTreeMap::new(),
            env_file: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            headers_env: BTreeMap::new(),
            headers_file: BTreeMap::new(),
            query_env: BTreeMap::new(),
            query_file: BTreeMap::new(),
            trusted: false,
            kind: None,
            namespace: true,
            timeout_ms: None,
            sandbox: None,
            boxed: None,
            identity: IdentityConfig::default(),
        }
    }
}

impl ServerConfig {
    /// The server as the upstream client reaches it.
    pub fn server(&self) -> Server {
        Server { transport: self.transport(), trusted: self.trusted }
    }

    /// `server()`, trusting `tls`'s certificates too for `https://`.
    pub fn server_with(&self, tls: &TlsConfig) -> Server {
        let mut server = self.server();
        if let Transport::Http { ca, .. } = &mut server.transport {
            *ca = tls.ca.clone();
        }
        server
    }

    /// The box this stdio server runs in. One not read by `Config::parse`
    /// (built in code) is boxed too, its paths relative to the working
    /// folder and its home under the temporary folder.
    pub fn sandbox(&self) -> Sandbox {
        self.boxed.clone().unwrap_or_else(|| {
            let fallback = std::env::temp_dir().join(format!("toolgate-{}", std::process::id()));
            let resolve = |sandbox| {
                crate::sandbox_config::resolve("server", sandbox, Path::new("."), &fallback)
            };
            resolve(self.sandbox.as_ref())
                .or_else(|_| resolve(None))
                .expect("the default box always resolves")
        })
    }

    fn transport(&self) -> Transport {
        match (&self.command, &self.url) {
            (Some(command), _) => {
                let written =
                    self.env.iter().map(|(k, v)| (k.clone(), ValueSource::Value(v.clone())));
                let from_env =
                    self.env_env.iter().map(|(k, v)| (k.clone(), ValueSource::Env(v.clone())));
                let from_file =
                    self.env_file.iter().map(|(k, v)| (k.clone(), ValueSource::File(v.clone())));
                Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: written.chain(from_env).chain(from_file).collect(),
                    sandbox: self.sandbox(),
                }
            }
            (None, Some(url)) => {
                let written =
                    self.headers.iter().map(|(k, v)| (k.clone(), ValueSource::Value(v.clone())));
                let from_env =
                    self.headers_env.iter().map(|(k, v)| (k.clone(), ValueSource::Env(v.clone())));
                let from_file = self
                    .headers_file
                    .iter()
                    .map(|(k, v)| (k.clone(), ValueSource::File(v.clone())));
                let query_env =
                    self.query_env.iter().map(|(k, v)| (k.clone(), ValueSource::Env(v.clone())));
                let query_file =
                    self.query_file.iter().map(|(k, v)| (k.clone(), ValueSource::File(v.clone())));
                Transport::Http {
                    url: url.clone(),
                    headers: written.chain(from_env).chain(from_file).collect(),
                    query: query_env.chain(query_file).collect(),
                    ca: None,
                }
            }
            (None, None) => unreachable!("validated: every server has command or url"),
        }
    }
}

/// A `[registry]` entry: the host's word on one tool, which a server's
/// annotations cannot override.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryEntry {
    /// The tool's authority class; it runs over what the annotations imply.
    pub class: AuthorityClass,
    /// Free labels (e.g. `private_data`, `exfiltration`) for policy and guards.
    #[serde(default)]
    pub labels: Vec<String>,
    /// The host's word that this tool changes nothing: its calls are not
    /// operations (no ledger record, a lost answer may be retried).
    #[serde(default)]
    pub(crate) read_only: bool,
    /// How to find this write's effect when its outcome is unknown.
    pub(crate) reconcile: Option<ReconcileConfig>,
}

/// `[oauth]`: the gateway as an OAuth 2.1 resource server (MCP
/// authorization). A bearer token that is no `[callers]` token is checked as
/// a JWT access token of `issuer`: signed by a key of its JWKS, for this
/// `resource` (`aud`), in time; its claims and scopes name the caller.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier; tokens' `iss` must equal it.
    pub issuer: String,
    /// This gateway's resource URI (RFC 8707), e.g. `https://gw.example/mcp`:
    /// tokens' `aud` must name it; the metadata document names it.
    pub resource: String,
    /// The issuer's JWKS; default: `jwks_uri` of its metadata (RFC 8414,
    /// `/.well-known/oauth-authorization-server`, else OpenID discovery).
    pub jwks_uri: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway_s")]
    pub leeway_s: u64,
    /// Scopes every token must carry.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// The claim that names the caller (its `[callers]`-like name).
    #[serde(default = "default_caller_claim")]
    pub caller_claim: String,
    /// The claim that names the caller's tenant …
    pub tenant_claim: Option<String>,
    /// … or the tenant of every token of this issuer.
    pub tenant: Option<String>,
    /// Roles granted by scopes: `{ "toolgate:approve" = ["approver"] }`.
    #[serde(default)]
    pub scope_roles: BTreeMap<String, Vec<String>>,
    /// How long fetched keys are used before they are fetched again.
    #[serde(default = "default_jwks_ttl_s")]
    pub jwks_ttl_s: u64,
    /// A token signed by a key not in the cache fetches the keys again (a
    /// rotation), at most this often.
    #[serde(default = "default_jwks_refresh_min_ms")]
    pub jwks_refresh_min_ms: u64,
}

fn default_leeway_s() -> u64 {
    30
}
fn default_caller_claim() -> String {
    "sub".into()
}
fn default_jwks_ttl_s() -> u64 {
    600
}
fn default_jwks_refresh_min_ms() -> u64 {
    5000
}

/// A `[registry_prompts]` entry: the host's word on a prompt. Getting a
/// prompt or reading a resource changes nothing, so the class is
/// `automatic` or `prohibited`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentEntry {
    /// `automatic` or `prohibited`.
    pub class: AuthorityClass,
    /// Free labels (e.g. `private_data`) for the guards, as for tools.
    #[serde(default)]
    pub labels: Vec<String>,
}

/// A `[[registry_resources]]` entry: the resources of `server` whose URI
/// (a template's `uriTemplate`) matches `uri`, where `*` stands for any run
/// of characters.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceEntry {
    /// The configured server.
    pub server: String,
    /// The URI pattern, on the upstream's own URIs (`manual://*`).
    pub uri: String,
    /// `automatic` or `prohibited`.
    pub class: AuthorityClass,
    /// Free labels, as for tools.
    #[serde(default)]
    pub labels: Vec<String>,
}

impl ResourceEntry {
    /// Whether this entry names `uri` of `server`.
    pub fn names(&self, server: &str, uri: &str) -> bool {
        self.server == server && glob(&self.uri, uri)
    }
}

/// `*` matches any run of characters (none included); all else is literal.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A read tool on the same server that finds a write's effect: after
/// `create_ticket` times out, `get_ticket {client_reference}` says whether
/// the ticket exists.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileConfig {
    /// The read tool's upstream name.
    pub(crate) tool: String,
    /// The read tool's arguments: each maps to the name of an argument of
    /// the original write.
    pub(crate) arguments: BTreeMap<String, String>,
    /// A JSON pointer into the read's `structuredContent` that is `true`
    /// when the effect exists (default `/found`).
    #[serde(default = "found_pointer")]
    pub(crate) found: String,
}

fn found_pointer() -> String {
    "/found".into()
}

/// A caller: who it is, in which tenant, with which roles, and how it
/// proves it. The token is read from `token_env` or `token_file` at start
/// and never logged; `anonymous = true` opens this identity to requests
/// without a token instead.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerConfig {
    /// Default: the caller's name.
    pub subject: Option<String>,
    /// The tenant every call of this caller belongs to.
    pub tenant: String,
    /// Roles for policy; `approver` may decide approvals.
    #[serde(default)]
    pub roles: Vec<String>,
    pub(crate) token_env: Option<String>,
    pub(crate) token_file: Option<PathBuf>,
    #[serde(default)]
    pub(crate) anonymous: bool,
}

impl CallerConfig {
    /// The person behind the caller `name`: its `subject`, or its name.
    pub fn subject_of(&self, name: &str) -> String {
        self.subject.clone().unwrap_or_else(|| name.to_string())
    }
}

/// Telemetry: OTLP export (HTTP/protobuf) is off unless an endpoint is
/// configured here or in `OTEL_EXPORTER_OTLP_ENDPOINT` /
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the other `OTEL_*` variables
/// (headers, sampler, service name, resource) apply as the SDK reads them.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Base URL of an OTLP/HTTP receiver, e.g. `http://127.0.0.1:4318`
    /// (traces go to `/v1/traces`, metrics to `/v1/metrics`).
    pub(crate) otlp_endpoint: Option<String>,
    /// Extra headers for the receiver (credentials: never logged).
    pub(crate) otlp_headers: BTreeMap<String, String>,
    /// Fraction of new traces sampled (a sampled parent is always followed).
    pub(crate) sample_ratio: Option<f64>,
    pub(crate) service_name: Option<String>,
    /// `text` or `json` log lines on stderr.
    pub(crate) log_format: LogFormat,
    /// Log filter when `RUST_LOG` is not set (unset: the command's own
    /// default, e.g. `error` for `demo`).
    pub(crate) log_level: Option<String>,
    /// How often metrics are exported.
    pub(crate) metrics_interval_ms: u64,
    /// Where `GET /metrics` serves the same metrics as Prometheus text
    /// (off unless set; its own listener, so it can stay inside a network).
    pub(crate) prometheus_listen: Option<String>,
    /// Record `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` on
    /// spans. Off by default; values under `redact_keys` and strings that
    /// match `redact_patterns` are replaced.
    pub(crate) capture_content: bool,
    pub(crate) redact_keys: Vec<String>,
    pub(crate) redact_patterns: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_headers: BTreeMap::new(),
            sample_ratio: None,
            service_name: None,
            log_format: LogFormat::Text,
            log_level: None,
            metrics_interval_ms: 10_000,
            prometheus_listen: None,
            capture_content: false,
            redact_keys: [
                "password",
                "passwd",
                "secret",
                "token",
                "api_key",
                "apikey",
                "authorization",
                "credential",
                "private_key",
                "card_number",
            ]
            .map(String::from)
            .to_vec(),
            redact_patterns: Vec::new(),
        }
    }
}

/// `[receipts]`: every decision and outcome is a receipt, a leaf of the
/// log; checkpoints sign the log's root, and so every receipt they cover.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiptsConfig {
    /// The log's origin: the first line of every checkpoint and the name of
    /// its signing keys. Keep it unique per log (e.g. `toolgate.example.com/prod`).
    pub origin: String,
    /// Sign a checkpoint once this many receipts are not yet covered by one.
    pub(crate) checkpoint_every: u64,
    /// …and at most this long (ms) after a receipt is appended: the most a
    /// receipt waits to be vouched for by a signed checkpoint.
    /// (`checkpoint_interval_ms` is its former name.)
    #[serde(alias = "checkpoint_interval_ms")]
    pub(crate) checkpoint_ms: u64,
    /// Sign each receipt on its own as well (Ed25519), so it verifies before
    /// a checkpoint covers it. Off by default: one signature per call is
    /// the largest cost of a receipt, and the checkpoint vouches for it
    /// within `checkpoint_ms`.
    pub(crate) sign_each: bool,
    /// Put the full arguments and result values in receipts, not only their
    /// salted hashes. Off by default: receipts leave the host in bundles.
    pub(crate) capture_values: bool,
    /// Where the log is published for whoever holds an answer (this
    /// gateway's `https://HOST/log/`, or a mirror): each answer's receipt
    /// names it. Unset: answers name their receipts without it.
    pub log_url: Option<String>,
    /// Who may read the log served at `/log/` (C2SP tlog-tiles):
    /// `approvers` (a credential with the approver role), `public` (anyone:
    /// receipts hold salted hashes, never values, but they do name callers,
    /// tenants and tools), or `off`.
    pub log_access: LogAccess,
    /// Witnesses each new checkpoint is submitted to (c2sp.org/tlog-witness);
    /// their cosignatures are served with the checkpoint.
    pub witnesses: Vec<WitnessConfig>,
}

/// One witness of the log: where it takes checkpoints and its key.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WitnessConfig {
    /// Its submission prefix (`POST URL/add-checkpoint`).
    pub url: String,
    /// Its cosigner vkey (what `toolgate witness serve` prints).
    pub vkey: String,
}

/// Who may read the log at `/log/`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogAccess {
    /// Credentials with the approver role.
    #[default]
    Approvers,
    /// Anyone who can reach the listener.
    Public,
    /// Not served.
    Off,
}

impl Default for ReceiptsConfig {
    fn default() -> Self {
        Self {
            origin: "toolgate.local/log".into(),
            checkpoint_every: 1000,
            checkpoint_ms: 1000,
            sign_each: false,
            capture_values: false,
            log_url: None,
            log_access: LogAccess::default(),
            witnesses: Vec::new(),
        }
    }
}

/// `[approvals]`: a call that needs a named human is held open while its
/// approval is pending (so a stock client gets the result, not a loop), and
/// approvers are told (`[approvals.notify]`).
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// How long a call waits for its approval to be decided before it is
    /// answered that it still waits (0: answer at once).
    pub hold_ms: u64,
    /// How often a held call's approval is read again when the decision may
    /// come from elsewhere (the CLI, another replica); a decision through
    /// this gateway's admin API wakes the call at once.
    pub poll_ms: u64,
    /// How many calls may be held at once; past it a call is answered at
    /// once that its approval waits (as with `hold_ms = 0`).
    pub max_held: usize,
    /// How many approvals one caller may have pending; past it, a call that
    /// would open another is refused until approvers decide some.
    pub max_pending_per_caller: usize,
    /// Who is told that an approval waits.
    pub notify: NotifyConfig,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            hold_ms: 30_000,
            poll_ms: 500,
            max_held: 1024,
            max_pending_per_caller: 100,
            notify: NotifyConfig::default(),
        }
    }
}

/// `[approvals.notify]`: webhooks told of every approval opened.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// `[[approvals.notify.webhooks]]`, each told of every approval.
    pub webhooks: Vec<WebhookConfig>,
    /// A link an approver can open, with `{id}` for the approval's id (e.g.
    /// the console's page for it); without it, the message names the CLI
    /// command and the admin API.
    pub link: Option<String>,
}

/// One webhook: where, in which body, signed with which secret.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Its name in the delivery records and logs (the URL may hold a secret
    /// and is never logged).
    pub name: String,
    /// Where to POST (`http://` or `https://`, checked as `[tls]` says).
    pub url: String,
    /// `toolgate` (the approval as JSON, HMAC-signed) or `slack` (an
    /// incoming-webhook `{"text": …}` body).
    #[serde(default)]
    pub format: WebhookFormat,
    /// The environment variable holding the HMAC-SHA256 key; the body is
    /// signed in `Toolgate-Signature` so a receiver can check it came from
    /// this gateway. Required for the `toolgate` format.
    pub secret_env: Option<String>,
    /// Attempts before a delivery is given up (backoff doubles from 500 ms,
    /// capped at 30 s).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
}

fn default_attempts() -> u32 {
    8
}

/// The body a webhook gets.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// `{"event": "approval.pending", "approval": {…}, "decide": {…}}`.
    #[default]
    Toolgate,
    /// A Slack-compatible incoming-webhook body: `{"text": "…"}`.
    Slack,
}

/// `[guards]`: checks of every call in the decide stage.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GuardsConfig {
    /// `[guards.egress]`: sensitive markers in what a call would send out.
    pub egress: EgressConfig,
    /// `[guards.trifecta]`: private data + untrusted content + a way out, per run.
    pub trifecta: TrifectaConfig,
}

/// `[guards.trifecta]`: once a run has taken in private data and untrusted
/// content, a call to an egress tool follows `on_exfiltration`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TrifectaConfig {
    /// Off: no run's legs are read or kept.
    pub enabled: bool,
    /// `approval` (default) or `block`.
    pub on_exfiltration: toolgate_core::trifecta::OnExfiltration,
}

impl Default for TrifectaConfig {
    fn default() -> Self {
        Self { enabled: true, on_exfiltration: toolgate_core::trifecta::OnExfiltration::Approval }
    }
}

/// `[runs]`: an agent run is named by `_meta["io.toolgate/run"]`, else the
/// stdio session, else the trace id, else it is the caller's one standing run.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RunsConfig {
    /// A run ends this long after its first call (default one hour); a call
    /// under its id after that begins it anew.
    pub ttl_ms: u64,
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self { ttl_ms: 3_600_000 }
    }
}

/// `[budgets]`: limits that refuse with `retry` and `retry_after_ms`. Zero
/// (the default) is no limit.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// Calls a minute per subject, across every replica sharing the
    /// ledger (each enforces its share of it).
    pub rate_per_minute: u32,
    /// Calls a caller may send at once before the rate applies (default:
    /// a tenth of a minute's rate, at least 1).
    pub rate_burst: Option<u32>,
    /// Calls per run, counted in the ledger (across restarts and replicas).
    pub run_calls: u64,
    /// `[budgets.concurrency]`: at most this many calls at once of a tool,
    /// by exposed name, across the replicas (each takes its share, at least 1).
    pub concurrency: BTreeMap<String, u32>,
}

/// `[guards.egress]`: arguments bound for an egress tool (registry label
/// `egress`, or an effective `openWorldHint: true`) are scanned for
/// sensitive markers; restricted data is refused, confidential data
/// follows `confidential`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Off: nothing is scanned.
    pub enabled: bool,
    /// `allow`, `approval` (default) or `block`.
    pub confidential: toolgate_core::egress::OnConfidential,
    /// `[[guards.egress.patterns]]`: markers of this deployment's own.
    pub patterns: Vec<PatternConfig>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            confidential: toolgate_core::egress::OnConfidential::Approval,
            patterns: Vec::new(),
        }
    }
}

/// One configured egress marker.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatternConfig {
    /// Its name, as findings report it (`egress.NAME@PATH`).
    pub name: String,
    /// A regular expression (the `regex` crate's syntax: linear time).
    pub regex: String,
    /// `internal`, `confidential` or `restricted`.
    pub class: toolgate_core::egress::EgressClass,
}

/// The role that may decide approvals (CLI `--as`, the admin API, the console).
pub const APPROVER_ROLE: &str = "approver";

/// The role that may accept changed contracts in the console (beside
/// `toolgate tools --accept`, which needs the config file itself).
pub const ADMIN_ROLE: &str = "admin";

/// `[console]`: the web console, served at `/console` on the gateway's own
/// listener to callers with the `approver` or `admin` role.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve the console at all.
    pub enabled: bool,
    /// How long a console session lives after sign-in, in seconds.
    pub session_ttl_s: u64,
    /// Mark the session cookie `Secure`. Unset: `Secure` unless the console
    /// listens on a loopback address (set it to `true` behind a TLS proxy).
    pub secure_cookies: Option<bool>,
    /// Serve the console on this address of its own instead of beside
    /// `/mcp` (e.g. an address agents cannot reach).
    pub listen: Option<SocketAddr>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self { enabled: true, session_ttl_s: 1800, secure_cookies: None, listen: None }
    }
}

/// `[policy]`: the Cedar files argument-level rules are read from.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Cedar policies, relative to the config file.
    pub policies: PathBuf,
    /// Cedar schema (human-readable `.cedarschema` syntax).
    pub schema: PathBuf,
}

/// A server's `url` must hold no credential (it is shown: logs, `config
/// show`, the console), and its query parameters are given once.
fn url_problems(name: &str, server: &ServerConfig) -> Vec<String> {
    let mut out = Vec::new();
    let Some(url) = &server.url else { return out };
    if let Some(found) = crate::url_credentials::named(url) {
        out.push(format!(
            "servers.{name}: url holds a credential ({found}); move it to an owner-only file: a user and password as \
             `headers_file = {{ Authorization = \"FILE\" }}` holding `Basic BASE64(user:password)`, a query parameter as \
             `query_file = {{ NAME = \"FILE\" }}` (or `query_env`), and remove it from url (`toolgate import` does this for you)"
        ));
    }
    let in_url: Vec<String> = reqwest::Url::parse(url)
        .map(|u| u.query_pairs().map(|(k, _)| k.into_owned()).collect())
        .unwrap_or_default();
    let mut named: Vec<&String> =
        server.query_env.keys().chain(server.query_file.keys()).chain(in_url.iter()).collect();
    named.sort();
    if let Some(twice) = named.windows(2).find(|w| w[0] == w[1]) {
        out.push(format!("servers.{name}: query parameter `{}` is given twice (in url, query_env or query_file); give it once", twice[0]));
    }
    out
}

impl Config {
    /// Its version (see the field): what receipts name as `config_version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The config as its files say now: the file it came from read again,
    /// and the `mcpServers` files it imported (what a reload applies).
    pub fn reread(&self) -> Result<Self, ConfigError> {
        let mut fresh = Self::load(&self.path)?;
        for file in &self.imported {
            fresh.import_mcp_json(file)?;
        }
        Ok(fresh)
    }

    /// What of `fresh` (this config's files, read again) a running gateway
    /// puts in force: its servers, registry and policy, under the tables
    /// of this one that cannot change while it runs. With it, the tables
    /// whose change waits for a restart (by name, never by value). An error
    /// when the two do not make a valid config together.
    pub fn reloaded(&self, fresh: Config) -> Result<(Config, Vec<String>), String> {
        let names: std::collections::BTreeSet<&String> =
            self.fixed.keys().chain(fresh.fixed.keys()).collect();
        let waiting = names
            .into_iter()
            .filter(|k| self.fixed.get(*k) != fresh.fixed.get(*k))
            .map(|k| format!("[{k}]"))
            .collect();
        let mut merged = Config {
            servers: fresh.servers,
            registry: fresh.registry,
            registry_prompts: fresh.registry_prompts,
            registry_resources: fresh.registry_resources,
            policy: fresh.policy,
            imported: fresh.imported,
            version: fresh.version,
            ..self.clone()
        };
        merged.validate()?;
        // Boxes' homes are in the state dir in force, not a changed one's.
        merged.resolve_sandboxes()?;
        Ok((merged, waiting))
    }

    /// Reads, parses and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text` as the config file at `path` (relative
    /// paths resolve against its folder).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::parse_all(text, path).map_err(|mut all| all.remove(0))
    }

    /// `parse`, with every problem of the config's values when there are
    /// any (never an empty list), for `toolgate config check`.
    pub fn parse_all(text: &str, path: &Path) -> Result<Self, Vec<ConfigError>> {
        let invalid = |message: String| ConfigError::Invalid { path: path.into(), message };
        let mut config: Config = toml::from_str(text).map_err(|e| vec![invalid(e.to_string())])?;
        config.path = path.to_path_buf();
        config.version = toolgate_core::proposal::sha256_hex(text.as_bytes());
        if let Ok(table) = toml::from_str::<toml::Table>(text) {
            config.fixed =
                table.into_iter().filter(|(k, _)| !RELOADABLE.contains(&k.as_str())).collect();
        }
        let problems = config.problems();
        if !problems.is_empty() {
            return Err(problems.into_iter().map(invalid).collect());
        }
        let invalid = |message: String| vec![invalid(message)];
        // Header files resolve against the config's folder, as every path does.
        let dir = config.dir();
        for server in config.servers.values_mut() {
            for file in server
                .headers_file
                .values_mut()
                .chain(server.env_file.values_mut())
                .chain(server.query_file.values_mut())
            {
                *file = dir.join(&*file);
            }
        }
        config.resolve_sandboxes().map_err(invalid)?;
        for file in [&mut config.tls.cert_file, &mut config.tls.key_file].into_iter().flatten() {
            *file = dir.join(&*file);
        }
        if let Some(file) = &config.tls.ca_file {
            let file = dir.join(file);
            let pem = std::fs::read(&file).map_err(|e| {
                invalid(format!("tls.ca_file {}: cannot read it: {e}", file.display()))
            })?;
            match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(certs) if !certs.is_empty() => config.tls.ca = Some(std::sync::Arc::new(pem)),
                Ok(_) => {
                    return Err(invalid(format!(
                        "tls.ca_file {}: no certificate in it (a PEM bundle of -----BEGIN CERTIFICATE----- blocks)",
                        file.display()
                    )));
                }
                Err(e) => {
                    return Err(invalid(format!(
                        "tls.ca_file {}: not a PEM bundle of certificates: {e}",
                        file.display()
                    )));
                }
            }
        }
        Ok(config)
    }

    /// Adds the servers of an `mcpServers` JSON file, untrusted. A name the
    /// config already has is an error, not a silent override.
    pub fn import_mcp_json(&mut self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: path.into(), message };
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        #[derive(Deserialize)]
        struct File {
            #[serde(rename = "mcpServers")]
            mcp_servers: BTreeMap<String, ImportedServer>,
        }
        #[derive(Deserialize)]
        struct ImportedServer {
            command: Option<String>,
            #[serde(default)]
            args: Vec<String>,
            #[serde(default)]
            env: BTreeMap<String, String>,
            url: Option<String>,
            #[serde(default)]
            headers: BTreeMap<String, String>,
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        let file: File = serde_json::from_str(&text)
            .map_err(|e| invalid(format!("not an mcpServers file: {e}")))?;
        self.imported.push(path.to_path_buf());
        self.version = toolgate_core::proposal::sha256_hex(
            &[self.version.as_bytes(), text.as_bytes()].concat(),
        );
        for (name, s) in file.mcp_servers {
            if self.servers.contains_key(&name) {
                return Err(invalid(format!(
                    "server `{name}` is already configured; rename one of them"
                )));
            }
            let server = ServerConfig {
                command: s.command,
                args: s.args,
                env: s.env,
                url: s.url,
                headers: s.headers,
                trusted: false,
                kind: s.kind,
                namespace: true,
                ..ServerConfig::default()
            };
            self.servers.insert(name, server);
        }
        self.validate().map_err(invalid)?;
        self.resolve_sandboxes().map_err(invalid)
    }

    /// Each stdio server's box, resolved against the config's folder and
    /// the state directory.
    fn resolve_sandboxes(&mut self) -> Result<(), String> {
        let (dir, state) = (self.dir(), self.state_dir());
        for (name, server) in &mut self.servers {
            if server.command.is_some() {
                server.boxed = Some(crate::sandbox_config::resolve(
                    name,
                    server.sandbox.as_ref(),
                    &dir,
                    &state,
                )?);
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), String> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem of the config's values, in the order a reader meets
    /// them (`toolgate config check` shows them all; a start refuses on the
    /// first).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, caller) in &self.callers {
            let sources =
                [caller.token_env.is_some(), caller.token_file.is_some(), caller.anonymous]
                    .into_iter()
                    .filter(|x| *x)
                    .count();
            if sources != 1 {
                out.push(format!("callers.{name}: give exactly one of `token_env`, `token_file` or `anonymous = true`"));
            }
            if caller.tenant.trim().is_empty() {
                out.push(format!("callers.{name}: `tenant` must not be empty"));
            }
            if caller.anonymous && caller.roles.iter().any(|r| r == APPROVER_ROLE) {
                out.push(format!(
                    "callers.{name}: an anonymous caller cannot have the `{APPROVER_ROLE}` role"
                ));
            }
        }
        if self.callers.values().filter(|c| c.anonymous).count() > 1 {
            out.push("at most one caller may be `anonymous = true`".into());
        }
        if let Some(name) = &self.gateway.stdio_caller
            && !self.callers.contains_key(name)
        {
            out.push(format!("gateway.stdio_caller `{name}` is not a `[callers.{name}]` entry"));
        }
        if let Some(r) = self.telemetry.sample_ratio.filter(|r| !(0.0..=1.0).contains(r)) {
            out.push(format!("telemetry.sample_ratio {r} must be between 0 and 1"));
        }
        for p in &self.telemetry.redact_patterns {
            if let Err(e) = regex::Regex::new(p) {
                out.push(format!(
                    "telemetry.redact_patterns: `{p}` is not a regular expression: {e}"
                ));
            }
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            out.push("tls: give both `cert_file` and `key_file` (the listeners serve https with them), or neither".into());
        }
        if let Some(url) = self
            .telemetry
            .otlp_endpoint
            .as_deref()
            .filter(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            out.push(format!(
                "telemetry.otlp_endpoint `{url}` must start with http:// or https://"
            ));
        }
        if self.gateway.list_page_size == 0 {
            out.push("gateway.list_page_size must be at least 1".into());
        }
        let sep = &self.gateway.separator;
        let sep_ok = !sep.is_empty()
            && sep.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !sep_ok {
            out.push(format!("gateway.separator `{sep}` must be non-empty letters, digits, `_` or `-` (LLM function names allow nothing else)"));
        }
        for (name, server) in &self.servers {
            let valid_name = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                out.push(format!("server name `{name}` must be letters, digits, `_` or `-`"));
            }
            // Neither inside nor at the end: `a_` + `__` + `x` would read as `a` + `__` + `_x`.
            // (Only of a valid separator: ASCII, so its prefixes are whole characters.)
            let ends_in_part = sep_ok && (1..sep.len()).any(|k| name.ends_with(&sep[..k]));
            if sep_ok && (name.contains(sep.as_str()) || ends_in_part) {
                out.push(format!("server name `{name}` contains or ends with part of the separator `{sep}`; exposed names would be ambiguous"));
            }
            match (&server.command, &server.url) {
                (Some(_), Some(_)) => {
                    out.push(format!("servers.{name}: give `command` or `url`, not both"))
                }
                (None, None) => out.push(format!(
                    "servers.{name}: needs `command` (stdio) or `url` (Streamable HTTP)"
                )),
                (None, Some(url))
                    if !(url.starts_with("http://") || url.starts_with("https://")) =>
                {
                    out.push(format!("servers.{name}: url must start with http:// or https://"));
                }
                _ => {}
            }
            let header_sources = server.headers.len()
                + server.headers_env.len()
                + server.headers_file.len()
                + server.query_env.len()
                + server.query_file.len();
            if server.command.is_some() && header_sources > 0 {
                out.push(format!("servers.{name}: headers and query parameters are sent to a `url` server; a stdio server's credentials go in `env`, `env_env` or `env_file`"));
            }
            out.extend(url_problems(name, server));
            out.extend(crate::sandbox_config::problems(
                name,
                server.sandbox.as_ref(),
                server.command.is_some(),
            ));
            let mut named: Vec<String> = server
                .headers
                .keys()
                .chain(server.headers_env.keys())
                .chain(server.headers_file.keys())
                .map(|h| h.to_ascii_lowercase())
                .collect();
            out.extend(crate::identity_config::problems(
                name,
                &server.identity,
                server.url.as_deref(),
                &named.iter().map(String::as_str).collect::<Vec<_>>(),
            ));
            named.sort();
            if let Some(twice) = named.windows(2).find(|w| w[0] == w[1]) {
                out.push(format!("servers.{name}: header `{}` is given twice (in headers, headers_env or headers_file); give it once", twice[0]));
            }
            if server.url.is_some()
                && !(server.env.is_empty()
                    && server.env_env.is_empty()
                    && server.env_file.is_empty())
            {
                out.push(format!("servers.{name}: env, env_env and env_file are for a stdio server (`command`); a `url` server's credentials go in headers"));
            }
            let mut variables: Vec<&String> = server
                .env
                .keys()
                .chain(server.env_env.keys())
                .chain(server.env_file.keys())
                .collect();
            variables.sort();
            if let Some(twice) = variables.windows(2).find(|w| w[0] == w[1]) {
                out.push(format!("servers.{name}: variable `{}` is given twice (in env, env_env or env_file); give it once", twice[0]));
            }
        }
        for p in &self.guards.egress.patterns {
            if let Err(e) = regex::Regex::new(&p.regex) {
                out.push(format!(
                    "guards.egress.patterns `{}`: not a regular expression: {e}",
                    p.name
                ));
            }
            if p.class == toolgate_core::egress::EgressClass::NoMarkersFound
                || p.name.trim().is_empty()
            {
                out.push(format!("guards.egress.patterns `{}`: give a name and a class of internal, confidential or restricted", p.name));
            }
        }
        if self.runs.ttl_ms == 0 {
            out.push("runs.ttl_ms must be at least 1".into());
        }
        if self.budgets.rate_burst == Some(0) {
            out.push("budgets.rate_burst must be at least 1 (or leave it out)".into());
        }
        for (name, limit) in &self.budgets.concurrency {
            if *limit == 0 {
                out.push(format!("budgets.concurrency `{name}`: the limit must be at least 1 (leave the tool out for no limit)"));
            }
            if self.split_exposed(name).is_none() {
                out.push(format!("budgets.concurrency `{name}`: not an exposed name (SERVER{}TOOL of a configured server)", self.gateway.separator));
            }
        }
        if self.approvals.poll_ms == 0 {
            out.push("approvals.poll_ms must be at least 1".into());
        }
        if self.approvals.hold_ms > self.gateway.approval_ttl_ms {
            out.push(format!(
                "approvals.hold_ms ({}) is longer than gateway.approval_ttl_ms ({}): a call would be held past its approval's life",
                self.approvals.hold_ms, self.gateway.approval_ttl_ms
            ));
        }
        let mut hooks = std::collections::BTreeSet::new();
        for hook in &self.approvals.notify.webhooks {
            let name = &hook.name;
            if !hooks.insert(name) {
                out.push(format!("approvals.notify.webhooks: the name `{name}` is used twice"));
            }
            if !(hook.url.starts_with("http://") || hook.url.starts_with("https://")) {
                out.push(format!(
                    "approvals.notify.webhooks `{name}`: url must start with http:// or https://"
                ));
            }
            if hook.format == WebhookFormat::Toolgate && hook.secret_env.is_none() {
                out.push(format!("approvals.notify.webhooks `{name}`: the toolgate format is signed; set `secret_env` to the variable holding the key"));
            }
            if hook.attempts == 0 {
                out.push(format!(
                    "approvals.notify.webhooks `{name}`: attempts must be at least 1"
                ));
            }
        }
        if self.servers.values().any(|s| !s.namespace) && self.servers.len() > 1 {
            out.push("`namespace = false` is only allowed when the gateway fronts exactly one server (names could collide)".into());
        }
        for name in self.registry.keys() {
            if self.split_exposed(name).is_none() {
                out.push(format!(
                    "registry entry `{name}` names no configured server; registry keys are exposed names `SERVER{sep}TOOL`"
                ));
            }
        }
        if let Some(o) = &self.oauth {
            if o.tenant.is_some() == o.tenant_claim.is_some() {
                out.push("oauth: set exactly one of `tenant` (every token's tenant) and `tenant_claim` (the claim that names it)".into());
            }
            for (key, url) in [
                ("issuer", Some(&o.issuer)),
                ("resource", Some(&o.resource)),
                ("jwks_uri", o.jwks_uri.as_ref()),
            ] {
                if let Some(url) =
                    url.filter(|u| !(u.starts_with("https://") || u.starts_with("http://")))
                {
                    out.push(format!("oauth.{key} `{url}` must be an http(s) URL"));
                }
            }
            if o.resource.contains('#') {
                out.push("oauth.resource must not have a fragment (RFC 8707)".into());
            }
        }
        let reads_only = |what: String, class: AuthorityClass| match class {
            AuthorityClass::RequiresApproval => Err(format!(
                "{what}: class `requires_approval` is for tools; a prompt or resource read is `automatic` or `prohibited`"
            )),
            _ => Ok(()),
        };
        for (name, entry) in &self.registry_prompts {
            if self.split_exposed(name).is_none() {
                out.push(format!("registry_prompts entry `{name}` names no configured server; keys are exposed names `SERVER{sep}PROMPT`"));
            }
            out.extend(reads_only(format!("registry_prompts entry `{name}`"), entry.class).err());
        }
        for (i, entry) in self.registry_resources.iter().enumerate() {
            if !self.servers.contains_key(&entry.server) {
                out.push(format!(
                    "registry_resources entry {} names server `{}`, which is not configured",
                    i + 1,
                    entry.server
                ));
            }
            out.extend(
                reads_only(
                    format!("registry_resources entry {} (`{}`)", i + 1, entry.uri),
                    entry.class,
                )
                .err(),
            );
        }
        out
    }

    /// A resource URI (or template) as agents see it: `toolgate://SERVER/URI`,
    /// or the upstream's own for a server with `namespace = false`. The
    /// server's URI follows the prefix verbatim, so a template stays a
    /// template and a read routes back by the prefix alone.
    pub(crate) fn exposed_uri(&self, server: &str, uri: &str) -> String {
        match self.servers.get(server) {
            Some(s) if !s.namespace => uri.to_string(),
            _ => format!("{URI_SCHEME}{server}/{uri}"),
        }
    }

    /// The configured server and its own URI an exposed URI refers to.
    pub fn split_uri<'a>(&'a self, exposed: &'a str) -> Option<(&'a str, &'a str)> {
        if let Some((name, _)) = self.servers.iter().find(|(_, s)| !s.namespace) {
            return Some((name.as_str(), exposed));
        }
        exposed
            .strip_prefix(URI_SCHEME)?
            .split_once('/')
            .filter(|(s, _)| self.servers.contains_key(*s))
    }

    /// `SERVER{sep}TOOL`, or `TOOL` for a server with `namespace = false`.
    pub(crate) fn exposed_name(&self, server: &str, tool: &str) -> String {
        match self.servers.get(server) {
            Some(s) if !s.namespace => tool.to_string(),
            _ => format!("{server}{}{tool}", self.gateway.separator),
        }
    }

    /// The configured server and tool an exposed name refers to: split at the
    /// first separator (server names never contain it), or the one
    /// unprefixed server.
    pub fn split_exposed<'a>(&'a self, exposed: &'a str) -> Option<(&'a str, &'a str)> {
        if let Some((name, _)) = self.servers.iter().find(|(_, s)| !s.namespace) {
            return Some((name.as_str(), exposed));
        }
        exposed
            .split_once(self.gateway.separator.as_str())
            .filter(|(s, _)| self.servers.contains_key(*s))
    }

    fn dir(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    /// The state dir (`gateway.state_dir`), relative to the config file's folder.
    pub fn state_dir(&self) -> PathBuf {
        self.dir().join(&self.gateway.state_dir)
    }

    /// A path from the config, relative to the config file's folder.
    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        self.dir().join(path)
    }

    /// The ledger: `gateway.ledger`, or the embedded SQLite file.
    pub fn ledger_location(&self) -> String {
        match &self.gateway.ledger {
            Some(url) => url.clone(),
            None => self.state_dir().join("ledger.sqlite3").to_string_lossy().into_owned(),
        }
    }

    /// The ledger's location fit for logs and errors: a URL's password (in
    /// its user info or a `password=` parameter) is masked.
    pub fn ledger_display(&self) -> String {
        let location = self.ledger_location();
        let Some(scheme) = location.find("://") else { return location };
        let (head, query) =
            location.split_once('?').map_or((location.as_str(), None), |(h, q)| (h, Some(q)));
        let mut out = match head.rfind('@') {
            Some(at) if at > scheme => {
                let userinfo = &head[scheme + 3..at];
                let user = userinfo.split(':').next().unwrap_or_default();
                format!(
                    "{}{user}{}@{}",
                    &head[..scheme + 3],
                    if userinfo.contains(':') { ":***" } else { "" },
                    &head[at + 1..]
                )
            }
            _ => head.to_string(),
        };
        if let Some(query) = query {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            out = format!("{out}?{}", params.join("&"));
        }
        out
    }

    /// The gateway's address as people's browsers reach it (`[identity]
    /// public_url`, else the console's listen address), without a trailing `/`.
    pub fn public_url(&self) -> String {
        match &self.identity.public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => {
                let scheme = if self.tls.cert_file.is_some() { "https" } else { "http" };
                format!("{scheme}://{}", self.console.listen.unwrap_or(self.gateway.listen))
            }
        }
    }

    /// The `iss` of the gateway's identity assertions.
    pub fn issuer(&self) -> &str {
        self.identity.issuer.as_deref().unwrap_or(&self.receipts.origin)
    }

    /// The deadline of one call to `server`.
    pub(crate) fn timeout_ms(&self, server: &str) -> u64 {
        self.servers
            .get(server)
            .and_then(|s| s.timeout_ms)
            .unwrap_or(self.gateway.upstream_timeout_ms)
    }

    /// The pin lock file: `gateway.lock_file`, else beside the config
    /// (`toolgate.toml` → `toolgate.lock`).
    pub fn lock_path(&self) -> PathBuf {
        if let Some(file) = &self.gateway.lock_file {
            return self.dir().join(file);
        }
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "toolgate".into());
        self.dir().join(format!("{stem}.lock"))
    }
}

#[cfg(test)]
mod tests {

    /// A reload takes the servers, registry and policy of the file read
    /// again, keeps every other table of the running config, and names
    /// those that changed (never their values).
    #[test]
    fn a_reload_takes_what_can_change_and_names_what_waits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolgate.toml");
        let text = "[gateway]\nlisten = \"127.0.0.1:9000\"\n[servers.a]\nurl = \"http://127.0.0.1:1/mcp\"\n[callers.agent]\ntenant = \"t\"\nanonymous = true\n";
        let running = Config::parse(text, &path).unwrap();
        assert_eq!(running.version(), toolgate_core::proposal::sha256_hex(text.as_bytes()));
        let edited = text.replace("9000", "9001").replace("[servers.a]", "[servers.b]")
            + "[registry.\"b__x\"]\nclass = \"automatic\"\n";
        let (merged, waiting) = running.reloaded(Config::parse(&edited, &path).unwrap()).unwrap();
        assert_eq!(waiting, ["[gateway]"]);
        assert_eq!(merged.gateway.listen.port(), 9000, "the listener waits for a restart");
        assert_eq!(merged.servers.keys().collect::<Vec<_>>(), ["b"]);
        assert!(merged.registry.contains_key("b__x"));
        assert_eq!(merged.version(), toolgate_core::proposal::sha256_hex(edited.as_bytes()));
        // Unchanged, nothing waits.
        let (_, waiting) = running.reloaded(Config::parse(text, &path).unwrap()).unwrap();
        assert!(waiting.is_empty(), "{waiting:?}");
    }
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/toolgate/toolgate.toml"))
    }

    #[test]
    fn prompts_and_resources_are_classed_by_name_and_by_uri_pattern() {
        let c = parse("[servers.parts]\ncommand = \"x\"\n[registry_prompts.\"parts__diagnose\"]\nclass = \"automatic\"\n[[registry_resources]]\nserver = \"parts\"\nuri = \"manual://*/secret*\"\nclass = \"prohibited\"\n").unwrap();
        assert_eq!(c.registry_prompts["parts__diagnose"].class, AuthorityClass::Automatic);
        let entry = &c.registry_resources[0];
        assert!(
            entry.names("parts", "manual://ac250/secret")
                && entry.names("parts", "manual://x/y/secret-2")
        );
        assert!(
            !entry.names("parts", "manual://ac250/public")
                && !entry.names("other", "manual://a/secret")
                && !entry.names("parts", "xmanual://a/secret")
        );
        assert!(
            super::glob("*", "")
                && super::glob("a*", "a")
                && !super::glob("a*b", "ab-")
                && super::glob("a*b*b", "abb")
        );
        // Exposed URIs name their server, and route back by it.
        assert_eq!(
            c.exposed_uri("parts", "manual://ac250/{section}"),
            "toolgate://parts/manual://ac250/{section}"
        );
        assert_eq!(
            c.split_uri("toolgate://parts/manual://ac250/intro"),
            Some(("parts", "manual://ac250/intro"))
        );
        assert_eq!(c.split_uri("toolgate://nobody/x"), None);
        assert_eq!(c.split_uri("manual://ac250/intro"), None);
        // A read cannot wait for a human; the servers must exist.
        let err = |t: &str| parse(t).unwrap_err().to_string();
        assert!(err("[servers.parts]\ncommand = \"x\"\n[registry_prompts.\"parts__p\"]\nclass = \"requires_approval\"").contains("`automatic` or `prohibited`"));
        assert!(err("[servers.parts]\ncommand = \"x\"\n[[registry_resources]]\nserver = \"tickets\"\nuri = \"*\"\nclass = \"automatic\"").contains("`tickets`, which is not configured"));
        assert!(err("[servers.parts]\ncommand = \"x\"\n[registry_prompts.\"other__p\"]\nclass = \"automatic\"").contains("names no configured server"));
    }

    #[test]
    fn a_ledger_password_never_reaches_a_message() {
        let shown = |url: &str| {
            parse(&format!("[gateway]\nledger = \"{url}\"\n")).unwrap().ledger_display()
        };
        assert_eq!(
            shown("postgres://tg:s3cret@db:5432/toolgate"),
            "postgres://tg:***@db:5432/toolgate"
        );
        assert_eq!(
            shown("postgres:///toolgate?host=/run/postgresql&password=s3cret&sslmode=disable"),
            "postgres:///toolgate?host=/run/postgresql&password=***&sslmode=disable"
        );
        assert_eq!(shown("postgres://tg@db/toolgate"), "postgres://tg@db/toolgate");
        assert!(parse("").unwrap().ledger_display().ends_with("state/ledger.sqlite3"));
    }

    #[test]
    fn upstream_credentials_come_from_one_place_each_and_only_for_url_servers() {
        let c = parse("[servers.parts]\nurl = \"http://127.0.0.1:8701/mcp\"\nheaders_env = { Authorization = \"PARTS_TOKEN\" }\nheaders_file = { X-Api-Key = \"keys/parts.key\" }\n").unwrap();
        let Transport::Http { headers, .. } = c.servers["parts"].transport() else {
            panic!("an HTTP upstream")
        };
        assert_eq!(headers["Authorization"], ValueSource::Env("PARTS_TOKEN".into()));
        // A file resolves against the config's folder.
        assert!(
            matches!(&headers["X-Api-Key"], ValueSource::File(p) if p.is_absolute() && p.ends_with("keys/parts.key")),
            "{headers:?}"
        );
        let twice = parse(
            "[servers.parts]\nurl = \"http://127.0.0.1:8701/mcp\"\nheaders = { authorization = \"Bearer x\" }\nheaders_env = { Authorization = \"PARTS_TOKEN\" }\n",
        );
        assert!(twice.unwrap_err().to_string().contains("header `authorization` is given twice"));
        let env = parse("[servers.tickets]\ncommand = \"toolgate-atlas\"\nenv = { LEVEL = \"1\" }\nenv_env = { TOKEN = \"TICKETS_TOKEN\" }\nenv_file = { KEY = \"keys/tickets.key\" }\n").unwrap();
        let Transport::Stdio { env: variables, .. } = env.servers["tickets"].transport() else {
            panic!("stdio")
        };
        assert_eq!(
            (&variables["LEVEL"], &variables["TOKEN"]),
            (&ValueSource::Value("1".into()), &ValueSource::Env("TICKETS_TOKEN".into()))
        );
        assert!(
            matches!(&variables["KEY"], ValueSource::File(p) if p.is_absolute() && p.ends_with("keys/tickets.key")),
            "{variables:?}"
        );
        let twice = parse(
            "[servers.tickets]\ncommand = \"x\"\nenv = { TOKEN = \"a\" }\nenv_env = { TOKEN = \"B\" }\n",
        );
        assert!(twice.unwrap_err().to_string().contains("variable `TOKEN` is given twice"));
        let remote = parse(
            "[servers.parts]\nurl = \"http://127.0.0.1:1/mcp\"\nenv_env = { TOKEN = \"B\" }\n",
        );
        assert!(remote.unwrap_err().to_string().contains("for a stdio server"));
        let stdio = parse(
            "[servers.tickets]\ncommand = \"toolgate-atlas\"\nheaders_env = { Authorization = \"T\" }\n",
        );
        assert!(
            stdio
                .unwrap_err()
                .to_string()
                .contains("a stdio server's credentials go in `env`, `env_env` or `env_file`")
        );
    }

    #[test]
    fn a_full_config_parses() {
        let c = parse(
            r#"
            [gateway]
            listen = "127.0.0.1:9000"
            [servers.tickets]
            command = "toolgate-atlas"
            args = ["tickets"]
            trusted = true
            [servers.parts]
            url = "http://127.0.0.1:8701/mcp"
            headers = { Authorization = "Bearer x" }
            [registry."tickets__get_ticket"]
            class = "automatic"
            labels = ["private_data"]
            "#,
        )
        .unwrap();
        assert_eq!(c.gateway.listen.port(), 9000);
        assert!(matches!(c.servers["tickets"].transport(), Transport::Stdio { .. }));
        assert!(!c.servers["parts"].trusted, "untrusted by default");
        assert_eq!(c.registry["tickets__get_ticket"].class, AuthorityClass::Automatic);
        assert_eq!(c.lock_path(), Path::new("/etc/toolgate/toolgate.lock"));
        assert_eq!(c.split_exposed("tickets__get__x"), Some(("tickets", "get__x")));
        assert_eq!(c.split_exposed("nobody__x"), None);
        let single = parse("[servers.fixture]\nurl = \"http://h/mcp\"\nnamespace = false\n[registry.\"test_simple_text\"]\nclass = \"automatic\"").unwrap();
        assert_eq!(single.exposed_name("fixture", "test_simple_text"), "test_simple_text");
        assert_eq!(single.split_exposed("test_simple_text"), Some(("fixture", "test_simple_text")));
        let kept = parse("[gateway]\nlock_file = \"/var/lib/toolgate/toolgate.lock\"").unwrap();
        assert_eq!(kept.lock_path(), Path::new("/var/lib/toolgate/toolgate.lock"));
    }

    #[test]
    fn mistakes_are_named() {
        let err = |t: &str| parse(t).unwrap_err().to_string();
        assert!(err("[servers.a]\nargs = []").contains("needs `command`"));
        assert!(err("[servers.a]\ncommand = \"x\"\nurl = \"http://h\"").contains("not both"));
        assert!(err("[servers.a__b]\ncommand = \"x\"").contains("separator"));
        assert!(err("[servers.a_]\ncommand = \"x\"").contains("separator"));
        assert!(err("[servers.a]\nurl = \"ftp://h/mcp\"").contains("http:// or https://"));
        assert!(
            parse("[servers.a]\nurl = \"https://h/mcp\"").is_ok(),
            "https upstreams are checked against the system's roots and [tls] ca_file"
        );
        assert!(
            err("[tls]\nca_file = \"/nonexistent/ca.pem\"")
                .contains("tls.ca_file /nonexistent/ca.pem: cannot read it")
        );
        assert!(err("[tls]\ncert_file = \"cert.pem\"").contains("both `cert_file` and `key_file`"));
        assert!(
            err("[servers.a]\ncommand = \"x\"\n[registry.\"b__t\"]\nclass = \"automatic\"")
                .contains("names no configured server")
        );
        assert!(
            err("[servers.a]\ncommand = \"x\"\n[registry.\"a__t\"]\nclass = \"sometimes\"")
                .contains("sometimes")
        );
        assert!(err("[gateway]\nlisten_addr = \"x\"").contains("listen_addr"));
        assert!(err("[gateway]\nseparator = \".\"").contains("separator"));
        assert!(
            err("[servers.a]\ncommand = \"x\"\nnamespace = false\n[servers.b]\ncommand = \"y\"")
                .contains("exactly one server")
        );
    }

    #[test]
    fn mcp_json_servers_import_untrusted_and_never_override() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        std::fs::write(&file, r#"{"mcpServers": {"notes": {"command": "notes-mcp", "args": ["--x"]}, "web": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}}"#).unwrap();
        let mut c = parse("[servers.tickets]\ncommand = \"t\"\ntrusted = true").unwrap();
        c.import_mcp_json(&file).unwrap();
        assert_eq!(c.servers.len(), 3);
        assert!(!c.servers["notes"].trusted && !c.servers["web"].trusted);
        std::fs::write(&file, r#"{"mcpServers": {"tickets": {"command": "evil"}}}"#).unwrap();
        assert!(c.import_mcp_json(&file).unwrap_err().to_string().contains("already configured"));
    }
}
