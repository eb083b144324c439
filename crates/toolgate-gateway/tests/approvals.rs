//! Level 2–3: callers, Cedar policy and approvals through the running
//! gateway over raw Streamable HTTP, with the Atlas parts and notices
//! servers behind it: 401 without credentials, tenant keys refused, a
//! pending approval decided out of band through the admin API, the
//! re-issued call dispatched exactly once, and every way an approval must
//! not carry another call (changed bytes, tampering, reuse, races, expiry,
//! denial, self-approval).

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode};

const ORDER: &str = "parts__raise_parts_order";

fn order(quantity: u32) -> Value {
    let data = toolgate_atlas::dataset();
    let ticket = data
        .tickets
        .iter()
        .find(|t| t.status == toolgate_atlas::data::Status::Open && t.model_variant == "AC-250-S")
        .unwrap();
    let part = data
        .parts
        .iter()
        .find(|p| p.category == "thermostatic-valve" && p.fits("AC-250-S"))
        .unwrap();
    json!({"part_no": part.part_no, "quantity": quantity, "ticket_id": ticket.ticket_id})
}

/// A tools/call with extra params (requestState, inputResponses) and an
/// optional token, from a client that declared elicitation (so a call that
/// still waits gets an `input_required` round with a requestState).
async fn call_as(
    url: &str,
    token: Option<&str>,
    name: &str,
    arguments: &Value,
    extra: Value,
) -> Value {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    if let Value::Object(more) = extra {
        for (k, v) in more {
            params[k.as_str()] = v;
        }
    }
    let mut req = request(url, json!(11), "tools/call", params);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    answer_of(&resp.text().await.unwrap())["result"].clone()
}

