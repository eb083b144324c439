//! toolgate-gateway: the running gateway — MCP edges (the downstream server
//! agents connect to, the upstream clients it connects with), the nine-stage
//! call pipeline, HTTP hardening, the admin API and telemetry. It does not
//! know the web console (`toolgate-console`), which uses its public API and
//! is served beside `/mcp` by `downstream::http::serve_with`.

#![warn(missing_docs)]

pub use toolgate_core as core;
pub use toolgate_ledger as ledger;
pub use toolgate_mcp::{lines, param_headers, upstream, wire};
pub mod config;
pub mod identity;
pub mod seal;
pub mod sources;
pub mod telemetry;
pub mod oauth;
pub mod pins;
pub mod prometheus;
pub mod catalog;
pub mod gateway;
pub mod holds;
pub mod runs;
pub mod budgets;
pub mod notify;
pub mod keys;
pub mod log;
pub mod call;
pub(crate) mod commit;
pub(crate) mod observe;
pub mod pipeline;
pub mod reconcile;
pub mod replay;
pub mod evidence;
pub mod stages;
pub mod downstream;
