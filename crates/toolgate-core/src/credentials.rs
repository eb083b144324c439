//! The credentials toolgate holds, found in what comes back: one matcher,
//! built once from every credential value the gateway holds (the headers and
//! variables it gives upstreams, callers' tokens, webhook secrets, its own
//! keys), that says whether a text carries one of them — as written, as it
//! reads once JSON-escaped (once or twice: JSON text inside a JSON string),
//! percent-encoded, in hex, or in standard or URL-safe base64 at any of
//! the three alignments a value can take inside a longer base64 text (the
//! way `Authorization: Basic` carries `user:pass`).
//!
//! It names the credential that matched (`servers.github.headers.Authorization`),
//! never its value: a finding is safe to put in a refusal, a receipt or a
//! log line. Matching is one pass of an Aho–Corasick automaton over the
//! text (linear in it, whatever the number of credentials), so it can run
//! on every answer. Sans I/O: the gateway reads the values and hands them in.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// Values shorter than this are not matched. A value that short (a port,
/// `true`, `debug`, a region) is no credential anyone relies on — toolgate's
/// own callers' tokens are at least 16 characters — and matching it would
/// refuse every answer that happens to hold the same few characters.
pub const MIN_LEN: usize = 8;

/// What a log line (or any text) holds in place of a credential.
pub const WITHHELD: &str = "[withheld]";

/// One credential as the gateway holds it: where it is configured (its
/// name, said in findings) and its value (never said).
pub struct Held {
    /// Where it is configured: `servers.NAME.env.VAR`, `callers.NAME.token`, …
    pub name: String,
    /// The value itself.
    pub value: Vec<u8>,
}

impl Held {
    /// `name` holding `value`.
    pub fn new(name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self { name: name.into(), value: value.into() }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({}, [withheld])", self.name)
    }
}

/// A credential found in a text: which one, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The credential's name (`Held::name`).
    pub name: String,
}

/// The matcher over every credential held.
pub struct Credentials {
    automaton: Option<AhoCorasick>,
    /// For each pattern of the automaton, the index of its credential's name.
    owner: Vec<usize>,
    names: Vec<String>,
}

impl Default for Credentials {
    fn default() -> Self {
        Self::none()
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("names", &self.names)
            .field("patterns", &self.owner.len())
            .finish()
    }
}

impl Credentials {
    /// A matcher that finds nothing.
    pub const fn none() -> Self {
        Self { automaton: None, owner: Vec::new(), names: Vec::new() }
    }

    /// The matcher of `held`: each value (blanks around it trimmed) and the
    /// forms it takes once encoded. Values shorter than [`MIN_LEN`] are left out.
    pub fn new(held: impl IntoIterator<Item = Held>) -> Self {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut owner = Vec::new();
        let mut names: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for h in held {
            let value = h.value.trim_ascii();
            if value.len() < MIN_LEN {
                continue;
            }
            let index = match names.iter().position(|n| *n == h.name) {
                Some(i) => i,
                None => {
                    names.push(h.name);
                    names.len() - 1
                }
            };
            for form in forms(value) {
                // A form shorter than a value may be is no evidence (a
                // short base64 middle); the same bytes twice keep the first name.
                if form.len() >= MIN_LEN && seen.insert(form.clone()) {
                    patterns.push(form);
                    owner.push(index);
                }
            }
        }
        // Leftmost-longest: `Bearer X` is withheld whole, not only `X`.
        let automaton = (!patterns.is_empty()).then(|| {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .expect("literal patterns always build")
        });
        Self { automaton, owner, names }
    }

    /// Whether no credential is held (nothing can be found).
    pub fn is_empty(&self) -> bool {
        self.automaton.is_none()
    }

    /// How many credentials are held (by name).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The first credential `haystack` carries, if any.
    pub fn find(&self, haystack: &[u8]) -> Option<Found> {
        let m = self.automaton.as_ref()?.find(haystack)?;
        Some(Found { name: self.names[self.owner[m.pattern().as_usize()]].clone() })
    }

    /// Every credential `haystack` carries, by name, each once, in order of
    /// first appearance.
    pub fn find_all(&self, haystack: &[u8]) -> Vec<Found> {
        let Some(ac) = &self.automaton else { return Vec::new() };
        let mut out: Vec<Found> = Vec::new();
        for m in ac.find_iter(haystack) {
            let name = &self.names[self.owner[m.pattern().as_usize()]];
            if !out.iter().any(|f| f.name == *name) {
                out.push(Found { name: name.clone() });
            }
        }
        out
    }

    /// `text` with every credential in it replaced by [`WITHHELD`].
    pub fn withhold<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.automaton {
            Some(ac) if ac.is_match(text) => {
                let replaced = ac.replace_all_bytes(
                    text.as_bytes(),
                    &vec![WITHHELD.as_bytes(); self.owner.len()],
                );
                // A match may end inside a character (a base64 middle never
                // does, a raw value's bytes are whole): keep the text valid.
                Cow::Owned(String::from_utf8_lossy(&replaced).into_owned())
            }
            _ => Cow::Borrowed(text),
        }
    }
}

