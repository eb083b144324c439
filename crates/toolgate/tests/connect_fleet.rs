//! Upstream identity, `mode = "oauth"`, across a fleet (issue 61, "the
//! fleet"): a person's grant is kept sealed in the ledger, so every replica
//! uses it, and is refreshed under a lease the whole fleet shares
//! (`claim_refresh`/`finish_refresh`), so a rotating refresh token is spent
//! once.
//!
//! Real parts, as in `connect.rs`: two `toolgate serve` replicas, `a` and
//! `b`, on one PostgreSQL ledger (a fresh schema, dropped at the end) and one
//! vault key file (`[identity] vault_key_file`, 32 bytes, 0600, written
//! here); `oidc-provider` (`tests/oidc/provider.mjs`) with an 8 s access
//! token lifetime, rotating the refresh token on every use (a spent one
//! revokes the whole grant); the Python SDK's `whoami` resource server; the
//! consent in headless Chromium; the stock Python SDK's `call_tool`
//! (`tests/python/connect_client.py`, and `tests/python/fleet_calls.py` for
//! calls fired at once through both replicas).
//!
//! 1. Connect on one replica, call through another: an admin connects the
//!    gateway's own account in a's console, and b lists the server's tools
//!    once its supervisor retries; jane, asked on b, consents through a's
//!    link, in a's console, and her calls through b run as jane.
//! 2. One refresh across the fleet, twice: once her token has expired
//!    (read from the ledger), three calls through a and three through b land
//!    in the same moment; all run as jane, the ledger's grant was replaced,
//!    and it still serves after (a refresh token spent twice would have
//!    revoked the grant: the losing replica would have deleted it and
//!    answered `connect_required`).
//! 3. kill -9 during a refresh loses neither token: once her token has
//!    expired, calls through a make a refresh it, and the refresh request is
//!    held on its way to the provider (a's outbound HTTP goes through
//!    `tests/python/hold_proxy.py`, named by its `HTTP_PROXY`); a is
//!    SIGKILLed holding the fleet's lease, the request dropped unsent. b may
//!    answer `identity_unavailable` (retry) while the dead replica's lease
//!    runs (30 s), never `connect_required`; then b refreshes and answers
//!    jane, the grant still in the ledger; a, restarted, answers jane too.
//!
//!    What this cannot cover, and does not pretend to: a kill after the
//!    provider accepted the refresh — it rotates the refresh token as it
//!    answers — and before the replica wrote the new grant to the ledger.
//!    The new refresh token died with the replica, the ledger keeps the spent
//!    one, and the next refresh (any replica's) is a reuse, which makes the
//!    provider revoke the grant: the person connects again. No gateway can
//!    close that window alone (the token exists only in the provider's
//!    answer, which nobody else received); only a provider that tolerates a
//!    refresh token's reuse for a moment can. The same holds for a refresh
//!    whose answer is lost (a timeout after the provider acted). This test
//!    drops the request before the provider sees it, which is the window a
//!    gateway can and must cover: a lease that outlives its holder, and no
//!    second refresh while it is held.
//!
//! A second test makes one race of the fleet's refresh happen every time
//! (see its comment): a replica that read the grant before another finished
//! refreshing it must not spend that (spent) refresh token again — it reads
//! the grant once more when it holds the lease. The first test meets that
//! race by chance (both replicas refresh the gateway's own grant each time
//! they list the server's tools).
//!
//! A failure names the step and prints the last lines of every log
//! (`TOOLGATE_TEST_KEEP=1` keeps the folder and the schema). The replicas
//! log each refresh (`RUST_LOG=warn,toolgate::identity=info`), and the
//! proxy each token request of a's, with the time.

mod demo_common;
mod ops_common;
mod peers_common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use demo_common::workspace;
use fantoccini::elements::Element;
use fantoccini::{Client, Locator};
use ops_common::{BIN, Proc, panics, spawn_listening, tail, workdir};
use peers_common::{Driver, driver, free_port, here, python};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const ADA: &str = "ada-token-0123456789abcdef";
const JANE: &str = "jane-token-0123456789abcdef";
const JANE_SUBJECT: &str = "jane@atlas.example";
const ORIGIN: &str = "toolgate.connect-fleet.test/log";
/// The provider's preconfigured client `toolgate` has this secret.
const CLIENT_SECRET: &str = "toolgate-secret";
/// The provider's access-token lifetime: short, so that tokens expire mid-test.
const ACCESS_TTL_S: u64 = 8;
/// A refresh lease (`LEASE_MS` in identity/connections.rs).
const LEASE_S: u64 = 30;
/// How long a replica uses a token from memory before it reads the ledger
/// again (`CACHE_MS` in identity/connections.rs).
const CACHE_S: u64 = 5;
const TOOL: &str = "who__whoami";
const LEGACY: &str = "legacy";
const MODERN: &str = "2026-07-28";
/// Clients on each replica in a burst.
const PER_REPLICA: usize = 3;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

