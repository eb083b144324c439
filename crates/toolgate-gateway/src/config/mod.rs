//! The gateway's configuration: one TOML file, assembled here from its
//! sections, each defined beside the code it configures (`[gateway]` in
//! `gateway_config`, `[servers.NAME]` in `upstream_config`, the registry in
//! `catalog_config`, …) and re-exported here. This module reads the file,
//! puts the sections together and checks what spans them (a registry entry
//! names a configured server, `stdio_caller` is a configured caller, …).
//!
//! `[gateway]` holds the endpoint and limits; `[servers.NAME]` the upstreams,
//! with the fields of the ecosystem's `mcpServers` entries (`command`/`args`/
//! `env`, or `url`/`headers`) plus `trusted`; `[registry."NAME"]` the host's
//! own class for a tool, by its exposed name. `--mcp-json FILE` imports an
//! existing `mcpServers` file as untrusted servers. `[console]` is the web
//! console's (`toolgate_console::ConsoleConfig`): kept here as written and
//! not read, but for the address the console listens on (`public_url`).

pub use crate::approvals_config::ApprovalsConfig;
pub use crate::budgets_config::BudgetsConfig;
pub use crate::callers_config::{ADMIN_ROLE, APPROVER_ROLE, CallerConfig};
pub use crate::catalog_config::{ContentEntry, RegistryEntry, ResourceEntry};
pub use crate::gateway_config::GatewaySettings;
pub use crate::guards_config::{EgressConfig, GuardsConfig, PatternConfig, TrifectaConfig};
pub use crate::identity_config::{IdentityConfig, IdentityMode, IdentitySettings};
pub use crate::log_config::{LogAccess, ReceiptsConfig, WitnessConfig};
pub use crate::notify_config::{NotifyConfig, WebhookConfig, WebhookFormat};
pub use crate::oauth_config::OAuthConfig;
pub use crate::policy_config::PolicyConfig;
pub use crate::reconcile_config::ReconcileConfig;
pub use crate::runs_config::RunsConfig;
pub use crate::sandbox_config::{BoxConfig, NetworkConfig, SandboxConfig};
pub(crate) use crate::telemetry_config::LogFormat;
pub use crate::telemetry_config::TelemetryConfig;
pub use crate::tls_config::TlsConfig;
pub use crate::upstream_config::ServerConfig;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Resource URIs of a namespaced server are exposed under `toolgate://SERVER/`.
pub const URI_SCHEME: &str = "toolgate://";

/// Why a config (or an imported `mcpServers` file) cannot be used; the
/// message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file was read but is not valid: bad syntax, an unknown key, or a
    /// value (or combination) the checks refuse.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key where there is one.
        message: String,
    },
}

