//! What a gateway process opens from its config — the state dir (owner-only),
//! the ledger, the policy, an upstream — and the signal that ends it. One
//! home each: `toolgate serve`, the demo, `reload` and the commands beside a
//! running gateway (`toolgate approvals`, `policy`, `doctor`) open them here.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use toolgate_core::policy::PolicyEngine;
use toolgate_core::{Clock, Entropy};
use toolgate_ledger::Ledger;
use toolgate_mcp::upstream::Upstream;

use crate::config::Config;

/// What an upstream's own requests are signed with: the gateway's
/// identities, its clock and its entropy.
pub(crate) type UpstreamSources<'a> =
    (&'a Arc<crate::identity::Identities>, &'a Arc<dyn Clock>, &'a Arc<dyn Entropy>);

/// The upstream of server `name` of `config`, started under its own child
/// of `cancel`.
pub(crate) fn start_upstream(
    config: &Config,
    name: &str,
    cancel: &CancellationToken,
    (identities, clock, entropy): UpstreamSources<'_>,
) -> (Arc<Upstream>, CancellationToken) {
    let settings = &config.gateway;
    let server = &config.servers[name];
    let timeout = Duration::from_millis(server.timeout_ms.unwrap_or(settings.upstream_timeout_ms));
    let upstream = Upstream::new(
        name,
        server.server_with(&config.tls),
        timeout,
        Duration::from_millis(settings.list_ttl_ms),
        env!("CARGO_PKG_VERSION"),
    );
    upstream.set_max_tools(settings.max_tools_per_upstream);
    upstream.set_max_message_bytes(settings.max_upstream_message_bytes);
    if let Some(own) = identities.own_credential(config, name, clock.clone(), entropy.clone()) {
        upstream.set_own_credential(own);
    }
    let stop = cancel.child_token();
    upstream.start(stop.clone());
    (upstream, stop)
}

/// The configured Cedar policy set, validated against its schema; without
/// `[policy]`, an empty set (the registry decides every call).
pub fn load_policy(config: &Config) -> anyhow::Result<PolicyEngine> {
    let Some(p) = &config.policy else { return Ok(PolicyEngine::empty()) };
    let read = |path: &std::path::Path| {
        let path = config.resolve_path(path);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    PolicyEngine::load(&read(&p.policies)?, &read(&p.schema)?)
        .map_err(|e| anyhow::anyhow!("policy {}: {e}", config.resolve_path(&p.policies).display()))
}

/// The ledger `config` names, its state dir made first (owner-only): the
/// gateway's, and what a command beside it opens.
pub async fn open_ledger(config: &Config) -> anyhow::Result<Arc<dyn Ledger>> {
    open_ledger_as(config, false).await
}

pub(crate) async fn open_ledger_as(
    config: &Config,
    sequencing: bool,
) -> anyhow::Result<Arc<dyn Ledger>> {
    create_state_dir(config)?;
    let location = config.ledger_location();
    let opened = if sequencing {
        toolgate_ledger::open_sequencing(&location).await
    } else {
        toolgate_ledger::open(&location).await
    };
    opened.with_context(|| format!("opening the ledger {}", config.ledger_display()))
}

/// The state dir, owner-only: it holds the ledger and the keys. A link
/// where it belongs is refused (it would put them where the link says).
pub fn create_state_dir(config: &Config) -> anyhow::Result<std::path::PathBuf> {
    let dir = config.state_dir();
    toolgate_mcp::owner_only::create_private_dir(&dir)
        .with_context(|| format!("creating the state dir {}", dir.display()))?;
    Ok(dir)
}

/// Ctrl-C or SIGTERM: when `toolgate serve` (and the demo) begin to stop.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
