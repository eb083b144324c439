//! The catalog: every upstream tool under its exposed name `SERVER{sep}TOOL`,
//! with its authority view, pin status and compiled schemas. Rebuilt when an
//! upstream's listing changes; between changes, calls share one snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use toolgate_core::contract::definition_sha256;
use toolgate_core::proposal::canonical_json;
use toolgate_core::schema::SchemaValidator;
use toolgate_core::{AuthorityView, Hints};

use crate::config::Config;
use crate::pins::{PinStatus, PinStore};
use crate::upstream::{Upstream, UpstreamTool};

/// An upstream tool as agents see it: under its exposed name, with the
/// authority it is given and the state of its pin.
pub struct ExposedTool {
    /// `SERVER{sep}TOOL` (plain `TOOL` for a server with `namespace = false`).
    pub exposed_name: String,
    /// The configured server that offers it.
    pub server: String,
    /// The tool as its upstream declared it.
    pub tool: Arc<UpstreamTool>,
    /// The registry's labels for it (none when the registry does not name it).
    pub labels: Vec<String>,
    /// The registry says this tool changes nothing (`read_only = true`).
    pub(crate) registry_read_only: bool,
    /// Its hints, the class they imply, the registry's class and the
    /// effective one.
    pub view: AuthorityView,
    /// The hash of its definition, by which pins and receipts name it.
    pub definition_sha256: String,
    /// Whether its live definition is the pinned one.
    pub pin: PinStatus,
    /// The compiled inputSchema, or why it does not compile.
    pub(crate) input: Result<Arc<SchemaValidator>, String>,
    /// The compiled outputSchema, when the tool declares one.
    pub(crate) output: Option<Result<Arc<SchemaValidator>, String>>,
}

impl ExposedTool {
    /// Whether a call may even be proposed: listed tools are exactly these.
    pub(crate) fn listable(&self) -> bool {
        self.view.effective_class != toolgate_core::AuthorityClass::Prohibited && self.pin == PinStatus::Pinned
    }

    /// Read-only by the registry's word or by a hint we believe: an
    /// untrusted server's `readOnlyHint` may be forged, so its tools count
    /// as writes (each call an operation; a lost answer means reconcile,
    /// never a blind retry).
    pub(crate) fn read_only(&self) -> bool {
        self.registry_read_only || (self.view.server_trusted && self.view.hints.read_only_hint.value)
    }
}

/// One snapshot of the exposed tools and of the servers that are down.
#[derive(Default)]
pub struct Catalog {
    /// By exposed name: the order of `tools/list`.
    pub tools: BTreeMap<String, Arc<ExposedTool>>,
    /// Servers that are down, with the reason.
    pub(crate) down: BTreeMap<String, String>,
    /// Exposed names not offered because they do not lead back to exactly
    /// one tool (listed more than once, or not round-tripping), with why.
    pub ambiguous: BTreeMap<String, String>,
}

/// Compiled schemas by the hash of their canonical text, so a re-list
/// recompiles only what changed.
#[derive(Default)]
struct SchemaCache(Mutex<HashMap<String, Arc<SchemaValidator>>>);

impl SchemaCache {
    fn compile(&self, schema: &Value, used: &mut Vec<String>) -> Result<Arc<SchemaValidator>, String> {
        let key = toolgate_core::proposal::sha256_hex(canonical_json(schema).as_bytes());
        used.push(key.clone());
        if let Some(v) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(v.clone());
        }
        let compiled = Arc::new(SchemaValidator::compile(schema).map_err(|e| e.0)?);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(key, compiled.clone());
        Ok(compiled)
    }

    /// Forgets schemas no current tool uses, so an upstream that changes its
    /// schemas on every list cannot grow the cache without bound.
    fn keep_only(&self, used: &[String]) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| used.contains(k));
    }
}

/// Keeps the current catalog and rebuilds it when an upstream changes.
pub struct Catalogs {
    config: Arc<Config>,
    upstreams: Vec<Arc<Upstream>>,
    pins: Arc<PinStore>,
    /// A running gateway pins tools on first sight; the CLI only looks.
    pin_new: bool,
    schemas: SchemaCache,
    current: RwLock<(Vec<u64>, Arc<Catalog>)>,
}

impl Catalogs {
    pub(crate) fn new(config: Arc<Config>, upstreams: Vec<Arc<Upstream>>, pins: Arc<PinStore>, pin_new: bool) -> Self {
        Self { config, upstreams, pins, pin_new, schemas: SchemaCache::default(), current: RwLock::new((Vec::new(), Arc::default())) }
    }

