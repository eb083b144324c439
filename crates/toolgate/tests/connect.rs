//! Upstream identity, `mode = "oauth"` (issue 61): each person connects their
//! own account at the server's authorization server, once, in a browser, and
//! from then on every call of theirs reaches the server with their own token.
//!
//! Real parts only: a real gateway (`toolgate serve`); the authorization
//! server is `oidc-provider` (npm), the certified OpenID Provider, with its
//! login and consent pages (`tests/oidc/provider.mjs`); the upstream is an MCP
//! server written with the official Python SDK's resource-server support
//! (`whoami_server.py`: 401 with `resource_metadata`, JWT access tokens
//! checked with PyJWT, `whoami` says the token's `sub`); the consent happens in
//! Debian's headless Chromium, driven over WebDriver by chromedriver; the
//! agents are the stock Python SDK client's `call_tool`
//! (`tests/python/connect_client.py`), in both eras.
//!
//! One gateway, in order:
//! 1. the gateway lists the server's tools as itself: the server is down until
//!    an admin connects the gateway's own account in the console;
//! 2. a person's first call gets the consent link: JSON-RPC −32042 (2025-11-25,
//!    URL elicitation declared), `input_required` with a URL request
//!    (2026-07-28: the SDK calls its elicitation callback, and re-issues the
//!    call once the person has consented), or the tool error
//!    `connect_required` naming the link (a client that declared none);
//! 3. the consent: the link signs the person in to the console as themselves,
//!    then the provider's login and consent pages, then the gateway's callback;
//! 4. the same call then returns the upstream's `whoami` for that person; two
//!    people get two identities; a third person who opens another's link binds
//!    nothing;
//! 5. a token that expires (an 8 s TTL) is refreshed without anyone noticing;
//! 6. the receipt says as whom the call ran, and `toolgate verify` shows it; no
//!    token is in the receipts, the gateway's log, the console or the state
//!    directory (the ledger keeps them sealed);
//! 7. disconnecting in the console makes the person's next call ask again.
//!
//! A failure names the step, and prints the last lines of the gateway's,
//! the provider's and the upstream's logs (`TOOLGATE_TEST_KEEP=1` keeps the
//! whole folder). `TOOLGATE_SCREENSHOTS` saves the Connections pages as PNGs.

mod demo_common;
mod ops_common;
mod peers_common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use demo_common::workspace;
use fantoccini::elements::Element;
use fantoccini::{Client, Locator};
use ops_common::{BIN, spawn_listening, tail, toolgate, workdir};
use peers_common::{driver, free_port, here, peer, python, whoami};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const ADA: &str = "ada-token-0123456789abcdef";
const JANE: &str = "jane-token-0123456789abcdef";
const OMAR: &str = "omar-token-0123456789abcdef";
const EVE: &str = "eve-token-0123456789abcdef";
const ORIGIN: &str = "toolgate.connect.test/log";
/// The provider's preconfigured client `toolgate` has this secret.
const CLIENT_SECRET: &str = "toolgate-secret";
/// The provider's access-token lifetime: short, so that tokens expire mid-test.
const ACCESS_TTL_S: u64 = 8;
/// What the upstream (PyJWT) allows past a token's `exp`.
const UPSTREAM_LEEWAY_S: u64 = 5;
const TOOL: &str = "who__whoami";
const LEGACY: &str = "legacy";
const MODERN: &str = "2026-07-28";
/// How every JWT begins (`{"alg"`, `{"typ"`, `{"kid"`, in base64url): none may
/// be found where tokens must never be.
const JWT_STARTS: [&str; 3] = ["eyJhbGci", "eyJ0eXAi", "eyJraWQi"];

