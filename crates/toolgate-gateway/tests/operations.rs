//! Exactly-once writes through the gateway (protocol level): the Atlas
//! support desk behind toolgate, a real rmcp server over HTTP, called with
//! and without `_meta["io.toolgate/operationKey"]`. The support server
//! logs every invocation (support-calls.jsonl) apart from the tickets it
//! creates, so "nothing was sent upstream" is observed, not assumed.

mod common;

use serde_json::{Value, json};
use toolgate_core::operation::OperationState;
use toolgate_core::{Clock as _, SystemClock};

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

use common::*;

const CREATE: &str = "support__create_ticket";

fn ticket(subject: &str, reference: &str) -> Value {
    json!({"customer_id": "cust_harbor_02", "subject": subject, "priority": "normal", "client_reference": reference})
}

async fn create(url: &str, arguments: &Value, key: Option<&str>) -> Value {
    let mut params = json!({"name": CREATE, "arguments": arguments});
    if let Some(k) = key {
        params["_meta"] = json!({"io.toolgate/operationKey": k});
    }
    let (status, body) = post(url, "tools/call", params).await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

fn reason(result: &Value) -> &str {
    result["structuredContent"]["reason"].as_str().unwrap_or("")
}

fn op_meta(result: &Value) -> &Value {
    &result["_meta"]["io.toolgate/operation"]
}

fn invocations(h: &Harness) -> usize {
    lines(&h.sandbox().join("support-calls.jsonl"))
}

fn tickets(h: &Harness) -> usize {
    lines(&h.sandbox().join("support-tickets.jsonl"))
}

#[tokio::test]
async fn a_retried_write_takes_effect_once_and_another_payload_is_a_conflict() {
    let h = start("").await;
    let args = ticket("Forklift 3 will not start", "ref-retry-0001");
    let first = create(&h.url, &args, Some("key-1")).await;
    let id = first["structuredContent"]["ticket_id"].as_str().expect("a ticket").to_string();
    assert_eq!(
        (
            op_meta(&first)["replayed"].clone(),
            op_meta(&first)["key"].clone(),
            op_meta(&first)["state"].clone()
        ),
        (json!(false), json!("key-1"), json!("completed")),
        "{first}"
    );
    // The agent retries (its answer was lost): the recorded result, nothing sent.
    let again = create(&h.url, &args, Some("key-1")).await;
    assert_eq!(again["structuredContent"], first["structuredContent"], "the same result");
    assert_eq!(op_meta(&again)["replayed"], json!(true));
    assert_eq!(op_meta(&again)["id"], op_meta(&first)["id"]);
    assert_eq!((invocations(&h), tickets(&h)), (1, 1), "one upstream call, one ticket");
    // The same key for other content: a conflict, never a new ticket, never the old result.
    let other =
        create(&h.url, &ticket("Forklift 4 will not start", "ref-retry-0001"), Some("key-1")).await;
    assert_eq!(
        (other["isError"].clone(), reason(&other)),
        (json!(true), "operation_conflict"),
        "{other}"
    );
    assert_eq!(other["structuredContent"]["action"], "correct");
    assert!(
        other["structuredContent"].get("ticket_id").is_none() && !other.to_string().contains(&id),
        "{other}"
    );
    assert_eq!(invocations(&h), 1);
    // Keys are the client's: the same key in another tool or a new key is another operation.
    let fresh =
        create(&h.url, &ticket("Forklift 4 will not start", "ref-retry-0002"), Some("key-2")).await;
    assert!(fresh["structuredContent"]["ticket_id"].is_string(), "{fresh}");
    assert_eq!((invocations(&h), tickets(&h)), (2, 2));
    let ops = h.gateway.ledger.operations(None, None, now_ms(), usize::MAX).await.unwrap();
    assert_eq!(ops.len(), 2);
    assert!(
        ops.iter().all(|o| o.state == OperationState::Completed
            && o.key.tenant == "atlas"
            && o.caller == "agent"),
        "{ops:?}"
    );
}

#[tokio::test]
async fn writes_without_a_key_are_recorded_and_reads_are_not_operations() {
    let h = start("").await;
    let args = ticket("Door sensor fault", "ref-nokey-0001");
    create(&h.url, &args, None).await;
    create(&h.url, &args, None).await;
    // No key: the gateway cannot tell a retry from a new call (the server's own dedup answers the second).
    assert_eq!((invocations(&h), tickets(&h)), (2, 1));
    let read =
        call(&h.url, "support__get_ticket", json!({"client_reference": "ref-nokey-0001"})).await;
    assert_eq!(read["result"]["structuredContent"]["found"], true, "{read}");
    let ops = h.gateway.ledger.operations(None, None, now_ms(), usize::MAX).await.unwrap();
    assert_eq!(ops.len(), 2, "two writes, no read: {ops:?}");
    assert!(ops.iter().all(|o| o.key.value.starts_with("auto:") && o.key.tool == "create_ticket"));
    // A key that is not a short string is refused before anything runs.
    let (_, bad) = post(
        &h.url,
        "tools/call",
        json!({"name": CREATE, "arguments": args, "_meta": {"io.toolgate/operationKey": 42}}),
    )
    .await;
    assert_eq!(bad["result"]["structuredContent"]["action"], "correct", "{bad}");
    // The gateway's own key spaces are not the client's.
    let (_, taken) = post(&h.url, "tools/call", json!({"name": CREATE, "arguments": args, "_meta": {"io.toolgate/operationKey": "approval:apr_x"}})).await;
    assert_eq!(taken["result"]["structuredContent"]["action"], "correct", "{taken}");
    assert_eq!(invocations(&h), 2);
}

#[tokio::test]
async fn a_recorded_tool_error_is_replayed_not_retried() {
    let h = start("").await;
    std::fs::write(h.sandbox().join("support.fault"), "tool_error").unwrap();
    let args = ticket("Leaking valve", "ref-error-0001");
    let failed = create(&h.url, &args, Some("key-err")).await;
    assert_eq!(failed["isError"], true, "{failed}");
    let again = create(&h.url, &args, Some("key-err")).await;
    assert_eq!(
        (again["isError"].clone(), again["content"].clone()),
        (json!(true), failed["content"].clone())
    );
    assert_eq!(op_meta(&again)["replayed"], true);
    assert_eq!((invocations(&h), tickets(&h)), (1, 0));
    let ops = h
        .gateway
        .ledger
        .operations(None, Some(OperationState::ToolError), now_ms(), usize::MAX)
        .await
        .unwrap();
    assert_eq!(ops.len(), 1);
}

#[tokio::test]
async fn a_timeout_after_the_effect_is_unknown_until_reconciled_to_the_real_ticket() {
    // The support desk answers after 3 s; the gateway's deadline for it is 1 s.
    let h = start_full("", "", &[], "timeout_ms = 1000").await;
    std::fs::write(h.sandbox().join("support.fault"), "stall:3000").unwrap();
    let args = ticket("Compressor alarm", "ref-stall-0001");
    let lost = create(&h.url, &args, Some("key-stall")).await;
    assert_eq!(
        (reason(&lost), lost["structuredContent"]["action"].as_str()),
        ("outcome_unknown", Some("reconcile")),
        "{lost}"
    );
    let op_id = lost["structuredContent"]["operation_id"]
        .as_str()
        .expect("names the operation")
        .to_string();
    // Retried blindly: still unknown, and nothing is sent again.
    let retried = create(&h.url, &args, Some("key-stall")).await;
    assert_eq!(reason(&retried), "outcome_unknown", "{retried}");
    assert_eq!(invocations(&h), 1);
    // The approver sees it in the admin API (an agent does not), and reconciles it there:
    // the ticket exists (the server committed before stalling).
    let (status, _) = admin(&h.url, None, "GET", "/admin/operations?state=unknown", None).await;
    assert_eq!(status, 403, "the anonymous agent is not an approver");
    let (status, listed) =
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/operations?state=unknown", None).await;
    assert_eq!(
        (status, listed["operations"][0]["id"].as_str()),
        (200, Some(op_id.as_str())),
        "{listed}"
    );
    let (status, done) = admin(
        &h.url,
        Some(DANA_TOKEN),
        "POST",
        &format!("/admin/operations/{op_id}/reconcile"),
        None,
    )
    .await;
    assert_eq!(
        (status, done["applied"].clone(), done["operation"]["state"].clone()),
        (200, json!(true), json!("reconciled_applied")),
        "{done}"
    );
    let file = std::fs::read_to_string(h.sandbox().join("support-tickets.jsonl")).unwrap();
    let real: Value = serde_json::from_str(file.lines().next().unwrap()).unwrap();
    // Now the key answers with the evidence: the real ticket id.
    let settled = create(&h.url, &args, Some("key-stall")).await;
    assert_eq!(
        settled["structuredContent"]["evidence"]["ticket"]["ticket_id"], real["ticket_id"],
        "{settled}"
    );
    assert_eq!(op_meta(&settled)["replayed"], true);
    assert_eq!((invocations(&h), tickets(&h)), (1, 1));
    // Reconciling twice is refused: it is settled.
    let err =
        toolgate_gateway::reconcile::reconcile(&h.gateway, &op_id).await.err().expect("settled");
    assert!(err.to_string().contains("reconciled_applied"), "{err}");
}

#[tokio::test]
async fn an_effect_reconciled_as_absent_runs_once_on_retry() {
    let h = start_full("", "", &[], "timeout_ms = 1000").await;
    std::fs::write(h.sandbox().join("support.fault"), "stall:2500").unwrap();
    let args = ticket("Gate motor noise", "ref-absent-0001");
    let lost = create(&h.url, &args, Some("key-absent")).await;
    let op_id = lost["structuredContent"]["operation_id"].as_str().unwrap().to_string();
    // An operator checked and found nothing: settled as not applied, but
    // only once the lease ends (the dispatch might still be running upstream).
    let settle = || toolgate_ledger::Resolution {
        applied: false,
        by: "dana".into(),
        reason: "no ticket in the desk".into(),
        outcome: None,
        now_ms: now_ms(),
        receipt: None,
    };
    let early = h.gateway.ledger.resolve_operation(&op_id, settle()).await;
    assert!(
        matches!(early, Err(toolgate_ledger::LedgerError::WrongState { state: "unknown", .. })),
        "{early:?}"
    );
    let op = h.gateway.ledger.operation(&op_id).await.unwrap().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(
        (op.lease_until_ms - now_ms()).max(0) as u64 + 50,
    ))
    .await;
    let op = h.gateway.ledger.resolve_operation(&op_id, settle()).await.unwrap();
    assert_eq!(op.state, OperationState::ReconciledNotApplied);
    // The retry runs it again under the same operation (attempt 2); the server's dedup keeps one ticket.
    let ran = create(&h.url, &args, Some("key-absent")).await;
    assert!(ran["structuredContent"]["ticket_id"].is_string(), "{ran}");
    assert_eq!(op_meta(&ran)["id"], json!(op_id));
    let op = h.gateway.ledger.operation(&op_id).await.unwrap().unwrap();
    assert_eq!((op.state, op.attempts), (OperationState::Completed, 2));
}

