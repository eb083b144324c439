//! Talking to an authorization server's endpoints (token, registration,
//! revocation, metadata), for `exchange` and `oauth_client` alike: form
//! bodies, the client's authentication, and answers taken as hostile bytes —
//! read within a bound, never followed on redirect, quoted only tamed.

use reqwest::StatusCode;

/// The most of an endpoint's answer read.
pub(super) const MAX_ANSWER: usize = 64 * 1024;

/// How a client proves itself at a token or revocation endpoint (RFC 6749
/// §2.3.1).
pub(super) enum ClientAuth<'a> {
    /// `client_secret_basic`: id and secret in HTTP Basic.
    Basic { id: &'a str, secret: &'a str },
    /// `client_secret_post`: id and secret in the form.
    Post { id: &'a str, secret: &'a str },
    /// A public client (`none`): its id in the form, no secret.
    Public { id: &'a str },
}

/// POSTs `form` to `url` as `auth`; the status and the answer. `what`
/// names the endpoint in messages ("the token endpoint").
pub(super) async fn post_form(
    http: &reqwest::Client,
    url: &str,
    mut form: Vec<(&str, &str)>,
    auth: ClientAuth<'_>,
    what: &str,
) -> Result<(StatusCode, Vec<u8>), String> {
    let request = http.post(url);
    let request = match auth {
        // RFC 6749 §2.3.1: each is form-encoded before it goes into Basic.
        ClientAuth::Basic { id, secret } => {
            request.basic_auth(form_encode(id), Some(form_encode(secret)))
        }
        ClientAuth::Post { id, secret } => {
            form.extend([("client_id", id), ("client_secret", secret)]);
            request
        }
        ClientAuth::Public { id } => {
            form.push(("client_id", id));
            request
        }
    };
    let request = request
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(urlencoded(&form));
    send(request, what).await
}

/// Sends `request`; its status and its answer, at most [`MAX_ANSWER`]
/// bytes. A redirect is refused, not followed: it would carry the request —
/// and the credentials in it — somewhere nobody named. A client that
/// follows redirects anyway is caught by the answer's URL.
pub(super) async fn send(
    request: reqwest::RequestBuilder,
    what: &str,
) -> Result<(StatusCode, Vec<u8>), String> {
    let (http, request) = request.build_split();
    let request =
        request.map_err(|e| format!("{what}: no request could be made ({})", without_url(e)))?;
    let sent = request.url().clone();
    let response = http
        .execute(request)
        .await
        .map_err(|e| format!("{what} could not be reached ({})", without_url(e)))?;
    if response.status().is_redirection() || response.url() != &sent {
        return Err(format!(
            "{what} answered with a redirect (HTTP {}); toolgate follows none",
            response.status().as_u16()
        ));
    }
    let status = response.status();
    Ok((status, read_bounded(response, what).await?))
}

/// The answer's body, refused once it passes [`MAX_ANSWER`] bytes.
pub(super) async fn read_bounded(
    mut response: reqwest::Response,
    what: &str,
) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("{what}'s answer was cut ({})", without_url(e)))?
    {
        if bytes.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("{what}'s answer is over {MAX_ANSWER} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// `HTTP 400 Bad Request, invalid_grant: why`: what an endpoint said when it refused
/// (its RFC 6749 §5.2 `error` and `error_description`), tamed.
pub(super) fn refusal(
    status: StatusCode,
    error: Option<&str>,
    description: Option<&str>,
) -> String {
    format!(
        "HTTP {status}{}{}",
        error.map(|e| format!(", {}", tame(e))).unwrap_or_default(),
        description.map(|d| format!(": {}", tame(d))).unwrap_or_default()
    )
}

/// RFC 6749 §2.3.1: client credentials in Basic are form-encoded first.
fn form_encode(s: &str) -> String {
    urlencoded(&[("", s)]).trim_start_matches('=').to_string()
}

/// `application/x-www-form-urlencoded`.
pub(super) fn urlencoded(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        if !k.is_empty() {
            encode_into(&mut out, k);
        }
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
}

/// A transport error without the URL (which could carry a credential).
pub(super) fn without_url(e: reqwest::Error) -> String {
    tame(&e.without_url().to_string())
}

/// Hostile text for a message: at most 200 characters, no control characters.
pub(super) fn tame(s: &str) -> String {
    let text: String = s.chars().filter(|c| !c.is_control()).collect();
    let words: Vec<&str> =
        text.split(' ').map(|w| if looks_like_a_token(w) { "[withheld]" } else { w }).collect();
    words.join(" ").chars().take(200).collect()
}

/// A word a server may have quoted from what it was sent (an assertion, a
/// token): long, and all of a token's characters. Such a word never
/// reaches a message, even cut short.
fn looks_like_a_token(word: &str) -> bool {
    let word =
        word.trim_matches(|c: char| matches!(c, '"' | '\'' | '(' | ')' | ',' | ';' | ':' | '`'));
    word.len() >= 24
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/' | '=')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_a_server_quotes_back_never_reaches_a_message() {
        let jwt =
            "eyJhbGciOiJFZERTQSIsImtpZCI6IngifQ.eyJzdWIiOiJqYW5lIn0.c2lnbmF0dXJlLWJ5dGVzLWhlcmU";
        let said = format!("subject_token \"{jwt}\" failed verification\n(expired)");
        let tamed = tame(&said);
        assert!(
            !tamed.contains("eyJ")
                && tamed.contains("[withheld]")
                && tamed.contains("failed verification")
                && tamed.contains("(expired)"),
            "{tamed}"
        );
        // Plain words, URLs' hosts and short ids stay.
        assert_eq!(
            tame("invalid_grant: audience mismatch for tickets"),
            "invalid_grant: audience mismatch for tickets"
        );
        assert_eq!(tame(&"x".repeat(500)).len(), "[withheld]".len());
        assert_eq!(tame(&"word ".repeat(100)).chars().count(), 200);
    }
}
