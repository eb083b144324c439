//! `[servers.NAME.identity]`: as whom a call reaches its server
//! (docs/IDENTITY.md), and `[identity]`: what the gateway's own assertions
//! name as their issuer.

use std::path::PathBuf;

use serde::Deserialize;

/// The longest an assertion may live: five minutes.
pub const MAX_ASSERTION_TTL_MS: u64 = 300_000;
/// The shortest: long enough to cross a slow hop.
const MIN_ASSERTION_TTL_MS: u64 = 10_000;

/// `[identity]`: the gateway as the issuer of identity assertions.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdentitySettings {
    /// The `iss` of every assertion. Default: `receipts.origin`.
    pub issuer: Option<String>,
    /// The gateway's address as people's browsers reach it (`mode =
    /// "oauth"`): consent links and the OAuth callback
    /// (`/console/connect/callback`) are under it. Default: `http(s)://` and
    /// the console's listen address.
    pub public_url: Option<String>,
    /// The owner-only file holding the 32-byte key that seals people's
    /// upstream tokens in the ledger (`mode = "oauth"`); every replica must
    /// be given the same file. Default: `STATE_DIR/identity-vault.key`,
    /// made on first use.
    pub vault_key_file: Option<PathBuf>,
}

/// How a server learns who is calling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdentityMode {
    /// The server's own configured credential (`headers`, `env`): every
    /// person reaches it as one account. The receipt says so.
    #[default]
    Shared,
    /// A short-lived JWT the gateway signs for each person, in a header
    /// (HTTP) or the request's `_meta` (stdio).
    Assertion,
    /// A token for the person from an RFC 8693 token exchange.
    Exchange,
    /// The person's own delegated OAuth grant at the server's authorization
    /// server: each person connects once, in a browser, and the gateway
    /// keeps and refreshes their tokens.
    Oauth,
}

impl IdentityMode {
    /// The word the config, receipts and the console use.
    pub fn word(self) -> &'static str {
        match self {
            IdentityMode::Shared => "shared",
            IdentityMode::Assertion => "assertion",
            IdentityMode::Exchange => "exchange",
            IdentityMode::Oauth => "oauth",
        }
    }
}

/// `[servers.NAME.identity]`.
#[derive(Debug, Clone, Default, PartialEq, schemars::JsonSchema)]
pub struct IdentityConfig {
    /// `shared` (the default), `assertion`, `exchange` or `oauth`.
    pub mode: IdentityMode,
    /// assertion: the header an HTTP server reads it from. Default
    /// `X-Toolgate-Identity`; `Authorization` sends `Bearer JWT`.
    pub header: Option<String>,
    /// Whom the credential is for (`aud`; exchange's `audience`). Default:
    /// the server's `url`, or its name for a stdio server.
    pub audience: Option<String>,
    /// assertion: how long each lives, at most 300000 (five minutes).
    pub ttl_ms: Option<u64>,
    /// exchange: the token endpoint (RFC 8693).
    pub token_endpoint: Option<String>,
    /// oauth: the server's authorization server (its issuer), for a server
    /// that publishes no protected resource metadata (RFC 9728). Default:
    /// the one the server's metadata names.
    pub authorization_server: Option<String>,
    /// exchange: the gateway's client id at the token endpoint. oauth: a
    /// client registered by hand at the server's authorization server
    /// (default: dynamic registration).
    pub client_id: Option<String>,
    /// exchange, oauth: the environment variable holding the client's secret.
    pub client_secret_env: Option<String>,
    /// exchange, oauth: the owner-only file holding the client's secret.
    pub client_secret_file: Option<PathBuf>,
    /// exchange, oauth: the `resource` (RFC 8707) to ask a token for
    /// (oauth default: the resource the server's metadata names).
    pub resource: Option<String>,
    /// exchange, oauth: the `scope` to ask for (oauth default: the scopes
    /// the server's metadata names).
    pub scope: Option<String>,
    /// exchange, oauth, for a stdio server: the environment variable the
    /// person's token goes in. Each person gets a process of their own
    /// (`GITHUB_PERSONAL_ACCESS_TOKEN`, say).
    pub env: Option<String>,
    /// With `env`: how many people's processes run at once (default 8); past
    /// it the least recently used goes.
    pub pool: Option<usize>,
    /// With `env`: a person's process unused this long is stopped (default
    /// 600000, ten minutes).
    pub idle_ms: Option<u64>,
    /// exchange: Enterprise-Managed Authorization's second hop. The exchange
    /// at `token_endpoint` (the enterprise IdP) asks for an ID-JAG for
    /// `audience` (the server's authorization server), which is then
    /// redeemed there with the JWT bearer grant (RFC 7523).
    pub id_jag: Option<IdJag>,
}

