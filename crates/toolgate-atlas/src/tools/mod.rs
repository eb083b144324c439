//! Tool behaviour, one module per server. Arguments arrive already validated
//! against the declared `inputSchema`; what a schema cannot express (does
//! this ticket exist, does this part fit) is checked here and refused with a
//! tool error that says what to do instead.

pub mod manuals;
pub mod notices;
pub mod parts;
pub mod support;
pub mod tickets;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::data::Dataset;
use crate::data::domain;
use crate::identity::Asserted;
use crate::sandbox::Sandbox;

pub struct Context {
    pub data: Arc<Dataset>,
    pub sandbox: Arc<Sandbox>,
}

/// A tool-level failure: returned to the caller as an `isError` result.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        // The path and OS detail stay in our log; the caller learns the kind.
        tracing::error!(error = %e, "sandbox write failed");
        ToolError(format!(
            "the sandbox store could not be written ({}); nothing was recorded, retry later",
            e.kind()
        ))
    }
}

pub type Outcome = Result<Value, ToolError>;

/// Typed view of already schema-checked arguments.
pub fn parse<T: DeserializeOwned>(arguments: &Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments.clone())
        .map_err(|e| ToolError(format!("invalid arguments: {e}")))
}

pub fn known_variant(model_variant: &str) -> Result<(), ToolError> {
    match domain::split_variant(model_variant) {
        Some(_) => Ok(()),
        None => Err(ToolError(format!(
            "unknown model_variant `{model_variant}`; use one of: {}",
            domain::model_variants().join(", ")
        ))),
    }
}

/// The current UTC time as RFC 3339, for records written to the sandbox.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let date = crate::data::rng::date_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{date}T{:02}:{:02}:{:02}Z", s / 3600, s % 3600 / 60, s % 60)
}

/// Runs `name` of `kind` on validated arguments, for `who` when the server
/// verified who asked (see [`crate::identity`]). `None`: no such tool.
pub fn call(
    kind: crate::ServerKind,
    name: &str,
    arguments: &Value,
    ctx: &Context,
    who: Option<&Asserted>,
) -> Option<Outcome> {
    use crate::ServerKind::*;
    Some(match (kind, name) {
        (Tickets, "search_tickets") => tickets::search_tickets(arguments, ctx),
        (Tickets, "get_ticket") => tickets::get_ticket(arguments, ctx),
        (Tickets, "post_ticket_update") => tickets::post_ticket_update(arguments, ctx, who),
        (Tickets, "export_service_records") => tickets::export_service_records(arguments, ctx, who),
        (Parts, "find_part") => parts::find_part(arguments, ctx),
        (Parts, "check_availability") => parts::check_availability(arguments, ctx),
        (Parts, "raise_parts_order") => parts::raise_parts_order(arguments, ctx),
        (Manuals, "search_manual") => manuals::search_manual(arguments, ctx),
        (Notices, "send_notice") => notices::send_notice(arguments, ctx),
        (Support, "search_customers") => support::search_customers(arguments, ctx),
        (Support, "create_ticket") => support::create_ticket(arguments, ctx),
        (Support, "get_ticket") => support::get_ticket(arguments, ctx),
        _ => return None,
    })
}
