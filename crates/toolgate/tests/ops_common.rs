//! Shared set-up for the operation tests in `operations_crash.rs`: real
//! `toolgate` child processes (the Atlas support desk upstream and gateways
//! with `serve`), raw 2026-07-28 JSON-RPC over HTTP, the operator CLI
//! (`toolgate ops …`), and readers for the support desk's files.
//!
//! Every child is a `tokio::process::Child` with `kill_on_drop`, so a test
//! that panics (or returns early) leaves no process behind: dropping the
//! runtime drops the children, and dropping a child SIGKILLs it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};

pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
/// The write under test, as the gateway exposes it.
pub const CREATE: &str = "support__create_ticket";
/// A customer the support desk knows.
pub const CUSTOMER: &str = "cust_harbor_02";
/// The approver's bearer token (≥ 16 characters), given to the gateways
/// through `TG_DANA_TOKEN`.
pub const DANA_TOKEN: &str = "dana-token-0123456789abcdef";

/// A child process that printed the URL it serves on.
pub struct Proc {
    pub child: Child,
    pub url: String,
    /// Its stderr (tracing logs included), kept for failure messages.
    pub log: PathBuf,
}

impl Proc {
    /// The HTTP base (the URL without `/mcp`), for the admin API.
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// SIGKILL and reap: a crash, as the operating system delivers it.
    pub async fn sigkill(mut self) {
        // Dying on its own would be a bug of its own, not a crash we caused.
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "{} exited on its own ({status}) before the kill:\n{}",
                self.log.display(),
                tail(&self.log, 30)
            );
        }
        // `Child::kill` sends SIGKILL on Unix and waits for the exit.
        self.child.kill().await.expect("SIGKILL the child");
    }
}

/// The last lines of a log, for failure messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Spawns `cmd` with stderr into `log` and waits (polling the log) until
/// it prints a line containing `marker` and a URL; fails if it exits first.
pub async fn spawn_listening(mut cmd: Command, log: &Path, marker: &str) -> Proc {
    let file = std::fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(file).kill_on_drop(true);
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {BIN}: {e}"));
    // Generous: the machine is small and debug builds start slowly.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // Complete lines only: stderr is unbuffered, and a line printed with
        // format arguments may reach the file in several writes.
        let complete = &text[..text.rfind('\n').map_or(0, |n| n + 1)];
        if let Some(line) = complete.lines().find(|l| l.contains(marker)) {
            let url = line
                .split_whitespace()
                .find(|w| w.starts_with("http://") || w.starts_with("https://"))
                .unwrap_or_else(|| panic!("no URL in `{line}`"))
                .to_string();
            assert!(
                url.ends_with("/mcp") && url.len() > "http:///mcp".len(),
                "not a URL: `{line}`"
            );
            return Proc { child, url, log: log.to_path_buf() };
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{} exited ({status}) before it served:\n{text}", log.display());
        }
        assert!(
            Instant::now() < deadline,
            "{} did not print `{marker}` within 60 s:\n{text}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Should the test binary itself die without unwinding (SIGINT, a harness
/// timeout), the kernel SIGKILLs the child too (Linux `PR_SET_PDEATHSIG`;
/// `kill_on_drop` covers panics). The signal follows the spawning thread:
/// here a runtime thread, which lives as long as the test.
fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// The Atlas support desk over HTTP, keeping its files in `state`.
pub async fn start_support(state: &Path, log: &Path) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["atlas", "support", "--http", "127.0.0.1:0", "--state"]).arg(state);
    spawn_listening(cmd, log, "serving support on").await
}

/// `toolgate serve --config FILE`, with the approver's token in its environment.
pub async fn start_gateway(config: &Path, log: &Path) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--config"]).arg(config).env("TG_DANA_TOKEN", DANA_TOKEN);
    spawn_listening(cmd, log, "toolgate: serving MCP on").await
}

