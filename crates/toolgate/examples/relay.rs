//! The bare relay of `scripts/bench-gateway`: the floor of any HTTP hop on
//! this machine, as its own process. Axum in, reqwest out, the allocator the
//! `toolgate` binary ships with; it passes the body and the answer through
//! and does nothing else: no parsing, no checks, no decision, no receipt.
//! What toolgate costs beyond it is toolgate's own work.
//!
//!     cargo run --release -p toolgate --example relay -- 127.0.0.1:0 http://127.0.0.1:PORT/mcp
//!
//! Prints `relay: serving on http://ADDR/mcp` once it listens.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use axum::http::HeaderMap;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: relay LISTEN_ADDR UPSTREAM_URL");
        std::process::exit(2);
    };
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build().expect("an HTTP client");
    // Parsed once, as the gateway does.
    let upstream = reqwest::Url::parse(&upstream).expect("UPSTREAM_URL is a URL");
    let forward = move |headers: HeaderMap, body: axum::body::Bytes| {
        let (client, upstream) = (client.clone(), upstream.clone());
        async move {
            let mut req = client.post(upstream).body(body);
            for name in ["content-type", "accept", "mcp-protocol-version", "mcp-method", "mcp-name"] {
                if let Some(v) = headers.get(name) {
                    req = req.header(name, v.clone());
                }
            }
            let (status, content_type, body) = match req.send().await {
                Ok(answer) => {
                    let (status, ct) = (answer.status(), answer.headers().get("content-type").cloned());
                    match answer.bytes().await {
                        Ok(body) => (status, ct, body),
                        Err(_) => (axum::http::StatusCode::BAD_GATEWAY, None, Default::default()),
                    }
                }
                Err(_) => (axum::http::StatusCode::BAD_GATEWAY, None, Default::default()),
            };
            let mut response = axum::response::Response::new(axum::body::Body::from(body));
            *response.status_mut() = status;
            if let Some(ct) = content_type {
                response.headers_mut().insert("content-type", ct);
            }
            response
        }
    };
    let app = axum::Router::new().route("/mcp", axum::routing::post(forward));
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("LISTEN_ADDR binds");
    println!("relay: serving on http://{}/mcp", listener.local_addr().expect("a local address"));
    axum::serve(listener, app).await.expect("serving");
}
