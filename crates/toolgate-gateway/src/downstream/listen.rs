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
use crate::wire::{self, Id};

use crate::catalog::Catalog;
use crate::upstream::Kind;

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
        let digest = |items: &mut dyn Iterator<Item = &std::sync::Arc<crate::catalog::ExposedTool>>| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for t in items.filter(|t| t.listable()) {
                (&t.exposed_name, &t.definition_sha256).hash(&mut h);
            }
            h.finish()
        };
        Shown([
            digest(&mut catalog.tools.values()),
            digest(&mut catalog.prompts.values()),
            digest(&mut catalog.resources.values().chain(catalog.templates.values().map(|(_, t)| t))),
        ])
    }

    /// The notifications of the lists that differ from `before`, of those `wanted`.
    pub(crate) fn changed_since(&self, before: &Shown, wanted: [bool; 3]) -> impl Iterator<Item = &'static str> + '_ {
        let before = *before;
        LISTS.iter().enumerate().filter(move |(i, _)| wanted[*i] && self.0[*i] != before.0[*i]).map(|(_, (_, _, method))| *method)
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
    let wanted = LISTS.map(|(_, filter, _)| params["notifications"][filter] == json!(true));
    let accepted: serde_json::Map<String, Value> = LISTS.iter().zip(wanted).filter(|(_, w)| *w).map(|((_, filter, _), _)| (filter.to_string(), json!(true))).collect();
    let meta = json!({SUBSCRIPTION_ID: id});
    let ack = sse(&json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"notifications": accepted, "_meta": meta}}).to_string());
    let receivers = receivers(&gw);
    let shown = Shown::of(&gw.catalogs.current());
    let changes = stream::unfold((gw, receivers, shown, meta.clone(), id, false), move |(gw, mut rx, shown, meta, id, done)| async move {
        if done {
            return None;
        }
        loop {
            if !next_change(&mut rx, &gw).await {
                let end = wire::response(Some(&id), &json!({"resultType": "complete", "_meta": meta}));
                return Some((sse(&end), (gw, rx, shown, meta, id, true)));
            }
            let now = Shown::of(&gw.catalogs.current());
            let notes: String = now
                .changed_since(&shown, wanted)
                .map(|method| sse(&json!({"jsonrpc": "2.0", "method": method, "params": {"_meta": meta}}).to_string()))
                .collect();
            if !notes.is_empty() {
                return Some((notes, (gw, rx, now, meta, id, false)));
            }
        }
    });
    stream::once(async move { ack }).chain(changes).map(Ok).boxed()
}

fn sse(data: &str) -> String {
    format!("event: message\ndata: {data}\n\n")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use toolgate_core::AuthorityClass;

    use super::Shown;
    use crate::catalog::Catalog;
    use crate::stages::testing::tool;
    use crate::upstream::Kind;

    #[test]
    fn a_change_is_news_only_for_the_list_that_changed_and_only_to_who_asked() {
        let mut catalog = Catalog::default();
        let before = Shown::of(&catalog);
        let mut prompt = tool("parts", json!({"name": "diagnose", "inputSchema": {}}), Some(AuthorityClass::Automatic));
        prompt.kind = Kind::Prompt;
        catalog.prompts.insert("parts__diagnose".into(), Arc::new(prompt));
        let after = Shown::of(&catalog);
        assert_eq!(after.changed_since(&before, [true; 3]).collect::<Vec<_>>(), ["notifications/prompts/list_changed"]);
        assert_eq!(after.changed_since(&before, [true, false, true]).count(), 0, "a stream that follows tools and resources only");
        // What is not listed (prohibited) is no change of the list.
        let hidden = tool("parts", json!({"name": "drop", "inputSchema": {}}), Some(AuthorityClass::Prohibited));
        catalog.tools.insert("parts__drop".into(), Arc::new(hidden));
        assert_eq!(Shown::of(&catalog).changed_since(&after, [true; 3]).count(), 0);
    }
}