/// A gateway config in front of the support desk at `upstream`.
/// `ledger`: a `postgres://` URL, or `None` for the embedded SQLite file in
/// the state dir. `create_class`: the registry class of create_ticket.
pub fn gateway_config(upstream: &str, ledger: Option<&str>, create_class: &str) -> String {
    let ledger = ledger.map(|l| format!("ledger = \"{l}\"\n")).unwrap_or_default();
    format!(
        r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"
upstream_timeout_ms = 2000
{ledger}
# Approval tests here re-issue by hand: a waiting call is answered at once.
[approvals]
hold_ms = 0

[servers.support]
url = "{upstream}"

[registry."support__create_ticket"]
class = "{create_class}"
[registry."support__create_ticket".reconcile]
tool = "get_ticket"
arguments = {{ client_reference = "client_reference" }}
found = "/found"
[registry."support__get_ticket"]
class = "automatic"
read_only = true
[registry."support__search_customers"]
class = "automatic"
read_only = true

[callers.agent]
tenant = "acme"
anonymous = true
[callers.dana]
tenant = "acme"
roles = ["approver"]
token_env = "TG_DANA_TOKEN"
"#
    )
}

/// An HTTP client for the tests: no proxy, a deadline well above the
/// gateway's own (an answer that never comes is a failure, not a hang).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(64)
        .build()
        .unwrap()
}

/// The arguments of the ticket for `key`: its own client_reference, so the
/// support desk's files can be counted per key.
pub fn ticket_args(key: &str) -> Value {
    json!({"customer_id": CUSTOMER, "subject": format!("crash test {key}"), "priority": "normal", "client_reference": reference(key)})
}

pub fn reference(key: &str) -> String {
    format!("ref-{key}")
}

/// A 2026-07-28 `tools/call` as the gateway tests and the bench send it:
/// the standard `_meta` (plus the operation key, if any), the routing
/// headers, and `extra` merged into `params` (requestState, …).
/// Returns the HTTP status and the JSON-RPC body.
pub async fn call(
    client: &reqwest::Client,
    url: &str,
    arguments: &Value,
    key: Option<&str>,
    extra: Value,
    token: Option<&str>,
) -> Result<(u16, Value), reqwest::Error> {
    call_tool(client, url, CREATE, arguments, key, extra, token).await
}

/// [`call`] for any tool.
pub async fn call_tool(
    client: &reqwest::Client,
    url: &str,
    tool: &str,
    arguments: &Value,
    key: Option<&str>,
    extra: Value,
    token: Option<&str>,
) -> Result<(u16, Value), reqwest::Error> {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "operations-crash-test", "version": "1"},
        // A client that can be asked: a waiting call gets an input round.
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}
    });
    if let Some(k) = key {
        meta["io.toolgate/operationKey"] = json!(k);
    }
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": meta});
    if let Value::Object(more) = extra {
        for (k, v) in more {
            params[k.as_str()] = v;
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let mut req = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let text = resp.text().await?;
    Ok((status, parse_body(&text)))
}

/// A JSON body, or the JSON-RPC response inside an SSE stream.
pub fn parse_body(text: &str) -> Value {
    if let Ok(v) = serde_json::from_str(text) {
        return v;
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .filter(|v| v.get("result").is_some() || v.get("error").is_some())
        .last()
        .unwrap_or_else(|| json!({"unparsed": text}))
}

/// What one answer to a create_ticket call was.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A ticket: the tool's own result (fresh or replayed), or the
    /// reconciler's evidence replayed after `reconciled_applied`.
    Ticket {
        ticket_id: String,
        client_reference: String,
        replayed: bool,
        state: String,
        op_id: String,
        op_key: String,
        reconciled: bool,
    },
    /// A refusal: `structuredContent.reason` and what comes with it.
    Refused {
        reason: String,
        operation_id: Option<String>,
        retry_after_ms: Option<u64>,
        body: Value,
    },
    /// Anything else (a JSON-RPC error, input_required, …).
    Other(Value),
}

pub fn classify(body: &Value) -> Answer {
    let result = &body["result"];
    let sc = &result["structuredContent"];
    let op = &result["_meta"]["io.toolgate/operation"];
    let ticket = if sc["ticket_id"].is_string() {
        Some((sc, false))
    } else if sc["reconciled"] == json!(true) && sc["evidence"]["ticket"]["ticket_id"].is_string() {
        Some((&sc["evidence"]["ticket"], true))
    } else {
        None
    };
    if let (Some((t, reconciled)), false) = (ticket, result["isError"] == json!(true)) {
        return Answer::Ticket {
            ticket_id: t["ticket_id"].as_str().unwrap().to_string(),
            client_reference: t["client_reference"].as_str().unwrap_or_default().to_string(),
            replayed: op["replayed"].as_bool().unwrap_or_else(|| {
                panic!("a write's result without _meta[io.toolgate/operation].replayed: {body}")
            }),
            state: op["state"].as_str().unwrap_or_default().to_string(),
            op_id: op["id"].as_str().unwrap_or_default().to_string(),
            op_key: op["key"].as_str().unwrap_or_default().to_string(),
            reconciled,
        };
    }
    if result["isError"] == json!(true) {
        if let Some(reason) = sc["reason"].as_str() {
            return Answer::Refused {
                reason: reason.to_string(),
                operation_id: sc["operation_id"].as_str().map(String::from),
                retry_after_ms: sc["retry_after_ms"].as_u64(),
                body: body.clone(),
            };
        }
    }
    Answer::Other(body.clone())
}

/// Runs `toolgate ARGS…` to completion (with a deadline); returns stdout,
/// failing with its stderr if it did not succeed.
pub async fn toolgate(args: &[&str]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("toolgate {args:?} took over 120 s"))
        .unwrap();
    assert!(
        out.status.success(),
        "toolgate {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `toolgate ops list --json`: every operation in the config's ledger.
pub async fn ops_list(config: &Path) -> Vec<Value> {
    let out = toolgate(&[
        "ops",
        "list",
        "--json",
        "--limit",
        "100000000",
        "--config",
        config.to_str().unwrap(),
    ])
    .await;
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("ops list --json is not JSON ({e}): {out}"));
    v["operations"].as_array().unwrap_or_else(|| panic!("no operations array: {v}")).clone()
}

/// `toolgate ops reconcile --json ID`: `{operation, applied, evidence}`.
pub async fn ops_reconcile(config: &Path, id: &str) -> Value {
    let out =
        toolgate(&["ops", "reconcile", "--json", "--config", config.to_str().unwrap(), id]).await;
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("ops reconcile --json is not JSON ({e}): {out}"))
}

