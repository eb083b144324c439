//! admit: what the transport edge cannot see — the call's own size. (The
//! edge already enforced body size, nesting depth, duplicate keys, headers,
//! `Origin`/`Host` and the protocol version.)

use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::config::GatewaySettings;
use crate::pipeline::{CallRequest, Stop};

pub fn admit(settings: &GatewaySettings, call: &CallRequest) -> Result<(), Stop> {
    let size = serde_json::to_string(&call.arguments).map(|s| s.len()).unwrap_or(usize::MAX);
    if size > settings.max_argument_bytes {
        return Err(Stop::Refused(Refusal::new(
            Verdict::Deny,
            Reason::ArgumentsTooLarge,
            Action::Correct,
            format!("the arguments are {size} bytes; the limit is {}. Send less", settings.max_argument_bytes),
        )));
    }
    Ok(())
}