/// `[servers.NAME.identity.id_jag]`: where an ID-JAG is redeemed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdJag {
    /// The server's authorization server's token endpoint.
    pub token_endpoint: String,
    /// The gateway's client id there (the ID-JAG names it).
    pub client_id: String,
    /// The environment variable holding that client's secret.
    pub client_secret_env: Option<String>,
    /// The owner-only file holding that client's secret.
    pub client_secret_file: Option<PathBuf>,
}

/// The config as written: `mode` is read as text first, so a mode that
/// would forward the caller's own token is refused by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    #[serde(default)]
    mode: Option<String>,
    header: Option<String>,
    audience: Option<String>,
    ttl_ms: Option<u64>,
    token_endpoint: Option<String>,
    authorization_server: Option<String>,
    client_id: Option<String>,
    client_secret_env: Option<String>,
    client_secret_file: Option<PathBuf>,
    resource: Option<String>,
    scope: Option<String>,
    env: Option<String>,
    pool: Option<usize>,
    idle_ms: Option<u64>,
    id_jag: Option<IdJag>,
}

/// The words that ask for the caller's own token to go upstream.
const FORWARDING: [&str; 5] = ["forward", "passthrough", "pass_through", "pass-through", "inbound"];

impl<'de> Deserialize<'de> for IdentityConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Written::deserialize(d)?;
        let mode = match w.mode.as_deref() {
            None | Some("shared") => IdentityMode::Shared,
            Some("assertion") => IdentityMode::Assertion,
            Some("exchange") => IdentityMode::Exchange,
            Some("oauth") => IdentityMode::Oauth,
            Some(word) if FORWARDING.contains(&word.to_ascii_lowercase().as_str()) => {
                return Err(serde::de::Error::custom(format!(
                    "identity.mode `{word}` would forward the caller's own token upstream, which \
                     toolgate never does (a token made for the gateway is not the server's to \
                     hold); \
                     use mode = \"exchange\" to get the server a token for the same person, or \
                     mode = \"assertion\" for a server that trusts the gateway"
                )));
            }
            Some(other) => {
                return Err(serde::de::Error::custom(format!(
                    "identity.mode `{other}` is not one of shared, assertion, exchange, oauth"
                )));
            }
        };
        Ok(IdentityConfig {
            mode,
            header: w.header,
            audience: w.audience,
            ttl_ms: w.ttl_ms,
            token_endpoint: w.token_endpoint,
            authorization_server: w.authorization_server,
            client_id: w.client_id,
            client_secret_env: w.client_secret_env,
            client_secret_file: w.client_secret_file,
            resource: w.resource,
            scope: w.scope,
            env: w.env,
            pool: w.pool,
            idle_ms: w.idle_ms,
            id_jag: w.id_jag,
        })
    }
}

/// The header an assertion goes in by default.
pub const DEFAULT_HEADER: &str = "X-Toolgate-Identity";

impl IdentityConfig {
    /// The header an assertion goes in.
    pub fn header(&self) -> &str {
        self.header.as_deref().unwrap_or(DEFAULT_HEADER)
    }

