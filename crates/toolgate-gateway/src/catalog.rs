//! The catalog: every upstream tool under its exposed name `SERVER{sep}TOOL`,
//! with its authority view, pin status and compiled schemas; and beside the
//! tools, every prompt (`SERVER{sep}PROMPT`), resource and resource template
//! (`toolgate://SERVER/URI`), each under the same authority: a prompt get or
//! a resource read runs through the same stages as a read tool's call, with
//! an input schema made from its contract. Rebuilt when an upstream's
//! listing changes; between changes, calls share one snapshot.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use tokio_util::sync::CancellationToken;

use serde_json::{Value, json};
use toolgate_core::contract::definition_sha256;
use toolgate_core::proposal::canonical_json;
use toolgate_core::schema::SchemaValidator;
use toolgate_core::{AuthorityView, Hints};

use crate::config::Config;
use crate::pins::{PinStatus, PinStore};
use toolgate_mcp::upstream::{Kind, Listing, Upstream, UpstreamTool};

/// A contract accepted as a tool's pin.
#[derive(Debug)]
pub struct Accepted {
    /// The accepted definition's hash.
    pub sha256: String,
    /// What the pin was before.
    pub was: AcceptedFrom,
    /// How the contract changed since the old pin (empty unless `Changed`).
    pub changes: Vec<toolgate_core::contract::Change>,
}

/// A tool's pin before it was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptedFrom {
    /// The live contract was the pinned one: nothing was written.
    AlreadyPinned,
    /// Never pinned.
    New,
    /// Pinned at another definition.
    Changed,
}

/// An upstream tool as agents see it: under its exposed name, with the
/// authority it is given and the state of its pin.
pub struct ExposedTool {
    /// A tool, or a prompt, resource or template read through the same stages.
    pub kind: Kind,
    /// `SERVER{sep}TOOL` (plain `TOOL` for a server with `namespace = false`);
    /// a prompt's likewise; a resource's exposed URI or template.
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
    /// The box its server runs in, as receipts name it (its profile's hash,
    /// or `off`); `None` for an HTTP upstream.
    pub sandbox: Option<Arc<str>>,
    /// Whether its live definition is the pinned one. Prompts, resources
    /// and templates are pinned like tools: a prompt is instructions the
    /// model follows, a resource's description is read as one, so a change
    /// is held for review too.
    pub pin: PinStatus,
    /// The compiled inputSchema, or why it does not compile.
    pub(crate) input: Result<Arc<SchemaValidator>, String>,
    /// The compiled outputSchema, when the tool declares one.
    pub(crate) output: Option<Result<Arc<SchemaValidator>, String>>,
}

impl ExposedTool {
    /// Whether a call may even be proposed: listed tools are exactly these.
    pub(crate) fn listable(&self) -> bool {
        self.view.effective_class != toolgate_core::AuthorityClass::Prohibited
            && self.pin == PinStatus::Pinned
    }

    /// Read-only by the registry's word or by a hint we believe: an
    /// untrusted server's `readOnlyHint` may be forged, so its tools count
    /// as writes (each call an operation; a lost answer means reconcile,
    /// never a blind retry).
    pub(crate) fn read_only(&self) -> bool {
        self.registry_read_only
            || (self.view.server_trusted && self.view.hints.read_only_hint.value)
    }

