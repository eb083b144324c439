//! `[servers.NAME.sandbox]`: the box a stdio server runs in, as the config
//! writes it, and the profile it resolves to (docs/SANDBOX.md).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use toolgate_mcp::sandbox::{Allowed, Limits, Network, Profile, Sandbox};

/// A server's `sandbox`: a table of grants and limits, or `"off"`.
#[derive(Debug, Clone, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum SandboxConfig {
    /// `sandbox = "off"`: this server runs unboxed, as toolgate's own user.
    Off(OffWord),
    /// A box.
    Boxed(BoxConfig),
}

/// The one word `sandbox` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
pub enum OffWord {
    /// Unboxed.
    #[serde(rename = "off")]
    Off,
}

/// `[servers.NAME.sandbox]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BoxConfig {
    /// Paths it may read (and execute), beside the system paths; relative
    /// to the config file.
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Paths it may read and write; relative to the config file.
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// `"none"` (the default), `"all"`, or the hosts it may reach through
    /// toolgate's proxy: `host` (port 443), `host:port` or `*.domain`.
    #[serde(default)]
    pub network: NetworkConfig,
    /// Private writable memory per process, in MiB. Default 2048.
    pub memory_mb: Option<u64>,
    /// Processes and threads. Default 256.
    pub processes: Option<u64>,
    /// Open files per process. Default 1024.
    pub open_files: Option<u64>,
    /// CPU seconds per process. Default 3600.
    pub cpu_seconds: Option<u64>,
}

/// What a box may reach.
#[derive(Debug, Clone, Default, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum NetworkConfig {
    /// `"none"` or `"all"`.
    Word(NetworkWord),
    /// Hosts reached through toolgate's CONNECT proxy.
    Allow(Vec<String>),
    /// Nothing (the default).
    #[default]
    #[serde(skip)]
    Unset,
}

/// `network`'s words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkWord {
    /// Loopback only.
    None,
    /// The host's network.
    All,
}

impl<'de> Deserialize<'de> for SandboxConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = SandboxConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a [servers.NAME.sandbox] table, or \"off\"")
            }
            fn visit_str<E: de::Error>(self, word: &str) -> Result<SandboxConfig, E> {
                match word {
                    "off" => Ok(SandboxConfig::Off(OffWord::Off)),
                    other => Err(E::custom(format!(
                        "sandbox = {other:?}: the one word is \"off\"; a box is a table ([servers.NAME.sandbox] with read, write, network and limits)"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SandboxConfig, A::Error> {
                BoxConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(SandboxConfig::Boxed)
            }
        }
        d.deserialize_any(Either)
    }
}

impl<'de> Deserialize<'de> for NetworkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = NetworkConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"none\", \"all\" or a list of hosts")
            }
            fn visit_str<E: de::Error>(self, word: &str) -> Result<NetworkConfig, E> {
                match word {
                    "none" => Ok(NetworkConfig::Word(NetworkWord::None)),
                    "all" => Ok(NetworkConfig::Word(NetworkWord::All)),
                    other => Err(E::custom(format!(
                        "network = {other:?}: write \"none\", \"all\", or a list of hosts such as [\"registry.npmjs.org\"]"
                    ))),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NetworkConfig, A::Error> {
                let mut hosts = Vec::new();
                while let Some(host) = seq.next_element::<String>()? {
                    hosts.push(host);
                }
                Ok(NetworkConfig::Allow(hosts))
            }
        }
        d.deserialize_any(Either)
    }
}

impl NetworkConfig {
    fn network(&self) -> Result<Network, String> {
        Ok(match self {
            NetworkConfig::Unset | NetworkConfig::Word(NetworkWord::None) => Network::None,
            NetworkConfig::Word(NetworkWord::All) => Network::All,
            NetworkConfig::Allow(hosts) => {
                Network::Allow(hosts.iter().map(|h| Allowed::parse(h)).collect::<Result<_, _>>()?)
            }
        })
    }
}

impl BoxConfig {
    fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            memory_mb: self.memory_mb.unwrap_or(d.memory_mb),
            processes: self.processes.unwrap_or(d.processes),
            open_files: self.open_files.unwrap_or(d.open_files),
            cpu_seconds: self.cpu_seconds.unwrap_or(d.cpu_seconds),
        }
    }
}

/// What is wrong with server `name`'s `sandbox`, each as a line of
/// `config check`.
pub(crate) fn problems(name: &str, sandbox: Option<&SandboxConfig>, stdio: bool) -> Vec<String> {
    let mut out = Vec::new();
    let Some(sandbox) = sandbox else { return out };
    if !stdio {
        out.push(format!("servers.{name}.sandbox: an HTTP upstream runs elsewhere; a sandbox is for a server toolgate starts (`command`)"));
        return out;
    }
    let SandboxConfig::Boxed(table) = sandbox else { return out };
    if let Err(e) = table.network.network() {
        out.push(format!("servers.{name}.sandbox.network: {e}"));
    }
    for (key, value) in [
        ("memory_mb", table.memory_mb),
        ("processes", table.processes),
        ("open_files", table.open_files),
        ("cpu_seconds", table.cpu_seconds),
    ] {
        if value == Some(0) {
            out.push(format!(
                "servers.{name}.sandbox.{key}: 0 would stop the server from starting; give a \
                    positive number, or leave it out for the default"
            ));
        }
    }
    for path in table.read.iter().chain(&table.write) {
        if path.as_os_str().is_empty() || path == Path::new("/") {
            out.push(format!("servers.{name}.sandbox: `{}` would grant the whole disk; name the folders the server needs", path.display()));
        }
    }
    out
}

