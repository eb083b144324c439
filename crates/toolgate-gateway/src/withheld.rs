//! Credentials toolgate holds never reach an agent (nor a receipt, nor a
//! log line). Everything the gateway holds that is a credential — the
//! headers, variables and query parameters it gives upstreams (written in
//! the config, read from the environment or from secrets files), callers' tokens, webhook
//! signing secrets, the OTLP headers, the ledger's password, the
//! requestState key, the log's signing seeds, the TLS private key — goes
//! into one matcher (`toolgate_core::credentials`) at start. The reserve
//! stage, the one door every upstream answer passes (a read's result, a
//! write's before its outcome is recorded, a replay, a reconciler's finding,
//! a JSON-RPC error), refuses an answer that carries one
//! (`credential_withheld`), naming the tool and the credential, never the
//! value. Log lines are written through [`Logs`], which puts `[withheld]` in
//! place of any credential.

use std::sync::{Arc, RwLock};

use serde_json::value::RawValue;
use toolgate_core::credentials::{self, Credentials, Found, Held};
use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::call::Stop;
use crate::catalog::ExposedTool;
use crate::config::Config;

/// Every credential `config` names, read now (a value that cannot be read
/// is one no upstream gets either, and is left out).
pub fn held(config: &Config) -> Vec<Held> {
    let mut out = Vec::new();
    let mut add = |name: String, value: Vec<u8>| out.push(Held::new(name, value));
    let env = |var: &str| std::env::var(var).ok();
    let file = |path: &std::path::Path| {
        std::fs::read_to_string(path).ok().map(|t| t.trim_end_matches(['\r', '\n']).to_string())
    };
    let none = std::collections::BTreeMap::new();
    for (server, s) in &config.servers {
        let sources = [
            ("env", &s.env, &s.env_env, &s.env_file),
            ("headers", &s.headers, &s.headers_env, &s.headers_file),
            ("query", &none, &s.query_env, &s.query_file),
        ];
        for (kind, written, from_env, from_file) in sources {
            let values = written
                .iter()
                .map(|(k, v)| (k, Some(v.clone())))
                .chain(from_env.iter().map(|(k, var)| (k, env(var))))
                .chain(from_file.iter().map(|(k, path)| (k, file(&config.resolve_path(path)))));
            for (key, value) in values {
                let Some(value) = value else { continue };
                if credentials::plainly_not_secret(key, &value) {
                    continue;
                }
                for part in credentials::parts(value.as_bytes()) {
                    add(format!("servers.{server}.{kind}.{key}"), part);
                }
            }
        }
    }
    for (name, c) in &config.callers {
        let token = match (&c.token_env, &c.token_file) {
            (Some(var), _) => env(var),
            (None, Some(path)) => file(&config.resolve_path(path)),
            (None, None) => None,
        };
        token
            .into_iter()
            .for_each(|t| add(format!("callers.{name}.token"), t.trim().as_bytes().to_vec()));
    }
    for hook in &config.approvals.notify.webhooks {
        if let Some(secret) = hook.secret_env.as_deref().and_then(env) {
            add(format!("approvals.notify.webhooks.{}.secret", hook.name), secret.into_bytes());
        }
    }
    for (key, value) in &config.telemetry.otlp_headers {
        for part in credentials::parts(value.as_bytes()) {
            add(format!("telemetry.otlp_headers.{key}"), part);
        }
    }
    if let Some(password) = ledger_password(&config.ledger_location()) {
        add("gateway.ledger.password".into(), password.into_bytes());
    }
    let state = config.state_dir();
    for (name, path) in [
        ("requestState key", state.join("requeststate.key")),
        ("receipt signing key", state.join("keys/receipt-ed25519.seed")),
        ("checkpoint signing key", state.join("keys/checkpoint-ml-dsa-65.seed")),
    ] {
        if let Ok(bytes) = std::fs::read(&path) {
            add(format!("gateway.{name}"), bytes);
        }
    }
    if let Some(pem) = config.tls.key_file.as_deref().and_then(file) {
        // A PEM body's lines: a tool that prints the key prints them.
        pem.lines()
            .filter(|l| !l.starts_with("-----") && l.len() >= 16)
            .for_each(|l| add("tls.key_file".into(), l.as_bytes().to_vec()));
    }
    out
}