    /// What proposals and receipts name: a tool's name on its server, or
    /// `prompt:NAME` / `resource:URI`, so a prompt is never taken for a
    /// tool of the same name.
    pub fn subject(&self) -> Cow<'_, str> {
        match self.kind {
            Kind::Tool => Cow::Borrowed(&self.tool.name),
            Kind::Prompt => Cow::Owned(format!("prompt:{}", self.tool.name)),
            Kind::Resource | Kind::Template => Cow::Owned(format!("resource:{}", self.tool.name)),
        }
    }

    /// This tool (or prompt, resource, template) as the audit reads it,
    /// under its pin name.
    pub fn audit_entry(&self) -> toolgate_core::audit::Entry {
        toolgate_core::audit::Entry {
            name: self.pin_name().into_owned(),
            server: self.server.clone(),
            tool: self.tool.name.clone(),
            definition: self.tool.definition.clone(),
            pinned: self.pin.drifted_from().cloned(),
            registry_class: self.view.registry_class,
            labels: self.labels.clone(),
        }
    }

    /// The name of its pin in the lock file, which `toolgate tools
    /// --accept` and the console take: a tool's exposed name; for the
    /// others `prompt:NAME`, `resource:URI` or `template:URI` (exposed), so
    /// nothing shares a tool's pin.
    pub fn pin_name(&self) -> Cow<'_, str> {
        match self.kind {
            Kind::Tool => Cow::Borrowed(&self.exposed_name),
            _ => Cow::Owned(format!("{}:{}", pin_prefix(self.kind), self.exposed_name)),
        }
    }

    /// The upstream's own URI for an exposed one this resource (or
    /// template) answers for: the exposed form is a prefix and the server's URI.
    pub(crate) fn upstream_uri<'a>(&self, exposed: &'a str) -> &'a str {
        let prefix = self.exposed_name.len().saturating_sub(self.tool.name.len());
        exposed.get(prefix..).unwrap_or(exposed)
    }
}

/// The prefix of a pin name of `kind` (`ExposedTool::pin_name`).
fn pin_prefix(kind: Kind) -> &'static str {
    match kind {
        Kind::Tool => "",
        Kind::Prompt => "prompt",
        Kind::Resource => "resource",
        Kind::Template => "template",
    }
}

/// The hints of a prompt get or a resource read: it changes nothing and
/// reaches no one (MCP defines both as reads of what the server holds).
static READ_HINTS: std::sync::LazyLock<toolgate_core::Hints> = std::sync::LazyLock::new(|| {
    Hints::from_annotations(Some(
        &json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
    ))
});

/// A resource template as a pattern over exposed URIs (RFC 6570: a simple
/// `{var}` stands for one path segment, any other expression for any text).
fn template_pattern(template: &str) -> Option<regex::Regex> {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        pattern.push_str(&regex::escape(&rest[..open]));
        let close = rest[open..].find('}')? + open;
        let expression = &rest[open + 1..close];
        pattern.push_str(
            if expression.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                "[^/?#]*"
            } else {
                ".*"
            },
        );
        rest = &rest[close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::Regex::new(&pattern).ok()
}

/// One snapshot of the exposed tools and of the servers that are down,
/// under one config.
#[derive(Default)]
pub struct Catalog {
    /// The config and upstreams it was built from (`None` only for an
    /// empty catalog no gateway built).
    live: Option<Arc<Live>>,
    /// By exposed name: the order of `tools/list`.
    pub tools: BTreeMap<String, Arc<ExposedTool>>,
    /// Servers that are down, with the reason.
    pub down: BTreeMap<String, String>,
    /// Exposed names not offered because they do not lead back to exactly
    /// one tool (listed more than once, or not round-tripping), with why.
    /// A prompt's or resource's is named with its kind (`prompt NAME`).
    pub ambiguous: BTreeMap<String, String>,
    /// Prompts by exposed name.
    pub prompts: BTreeMap<String, Arc<ExposedTool>>,
    /// Listed resources by exposed URI.
    pub resources: BTreeMap<String, Arc<ExposedTool>>,
    /// Resource templates by exposed template, with the pattern a URI
    /// they expand to matches.
    pub templates: BTreeMap<String, (regex::Regex, Arc<ExposedTool>)>,
}

impl Catalog {
    /// The config and upstreams this catalog was built from: a call that
    /// resolved its tool here runs under them to its end.
    pub fn live(&self) -> Option<&Arc<Live>> {
        self.live.as_ref()
    }

    /// The prompt, resource or template (not a tool) `exposed` names: a
    /// listed resource first, else the first template it matches.
    pub(crate) fn content(&self, kind: Kind, exposed: &str) -> Option<&Arc<ExposedTool>> {
        match kind {
            Kind::Tool => self.tools.get(exposed),
            Kind::Prompt => self.prompts.get(exposed),
            Kind::Template => self.templates.get(exposed).map(|(_, t)| t),
            Kind::Resource => self.resources.get(exposed).or_else(|| {
                self.templates.values().find(|(p, _)| p.is_match(exposed)).map(|(_, t)| t)
            }),
        }
    }

