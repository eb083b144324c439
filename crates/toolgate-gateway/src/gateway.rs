//! The running gateway: configuration, supervised upstreams, the catalog and
//! pins — everything a call needs, shared by both downstream edges.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_core::strict_json::JsonLimits;

use crate::catalog::Catalogs;
use crate::config::Config;
use crate::pins::PinStore;
use crate::upstream::Upstream;

pub struct Gateway {
    pub config: Arc<Config>,
    pub catalogs: Catalogs,
    pub limits: JsonLimits,
    cancel: CancellationToken,
    /// Cancelled when shutdown begins: long-lived streams end so the server
    /// can drain. Also cancelled by `stop`.
    draining: CancellationToken,
}

/// Whether this process serves calls (and so pins tools on first sight) or
/// only inspects them (`toolgate tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Serve,
    Inspect,
}

impl Gateway {
    /// Opens the pin lock file and starts one supervisor per upstream. Must
    /// run inside a tokio runtime.
    pub fn start(config: Config, mode: Mode) -> anyhow::Result<Arc<Self>> {
        let pins = Arc::new(PinStore::open(&config.lock_path())?);
        let cancel = CancellationToken::new();
        let settings = &config.gateway;
        let timeout = Duration::from_millis(settings.upstream_timeout_ms);
        let ttl = Duration::from_millis(settings.list_ttl_ms);
        let upstreams: Vec<Arc<Upstream>> = config
            .servers
            .iter()
            .map(|(name, server)| Upstream::new(name, server, timeout, ttl, env!("CARGO_PKG_VERSION")))
            .collect();
        for upstream in &upstreams {
            upstream.start(cancel.child_token());
        }
        let limits = JsonLimits { max_bytes: settings.max_body_bytes, max_depth: settings.max_depth };
        let config = Arc::new(config);
        let catalogs = Catalogs::new(config.clone(), upstreams, pins, mode == Mode::Serve);
        let draining = cancel.child_token();
        Ok(Arc::new(Self { config, catalogs, limits, cancel, draining }))
    }

    /// Waits until every upstream has listed its tools, or `within` passes.
    /// Returns the servers still down, with why.
    pub async fn wait_ready(&self, within: Duration) -> Vec<(String, String)> {
        let waits = self.catalogs.upstreams().iter().map(|u| u.ready(within));
        futures_util::future::join_all(waits).await;
        self.catalogs
            .upstreams()
            .iter()
            .filter(|u| u.listing().is_none())
            .map(|u| (u.name.clone(), u.down_reason().unwrap_or_else(|| "still connecting".into())))
            .collect()
    }

    pub fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Resolves when shutdown has begun (see `begin_shutdown`).
    pub fn draining(&self) -> CancellationToken {
        self.draining.clone()
    }

    /// Ends long-lived streams (`subscriptions/listen`) so in-flight calls can
    /// finish and the server can stop; upstreams stay up until `stop`.
    pub fn begin_shutdown(&self) {
        self.draining.cancel();
    }

    /// Stops the upstream supervisors (stdio children are killed).
    pub fn stop(&self) {
        self.cancel.cancel();
    }
}