fn state(result: &Value) -> String {
    result["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("no requestState: {result}"))
        .to_string()
}

fn approval_id(result: &Value) -> String {
    result["_meta"]["io.toolgate/approval"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval: {result}"))
        .to_string()
}

fn reason(result: &Value) -> &str {
    result["structuredContent"]["reason"].as_str().unwrap_or("")
}

async fn decide(url: &str, token: &str, id: &str, verdict: &str) -> (u16, Value) {
    admin(
        url,
        Some(token),
        "POST",
        &format!("/admin/approvals/{id}/{verdict}"),
        Some(json!({"reason": "checked by the test"})),
    )
    .await
}

fn orders(h: &Harness) -> usize {
    lines(&h.sandbox().join("orders.jsonl"))
}

#[tokio::test]
async fn requests_without_valid_credentials_get_401_unless_anonymous_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    write_tokens(dir.path());
    let path = dir.path().join("toolgate.toml");
    let only_dana = CALLERS.split("[callers.sam]").next().unwrap().replace(
        "[callers.agent]\ntenant = \"atlas\"\nroles = [\"agent\"]\nanonymous = true\n",
        "",
    );
    std::fs::write(&path, only_dana).unwrap();
    let gw = Gateway::start(Config::load(&path).unwrap(), Mode::Serve).await.unwrap();
    let (url, stop) = serve_gateway(gw.clone()).await;
    let resp = request(&url, json!(1), "tools/list", json!({})).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer realm=\"toolgate\"");
    assert!(resp.text().await.unwrap().contains("Authorization: Bearer"));
    let wrong = request(&url, json!(1), "tools/list", json!({}))
        .bearer_auth("dana-token-0123456789abcdeX")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let wrong_text = wrong.text().await.unwrap();
    assert!(!wrong_text.contains("dana-token"), "a token never echoes: {wrong_text}");
    let ok = request(&url, json!(1), "tools/list", json!({}))
        .bearer_auth(DANA_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    stop.cancel();
    gw.stop();
}

#[tokio::test]
async fn arguments_that_name_a_tenant_are_refused_before_anything_runs() {
    let h = start("").await;
    let r = call_as(
        &h.url,
        None,
        "tickets__get_ticket",
        &json!({"ticket_id": "SR-20031", "filter": {"Tenant_Id": "other"}}),
        json!({}),
    )
    .await;
    assert_eq!(reason(&r), "tenant_in_arguments", "{r}");
    assert_eq!(r["structuredContent"]["action"], "correct");
    assert_eq!(r["structuredContent"]["violations"][0]["path"], "/filter/Tenant_Id");
}

#[tokio::test]
async fn an_approved_call_runs_exactly_once_and_only_as_approved() {
    let h = start("").await;
    let eight = order(8);
    let first = call_as(&h.url, None, ORDER, &eight, json!({})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let (id, s) = (approval_id(&first), state(&first));
    assert_eq!(orders(&h), 0);

    // Approvers see the exact call; the agent cannot even look.
    let (status, _) = admin(&h.url, None, "GET", "/admin/approvals", None).await;
    assert_eq!(status, 403, "the anonymous agent has no approver role");
    let (status, listed) =
        admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/approvals?state=pending", None).await;
    assert_eq!(status, 200);
    let pending = &listed["approvals"][0];
    assert_eq!(
        (pending["id"].as_str(), pending["caller"].as_str(), pending["tool"].as_str()),
        (Some(id.as_str()), Some("agent"), Some("raise_parts_order"))
    );
    assert_eq!(pending["arguments"], eight);
    assert_eq!(
        pending["proposal_sha256"],
        first["_meta"]["io.toolgate/approval"]["proposal_sha256"]
    );

    // Re-issued before anyone decided: still waiting, same approval.
    let waiting = call_as(&h.url, None, ORDER, &eight, json!({"requestState": s})).await;
    assert_eq!(
        (waiting["resultType"].as_str(), approval_id(&waiting)),
        (Some("input_required"), id.clone())
    );

    let (status, decided) = decide(&h.url, DANA_TOKEN, &id, "approve").await;
    assert_eq!(
        (status, decided["state"].as_str(), decided["decided_by"].as_str()),
        (200, Some("approved"), Some("dana"))
    );
    let (status, _) = decide(&h.url, DANA_TOKEN, &id, "deny").await;
    assert_eq!(status, 409, "a decided approval cannot be decided again");

    // A tampered state, and a changed quantity under the approval: nothing runs.
    let mut bytes = s.clone().into_bytes();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = call_as(
        &h.url,
        None,
        ORDER,
        &eight,
        json!({"requestState": String::from_utf8(bytes).unwrap()}),
    )
    .await;
    assert_eq!(reason(&tampered), "request_state_invalid", "{tampered}");
    let nine = call_as(&h.url, None, ORDER, &order(9), json!({"requestState": s})).await;
    assert_eq!(reason(&nine), "approval_missing_or_mismatched", "{nine}");
    assert_eq!(orders(&h), 0);

    // Eight concurrent re-issues of the approved call: one dispatch. The
    // others get its recorded result, or "in progress" while it runs.
    let reissues = (0..8).map(|_| {
        let (url, args, s) = (h.url.clone(), eight.clone(), s.clone());
        tokio::spawn(async move {
            call_as(&url, None, ORDER, &args, json!({"requestState": s, "inputResponses": {}}))
                .await
        })
    });
    let results: Vec<Value> =
        futures_util::future::join_all(reissues).await.into_iter().map(Result::unwrap).collect();
    let ran: Vec<&Value> =
        results.iter().filter(|r| r["structuredContent"]["order_id"].is_string()).collect();
    assert!(!ran.is_empty(), "{results:?}");
    let fresh: Vec<&&Value> = ran
        .iter()
        .filter(|r| r["_meta"]["io.toolgate/operation"]["replayed"] == json!(false))
        .collect();
    assert_eq!(fresh.len(), 1, "one dispatch: {results:?}");
    assert!(
        ran.iter().all(
            |r| r["structuredContent"]["order_id"] == fresh[0]["structuredContent"]["order_id"]
        ),
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .filter(|r| !r["structuredContent"]["order_id"].is_string())
            .all(|r| reason(r) == "operation_in_progress"),
        "{results:?}"
    );
    assert_eq!(orders(&h), 1);
    // Afterwards, the same re-issue gets the recorded result, marked a replay.
    let replay = call_as(&h.url, None, ORDER, &eight, json!({"requestState": s})).await;
    assert_eq!(
        replay["structuredContent"]["order_id"], fresh[0]["structuredContent"]["order_id"],
        "{replay}"
    );
    assert_eq!(replay["_meta"]["io.toolgate/operation"]["replayed"], json!(true), "{replay}");
    assert_eq!(orders(&h), 1);
    let (_, used) =
        admin(&h.url, Some(DANA_TOKEN), "GET", &format!("/admin/approvals/{id}"), None).await;
    assert_eq!(used["state"], "consumed");

    // A denial is terminal for that exact proposal.
    let three = order(3);
    let asked = call_as(&h.url, None, ORDER, &three, json!({})).await;
    let denied_id = approval_id(&asked);
    assert_eq!(decide(&h.url, DANA_TOKEN, &denied_id, "deny").await.0, 200);
    let denied = call_as(&h.url, None, ORDER, &three, json!({"requestState": state(&asked)})).await;
    assert_eq!(
        (reason(&denied), denied["structuredContent"]["action"].as_str()),
        ("approval_denied", Some("refused"))
    );
    let fresh = call_as(&h.url, None, ORDER, &three, json!({})).await;
    assert_eq!(reason(&fresh), "approval_denied", "{fresh}");
    assert_eq!(orders(&h), 1);
}

#[tokio::test]
async fn an_approver_of_another_tenant_finds_nothing_of_this_one() {
    const MALLORY: &str = "mallory-token-0123456789abcdef";
    unsafe { std::env::set_var("TOOLGATE_TEST_MALLORY", MALLORY) };
    let mallory = "[callers.mallory]\ntenant = \"other\"\nroles = [\"approver\"]\ntoken_env = \"TOOLGATE_TEST_MALLORY\"\n";
    let h = start_with("", mallory, &[]).await;
    let asked = call_as(&h.url, None, ORDER, &order(3), json!({})).await;
    let id = approval_id(&asked);
    // Not listed, not shown, not decidable: "not found", not "forbidden".
    let (status, listed) = admin(&h.url, Some(MALLORY), "GET", "/admin/approvals", None).await;
    assert_eq!((status, listed["approvals"].as_array().map(Vec::len)), (200, Some(0)), "{listed}");
    assert_eq!(
        admin(&h.url, Some(MALLORY), "GET", &format!("/admin/approvals/{id}"), None).await.0,
        404
    );
    assert_eq!(decide(&h.url, MALLORY, &id, "approve").await.0, 404);
    let waiting =
        call_as(&h.url, None, ORDER, &order(3), json!({"requestState": state(&asked)})).await;
    assert_eq!(waiting["resultType"], "input_required", "still waiting: {waiting}");
    // Its own tenant's approver sees and decides it.
    let (_, listed) = admin(&h.url, Some(DANA_TOKEN), "GET", "/admin/approvals", None).await;
    assert!(
        listed["approvals"].as_array().unwrap().iter().any(|a| a["id"] == id.as_str()),
        "{listed}"
    );
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 200);
    // Operations too are the tenant's own.
    let ran = call_as(&h.url, None, ORDER, &order(3), json!({"requestState": state(&asked)})).await;
    let op = ran["_meta"]["io.toolgate/operation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{ran}"))
        .to_string();
    let (_, ops) = admin(&h.url, Some(MALLORY), "GET", "/admin/operations", None).await;
    assert_eq!(ops["operations"].as_array().map(Vec::len), Some(0), "{ops}");
    assert_eq!(
        admin(&h.url, Some(MALLORY), "GET", &format!("/admin/operations/{op}"), None).await.0,
        404
    );
    assert_eq!(
        admin(
            &h.url,
            Some(MALLORY),
            "POST",
            &format!("/admin/operations/{op}/reconcile"),
            Some(json!({}))
        )
        .await
        .0,
        404
    );
    assert_eq!(
        admin(&h.url, Some(DANA_TOKEN), "GET", &format!("/admin/operations/{op}"), None).await.0,
        200
    );
}

