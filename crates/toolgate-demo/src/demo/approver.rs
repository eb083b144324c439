//! The demo's approver: `toolgate approvals approve|deny` as a separate
//! process, exactly as an operator would run it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};

pub const APPROVER: &str = "dana";

pub struct Approver<'a> {
    pub exe: &'a Path,
    pub config: &'a Path,
}

impl Approver<'_> {
    pub fn decide(
        &self,
        verb: &str,
        id: &str,
        reason: &str,
        as_who: &str,
    ) -> anyhow::Result<String> {
        let out = Command::new(self.exe)
            .args(["approvals", verb, "--config"])
            .arg(self.config)
            .args([id, "--as", as_who, "--reason", reason])
            .output()
            .context("running `toolgate approvals`")?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!("{}", text.trim());
        }
        Ok(text)
    }

    /// Another operator command on the same config: `toolgate ARGS… --config C ID`.
    pub fn cli(&self, args: &[&str], id: &str) -> anyhow::Result<String> {
        let out = Command::new(self.exe)
            .args(args)
            .arg("--config")
            .arg(self.config)
            .arg(id)
            .output()
            .with_context(|| format!("running `toolgate {}`", args.join(" ")))?;
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The pending approvals, as `toolgate approvals list --state pending --json` prints them.
    pub fn pending(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let out = Command::new(self.exe)
            .args(["approvals", "list", "--state", "pending", "--json", "--config"])
            .arg(self.config)
            .output()
            .context("running `toolgate approvals list`")?;
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        Ok(listed["approvals"].as_array().cloned().unwrap_or_default())
    }

    pub fn approve(&self, id: &str, reason: &str) -> anyhow::Result<()> {
        self.decide("approve", id, reason, APPROVER).map(|_| ())
    }

    pub fn deny(&self, id: &str, reason: &str) -> anyhow::Result<()> {
        self.decide("deny", id, reason, APPROVER).map(|_| ())
    }
}
