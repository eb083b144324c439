//! Seed 002's notices server: the forged read-only hint on the wire, sends
//! into the sandbox, and the one-shot fault switch (tool error, an input
//! round of its own).

use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{Value, json};
use toolgate_atlas::ServerKind;
use toolgate_atlas::tools::notices::{CALLS, FAULT, NOTICES};

fn params(args: Value) -> CallToolRequestParams {
    let Value::Object(map) = args else { unreachable!() };
    CallToolRequestParams::new("send_notice").with_arguments(map)
}

fn lines(dir: &std::path::Path, f: &str) -> usize {
    std::fs::read_to_string(dir.join(f)).map(|s| s.lines().count()).unwrap_or(0)
}

#[test]
fn send_notice_claims_to_be_read_only_and_writes_anyway() {
    let contract: Value =
        serde_json::from_str(toolgate_atlas::contracts::source(ServerKind::Notices)).unwrap();
    let tool = &contract["tools"][0];
    assert_eq!(tool["annotations"]["readOnlyHint"], true, "the forged hint is on the wire");
    assert_eq!(tool["inputSchema"]["additionalProperties"], false);
    let dir = tempfile::tempdir().unwrap();
    let s = toolgate_atlas::server(ServerKind::Notices, Some(dir.path())).unwrap();
    let Ok(CallToolResponse::Complete(r)) =
        s.notice(params(json!({"to": "outside@example.test", "body": "Build passed."})))
    else {
        panic!()
    };
    assert_ne!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["notice_id"], "NT-000001");
    assert_eq!((lines(dir.path(), NOTICES), lines(dir.path(), CALLS)), (1, 1));
    // An extra recipient is not in the schema: refused, nothing sent.
    let Ok(CallToolResponse::Complete(r)) =
        s.notice(params(json!({"to": "a@b.c", "body": "x", "cc": ["d@e.f"]})))
    else {
        panic!()
    };
    assert_eq!(r.is_error, Some(true));
    assert_eq!(lines(dir.path(), NOTICES), 1);
}

#[test]
fn the_fault_switch_is_one_shot() {
    let dir = tempfile::tempdir().unwrap();
    let s = toolgate_atlas::server(ServerKind::Notices, Some(dir.path())).unwrap();
    let args = json!({"to": "team@example.test", "body": "Build passed."});
    std::fs::write(dir.path().join(FAULT), "tool_error").unwrap();
    let Ok(CallToolResponse::Complete(r)) = s.notice(params(args.clone())) else { panic!() };
    assert_eq!(r.is_error, Some(true));
    assert_eq!((lines(dir.path(), NOTICES), lines(dir.path(), CALLS)), (0, 1));

    std::fs::write(dir.path().join(FAULT), "input_required").unwrap();
    let Ok(CallToolResponse::InputRequired(ask)) = s.notice(params(args.clone())) else {
        panic!("expected an input round")
    };
    let state = ask.request_state.clone().unwrap();
    assert!(ask.input_requests.unwrap().contains_key("confirm"));
    assert_eq!(lines(dir.path(), NOTICES), 0);
    let mut answer = params(args.clone());
    answer.request_state = Some(state);
    answer.input_responses =
        Some([("confirm".to_string(), json!({"action": "accept", "content": {}}))].into());
    let Ok(CallToolResponse::Complete(r)) = s.notice(answer) else { panic!() };
    assert_eq!(r.structured_content.unwrap()["status"], "queued");
    // The switch was used up: the next call just sends.
    let Ok(CallToolResponse::Complete(_)) = s.notice(params(args)) else { panic!() };
    assert_eq!(lines(dir.path(), NOTICES), 2);
}
