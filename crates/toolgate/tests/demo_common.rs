//! `toolgate demo --serve` as a test peer: started in a state dir, read
//! until it prints its endpoint, config and tokens, stopped with SIGTERM.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

/// A Python with the official MCP SDK and `cryptography`: `TOOLGATE_PYTHON`,
/// else the venv `scripts/test` creates.
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("TOOLGATE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-sdk/bin/python");
    assert!(venv.exists(), "no Python with the MCP SDK: run scripts/test or set TOOLGATE_PYTHON");
    venv
}

pub struct Serving {
    child: Child,
    pub endpoint: String,
    pub config: PathBuf,
    pub agent_token: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        // SIGTERM, so the demo stops what it started (a SIGKILL would orphan
        // its manuals process).
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

pub fn demo_serve(state: &Path) -> Serving {
    let mut child = toolgate()
        .args(["demo", "--serve", "--state"])
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut endpoint, mut config, mut agent, mut approver) = (None, None, None, None);
    while endpoint.is_none() || config.is_none() || agent.is_none() || approver.is_none() {
        let line = lines.next().expect("demo --serve prints endpoint, config and tokens").unwrap();
        if let Some(v) = line.strip_prefix("agent-token: ") {
            agent = Some(v.to_string());
        }
        if let Some(v) = line.strip_prefix("approver-token: ") {
            approver = Some(v.to_string());
        }
        if let Some(v) = line.strip_prefix("endpoint: ") {
            endpoint = Some(v.to_string());
        }
        if let Some(v) = line.strip_prefix("config: ") {
            config = Some(PathBuf::from(v));
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert_ne!(agent, approver);
    Serving { child, endpoint: endpoint.unwrap(), config: config.unwrap(), agent_token: agent.unwrap() }
}
