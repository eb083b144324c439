//! One suite, both stores: every test runs against SQLite (a fresh file),
//! SQLite as the gateway opens it (sequencing a read's receipts: see the
//! ledger's `sqlite::sequence`; `second()` is then a plain one, as the CLI's),
//! and PostgreSQL (a fresh schema in the machine's database,
//! `TOOLGATE_TEST_POSTGRES`, default `postgres://postgres@127.0.0.1:5432/test`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use toolgate_ledger::core::approval::{ApprovalState, Binding};
use toolgate_ledger::core::operation::{OperationKey, OperationState};
use toolgate_ledger::core::trifecta::{Leg, LegCall};
use toolgate_ledger::{
    Attempt, Begun, Connection, Decider, Ledger, LedgerError, LogStore, NewApproval, NewNotice,
    NewOperation, NoticeState, PostgresLedger, Resolution, RunKey, SqliteLedger, StoredSession,
};

/// A store under test, and a way to run raw SQL against it behind the
/// ledger's back (to show the store itself refuses illegal changes).
struct Store {
    ledger: Arc<dyn Ledger>,
    raw: Raw,
    _dir: Option<tempfile::TempDir>,
}

enum Raw {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Store {
    /// Another ledger on the same store, as a second process would open it.
    async fn second(&self) -> Arc<dyn Ledger> {
        match &self.raw {
            Raw::Sqlite(path) => Arc::new(SqliteLedger::open(path).unwrap()),
            Raw::Postgres(url) => Arc::new(PostgresLedger::connect(url).await.unwrap()),
        }
    }

    /// The stored size of each receipt's row body, by index.
    async fn body_sizes(&self) -> Vec<i64> {
        let sql = "SELECT length(body) FROM receipts ORDER BY log_index";
        match &self.raw {
            Raw::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut stmt = conn.prepare(sql).unwrap();
                stmt.query_map([], |r| r.get(0))
                    .unwrap()
                    .collect::<rusqlite::Result<Vec<i64>>>()
                    .unwrap()
            }
            Raw::Postgres(url) => {
                let (client, conn) =
                    tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(conn);
                client
                    .query(sql, &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| i64::from(r.get::<_, i32>(0)))
                    .collect()
            }
        }
    }

    async fn raw(&self, sql: &str) -> Result<(), String> {
        match &self.raw {
            Raw::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
                conn.execute_batch(sql).map_err(|e| e.to_string())
            }
            Raw::Postgres(url) => {
                let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(conn);
                client
                    .batch_execute(sql)
                    .await
                    .map_err(|e| e.as_db_error().map_or(e.to_string(), |d| d.message().to_string()))
            }
        }
    }
}

async fn sqlite() -> Store {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    Store {
        ledger: Arc::new(SqliteLedger::open(&path).unwrap()),
        raw: Raw::Sqlite(path),
        _dir: Some(dir),
    }
}

async fn sqlite_sequencing() -> Store {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    Store {
        ledger: Arc::new(SqliteLedger::open_sequencing(&path).unwrap()),
        raw: Raw::Sqlite(path),
        _dir: Some(dir),
    }
}

pub fn postgres_url() -> String {
    std::env::var("TOOLGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of its own per test, so tests run in parallel.
async fn postgres() -> Store {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema =
        format!("tg_suite_{}_{}_{}", std::process::id(), nanos, N.fetch_add(1, Ordering::Relaxed));
    let base = postgres_url();
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL answers (start it: see .ci/run)");
    tokio::spawn(conn);
    client.batch_execute(&format!("CREATE SCHEMA {schema}")).await.unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
    Store {
        ledger: Arc::new(PostgresLedger::connect(&url).await.unwrap()),
        raw: Raw::Postgres(url),
        _dir: None,
    }
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(super::sqlite().await).await } )* }
        mod on_sqlite_sequencing { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(super::sqlite_sequencing().await).await } )* }
        mod on_postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(super::postgres().await).await } )* }
    };
}

both!(
    appends_that_fail_amid_others_leave_nothing_and_take_no_index,
    two_writers_interleaving_all_kinds_of_appends_keep_the_log_contiguous_and_signed,
    receipts_take_contiguous_indexes_under_concurrency,
    a_receipt_commits_with_the_state_it_attests_or_not_at_all,
    the_store_itself_refuses_log_rewrites,
    an_archived_range_leaves_the_rows_and_the_log_carries_on,
    an_approval_lives_pending_approved_consumed_once,
    nobody_decides_their_own_call_under_any_credential_and_expiry_is_final,
    the_store_itself_refuses_illegal_approval_changes,
    an_approval_is_its_tenants_own,
    concurrent_consumers_win_exactly_once,
    list_filters_by_state_and_notes_expiry,
    an_operation_runs_once_and_records_its_outcome,
    a_key_is_scoped_to_tenant_sender_and_tool,
    a_lapsed_dispatch_is_unknown_and_only_reconciliation_settles_it,
    a_crashed_reservation_is_taken_over_not_run_twice,
    not_applied_waits_for_the_lease_but_applied_does_not,
    racing_begins_give_one_holder_per_key,
    the_store_itself_refuses_illegal_operation_changes,
    settled_operations_go_after_their_window_and_no_other,
    a_run_counts_its_calls_keeps_its_legs_and_expires,
    replicas_counting_one_run_add_up,
    recurring_digests_are_named_by_number_once_committed,
    replicas_count_while_they_beat_and_go_when_they_stop,
    sessions_end_at_their_deadline_and_everywhere_at_sign_out,
    notices_commit_with_their_approval_and_each_claim_takes_them_once,
    a_dead_notice_waits_for_an_operator_and_goes_again,
    a_decision_wakes_every_listener_of_the_store,
    a_grant_is_kept_per_person_and_server_and_every_replica_reads_it,
    one_refresh_at_a_time_and_a_lapsed_lease_is_taken_over,
    a_disconnect_or_a_new_grant_ends_a_refresh_in_flight,
    an_oauth_state_is_taken_once_and_not_after_it_expires,
);

fn binding(proposal: char) -> Binding {
    Binding {
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "parts".into(),
        tool: "raise_parts_order".into(),
        proposal_sha256: proposal.to_string().repeat(64),
        policy_version: "v1".into(),
    }
}

/// The approver `name`, the person `subject`, acting in tenant `atlas`.
fn as_<'a>(name: &'a str, subject: &'a str) -> Decider<'a> {
    Decider { name, subject, tenant: "atlas" }
}

async fn ask(l: &dyn Ledger, id: &str, b: &Binding, now: i64) {
    let new = NewApproval {
        id: id.into(),
        binding: b.clone(),
        arguments: json!({"quantity": 8}),
        reason: "over five".into(),
        rules: vec!["r".into()],
        now_ms: now,
        ttl_ms: 1000,
        receipt: None,
        subject: "agent@atlas.example".into(),
        operation_key: None,
        notices: vec![],
    };
    let a = l.create_approval(new).await.unwrap();
    assert_eq!(
        (a.state, a.expires_ms, a.arguments),
        (ApprovalState::Pending, now + 1000, json!({"quantity": 8}))
    );
}

async fn an_approval_lives_pending_approved_consumed_once(s: Store) {
    let l = &*s.ledger;
    ask(l, "apr_1", &binding('a'), 0).await;
    assert_eq!(l.latest_approval(&binding('a'), None).await.unwrap().unwrap().id, "apr_1");
    assert!(l.latest_approval(&binding('b'), None).await.unwrap().is_none());
    // An approval is for one operation: the same call under a key of the
    // client's own is another, with an approval of its own.
    assert!(l.latest_approval(&binding('a'), Some("order-1")).await.unwrap().is_none());
    let keyed = NewApproval {
        id: "apr_k".into(),
        binding: binding('a'),
        arguments: json!({"quantity": 8}),
        reason: "over five".into(),
        rules: vec![],
        now_ms: 1,
        ttl_ms: 1000,
        receipt: None,
        subject: "agent@atlas.example".into(),
        operation_key: Some("order-1".into()),
        notices: vec![],
    };
    assert_eq!(l.create_approval(keyed).await.unwrap().operation_key.as_deref(), Some("order-1"));
    assert_eq!(
        l.latest_approval(&binding('a'), Some("order-1")).await.unwrap().unwrap().id,
        "apr_k"
    );
    assert_eq!(l.latest_approval(&binding('a'), None).await.unwrap().unwrap().id, "apr_1");
    assert!(matches!(
        l.consume_approval("apr_1", 10).await,
        Err(LedgerError::NotApproved { state: "pending", .. })
    ));
    let a = l
        .decide_approval("apr_1", true, as_("dana", "dana@atlas.example"), "ok for the fleet", 10)
        .await
        .unwrap();
    assert_eq!((a.state, a.decided_by.as_deref()), (ApprovalState::Approved, Some("dana")));
    assert!(matches!(
        l.decide_approval("apr_1", false, as_("dana", "dana@atlas.example"), "changed my mind", 11)
            .await,
        Err(LedgerError::NotPending { state: "approved", .. })
    ));
    assert_eq!(l.consume_approval("apr_1", 20).await.unwrap().state, ApprovalState::Consumed);
    assert!(matches!(
        l.consume_approval("apr_1", 21).await,
        Err(LedgerError::NotApproved { state: "consumed", .. })
    ));
    assert_eq!(l.count_approvals(ApprovalState::Consumed).await.unwrap(), 1);
}

async fn nobody_decides_their_own_call_under_any_credential_and_expiry_is_final(s: Store) {
    let l = &*s.ledger;
    ask(l, "apr_1", &binding('a'), 0).await;
    assert!(matches!(
        l.decide_approval("apr_1", true, as_("agent", "agent@atlas.example"), "me", 10).await,
        Err(LedgerError::SelfApproval { .. })
    ));
    // The same person under another credential (an approver token of theirs) is still the asker.
    assert!(matches!(
        l.decide_approval("apr_1", true, as_("agent_human", "agent@atlas.example"), "me again", 10)
            .await,
        Err(LedgerError::SelfApproval { .. })
    ));
    assert_eq!(
        l.approval("apr_1").await.unwrap().unwrap().state,
        ApprovalState::Pending,
        "nothing was decided"
    );
    assert!(matches!(
        l.decide_approval("apr_1", true, as_("dana", "dana@atlas.example"), "late", 1000).await,
        Err(LedgerError::Expired(_))
    ));
    assert_eq!(
        l.approval("apr_1").await.unwrap().unwrap().state,
        ApprovalState::Expired,
        "the expiry is recorded"
    );
    ask(l, "apr_2", &binding('b'), 0).await;
    l.decide_approval("apr_2", true, as_("dana", "dana@atlas.example"), "ok", 10).await.unwrap();
    assert!(matches!(
        l.consume_approval("apr_2", 1000).await,
        Err(LedgerError::NotApproved { state: "expired", .. })
    ));
    assert!(matches!(
        l.decide_approval("nope", true, as_("dana", "dana@atlas.example"), "x", 0).await,
        Err(LedgerError::NotFound(_))
    ));
}

