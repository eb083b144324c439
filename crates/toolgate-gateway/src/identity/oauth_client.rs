//! `mode = "oauth"`, its protocol: toolgate as an OAuth 2.1 client of an
//! upstream MCP server's own authorization server, on behalf of each person.
//! Pure protocol over a `reqwest::Client`; where the flow's state, the
//! tokens and the callback live is for the callers.
//!
//! - [`discover`]: the server's 401 names its protected resource metadata
//!   (RFC 9728), else the well-known URL does; that names the authorization
//!   server, whose metadata (RFC 8414, else OpenID discovery) must be its own
//!   (`issuer`: the mix-up defense) and must offer PKCE S256.
//! - Who toolgate is there: a Client ID Metadata Document's URL
//!   ([`Client::metadata_document`]), else dynamic registration
//!   ([`register`], RFC 7591), else a configured id and secret
//!   ([`Client::configured`]).
//! - The flow: [`Pkce`], [`authorization_url`] (with `resource`, RFC 8707),
//!   [`callback`], [`redeem`]; then [`refresh`] and [`revoke`] (RFC 7009).
//!
//! Every answer is hostile: read within 64 KiB, never followed on redirect,
//! quoted in a message only tamed. Tokens, client secrets, codes and PKCE
//! verifiers are in no message and no `Debug`. The `http` client given
//! should follow no redirects (`redirect::Policy::none()`); an answer that
//! came from elsewhere is refused all the same.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolgate_core::Entropy;

use super::endpoint::{self, ClientAuth, tame};

/// The JSON-RPC request whose 401 starts discovery.
const PROBE_VERSION: &str = "2025-11-25";

// ---------------------------------------------------------------------------
// Discovery

/// What [`discover`] learned of a server and its authorization server.
/// Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovered {
    /// The protected resource (RFC 9728 `resource`): what tokens are asked
    /// for (`resource`, RFC 8707) and whom they are for.
    pub resource: String,
    /// The scopes to ask for: the 401's `scope`, else the metadata's
    /// `scopes_supported` (empty: ask for none, the server's default).
    pub scopes: Vec<String>,
    /// The authorization server's `issuer`, as its metadata says it.
    pub issuer: String,
    /// Where the person consents.
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are redeemed.
    pub token_endpoint: String,
    /// Dynamic client registration (RFC 7591), if offered.
    pub registration_endpoint: Option<String>,
    /// Token revocation (RFC 7009), if offered.
    pub revocation_endpoint: Option<String>,
    /// `token_endpoint_auth_methods_supported` (empty: RFC 8414's default,
    /// `client_secret_basic`).
    pub token_endpoint_auth_methods: Vec<String>,
    /// Whether a Client ID Metadata Document's URL may be the client id.
    pub client_id_metadata_document_supported: bool,
    /// Whether the callback carries `iss` (RFC 9207): then it must.
    pub iss_parameter_supported: bool,
}

impl Discovered {
    /// The `scope` to ask for, space-separated; `None` when there is none.
    pub fn scope(&self) -> Option<String> {
        (!self.scopes.is_empty()).then(|| self.scopes.join(" "))
    }
}

/// Finds how `server_url` (an MCP endpoint) wants its callers authorized:
/// an unauthenticated `initialize` whose 401 names the resource metadata
/// (else the well-known URLs), then its authorization server's metadata.
/// An error says what was missing or refused.
pub async fn discover(http: &reqwest::Client, server_url: &str) -> Result<Discovered, String> {
    let server = Url::parse(server_url).map_err(|_| "the server's url is not a URL".to_string())?;
    let challenge = probe(http, &server).await?;
    let document = match challenge.as_ref().and_then(|c| c.param("resource_metadata")) {
        Some(named) => {
            let url = secure_url(named, "the 401's resource_metadata")?;
            get_json(http, &url, "the protected resource metadata").await?
        }
        None => {
            first_json(http, &resource_metadata_urls(&server), "the protected resource metadata")
                .await?
        }
    };
    let resource = resource_metadata(&server, &document)?;
    // The first authorization server the resource names: its own order of preference.
    let issuer = &resource.authorization_servers[0];
    let urls = server_metadata_urls(&secure_url(issuer, "the authorization server")?);
    let server_meta = server_metadata(
        issuer,
        &first_json(http, &urls, "the authorization server's metadata").await?,
    )?;
    let scopes = match challenge.as_ref().and_then(|c| c.param("scope")) {
        Some(scope) => scope.split_whitespace().map(String::from).collect(),
        None => resource.scopes_supported,
    };
    Ok(Discovered { resource: resource.resource, scopes, ..server_meta })
}

/// What a server that publishes no metadata of its own is configured with:
/// its authorization server (`issuer`), whose metadata is read, and the
/// `resource` tokens are asked for.
pub async fn authorization_server(
    http: &reqwest::Client,
    issuer: &str,
    resource: &str,
) -> Result<Discovered, String> {
    let urls = server_metadata_urls(&secure_url(issuer, "the authorization server")?);
    let server_meta = server_metadata(
        issuer,
        &first_json(http, &urls, "the authorization server's metadata").await?,
    )?;
    Ok(Discovered { resource: resource.to_string(), scopes: Vec::new(), ..server_meta })
}

/// The server's `Bearer` challenge to an unauthenticated `initialize`, if it
/// answered 401 with one.
async fn probe(http: &reqwest::Client, server: &Url) -> Result<Option<Challenge>, String> {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROBE_VERSION, "capabilities": {}, "clientInfo": {"name": "toolgate", "version": env!("CARGO_PKG_VERSION")}}});
    let response = http
        .post(server.clone())
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .map_err(|e| format!("the server could not be reached ({})", endpoint::without_url(e)))?;
    if response.status() != StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    let values = response
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>();
    Ok(challenges(values).into_iter().find(|c| c.scheme == "bearer"))
}

/// RFC 9728 §3.1: the well-known URL with the resource's path after it,
/// then at the origin's root.
fn resource_metadata_urls(server: &Url) -> Vec<String> {
    well_known(server, "oauth-protected-resource", false)
}

