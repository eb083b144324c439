use std::time::Duration;

use super::*;
use crate::stages::testing::{Live, Reply, find_definition, passed, refused, rpc_error};
use toolgate_mcp::upstream::Upstream;

const REGISTRY: &str = "[registry.\"parts__find_part\"]\nclass = \"automatic\"\nread_only = true\n";

async fn live() -> Live {
    Live::start(
        vec![find_definition()],
        Reply::Result(r#"{"content":[]}"#),
        REGISTRY,
        Duration::from_secs(10),
    )
    .await
}

#[tokio::test]
async fn a_listed_tool_resolves_to_its_upstream_tool_and_pin() {
    let live = live().await;
    let tool = passed(resolve(
        &live.catalogs,
        &live.catalogs.current(),
        &live.config,
        Kind::Tool,
        "parts__find_part",
    ));
    assert_eq!(
        (tool.exposed_name.as_str(), tool.server.as_str(), tool.tool.name.as_str()),
        ("parts__find_part", "parts", "find_part")
    );
    assert_eq!(tool.pin, PinStatus::Pinned);
    assert_eq!(
        tool.definition_sha256,
        toolgate_core::contract::definition_sha256(&find_definition())
    );
    assert!(tool.read_only() && tool.registry_read_only);
}

#[tokio::test]
async fn an_unknown_name_is_invalid_params_carrying_the_refusal() {
    let live = live().await;
    // A tool the server does not list, and a server that is not configured.
    for name in ["parts__find_parts", "nobody__find_part"] {
        let e = rpc_error(resolve(
            &live.catalogs,
            &live.catalogs.current(),
            &live.config,
            Kind::Tool,
            name,
        ));
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert_eq!(e.message, format!("Unknown tool: {name}"));
        let data = e.data.expect("the refusal rides in data");
        assert_eq!(
            (data["decision"].as_str(), data["reason"].as_str(), data["action"].as_str()),
            (Some("deny"), Some("unknown_tool"), Some("correct")),
            "{data}"
        );
    }
}

#[tokio::test]
async fn a_server_that_is_down_is_unavailable_and_retryable_without_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(
        Config::parse(
            "[servers.parts]\nurl = \"http://127.0.0.1:9/mcp\"\n",
            &dir.path().join("toolgate.toml"),
        )
        .unwrap(),
    );
    // Never started: it has no listing, so its tools are not in the catalog.
    let upstream = Upstream::new(
        "parts",
        config.servers["parts"].server(),
        Duration::from_secs(1),
        Duration::from_secs(60),
        "test",
    );
    let pins = Arc::new(
        crate::pins::PinStore::open(&config.lock_path(), Arc::new(toolgate_core::SystemClock))
            .unwrap(),
    );
    let live = crate::catalog::Live::new(
        config.clone(),
        Arc::new(toolgate_core::policy::PolicyEngine::empty()),
        vec![(upstream, tokio_util::sync::CancellationToken::new())],
    );
    let catalogs = Catalogs::new(live, pins, true);
    let r =
        refused(resolve(&catalogs, &catalogs.current(), &config, Kind::Tool, "parts__find_part"));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::UpstreamUnavailable, Action::Retry)
    );
    assert!(r.message.contains("`parts`"), "{}", r.message);
    let down = catalogs.current().down["parts"].clone();
    assert!(!r.message.contains(&down), "the operator's reason `{down}` leaked: {}", r.message);
}

#[tokio::test]
async fn a_changed_contract_is_refused_until_an_operator_accepts_it() {
    let live = live().await;
    // The lock file holds another definition under this name.
    let accepted_before = serde_json::json!({"name": "find_part", "description": "the old one"});
    live.catalogs
        .pins()
        .accept("parts__find_part", "0".repeat(64).as_str(), &accepted_before)
        .unwrap();
    let r = refused(resolve(
        &live.catalogs,
        &live.catalogs.current(),
        &live.config,
        Kind::Tool,
        "parts__find_part",
    ));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::ContractChanged, Action::Escalate)
    );
    assert!(r.message.contains("toolgate tools --accept parts__find_part"), "{}", r.message);
    // The operator accepts the live definition from another process (the CLI).
    let cli = crate::pins::PinStore::open(&live.lock_path(), Arc::new(toolgate_core::SystemClock))
        .unwrap();
    cli.accept(
        "parts__find_part",
        &toolgate_core::contract::definition_sha256(&find_definition()),
        &find_definition(),
    )
    .unwrap();
    let tool = passed(resolve(
        &live.catalogs,
        &live.catalogs.current(),
        &live.config,
        Kind::Tool,
        "parts__find_part",
    ));
    assert_eq!(tool.tool.name, "find_part");
    // The catalog was rebuilt with the pin: later calls need not re-read the lock file.
    assert_eq!(live.catalogs.current().tools["parts__find_part"].pin, PinStatus::Pinned);
}

#[tokio::test]
async fn a_contract_that_cannot_be_pinned_is_not_run() {
    let live = live().await;
    // The lock file became unreadable after the gateway opened it.
    std::fs::write(live.lock_path(), "{not json").unwrap();
    let r = refused(resolve(
        &live.catalogs,
        &live.catalogs.current(),
        &live.config,
        Kind::Tool,
        "parts__find_part",
    ));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::ContractUnpinned, Action::Escalate)
    );
}
