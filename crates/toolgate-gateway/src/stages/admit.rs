//! admit: what the transport edge cannot see — the call's own size, and
//! arguments that try to name a tenant (the tenant is the caller's, never
//! the model's). The edge already enforced authentication, body size,
//! nesting depth, duplicate keys, headers, `Origin`/`Host` and the version.

use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::config::GatewaySettings;
use crate::call::{CallRequest, Stop};

pub fn admit(settings: &GatewaySettings, call: &CallRequest) -> Result<(), Stop> {
    let size = serialized_len(&call.arguments);
    if size > settings.max_argument_bytes {
        return Err(Stop::Refused(Refusal::new(
            Verdict::Deny,
            Reason::ArgumentsTooLarge,
            Action::Correct,
            format!("the arguments are {size} bytes; the limit is {}. Send less", settings.max_argument_bytes),
        )));
    }
    let tenant_keys = toolgate_core::identity::tenant_keys(&call.arguments);
    if !tenant_keys.is_empty() {
        let violations = tenant_keys
            .into_iter()
            .map(|path| toolgate_core::schema::Violation { path, message: "a tenant key is not accepted in arguments".into() })
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_what_serde_json_writes() {
        let v = json!({"a": [1, "é", null], "b": {"c": true}});
        assert_eq!(serialized_len(&v), serde_json::to_string(&v).unwrap().len());
    }
}
