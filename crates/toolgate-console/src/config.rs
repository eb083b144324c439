//! `[console]`: the console's section of the config file. The gateway keeps
//! the table as written and never reads it (`Config::console`); it is read
//! here: when the config is loaded to serve (`toolgate serve`, which a
//! section refused here stops at start), by `toolgate config check`, and by
//! [`Console::new`](crate::Console::new).

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use toolgate_gateway::config::{Config, ConfigError};

/// `[console]`: the web console, served at `/console` on the gateway's own
/// listener to callers with the `approver` or `admin` role.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve the console at all.
    pub enabled: bool,
    /// How long a console session lives after sign-in, in seconds.
    pub session_ttl_s: u64,
    /// Mark the session cookie `Secure`. Unset: `Secure` unless the console
    /// listens on a loopback address (set it to `true` behind a TLS proxy).
    pub secure_cookies: Option<bool>,
    /// Serve the console on this address of its own instead of beside
    /// `/mcp` (e.g. an address agents cannot reach).
    pub listen: Option<SocketAddr>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self { enabled: true, session_ttl_s: 1800, secure_cookies: None, listen: None }
    }
}

impl ConsoleConfig {
    /// The `[console]` of the config file `text` at `path`. What it refuses
    /// reads as the gateway's refusals of the same file do: the file, the
    /// line and column, what is wrong.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        /// The file, every other table left to the gateway.
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            console: ConsoleConfig,
        }
        toml::from_str::<File>(text)
            .map(|file| file.console)
            .map_err(|e| ConfigError::Invalid { path: path.into(), message: e.to_string() })
    }

    /// The `[console]` of a config the gateway read (its table, kept as
    /// written).
    pub fn of(config: &Config) -> Result<Self, ConfigError> {
        toml::Value::Table(config.console.clone()).try_into().map_err(|e: toml::de::Error| {
            ConfigError::Invalid {
                path: config.path().into(),
                message: format!("[console]: {}", e.message()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section the console refuses is named as the gateway names its
    /// own mistakes: by the file and the line; the gateway reads the same
    /// file without a word about it.
    #[test]
    fn the_console_reads_its_own_section_and_refuses_a_bad_one() {
        let path = Path::new("/etc/toolgate/toolgate.toml");
        let text = "[gateway]\nlisten = \"127.0.0.1:9000\"\n[console]\nlisten = \"127.0.0.1:9001\"\nsession_ttl_s = 60\n";
        let config = Config::parse(text, path).unwrap();
        let read = ConsoleConfig::of(&config).unwrap();
        assert_eq!(read, ConsoleConfig::parse(text, path).unwrap());
        assert_eq!(
            (read.enabled, read.session_ttl_s, read.listen),
            (true, 60, Some("127.0.0.1:9001".parse().unwrap()))
        );
        assert_eq!(config.public_url(), "http://127.0.0.1:9001", "the console's own address");
        assert_eq!(ConsoleConfig::parse("", path).unwrap(), ConsoleConfig::default());
        for (bad, said) in [
            ("[console]\nfoo = 1\n", "TOML parse error at line 2, column 1"),
            ("[console]\nlisten = \"nope\"\n", "invalid socket address syntax"),
            ("[console]\nenabled = \"yes\"\n", "expected a boolean"),
        ] {
            assert!(Config::parse(bad, path).is_ok(), "the gateway does not read [console]");
            let e = ConsoleConfig::parse(bad, path).unwrap_err().to_string();
            assert!(e.starts_with("/etc/toolgate/toolgate.toml: ") && e.contains(said), "{e}");
            let e = ConsoleConfig::of(&Config::parse(bad, path).unwrap()).unwrap_err();
            assert!(e.to_string().contains("[console]: "), "{e}");
        }
    }
}
