//! toolgate-gateway: the running gateway. Its map, every module named:
//!
//! - **One call**: `pipeline` reads as the ten stages in order, each a
//!   module of `stages` that takes what it needs and returns its conclusion
//!   as a value (`call`); the pipeline gathers those once (`findings`) for
//!   record; the receipts that commit with the ledger's state go through
//!   `commit`; `observe` tells telemetry what happened.
//! - **What a call runs against**, built once (`gateway`) from the config
//!   (`config` assembles and validates the file; each section is a
//!   `*_config` beside the code it configures, the log's is `log_config`):
//!   `callers` and `oauth` (who calls), `identity` (as whom a call reaches
//!   its server) and `personal` (a person's own stdio process), `catalog`,
//!   `listed` and `pins` (the upstreams' contracts as exposed, pinned),
//!   `holds` and `cancels` (held calls, and their cancellation by the
//!   client), `notify` (approvers told), `runs` and `budgets`, `fleet`
//!   (replicas sharing the ledger), `seal` (the sealed `requestState`),
//!   `sources` (the one clock and the entropy), `withheld` and
//!   `url_credentials` (the credentials it holds, never in an answer or a
//!   log line), `boxes` (each server's sandbox as doctor, audit and the
//!   console tell it), `sessions` (the legacy sessions this replica
//!   issued); `process` opens the state dir, the ledger, the policy and the
//!   upstreams, and waits for the signal that stops it; `reload` puts a
//!   re-read config in force.
//! - **The receipt log**, a room of its own (`log`, its map in
//!   `log/README.md`): what the running gateway does with it; apart from
//!   that, its readers (`log::readers`) and the witness server
//!   (`log::witness_server`).
//! - **The edges**: `downstream` (Streamable HTTP with its rules as axum
//!   extractors, stdio, the admin API, the probes, the log's `/log/`
//!   routes). The MCP wire and the upstream client are `toolgate-mcp`'s,
//!   named where they are used.
//! - **For operators and third parties**: `reconcile`, `replay`,
//!   `telemetry` and `prometheus`; `retention` keeps the ledger's
//!   operations and notices bounded (receipts leave it by `log::archive`).
//!
//! It does not know the web console (`toolgate-console`), which reads its
//! own section of the config (`[console]`, kept here as an uninterpreted
//! table), uses this crate's public API and is served beside `/mcp` by
//! `downstream::http::serve_with`.

#![warn(missing_docs)]

mod approvals_config;
pub mod boxes;
pub(crate) mod budgets;
mod budgets_config;
pub mod call;
pub(crate) mod callers;
mod callers_config;
pub(crate) mod cancels;
pub mod catalog;
mod catalog_config;
pub(crate) mod commit;
pub mod config;
pub mod downstream;
pub(crate) mod findings;
pub(crate) mod fleet;
pub mod gateway;
mod gateway_config;
mod guards_config;
pub(crate) mod holds;
pub mod identity;
mod identity_config;
pub mod listed;
pub mod log;
mod log_config;
pub(crate) mod notify;
mod notify_config;
pub(crate) mod oauth;
mod oauth_config;
pub(crate) mod observe;
pub mod personal;
pub mod pins;
pub mod pipeline;
mod policy_config;
pub mod process;
pub mod prometheus;
pub mod reconcile;
mod reconcile_config;
pub mod reload;
pub mod replay;
pub(crate) mod retention;
pub(crate) mod runs;
mod runs_config;
mod sandbox_config;
pub mod seal;
pub(crate) mod sessions;
pub(crate) mod sources;
pub mod stages;
pub mod telemetry;
mod telemetry_config;
mod tls_config;
mod upstream_config;
pub mod url_credentials;
pub(crate) mod withheld;
