//! `[servers.NAME]`: one upstream MCP server — how it is reached (stdio or
//! Streamable HTTP, and the credentials it is given), whether it is trusted,
//! its deadline — as the upstream client (`toolgate_mcp::upstream`) and the
//! processes that start it (`process`) take it. Its box and its identity
//! are tables of their own (`sandbox_config`, `identity_config`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolgate_mcp::sandbox::Sandbox;
use toolgate_mcp::upstream::{Server, Transport, ValueSource};

use crate::identity_config::IdentityConfig;
use crate::sandbox_config::SandboxConfig;
use crate::tls_config::TlsConfig;

/// `[servers.NAME]`: one upstream, reached over stdio (`command`) or
/// Streamable HTTP (`url`); exactly one of the two is set.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program to start as a stdio upstream.
    pub command: Option<String>,
    /// The arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the environment `command` inherits.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables whose values are read, at each start, from environment
    /// variables of the gateway: variable → variable. Credentials stay out
    /// of the file.
    #[serde(default)]
    pub env_env: BTreeMap<String, String>,
    /// Variables whose values are read, at each start, from owner-only
    /// files (relative to the config; a trailing newline is dropped):
    /// variable → file.
    #[serde(default)]
    pub env_file: BTreeMap<String, PathBuf>,
    /// The endpoint of a Streamable HTTP upstream (`http://`, or
    /// `https://` checked as `[tls]` says).
    pub url: Option<String>,
    /// Headers sent with every request to `url`, e.g. `Authorization`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read, at each connect, from environment
    /// variables: header → variable. Credentials stay out of the file.
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// Headers whose values are read, at each connect, from owner-only
    /// files (relative to the config; a trailing newline is dropped):
    /// header → file.
    #[serde(default)]
    pub headers_file: BTreeMap<String, PathBuf>,
    /// Query parameters added to `url` at each connect, their values read
    /// from environment variables: parameter → variable. For an upstream
    /// that takes its credential only in the URL (`?api_key=…`): `url`
    /// itself may hold no credential.
    #[serde(default)]
    pub query_env: BTreeMap<String, String>,
    /// Query parameters added to `url` at each connect, their values read
    /// from owner-only files (relative to the config; a trailing newline is
    /// dropped): parameter → file.
    #[serde(default)]
    pub query_file: BTreeMap<String, PathBuf>,
    /// Whether this server's annotations may decide for tools the registry
    /// does not name. Default: not trusted.
    #[serde(default)]
    pub trusted: bool,
    /// Accepted for compatibility with mcpServers files; the transport is
    /// known from `command` or `url`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Expose this server's tools under their own names, without the
    /// `SERVER{sep}` prefix. Only for a gateway fronting exactly one server,
    /// where names cannot collide. Default: true (prefixed).
    #[serde(default = "yes")]
    pub namespace: bool,
    /// This server's deadline per call, instead of `gateway.upstream_timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// The box a stdio server runs in (docs/SANDBOX.md): a table of grants
    /// and limits, or `"off"`. Default: a box with no grant, no network and
    /// the default limits.
    pub sandbox: Option<SandboxConfig>,
    /// `sandbox` resolved at load (paths absolute, its home, its hash);
    /// `None` in a config built in code (see `sandbox()`).
    #[serde(skip)]
    #[schemars(skip)]
    pub boxed: Option<Sandbox>,
    /// As whom a call reaches this server (docs/IDENTITY.md). Default:
    /// `shared`, the configured credential.
    #[serde(default)]
    pub identity: IdentityConfig,
}

fn yes() -> bool {
    true
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_env: BTreeMap::new(),
            env_file: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            headers_env: BTreeMap::new(),
            headers_file: BTreeMap::new(),
            query_env: BTreeMap::new(),
            query_file: BTreeMap::new(),
            trusted: false,
            kind: None,
            namespace: true,
            timeout_ms: None,
            sandbox: None,
            boxed: None,
            identity: IdentityConfig::default(),
        }
    }
}

impl ServerConfig {
    /// The server as the upstream client reaches it.
    pub fn server(&self) -> Server {
        Server { transport: self.transport(), trusted: self.trusted }
    }

    /// `server()`, trusting `tls`'s certificates too for `https://`.
    pub fn server_with(&self, tls: &TlsConfig) -> Server {
        let mut server = self.server();
        if let Transport::Http { ca, .. } = &mut server.transport {
            *ca = tls.ca.clone();
        }
        server
    }