/// RFC 8414 §3.1 with the path inserted, then OpenID discovery inserted and
/// appended (the order MCP clients use).
fn server_metadata_urls(issuer: &Url) -> Vec<String> {
    let mut urls = well_known(issuer, "oauth-authorization-server", false);
    urls.truncate(1);
    urls.extend(well_known(issuer, "openid-configuration", true));
    urls
}

/// `{origin}/.well-known/{name}{path}` and then, for a URL with a path,
/// `{origin}/.well-known/{name}` — or `{origin}{path}/.well-known/{name}`
/// with `appended` (OpenID Connect Discovery §4).
fn well_known(url: &Url, name: &str, appended: bool) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    if path.is_empty() {
        return vec![format!("{origin}/.well-known/{name}")];
    }
    let second = if appended {
        format!("{origin}{path}/.well-known/{name}")
    } else {
        format!("{origin}/.well-known/{name}")
    };
    vec![format!("{origin}/.well-known/{name}{path}"), second]
}

/// The first of `urls` that answers a JSON object; an error lists why each did not.
async fn first_json(
    http: &reqwest::Client,
    urls: &[String],
    what: &str,
) -> Result<Map<String, Value>, String> {
    let mut missed = Vec::new();
    for url in urls {
        let parsed = Url::parse(url).map_err(|_| format!("{what}: {} is not a URL", tame(url)))?;
        match get_json(http, &parsed, what).await {
            Ok(document) => return Ok(document),
            Err(why) => missed.push(format!("{}: {why}", tame(url))),
        }
    }
    Err(format!("{what} was not found ({})", missed.join("; ")))
}

/// GET `url`: a JSON object, or why not.
async fn get_json(
    http: &reqwest::Client,
    url: &Url,
    what: &str,
) -> Result<Map<String, Value>, String> {
    let (status, body) =
        endpoint::send(http.get(url.clone()).header("accept", "application/json"), what).await?;
    if status != StatusCode::OK {
        return Err(format!("{what}: HTTP {status}"));
    }
    match serde_json::from_slice(&body) {
        Ok(Value::Object(document)) => Ok(document),
        _ => Err(format!("{what}: not a JSON object")),
    }
}

/// What toolgate uses of RFC 9728 protected resource metadata.
struct ResourceMetadata {
    resource: String,
    authorization_servers: Vec<String>,
    scopes_supported: Vec<String>,
}

/// Checks the metadata of the resource at `server`: it names a resource
/// that covers `server` (RFC 9728 §3.3: metadata for another resource
/// must not be used), and an authorization server.
fn resource_metadata(
    server: &Url,
    document: &Map<String, Value>,
) -> Result<ResourceMetadata, String> {
    let resource = string(document, "resource")
        .ok_or("the protected resource metadata names no `resource`")?;
    let parsed = Url::parse(&resource)
        .map_err(|_| "the protected resource metadata's `resource` is not a URL".to_string())?;
    if !covers(&parsed, server) {
        return Err(format!(
            "the protected resource metadata is for {}, not for this server (RFC 9728 §3.3): it is not used",
            tame(&resource)
        ));
    }
    let authorization_servers = strings(document, "authorization_servers");
    if authorization_servers.is_empty() {
        return Err("the protected resource metadata names no `authorization_servers`: the server does not say who authorizes its callers".into());
    }
    Ok(ResourceMetadata {
        resource,
        authorization_servers,
        scopes_supported: strings(document, "scopes_supported"),
    })
}

/// Whether `resource` is `server` or above it: the same origin, and a
/// path that is the server's or one of its parents.
fn covers(resource: &Url, server: &Url) -> bool {
    let (above, below) =
        (resource.path().trim_end_matches('/'), server.path().trim_end_matches('/'));
    resource.origin() == server.origin()
        && (below == above || below.starts_with(&format!("{above}/")))
}

/// Checks the authorization server metadata fetched for `issuer` and
/// keeps what the flow needs. Refused: metadata of another issuer (a
/// mix-up), no PKCE S256, no code flow, endpoints that are not https.
fn server_metadata(issuer: &str, document: &Map<String, Value>) -> Result<Discovered, String> {
    let said = string(document, "issuer")
        .ok_or("the authorization server's metadata names no `issuer`")?;
    if Url::parse(&said).ok() != Url::parse(issuer).ok() {
        return Err(format!(
            "the authorization server's metadata is for the issuer {}, not {} (RFC 8414 §3.3): refused, as a mix-up",
            tame(&said),
            tame(issuer)
        ));
    }
    if !strings(document, "code_challenge_methods_supported").iter().any(|m| m == "S256") {
        return Err("the authorization server does not offer PKCE with S256 \
            (`code_challenge_methods_supported`): toolgate runs no authorization without it; ask \
            its operator to enable PKCE, or use mode \"exchange\""
            .into());
    }
    offers(document, "response_types_supported", "code")?;
    offers(document, "grant_types_supported", "authorization_code")?;
    let endpoint = |name: &str| {
        string(document, name)
            .map(|url| secure_url(&url, &format!("the metadata's {name}")).map(|u| u.to_string()))
            .transpose()
    };
    Ok(Discovered {
        resource: String::new(),
        scopes: Vec::new(),
        issuer: said,
        authorization_endpoint: endpoint("authorization_endpoint")?
            .ok_or("the authorization server's metadata names no authorization_endpoint")?,
        token_endpoint: endpoint("token_endpoint")?
            .ok_or("the authorization server's metadata names no token_endpoint")?,
        registration_endpoint: endpoint("registration_endpoint")?,
        revocation_endpoint: endpoint("revocation_endpoint")?,
        token_endpoint_auth_methods: strings(document, "token_endpoint_auth_methods_supported"),
        client_id_metadata_document_supported: document
            .get("client_id_metadata_document_supported")
            == Some(&Value::Bool(true)),
        iss_parameter_supported: document.get("authorization_response_iss_parameter_supported")
            == Some(&Value::Bool(true)),
    })
}

