//! `[tls]`: the certificates the gateway trusts on its way out (upstreams,
//! webhooks, the OAuth issuer, OTLP), and the one its own listeners serve
//! (`downstream::tls`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

/// `[tls]`: outbound `https://` (upstreams, webhooks, the OAuth issuer,
/// OTLP) trusts the system's roots, and the certificates of `ca_file`
/// beside them; with `cert_file` and `key_file` the listeners serve https.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// A PEM bundle of CA certificates to trust as well (e.g. a company's
    /// own CA), relative to the config.
    pub ca_file: Option<PathBuf>,
    /// The listeners' certificate chain (PEM), read again when it changes.
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM, owner-only).
    pub key_file: Option<PathBuf>,
    /// Its bytes, read and checked when the config is loaded.
    #[serde(skip)]
    pub(crate) ca: Option<Arc<Vec<u8>>>,
}

impl TlsConfig {
    /// The certificates to trust beside the system's roots.
    pub fn roots(&self) -> Vec<reqwest::Certificate> {
        self.ca
            .as_deref()
            .and_then(|pem| reqwest::Certificate::from_pem_bundle(pem).ok())
            .unwrap_or_default()
    }

    /// What is wrong with `[tls]` on its own.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.cert_file.is_some() != self.key_file.is_some() {
            out.push("tls: give both `cert_file` and `key_file` (the listeners serve https with them), or neither".into());
        }
        out
    }

    /// The listeners' files resolved against `dir` (the config's folder),
    /// and the certificates of `ca_file` read and checked.
    pub(crate) fn resolve(&mut self, dir: &Path) -> Result<(), String> {
        for file in [&mut self.cert_file, &mut self.key_file].into_iter().flatten() {
            *file = dir.join(&*file);
        }
        if let Some(file) = &self.ca_file {
            let file = dir.join(file);
            let pem = std::fs::read(&file)
                .map_err(|e| format!("tls.ca_file {}: cannot read it: {e}", file.display()))?;
            match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(certs) if !certs.is_empty() => self.ca = Some(Arc::new(pem)),
                Ok(_) => {
                    return Err(format!(
                        "tls.ca_file {}: no certificate in it (a PEM bundle of -----BEGIN CERTIFICATE----- blocks)",
                        file.display()
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "tls.ca_file {}: not a PEM bundle of certificates: {e}",
                        file.display()
                    ));
                }
            }
        }
        Ok(())
    }
}
