//! What `present` costs a call, per mode, against `shared` (issue 61: at
//! most 5 µs of CPU a call over `shared`): the stage alone, in one process,
//! the modes taking turns in rounds so that drift lands on each alike.
//! `exchange` is timed with its token cached (a local token endpoint
//! answers the first exchange; every later call takes the kept token), the
//! path a person's every call after the first takes — as an `oauth` grant
//! would, once connected.
//!
//! `cargo bench -p toolgate-gateway --bench identity`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use toolgate_core::{Caller, SystemEntropy};
use toolgate_gateway::config::Config;
use toolgate_gateway::identity::Identities;
use toolgate_gateway::identity::assertion::AssertionKey;

const CALLS: u32 = 200_000;
const ROUNDS: usize = 5;

/// A token endpoint that gives every exchange one token good for an hour.
async fn token_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0; 16 * 1024];
            let _ = s.read(&mut buf).await;
            let body = r#"{"access_token":"bench-exchanged-token-0123456789","token_type":"Bearer","expires_in":3600}"#;
            let _ = s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).as_bytes()).await;
        }
    });
    format!("http://{addr}/token")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let endpoint = token_endpoint().await;
    let text = format!(
        "[servers.shared]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         [servers.assertion]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.assertion.identity]\nmode = \"assertion\"\n\
         [servers.exchange]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.exchange.identity]\nmode = \"exchange\"\ntoken_endpoint = \"{endpoint}\"\nclient_id = \"bench\"\n"
    );
    let config = Config::parse(&text, std::path::Path::new("/tmp/toolgate.toml")).unwrap();
    let identities = Identities::new(Arc::new(AssertionKey::derive(&[7; 32])), &[], Vec::new()).unwrap();
    let caller = Caller { name: "agent".into(), subject: "tech-jane".into(), tenant: "atlas".into(), roles: vec![] };
    let entropy = SystemEntropy::default();
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let modes = ["shared", "assertion", "exchange"];
    // Warm: the first assertion signed, the first exchange made.
    for mode in modes {
        identities.present(&config, mode, (&caller, None), now, &entropy).await.unwrap();
    }
    let mut ns = [0f64; 3];
    for _ in 0..ROUNDS {
        for (i, mode) in modes.iter().enumerate() {
            let started = Instant::now();
            for _ in 0..CALLS {
                black_box(identities.present(&config, mode, (&caller, None), now, &entropy).await.unwrap());
            }
            ns[i] += started.elapsed().as_nanos() as f64 / f64::from(CALLS) / ROUNDS as f64;
        }
    }
    println!("present per call ({ROUNDS} rounds of {CALLS}, modes alternated): shared {:.0} ns, assertion {:.0} ns ({:+.0} ns), exchange with its token cached {:.0} ns ({:+.0} ns)", ns[0], ns[1], ns[1] - ns[0], ns[2], ns[2] - ns[0]);
}