/// A metadata list that is there must hold `value`; one that is not, is
/// taken to (its RFC 8414 default does, or the server would not be OAuth).
fn offers(document: &Map<String, Value>, list: &str, value: &str) -> Result<(), String> {
    match document.get(list) {
        Some(_) if !strings(document, list).iter().any(|v| v == value) => Err(format!(
            "the authorization server does not offer `{value}` ({list}): toolgate's flow needs it"
        )),
        _ => Ok(()),
    }
}

/// An endpoint's URL: https, or http on a loopback host only (OAuth 2.1
/// §1.5), and no fragment.
fn secure_url(url: &str, what: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|_| format!("{what} ({}) is not a URL", tame(url)))?;
    let host = parsed.host_str().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
    let loopback = host.eq_ignore_ascii_case("localhost") || ip.is_ok_and(|ip| ip.is_loopback());
    let secure = parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback);
    if !secure || parsed.fragment().is_some() {
        return Err(format!(
            "{what} ({}) is not an https URL without a fragment (plain http is for loopback only)",
            tame(url)
        ));
    }
    Ok(parsed)
}

/// A string member.
fn string(document: &Map<String, Value>, name: &str) -> Option<String> {
    document.get(name).and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from)
}

/// The strings of an array member (anything else in it is ignored).
fn strings(document: &Map<String, Value>, name: &str) -> Vec<String> {
    document
        .get(name)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// WWW-Authenticate (RFC 9110 §11.6.1)

/// One challenge of a `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The auth scheme, lower-cased (`bearer`).
    pub scheme: String,
    /// Its parameters: names lower-cased, values unquoted.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// The value of the parameter `name` (lower-case), the first if repeated.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Every challenge in `values` (one header line each; a line may hold
/// several challenges, a challenge several parameters, a value a quoted
/// string with commas and escapes). What does not parse is skipped.
pub fn challenges<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Challenge> {
    let mut out = Vec::new();
    for value in values {
        Cursor { s: value.as_bytes(), i: 0 }.challenges(&mut out);
    }
    out
}

/// A position in one header value.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 9110 `token68`, but its trailing `=`s.
fn is_token68(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// Consumes the bytes `keep` accepts; how many.
    fn skip(&mut self, keep: impl Fn(u8) -> bool) -> usize {
        let start = self.i;
        while self.peek().is_some_and(&keep) {
            self.i += 1;
        }
        self.i - start
    }

    fn take(&mut self, keep: impl Fn(u8) -> bool) -> String {
        let start = self.i;
        self.skip(keep);
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn challenges(&mut self, out: &mut Vec<Challenge>) {
        loop {
            self.skip(|b| is_space(b) || b == b',');
            if self.peek().is_none() {
                return;
            }
            let scheme = self.take(is_tchar);
            if scheme.is_empty() {
                self.i += 1; // not a challenge: step over the byte
                continue;
            }
            let mut challenge =
                Challenge { scheme: scheme.to_ascii_lowercase(), params: Vec::new() };
            if self.skip(is_space) > 0 {
                self.params(&mut challenge);
            }
            out.push(challenge);
        }
    }

    /// `#auth-param`, or else a `token68`. A parameter list ends where
    /// what follows a comma is not `name=value`: the next challenge.
    fn params(&mut self, challenge: &mut Challenge) {
        match self.param() {
            Some(p) => challenge.params.push(p),
            None => {
                self.skip(is_token68);
                self.skip(|b| b == b'=');
                return;
            }
        }
        loop {
            let before = self.i;
            self.skip(|b| is_space(b) || b == b',');
            match self.param() {
                Some(p) => challenge.params.push(p),
                None => {
                    self.i = before;
                    return;
                }
            }
        }
    }

    /// `token BWS "=" BWS ( token / quoted-string )`, ending at a comma or
    /// the end; nothing consumed when it is not one.
    fn param(&mut self) -> Option<(String, String)> {
        let start = self.i;
        let name = self.take(is_tchar);
        self.skip(is_space);
        let value = if !name.is_empty() && self.peek() == Some(b'=') {
            self.i += 1;
            self.skip(is_space);
            if self.peek() == Some(b'"') {
                self.quoted()
            } else {
                Some(self.take(is_tchar)).filter(|v| !v.is_empty())
            }
        } else {
            None
        };
        self.skip(is_space);
        match value {
            Some(value) if matches!(self.peek(), None | Some(b',')) => {
                Some((name.to_ascii_lowercase(), value))
            }
            _ => {
                self.i = start;
                None
            }
        }
    }

    /// A quoted string, the cursor on its opening quote; `None` unterminated.
    fn quoted(&mut self) -> Option<String> {
        self.i += 1;
        let mut out = Vec::new();
        while let Some(b) = self.peek() {
            self.i += 1;
            match b {
                b'"' => return Some(String::from_utf8_lossy(&out).into_owned()),
                b'\\' => out.extend(self.peek().inspect(|_| self.i += 1)),
                _ => out.push(b),
            }
        }
        None
    }
}

// ---------------------------------------------------------------------------
// Client identity

/// How a client proves itself at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    /// HTTP Basic with the id and secret.
    ClientSecretBasic,
    /// The id and secret in the form.
    ClientSecretPost,
    /// A public client: no secret, PKCE only.
    None,
}

impl AuthMethod {
    /// Its RFC 7591 name.
    pub fn word(self) -> &'static str {
        match self {
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::None => "none",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        [Self::ClientSecretBasic, Self::ClientSecretPost, Self::None]
            .into_iter()
            .find(|m| m.word() == word)
    }
}

/// Who toolgate is at an authorization server. Serializable (a registered
/// client is kept); its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// `client_id`.
    pub client_id: String,
    /// `client_secret`, for a confidential client.
    pub client_secret: Option<String>,
    /// How it authenticates.
    pub auth: AuthMethod,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("auth", &self.auth)
            .finish()
    }
}