/// The password of a ledger URL (its user info or a `password=` parameter).
fn ledger_password(location: &str) -> Option<String> {
    let (_, rest) = location.split_once("://")?;
    let (head, query) = rest.split_once('?').map_or((rest, None), |(h, q)| (h, Some(q)));
    let in_query = query.and_then(|q| {
        q.split('&').find_map(|p| {
            p.split_once('=')
                .filter(|(k, _)| k.eq_ignore_ascii_case("password"))
                .map(|(_, v)| v.to_string())
        })
    });
    let authority = head.split('/').next().unwrap_or_default();
    let in_userinfo = authority
        .rsplit_once('@')
        .and_then(|(info, _)| info.split_once(':'))
        .map(|(_, p)| p.to_string());
    in_userinfo.or(in_query).filter(|p| !p.is_empty())
}

/// The matcher of everything `config` holds, which log lines are also
/// written through from now on.
pub fn matcher(config: &Config) -> Arc<Credentials> {
    let held = Arc::new(Credentials::new(held(config)));
    if !held.is_empty() {
        LOGS.write().unwrap_or_else(|p| p.into_inner()).push(held.clone());
    }
    held
}

/// The refusal of `tool`'s answer, which carried `found`.
pub fn refusal(tool: &ExposedTool, found: &Found, write: bool) -> Refusal {
    let what = match tool.kind {
        toolgate_mcp::upstream::Kind::Prompt => "prompt",
        toolgate_mcp::upstream::Kind::Resource | toolgate_mcp::upstream::Kind::Template => {
            "resource"
        }
        toolgate_mcp::upstream::Kind::Tool => "tool",
    };
    let ran = if write {
        " The call ran (its operation is recorded, without the answer): do not call it again to get the answer."
    } else {
        ""
    };
    let message = format!(
        "the {what} {} returned a credential toolgate holds ({}); its answer was withheld and nothing of it reaches you.{ran} \
         An operator should fix the {what} so it stops returning credentials, or re-class it in the registry (prohibited)",
        tool.exposed_name, found.name
    );
    let mut r = Refusal::new(Verdict::Allow, Reason::CredentialWithheld, Action::Refused, message);
    r.rules = vec![format!("credential.{}", found.name)];
    r
}

/// The credential an upstream's answer carries, if any.
pub fn in_answer(held: &Credentials, raw: &RawValue) -> Option<Found> {
    let text = raw.get();
    if let Some(found) = held.find(text.as_bytes()) {
        return Some(found);
    }
    // A JSON escape (`\u0073k-…`, `\/`, Go's `\u0026`) spells a value in
    // bytes the scan above does not see, and the agent's parser decodes it
    // back: such an answer's strings are scanned decoded too.
    if !has_escapes(text) {
        return None;
    }
    in_strings(held, &serde_json::from_str(text).ok()?, 0)
}

fn has_escapes(text: &str) -> bool {
    text.contains("\\u") || text.contains("\\/")
}

/// The credential a decoded JSON value's keys or strings carry; a string
/// that is JSON itself (an answer's text holding a document) is decoded in
/// turn, a few levels deep.
fn in_strings(held: &Credentials, value: &serde_json::Value, depth: u8) -> Option<Found> {
    use serde_json::Value;
    match value {
        Value::String(s) => held.find(s.as_bytes()).or_else(|| {
            let nested = depth < 4
                && has_escapes(s)
                && matches!(s.trim_start().as_bytes().first(), Some(b'{' | b'[' | b'"'));
            nested
                .then(|| serde_json::from_str(s).ok())
                .flatten()
                .and_then(|v| in_strings(held, &v, depth + 1))
        }),
        Value::Array(items) => items.iter().find_map(|v| in_strings(held, v, depth)),
        Value::Object(members) => members
            .iter()
            .find_map(|(k, v)| held.find(k.as_bytes()).or_else(|| in_strings(held, v, depth))),
        _ => None,
    }
}

/// The credential an upstream's JSON-RPC error carries (in its message or
/// its data), if any.
pub fn in_stop(held: &Credentials, stop: &Stop) -> Option<Found> {
    match stop {
        Stop::Error(e) => serde_json::to_vec(e).ok().and_then(|text| held.find(&text)),
        // Refusals and input requests are toolgate's own words.
        Stop::Refused(_) | Stop::Input(_) => None,
    }
}

/// The matchers of the gateways in this process, which every log line is
/// checked against.
static LOGS: RwLock<Vec<Arc<Credentials>>> = RwLock::new(Vec::new());

/// `text` with every credential of this process's gateways withheld.
pub fn in_log_line(text: &str) -> std::borrow::Cow<'_, str> {
    let held = LOGS.read().unwrap_or_else(|p| p.into_inner());
    let mut out = std::borrow::Cow::Borrowed(text);
    for c in held.iter() {
        if let std::borrow::Cow::Owned(s) = c.withhold(&out) {
            out = std::borrow::Cow::Owned(s);
        }
    }
    out
}