#[tokio::test]
async fn nobody_approves_their_own_call_under_another_credential() {
    // dana's bot asks; dana, the same person with her approver token, may not decide it.
    const BOT_TOKEN: &str = "dana-bot-token-0123456789abcdef";
    unsafe { std::env::set_var("TOOLGATE_TEST_DANA_BOT", BOT_TOKEN) };
    let bot = "[callers.dana_bot]\nsubject = \"dana@atlas.example\"\ntenant = \"atlas\"\nroles = \
        [\"agent\"]\ntoken_env = \"TOOLGATE_TEST_DANA_BOT\"\n";
    let h = start_with("", bot, &[]).await;
    let asked = call_as(&h.url, Some(BOT_TOKEN), ORDER, &order(4), json!({})).await;
    let id = approval_id(&asked);
    let (status, body) = decide(&h.url, DANA_TOKEN, &id, "approve").await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("cannot approve"), "{body}");
    // Someone else can.
    assert_eq!(decide(&h.url, SAM_TOKEN, &id, "approve").await.0, 200);
    let ran =
        call_as(&h.url, Some(BOT_TOKEN), ORDER, &order(4), json!({"requestState": state(&asked)}))
            .await;
    assert!(ran["structuredContent"]["order_id"].is_string(), "{ran}");
}