    /// The box this stdio server runs in. One not read by `Config::parse`
    /// (built in code) is boxed too, its paths relative to the working
    /// folder and its home under the temporary folder.
    pub fn sandbox(&self) -> Sandbox {
        self.boxed.clone().unwrap_or_else(|| {
            let fallback = std::env::temp_dir().join(format!("toolgate-{}", std::process::id()));
            let resolve = |sandbox| {
                crate::sandbox_config::resolve("server", sandbox, Path::new("."), &fallback)
            };
            resolve(self.sandbox.as_ref())
                .or_else(|_| resolve(None))
                .expect("the default box always resolves")
        })
    }

    pub(crate) fn transport(&self) -> Transport {
        match (&self.command, &self.url) {
            (Some(command), _) => {
                let written =
                    self.env.iter().map(|(k, v)| (k.clone(), ValueSource::Value(v.clone())));
                let from_env =
                    self.env_env.iter().map(|(k, v)| (k.clone(), ValueSource::Env(v.clone())));
                let from_file =
                    self.env_file.iter().map(|(k, v)| (k.clone(), ValueSource::File(v.clone())));
                Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: written.chain(from_env).chain(from_file).collect(),
                    sandbox: self.sandbox(),
                }
            }
            (None, Some(url)) => {
                let written =
                    self.headers.iter().map(|(k, v)| (k.clone(), ValueSource::Value(v.clone())));
                let from_env =
                    self.headers_env.iter().map(|(k, v)| (k.clone(), ValueSource::Env(v.clone())));
                let from_file = self
                    .headers_file
                    .iter()
                    .map(|(k, v)| (k.clone(), ValueSource::File(v.clone())));
                let query_env =
                    self.query_env.iter().map(|(k, v)| (k.clone(), ValueSource::Env(v.clone())));
                let query_file =
                    self.query_file.iter().map(|(k, v)| (k.clone(), ValueSource::File(v.clone())));
                Transport::Http {
                    url: url.clone(),
                    headers: written.chain(from_env).chain(from_file).collect(),
                    query: query_env.chain(query_file).collect(),
                    ca: None,
                }
            }
            (None, None) => unreachable!("validated: every server has command or url"),
        }
    }
}

impl ServerConfig {
    /// What is wrong with the server `name` on its own; `sep` is the
    /// gateway's separator (`sep_ok`: a valid one), which its name must
    /// not contain.
    pub(crate) fn problems(&self, name: &str, sep: &str, sep_ok: bool) -> Vec<String> {
        let server = self;
        let mut out = Vec::new();
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            out.push(format!("server name `{name}` must be letters, digits, `_` or `-`"));
        }
        // Neither inside nor at the end: `a_` + `__` + `x` would read as `a` + `__` + `_x`.
        // (Only of a valid separator: ASCII, so its prefixes are whole characters.)
        let ends_in_part = sep_ok && (1..sep.len()).any(|k| name.ends_with(&sep[..k]));
        if sep_ok && (name.contains(sep) || ends_in_part) {
            out.push(format!("server name `{name}` contains or ends with part of the separator `{sep}`; exposed names would be ambiguous"));
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => {
                out.push(format!("servers.{name}: give `command` or `url`, not both"))
            }
            (None, None) => out.push(format!(
                "servers.{name}: needs `command` (stdio) or `url` (Streamable HTTP)"
            )),
            (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                out.push(format!("servers.{name}: url must start with http:// or https://"));
            }
            _ => {}
        }
        let header_sources = server.headers.len()
            + server.headers_env.len()
            + server.headers_file.len()
            + server.query_env.len()
            + server.query_file.len();
        if server.command.is_some() && header_sources > 0 {
            out.push(format!(
                "servers.{name}: headers and query parameters are sent to a `url` server; a stdio \
                    server's credentials go in `env`, `env_env` or `env_file`"
            ));
        }
        out.extend(url_problems(name, server));
        out.extend(crate::sandbox_config::problems(
            name,
            server.sandbox.as_ref(),
            server.command.is_some(),
        ));
        let mut named: Vec<String> = server
            .headers
            .keys()
            .chain(server.headers_env.keys())
            .chain(server.headers_file.keys())
            .map(|h| h.to_ascii_lowercase())
            .collect();
        out.extend(crate::identity_config::problems(
            name,
            &server.identity,
            server.url.as_deref(),
            &named.iter().map(String::as_str).collect::<Vec<_>>(),
        ));
        named.sort();
        if let Some(twice) = named.windows(2).find(|w| w[0] == w[1]) {
            out.push(format!("servers.{name}: header `{}` is given twice (in headers, headers_env or headers_file); give it once", twice[0]));
        }
        if server.url.is_some()
            && !(server.env.is_empty() && server.env_env.is_empty() && server.env_file.is_empty())
        {
            out.push(format!(
                "servers.{name}: env, env_env and env_file are for a stdio server (`command`); a \
                    `url` server's credentials go in headers"
            ));
        }
        let mut variables: Vec<&String> =
            server.env.keys().chain(server.env_env.keys()).chain(server.env_file.keys()).collect();
        variables.sort();
        if let Some(twice) = variables.windows(2).find(|w| w[0] == w[1]) {
            out.push(format!("servers.{name}: variable `{}` is given twice (in env, env_env or env_file); give it once", twice[0]));
        }
        out
    }
}