/// The parts of a configured value that are credentials on their own: the
/// value; for an `Authorization`-style `SCHEME TOKEN`, the token; for
/// `Basic BASE64`, the decoded `user:pass` and the password.
pub fn parts(value: &[u8]) -> Vec<Vec<u8>> {
    let value = value.trim_ascii();
    let mut out = vec![value.to_vec()];
    let Ok(text) = std::str::from_utf8(value) else { return out };
    if let Some((scheme, token)) = text.split_once(' ') {
        let token = token.trim();
        if !scheme.is_empty()
            && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !token.is_empty()
            && !token.contains(' ')
        {
            out.push(token.as_bytes().to_vec());
            if scheme.eq_ignore_ascii_case("basic") {
                if let Ok(pair) = STANDARD.decode(token).or_else(|_| STANDARD_NO_PAD.decode(token))
                {
                    if let Some(colon) = pair.iter().position(|b| *b == b':') {
                        out.push(pair[colon + 1..].to_vec());
                    }
                    out.push(pair);
                }
            }
        }
    }
    out
}

/// Whether a value configured under `name` plainly carries no secret: a
/// lone lower-case word (`production`), a number, a boolean, an absolute
/// path, an `http(s)` URL with neither user info nor query — unless its
/// name says it is one (`…KEY`, `…TOKEN`, `…SECRET`, `Authorization`, …).
/// Such values (a `NODE_ENV`, an `Accept`, a base URL) are given to
/// upstreams too, and a tool that says them back leaks nothing.
pub fn plainly_not_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const SECRET_NAMES: &[&str] = &[
        "KEY", "TOKEN", "SECRET", "PASS", "PWD", "AUTH", "CRED", "COOKIE", "SESSION", "PRIVATE",
        "SIGN", "API", "BEARER", "JWT",
    ];
    if SECRET_NAMES.iter().any(|s| upper.contains(s)) {
        return false;
    }
    let v = value.trim();
    let word = !v.is_empty() && v.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b == b'_');
    let number = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let boolean =
        matches!(v.to_ascii_lowercase().as_str(), "true" | "false" | "yes" | "no" | "on" | "off");
    let path = v.starts_with('/')
        && !v.contains(char::is_whitespace)
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b));
    let url = ["http://", "https://"].iter().any(|s| v.starts_with(s)) && {
        let rest = v.split_once("://").map_or("", |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        !authority.contains('@') && !v.contains('?') && !v.contains(char::is_whitespace)
    };
    word || number || boolean || path || url
}

/// The forms `value` may take in an answer.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![value.to_vec()];
    if let Ok(text) = std::str::from_utf8(value) {
        // JSON as serde and most writers escape it, as Python's json.dumps
        // (ASCII only, `\uXXXX`), and twice over (JSON text in a string).
        let once = json_escaped(text, false);
        out.push(json_escaped(&once, false).into_bytes());
        out.push(once.into_bytes());
        let ascii = json_escaped(text, true);
        out.push(json_escaped(&ascii, true).into_bytes());
        out.push(ascii.into_bytes());
        out.push(percent_encoded(value).into_bytes());
    }
    out.push(hex(value, b"0123456789abcdef"));
    out.push(hex(value, b"0123456789ABCDEF"));
    // base64: the characters that depend on the value's bytes only, at each
    // of the three offsets it can start at in a longer encoded text.
    for k in 0..3usize {
        let mut shifted = vec![0u8; k];
        shifted.extend_from_slice(value);
        let (start, end) = ((8 * k).div_ceil(6), (8 * (k + value.len())) / 6);
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&shifted);
            if let Some(middle) = encoded.as_bytes().get(start..end) {
                out.push(middle.to_vec());
            }
        }
    }
    out
}

