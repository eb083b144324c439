//! Callers from config: each token maps to one {subject, tenant, roles}.
//! Tokens are read once at start (from an environment variable or an
//! owner-only file), kept only as SHA-256 digests and compared in constant
//! time; they never reach a log, an error or a receipt.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use sha2::{Digest, Sha256};
use toolgate_core::Caller;

use crate::config::{CallerConfig, Config};

/// Tokens shorter than this are refused at start: they can be guessed.
const MIN_TOKEN_LEN: usize = 16;

/// The configured callers: by token digest, the anonymous one, and the one
/// stdio acts as.
pub struct Callers {
    tokens: Vec<([u8; 32], Arc<Caller>)>,
    anonymous: Option<Arc<Caller>>,
    stdio: Option<Arc<Caller>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthError {
    /// No `Authorization: Bearer` and no anonymous caller.
    Missing,
    /// A token that maps to no caller.
    Unknown,
}

impl AuthError {
    pub(crate) fn message(self) -> &'static str {
        match self {
            AuthError::Missing => {
                "authentication required: send `Authorization: Bearer TOKEN` with a token from the gateway's [callers]"
            }
            AuthError::Unknown => {
                "the bearer token is not valid here; ask the operator for a token from the gateway's [callers]"
            }
        }
    }
}

fn caller(name: &str, c: &CallerConfig) -> Arc<Caller> {
    Arc::new(Caller {
        name: name.to_string(),
        subject: c.subject_of(name),
        tenant: c.tenant.clone(),
        roles: c.roles.clone(),
    })
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Callers {
    /// Reads every caller's token. A missing variable, an unreadable or
    /// group/world-readable file, or a short token stops the start.
    pub(crate) fn load(config: &Config) -> anyhow::Result<Self> {
        let mut tokens = Vec::new();
        let mut anonymous = None;
        for (name, c) in &config.callers {
            let token = match (&c.token_env, &c.token_file) {
                (Some(var), _) => std::env::var(var).with_context(|| {
                    format!("callers.{name}: environment variable {var} is not set")
                })?,
                (None, Some(file)) => read_token_file(&config.resolve_path(file))
                    .with_context(|| format!("callers.{name}"))?,
                (None, None) => {
                    anonymous = Some(caller(name, c));
                    continue;
                }
            };
            let token = token.trim();
            if token.len() < MIN_TOKEN_LEN {
                bail!("callers.{name}: the token is shorter than {MIN_TOKEN_LEN} characters");
            }
            let d = digest(token);
            if tokens.iter().any(|(other, _)| other == &d) {
                bail!("callers.{name}: the same token is configured for another caller");
            }
            tokens.push((d, caller(name, c)));
        }
        let stdio = config.gateway.stdio_caller.as_ref().map(|n| caller(n, &config.callers[n]));
        Ok(Self { tokens, anonymous, stdio })
    }

    /// For processes that serve no one (`toolgate tools`).
    pub(crate) fn none() -> Self {
        Self { tokens: Vec::new(), anonymous: None, stdio: None }
    }

    /// The caller of an HTTP request, from its `Authorization` header.
    pub(crate) fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<Arc<Caller>, AuthError> {
        let Some(value) = authorization else {
            return self.anonymous.clone().ok_or(AuthError::Missing);
        };
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or(AuthError::Unknown)?;
        self.by_token(token).ok_or(AuthError::Unknown)
    }

    /// The caller whose `[callers]` token is `token` (surrounding blanks
    /// ignored), if any: never the anonymous one.
    pub fn by_token(&self, token: &str) -> Option<Arc<Caller>> {
        let d = digest(token.trim());
        // Every entry is compared, each in constant time.
        let mut found = None;
        for (known, who) in &self.tokens {
            let diff = known.iter().zip(d.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(who.clone());
            }
        }
        found
    }

    /// The caller a stdio downstream acts as: `gateway.stdio_caller`, else
    /// the anonymous caller, else none (the start is refused).
    pub fn stdio(&self) -> Option<Arc<Caller>> {
        self.stdio.clone().or_else(|| self.anonymous.clone())
    }
}

fn read_token_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read token file {}", path.display()))?;
    toolgate_mcp::owner_only::check_owner_only(path)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str, dir: &Path) -> Config {
        Config::parse(text, &dir.join("toolgate.toml")).unwrap()
    }

    #[test]
    fn tokens_map_to_callers_and_nothing_else_gets_in() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("approver.token");
        std::fs::write(&file, "approver-token-0123456789\n").unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        // SAFETY: tests in this module set distinct variables.
        unsafe { std::env::set_var("TG_TEST_AGENT_TOKEN", "agent-token-0123456789") };
        let c = config(
            "[callers.agent]\ntenant = \"atlas\"\nroles = [\"agent\"]\ntoken_env = \"TG_TEST_AGENT_TOKEN\"\n\
             [callers.dana]\nsubject = \"dana@atlas.example\"\ntenant = \"atlas\"\nroles = [\"approver\"]\ntoken_file = \"approver.token\"\n",
            dir.path(),
        );
        let callers = Callers::load(&c).unwrap();
        let agent = callers.authenticate(Some("Bearer agent-token-0123456789")).unwrap();
        assert_eq!(
            (agent.name.as_str(), agent.subject.as_str(), agent.tenant.as_str()),
            ("agent", "agent", "atlas")
        );
        assert_eq!(
            callers.authenticate(Some("Bearer approver-token-0123456789")).unwrap().subject,
            "dana@atlas.example"
        );
        assert_eq!(
            callers.authenticate(Some("Bearer agent-token-012345678")),
            Err(AuthError::Unknown)
        );
        assert_eq!(callers.authenticate(Some("Basic abc")), Err(AuthError::Unknown));
        assert_eq!(callers.authenticate(None), Err(AuthError::Missing));
        assert!(callers.stdio().is_none());
        // A file others can read is refused, naming the file, never the token.
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let err = format!("{:#}", Callers::load(&c).err().unwrap());
        assert!(err.contains("chmod 600") && !err.contains("approver-token"), "{err}");
    }

    #[test]
    fn an_anonymous_caller_must_be_opened_explicitly() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(
            "[gateway]\nstdio_caller = \"local\"\n[callers.local]\ntenant = \"t\"\nanonymous = true\n",
            dir.path(),
        );
        let callers = Callers::load(&c).unwrap();
        assert_eq!(callers.authenticate(None).unwrap().name, "local");
        assert_eq!(callers.stdio().unwrap().name, "local");
        let err = |t: &str| Config::parse(t, &dir.path().join("x.toml")).unwrap_err().to_string();
        assert!(err("[callers.a]\ntenant = \"t\"\n").contains("exactly one of"));
        assert!(
            err("[callers.a]\ntenant = \"t\"\nanonymous = true\nroles = [\"approver\"]\n")
                .contains("anonymous caller cannot")
        );
        assert!(err("[gateway]\nstdio_caller = \"x\"\n").contains("stdio_caller"));
    }
}
