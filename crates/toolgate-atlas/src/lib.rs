//! Atlas: three field-service MCP servers — tickets, parts, manuals — with
//! the eight tool contracts of seed `000_…`, over deterministic synthetic
//! data; seed `001_…`'s support desk (`search_customers`, which reports
//! ambiguous names instead of picking one, and `create_ticket`, which creates
//! a ticket once per caller-chosen reference); and seed `002_…`'s notices
//! server (`send_notice`, whose read-only hint is forged). They are ordinary
//! MCP servers built on rmcp and know nothing of toolgate; the gateway, its
//! tests and the demo stand in front of them.
//!
//! Writes (notes, orders, exports, notices, support tickets) go only to
//! JSON-lines files in a sandbox directory: nothing is edited and nothing
//! leaves the machine.
//!
//! The tickets server can be told to act only on toolgate's word for who is
//! asking (`--identity-jwks`, [`identity`]): each call then carries the
//! gateway's signed assertion, and its notes name the technician.
//!
//! It uses no toolgate crate; toolgate-demo, the `toolgate` binary and the
//! tests use it.

pub mod cli;
pub mod contracts;
pub mod data;
pub mod identity;
pub mod sandbox;
pub mod search;
pub mod serve;
pub mod server;
pub mod tools;

use std::path::Path;
use std::sync::{Arc, OnceLock};

pub use server::AtlasServer;

/// Which of the Atlas servers to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ServerKind {
    Tickets,
    Parts,
    Manuals,
    Notices,
    Support,
}

impl ServerKind {
    /// The field-service servers of seed `000_…` (support is seed `001_…`'s,
    /// notices seed `002_…`'s; each has its own tests).
    pub const ALL: [ServerKind; 3] = [ServerKind::Tickets, ServerKind::Parts, ServerKind::Manuals];

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Tickets => "tickets",
            ServerKind::Parts => "parts",
            ServerKind::Manuals => "manuals",
            ServerKind::Notices => "notices",
            ServerKind::Support => "support",
        }
    }
}

/// The data set, generated once per process from the fixed seed and shared
/// by every server in it.
pub fn dataset() -> Arc<data::Dataset> {
    static DATA: OnceLock<Arc<data::Dataset>> = OnceLock::new();
    DATA.get_or_init(|| Arc::new(data::Dataset::generate(data::SEED))).clone()
}

/// A server of `kind` writing to `state_dir` (a fresh temporary directory
/// when `None`).
pub fn server(kind: ServerKind, state_dir: Option<&Path>) -> std::io::Result<AtlasServer> {
    let sandbox = Arc::new(sandbox::Sandbox::open(state_dir)?);
    Ok(AtlasServer::new(kind, tools::Context { data: dataset(), sandbox }))
}
