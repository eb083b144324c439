//! What the benches share: the Atlas tickets server as the upstream, the
//! bare relay, and percentiles of sorted samples.
#![allow(dead_code)]

pub mod relay;

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_atlas::{ServerKind, serve};

/// The Atlas tickets server over HTTP, keeping its files in `dir`, until
/// `cancel`; its `/mcp` URL.
pub async fn tickets(dir: &Path, cancel: &CancellationToken) -> String {
    let server = toolgate_atlas::server(ServerKind::Tickets, Some(dir)).unwrap();
    let (addr, _) =
        serve::http(server, "127.0.0.1:0".parse().unwrap(), cancel.clone()).await.unwrap();
    format!("http://{addr}/mcp")
}

/// The `p` quantile of `sorted` (nearest rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