    /// The tool, prompt, resource or template whose pin is `pin_name`.
    pub fn pinned(&self, pin_name: &str) -> Option<&Arc<ExposedTool>> {
        let kind = [Kind::Prompt, Kind::Resource, Kind::Template].into_iter().find_map(|k| {
            pin_name
                .strip_prefix(pin_prefix(k))
                .and_then(|r| r.strip_prefix(':'))
                .map(|name| (k, name))
        });
        match kind {
            Some((Kind::Template, name)) => self.templates.get(name).map(|(_, t)| t),
            Some((k, name)) => {
                self.content(k, name).filter(|t| t.kind == k && t.exposed_name == name)
            }
            None => self.tools.get(pin_name),
        }
    }

    /// Everything pinned, tools first, then prompts, resources and templates.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ExposedTool>> {
        self.tools
            .values()
            .chain(self.prompts.values())
            .chain(self.resources.values())
            .chain(self.templates.values().map(|(_, t)| t))
    }

    fn map(&mut self, kind: Kind) -> &mut BTreeMap<String, Arc<ExposedTool>> {
        match kind {
            Kind::Tool => &mut self.tools,
            Kind::Prompt => &mut self.prompts,
            Kind::Resource | Kind::Template => &mut self.resources,
        }
    }
}

/// Compiled schemas by the hash of their canonical text, so a re-list
/// recompiles only what changed.
#[derive(Default)]
struct SchemaCache(Mutex<HashMap<String, Arc<SchemaValidator>>>);

impl SchemaCache {
    fn compile(
        &self,
        schema: &Value,
        used: &mut Vec<String>,
    ) -> Result<Arc<SchemaValidator>, String> {
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

/// The config in force and the upstreams it names, each with its own stop:
/// what a reload swaps whole. A call holds the `Live` it began under (in its
/// catalog) until it ends, so a server a reload changed or removed is
/// stopped only once no call still needs it (`Gateway::reload`).
pub struct Live {
    /// The config in force.
    pub config: Arc<Config>,
    /// The Cedar policy in force, read from the files the config names.
    pub policy: Arc<toolgate_core::policy::PolicyEngine>,
    upstreams: Vec<Arc<Upstream>>,
    stops: Vec<CancellationToken>,
}

impl Live {
    /// The config and its upstreams, each started under its own token.
    pub(crate) fn new(
        config: Arc<Config>,
        policy: Arc<toolgate_core::policy::PolicyEngine>,
        upstreams: Vec<(Arc<Upstream>, CancellationToken)>,
    ) -> Self {
        let (upstreams, stops) = upstreams.into_iter().unzip();
        Self { config, policy, upstreams, stops }
    }

    /// The same config and upstreams under another policy.
    pub(crate) fn with_policy(&self, policy: Arc<toolgate_core::policy::PolicyEngine>) -> Self {
        Self {
            config: self.config.clone(),
            policy,
            upstreams: self.upstreams.clone(),
            stops: self.stops.clone(),
        }
    }

    /// Every configured upstream, by server name.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// The upstream of `server`, if the config names it.
    pub fn upstream(&self, server: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.name == server)
    }

    /// The upstream of `server` and its stop, to keep across a reload.
    pub(crate) fn started(&self, server: &str) -> Option<(Arc<Upstream>, CancellationToken)> {
        let i = self.upstreams.iter().position(|u| u.name == server)?;
        Some((self.upstreams[i].clone(), self.stops[i].clone()))
    }

    /// Stops the upstreams `keep` does not hold (the same `Arc`).
    pub(crate) fn stop_all_but(&self, keep: &Live) {
        for (u, stop) in self.upstreams.iter().zip(&self.stops) {
            if !keep.upstreams.iter().any(|k| Arc::ptr_eq(k, u)) {
                stop.cancel();
            }
        }
    }
}

/// Keeps the current catalog and rebuilds it when an upstream changes or
/// the config is reloaded.
pub struct Catalogs {
    live: RwLock<Arc<Live>>,
    pins: Arc<PinStore>,
    /// A running gateway pins tools on first sight; the CLI only looks.
    pin_new: bool,
    schemas: SchemaCache,
    /// The catalog, with the `Live` and the upstreams' generations it was
    /// built from.
    current: RwLock<(Option<Arc<Live>>, Vec<u64>, Arc<Catalog>)>,
    /// Bumped when a reload swaps the config (listen streams tell clients).
    reloads: tokio::sync::watch::Sender<u64>,
}

impl Catalogs {
    pub(crate) fn new(live: Live, pins: Arc<PinStore>, pin_new: bool) -> Self {
        Self {
            live: RwLock::new(Arc::new(live)),
            pins,
            pin_new,
            schemas: SchemaCache::default(),
            current: RwLock::new((None, Vec::new(), Arc::default())),
            reloads: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The config and the upstreams in force now.
    pub fn live(&self) -> Arc<Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The config in force now.
    pub fn config(&self) -> Arc<Config> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).config.clone()
    }

