//! `toolgate probe`: one `GET` of a health endpoint, for a container's
//! `HEALTHCHECK` or a load balancer's script — the image has no curl, and
//! needs none.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

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

/// Succeeds when `url` answers 2xx; else says what it answered.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut client = reqwest::Client::builder()
        .timeout(Duration::from_millis(args.timeout_ms))
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
        .with_context(|| format!("{}: no answer", args.url))?;
    let status = answer.status();
    if status.is_success() {
        return Ok(());
    }
    // The reason the endpoint gives, bounded, one line of printable text.
    let body = answer.text().await.unwrap_or_default();
    let reason: String = body
        .chars()
        .take(300)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    anyhow::bail!("{} answered {status}: {}", args.url, reason.trim())
}