impl Client {
    /// A client registered by hand: `id` and, for a confidential one, its
    /// `secret`, sent the way the server takes (Basic first, RFC 8414's
    /// default).
    pub fn configured(id: &str, secret: Option<&str>, d: &Discovered) -> Result<Self, String> {
        let auth = match secret {
            None => AuthMethod::None,
            Some(_) => confidential(&d.token_endpoint_auth_methods).ok_or(
                "the authorization server takes neither client_secret_basic nor \
                    client_secret_post: a client secret cannot be used there",
            )?,
        };
        Ok(Self { client_id: id.into(), client_secret: secret.map(String::from), auth })
    }

    /// A Client ID Metadata Document client: the document's https URL is
    /// the client id (public, no registration), where the server says it
    /// takes one.
    pub fn metadata_document(url: &str, d: &Discovered) -> Result<Self, String> {
        if !d.client_id_metadata_document_supported {
            return Err("the authorization server does not take a Client ID Metadata Document \
                (client_id_metadata_document_supported): register, or configure a client id"
                .into());
        }
        let parsed = Url::parse(url)
            .map_err(|_| "the client metadata document's URL is not a URL".to_string())?;
        if parsed.scheme() != "https" || parsed.path() == "/" || parsed.fragment().is_some() {
            return Err(
                "a Client ID Metadata Document's URL is https, with a path and no fragment".into(),
            );
        }
        Ok(Self { client_id: url.into(), client_secret: None, auth: AuthMethod::None })
    }

    fn auth(&self) -> ClientAuth<'_> {
        match (self.auth, self.client_secret.as_deref()) {
            (AuthMethod::ClientSecretBasic, Some(secret)) => {
                ClientAuth::Basic { id: &self.client_id, secret }
            }
            (AuthMethod::ClientSecretPost, Some(secret)) => {
                ClientAuth::Post { id: &self.client_id, secret }
            }
            _ => ClientAuth::Public { id: &self.client_id },
        }
    }
}

/// The confidential method the server offers: Basic, then post. None
/// listed means RFC 8414's default, Basic.
fn confidential(offered: &[String]) -> Option<AuthMethod> {
    if offered.is_empty() {
        return Some(AuthMethod::ClientSecretBasic);
    }
    [AuthMethod::ClientSecretBasic, AuthMethod::ClientSecretPost]
        .into_iter()
        .find(|m| offered.iter().any(|o| o == m.word()))
}

/// Registers toolgate at the authorization server (RFC 7591) with one
/// `redirect_uri`. It asks to be a confidential client where the server
/// offers one (the gateway keeps secrets), else a public one with PKCE.
pub async fn register(
    http: &reqwest::Client,
    d: &Discovered,
    redirect_uri: &str,
    client_name: &str,
) -> Result<Client, String> {
    let endpoint = d.registration_endpoint.as_deref().ok_or(
        "the authorization server offers no dynamic registration (RFC 7591): configure a client id \
            (and secret) registered there by hand",
    )?;
    let asked = confidential(&d.token_endpoint_auth_methods).unwrap_or(AuthMethod::None);
    let mut body = json!({
        "redirect_uris": [redirect_uri],
        "client_name": client_name,
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": asked.word(),
    });
    if let Some(scope) = d.scope() {
        body["scope"] = Value::String(scope);
    }
    let request = http.post(endpoint).header("accept", "application/json").json(&body);
    let (status, answer) = endpoint::send(request, "the registration endpoint").await?;
    registered(status, &answer, asked)
}

/// The client an RFC 7591 answer describes (`asked`: the method asked for,
/// when the answer does not say).
fn registered(status: StatusCode, body: &[u8], asked: AuthMethod) -> Result<Client, String> {
    let document = match serde_json::from_slice(body) {
        Ok(Value::Object(document)) => document,
        _ => return Err(format!("the registration endpoint answered HTTP {status}, not JSON")),
    };
    let Some(client_id) = string(&document, "client_id").filter(|_| status.is_success()) else {
        return Err(format!(
            "the registration endpoint refused ({})",
            refusal_of(status, &document)
        ));
    };
    let auth = match document.get("token_endpoint_auth_method").and_then(Value::as_str) {
        None => asked,
        Some(word) => AuthMethod::parse(word).ok_or_else(|| {
            format!(
                "the registration endpoint made a client that authenticates by {}, which toolgate \
                    does not do",
                tame(word)
            )
        })?,
    };
    let client_secret = string(&document, "client_secret");
    if auth != AuthMethod::None && client_secret.is_none() {
        return Err(format!(
            "the registration endpoint made a {} client but gave no client_secret",
            auth.word()
        ));
    }
    Ok(Client { client_id, client_secret, auth })
}

/// What an endpoint's JSON refusal says.
fn refusal_of(status: StatusCode, document: &Map<String, Value>) -> String {
    endpoint::refusal(
        status,
        document.get("error").and_then(Value::as_str),
        document.get("error_description").and_then(Value::as_str),
    )
}

// ---------------------------------------------------------------------------
// The authorization code flow

/// A PKCE pair (RFC 7636): the verifier stays with toolgate until the code
/// is redeemed, the S256 challenge goes in the authorization URL.
/// Serialized as its verifier alone; its `Debug` shows the challenge only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pkce {
    verifier: String,
    challenge: String,
}

impl Pkce {
    /// A fresh pair: 32 random bytes, base64url, make a 43-character verifier.
    pub fn new(entropy: &dyn Entropy) -> Self {
        Self::of(B64.encode(entropy.bytes32()))
    }

    /// The pair of a kept `verifier`: 43 to 128 characters of
    /// `[A-Za-z0-9-._~]` (RFC 7636 §4.1).
    pub fn from_verifier(verifier: &str) -> Result<Self, String> {
        let unreserved =
            verifier.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
        if !(43..=128).contains(&verifier.len()) || !unreserved {
            return Err("a PKCE verifier is 43 to 128 characters of A-Z a-z 0-9 - . _ ~".into());
        }
        Ok(Self::of(verifier.to_string()))
    }

    fn of(verifier: String) -> Self {
        let challenge = B64.encode(Sha256::digest(verifier.as_bytes()));
        Self { verifier, challenge }
    }

    /// The verifier: a secret until the code is redeemed.
    pub fn verifier(&self) -> &str {
        &self.verifier
    }