async fn an_approval_is_its_tenants_own(s: Store) {
    let l = &*s.ledger;
    ask(l, "apr_1", &binding('a'), 0).await;
    let other = Binding { tenant: "other".into(), ..binding('b') };
    ask(l, "apr_2", &other, 0).await;
    // Another tenant's approver neither sees it listed nor decides it: it is not found.
    let mallory = Decider { name: "mallory", subject: "mallory@other.example", tenant: "other" };
    let listed: Vec<String> =
        l.approvals(Some("other"), None, 10).await.unwrap().into_iter().map(|a| a.id).collect();
    assert_eq!(listed, ["apr_2"]);
    assert!(matches!(
        l.decide_approval("apr_1", true, mallory, "mine now", 10).await,
        Err(LedgerError::NotFound(_))
    ));
    assert_eq!(
        l.approval("apr_1").await.unwrap().unwrap().state,
        ApprovalState::Pending,
        "nothing was decided"
    );
    // Its own tenant's approver does; an operator's listing (no tenant) sees both.
    l.decide_approval("apr_1", true, as_("dana", "dana@atlas.example"), "ok", 10).await.unwrap();
    assert_eq!(l.approvals(Some("atlas"), None, 10).await.unwrap().len(), 1);
    assert_eq!(l.approvals(None, None, 10).await.unwrap().len(), 2);
}

async fn the_store_itself_refuses_illegal_approval_changes(s: Store) {
    ask(&*s.ledger, "apr_1", &binding('a'), 0).await;
    s.ledger
        .decide_approval("apr_1", false, as_("dana", "dana@atlas.example"), "no", 10)
        .await
        .unwrap();
    let err =
        s.raw("UPDATE approvals SET state = 'approved' WHERE id = 'apr_1'").await.unwrap_err();
    assert!(err.contains("illegal approval transition"), "{err}");
    let err = s.raw("UPDATE approvals SET arguments = '{}' WHERE id = 'apr_1'").await.unwrap_err();
    assert!(err.contains("immutable"), "{err}");
    let err = s
        .raw("UPDATE approvals SET subject = 'someone@else' WHERE id = 'apr_1'")
        .await
        .unwrap_err();
    assert!(err.contains("immutable"), "who asked never changes: {err}");
    let err = s.raw("DELETE FROM approvals").await.unwrap_err();
    assert!(err.contains("never deleted"), "{err}");
}

async fn concurrent_consumers_win_exactly_once(s: Store) {
    ask(&*s.ledger, "apr_1", &binding('a'), 0).await;
    s.ledger
        .decide_approval("apr_1", true, as_("dana", "dana@atlas.example"), "ok", 1)
        .await
        .unwrap();
    let tries = (0..16).map(|_| {
        let l = s.ledger.clone();
        tokio::spawn(async move { l.consume_approval("apr_1", 5).await.is_ok() })
    });
    let wins = futures_util::future::join_all(tries)
        .await
        .into_iter()
        .filter(|w| *w.as_ref().unwrap())
        .count();
    assert_eq!(wins, 1);
}

async fn list_filters_by_state_and_notes_expiry(s: Store) {
    let l = &*s.ledger;
    ask(l, "apr_1", &binding('a'), 0).await;
    ask(l, "apr_2", &binding('b'), 500).await;
    assert_eq!(l.approvals(None, Some(ApprovalState::Pending), 100).await.unwrap().len(), 2);
    let pending = l.approvals(None, Some(ApprovalState::Pending), 1200).await.unwrap();
    assert_eq!(pending.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), vec!["apr_2"]);
    let all = l.approvals(None, None, 1200).await.unwrap();
    assert_eq!(
        all.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        vec!["apr_2", "apr_1"],
        "newest first"
    );
}

fn key(tenant: &str, tool: &str, k: &str) -> OperationKey {
    OperationKey {
        tenant: tenant.into(),
        subject: "agent@atlas.example".into(),
        server: "support".into(),
        tool: tool.into(),
        value: k.into(),
    }
}

fn new_op(id: &str, k: OperationKey, payload: char, lease: i64) -> NewOperation {
    NewOperation {
        id: id.into(),
        key: k,
        caller: "agent".into(),
        proposal_sha256: payload.to_string().repeat(64),
        approval_id: None,
        arguments: json!({"subject": "Printer jam"}),
        lease_until_ms: lease,
        receipt: None,
    }
}

fn mine(b: Begun) -> toolgate_ledger::core::operation::Operation {
    match b {
        Begun::Mine(op) => op,
        Begun::Theirs(op) => panic!("expected to hold the key, found {op:?}"),
    }
}

fn theirs(b: Begun) -> toolgate_ledger::core::operation::Operation {
    match b {
        Begun::Theirs(op) => op,
        Begun::Mine(op) => panic!("expected another's operation, got to hold {op:?}"),
    }
}

async fn an_operation_runs_once_and_records_its_outcome(s: Store) {
    let l = &*s.ledger;
    let k = key("atlas", "create_ticket", "k1");
    let op = mine(l.begin_operation(new_op("op_1", k.clone(), 'a', 100), 0).await.unwrap());
    assert_eq!(
        (op.state, op.attempts, &op.arguments),
        (OperationState::Reserved, 1, &json!({"subject": "Printer jam"}))
    );
    // A second call with the key while the first is in flight.
    let other = theirs(l.begin_operation(new_op("op_2", k.clone(), 'a', 100), 1).await.unwrap());
    assert_eq!((other.id.as_str(), other.state), ("op_1", OperationState::Reserved));
    assert_eq!(
        l.mark_dispatched("op_1", 1, 200, 2).await.unwrap().state,
        OperationState::Dispatched
    );
    assert!(matches!(
        l.mark_dispatched("op_1", 1, 200, 2).await,
        Err(LedgerError::WrongState { state: "dispatched", .. })
    ));
    let result = r#"{"structuredContent":{"ticket_id":"SUP-000001"}}"#;
    let done = l
        .finish_operation("op_1", 1, OperationState::Completed, Some(result.into()), 3, None)
        .await
        .unwrap();
    assert_eq!((done.state, done.outcome.as_deref()), (OperationState::Completed, Some(result)));
    // Retried: the record, not a new operation; another payload finds the same record (the caller sees a conflict).
    let again = theirs(l.begin_operation(new_op("op_3", k.clone(), 'a', 100), 4).await.unwrap());
    assert_eq!((again.id.as_str(), again.outcome.as_deref()), ("op_1", Some(result)));
    let other_payload = theirs(l.begin_operation(new_op("op_4", k, 'b', 100), 5).await.unwrap());
    assert_eq!(other_payload.proposal_sha256, "a".repeat(64));
    assert!(matches!(
        l.finish_operation("op_1", 1, OperationState::ToolError, None, 6, None).await,
        Err(LedgerError::WrongState { .. })
    ));
    assert!(l.operation("op_3").await.unwrap().is_none(), "no row for a replayed call");
    let listed = l.operations(None, None, 7, usize::MAX).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        l.operations(None, Some(OperationState::Unknown), 7, usize::MAX).await.unwrap().len(),
        0
    );
}

async fn a_key_is_scoped_to_tenant_sender_and_tool(s: Store) {
    let l = &*s.ledger;
    mine(
        l.begin_operation(new_op("op_1", key("atlas", "create_ticket", "k"), 'a', 100), 0)
            .await
            .unwrap(),
    );
    mine(
        l.begin_operation(new_op("op_2", key("other", "create_ticket", "k"), 'a', 100), 0)
            .await
            .unwrap(),
    );
    mine(
        l.begin_operation(new_op("op_3", key("atlas", "close_ticket", "k"), 'a', 100), 0)
            .await
            .unwrap(),
    );
    // Another person of the same tenant sending the same key and content
    // gets an operation of their own, never the first sender's outcome.
    let dana =
        OperationKey { subject: "dana@atlas.example".into(), ..key("atlas", "create_ticket", "k") };
    let held = mine(l.begin_operation(new_op("op_4", dana.clone(), 'a', 100), 0).await.unwrap());
    assert_eq!((held.id.as_str(), held.key.subject.as_str()), ("op_4", "dana@atlas.example"));
    assert_eq!(l.operation_by_key(&dana).await.unwrap().unwrap().id, "op_4");
    assert_eq!(
        l.operation_by_key(&key("atlas", "create_ticket", "k")).await.unwrap().unwrap().id,
        "op_1"
    );
    assert_eq!(
        l.operations(None, Some(OperationState::Reserved), 1, usize::MAX).await.unwrap().len(),
        4
    );
}

async fn a_lapsed_dispatch_is_unknown_and_only_reconciliation_settles_it(s: Store) {
    let l = &*s.ledger;
    let k = key("atlas", "create_ticket", "k1");
    mine(l.begin_operation(new_op("op_1", k.clone(), 'a', 100), 0).await.unwrap());
    l.mark_dispatched("op_1", 1, 100, 1).await.unwrap();
    // The holder died: once its lease lapses, the outcome is unknown.
    let seen = theirs(l.begin_operation(new_op("op_2", k.clone(), 'a', 300), 150).await.unwrap());
    assert_eq!(seen.state, OperationState::Unknown);
    assert!(matches!(
        l.finish_operation("op_1", 1, OperationState::Completed, Some("{}".into()), 160, None)
            .await,
        Err(LedgerError::WrongState { state: "unknown", .. })
    ));
    let resolution = |applied: bool| Resolution {
        applied,
        by: "dana".into(),
        reason: "found SUP-000001".into(),
        outcome: applied.then(|| "{\"found\":true}".into()),
        now_ms: 170,
        receipt: None,
    };
    let settled = l.resolve_operation("op_1", resolution(true)).await.unwrap();
    assert_eq!(
        (settled.state, settled.resolved_by.as_deref()),
        (OperationState::ReconciledApplied, Some("dana"))
    );
    assert!(matches!(
        l.resolve_operation("op_1", resolution(false)).await,
        Err(LedgerError::WrongState { state: "reconciled_applied", .. })
    ));
    assert!(matches!(
        l.resolve_operation("op_nope", resolution(false)).await,
        Err(LedgerError::OperationNotFound(_))
    ));
    // Not applied: the same key may run again, as a new attempt.
    let k2 = key("atlas", "create_ticket", "k2");
    mine(l.begin_operation(new_op("op_3", k2.clone(), 'a', 100), 0).await.unwrap());
    l.mark_dispatched("op_3", 1, 100, 1).await.unwrap();
    assert_eq!(
        l.operations(None, Some(OperationState::Unknown), 200, usize::MAX).await.unwrap().len(),
        1,
        "listing notes lapsed leases"
    );
    l.resolve_operation("op_3", resolution(false)).await.unwrap();
    let retried = mine(l.begin_operation(new_op("op_4", k2, 'a', 400), 210).await.unwrap());
    assert_eq!(
        (retried.id.as_str(), retried.state, retried.attempts),
        ("op_3", OperationState::Reserved, 2)
    );
    assert_eq!(
        retried.resolved_by.as_deref(),
        Some("dana"),
        "the earlier attempt's settlement stays on the record"
    );
    // The first attempt's holder, late, cannot touch the second attempt.
    assert!(matches!(
        l.mark_dispatched("op_3", 1, 500, 220).await,
        Err(LedgerError::WrongState { state: "reserved", .. })
    ));
    l.mark_dispatched("op_3", 2, 500, 220).await.unwrap();
    assert!(matches!(
        l.finish_operation("op_3", 1, OperationState::Completed, Some("{}".into()), 230, None)
            .await,
        Err(LedgerError::WrongState { state: "dispatched", .. })
    ));
    assert_eq!(
        l.finish_operation("op_3", 2, OperationState::Completed, Some("{}".into()), 230, None)
            .await
            .unwrap()
            .state,
        OperationState::Completed
    );
}