    /// Every configured upstream, by server name.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    pub(crate) fn upstream(&self, server: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.name == server)
    }

    /// The pins tools are checked against (`toolgate tools --accept` writes them).
    pub fn pins(&self) -> &Arc<PinStore> {
        &self.pins
    }

    /// Forces the next `current()` to rebuild (a pin was accepted).
    pub(crate) fn invalidate(&self) {
        self.current.write().unwrap_or_else(|p| p.into_inner()).0.clear();
    }

    /// The catalog for the upstreams' current listings.
    pub fn current(&self) -> Arc<Catalog> {
        let generations: Vec<u64> = self.upstreams.iter().map(|u| u.generation()).collect();
        {
            let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
            if cur.0 == generations {
                return cur.1.clone();
            }
        }
        let catalog = Arc::new(self.build());
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (generations, catalog.clone());
        catalog
    }

    fn build(&self) -> Catalog {
        let mut catalog = Catalog::default();
        let mut used = Vec::new();
        for upstream in &self.upstreams {
            let Some(listing) = upstream.listing() else {
                catalog.down.insert(upstream.name.clone(), upstream.down_reason().unwrap_or_else(|| "connecting".into()));
                continue;
            };
            for tool in &listing.tools {
                let exposed_name = self.config.exposed_name(&upstream.name, &tool.name);
                // The name must lead back to exactly this tool, or a registry
                // entry could grant one tool's class to another.
                let round_trip = self.config.split_exposed(&exposed_name) == Some((upstream.name.as_str(), tool.name.as_str()));
                // A name seen before stays refused however often it comes
                // back: the listing does not say which definition is meant.
                let why = if !round_trip {
                    Some(format!("`{exposed_name}` does not name `{}` of `{}` unambiguously (rename the server or the tool)", tool.name, upstream.name))
                } else if catalog.tools.contains_key(&exposed_name) || catalog.ambiguous.contains_key(&exposed_name) {
                    Some(format!("`{}` lists `{}` more than once; it is not offered until it lists it once", upstream.name, tool.name))
                } else {
                    None
                };
                if let Some(why) = why {
                    tracing::error!(server = %upstream.name, tool = %tool.name, %exposed_name, "ambiguous exposed name; the tool is not offered");
                    catalog.tools.remove(&exposed_name);
                    catalog.ambiguous.insert(exposed_name, why);
                    continue;
                }
                let entry = self.config.registry.get(&exposed_name);
                let hints = Hints::from_annotations(tool.definition.get("annotations"));
                let view = AuthorityView::new(hints, entry.map(|e| e.class), upstream.trusted);
                let sha = definition_sha256(&tool.definition);
                let pin = if self.pin_new {
                    self.pins.check_and_pin(&exposed_name, &sha, &tool.definition).unwrap_or_else(|e| {
                        tracing::error!(error = %e, "cannot record a pin; the tool stays unlisted");
                        PinStatus::New
                    })
                } else {
                    self.pins.status(&exposed_name, &sha)
                };
                let input = match tool.definition.get("inputSchema") {
                    Some(schema @ Value::Object(_)) => self.schemas.compile(schema, &mut used),
                    _ => Err("the tool declares no inputSchema object".into()),
                };
                let output = tool.definition.get("outputSchema").filter(|s| s.is_object()).map(|s| self.schemas.compile(s, &mut used));
                let exposed = ExposedTool {
                    exposed_name: exposed_name.clone(),
                    server: upstream.name.clone(),
                    tool: tool.clone(),
                    labels: entry.map(|e| e.labels.clone()).unwrap_or_default(),
                    registry_read_only: entry.is_some_and(|e| e.read_only),
                    view,
                    definition_sha256: sha,
                    pin,
                    input,
                    output,
                };
                catalog.tools.insert(exposed_name, Arc::new(exposed));
            }
        }
        self.schemas.keep_only(&used);
        catalog
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::stages::testing::{Live, Reply, find_definition};

    fn named(name: &str, description: &str, annotations: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "description": description, "annotations": annotations, "inputSchema": {"type": "object"}})
    }

    #[tokio::test]
    async fn a_name_listed_more_than_once_is_never_offered_however_often_it_repeats() {
        let read = named("dup", "a harmless read", json!({"readOnlyHint": true}));
        let destructive = named("dup", "deletes everything", json!({"destructiveHint": true}));
        for listing in [vec![read.clone(), destructive.clone()], vec![read.clone(), destructive.clone(), read.clone()], vec![read.clone(), read.clone(), read.clone(), find_definition()]] {
            let live = Live::start(listing, Reply::Result("{}"), "", Duration::from_secs(5)).await;
            let catalog = live.catalogs.current();
            assert!(!catalog.tools.contains_key("parts__dup"), "offered: {:?}", catalog.tools.keys().collect::<Vec<_>>());
            assert!(catalog.ambiguous["parts__dup"].contains("more than once"), "{:?}", catalog.ambiguous);
        }
        // Listed once, it is offered, beside the others.
        let live = Live::start(vec![read, find_definition()], Reply::Result("{}"), "", Duration::from_secs(5)).await;
        let catalog = live.catalogs.current();
        assert!(catalog.tools.contains_key("parts__dup") && catalog.tools.contains_key("parts__find_part"));
        assert!(catalog.ambiguous.is_empty());
    }
}
