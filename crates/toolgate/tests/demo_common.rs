//! `toolgate demo --serve` as a test peer: started in a state dir, read
//! until it prints its endpoint, config and tokens, stopped with SIGTERM.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

/// Orders the Atlas parts server has placed in the demo's state dir.
pub fn orders_in(state: &Path) -> usize {
    std::fs::read_to_string(state.join("atlas/orders.jsonl"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// An order of the -S thermostatic valve for the data set's open AC-250-S ticket.
pub fn valve_order(quantity: u32) -> serde_json::Value {
    let data = toolgate_atlas::dataset();
    let ticket = data
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == "AC-250-S")
        .unwrap();
    let part = data
        .parts
        .iter()
        .find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"))
        .unwrap();
    serde_json::json!({"part_no": part.part_no, "quantity": quantity, "ticket_id": ticket.ticket_id})
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
    pub approver_token: String,
    /// The one-time console sign-in link printed for the approver.
    pub console_sign_in: String,
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
    let (mut endpoint, mut config, mut agent, mut approver, mut sign_in) =
        (None, None, None, None, None);
    while endpoint.is_none()
        || config.is_none()
        || agent.is_none()
        || approver.is_none()
        || sign_in.is_none()
    {
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
        if let Some(v) = line.strip_prefix("console-sign-in: ") {
            sign_in = v.split_whitespace().next().map(str::to_string);
        }
        if let Some(v) = line.strip_prefix("config: ") {
            config = Some(PathBuf::from(v));
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert_ne!(agent, approver);
    Serving {
        child,
        endpoint: endpoint.unwrap(),
        config: config.unwrap(),
        agent_token: agent.unwrap(),
        approver_token: approver.unwrap(),
        console_sign_in: sign_in.unwrap(),
    }
}

/// The repository's root, where `tests/python` is.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