// ── PostgreSQL ─────────────────────────────────────────────────────────

/// A fresh schema of the test database, the fleet's ledger; dropped when
/// the test ends (kept with `TOOLGATE_TEST_KEEP`).
struct Schema {
    base: String,
    name: String,
}

fn psql(base: &str, sql: &str) -> Result<String, String> {
    let out = std::process::Command::new("psql")
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-X", "-At", base, "-c", sql])
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if !out.status.success() {
        return Err(format!("psql {base}: {sql}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Schema {
    fn create() -> Self {
        let base = std::env::var("TOOLGATE_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let mut salt = [0u8; 4];
        aws_lc_rs::rand::fill(&mut salt).unwrap();
        let name = format!(
            "connect_fleet_{}_{}",
            std::process::id(),
            salt.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        psql(&base, &format!("CREATE SCHEMA {name}")).unwrap_or_else(|e| {
            panic!("no PostgreSQL for the fleet's ledger ({e}): set TOOLGATE_TEST_POSTGRES")
        });
        Self { base, name }
    }

    /// The ledger URL: the base with the schema as the search path.
    fn ledger(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{}", self.base, self.name)
    }

    fn query(&self, sql: &str) -> String {
        psql(&self.base, &sql.replace("{s}", &self.name)).unwrap()
    }

    /// When jane's grant at `who` expires (its `expires_ms`), if she has one.
    fn jane_expires(&self) -> Option<i64> {
        let out = self.query(&format!(
            "SELECT expires_ms FROM {{s}}.connections WHERE tenant = 'atlas' AND subject = \
                '{JANE_SUBJECT}' AND server = 'who'"
        ));
        (!out.is_empty()).then(|| out.parse().unwrap())
    }

    /// The refresh lease on jane's grant: (holder, until_ms), if one is there.
    fn jane_lease(&self) -> Option<(String, i64)> {
        let out = self.query(&format!(
            "SELECT holder || ' ' || until_ms FROM {{s}}.refresh_leases WHERE tenant = 'atlas' AND \
                subject = '{JANE_SUBJECT}' AND server = 'who'"
        ));
        out.split_once(' ').map(|(h, u)| (h.to_string(), u.parse().unwrap()))
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if std::env::var_os("TOOLGATE_TEST_KEEP").is_some() {
            println!(
                "connect_fleet: keeping schema {} (psql '{}' -c 'DROP SCHEMA {} CASCADE')",
                self.name, self.base, self.name
            );
            return;
        }
        if let Err(e) = psql(&self.base, &format!("DROP SCHEMA {} CASCADE", self.name)) {
            eprintln!("connect_fleet: {e}");
        }
    }
}

// ── Peers ──────────────────────────────────────────────────────────────

/// A peer that prints `listening on URL` on stdout and lives while its
/// stdin is open; what it prints after comes on `lines`.
struct Peer {
    _child: Child,
    stdin: ChildStdin,
    lines: UnboundedReceiver<String>,
    url: String,
}

async fn peer(mut cmd: Command, log: &Path) -> Peer {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), out.next_line()).await;
    let line = match line {
        Ok(Ok(Some(line))) => line,
        other => panic!(
            "{} printed no ready line ({other:?}):\n{}",
            log.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    };
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not a ready line: {line}"))
        .trim()
        .to_string();
    // Keep draining its stdout, so it never blocks on a full pipe.
    let (tx, lines) = unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = out.next_line().await {
            let _ = tx.send(line);
        }
    });
    Peer { _child: child, stdin, lines, url }
}

impl Peer {
    /// The next line it prints, within `within`.
    async fn next(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.lines.recv()).await.ok().flatten()
    }

    async fn tell(&mut self, line: &str) {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }
}

fn config(port: u16, ledger: &str, vault: &Path, who: &str) -> String {
    format!(
        r#"[gateway]
listen = "127.0.0.1:{port}"
state_dir = "state"
ledger = "{ledger}"
# A server the gateway could not list is listed again soon after.
list_ttl_ms = 1000

[receipts]
origin = "{ORIGIN}"

[console]
enabled = true

# public_url is each replica's own listen address (the default): a consent
# begun on a replica comes back to that replica's callback.
[identity]
vault_key_file = "{vault}"

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
subject = "{JANE_SUBJECT}"
tenant = "atlas"
"#,
        vault = vault.display()
    )
}

/// One replica: its folder, config and port (kept across a restart).
struct Replica {
    name: &'static str,
    dir: PathBuf,
    port: u16,
    proc: Option<Proc>,
    starts: u32,
}

impl Replica {
    fn new(name: &'static str, home: &Path, ledger: &str, vault: &Path, who: &str) -> Self {
        let dir = home.join(name);
        std::fs::create_dir(&dir).unwrap();
        let port = free_port();
        std::fs::write(dir.join("toolgate.toml"), config(port, ledger, vault, who)).unwrap();
        Self { name, dir, port, proc: None, starts: 0 }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn mcp(&self) -> String {
        format!("{}/mcp", self.base())
    }

    /// `toolgate serve`, its outbound HTTP through `proxy` when given.
    async fn start(&mut self, home: &Path, proxy: Option<&str>) {
        self.starts += 1;
        let log = home.join(if self.starts == 1 {
            format!("{}.log", self.name)
        } else {
            format!("{}-{}.log", self.name, self.starts)
        });
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(self.dir.join("toolgate.toml"))
            .env("TG_ADA", ADA)
            .env("TG_JANE", JANE)
            .env("WHO_CLIENT_SECRET", CLIENT_SECRET);
        for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"] {
            cmd.env_remove(var);
        }
        if let Some(proxy) = proxy {
            cmd.env("HTTP_PROXY", proxy);
        }
        // Each refresh in the log ("refreshed a person's token", or why it
        // failed), timed: which replica spent a refresh token, and when.
        cmd.env("RUST_LOG", "warn,toolgate::identity=info");
        let proc = spawn_listening(cmd, &log, "toolgate: serving MCP on").await;
        assert_eq!(proc.url, self.mcp(), "{}", tail(&log, 20));
        self.proc = Some(proc);
    }
}

/// The test's folder, what failure messages show, and the timeline.
struct World {
    home: PathBuf,
    t0: Instant,
    timings: std::sync::Mutex<Vec<String>>,
}

impl World {
    /// A step done, with the time since the test began.
    fn mark(&self, what: &str) {
        let line = format!("[{:6.1}s] {what}", self.t0.elapsed().as_secs_f64());
        println!("connect_fleet: {line}");
        self.timings.lock().unwrap().push(line);
    }

    fn logs(&self) -> String {
        let mut names: Vec<String> = std::fs::read_dir(&self.home)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".log") && n != "chromedriver.log")
            .collect();
        names.sort();
        let mut out = String::new();
        for name in names {
            let n = if name.starts_with('a') || name.starts_with('b') { 50 } else { 20 };
            out.push_str(&format!(
                "\n--- {name} (last {n} lines) ---\n{}",
                tail(&self.home.join(&name), n)
            ));
        }
        out.push_str("\n(TOOLGATE_TEST_KEEP=1 keeps the folder and the schema)");
        out
    }

    /// The tools the stock SDK lists through `mcp`, as the person of `token`.
    async fn tools(&self, mcp: &str, era: &str, token: &str) -> Vec<String> {
        let mut cmd = Command::new(python());
        cmd.arg(workspace().join("tests/python/sdk_client.py"))
            .args([mcp, era, "[]"])
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
            "sdk_client.py ({era}, {mcp}) could not list: {stdout}\n{}{}",
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

    /// Waits up to `within` for `mcp` to list TOOL; returns how long it took.
    async fn listed(&self, mcp: &str, within: Duration, what: &str) -> Duration {
        let start = Instant::now();
        while !self.tools(mcp, LEGACY, JANE).await.iter().any(|t| t == TOOL) {
            assert!(
                start.elapsed() < within,
                "{what}: {TOOL} not listed through {mcp} within {within:?}{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        start.elapsed()
    }

    /// The stock SDK's `call_tool` of TOOL through `mcp` as the person of
    /// `token` (`elicit`: declaring URL elicitation): what
    /// `connect_client.py` printed last.
    async fn call(&self, mcp: &str, era: &str, token: &str, elicit: bool) -> Value {
        let mut cmd = Command::new(python());
        cmd.arg(workspace().join("tests/python/connect_client.py"))
            .args([mcp, era, TOOL])
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
            "connect_client.py ({era}, {mcp}): the SDK raised: {v}\n{stderr}{}",
            self.logs()
        );
        v
    }

    /// A call through `mcp` that must run as jane.
    async fn jane(&self, mcp: &str, era: &str, what: &str) {
        let v = self.call(mcp, era, JANE, false).await;
        assert_eq!(
            sub(&v),
            Some("jane"),
            "{what} ({era}, {mcp}): not run as jane: {v}{}",
            self.logs()
        );
    }

    /// `fleet_calls.py` as jane: the calls through `urls` fired together at
    /// `at_ms` (wall clock), kept running; `finish` reads the results.
    fn burst(&self, era: &str, urls: &[String], at_ms: Option<i64>, name: &str) -> Burst {
        let stderr = self.home.join(format!("{name}-client.log"));
        let mut cmd = Command::new(python());
        cmd.arg(workspace().join("tests/python/fleet_calls.py"));
        if let Some(at) = at_ms {
            cmd.args(["--at", &at.to_string()]);
        }
        cmd.args([era, TOOL])
            .args(urls)
            .env("TOOLGATE_TOKEN", JANE)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Burst { child, lines, stderr }
    }
}

/// A `fleet_calls.py` run.
struct Burst {
    child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: PathBuf,
}

impl Burst {
    /// Its results, one per URL, in order.
    async fn finish(mut self, w: &World) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => {
                    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                        panic!(
                            "fleet_calls.py printed no JSON ({e}): {line}\n{}",
                            tail(&self.stderr, 30)
                        )
                    });
                    if let Some(results) = v.get("results") {
                        let _ = self.child.wait().await;
                        return results.as_array().unwrap().clone();
                    }
                }
                other => panic!(
                    "fleet_calls.py ended without results ({other:?}):\n{}{}",
                    tail(&self.stderr, 30),
                    w.logs()
                ),
            }
        }
    }
}