/// A write's decision and outcome are two receipts, each committed with the
/// operation state it attests; a read's are one, after its answer, naming
/// the result the caller got by its hash.
#[tokio::test]
async fn a_write_has_two_receipts_and_a_read_one_carrying_its_decision_and_outcome() {
    use toolgate_core::proposal::{canonical_json, sha256_hex};
    use toolgate_core::receipt::LoggedReceipt;
    use toolgate_core::strict_json::JsonLimits;
    let h = start("").await;
    let receipts = || async {
        let stored = h.gateway.ledger.receipts(0, 1_000).await.unwrap();
        stored
            .into_iter()
            .map(|r| {
                (
                    LoggedReceipt::from_json(r.logged.as_bytes(), JsonLimits::default())
                        .unwrap()
                        .receipt,
                    r.asked,
                )
            })
            .collect::<Vec<_>>()
    };
    let before = receipts().await.len();
    create(&h.url, &ticket("Door sensor fault", "ref-rcpt-0001"), Some("key-rcpt")).await;
    let write = receipts().await.split_off(before);
    let statuses: Vec<(&str, &str)> = write
        .iter()
        .map(|(r, _)| (r.execution_status.as_str(), r.result_status.as_str()))
        .collect();
    assert_eq!(statuses, [("authorized", "pending"), ("dispatched", "ok")]);
    assert!(
        write[0].1.is_some() && write[1].1.is_none(),
        "the private record of what was asked goes with the first receipt only"
    );

    let read =
        call(&h.url, "support__get_ticket", json!({"client_reference": "ref-rcpt-0001"})).await;
    assert_eq!(read["result"]["structuredContent"]["found"], true, "{read}");
    let all = receipts().await;
    assert_eq!(all.len(), before + 3, "one receipt for the read");
    let (r, asked) = &all[before + 2];
    assert_eq!(
        (
            r.tool.as_str(),
            r.decision.as_str(),
            r.execution_status.as_str(),
            r.result_status.as_str()
        ),
        ("get_ticket", "allow", "dispatched", "ok")
    );
    // What the caller got, less the receipt it names (the receipt cannot hash itself).
    let mut got = read["result"].clone();
    got.as_object_mut().unwrap().remove("_meta");
    assert_eq!(
        read["result"]["_meta"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["io.toolgate/receipt"]
    );
    assert_eq!(
        r.result_sha256.as_deref(),
        Some(sha256_hex(canonical_json(&got).as_bytes()).as_str()),
        "the hash of what the caller got"
    );
    assert!(r.result_hash.is_some() && r.operation.is_none());
    let asked: Value =
        serde_json::from_str(asked.as_deref().expect("the read's private record")).unwrap();
    assert_eq!(asked["arguments"], json!({"client_reference": "ref-rcpt-0001"}));
    assert_eq!(asked["decision"]["verdict"], "allow");
}

#[tokio::test]
async fn an_operation_key_is_its_senders_own() {
    // The agent and sam (same tenant) send the same key and the same note:
    // each gets an operation of their own and one note each; neither is
    // handed the other's result as a replay.
    let h = start("").await;
    let open = toolgate_atlas::dataset()
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open)
        .unwrap()
        .ticket_id
        .clone();
    let args = json!({"ticket_id": open, "note": "compressor replaced"});
    let send = |token: Option<&'static str>| {
        let mut params = json!({"name": "tickets__post_ticket_update", "arguments": args.clone()});
        params["_meta"] = json!({"io.toolgate/operationKey": "note-1"});
        let mut req = request(&h.url, json!(9), "tools/call", params);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move { answer_of(&req.send().await.unwrap().text().await.unwrap())["result"].clone() }
    };
    let agent = send(None).await;
    let sam = send(Some(SAM_TOKEN)).await;
    assert_eq!(op_meta(&agent)["replayed"], false, "{agent}");
    assert_eq!(op_meta(&sam)["replayed"], false, "{sam}");
    assert_ne!(op_meta(&agent)["id"], op_meta(&sam)["id"]);
    assert_eq!(lines(&h.sandbox().join("notes.jsonl")), 2);
    // Each sender's own retry is still answered from its record.
    let again = send(Some(SAM_TOKEN)).await;
    assert_eq!(
        (op_meta(&again)["replayed"].as_bool(), &op_meta(&again)["id"]),
        (Some(true), &op_meta(&sam)["id"])
    );
    assert_eq!(lines(&h.sandbox().join("notes.jsonl")), 2);
}

