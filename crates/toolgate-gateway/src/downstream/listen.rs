//! List changes (tools, prompts, resources), passed on to clients. On
//! 2026-07-28 a client opens a `subscriptions/listen` stream (an SSE
//! response that stays open) naming the lists it wants; legacy stdio
//! clients get `notifications/…/list_changed` lines unprompted. Either way
//! the trigger is the same: an upstream's listing changed, and with it what
//! the gateway lists (compared per list, so a tool change is not news to
//! a client that follows prompts only).

use std::convert::Infallible;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::gateway::Gateway;
use toolgate_mcp::wire::{self, Id};

use crate::catalog::Catalog;
use toolgate_mcp::upstream::Kind;

/// The lists a client can follow: the filter's name and the notification.
const LISTS: [(Kind, &str, &str); 3] = [
    (Kind::Tool, "toolsListChanged", "notifications/tools/list_changed"),
    (Kind::Prompt, "promptsListChanged", "notifications/prompts/list_changed"),
    (Kind::Resource, "resourcesListChanged", "notifications/resources/list_changed"),
];

/// What each list shows, in brief: a change of it is a change of the list.
#[derive(Default, PartialEq, Clone, Copy)]
pub(crate) struct Shown([u64; 3]);

impl Shown {
    pub(crate) fn of(catalog: &Catalog) -> Self {
        use std::hash::{Hash, Hasher};
        let digest =
            |items: &mut dyn Iterator<Item = &std::sync::Arc<crate::catalog::ExposedTool>>| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                for t in items.filter(|t| t.listable()) {
                    (&t.exposed_name, &t.definition_sha256).hash(&mut h);
                }
                h.finish()
            };
        Shown([
            digest(&mut catalog.tools.values()),
            digest(&mut catalog.prompts.values()),
            digest(
                &mut catalog.resources.values().chain(catalog.templates.values().map(|(_, t)| t)),
            ),
        ])
    }

    /// The notifications of the lists that differ from `before`, of those `wanted`.
    pub(crate) fn changed_since(
        &self,
        before: &Shown,
        wanted: [bool; 3],
    ) -> impl Iterator<Item = &'static str> + '_ {
        let before = *before;
        LISTS
            .iter()
            .enumerate()
            .filter(move |(i, _)| wanted[*i] && self.0[*i] != before.0[*i])
            .map(|(_, (_, _, method))| *method)
    }
}

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Resolves when any upstream's listing changes; `false` when shutdown begins.
pub(crate) async fn next_change(receivers: &mut [watch::Receiver<u64>], gw: &Gateway) -> bool {
    let cancel = gw.draining();
    if receivers.is_empty() {
        cancel.cancelled().await;
        return false;
    }
    let changed =
        futures_util::future::select_all(receivers.iter_mut().map(|r| Box::pin(r.changed())));
    tokio::select! {
        (result, _, _) = changed => result.is_ok(),
        _ = cancel.cancelled() => false,
    }
}

/// What changes the lists: each upstream's listing, and a reload (which
/// may change the registry and the upstreams themselves, so a follower
/// takes these again after each change).
pub(crate) fn receivers(gw: &Gateway) -> Vec<watch::Receiver<u64>> {
    std::iter::once(gw.catalogs.reloads())
        .chain(gw.catalogs.upstreams().iter().map(|u| u.changes()))
        .collect()
}

/// The SSE body of a `subscriptions/listen` request: the acknowledgement,
/// then one notification per change of a list it follows and per update of
/// a resource it subscribed to, then (when the gateway stops) the request's
/// final result. Only resources the caller may read are watched (the
/// acknowledgement names them); the watch ends when the client goes away.
pub(crate) fn listen_stream(
    gw: Arc<Gateway>,
    id: Id,
    params: &Value,
) -> BoxStream<'static, Result<String, Infallible>> {
    let wanted = LISTS.map(|(_, filter, _)| params["notifications"][filter] == json!(true));
    let mut accepted: serde_json::Map<String, Value> = LISTS
        .iter()
        .zip(wanted)
        .filter(|(_, w)| *w)
        .map(|((_, filter, _), _)| (filter.to_string(), json!(true)))
        .collect();
    let (watching, watches) = watch(&gw, &params["notifications"]["resourceSubscriptions"]);
    if !watching.is_empty() {
        accepted.insert("resourceSubscriptions".into(), json!(watching));
    }
    let meta = json!({SUBSCRIPTION_ID: id});
    let note = move |method: &str, extra: Value| {
        let mut params = json!({"_meta": meta});
        if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
            p.extend(e);
        }
        toolgate_mcp::sse::message(
            &json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string(),
        )
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let _ = tx
        .send(note("notifications/subscriptions/acknowledged", json!({"notifications": accepted})));
    // The watches' updates, as the exposed URIs the client subscribed to.
    let stop = tokio_util::sync::CancellationToken::new();
    let (updated_tx, mut updated) = tokio::sync::mpsc::unbounded_channel::<String>();
    forward(watches, &stop, move |exposed| drop(updated_tx.send(exposed)));
    tokio::spawn(async move {
        let mut receivers = receivers(&gw);
        let mut shown = Shown::of(&gw.catalogs.current());
        loop {
            let out = tokio::select! {
                more = next_change(&mut receivers, &gw) => {
                    if !more {
                        let _ = tx.send(toolgate_mcp::sse::message(&wire::response(Some(&id), &json!({"resultType": "complete", "_meta": {SUBSCRIPTION_ID: id}}))));
                        break;
                    }
                    receivers = self::receivers(&gw);
                    let now = Shown::of(&gw.catalogs.current());
                    let notes: String = now.changed_since(&shown, wanted).map(|method| note(method, json!({}))).collect();
                    shown = now;
                    notes
                }
                Some(uri) = updated.recv() => note("notifications/resources/updated", json!({"uri": uri})),
                _ = tx.closed() => break,
            };
            if !out.is_empty() && tx.send(out).is_err() {
                break;
            }
        }
        stop.cancel();
    });
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (Ok(m), rx)) }).boxed()
}