/// Stderr for the log: each line written with its credentials withheld,
/// and nothing an upstream or an agent wrote shown raw to a terminal
/// (escaped: a control character, a bidirectional override, or a line
/// break that would forge a line of its own).
#[derive(Clone, Copy, Default)]
pub struct Logs {
    /// The lines are JSON (escaped as JSON, so they stay JSON).
    pub json: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = LogLine;
    fn make_writer(&'a self) -> Self::Writer {
        LogLine { json: self.json }
    }
}

/// One write of the log (a formatted event, ending in its newline).
pub struct LogLine {
    json: bool,
}

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let text = in_log_line(&text);
        let (line, end) = text.strip_suffix('\n').map_or((&*text, ""), |l| (l, "\n"));
        let shown = if self.json {
            toolgate_core::visible::visible_json(line)
        } else {
            toolgate_core::visible::visible(line)
        };
        std::io::stderr().write_all(format!("{shown}{end}").as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_password_is_found_where_urls_keep_it() {
        assert_eq!(
            ledger_password("postgres://tg:s3cret-pw@db/toolgate").as_deref(),
            Some("s3cret-pw")
        );
        assert_eq!(
            ledger_password("postgres:///toolgate?host=/run&password=pw-in-query").as_deref(),
            Some("pw-in-query")
        );
        assert_eq!(ledger_password("/var/lib/toolgate/ledger.sqlite3"), None);
    }

    #[test]
    fn every_credential_of_a_config_is_held_and_plain_settings_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("api.key"), "sk-from-a-secrets-file-0001\n").unwrap();
        std::fs::write(dir.path().join("agent.token"), "agent-token-from-file-0002").unwrap();
        // SAFETY: a variable only this test reads.
        unsafe { std::env::set_var("TG_WITHHELD_TEST_TOKEN", "token-from-the-env-0003") };
        let text = "[servers.e]\ncommand = \"x\"\nenv = { NODE_ENV = \"production\", \
                        LEVEL = \"1\" }\nenv_file = { API_KEY = \"api.key\" }\nenv_env = { \
                        TOKEN = \"TG_WITHHELD_TEST_TOKEN\" }\n\
                    [servers.h]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Authorization = \"Bearer header-token-0004\" }\n\
                    [callers.agent]\ntenant = \"t\"\ntoken_file = \"agent.token\"\n";
        std::fs::write(dir.path().join("toolgate.toml"), text).unwrap();
        let config = Config::load(&dir.path().join("toolgate.toml")).unwrap();
        let c = Credentials::new(held(&config));
        for (value, name) in [
            ("sk-from-a-secrets-file-0001", "servers.e.env.API_KEY"),
            ("token-from-the-env-0003", "servers.e.env.TOKEN"),
            ("header-token-0004", "servers.h.headers.Authorization"),
            ("agent-token-from-file-0002", "callers.agent.token"),
        ] {
            assert_eq!(
                c.find(format!("x {value} y").as_bytes()).map(|f| f.name).as_deref(),
                Some(name),
                "{value}"
            );
        }
        assert!(c.find(b"NODE_ENV=production").is_none());
    }

    #[test]
    fn a_credential_spelled_in_json_escapes_is_found_decoded() {
        let c = Credentials::new(vec![Held::new(
            String::from("servers.e.env.API_KEY"),
            b"sk-live-4f&8<Z/q9x".to_vec(),
        )]);
        let raw = |text: &str| serde_json::value::RawValue::from_string(text.to_string()).unwrap();
        for answer in [
            r#"{"content":[{"type":"text","text":"\u0073k-live-4f\u00268\u003cZ\/q9x"}]}"#,
            r#"{"structuredContent":{"\u0073k-live-4f&8<Z\/q9x":1}}"#,
            // A document inside the text, escaped in turn.
            r#"{"content":[{"type":"text","text":"{\"k\":\"\\u0073k-live-4f&8<Z/q9x\"}"}]}"#,
        ] {
            assert_eq!(
                in_answer(&c, &raw(answer)).map(|f| f.name).as_deref(),
                Some("servers.e.env.API_KEY"),
                "{answer}"
            );
        }
        assert!(
            in_answer(&c, &raw(r#"{"content":[{"type":"text","text":"\u0073k-live-other"}]}"#))
                .is_none()
        );
    }
}