#[tokio::test]
async fn a_caller_may_shorten_the_deadline_of_its_call_never_lengthen_it() {
    // The desk's deadline is 1.5 s here; it stalls 3 s after committing.
    let h = start_full("", "", &[], "timeout_ms = 1500").await;
    let call_with = |arguments: Value, meta: Value| {
        let url = h.url.clone();
        async move {
            let started = std::time::Instant::now();
            let (status, body) = post(
                &url,
                "tools/call",
                json!({"name": CREATE, "arguments": arguments, "_meta": meta}),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            (started.elapsed(), body["result"].clone())
        }
    };
    std::fs::write(h.sandbox().join("support.fault"), "stall:3000").unwrap();
    let (took, short) = call_with(
        ticket("Door sensor", "ref-deadline-1"),
        json!({"io.toolgate/operationKey": "key-deadline-1", "io.toolgate/deadlineMs": 300}),
    )
    .await;
    assert_eq!(reason(&short), "outcome_unknown", "{short}");
    assert!(
        took < std::time::Duration::from_millis(1_200),
        "the caller's 300 ms ruled, not the server's 1.5 s: {took:?}"
    );
    std::fs::write(h.sandbox().join("support.fault"), "stall:3000").unwrap();
    let (took, long) = call_with(
        ticket("Door sensor 2", "ref-deadline-2"),
        json!({"io.toolgate/operationKey": "key-deadline-2", "io.toolgate/deadlineMs": 60_000}),
    )
    .await;
    assert_eq!(reason(&long), "outcome_unknown", "{long}");
    assert!(
        took < std::time::Duration::from_millis(2_800),
        "60 s does not lengthen the server's 1.5 s: {took:?}"
    );
    for bad in [json!(0), json!(-5), json!("soon"), json!(1.5)] {
        let (_, refused) = call_with(
            ticket("Door sensor 3", "ref-deadline-3"),
            json!({"io.toolgate/deadlineMs": bad}),
        )
        .await;
        assert_eq!(
            (reason(&refused), refused["structuredContent"]["action"].as_str()),
            ("invalid_arguments", Some("correct")),
            "{bad}: {refused}"
        );
    }
    assert_eq!(invocations(&h), 2, "the refused calls sent nothing");
}

#[tokio::test]
async fn a_settled_operation_answers_its_key_within_its_window_and_is_pruned_after() {
    // A window of 2 s: the gateway prunes every second (an eighth of it, at least 1 s).
    let h = start("operation_ttl_ms = 2000").await;
    let args = ticket("Pallet jack hydraulics", "ref-ttl-0001");
    let first = create(&h.url, &args, Some("key-ttl")).await;
    let id = op_meta(&first)["id"].as_str().expect("an operation").to_string();
    let again = create(&h.url, &args, Some("key-ttl")).await;
    assert_eq!(op_meta(&again)["replayed"], json!(true), "within the window: {again}");
    assert_eq!(invocations(&h), 1);
    // Past the window (and a pruning pass), the row is gone: the key is new.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while h.gateway.ledger.operation(&id).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the settled operation was not pruned within 20 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let after = create(&h.url, &args, Some("key-ttl")).await;
    assert_eq!(
        op_meta(&after)["replayed"],
        json!(false),
        "past the window the key runs again: {after}"
    );
    assert_ne!(op_meta(&after)["id"], json!(id));
    assert_eq!(
        invocations(&h),
        2,
        "sent upstream again (the desk's own dedup answers by client_reference)"
    );
    assert_eq!(after["structuredContent"]["ticket_id"], first["structuredContent"]["ticket_id"]);
    // The admin API gives the newest page, and says its limit.
    let (status, page) =
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/operations?limit=1", None).await;
    assert_eq!(
        (status, page["limit"].clone(), page["operations"].as_array().map(Vec::len)),
        (200, json!(1), Some(1)),
        "{page}"
    );
    assert_eq!(page["operations"][0]["id"], op_meta(&after)["id"]);
    assert_eq!(
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/operations?limit=10001", None).await.0,
        400
    );
    // The first operation's receipts stay in the log: its outcome, then the
    // replay, then the second run's.
    let size = h.gateway.ledger.log_size().await.unwrap();
    let receipts = h.gateway.ledger.receipts(0, size).await.unwrap();
    let completed = receipts
        .iter()
        .filter(|r| r.logged.contains(r#""key":"key-ttl","state":"completed""#))
        .count();
    assert!(
        completed >= 3,
        "{completed} receipts of the key's completions: {:?}",
        receipts.iter().map(|r| &r.logged).collect::<Vec<_>>()
    );
}