    /// Puts `live` in force; returns the one it replaces. The next
    /// `current()` builds the catalog from it.
    pub(crate) fn swap(&self, live: Arc<Live>) -> Arc<Live> {
        let old =
            std::mem::replace(&mut *self.live.write().unwrap_or_else(|p| p.into_inner()), live);
        self.invalidate();
        self.reloads.send_modify(|n| *n += 1);
        old
    }

    /// Changes each time a reload puts a config in force.
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// Every configured upstream, by server name.
    pub fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.live().upstreams.clone()
    }

    /// Wakes the reconnection of the (down) server behind an exposed name.
    pub(crate) fn nudge(&self, exposed: &str) {
        let live = self.live();
        if let Some(upstream) =
            live.config.split_exposed(exposed).and_then(|(server, _)| live.upstream(server))
        {
            upstream.nudge();
        }
    }

    /// The upstream of `server` in force now.
    pub(crate) fn upstream(&self, server: &str) -> Option<Arc<Upstream>> {
        self.live().upstream(server).cloned()
    }

    /// The pins tools are checked against (`toolgate tools --accept` writes them).
    pub fn pins(&self) -> &Arc<PinStore> {
        &self.pins
    }

    /// Accepts the live contract of tool `exposed` as its pin (`toolgate
    /// tools --accept`, the console): what changed since the pinned one (none
    /// for a new tool), or why nothing was accepted. The next call sees it.
    pub fn accept(&self, exposed: &str) -> Result<Accepted, String> {
        let catalog = self.current();
        let tool = catalog.pinned(exposed).ok_or_else(|| {
            let names: Vec<&String> = catalog.tools.keys().collect();
            format!(
                "no live tool `{exposed}` (a prompt is `prompt:NAME`, a resource `resource:URI`, a \
                    template `template:URI`); live tools: {names:?}"
            )
        })?;
        let changes = match &tool.pin {
            PinStatus::Pinned => {
                return Ok(Accepted {
                    sha256: tool.definition_sha256.clone(),
                    was: AcceptedFrom::AlreadyPinned,
                    changes: Vec::new(),
                });
            }
            PinStatus::New => (AcceptedFrom::New, Vec::new()),
            PinStatus::Changed(old) => (
                AcceptedFrom::Changed,
                toolgate_core::contract::diff(&old.definition, &tool.tool.definition),
            ),
        };
        if tool.tool.definition.is_null() {
            return Err(format!("{exposed}: the live definition is unreadable; nothing accepted"));
        }
        self.pins
            .accept(exposed, &tool.definition_sha256, &tool.tool.definition)
            .map_err(|e| e.to_string())?;
        self.invalidate();
        tracing::info!(target: "toolgate::pins", tool = exposed, sha256 = %tool.definition_sha256, "contract accepted");
        Ok(Accepted { sha256: tool.definition_sha256.clone(), was: changes.0, changes: changes.1 })
    }

