//! Level 4, an agent scenario: `toolgate agent` against `toolgate demo
//! --serve`, its model a scripted OpenAI-compatible server in the test that
//! returns recorded tool-call responses: a search with a wrong argument,
//! which toolgate refuses with `correct` and the model fixes; an order of 8
//! that waits for an approval given from another thread; then the answer.

mod demo_common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use demo_common::{demo_serve, orders_in, toolgate, valve_order};
use serde_json::{Value, json};

/// The model: each request gets the next recorded answer; requests are kept.
async fn scripted_model(answers: Vec<Value>, seen: Arc<Mutex<Vec<Value>>>) -> String {
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let router = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(request): axum::Json<Value>| {
            let (answers, seen) = (answers.clone(), seen.clone());
            async move {
                seen.lock().unwrap().push(request);
                let message = answers.lock().unwrap().next().unwrap_or_else(|| json!({"role": "assistant", "content": "(out of script)"}));
                axum::Json(json!({"id": "chatcmpl-test", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": {"total_tokens": 100}}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

fn calls(id: &str, name: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_corrects_a_refused_argument_and_waits_for_an_approver() {
    let dir = tempfile::tempdir().unwrap();
    let serving = demo_serve(dir.path());
    let orders = || orders_in(dir.path());
    let before = orders();
    let order = valve_order(8);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = scripted_model(
        vec![
            calls(
                "c1",
                "tickets__search_tickets",
                json!({"model_variant": "AC250S", "fault_code": "F-101"}),
            ),
            calls(
                "c2",
                "tickets__search_tickets",
                json!({"model_variant": "AC-250-S", "fault_code": "F-101"}),
            ),
            calls("c3", "parts__raise_parts_order", order.clone()),
            json!({"role": "assistant", "content": "Ordered 8 valves."}),
        ],
        seen.clone(),
    )
    .await;

    // The approver, in another thread: approves this order once it waits
    // (the demo's own cases leave other approvals pending).
    let config = serving.config.clone();
    let ticket_id = order["ticket_id"].clone();
    let approver = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let out = toolgate()
                .args(["approvals", "list", "--state", "pending", "--json", "--config"])
                .arg(&config)
                .output()
                .unwrap();
            let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let ours = list["approvals"].as_array().into_iter().flatten().find(|a| {
                a["arguments"]["quantity"] == 8 && a["arguments"]["ticket_id"] == ticket_id
            });
            if let Some(id) = ours.and_then(|a| a["id"].as_str()) {
                let ok = toolgate()
                    .args([
                        "approvals",
                        "approve",
                        id,
                        "--as",
                        "dana",
                        "--reason",
                        "the -S valve, as the history shows",
                        "--config",
                    ])
                    .arg(&config)
                    .output()
                    .unwrap();
                assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
                return id.to_string();
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!("no approval was opened");
    });

    let evidence = dir.path().join("run.bundle.json");
    let (config, bundle) = (serving.config.clone(), evidence.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["agent", "--gateway", &serving.endpoint, "--token-env", "TG_AGENT_TOKEN", "--base-url", &model, "--model", "scripted", "--api-key-env", "TG_NO_KEY", "--approval-wait-s", "150"])
            .args(["--task", "Find how F-101 was fixed on AC-250-S and order 8 of the right valve for the open ticket."])
            .arg("--config")
            .arg(&config)
            .arg("--evidence")
            .arg(&bundle)
            .env("TG_AGENT_TOKEN", &serving.agent_token)
            .env_remove("TG_NO_KEY")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let approval = approver.join().unwrap();

    // What the agent said on the terminal.
    for line in [
        "✎ tickets__search_tickets → refused: invalid_arguments → action correct",
        "✓ tickets__search_tickets",
        &format!("waiting for approval {approval}"),
        "✓ parts__raise_parts_order → ran: order PO-",
        "answer: Ordered 8 valves.",
    ] {
        assert!(stdout.contains(line), "`{line}` missing:\n{stdout}");
    }
    assert!(stdout.contains(&format!("approvals: {approval}")), "{stdout}");
    assert!(stdout.contains("3 call(s): 1 correct, 2 ran"), "{stdout}");
    // The run's evidence: its receipts (the refusal, the search, the order's
    // wait, decision and outcome), verified offline; `toolgate verify` agrees.
    assert!(stdout.contains("verified offline: inclusion in the log"), "{stdout}");
    let b: Value = serde_json::from_slice(&std::fs::read(&evidence).unwrap()).unwrap();
    let receipts: Vec<&Value> =
        b["receipts"].as_array().unwrap().iter().map(|e| &e["receipt"]["receipt"]).collect();
    let tools: Vec<&str> = receipts.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert!(
        tools.iter().filter(|t| **t == "search_tickets").count() == 2
            && tools.contains(&"raise_parts_order"),
        "{tools:?}"
    );
    assert!(receipts.iter().all(|r| r["caller"] == "agent"), "only the run's receipts");
    assert!(toolgate().arg("verify").arg(&evidence).output().unwrap().status.success());
    // What the model was given: the gateway's tools as functions, and the refusal to correct.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    let functions: Vec<&str> = seen[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        functions.contains(&"parts__raise_parts_order")
            && functions.contains(&"tickets__search_tickets"),
        "{functions:?}"
    );
    assert!(
        !functions.contains(&"tickets__export_service_records"),
        "prohibited tools are not offered"
    );
    let told = seen[1]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (told["role"].as_str(), told["tool_call_id"].as_str()),
        (Some("tool"), Some("c1")),
        "{told}"
    );
    let told = told["content"].as_str().unwrap();
    assert!(told.contains("correct the arguments") && told.contains("/model_variant"), "{told}");
    // One order placed.
    assert_eq!(orders(), before + 1);
}