async fn not_applied_waits_for_the_lease_but_applied_does_not(s: Store) {
    let l = &*s.ledger;
    for (id, k) in [("op_1", "k1"), ("op_2", "k2")] {
        mine(
            l.begin_operation(new_op(id, key("atlas", "create_ticket", k), 'a', 1_000), 0)
                .await
                .unwrap(),
        );
        l.mark_dispatched(id, 1, 1_000, 1).await.unwrap();
        // The deadline passed: unknown at once, while the upstream may still be working.
        l.finish_operation(id, 1, OperationState::Unknown, None, 10, None).await.unwrap();
    }
    let settle = |applied: bool, now_ms: i64| Resolution {
        applied,
        by: "dana".into(),
        reason: "checked".into(),
        outcome: None,
        now_ms,
        receipt: None,
    };
    assert!(matches!(
        l.resolve_operation("op_1", settle(false, 20)).await,
        Err(LedgerError::WrongState { state: "unknown", .. })
    ));
    assert_eq!(
        l.resolve_operation("op_1", settle(false, 1_000)).await.unwrap().state,
        OperationState::ReconciledNotApplied
    );
    assert_eq!(
        l.resolve_operation("op_2", settle(true, 20)).await.unwrap().state,
        OperationState::ReconciledApplied
    );
}

async fn a_crashed_reservation_is_taken_over_not_run_twice(s: Store) {
    let l = &*s.ledger;
    let k = key("atlas", "create_ticket", "k1");
    mine(l.begin_operation(new_op("op_1", k.clone(), 'a', 100), 0).await.unwrap());
    // Reserved, never dispatched, holder gone: nothing was sent, so it may run.
    let taken = mine(l.begin_operation(new_op("op_2", k.clone(), 'a', 300), 100).await.unwrap());
    assert_eq!((taken.id.as_str(), taken.attempts, taken.lease_until_ms), ("op_1", 2, 300));
    // But not by another payload.
    let conflict = theirs(l.begin_operation(new_op("op_3", k, 'b', 900), 400).await.unwrap());
    assert_eq!(conflict.attempts, 2);
}

async fn racing_begins_give_one_holder_per_key(s: Store) {
    let racers = (0..32).map(|i| {
        let l = s.ledger.clone();
        tokio::spawn(async move {
            let mut held = 0;
            for k in 0..20 {
                let begun = l
                    .begin_operation(
                        new_op(
                            &format!("op_{i}_{k}"),
                            key("atlas", "create_ticket", &format!("k{k}")),
                            'a',
                            1_000,
                        ),
                        0,
                    )
                    .await
                    .unwrap();
                held += matches!(begun, Begun::Mine(_)) as usize;
            }
            held
        })
    });
    let held: usize =
        futures_util::future::join_all(racers).await.into_iter().map(|h| h.unwrap()).sum();
    assert_eq!(held, 20, "each of 20 keys held by exactly one of 32 racers");
}

async fn the_store_itself_refuses_illegal_operation_changes(s: Store) {
    let l = &*s.ledger;
    mine(
        l.begin_operation(new_op("op_1", key("atlas", "create_ticket", "k1"), 'a', 100), 0)
            .await
            .unwrap(),
    );
    let err =
        s.raw("UPDATE operations SET state = 'completed' WHERE id = 'op_1'").await.unwrap_err();
    assert!(err.contains("illegal operation transition"), "{err}");
    let err = s.raw("DELETE FROM operations").await.unwrap_err();
    assert!(err.contains("in flight or of unknown outcome is never deleted"), "{err}");
    l.mark_dispatched("op_1", 1, 100, 1).await.unwrap();
    let err = s.raw("DELETE FROM operations").await.unwrap_err();
    assert!(err.contains("never deleted"), "{err}");
    l.finish_operation("op_1", 1, OperationState::Completed, Some("{\"a\":1}".into()), 2, None)
        .await
        .unwrap();
    let err =
        s.raw("UPDATE operations SET state = 'reserved' WHERE id = 'op_1'").await.unwrap_err();
    assert!(err.contains("illegal operation transition"), "{err}");
    let err = s.raw("UPDATE operations SET outcome = '{}' WHERE id = 'op_1'").await.unwrap_err();
    assert!(err.contains("never rewritten"), "{err}");
    let err =
        s.raw("UPDATE operations SET proposal_sha256 = 'x' WHERE id = 'op_1'").await.unwrap_err();
    assert!(err.contains("immutable") || err.contains("check"), "{err}");
}

async fn settled_operations_go_after_their_window_and_no_other(s: Store) {
    let l = &*s.ledger;
    let settled = |id: &'static str,
                   k: &'static str,
                   created: i64,
                   settled: i64,
                   state: OperationState| async move {
        mine(l.begin_operation(new_op(id, key_of(k), 'a', created + 100), created).await.unwrap());
        l.mark_dispatched(id, 1, created + 100, created).await.unwrap();
        l.finish_operation(id, 1, state, Some("{}".into()), settled, None).await.unwrap();
    };
    settled("op_old", "old", 0, 10, OperationState::Completed).await;
    settled("op_old_error", "old-error", 5, 20, OperationState::ToolError).await;
    settled("op_late", "late", 0, 400, OperationState::Completed).await;
    settled("op_new", "new", 450, 500, OperationState::Completed).await;
    mine(l.begin_operation(new_op("op_reserved", key_of("reserved"), 'a', 100), 0).await.unwrap());
    mine(l.begin_operation(new_op("op_lost", key_of("lost"), 'a', 20), 0).await.unwrap());
    l.mark_dispatched("op_lost", 1, 20, 1).await.unwrap();
    assert_eq!(
        l.operations(None, Some(OperationState::Unknown), 300, usize::MAX).await.unwrap().len(),
        1,
        "its lease lapsed"
    );

    // A page: the newest first, by creation.
    let page: Vec<String> =
        l.operations(None, None, 300, 2).await.unwrap().into_iter().map(|o| o.id).collect();
    assert_eq!(page, ["op_new", "op_old_error"]);
    // Settled before 300: the two old ones go; a late settlement, one in
    // flight and one of unknown outcome stay, whatever their age.
    assert_eq!(l.prune_operations(300).await.unwrap(), 2);
    let mut kept: Vec<String> = l
        .operations(None, None, 300, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.id)
        .collect();
    kept.sort();
    assert_eq!(kept, ["op_late", "op_lost", "op_new", "op_reserved"]);
    assert_eq!(l.prune_operations(300).await.unwrap(), 0, "nothing more to prune");
    // A pruned key is new again; a kept one still answers with its record.
    assert_eq!(
        mine(l.begin_operation(new_op("op_again", key_of("old"), 'b', 700), 600).await.unwrap())
            .attempts,
        1
    );
    assert_eq!(
        theirs(l.begin_operation(new_op("op_x", key_of("late"), 'a', 700), 600).await.unwrap()).id,
        "op_late"
    );
    assert_eq!(
        l.prune_operations(i64::MAX).await.unwrap(),
        2,
        "op_late and op_new; op_again is in flight"
    );
}

// The receipt log.

use toolgate_ledger::core::receipt::{
    self, Draft, LoggedReceipt, RECEIPT_VERSION, Receipt, ReceiptKey,
};
use toolgate_ledger::core::{merkle, strict_json::JsonLimits};
use toolgate_ledger::{LogKey, StoredArchive, StoredCheckpoint};

fn receipt_key(seed: u8) -> Arc<ReceiptKey> {
    Arc::new(ReceiptKey::new(ed25519_dalek::SigningKey::from_bytes(&[seed; 32])))
}

fn draft(key: &Arc<ReceiptKey>, tool: &str, op: Option<&str>) -> Draft {
    let receipt = Receipt {
        v: RECEIPT_VERSION,
        kid: key.kid().into(),
        log_index: 0,
        issued_at: "2026-11-30T00:00:00.000Z".into(),
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "support".into(),
        tool: tool.into(),
        tool_definition_sha256: "d".repeat(64),
        proposal_sha256: "a".repeat(64),
        decision: "allow".into(),
        reason: "automatic".into(),
        rules: vec![],
        policy_version: "p".into(),
        approval: None,
        operation: op.map(|state| receipt::OperationRef { key: "k1".into(), state: state.into() }),
        execution_status: "dispatched".into(),
        result_status: "ok".into(),
        result_sha256: None,
        arguments_hash: "0".repeat(64),
        result_hash: None,
        arguments: None,
        result: None,
        sandbox: None,
        config_version: None,
        identity: None,
    };
    // Writes signed each, the rest not: the log holds both kinds, as after a change of `receipts.sign_each`.
    Draft {
        receipt,
        salt: [9; 32],
        asked: Some("{}".into()),
        key: key.clone(),
        sign_each: op.is_some(),
        placement: Default::default(),
    }
}

