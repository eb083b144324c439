//! Credentials written into an upstream's URL: `http://user:password@host/`
//! and query parameters such as `?api_key=…`. A URL is shown (in logs, in
//! `toolgate import`'s output, in the config itself), so no credential may
//! stay in one: `toolgate import` moves each to an owner-only secret (the
//! user part to an `Authorization: Basic` header, each query credential to
//! `query_file`), and the gateway refuses a config that still has one.

use base64::Engine as _;

/// What a URL holds that is a credential, split from the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The URL with no user part and none of the query credentials.
    pub url: String,
    /// The user part, percent-decoded: (user, password).
    pub userinfo: Option<(String, String)>,
    /// The query credentials, percent-decoded, in the URL's order.
    pub query: Vec<(String, String)>,
}

/// Splits the credentials out of `url`; `None` if it is no URL (the caller
/// refuses it for that).
pub fn split(url: &str) -> Option<Split> {
    let mut parsed = reqwest::Url::parse(url).ok()?;
    let userinfo = (!parsed.username().is_empty() || parsed.password().is_some())
        .then(|| (decode(parsed.username()), decode(parsed.password().unwrap_or_default())));
    let (secret, kept): (Vec<(String, String)>, Vec<(String, String)>) =
        parsed.query_pairs().into_owned().partition(|(name, _)| is_credential_name(name));
    if userinfo.is_none() && secret.is_empty() {
        return Some(Split { url: url.to_string(), userinfo: None, query: Vec::new() });
    }
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    if !secret.is_empty() {
        // Rewritten only when a parameter goes: the rest keep their bytes otherwise.
        if kept.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(kept);
        }
    }
    Some(Split { url: parsed.to_string(), userinfo, query: secret })
}

/// What `url` holds that must not be in a config, as a reader should see
/// it (names only, never a value): `None` when nothing.
pub fn named(url: &str) -> Option<String> {
    let split = split(url)?;
    let mut found = Vec::new();
    if split.userinfo.is_some() {
        found.push("a user and password (`user:password@`)".to_string());
    }
    found.extend(split.query.iter().map(|(name, _)| {
        format!("the query parameter `{}`", toolgate_core::visible::visible(name))
    }));
    (!found.is_empty()).then(|| found.join(" and "))
}

/// An `Authorization` header's value for HTTP Basic with `user` and `password`.
pub fn basic_authorization(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// Whether a query parameter of this name carries a credential, by the
/// names services use for one: compared without case, `-` or `_`, exactly
/// (`key`, `auth`, `sig`, …) or by ending (`…token`, `…secret`, `…apikey`, …).
pub fn is_credential_name(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "key",
        "auth",
        "authorization",
        "sig",
        "pwd",
        "pass",
        "jwt",
        "bearer",
        "session",
        "sessionid",
        "credential",
        "credentials",
    ];
    const ENDINGS: &[&str] = &[
        "token",
        "secret",
        "password",
        "passwd",
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "subscriptionkey",
        "signature",
        "credential",
        "credentials",
    ];
    let name: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | '.'))
        .flat_map(char::to_lowercase)
        .collect();
    EXACT.contains(&name.as_str()) || ENDINGS.iter().any(|end| name.ends_with(end))
}

/// Percent-decoding, for a URL's user part (`p%40ss` is `p@ss`).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_parts_and_credential_parameters_are_split_out_and_the_rest_kept() {
        let s =
            split("https://dana:p%40ss@api.example/mcp?API_KEY=k1&region=eu&access-token=t2#frag")
                .unwrap();
        assert_eq!(s.url, "https://api.example/mcp?region=eu#frag");
        assert_eq!(s.userinfo, Some(("dana".into(), "p@ss".into())));
        assert_eq!(
            s.query,
            vec![
                ("API_KEY".to_string(), "k1".to_string()),
                ("access-token".to_string(), "t2".to_string())
            ]
        );
        let only = split("http://tok3n@h:8080/mcp?apiKey=x").unwrap();
        assert_eq!(
            (only.url.as_str(), only.userinfo),
            ("http://h:8080/mcp", Some(("tok3n".into(), String::new())))
        );
        let clean = "http://127.0.0.1:8701/mcp?region=eu&page=2";
        assert_eq!(
            split(clean).unwrap(),
            Split { url: clean.into(), userinfo: None, query: Vec::new() }
        );
        assert_eq!(named(clean), None);
        let said = named("http://u:p@h/mcp?token=s3cr3t").unwrap();
        assert!(
            said.contains("user and password")
                && said.contains("`token`")
                && !said.contains("s3cr3t")
                && !said.contains(":p@"),
            "{said}"
        );
    }

    #[test]
    fn credential_names_are_known_without_case_or_separators() {
        for name in [
            "api_key",
            "apikey",
            "API-KEY",
            "key",
            "token",
            "access_token",
            "private_token",
            "auth",
            "secret",
            "client_secret",
            "password",
            "Passwd",
            "sig",
            "X-Api-Key",
            "subscription-key",
            "refresh_token",
            "sessionid",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            "region",
            "page",
            "format",
            "q",
            "version",
            "monkey",
            "limit",
            "tokens_used_limit",
            "code",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
    }

    #[test]
    fn basic_authorization_is_base64_of_user_colon_password() {
        assert_eq!(
            basic_authorization("Aladdin", "open sesame"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }
}
