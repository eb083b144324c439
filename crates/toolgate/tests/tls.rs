//! An `https://` upstream, checked against a CA made here (rcgen): with
//! `[tls] ca_file` the Python SDK calls through the gateway; without it (an
//! unknown CA), or with a certificate for another name, the upstream is
//! refused, and `toolgate doctor` says why.

mod demo_common;
mod ops_common;

use std::path::Path;
use std::process::Command as StdCommand;

use demo_common::{python, workspace};
use ops_common::{BIN, Proc, spawn_listening};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::{Value, json};
use tokio::process::Command;

/// A CA, and a certificate it signed for `names`, in `dir`: `ca.pem`,
/// `NAME.pem`, `NAME.key`.
fn certificates(dir: &Path, name: &str, names: &[&str]) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "toolgate test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), leaf.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    std::fs::set_permissions(
        dir.join(format!("{name}.key")),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

async fn fixture(dir: &Path, name: &str) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["conformance-fixture", "--http", "127.0.0.1:0", "--tls-cert"])
        .arg(dir.join(format!("{name}.pem")))
        .arg("--tls-key")
        .arg(dir.join(format!("{name}.key")));
    spawn_listening(cmd, &dir.join(format!("{name}.log")), "serving on").await
}

fn config(dir: &Path, url: &str, ca: bool) -> std::path::PathBuf {
    let tls = if ca { "[tls]\nca_file = \"ca.pem\"\n" } else { "" };
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n{tls}\n[servers.fixture]\nurl \
            = \"{url}\"\n\n[registry.\"fixture__test_simple_text\"]\nclass = \
            \"automatic\"\nread_only = true\n\n[callers.agent]\ntenant = \"acme\"\nanonymous = \
            true\n"
    );
    let path = dir.join(if ca { "with-ca.toml" } else { "without-ca.toml" });
    std::fs::write(&path, text).unwrap();
    path
}

