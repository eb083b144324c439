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
mod tests;
