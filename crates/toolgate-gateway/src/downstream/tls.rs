//! TLS on toolgate's own listeners (`[tls] cert_file`, `key_file`): rustls,
//! the certificate and key read from PEM files and read again when they
//! change (a renewed certificate is served without a restart; a broken
//! renewal is reported and the one in force stays). Each handshake runs in
//! a task of its own, with a deadline, so no client can hold the others up.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// How long a client has to finish its handshake.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);
/// How often the files are looked at for a change.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// The certificate the listeners serve, and the files it comes from.
pub struct Certificate {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<(Arc<CertifiedKey>, Stamp)>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// What the two files looked like when read (modified time, length).
type Stamp = [(Option<SystemTime>, u64); 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let of =
        |p: &Path| std::fs::metadata(p).map(|m| (m.modified().ok(), m.len())).unwrap_or((None, 0));
    [of(cert), of(key)]
}

impl Certificate {
    /// Reads the chain and key; an error names the file and what is wrong.
    /// The key must be owner-only.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<Self>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let read = read(cert, key, &provider)?;
        Ok(Arc::new(Self {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: RwLock::new((read, stamp(cert, key))),
        }))
    }

    /// Reads the files again if they changed since: a good pair is served
    /// from the next handshake on; a bad one is reported and ignored.
    fn refresh(&self) {
        let now = stamp(&self.cert, &self.key);
        if self.current.read().unwrap_or_else(|p| p.into_inner()).1 == now {
            return;
        }
        match read(&self.cert, &self.key, &self.provider) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = (key, now);
                tracing::info!(target: "toolgate::tls", cert = %self.cert.display(), "the listeners' certificate was read again");
            }
            Err(e) => {
                // Not again until the files change once more.
                self.current.write().unwrap_or_else(|p| p.into_inner()).1 = now;
                tracing::warn!(target: "toolgate::tls", error = %format!("{e:#}"), "the changed certificate or key cannot be used; the one in force stays");
            }
        }
    }

    /// Looks at the files every `WATCH_EVERY` until `stop`.
    pub fn watch(self: &Arc<Self>, stop: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(WATCH_EVERY) => this.refresh(),
                }
            }
        });
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|p| p.into_inner()).0.clone())
    }
}

fn read(cert: &Path, key: &Path, provider: &CryptoProvider) -> anyhow::Result<Arc<CertifiedKey>> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("tls.cert_file {}: cannot read it", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| {
            format!("tls.cert_file {}: not a PEM certificate chain", cert.display())
        })?;
    if chain.is_empty() {
        anyhow::bail!("tls.cert_file {}: no certificate in it", cert.display());
    }
    toolgate_mcp::owner_only::check_owner_only(key)
        .with_context(|| format!("tls.key_file {}", key.display()))?;
    let der = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("tls.key_file {}: not a PEM private key", key.display()))?;
    let signing = provider.key_provider.load_private_key(der).with_context(|| {
        format!("tls.key_file {}: a key rustls cannot sign with", key.display())
    })?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().with_context(|| {
        format!("tls.key_file {} is not the key of tls.cert_file {}", key.display(), cert.display())
    })?;
    Ok(Arc::new(certified))
}

/// A listener whose connections are TLS, for `axum::serve`: a task accepts
/// and hands each connection to a handshake task of its own.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// TLS on `tcp`, serving `certificate`.
    pub fn new(tcp: TcpListener, certificate: Arc<Certificate>) -> anyhow::Result<Self> {
        let local = tcp.local_addr()?;
        let mut config = rustls::ServerConfig::builder_with_provider(certificate.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(certificate);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = tcp.accept() => accepted,
                    _ = tx.closed() => return,
                };
                let Ok((stream, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => drop(tx.send((tls, peer)).await),
                        Ok(Err(e)) => {
                            tracing::debug!(target: "toolgate::tls", %peer, error = %e, "TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(target: "toolgate::tls", %peer, "TLS handshake not finished in time")
                        }
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