/// `toolgate doctor`'s output for a config.
fn doctor(config: &Path) -> (bool, String) {
    let out = StdCommand::new(BIN).args(["doctor", "--config"]).arg(config).output().unwrap();
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_reached_with_the_configured_ca_and_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path(), "good", &["localhost", "127.0.0.1"]);
    let upstream = fixture(dir.path(), "good").await;
    let port = upstream.url.rsplit(':').next().unwrap().trim_end_matches("/mcp").to_string();
    assert!(upstream.url.starts_with("https://"), "{}", upstream.url);
    let url = format!("https://localhost:{port}/mcp");

    // With the CA: the SDK lists and calls through the gateway.
    let trusted = config(dir.path(), &url, true);
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(&trusted);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;
    let calls = json!([{"tool": "fixture__test_simple_text", "arguments": {}}]);
    let run = StdCommand::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([gateway.url.as_str(), "2026-07-28", &calls.to_string()])
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{got}\n{}", String::from_utf8_lossy(&run.stderr));
    let v: Value = serde_json::from_str(&got).unwrap();
    assert!(v["results"][0]["content"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    drop(gateway);

    // Without it the CA is unknown: refused, and doctor names the certificate.
    let (ok, said) = doctor(&config(dir.path(), &url, false));
    assert!(!ok, "{said}");
    assert!(
        said.contains("upstream fixture") && said.to_lowercase().contains("certificate"),
        "{said}"
    );

    // A certificate for another name, from the trusted CA: refused too.
    let other = tempfile::tempdir().unwrap();
    certificates(other.path(), "other", &["other.example"]);
    let wrong = fixture(other.path(), "other").await;
    let port = wrong.url.rsplit(':').next().unwrap().trim_end_matches("/mcp").to_string();
    let (ok, said) = doctor(&config(other.path(), &format!("https://localhost:{port}/mcp"), true));
    assert!(!ok, "{said}");
    assert!(said.contains("not valid for name \"localhost\""), "{said}");

    // A ca_file that holds no certificate is named when the config loads.
    std::fs::write(dir.path().join("ca.pem"), "not a certificate\n").unwrap();
    let (ok, said) = doctor(&trusted);
    assert!(!ok && said.contains("tls.ca_file") && said.contains("no certificate"), "{said}");
    drop((upstream, wrong));
}

/// A TLS receiver on `dir`'s `hook` certificate that records each
/// request's path and body; its port.
async fn receiver(dir: &Path) -> (u16, tokio::sync::mpsc::UnboundedReceiver<(String, String)>) {
    let (tx, received) = tokio::sync::mpsc::unbounded_channel();
    let routes = axum::Router::new().fallback(
        move |uri: axum::http::Uri, body: axum::body::Bytes| async move {
            drop(tx.send((uri.path().to_string(), String::from_utf8_lossy(&body).into_owned())));
            "ok"
        },
    );
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let certificate = toolgate_gateway::downstream::tls::Certificate::load(
        &dir.join("hook.pem"),
        &dir.join("hook.key"),
    )
    .unwrap();
    let listener = toolgate_gateway::downstream::tls::TlsListener::new(tcp, certificate).unwrap();
    tokio::spawn(async move { axum::serve(listener, routes).await });
    (port, received)
}

/// A gateway with `[tls] ca_file` and `extra` config in front of a plain
/// fixture whose `test_simple_text` is of `class`, after one call of it by
/// the Python SDK: the gateway and the fixture.
async fn called_through(dir: &Path, extra: &str, class: &str) -> (Proc, Proc) {
    let mut upstream = Command::new(BIN);
    upstream.args(["conformance-fixture", "--http", "127.0.0.1:0"]);
    let upstream = spawn_listening(upstream, &dir.join("fixture.log"), "serving on").await;
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\nca_file = \"ca.pem\"\n{extra}\n\
         [servers.fixture]\nurl = \"{}\"\n[registry.\"fixture__test_simple_text\"]\nclass = \"{class}\"\n\n\
         [callers.agent]\ntenant = \"acme\"\nanonymous = true\n",
        upstream.url
    );
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, text).unwrap();
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(&config);
    let gateway =
        spawn_listening(gateway, &dir.join("gateway.log"), "toolgate: serving MCP on").await;
    let calls = json!([{"tool": "fixture__test_simple_text", "arguments": {}}]);
    let run = StdCommand::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([gateway.url.as_str(), "2026-07-28", &calls.to_string()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    (gateway, upstream)
}

/// An `https://` webhook (as a Slack incoming webhook is), checked against
/// the configured CA: the approval's notice arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_webhook_gets_the_approval_notice() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path(), "hook", &["localhost"]);
    let (port, mut received) = receiver(dir.path()).await;
    let hook = format!(
        "[approvals]\nhold_ms = 0\n[[approvals.notify.webhooks]]\nname = \"team\"\nurl = \"https://localhost:{port}/hook\"\nformat = \"slack\"\n"
    );
    let (gateway, upstream) = called_through(dir.path(), &hook, "requires_approval").await;
    let (path, body) = tokio::time::timeout(std::time::Duration::from_secs(20), received.recv())
        .await
        .expect("the notice in time")
        .unwrap();
    let notice: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(path, "/hook");
    assert!(
        notice["text"].as_str().is_some_and(|t| t.contains("fixture__test_simple_text")),
        "{notice}"
    );
    drop((gateway, upstream));
}

/// OTLP over `https://`: the call's spans reach a TLS collector whose CA is
/// `[tls] ca_file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_https_collector() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path(), "hook", &["localhost"]);
    let (port, mut received) = receiver(dir.path()).await;
    let telemetry = format!(
        "[telemetry]\notlp_endpoint = \"https://localhost:{port}\"\nmetrics_interval_ms = 500\n"
    );
    let (gateway, upstream) = called_through(dir.path(), &telemetry, "automatic").await;
    // The metrics go every half second; the spans at the latest at shutdown.
    let pid = gateway.child.id().unwrap().to_string();
    let mut paths = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(paths.iter().any(|p| p == "/v1/metrics") && paths.iter().any(|p| p == "/v1/traces")) {
        if paths.iter().any(|p| p == "/v1/metrics") {
            let _ = StdCommand::new("kill").args(["-TERM", &pid]).status();
        }
        match tokio::time::timeout_at(deadline, received.recv()).await {
            Ok(Some((path, _))) => paths.push(path),
            _ => panic!(
                "no spans and metrics over https within 20 s: {paths:?}\n{}",
                std::fs::read_to_string(dir.path().join("gateway.log")).unwrap_or_default()
            ),
        }
    }
    drop((gateway, upstream));
}

