//! `[gateway]`: how the gateway serves agents — its endpoint, the limits
//! every request is admitted under, where it keeps its state — and its
//! timings (`gateway::Gateway`, built once from it).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toolgate_mcp::upstream::{DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TOOLS};

const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
const DEFAULT_SEPARATOR: &str = "__";

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

impl GatewaySettings {
    /// Whether `separator` is one exposed names can be split at: non-empty
    /// letters, digits, `_` or `-` (ASCII, so its prefixes are whole
    /// characters).
    pub(crate) fn separator_ok(&self) -> bool {
        let sep = &self.separator;
        !sep.is_empty() && sep.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    /// What is wrong with `[gateway]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.list_page_size == 0 {
            out.push("gateway.list_page_size must be at least 1".into());
        }
        if !self.separator_ok() {
            let sep = &self.separator;
            out.push(format!("gateway.separator `{sep}` must be non-empty letters, digits, `_` or `-` (LLM function names allow nothing else)"));
        }
        out
    }
}
