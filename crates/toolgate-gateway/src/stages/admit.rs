//! admit: the call's context, built once (who, era, trace, when), and what
//! the transport edge cannot see — the call's own size, and
//! arguments that try to name a tenant (the tenant is the caller's, never
//! the model's). The edge already enforced authentication, body size,
//! nesting depth, duplicate keys, headers, `Origin`/`Host` and the version.

use toolgate_core::{Action, Clock, Reason, Refusal, Verdict};

use crate::call::{Call, CallRequest, Context, Stop};
use crate::config::GatewaySettings;

/// The call's context, built once, and the call itself. The instant the
/// call began is read here, from the one clock: what is judged as of the
/// call (an approval's state) uses it rather than reading the clock again.
pub(crate) fn context(request: CallRequest, clock: &dyn Clock) -> (Context, Call) {
    let CallRequest { caller, trace, request_id, era, call } = request;
    (
        Context {
            caller,
            era,
            trace,
            request_id,
            began_ms: clock.now_ms(),
            started: clock.instant(),
        },
        call,
    )
}

/// The call's own limits: its size, its deadline and run if it names them, and no
/// tenant in its arguments.
pub(crate) fn admit(settings: &GatewaySettings, call: &Call) -> Result<(), Stop> {
    call.deadline().map_err(Stop::Refused)?;
    call.named_run().map_err(Stop::Refused)?;
    let size = serialized_len(&call.arguments);
    if size > settings.max_argument_bytes {
        return Err(Stop::Refused(Refusal::new(
            Verdict::Deny,
            Reason::ArgumentsTooLarge,
            Action::Correct,
            format!(
                "the arguments are {size} bytes; the limit is {}. Send less",
                settings.max_argument_bytes
            ),
        )));
    }
    let tenant_keys = toolgate_core::identity::tenant_keys(&call.arguments);
    if !tenant_keys.is_empty() {
        let violations = tenant_keys
            .into_iter()
            .map(|path| toolgate_core::schema::Violation {
                path,
                message: "a tenant key is not accepted in arguments".into(),
            })
            .collect();
        return Err(Stop::Refused(
            Refusal::new(
                Verdict::Deny,
                Reason::TenantInArguments,
                Action::Correct,
                "the arguments name a tenant; the tenant comes from your credentials. Remove the tenant keys and call again",
            )
            .with_violations(violations),
        ));
    }
    Ok(())
}

/// The length of `value` as compact JSON, counted without building the text.
fn serialized_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests;
