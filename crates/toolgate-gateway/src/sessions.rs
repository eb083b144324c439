//! Legacy (2025-11-25) sessions, as this replica keeps them: whose each is,
//! where its messages go, what it follows. What a 2026-07-28 client hears on
//! a `subscriptions/listen` stream, a legacy client is sent unprompted on its
//! session's own stream (`downstream/subscribe.rs`). Over stdio the
//! connection is the session. Over Streamable HTTP, `initialize` issues an
//! `Mcp-Session-Id` and the client's `GET /mcp` opens the stream.
//!
//! Nothing else rests on a session: every POST is answered on its own, with
//! or without one, by whichever replica it reaches, and a gateway that
//! restarted serves the clients of the one before. A session lives in the
//! memory of the replica that issued it (behind a balancer, its GET and
//! its `resources/subscribe` must reach that replica; CONFIG.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

/// HTTP sessions kept at once; past it, the longest idle goes.
const MAX_SESSIONS: usize = 10_000;
/// HTTP sessions one caller keeps at once; past it, its own longest idle
/// goes (one caller cannot push the others' sessions out).
const MAX_PER_CALLER: usize = 256;
/// An HTTP session with no stream open for this long is forgotten.
const IDLE_MS: i64 = 10 * 60 * 1000;

/// One legacy session: whose it is, where its messages go, what it follows.
pub(crate) struct Session {
    pub(crate) caller: String,
    /// The stdio connection, or the HTTP session's open `GET` stream (none
    /// while it is closed: what happens then is not kept for later).
    pub(crate) out: Mutex<Option<UnboundedSender<String>>>,
    /// The exposed URIs followed, each with what stops its relay.
    pub(crate) subscriptions: Mutex<BTreeMap<String, CancellationToken>>,
    /// When it last had a stream open or a request about it (ms).
    pub(crate) active_ms: Mutex<i64>,
    /// Cancelled when the session ends: its stream closes.
    pub(crate) ended: CancellationToken,
    /// What the client declared at `initialize`: whether toolgate may ask
    /// it to open a URL (`elicitation.url`).
    pub(crate) capabilities: Option<Value>,
}

impl Session {
    /// A session of `caller` whose messages go to `out`.
    pub(crate) fn new(
        caller: &str,
        out: Option<UnboundedSender<String>>,
        capabilities: Option<Value>,
    ) -> Arc<Self> {
        Arc::new(Self {
            caller: caller.to_string(),
            out: Mutex::new(out),
            subscriptions: Default::default(),
            active_ms: Mutex::new(0),
            ended: CancellationToken::new(),
            capabilities,
        })
    }

    /// What the client declared at `initialize`.
    pub(crate) fn capabilities(&self) -> Option<Value> {
        self.capabilities.clone()
    }

    /// Sends one message on the session's stream, if one is open.
    pub(crate) fn send(&self, message: String) -> bool {
        lock(&self.out).as_ref().is_some_and(|out| out.send(message).is_ok())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ended.cancel();
        for stop in lock(&self.subscriptions).values() {
            stop.cancel();
        }
    }
}

/// The HTTP sessions this replica issued, by id.
#[derive(Default)]
pub(crate) struct Sessions(Mutex<HashMap<String, Arc<Session>>>);

impl Sessions {
    /// Issues a session to `caller` (at `initialize`) and returns its id.
    /// Idle sessions are forgotten first, and the longest idle beyond
    /// `MAX_SESSIONS`.
    pub(crate) fn open(&self, caller: &str, now_ms: i64, capabilities: Option<Value>) -> String {
        let id = toolgate_core::entropy::random_token();
        let session = Session::new(caller, None, capabilities);
        *lock(&session.active_ms) = now_ms;
        let mut all = lock(&self.0);
        all.retain(|_, s| lock(&s.out).is_some() || now_ms - *lock(&s.active_ms) < IDLE_MS);
        let idlest = |all: &HashMap<String, Arc<Session>>, mine: bool| {
            all.iter()
                .filter(|(_, s)| !mine || s.caller == caller)
                .min_by_key(|(_, s)| *lock(&s.active_ms))
                .map(|(k, _)| k.clone())
        };
        while all.values().filter(|s| s.caller == caller).count() >= MAX_PER_CALLER {
            let Some(id) = idlest(&all, true) else { break };
            all.remove(&id);
        }
        while all.len() >= MAX_SESSIONS {
            let Some(id) = idlest(&all, false) else { break };
            all.remove(&id);
        }
        all.insert(id.clone(), session);
        id
    }

    /// The session `id`, if it is `caller`'s (another caller's id is as
    /// good as none: ids are not proof of anything but a session).
    pub(crate) fn get(&self, id: &str, caller: &str, now_ms: i64) -> Option<Arc<Session>> {
        let session = lock(&self.0).get(id).filter(|s| s.caller == caller).cloned()?;
        *lock(&session.active_ms) = now_ms;
        Some(session)
    }

    /// Ends the session `id` (`DELETE /mcp`): its subscriptions stop, its
    /// stream closes.
    pub(crate) fn close(&self, id: &str, caller: &str) -> bool {
        let mut all = lock(&self.0);
        let Some(session) = all.get(id).filter(|s| s.caller == caller).cloned() else {
            return false;
        };
        all.remove(id);
        session.ended.cancel();
        for (_, stop) in std::mem::take(&mut *lock(&session.subscriptions)) {
            stop.cancel();
        }
        true
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::Sessions;

    #[test]
    fn a_session_is_its_callers_only_and_idle_ones_are_forgotten() {
        let sessions = Sessions::default();
        let id = sessions.open("agent", 0, None);
        assert!(sessions.get(&id, "agent", 1).is_some());
        assert!(
            sessions.get(&id, "mallory", 1).is_none(),
            "another caller's id is no session of theirs"
        );
        assert!(!sessions.close(&id, "mallory"));
        // Idle past IDLE_MS with no stream: gone at the next opening.
        let later = sessions.open("agent", 1 + super::IDLE_MS, None);
        assert!(sessions.get(&id, "agent", 2 + super::IDLE_MS).is_none());
        assert!(sessions.close(&later, "agent"));
        assert!(sessions.get(&later, "agent", 3 + super::IDLE_MS).is_none());
        // One caller's sessions push out only its own.
        let theirs = sessions.open("other", 10, None);
        for i in 0..super::MAX_PER_CALLER + 5 {
            sessions.open("agent", 20 + i as i64, None);
        }
        assert!(sessions.get(&theirs, "other", 30).is_some());
        assert_eq!(
            sessions.0.lock().unwrap().values().filter(|s| s.caller == "agent").count(),
            super::MAX_PER_CALLER
        );
    }
}