/// A server's `url` must hold no credential (it is shown: logs, `config
/// show`, the console), and its query parameters are given once.
fn url_problems(name: &str, server: &ServerConfig) -> Vec<String> {
    let mut out = Vec::new();
    let Some(url) = &server.url else { return out };
    if let Some(found) = crate::url_credentials::named(url) {
        out.push(format!(
            "servers.{name}: url holds a credential ({found}); move it to an owner-only file: a user and password as \
             `headers_file = {{ Authorization = \"FILE\" }}` holding `Basic BASE64(user:password)`, a query parameter as \
             `query_file = {{ NAME = \"FILE\" }}` (or `query_env`), and remove it from url (`toolgate import` does this for you)"
        ));
    }
    let in_url: Vec<String> = reqwest::Url::parse(url)
        .map(|u| u.query_pairs().map(|(k, _)| k.into_owned()).collect())
        .unwrap_or_default();
    let mut named: Vec<&String> =
        server.query_env.keys().chain(server.query_file.keys()).chain(in_url.iter()).collect();
    named.sort();
    if let Some(twice) = named.windows(2).find(|w| w[0] == w[1]) {
        out.push(format!("servers.{name}: query parameter `{}` is given twice (in url, query_env or query_file); give it once", twice[0]));
    }
    out
}

#[cfg(test)]
mod tests {
    use toolgate_mcp::upstream::{Transport, ValueSource};

    use crate::config::tests::parse;

    #[test]
    fn upstream_credentials_come_from_one_place_each_and_only_for_url_servers() {
        let c = parse(
            "[servers.parts]\nurl = \"http://127.0.0.1:8701/mcp\"\nheaders_env = { Authorization = \
                \"PARTS_TOKEN\" }\nheaders_file = { X-Api-Key = \"keys/parts.key\" }\n",
        )
        .unwrap();
        let Transport::Http { headers, .. } = c.servers["parts"].transport() else {
            panic!("an HTTP upstream")
        };
        assert_eq!(headers["Authorization"], ValueSource::Env("PARTS_TOKEN".into()));
        // A file resolves against the config's folder.
        assert!(
            matches!(&headers["X-Api-Key"], ValueSource::File(p) if p.is_absolute() && p.ends_with("keys/parts.key")),
            "{headers:?}"
        );
        let twice = parse(
            "[servers.parts]\nurl = \"http://127.0.0.1:8701/mcp\"\nheaders = { authorization = \
                \"Bearer x\" }\nheaders_env = { Authorization = \"PARTS_TOKEN\" }\n",
        );
        assert!(twice.unwrap_err().to_string().contains("header `authorization` is given twice"));
        let env = parse(
            "[servers.tickets]\ncommand = \"toolgate-atlas\"\nenv = { LEVEL = \"1\" }\nenv_env = { \
                TOKEN = \"TICKETS_TOKEN\" }\nenv_file = { KEY = \"keys/tickets.key\" }\n",
        )
        .unwrap();
        let Transport::Stdio { env: variables, .. } = env.servers["tickets"].transport() else {
            panic!("stdio")
        };
        assert_eq!(
            (&variables["LEVEL"], &variables["TOKEN"]),
            (&ValueSource::Value("1".into()), &ValueSource::Env("TICKETS_TOKEN".into()))
        );
        assert!(
            matches!(&variables["KEY"], ValueSource::File(p) if p.is_absolute() && p.ends_with("keys/tickets.key")),
            "{variables:?}"
        );
        let twice = parse(
            "[servers.tickets]\ncommand = \"x\"\nenv = { TOKEN = \"a\" }\nenv_env = { TOKEN = \"B\" }\n",
        );
        assert!(twice.unwrap_err().to_string().contains("variable `TOKEN` is given twice"));
        let remote = parse(
            "[servers.parts]\nurl = \"http://127.0.0.1:1/mcp\"\nenv_env = { TOKEN = \"B\" }\n",
        );
        assert!(remote.unwrap_err().to_string().contains("for a stdio server"));
        let stdio = parse(
            "[servers.tickets]\ncommand = \"toolgate-atlas\"\nheaders_env = { Authorization = \"T\" }\n",
        );
        assert!(
            stdio
                .unwrap_err()
                .to_string()
                .contains("a stdio server's credentials go in `env`, `env_env` or `env_file`")
        );
    }
}
