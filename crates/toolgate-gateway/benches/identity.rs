//! What `present` costs a call, per mode, against `shared` (issue 61: at
//! most 5 µs of CPU a call over `shared`): the stage alone, in one process,
//! the modes taking turns in rounds so that drift lands on each alike.
//! `exchange` is timed with its token cached (a local token endpoint
//! answers the first exchange; every later call takes the kept token), the
//! path a person's every call after the first takes — as an `oauth` grant
//! would, once connected. `oauth` is timed with the person's grant kept
//! (sealed) in a SQLite ledger: read from it once every 5 s, from memory
//! between.
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
            let _ = s
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \
                            {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
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
         [servers.exchange]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.exchange.identity]\nmode = \
             \"exchange\"\ntoken_endpoint = \"{endpoint}\"\nclient_id = \"bench\"\n\
         [servers.oauth]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.oauth.identity]\nmode = \"oauth\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = Config::parse(
        &format!("[gateway]\nstate_dir = \"{}\"\n{text}", dir.path().display()),
        &dir.path().join("toolgate.toml"),
    )
    .unwrap();
    let ledger =
        toolgate_ledger::open(dir.path().join("ledger.db").to_str().unwrap()).await.unwrap();
    let identities = Identities::new(Arc::new(AssertionKey::derive(&[7; 32])), &[], Vec::new())
        .unwrap()
        .with_connections(ledger, Vec::new(), "bench".into())
        .unwrap();
    let caller = Caller {
        name: "agent".into(),
        subject: "tech-jane".into(),
        tenant: "atlas".into(),
        roles: vec![],
    };
    let entropy = SystemEntropy::default();
    let now = || {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as i64
    };
    keep_a_grant(&identities, &config, &caller, now(), &entropy).await;
    let modes = ["shared", "assertion", "exchange", "oauth"];
    // Warm: the first assertion signed, the first exchange made.
    for mode in modes {
        identities.present(&config, mode, (&caller, None), now, &entropy).await.unwrap();
    }
    let mut ns = [0f64; 4];
    for _ in 0..ROUNDS {
        for (i, mode) in modes.iter().enumerate() {
            let started = Instant::now();
            for _ in 0..CALLS {
                black_box(
                    identities
                        .present(&config, mode, (&caller, None), now, &entropy)
                        .await
                        .unwrap(),
                );
            }
            ns[i] += started.elapsed().as_nanos() as f64 / f64::from(CALLS) / ROUNDS as f64;
        }
    }
    println!(
        "present per call ({ROUNDS} rounds of {CALLS}, modes alternated): shared {:.0} ns, \
            assertion {:.0} ns ({:+.0} ns), exchange with its token cached {:.0} ns ({:+.0} ns), \
            oauth with the grant kept {:.0} ns ({:+.0} ns)",
        ns[0],
        ns[1],
        ns[1] - ns[0],
        ns[2],
        ns[2] - ns[0],
        ns[3],
        ns[3] - ns[0]
    );
}

/// The person's grant at the `oauth` server, as a consent would keep it:
/// an access token good for an hour, sealed in the ledger.
async fn keep_a_grant(
    identities: &Identities,
    config: &Config,
    caller: &Caller,
    now_ms: i64,
    entropy: &SystemEntropy,
) {
    use toolgate_gateway::identity::connections::{For, Place};
    use toolgate_gateway::identity::oauth_client::{AuthMethod, Client, Discovered, TokenSet};
    let discovered = Discovered {
        resource: "http://127.0.0.1:9/mcp".into(),
        scopes: Vec::new(),
        issuer: "http://127.0.0.1:9".into(),
        authorization_endpoint: "http://127.0.0.1:9/authorize".into(),
        token_endpoint: "http://127.0.0.1:9/token".into(),
        registration_endpoint: None,
        revocation_endpoint: None,
        token_endpoint_auth_methods: Vec::new(),
        client_id_metadata_document_supported: false,
        iss_parameter_supported: false,
    };
    let tokens = TokenSet {
        access_token: "bench-access-token-0123456789abcdef".into(),
        refresh_token: None,
        expires_at_ms: Some(now_ms + 3_600_000),
        scope: None,
    };
    let client = Client { client_id: "bench".into(), client_secret: None, auth: AuthMethod::None };
    let of = For {
        tenant: caller.tenant.clone(),
        subject: caller.subject.clone(),
        server: "oauth".into(),
    };
    identities
        .connections()
        .unwrap()
        .keep(&Place::of(config), &of, tokens, (client, discovered), now_ms, entropy)
        .await
        .unwrap();
}
