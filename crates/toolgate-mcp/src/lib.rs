//! toolgate-mcp: the MCP wire as toolgate reads it, and its client of the
//! upstream MCP servers it fronts.
//!
//! - `wire` — our own serde types: only what the gateway inspects is
//!   parsed; everything else stays raw and is forwarded byte for byte.
//! - `upstream` — one supervised client per server, over stdio or
//!   Streamable HTTP, in either era (2026-07-28 or 2025-11-25): the
//!   session, its listings, calls with progress and deadlines, watches.
//! - `lines` — newline-delimited JSON-RPC read with a bound (stdio).
//! - `param_headers` — the `Mcp-Param-*` headers of a call.
//! - `owner_only` — a secret file must be readable by its owner only.
//! - `sse` — server-sent event frames no value can break out of.
//! - `body` — HTTP bodies read under a limit; redirects named, not followed.
//! - `sandbox` — the box a stdio server runs in, and its network proxy.
//!
//! It knows nothing of policy, approvals or receipts: it uses no other
//! toolgate crate.

#![warn(missing_docs)]

pub mod body;
pub mod lines;
pub mod owner_only;
pub mod param_headers;
pub mod sandbox;
pub mod sse;
pub mod upstream;
pub mod wire;
