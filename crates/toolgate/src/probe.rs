//! `toolgate probe`: one `GET` of a health endpoint, for a container's
//! `HEALTHCHECK` or a load balancer's script — the image has no curl, and
//! needs none.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use toolgate_core::visible::visible;
use toolgate_mcp::body;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to ask: `/readyz` (can serve calls) or `/healthz` (the process answers).
    #[arg(default_value = "http://127.0.0.1:8765/readyz")]
    url: String,
    /// A PEM bundle of CA certificates to trust beside the system's, for an `https://` listener.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Give up after this many milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    timeout_ms: u64,
}

/// The most of an error's body read, to quote its reason; the rest is
/// dropped unread (the probe only needs the status).
const REASON_HEAD: usize = 1024;

/// Succeeds when `url` answers 2xx; else says what it answered. One `GET`,
/// as documented: a redirect is not followed but fails the probe and says
/// where it pointed, so a health check never reports another endpoint's health.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut client = reqwest::Client::builder()
        .timeout(Duration::from_millis(args.timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(file) = &args.ca_file {
        let pem = std::fs::read(file)
            .with_context(|| format!("--ca-file {}: cannot read it", file.display()))?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("--ca-file {}: not a PEM bundle", file.display()))?;
        client = client.tls_certs_merge(roots);
    }
    let answer = client
        .build()?
        .get(&args.url)
        .send()
        .await
        .with_context(|| format!("{}: no answer", visible(&args.url)))?;
    let status = answer.status();
    if status.is_success() {
        return Ok(());
    }
    if status.is_redirection() {
        let to = body::location(&answer);
        anyhow::bail!(
            "{} answered {status}, a redirect to {}, which the probe does not follow: probe that URL itself",
            visible(&args.url),
            visible(&to)
        );
    }
    // The reason the endpoint gives: its first bytes, one line, escaped.
    let said = body::read_head(answer, REASON_HEAD).await;
    let reason: String = visible(said.trim()).chars().take(300).collect();
    anyhow::bail!("{} answered {status}: {reason}", visible(&args.url))
}