/// The lines of a JSONL file (none if it does not exist yet).
pub fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: a line is not JSON ({e}): {l}", path.display()))
        })
        .collect()
}

/// create_ticket invocations per client_reference (`support-calls.jsonl`).
pub fn invocations(support_state: &Path) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for line in jsonl(&support_state.join("support-calls.jsonl")) {
        *n.entry(line["client_reference"].as_str().unwrap().to_string()).or_default() += 1;
    }
    n
}

/// Tickets per client_reference (`support-tickets.jsonl`): their ids.
pub fn tickets(support_state: &Path) -> BTreeMap<String, Vec<String>> {
    let mut t: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in jsonl(&support_state.join("support-tickets.jsonl")) {
        t.entry(line["client_reference"].as_str().unwrap().to_string())
            .or_default()
            .push(line["ticket_id"].as_str().unwrap().to_string());
    }
    t
}

/// The test's folder: a temporary one, removed at the end unless
/// `TOOLGATE_TEST_KEEP` is set (then kept, and its path printed, to read the
/// gateways' logs and the desk's files after a failure).
pub fn workdir(test: &str) -> (Option<tempfile::TempDir>, PathBuf) {
    let dir = tempfile::Builder::new().prefix(&format!("toolgate-{test}-")).tempdir().unwrap();
    if std::env::var_os("TOOLGATE_TEST_KEEP").is_some() {
        let path = dir.keep();
        println!("{test}: keeping {}", path.display());
        return (None, path);
    }
    let path = dir.path().to_path_buf();
    (Some(dir), path)
}

/// Lines that say a process panicked, from every log in `logs`.
pub fn panics(logs: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("panicked")) {
            found.push(format!("{}: {line}", path.file_name().unwrap().to_string_lossy()));
        }
    }
    found
}

/// A small seeded generator (xorshift64*), so a failing run can be replayed
/// with its seed; no `rand` dependency needed for this.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// One test at a time in this binary: each drives several processes on a
/// small machine, and their timings (leases, kill intervals) assume the
/// cores are not shared with the other test.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
