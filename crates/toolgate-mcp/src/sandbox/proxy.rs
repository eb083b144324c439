//! The box's one door when its network is an allow-list: an HTTP CONNECT
//! proxy the gateway serves on a socket inside the box's network namespace.
//! Each connection is checked against the list, logged and counted; the
//! name is resolved here, never in the box, and a name that resolves to
//! this machine or to a link-local address (a cloud's metadata service) is
//! refused unless the list names that address itself.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::Allowed;

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 8 * 1024;
/// How long a box gets to send its request, and a host to answer a connect.
const HEAD_WITHIN: Duration = Duration::from_secs(10);
const CONNECT_WITHIN: Duration = Duration::from_secs(15);
/// Connections one box may hold open through the proxy at once: each
/// costs the gateway two descriptors, which a box must not exhaust.
const MAX_OPEN: usize = 64;

/// A box's connections, counted since it started.
#[derive(Debug, Default)]
pub struct Counts {
    /// Tunnels opened.
    pub allowed: AtomicU64,
    /// Requests refused (not on the list, not CONNECT, unreadable).
    pub refused: AtomicU64,
    /// Why the last one was refused: a server that fails to fetch its
    /// package says only "tunnel error"; this says which host.
    pub last_refused: std::sync::Mutex<Option<String>>,
}

/// Serves `listener` for server `server` until the task is dropped.
pub(crate) async fn serve(
    listener: TcpListener,
    server: Arc<str>,
    allowed: Arc<[Allowed]>,
    counts: Arc<Counts>,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_OPEN));
    loop {
        // Accepted only while a place is free: the rest wait in the backlog.
        let Ok(place) = open.clone().acquire_owned().await else { return };
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (server, allowed, counts) = (server.clone(), allowed.clone(), counts.clone());
        tokio::spawn(async move {
            one(stream, &server, &allowed, &counts).await;
            drop(place);
        });
    }
}

async fn one(mut stream: TcpStream, server: &str, allowed: &[Allowed], counts: &Counts) {
    let refuse = |status: &str, why: String| (status.to_string(), why);
    let verdict = match read_head(&mut stream).await {
        Err(why) => Err(refuse("400 Bad Request", why)),
        Ok(head) => match target(&head) {
            Err(why) => Err(refuse("405 Method Not Allowed", why)),
            Ok((host, port)) if !allowed.iter().any(|a| a.admits(&host, port)) => Err(refuse(
                "403 Forbidden",
                format!(
                    "{host}:{port} is not on servers.{server}.sandbox.network; add it there to let this server reach it"
                ),
            )),
            Ok((host, port)) => match connect(&host, port, allowed).await {
                Ok(upstream) => Ok((host, port, upstream)),
                Err(why) => Err(refuse("502 Bad Gateway", why)),
            },
        },
    };
    match verdict {
        Ok((host, port, mut upstream)) => {
            counts.allowed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(server, host = %host, port, "sandbox network: connection allowed");
            if stream.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
            }
        }
        Err((status, why)) => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            tracing::info!(server, refused = %shown(&why), "sandbox network: connection refused");
            *counts.last_refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(shown(&why));
            let body = format!("toolgate: {why}\n");
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    }
}

async fn read_head(stream: &mut TcpStream) -> Result<String, String> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| format!("the request could not be read: {e}"))?;
            if n == 0 {
                return Err("the connection closed before its request ended".to_string());
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(());
            }
            if head.len() > MAX_HEAD {
                return Err(format!("the request head is longer than {MAX_HEAD} bytes"));
            }
        }
    };
    tokio::time::timeout(HEAD_WITHIN, read)
        .await
        .map_err(|_| "the request head did not arrive in time".to_string())??;
    String::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_string())
}

/// `CONNECT host:port HTTP/1.1` → (host, port); the only request served.
fn target(head: &str) -> Result<(String, u16), String> {
    let line = head.lines().next().unwrap_or_default();
    let mut words = line.split(' ');
    let (method, authority) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    if method != "CONNECT" {
        return Err(format!(
            "only CONNECT is served (got `{}`): set HTTPS_PROXY, and reach hosts over https",
            shown(method)
        ));
    }
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| format!("`{}` names no port", shown(authority)))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let port = port.parse::<u16>().map_err(|_| format!("`{}` names no port", shown(authority)))?;
    if !is_host_name(&host) && host.parse::<IpAddr>().is_err() {
        return Err(format!("`{}` is not a host name", shown(&host)));
    }
    Ok((host, port))
}

/// Resolves and connects. A name that resolves to loopback or link-local
/// is refused, unless the list names that very address.
async fn connect(host: &str, port: u16, allowed: &[Allowed]) -> Result<TcpStream, String> {
    let addresses: Vec<SocketAddr> =
        tokio::time::timeout(CONNECT_WITHIN, tokio::net::lookup_host((host, port)))
            .await
            .map_err(|_| format!("{host} did not resolve in time"))?
            .map_err(|e| format!("{host} does not resolve: {e}"))?
            .collect();
    let named =
        |ip: IpAddr| allowed.iter().any(|a| !a.wildcard && a.host.parse::<IpAddr>() == Ok(ip));
    let usable: Vec<SocketAddr> =
        addresses.into_iter().filter(|a| !inward(a.ip()) || named(a.ip())).collect();
    if usable.is_empty() {
        return Err(format!(
            "{host} resolves to this machine or a link-local address; name the address itself on the list to allow it"
        ));
    }
    let mut last = String::new();
    for address in usable {
        match tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("{host}:{port}: {e}"),
            Err(_) => last = format!("{host}:{port}: no answer in time"),
        }
    }
    Err(last)
}

/// Loopback, unspecified or link-local: this machine, or its cloud's
/// metadata service.
fn inward(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(|v4| inward(IpAddr::V4(v4)))
        }
    }
}

/// A DNS name: labels of letters, digits and `-`, dot-separated.
pub fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
        })
}

/// Text from a box, bounded and with every control character escaped, for
/// a log line or an answer.
pub fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(200).flat_map(char::escape_debug).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connect_to_a_host_and_port_is_read() {
        assert_eq!(
            target("CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(),
            ("registry.npmjs.org".into(), 443)
        );
        assert_eq!(target("CONNECT [::1]:8080 HTTP/1.1\r\n\r\n").unwrap(), ("::1".into(), 8080));
        assert!(
            target("GET http://example.com/ HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .contains("only CONNECT")
        );
        assert!(target("CONNECT example.com HTTP/1.1\r\n\r\n").is_err());
        assert!(
            target("CONNECT ex\u{1b}[2Jample.com:443 HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .contains("\\u{1b}")
        );
    }

    #[test]
    fn this_machine_and_link_local_addresses_are_inward() {
        for ip in ["127.0.0.1", "0.0.0.0", "169.254.169.254", "::1", "fe80::1", "::ffff:127.0.0.1"]
        {
            assert!(inward(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "192.168.1.1", "104.16.0.1", "2606:4700::1"] {
            assert!(!inward(ip.parse().unwrap()), "{ip}");
        }
    }
}