fn config(port: u16, who: &str) -> String {
    format!(
        r#"[gateway]
listen = "127.0.0.1:{port}"
state_dir = "state"
# A server the gateway could not list is listed again soon after.
list_ttl_ms = 1000

[receipts]
origin = "{ORIGIN}"

[console]
enabled = true

# [identity] public_url is left to its default, http://127.0.0.1:{port}.

[servers.who]
url = "{who}"
[servers.who.identity]
mode = "oauth"
client_id = "toolgate"
client_secret_env = "WHO_CLIENT_SECRET"

[registry."who__whoami"]
class = "automatic"
read_only = true

[callers.ada]
token_env = "TG_ADA"
subject = "ada@atlas.example"
tenant = "atlas"
roles = ["admin"]

[callers.jane]
token_env = "TG_JANE"
subject = "jane@atlas.example"
tenant = "atlas"

[callers.omar]
token_env = "TG_OMAR"
subject = "omar@atlas.example"
tenant = "atlas"

[callers.eve]
token_env = "TG_EVE"
subject = "eve@atlas.example"
tenant = "atlas"
"#
    )
}

/// The running parts, and where to look when something is wrong.
struct World {
    home: PathBuf,
    /// `http://127.0.0.1:PORT`, the gateway (and its console).
    base: String,
    /// `BASE/mcp`.
    mcp: String,
    config: PathBuf,
    /// The upstream's URL, the resource its tokens are for.
    who: String,
}

impl World {
    /// The logs' paths and last lines, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (name, n) in [("gateway.log", 60), ("provider.log", 20), ("who.log", 20)] {
            let path = self.home.join(name);
            out.push_str(&format!(
                "\n--- {} (last {n} lines) ---\n{}",
                path.display(),
                tail(&path, n)
            ));
        }
        out.push_str("\n(TOOLGATE_TEST_KEEP=1 keeps the folder)");
        out
    }

    /// The link every consent starts from.
    fn link_prefix(&self) -> String {
        format!("{}/console/connect?for=", self.base)
    }

    /// The tools the stock SDK lists through the gateway, as the person of `token`.
    async fn tools(&self, era: &str, token: &str) -> Vec<String> {
        let mut cmd = Command::new(python());
        cmd.arg(workspace().join("tests/python/sdk_client.py"))
            .args([self.mcp.as_str(), era, "[]"])
            .env("TOOLGATE_TOKEN", token)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("sdk_client.py ({era}) took over 90 s{}", self.logs()))
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "sdk_client.py ({era}) could not list: {stdout}\n{}{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        let v: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
        v["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {v}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The stock SDK's `call_tool` of who__whoami as the person of `token`
    /// (`elicit`: with an elicitation callback, which answers cancel here):
    /// the last line `connect_client.py` printed.
    async fn call(&self, era: &str, token: &str, elicit: bool) -> Value {
        let mut cmd = Command::new(python());
        cmd.arg(workspace().join("tests/python/connect_client.py"))
            .args([self.mcp.as_str(), era, TOOL])
            .args(elicit.then_some("--elicit"))
            .env("TOOLGATE_TOKEN", token)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("connect_client.py ({era}) took over 90 s{}", self.logs()))
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stdout.lines().last().unwrap_or_default();
        let v: Value = serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "connect_client.py ({era}) printed no JSON ({e}):\n{stdout}\n{stderr}{}",
                self.logs()
            )
        });
        assert!(
            out.status.success() && v.get("threw").is_none(),
            "connect_client.py ({era}): the SDK raised: {v}\n{stderr}{}",
            self.logs()
        );
        v
    }

    /// A call that ran, without being asked to connect: connect_client.py's output.
    async fn ran(&self, era: &str, token: &str) -> Value {
        let v = self.call(era, token, true).await;
        let result = &v["result"];
        assert!(
            result.is_object() && result["isError"] != json!(true),
            "{era}: the call did not run: {v}{}",
            self.logs()
        );
        assert_eq!(
            v["elicited"],
            json!([]),
            "{era}: a connected person was asked to connect: {v}{}",
            self.logs()
        );
        v
    }

    /// As whom the call reached the server (whoami's `sub`).
    async fn sub(&self, era: &str, token: &str) -> String {
        let v = self.ran(era, token).await;
        v["result"]["structuredContent"]["sub"]
            .as_str()
            .unwrap_or_else(|| panic!("{era}: no sub: {v}"))
            .to_string()
    }

    /// The answer of a client that declared no elicitation: the tool error
    /// `connect_required`, which names the link.
    async fn connect_required(&self, era: &str, token: &str) {
        let v = self.call(era, token, false).await;
        let result = &v["result"];
        assert_eq!(
            result["isError"],
            json!(true),
            "{era}: connect_required expected: {v}{}",
            self.logs()
        );
        assert_eq!(
            result["structuredContent"]["reason"],
            "connect_required",
            "{era}: {v}{}",
            self.logs()
        );
        assert_eq!(result["structuredContent"]["action"], "escalate", "{era}: {v}{}", self.logs());
        assert!(
            result.to_string().contains(&self.link_prefix()),
            "{era}: connect_required names no link ({}…): {v}{}",
            self.link_prefix(),
            self.logs()
        );
    }

    /// The answer of a 2025-11-25 client that declared URL elicitation:
    /// JSON-RPC −32042, read back by the stock SDK; returns the link.
    async fn url_elicitation_required(&self, token: &str) -> String {
        let v = self.call(LEGACY, token, true).await;
        assert_eq!(
            v["error"]["code"],
            json!(-32042),
            "-32042 (URL elicitation required) expected: {v}{}",
            self.logs()
        );
        let asked = &v["error"]["data"]["elicitations"][0];
        assert_eq!(asked["mode"], "url", "{v}");
        assert!(
            asked["elicitationId"].as_str().is_some_and(|s| !s.is_empty()),
            "no elicitationId: {v}"
        );
        assert!(asked["message"].as_str().is_some_and(|s| !s.is_empty()), "no message: {v}");
        assert_eq!(
            v["elicitations"][0]["url"], asked["url"],
            "the SDK's UrlElicitationRequiredError does not read it: {v}"
        );
        let link = asked["url"].as_str().unwrap_or_default().to_string();
        assert!(link.starts_with(&self.link_prefix()), "not a consent link: {v}{}", self.logs());
        link
    }

    /// `connect_client.py --elicit`, kept running: the test answers its
    /// elicitation callback through stdin.
    fn asking(&self, era: &str, token: &str, name: &str) -> Asking {
        let stderr = self.home.join(format!("{name}-client.log"));
        let mut cmd = Command::new(python());
        cmd.arg(workspace().join("tests/python/connect_client.py"))
            .args([self.mcp.as_str(), era, TOOL, "--elicit"])
            .env("TOOLGATE_TOKEN", token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Asking { _child: child, stdin, lines, stderr }
    }
}