/// The gateway's configuration, parsed and validated (see the module docs).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[gateway]`: the downstream endpoint, its limits and timings.
    #[serde(default)]
    pub gateway: GatewaySettings,
    /// `[servers.NAME]`: the upstream MCP servers, by name.
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
    /// `[registry."SERVER{sep}TOOL"]`: the host's own word on a tool (its
    /// class and labels), by exposed name.
    #[serde(default)]
    pub registry: BTreeMap<String, RegistryEntry>,
    /// `[registry_prompts."SERVER{sep}PROMPT"]`: the host's word on a prompt, by exposed name.
    #[serde(default)]
    pub registry_prompts: BTreeMap<String, ContentEntry>,
    /// `[[registry_resources]]`: the host's word on resources, by server and
    /// URI pattern; the first entry that matches decides.
    #[serde(default)]
    pub registry_resources: Vec<ResourceEntry>,
    /// Who may call: `[callers.NAME]`, each with a token or opened anonymously.
    #[serde(default)]
    pub callers: BTreeMap<String, CallerConfig>,
    /// The Cedar policy set and its schema, when argument-level rules apply.
    pub policy: Option<PolicyConfig>,
    /// Traces, metrics and logs.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Signed receipts and the verifiable log.
    #[serde(default)]
    pub receipts: ReceiptsConfig,
    /// How a call waiting for a named human is held, and who is told.
    #[serde(default)]
    pub approvals: ApprovalsConfig,
    /// OAuth 2.1 access tokens (JWT) from one authorization server, beside
    /// the static tokens of `[callers]`.
    pub oauth: Option<OAuthConfig>,
    /// Guards in the decide stage, beside the registry and Cedar.
    #[serde(default)]
    pub guards: GuardsConfig,
    /// Agent runs: how long one lives (the trifecta and run budgets count within it).
    #[serde(default)]
    pub runs: RunsConfig,
    /// Rates per caller, calls per run, calls at once per tool.
    #[serde(default)]
    pub budgets: BudgetsConfig,
    /// `[console]`: the web console at `/console`, as written, read by the
    /// web console (`toolgate_console::ConsoleConfig`: when the config is
    /// loaded to serve and by `toolgate config check`); the gateway reads
    /// only its `listen` (`public_url`). The whole file's schema puts the
    /// console's own in its place.
    #[serde(default)]
    #[schemars(
        with = "ConsoleSection",
        description = "The web console at `/console`.",
        transform = no_default
    )]
    pub console: toml::Table,
    /// How the gateway checks the servers it reaches over `https://`.
    #[serde(default)]
    pub tls: TlsConfig,
    /// The gateway as the issuer of the identity assertions its servers
    /// receive (`[servers.NAME.identity]`).
    #[serde(default)]
    pub identity: IdentitySettings,
    /// The file this came from; relative paths resolve against its folder.
    #[serde(skip)]
    path: PathBuf,
    /// The `mcpServers` files imported beside it (`serve --mcp-json`), in
    /// order: a reload reads them again.
    #[serde(skip)]
    imported: Vec<PathBuf>,
    /// Its version: the hex SHA-256 of the file's bytes, or, with imported
    /// `mcpServers` files, of the file's hash and each file's bytes in turn.
    /// Every receipt names the version its call ran under.
    #[serde(skip)]
    version: String,
    /// The file's top-level tables a reload cannot put in force, as read:
    /// a change to one waits for a restart (`Config::reloaded`).
    #[serde(skip)]
    fixed: BTreeMap<String, toml::Value>,
    /// The checks of tables the gateway keeps but does not read (`[console]`),
    /// given by the code that reads them (`check_section`): a re-read file
    /// (a reload) is refused by them as a start is.
    #[serde(skip)]
    sections: Vec<SectionCheck>,
}

/// A check of a table another crate reads from the config.
pub type SectionCheck = fn(&Config) -> Result<(), ConfigError>;

/// The top-level tables a reload puts in force: the servers, the registry
/// and the policy. Any other table changed waits for a restart.
pub const RELOADABLE: [&str; 5] =
    ["servers", "registry", "registry_prompts", "registry_resources", "policy"];

/// `[console]` in the gateway's schema: a table, under the name of the
/// console's own definition (`ConsoleConfig`), which the schema of the
/// whole file (`toolgate config schema`) puts in its place.
struct ConsoleSection;

/// The console's defaults are its own (`ConsoleConfig`'s): the schema
/// gives none for the table as a whole (the table's own would be `{}`).
fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

impl schemars::JsonSchema for ConsoleSection {
    fn schema_name() -> Cow<'static, str> {
        "ConsoleConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object" })
    }
}

impl Config {
    /// Its version (see the field): what receipts name as `config_version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The file it came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The config as its files say now: the file it came from read again,
    /// and the `mcpServers` files it imported (what a reload applies).
    pub fn reread(&self) -> Result<Self, ConfigError> {
        let mut fresh = Self::load(&self.path)?;
        for file in &self.imported {
            fresh.import_mcp_json(file)?;
        }
        for check in &self.sections {
            fresh.check_section(*check)?;
        }
        Ok(fresh)
    }

    /// Runs `check` on a table the gateway keeps for another crate, and
    /// keeps it: every re-read of the file is checked by it too.
    pub fn check_section(&mut self, check: SectionCheck) -> Result<(), ConfigError> {
        check(self)?;
        self.sections.push(check);
        Ok(())
    }

