//! resolve: the exposed name → the upstream tool, its authority view and its
//! pinned contract. A changed contract stops here until an operator accepts it.

use std::sync::Arc;

use serde_json::json;
use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::call::Stop;
use crate::catalog::{Catalogs, ExposedTool};
use crate::config::Config;
use crate::pins::PinStatus;
use crate::wire::{RpcError, code};

pub fn resolve(catalogs: &Catalogs, config: &Config, name: &str) -> Result<Arc<ExposedTool>, Stop> {
    let catalog = catalogs.current();
    if let Some(tool) = catalog.tools.get(name) {
        if tool.pin != PinStatus::Pinned {
            // Only a pinned contract runs. The lock file decides: the change
            // may have been accepted, or a new tool pinned, since the build.
            let status = catalogs.pins().check_and_pin(name, &tool.definition_sha256, &tool.tool.definition);
            match status {
                Ok(PinStatus::Pinned) => catalogs.invalidate(),
                Ok(PinStatus::Changed(_)) => {
                    return Err(Stop::Refused(Refusal::new(
                        Verdict::Deny,
                        Reason::ContractChanged,
                        Action::Escalate,
                        format!("the contract of {name} changed since it was accepted; an operator must review it (toolgate tools --accept {name})"),
                    )));
                }
                Ok(PinStatus::New) | Err(_) => {
                    if let Err(e) = status {
                        tracing::error!(error = %e, tool = name, "cannot pin a contract; the tool is refused");
                    }
                    return Err(Stop::Refused(Refusal::new(
                        Verdict::Deny,
                        Reason::ContractUnpinned,
                        Action::Escalate,
                        format!("the contract of {name} could not be recorded, so it is not run; an operator must check the gateway's lock file"),
                    )));
                }
            }
        }
        return Ok(tool.clone());
    }
    let server = config.split_exposed(name).map(|(s, _)| s);
    if let Some(server) = server.filter(|s| catalog.down.contains_key(*s)) {
        // Why it is down (paths, addresses) is the operator's business: it is
        // in the log, not in the answer.
        return Err(Stop::Refused(Refusal::new(
            Verdict::Deny,
            Reason::UpstreamUnavailable,
            Action::Retry,
            format!("the server `{server}` is unavailable; nothing was run, retry later"),
        )));
    }
    let refusal = Refusal::new(
        Verdict::Deny,
        Reason::UnknownTool,
        Action::Correct,
        format!("there is no tool `{name}`; list the tools and use one of their names"),
    );
    Err(Stop::Error(
        RpcError::new(code::INVALID_PARAMS, format!("Unknown tool: {name}")).with_data(json!(refusal)),
    ))
}