async fn receipts_take_contiguous_indexes_under_concurrency(s: Store) {
    let key = receipt_key(1);
    let tasks = (0..20).map(|i| {
        let (l, key) = (s.ledger.clone(), key.clone());
        tokio::spawn(async move {
            l.append_receipts(vec![
                draft(&key, &format!("t{i}"), None),
                draft(&key, &format!("t{i}"), None),
            ])
            .await
            .unwrap()
        })
    });
    let mut indexes: Vec<u64> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .flat_map(|h| {
            let got = h.unwrap();
            assert_eq!(got[1], got[0] + 1, "one call's receipts are adjacent");
            got
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, (0..40).collect::<Vec<_>>());
    let l = &*s.ledger;
    assert_eq!(l.log_size().await.unwrap(), 40);
    let stored = l.receipts(0, 100).await.unwrap();
    let leaves = l.leaf_hashes(0, 40).await.unwrap();
    for (i, r) in stored.iter().enumerate() {
        assert_eq!(r.log_index, i as u64);
        let signed = LoggedReceipt::from_json(r.logged.as_bytes(), JsonLimits::default()).unwrap();
        assert_eq!(signed.receipt.log_index, i as u64, "the signed index is the stored one");
        receipt::verify(&signed, &key.verifying_key()).unwrap();
        assert_eq!(r.leaf_hash, merkle::leaf_hash(r.entry().as_bytes()));
        assert_eq!(leaves[i], r.leaf_hash);
        assert_eq!((r.salt, r.asked.as_deref()), ([9; 32], Some("{}")));
    }
    assert_eq!(l.receipts(38, 10).await.unwrap().len(), 2);
    assert!(
        l.leaf_hashes(30, 41).await.is_err(),
        "asking beyond the log is an error, not a short answer"
    );
}

async fn a_receipt_commits_with_the_state_it_attests_or_not_at_all(s: Store) {
    let (l, key) = (&*s.ledger, receipt_key(2));
    let with = |id: &str, payload: char| NewOperation {
        receipt: Some(draft(&key, "create_ticket", Some("reserved"))),
        ..new_op(id, key_of("k1"), payload, 100)
    };
    mine(l.begin_operation(with("op_1", 'a'), 0).await.unwrap());
    assert_eq!(l.log_size().await.unwrap(), 1, "the decision's receipt came with the reservation");
    theirs(l.begin_operation(with("op_2", 'a'), 1).await.unwrap());
    assert_eq!(
        l.log_size().await.unwrap(),
        1,
        "no receipt for a reservation this call does not hold"
    );
    l.mark_dispatched("op_1", 1, 100, 2).await.unwrap();
    // A receipt that cannot be signed (it names another key): nothing of the change stands.
    let mut forged = draft(&key, "create_ticket", Some("completed"));
    forged.receipt.kid = receipt_key(3).kid().into();
    assert!(
        l.finish_operation(
            "op_1",
            1,
            OperationState::Completed,
            Some("{}".into()),
            3,
            Some(forged)
        )
        .await
        .is_err()
    );
    assert_eq!(
        l.operation("op_1").await.unwrap().unwrap().state,
        OperationState::Dispatched,
        "the finish rolled back with its receipt"
    );
    assert_eq!(l.log_size().await.unwrap(), 1);
    // A refused change appends no receipt either.
    assert!(
        l.finish_operation(
            "op_1",
            9,
            OperationState::Completed,
            Some("{}".into()),
            3,
            Some(draft(&key, "create_ticket", Some("completed")))
        )
        .await
        .is_err()
    );
    assert_eq!(l.log_size().await.unwrap(), 1);
    let done = l
        .finish_operation(
            "op_1",
            1,
            OperationState::Completed,
            Some("{}".into()),
            4,
            Some(draft(&key, "create_ticket", Some("completed"))),
        )
        .await
        .unwrap();
    assert_eq!(done.state, OperationState::Completed);
    assert_eq!(l.log_size().await.unwrap(), 2);
    // Opening an approval: its receipt with it, or neither.
    let b = binding('c');
    let open = |id: &str| NewApproval {
        id: id.into(),
        binding: b.clone(),
        arguments: json!({}),
        reason: "r".into(),
        rules: vec![],
        now_ms: 5,
        ttl_ms: 1000,
        receipt: Some(draft(&key, "raise_parts_order", None)),
        subject: "agent@atlas.example".into(),
        operation_key: None,
        notices: vec![],
    };
    l.create_approval(open("apr_1")).await.unwrap();
    assert_eq!(l.log_size().await.unwrap(), 3);
    assert!(
        l.create_approval(open("apr_1")).await.is_err(),
        "a second approval under one id is refused"
    );
    assert_eq!(l.log_size().await.unwrap(), 3, "and leaves no receipt");
}

/// Many single-receipt appends at once (on SQLite they share batches and
/// run without savepoints of their own), every third unsignable: each bad
/// one fails alone, the good ones land on contiguous indexes.
async fn appends_that_fail_amid_others_leave_nothing_and_take_no_index(s: Store) {
    let (key, other) = (receipt_key(4), receipt_key(5));
    let tasks = (0..60).map(|i| {
        let (l, key, other) = (s.ledger.clone(), key.clone(), other.clone());
        tokio::spawn(async move {
            let mut d = draft(&key, &format!("t{i}"), None);
            if i % 3 == 0 {
                d.receipt.kid = other.kid().into();
            }
            (i, l.append_receipts(vec![d]).await)
        })
    });
    let mut good = Vec::new();
    for (i, got) in futures_util::future::join_all(tasks).await.into_iter().map(Result::unwrap) {
        match got {
            Ok(indexes) if i % 3 != 0 => good.extend(indexes),
            Err(e) if i % 3 == 0 => assert!(e.to_string().contains("kid"), "{e}"),
            other => panic!("append {i}: {other:?}"),
        }
    }
    good.sort();
    assert_eq!(good, (0..40).collect::<Vec<_>>());
    let stored = s.ledger.receipts(0, 100).await.unwrap();
    assert_eq!(stored.len(), 40);
    for r in &stored {
        let signed = LoggedReceipt::from_json(r.logged.as_bytes(), JsonLimits::default()).unwrap();
        assert_eq!(signed.receipt.log_index, r.log_index);
        receipt::verify(&signed, &key.verifying_key()).unwrap();
    }
}

/// The writer's connection does not checkpoint the WAL (so no request
/// waits for it); the checkpointer thread copies it into the database
/// file while the ledger is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_copied_into_the_database_off_the_writer() {
    let s = sqlite().await;
    let Raw::Sqlite(path) = &s.raw else { unreachable!() };
    let key = receipt_key(6);
    let before = std::fs::metadata(path).unwrap().len();
    for i in 0..20 {
        s.ledger
            .append_receipts((0..20).map(|j| draft(&key, &format!("t{i}-{j}"), None)).collect())
            .await
            .unwrap();
    }
    let wal = path.with_extension("sqlite3-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 100_000, "the appends went to the WAL");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::metadata(path).unwrap().len() < before + 100_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing was checkpointed into {} within 10 s",
            path.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(s.ledger.log_size().await.unwrap(), 400);
}

/// A request that needs no fsync may run on the caller's own thread, but
/// never waits there for SQLite's write lock: while another connection (the
/// CLI, say) holds it, the append queues to the writer thread and the
/// caller's runtime runs on; it lands once the lock is released.
#[tokio::test(flavor = "current_thread")]
async fn an_append_never_waits_for_the_write_lock_on_the_callers_thread() {
    let s = sqlite().await;
    let Raw::Sqlite(path) = &s.raw else { unreachable!() };
    let key = receipt_key(7);
    assert_eq!(s.ledger.append_receipts(vec![draft(&key, "before", None)]).await.unwrap(), vec![0]);
    let other = rusqlite::Connection::open(path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (ledger, k) = (s.ledger.clone(), key.clone());
    let started = std::time::Instant::now();
    let append =
        tokio::spawn(async move { ledger.append_receipts(vec![draft(&k, "during", None)]).await });
    // The runtime has one thread: this sleep ends on time only if the
    // append did not hold that thread waiting for the lock.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "the append held the caller's thread for {:?}",
        started.elapsed()
    );
    assert!(
        !append.is_finished(),
        "nothing can commit while another connection holds the write lock"
    );
    other.execute_batch("COMMIT").unwrap();
    assert_eq!(append.await.unwrap().unwrap(), vec![1]);
    assert_eq!(s.ledger.log_size().await.unwrap(), 2);
}

async fn an_archived_range_leaves_the_rows_and_the_log_carries_on(s: Store) {
    let (l, key) = (&*s.ledger, receipt_key(5));
    for _ in 0..6 {
        l.append_receipts((0..100).map(|i| draft(&key, &format!("t{i}"), None)).collect())
            .await
            .unwrap();
    }
    let leaves = l.leaf_hashes(0, 600).await.unwrap();
    let archive = |before: usize| {
        let mut f = merkle::Frontier::new();
        leaves[..before].iter().for_each(|h| f.push(*h));
        StoredArchive {
            before: before as u64,
            root: f.root(),
            frontier: f.subtrees().to_vec(),
            archived_ms: 7,
        }
    };
    assert!(
        l.archive(archive(512)).await.unwrap_err().to_string().contains("checkpointed"),
        "nothing checkpointed yet"
    );
    l.add_checkpoint(StoredCheckpoint {
        size: 600,
        root: merkle::root(&leaves),
        note: "n\n".into(),
        created_ms: 1,
    })
    .await
    .unwrap();
    assert!(l.archive(archive(500)).await.is_err(), "whole tiles only");
    let cp = |size: usize| StoredCheckpoint {
        size: size as u64,
        root: merkle::root(&leaves[..size]),
        note: "n\n".into(),
        created_ms: 1,
    };
    l.add_checkpoint(cp(256)).await.unwrap();
    l.add_checkpoint(cp(512)).await.unwrap();
    assert_eq!(l.drop_covered_checkpoints().await.unwrap(), 0, "no archive covers them yet");
    assert!(s.raw("DELETE FROM checkpoints WHERE size = 256").await.unwrap_err().contains("never"));
    assert_eq!(l.archive(archive(512)).await.unwrap(), 512);
    // The checkpoints below the archive go (the archive's own, of its size, stays).
    assert!(s.raw("DELETE FROM checkpoints WHERE size = 512").await.unwrap_err().contains("never"));
    assert_eq!(l.drop_covered_checkpoints().await.unwrap(), 1);
    assert_eq!(
        l.checkpoints().await.unwrap().iter().map(|c| c.size).collect::<Vec<_>>(),
        [512, 600]
    );
    assert_eq!(l.archived().await.unwrap(), Some(archive(512)));
    assert_eq!(l.log_size().await.unwrap(), 600);
    assert_eq!(l.receipts(0, 5).await.unwrap()[0].log_index, 512, "archived receipts have no row");
    assert!(l.leaf_hashes(0, 600).await.is_err(), "archived leaves are the archive's to give");
    assert_eq!(l.leaf_hashes(512, 600).await.unwrap(), leaves[512..]);
    assert!(l.archive(archive(256)).await.is_err(), "an archive only extends the last");
    assert!(
        s.raw("DELETE FROM receipts WHERE log_index = 512")
            .await
            .unwrap_err()
            .contains("append-only")
    );
    assert!(s.raw("DELETE FROM archives").await.unwrap_err().contains("never"));
    // Archived to the last receipt, the log still knows its size and carries on.
    l.append_receipts((0..168).map(|i| draft(&key, &format!("u{i}"), None)).collect())
        .await
        .unwrap();
    let all: Vec<_> =
        leaves[..512].iter().copied().chain(l.leaf_hashes(512, 768).await.unwrap()).collect();
    l.add_checkpoint(StoredCheckpoint {
        size: 768,
        root: merkle::root(&all),
        note: "n\n".into(),
        created_ms: 2,
    })
    .await
    .unwrap();
    let mut f = merkle::Frontier::from_parts(512, archive(512).frontier).unwrap();
    all[512..].iter().for_each(|h| f.push(*h));
    assert_eq!(f.root(), merkle::root(&all), "the stored frontier carries the tree on");
    assert_eq!(
        l.archive(StoredArchive {
            before: 768,
            root: f.root(),
            frontier: f.subtrees().to_vec(),
            archived_ms: 8
        })
        .await
        .unwrap(),
        256
    );
    assert_eq!((l.log_size().await.unwrap(), l.receipts(0, 10).await.unwrap().len()), (768, 0));
    assert_eq!(l.append_receipts(vec![draft(&key, "next", None)]).await.unwrap(), vec![768]);
}

fn key_of(k: &str) -> OperationKey {
    key("atlas", "create_ticket", k)
}

async fn the_store_itself_refuses_log_rewrites(s: Store) {
    let (l, key) = (&*s.ledger, receipt_key(4));
    l.append_receipts(vec![draft(&key, "a", None), draft(&key, "b", None)]).await.unwrap();
    // Sequenced receipts reach the table at the ledger's next transaction.
    assert_eq!(l.log_size().await.unwrap(), 2);
    for sql in ["UPDATE receipts SET body = body", "DELETE FROM receipts WHERE log_index = 1"] {
        let err = s.raw(sql).await.unwrap_err();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    let gap = "INSERT INTO receipts (log_index, body, salt) SELECT 5, body, salt FROM receipts WHERE log_index = 0";
    assert!(s.raw(gap).await.unwrap_err().contains("next log index"));
    // Checkpoints: only of what the log holds; one per size; never rewritten.
    let root = merkle::root(&l.leaf_hashes(0, 2).await.unwrap());
    let cp = |size: u64| StoredCheckpoint { size, root, note: "note\n".into(), created_ms: 1 };
    assert!(l.add_checkpoint(cp(2)).await.unwrap());
    assert!(
        !l.add_checkpoint(cp(2)).await.unwrap(),
        "a second checkpoint of one size is not added"
    );
    assert!(l.add_checkpoint(cp(3)).await.unwrap_err().to_string().contains("does not hold"));
    assert!(s.raw("DELETE FROM checkpoints").await.unwrap_err().contains("never"));
    assert_eq!(l.checkpoints().await.unwrap().len(), 1);
    // One checkpoint by its size, or the latest, read by the key.
    assert!(l.add_checkpoint(cp(1)).await.unwrap());
    assert_eq!(
        l.checkpoint(None).await.unwrap().map(|c| c.size),
        Some(2),
        "the latest is the largest, not the last added"
    );
    assert_eq!(l.checkpoint(Some(1)).await.unwrap(), Some(cp(1)));
    assert_eq!(l.checkpoint(Some(7)).await.unwrap(), None);
    // The key history: a kid names one key for good.
    let k =
        LogKey { kid: key.kid().into(), ed25519: "vkey-a".into(), ml_dsa_65: None, created_ms: 1 };
    l.add_log_key(k.clone()).await.unwrap();
    l.add_log_key(k.clone()).await.unwrap();
    assert!(l.add_log_key(LogKey { ed25519: "vkey-b".into(), ..k.clone() }).await.is_err());
    assert_eq!(l.log_keys().await.unwrap(), vec![k]);
    assert!(s.raw("DELETE FROM log_keys").await.unwrap_err().contains("never"));
}

/// The key's id, the tool's definition and the policy version, repeated
/// receipt after receipt, are stored whole until the store has committed a
/// number for each, and by number after: the same leaves, 77 bytes fewer a
/// row. Another process (another replica) reads them; the numbers are never
/// changed or removed.
async fn recurring_digests_are_named_by_number_once_committed(s: Store) {
    let (l, key) = (&*s.ledger, receipt_key(7));
    let with_digests = |tool: &str, op: Option<&str>| {
        let mut d = draft(&key, tool, op);
        d.receipt.policy_version = "e".repeat(64);
        d
    };
    l.append_receipts(vec![with_digests("one_a", None)]).await.unwrap();
    // A transaction numbers what the first row met; the next learns the numbers.
    for _ in 0..2 {
        l.receipts(0, 10).await.unwrap();
        l.count_approvals(ApprovalState::Pending).await.unwrap();
    }
    l.append_receipts(vec![with_digests("one_b", None)]).await.unwrap();
    // A write's receipt, in its operation's transaction, is named the same way.
    let mut op = new_op("op-digests", key_of("digests"), 'x', 1_000);
    op.receipt = Some(with_digests("one_c", Some("reserved")));
    mine(l.begin_operation(op, 1).await.unwrap());
    let stored = l.receipts(0, 10).await.unwrap();
    assert_eq!(stored.len(), 3);
    let sizes = s.body_sizes().await;
    assert_eq!(sizes[0] - sizes[1], 77, "17 + 33 + 33 bytes became 2 + 2 + 2: {sizes:?}");
    for (r, tool) in stored.iter().zip(["one_a", "one_b", "one_c"]) {
        let logged = LoggedReceipt::from_json(r.logged.as_bytes(), JsonLimits::default()).unwrap();
        assert_eq!(
            (
                logged.receipt.tool.as_str(),
                logged.receipt.policy_version.as_str(),
                logged.receipt.kid.as_str()
            ),
            (tool, "e".repeat(64).as_str(), key.kid())
        );
        assert_eq!(logged.receipt.tool_definition_sha256, "d".repeat(64));
        receipt::verify(&logged, &key.verifying_key()).unwrap();
    }
    // Another process reads the numbers from the store.
    let other = s.second().await;
    assert_eq!(other.receipts(0, 10).await.unwrap(), stored);
    assert_eq!(
        other.leaf_hashes(0, 3).await.unwrap(),
        stored.iter().map(|r| r.leaf_hash).collect::<Vec<_>>()
    );
    for sql in ["UPDATE digests SET digest = digest", "DELETE FROM digests"] {
        let err = s.raw(sql).await.unwrap_err();
        assert!(err.contains("never"), "{sql}: {err}");
    }
}

async fn two_writers_interleaving_all_kinds_of_appends_keep_the_log_contiguous_and_signed(
    s: Store,
) {
    let key = receipt_key(5);
    let other = s.second().await;
    let tasks = (0..24).map(|i| {
        let l = if i % 3 == 0 { other.clone() } else { s.ledger.clone() };
        let key = key.clone();
        tokio::spawn(async move {
            for j in 0..5 {
                if (i + j) % 4 == 0 {
                    // A receipt that goes with a state change (signed in the writer).
                    let new = NewOperation {
                        receipt: Some(draft(&key, "create_ticket", Some("reserved"))),
                        ..new_op(&format!("op_{i}_{j}"), key_of(&format!("k{i}_{j}")), 'a', 100)
                    };
                    mine(l.begin_operation(new, 1).await.unwrap());
                } else {
                    l.append_receipts(vec![draft(&key, "t", None); 1 + (j % 2)]).await.unwrap();
                }
            }
        })
    });
    for t in futures_util::future::join_all(tasks).await {
        t.unwrap();
    }
    let l = &*s.ledger;
    let size = l.log_size().await.unwrap();
    let rows = l.receipts(0, 10_000).await.unwrap();
    assert_eq!(rows.len() as u64, size);
    for (i, r) in rows.iter().enumerate() {
        let signed = LoggedReceipt::from_json(r.logged.as_bytes(), JsonLimits::default()).unwrap();
        assert_eq!(
            (r.log_index, signed.receipt.log_index),
            (i as u64, i as u64),
            "signed for the index it holds"
        );
        receipt::verify(&signed, &key.verifying_key()).unwrap();
        assert_eq!(r.leaf_hash, merkle::leaf_hash(r.entry().as_bytes()));
    }
    // 24 tasks × 5 steps: the begins add one each, the rest one or two.
    let begins =
        (0..24).flat_map(|i| (0..5).map(move |j| (i + j) % 4 == 0)).filter(|b| *b).count() as u64;
    let appended: u64 = (0..24)
        .flat_map(|i| (0..5).map(move |j| if (i + j) % 4 == 0 { 0 } else { 1 + (j % 2) as u64 }))
        .sum();
    assert_eq!(size, begins + appended);
}

/// A store as the release before operation subjects left it (migrations 1
/// to 4), with one completed operation under key `k1` sent by `agent`.
const BEFORE_SUBJECTS: [&str; 4] = [
    include_str!("../src/migrations/sqlite/0001_approvals.sql"),
    include_str!("../src/migrations/sqlite/0002_operations.sql"),
    include_str!("../src/migrations/sqlite/0003_receipts.sql"),
    include_str!("../src/migrations/sqlite/0004_approval_subject.sql"),
];
const BEFORE_SUBJECTS_PG: [&str; 4] = [
    include_str!("../src/migrations/postgres/0001_approvals.sql"),
    include_str!("../src/migrations/postgres/0002_operations.sql"),
    include_str!("../src/migrations/postgres/0003_receipts.sql"),
    include_str!("../src/migrations/postgres/0004_approval_subject.sql"),
];
const OLD_ROW: &str = "INSERT INTO operations (id, tenant, server, tool, op_key, caller, proposal_sha256, approval_id, arguments, state, outcome, \
                       attempts, created_ms, updated_ms, lease_until_ms) VALUES ('op_old', 'atlas', 'support', 'create_ticket', 'k1', 'agent', \
                       'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', NULL, '{}', 'completed', '{\"ok\":true}', 1, 1, 2, 3)";

/// A schema of its own as a release with only `migrations` left it: a client
/// on it, and the URL a ledger opens it by (which migrates it the rest of the way).
async fn postgres_as_of(migrations: &[&str]) -> (tokio_postgres::Client, String) {
    let schema = format!(
        "tg_upgrade_{}_{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
    );
    let base = postgres_url();
    let (client, conn) =
        tokio_postgres::connect(&base, tokio_postgres::NoTls).await.expect("PostgreSQL answers");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path = {schema};"))
        .await
        .unwrap();
    client.batch_execute("CREATE TABLE toolgate_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)").await.unwrap();
    for (i, sql) in migrations.iter().enumerate() {
        client.batch_execute(sql).await.unwrap();
        client
            .execute(
                "INSERT INTO toolgate_migrations (version, applied_ms) VALUES ($1, 0)",
                &[&(i as i32 + 1)],
            )
            .await
            .unwrap();
    }
    let sep = if base.contains('?') { '&' } else { '?' };
    (client, format!("{base}{sep}options=-csearch_path%3D{schema}"))
}

/// After the upgrade the old operation is its caller's: the same sender's
/// retry replays it, another person's same key is theirs alone.
async fn an_old_operation_keeps_its_key_after_the_upgrade(l: &dyn Ledger) {
    let agent = OperationKey { subject: "agent".into(), ..key("atlas", "create_ticket", "k1") };
    let old =
        l.operation_by_key(&agent).await.unwrap().expect("the old row, found under its caller");
    assert_eq!(
        (old.id.as_str(), old.state, old.key.subject.as_str()),
        ("op_old", OperationState::Completed, "agent")
    );
    assert_eq!(
        theirs(l.begin_operation(new_op("op_new", agent, 'a', 100), 10).await.unwrap()).id,
        "op_old"
    );
    mine(
        l.begin_operation(
            new_op(
                "op_dana",
                OperationKey { subject: "dana".into(), ..key("atlas", "create_ticket", "k1") },
                'a',
                100,
            ),
            10,
        )
        .await
        .unwrap(),
    );
}

#[tokio::test]
async fn operations_stored_before_subjects_upgrade_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in BEFORE_SUBJECTS {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute_batch(OLD_ROW).unwrap();
    }
    an_old_operation_keeps_its_key_after_the_upgrade(&SqliteLedger::open(&path).unwrap()).await;
    // The rebuilt table still guards itself.
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert!(
        conn.execute_batch("UPDATE operations SET subject = 'x' WHERE id = 'op_old'")
            .unwrap_err()
            .to_string()
            .contains("immutable")
    );
    assert!(
        conn.execute_batch("DELETE FROM operations")
            .unwrap_err()
            .to_string()
            .contains("never deleted")
    );
}

#[tokio::test]
async fn operations_stored_before_subjects_upgrade_on_postgres() {
    let (client, url) = postgres_as_of(&BEFORE_SUBJECTS_PG).await;
    client.batch_execute(OLD_ROW).await.unwrap();
    an_old_operation_keeps_its_key_after_the_upgrade(&PostgresLedger::connect(&url).await.unwrap())
        .await;
    let err = client
        .batch_execute("UPDATE operations SET subject = 'x' WHERE id = 'op_old'")
        .await
        .unwrap_err();
    assert!(err.as_db_error().unwrap().message().contains("immutable"), "{err}");
}

/// A PostgreSQL ledger of the release before compact receipts (migrations 1
/// to 7, the receipt's JCS text per row) keeps every receipt byte for byte;
/// new receipts follow it compactly, and the guard is back. (SQLite's
/// migration is tested beside it, in `sqlite::conn`.)
#[tokio::test]
async fn receipts_stored_as_text_upgrade_on_postgres() {
    const BEFORE_COMPACT_PG: [&str; 7] = [
        include_str!("../src/migrations/postgres/0001_approvals.sql"),
        include_str!("../src/migrations/postgres/0002_operations.sql"),
        include_str!("../src/migrations/postgres/0003_receipts.sql"),
        include_str!("../src/migrations/postgres/0004_approval_subject.sql"),
        include_str!("../src/migrations/postgres/0005_operation_subject.sql"),
        include_str!("../src/migrations/postgres/0006_approval_operation_key.sql"),
        include_str!("../src/migrations/postgres/0007_runs.sql"),
    ];
    let (client, url) = postgres_as_of(&BEFORE_COMPACT_PG).await;
    let key = receipt_key(6);
    let mut old = draft(&key, "get_ticket", None).receipt;
    old.v = 1;
    let old_text = receipt::sign(old, key.signing_key()).unwrap().to_json();
    let old_leaf = merkle::leaf_hash(old_text.as_bytes());
    client
        .execute(
            "INSERT INTO receipts (log_index, kid, leaf_hash, signed, salt, proposal, created_ms) VALUES (0, $1, $2, $3, $4, '{}', 5)",
            &[&key.kid(), &&old_leaf[..], &old_text, &&[1u8; 32][..]],
        )
        .await
        .unwrap();
    let l = PostgresLedger::connect(&url).await.unwrap();
    assert_eq!(l.append_receipts(vec![draft(&key, "close_ticket", None)]).await.unwrap(), vec![1]);
    let rows = l.receipts(0, 10).await.unwrap();
    assert_eq!(
        (rows[0].logged.as_str(), rows[0].leaf_hash, rows[0].salt, rows[0].asked.as_deref()),
        (old_text.as_str(), old_leaf, [1; 32], Some("{}"))
    );
    assert_eq!(rows[1].leaf_hash, merkle::leaf_hash(rows[1].entry().as_bytes()));
    assert_eq!(rows[1].asked.as_deref(), Some("{}"));
    let body: Vec<u8> = client
        .query_one("SELECT body FROM receipts WHERE log_index = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body[0], receipt::compact::FORMAT);
    let err = client.batch_execute("UPDATE receipts SET proposal = 'x'").await.unwrap_err();
    assert!(err.as_db_error().unwrap().message().contains("append-only"), "{err}");
}

fn run_key(subject: &str, run: &str) -> RunKey {
    RunKey { tenant: "atlas".into(), subject: subject.into(), run: run.into() }
}

fn leg_call(leg: Leg, tool: &str, at_ms: i64) -> LegCall {
    LegCall { leg, tool: tool.into(), proposal_sha256: "c".repeat(64), at_ms }
}

async fn a_run_counts_its_calls_keeps_its_legs_and_expires(s: Store) {
    let l = &*s.ledger;
    let r = run_key("agent", "r1");
    // Not begun: a read writes nothing and finds nothing.
    let empty = l.run(&r, false, 1_000, 100).await.unwrap();
    assert_eq!((empty.calls, empty.legs.len()), (0, 0));
    assert_eq!(l.run(&r, true, 1_000, 100).await.unwrap().calls, 1);
    let second = l.run(&r, true, 1_010, 100).await.unwrap();
    assert_eq!((second.calls, second.started_ms, second.expires_ms), (2, 1_000, 1_100));
    assert_eq!(
        l.add_run_leg(&r, leg_call(Leg::PrivateData, "tickets__get_ticket", 1_020), 100)
            .await
            .unwrap(),
        1_100,
        "the run's end"
    );
    l.add_run_leg(&r, leg_call(Leg::UntrustedContent, "manuals__search_manual", 1_030), 100)
        .await
        .unwrap();
    // At most MAX_LEGS of one leg are kept.
    for i in 0..12 {
        l.add_run_leg(&r, leg_call(Leg::UntrustedContent, "parts__find_part", 1_040 + i), 100)
            .await
            .unwrap();
    }
    let read = l.run(&r, false, 1_060, 100).await.unwrap();
    assert_eq!(read.calls, 2, "a read counts nothing");
    assert_eq!(read.legs[0], leg_call(Leg::PrivateData, "tickets__get_ticket", 1_020));
    assert_eq!(read.legs[1].tool, "manuals__search_manual");
    assert_eq!(
        read.legs.iter().filter(|c| c.leg == Leg::UntrustedContent).count() as i64,
        toolgate_ledger::MAX_LEGS
    );
    // Another subject's run of the same id, and another run, are their own.
    assert_eq!(l.run(&run_key("other", "r1"), false, 1_060, 100).await.unwrap().legs.len(), 0);
    assert_eq!(l.run(&run_key("agent", "r2"), false, 1_060, 100).await.unwrap().legs.len(), 0);
    // Expired: the same id begins anew, with none of the old legs.
    assert_eq!(l.run(&r, false, 1_100, 100).await.unwrap().legs.len(), 0);
    let anew = l.run(&r, true, 1_150, 100).await.unwrap();
    assert_eq!(
        (anew.calls, anew.started_ms, anew.expires_ms, anew.legs.len()),
        (1, 1_150, 1_250, 0)
    );
    // A leg of the new run counts from the new start; the old ones are swept.
    l.add_run_leg(&r, leg_call(Leg::PrivateData, "tickets__get_ticket", 1_260), 100).await.unwrap();
    let after = l.run(&r, false, 1_261, 100).await.unwrap();
    assert_eq!((after.started_ms, after.legs.len()), (1_260, 1));
    // A second process sees the same run.
    let other = s.second().await;
    assert_eq!(other.run(&r, false, 1_262, 100).await.unwrap().legs, after.legs);
}

async fn replicas_counting_one_run_add_up(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    let r = run_key("agent", "busy");
    let mut tasks = Vec::new();
    for i in 0..40 {
        let l = if i % 2 == 0 { a.clone() } else { b.clone() };
        let r = r.clone();
        tasks.push(tokio::spawn(
            async move { l.run(&r, true, 5_000 + i, 60_000).await.unwrap().calls },
        ));
    }
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap());
    }
    seen.sort();
    assert_eq!(seen, (1..=40).collect::<Vec<u64>>(), "each count is seen once");
}

