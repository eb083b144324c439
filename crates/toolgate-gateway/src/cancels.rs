//! A held call cancelled by its client: `notifications/cancelled`, naming
//! the call's request id. Each held call is registered (for as long as it is
//! held: no other call pays for this) under its session
//! (stdio: the connection), its caller and its request id, and the
//! notification cancels that call's token: a held call then ends at once,
//! its approval left pending for a later re-issue. Streamable HTTP here is
//! stateless, so there the caller and the id alone name a call: a caller's
//! cancellation can end only its own calls (two clients of one token that
//! reuse ids can end each other's held calls, which then answer that the
//! approval still waits). A client may also cancel by closing the call's
//! stream, which the call sees as its client gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use toolgate_mcp::wire::Id;

/// The session (empty over stateless HTTP), the caller and the request id
/// (as JSON, so `1` and `"1"` stay apart).
type Key = (Arc<str>, String, String);

/// The calls in flight that a client may cancel.
#[derive(Default)]
pub struct Cancels {
    calls: Mutex<HashMap<Key, CancellationToken>>,
}

/// A call's place among the cancellable ones, given up when it is dropped
/// (the hold ended).
pub(crate) struct Registered<'a> {
    cancels: &'a Cancels,
    key: Option<Key>,
}

impl Cancels {
    /// Registers the call `id` of `caller` in `session` (none: stateless
    /// HTTP): a cancellation naming it cancels `token`.
    pub(crate) fn register(
        &self,
        session: Option<&Arc<str>>,
        caller: &str,
        id: Option<&Id>,
        token: &CancellationToken,
    ) -> Registered<'_> {
        let key = id.map(|id| {
            (scope(session), caller.to_string(), serde_json::to_string(id).unwrap_or_default())
        });
        if let Some(k) = &key {
            self.lock().insert(k.clone(), token.clone());
        }
        Registered { cancels: self, key }
    }

    /// Cancels the call `request_id` of `caller` in `session`, if it is in
    /// flight; whether there was one.
    pub(crate) fn cancel(
        &self,
        session: Option<&Arc<str>>,
        caller: &str,
        request_id: &Value,
    ) -> bool {
        let key = (scope(session), caller.to_string(), request_id.to_string());
        match self.lock().get(&key) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, CancellationToken>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn scope(session: Option<&Arc<str>>) -> Arc<str> {
    session.cloned().unwrap_or_else(|| Arc::from(""))
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Some(k) = &self.key {
            self.cancels.lock().remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_named_call_of_the_same_session_and_caller_is_cancelled() {
        let cancels = Cancels::default();
        let (s1, s2): (Arc<str>, Arc<str>) = ("s1".into(), "s2".into());
        let token = CancellationToken::new();
        let call = cancels.register(Some(&s1), "agent", Some(&Id::Number(7)), &token);
        // Another session, another caller, the id as a string: not this call.
        assert!(!cancels.cancel(Some(&s2), "agent", &json!(7)));
        assert!(!cancels.cancel(None, "agent", &json!(7)));
        assert!(!cancels.cancel(Some(&s1), "mallory", &json!(7)));
        assert!(!cancels.cancel(Some(&s1), "agent", &json!("7")));
        assert!(!token.is_cancelled());
        assert!(cancels.cancel(Some(&s1), "agent", &json!(7)));
        assert!(token.is_cancelled());
        drop(call);
        assert!(
            !cancels.cancel(Some(&s1), "agent", &json!(7)),
            "an answered call is gone from the registry"
        );
        // Stateless HTTP: the caller and the id name the call.
        let stateless = CancellationToken::new();
        let _held = cancels.register(None, "agent", Some(&Id::String("a".into())), &stateless);
        assert!(!cancels.cancel(None, "other", &json!("a")));
        assert!(cancels.cancel(None, "agent", &json!("a")) && stateless.is_cancelled());
    }
}
