//! `toolgate serve`: the gateway on Streamable HTTP (default) or stdio.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use toolgate_console::{Console, ConsoleConfig};
use toolgate_gateway::config::{Config, ConfigError};
use toolgate_gateway::downstream;
use toolgate_gateway::gateway::{Gateway, Mode};

/// Loads the config (and an optional mcpServers file) with errors that name
/// the file. Its `[console]`, which the gateway keeps unread, is read by the
/// console here: a section it refuses stops the command as the gateway's
/// own refusals do.
pub fn load_config(path: &Path, mcp_json: Option<&Path>) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.into(), source })?;
    let mut config = Config::parse(&text, path)?;
    ConsoleConfig::parse(&text, path)?;
    // A reload re-reads the file: its `[console]` is checked again then.
    config.check_section(|config| ConsoleConfig::of(config).map(drop))?;
    if let Some(file) = mcp_json {
        config.import_mcp_json(file)?;
    }
    Ok(config)
}

/// Serves until a signal; `scrape` is the Prometheus scrape, when configured.
pub async fn run(
    config: Config,
    stdio: bool,
    scrape: Option<toolgate_gateway::prometheus::Scrape>,
) -> anyhow::Result<()> {
    if config.callers.is_empty() {
        tracing::warn!(
            "no [callers] configured: every request will be refused with 401 (add a caller with a token, or one with anonymous = true)"
        );
    }
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let gw = Gateway::start(config, Mode::Serve).await?;
    // One certificate, watched once, for every listener (stdio alone has none).
    let certificate = if stdio && scrape.is_none() { None } else { certificate(&gw)? };
    if let Some(scrape) = scrape {
        // A listener like the others: TLS when they have a certificate.
        let (listening, base) = Listening::bind(
            scrape.listen(),
            certificate.as_ref(),
            " ([telemetry] prometheus_listen)",
        )
        .await?;
        eprintln!("metrics: {base}/metrics");
        let serving = listening.serve(scrape.router(), std::future::pending());
        tokio::spawn(async move {
            if let Err(e) = serving.await {
                tracing::error!(error = %e, "the Prometheus scrape's listener failed");
            }
        });
    }
    for (server, why) in gw.wait_ready(Duration::from_secs(10)).await {
        tracing::warn!(%server, %why, "upstream not ready yet; its tools are unlisted until it is");
    }
    reload_on_hangup(gw.clone(), hup);
    let result = if stdio {
        downstream::stdio::serve(gw.clone()).await.context("stdio transport")
    } else {
        serve_http(gw.clone(), certificate).await
    };
    // A last checkpoint covers every receipt of this run.
    gw.shutdown().await;
    result
}

/// A bound listener: plain, or TLS when `[tls]` names a certificate.
enum Listening {
    Plain(tokio::net::TcpListener),
    Tls(downstream::tls::TlsListener),
}

impl Listening {
    /// Binds `addr` (`what` names the setting in errors), with TLS when `certificate` is given.
    async fn bind(
        addr: std::net::SocketAddr,
        certificate: Option<&Arc<downstream::tls::Certificate>>,
        what: &str,
    ) -> anyhow::Result<(Self, String)> {
        let tcp = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}{what}"))?;
        // The bound address, not the configured one: `:0` is a port the system chose.
        let bound = tcp.local_addr()?;
        Ok(match certificate {
            None => (Listening::Plain(tcp), format!("http://{bound}")),
            Some(c) => (
                Listening::Tls(downstream::tls::TlsListener::new(tcp, c.clone())?),
                format!("https://{bound}"),
            ),
        })
    }

    /// Serves `routes` (the console's) until `shutdown`.
    async fn serve(
        self,
        routes: axum::Router,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        match self {
            Listening::Plain(l) => downstream::http::serve_router(routes, l, shutdown).await,
            Listening::Tls(l) => downstream::http::serve_router_tls(routes, l, shutdown).await,
        }
    }
}