/// While another connection (the CLI, say) holds SQLite's write lock, a
/// sequencing ledger still takes a read's receipts: they need no
/// transaction. They reach the table once the lock is free.
#[tokio::test(flavor = "current_thread")]
async fn a_sequenced_append_needs_no_write_lock() {
    let s = sqlite_sequencing().await;
    let Raw::Sqlite(path) = &s.raw else { unreachable!() };
    let key = receipt_key(8);
    assert_eq!(s.ledger.append_receipts(vec![draft(&key, "before", None)]).await.unwrap(), vec![0]);
    assert_eq!(s.ledger.log_size().await.unwrap(), 1);
    let other = rusqlite::Connection::open(path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let during = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        s.ledger.append_receipts(vec![draft(&key, "during", None), draft(&key, "during", None)]),
    );
    assert_eq!(during.await.expect("the append did not wait for the lock").unwrap(), vec![1, 2]);
    other.execute_batch("COMMIT").unwrap();
    assert_eq!(s.ledger.log_size().await.unwrap(), 3);
    let stored = s.ledger.receipts(0, 10).await.unwrap();
    assert_eq!(stored.iter().map(|r| r.log_index).collect::<Vec<_>>(), vec![0, 1, 2]);
}

/// The gateway's checkpoint takes the leaves of the receipts it sequenced
/// from memory rather than decoding their rows again: they are the very
/// hashes a decode gives (here, a second process's, which remembers
/// nothing), beside a write's receipt, which is decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_leaves_are_the_rows_own() {
    let s = sqlite_sequencing().await;
    let key = receipt_key(10);
    for i in 0..300 {
        s.ledger.append_receipts(vec![draft(&key, &format!("read{i}"), None)]).await.unwrap();
    }
    let mut op = new_op("op-1", key_of("remembered"), 'a', 60_000);
    op.receipt = Some(draft(&key, "write", Some("reserved")));
    mine(s.ledger.begin_operation(op, 1).await.unwrap());
    s.ledger
        .append_receipts(vec![draft(&key, "after", None), draft(&key, "after", None)])
        .await
        .unwrap();
    let size = s.ledger.log_size().await.unwrap();
    assert_eq!(size, 303);
    let remembered = s.ledger.leaf_hashes(0, size).await.unwrap();
    assert_eq!(remembered, s.second().await.leaf_hashes(0, size).await.unwrap());
    let stored = s.ledger.receipts(0, size).await.unwrap();
    assert_eq!(
        remembered,
        stored.iter().map(|r| merkle::leaf_hash(r.entry().as_bytes())).collect::<Vec<_>>()
    );
    assert_eq!(
        s.ledger.leaf_hashes(5, 9).await.unwrap(),
        remembered[5..9],
        "a range from the middle"
    );
}

