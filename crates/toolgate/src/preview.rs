//! `toolgate preview --config F TOOL ARGS-JSON --as CALLER`: how the gateway
//! would decide this exact call by this caller — the registry, Cedar and the
//! guards — without opening, reserving or sending anything (the same as a
//! `tools/call` with `_meta["io.toolgate/preview"]: true`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::Value;
use toolgate_core::Caller;
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::pipeline::{self, Answer, Call, CallRequest};
use toolgate_mcp::wire::Era;

pub async fn run(
    config_path: &Path,
    tool: &str,
    arguments: &str,
    as_caller: &str,
    in_run: Option<&str>,
    json_out: bool,
) -> anyhow::Result<()> {
    let config = crate::serve::load_config(config_path, None)?;
    let Some(c) = config.callers.get(as_caller) else {
        bail!("`{as_caller}` is not a [callers] entry of {}", config_path.display());
    };
    let caller = Caller {
        name: as_caller.to_string(),
        subject: c.subject_of(as_caller),
        tenant: c.tenant.clone(),
        roles: c.roles.clone(),
    };
    let arguments: Value = serde_json::from_str(arguments).context("ARGS must be a JSON object")?;
    if !arguments.is_object() {
        bail!("ARGS must be a JSON object");
    }
    let gw = Gateway::start(config, Mode::Inspect).await?;
    for (server, why) in gw.wait_ready(Duration::from_secs(15)).await {
        eprintln!("toolgate preview: server `{server}` is unavailable ({why})");
    }
    let call = Call {
        kind: toolgate_mcp::upstream::Kind::Tool,
        name: tool.to_string(),
        arguments,
        progress: None,
        client: None,
        input: Default::default(),
        operation_key: None,
        client_capabilities: None,
        preview: true,
        deadline_ms: None,
        run: in_run.map(|r| Value::String(r.to_string())),
        session: None,
        inbound_token: None,
        cancelled: Default::default(),
    };
    let answer = pipeline::call_tool(
        &gw,
        CallRequest {
            caller: Arc::new(caller),
            trace: Default::default(),
            request_id: None,
            era: Era::Modern,
            call,
        },
    )
    .await
    .answer;
    gw.stop();
    let shown = match answer {
        Answer::Result(result) => {
            serde_json::to_value(&result)?.get("structuredContent").cloned().unwrap_or(Value::Null)
        }
        Answer::Refused(refusal) => serde_json::to_value(&refusal)?,
        Answer::Error(e) => bail!("{e}"),
    };
    if json_out {
        crate::print_json(&shown)?;
    } else {
        // The message and names hold what the agent asked for: escaped.
        let s =
            |k: &str| toolgate_core::visible::visible(shown[k].as_str().unwrap_or("")).into_owned();
        println!("{}", s("message"));
        println!("  decision: {} ({})", s("decision"), s("reason"));
        if let Some(rules) = shown["rules"].as_array().filter(|r| !r.is_empty()) {
            println!(
                "  rules:    {}",
                toolgate_core::visible::visible(
                    &rules.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
                )
            );
        }
        if shown["approval"]["needed"] == true {
            println!("  approval: {}", shown["approval"]["by"].as_str().unwrap_or(""));
        }
        if !s("proposal_sha256").is_empty() {
            println!("  proposal: {}", s("proposal_sha256"));
        }
    }
    Ok(())
}