#[tokio::test]
async fn nobody_approves_their_own_call() {
    let h = start("").await;
    let asked = call_as(&h.url, Some(SAM_TOKEN), ORDER, &order(7), json!({})).await;
    let id = approval_id(&asked);
    let (status, body) = decide(&h.url, SAM_TOKEN, &id, "approve").await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("cannot approve"), "{body}");
    // Another approver can; the re-issue must come from the same caller.
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 200);
    let other =
        call_as(&h.url, None, ORDER, &order(7), json!({"requestState": state(&asked)})).await;
    assert_eq!(
        reason(&other),
        "approval_missing_or_mismatched",
        "another caller cannot ride on it: {other}"
    );
    let ran =
        call_as(&h.url, Some(SAM_TOKEN), ORDER, &order(7), json!({"requestState": state(&asked)}))
            .await;
    assert!(ran["structuredContent"]["order_id"].is_string(), "{ran}");
}

#[tokio::test]
async fn approvals_expire_undecided_and_unused() {
    let h = start("approval_ttl_ms = 400").await;
    let args = order(6);
    let first = call_as(&h.url, None, ORDER, &args, json!({})).await;
    let id = approval_id(&first);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 409, "too late to decide");
    let expired = call_as(&h.url, None, ORDER, &args, json!({"requestState": state(&first)})).await;
    assert_eq!(reason(&expired), "approval_expired", "{expired}");
    // A fresh call opens a fresh approval.
    let again = call_as(&h.url, None, ORDER, &args, json!({})).await;
    let fresh = approval_id(&again);
    assert_ne!(fresh, id);
    // Approved, but not used in time.
    assert_eq!(decide(&h.url, DANA_TOKEN, &fresh, "approve").await.0, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = call_as(&h.url, None, ORDER, &args, json!({"requestState": state(&again)})).await;
    assert_eq!(reason(&late), "approval_expired", "{late}");
    assert_eq!(orders(&h), 0);
}

#[tokio::test]
async fn an_approval_past_its_expiry_shows_the_state_the_gateway_acts_on() {
    let h = start("approval_ttl_ms = 400").await;
    let asked = call_as(&h.url, None, ORDER, &order(5), json!({})).await;
    let id = approval_id(&asked);
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 200);
    let path = format!("/admin/approvals/{id}");
    let show = || admin(&h.url, Some(DANA_TOKEN), "GET", &path, None);
    assert_eq!(show().await.1["state"], "approved");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Not yet noted as expired in the store, but a re-issue would be refused: show that.
    let (status, shown) = show().await;
    assert_eq!((status, shown["state"].as_str()), (200, Some("expired")), "{shown}");
    let late =
        call_as(&h.url, None, ORDER, &order(5), json!({"requestState": state(&asked)})).await;
    assert_eq!(reason(&late), "approval_expired", "{late}");
}