const CRASH_CHILD: &str = "TOOLGATE_SUITE_CRASH_CHILD";
const CRASHED_APPENDS: u64 = 100;

/// A gateway killed (kill -9) with sequenced receipts not yet in the table
/// loses none of them: the next process to open the ledger (a plain one, as
/// the CLI's) integrates them before anything else; a frame the kill tore
/// is dropped (its append never returned, so no answer waited on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequenced_receipts_outlive_a_killed_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "crash_child_appends_then_is_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "the child was killed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sequence = path.with_extension("sqlite3.sequence");
    let held = std::fs::read(&sequence).unwrap();
    assert!(
        stdout.contains("appended 100") && !held.is_empty(),
        "the child died with frames not yet integrated: {stdout}"
    );
    // A torn frame after the whole ones, as a kill mid-write leaves.
    let mut torn = held.clone();
    torn.extend_from_slice(&held[..held.len().min(60)]);
    std::fs::write(&sequence, &torn).unwrap();

    let cli = SqliteLedger::open(&path).unwrap();
    assert_eq!(
        cli.log_size().await.unwrap(),
        CRASHED_APPENDS,
        "every appended receipt is in the log"
    );
    let key = receipt_key(9);
    for (i, r) in cli.receipts(0, 1_000).await.unwrap().iter().enumerate() {
        let signed = LoggedReceipt::from_json(r.logged.as_bytes(), JsonLimits::default()).unwrap();
        assert_eq!(
            (r.log_index, signed.receipt.log_index, signed.receipt.tool.as_str()),
            (i as u64, i as u64, format!("t{i}").as_str())
        );
        receipt::verify(&signed, &key.verifying_key()).unwrap();
    }
    assert_eq!(std::fs::metadata(&sequence).unwrap().len(), 0, "integrated, the file is emptied");
    // The log carries on from there, for the CLI and for the next gateway.
    assert_eq!(
        cli.append_receipts(vec![draft(&key, "after", None)]).await.unwrap(),
        vec![CRASHED_APPENDS]
    );
    drop(cli);
    let gateway = SqliteLedger::open_sequencing(&path).unwrap();
    assert_eq!(
        gateway.append_receipts(vec![draft(&key, "next", None)]).await.unwrap(),
        vec![CRASHED_APPENDS + 1]
    );
    assert_eq!(gateway.log_size().await.unwrap(), CRASHED_APPENDS + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of sequenced_receipts_outlive_a_killed_process"]
async fn crash_child_appends_then_is_killed() {
    let path =
        std::path::PathBuf::from(std::env::var(CRASH_CHILD).expect("run by its parent test"));
    let ledger = SqliteLedger::open_sequencing(&path).unwrap();
    let key = receipt_key(9);
    for i in 0..CRASHED_APPENDS {
        assert_eq!(
            ledger.append_receipts(vec![draft(&key, &format!("t{i}"), None)]).await.unwrap(),
            vec![i]
        );
    }
    println!("appended {CRASHED_APPENDS}");
    // kill -9 of itself: no destructor, no writer thread gets to integrate.
    std::process::Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(10));
    unreachable!("killed");
}