/// As whom a call ran (whoami's `sub`), if it ran.
fn sub(v: &Value) -> Option<&str> {
    let result = &v["result"];
    (result.is_object() && result["isError"] != json!(true))
        .then(|| result["structuredContent"]["sub"].as_str())
        .flatten()
}

/// A refusal's (reason, action), if the call was refused.
fn refusal(v: &Value) -> Option<(&str, &str)> {
    let result = &v["result"];
    (result["isError"] == json!(true)).then(|| {
        (
            result["structuredContent"]["reason"].as_str().unwrap_or_default(),
            result["structuredContent"]["action"].as_str().unwrap_or_default(),
        )
    })
}

/// One line per result of a burst: where, how long, what it came to.
fn summary(results: &[Value]) -> String {
    let what = |r: &Value| match (sub(r), refusal(r)) {
        (Some(s), _) => format!("ran as {s}"),
        (None, Some((reason, action))) => format!("refused {reason} ({action})"),
        _ if r.get("error").is_some() => format!("JSON-RPC error {}", r["error"]),
        _ => format!("{}", r.get("threw").unwrap_or(r)),
    };
    results
        .iter()
        .map(|r| format!("  {} {} ms: {}", r["url"].as_str().unwrap_or("?"), r["ms"], what(r)))
        .collect::<Vec<_>>()
        .join("\n")
}

