//! The box a stdio server runs in: built from the kernel's own mechanisms,
//! with no helper program and no container engine.
//!
//! - `host` — what this machine can build, probed once (doctor and start
//!   say what is missing).
//! - `prepare` — everything a spawn needs, made in the gateway before the
//!   fork: the Landlock ruleset, the seccomp program, the pids cgroup, the
//!   socket the network proxy arrives on.
//! - `child` — the few system calls the child makes between fork and exec,
//!   which allocate nothing.
//! - `proxy` — the HTTP CONNECT proxy that is the box's only way out when
//!   its network is an allow-list.
//!
//! See docs/SANDBOX.md for what each layer stops and what it does not.

use std::path::PathBuf;
use std::sync::Arc;

mod child;
pub mod host;
mod landlock_rules;
mod prepare;
pub mod proxy;
mod seccomp;

pub use child::PROXY_PORT;
pub(crate) use child::enter;
pub use landlock_rules::{SYSTEM_READ, SYSTEM_WRITE};
pub use prepare::CA_VARIABLES;
pub(crate) use prepare::{Boxed, Prepared};

/// Whether a stdio server runs in a box.
#[derive(Debug, Clone, PartialEq)]
pub enum Sandbox {
    /// `sandbox = "off"`: as toolgate's own user, unboxed.
    Off,
    /// In the box this profile describes.
    Boxed(Arc<Profile>),
}

impl Sandbox {
    /// How a receipt names it: the profile's hash, or `off`.
    pub fn receipt_name(&self) -> &str {
        match self {
            Sandbox::Off => "off",
            Sandbox::Boxed(profile) => &profile.hash,
        }
    }
}

/// A box, resolved: absolute paths, every limit set.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Readable (and executable), beside the system paths.
    pub read: Vec<PathBuf>,
    /// Readable and writable.
    pub write: Vec<PathBuf>,
    /// What it may reach.
    pub network: Network,
    /// Its limits.
    pub limits: Limits,
    /// Its own folder (HOME, TMPDIR, caches): the one place of the state
    /// directory it reaches.
    pub home: PathBuf,
    /// The hex SHA-256 of the profile's JCS (`describe`), named in every
    /// receipt of a call to this server.
    pub hash: String,
}

/// What a box may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Nothing: a network namespace of its own with only loopback.
    None,
    /// The host's network, as toolgate has it.
    All,
    /// Only these hosts, through toolgate's CONNECT proxy.
    Allow(Vec<Allowed>),
}

/// One entry of an allow-list: `host`, `host:port` or `*.suffix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// Lowercase; for a wildcard, the suffix without `*.`.
    pub host: String,
    /// `*.suffix`: any name under the suffix (not the suffix itself).
    pub wildcard: bool,
    /// 443 unless given.
    pub port: u16,
}

impl Allowed {
    /// Reads `host`, `host:port` or `*.suffix[:port]`; the error says what
    /// a good entry looks like.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "`{}`: {why} (write `host`, `host:port` or `*.domain`)",
                crate::sandbox::proxy::shown(entry)
            )
        };
        let (name, port) = match entry.rsplit_once(':') {
            Some((name, port)) => (
                name,
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
            ),
            None => (entry, 443),
        };
        let (wildcard, host) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, name),
        };
        if !proxy::is_host_name(host) {
            return Err(bad("not a host name"));
        }
        Ok(Self { host: host.to_ascii_lowercase(), wildcard, port })
    }

    /// Whether `host:port` (already lowercase) is this entry.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        port == self.port
            && if self.wildcard {
                host.strip_suffix(&self.host)
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
            } else {
                host == self.host
            }
    }
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = if self.wildcard { "*." } else { "" };
        if self.port == 443 {
            write!(f, "{star}{}", self.host)
        } else {
            write!(f, "{star}{}:{}", self.host, self.port)
        }
    }
}

/// A box's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Private writable memory (RLIMIT_DATA), in MiB: what a process
    /// allocates, not the address space V8 or a JIT reserves.
    pub memory_mb: u64,
    /// Processes and threads (RLIMIT_NPROC in the box's user namespace; a
    /// pids cgroup when toolgate runs as root, whom RLIMIT_NPROC exempts).
    pub processes: u64,
    /// Open files (RLIMIT_NOFILE).
    pub open_files: u64,
    /// CPU seconds per process (RLIMIT_CPU).
    pub cpu_seconds: u64,
}

impl Default for Limits {
    /// What an `npx` or `uvx` server needs to fetch its package and run.
    fn default() -> Self {
        Self { memory_mb: 2048, processes: 256, open_files: 1024, cpu_seconds: 3600 }
    }
}

impl Profile {
    /// The profile as JSON, paths absolute: what its `hash` is of, and what
    /// `audit` and the console show.
    pub fn describe(
        read: &[PathBuf],
        write: &[PathBuf],
        network: &Network,
        limits: &Limits,
    ) -> serde_json::Value {
        let paths =
            |list: &[PathBuf]| list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        let network = match network {
            Network::None => serde_json::json!("none"),
            Network::All => serde_json::json!("all"),
            Network::Allow(list) => {
                serde_json::json!(list.iter().map(ToString::to_string).collect::<Vec<_>>())
            }
        };
        serde_json::json!({
            "read": paths(read),
            "write": paths(write),
            "network": network,
            "memory_mb": limits.memory_mb,
            "processes": limits.processes,
            "open_files": limits.open_files,
            "cpu_seconds": limits.cpu_seconds,
        })
    }

    /// `describe` of this profile.
    pub fn description(&self) -> serde_json::Value {
        Self::describe(&self.read, &self.write, &self.network, &self.limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allow_list_entry_names_a_host_a_port_or_the_names_under_a_domain() {
        let npm = Allowed::parse("registry.npmjs.org").unwrap();
        assert!(npm.admits("registry.npmjs.org", 443));
        assert!(!npm.admits("registry.npmjs.org", 80));
        assert!(!npm.admits("evil-registry.npmjs.org", 443));
        let any = Allowed::parse("*.pythonhosted.org").unwrap();
        assert!(any.admits("files.pythonhosted.org", 443));
        assert!(!any.admits("pythonhosted.org", 443), "the suffix itself is not under it");
        assert!(
            !any.admits("evilpythonhosted.org", 443),
            "a name merely ending alike is not under it"
        );
        let port = Allowed::parse("Example.com:8443").unwrap();
        assert!(port.admits("example.com", 8443) && !port.admits("example.com", 443));
        assert_eq!(port.to_string(), "example.com:8443");
        for bad in ["", "a b", "host:0", "host:x", "*.", "http://x", "x/y", "*.*.x"] {
            assert!(Allowed::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