    /// What of `fresh` (this config's files, read again) a running gateway
    /// puts in force: its servers, registry and policy, under the tables
    /// of this one that cannot change while it runs. With it, the tables
    /// whose change waits for a restart (by name, never by value). An error
    /// when the two do not make a valid config together.
    pub fn reloaded(&self, fresh: Config) -> Result<(Config, Vec<String>), String> {
        let names: std::collections::BTreeSet<&String> =
            self.fixed.keys().chain(fresh.fixed.keys()).collect();
        let waiting = names
            .into_iter()
            .filter(|k| self.fixed.get(*k) != fresh.fixed.get(*k))
            .map(|k| format!("[{k}]"))
            .collect();
        let mut merged = Config {
            servers: fresh.servers,
            registry: fresh.registry,
            registry_prompts: fresh.registry_prompts,
            registry_resources: fresh.registry_resources,
            policy: fresh.policy,
            imported: fresh.imported,
            version: fresh.version,
            ..self.clone()
        };
        merged.validate()?;
        // Boxes' homes are in the state dir in force, not a changed one's.
        merged.resolve_sandboxes()?;
        Ok((merged, waiting))
    }

    /// Reads, parses and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text` as the config file at `path` (relative
    /// paths resolve against its folder).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::parse_all(text, path).map_err(|mut all| all.remove(0))
    }

    /// `parse`, with every problem of the config's values when there are
    /// any (never an empty list), for `toolgate config check`.
    pub fn parse_all(text: &str, path: &Path) -> Result<Self, Vec<ConfigError>> {
        let invalid = |message: String| ConfigError::Invalid { path: path.into(), message };
        let mut config: Config = toml::from_str(text).map_err(|e| vec![invalid(e.to_string())])?;
        config.path = path.to_path_buf();
        config.version = toolgate_core::proposal::sha256_hex(text.as_bytes());
        if let Ok(table) = toml::from_str::<toml::Table>(text) {
            config.fixed =
                table.into_iter().filter(|(k, _)| !RELOADABLE.contains(&k.as_str())).collect();
        }
        let problems = config.problems();
        if !problems.is_empty() {
            return Err(problems.into_iter().map(invalid).collect());
        }
        let invalid = |message: String| vec![invalid(message)];
        // Header files resolve against the config's folder, as every path does.
        let dir = config.dir();
        for server in config.servers.values_mut() {
            for file in server
                .headers_file
                .values_mut()
                .chain(server.env_file.values_mut())
                .chain(server.query_file.values_mut())
            {
                *file = dir.join(&*file);
            }
        }
        config.resolve_sandboxes().map_err(invalid)?;
        config.tls.resolve(&dir).map_err(invalid)?;
        Ok(config)
    }

    /// Adds the servers of an `mcpServers` JSON file, untrusted. A name the
    /// config already has is an error, not a silent override.
    pub fn import_mcp_json(&mut self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: path.into(), message };
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        #[derive(Deserialize)]
        struct File {
            #[serde(rename = "mcpServers")]
            mcp_servers: BTreeMap<String, ImportedServer>,
        }
        #[derive(Deserialize)]
        struct ImportedServer {
            command: Option<String>,
            #[serde(default)]
            args: Vec<String>,
            #[serde(default)]
            env: BTreeMap<String, String>,
            url: Option<String>,
            #[serde(default)]
            headers: BTreeMap<String, String>,
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        let file: File = serde_json::from_str(&text)
            .map_err(|e| invalid(format!("not an mcpServers file: {e}")))?;
        self.imported.push(path.to_path_buf());
        self.version = toolgate_core::proposal::sha256_hex(
            &[self.version.as_bytes(), text.as_bytes()].concat(),
        );
        for (name, s) in file.mcp_servers {
            if self.servers.contains_key(&name) {
                return Err(invalid(format!(
                    "server `{name}` is already configured; rename one of them"
                )));
            }
            let server = ServerConfig {
                command: s.command,
                args: s.args,
                env: s.env,
                url: s.url,
                headers: s.headers,
                trusted: false,
                kind: s.kind,
                namespace: true,
                ..ServerConfig::default()
            };
            self.servers.insert(name, server);
        }
        self.validate().map_err(invalid)?;
        self.resolve_sandboxes().map_err(invalid)
    }

    /// Each stdio server's box, resolved against the config's folder and
    /// the state directory.
    fn resolve_sandboxes(&mut self) -> Result<(), String> {
        let (dir, state) = (self.dir(), self.state_dir());
        for (name, server) in &mut self.servers {
            if server.command.is_some() {
                server.boxed = Some(crate::sandbox_config::resolve(
                    name,
                    server.sandbox.as_ref(),
                    &dir,
                    &state,
                )?);
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), String> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem of the config's values, in the order a reader meets
    /// them (`toolgate config check` shows them all; a start refuses on the
    /// first).
    pub fn problems(&self) -> Vec<String> {
        let mut out = crate::callers_config::problems(&self.callers);
        if let Some(name) = &self.gateway.stdio_caller
            && !self.callers.contains_key(name)
        {
            out.push(format!("gateway.stdio_caller `{name}` is not a `[callers.{name}]` entry"));
        }
        out.extend(self.telemetry.problems());
        out.extend(self.tls.problems());
        out.extend(self.gateway.problems());
        let sep = &self.gateway.separator;
        let sep_ok = self.gateway.separator_ok();
        for (name, server) in &self.servers {
            out.extend(server.problems(name, sep, sep_ok));
        }
        out.extend(self.guards.problems());
        out.extend(self.runs.problems());
        out.extend(self.budgets.problems(sep, |name| self.split_exposed(name).is_some()));
        out.extend(self.approvals.problems(self.gateway.approval_ttl_ms));
        if self.servers.values().any(|s| !s.namespace) && self.servers.len() > 1 {
            out.push("`namespace = false` is only allowed when the gateway fronts exactly one server (names could collide)".into());
        }
        for name in self.registry.keys() {
            if self.split_exposed(name).is_none() {
                out.push(format!(
                    "registry entry `{name}` names no configured server; registry keys are exposed names `SERVER{sep}TOOL`"
                ));
            }
        }
        if let Some(o) = &self.oauth {
            out.extend(o.problems());
        }
        for (name, entry) in &self.registry_prompts {
            if self.split_exposed(name).is_none() {
                out.push(format!("registry_prompts entry `{name}` names no configured server; keys are exposed names `SERVER{sep}PROMPT`"));
            }
            out.extend(
                crate::catalog_config::reads_only(
                    format!("registry_prompts entry `{name}`"),
                    entry.class,
                )
                .err(),
            );
        }
        for (i, entry) in self.registry_resources.iter().enumerate() {
            if !self.servers.contains_key(&entry.server) {
                out.push(format!(
                    "registry_resources entry {} names server `{}`, which is not configured",
                    i + 1,
                    entry.server
                ));
            }
            out.extend(
                crate::catalog_config::reads_only(
                    format!("registry_resources entry {} (`{}`)", i + 1, entry.uri),
                    entry.class,
                )
                .err(),
            );
        }
        out
    }

    /// A resource URI (or template) as agents see it: `toolgate://SERVER/URI`,
    /// or the upstream's own for a server with `namespace = false`. The
    /// server's URI follows the prefix verbatim, so a template stays a
    /// template and a read routes back by the prefix alone.
    pub(crate) fn exposed_uri(&self, server: &str, uri: &str) -> String {
        match self.servers.get(server) {
            Some(s) if !s.namespace => uri.to_string(),
            _ => format!("{URI_SCHEME}{server}/{uri}"),
        }
    }

    /// The configured server and its own URI an exposed URI refers to.
    pub fn split_uri<'a>(&'a self, exposed: &'a str) -> Option<(&'a str, &'a str)> {
        if let Some((name, _)) = self.servers.iter().find(|(_, s)| !s.namespace) {
            return Some((name.as_str(), exposed));
        }
        exposed
            .strip_prefix(URI_SCHEME)?
            .split_once('/')
            .filter(|(s, _)| self.servers.contains_key(*s))
    }

    /// `SERVER{sep}TOOL`, or `TOOL` for a server with `namespace = false`.
    pub(crate) fn exposed_name(&self, server: &str, tool: &str) -> String {
        match self.servers.get(server) {
            Some(s) if !s.namespace => tool.to_string(),
            _ => format!("{server}{}{tool}", self.gateway.separator),
        }
    }

    /// The configured server and tool an exposed name refers to: split at the
    /// first separator (server names never contain it), or the one
    /// unprefixed server.
    pub fn split_exposed<'a>(&'a self, exposed: &'a str) -> Option<(&'a str, &'a str)> {
        if let Some((name, _)) = self.servers.iter().find(|(_, s)| !s.namespace) {
            return Some((name.as_str(), exposed));
        }
        exposed
            .split_once(self.gateway.separator.as_str())
            .filter(|(s, _)| self.servers.contains_key(*s))
    }

    fn dir(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    /// The state dir (`gateway.state_dir`), relative to the config file's folder.
    pub fn state_dir(&self) -> PathBuf {
        self.dir().join(&self.gateway.state_dir)
    }

    /// A path from the config, relative to the config file's folder.
    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        self.dir().join(path)
    }

    /// The ledger: `gateway.ledger`, or the embedded SQLite file.
    pub fn ledger_location(&self) -> String {
        match &self.gateway.ledger {
            Some(url) => url.clone(),
            None => self.state_dir().join("ledger.sqlite3").to_string_lossy().into_owned(),
        }
    }

    /// The ledger's location fit for logs and errors: a URL's password (in
    /// its user info or a `password=` parameter) is masked.
    pub fn ledger_display(&self) -> String {
        let location = self.ledger_location();
        let Some(scheme) = location.find("://") else { return location };
        let (head, query) =
            location.split_once('?').map_or((location.as_str(), None), |(h, q)| (h, Some(q)));
        let mut out = match head.rfind('@') {
            Some(at) if at > scheme => {
                let userinfo = &head[scheme + 3..at];
                let user = userinfo.split(':').next().unwrap_or_default();
                format!(
                    "{}{user}{}@{}",
                    &head[..scheme + 3],
                    if userinfo.contains(':') { ":***" } else { "" },
                    &head[at + 1..]
                )
            }
            _ => head.to_string(),
        };
        if let Some(query) = query {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            out = format!("{out}?{}", params.join("&"));
        }
        out
    }

    /// The gateway's address as people's browsers reach it (`[identity]
    /// public_url`, else the console's listen address), without a trailing `/`.
    pub fn public_url(&self) -> String {
        match &self.identity.public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => {
                let scheme = if self.tls.cert_file.is_some() { "https" } else { "http" };
                // `[console] listen`: the one key of the console's table the
                // gateway's own address needs (the console reads, and
                // refuses, the table as a whole).
                let console = self
                    .console
                    .get("listen")
                    .and_then(toml::Value::as_str)
                    .and_then(|a| a.parse::<SocketAddr>().ok());
                format!("{scheme}://{}", console.unwrap_or(self.gateway.listen))
            }
        }
    }

    /// The `iss` of the gateway's identity assertions.
    pub fn issuer(&self) -> &str {
        self.identity.issuer.as_deref().unwrap_or(&self.receipts.origin)
    }

    /// The deadline of one call to `server`.
    pub(crate) fn timeout_ms(&self, server: &str) -> u64 {
        self.servers
            .get(server)
            .and_then(|s| s.timeout_ms)
            .unwrap_or(self.gateway.upstream_timeout_ms)
    }

    /// The pin lock file: `gateway.lock_file`, else beside the config
    /// (`toolgate.toml` → `toolgate.lock`).
    pub fn lock_path(&self) -> PathBuf {
        if let Some(file) = &self.gateway.lock_file {
            return self.dir().join(file);
        }
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "toolgate".into());
        self.dir().join(format!("{stem}.lock"))
    }
}

#[cfg(test)]
pub(crate) mod tests;
