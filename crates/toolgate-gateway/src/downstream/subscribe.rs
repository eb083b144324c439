//! What a legacy (2025-11-25) session does at the edge (the sessions
//! themselves are `crate::sessions`). What a 2026-07-28 client hears on a
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

use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::sessions::{Session, lock};
use toolgate_mcp::wire::{self, RpcError, code};

/// Resources one session may follow at once.
const MAX_SUBSCRIPTIONS: usize = 256;

impl Session {
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