    /// Forces the next `current()` to rebuild (a pin was accepted).
    pub fn invalidate(&self) {
        // The catalog goes too: it holds the `Live` it was built from, which
        // a reload waits to be let go.
        *self.current.write().unwrap_or_else(|p| p.into_inner()) =
            (None, Vec::new(), Arc::default());
    }

    /// The catalog for the config in force and the upstreams' current listings.
    pub fn current(&self) -> Arc<Catalog> {
        let live = self.live();
        let generations: Vec<u64> = live.upstreams.iter().map(|u| u.generation()).collect();
        {
            let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
            if cur.0.as_ref().is_some_and(|l| Arc::ptr_eq(l, &live)) && cur.1 == generations {
                return cur.2.clone();
            }
        }
        let catalog = Arc::new(self.build(live.clone()));
        *self.current.write().unwrap_or_else(|p| p.into_inner()) =
            (Some(live), generations, catalog.clone());
        catalog
    }

    fn build(&self, live: Arc<Live>) -> Catalog {
        let mut catalog = Catalog { live: Some(live.clone()), ..Catalog::default() };
        let mut used = Vec::new();
        for upstream in &live.upstreams {
            let Some(listing) = upstream.listing() else {
                catalog.down.insert(
                    upstream.name.clone(),
                    upstream.down_reason().unwrap_or_else(|| "connecting".into()),
                );
                continue;
            };
            self.add_tools(&live.config, &mut catalog, upstream, &listing, &mut used);
            for kind in [Kind::Prompt, Kind::Resource, Kind::Template] {
                for item in listing.of(kind) {
                    self.add_content(&live.config, &mut catalog, upstream, kind, item, &mut used);
                }
            }
        }
        self.schemas.keep_only(&used);
        catalog
    }

    fn add_tools(
        &self,
        config: &Config,
        catalog: &mut Catalog,
        upstream: &Upstream,
        listing: &Listing,
        used: &mut Vec<String>,
    ) {
        for tool in &listing.tools {
            let exposed_name = config.exposed_name(&upstream.name, &tool.name);
            // The name must lead back to exactly this tool, or a registry
            // entry could grant one tool's class to another.
            let round_trip = config.split_exposed(&exposed_name)
                == Some((upstream.name.as_str(), tool.name.as_str()));
            if !self.unambiguous(
                catalog,
                Kind::Tool,
                &upstream.name,
                &tool.name,
                &exposed_name,
                round_trip,
            ) {
                continue;
            }
            let entry = config.registry.get(&exposed_name);
            let hints = Hints::from_annotations(tool.definition.get("annotations"));
            let view = AuthorityView::new(hints, entry.map(|e| e.class), upstream.trusted);
            let sha = definition_sha256(&tool.definition);
            let pin = self.pin(&exposed_name, &sha, &tool.definition);
            let input = match tool.definition.get("inputSchema") {
                Some(schema @ Value::Object(_)) => self.schemas.compile(schema, used),
                _ => Err("the tool declares no inputSchema object".into()),
            };
            let output = tool
                .definition
                .get("outputSchema")
                .filter(|s| s.is_object())
                .map(|s| self.schemas.compile(s, used));
            let exposed = ExposedTool {
                kind: Kind::Tool,
                exposed_name: exposed_name.clone(),
                server: upstream.name.clone(),
                tool: tool.clone(),
                labels: entry.map(|e| e.labels.clone()).unwrap_or_default(),
                registry_read_only: entry.is_some_and(|e| e.read_only),
                view,
                definition_sha256: sha,
                sandbox: upstream.sandbox().map(|s| Arc::from(s.receipt_name())),
                pin,
                input,
                output,
            };
            catalog.tools.insert(exposed_name, Arc::new(exposed));
        }
    }

