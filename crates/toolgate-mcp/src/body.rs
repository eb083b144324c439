//! Bodies from the network, read under a limit.
//!
//! Whatever answers an HTTP request — an upstream, a witness, a log, an
//! authorization server, a model — decides how much it sends. Reading a
//! body whole before looking at its size lets a stranger make toolgate hold
//! as much memory as it cares to send (a 400 MiB "checkpoint" once held
//! 820 MiB). So every body is read here: the declared `Content-Length` is
//! checked before a byte is read, then the body chunk by chunk, refused as
//! soon as it passes the limit — never more than one chunk past it is held.

use std::fmt;

/// Why a body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// The body is (or says it is) longer than the limit for what it is.
    TooLarge {
        /// What the body was to be (`the log's checkpoint`, …).
        what: String,
        /// The most bytes accepted.
        limit: usize,
        /// The `Content-Length` it declared, when that is what gave it away.
        declared: Option<u64>,
    },
    /// The connection failed while the body was read.
    Broken {
        /// What the body was to be.
        what: String,
        /// Why, without the URL (which may hold a credential).
        why: String,
    },
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge { what, limit, declared: Some(len) } => {
                write!(
                    f,
                    "{what} declares {len} bytes (Content-Length), more than the {limit} bytes toolgate reads of one; it was not read"
                )
            }
            BodyError::TooLarge { what, limit, declared: None } => {
                write!(
                    f,
                    "{what} is longer than the {limit} bytes toolgate reads of one; it was refused at that point, unread past it"
                )
            }
            BodyError::Broken { what, why } => write!(f, "reading {what}: {why}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// The whole body of `response`, if it is at most `limit` bytes; `what`
/// names it in the error ("the witness's answer"). A longer body is refused
/// as soon as it is seen to be longer (its `Content-Length`, else the chunk
/// that passes the limit), and the rest is left unread.
pub async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
    what: &str,
) -> Result<Vec<u8>, BodyError> {
    let too_large = |declared| BodyError::TooLarge { what: what.to_string(), limit, declared };
    let declared = response.content_length();
    if let Some(len) = declared
        && len > limit as u64
    {
        return Err(too_large(Some(len)));
    }
    // What it declares, within the limit, is reserved once; a body that
    // declares nothing grows as it arrives.
    let mut body = Vec::with_capacity(declared.map_or(0, |len| len as usize).min(limit));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Broken { what: what.to_string(), why: without_url(&e) })?
    {
        if chunk.len() > limit - body.len() {
            return Err(too_large(None));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `limit` bytes of `response`'s body as text (invalid
/// UTF-8 replaced), for a message that quotes what a failing peer said. The
/// rest is dropped unread and a broken connection ends the text early: the
/// caller is already reporting a failure, and this is only its detail.
/// The text is raw: escape it before it reaches a terminal or a log.
pub async fn read_head(mut response: reqwest::Response, limit: usize) -> String {
    let mut head = Vec::with_capacity(limit.min(4096));
    while head.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                head.extend_from_slice(&chunk[..chunk.len().min(limit - head.len())])
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Where a redirect points: its `Location`, raw, at most 200 characters
/// (`(no Location)` when it has none), for the error that refuses to follow
/// it. toolgate follows no redirect: it would carry the request — and its
/// credentials — to a place nobody configured. Escape it before printing.
pub fn location(response: &reqwest::Response) -> String {
    match response.headers().get(reqwest::header::LOCATION) {
        Some(value) => {
            let text = String::from_utf8_lossy(value.as_bytes());
            let mut shown: String = text.chars().take(200).collect();
            if shown.len() < text.len() {
                shown.push('…');
            }
            shown
        }
        None => "(no Location)".to_string(),
    }
}

/// A reqwest error and its causes (a TLS refusal is a cause: "invalid peer
/// certificate: UnknownIssuer"), without the URL, which may hold a secret
/// in its query.
pub fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.contains(&text) {
            s = format!("{s}: {text}");
        }
        cause = c.source();
    }
    if let Some(url) = e.url() {
        s = s.replace(url.as_str(), "<upstream>");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A hostile server: answers every request with `head` (status line and
    /// headers) and then `body_len` bytes of body, counting what it managed
    /// to write before the client hung up.
    async fn hostile(head: &'static str, body_len: usize) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let written = Arc::new(AtomicUsize::new(0));
        let count = written.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![b'x'; 64 << 10];
                    let mut left = body_len;
                    while left > 0 {
                        let n = left.min(chunk.len());
                        if socket.write_all(&chunk[..n]).await.is_err() {
                            return;
                        }
                        count.fetch_add(n, Ordering::Relaxed);
                        left -= n;
                    }
                });
            }
        });
        (url, written)
    }

    const HUGE: usize = 256 << 20;

    #[tokio::test]
    async fn an_endless_body_is_refused_at_the_limit_not_read_whole() {
        let (url, written) = hostile("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", HUGE).await;
        let response = reqwest::get(&url).await.unwrap();
        let err = read_limited(response, 8 << 10, "the hash tile").await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, BodyError::TooLarge { limit: 8192, declared: None, .. }), "{text}");
        assert!(text.contains("the hash tile") && text.contains("8192 bytes"), "{text}");
        // The client hung up: the server could not write the rest (what it
        // wrote is at most what the sockets' buffers hold).
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let sent = written.load(Ordering::Relaxed);
        assert!(sent < 64 << 20, "the server wrote {sent} of {HUGE} bytes: the body was read on");
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_before_reading() {
        let (url, _) = hostile(
            "HTTP/1.1 200 OK\r\nContent-Length: 419430400\r\nConnection: close\r\n\r\n",
            1 << 20,
        )
        .await;
        let response = reqwest::get(&url).await.unwrap();
        let err = read_limited(response, 1 << 20, "the log's checkpoint").await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { declared: Some(419430400), .. }), "{err}");
        assert!(
            err.to_string().contains("419430400") && err.to_string().contains("1048576"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let (url, _) =
            hostile("HTTP/1.1 200 OK\r\nContent-Length: 8192\r\nConnection: close\r\n\r\n", 8192)
                .await;
        let body =
            read_limited(reqwest::get(&url).await.unwrap(), 8192, "the hash tile").await.unwrap();
        assert_eq!(body.len(), 8192);
        // Exactly at the limit without a declared length too.
        let (url, _) = hostile("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 8192).await;
        assert_eq!(
            read_limited(reqwest::get(&url).await.unwrap(), 8192, "t").await.unwrap().len(),
            8192
        );
        let (url, _) = hostile("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 8193).await;
        assert!(read_limited(reqwest::get(&url).await.unwrap(), 8192, "t").await.is_err());
    }

    #[tokio::test]
    async fn a_head_is_the_first_bytes_and_the_rest_is_dropped() {
        let (url, written) =
            hostile("HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n", HUGE).await;
        let head = read_head(reqwest::get(&url).await.unwrap(), 1024).await;
        assert_eq!(head, "x".repeat(1024));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(written.load(Ordering::Relaxed) < 64 << 20);
    }
}
