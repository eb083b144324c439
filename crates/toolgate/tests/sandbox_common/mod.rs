//! Shared set-up of the sandbox tests (`sandbox.rs`, `sandbox_registries.rs`;
//! a folder, so that cargo does not build it as a test of its own):
//! the Python of the official MCP SDK and what a box must grant it, a gateway
//! (`toolgate serve`) with the upstreams' stderr in its log, the stock SDK
//! client that waits for boxed servers still fetching their packages, and the
//! check that a package registry can be reached at all.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::Command;

use crate::demo_common::workspace;
use crate::ops_common::{BIN, Proc, spawn_listening};

/// The venv's Python by its own path (its symlink is what makes it the venv's).
pub fn python() -> PathBuf {
    match std::env::var("TOOLGATE_PYTHON") {
        Ok(p) => PathBuf::from(p),
        Err(_) => {
            crate::demo_common::python().parent().unwrap().canonicalize().unwrap().join("python")
        }
    }
}

/// The venv `scripts/test` makes (`.venv-sdk`), where `uvx` is too.
pub fn venv() -> PathBuf {
    python().parent().unwrap().parent().unwrap().to_path_buf()
}

/// A script of `tests/python`, by its real path.
pub fn script(name: &str) -> PathBuf {
    workspace().canonicalize().unwrap().join("tests/python").join(name)
}

/// What a box must let the SDK's Python read beside the system paths: the
/// venv (its `pyvenv.cfg` and site-packages) and the installation its
/// `python` links to (here pyenv's, under the real home; in CI perhaps
/// /usr, which the box grants already). Never the real home itself.
pub fn python_grants() -> Vec<PathBuf> {
    let code = "import json, os, sys, mcp; print(json.dumps([sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(mcp.__file__))]))";
    let out = StdCommand::new(python()).args(["-c", code]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dirs: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    let mut grants: Vec<PathBuf> = Vec::new();
    for d in dirs {
        let d = PathBuf::from(d).canonicalize().unwrap();
        if d.starts_with("/usr") || grants.iter().any(|g| d.starts_with(g)) {
            continue;
        }
        grants.retain(|g| !g.starts_with(&d));
        grants.push(d);
    }
    let home = std::env::var("HOME").map(PathBuf::from).unwrap_or_default();
    for g in &grants {
        assert!(
            g.components().count() > 2 && g != &home && !std::env::temp_dir().starts_with(g),
            "a grant this broad would prove nothing: {}",
            g.display()
        );
    }
    grants
}

/// A path as a TOML string.
pub fn toml(path: &Path) -> String {
    json!(path.display().to_string()).to_string()
}

/// A list of paths as a TOML array.
pub fn toml_list(paths: &[PathBuf]) -> String {
    format!("[{}]", paths.iter().map(|p| toml(p)).collect::<Vec<_>>().join(", "))
}

pub fn owner_only(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `toolgate serve --config FILE`, its upstreams' stderr in its log (debug),
/// with `env` added to its environment.
pub async fn start_gateway(config: &Path, log: &Path, env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--config"]).arg(config).env("RUST_LOG", "info,toolgate_mcp=debug");
    for (k, v) in env {
        cmd.env(k, v);
    }
    spawn_listening(cmd, log, "toolgate: serving MCP on").await
}

/// `sandbox_client.py`: the stock SDK client waits (at most `wait_s`) until
/// the tools of `calls` are listed, then calls each in order.
pub async fn client(url: &str, wait_s: u64, calls: &Value) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(script("sandbox_client.py"))
        .args([url, &wait_s.to_string(), &calls.to_string()])
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(wait_s + 120), cmd.output())
        .await
        .expect("the client finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sandbox_client.py: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("sandbox_client.py: not JSON ({e}): {stdout}"))
}

/// The text of a tool result's first content block.
pub fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content: {result}"))
}

/// Whether `url` answers an HTTPS GET from here (the machine's CA settings,
/// as the servers in the box get them), within 15 s. `Err` says why not.
pub fn reachable(url: &str) -> Result<(), String> {
    let code = "import sys, urllib.request\ntry:\n    urllib.request.urlopen(sys.argv[1], \
        timeout=10).read(1)\nexcept Exception as e:\n    print(f'{type(e).__name__}: {e}'); \
        sys.exit(1)";
    let started = Instant::now();
    let out =
        StdCommand::new(python()).args(["-c", code, url]).output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} ({:.1} s)",
            String::from_utf8_lossy(&out.stdout).trim(),
            started.elapsed().as_secs_f64()
        ))
    }
}

/// One clear line when a test cannot run here (only for an unreachable
/// registry), written to stderr itself so that `cargo test`'s capture does
/// not hide it (nextest shows it with `--success-output` or `--no-capture`).
pub fn skip(test: &str, why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Waits (at most `within`) until the log holds a line with every one of `needles`.
pub async fn log_line(log: &Path, needles: &[&str], within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return Some(line.to_string());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