    /// An assertion's lifetime.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms.unwrap_or(MAX_ASSERTION_TTL_MS)
    }

    /// How many people's processes run at once (`env`).
    pub fn pool(&self) -> usize {
        self.pool.unwrap_or(8)
    }

    /// How long a person's process may sit unused (`env`).
    pub fn idle_ms(&self) -> u64 {
        self.idle_ms.unwrap_or(600_000)
    }
}

/// What is wrong with server `name`'s identity; `url` is its endpoint
/// (`None` for stdio), `headers` the header names it is configured with.
pub(crate) fn problems(
    name: &str,
    identity: &IdentityConfig,
    url: Option<&str>,
    headers: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    let at = format!("servers.{name}.identity");
    let exchange_keys = [
        ("token_endpoint", identity.token_endpoint.is_some()),
        ("client_id", identity.client_id.is_some()),
        ("client_secret_env", identity.client_secret_env.is_some()),
        ("client_secret_file", identity.client_secret_file.is_some()),
        ("resource", identity.resource.is_some()),
        ("scope", identity.scope.is_some()),
    ];
    let assertion_keys =
        [("header", identity.header.is_some()), ("ttl_ms", identity.ttl_ms.is_some())];
    let oauth_keys = [("authorization_server", identity.authorization_server.is_some())];
    if identity.mode != IdentityMode::Exchange && identity.id_jag.is_some() {
        out.push(format!(
            "{at}.id_jag applies to mode = \"exchange\" only; remove it or set that mode"
        ));
    }
    if let Some(j) = &identity.id_jag {
        if !(j.token_endpoint.starts_with("https://") || j.token_endpoint.starts_with("http://")) {
            out.push(format!("{at}.id_jag.token_endpoint must start with https:// or http://"));
        }
        if j.client_secret_env.is_some() && j.client_secret_file.is_some() {
            out.push(format!(
                "{at}.id_jag: give `client_secret_env` or `client_secret_file`, not both"
            ));
        }
        if identity.audience.is_none() {
            out.push(format!("{at}: with id_jag, `audience` names the server's authorization server (its issuer), whom the ID-JAG is for"));
        }
    }
    let personal_keys = [
        ("env", identity.env.is_some()),
        ("pool", identity.pool.is_some()),
        ("idle_ms", identity.idle_ms.is_some()),
    ];
    let stray = |keys: &[(&str, bool)], mode: &str, out: &mut Vec<String>| {
        for (key, set) in keys {
            if *set {
                out.push(format!(
                    "{at}.{key} applies to mode = \"{mode}\" only; remove it or set that mode"
                ));
            }
        }
    };
    match (identity.mode, url, identity.env.as_deref()) {
        (IdentityMode::Exchange | IdentityMode::Oauth, _, Some(var)) if !(var.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) => {
            out.push(format!("{at}.env `{var}` is not an environment variable's name (letters, digits, `_`)"))
        }
        (IdentityMode::Exchange | IdentityMode::Oauth, Some(_), Some(_)) => {
            out.push(format!("{at}.env is for a stdio server (`command`); an HTTP server gets the person's token in `Authorization` (remove it)"))
        }
        (IdentityMode::Exchange | IdentityMode::Oauth, None, None) => out.push(format!(
            "{at}: a stdio server gets the person's token in its environment: set `env` to the \
                variable it reads (each person then gets a process of their own)"
        )),
        (IdentityMode::Exchange | IdentityMode::Oauth, None, Some(_)) => {
            if identity.pool() == 0 || identity.pool() > 256 {
                out.push(format!("{at}.pool must be between 1 and 256 processes"));
            }
            if identity.idle_ms() < 10_000 {
                out.push(format!("{at}.idle_ms must be at least 10000"));
            }
        }
        _ => stray(&personal_keys, "exchange\" or \"oauth", &mut out),
    }
    let sends_authorization = || headers.iter().any(|h| h.eq_ignore_ascii_case("authorization"));
    match identity.mode {
        IdentityMode::Shared => {
            stray(&oauth_keys, "oauth", &mut out);
            stray(&exchange_keys, "exchange", &mut out);
            stray(&assertion_keys, "assertion", &mut out);
            if identity.audience.is_some() {
                out.push(format!("{at}.audience names whom a person's credential is for; a shared credential has none (remove it, or set mode)"));
            }
        }
        IdentityMode::Assertion => {
            stray(&oauth_keys, "oauth", &mut out);
            stray(&exchange_keys, "exchange", &mut out);
            let header = identity.header();
            let valid = axum::http::HeaderName::from_bytes(header.as_bytes()).is_ok();
            if !valid {
                out.push(format!("{at}.header `{header}` is not a valid HTTP header name"));
            } else if headers.iter().any(|h| h.eq_ignore_ascii_case(header)) {
                out.push(format!(
                    "{at}.header `{header}` is also among the server's configured headers; the \
                        assertion goes in it alone (remove one)"
                ));
            }
            let ttl = identity.ttl_ms();
            if !(MIN_ASSERTION_TTL_MS..=MAX_ASSERTION_TTL_MS).contains(&ttl) {
                out.push(format!("{at}.ttl_ms {ttl} must be between {MIN_ASSERTION_TTL_MS} and {MAX_ASSERTION_TTL_MS} (five minutes)"));
            }
        }
        IdentityMode::Exchange => {
            stray(&oauth_keys, "oauth", &mut out);
            stray(&assertion_keys, "assertion", &mut out);
            match identity.token_endpoint.as_deref() {
                None => out.push(format!("{at}: mode = \"exchange\" needs `token_endpoint`, the RFC 8693 token endpoint to exchange at")),
                Some(u) if !(u.starts_with("https://") || u.starts_with("http://")) => out.push(format!("{at}.token_endpoint must start with https:// or http://")),
                Some(_) => {}
            }
            if identity.client_id.is_none() {
                out.push(format!("{at}: mode = \"exchange\" needs `client_id`, the gateway's client at the token endpoint"));
            }
            if identity.client_secret_env.is_some() && identity.client_secret_file.is_some() {
                out.push(format!(
                    "{at}: give `client_secret_env` or `client_secret_file`, not both"
                ));
            }
            if sends_authorization() {
                out.push(format!(
                    "servers.{name}: its `Authorization` header would stand in for the person's \
                        token; remove it (the exchanged token goes there)"
                ));
            }
        }
        IdentityMode::Oauth => {
            stray(&assertion_keys, "assertion", &mut out);
            if identity.token_endpoint.is_some() {
                out.push(format!(
                    "{at}.token_endpoint applies to mode = \"exchange\" only; oauth finds the \
                        server's authorization server from its metadata, or `authorization_server` \
                        (remove it)"
                ));
            }
            if let Some(u) = &identity.authorization_server
                && !(u.starts_with("https://") || u.starts_with("http://"))
            {
                out.push(format!("{at}.authorization_server must be the issuer's https:// URL"));
            }
            if identity.client_secret_env.is_some() && identity.client_secret_file.is_some() {
                out.push(format!(
                    "{at}: give `client_secret_env` or `client_secret_file`, not both"
                ));
            }
            if identity.client_id.is_none()
                && (identity.client_secret_env.is_some() || identity.client_secret_file.is_some())
            {
                out.push(format!("{at}: a client secret needs the `client_id` it belongs to"));
            }
            if identity.audience.is_some() {
                out.push(format!("{at}.audience applies to modes assertion and exchange; an oauth token is for the `resource` (remove it)"));
            }
            if url.is_none() && identity.authorization_server.is_none() {
                out.push(format!(
                    "{at}: a stdio server publishes no metadata to find its authorization server \
                        by: set `authorization_server` (its issuer)"
                ));
            }
            if sends_authorization() {
                out.push(format!(
                    "servers.{name}: its `Authorization` header would stand in for the person's \
                        token; remove it (the person's token goes there)"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<IdentityConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_mode_that_forwards_the_callers_token_is_refused_with_the_mode_to_use() {
        for word in ["forward", "passthrough", "Pass-Through"] {
            let e = parse(&format!("mode = \"{word}\"")).unwrap_err();
            assert!(e.contains("never does") && e.contains("mode = \"exchange\""), "{e}");
        }
        assert!(
            parse("mode = \"nobody\"")
                .unwrap_err()
                .contains("not one of shared, assertion, exchange, oauth")
        );
        assert_eq!(parse("").unwrap().mode, IdentityMode::Shared);
    }

    #[test]
    fn each_mode_names_what_it_lacks_and_what_does_not_belong() {
        let a =
            parse("mode = \"assertion\"\nttl_ms = 600000\ntoken_endpoint = \"https://x\"").unwrap();
        let p = problems("t", &a, Some("http://t/mcp"), &[]);
        assert!(p.iter().any(|m| m.contains("ttl_ms 600000")), "{p:?}");
        assert!(
            p.iter().any(|m| m.contains("token_endpoint applies to mode = \"exchange\"")),
            "{p:?}"
        );
        let clash = parse("mode = \"assertion\"\nheader = \"x-toolgate-identity\"").unwrap();
        assert!(
            problems("t", &clash, Some("http://t/mcp"), &["X-Toolgate-Identity"])
                .iter()
                .any(|m| m.contains("also among"))
        );
        let e = parse("mode = \"exchange\"").unwrap();
        let p = problems("t", &e, None, &[]);
        assert!(
            p.iter().any(|m| m.contains("needs `token_endpoint`"))
                && p.iter().any(|m| m.contains("needs `client_id`"))
                && p.iter().any(|m| m.contains("set `env`")),
            "{p:?}"
        );
        let e =
            parse("mode = \"exchange\"\ntoken_endpoint = \"https://as/token\"\nclient_id = \"gw\"")
                .unwrap();
        assert!(problems("t", &e, Some("http://t/mcp"), &[]).is_empty());
        assert!(
            problems("t", &e, Some("http://t/mcp"), &["authorization"])[0]
                .contains("`Authorization` header")
        );
        assert!(
            problems("t", &parse("mode = \"oauth\"").unwrap(), Some("http://t"), &[]).is_empty()
        );
        assert!(
            problems("t", &parse("mode = \"oauth\"").unwrap(), None, &[])
                .iter()
                .any(|m| m.contains("set `env`"))
        );
        let personal = parse(
            "mode = \"oauth\"\nenv = \"GITHUB_TOKEN\"\nauthorization_server = \"https://as\"",
        )
        .unwrap();
        assert!(
            problems("t", &personal, None, &[]).is_empty(),
            "{:?}",
            problems("t", &personal, None, &[])
        );
        assert!(problems("t", &personal, Some("http://t"), &[])[0].contains("for a stdio server"));
        assert!(
            problems(
                "t",
                &parse(
                    "mode = \"exchange\"\nenv = \"1X\"\ntoken_endpoint = \"https://x\"\nclient_id \
                        = \"c\""
                )
                .unwrap(),
                None,
                &[]
            )[0]
            .contains("not an environment variable")
        );
        assert!(
            problems("t", &parse("env = \"X\"").unwrap(), None, &[])[0]
                .contains("env applies to mode")
        );
        let o = parse(
            "mode = \"oauth\"\ntoken_endpoint = \"https://as/token\"\nclient_secret_env = \"S\"",
        )
        .unwrap();
        let p = problems("t", &o, Some("http://t"), &["Authorization"]);
        assert!(
            p.iter().any(|m| m.contains("token_endpoint applies"))
                && p.iter().any(|m| m.contains("needs the `client_id`"))
                && p.iter().any(|m| m.contains("`Authorization` header")),
            "{p:?}"
        );
        assert!(
            problems("t", &parse("audience = \"x\"").unwrap(), None, &[])[0]
                .contains("shared credential has none")
        );
        assert!(problems("t", &parse("mode = \"assertion\"").unwrap(), None, &[]).is_empty());
    }
}
