//! The upstream-identity tests' peers (`identity.rs`, `connect.rs`,
//! `connect_fleet.rs`): processes that print `listening on URL` once they
//! serve and live while their stdin is open — oidc-provider
//! (`tests/oidc/provider.mjs`) and the Python SDK's `whoami_server.py` —
//! and the browser people consent in (Debian's headless Chromium, driven by
//! chromedriver).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// The repository's root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's Python (`TOOLGATE_PYTHON`, else the one `scripts/test`
/// makes) by its own path: its symlink is what makes it the venv's.
pub fn python() -> PathBuf {
    match std::env::var("TOOLGATE_PYTHON") {
        Ok(p) => PathBuf::from(p),
        Err(_) => {
            let venv = workspace().join(".venv-sdk/bin/python");
            assert!(
                venv.exists(),
                "no Python with the MCP SDK: run scripts/test or set TOOLGATE_PYTHON"
            );
            venv.parent().unwrap().canonicalize().unwrap().join("python")
        }
    }
}

/// A port nobody listens on now: the gateway's, named to the peers before it starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A peer that prints `listening on URL` on stdout and lives while its
/// stdin is open.
pub struct Peer {
    pub child: Child,
    _stdin: ChildStdin,
    pub url: String,
}

/// Starts `cmd`, its stderr into `log`, and waits (a minute at most) for its ready line.
pub async fn peer(mut cmd: Command, log: &Path) -> Peer {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
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
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Peer { child, _stdin: stdin, url }
}

/// `whoami_server.py` with `args`.
pub fn whoami(args: &[&str]) -> Command {
    let mut cmd = Command::new(python());
    cmd.arg(workspace().join("tests/python/whoami_server.py")).args(args);
    cmd
}

/// oidc-provider (`tests/oidc/provider.mjs`) with `args`.
pub fn provider(args: &[&str]) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(workspace().join("tests/oidc/provider.mjs")).args(args);
    cmd
}

/// chromedriver on a free port. Each person gets a WebDriver session of
/// their own, with a fresh profile: no cookie is shared between people.
pub struct Driver {
    _child: Child,
    port: u16,
}

/// Starts chromedriver, its log in `log`.
pub fn driver(log: &Path) -> Driver {
    let path = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let path = path.expect("no chromedriver: install Debian's chromium and chromium-driver (.ci/run and scripts/test do)");
    let port = free_port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Driver { _child: child, port }
}

impl Driver {
    /// A headless Chromium session with the profile in `profile`.
    pub async fn session(&self, profile: &Path) -> Client {
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
        ];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium", "args": args}),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{}", self.port))
                .await
            {
                Ok(c) => return c,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) => panic!("no WebDriver session: {e}"),
            }
        }
    }
}

/// Where the browser is, for failure messages.
pub async fn here(c: &Client) -> String {
    c.current_url().await.map(|u| u.to_string()).unwrap_or_else(|e| format!("(no URL: {e})"))
}