    /// `BASE64URL(SHA256(verifier))`, the `code_challenge`.
    pub fn challenge(&self) -> &str {
        &self.challenge
    }
}

impl TryFrom<String> for Pkce {
    type Error = String;
    fn try_from(verifier: String) -> Result<Self, String> {
        Self::from_verifier(&verifier)
    }
}

impl From<Pkce> for String {
    fn from(pkce: Pkce) -> String {
        pkce.verifier
    }
}

impl fmt::Debug for Pkce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pkce").field("challenge", &self.challenge).finish_non_exhaustive()
    }
}

/// Where the person is sent to consent: the code flow with PKCE S256 and
/// `resource` (RFC 8707); `scope` only when there is one. The endpoint's
/// own query, if any, is kept.
pub fn authorization_url(
    d: &Discovered,
    client: &Client,
    redirect_uri: &str,
    resource: &str,
    scope: Option<&str>,
    state: &str,
    pkce: &Pkce,
) -> String {
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client.client_id.as_str()),
        ("redirect_uri", redirect_uri),
        ("state", state),
        ("code_challenge", pkce.challenge()),
        ("code_challenge_method", "S256"),
        ("resource", resource),
    ];
    pairs.extend(scope.map(|s| ("scope", s)));
    let separator = if d.authorization_endpoint.contains('?') { '&' } else { '?' };
    format!("{}{separator}{}", d.authorization_endpoint, endpoint::urlencoded(&pairs))
}

/// What the authorization server sent back to the callback. Its `Debug`
/// never shows the code.
#[derive(Clone, PartialEq, Eq)]
pub struct Callback {
    /// The authorization code, to [`redeem`].
    pub code: String,
    /// The `state`, for the caller to match (single use) against the one it sent.
    pub state: String,
}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callback").field("state", &self.state).finish_non_exhaustive()
    }
}

/// Reads the callback's `query`: the code and state, or the refusal it
/// carries. An `iss` (RFC 9207) must be the discovered issuer, and must be
/// there when the server says it sends one: a response from another
/// server is a mix-up.
pub fn callback(d: &Discovered, query: &str) -> Result<Callback, String> {
    let mut url = Url::parse("http://callback.invalid/").expect("a URL");
    url.set_query(Some(query));
    let mut seen: Vec<(String, String)> = Vec::new();
    for (name, value) in url.query_pairs() {
        if seen.iter().any(|(n, _)| *n == name) {
            return Err(format!("the callback carries `{}` twice", tame(&name)));
        }
        seen.push((name.into_owned(), value.into_owned()));
    }
    let get = |name: &str| seen.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    match get("iss") {
        Some(iss) if iss != d.issuer => {
            return Err(format!(
                "the callback comes from the issuer {}, not {} (RFC 9207): refused, as a mix-up",
                tame(iss),
                tame(&d.issuer)
            ));
        }
        None if d.iss_parameter_supported => {
            return Err("the callback carries no `iss` though the authorization server sends one \
                (RFC 9207): refused"
                .into());
        }
        _ => {}
    }
    if let Some(error) = get("error") {
        let description =
            get("error_description").map(|d| format!(": {}", tame(d))).unwrap_or_default();
        return Err(format!("the authorization server refused ({}{description})", tame(error)));
    }
    match (get("code"), get("state")) {
        (Some(code), Some(state)) if !code.is_empty() => {
            Ok(Callback { code: code.into(), state: state.into() })
        }
        _ => Err("the callback carries no code and state".into()),
    }
}

// ---------------------------------------------------------------------------
// Tokens

/// A person's tokens at one server. Serializable (it is sealed into the
/// ledger); its `Debug` never shows a token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSet {
    /// The access token, sent as `Authorization: Bearer`.
    pub access_token: String,
    /// The refresh token, if one was given.
    pub refresh_token: Option<String>,
    /// When the access token expires (ms since the epoch), if the server said.
    pub expires_at_ms: Option<i64>,
    /// The scope granted, if the server said.
    pub scope: Option<String>,
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSet")
            .field("access_token", &"…")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "…"))
            .field("expires_at_ms", &self.expires_at_ms)
            .field("scope", &self.scope)
            .finish()
    }
}

impl TokenSet {
    /// The access token's hex SHA-256: what a receipt keeps of it.
    pub fn access_sha256(&self) -> String {
        toolgate_core::proposal::sha256_hex(self.access_token.as_bytes())
    }
}

/// The kind of token [`revoke`] is given (`token_type_hint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `access_token`.
    Access,
    /// `refresh_token`.
    Refresh,
}

/// Redeems the callback's `code` with the PKCE verifier, for `resource`.
/// `now_ms` dates the expiry.
#[allow(clippy::too_many_arguments)]
pub async fn redeem(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Client,
    code: &str,
    pkce: &Pkce,
    redirect_uri: &str,
    resource: &str,
    now_ms: i64,
) -> Result<TokenSet, String> {
    let form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", pkce.verifier()),
        ("resource", resource),
    ];
    let (status, body) =
        endpoint::post_form(http, &d.token_endpoint, form, client.auth(), "the token endpoint")
            .await?;
    token_set(status, &body, now_ms, None, "the code")
}

