//! The bare relay: the floor of any HTTP hop on this machine, built from the
//! gateway's own HTTP parts (axum in, reqwest out; the process's allocator is
//! the one `toolgate` ships with). It passes the body and the answer through
//! and does nothing else: no parsing, no checks, no decision, no receipt.
//! What toolgate costs beyond it is toolgate's own work; what the relay
//! costs is the price of being a hop at all. The in-process bench
//! (`benches/gateway.rs`) and the relay process of `scripts/bench-gateway`
//! (`examples/relay.rs`) both serve this router.

use axum::http::{HeaderMap, StatusCode};

/// `POST /mcp`, relayed to `upstream`; an upstream that cannot be reached
/// or read is a 502.
pub fn router(upstream: &str) -> axum::Router {
    let client =
        reqwest::Client::builder().pool_max_idle_per_host(256).build().expect("an HTTP client");
    // Parsed once, as the gateway does.
    let upstream = reqwest::Url::parse(upstream).expect("the upstream is a URL");
    let forward = move |headers: HeaderMap, body: axum::body::Bytes| {
        let (client, upstream) = (client.clone(), upstream.clone());
        async move {
            let mut req = client.post(upstream).body(body);
            for name in ["content-type", "accept", "mcp-protocol-version", "mcp-method", "mcp-name"]
            {
                if let Some(v) = headers.get(name) {
                    req = req.header(name, v.clone());
                }
            }
            let (status, content_type, body) = match req.send().await {
                Ok(answer) => {
                    let (status, ct) =
                        (answer.status(), answer.headers().get("content-type").cloned());
                    match answer.bytes().await {
                        Ok(body) => (status, ct, body),
                        Err(_) => (StatusCode::BAD_GATEWAY, None, Default::default()),
                    }
                }
                Err(_) => (StatusCode::BAD_GATEWAY, None, Default::default()),
            };
            let mut response = axum::response::Response::new(axum::body::Body::from(body));
            *response.status_mut() = status;
            if let Some(ct) = content_type {
                response.headers_mut().insert("content-type", ct);
            }
            response
        }
    };
    axum::Router::new().route("/mcp", axum::routing::post(forward))
}