/// Passes each update the `watches` hear on to `out`, under the exposed
/// URI the client named, until `stop` is cancelled.
pub(crate) fn forward(
    watches: Vec<Watched>,
    stop: &tokio_util::sync::CancellationToken,
    out: impl Fn(String) + Clone + Send + 'static,
) {
    for (mut watch, pairs) in watches {
        let (out, stop) = (out.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let uri = tokio::select! {
                    _ = stop.cancelled() => return,
                    uri = watch.updates.recv() => uri,
                };
                match uri {
                    Ok(uri) => pairs
                        .iter()
                        .filter(|(_, theirs)| *theirs == uri)
                        .for_each(|(exposed, _)| out(exposed.clone())),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                }
            }
        });
    }
}

/// Sends `out` the legacy era's `notifications/…/list_changed` for each
/// list that changes, until shutdown (or until `out` says it is closed by
/// returning `false`).
pub(crate) async fn follow_lists(gw: &Gateway, out: impl Fn(String) -> bool) {
    let mut rx = receivers(gw);
    let mut shown = Shown::of(&gw.catalogs.current());
    while next_change(&mut rx, gw).await {
        rx = receivers(gw);
        let now = Shown::of(&gw.catalogs.current());
        for method in now.changed_since(&shown, [true; 3]) {
            if !out(wire::notification(method, &json!({}))) {
                return;
            }
        }
        shown = now;
    }
}

/// A watch on one upstream, with the (exposed, upstream's) URI pairs it covers.
pub(crate) type Watched = (toolgate_mcp::upstream::Watch, Vec<(String, String)>);

/// The subscribed URIs the caller may read (listed resources, or what a
/// listed template expands to), and a watch on each upstream that has
/// some, with (exposed, upstream's) URI pairs.
pub(crate) fn watch(gw: &Gateway, requested: &Value) -> (Vec<String>, Vec<Watched>) {
    let catalog = gw.catalogs.current();
    let mut accepted = Vec::new();
    let mut by_server: std::collections::BTreeMap<String, Vec<(String, String)>> =
        Default::default();
    for uri in requested.as_array().into_iter().flatten().filter_map(Value::as_str) {
        if let Some(found) = catalog.content(Kind::Resource, uri).filter(|t| t.listable()) {
            accepted.push(uri.to_string());
            by_server
                .entry(found.server.clone())
                .or_default()
                .push((uri.to_string(), found.upstream_uri(uri).to_string()));
        }
    }
    let watches = by_server
        .into_iter()
        .filter_map(|(server, pairs)| {
            let upstream = gw.catalogs.upstream(&server)?;
            Some((upstream.watch(pairs.iter().map(|(_, theirs)| theirs.clone()).collect()), pairs))
        })
        .collect();
    (accepted, watches)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use toolgate_core::AuthorityClass;

    use super::Shown;
    use crate::catalog::Catalog;
    use crate::stages::testing::tool;
    use toolgate_mcp::upstream::Kind;

    #[test]
    fn a_change_is_news_only_for_the_list_that_changed_and_only_to_who_asked() {
        let mut catalog = Catalog::default();
        let before = Shown::of(&catalog);
        let mut prompt = tool(
            "parts",
            json!({"name": "diagnose", "inputSchema": {}}),
            Some(AuthorityClass::Automatic),
        );
        prompt.kind = Kind::Prompt;
        catalog.prompts.insert("parts__diagnose".into(), Arc::new(prompt));
        let after = Shown::of(&catalog);
        assert_eq!(
            after.changed_since(&before, [true; 3]).collect::<Vec<_>>(),
            ["notifications/prompts/list_changed"]
        );
        assert_eq!(
            after.changed_since(&before, [true, false, true]).count(),
            0,
            "a stream that follows tools and resources only"
        );
        // What is not listed (prohibited) is no change of the list.
        let hidden = tool(
            "parts",
            json!({"name": "drop", "inputSchema": {}}),
            Some(AuthorityClass::Prohibited),
        );
        catalog.tools.insert("parts__drop".into(), Arc::new(hidden));
        assert_eq!(Shown::of(&catalog).changed_since(&after, [true; 3]).count(), 0);
    }
}
