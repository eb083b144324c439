//! resolve: the exposed name → the upstream tool, its authority view and its
//! pinned contract. A changed contract stops here until an operator accepts it.

use std::sync::Arc;

use serde_json::json;
use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::call::Stop;
use crate::catalog::{Catalog, Catalogs, ExposedTool};
use crate::config::Config;
use crate::pins::PinStatus;
use toolgate_mcp::upstream::Kind;
use toolgate_mcp::wire::{RpcError, code};

/// `catalog` is the call's snapshot, built under `config`: the call runs
/// under them to its end, whatever a reload puts in force meanwhile.
pub(crate) fn resolve(
    catalogs: &Catalogs,
    catalog: &Catalog,
    config: &Config,
    kind: Kind,
    name: &str,
) -> Result<Arc<ExposedTool>, Stop> {
    if kind != Kind::Tool {
        return resolve_content(catalogs, catalog, config, kind, name);
    }
    if let Some(tool) = catalog.tools.get(name) {
        pinned(catalogs, tool)?;
        return Ok(tool.clone());
    }
    let server = config.split_exposed(name).map(|(s, _)| s);
    down(catalog, server)?;
    let refusal = Refusal::new(
        Verdict::Deny,
        Reason::UnknownTool,
        Action::Correct,
        format!("there is no tool `{name}`; list the tools and use one of their names"),
    );
    Err(Stop::Error(
        RpcError::new(code::INVALID_PARAMS, format!("Unknown tool: {name}"))
            .with_data(json!(refusal)),
    ))
}

/// Only a pinned contract runs: a tool's, a prompt's, a resource's. The
/// lock file decides — the change may have been accepted, or a new one
/// pinned, since the catalog was built.
fn pinned(catalogs: &Catalogs, item: &ExposedTool) -> Result<(), Stop> {
    if item.pin == PinStatus::Pinned {
        return Ok(());
    }
    let name = item.pin_name();
    let status =
        catalogs.pins().check_and_pin(&name, &item.definition_sha256, &item.tool.definition);
    let noun = item.kind.noun();
    match status {
        Ok(PinStatus::Pinned) => {
            catalogs.invalidate();
            Ok(())
        }
        Ok(PinStatus::Changed(_)) => Err(Stop::Refused(Refusal::new(
            Verdict::Deny,
            Reason::ContractChanged,
            Action::Escalate,
            format!(
                "the contract of the {noun} {} changed since it was accepted; an operator must review it (toolgate tools --accept {name})",
                item.exposed_name
            ),
        ))),
        Ok(PinStatus::New) | Err(_) => {
            if let Err(e) = status {
                tracing::error!(error = %e, pin = %name, "cannot pin a contract; it is refused");
            }
            Err(Stop::Refused(Refusal::new(
                Verdict::Deny,
                Reason::ContractUnpinned,
                Action::Escalate,
                format!(
                    "the contract of the {noun} {} could not be recorded, so it is not run; an operator must check the gateway's lock file",
                    item.exposed_name
                ),
            )))
        }
    }
}

/// A server that is down is why a name is not found: retry later. Why it
/// is down (paths, addresses) is the operator's business: it is in the
/// log, not in the answer.
fn down(catalog: &Catalog, server: Option<&str>) -> Result<(), Stop> {
    match server.filter(|s| catalog.down.contains_key(*s)) {
        Some(server) => Err(Stop::Refused(Refusal::new(
            Verdict::Deny,
            Reason::UpstreamUnavailable,
            Action::Retry,
            format!("the server `{server}` is unavailable; nothing was run, retry later"),
        ))),
        None => Ok(()),
    }
}

