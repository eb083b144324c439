//! Telemetry by the MCP and GenAI conventions, observed with the SDK's
//! in-memory exporter and with a real OTLP/HTTP receiver: span names,
//! kinds, parenting across the pipeline stages and the upstream call, the
//! required attributes, `_meta.traceparent` honoured and propagated, content
//! capture off by default and redacted when on, metrics exported.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use toolgate_gateway::config::Config;
use tracing_subscriber::layer::SubscriberExt as _;

const PARENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_SPAN: &str = "b7ad6b7169203331";

/// An upstream whose tool answers with the `_meta` it received.
#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": "echo", "description": "Echo the request's _meta.",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}, "password": {"type": "string"}}, "additionalProperties": false}
        }))
        .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }
    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured(
            json!({"meta": serde_json::to_value(&context.meta).unwrap_or_default()}),
        )
        .into())
    }
}

async fn setup(telemetry: &str) -> Fronted {
    front(Echo, |upstream| {
        format!(
            "[servers.echo]\nurl = \"{upstream}\"\n[registry.\"echo__echo\"]\nclass = \
                \"automatic\"\n{ANONYMOUS}\n[telemetry]\n{telemetry}\n"
        )
    })
    .await
}

fn in_memory() -> (InMemorySpanExporter, SdkTracerProvider) {
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber = tracing_subscriber::registry()
        .with(toolgate_gateway::telemetry::span_layer(provider.tracer("test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    (exporter, provider)
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

fn traced_call(url: &str, name: &str, arguments: Value) -> reqwest::RequestBuilder {
    request(
        url,
        json!(7),
        "tools/call",
        json!({"name": name, "arguments": arguments, "_meta": {"traceparent": format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01")}}),
    )
}

#[tokio::test]
async fn a_call_is_one_server_span_with_stage_children_and_an_upstream_client_span() {
    let (exporter, provider) = in_memory();
    let s = setup("").await;
    let body: Value = traced_call(&s.url, "echo__echo", json!({"q": "x", "password": "hunter2"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let upstream_meta = &body["result"]["structuredContent"]["meta"];
    let unknown = traced_call(&s.url, "echo__nothing", json!({})).send().await.unwrap();
    assert_eq!(unknown.status(), 200);
    let wrong: Value = request(
        &s.url,
        json!(9),
        "tools/call",
        json!({"name": "echo__echo", "arguments": {"q": 5}}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(wrong["result"]["structuredContent"]["reason"], "invalid_arguments", "{wrong}");
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let server = spans.iter().find(|s| s.name == "tools/call echo__echo").expect("the SERVER span");
    assert_eq!(server.span_kind, SpanKind::Server);
    assert_eq!(
        server.span_context.trace_id().to_string(),
        PARENT_TRACE,
        "the request's traceparent is the parent"
    );
    assert_eq!(server.parent_span_id.to_string(), PARENT_SPAN);
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("mcp.protocol.version", "2026-07-28"),
        ("jsonrpc.request.id", "7"),
        ("network.transport", "tcp"),
        ("client.address", "127.0.0.1"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "echo__echo"),
        ("gen_ai.tool.call.id", "7"),
        ("gen_ai.tool.description", "Echo the request's _meta."),
        ("gen_ai.tool.type", "function"),
        ("gen_ai.provider.name", "echo"),
        ("gen_ai.system", "echo"),
        ("guardrail.name", "toolgate.policy"),
        ("guardrail.decision", "allow"),
        ("toolgate.authority.registry_class", "automatic"),
    ] {
        assert_eq!(attr(server, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(attr(server, "toolgate.proposal_sha256").map(|v| v.len()), Some(64));
    assert!(attr(server, "toolgate.policy_version").is_some());
    assert!(attr(server, "mcp.session.id").is_none(), "no session id on 2026-07-28");
    assert!(
        attr(server, "gen_ai.tool.call.arguments").is_none()
            && attr(server, "gen_ai.tool.call.result").is_none(),
        "content capture is off by default"
    );
    assert!(attr(server, "error.type").is_none());

    // One child span per stage, in order, each a child of the SERVER span.
    let stages: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            s.span_context.trace_id() == server.span_context.trace_id()
                && s.parent_span_id == server.span_context.span_id()
        })
        .collect();
    let mut names: Vec<(std::time::SystemTime, String)> =
        stages.iter().map(|s| (s.start_time, s.name.to_string())).collect();
    names.sort();
    let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        names,
        [
            "admit", "resolve", "validate", "decide", "approve", "present", "reserve", "dispatch",
            "check"
        ]
    );
    let dispatch = stages.iter().find(|s| s.name == "dispatch").unwrap();
    let client = spans.iter().find(|s| s.name == "tools/call echo").expect("the CLIENT span");
    assert_eq!(client.span_kind, SpanKind::Client);
    assert_eq!(client.parent_span_id, dispatch.span_context.span_id());
    // The upstream request carried the CLIENT span as its parent.
    let sent = upstream_meta["traceparent"].as_str().expect("traceparent in the upstream _meta");
    assert_eq!(sent, format!("00-{PARENT_TRACE}-{}-01", client.span_context.span_id()));

    // A refusal before decide is a decision all the same, and its receipt's
    // place in the log is on the span.
    let refused = spans
        .iter()
        .find(|s| {
            s.name == "tools/call echo__echo"
                && attr(s, "jsonrpc.request.id").as_deref() == Some("9")
        })
        .expect("the refused call's span");
    assert_eq!(attr(refused, "guardrail.decision").as_deref(), Some("block"));
    assert_eq!(attr(refused, "toolgate.decision.reason").as_deref(), Some("invalid_arguments"));
    assert!(
        attr(refused, "toolgate.receipt.index").is_some_and(|i| i.parse::<u64>().is_ok()),
        "{:?}",
        refused.attributes
    );
    // Only documented attributes: none of the tracing bridge's own.
    for span in &spans {
        for kv in &span.attributes {
            let key = kv.key.as_str();
            assert!(
                !["busy_ns", "idle_ns", "target", "level"].contains(&key)
                    && !key.starts_with("code.")
                    && !key.starts_with("thread."),
                "{key} on {}",
                span.name
            );
        }
    }

    // A failed request: error.type is the JSON-RPC code, status ERROR.
    let failed = spans.iter().find(|s| s.name == "tools/call echo__nothing").unwrap();
    assert_eq!(attr(failed, "error.type").as_deref(), Some("-32602"));
    assert!(matches!(failed.status, Status::Error { .. }), "{:?}", failed.status);
}

#[tokio::test]
async fn captured_content_is_redacted() {
    let (exporter, provider) = in_memory();
    let s = setup("capture_content = true\nredact_patterns = [\"hunt\\\\w+\"]").await;
    let resp = traced_call(&s.url, "echo__echo", json!({"q": "hunter3", "password": "hunter2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let server = spans.iter().find(|s| s.name == "tools/call echo__echo").unwrap();
    let arguments: Value =
        serde_json::from_str(&attr(server, "gen_ai.tool.call.arguments").unwrap()).unwrap();
    assert_eq!(arguments, json!({"q": "[REDACTED]", "password": "[REDACTED]"}));
    let result = attr(server, "gen_ai.tool.call.result").unwrap();
    assert!(result.contains("traceparent") && !result.contains("hunter"), "{result}");
}

/// A small OTLP/HTTP receiver: what arrived, by path.
async fn receiver() -> (String, Arc<Mutex<Vec<(String, Vec<u8>)>>>) {
    let got: Arc<Mutex<Vec<(String, Vec<u8>)>>> = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
        let sink = sink.clone();
        async move {
            sink.lock().unwrap().push((uri.path().to_string(), body.to_vec()));
            axum::http::StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_are_exported_over_otlp_http() {
    use prost::Message as _;
    let (endpoint, got) = receiver().await;
    let settings = format!(
        "otlp_endpoint = \"{endpoint}\"\nservice_name = \"toolgate-test\"\nmetrics_interval_ms = 100000"
    );
    let config = Config::parse(
        &format!("[telemetry]\n{settings}\n{ANONYMOUS}"),
        std::path::Path::new("/tmp/x.toml"),
    )
    .unwrap();
    let telemetry =
        toolgate_gateway::telemetry::Telemetry::init(&config.telemetry, &config.tls, "warn")
            .unwrap();
    let s = setup(&settings).await;
    let resp = traced_call(&s.url, "echo__echo", json!({"q": "x"})).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    drop(s);
    // Shutdown flushes both signals (the exporters block: off the runtime).
    tokio::task::spawn_blocking(move || telemetry.shutdown()).await.unwrap();
    let got = got.lock().unwrap().clone();
    let traces: Vec<_> = got.iter().filter(|(p, _)| p == "/v1/traces").collect();
    assert!(
        !traces.is_empty(),
        "no traces arrived: {:?}",
        got.iter().map(|g| &g.0).collect::<Vec<_>>()
    );
    let mut names = Vec::new();
    let mut service = None;
    for (_, body) in traces {
        let req =
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
                body.as_slice(),
            )
            .unwrap();
        for rs in req.resource_spans {
            for kv in rs.resource.iter().flat_map(|r| r.attributes.iter()) {
                if kv.key == "service.name" {
                    service =
                        kv.value.as_ref().and_then(|v| v.value.clone()).map(|v| format!("{v:?}"));
                }
            }
            for ss in rs.scope_spans {
                names.extend(ss.spans.into_iter().map(|s| (s.name, hex(&s.trace_id))));
            }
        }
    }
    assert!(
        names.iter().any(|(n, t)| n == "tools/call echo__echo" && t == PARENT_TRACE),
        "{names:?}"
    );
    assert!(names.iter().any(|(n, _)| n == "tools/call echo"), "{names:?}");
    assert!(service.is_some_and(|s| s.contains("toolgate-test")));
    let metrics: Vec<_> = got.iter().filter(|(p, _)| p == "/v1/metrics").collect();
    let mut metric_names = Vec::new();
    for (_, body) in metrics {
        let req = opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
        for rm in req.resource_metrics {
            for sm in rm.scope_metrics {
                metric_names.extend(sm.metrics.into_iter().map(|m| m.name));
            }
        }
    }
    for m in [
        "mcp.server.operation.duration",
        "mcp.client.operation.duration",
        "toolgate.decisions",
        "toolgate.approvals.pending",
    ] {
        assert!(metric_names.iter().any(|n| n == m), "{m} missing from {metric_names:?}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
