use std::time::Duration;

use super::*;
use crate::call::CallRequest;
use crate::stages::testing::{
    Live, Reply, call, find_definition, find_tool, order_definition, order_tool, passed, refused,
    rpc_error, split,
};
use serde_json::json;
use toolgate_mcp::wire::code;

const REGISTRY: &str = "[registry.\"parts__find_part\"]\nclass = \"automatic\"\nread_only = \
    true\n[registry.\"parts__raise_parts_order\"]\nclass = \"requires_approval\"\n";

/// An upstream listing both tools and answering every call with `reply`.
async fn serving(reply: Reply) -> Live {
    Live::start(
        vec![find_definition(), order_definition()],
        reply,
        REGISTRY,
        Duration::from_secs(10),
    )
    .await
}

fn find(part_no: &str) -> (ExposedTool, Proposal, CallRequest) {
    let arguments = json!({"part_no": part_no});
    (
        find_tool(),
        Proposal::new("parts", "find_part", arguments.clone()),
        call("parts__find_part", arguments),
    )
}

fn order() -> (ExposedTool, Proposal, CallRequest) {
    let arguments = json!({"part_no": "P-1", "quantity": 2});
    (
        order_tool(),
        Proposal::new("parts", "raise_parts_order", arguments.clone()),
        call("parts__raise_parts_order", arguments),
    )
}

/// Sends `call` to `upstream` as the pipeline does, with no input of its own.
async fn sent(
    upstream: Option<&Upstream>,
    (tool, proposal, call): &(ExposedTool, Proposal, CallRequest),
) -> Result<Box<RawValue>, Stop> {
    let (cx, call) = split(call);
    dispatch(
        upstream,
        tool,
        proposal,
        (&cx, &call),
        serde_json::Map::new(),
        &Presented::shared(),
        &toolgate_core::SystemClock,
    )
    .await
}

#[tokio::test]
async fn without_an_upstream_nothing_is_sent_and_the_caller_may_retry() {
    for c in [find("P-1"), order()] {
        let r = refused(sent(None, &c).await);
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::Allow, Reason::UpstreamUnavailable, Action::Retry)
        );
        assert_eq!(r.proposal_sha256.as_deref(), Some(c.1.sha256.as_str()));
        assert!(r.message.contains("nothing was run"), "{}", r.message);
    }
}

#[tokio::test]
async fn an_upstream_not_connected_yet_is_unavailable_not_unknown() {
    // Configured, never started: the call cannot have left the gateway.
    let server = crate::config::ServerConfig {
        url: Some("http://127.0.0.1:9/mcp".into()),
        ..Default::default()
    };
    let upstream = Upstream::new(
        "parts",
        server.server(),
        Duration::from_secs(1),
        Duration::from_secs(60),
        "test",
    );
    let r = refused(sent(Some(&upstream), &order()).await);
    assert_eq!((r.reason, r.action), (Reason::UpstreamUnavailable, Action::Retry));
}

#[tokio::test]
async fn the_upstreams_result_comes_back_verbatim_and_declared_headers_go_with_the_call() {
    let text = r#"{"content":[{"type":"text","text":"found"}],"structuredContent":{"price":12.50,"z":1,"a":2}}"#;
    let live = serving(Reply::Result(text)).await;
    let c = find("P-7 valve");
    let input = serde_json::Map::from_iter([("requestState".to_string(), json!("up-1"))]);
    let (cx, call) = split(&c.2);
    let answer = passed(
        dispatch(
            Some(&live.upstream),
            &c.0,
            &c.1,
            (&cx, &call),
            input,
            &Presented::shared(),
            &toolgate_core::SystemClock,
        )
        .await,
    );
    assert_eq!(answer.get(), text);
    let calls = live.fake.calls();
    assert_eq!(calls.len(), 1);
    let received = &calls[0];
    assert_eq!(
        (&received.params["name"], &received.params["arguments"]),
        (&json!("find_part"), &json!({"part_no": "P-7 valve"}))
    );
    // What the approve stage left of the client's input goes upstream as sent.
    assert_eq!(received.params["requestState"], "up-1");
    // `part_no` declares `x-mcp-header: Part`.
    assert_eq!(
        received.headers.get("mcp-param-part").and_then(|v| v.to_str().ok()),
        Some("P-7 valve")
    );
}

#[tokio::test]
async fn a_json_rpc_error_from_the_upstream_is_passed_on() {
    let live = serving(Reply::Error(code::INVALID_PARAMS)).await;
    let e = rpc_error(sent(Some(&live.upstream), &order()).await);
    assert_eq!((e.code, e.message.as_str()), (code::INVALID_PARAMS, "from the upstream"));
}

#[tokio::test]
async fn an_upstream_that_turns_the_request_away_ran_nothing() {
    let live = serving(Reply::Status(400)).await;
    let r = refused(sent(Some(&live.upstream), &order()).await);
    assert_eq!((r.reason, r.action), (Reason::UpstreamUnavailable, Action::Retry));
}

#[tokio::test]
async fn an_answer_lost_after_sending_means_reconcile_a_write_and_retry_a_read() {
    // HTTP 500: the server had the request and failed; it may have acted.
    // (Each on its own upstream: a lost connection marks it down.)
    let failing = serving(Reply::Status(500)).await;
    let r = refused(sent(Some(&failing.upstream), &order()).await);
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Allow, Reason::OutcomeUnknown, Action::Reconcile)
    );
    assert!(r.message.contains("may or may not have taken effect"), "{}", r.message);
    let failing = serving(Reply::Status(500)).await;
    let r = refused(sent(Some(&failing.upstream), &find("P-1")).await);
    assert_eq!((r.reason, r.action), (Reason::OutcomeUnknown, Action::Retry));
}

#[tokio::test]
async fn a_deadline_passed_means_reconcile_a_write_and_retry_a_read() {
    let live = Live::start(
        vec![find_definition(), order_definition()],
        Reply::Silence(Duration::from_secs(30)),
        REGISTRY,
        Duration::from_millis(1_500),
    )
    .await;
    let r = refused(sent(Some(&live.upstream), &find("P-1")).await);
    assert_eq!((r.reason, r.action), (Reason::UpstreamTimeout, Action::Retry));
    let r = refused(sent(Some(&live.upstream), &order()).await);
    assert_eq!((r.reason, r.action), (Reason::OutcomeUnknown, Action::Reconcile));
    assert_eq!(live.fake.calls().len(), 2, "both were sent");
}