/// A fresh access token for `refresh_token`. A rotated refresh token
/// replaces it in the answer; one not rotated is kept.
pub async fn refresh(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Client,
    refresh_token: &str,
    resource: Option<&str>,
    now_ms: i64,
) -> Result<TokenSet, String> {
    let mut form = vec![("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
    form.extend(resource.map(|r| ("resource", r)));
    let (status, body) =
        endpoint::post_form(http, &d.token_endpoint, form, client.auth(), "the token endpoint")
            .await?;
    token_set(status, &body, now_ms, Some(refresh_token), "the refresh")
}

/// Revokes `token` (RFC 7009). The server answers 200 for a token it no
/// longer knows, too: that is success.
pub async fn revoke(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Client,
    token: &str,
    hint: TokenKind,
) -> Result<(), String> {
    let endpoint = d.revocation_endpoint.as_deref().ok_or(
        "the authorization server offers no revocation (RFC 7009): the token stays good until it \
            expires; revoke the grant at the server's own account page",
    )?;
    let hint = match hint {
        TokenKind::Access => "access_token",
        TokenKind::Refresh => "refresh_token",
    };
    let form = vec![("token", token), ("token_type_hint", hint)];
    let (status, body) =
        endpoint::post_form(http, endpoint, form, client.auth(), "the revocation endpoint").await?;
    if status.is_success() {
        return Ok(());
    }
    let document = match serde_json::from_slice(&body) {
        Ok(Value::Object(document)) => document,
        _ => Map::new(),
    };
    Err(format!("the revocation endpoint refused ({})", refusal_of(status, &document)))
}

/// The tokens a token endpoint answered, or why there are none (`what`:
/// "the code", "the refresh"). `kept` is the refresh token to keep when
/// the answer rotates none. No token reaches a message.
fn token_set(
    status: StatusCode,
    body: &[u8],
    now_ms: i64,
    kept: Option<&str>,
    what: &str,
) -> Result<TokenSet, String> {
    let document = match serde_json::from_slice(body) {
        Ok(Value::Object(document)) => document,
        _ => {
            return Err(format!(
                "the token endpoint answered HTTP {status} with no token (not a JSON token response)"
            ));
        }
    };
    let access = string(&document, "access_token").filter(|_| status.is_success());
    let Some(access_token) = access else {
        return Err(format!(
            "the token endpoint refused {what} ({})",
            refusal_of(status, &document)
        ));
    };
    if let Some(kind) = document
        .get("token_type")
        .and_then(Value::as_str)
        .filter(|t| !t.eq_ignore_ascii_case("bearer"))
    {
        return Err(format!(
            "the token endpoint gave a {} token, not a Bearer one: toolgate sends Bearer tokens only",
            tame(kind)
        ));
    }
    let expires_in = match document.get("expires_in") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    Ok(TokenSet {
        access_token,
        refresh_token: string(&document, "refresh_token").or_else(|| kept.map(String::from)),
        expires_at_ms: expires_in.map(|s| now_ms.saturating_add(s.max(0).saturating_mul(1000))),
        scope: string(&document, "scope"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC 7636 appendix B octets, as entropy.
    struct Fixed([u8; 32]);
    impl Entropy for Fixed {
        fn fill(&self, buf: &mut [u8]) {
            buf.copy_from_slice(&self.0[..buf.len()]);
        }
    }

    fn discovered() -> Discovered {
        let document = json!({
            "issuer": "https://as.example",
            "authorization_endpoint": "https://as.example/auth",
            "token_endpoint": "https://as.example/token",
            "registration_endpoint": "https://as.example/reg",
            "code_challenge_methods_supported": ["plain", "S256"],
            "response_types_supported": ["code"],
            "authorization_response_iss_parameter_supported": true,
        });
        let mut d = server_metadata("https://as.example", document.as_object().unwrap()).unwrap();
        d.resource = "https://mcp.example/mcp".into();
        d
    }

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn pkce_is_rfc_7636_appendix_b() {
        let octets = [
            116, 24, 223, 180, 151, 153, 224, 37, 79, 250, 96, 125, 216, 173, 187, 186, 22, 212,
            37, 77, 105, 214, 191, 240, 91, 88, 5, 88, 83, 132, 141, 121,
        ];
        let pkce = Pkce::new(&Fixed(octets));
        assert_eq!(pkce.verifier(), "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk");
        assert_eq!(pkce.challenge(), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert_eq!(Pkce::from_verifier(pkce.verifier()).unwrap(), pkce);
        // Kept as its verifier; its Debug shows only the challenge.
        let kept = serde_json::to_string(&pkce).unwrap();
        assert_eq!(serde_json::from_str::<Pkce>(&kept).unwrap(), pkce);
        assert!(!format!("{pkce:?}").contains(pkce.verifier()));
    }

    #[test]
    fn pkce_refuses_a_verifier_out_of_shape() {
        assert!(Pkce::from_verifier(&"a".repeat(42)).is_err());
        assert!(Pkce::from_verifier(&"a".repeat(129)).is_err());
        assert!(Pkce::from_verifier(&format!("{}+", "a".repeat(43))).is_err());
        assert!(Pkce::from_verifier(&"a-._~".repeat(25)).is_ok());
        assert!(Pkce::from_verifier(&"a".repeat(128)).is_ok());
        assert!(serde_json::from_str::<Pkce>("\"short\"").is_err());
    }

    #[test]
    fn challenges_parse_quoted_strings_several_params_and_schemes() {
        let found = challenges([
            r#"Basic realm="x, y", Bearer error="invalid_token", error_description="say \"no\"",resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp" , scope=mcp"#,
        ]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].scheme.as_str(), found[0].param("realm")), ("basic", Some("x, y")));
        let bearer = &found[1];
        assert_eq!(bearer.param("error_description"), Some(r#"say "no""#));
        assert_eq!(
            bearer.param("resource_metadata"),
            Some("https://mcp.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(bearer.param("scope"), Some("mcp"));
    }

    #[test]
    fn challenges_across_lines_with_token68_and_odd_case() {
        let found = challenges([
            "Negotiate abc+/==, DPoP algs=\"ES256\"",
            "bEaReR Resource_Metadata = \"https://a/m\"",
            "Bearer",
        ]);
        let schemes: Vec<_> = found.iter().map(|c| c.scheme.as_str()).collect();
        assert_eq!(schemes, ["negotiate", "dpop", "bearer", "bearer"], "{found:?}");
        assert!(found[0].params.is_empty());
        assert_eq!(found[2].param("resource_metadata"), Some("https://a/m"));
        // RFC 9110's own example.
        let found = challenges([
            r#"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#,
        ]);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].param("title"), Some(r#"Login to "apps""#));
        assert_eq!(found[1].param("realm"), Some("simple"));
    }

    #[test]
    fn challenges_survive_garbage() {
        for junk in [
            "",
            ",,,",
            "\"",
            "Bearer realm=\"unterminated",
            "=== , =x",
            "Bearer a=b=c",
            "\u{7f}\u{1}Bearer",
        ] {
            let _ = challenges([junk]);
        }
        // An unterminated quoted string is no parameter.
        let found = challenges(["Bearer realm=\"open"]);
        assert_eq!(found[0], Challenge { scheme: "bearer".into(), params: vec![] });
        assert!(found.iter().all(|c| c.params.is_empty()), "{found:?}");
    }

    #[test]
    fn well_known_urls_follow_rfc_9728_and_8414() {
        let server = Url::parse("https://mcp.example/tenant/mcp/?x=1").unwrap();
        assert_eq!(
            resource_metadata_urls(&server),
            [
                "https://mcp.example/.well-known/oauth-protected-resource/tenant/mcp",
                "https://mcp.example/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            resource_metadata_urls(&Url::parse("http://127.0.0.1:9").unwrap()),
            ["http://127.0.0.1:9/.well-known/oauth-protected-resource"]
        );
        let issuer = Url::parse("https://as.example/realms/a").unwrap();
        assert_eq!(
            server_metadata_urls(&issuer),
            [
                "https://as.example/.well-known/oauth-authorization-server/realms/a",
                "https://as.example/.well-known/openid-configuration/realms/a",
                "https://as.example/realms/a/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            server_metadata_urls(&Url::parse("https://as.example").unwrap()),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn resource_metadata_must_be_for_this_server() {
        let server = Url::parse("https://mcp.example/mcp").unwrap();
        let good = object(
            json!({"resource": "https://mcp.example/mcp", "authorization_servers": ["https://as.example"], "scopes_supported": ["a", 7, "b"]}),
        );
        let read = resource_metadata(&server, &good).unwrap();
        assert_eq!(
            (read.resource.as_str(), read.scopes_supported),
            ("https://mcp.example/mcp", vec!["a".to_string(), "b".into()])
        );
        assert!(resource_metadata(&server, &object(json!({"resource": "https://mcp.example/", "authorization_servers": ["https://as.example"]}))).is_ok());
        for (resource, why) in [
            ("https://evil.example/mcp", "not for this server"),
            ("https://mcp.example/mcp2", "not for this server"),
            ("http://mcp.example/mcp", "not for this server"),
        ] {
            let e = resource_metadata(
                &server,
                &object(
                    json!({"resource": resource, "authorization_servers": ["https://as.example"]}),
                ),
            )
            .err()
            .unwrap();
            assert!(e.contains(why), "{resource}: {e}");
        }
        let e = resource_metadata(
            &server,
            &object(json!({"resource": "https://mcp.example/mcp", "authorization_servers": []})),
        )
        .err()
        .unwrap();
        assert!(e.contains("authorization_servers"), "{e}");
    }

    #[test]
    fn server_metadata_refuses_a_mix_up_no_s256_and_plain_http() {
        let base = json!({"issuer": "https://as.example", "authorization_endpoint": "https://as.example/auth", "token_endpoint": "https://as.example/token", "code_challenge_methods_supported": ["S256"]});
        assert_eq!(
            server_metadata("https://as.example/", &object(base.clone())).unwrap().issuer,
            "https://as.example"
        );
        let refused = |change: Value| {
            let mut doc = object(base.clone());
            doc.extend(object(change));
            server_metadata("https://as.example", &doc).err().unwrap()
        };
        assert!(refused(json!({"issuer": "https://evil.example"})).contains("mix-up"));
        assert!(refused(json!({"code_challenge_methods_supported": ["plain"]})).contains("S256"));
        assert!(refused(json!({"code_challenge_methods_supported": null})).contains("S256"));
        assert!(refused(json!({"token_endpoint": "http://as.example/token"})).contains("https"));
        assert!(
            refused(json!({"authorization_endpoint": "https://as.example/auth#x"}))
                .contains("fragment")
        );
        assert!(refused(json!({"response_types_supported": ["token"]})).contains("`code`"));
        assert!(refused(json!({"token_endpoint": null})).contains("token_endpoint"));
        // Loopback may be plain http (a local authorization server).
        let local = object(
            json!({"issuer": "http://127.0.0.1:4444", "authorization_endpoint": "http://127.0.0.1:4444/auth", "token_endpoint": "http://localhost:4444/token", "code_challenge_methods_supported": ["S256"]}),
        );
        assert!(server_metadata("http://127.0.0.1:4444", &local).is_ok());
    }

    #[test]
    fn authorization_url_carries_pkce_resource_and_keeps_the_endpoint_query() {
        let mut d = discovered();
        let client = Client::configured("tool gate", None, &d).unwrap();
        let pkce = Pkce::from_verifier(&"v".repeat(43)).unwrap();
        let url = authorization_url(
            &d,
            &client,
            "https://gw.example/oauth/callback",
            "https://mcp.example/mcp",
            Some("mcp read"),
            "st&ate",
            &pkce,
        );
        let parsed = Url::parse(&url).unwrap();
        let pairs: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
        let get = |n: &str| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("response_type"), Some("code"));
        assert_eq!(get("client_id"), Some("tool gate"));
        assert_eq!(get("redirect_uri"), Some("https://gw.example/oauth/callback"));
        assert_eq!(get("state"), Some("st&ate"));
        assert_eq!(get("code_challenge"), Some(pkce.challenge()));
        assert_eq!(get("code_challenge_method"), Some("S256"));
        assert_eq!(get("resource"), Some("https://mcp.example/mcp"));
        assert_eq!(get("scope"), Some("mcp read"));
        assert!(!url.contains(pkce.verifier()));
        d.authorization_endpoint = "https://as.example/auth?tenant=a".into();
        let url = authorization_url(
            &d,
            &client,
            "https://gw/cb",
            "https://mcp.example/mcp",
            None,
            "s",
            &pkce,
        );
        assert!(url.starts_with("https://as.example/auth?tenant=a&response_type=code&"), "{url}");
        assert!(!url.contains("scope="), "{url}");
    }

    #[test]
    fn callback_checks_iss_and_reads_refusals() {
        let d = discovered();
        let got = callback(&d, "code=abc&state=s1&iss=https%3A%2F%2Fas.example").unwrap();
        assert_eq!((got.code.as_str(), got.state.as_str()), ("abc", "s1"));
        assert!(!format!("{got:?}").contains("abc"));
        assert!(
            callback(&d, "code=abc&state=s1&iss=https%3A%2F%2Fevil.example")
                .err()
                .unwrap()
                .contains("mix-up")
        );
        assert!(callback(&d, "code=abc&state=s1").err().unwrap().contains("no `iss`"));
        assert!(
            callback(&d, "code=a&code=b&state=s&iss=https%3A%2F%2Fas.example")
                .err()
                .unwrap()
                .contains("twice")
        );
        let e = callback(&d, "error=access_denied&error_description=the+person%0Arefused&iss=https%3A%2F%2Fas.example").err().unwrap();
        assert_eq!(e, "the authorization server refused (access_denied: the personrefused)");
    }

    #[test]
    fn client_identity_follows_what_the_server_offers() {
        let mut d = discovered();
        assert_eq!(
            Client::configured("c", Some("s"), &d).unwrap().auth,
            AuthMethod::ClientSecretBasic
        );
        d.token_endpoint_auth_methods = vec!["private_key_jwt".into(), "client_secret_post".into()];
        assert_eq!(
            Client::configured("c", Some("s"), &d).unwrap().auth,
            AuthMethod::ClientSecretPost
        );
        d.token_endpoint_auth_methods = vec!["private_key_jwt".into()];
        assert!(Client::configured("c", Some("s"), &d).is_err());
        assert_eq!(Client::configured("c", None, &d).unwrap().auth, AuthMethod::None);
        assert!(
            Client::metadata_document("https://gw.example/oauth/client.json", &d)
                .err()
                .unwrap()
                .contains("does not take")
        );
        d.client_id_metadata_document_supported = true;
        let client = Client::metadata_document("https://gw.example/oauth/client.json", &d).unwrap();
        assert_eq!(
            (client.client_id.as_str(), client.auth),
            ("https://gw.example/oauth/client.json", AuthMethod::None)
        );
        assert!(Client::metadata_document("http://gw.example/oauth/client.json", &d).is_err());
        assert!(Client::metadata_document("https://gw.example/", &d).is_err());
        let secret = Client::configured("c", Some("hunter2"), &discovered()).unwrap();
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn registration_answers_are_read_and_refused() {
        let ok = |body: Value| {
            registered(
                StatusCode::CREATED,
                body.to_string().as_bytes(),
                AuthMethod::ClientSecretBasic,
            )
        };
        let client = ok(json!({"client_id": "c1", "client_secret": "s1", "token_endpoint_auth_method": "client_secret_post"})).unwrap();
        assert_eq!(
            (client.client_id.as_str(), client.client_secret.as_deref(), client.auth),
            ("c1", Some("s1"), AuthMethod::ClientSecretPost)
        );
        assert_eq!(
            ok(json!({"client_id": "c1", "token_endpoint_auth_method": "none"})).unwrap().auth,
            AuthMethod::None
        );
        assert!(ok(json!({"client_id": "c1"})).err().unwrap().contains("no client_secret"));
        assert!(
            ok(json!({"client_id": "c1", "token_endpoint_auth_method": "tls_client_auth"}))
                .err()
                .unwrap()
                .contains("does not do")
        );
        let e = registered(
            StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_redirect_uri","error_description":"no\u0007"}"#,
            AuthMethod::None,
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            "the registration endpoint refused (HTTP 400 Bad Request, invalid_redirect_uri: no)"
        );
    }

    #[test]
    fn token_answers_keep_or_rotate_the_refresh_token_and_never_show_a_token() {
        let answer = json!({"access_token": "AT-secret", "token_type": "Bearer", "expires_in": 60, "scope": "mcp"}).to_string();
        let kept =
            token_set(StatusCode::OK, answer.as_bytes(), 1_000, Some("RT-old"), "the refresh")
                .unwrap();
        assert_eq!(
            (kept.refresh_token.as_deref(), kept.expires_at_ms, kept.scope.as_deref()),
            (Some("RT-old"), Some(61_000), Some("mcp"))
        );
        let rotated = json!({"access_token": "AT", "token_type": "bearer", "refresh_token": "RT-new", "expires_in": "30"}).to_string();
        let rotated =
            token_set(StatusCode::OK, rotated.as_bytes(), 0, Some("RT-old"), "the refresh")
                .unwrap();
        assert_eq!(
            (rotated.refresh_token.as_deref(), rotated.expires_at_ms),
            (Some("RT-new"), Some(30_000))
        );
        let shown = format!("{kept:?}");
        assert!(!shown.contains("AT-secret") && !shown.contains("RT-old"), "{shown}");
        let sealed: TokenSet =
            serde_json::from_str(&serde_json::to_string(&kept).unwrap()).unwrap();
        assert_eq!(sealed, kept);
    }

    #[test]
    fn token_refusals_name_the_error_not_the_token() {
        let refused = token_set(
            StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_grant","error_description":"grant request is invalid"}"#,
            0,
            None,
            "the code",
        )
        .err()
        .unwrap();
        assert_eq!(
            refused,
            "the token endpoint refused the code (HTTP 400 Bad Request, invalid_grant: grant request is invalid)"
        );
        let dpop = token_set(
            StatusCode::OK,
            br#"{"access_token":"AT-secret","token_type":"DPoP"}"#,
            0,
            None,
            "the code",
        )
        .err()
        .unwrap();
        assert!(dpop.contains("DPoP") && !dpop.contains("AT-secret"), "{dpop}");
        let error_with_token = token_set(
            StatusCode::UNAUTHORIZED,
            br#"{"access_token":"AT-secret"}"#,
            0,
            None,
            "the code",
        )
        .err()
        .unwrap();
        assert!(!error_with_token.contains("AT-secret"), "{error_with_token}");
        assert!(
            token_set(StatusCode::OK, b"<html>", 0, None, "the code")
                .err()
                .unwrap()
                .contains("not a JSON")
        );
    }
}
