use std::sync::{Arc, Mutex};

use super::*;
use crate::call::CallRequest;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::gateway::{Mode, Sources};
use crate::stages::testing::{NOW_MS, call, find_tool, split};
use serde_json::json;
use toolgate_core::approval::{ApprovalState, Binding};
use toolgate_core::decision::decide_by_class;
use toolgate_core::proposal::{canonical_json, sha256_hex};
use toolgate_core::receipt;
use toolgate_core::{Decision, Proposal};
use toolgate_core::{FixedClock, SeededEntropy};
use toolgate_ledger::NewApproval;
use toolgate_mcp::wire::{RawObject, RpcError, code};

/// A gateway with no upstreams, its ledger and keys in `dir`, on a fixed clock.
async fn gateway(dir: &std::path::Path, config: &str) -> Arc<Gateway> {
    let config = Config::parse(config, &dir.join("toolgate.toml")).expect("a valid config");
    let sources = Sources {
        clock: Arc::new(FixedClock::new(NOW_MS)),
        entropy: Arc::new(SeededEntropy::new([4; 32])),
    };
    Gateway::start_with(config, Mode::Inspect, sources).await.expect("the gateway starts")
}

fn find() -> (CallRequest, Proposal) {
    (
        call("parts__find_part", json!({"part_no": "P-1"})),
        Proposal::new("parts", "find_part", json!({"part_no": "P-1"})),
    )
}

/// What the pipeline has gathered about a read once decide allowed it.
fn allowed(gw: &Gateway, (c, proposal): &(CallRequest, Proposal)) -> Findings {
    let tool = find_tool();
    let (cx, call) = split(c);
    let mut f = Findings::new(&cx, &call, gw.log.salt());
    f.resolved(&tool);
    f.validated(gw.config().receipts.capture_values, &cx, &tool, proposal);
    f.decision = Some(decide_by_class(&tool.view));
    f.policy_version = Some(gw.policy().version().to_string());
    f
}

/// Records `answer` as the pipeline does, under the policy in force.
async fn record(gw: &Gateway, findings: &Findings, answer: Answer, elapsed: Duration) -> Answer {
    let policy = gw.policy();
    let rec = Recorder {
        ledger: gw.ledger.as_ref(),
        log: &gw.log,
        clock: gw.clock.as_ref(),
        policy_version: policy.version(),
        config_version: "",
    };
    super::record(&rec, findings, answer, elapsed).await.answer
}

fn result(text: &str) -> Answer {
    Answer::Result(serde_json::from_str::<RawObject>(text).expect("a result object"))
}

/// The receipts in the ledger, and the private record kept with each.
async fn receipts(gw: &Gateway) -> Vec<(Value, Option<String>)> {
    let stored = gw.ledger.receipts(0, 100).await.unwrap();
    stored
        .into_iter()
        .map(|r| (serde_json::from_str::<Value>(&r.logged).unwrap()["receipt"].clone(), r.asked))
        .collect()
}

