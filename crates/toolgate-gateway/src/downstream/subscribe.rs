//! Legacy (2025-11-25) sessions. What a 2026-07-28 client hears on a
//! `subscriptions/listen` stream, a legacy client is sent unprompted on its
//! session's own stream: list changes, and updates of the resources it
//! named in `resources/subscribe`. Over stdio the connection is the
//! session. Over Streamable HTTP, `initialize` issues an `Mcp-Session-Id`
//! and the client's `GET /mcp` opens the stream.
//!
//! Nothing else rests on a session: every POST is answered on its own, with
//! or without one, by whichever replica it reaches, and a gateway that
//! restarted serves the clients of the one before. A session lives in the
//! memory of the replica that issued it (behind a balancer, its GET and
//! its `resources/subscribe` must reach that replica; CONFIG.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use toolgate_mcp::wire::{self, RpcError, code};

/// Resources one session may follow at once.
const MAX_SUBSCRIPTIONS: usize = 256;
/// HTTP sessions kept at once; past it, the longest idle goes.
const MAX_SESSIONS: usize = 10_000;
/// HTTP sessions one caller keeps at once; past it, its own longest idle
/// goes (one caller cannot push the others' sessions out).
const MAX_PER_CALLER: usize = 256;
/// An HTTP session with no stream open for this long is forgotten.
const IDLE_MS: i64 = 10 * 60 * 1000;

/// One legacy session: whose it is, where its messages go, what it follows.
pub(crate) struct Session {
    caller: String,
    /// The stdio connection, or the HTTP session's open `GET` stream (none
    /// while it is closed: what happens then is not kept for later).
    out: Mutex<Option<UnboundedSender<String>>>,
    /// The exposed URIs followed, each with what stops its relay.
    subscriptions: Mutex<BTreeMap<String, CancellationToken>>,
    /// When it last had a stream open or a request about it (ms).
    active_ms: Mutex<i64>,
    /// Cancelled when the session ends: its stream closes.
    ended: CancellationToken,
    /// What the client declared at `initialize`: whether toolgate may ask
    /// it to open a URL (`elicitation.url`).
    capabilities: Option<Value>,
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
    fn send(&self, message: String) -> bool {
        lock(&self.out).as_ref().is_some_and(|out| out.send(message).is_ok())
    }

    /// `resources/subscribe`: follows `params.uri` (an exposed URI the
    /// caller may read) until unsubscribed or the session ends.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        gw: &Gateway,
        params: &Value,
    ) -> Result<(), RpcError> {
        let uri = uri_of(params, "resources/subscribe")?;
        let mut subscriptions = lock(&self.subscriptions);
        if subscriptions.contains_key(uri) {
            return Ok(());
        }
        if subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "this session already follows {MAX_SUBSCRIPTIONS} resources; resources/unsubscribe some first"
                ),
            ));
        }
        let (accepted, watches) = super::listen::watch(gw, &json!([uri]));
        if accepted.is_empty() {
            let shown = toolgate_core::pointer::tame(uri, toolgate_core::pointer::MAX_KEY_CHARS);
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "no resource `{shown}` you may read: resources/list names those you may follow"
                ),
            ));
        }
        let stop = CancellationToken::new();
        let session: Weak<Session> = Arc::downgrade(self);
        super::listen::forward(watches, &stop, move |exposed| {
            if let Some(s) = session.upgrade() {
                s.send(wire::notification(
                    "notifications/resources/updated",
                    &json!({"uri": exposed}),
                ));
            }
        });
        subscriptions.insert(uri.to_string(), stop);
        Ok(())
    }

    /// The answer to a legacy `resources/subscribe` or `resources/unsubscribe`
    /// about this session (none to a notification).
    pub(crate) fn answer(self: &Arc<Self>, gw: &Gateway, msg: &super::Inbound) -> Option<String> {
        let id = msg.id.as_ref()?;
        let done = if msg.method == "resources/subscribe" {
            self.subscribe(gw, &msg.params)
        } else {
            self.unsubscribe(&msg.params)
        };
        Some(match done {
            Ok(()) => wire::response(Some(id), &json!({})),
            Err(e) => wire::error_response(Some(id), &e),
        })
    }

    /// `resources/unsubscribe`: stops following `params.uri` (a URI not
    /// followed is no error: the client's wish holds either way).
    pub(crate) fn unsubscribe(&self, params: &Value) -> Result<(), RpcError> {
        let uri = uri_of(params, "resources/unsubscribe")?;
        if let Some(stop) = lock(&self.subscriptions).remove(uri) {
            stop.cancel();
        }
        Ok(())
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

/// Whether `method` is one a legacy session answers itself.
pub(crate) fn about_subscriptions(method: &str) -> bool {
    matches!(method, "resources/subscribe" | "resources/unsubscribe")
}

fn uri_of<'a>(params: &'a Value, method: &str) -> Result<&'a str, RpcError> {
    params.get("uri").and_then(Value::as_str).ok_or_else(|| {
        RpcError::new(
            code::INVALID_PARAMS,
            format!("{method} needs params.uri, a resource's URI as resources/list shows it"),
        )
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A legacy request carries what its session's client declared at
/// `initialize` (`capabilities`) where a 2026-07-28 request carries its own
/// (`_meta`), so that a call reads them in one place. The request's own
/// claim there is dropped: a legacy client's are its handshake's.
pub(crate) fn carry_capabilities(msg: &mut super::Inbound, capabilities: Option<Value>) {
    let Some(params) = msg.params.as_object_mut() else { return };
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(wire::META_CLIENT_CAPABILITIES);
    }
    if let Some(capabilities) = capabilities {
        let meta = params.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(wire::META_CLIENT_CAPABILITIES.into(), capabilities);
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
        let id = crate::seal::random_token();
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

/// The session's stream (`GET /mcp`): list changes and resource updates
/// as they come, until the client goes away, the session is closed, or a
/// newer stream of the same session replaces this one.
pub(crate) fn stream(
    gw: Arc<Gateway>,
    session: Arc<Session>,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    *lock(&session.out) = Some(tx.clone());
    tokio::spawn(async move {
        let open = |tx: &UnboundedSender<String>| {
            lock(&session.out).as_ref().is_some_and(|o| o.same_channel(tx)) && !tx.is_closed()
        };
        tokio::select! {
            _ = super::listen::follow_lists(&gw, |m| open(&tx) && tx.send(m).is_ok()) => {}
            _ = tx.closed() => {}
            _ = session.ended.cancelled() => {}
        }
        let mut out = lock(&session.out);
        if out.as_ref().is_some_and(|o| o.same_channel(&tx)) {
            *out = None;
        }
        *lock(&session.active_ms) = gw.clock.now_ms();
    });
    rx
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