// ── The browser (`peers_common`'s) ─────────────────────────────────────

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

/// Whether the page has a `css` element now (false while it cannot tell).
async fn has(c: &Client, css: &str) -> bool {
    c.find_all(Locator::Css(css)).await.is_ok_and(|found| !found.is_empty())
}

/// Clicks `css` and waits until the browser has left the page it was on.
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

/// On the console's sign-in page: the person's own bearer token.
async fn sign_in_here(c: &Client, token: &str, w: &World) {
    element(c, "#token", w).await.send_keys(token).await.unwrap();
    click_and_wait(c, "button[type=submit]", w).await;
}

/// From a console page to the provider's login page, through the console's
/// `a#connect` when it shows that first.
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

/// At the provider: sign in as `login`, allow, land on the callback.
async fn at_provider(c: &Client, login: &str, w: &World) {
    element(c, "#login-form #login", w).await.send_keys(login).await.unwrap();
    click_and_wait(c, "#login-form #submit", w).await;
    element(c, "#consent-form", w).await;
    click_and_wait(c, "#consent-form #submit", w).await;
    element(c, "#connected", w).await;
}

/// Everything the fleet tests start from: both replicas list the tool, the
/// gateway's own account and jane's connected (item 1). The fields drop in
/// order: the processes first, then the schema, then the folder.
struct Fleet {
    a: Replica,
    b: Replica,
    proxy: Peer,
    _who: Peer,
    _provider: Peer,
    _browsers: Driver,
    w: World,
    schema: Schema,
    _dir: Option<tempfile::TempDir>,
}