/// A client mid-call, waiting on its elicitation callback.
struct Asking {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: PathBuf,
}

impl Asking {
    /// The next JSON line it prints: `{"elicit": …}` or its last.
    async fn next(&mut self, w: &World) -> Value {
        match tokio::time::timeout(Duration::from_secs(90), self.lines.next_line()).await {
            Ok(Ok(Some(line))) => serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("connect_client.py printed no JSON ({e}): {line}{}", w.logs())
            }),
            other => panic!(
                "connect_client.py said nothing more ({other:?}):\n{}{}",
                tail(&self.stderr, 30),
                w.logs()
            ),
        }
    }

    /// Answers the elicitation callback: "done" (accept), "decline".
    async fn answer(&mut self, text: &str) {
        self.stdin.write_all(format!("{text}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }
}

/// The first `css` element, waiting up to 20 s for the page to have one.
async fn element(c: &Client, css: &str, w: &World) -> Element {
    match c.wait().at_most(Duration::from_secs(20)).for_element(Locator::Css(css)).await {
        Ok(e) => e,
        Err(e) => panic!(
            "no `{css}` on {} ({e}):\n{}{}",
            here(c).await,
            c.source().await.unwrap_or_default(),
            w.logs()
        ),
    }
}

async fn text_of(c: &Client, css: &str, w: &World) -> String {
    element(c, css, w).await.text().await.unwrap()
}

/// Whether the page has no `css` element (now; no waiting).
async fn none(c: &Client, css: &str) -> bool {
    c.find_all(Locator::Css(css)).await.unwrap().is_empty()
}

/// Whether the page has a `css` element now (false while it cannot tell).
async fn has(c: &Client, css: &str) -> bool {
    c.find_all(Locator::Css(css)).await.is_ok_and(|found| !found.is_empty())
}

/// Clicks `css` and waits until the browser has left the page it was on
/// (a form's POST or a link, and the redirects after it).
async fn click_and_wait(c: &Client, css: &str, w: &World) {
    let old = c.find(Locator::Css("html")).await.unwrap();
    element(c, css, w).await.click().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while old.text().await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "clicking {css} did not leave {}{}",
            here(c).await,
            w.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn path(c: &Client) -> String {
    c.current_url().await.unwrap().path().to_string()
}

/// Saves the page as `NAME.png` in `TOOLGATE_SCREENSHOTS` (relative to the
/// repository's root), when set.
async fn shot(c: &Client, name: &str) {
    if let Ok(dir) = std::env::var("TOOLGATE_SCREENSHOTS") {
        let dir = workspace().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), c.screenshot().await.unwrap()).unwrap();
    }
}

/// On the console's sign-in page: the person's own bearer token.
async fn sign_in_here(c: &Client, token: &str, w: &World) {
    element(c, "#token", w).await.send_keys(token).await.unwrap();
    click_and_wait(c, "button[type=submit]", w).await;
}

/// From a console page to the provider's login page, through the consent
/// link's own page (its `a#connect`) when the console shows that first.
async fn to_provider(c: &Client, w: &World) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if has(c, "#login-form").await {
            return;
        }
        if has(c, "a#connect").await {
            element(c, "a#connect", w).await.click().await.unwrap();
            element(c, "#login-form", w).await;
            return;
        }
        assert!(
            Instant::now() < deadline,
            "neither the provider's login page nor the console's a#connect at {}:\n{}{}",
            here(c).await,
            c.source().await.unwrap_or_default(),
            w.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// At the provider's pages: sign in as `login` (any name is an account
/// there; it becomes the token's `sub`), allow, and land on the gateway's
/// callback, which says the account is connected.
async fn at_provider(c: &Client, login: &str, w: &World) {
    element(c, "#login-form #login", w).await.send_keys(login).await.unwrap();
    click_and_wait(c, "#login-form #submit", w).await;
    element(c, "#consent-form", w).await;
    click_and_wait(c, "#consent-form #submit", w).await;
    element(c, "#connected", w).await;
}

/// A person opens a consent link in their own browser: signed out, the
/// console has them sign in first, and brings them back to the link.
async fn open_signed_out(c: &Client, link: &str, token: &str, w: &World) {
    c.goto(link).await.unwrap();
    assert_eq!(
        path(c).await,
        "/console/signin",
        "a consent link opened signed out asks to sign in first; at {}:\n{}{}",
        here(c).await,
        c.source().await.unwrap_or_default(),
        w.logs()
    );
    sign_in_here(c, token, w).await;
    let back = c.current_url().await.unwrap();
    assert!(
        back.path() == "/console/connect" && back.query().unwrap_or_default().contains("for="),
        "signed in, the browser is not back at the link but at {back}:\n{}{}",
        c.source().await.unwrap_or_default(),
        w.logs()
    );
}

/// The whole consent of the person of `token`, as `login` at the provider.
async fn consent(c: &Client, link: &str, token: &str, login: &str, w: &World) {
    open_signed_out(c, link, token, w).await;
    assert!(
        none(c, "#not-yours").await,
        "the person's own link says it is not theirs:\n{}",
        c.source().await.unwrap_or_default()
    );
    shot(c, "connect").await;
    element(c, "a#connect", w).await.click().await.unwrap();
    at_provider(c, login, w).await;
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_connects_their_own_account_and_calls_as_themselves() {
    let (_dir, home) = workdir("connect");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");

    // The peers: the provider, whose native client `toolgate` may be sent
    // back to the gateway's callback on any loopback port; the upstream,
    // trusting the provider's tokens (without sessions: each person's
    // requests carry their own token).
    let mut provider = Command::new("node");
    provider.arg(workspace().join("tests/oidc/provider.mjs")).args([
        "--port",
        "0",
        "--client",
        &format!("toolgate:{CLIENT_SECRET}"),
        "--redirect-uri",
        "http://127.0.0.1/console/connect/callback",
        "--access-ttl",
        &ACCESS_TTL_S.to_string(),
    ]);
    let provider = peer(provider, &home.join("provider.log")).await;
    let who = peer(
        whoami(&["--port", "0", "--issuer", &provider.url, "--stateless"]),
        &home.join("who.log"),
    )
    .await;

    let config_path = home.join("toolgate.toml");
    std::fs::write(&config_path, config(port, &who.url)).unwrap();
    let mut gateway = Command::new(BIN);
    gateway
        .args(["serve", "--config"])
        .arg(&config_path)
        .env("TG_ADA", ADA)
        .env("TG_JANE", JANE)
        .env("TG_OMAR", OMAR)
        .env("TG_EVE", EVE)
        .env("WHO_CLIENT_SECRET", CLIENT_SECRET);
    let gateway =
        spawn_listening(gateway, &home.join("gateway.log"), "toolgate: serving MCP on").await;
    let w = World {
        home: home.clone(),
        base,
        mcp: gateway.url.clone(),
        config: config_path,
        who: who.url.clone(),
    };
    assert_eq!(w.mcp, format!("{}/mcp", w.base));
    let browsers = driver(&home.join("chromedriver.log"));

    // 1. The gateway reads the server's tools as itself: until an admin
    //    connects the gateway's own account, the server is down.
    for era in [LEGACY, MODERN] {
        let tools = w.tools(era, JANE).await;
        assert!(
            !tools.iter().any(|t| t == TOOL),
            "{era}: {TOOL} listed before the gateway's account is connected: {tools:?}{}",
            w.logs()
        );
    }
    let ada = browsers.session(&home.join("chromium-ada")).await;
    ada.goto(&format!("{}/console/signin", w.base)).await.unwrap();
    sign_in_here(&ada, ADA, &w).await;
    ada.goto(&format!("{}/console/connections", w.base)).await.unwrap();
    shot(&ada, "connections-gateway").await;
    element(&ada, "a#connect-gateway-who", &w).await.click().await.unwrap();
    to_provider(&ada, &w).await;
    at_provider(&ada, "toolgate-reader", &w).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !w.tools(LEGACY, JANE).await.iter().any(|t| t == TOOL) {
        assert!(
            Instant::now() < deadline,
            "{TOOL} not listed 20 s after the gateway's account was connected{}",
            w.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        w.tools(MODERN, JANE).await.iter().any(|t| t == TOOL),
        "2026-07-28: {TOOL} not listed{}",
        w.logs()
    );

    // 2. Jane's first call, 2025-11-25: a client without elicitation gets
    //    connect_required, one that declared URL elicitation gets −32042.
    w.connect_required(LEGACY, JANE).await;
    let jane_link = w.url_elicitation_required(JANE).await;

    // 3. She opens the link: she signs in to the console as herself, then
    //    at the provider as "jane", and allows.
    let jane = browsers.session(&home.join("chromium-jane")).await;
    consent(&jane, &jane_link, JANE, "jane", &w).await;

    // 4. The same call now runs, as jane at the server.
    let first = w.ran(LEGACY, JANE).await;
    assert_eq!(first["result"]["structuredContent"]["sub"], "jane", "{first}{}", w.logs());
    let receipt_of = |v: &Value| {
        v["result"]["_meta"]["io.toolgate/receipt"]["index"]
            .as_u64()
            .unwrap_or_else(|| panic!("no _meta[\"io.toolgate/receipt\"].index in the result: {v}"))
    };
    let jane_first = receipt_of(&first);

    // Omar's first call, 2026-07-28: without elicitation, connect_required;
    // with it, the SDK calls its elicitation callback with the link, and once
    // he has consented and it accepts, re-issues the call, which runs.
    w.connect_required(MODERN, OMAR).await;
    let mut asking = w.asking(MODERN, OMAR, "omar");
    let asked = asking.next(&w).await;
    let params = &asked["elicit"];
    assert_eq!(params["mode"], "url", "a URL-mode elicitation expected first: {asked}{}", w.logs());
    assert!(params["message"].as_str().is_some_and(|s| !s.is_empty()), "no message: {asked}");
    let omar_link = params["url"].as_str().unwrap_or_default().to_string();
    assert!(omar_link.starts_with(&w.link_prefix()), "not a consent link: {asked}{}", w.logs());
    let omar = browsers.session(&home.join("chromium-omar")).await;
    consent(&omar, &omar_link, OMAR, "omar", &w).await;
    asking.answer("done").await;
    let done = asking.next(&w).await;
    assert!(
        done.get("elicit").is_none(),
        "asked to connect again after the consent: {done}{}",
        w.logs()
    );
    assert_eq!(
        done["result"]["structuredContent"]["sub"],
        "omar",
        "the re-issued call: {done}{}",
        w.logs()
    );
    assert_eq!(done["elicited"].as_array().map(Vec::len), Some(1), "{done}");
    let omar_first = receipt_of(&done);
    omar.close().await.unwrap();

    // Two people, two identities, in both eras.
    for era in [LEGACY, MODERN] {
        assert_eq!(w.sub(era, JANE).await, "jane", "{era}");
        assert_eq!(w.sub(era, OMAR).await, "omar", "{era}");
    }
    let jane_called = Instant::now();

    // A third person who opens jane's link binds nothing: signed in as eve,
    // the page says the link is someone else's and offers no connect. (That
    // jane's connection is unchanged, the call after her token expired shows.)
    let eve = browsers.session(&home.join("chromium-eve")).await;
    open_signed_out(&eve, &jane_link, EVE, &w).await;
    element(&eve, "#not-yours", &w).await;
    assert!(
        none(&eve, "a#connect").await,
        "eve is offered to connect jane's account:\n{}",
        eve.source().await.unwrap_or_default()
    );
    eve.close().await.unwrap();
    w.connect_required(LEGACY, EVE).await;

    // An admin sees who is connected, never a token.
    ada.goto(&format!("{}/console/connections", w.base)).await.unwrap();
    let seen = text_of(&ada, "main", &w).await;
    assert!(
        seen.contains("jane@atlas.example") && seen.contains("omar@atlas.example"),
        "the admin's Connections page does not show who is connected:\n{seen}"
    );
    let source = ada.source().await.unwrap();
    assert!(
        !JWT_STARTS.iter().any(|j| source.contains(j)),
        "a token on the admin's Connections page:\n{source}"
    );
    shot(&ada, "connections-admin").await;

    // 5. Jane's token expires (and the upstream's leeway passes): her next
    //    call still runs as her, unasked: the gateway refreshed it. The
    //    gateway's own token expired too, and its tools are still listed.
    let expired = jane_called + Duration::from_secs(ACCESS_TTL_S + UPSTREAM_LEEWAY_S + 2);
    tokio::time::sleep_until(tokio::time::Instant::from_std(expired)).await;
    let refreshed = w.ran(LEGACY, JANE).await;
    assert_eq!(
        refreshed["result"]["structuredContent"]["sub"],
        "jane",
        "after eve opened her link and her token expired: {refreshed}{}",
        w.logs()
    );
    let jane_refreshed = receipt_of(&refreshed);
    assert_eq!(w.sub(MODERN, JANE).await, "jane", "2026-07-28, after her token expired");
    assert!(
        w.tools(MODERN, OMAR).await.iter().any(|t| t == TOOL),
        "the gateway's own token was not refreshed{}",
        w.logs()
    );

    // 6. The receipts say as whom each call ran: oauth, the person, the
    //    resource, the credential's hash (a new credential after the refresh).
    let config_arg = w.config.to_str().unwrap();
    let list =
        toolgate(&["receipts", "list", "--json", "--limit", "100000", "--config", config_arg])
            .await;
    let receipts: Value = serde_json::from_str(&list)
        .unwrap_or_else(|e| panic!("receipts list --json is not JSON ({e}): {list}"));
    let receipt = |index: u64| -> Value {
        receipts
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["receipt"])
            .find(|r| r["log_index"] == index)
            .cloned()
            .unwrap_or_else(|| panic!("no receipt {index}: {receipts}"))
    };
    let first = receipt(jane_first);
    assert_eq!((&first["server"], &first["caller"]), (&json!("who"), &json!("jane")), "{first}");
    let id = &first["identity"];
    assert_eq!(
        (&id["mode"], &id["subject"], &id["audience"]),
        (&json!("oauth"), &json!("jane@atlas.example"), &json!(w.who)),
        "{first}"
    );
    assert!(
        id["credential_sha256"]
            .as_str()
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())),
        "{first}"
    );
    let later = receipt(jane_refreshed)["identity"].clone();
    assert_eq!(
        (&later["mode"], &later["subject"]),
        (&json!("oauth"), &json!("jane@atlas.example")),
        "{later}"
    );
    assert_ne!(
        later["credential_sha256"], id["credential_sha256"],
        "the same credential after the token expired: {later}"
    );
    let omars = receipt(omar_first)["identity"].clone();
    assert_eq!(
        (&omars["mode"], &omars["subject"]),
        (&json!("oauth"), &json!("omar@atlas.example")),
        "{omars}"
    );
    // `toolgate verify` shows it from the exported (signed) receipt.
    let bundle = home.join("jane.json");
    toolgate(&[
        "export",
        "--receipt",
        &jane_first.to_string(),
        "--out",
        bundle.to_str().unwrap(),
        "--config",
        config_arg,
    ])
    .await;
    let verified = toolgate(&["verify", bundle.to_str().unwrap()]).await;
    assert!(
        verified.contains(&format!(
            "ran as     receipt {jane_first}: jane@atlas.example, by oauth for "
        )) && verified.contains("verified"),
        "{verified}"
    );
    // No token in the receipts, the gateway's log or the state directory
    // (the ledger keeps the people's tokens sealed).
    let log = std::fs::read_to_string(home.join("gateway.log")).unwrap();
    for (what, text) in [("the receipts", &list), ("the gateway's log", &log)] {
        assert!(!JWT_STARTS.iter().any(|j| text.contains(j)), "a token in {what}:\n{text}");
    }
    for file in files(&home.join("state")) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for j in JWT_STARTS {
            assert!(
                !bytes.windows(j.len()).any(|b| b == j.as_bytes()),
                "a token in {}, unsealed",
                file.display()
            );
        }
    }

    // 7. Jane disconnects in the console: the page says so, and her next
    //    call asks again, in both eras. Omar's connection, and the gateway's
    //    own, are untouched.
    jane.goto(&format!("{}/console/connections", w.base)).await.unwrap();
    shot(&jane, "connections").await;
    click_and_wait(&jane, "button#disconnect-who", &w).await;
    assert!(
        none(&jane, "button#disconnect-who").await,
        "still connected after disconnecting:\n{}",
        jane.source().await.unwrap_or_default()
    );
    element(&jane, "a#connect-who", &w).await;
    let page = text_of(&jane, "main", &w).await;
    assert!(
        page.to_lowercase().contains("not connected"),
        "the page does not say `who` is not connected:\n{page}"
    );
    w.url_elicitation_required(JANE).await;
    w.connect_required(MODERN, JANE).await;
    assert_eq!(w.sub(MODERN, OMAR).await, "omar", "omar's connection after jane disconnected");
    assert!(
        w.tools(LEGACY, OMAR).await.iter().any(|t| t == TOOL),
        "the gateway's own connection after jane disconnected{}",
        w.logs()
    );

    jane.close().await.unwrap();
    ada.close().await.unwrap();
    drop((gateway, who, provider, browsers));
}