#[tokio::test]
async fn a_legacy_client_waits_with_an_escalate_refusal_and_re_issues_the_same_call() {
    let h = start("").await;
    let legacy = |args: &Value| {
        reqwest::Client::new()
            .post(&h.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .body(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": ORDER, "arguments": args}}).to_string())
            .send()
    };
    let args = order(6);
    let first: Value = legacy(&args).await.unwrap().json().await.unwrap();
    let r = &first["result"]["structuredContent"];
    assert_eq!(
        (r["reason"].as_str(), r["action"].as_str()),
        (Some("approval_pending"), Some("escalate")),
        "{first}"
    );
    let id = r["approval_id"].as_str().unwrap().to_string();
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 200);
    let ran: Value = legacy(&args).await.unwrap().json().await.unwrap();
    assert!(ran["result"]["structuredContent"]["order_id"].is_string(), "{ran}");
    assert_eq!(orders(&h), 1);
}

#[tokio::test]
async fn the_policy_decides_by_arguments_and_a_forged_hint_changes_nothing() {
    let dir_files = [
        ("policy.cedar", include_str!("../../toolgate-demo/demo/policy.cedar")),
        ("policy.cedarschema", include_str!("../../toolgate-demo/demo/policy.cedarschema")),
    ];
    let h = start_with(
        "",
        &"\n[policy]\npolicies = \"policy.cedar\"\nschema = \
            \"policy.cedarschema\"\n[registry.\"notices__send_notice\"]\nclass = \
            \"requires_approval\"\n"
            .to_string(),
        &dir_files,
    )
    .await;
    let outside = call_as(
        &h.url,
        None,
        "notices__send_notice",
        &json!({"to": "outside@example.test", "body": "Build passed."}),
        json!({}),
    )
    .await;
    let r = &outside["structuredContent"];
    assert_eq!(
        (r["decision"].as_str(), r["reason"].as_str(), r["rules"][0].as_str()),
        (Some("deny"), Some("policy_forbids"), Some("no_exact_rule")),
        "{outside}"
    );
    let team = call_as(
        &h.url,
        None,
        "notices__send_notice",
        &json!({"to": "team@example.test", "body": "Build passed."}),
        json!({}),
    )
    .await;
    assert_eq!(team["_meta"]["io.toolgate/approval"]["rules"], json!(["exact_rule"]), "{team}");
    assert_eq!(lines(&h.sandbox().join("notices.jsonl")), 0);
    assert_eq!(lines(&h.sandbox().join("notice-calls.jsonl")), 0, "the tool was never called");
    // The policy version is the one recorded with the pending approval.
    assert_eq!(
        team["_meta"]["io.toolgate/approval"]["policy_version"],
        h.gateway.policy().version()
    );
}

#[tokio::test]
async fn a_policy_that_does_not_validate_stops_the_start_with_cedars_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("policy.cedarschema"),
        include_str!("../../toolgate-demo/demo/policy.cedarschema"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("policy.cedar"),
        "permit (principal, action == Action::\"call_tool\", resource) when { \
            context.arguments.colour == \"red\" };",
    )
    .unwrap();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(
        &path,
        format!(
            "[policy]\npolicies = \"policy.cedar\"\nschema = \"policy.cedarschema\"\n{ANONYMOUS}"
        ),
    )
    .unwrap();
    let err = Gateway::start(Config::load(&path).unwrap(), Mode::Serve)
        .await
        .err()
        .expect("the start must fail");
    let text = format!("{err:#}");
    assert!(text.contains("colour") && text.contains("policy.cedar"), "{text}");
}