/// Item 1, connect on one replica and call through another: two replicas
/// on one ledger and one vault key; an admin connects the gateway's own
/// account in a's console and b lists the tool once it retries; jane, asked
/// on b, consents through a's link in a's console, and her calls through b
/// run as jane.
async fn connected(test: &str) -> Fleet {
    let (dir, home) = workdir(test);
    let schema = Schema::create();
    let w = World { home: home.clone(), t0: Instant::now(), timings: Default::default() };

    // The vault key both replicas seal and open people's grants with.
    let vault = home.join("vault.key");
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut key = [0u8; 32];
        aws_lc_rs::rand::fill(&mut key).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&vault)
            .unwrap()
            .write_all(&key)
            .unwrap();
    }

    // The peers: the provider (any loopback port may be the callback's);
    // the upstream, trusting its tokens; the proxy in front of replica a.
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
    let mut who = Command::new(python());
    who.arg(workspace().join("tests/python/whoami_server.py")).args([
        "--port",
        "0",
        "--issuer",
        &provider.url,
        "--stateless",
    ]);
    let who = peer(who, &home.join("who.log")).await;
    let mut proxy = Command::new(python());
    proxy.arg(workspace().join("tests/python/hold_proxy.py")).args([
        "--hold-sub",
        "jane",
        "--client",
        &format!("toolgate:{CLIENT_SECRET}"),
    ]);
    let proxy = peer(proxy, &home.join("proxy.log")).await;

    let ledger = schema.ledger();
    let mut a = Replica::new("a", &home, &ledger, &vault, &who.url);
    let mut b = Replica::new("b", &home, &ledger, &vault, &who.url);
    a.start(&home, Some(&proxy.url)).await;
    b.start(&home, None).await;
    let browsers = driver(&home.join("chromedriver.log"));
    w.mark(&format!(
        "provider, who, proxy, replicas a (:{}, through the proxy) and b (:{}) on schema {}",
        a.port, b.port, schema.name
    ));

    for r in [&a, &b] {
        assert!(
            !w.tools(&r.mcp(), LEGACY, JANE).await.iter().any(|t| t == TOOL),
            "{}: {TOOL} listed before the gateway's account is connected{}",
            r.name,
            w.logs()
        );
    }
    let ada = browsers.session(&home.join("chromium-ada")).await;
    ada.goto(&format!("{}/console/signin", a.base())).await.unwrap();
    sign_in_here(&ada, ADA, &w).await;
    ada.goto(&format!("{}/console/connections", a.base())).await.unwrap();
    element(&ada, "a#connect-gateway-who", &w).await.click().await.unwrap();
    to_provider(&ada, &w).await;
    at_provider(&ada, "toolgate-reader", &w).await;
    w.mark("the admin connected the gateway's own account in a's console");
    let on_a = w
        .listed(
            &a.mcp(),
            Duration::from_secs(20),
            "a, after the gateway's account was connected on a",
        )
        .await;
    w.mark(&format!("a lists {TOOL} ({} ms after)", on_a.as_millis()));
    let on_b = w
        .listed(
            &b.mcp(),
            Duration::from_secs(30),
            "b, after the gateway's account was connected on a",
        )
        .await;
    w.mark(&format!("b lists {TOOL} ({} ms after a did)", on_b.as_millis()));

    // Jane, on b, is asked to connect (b's own link); on a, her URL
    // elicitation names a's link, and she consents there.
    let asked = w.call(&b.mcp(), LEGACY, JANE, false).await;
    assert_eq!(
        refusal(&asked),
        Some(("connect_required", "escalate")),
        "b, before jane connected: {asked}{}",
        w.logs()
    );
    assert!(
        asked["result"].to_string().contains(&format!("{}/console/connect?for=", b.base())),
        "b's connect_required names no link of b's: {asked}"
    );
    let v = w.call(&a.mcp(), LEGACY, JANE, true).await;
    assert_eq!(
        v["error"]["code"],
        json!(-32042),
        "a: -32042 (URL elicitation required) expected: {v}{}",
        w.logs()
    );
    let link =
        v["error"]["data"]["elicitations"][0]["url"].as_str().unwrap_or_default().to_string();
    assert!(
        link.starts_with(&format!("{}/console/connect?for=", a.base())),
        "not a's consent link: {v}"
    );
    let jane = browsers.session(&home.join("chromium-jane")).await;
    jane.goto(&link).await.unwrap();
    sign_in_here(&jane, JANE, &w).await;
    element(&jane, "a#connect", &w).await.click().await.unwrap();
    at_provider(&jane, "jane", &w).await;
    w.mark("jane consented in a's console");
    for era in [LEGACY, MODERN] {
        w.jane(&b.mcp(), era, "1. through b, after jane consented on a").await;
    }
    w.mark("jane's calls through b ran as jane (both eras)");
    // Sealed in the ledger: no token's JWT header in it.
    let unsealed = schema.query("SELECT count(*) FROM {s}.connections WHERE position(convert_to('eyJ', 'UTF8') in sealed) > 0");
    assert_eq!(unsealed, "0", "a grant in the ledger holds a token in the clear");
    assert!(schema.jane_expires().is_some(), "no grant of jane's in the ledger");
    jane.close().await.unwrap();
    ada.close().await.unwrap();
    Fleet { a, b, proxy, _who: who, _provider: provider, _browsers: browsers, w, schema, _dir: dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_connected_on_one_replica_serves_the_fleet_is_refreshed_once_and_survives_a_kill() {
    let mut fleet = connected("connect-fleet").await;
    let Fleet { a, b, proxy, w, schema, .. } = &mut fleet;
    let home = w.home.clone();

    // ── 2. One refresh across the fleet, twice ───────────────────────────
    let burst_urls: Vec<String> = std::iter::repeat_n(a.mcp(), PER_REPLICA)
        .chain(std::iter::repeat_n(b.mcp(), PER_REPLICA))
        .collect();
    for (round, era) in [(1, LEGACY), (2, MODERN)] {
        let before = schema.jane_expires().unwrap_or_else(|| {
            panic!("round {round}: jane's grant is gone from the ledger{}", w.logs())
        });
        // Half a second after it expired: every replica must refresh first,
        // and none may use the old token meanwhile.
        let at = before + 500;
        let results = w.burst(era, &burst_urls, Some(at), &format!("burst{round}")).finish(w).await;
        w.mark(&format!(
            "round {round} ({era}): {} calls fired together 500 ms after jane's token expired:\n{}",
            results.len(),
            summary(&results)
        ));
        for r in &results {
            assert_eq!(
                sub(r),
                Some("jane"),
                "round {round}: a call did not run as jane:\n{}{}",
                summary(&results),
                w.logs()
            );
        }
        let after = schema.jane_expires().unwrap_or_else(|| {
            panic!(
                "round {round}: jane's grant is gone from the ledger after the burst{}",
                w.logs()
            )
        });
        assert!(
            after > before,
            "round {round}: the grant in the ledger was not refreshed (expires_ms {before} → {after})"
        );
        // Later calls, once every replica's memory of the token has lapsed
        // and before the new one is due: from the ledger's grant, through
        // each replica.
        let later = w
            .burst(
                era,
                &[a.mcp(), b.mcp()],
                Some(at + CACHE_S as i64 * 1000 + 500),
                &format!("later{round}"),
            )
            .finish(w)
            .await;
        for r in &later {
            assert_eq!(
                sub(r),
                Some("jane"),
                "round {round}: a later call did not run as jane:\n{}{}",
                summary(&later),
                w.logs()
            );
        }
        assert!(
            schema.jane_lease().is_none(),
            "round {round}: a refresh lease left behind: {:?}",
            schema.jane_lease()
        );
        w.mark(&format!("round {round}: the grant in the ledger was replaced, and still serves later calls through a and b"));
    }

    // ── 3. kill -9 during a refresh loses neither token ──────────────────
    let before = schema
        .jane_expires()
        .unwrap_or_else(|| panic!("3: jane's grant is gone from the ledger{}", w.logs()));
    proxy.tell("hold").await;
    assert_eq!(
        proxy.next(Duration::from_secs(10)).await.as_deref(),
        Some("armed"),
        "the proxy did not arm{}",
        w.logs()
    );
    let in_flight = w.burst(LEGACY, &vec![a.mcp(); PER_REPLICA], Some(before + 500), "killed");
    let held = proxy.next(Duration::from_secs(40)).await;
    assert_eq!(
        held.as_deref(),
        Some("held jane"),
        "3: a's refresh of jane's grant never reached the proxy{}",
        w.logs()
    );
    let (holder, until) = schema.jane_lease().unwrap_or_else(|| {
        panic!(
            "3: a's refresh is under way, yet no lease on jane's grant in the ledger{}",
            w.logs()
        )
    });
    let killed = Instant::now();
    let killed_ms = now_ms();
    a.proc.take().unwrap().sigkill().await;
    w.mark(&format!("3: a SIGKILLed mid-refresh: it held the lease ({holder}, {} ms left), its refresh request held unsent", until - killed_ms));
    assert_eq!(
        proxy.next(Duration::from_secs(15)).await.as_deref(),
        Some("dropped jane"),
        "3: the held refresh was not dropped when a died{}",
        w.logs()
    );
    let cut = in_flight.finish(w).await;
    w.mark(&format!("3: the calls in flight through a:\n{}", summary(&cut)));
    assert_eq!(
        schema.jane_expires(),
        Some(before),
        "3: the grant in the ledger changed or went with a's death{}",
        w.logs()
    );
    assert_eq!(
        schema.jane_lease().map(|l| l.0),
        Some(holder.clone()),
        "3: the dead replica's lease is not in the ledger"
    );

    // Through b until it answers jane: meanwhile `identity_unavailable`
    // (retry) is allowed, nothing else.
    let deadline = killed + Duration::from_secs(LEASE_S + 15);
    let mut waited = Vec::new();
    loop {
        let v = w.call(&b.mcp(), LEGACY, JANE, false).await;
        let at = killed.elapsed();
        match (sub(&v), refusal(&v)) {
            (Some("jane"), _) => {
                waited.push(format!("{:.1}s jane", at.as_secs_f64()));
                break;
            }
            (None, Some(("identity_unavailable", "retry"))) => {
                waited.push(format!("{:.1}s identity_unavailable", at.as_secs_f64()))
            }
            _ => panic!(
                "3: through b, {:.1} s after a was killed mid-refresh: {v}\n(answers so far: {waited:?}){}",
                at.as_secs_f64(),
                w.logs()
            ),
        }
        assert!(
            Instant::now() < deadline,
            "3: b did not answer jane within {} s of a's death: {waited:?}{}",
            LEASE_S + 15,
            w.logs()
        );
    }
    let recovered = killed.elapsed();
    w.mark(&format!(
        "3: b answered jane {:.1} s after the kill (answers: {})",
        recovered.as_secs_f64(),
        waited.join(", ")
    ));
    let after = schema
        .jane_expires()
        .unwrap_or_else(|| panic!("3: jane's grant is gone from the ledger{}", w.logs()));
    assert!(
        after > before,
        "3: b answered jane, yet the grant was not refreshed (expires_ms {before} → {after})"
    );
    assert!(
        recovered >= Duration::from_millis((until - killed_ms).max(0) as u64),
        "3: b refreshed while the dead replica's lease still ran ({recovered:?} after the kill, the lease had {} ms left)",
        until - killed_ms
    );

    // a again, on the same port and state (its outbound HTTP direct now).
    proxy.tell("relay").await;
    a.start(&home, None).await;
    let relisted = w.listed(&a.mcp(), Duration::from_secs(30), "a, restarted").await;
    w.jane(&a.mcp(), LEGACY, "3: through a, restarted").await;
    w.jane(&b.mcp(), MODERN, "3: through b, after a restarted").await;
    w.mark(&format!(
        "3: a restarted (listed {TOOL} {} ms after it served) and answers jane; so does b",
        relisted.as_millis()
    ));

    let panicked = panics(&home);
    assert!(panicked.is_empty(), "a process panicked:\n{}", panicked.join("\n"));
    println!("connect_fleet: timings\n{}", w.timings.lock().unwrap().join("\n"));
}

/// A psql session that holds a row of the ledger locked (`FOR UPDATE`)
/// until `release`: a replica's write of that row waits on it meanwhile.
struct RowLock {
    child: Child,
    stdin: ChildStdin,
    /// Its backend's pid.
    pid: String,
}

impl RowLock {
    async fn take(schema: &Schema, table: &str, filter: &str) -> Self {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", &schema.base])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let sql = format!(
            "BEGIN;\nSELECT count(*) FROM (SELECT 1 FROM {}.{table} WHERE {filter} FOR UPDATE) AS locked;\nSELECT 'locked ' || pg_backend_pid();\n",
            schema.name
        );
        stdin.write_all(sql.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        let mut rows = String::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
                .await
                .expect("psql took the lock within 20 s")
                .unwrap()
                .expect("psql said nothing");
            if let Some(pid) = line.strip_prefix("locked ") {
                assert_eq!(rows.trim(), "1", "{table} WHERE {filter}: not one row locked");
                return Self { child, stdin, pid: pid.to_string() };
            }
            rows.push_str(&line);
        }
    }

    /// The backends now waiting on `pid` (a lock it holds), within `within`.
    async fn waiting_on(
        schema: &Schema,
        pid: &str,
        within: Duration,
        w: &World,
        what: &str,
    ) -> String {
        let deadline = Instant::now() + within;
        loop {
            let pids = psql(
                &schema.base,
                &format!(
                    "SELECT pid FROM pg_stat_activity WHERE {pid} = ANY(pg_blocking_pids(pid))"
                ),
            )
            .unwrap();
            if let Some(first) = pids.lines().next() {
                return first.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "{what}: nobody waits on backend {pid} after {within:?}{}",
                w.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn release(mut self) {
        self.stdin.write_all(b"COMMIT;\n").await.unwrap();
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
    }
}

/// The race a fleet-wide lease alone does not close, made to happen every
/// time: replica b reads jane's expired grant while a's refresh of it is
/// under way, and claims the refresh just after a finished (the lease is
/// free again), with the refresh token it read before — which a has spent.
/// The provider sees a refresh token used twice and revokes the grant.
///
/// How it is made to happen: a psql session holds jane's grant row locked,
/// so a's `finish_refresh` (its lease deleted, the new grant waiting on the
/// row) waits; b's call then reads the old grant (reads do not wait) and
/// its `claim_refresh` waits on a's unfinished delete of the lease; the
/// lock is released; a's write commits, then b's claim succeeds.
///
/// The refresh reads the grant again once it holds the lease, and
/// refreshes only if it is still the grant it read
/// (`Connections::refresh` in identity/connections.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_read_the_grant_before_another_refreshed_it_does_not_spend_its_token_again()
{
    let mut fleet = connected("connect-fleet-race").await;
    let Fleet { a, b, w, schema, .. } = &mut fleet;
    let before = schema.jane_expires().unwrap();
    let wait = before + 500 - now_ms();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;

    let lock = RowLock::take(
        schema,
        "connections",
        &format!("tenant = 'atlas' AND subject = '{JANE_SUBJECT}' AND server = 'who'"),
    )
    .await;
    let through_a = w.burst(LEGACY, &[a.mcp()], None, "race-a");
    let a_pid = RowLock::waiting_on(
        schema,
        &lock.pid,
        Duration::from_secs(30),
        w,
        "a's write of the refreshed grant",
    )
    .await;
    w.mark("a refreshed jane's grant; its write of it waits on the locked row");
    let through_b = w.burst(LEGACY, &[b.mcp()], None, "race-b");
    RowLock::waiting_on(schema, &a_pid, Duration::from_secs(30), w, "b's claim of the refresh")
        .await;
    w.mark("b read the old grant and its claim of the refresh waits on a's release of the lease");
    lock.release().await;
    let (ra, rb) = (through_a.finish(w).await, through_b.finish(w).await);
    let results: Vec<Value> = ra.into_iter().chain(rb).collect();
    w.mark(&format!("the lock released:\n{}", summary(&results)));
    for r in &results {
        assert_eq!(
            sub(r),
            Some("jane"),
            "a call did not run as jane:\n{}{}",
            summary(&results),
            w.logs()
        );
    }
    assert!(
        schema.jane_expires().is_some_and(|e| e > before),
        "jane's grant is gone from the ledger, or was not refreshed{}",
        w.logs()
    );
    let later = w
        .burst(
            LEGACY,
            &[a.mcp(), b.mcp()],
            Some(now_ms() + CACHE_S as i64 * 1000 + 500),
            "race-later",
        )
        .finish(w)
        .await;
    for r in &later {
        assert_eq!(
            sub(r),
            Some("jane"),
            "a later call did not run as jane:\n{}{}",
            summary(&later),
            w.logs()
        );
    }
}
