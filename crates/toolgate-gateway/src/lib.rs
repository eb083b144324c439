//! toolgate-gateway: the running gateway.
//!
//! - The path of one call: `pipeline` reads as the ten stages in order,
//!   each a module of `stages` that takes what it needs and returns its
//!   conclusion as a value (`call`); the receipts that commit with the
//!   ledger's state go through `commit`.
//! - What a call runs against: `config`, `callers`, `oauth`, `identity`
//!   (as whom a call reaches its server),
//!   `catalog` and `pins`, `gateway` (everything shared, built once),
//!   `holds`, `notify`, `runs`, `budgets`, `seal` (the sealed
//!   `requestState`), `keys` and `log` (the receipt log's signing keys and
//!   checkpoints), `sources` (the one clock and the entropy).
//! - The edges: `downstream` (Streamable HTTP with its rules as axum
//!   extractors, stdio, the admin API, the probes); the MCP wire and the
//!   upstream client come from `toolgate-mcp` and are re-exported here.
//! - For operators and third parties: `evidence` (bundles), `reconcile`,
//!   `replay`, `telemetry` and `prometheus`; `archive` and `retention`
//!   keep the ledger bounded.
//!
//! It does not know the web console (`toolgate-console`), which uses its
//! public API and is served beside `/mcp` by `downstream::http::serve_with`.

#![warn(missing_docs)]

pub mod archive;
pub mod boxes;
pub mod budgets;
pub mod call;
pub mod callers;
pub mod cancels;
pub mod catalog;
pub(crate) mod commit;
pub mod config;
pub mod downstream;
pub mod evidence;
pub mod fleet;
pub mod gateway;
pub mod holds;
pub mod identity;
mod identity_config;
pub mod keys;
pub mod listed;
pub mod log;
pub mod notify;
pub mod oauth;
pub(crate) mod observe;
pub mod personal;
pub mod pins;
pub mod pipeline;
pub mod prometheus;
pub mod prove;
pub mod published;
pub mod reconcile;
pub mod reload;
pub mod replay;
pub mod retention;
pub mod runs;
mod sandbox_config;
pub mod seal;
pub mod sources;
pub mod stages;
pub mod telemetry;
pub mod url_credentials;
pub mod watch;
pub mod withheld;
pub mod witness;
pub mod witnessing;