    /// The pin status of a definition seen now: a running gateway pins what
    /// it sees for the first time; the CLI only looks.
    fn pin(&self, pin_name: &str, sha: &str, definition: &Value) -> PinStatus {
        if !self.pin_new {
            return self.pins.status(pin_name, sha);
        }
        self.pins.check_and_pin(pin_name, sha, definition).unwrap_or_else(|e| {
            tracing::error!(error = %e, pin = pin_name, "cannot record a pin; it stays unlisted");
            PinStatus::New
        })
    }

    /// A prompt, resource or template: classed by the registry's prompt or
    /// resource entries (else automatic from a trusted server, prohibited
    /// from an untrusted one), with the input schema its contract implies.
    fn add_content(
        &self,
        config: &Config,
        catalog: &mut Catalog,
        upstream: &Upstream,
        kind: Kind,
        item: &Arc<UpstreamTool>,
        used: &mut Vec<String>,
    ) {
        let server = upstream.name.as_str();
        let (exposed_name, round_trip) = match kind {
            Kind::Prompt => {
                let exposed = config.exposed_name(server, &item.name);
                let back = config.split_exposed(&exposed) == Some((server, item.name.as_str()));
                (exposed, back)
            }
            _ => {
                let exposed = config.exposed_uri(server, &item.name);
                let back = config.split_uri(&exposed) == Some((server, item.name.as_str()));
                (exposed, back)
            }
        };
        if !self.unambiguous(catalog, kind, server, &item.name, &exposed_name, round_trip) {
            return;
        }
        let (class, labels) = match kind {
            Kind::Prompt => {
                config.registry_prompts.get(&exposed_name).map(|e| (e.class, e.labels.clone()))
            }
            _ => config
                .registry_resources
                .iter()
                .find(|e| e.names(server, &item.name))
                .map(|e| (e.class, e.labels.clone())),
        }
        .unzip();
        let schema = match kind {
            Kind::Prompt => prompt_schema(&item.definition),
            _ => {
                json!({"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"], "additionalProperties": false})
            }
        };
        let sha = definition_sha256(&item.definition);
        let pin = self.pin(&format!("{}:{exposed_name}", pin_prefix(kind)), &sha, &item.definition);
        let exposed = Arc::new(ExposedTool {
            kind,
            exposed_name: exposed_name.clone(),
            server: server.to_string(),
            tool: item.clone(),
            labels: labels.unwrap_or_default(),
            registry_read_only: true,
            view: AuthorityView::new(*READ_HINTS, class, upstream.trusted),
            definition_sha256: sha,
            sandbox: upstream.sandbox().map(|s| Arc::from(s.receipt_name())),
            pin,
            input: self.schemas.compile(&schema, used),
            output: None,
        });
        match kind {
            Kind::Template => match template_pattern(&exposed_name) {
                Some(pattern) => {
                    catalog.templates.insert(exposed_name, (pattern, exposed));
                }
                None => {
                    tracing::warn!(server, template = %item.name, "a resource template that does not parse is not offered")
                }
            },
            _ => {
                catalog.map(kind).insert(exposed_name, exposed);
            }
        }
    }

    /// Whether `exposed` leads back to exactly `name` of `server`; if not,
    /// it is not offered, and the catalog says why.
    fn unambiguous(
        &self,
        catalog: &mut Catalog,
        kind: Kind,
        server: &str,
        name: &str,
        exposed: &str,
        round_trip: bool,
    ) -> bool {
        let key = match kind {
            Kind::Tool => exposed.to_string(),
            _ => format!("{} {exposed}", kind.noun()),
        };
        // A name seen before stays refused however often it comes back: the
        // listing does not say which definition is meant.
        let seen = match kind {
            Kind::Template => catalog.templates.contains_key(exposed),
            _ => catalog.map(kind).contains_key(exposed),
        };
        let why = if !round_trip {
            Some(format!(
                "`{exposed}` does not name the {} `{name}` of `{server}` unambiguously (rename the server or the {})",
                kind.noun(),
                kind.noun()
            ))
        } else if seen || catalog.ambiguous.contains_key(&key) {
            Some(format!(
                "`{server}` lists the {} `{name}` more than once; it is not offered until it lists it once",
                kind.noun()
            ))
        } else {
            None
        };
        let Some(why) = why else { return true };
        tracing::error!(
            server,
            name,
            exposed,
            kind = kind.noun(),
            "ambiguous exposed name; it is not offered"
        );
        match kind {
            Kind::Template => {
                catalog.templates.remove(exposed);
            }
            _ => {
                catalog.map(kind).remove(exposed);
            }
        }
        catalog.ambiguous.insert(key, why);
        false
    }
}

