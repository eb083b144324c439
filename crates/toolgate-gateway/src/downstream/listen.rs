//! Tool-list changes, passed on to clients. On 2026-07-28 a client opens a
//! `subscriptions/listen` stream (an SSE response that stays open); legacy
//! stdio clients get `notifications/tools/list_changed` lines unprompted.
//! Either way the trigger is the same: an upstream's listing changed.

use std::convert::Infallible;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::gateway::Gateway;
use crate::wire::{self, Id};

pub(crate) const LIST_CHANGED: &str = "notifications/tools/list_changed";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Resolves when any upstream's listing changes; `false` when shutdown begins.
pub(crate) async fn next_change(receivers: &mut [watch::Receiver<u64>], gw: &Gateway) -> bool {
    let cancel = gw.draining();
    if receivers.is_empty() {
        cancel.cancelled().await;
        return false;
    }
    let changed = futures_util::future::select_all(receivers.iter_mut().map(|r| Box::pin(r.changed())));
    tokio::select! {
        (result, _, _) = changed => result.is_ok(),
        _ = cancel.cancelled() => false,
    }
}

pub(crate) fn receivers(gw: &Gateway) -> Vec<watch::Receiver<u64>> {
    gw.catalogs.upstreams().iter().map(|u| u.changes()).collect()
}

/// The SSE body of a `subscriptions/listen` request: the acknowledgement,
/// then one notification per change, then (when the gateway stops) the
/// request's final result.
pub(crate) fn listen_stream(gw: Arc<Gateway>, id: Id, params: &Value) -> BoxStream<'static, Result<String, Infallible>> {
    let wants_tools = params["notifications"]["toolsListChanged"] == json!(true);
    let accepted = if wants_tools { json!({"toolsListChanged": true}) } else { json!({}) };
    let meta = json!({SUBSCRIPTION_ID: id});
    let ack = sse(&json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"notifications": accepted, "_meta": meta}}).to_string());
    let receivers = receivers(&gw);
    let changes = stream::unfold((gw, receivers, meta.clone(), id, false), move |(gw, mut rx, meta, id, done)| async move {
        if done {
            return None;
        }
        loop {
            if !next_change(&mut rx, &gw).await {
                let end = wire::response(Some(&id), &json!({"resultType": "complete", "_meta": meta}));
                return Some((sse(&end), (gw, rx, meta, id, true)));
            }
            if wants_tools {
                let note = json!({"jsonrpc": "2.0", "method": LIST_CHANGED, "params": {"_meta": meta}}).to_string();
                return Some((sse(&note), (gw, rx, meta, id, false)));
            }
        }
    });
    stream::once(async move { ack }).chain(changes).map(Ok).boxed()
}

fn sse(data: &str) -> String {
    format!("event: message\ndata: {data}\n\n")
}