fn statuses(receipts: &[(Value, Option<String>)]) -> Vec<(String, String)> {
    receipts
        .iter()
        .map(|(r, _)| {
            (
                r["execution_status"].as_str().unwrap().to_string(),
                r["result_status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pair(execution: &str, result: &str) -> (String, String) {
    (execution.to_string(), result.to_string())
}

#[tokio::test]
async fn findings_follow_the_stages_and_the_private_record_completes_with_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let (c, proposal) = find();
    let tool = find_tool();
    let (cx, request) = split(&c);
    let mut f = Findings::new(&cx, &request, gw.log.salt());
    assert_eq!(
        (f.tool.as_str(), f.caller.as_str(), f.tenant.as_str(), f.request_id.as_str()),
        ("parts__find_part", "agent", "atlas", "7")
    );
    f.resolved(&tool);
    assert_eq!(
        (f.server.as_str(), f.upstream_tool.as_str(), f.definition_sha256.as_str()),
        ("parts", "find_part", tool.definition_sha256.as_str())
    );
    f.validated(gw.config().receipts.capture_values, &cx, &tool, &proposal);
    assert_eq!(f.proposal_sha256.as_deref(), Some(proposal.sha256.as_str()));
    assert_eq!(
        f.arguments_hash,
        receipt::salted_hash(&f.salt, proposal.canonical_arguments.as_bytes())
    );
    assert!(f.arguments.is_none(), "values are not captured unless configured");
    assert!(f.asked().is_none(), "not decided yet");
    let decision =
        Decision::by(Verdict::Allow, Reason::PolicyPermits, vec!["approved_reads".into()]);
    f.decision = Some(decision.clone());
    let asked: Value = serde_json::from_str(&f.asked().expect("decided")).expect("a JSON object");
    assert_eq!(
        asked["caller"],
        json!({"name": "agent", "subject": "agent-7", "tenant": "atlas", "roles": ["agent"]})
    );
    assert_eq!(
        asked["tool"],
        json!({"exposed_name": "parts__find_part", "server": "parts", "name": "find_part", "class": "automatic", "labels": []})
    );
    assert_eq!(asked["arguments"], json!({"part_no": "P-1"}));
    // What `toolgate replay` falls back on where no policy applies, and what applied.
    assert_eq!(
        asked["class_decision"],
        json!({"verdict": "allow", "reason": "automatic", "rules": ["registry"]})
    );
    assert_eq!(asked["decision"], serde_json::to_value(&decision).unwrap());
    assert_eq!(asked["approval_state"], "none");
    f.approval_state = Some(ApprovalState::Approved);
    assert_eq!(
        serde_json::from_str::<Value>(&f.asked().unwrap()).unwrap()["approval_state"],
        "approved"
    );
}

#[tokio::test]
async fn argument_values_are_kept_only_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "[receipts]\ncapture_values = true\n").await;
    let f = allowed(&gw, &find());
    assert_eq!(f.arguments, Some(json!({"part_no": "P-1"})));
}

#[tokio::test]
async fn a_read_gets_one_receipt_attesting_its_result_with_the_private_record() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let mut f = allowed(&gw, &find());
    f.dispatched = true;
    let text = r#"{"content":[],"structuredContent":{"stock":3}}"#;
    let Answer::Result(answered) = record(&gw, &f, result(text), Duration::ZERO).await else {
        panic!("the result is withheld")
    };
    assert_eq!(answered["structuredContent"].get(), r#"{"stock":3}"#);
    let stored = receipts(&gw).await;
    assert_eq!(statuses(&stored), [pair("dispatched", "ok")]);
    let (r, private) = &stored[0];
    assert_eq!(
        (&r["decision"], &r["reason"], &r["tool"], &r["server"]),
        (&json!("allow"), &json!("automatic"), &json!("find_part"), &json!("parts"))
    );
    assert_eq!(r["proposal_sha256"], f.proposal_sha256.clone().unwrap());
    let value: Value = serde_json::from_str(text).unwrap();
    assert_eq!(r["result_sha256"], sha256_hex(canonical_json(&value).as_bytes()));
    assert_eq!(private.as_deref(), f.asked().as_deref());
}

#[tokio::test]
async fn a_call_refused_before_it_resolved_is_recorded_under_the_name_it_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let (cx, nope) = split(&call("parts__nope", json!({})));
    let f = Findings::new(&cx, &nope, [3; 32]);
    let refusal =
        Refusal::new(Verdict::Deny, Reason::ArgumentsTooLarge, Action::Correct, "too large");
    assert!(matches!(
        record(&gw, &f, Answer::Refused(refusal), Duration::ZERO).await,
        Answer::Refused(_)
    ));
    let stored = receipts(&gw).await;
    assert_eq!(statuses(&stored), [pair("not_dispatched", "refused")]);
    let (r, private) = &stored[0];
    assert_eq!(
        (&r["tool"], &r["decision"], &r["reason"]),
        (&json!("parts__nope"), &json!("deny"), &json!("arguments_too_large"))
    );
    assert!(private.is_none(), "nothing was asked of policy");
}

#[tokio::test]
async fn a_refusal_after_dispatch_records_the_decision_and_an_unknown_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let mut f = allowed(&gw, &find());
    f.dispatched = true;
    let lost = Refusal::new(Verdict::Allow, Reason::OutcomeUnknown, Action::Retry, "lost");
    record(&gw, &f, Answer::Refused(lost), Duration::ZERO).await;
    let stored = receipts(&gw).await;
    assert_eq!(statuses(&stored), [pair("authorized", "pending"), pair("dispatched", "unknown")]);
    // One private record per call, with its first receipt.
    assert_eq!((stored[0].1.is_some(), stored[1].1.is_none()), (true, true));
}

