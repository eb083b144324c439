//! Reload: the config's files read again while the gateway runs (SIGHUP,
//! or an admin on the console), and what can change put in force at once —
//! all of it, or nothing:
//! - the registry (tools, prompts, resources): the next `tools/list` and
//!   the next call see it;
//! - the servers: one added is started; one changed (its command, url,
//!   variables, box, trust or deadline) is started anew beside the old,
//!   and one removed or changed is stopped once no call that began under
//!   the old config still runs (at most `[gateway] shutdown_grace_ms`);
//!   one unchanged keeps its process and its session;
//! - the policy files.
//!
//! A file that does not parse, a config whose values are refused, or a
//! policy that does not validate is refused whole: the config in force
//! stays, and the reason is logged and returned. Other tables (`[gateway]`,
//! `[callers]`, `[receipts]`, …) changed in the file wait for a restart,
//! and the reload says which. Each call's receipts name the version of the
//! config it ran under (`config_version`).

use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Live;
use crate::gateway::Gateway;
use crate::process::{load_policy, start_upstream};

/// What a reload put in force.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reloaded {
    /// The config's version now in force (`Config::version`).
    pub config_version: String,
    /// The policy's version now in force.
    pub policy_version: String,
    /// Servers started for the first time.
    pub added: Vec<String>,
    /// Servers started anew because their settings changed.
    pub restarted: Vec<String>,
    /// Servers stopped because the config no longer names them.
    pub removed: Vec<String>,
    /// The tables changed in the file that wait for a restart (`[gateway]`).
    pub waiting: Vec<String>,
}

impl Reloaded {
    /// One line for a person: what changed, and what waits.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!(
            "config {} in force (policy {})",
            short(&self.config_version),
            short(&self.policy_version)
        )];
        for (what, names) in
            [("started", &self.added), ("restarted", &self.restarted), ("stopped", &self.removed)]
        {
            if !names.is_empty() {
                parts.push(format!("{what}: {}", names.join(", ")));
            }
        }
        if !self.waiting.is_empty() {
            parts.push(format!("changed but waiting for a restart: {}", self.waiting.join(", ")));
        }
        parts.join("; ")
    }
}

fn short(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

/// Why a reload put nothing in force; the config in force stays.
#[derive(Debug, thiserror::Error)]
#[error("reload refused, the config in force stays: {0}")]
pub struct Refused(pub String);

/// See the module docs; `Gateway::reload` runs one at a time.
pub(crate) async fn reload(gw: &Gateway) -> Result<Reloaded, Refused> {
    let old = gw.catalogs.live();
    let refused = |why: String| {
        tracing::error!(target: "toolgate::config", reason = %why, "config reload refused; the config in force stays");
        Refused(why)
    };
    let fresh = old.config.reread().map_err(|e| refused(without_lines(&e.to_string())))?;
    let (config, waiting) = old.config.reloaded(fresh).map_err(&refused)?;
    let policy = load_policy(&config).map_err(|e| refused(format!("{e:#}")))?;
    let config = Arc::new(config);
    let (mut added, mut restarted) = (Vec::new(), Vec::new());
    let sources = (&gw.identities, &gw.clock, &gw.entropy);
    let upstreams = config
        .servers
        .keys()
        .map(|name| match old.started(name) {
            Some(kept) if unchanged(&old.config, &config, name) => kept,
            Some(_) => {
                restarted.push(name.clone());
                start_upstream(&config, name, &gw.cancellation(), sources)
            }
            None => {
                added.push(name.clone());
                start_upstream(&config, name, &gw.cancellation(), sources)
            }
        })
        .collect::<Vec<_>>();
    let removed: Vec<String> =
        old.config.servers.keys().filter(|n| !config.servers.contains_key(*n)).cloned().collect();
    let started: Vec<_> = upstreams
        .iter()
        .filter(|(u, _)| added.contains(&u.name) || restarted.contains(&u.name))
        .map(|(u, _)| u.clone())
        .collect();
    crate::boxes::say_at_start(&started);
    let reloaded = Reloaded {
        config_version: config.version().to_string(),
        policy_version: policy.version().to_string(),
        added,
        restarted,
        removed,
        waiting,
    };
    let new = Arc::new(Live::new(config, Arc::new(policy), upstreams));
    let replaced = gw.catalogs.swap(new.clone());
    drain(replaced, new, Duration::from_millis(old.config.gateway.shutdown_grace_ms));
    tracing::info!(target: "toolgate::config", config_version = %reloaded.config_version, policy_version = %reloaded.policy_version, "config reloaded: {}", reloaded.summary());
    for table in &reloaded.waiting {
        tracing::warn!(target: "toolgate::config", table = %table, "{table} changed in the config file; it applies at the next restart");
    }
    Ok(reloaded)
}

/// A TOML error without the lines of the file it quotes: an edited file
/// may hold a credential on the line it points at, and this goes to the
/// log. The line and column, and what is wrong, stay.
fn without_lines(message: &str) -> String {
    let quoted = |l: &&str| {
        l.trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start()
            .starts_with('|')
    };
    message.lines().filter(|l| !quoted(l)).collect::<Vec<_>>().join(" ")
}

/// Whether server `name` runs the same in both configs: the same way to
/// reach it (command, url, variables, box), trust, deadline and identity
/// (the gateway reads its contract with the identity's own credential).
fn unchanged(old: &crate::config::Config, new: &crate::config::Config, name: &str) -> bool {
    let (a, b) = (&old.servers[name], &new.servers[name]);
    a.server_with(&old.tls) == b.server_with(&new.tls)
        && old.timeout_ms(name) == new.timeout_ms(name)
        && a.identity == b.identity
}

/// Stops the upstreams of `old` that `new` does not keep, once no call
/// holds `old` (each call holds the config it began under), or after
/// `grace`: a call held longer loses its server, as at shutdown.
fn drain(old: Arc<Live>, new: Arc<Live>, grace: Duration) {
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + grace;
        while Arc::strong_count(&old) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if Arc::strong_count(&old) > 1 {
            tracing::warn!(target: "toolgate::config", "calls begun under the replaced config \
                still run after the grace period; their changed servers stop now");
        }
        old.stop_all_but(&new);
    });
}

impl Gateway {
    /// Re-reads the config file (and the `mcpServers` files it imported)
    /// and its policy, and puts in force what can change while it runs
    /// (`crate::reload`): all of it or, when anything is wrong, none of it.
    /// Calls in flight finish under the config they began with.
    pub async fn reload(&self) -> Result<Reloaded, Refused> {
        let _one = self.reloading.lock().await;
        reload(self).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_names_the_place_and_the_fault_but_not_the_line() {
        let message = "/etc/toolgate.toml: TOML parse error at line 17, column 9\n   |\n17 | \
            headers = { Authorization = \"Bearer s3cr3t\" \n   |         ^^^\nunclosed inline \
            table, expected `}`\n";
        let shown = super::without_lines(message);
        assert_eq!(
            shown,
            "/etc/toolgate.toml: TOML parse error at line 17, column 9 unclosed inline table, expected `}`"
        );
    }
}
