//! admit: what the transport edge cannot see — the call's own size. (The
//! edge already enforced body size, nesting depth, duplicate keys, headers,
//! `Origin`/`Host` and the protocol version.)

use toolgate_core::{Action, Reason, Refusal, Verdict};

use crate::config::GatewaySettings;
use crate::pipeline::{CallRequest, Stop};

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