// The fleet: what replicas sharing one ledger agree on.

async fn replicas_count_while_they_beat_and_go_when_they_stop(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    assert_eq!(a.heartbeat("rep_a", 0, 0, 3_000).await.unwrap(), 1);
    assert_eq!(
        b.heartbeat("rep_b", 100, 100, 3_000).await.unwrap(),
        2,
        "a second replica on the same store"
    );
    assert_eq!(a.heartbeat("rep_a", 0, 1_000, 3_000).await.unwrap(), 2, "a beat again counts once");
    assert_eq!(
        a.heartbeat("rep_a", 0, 3_200, 3_000).await.unwrap(),
        1,
        "b, silent for more than the lease, is gone"
    );
    assert_eq!(b.heartbeat("rep_b", 100, 3_300, 3_000).await.unwrap(), 2, "b beats again: back");
    a.leave("rep_a").await.unwrap();
    assert_eq!(b.heartbeat("rep_b", 100, 3_400, 3_000).await.unwrap(), 1, "a left: gone at once");
}

fn session(id: &str, subject: &str, until: i64) -> StoredSession {
    StoredSession {
        id_sha256: id.into(),
        tenant: "atlas".into(),
        subject: subject.into(),
        caller: format!("{{\"name\":\"{subject}\"}}"),
        created_ms: 0,
        expires_ms: until,
    }
}

async fn sessions_end_at_their_deadline_and_everywhere_at_sign_out(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    a.open_session(session("s1", "dana", 1_000)).await.unwrap();
    a.open_session(session("s2", "dana", 2_000)).await.unwrap();
    a.open_session(session("s3", "erin", 2_000)).await.unwrap();
    assert_eq!(
        b.session("s1", 999).await.unwrap(),
        Some(session("s1", "dana", 1_000)),
        "another replica serves it"
    );
    assert_eq!(b.session("s1", 1_000).await.unwrap(), None, "alive at its deadline");
    assert_eq!(b.session("nope", 0).await.unwrap(), None);
    assert!(b.end_session("s2").await.unwrap());
    assert!(!b.end_session("s2").await.unwrap(), "ended twice");
    assert_eq!(a.session("s2", 10).await.unwrap(), None, "signed out on one replica, out on all");
    a.open_session(session("s4", "dana", 2_000)).await.unwrap();
    assert_eq!(
        b.end_sessions_of("atlas", "dana").await.unwrap(),
        2,
        "s1 (ended, not yet swept) and s4"
    );
    assert_eq!(a.session("s4", 10).await.unwrap(), None);
    assert!(a.session("s3", 10).await.unwrap().is_some(), "another person's session stays");
    assert!(a.open_session(session("s3", "erin", 3_000)).await.is_err(), "an id is one session");
}

fn notices_of(id: &str) -> Vec<NewNotice> {
    ["ops", "slack"]
        .iter()
        .map(|w| NewNotice {
            id: format!("dlv_{id}_{w}"),
            webhook: w.to_string(),
            body: format!("{{\"approval\":\"{id}\"}}"),
        })
        .collect()
}

async fn notices_commit_with_their_approval_and_each_claim_takes_them_once(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    let open = |id: &str| NewApproval {
        id: id.into(),
        binding: binding('a'),
        arguments: json!({}),
        reason: "r".into(),
        rules: vec![],
        now_ms: 100,
        ttl_ms: 60_000,
        receipt: None,
        subject: "agent@atlas.example".into(),
        operation_key: None,
        notices: notices_of(id),
    };
    a.create_approval(open("apr_n")).await.unwrap();
    // The same id again fails, and leaves no notice of its own behind.
    let mut again = open("apr_n");
    again.notices =
        vec![NewNotice { id: "dlv_orphan".into(), webhook: "ops".into(), body: "{}".into() }];
    assert!(a.create_approval(again).await.is_err());
    assert_eq!(
        a.count_notices(NoticeState::Pending).await.unwrap(),
        2,
        "the failed opening wrote no notice"
    );
    assert!(
        a.claim_notices(99, 10_000, 10).await.unwrap().is_empty(),
        "not due before the approval was opened"
    );
    // Two replicas claim at once: each notice is taken by one.
    let (x, y) = tokio::join!(a.claim_notices(100, 10_000, 10), b.claim_notices(100, 10_000, 10));
    let mut taken: Vec<String> = x.unwrap().into_iter().chain(y.unwrap()).map(|n| n.id).collect();
    taken.sort();
    assert_eq!(taken, ["dlv_apr_n_ops", "dlv_apr_n_slack"]);
    assert!(
        b.claim_notices(5_000, 20_000, 10).await.unwrap().is_empty(),
        "claimed: nobody else takes them"
    );
    // The claimer died: once its claim lapses, another replica delivers.
    let lapsed = b.claim_notices(10_000, 40_000, 10).await.unwrap();
    assert_eq!(lapsed.len(), 2);
    assert_eq!(lapsed[0].approval_id, "apr_n");
    b.notice_attempted("dlv_apr_n_ops", Attempt::Delivered, Some(204), None, 10_010).await.unwrap();
    b.notice_attempted(
        "dlv_apr_n_slack",
        Attempt::Retry { next_ms: 10_500 },
        Some(503),
        None,
        10_010,
    )
    .await
    .unwrap();
    assert!(a.claim_notices(10_499, 50_000, 10).await.unwrap().is_empty(), "backing off");
    let next = a.claim_notices(10_500, 50_000, 10).await.unwrap();
    assert_eq!((next.len(), next[0].attempts, next[0].last_status), (1, 1, Some(503)));
    // A late answer of the delivered one changes nothing.
    a.notice_attempted("dlv_apr_n_ops", Attempt::Dead, None, Some("late".into()), 10_600)
        .await
        .unwrap();
    assert_eq!(a.count_notices(NoticeState::Delivered).await.unwrap(), 1);
    assert_eq!(a.prune_notices(10_010).await.unwrap(), 0, "delivered at 10,010: not before it");
    assert_eq!(a.prune_notices(10_011).await.unwrap(), 1);
    assert_eq!(a.notices(None, None, 10).await.unwrap().len(), 1, "the pending one stays");
    assert_eq!(
        a.notices(Some("atlas"), None, 10).await.unwrap().len(),
        1,
        "its approval's tenant sees it"
    );
    assert!(
        a.notices(Some("globex"), None, 10).await.unwrap().is_empty(),
        "another tenant does not"
    );
}

async fn a_dead_notice_waits_for_an_operator_and_goes_again(s: Store) {
    let l = &*s.ledger;
    let new = NewApproval {
        id: "apr_d".into(),
        binding: binding('a'),
        arguments: json!({}),
        reason: "r".into(),
        rules: vec![],
        now_ms: 0,
        ttl_ms: 60_000,
        receipt: None,
        subject: "agent@atlas.example".into(),
        operation_key: None,
        notices: notices_of("apr_d"),
    };
    l.create_approval(new).await.unwrap();
    l.claim_notices(0, 1_000, 10).await.unwrap();
    l.notice_attempted("dlv_apr_d_ops", Attempt::Dead, None, Some("connection refused".into()), 50)
        .await
        .unwrap();
    assert!(
        l.claim_notices(2_000, 3_000, 10).await.unwrap().iter().all(|n| n.id != "dlv_apr_d_ops"),
        "a dead notice is never claimed"
    );
    let dead = l.notices(None, Some(NoticeState::Dead), 10).await.unwrap();
    assert_eq!(
        (dead.len(), dead[0].attempts, dead[0].last_error.as_deref()),
        (1, 1, Some("connection refused"))
    );
    assert_eq!(l.count_notices(NoticeState::Dead).await.unwrap(), 1);
    assert!(
        matches!(
            l.redeliver_notice("dlv_apr_d_ops", Some("globex"), 4_000).await,
            Err(LedgerError::NoticeNotFound(_))
        ),
        "another tenant's is not found"
    );
    let again = l.redeliver_notice("dlv_apr_d_ops", Some("atlas"), 4_000).await.unwrap();
    assert_eq!((again.state, again.attempts, again.next_ms), (NoticeState::Pending, 0, 4_000));
    assert!(
        matches!(
            l.redeliver_notice("dlv_apr_d_ops", None, 4_001).await,
            Err(LedgerError::NoticeNotFound(_))
        ),
        "only a dead one goes again"
    );
    assert!(
        l.claim_notices(4_000, 5_000, 10).await.unwrap().iter().any(|n| n.id == "dlv_apr_d_ops"),
        "due again, under the same delivery id"
    );
}

