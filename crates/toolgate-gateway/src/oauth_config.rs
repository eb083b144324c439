//! `[oauth]`: the gateway as an OAuth 2.1 resource server (`oauth`): the
//! authorization server whose JWT access tokens it takes, and how their
//! claims name the caller.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[oauth]`: the gateway as an OAuth 2.1 resource server (MCP
/// authorization). A bearer token that is no `[callers]` token is checked as
/// a JWT access token of `issuer`: signed by a key of its JWKS, for this
/// `resource` (`aud`), in time; its claims and scopes name the caller.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier; tokens' `iss` must equal it.
    pub issuer: String,
    /// This gateway's resource URI (RFC 8707), e.g. `https://gw.example/mcp`:
    /// tokens' `aud` must name it; the metadata document names it.
    pub resource: String,
    /// The issuer's JWKS; default: `jwks_uri` of its metadata (RFC 8414,
    /// `/.well-known/oauth-authorization-server`, else OpenID discovery).
    pub jwks_uri: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway_s")]
    pub leeway_s: u64,
    /// Scopes every token must carry.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// The claim that names the caller (its `[callers]`-like name).
    #[serde(default = "default_caller_claim")]
    pub caller_claim: String,
    /// The claim that names the caller's tenant …
    pub tenant_claim: Option<String>,
    /// … or the tenant of every token of this issuer.
    pub tenant: Option<String>,
    /// Roles granted by scopes: `{ "toolgate:approve" = ["approver"] }`.
    #[serde(default)]
    pub scope_roles: BTreeMap<String, Vec<String>>,
    /// How long fetched keys are used before they are fetched again.
    #[serde(default = "default_jwks_ttl_s")]
    pub jwks_ttl_s: u64,
    /// A token signed by a key not in the cache fetches the keys again (a
    /// rotation), at most this often.
    #[serde(default = "default_jwks_refresh_min_ms")]
    pub jwks_refresh_min_ms: u64,
}

fn default_leeway_s() -> u64 {
    30
}
fn default_caller_claim() -> String {
    "sub".into()
}
fn default_jwks_ttl_s() -> u64 {
    600
}
fn default_jwks_refresh_min_ms() -> u64 {
    5000
}

impl OAuthConfig {
    /// What is wrong with `[oauth]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let o = self;
        let mut out = Vec::new();
        if o.tenant.is_some() == o.tenant_claim.is_some() {
            out.push("oauth: set exactly one of `tenant` (every token's tenant) and `tenant_claim` (the claim that names it)".into());
        }
        for (key, url) in [
            ("issuer", Some(&o.issuer)),
            ("resource", Some(&o.resource)),
            ("jwks_uri", o.jwks_uri.as_ref()),
        ] {
            if let Some(url) =
                url.filter(|u| !(u.starts_with("https://") || u.starts_with("http://")))
            {
                out.push(format!("oauth.{key} `{url}` must be an http(s) URL"));
            }
        }
        if o.resource.contains('#') {
            out.push("oauth.resource must not have a fragment (RFC 8707)".into());
        }
        out
    }
}
