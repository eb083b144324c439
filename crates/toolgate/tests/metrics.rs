//! `[telemetry] prometheus_listen`: `toolgate serve` answers `GET /metrics`
//! with the metrics OTLP would export, in the Prometheus text format — a
//! real process, a real upstream, a real call, then a scrape.

mod ops_common;

use ops_common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exposes_its_metrics_for_a_prometheus_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let support = start_support(&dir.path().join("support"), &dir.path().join("support.log")).await;
    // A free port for the scrape (bound, read, released).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[telemetry]\nprometheus_listen = \"127.0.0.1:{port}\"\n",
            gateway_config(&support.url, None, "automatic")
        ),
    )
    .unwrap();
    let gateway = start_gateway(&config, &dir.path().join("gateway.log")).await;
    let log = std::fs::read_to_string(&gateway.log).unwrap();
    assert!(log.contains(&format!("metrics: http://127.0.0.1:{port}/metrics")), "{log}");
    let client = client();
    // One call that runs, one refused for its arguments.
    let (status, body) =
        call(&client, &gateway.url, &ticket_args("metrics-1"), Some("metrics-1"), json!({}), None)
            .await
            .unwrap();
    assert_eq!((status, body["result"]["isError"].as_bool()), (200, Some(false)), "{body}");
    let (_, refused) =
        call(&client, &gateway.url, &json!({"customer_id": 7}), None, json!({}), None)
            .await
            .unwrap();
    assert!(refused.to_string().contains("invalid_arguments"), "{refused}");
    let scrape = client.get(format!("http://127.0.0.1:{port}/metrics")).send().await.unwrap();
    assert!(
        scrape.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4")
    );
    let text = scrape.text().await.unwrap();
    for line in [
        "# TYPE toolgate_decisions_total counter",
        r#"toolgate_decisions_total{guardrail_decision="allow",toolgate_authority_class="automatic",toolgate_decision_reason="automatic"} 1"#,
        r#"toolgate_decisions_total{guardrail_decision="block",toolgate_authority_class="automatic",toolgate_decision_reason="invalid_arguments"} 1"#,
        "# TYPE mcp_server_operation_duration_seconds histogram",
        "# TYPE toolgate_approvals_pending gauge",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("mcp_server_operation_duration_seconds_count{")
            && l.contains(r#"mcp_method_name="tools/call""#)),
        "{text}"
    );
    // Nothing of a caller's or an argument's in the scrape.
    assert!(!text.contains("cust_") && !text.contains(DANA_TOKEN), "{text}");
}
