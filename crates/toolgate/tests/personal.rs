//! Per-person stdio processes (issue 61, `[servers.NAME.identity] env`):
//! the pool of each server's people's processes — one per person, started
//! with their token in the variable; bounded (the least recently used goes
//! first); replaced when the person's token changes; stopped when idle.
//! The processes are real: the Python SDK's `whoami_server.py` over stdio,
//! which reads its token from the environment.

mod peers_common;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use toolgate_core::Caller;
use toolgate_gateway::config::Config;
use toolgate_gateway::personal::Personal;

fn person(subject: &str) -> Caller {
    Caller { name: "agent".into(), subject: subject.into(), tenant: "atlas".into(), roles: vec![] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_has_a_process_of_their_own_bounded_replaced_on_a_new_token_and_stopped_when_idle()
 {
    let dir = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python/whoami_server.py");
    let text = format!(
        "[gateway]\nstate_dir = \"{state}\"\n[servers.gh]\ncommand = {python}\nargs = \
             [{script}, \"stdio\", \"--issuer\", \"http://127.0.0.1:9\", \"--token-env\", \
             \"GH_TOKEN\", \"--resource\", \"http://gh.test/mcp\"]\nsandbox = \"off\"\n\
         [servers.gh.identity]\nmode = \"exchange\"\ntoken_endpoint = \
             \"http://127.0.0.1:9/token\"\nclient_id = \"gw\"\nenv = \"GH_TOKEN\"\npool = \
             2\nidle_ms = 10000\n",
        state = dir.path().join("state").display(),
        python = serde_json::json!(peers_common::python().display().to_string()),
        script = serde_json::json!(script.display().to_string()),
    );
    let config = Config::parse(&text, &dir.path().join("toolgate.toml")).unwrap();
    let (personal, cancel) = (Personal::default(), CancellationToken::new());
    let start = |who: &'static str, token: &'static str, at: i64| {
        let (personal, config, cancel) = (&personal, &config, &cancel);
        async move {
            personal
                .upstream(config, "gh", &person(who), ("GH_TOKEN", token), at, cancel)
                .await
                .unwrap_or_else(|e| panic!("{who}: {e}"))
        }
    };

    let jane = start("jane", "token-of-jane-1", 1_000).await;
    let omar = start("omar", "token-of-omar-1", 2_000).await;
    assert!(!Arc::ptr_eq(&jane, &omar), "two people, two processes");
    assert!(
        Arc::ptr_eq(&jane, &start("jane", "token-of-jane-1", 3_000).await),
        "the same person, the same token: the same process"
    );
    assert!(
        jane.listing().is_some_and(|l| l.tools.iter().any(|t| t.name == "whoami")),
        "the process answers"
    );
    assert_eq!(personal.running(), 2);

    // jane's token changed (refreshed): her next call gets a new process.
    let renewed = start("jane", "token-of-jane-2", 4_000).await;
    assert!(!Arc::ptr_eq(&jane, &renewed), "a new token, a new process");
    assert_eq!(personal.running(), 2);

    // A third person, the pool holds two: omar's (used least recently) goes.
    let _eve = start("eve", "token-of-eve-1", 5_000).await;
    assert_eq!(personal.running(), 2);
    assert!(
        !Arc::ptr_eq(&omar, &start("omar", "token-of-omar-1", 6_000).await),
        "omar's process was the one stopped for eve's"
    );

    // Unused for idle_ms (eve's since 5 000, omar's since 6 000): stopped.
    personal.reap(&config, 5_000 + 9_999);
    assert_eq!(personal.running(), 2, "not idle long enough yet");
    personal.reap(&config, 6_000 + 10_000);
    assert_eq!(personal.running(), 0);
    cancel.cancel();
}