/// Policy may read `context.approval`; an approval of another call must
/// never show there, or a policy that permits approved calls would let the
/// other call through.
#[tokio::test]
async fn an_approval_of_another_call_never_reaches_the_policy_context() {
    let policy = r#"
        @id("approved_orders_run")
        permit (principal, action == Action::"call_tool", resource == Tool::"parts__raise_parts_order")
        when { context.approval == "approved" };
    "#;
    let files = [
        ("policy.cedar", policy),
        ("policy.cedarschema", include_str!("../../toolgate-demo/demo/policy.cedarschema")),
    ];
    let h = start_with(
        "",
        "\n[policy]\npolicies = \"policy.cedar\"\nschema = \"policy.cedarschema\"\n",
        &files,
    )
    .await;
    let first = call_as(&h.url, None, ORDER, &order(8), json!({})).await;
    let id = approval_id(&first);
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 200);
    // The approved call's state, presented with other content: not approved for this call.
    let other =
        call_as(&h.url, None, ORDER, &order(9), json!({"requestState": state(&first)})).await;
    assert_eq!(reason(&other), "approval_missing_or_mismatched", "{other}");
    assert_eq!(orders(&h), 0);
    // With its own call, the policy sees `approved` and permits it.
    let ran = call_as(&h.url, None, ORDER, &order(8), json!({"requestState": state(&first)})).await;
    assert!(ran["structuredContent"]["order_id"].is_string(), "{ran}");
    assert_eq!(orders(&h), 1);
    // Using it used it up: the approval is spent, and presenting it again
    // gets the operation's recorded result, never a second order.
    let again =
        call_as(&h.url, None, ORDER, &order(8), json!({"requestState": state(&first)})).await;
    assert_eq!(
        again["structuredContent"]["order_id"], ran["structuredContent"]["order_id"],
        "{again}"
    );
    assert_eq!(again["_meta"]["io.toolgate/operation"]["replayed"], json!(true), "{again}");
    assert_eq!(orders(&h), 1);
}

/// An approved call whose dispatch never reached the upstream (it was down)
/// is not lost with its approval: re-issued once the upstream is back, it
/// runs once under the same operation.
#[tokio::test]
async fn an_approved_call_the_upstream_never_saw_runs_when_re_issued() {
    let mut h = start("").await;
    let eight = order(8);
    let first = call_as(&h.url, None, ORDER, &eight, json!({})).await;
    let id = approval_id(&first);
    assert_eq!(decide(&h.url, DANA_TOKEN, &id, "approve").await.0, 200);
    // The parts server goes down; the approved re-issue cannot be sent.
    let url = h.atlas_urls["parts"].clone();
    h.atlas_cancel["parts"].cancel();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let down = call_as(&h.url, None, ORDER, &eight, json!({"requestState": state(&first)})).await;
    assert_eq!(
        (reason(&down), down["structuredContent"]["action"].as_str()),
        ("upstream_unavailable", Some("retry")),
        "{down}"
    );
    assert_eq!(orders(&h), 0);
    // Back on the same address; the same re-issue runs it, once.
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let parts =
        toolgate_atlas::server(toolgate_atlas::ServerKind::Parts, Some(&h.sandbox())).unwrap();
    toolgate_atlas::serve::http(parts, addr, cancel.clone()).await.unwrap();
    h.atlas_cancel.insert("parts", cancel);
    let mut ran = Value::Null;
    for _ in 0..50 {
        ran = call_as(&h.url, None, ORDER, &eight, json!({"requestState": state(&first)})).await;
        if reason(&ran) != "upstream_unavailable" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(ran["structuredContent"]["order_id"].is_string(), "{ran}");
    assert_eq!(ran["_meta"]["io.toolgate/operation"]["key"], json!(format!("approval:{id}")));
    assert_eq!(orders(&h), 1);
    let again = call_as(&h.url, None, ORDER, &eight, json!({"requestState": state(&first)})).await;
    assert_eq!(
        again["structuredContent"]["order_id"], ran["structuredContent"]["order_id"],
        "{again}"
    );
    assert_eq!(orders(&h), 1);
}
