//! The bare relay of `scripts/bench-gateway`, as its own process: the
//! router of `benches/common/relay.rs` (axum in, reqwest out, nothing else)
//! with the allocator the `toolgate` binary ships with.
//!
//!     cargo run --release -p toolgate --example relay -- 127.0.0.1:0 http://127.0.0.1:PORT/mcp
//!
//! Prints `relay: serving on http://ADDR/mcp` once it listens.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/common/relay.rs"]
mod relay;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: relay LISTEN_ADDR UPSTREAM_URL");
        std::process::exit(2);
    };
    let app = relay::router(&upstream);
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("LISTEN_ADDR binds");
    println!("relay: serving on http://{}/mcp", listener.local_addr().expect("a local address"));
    axum::serve(listener, app).await.expect("serving");
}
