use std::sync::Arc;

use super::*;
use crate::identity::assertion::AssertionKey;
use toolgate_core::{Action, SeededEntropy};

fn config(identity: &str) -> Config {
    let text = format!(
        "[servers.desk]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.desk.identity]\n{identity}\n"
    );
    Config::parse(&text, std::path::Path::new("/tmp/toolgate.toml")).unwrap()
}

fn caller() -> Caller {
    Caller {
        name: "agent".into(),
        subject: "tech-jane".into(),
        tenant: "atlas".into(),
        roles: vec![],
    }
}

async fn presented(identity: &str) -> Result<Presented, Stop> {
    let identities =
        Identities::new(Arc::new(AssertionKey::derive(&[3; 32])), &[], Vec::new()).unwrap();
    let proposal = Proposal::new("desk", "lookup", serde_json::json!({}));
    let mut c = crate::stages::testing::call("desk__lookup", serde_json::json!({}));
    c.caller = Arc::new(caller());
    let (cx, call) = crate::stages::testing::split(&c);
    present(
        &identities,
        &config(identity),
        "desk",
        (&cx, &call),
        &proposal,
        || 1_800_000_000_000,
        &SeededEntropy::new([4; 32]),
    )
    .await
}

#[tokio::test]
async fn a_shared_server_gets_nothing_more_and_the_receipt_says_shared() {
    let p = presented("mode = \"shared\"").await.unwrap_or_else(|_| panic!("refused"));
    assert!(p.headers.is_empty() && p.meta.is_none());
    assert_eq!((p.identity.mode.as_str(), p.identity.subject.as_deref()), ("shared", None));
}

#[tokio::test]
async fn an_assertion_goes_in_its_header_and_the_receipt_names_the_person_not_the_token() {
    let p = presented("mode = \"assertion\"\nheader = \"X-Who\"\naudience = \"desk\"")
        .await
        .unwrap_or_else(|_| panic!("refused"));
    assert_eq!(p.headers.len(), 1);
    assert_eq!(p.headers[0].0, "X-Who");
    assert_eq!(p.headers[0].1.matches('.').count(), 2, "a compact JWS");
    let i = &p.identity;
    assert_eq!(
        (i.mode.as_str(), i.subject.as_deref(), i.audience.as_deref()),
        ("assertion", Some("tech-jane"), Some("desk"))
    );
    assert!(!serde_json::to_string(i).unwrap().contains(&p.headers[0].1));
}

#[tokio::test]
async fn a_token_endpoint_out_of_reach_refuses_the_call_before_anything_is_sent() {
    let stop = presented(
        "mode = \"exchange\"\ntoken_endpoint = \"http://127.0.0.1:9/token\"\nclient_id = \"gw\"",
    )
    .await
    .unwrap_err();
    let Stop::Refused(r) = stop else { panic!("not a refusal") };
    assert_eq!((r.reason, r.action), (Reason::IdentityUnavailable, Action::Retry));
    assert!(
        r.message.contains("nothing was run")
            && r.message.contains("[servers.desk.identity]")
            && r.message.contains("could not be reached"),
        "{}",
        r.message
    );
}

/// How a call whose person has not connected ends, for a client in `era`
/// that declared `capabilities` (and answered `input`, if it did).
fn connect_for(era: Era, capabilities: Option<Value>, input: Option<Value>) -> Stop {
    let mut c = crate::stages::testing::call("desk__lookup", serde_json::json!({}));
    c.era = era;
    c.call.client_capabilities = capabilities;
    if let Some(answer) = input {
        c.call.input.insert("inputResponses".into(), serde_json::json!({CONNECT_KEY: answer}));
    }
    let (cx, call) = crate::stages::testing::split(&c);
    let proposal = Proposal::new("desk", "lookup", serde_json::json!({}));
    asked(cx.era, connect(&call, "desk", "https://gw.example/console/connect?for=T", &proposal))
}

#[test]
fn a_client_that_opens_urls_is_asked_to_in_its_eras_way_and_any_other_is_refused_with_the_link() {
    let url = Some(serde_json::json!({"elicitation": {"form": {}, "url": {}}}));
    let Stop::Error(e) = connect_for(Era::Legacy, url.clone(), None) else { panic!("not -32042") };
    assert_eq!(e.code, code::URL_ELICITATION_REQUIRED);
    let asked = &e.data.as_ref().unwrap()["elicitations"][0];
    assert_eq!(
        (&asked["mode"], &asked["url"]),
        (&serde_json::json!("url"), &serde_json::json!("https://gw.example/console/connect?for=T"))
    );
    assert!(asked["elicitationId"].as_str().unwrap().starts_with("connect-desk-"));

    let Stop::Input(o) = connect_for(Era::Modern, url.clone(), None) else {
        panic!("not input_required")
    };
    let requests: Value = serde_json::from_str(o["inputRequests"].get()).unwrap();
    assert_eq!(requests[CONNECT_KEY]["params"]["mode"], "url");
    let refusal = asked_to_connect(&Stop::Input(o)).expect("a connect question");
    assert_eq!((refusal.reason, refusal.action), (Reason::ConnectRequired, Action::Escalate));
    assert!(
        refusal.message.contains("https://gw.example/console/connect?for=T")
            && refusal.proposal_sha256.is_some()
    );

    for (era, caps) in [
        (Era::Legacy, None),
        (Era::Modern, Some(serde_json::json!({"elicitation": {}}))),
        (Era::Modern, Some(serde_json::json!({"sampling": {}}))),
    ] {
        let Stop::Refused(r) = connect_for(era, caps, None) else {
            panic!("a client that cannot open a URL was asked to")
        };
        assert_eq!(r.reason, Reason::ConnectRequired);
        assert!(
            r.message.contains("https://gw.example/console/connect?for=T")
                && r.message.contains("nothing was run"),
            "{}",
            r.message
        );
    }
    let Stop::Refused(_) =
        connect_for(Era::Modern, url, Some(serde_json::json!({"action": "decline"})))
    else {
        panic!("a person who declined was asked again")
    };
}

#[test]
fn the_upstream_never_sees_the_answer_to_toolgates_own_question() {
    let mut input = serde_json::Map::new();
    input.insert("inputResponses".into(), serde_json::json!({CONNECT_KEY: {"action": "accept"}}));
    assert!(upstream_input(&input).is_empty());
    input.insert(
        "inputResponses".into(),
        serde_json::json!({CONNECT_KEY: {"action": "accept"}, "theirs": {"action": "accept"}}),
    );
    input.insert("requestState".into(), serde_json::json!("s"));
    let left = upstream_input(&input);
    assert_eq!(left["inputResponses"], serde_json::json!({"theirs": {"action": "accept"}}));
    assert_eq!(left["requestState"], "s");
}