async fn a_decision_wakes_every_listener_of_the_store(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    ask(&*a, "apr_w", &binding('a'), 0).await;
    let mut here = a.decisions().expect("the deciding ledger tells");
    let mut there = b.decisions().expect("a ledger tells of decisions");
    let backend = a.backend();
    // PostgreSQL's listener says when it listens ("*"); wait for it.
    async fn next(rx: &mut tokio::sync::broadcast::Receiver<String>) -> String {
        loop {
            let id = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                .await
                .expect("a wake-up within 10 s")
                .unwrap();
            if id != toolgate_ledger::EVERY_APPROVAL {
                return id;
            }
        }
    }
    if backend == "postgres" {
        for rx in [&mut here, &mut there] {
            assert_eq!(
                tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                    .await
                    .unwrap()
                    .unwrap(),
                toolgate_ledger::EVERY_APPROVAL
            );
        }
    }
    a.decide_approval("apr_w", true, as_("dana", "dana@atlas.example"), "ok", 10).await.unwrap();
    assert_eq!(next(&mut here).await, "apr_w");
    if backend == "postgres" {
        assert_eq!(next(&mut there).await, "apr_w", "another replica hears it at once");
    }
}

// People's own grants at upstream servers (identity mode "oauth").

fn grant(subject: &str, server: &str, sealed: &[u8], expires_ms: i64) -> Connection {
    Connection {
        tenant: "atlas".into(),
        subject: subject.into(),
        server: server.into(),
        sealed: sealed.to_vec(),
        expires_ms,
        updated_ms: 10,
    }
}

async fn a_grant_is_kept_per_person_and_server_and_every_replica_reads_it(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    assert_eq!(a.connection("atlas", "dana", "github").await.unwrap(), None);
    a.put_connection(grant("dana", "github", b"v1", 1_000)).await.unwrap();
    a.put_connection(grant("dana", "linear", b"l1", 2_000)).await.unwrap();
    a.put_connection(Connection {
        tenant: "globex".into(),
        ..grant("dana", "github", b"g1", 3_000)
    })
    .await
    .unwrap();
    assert_eq!(
        b.connection("atlas", "dana", "github").await.unwrap(),
        Some(grant("dana", "github", b"v1", 1_000)),
        "another replica reads it"
    );
    // Connecting again replaces the grant.
    b.put_connection(Connection { updated_ms: 20, ..grant("dana", "github", &[0, 255, 7], 5_000) })
        .await
        .unwrap();
    assert_eq!(
        a.connection("atlas", "dana", "github").await.unwrap(),
        Some(Connection { updated_ms: 20, ..grant("dana", "github", &[0, 255, 7], 5_000) }),
        "the bytes kept exactly"
    );
    assert_eq!(
        a.connection("atlas", "erin", "github").await.unwrap(),
        None,
        "another person's is not found"
    );
    let keys = |list: Vec<Connection>| {
        list.into_iter()
            .map(|c| format!("{}/{}/{}", c.tenant, c.subject, c.server))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(a.connections(Some("atlas")).await.unwrap()),
        ["atlas/dana/github", "atlas/dana/linear"]
    );
    assert_eq!(
        keys(a.connections(None).await.unwrap()),
        ["atlas/dana/github", "atlas/dana/linear", "globex/dana/github"],
        "an operator sees every tenant's"
    );
    assert!(b.delete_connection("atlas", "dana", "github").await.unwrap());
    assert!(!a.delete_connection("atlas", "dana", "github").await.unwrap(), "disconnected twice");
    assert_eq!(a.connection("atlas", "dana", "github").await.unwrap(), None);
    assert!(
        a.connection("globex", "dana", "github").await.unwrap().is_some(),
        "the same person's grant in another tenant stays"
    );
}

async fn one_refresh_at_a_time_and_a_lapsed_lease_is_taken_over(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    let key = ("atlas", "dana", "github");
    a.put_connection(grant("dana", "github", b"v1", 1_000)).await.unwrap();
    // Two replicas at once: one refreshes.
    let (x, y) = tokio::join!(
        a.claim_refresh(key.0, key.1, key.2, "rep_a", 100, 1_100),
        b.claim_refresh(key.0, key.1, key.2, "rep_b", 100, 1_100)
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_ne!(x, y, "exactly one claim wins");
    let (first, second) = if x { ("rep_a", "rep_b") } else { ("rep_b", "rep_a") };
    assert!(
        !b.claim_refresh(key.0, key.1, key.2, second, 1_099, 2_099).await.unwrap(),
        "held until it lapses"
    );
    assert!(
        a.claim_refresh(key.0, key.1, key.2, first, 1_000, 1_500).await.unwrap(),
        "its holder extends it"
    );
    assert!(
        !b.claim_refresh(key.0, key.1, key.2, second, 1_400, 2_400).await.unwrap(),
        "extended: still held"
    );
    assert!(
        a.claim_refresh("atlas", "dana", "linear", second, 1_400, 2_400).await.unwrap(),
        "another grant's lease is its own"
    );
    // The holder stalled: its lease lapsed and the other took over.
    assert!(
        b.claim_refresh(key.0, key.1, key.2, second, 1_500, 2_500).await.unwrap(),
        "lapsed at its deadline"
    );
    assert!(
        !a.finish_refresh(
            key.0,
            key.1,
            key.2,
            first,
            Some(grant("dana", "github", b"stale", 9_000))
        )
        .await
        .unwrap(),
        "the lease was lost"
    );
    assert_eq!(
        b.connection(key.0, key.1, key.2).await.unwrap().unwrap().sealed,
        b"v1",
        "and nothing was written"
    );
    assert!(
        b.finish_refresh(key.0, key.1, key.2, second, Some(grant("dana", "github", b"v2", 4_000)))
            .await
            .unwrap()
    );
    assert_eq!(
        a.connection(key.0, key.1, key.2).await.unwrap(),
        Some(grant("dana", "github", b"v2", 4_000))
    );
    assert!(
        !b.finish_refresh(key.0, key.1, key.2, second, Some(grant("dana", "github", b"v3", 5_000)))
            .await
            .unwrap(),
        "finished once"
    );
    assert_eq!(a.connection(key.0, key.1, key.2).await.unwrap().unwrap().sealed, b"v2");
    // Released: the next refresh may start at once, even before the old deadline.
    assert!(a.claim_refresh(key.0, key.1, key.2, first, 1_600, 2_600).await.unwrap());
    assert!(
        a.finish_refresh(key.0, key.1, key.2, first, None).await.unwrap(),
        "a refresh that changed nothing releases the lease"
    );
    assert_eq!(
        a.connection(key.0, key.1, key.2).await.unwrap().unwrap().sealed,
        b"v2",
        "and keeps the grant"
    );
    assert!(b.claim_refresh(key.0, key.1, key.2, second, 1_700, 2_700).await.unwrap());
}

async fn a_disconnect_or_a_new_grant_ends_a_refresh_in_flight(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    a.put_connection(grant("dana", "github", b"v1", 1_000)).await.unwrap();
    assert!(a.claim_refresh("atlas", "dana", "github", "rep_a", 0, 10_000).await.unwrap());
    assert!(b.delete_connection("atlas", "dana", "github").await.unwrap());
    assert!(
        !a.finish_refresh(
            "atlas",
            "dana",
            "github",
            "rep_a",
            Some(grant("dana", "github", b"v2", 2_000))
        )
        .await
        .unwrap(),
        "the refresh lost its lease"
    );
    assert_eq!(
        a.connection("atlas", "dana", "github").await.unwrap(),
        None,
        "a disconnected grant never comes back"
    );
    // The person connects again while a refresh of the old grant runs.
    a.put_connection(grant("dana", "github", b"old", 1_000)).await.unwrap();
    assert!(a.claim_refresh("atlas", "dana", "github", "rep_a", 0, 10_000).await.unwrap());
    b.put_connection(grant("dana", "github", b"new", 3_000)).await.unwrap();
    assert!(
        !a.finish_refresh(
            "atlas",
            "dana",
            "github",
            "rep_a",
            Some(grant("dana", "github", b"old-refreshed", 2_000))
        )
        .await
        .unwrap()
    );
    assert_eq!(
        a.connection("atlas", "dana", "github").await.unwrap().unwrap().sealed,
        b"new",
        "the new grant stands"
    );
    // A replacement is the same person's grant at the same server, or refused.
    assert!(b.claim_refresh("atlas", "dana", "github", "rep_b", 0, 10_000).await.unwrap());
    assert!(
        b.finish_refresh(
            "atlas",
            "dana",
            "github",
            "rep_b",
            Some(grant("erin", "github", b"x", 1))
        )
        .await
        .is_err()
    );
    assert_eq!(b.connection("atlas", "erin", "github").await.unwrap(), None, "nothing written");
    assert!(
        !a.claim_refresh("atlas", "dana", "github", "rep_a", 1, 10_001).await.unwrap(),
        "and the lease is still held"
    );
}

async fn an_oauth_state_is_taken_once_and_not_after_it_expires(s: Store) {
    let (a, b) = (s.ledger.clone(), s.second().await);
    a.put_oauth_state("st1", b"sealed-1".to_vec(), 1_000).await.unwrap();
    assert!(
        a.put_oauth_state("st1", b"other".to_vec(), 2_000).await.is_err(),
        "an id is one state"
    );
    assert_eq!(
        b.take_oauth_state("st1", 999).await.unwrap().as_deref(),
        Some(&b"sealed-1"[..]),
        "another replica takes it"
    );
    assert_eq!(a.take_oauth_state("st1", 999).await.unwrap(), None, "once");
    assert_eq!(a.take_oauth_state("nope", 0).await.unwrap(), None);
    // Expired: not returned, and gone.
    a.put_oauth_state("st2", b"sealed-2".to_vec(), 1_000).await.unwrap();
    assert_eq!(a.take_oauth_state("st2", 1_000).await.unwrap(), None, "dead at its deadline");
    assert_eq!(a.take_oauth_state("st2", 0).await.unwrap(), None, "and deleted as it was found");
    // Takers racing on two replicas: exactly one gets it.
    for round in 0..8 {
        let id = format!("race{round}");
        a.put_oauth_state(&id, vec![round], 1_000).await.unwrap();
        let takers = [a.clone(), b.clone()].map(|l| {
            let id = id.clone();
            tokio::spawn(async move { l.take_oauth_state(&id, 10).await.unwrap() })
        });
        let mut got = Vec::new();
        for t in takers {
            got.extend(t.await.unwrap());
        }
        assert_eq!(got, [vec![round]], "round {round}");
    }
    // Requests never finished go when they expire.
    for (id, until) in [("p1", 100), ("p2", 200), ("p3", 300)] {
        a.put_oauth_state(id, vec![1], until).await.unwrap();
    }
    assert_eq!(b.prune_oauth_states(199).await.unwrap(), 1);
    assert_eq!(b.prune_oauth_states(200).await.unwrap(), 1, "expired at its deadline");
    assert_eq!(
        a.take_oauth_state("p3", 250).await.unwrap(),
        Some(vec![1]),
        "an unexpired one stays"
    );
}