#[tokio::test]
async fn each_other_ending_gets_the_receipt_that_says_how_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    // A protocol error overrides none of the decision.
    let f = allowed(&gw, &find());
    record(&gw, &f, Answer::Error(RpcError::new(code::INVALID_PARAMS, "bad")), Duration::ZERO)
        .await;
    // Waiting for an approver.
    let mut waiting = allowed(&gw, &find());
    waiting.input_required = true;
    record(&gw, &waiting, result(r#"{"resultType":"input_required"}"#), Duration::ZERO).await;
    // Not sent now: the recorded outcome, replayed.
    let replayed = allowed(&gw, &find());
    record(&gw, &replayed, result(r#"{"content":[]}"#), Duration::ZERO).await;
    let stored = receipts(&gw).await;
    assert_eq!(
        statuses(&stored),
        [
            pair("not_dispatched", "protocol_error:-32602"),
            pair("not_dispatched", "awaiting_approval"),
            pair("replayed", "ok")
        ]
    );
    assert_eq!(stored[0].0["decision"], "allow");
}

/// A dispatched write's findings, its outcome's receipt committed with its operation.
fn committed_outcome(gw: &Gateway) -> Findings {
    let mut f = allowed(gw, &find());
    let policy = gw.policy();
    let rec = Recorder {
        ledger: gw.ledger.as_ref(),
        log: &gw.log,
        clock: gw.clock.as_ref(),
        policy_version: policy.version(),
        config_version: "",
    };
    f.dispatched = true;
    f.committed = Some(drafts(&rec, &f).committed(Commit::Outcome, None));
    f
}

#[tokio::test]
async fn receipts_already_committed_with_the_ledgers_state_are_not_appended_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let f = committed_outcome(&gw);
    assert!(matches!(
        record(&gw, &f, result(r#"{"content":[]}"#), Duration::ZERO).await,
        Answer::Result(_)
    ));
    assert!(receipts(&gw).await.is_empty());
}

#[tokio::test]
async fn a_refusal_after_a_committed_outcome_gets_a_receipt_that_commits_to_its_words() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let f = committed_outcome(&gw);
    let refusal = Refusal::new(
        Verdict::Allow,
        Reason::CredentialWithheld,
        Action::Refused,
        "withheld: it carried a credential",
    );
    let recorded = record(&gw, &f, Answer::Refused(refusal.clone()), Duration::ZERO).await;
    assert!(matches!(recorded, Answer::Refused(_)));
    let stored = receipts(&gw).await;
    assert_eq!(stored.len(), 1, "the refusal's own receipt");
    let (r, _) = &stored[0];
    assert_eq!(
        (&r["reason"], &r["execution_status"]),
        (&json!("credential_withheld"), &json!("dispatched"))
    );
    assert_eq!(r["result_sha256"], json!(toolgate_core::receipt::build::refusal_sha256(&refusal)));
}

#[tokio::test]
async fn a_writes_drafts_name_its_operation_and_keep_one_private_record() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let f = allowed(&gw, &find());
    let policy = gw.policy();
    let rec = Recorder {
        ledger: gw.ledger.as_ref(),
        log: &gw.log,
        clock: gw.clock.as_ref(),
        policy_version: policy.version(),
        config_version: "",
    };
    let drafts = drafts(&rec, &f);
    let op = OperationRef { key: "order-1".into(), state: "reserved".into() };
    let decided = drafts.decided(None, op.clone());
    let outcome = drafts.outcome(OperationState::Completed, Some(r#"{"content":[]}"#), op);
    assert!(
        decided.asked.is_some() && outcome.asked.is_none(),
        "the private record goes with the first receipt only"
    );
    gw.ledger.append_receipts(vec![decided, outcome]).await.unwrap();
    let stored = receipts(&gw).await;
    for (receipt, _) in &stored {
        assert_eq!(receipt["operation"]["key"], "order-1", "{receipt}");
    }
    assert_eq!(statuses(&stored)[1].0, "dispatched");
    assert_eq!(
        f.operation_ref, None,
        "drafting names the operation without changing what the call gathered"
    );
}

#[tokio::test]
async fn a_receipt_names_the_approval_its_call_ran_under_and_its_approver() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let call = find();
    let binding = Binding {
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "parts".into(),
        tool: "find_part".into(),
        proposal_sha256: call.1.sha256.clone(),
        policy_version: gw.policy().version().to_string(),
    };
    let new = NewApproval {
        id: "apr_1".into(),
        binding,
        arguments: call.1.arguments.clone(),
        reason: "test".into(),
        rules: vec![],
        now_ms: NOW_MS,
        ttl_ms: 60_000,
        receipt: None,
        subject: "agent-7".into(),
        operation_key: None,
        notices: vec![],
    };
    gw.ledger.create_approval(new).await.unwrap();
    gw.ledger
        .decide_approval(
            "apr_1",
            true,
            toolgate_ledger::Decider {
                name: "dana",
                subject: "dana@atlas.example",
                tenant: "atlas",
            },
            "checked",
            NOW_MS + 1_500,
        )
        .await
        .unwrap();
    let mut f = allowed(&gw, &call);
    (f.dispatched, f.approval_id) = (true, Some("apr_1".into()));
    record(&gw, &f, result(r#"{"content":[]}"#), Duration::ZERO).await;
    let stored = receipts(&gw).await;
    assert_eq!(
        stored[0].0["approval"],
        json!({"id": "apr_1", "approver": "dana", "decided_at": receipt::rfc3339_ms(NOW_MS + 1_500)})
    );
}

/// Collects what a subscriber writes.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The fields of the log line written for `answer`.
fn logged(findings: &Findings, answer: &Answer) -> Value {
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt().json().with_writer(move || writer.clone()).finish();
    tracing::subscriber::with_default(subscriber, || {
        log_line(findings, answer, Duration::from_micros(1_500))
    });
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("toolgate::call"))
        .unwrap_or_else(|| panic!("no log line in {text:?}"));
    serde_json::from_str::<Value>(line).unwrap()["fields"].clone()
}

#[tokio::test]
async fn the_log_line_says_how_the_call_ended() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "").await;
    let mut f = allowed(&gw, &find());
    let fields = logged(&f, &result(r#"{"content":[]}"#));
    assert_eq!(
        (&fields["outcome"], &fields["decision"], &fields["rules"], &fields["elapsed_us"]),
        (&json!("completed"), &json!("allow"), &json!("registry"), &json!(1_500))
    );
    assert_eq!(
        (&fields["tool"], &fields["caller"], &fields["proposal_sha256"]),
        (&json!("parts__find_part"), &json!("agent"), &json!(f.proposal_sha256.clone().unwrap()))
    );
    let fields = logged(&f, &Answer::Error(RpcError::new(code::INVALID_PARAMS, "bad")));
    assert_eq!(
        (&fields["outcome"], &fields["reason"]),
        (&json!("protocol_error"), &json!("-32602"))
    );
    // A refusal's own proposal and approval are the ones logged.
    let expired = Refusal::new(
        Verdict::RequireApproval,
        Reason::ApprovalExpired,
        Action::Escalate,
        "expired",
    )
    .with_proposal("ab12")
    .with_approval("apr_9");
    let fields = logged(&f, &Answer::Refused(expired));
    assert_eq!(
        (&fields["outcome"], &fields["reason"], &fields["action"]),
        (&json!("refused"), &json!("approval_expired"), &json!("escalate"))
    );
    assert_eq!(
        (&fields["proposal_sha256"], &fields["approval"]),
        (&json!("ab12"), &json!("apr_9"))
    );
    f.input_required = true;
    assert_eq!(
        logged(&f, &result(r#"{"resultType":"input_required"}"#))["outcome"],
        "input_required"
    );
    (f.input_required, f.tool_error) = (false, true);
    assert_eq!(logged(&f, &result(r#"{"isError":true,"content":[]}"#))["outcome"], "tool_error");
    f.operation = Some(("op_1".into(), true));
    let fields = logged(&f, &result(r#"{"isError":true,"content":[]}"#));
    assert_eq!((&fields["operation"], &fields["replayed"]), (&json!("op_1"), &json!(true)));
}