/// Server `name`'s box: paths resolved against `dir` (the config's
/// folder), its home in `state/boxes/NAME` (a server's name is letters,
/// digits, `_` and `-`: one folder), its hash computed. `None` means the
/// default box.
pub(crate) fn resolve(
    name: &str,
    sandbox: Option<&SandboxConfig>,
    dir: &Path,
    state: &Path,
) -> Result<Sandbox, String> {
    let table = match sandbox {
        Some(SandboxConfig::Off(_)) => return Ok(Sandbox::Off),
        Some(SandboxConfig::Boxed(table)) => table.clone(),
        None => BoxConfig::default(),
    };
    let absolute = |list: &[PathBuf]| list.iter().map(|p| dir.join(p)).collect::<Vec<_>>();
    let (read, write) = (absolute(&table.read), absolute(&table.write));
    let network =
        table.network.network().map_err(|e| format!("servers.{name}.sandbox.network: {e}"))?;
    let limits = table.limits();
    let description = Profile::describe(&read, &write, &network, &limits);
    let hash = toolgate_core::proposal::sha256_hex(
        toolgate_core::proposal::canonical_json(&description).as_bytes(),
    );
    Ok(Sandbox::Boxed(Arc::new(Profile {
        read,
        write,
        network,
        limits,
        home: state.join("boxes").join(name),
        hash,
    })))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use toolgate_mcp::sandbox::{Network, Sandbox};

    use crate::config::Config;

    fn parse(servers: &str) -> Result<Config, String> {
        Config::parse(
            &format!("[gateway]\nstate_dir = \"/var/lib/toolgate\"\n{servers}"),
            Path::new("/etc/toolgate/toolgate.toml"),
        )
        .map_err(|e| e.to_string())
    }

    fn boxed(config: &Config, name: &str) -> std::sync::Arc<toolgate_mcp::sandbox::Profile> {
        match config.servers[name].sandbox() {
            Sandbox::Boxed(profile) => profile,
            Sandbox::Off => panic!("{name} is not boxed"),
        }
    }

    /// The hash a receipt names is SHA-256 of the profile's JCS, paths
    /// absolute: anyone with the config recomputes it.
    #[test]
    fn a_profile_resolves_against_the_config_and_hashes_its_jcs() {
        let config = parse(
            "[servers.files]\ncommand = \"npx\"\n[servers.files.sandbox]\nread = [\"ref\"]\nwrite \
                = [\"/srv/docs\"]\nnetwork = [\"registry.npmjs.org\", \
                \"*.pythonhosted.org:8443\"]\nprocesses = 64\n",
        )
        .unwrap();
        let profile = boxed(&config, "files");
        assert_eq!(profile.read, [Path::new("/etc/toolgate/ref")]);
        assert_eq!(profile.home, Path::new("/var/lib/toolgate/boxes/files"));
        let jcs = r#"{"cpu_seconds":3600,"memory_mb":2048,"network":["registry.npmjs.org","*.pythonhosted.org:8443"],"open_files":1024,"processes":64,"read":["/etc/toolgate/ref"],"write":["/srv/docs"]}"#;
        assert_eq!(profile.hash, toolgate_core::proposal::sha256_hex(jcs.as_bytes()));
        // A grant changed is a hash changed.
        let other = parse(
            "[servers.files]\ncommand = \"npx\"\n[servers.files.sandbox]\nread = [\"ref\"]\nwrite \
                = [\"/srv\"]\nnetwork = [\"registry.npmjs.org\", \
                \"*.pythonhosted.org:8443\"]\nprocesses = 64\n",
        )
        .unwrap();
        assert_ne!(boxed(&other, "files").hash, profile.hash);
    }

    #[test]
    fn every_stdio_server_is_boxed_unless_its_config_says_off() {
        let config = parse(
            "[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"y\"\nsandbox = \
                \"off\"\n[servers.c]\nurl = \"http://127.0.0.1:1/mcp\"\n",
        )
        .unwrap();
        let a = boxed(&config, "a");
        assert_eq!(
            (a.network.clone(), a.read.len(), a.write.len()),
            (Network::None, 0, 0),
            "the default box grants nothing"
        );
        assert_eq!(config.servers["b"].sandbox(), Sandbox::Off);
        assert_eq!(config.servers["b"].sandbox().receipt_name(), "off");
    }

    #[test]
    fn a_bad_sandbox_is_refused_with_what_to_write() {
        for (text, says) in [
            ("[servers.a]\ncommand = \"x\"\nsandbox = \"on\"\n", "the one word is \"off\""),
            (
                "[servers.a]\ncommand = \"x\"\n[servers.a.sandbox]\nnetwork = \"some\"\n",
                "write \"none\", \"all\", or a list of hosts",
            ),
            (
                "[servers.a]\ncommand = \"x\"\n[servers.a.sandbox]\nnetwork = [\"http://x\"]\n",
                "write `host`, `host:port` or `*.domain`",
            ),
            (
                "[servers.a]\ncommand = \"x\"\n[servers.a.sandbox]\nprocesses = 0\n",
                "give a positive number",
            ),
            (
                "[servers.a]\ncommand = \"x\"\n[servers.a.sandbox]\nwrite = [\"/\"]\n",
                "the whole disk",
            ),
            (
                "[servers.a]\ncommand = \"x\"\n[servers.a.sandbox]\nreed = [\"/srv\"]\n",
                "unknown field `reed`",
            ),
            (
                "[servers.a]\nurl = \"http://127.0.0.1:1/mcp\"\nsandbox = \"off\"\n",
                "a sandbox is for a server toolgate starts",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