/// The listeners' certificate (`[tls] cert_file`), watched for renewals.
fn certificate(gw: &Gateway) -> anyhow::Result<Option<Arc<downstream::tls::Certificate>>> {
    let tls = &gw.config().tls;
    let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) else { return Ok(None) };
    let certificate = downstream::tls::Certificate::load(cert, key)?;
    certificate.watch(gw.draining());
    Ok(Some(certificate))
}

async fn serve_http(
    gw: Arc<Gateway>,
    certificate: Option<Arc<downstream::tls::Certificate>>,
) -> anyhow::Result<()> {
    let (listening, base) =
        Listening::bind(gw.config().gateway.listen, certificate.as_ref(), "").await?;
    eprintln!("toolgate: serving MCP on {base}/mcp");
    // A server still down may have needed the gateway itself (a token
    // endpoint that verifies its assertions against its JWKS): the listener
    // is bound now, so each tries again at once rather than after its backoff.
    for upstream in gw.catalogs.upstreams().iter().filter(|u| u.listing().is_none()) {
        upstream.nudge();
    }
    let console = Console::new(gw.clone())?;
    serve_console(&gw, &console, &base, certificate.as_ref()).await?;
    let draining = gw.clone();
    let grace = Duration::from_millis(gw.config().gateway.shutdown_grace_ms);
    let signalled = Arc::new(tokio::sync::Notify::new());
    let heard = signalled.clone();
    let shutdown = async move {
        toolgate_gateway::process::shutdown_signal().await;
        // Listen streams and held calls end now, or the drain would wait
        // for them (a held call is told its approval still waits).
        draining.begin_shutdown();
        heard.notify_one();
    };
    let serving: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>> =
        match listening {
            Listening::Plain(l) => {
                Box::pin(downstream::http::serve_with(gw, l, console.beside_mcp(), shutdown))
            }
            Listening::Tls(l) => {
                Box::pin(downstream::http::serve_with_tls(gw, l, console.beside_mcp(), shutdown))
            }
        };
    tokio::select! {
        served = serving => served.context("HTTP server"),
        // Calls in flight get the grace, and no longer.
        _ = async { signalled.notified().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "the shutdown grace ended with calls still running; they are cut: a write among them stays `dispatched` and is found `unknown` after its lease (`toolgate ops reconcile`)"
            );
            Ok(())
        }
    }
}

/// The console on `[console] listen`, when it has an address of its own
/// (else it is served beside `/mcp`, at `mcp`, the MCP listener's bound
/// address); it stops when shutdown begins.
async fn serve_console(
    gw: &Arc<Gateway>,
    console: &Console,
    mcp: &str,
    certificate: Option<&Arc<downstream::tls::Certificate>>,
) -> anyhow::Result<()> {
    let config = console.config();
    let Some(addr) = config.listen.filter(|_| config.enabled) else {
        if config.enabled {
            eprintln!("toolgate: console on {mcp}/console");
        }
        return Ok(());
    };
    let (listening, base) = Listening::bind(addr, certificate, " ([console] listen)").await?;
    eprintln!("toolgate: console on {base}/console");
    let serving = listening.serve(console.router(), gw.draining().cancelled_owned());
    tokio::spawn(async move {
        if let Err(e) = serving.await {
            tracing::error!(error = %e, "the console's listener failed");
        }
    });
    Ok(())
}

/// SIGHUP re-reads the config file and the policy files and puts in force
/// what can change while the gateway runs: the registry, the servers, the
/// policy (`toolgate_gateway::reload`). A file with anything wrong is
/// refused whole, logged, and the config in force stays (the reload logs
/// both outcomes). `hup` is taken before the gateway starts: a SIGHUP
/// meanwhile (`systemctl reload` right after a start) waits for it instead
/// of killing the process.
fn reload_on_hangup(gw: Arc<Gateway>, hup: Option<tokio::signal::unix::Signal>) {
    let Some(mut hup) = hup else { return };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // Said on stderr, as the start is, whatever the log level; a
            // refusal is an error in the log.
            if let Ok(done) = gw.reload().await {
                eprintln!("toolgate: config reloaded: {}", done.summary());
            }
        }
    });
}