/// A client that trusts only the CA in `ca` (PEM).
fn trusting(ca: &Path) -> reqwest::Client {
    let roots = reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).unwrap()).unwrap();
    reqwest::Client::builder().tls_certs_only(roots).build().unwrap()
}

/// toolgate's own listener over TLS (`[tls] cert_file`, `key_file`): the
/// Python SDK, trusting the test CA as Python does (`SSL_CERT_FILE`), calls
/// through `https://`; a renewed certificate, from another CA, is served
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_https_and_picks_up_a_renewed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path(), "gw", &["localhost"]);
    let mut upstream = Command::new(BIN);
    upstream.args(["conformance-fixture", "--http", "127.0.0.1:0"]);
    let upstream = spawn_listening(upstream, &dir.path().join("fixture.log"), "serving on").await;
    // A free port for the Prometheus scrape (bound, read, released): it is served over TLS too.
    let scrape = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert_file = \"gw.pem\"\nkey_file = \"gw.key\"\n\n\
         [telemetry]\nprometheus_listen = \"127.0.0.1:{scrape}\"\n\n\
         [servers.fixture]\nurl = \"{}\"\n[registry.\"fixture__test_simple_text\"]\nclass = \"automatic\"\nread_only = true\n\n\
         [callers.agent]\ntenant = \"acme\"\nanonymous = true\n",
        upstream.url
    );
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, text).unwrap();
    let mut gateway = Command::new(BIN);
    gateway.args(["serve", "--config"]).arg(&config);
    let gateway =
        spawn_listening(gateway, &dir.path().join("gateway.log"), "toolgate: serving MCP on").await;
    assert!(gateway.url.starts_with("https://127.0.0.1:"), "{}", gateway.url);
    let (_, said) = doctor(&config);
    assert!(said.contains("ok    tls: the listeners serve https"), "{said}");
    let port = gateway.url.rsplit(':').next().unwrap().trim_end_matches("/mcp").to_string();
    let url = format!("https://localhost:{port}/mcp");
    let calls = json!([{"tool": "fixture__test_simple_text", "arguments": {}}]);
    let run = StdCommand::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([url.as_str(), "legacy", &calls.to_string()])
        .env("SSL_CERT_FILE", dir.path().join("ca.pem"))
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{got}\n{}", String::from_utf8_lossy(&run.stderr));
    let v: Value = serde_json::from_str(&got).unwrap();
    assert!(v["results"][0]["content"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{v}");

    let metrics = trusting(&dir.path().join("ca.pem"))
        .get(format!("https://localhost:{scrape}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("# TYPE toolgate_decisions_total counter"));
    assert!(
        reqwest::get(format!("http://127.0.0.1:{scrape}/metrics")).await.is_err(),
        "the scrape is not served in plain HTTP beside TLS"
    );

    // Renewed: another CA's certificate, put in place as a renewal tool would (rename).
    let renewed = tempfile::tempdir().unwrap();
    certificates(renewed.path(), "gw", &["localhost"]);
    let (old, new) =
        (trusting(&dir.path().join("ca.pem")), trusting(&renewed.path().join("ca.pem")));
    let healthz = format!("https://localhost:{port}/healthz");
    assert!(
        new.get(&healthz).send().await.is_err(),
        "the renewed CA is not trusted yet by what is served"
    );
    for file in ["gw.pem", "gw.key"] {
        std::fs::copy(renewed.path().join(file), dir.path().join(format!("{file}.new"))).unwrap();
        std::fs::rename(dir.path().join(format!("{file}.new")), dir.path().join(file)).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while new.get(&healthz).send().await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewed certificate was not served within 15 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(old.get(&healthz).send().await.is_err(), "the old certificate is no longer served");
    // A key others can read: doctor says so (and `serve` would not start).
    std::fs::set_permissions(
        dir.path().join("gw.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let (ok, said) = doctor(&config);
    assert!(!ok && said.contains("FAIL  tls") && said.contains("tls.key_file"), "{said}");
    drop((gateway, upstream));
}
