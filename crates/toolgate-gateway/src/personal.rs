//! Per-person stdio processes (`[servers.NAME.identity]` `env`): a stdio
//! server that takes its user's token from its environment (the GitHub
//! server's `GITHUB_PERSONAL_ACCESS_TOKEN`) runs once per person, started
//! with that person's current token. The gateway's own process (the one
//! its contract is read from) runs with the gateway's own.
//!
//! A bounded pool per server (`identity.pool`): past it, the process used
//! least recently goes. A process unused for `identity.idle_ms` is stopped;
//! one whose person's token changed (refreshed, exchanged again) is
//! replaced at its person's next call, the old one kept until the calls
//! already on it had their deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_core::Caller;
use toolgate_core::proposal::sha256_hex;
use toolgate_mcp::upstream::Upstream;

use crate::config::Config;

/// (server, tenant, person).
type Key = (String, String, String);

struct Process {
    upstream: Arc<Upstream>,
    stop: CancellationToken,
    /// The SHA-256 of the token it was started with.
    token_sha256: String,
    last_ms: i64,
}

/// The people's processes of every server.
#[derive(Default)]
pub struct Personal {
    processes: Mutex<HashMap<Key, Process>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Personal {
    /// `caller`'s process of `server`, started with `var` = `token` (or the
    /// one already running with that token), ready to take the call.
    pub async fn upstream(
        &self,
        config: &Config,
        server: &str,
        caller: &Caller,
        (var, token): (&str, &str),
        now_ms: i64,
        cancel: &CancellationToken,
    ) -> Result<Arc<Upstream>, String> {
        let key = (server.to_string(), caller.tenant.clone(), caller.subject.clone());
        let s = config.servers.get(server).ok_or_else(|| format!("no server `{server}`"))?;
        let token_sha256 = sha256_hex(token.as_bytes());
        let timeout = Duration::from_millis(config.timeout_ms(server));
        let upstream = {
            let mut processes = lock(&self.processes);
            match processes.get_mut(&key) {
                Some(p) if p.token_sha256 == token_sha256 => {
                    p.last_ms = now_ms;
                    p.upstream.clone()
                }
                _ => {
                    // A token that changed: the old process keeps the calls
                    // already on it until their deadline, then goes.
                    if let Some(old) = processes.remove(&key) {
                        retire(old, timeout);
                    }
                    let mine: Vec<_> = processes
                        .iter()
                        .filter(|(k, _)| k.0 == server)
                        .map(|(k, p)| (k.clone(), p.last_ms))
                        .collect();
                    if mine.len() >= s.identity.pool()
                        && let Some((oldest, _)) = mine.into_iter().min_by_key(|(_, last)| *last)
                        && let Some(old) = processes.remove(&oldest)
                    {
                        tracing::info!(target: "toolgate::identity", server, "a person's process stopped for another's: the pool is full");
                        retire(old, timeout);
                    }
                    let settings = &config.gateway;
                    let transport = s.server_with(&config.tls);
                    let transport = toolgate_mcp::upstream::Server {
                        transport: transport.transport.with_env(var, token.to_string()),
                        ..transport
                    };
                    let upstream = Upstream::new(
                        server,
                        transport,
                        timeout,
                        Duration::from_millis(settings.list_ttl_ms),
                        env!("CARGO_PKG_VERSION"),
                    );
                    upstream.set_max_tools(settings.max_tools_per_upstream);
                    upstream.set_max_message_bytes(settings.max_upstream_message_bytes);
                    let stop = cancel.child_token();
                    upstream.start(stop.clone());
                    processes.insert(
                        key.clone(),
                        Process { upstream: upstream.clone(), stop, token_sha256, last_ms: now_ms },
                    );
                    upstream
                }
            }
        };
        if upstream.listing().is_none() && !upstream.ready(timeout).await {
            let why = upstream.down_reason().unwrap_or_else(|| "it did not answer in time".into());
            if let Some(p) = lock(&self.processes).remove(&key) {
                p.stop.cancel();
            }
            return Err(format!("your own process of `{server}` did not start ({why})"));
        }
        Ok(upstream)
    }

    /// Stops the processes unused for their server's `idle_ms` by `now_ms`,
    /// and those of servers no longer configured so.
    pub fn reap(&self, config: &Config, now_ms: i64) {
        lock(&self.processes).retain(|(server, _, _), p| {
            let idle_ms = config
                .servers
                .get(server)
                .filter(|s| s.identity.env.is_some())
                .map(|s| s.identity.idle_ms() as i64);
            let keep = idle_ms.is_some_and(|idle| now_ms - p.last_ms < idle);
            if !keep {
                p.stop.cancel();
            }
            keep
        });
    }

    /// How many people's processes run now.
    pub fn running(&self) -> usize {
        lock(&self.processes).len()
    }
}

/// Stops `old` once the calls already on it had `grace`.
fn retire(old: Process, grace: Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        old.stop.cancel();
    });
}