/// `text` as it reads inside a JSON string (without the quotes); with
/// `ascii`, every non-ASCII character as `\uXXXX` (lower-case hex).
fn json_escaped(text: &str, ascii: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn percent_encoded(value: &[u8]) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn hex(value: &[u8], digits: &[u8; 16]) -> Vec<u8> {
    value.iter().flat_map(|b| [digits[usize::from(b >> 4)], digits[usize::from(b & 0xf)]]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-7Hq2xR9vLm4Pz8Wd";

    fn held() -> Credentials {
        Credentials::new([
            Held::new("servers.everything.env.API_KEY", KEY),
            Held::new("callers.agent.token", "agent-token-0123456789abcdef"),
        ])
    }

    fn named(c: &Credentials, text: &str) -> Option<String> {
        c.find(text.as_bytes()).map(|f| f.name)
    }

    #[test]
    fn a_value_is_found_as_written_and_named_never_shown() {
        let c = held();
        let found = c.find(format!("API_KEY={KEY}\nPATH=/usr/bin").as_bytes()).unwrap();
        assert_eq!(found.name, "servers.everything.env.API_KEY");
        assert!(
            !format!("{found:?} {c:?}").contains(KEY),
            "a finding and the matcher never show the value"
        );
        assert_eq!(
            named(&c, "Bearer agent-token-0123456789abcdef"),
            Some("callers.agent.token".into())
        );
        assert_eq!(named(&c, "nothing of the kind"), None);
    }

    #[test]
    fn json_escaped_forms_are_found() {
        let tricky = "p\"ss\\w/rd\n-é-2024";
        let c = Credentials::new([Held::new("servers.s.env.PW", tricky)]);
        let once = serde_json::to_string(&serde_json::json!({"text": tricky})).unwrap();
        assert!(c.find(once.as_bytes()).is_some(), "{once}");
        let twice = serde_json::to_string(&serde_json::json!({"text": once})).unwrap();
        assert!(c.find(twice.as_bytes()).is_some(), "{twice}");
        // Python's json.dumps: ASCII only.
        assert!(c.find(br#"{"text": "p\"ss\\w/rd\n-\u00e9-2024"}"#).is_some());
    }

    #[test]
    fn base64_at_every_offset_and_both_alphabets_is_found() {
        let c = held();
        for prefix in ["", "A", "AB", "ABC", "API_KEY=", "x:"] {
            let plain = format!("{prefix}{KEY}\n");
            for encoded in [STANDARD.encode(&plain), URL_SAFE_NO_PAD.encode(&plain)] {
                assert_eq!(
                    named(&c, &format!("{{\"blob\":\"{encoded}\"}}")).as_deref(),
                    Some("servers.everything.env.API_KEY"),
                    "{prefix:?} {encoded}"
                );
            }
        }
        assert!(c.find(hex(KEY.as_bytes(), b"0123456789abcdef").as_slice()).is_some());
    }

    #[test]
    fn basic_auth_and_bearer_parts_are_credentials_of_their_own() {
        let basic = format!("Basic {}", STANDARD.encode("svc-user:hunter2-hunter2"));
        let pieces = parts(basic.as_bytes());
        assert!(
            pieces.contains(&b"svc-user:hunter2-hunter2".to_vec())
                && pieces.contains(&b"hunter2-hunter2".to_vec()),
            "{pieces:?}"
        );
        let c = Credentials::new(
            pieces.into_iter().map(|p| Held::new("servers.h.headers.Authorization", p)),
        );
        assert!(c.find(b"the password is hunter2-hunter2").is_some());
        assert!(c.find(basic.as_bytes()).is_some());
        let bearer = parts(b"Bearer tok_9f8e7d6c5b4a");
        assert_eq!(bearer[1], b"tok_9f8e7d6c5b4a");
    }

    #[test]
    fn short_values_are_ignored() {
        let c = Credentials::new([
            Held::new("servers.s.env.LEVEL", "debug"),
            Held::new("servers.s.env.PORT", "8080"),
            Held::new("x", "1234567"),
        ]);
        assert!(c.is_empty());
        assert_eq!(named(&c, "debug 8080 1234567"), None);
    }

    #[test]
    fn what_is_not_the_secret_is_not_found() {
        let c = held();
        let near = [
            &KEY[..KEY.len() - 1],
            &KEY[1..],
            "sk-live-7Hq2xR9vLm4Pz8WD",
            "sk-live-",
            "7Hq2xR9v Lm4Pz8Wd",
        ];
        for text in near {
            assert_eq!(named(&c, text), None, "{text}");
        }
        // Nor the base64 of another value with the same start.
        assert_eq!(named(&c, &STANDARD.encode("sk-live-0000000000000000")), None);
    }

    #[test]
    fn withholding_replaces_every_occurrence() {
        let c = held();
        let line = format!("upstream stderr: API_KEY={KEY} and again \"{KEY}\"");
        let out = c.withhold(&line);
        assert!(!out.contains(KEY), "{out}");
        assert_eq!(out.matches(WITHHELD).count(), 2, "{out}");
        assert!(matches!(c.withhold("nothing here"), Cow::Borrowed(_)));
        assert_eq!(
            c.find_all(format!("{KEY} agent-token-0123456789abcdef {KEY}").as_bytes()).len(),
            2
        );
    }

    #[test]
    fn plainly_public_values_are_told_apart_unless_named_as_secrets() {
        for (name, value) in [
            ("NODE_ENV", "production"),
            ("BASE_URL", "https://api.github.com/v3"),
            ("Accept", "application-json"),
            ("HOME_DIR", "/home/user/data"),
            ("TIMEOUT", "30000000"),
        ] {
            assert!(plainly_not_secret(name, value), "{name}={value}");
        }
        for (name, value) in [
            ("API_KEY", "supersecretvalue"),
            ("Authorization", "Bearer abcdefghij"),
            ("DB_URL", "postgres://u:p@h/db"),
            ("HOOK", "https://h/x?token=abc"),
            ("X", "s3cr3t-V4lue"),
        ] {
            assert!(!plainly_not_secret(name, value), "{name}={value}");
        }
    }
}