/// A prompt by its exposed name, or the resource (listed, or matching a
/// template) an exposed URI names. Its class is decide's business: a
/// prohibited one resolves, and is refused there, with a receipt.
fn resolve_content(
    catalogs: &Catalogs,
    catalog: &Catalog,
    config: &Config,
    kind: Kind,
    name: &str,
) -> Result<Arc<ExposedTool>, Stop> {
    if let Some(found) = catalog.content(kind, name) {
        pinned(catalogs, found)?;
        return Ok(found.clone());
    }
    let server = match kind {
        Kind::Prompt => config.split_exposed(name),
        _ => config.split_uri(name),
    };
    down(catalog, server.map(|(s, _)| s))?;
    let (what, data) = match kind {
        Kind::Prompt => (
            format!("there is no prompt `{name}`; list the prompts and use one of their names"),
            json!({"name": name}),
        ),
        _ => (
            format!(
                "there is no resource `{name}`; list the resources and templates and read one of theirs"
            ),
            json!({"uri": name}),
        ),
    };
    let refusal = Refusal::new(Verdict::Deny, Reason::UnknownTool, Action::Correct, what);
    let mut data = data;
    if let (Some(d), Ok(serde_json::Value::Object(r))) =
        (data.as_object_mut(), serde_json::to_value(&refusal))
    {
        d.extend(r);
    }
    let message = match kind {
        Kind::Prompt => format!("Unknown prompt: {name}"),
        _ => "Resource not found".to_string(),
    };
    Err(Stop::Error(RpcError::new(code::INVALID_PARAMS, message).with_data(data)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::stages::testing::{Live, Reply, find_definition, passed, refused, rpc_error};
    use toolgate_mcp::upstream::Upstream;

    const REGISTRY: &str =
        "[registry.\"parts__find_part\"]\nclass = \"automatic\"\nread_only = true\n";

    async fn live() -> Live {
        Live::start(
            vec![find_definition()],
            Reply::Result(r#"{"content":[]}"#),
            REGISTRY,
            Duration::from_secs(10),
        )
        .await
    }

    #[tokio::test]
    async fn a_listed_tool_resolves_to_its_upstream_tool_and_pin() {
        let live = live().await;
        let tool = passed(resolve(
            &live.catalogs,
            &live.catalogs.current(),
            &live.config,
            Kind::Tool,
            "parts__find_part",
        ));
        assert_eq!(
            (tool.exposed_name.as_str(), tool.server.as_str(), tool.tool.name.as_str()),
            ("parts__find_part", "parts", "find_part")
        );
        assert_eq!(tool.pin, PinStatus::Pinned);
        assert_eq!(
            tool.definition_sha256,
            toolgate_core::contract::definition_sha256(&find_definition())
        );
        assert!(tool.read_only() && tool.registry_read_only);
    }

    #[tokio::test]
    async fn an_unknown_name_is_invalid_params_carrying_the_refusal() {
        let live = live().await;
        // A tool the server does not list, and a server that is not configured.
        for name in ["parts__find_parts", "nobody__find_part"] {
            let e = rpc_error(resolve(
                &live.catalogs,
                &live.catalogs.current(),
                &live.config,
                Kind::Tool,
                name,
            ));
            assert_eq!(e.code, code::INVALID_PARAMS);
            assert_eq!(e.message, format!("Unknown tool: {name}"));
            let data = e.data.expect("the refusal rides in data");
            assert_eq!(
                (data["decision"].as_str(), data["reason"].as_str(), data["action"].as_str()),
                (Some("deny"), Some("unknown_tool"), Some("correct")),
                "{data}"
            );
        }
    }

    #[tokio::test]
    async fn a_server_that_is_down_is_unavailable_and_retryable_without_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(
            Config::parse(
                "[servers.parts]\nurl = \"http://127.0.0.1:9/mcp\"\n",
                &dir.path().join("toolgate.toml"),
            )
            .unwrap(),
        );
        // Never started: it has no listing, so its tools are not in the catalog.
        let upstream = Upstream::new(
            "parts",
            config.servers["parts"].server(),
            Duration::from_secs(1),
            Duration::from_secs(60),
            "test",
        );
        let pins = Arc::new(
            crate::pins::PinStore::open(&config.lock_path(), Arc::new(toolgate_core::SystemClock))
                .unwrap(),
        );
        let live = crate::catalog::Live::new(
            config.clone(),
            Arc::new(toolgate_core::policy::PolicyEngine::empty()),
            vec![(upstream, tokio_util::sync::CancellationToken::new())],
        );
        let catalogs = Catalogs::new(live, pins, true);
        let r = refused(resolve(
            &catalogs,
            &catalogs.current(),
            &config,
            Kind::Tool,
            "parts__find_part",
        ));
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::Deny, Reason::UpstreamUnavailable, Action::Retry)
        );
        assert!(r.message.contains("`parts`"), "{}", r.message);
        let down = catalogs.current().down["parts"].clone();
        assert!(!r.message.contains(&down), "the operator's reason `{down}` leaked: {}", r.message);
    }

    #[tokio::test]
    async fn a_changed_contract_is_refused_until_an_operator_accepts_it() {
        let live = live().await;
        // The lock file holds another definition under this name.
        let accepted_before =
            serde_json::json!({"name": "find_part", "description": "the old one"});
        live.catalogs
            .pins()
            .accept("parts__find_part", "0".repeat(64).as_str(), &accepted_before)
            .unwrap();
        let r = refused(resolve(
            &live.catalogs,
            &live.catalogs.current(),
            &live.config,
            Kind::Tool,
            "parts__find_part",
        ));
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::Deny, Reason::ContractChanged, Action::Escalate)
        );
        assert!(r.message.contains("toolgate tools --accept parts__find_part"), "{}", r.message);
        // The operator accepts the live definition from another process (the CLI).
        let cli =
            crate::pins::PinStore::open(&live.lock_path(), Arc::new(toolgate_core::SystemClock))
                .unwrap();
        cli.accept(
            "parts__find_part",
            &toolgate_core::contract::definition_sha256(&find_definition()),
            &find_definition(),
        )
        .unwrap();
        let tool = passed(resolve(
            &live.catalogs,
            &live.catalogs.current(),
            &live.config,
            Kind::Tool,
            "parts__find_part",
        ));
        assert_eq!(tool.tool.name, "find_part");
        // The catalog was rebuilt with the pin: later calls need not re-read the lock file.
        assert_eq!(live.catalogs.current().tools["parts__find_part"].pin, PinStatus::Pinned);
    }

    #[tokio::test]
    async fn a_contract_that_cannot_be_pinned_is_not_run() {
        let live = live().await;
        // The lock file became unreadable after the gateway opened it.
        std::fs::write(live.lock_path(), "{not json").unwrap();
        let r = refused(resolve(
            &live.catalogs,
            &live.catalogs.current(),
            &live.config,
            Kind::Tool,
            "parts__find_part",
        ));
        assert_eq!(
            (r.verdict, r.reason, r.action),
            (Verdict::Deny, Reason::ContractUnpinned, Action::Escalate)
        );
    }
}