/// A prompt's arguments as a schema: each a string, the required ones
/// required, no others.
fn prompt_schema(prompt: &Value) -> Value {
    let arguments =
        prompt.get("arguments").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let names = arguments.iter().filter_map(|a| a.get("name").and_then(Value::as_str));
    let properties: serde_json::Map<String, Value> =
        names.map(|n| (n.to_string(), json!({"type": "string"}))).collect();
    let required: Vec<&str> = arguments
        .iter()
        .filter(|a| a.get("required") == Some(&Value::Bool(true)))
        .filter_map(|a| a.get("name").and_then(Value::as_str))
        .collect();
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
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
        for listing in [
            vec![read.clone(), destructive.clone()],
            vec![read.clone(), destructive.clone(), read.clone()],
            vec![read.clone(), read.clone(), read.clone(), find_definition()],
        ] {
            let live = Live::start(listing, Reply::Result("{}"), "", Duration::from_secs(5)).await;
            let catalog = live.catalogs.current();
            assert!(
                !catalog.tools.contains_key("parts__dup"),
                "offered: {:?}",
                catalog.tools.keys().collect::<Vec<_>>()
            );
            assert!(
                catalog.ambiguous["parts__dup"].contains("more than once"),
                "{:?}",
                catalog.ambiguous
            );
        }
        // Listed once, it is offered, beside the others.
        let live = Live::start(
            vec![read, find_definition()],
            Reply::Result("{}"),
            "",
            Duration::from_secs(5),
        )
        .await;
        let catalog = live.catalogs.current();
        assert!(
            catalog.tools.contains_key("parts__dup")
                && catalog.tools.contains_key("parts__find_part")
        );
        assert!(catalog.ambiguous.is_empty());
    }

    #[test]
    fn a_template_matches_what_it_expands_to_and_routes_back_to_the_upstream_s_uri() {
        let exposed = "toolgate://parts/manual://{model}/section/{+path}{?lang}";
        let pattern = super::template_pattern(exposed).unwrap();
        assert!(pattern.is_match("toolgate://parts/manual://ac250/section/a/b"));
        assert!(pattern.is_match("toolgate://parts/manual://ac250/section/a?lang=en"));
        // A simple expression is one segment; literals are literal (`.` too).
        assert!(!pattern.is_match("toolgate://parts/manual://ac/250/section/a"));
        assert!(!pattern.is_match("toolgate://parts/manualX//ac250/section/a"));
        assert!(!pattern.is_match("toolgate://other/manual://ac250/section/a"));
        assert!(super::template_pattern("test://{unclosed").is_none());
        let mut t = crate::stages::testing::tool(
            "parts",
            json!({"name": "manual://{model}/section/{+path}{?lang}", "inputSchema": {}}),
            None,
        );
        t.kind = toolgate_mcp::upstream::Kind::Template;
        t.exposed_name = exposed.to_string();
        assert_eq!(
            t.upstream_uri("toolgate://parts/manual://ac250/section/a/b"),
            "manual://ac250/section/a/b"
        );
        assert_eq!(t.subject(), "resource:manual://{model}/section/{+path}{?lang}");
    }

    #[test]
    fn a_prompt_s_arguments_become_a_closed_schema_of_strings() {
        let schema = super::prompt_schema(
            &json!({"name": "p", "arguments": [{"name": "a", "required": true}, {"name": "b"}, {"name": "c", "required": "yes"}]}),
        );
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}}, "required": ["a"], "additionalProperties": false})
        );
        assert_eq!(super::prompt_schema(&json!({"name": "p"}))["properties"], json!({}));
    }
}
