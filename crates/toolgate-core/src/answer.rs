//! The receipt an answer names: every `tools/call`, prompt get and resource
//! read answer carries `_meta["io.toolgate/receipt"]`, the log's origin and
//! where its receipts sit in the log (leaf index and leaf hash; for a write,
//! its decision's too), so that whoever holds the answer can prove, from the
//! published log alone, that the gateway recorded it. Pure: values in,
//! values out; the proof itself reads tiles (`tiles::inclusion_proof`).

use serde_json::{Map, Value, json};

use crate::merkle::Hash;
use crate::proposal::{canonical_json, hex, sha256_hex, unhex32};
use crate::receipt::{Opening, Placed, Receipt};

/// The `_meta` key of an answer's receipt.
pub const RECEIPT_META: &str = "io.toolgate/receipt";

/// The prefix of toolgate's own `_meta` keys, added to an answer after its
/// result was hashed for the receipt.
pub const OWN_META_PREFIX: &str = "io.toolgate/";

/// What an answer says of its receipts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerReceipt {
    /// The log's origin (its checkpoints' first line).
    pub origin: String,
    /// The receipt of how the call ended (a read's one receipt).
    pub receipt: Placed,
    /// A write's decision to run, appended before it was sent.
    pub decision: Option<Placed>,
    /// Where the log is published (`/log/` on the gateway, or a mirror),
    /// when the gateway names it.
    pub log: Option<String>,
}

fn placed(p: &Placed) -> Value {
    let mut v = json!({"index": p.index, "leaf_hash": hex(&p.leaf_hash)});
    if let Some(o) = &p.opening {
        v["opening"] = opening(o);
    }
    v
}

/// `{"key": hex, "logged": {…}}`: the receipt in the answer, with the key
/// that opens its commitment in the log.
fn opening(o: &Opening) -> Value {
    let logged: Value = serde_json::from_str(&o.logged).expect("a logged receipt is JSON");
    json!({"key": hex(&o.key), "logged": logged})
}

fn read_placed(v: &Value, what: &str) -> Result<Placed, String> {
    let index = v
        .get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{what}.index must be a leaf index (a whole number)"))?;
    let leaf_hash: Hash = v
        .get("leaf_hash")
        .and_then(Value::as_str)
        .and_then(unhex32)
        .ok_or_else(|| format!("{what}.leaf_hash must be 64 hex digits"))?;
    let opening = v.get("opening").map(|o| read_opening(o, what)).transpose()?;
    Ok(Placed { index, leaf_hash, opening })
}

fn read_opening(o: &Value, what: &str) -> Result<Opening, String> {
    let key = o
        .get("key")
        .and_then(Value::as_str)
        .and_then(unhex32)
        .ok_or_else(|| format!("{what}.opening.key must be 64 hex digits"))?;
    let logged = o
        .get("logged")
        .filter(|l| l.is_object())
        .ok_or_else(|| format!("{what}.opening.logged must be the logged receipt (an object)"))?;
    Ok(Opening { key, logged: logged.to_string().into() })
}

impl AnswerReceipt {
    /// Its `_meta` value.
    pub fn to_value(&self) -> Value {
        let mut v = json!({"origin": self.origin, "index": self.receipt.index, "leaf_hash": hex(&self.receipt.leaf_hash)});
        if let Some(o) = &self.receipt.opening {
            v["opening"] = opening(o);
        }
        if let Some(d) = &self.decision {
            v["decision"] = placed(d);
        }
        if let Some(log) = &self.log {
            v["log"] = json!(log);
        }
        v
    }

    /// Its `_meta` value as JSON text, each receipt's logged JSON put in as
    /// it is (`to_value` would parse it into a tree only to write it out
    /// again: this is on every answer's path).
    pub fn to_raw(&self) -> Box<serde_json::value::RawValue> {
        #[derive(serde::Serialize)]
        struct Raw<'a> {
            origin: &'a str,
            index: u64,
            leaf_hash: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            opening: Option<RawOpening>,
            #[serde(skip_serializing_if = "Option::is_none")]
            decision: Option<RawPlaced>,
            #[serde(skip_serializing_if = "Option::is_none")]
            log: Option<&'a str>,
        }
        #[derive(serde::Serialize)]
        struct RawPlaced {
            index: u64,
            leaf_hash: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            opening: Option<RawOpening>,
        }
        #[derive(serde::Serialize)]
        struct RawOpening {
            key: String,
            logged: Box<serde_json::value::RawValue>,
        }
        let opening = |o: &Opening| RawOpening {
            key: hex(&o.key),
            logged: serde_json::value::RawValue::from_string(o.logged.to_string())
                .expect("a logged receipt is JSON"),
        };
        let raw = Raw {
            origin: &self.origin,
            index: self.receipt.index,
            leaf_hash: hex(&self.receipt.leaf_hash),
            opening: self.receipt.opening.as_ref().map(opening),
            decision: self.decision.as_ref().map(|d| RawPlaced {
                index: d.index,
                leaf_hash: hex(&d.leaf_hash),
                opening: d.opening.as_ref().map(opening),
            }),
            log: self.log.as_deref(),
        };
        serde_json::value::to_raw_value(&raw).expect("the receipt serializes")
    }

    /// Reads its `_meta` value.
    pub fn from_value(v: &Value) -> Result<Self, String> {
        let origin = v
            .get("origin")
            .and_then(Value::as_str)
            .filter(|o| !o.is_empty())
            .ok_or("the receipt names no origin (its log)")?;
        let receipt = read_placed(v, "the receipt")?;
        let decision =
            v.get("decision").map(|d| read_placed(d, "the receipt's decision")).transpose()?;
        let log = v.get("log").and_then(Value::as_str).map(str::to_string);
        Ok(Self { origin: origin.to_string(), receipt, decision, log })
    }
}

/// The members an answer carries (a result's, a JSON-RPC response's, and
/// the names the Python SDK's `model_dump_json()` gives some of them), which
/// a receipt saved alone never does.
const ANSWER_MEMBERS: [&str; 13] = [
    "content",
    "structuredContent",
    "isError",
    "resultType",
    "messages",
    "contents",
    "result",
    "error",
    "_meta",
    "structured_content",
    "is_error",
    "result_type",
    "meta",
];

/// A saved answer, as `toolgate verify --answer` reads it: its receipt, and
/// the result it came with when the whole answer was saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// The receipt it names.
    pub receipt: AnswerReceipt,
    /// The result (a `tools/call`, `prompts/get` or `resources/read`
    /// result object), when given.
    pub result: Option<Value>,
    /// The JSON-RPC error object, when a whole error answer was saved.
    pub error: Option<Value>,
}

/// Finds the receipt in what was saved: the receipt object itself, a
/// `_meta` object holding it, a result, or a whole JSON-RPC response.
pub fn read_saved(doc: &Value) -> Result<Saved, String> {
    // The receipt alone (or a `_meta` holding it) proves the receipt only:
    // one that carries an answer's members beside it would be "verified"
    // without that answer being judged, so it is refused.
    let alone = doc.get("origin").is_some() && doc.get("index").is_some()
        || doc.get(RECEIPT_META).is_some();
    if alone && let Some(member) = ANSWER_MEMBERS.iter().find(|m| doc.get(**m).is_some()) {
        return Err(format!(
            "the saved receipt carries an answer's {member:?} beside it: save the whole answer \
                (its result holds the receipt in _meta), or the receipt alone"
        ));
    }
    if doc.get("origin").is_some() && doc.get("index").is_some() {
        return Ok(Saved { receipt: AnswerReceipt::from_value(doc)?, result: None, error: None });
    }
    if let Some(r) = doc.get(RECEIPT_META) {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: None, error: None });
    }
    if let Some(r) = doc.get("_meta").and_then(|m| m.get(RECEIPT_META)) {
        return Ok(Saved {
            receipt: AnswerReceipt::from_value(r)?,
            result: Some(doc.clone()),
            error: None,
        });
    }
    // A result as the Python SDK's `model_dump_json()` writes it: `_meta` is `meta` there.
    if doc.get("_meta").is_none()
        && let Some(r) = doc.get("meta").and_then(|m| m.get(RECEIPT_META))
    {
        return Ok(Saved {
            receipt: AnswerReceipt::from_value(r)?,
            result: Some(doc.clone()),
            error: None,
        });
    }
    if let Some(result) = doc.get("result").filter(|r| r.is_object()) {
        return read_saved(result);
    }
    if let Some(error) = doc.get("error").filter(|e| e.is_object())
        && let Some(r) =
            error.get("data").and_then(|d| d.get("_meta")).and_then(|m| m.get(RECEIPT_META))
    {
        return Ok(Saved {
            receipt: AnswerReceipt::from_value(r)?,
            result: None,
            error: Some(error.clone()),
        });
    }
    Err(format!(
        "no receipt found: expected _meta[\"{RECEIPT_META}\"] in the answer, its result, or the receipt object itself"
    ))
}

/// `_meta` as a receipt may have hashed it: without any of toolgate's keys,
/// or (a replay's, which hashes the result as replayed, with its
/// `io.toolgate/operation` note) without its receipt alone; each variant
/// also absent when that leaves it empty (toolgate added it). `None`: no
/// `_meta` member. Distinct, in that order.
fn meta_variants(meta: Option<&Value>) -> Vec<Option<Value>> {
    let Some(Value::Object(meta)) = meta else { return vec![meta.cloned()] };
    let mut out: Vec<Option<Value>> = Vec::new();
    let strips: [&dyn Fn(&str) -> bool; 2] =
        [&|k| k.starts_with(OWN_META_PREFIX), &|k| k == RECEIPT_META];
    for strip in strips {
        let kept: Map<String, Value> =
            meta.iter().filter(|(k, _)| !strip(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        if kept.is_empty() && !out.contains(&None) {
            out.push(None);
        }
        let kept = Some(Value::Object(kept));
        if !out.contains(&kept) {
            out.push(kept);
        }
    }
    out
}

/// The `result_sha256` a receipt may give for this result exactly as saved:
/// SHA-256 of its JCS once toolgate's notes are taken out of `_meta` (see
/// [`meta_variants`]). What [`judge`] tries first; it then reads the result
/// as a stock MCP SDK hands it back ([`prove_result`]).
pub fn result_sha256(result: &Value) -> Vec<String> {
    let Some(object) = result.as_object() else {
        return vec![sha256_hex(canonical_json(result).as_bytes())];
    };
    let mut out: Vec<String> = Vec::new();
    for meta in meta_variants(object.get("_meta")) {
        let mut bare = object.clone();
        match meta {
            Some(m) => bare.insert("_meta".into(), m),
            None => bare.remove("_meta"),
        };
        out.push(sha256_hex(canonical_json(&Value::Object(bare)).as_bytes()));
    }
    out
}

// ---------------------------------------------------------------------------
// An answer as a stock MCP SDK hands it back.
//
// The receipt commits to the result the gateway sent, exactly (its JCS).
// A client library parses that result into its own model and gives the
// caller the model, which differs from what was sent in ways fixed by the
// protocol's schema: members the schema gives a default may appear or go,
// optional members come back as null, names may be in the library's own
// spelling. A verifier reads the saved answer back into the wire's form in
// each of those ways (a bounded set of readings, none of which touches what
// the tool said) and proves the answer if one of them hashes to
// `result_sha256`. docs/RECEIPTS.md ("An answer as an SDK hands it back")
// defines the readings for independent verifiers and argues why no two
// answers that mean different things can both prove against one receipt.
// ---------------------------------------------------------------------------

/// The scheme under which the gateway shows a namespaced server's resource
/// URIs (`toolgate://SERVER/URI`, the gateway's `config::URI_SCHEME`).
const URI_SCHEME: &str = "toolgate://";

/// Which request a result answers, and so which of the protocol's result
/// schemas its members follow. A receipt names it: `prompt:NAME` for a
/// prompt get, `resource:URI` for a resource read, else a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A `tools/call` result (`CallToolResult`).
    Call,
    /// A `prompts/get` result (`GetPromptResult`).
    Prompt,
    /// A `resources/read` result (`ReadResourceResult`).
    Read,
}

impl Shape {
    /// The shape of the result a receipt naming `tool` records.
    pub fn of(tool: &str) -> Self {
        if tool.starts_with("prompt:") {
            Shape::Prompt
        } else if tool.starts_with("resource:") {
            Shape::Read
        } else {
            Shape::Call
        }
    }
}

/// An object of the protocol's schema inside a result: where the SDK's
/// model, not the tool, decides names, defaults and nulls. Everything else
/// (`structuredContent`, any `_meta`'s value, text, data) is the tool's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    /// The result itself.
    Result(Shape),
    /// A prompt's message (`PromptMessage`).
    Message,
    /// A content block (`ContentBlock`: text, image, audio, resource_link, resource).
    Block,
    /// A block's `annotations`.
    Annotations,
    /// A resource link's icon.
    Icon,
    /// A resource's contents (`TextResourceContents`, `BlobResourceContents`).
    Contents,
}

impl Model {
    /// The members the schema names (`None`: a block of a type it does not name).
    fn members(self, object: &Map<String, Value>) -> Option<&'static [&'static str]> {
        Some(match self {
            Model::Result(Shape::Call) => {
                &["content", "structuredContent", "isError", "resultType", "_meta"]
            }
            Model::Result(Shape::Prompt) => &["description", "messages", "resultType", "_meta"],
            Model::Result(Shape::Read) => {
                &["contents", "resultType", "ttlMs", "cacheScope", "_meta"]
            }
            Model::Message => &["role", "content"],
            Model::Block => match object.get("type").and_then(Value::as_str) {
                Some("text") => &["type", "text", "annotations", "_meta"],
                Some("image" | "audio") => &["type", "data", "mimeType", "annotations", "_meta"],
                Some("resource_link") => &[
                    "type",
                    "uri",
                    "name",
                    "title",
                    "description",
                    "mimeType",
                    "size",
                    "icons",
                    "annotations",
                    "_meta",
                ],
                Some("resource") => &["type", "resource", "annotations", "_meta"],
                _ => return None,
            },
            Model::Annotations => &["audience", "priority", "lastModified"],
            Model::Icon => &["src", "mimeType", "sizes", "theme"],
            Model::Contents => &["uri", "mimeType", "_meta", "text", "blob"],
        })
    }

    /// The optional members whose type excludes null: the Python SDK reads
    /// a null there as absent and writes one for each it lacks (a dump
    /// without `exclude_none`); the TypeScript SDK refuses a null there.
    fn optional(self, object: &Map<String, Value>) -> &'static [&'static str] {
        match self {
            Model::Result(Shape::Call) => &["structuredContent", "isError", "_meta"],
            Model::Result(Shape::Prompt) => &["description", "_meta"],
            Model::Result(Shape::Read) => &["_meta"],
            Model::Message => &[],
            Model::Block => match object.get("type").and_then(Value::as_str) {
                Some("resource_link") => {
                    &["title", "description", "mimeType", "size", "icons", "annotations", "_meta"]
                }
                Some("text" | "image" | "audio" | "resource") => &["annotations", "_meta"],
                _ => &[],
            },
            Model::Annotations => &["audience", "priority", "lastModified"],
            Model::Icon => &["mimeType", "sizes", "theme"],
            Model::Contents => &["mimeType", "_meta"],
        }
    }

    /// The model of what `key` holds, when it holds schema objects
    /// (`true`: a list of them).
    fn child(self, key: &str, object: &Map<String, Value>) -> Option<(Model, bool)> {
        let kind = object.get("type").and_then(Value::as_str);
        match (self, key) {
            (Model::Result(Shape::Call), "content") => Some((Model::Block, true)),
            (Model::Result(Shape::Prompt), "messages") => Some((Model::Message, true)),
            (Model::Result(Shape::Read), "contents") => Some((Model::Contents, true)),
            (Model::Message, "content") => Some((Model::Block, false)),
            (Model::Block, "annotations") if kind.is_some() => Some((Model::Annotations, false)),
            (Model::Block, "icons") if kind == Some("resource_link") => Some((Model::Icon, true)),
            (Model::Block, "resource") if kind == Some("resource") => {
                Some((Model::Contents, false))
            }
            _ => None,
        }
    }
}

/// The Python SDK's own names of the members it models, as its
/// `model_dump_json()` (and `model_dump()` without `by_alias`) writes them,
/// with the wire's.
const SNAKE: [(&str, &str); 8] = [
    ("meta", "_meta"),
    ("structured_content", "structuredContent"),
    ("is_error", "isError"),
    ("result_type", "resultType"),
    ("ttl_ms", "ttlMs"),
    ("cache_scope", "cacheScope"),
    ("mime_type", "mimeType"),
    ("last_modified", "lastModified"),
];

/// Calls `f` on every schema object in `value` (of `model`; a list of them
/// when `list`), each before the objects inside it, with its path
/// (`content[0].annotations`).
fn each_model(
    value: &mut Value,
    model: Model,
    list: bool,
    path: &str,
    f: &mut dyn FnMut(&mut Map<String, Value>, Model, &str) -> Result<(), String>,
) -> Result<(), String> {
    if list {
        if let Value::Array(items) = value {
            for (i, item) in items.iter_mut().enumerate() {
                each_model(item, model, false, &format!("{path}[{i}]"), f)?;
            }
        }
        return Ok(());
    }
    let Value::Object(object) = value else { return Ok(()) };
    f(object, model, path)?;
    let children: Vec<(String, Model, bool)> = object
        .keys()
        .filter_map(|k| model.child(k, object).map(|(m, l)| (k.clone(), m, l)))
        .collect();
    for (key, child, list) in children {
        let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        each_model(object.get_mut(&key).expect("a member just listed"), child, list, &at, f)?;
    }
    Ok(())
}

/// The result read with the wire's names where it has the Python SDK's
/// own (`model_dump_json()`), in every schema object and nowhere else; an
/// object carrying a member under both names is not such a dump.
fn wire_names(result: &Value, shape: Shape) -> Option<Value> {
    let mut out = result.clone();
    each_model(&mut out, Model::Result(shape), false, "", &mut |object, _, path| {
        for (snake, wire) in SNAKE {
            if let Some(v) = object.remove(snake) {
                if object.contains_key(wire) {
                    return Err(format!("{path} names {wire} twice"));
                }
                object.insert(wire.to_string(), v);
            }
        }
        Ok(())
    })
    .ok()?;
    Some(out)
}

/// Whether the result's own members are named as the Python SDK's
/// `model_dump_json()` names them (it always writes `result_type`).
fn snake_named(result: &Value) -> bool {
    let Some(object) = result.as_object() else { return false };
    object.keys().any(|k| SNAKE.iter().any(|(snake, _)| snake == k) && k != "meta")
        || object.contains_key("meta") && !object.contains_key("_meta")
}

/// The result without the nulls at the schema's optional members (see
/// [`Model::optional`]), and where they were.
fn without_nulls(result: &Value, shape: Shape) -> (Value, Vec<String>) {
    let mut out = result.clone();
    let mut found = Vec::new();
    let _ = each_model(&mut out, Model::Result(shape), false, "", &mut |object, model, path| {
        let nulls: Vec<&'static str> = model
            .optional(object)
            .iter()
            .copied()
            .filter(|k| object.get(*k).is_some_and(Value::is_null))
            .collect();
        for key in nulls {
            object.remove(key);
            found.push(if path.is_empty() { key.to_string() } else { format!("{path}.{key}") });
        }
        Ok(())
    });
    (out, found)
}

/// A read's contents under the URIs the upstream gave them: the gateway
/// shows each `contents[i].uri` of a namespaced server as
/// `toolgate://SERVER/URI` after the receipt hashed it.
fn upstream_uris(result: &Value, server: &str) -> Option<Value> {
    let prefix = format!("{URI_SCHEME}{server}/");
    let mut out = result.clone();
    let mut changed = false;
    for item in out.get_mut("contents").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(uri) =
            item.get("uri").and_then(Value::as_str).and_then(|u| u.strip_prefix(&prefix))
        {
            item["uri"] = Value::String(uri.to_string());
            changed = true;
        }
    }
    changed.then_some(out)
}

/// The readings of a saved result, as saved first: with the wire's names
/// (when it has the Python SDK's), without the nulls at the schema's
/// optional members (when it has any), and a read's contents under the
/// upstream's URIs (when the gateway renamed them); each with what was
/// read into it.
fn readings(result: &Value, shape: Shape, server: &str) -> Vec<(Value, Vec<String>)> {
    let mut out = vec![(result.clone(), Vec::new())];
    if snake_named(result)
        && let Some(renamed) = wire_names(result, shape)
    {
        out.push((
            renamed,
            vec![
                "the names read as the Python SDK's model_dump_json() writes them (is_error for \
                    isError, meta for _meta, …)"
                    .to_string(),
            ],
        ));
    }
    for i in 0..out.len() {
        let (stripped, nulls) = without_nulls(&out[i].0, shape);
        if !nulls.is_empty() {
            let mut notes = out[i].1.clone();
            notes.push(format!(
                "{} null(s) at optional fields of the protocol's schema read as absent, as the \
                    SDKs read them ({})",
                nulls.len(),
                listed(&nulls)
            ));
            out.push((stripped, notes));
        }
    }
    if shape == Shape::Read {
        for i in 0..out.len() {
            if let Some(renamed) = upstream_uris(&out[i].0, server) {
                let mut notes = out[i].1.clone();
                notes.push(format!("the contents' URIs read as the upstream named them (the answer shows them under {URI_SCHEME}{server}/)"));
                out.push((renamed, notes));
            }
        }
    }
    out
}

/// At most three items of a list, then how many more.
fn listed(items: &[String]) -> String {
    let mut text = items.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 3 {
        text.push_str(&format!(" and {} more", items.len() - 3));
    }
    text
}

/// The members of a result the schema gives a default, with it, for each
/// shape; and whether a stock SDK may take the member out (`true`: the
/// TypeScript SDK removes `resultType` from every result) besides putting
/// it in (the Python SDK writes each of its defaults it finds absent; the
/// TypeScript SDK writes `content: []`).
fn defaults(shape: Shape) -> Vec<(&'static str, Value, bool)> {
    let mut out = vec![("resultType", json!("complete"), true)];
    match shape {
        Shape::Call => {
            out.extend([("isError", json!(false), false), ("content", json!([]), false)])
        }
        Shape::Prompt => {}
        Shape::Read => {
            out.extend([("ttlMs", json!(0), false), ("cacheScope", json!("private"), false)])
        }
    }
    out
}

/// Whether `v` is `default` as JCS writes them (a number by the double it
/// denotes: `0` and `0.0` alike; `false` is no number).
fn is_default(v: &Value, default: &Value) -> bool {
    match (v, default) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => v == default,
    }
}

/// One change a reading of the top level may make: a member whose value is
/// the schema's default, taken out (the SDK wrote it) or put in (the SDK
/// took it out).
struct Toggle {
    name: &'static str,
    /// Where the default's JCS lies in the scratch text.
    at: std::ops::Range<usize>,
    /// Whether the saved result carries it.
    present: bool,
}

/// Finds the reading of `result` whose JCS hashes to `want`: each of
/// [`readings`], with toolgate's notes out of `_meta` ([`meta_variants`]),
/// and each default a stock SDK may have written or left out, taken out or
/// put back ([`defaults`]). The notes of the one found (none: as saved).
/// Each top-level member's JCS is written once per reading, the candidates
/// put together from them.
pub fn prove_result(result: &Value, shape: Shape, server: &str, want: &str) -> Option<Vec<String>> {
    if !result.is_object() {
        return (sha256_hex(canonical_json(result).as_bytes()) == want).then(Vec::new);
    }
    for (reading, notes) in readings(result, shape, server) {
        let Value::Object(object) = &reading else { continue };
        let mut scratch = String::new();
        let write = |v: &Value, scratch: &mut String| {
            let start = scratch.len();
            scratch.push_str(&canonical_json(v));
            start..scratch.len()
        };
        let mut toggles: Vec<Toggle> = Vec::new();
        for (name, default, removable) in defaults(shape) {
            match object.get(name) {
                Some(v) if is_default(v, &default) => {
                    toggles.push(Toggle { name, at: write(v, &mut scratch), present: true })
                }
                None if removable => {
                    toggles.push(Toggle { name, at: write(&default, &mut scratch), present: false })
                }
                _ => {}
            }
        }
        let fixed: Vec<(&str, std::ops::Range<usize>)> = object
            .iter()
            .filter(|(k, _)| *k != "_meta" && !toggles.iter().any(|t| t.name == k.as_str()))
            .map(|(k, v)| (k.as_str(), write(v, &mut scratch)))
            .collect::<Vec<_>>();
        let metas: Vec<Option<std::ops::Range<usize>>> = meta_variants(object.get("_meta"))
            .into_iter()
            .map(|m| m.map(|m| write(&m, &mut scratch)))
            .collect();
        for meta in &metas {
            for flips in 0u32..(1 << toggles.len()) {
                let mut members: Vec<(std::borrow::Cow<'_, str>, std::ops::Range<usize>)> =
                    fixed.iter().map(|(k, r)| ((*k).into(), r.clone())).collect();
                if let Some(m) = meta {
                    members.push(("_meta".into(), m.clone()));
                }
                let mut said = notes.clone();
                for (i, t) in toggles.iter().enumerate() {
                    let flipped = flips & (1 << i) != 0;
                    if t.present != flipped {
                        members.push((t.name.into(), t.at.clone()));
                    }
                    if flipped {
                        let value = &scratch[t.at.clone()];
                        said.push(if t.present {
                            format!("{}: {value} read as the SDK's default, absent from the result the gateway sent", t.name)
                        } else {
                            format!("{}: {value}, which the result the gateway sent carried, read back where the SDK left it out", t.name)
                        });
                    }
                }
                let mut text = String::with_capacity(scratch.len());
                crate::jcs::write_members(members, &scratch, &mut text);
                if sha256_hex(text.as_bytes()) == want {
                    return Some(said);
                }
            }
        }
    }
    None
}

/// The result read into the wire's form as the SDK's reading can be, with
/// nothing to choose: the wire's names (when it has the Python SDK's), and
/// without the nulls at the schema's optional members. A refusal toolgate
/// gives has none of either, so its answer is judged in this form.
fn as_wire(result: &Value, shape: Shape) -> Value {
    let named = if snake_named(result) {
        wire_names(result, shape).unwrap_or_else(|| result.clone())
    } else {
        result.clone()
    };
    without_nulls(&named, shape).0
}

/// Where an answer departs from the result its receipt carries.
struct Departure {
    /// What, with its path.
    said: String,
    /// Whether a stock SDK loses this on its own: a member outside the
    /// schema, or a null at a member of it, that the answer lacks.
    lost: bool,
}

/// A value as a report quotes it: its JCS, at most 60 characters, escaped.
fn quoted(v: &Value) -> String {
    let text = canonical_json(v);
    let mut short: String = text.chars().take(60).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    crate::visible::visible(&short).into_owned()
}

/// The departures of `answer` from `recorded`, each schema object compared
/// by its members and each list by its items; `model` is what `answer` is
/// in the schema (`None`: the tool's value).
fn departures(
    answer: &Value,
    recorded: &Value,
    model: Option<(Model, bool)>,
    path: &str,
    out: &mut Vec<Departure>,
) {
    let at = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
    let shown = |p: &str| {
        if p.is_empty() {
            "the result".to_string()
        } else {
            crate::visible::visible(p).into_owned()
        }
    };
    match (answer, recorded) {
        (Value::Array(a), Value::Array(r)) => {
            if a.len() != r.len() {
                out.push(Departure {
                    said: format!(
                        "{} holds {} items, the recorded result {}",
                        shown(path),
                        a.len(),
                        r.len()
                    ),
                    lost: false,
                });
                return;
            }
            let item = model.map(|(m, _)| (m, false));
            for (i, (x, y)) in a.iter().zip(r).enumerate() {
                departures(x, y, item, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Object(a), Value::Object(r)) if model.is_none_or(|(_, list)| !list) => {
            let model = model.map(|(m, _)| m);
            let mut keys: Vec<&String> = a.keys().chain(r.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let p = at(key);
                match (a.get(key), r.get(key)) {
                    (Some(x), Some(y)) => {
                        departures(x, y, model.and_then(|m| m.child(key, r)), &p, out)
                    }
                    (None, Some(y)) => {
                        let known = model
                            .and_then(|m| m.members(r))
                            .is_some_and(|members| members.contains(&key.as_str()));
                        let (said, lost) = match model {
                            Some(_) if y.is_null() => (
                                format!(
                                    "the SDK dropped a null at {}, which the recorded result carries",
                                    shown(&p)
                                ),
                                true,
                            ),
                            Some(_) if !known => (
                                format!(
                                    "the SDK dropped {}, a member outside the protocol's schema (recorded: {})",
                                    shown(&p),
                                    quoted(y)
                                ),
                                true,
                            ),
                            _ => (
                                format!("the answer lacks {} (recorded: {})", shown(&p), quoted(y)),
                                false,
                            ),
                        };
                        out.push(Departure { said, lost });
                    }
                    (Some(x), None) => out.push(Departure {
                        said: format!(
                            "the answer adds {} ({}), which the recorded result does not carry",
                            shown(&p),
                            quoted(x)
                        ),
                        lost: false,
                    }),
                    (None, None) => {}
                }
            }
        }
        (a, r) if a != r => out.push(Departure {
            said: format!(
                "{} is {} in the answer, {} in the recorded result",
                shown(path),
                quoted(a),
                quoted(r)
            ),
            lost: false,
        }),
        _ => {}
    }
}

/// Why no reading of the answer's result hashes to `want`. When the
/// receipt carries the result it records (`receipts.capture_values`), what
/// departs from it, each by its path; else what a stock SDK cannot give
/// back, which the recorded result may have held.
fn unproven(r: &Receipt, result: &Value, shape: Shape, want: &str) -> String {
    let head = format!(
        "the answer's result does not hash to the receipt's result_sha256 {want}, as saved or read as a stock MCP SDK hands a result back"
    );
    let Some(recorded) =
        r.result.as_ref().filter(|v| sha256_hex(canonical_json(v).as_bytes()) == want)
    else {
        return format!(
            "{head}: it is not the answer the gateway recorded, or the recorded result held what a \
                stock SDK drops and no dump of it gives back (a member outside the protocol's \
                schema: the Python SDK drops every one, the TypeScript SDK those in content \
                blocks, messages and resource contents; or a null at a field of the schema, which \
                the Python SDK drops with exclude_none). Save the raw JSON-RPC response to prove \
                such a result, or verify the `_meta` receipt alone to prove only the receipt"
        );
    };
    // The answer in the wire's form, aligned with the recorded result where
    // a reading may choose: toolgate's notes out, the schema's defaults as recorded.
    let mut answer = as_wire(result, shape);
    if shape == Shape::Read
        && let Some(renamed) = upstream_uris(&answer, &r.server)
    {
        answer = renamed;
    }
    if let Value::Object(object) = &mut answer {
        match meta_variants(object.get("_meta"))
            .into_iter()
            .find(|m| m.as_ref() == recorded.get("_meta"))
            .or_else(|| meta_variants(object.get("_meta")).into_iter().next())
            .flatten()
        {
            Some(m) => object.insert("_meta".into(), m),
            None => object.remove("_meta"),
        };
        for (name, default, _) in defaults(shape) {
            match (object.get(name), recorded.get(name)) {
                (Some(v), None) if is_default(v, &default) => {
                    object.remove(name);
                }
                (None, Some(v)) if is_default(v, &default) => {
                    object.insert(name.to_string(), default);
                }
                _ => {}
            }
        }
    }
    let mut found = Vec::new();
    departures(&answer, recorded, Some((Model::Result(shape), false)), "", &mut found);
    let lost = !found.is_empty() && found.iter().all(|d| d.lost);
    let said: Vec<String> = found.into_iter().map(|d| d.said).collect();
    if lost {
        format!(
            "{head}. The receipt carries the result it records, and the answer is that result but \
                for what the SDK dropped: {}. A stock SDK's answer cannot carry these, so it is \
                not proven whole: save the raw JSON-RPC response to prove it",
            listed(&said)
        )
    } else {
        format!(
            "{head}: it is not the answer the gateway recorded. The receipt carries the result it records, from which the answer departs: {}",
            listed(&said)
        )
    }
}

/// How the answer a caller holds stands against the receipt that records
/// it: `Ok` says what was proven (and what a receipt of its kind does not
/// commit to), `Err` what the answer claims that the receipt does not. A
/// verifier must prove the whole answer, never only a part of it: an
/// answer that wraps a refusal's genuine receipt in an invented success
/// fails here, as does a refusal whose words were changed.
pub fn judge(
    r: &Receipt,
    result: Option<&Value>,
    error: Option<&Value>,
) -> Option<Result<String, String>> {
    match (result, error) {
        (Some(result), _) => Some(judge_result(r, result)),
        (None, Some(error)) => Some(judge_error(r, error)),
        (None, None) => None,
    }
}

/// The receipt records a result the caller was given (a read's, a write's
/// outcome, a replay's), which `result_sha256` hashes.
fn records_result(r: &Receipt) -> bool {
    matches!(r.result_status.as_str(), "ok" | "tool_error") && r.result_sha256.is_some()
}

fn judge_result(r: &Receipt, result: &Value) -> Result<String, String> {
    let shape = Shape::of(&r.tool);
    if records_result(r) {
        let want = r.result_sha256.as_deref().unwrap_or_default();
        return match prove_result(result, shape, &r.server, want) {
            Some(notes) if notes.is_empty() => {
                Ok(format!("the answer's result hashes to the receipt's result_sha256 {want}"))
            }
            Some(notes) => Ok(format!(
                "the answer's result hashes to the receipt's result_sha256 {want}, read as a stock MCP SDK hands it back: {}",
                notes.join("; ")
            )),
            None => Err(unproven(r, result, shape, want)),
        };
    }
    // A refusal toolgate gives has no null at a field of the schema: a
    // stock SDK's dump of it is judged in the wire's names, without them.
    let result = &as_wire(result, shape);
    let recorded = format!("{} / {} / {}", r.result_status, r.decision, r.reason);
    if r.result_status.starts_with("protocol_error") {
        return Err(format!(
            "the receipt records a JSON-RPC error ({recorded}), but the answer is a result"
        ));
    }
    // A call held for its approval may ask its client for input instead
    // (the 2026-07-28 era's `input_required`): the question is toolgate's,
    // worded after the receipt was committed with the approval.
    if r.result_status == "awaiting_approval"
        && result.get("resultType").and_then(Value::as_str) == Some("input_required")
    {
        return Ok(format!(
            "the answer asks for input while the call waits for its approval, as the receipt \
                records ({recorded}); the receipt does not commit to the question's words, which \
                are not proven"
        ));
    }
    // A call whose person must first connect their account may ask its
    // client to open the link (`input_required`, URL mode): toolgate's
    // question, worded after the receipt recorded the refusal.
    if r.reason == "connect_required"
        && result.get("resultType").and_then(Value::as_str) == Some("input_required")
    {
        return Ok(format!(
            "the answer asks the person to connect their account, as the receipt records \
                ({recorded}); the receipt does not commit to the question's words or its link, \
                which are not proven"
        ));
    }
    if result.get("isError") != Some(&Value::Bool(true)) {
        return Err(format!(
            "the receipt records no result ({recorded}), but the answer claims one (its isError is not true)"
        ));
    }
    let object = result.as_object().ok_or("the answer is not an object")?;
    // The modern era marks every result `"resultType": "complete"`.
    if object.get("resultType").is_some_and(|t| t != "complete") {
        return Err("the answer's resultType is not \"complete\": it is not the refusal the receipt records".into());
    }
    if let Some(key) = object.keys().find(|k| {
        !matches!(k.as_str(), "content" | "structuredContent" | "isError" | "_meta" | "resultType")
    }) {
        return Err(format!(
            "the answer carries {:?}, which a refusal toolgate gives does not: it is not the answer the receipt records",
            crate::visible::visible(key)
        ));
    }
    if let Some(key) = object
        .get("_meta")
        .and_then(Value::as_object)
        .and_then(|m| m.keys().find(|k| !k.starts_with(OWN_META_PREFIX)))
    {
        return Err(format!(
            "the answer's _meta carries {:?}, which a refusal toolgate gives does not",
            crate::visible::visible(key)
        ));
    }
    let refusal = result.get("structuredContent").filter(|s| s.is_object()).ok_or_else(|| {
        format!(
            "the receipt records a refusal ({recorded}), and the answer carries none (no \
                structuredContent)"
        )
    })?;
    let message = refusal.get("message").and_then(Value::as_str).unwrap_or_default();
    if result.get("content") != Some(&json!([{"type": "text", "text": message}])) {
        return Err("the answer's text is not the refusal's message: it is not the answer the receipt records".into());
    }
    judge_refusal(r, refusal, &recorded)
}

fn judge_error(r: &Receipt, error: &Value) -> Result<String, String> {
    let recorded = format!("{} / {} / {}", r.result_status, r.decision, r.reason);
    let code = error.get("code").and_then(Value::as_i64);
    if let Some(want) = r.result_status.strip_prefix("protocol_error:") {
        return match code {
            Some(c) if c.to_string() == want => Ok(format!(
                "the answer is the JSON-RPC error {c} the receipt records (an error's message is not committed by its receipt: not proven)"
            )),
            _ => Err(format!(
                "the receipt records the JSON-RPC error {want}; the answer is error {}",
                code.map_or("(none)".into(), |c| c.to_string())
            )),
        };
    }
    if records_result(r) {
        return Err(format!(
            "the receipt records a result ({recorded}), but the answer is a JSON-RPC error"
        ));
    }
    let mut refusal = error.get("data").filter(|d| d.is_object()).cloned().ok_or_else(|| {
        format!("the receipt records a refusal ({recorded}); the error carries none (no data)")
    })?;
    let meta_is_ours = refusal
        .get("_meta")
        .and_then(Value::as_object)
        .is_none_or(|m| m.keys().all(|k| k.starts_with(OWN_META_PREFIX)));
    refusal.as_object_mut().expect("an object").remove("_meta");
    if !meta_is_ours {
        return Err("the error's _meta carries keys a refusal toolgate gives does not".into());
    }
    if error.get("message") != refusal.get("message") {
        return Err(
            "the error's message is not the refusal's: it is not the answer the receipt records"
                .into(),
        );
    }
    judge_refusal(r, &refusal, &recorded)
}

/// A refusal, as the answer carries it, against the receipt's record.
fn judge_refusal(r: &Receipt, refusal: &Value, recorded: &str) -> Result<String, String> {
    if let Some(want) = &r.result_sha256 {
        return if sha256_hex(canonical_json(refusal).as_bytes()) == *want {
            Ok(format!("the answer is the refusal the receipt records, whole ({recorded})"))
        } else {
            Err(format!(
                "the refusal in the answer is not the one the receipt records ({recorded}): its words or fields were changed"
            ))
        };
    }
    let said = |k: &str| refusal.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    if said("decision") != r.decision || said("reason") != r.reason {
        return Err(format!(
            "the answer is a refusal ({} / {}), not the one the receipt records ({recorded})",
            crate::visible::visible(&said("decision")),
            crate::visible::visible(&said("reason"))
        ));
    }
    if let Some(approval) = &r.approval
        && said("approval_id") != approval.id
    {
        return Err(format!(
            "the answer names another approval than the receipt's ({})",
            approval.id
        ));
    }
    Ok(format!(
        "the answer is a refusal with the receipt's decision and reason ({recorded}); a receipt of \
            its kind does not commit to the refusal's message, which is not proven"
    ))
}

/// `object` with `receipt` in its `_meta` (created when absent), beside the
/// keys already there.
pub fn with_receipt(mut object: Map<String, Value>, receipt: &AnswerReceipt) -> Map<String, Value> {
    let meta = object.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("an object").insert(RECEIPT_META.to_string(), receipt.to_value());
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt() -> AnswerReceipt {
        AnswerReceipt {
            origin: "toolgate.example/log".into(),
            receipt: Placed {
                index: 41,
                leaf_hash: [7; 32],
                opening: Some(Opening { key: [9; 32], logged: r#"{"receipt":{"v":3}}"#.into() }),
            },
            decision: Some(Placed { index: 40, leaf_hash: [6; 32], opening: None }),
            log: Some("https://gw.example/log/".into()),
        }
    }

    #[test]
    fn the_receipt_round_trips_and_bad_ones_say_what_is_wrong() {
        let r = receipt();
        assert_eq!(AnswerReceipt::from_value(&r.to_value()).unwrap(), r);
        assert_eq!(serde_json::from_str::<Value>(r.to_raw().get()).unwrap(), r.to_value());
        let bare = AnswerReceipt {
            decision: None,
            log: None,
            receipt: Placed { opening: None, ..r.receipt.clone() },
            ..r.clone()
        };
        assert_eq!(bare.to_value().as_object().unwrap().len(), 3);
        assert!(AnswerReceipt::from_value(&json!({"origin": "o", "index": 1, "leaf_hash": hex(&[0; 32]), "opening": {"key": "x", "logged": {}}})).unwrap_err().contains("opening.key"));
        assert!(
            AnswerReceipt::from_value(&json!({"index": 1, "leaf_hash": hex(&[0; 32])}))
                .unwrap_err()
                .contains("origin")
        );
        assert!(
            AnswerReceipt::from_value(
                &json!({"origin": "o", "index": -1, "leaf_hash": hex(&[0; 32])})
            )
            .unwrap_err()
            .contains("index")
        );
        assert!(
            AnswerReceipt::from_value(&json!({"origin": "o", "index": 1, "leaf_hash": "abc"}))
                .unwrap_err()
                .contains("leaf_hash")
        );
    }

    #[test]
    fn a_saved_answer_is_found_in_any_of_its_forms() {
        let r = receipt();
        let result = Value::Object(with_receipt(
            json!({"content": [], "isError": false}).as_object().unwrap().clone(),
            &r,
        ));
        let forms = [
            (r.to_value(), false),
            (json!({RECEIPT_META: r.to_value()}), false),
            (result.clone(), true),
            (json!({"jsonrpc": "2.0", "id": 1, "result": result}), true),
        ];
        for (doc, has_result) in forms {
            let saved = read_saved(&doc).unwrap();
            assert_eq!(saved.receipt, r);
            assert_eq!(saved.result.is_some(), has_result, "{doc}");
        }
        assert!(read_saved(&json!({"content": []})).is_err());
        // A receipt saved beside an answer's members is not taken for the receipt alone.
        let mut beside = r.to_value();
        beside["isError"] = json!(false);
        assert!(read_saved(&beside).unwrap_err().contains("isError"));
        let meta_with_text = json!({RECEIPT_META: r.to_value(), "content": [{"type": "text", "text": "Transferred"}]});
        assert!(read_saved(&meta_with_text).unwrap_err().contains("content"));
    }

    #[test]
    fn the_result_hash_leaves_out_toolgate_s_notes_only() {
        let upstream =
            json!({"content": [{"type": "text", "text": "ok"}], "_meta": {"vendor/x": 1}});
        let plain = json!({"content": [{"type": "text", "text": "ok"}]});
        let mut answered = with_receipt(upstream.as_object().unwrap().clone(), &receipt());
        answered["_meta"]["io.toolgate/operation"] = json!({"id": "op"});
        let candidates = result_sha256(&Value::Object(answered.clone()));
        assert!(
            candidates.contains(&sha256_hex(canonical_json(&upstream).as_bytes())),
            "{candidates:?}"
        );
        // A replay's receipt hashes the result with its operation note.
        let mut replayed = answered.clone();
        replayed["_meta"].as_object_mut().unwrap().remove(RECEIPT_META);
        assert!(
            candidates.contains(&sha256_hex(canonical_json(&Value::Object(replayed)).as_bytes()))
        );
        // Never the answer with its own receipt in it.
        assert!(
            !candidates.contains(&sha256_hex(canonical_json(&Value::Object(answered)).as_bytes()))
        );
        // No `_meta` from the upstream: the one toolgate added goes.
        let answered = Value::Object(with_receipt(plain.as_object().unwrap().clone(), &receipt()));
        assert_eq!(result_sha256(&answered)[0], sha256_hex(canonical_json(&plain).as_bytes()));
        // Another value is another hash.
        let other = Value::Object(with_receipt(
            json!({"content": []}).as_object().unwrap().clone(),
            &receipt(),
        ));
        assert!(!result_sha256(&other).contains(&sha256_hex(canonical_json(&plain).as_bytes())));
    }

    fn stated(result_status: &str, result_sha256: Option<String>) -> Receipt {
        let mut r: Receipt = serde_json::from_value(json!({
            "v": 3, "kid": "k", "log_index": 1, "issued_at": "t", "tenant": "a", "caller": "c", "server": "s", "tool": "t",
            "tool_definition_sha256": "", "proposal_sha256": "", "decision": "deny", "reason": "prohibited", "rules": [],
            "policy_version": "p", "approval": null, "operation": null, "execution_status": "not_dispatched",
            "result_status": "refused", "result_sha256": null, "arguments_hash": "", "result_hash": null
        }))
        .unwrap();
        r.result_status = result_status.into();
        r.result_sha256 = result_sha256;
        r
    }

    #[test]
    fn an_answer_is_judged_whole_against_what_its_receipt_records() {
        let refusal = json!({"decision": "deny", "reason": "prohibited", "action": "refused", "message": "no"});
        let answered = json!({"content": [{"type": "text", "text": "no"}], "structuredContent": refusal, "isError": true, "resultType": "complete", "_meta": {RECEIPT_META: {}}});
        let committed = stated("refused", Some(sha256_hex(canonical_json(&refusal).as_bytes())));
        assert!(judge(&committed, Some(&answered), None).unwrap().is_ok());
        // An invented success around it, words changed, a member added: each fails.
        let mut success = answered.clone();
        success["isError"] = json!(false);
        let mut words = answered.clone();
        words["content"][0]["text"] = json!("done");
        let mut extra = answered.clone();
        extra["data"] = json!(1);
        let mut message = answered.clone();
        (message["content"][0]["text"], message["structuredContent"]["message"]) =
            (json!("done"), json!("done"));
        for forged in [&success, &words, &extra, &message] {
            assert!(judge(&committed, Some(forged), None).unwrap().is_err(), "{forged}");
        }
        // A receipt that commits to no words (an older refusal, a wait): the
        // fields it records must match, and the report says the words are not proven.
        let older = stated("refused", None);
        assert!(judge(&older, Some(&answered), None).unwrap().unwrap().contains("not proven"));
        assert!(judge(&older, Some(&success), None).unwrap().is_err());
        let mut reason = answered.clone();
        reason["structuredContent"]["reason"] = json!("budget_exceeded");
        assert!(judge(&older, Some(&reason), None).unwrap().is_err());
        // A protocol error's receipt backs only that error, never a result.
        let protocol = stated("protocol_error:-32603", None);
        assert!(
            judge(&protocol, None, Some(&json!({"code": -32603, "message": "boom"})))
                .unwrap()
                .is_ok()
        );
        assert!(
            judge(&protocol, None, Some(&json!({"code": -32602, "message": "boom"})))
                .unwrap()
                .is_err()
        );
        assert!(judge(&protocol, Some(&answered), None).unwrap().is_err());
        // A refusal given as an error (a prompt or a resource): its data, whole.
        let error = json!({"code": -32001, "message": "no", "data": {"decision": "deny", "reason": "prohibited", "action": "refused", "message": "no", "_meta": {RECEIPT_META: {}}}});
        assert!(judge(&committed, None, Some(&error)).unwrap().is_ok());
        let mut other = error.clone();
        other["message"] = json!("approved");
        assert!(judge(&committed, None, Some(&other)).unwrap().is_err());
        // A result's receipt backs neither a refusal nor an error.
        let read = stated("ok", Some(sha256_hex(b"x")));
        assert!(judge(&read, Some(&answered), None).unwrap().is_err());
        assert!(judge(&read, None, Some(&error)).unwrap().is_err());
        assert!(judge(&read, None, None).is_none());
        // A call whose person must connect first may ask its client to open
        // the link: only where its receipt records that refusal.
        let asks = json!({"resultType": "input_required", "inputRequests": {"io.toolgate/connect": {"method": "elicitation/create", "params": {"mode": "url"}}}});
        let mut connect = stated("refused", Some(sha256_hex(b"refusal")));
        connect.reason = "connect_required".into();
        assert!(
            judge(&connect, Some(&asks), None).unwrap().unwrap().contains("connect their account")
        );
        assert!(
            judge(&committed, Some(&asks), None).unwrap().is_err(),
            "another refusal's receipt backs no question"
        );
    }

    // Answers saved from the stock SDKs (mcp 2.3.0's `model_dump(by_alias=True,
    // exclude_none=True)`, `model_dump(by_alias=True)` and `model_dump_json()`;
    // @modelcontextprotocol/client 2.4.0's `JSON.stringify` of `callTool`,
    // `getPrompt`, `readResource`), each given the `*_SENT` result (with its
    // receipt in `_meta`) by a server on the 2025-11-25 wire. On 2026-07-28 they
    // give the same (the TypeScript SDK drops `resultType` there too).
    const SENT: &str = r#"{"content":[{"type":"text","text":"Pump P-7 replaced","annotations":{"audience":["user","assistant"],"priority":0.5,"lastModified":"2025-01-01T00:00:00Z"},"_meta":{"vendor/k":null}},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"audio","data":"UklGRg==","mimeType":"audio/wav","annotations":{"priority":1}},{"type":"resource_link","uri":"file:///manual/p7.pdf","name":"p7","title":"P-7 manual","mimeType":"application/pdf","size":1024,"icons":[{"src":"https://example.com/i.png","mimeType":"image/png"}]},{"type":"resource","resource":{"uri":"file:///notes.txt","text":"line\u2028two","mimeType":"text/plain"}},{"type":"resource","resource":{"uri":"file:///b.bin","blob":"AAEC"}}],"structuredContent":{"part":"P-7","note":null,"list":[null,1,2.0,1.5e-07],"nested":{"x":null},"big":12345678901234567890,"text":"\u00e9"},"_meta":{"vendor/trace":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}}}"#;
    const PY_EXCLUDE_NONE: &str = r#"{"_meta":{"vendor/trace":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"content":[{"type":"text","text":"Pump P-7 replaced","annotations":{"audience":["user","assistant"],"priority":0.5,"lastModified":"2025-01-01T00:00:00Z"},"_meta":{"vendor/k":null}},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"audio","data":"UklGRg==","mimeType":"audio/wav","annotations":{"priority":1.0}},{"name":"p7","title":"P-7 manual","uri":"file:///manual/p7.pdf","mimeType":"application/pdf","size":1024,"icons":[{"src":"https://example.com/i.png","mimeType":"image/png"}],"type":"resource_link"},{"type":"resource","resource":{"uri":"file:///notes.txt","mimeType":"text/plain","text":"line\u2028two"}},{"type":"resource","resource":{"uri":"file:///b.bin","blob":"AAEC"}}],"structuredContent":{"part":"P-7","note":null,"list":[null,1,2.0,1.5e-07],"nested":{"x":null},"big":12345678901234567890,"text":"\u00e9"},"isError":false,"resultType":"complete"}"#;
    const PY_PLAIN: &str = r#"{"_meta":{"vendor/trace":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"content":[{"type":"text","text":"Pump P-7 replaced","annotations":{"audience":["user","assistant"],"priority":0.5,"lastModified":"2025-01-01T00:00:00Z"},"_meta":{"vendor/k":null}},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png","annotations":null,"_meta":null},{"type":"audio","data":"UklGRg==","mimeType":"audio/wav","annotations":{"audience":null,"priority":1.0,"lastModified":null},"_meta":null},{"name":"p7","title":"P-7 manual","uri":"file:///manual/p7.pdf","description":null,"mimeType":"application/pdf","size":1024,"icons":[{"src":"https://example.com/i.png","mimeType":"image/png","sizes":null,"theme":null}],"annotations":null,"_meta":null,"type":"resource_link"},{"type":"resource","resource":{"uri":"file:///notes.txt","mimeType":"text/plain","_meta":null,"text":"line\u2028two"},"annotations":null,"_meta":null},{"type":"resource","resource":{"uri":"file:///b.bin","mimeType":null,"_meta":null,"blob":"AAEC"},"annotations":null,"_meta":null}],"structuredContent":{"part":"P-7","note":null,"list":[null,1,2.0,1.5e-07],"nested":{"x":null},"big":12345678901234567890,"text":"\u00e9"},"isError":false,"resultType":"complete"}"#;
    const PY_JSON: &str = r#"{"meta":{"vendor/trace":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"content":[{"type":"text","text":"Pump P-7 replaced","annotations":{"audience":["user","assistant"],"priority":0.5,"last_modified":"2025-01-01T00:00:00Z"},"meta":{"vendor/k":null}},{"type":"image","data":"iVBORw0KGgo=","mime_type":"image/png","annotations":null,"meta":null},{"type":"audio","data":"UklGRg==","mime_type":"audio/wav","annotations":{"audience":null,"priority":1.0,"last_modified":null},"meta":null},{"name":"p7","title":"P-7 manual","uri":"file:///manual/p7.pdf","description":null,"mime_type":"application/pdf","size":1024,"icons":[{"src":"https://example.com/i.png","mime_type":"image/png","sizes":null,"theme":null}],"annotations":null,"meta":null,"type":"resource_link"},{"type":"resource","resource":{"uri":"file:///notes.txt","mime_type":"text/plain","meta":null,"text":"line\u2028two"},"annotations":null,"meta":null},{"type":"resource","resource":{"uri":"file:///b.bin","mime_type":null,"meta":null,"blob":"AAEC"},"annotations":null,"meta":null}],"structured_content":{"part":"P-7","note":null,"list":[null,1,2.0,1.5e-07],"nested":{"x":null},"big":12345678901234567890,"text":"\u00e9"},"is_error":false,"result_type":"complete"}"#;
    const TS: &str = r#"{"_meta":{"vendor/trace":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"content":[{"type":"text","text":"Pump P-7 replaced","annotations":{"audience":["user","assistant"],"priority":0.5,"lastModified":"2025-01-01T00:00:00Z"},"_meta":{"vendor/k":null}},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"audio","data":"UklGRg==","mimeType":"audio/wav","annotations":{"priority":1}},{"name":"p7","title":"P-7 manual","icons":[{"src":"https://example.com/i.png","mimeType":"image/png"}],"uri":"file:///manual/p7.pdf","mimeType":"application/pdf","size":1024,"type":"resource_link"},{"type":"resource","resource":{"uri":"file:///notes.txt","mimeType":"text/plain","text":"line\u2028two"}},{"type":"resource","resource":{"uri":"file:///b.bin","blob":"AAEC"}}],"structuredContent":{"part":"P-7","note":null,"list":[null,1,2,1.5e-07],"nested":{"x":null},"big":12345678901234567000,"text":"\u00e9"}}"#;
    const PROMPT_SENT: &str = r#"{"description":"Diagnose a pump","messages":[{"role":"user","content":{"type":"text","text":"What failed?","annotations":{"audience":["user"]}}},{"role":"assistant","content":{"type":"resource","resource":{"uri":"file:///log.txt","text":"F-101","mimeType":"text/plain"}}},{"role":"user","content":{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}}],"_meta":{"vendor/p":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}}}"#;
    const PROMPT_PY_JSON: &str = r#"{"meta":{"vendor/p":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"description":"Diagnose a pump","messages":[{"role":"user","content":{"type":"text","text":"What failed?","annotations":{"audience":["user"],"priority":null,"last_modified":null},"meta":null}},{"role":"assistant","content":{"type":"resource","resource":{"uri":"file:///log.txt","mime_type":"text/plain","meta":null,"text":"F-101"},"annotations":null,"meta":null}},{"role":"user","content":{"type":"image","data":"iVBORw0KGgo=","mime_type":"image/png","annotations":null,"meta":null}}],"result_type":"complete"}"#;
    const PROMPT_TS: &str = r#"{"_meta":{"vendor/p":null,"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"description":"Diagnose a pump","messages":[{"role":"user","content":{"type":"text","text":"What failed?","annotations":{"audience":["user"]}}},{"role":"assistant","content":{"type":"resource","resource":{"uri":"file:///log.txt","mimeType":"text/plain","text":"F-101"}}},{"role":"user","content":{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}}]}"#;
    const READ_SENT: &str = r#"{"contents":[{"uri":"toolgate://fixture/file:///r3","text":"abc","mimeType":"text/plain","_meta":{"q":null}},{"uri":"toolgate://fixture/file:///r3#b","blob":"AAAA"}],"_meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}}}"#;
    const READ_PY_EXCLUDE_NONE: &str = r#"{"_meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"ttlMs":0,"cacheScope":"private","contents":[{"uri":"toolgate://fixture/file:///r3","mimeType":"text/plain","_meta":{"q":null},"text":"abc"},{"uri":"toolgate://fixture/file:///r3#b","blob":"AAAA"}],"resultType":"complete"}"#;
    const READ_PY_JSON: &str = r#"{"meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"ttl_ms":0,"cache_scope":"private","contents":[{"uri":"toolgate://fixture/file:///r3","mime_type":"text/plain","meta":{"q":null},"text":"abc"},{"uri":"toolgate://fixture/file:///r3#b","mime_type":null,"meta":null,"blob":"AAAA"}],"result_type":"complete"}"#;
    const READ_TS: &str = r#"{"_meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"contents":[{"uri":"toolgate://fixture/file:///r3","mimeType":"text/plain","_meta":{"q":null},"text":"abc"},{"uri":"toolgate://fixture/file:///r3#b","blob":"AAAA"}]}"#;
    const LOST_SENT: &str = r#"{"content":[{"type":"text","text":"ok","x-extra":1}],"x-top":{"a":1},"_meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}}}"#;
    const LOST_PY_EXCLUDE_NONE: &str = r#"{"_meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"content":[{"type":"text","text":"ok"}],"isError":false,"resultType":"complete"}"#;
    const LOST_TS: &str = r#"{"_meta":{"io.toolgate/receipt":{"origin":"toolgate.example/log","index":41,"leaf_hash":"0707070707070707070707070707070707070707070707070707070707070707"}},"content":[{"type":"text","text":"ok"}],"x-top":{"a":1}}"#;

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// What the gateway hashed of an answer it sent: the result before its
    /// receipt was put in `_meta` (the upstream's `_meta` stays).
    fn hashed(sent: &str) -> (Value, String) {
        let mut v = value(sent);
        let meta = v["_meta"].as_object_mut().unwrap();
        meta.remove(RECEIPT_META);
        if meta.is_empty() {
            v.as_object_mut().unwrap().remove("_meta");
        }
        let hash = sha256_hex(canonical_json(&v).as_bytes());
        (v, hash)
    }

    /// A receipt of a result, of `tool` on the server `fixture`.
    fn answered(tool: &str, want: &str) -> Receipt {
        let mut r = stated("ok", Some(want.to_string()));
        (r.tool, r.server) = (tool.into(), "fixture".into());
        r
    }

    fn judged(r: &Receipt, saved: &Value) -> Result<String, String> {
        judge(r, Some(saved), None).unwrap()
    }

    #[test]
    fn a_stock_sdk_s_answer_proves_against_the_result_the_gateway_sent() {
        let (_, want) = hashed(SENT);
        let r = answered("report", &want);
        // The raw answer proves as it is; as given to a 2026-07-28 client
        // (`resultType` put in after the receipt hashed the result) too.
        assert_eq!(
            judged(&r, &value(SENT)),
            Ok(format!("the answer's result hashes to the receipt's result_sha256 {want}"))
        );
        let mut modern = value(SENT);
        modern["resultType"] = json!("complete");
        assert!(
            judged(&r, &modern)
                .unwrap()
                .contains("resultType: \"complete\" read as the SDK's default")
        );
        for (how, saved) in [
            ("exclude_none", PY_EXCLUDE_NONE),
            ("plain", PY_PLAIN),
            ("model_dump_json", PY_JSON),
            ("typescript", TS),
        ] {
            let saved = value(saved);
            assert_eq!(
                read_saved(&saved).unwrap().receipt.receipt.index,
                41,
                "{how}: the receipt is found"
            );
            let said = judged(&r, &saved).unwrap_or_else(|e| panic!("{how}: {e}"));
            assert!(said.contains(&want), "{how}: {said}");
        }
        assert!(judged(&r, &value(PY_JSON)).unwrap().contains("model_dump_json()"));
        assert!(
            judged(&r, &value(PY_PLAIN)).unwrap().contains("17 null(s)"),
            "{:?}",
            judged(&r, &value(PY_PLAIN))
        );
        assert!(
            judged(&r, &value(PY_EXCLUDE_NONE))
                .unwrap()
                .contains("isError: false read as the SDK's default")
        );

        // A prompt's, and a read's, whose contents the answer shows under the gateway's URIs.
        let prompt = answered("prompt:diagnose", &hashed(PROMPT_SENT).1);
        for saved in [PROMPT_SENT, PROMPT_PY_JSON, PROMPT_TS] {
            assert!(
                judged(&prompt, &value(saved)).is_ok(),
                "{saved}: {:?}",
                judged(&prompt, &value(saved))
            );
        }
        let (mut upstream, _) = hashed(READ_SENT);
        for item in upstream["contents"].as_array_mut().unwrap() {
            item["uri"] =
                json!(item["uri"].as_str().unwrap().strip_prefix("toolgate://fixture/").unwrap());
        }
        let read =
            answered("resource:file:///r3", &sha256_hex(canonical_json(&upstream).as_bytes()));
        for saved in [READ_SENT, READ_PY_EXCLUDE_NONE, READ_PY_JSON, READ_TS] {
            let said = judged(&read, &value(saved)).unwrap_or_else(|e| panic!("{saved}: {e}"));
            assert!(
                said.contains(
                    "as the upstream named them (the answer shows them under toolgate://fixture/)"
                ),
                "{said}"
            );
        }
        assert!(
            judged(&read, &value(READ_PY_EXCLUDE_NONE))
                .unwrap()
                .contains("ttlMs: 0 read as the SDK's default")
        );
        // Under another server's prefix, the URIs are not the ones read.
        let mut elsewhere = read.clone();
        elsewhere.server = "other".into();
        assert!(judged(&elsewhere, &value(READ_TS)).is_err());
        // The same contents are not another shape's: a prompt's receipt reads no URIs back.
        let mut as_prompt = read.clone();
        as_prompt.tool = "prompt:r3".into();
        assert!(judged(&as_prompt, &value(READ_TS)).is_err());
    }

    #[test]
    fn a_changed_answer_fails_in_every_sdk_form() {
        let (_, want) = hashed(SENT);
        let r = answered("report", &want);
        // Each change, to any form: the tool's words, its structured values
        // (a null among them is data), the claim of an error, a block, what
        // the schema's fields say, a member added, the upstream's `_meta`.
        type Change = fn(&mut Map<String, Value>);
        let changes: [(&str, Change); 12] = [
            ("the text", |o| o["content"][0]["text"] = json!("Pump P-7 not replaced")),
            ("a null dropped from structuredContent", |o| {
                let k = if o.contains_key("structured_content") {
                    "structured_content"
                } else {
                    "structuredContent"
                };
                o[k].as_object_mut().unwrap().remove("note");
            }),
            ("a nested null made a value", |o| {
                let k = if o.contains_key("structured_content") {
                    "structured_content"
                } else {
                    "structuredContent"
                };
                o[k]["nested"]["x"] = json!("y");
            }),
            ("a tool error claimed", |o| {
                let k = if o.contains_key("is_error") { "is_error" } else { "isError" };
                o.insert(k.into(), json!(true));
            }),
            ("an embedded resource's text", |o| {
                o["content"][4]["resource"]["text"] = json!("other")
            }),
            ("a link's URI", |o| o["content"][3]["uri"] = json!("file:///manual/p8.pdf")),
            ("a block dropped", |o| {
                o["content"].as_array_mut().unwrap().remove(1);
            }),
            ("a member added", |o| {
                o.insert("approved".into(), json!(true));
            }),
            ("a priority", |o| o["content"][0]["annotations"]["priority"] = json!(1)),
            ("annotations put on a block", |o| {
                o["content"][1]["annotations"] = json!({"audience": ["user"]})
            }),
            ("the upstream's _meta", |o| {
                let k = if o.contains_key("meta") { "meta" } else { "_meta" };
                o[k].as_object_mut().unwrap().remove("vendor/trace");
            }),
            ("the content emptied", |o| o["content"] = json!([])),
        ];
        for (how, saved) in [
            ("raw", SENT),
            ("exclude_none", PY_EXCLUDE_NONE),
            ("plain", PY_PLAIN),
            ("model_dump_json", PY_JSON),
            ("typescript", TS),
        ] {
            assert!(judged(&r, &value(saved)).is_ok(), "{how} unchanged proves");
            for (change, apply) in &changes {
                let mut changed = value(saved);
                apply(changed.as_object_mut().unwrap());
                let said = judged(&r, &changed);
                assert!(
                    said.as_ref().is_err_and(|e| e.contains("does not hash")),
                    "{how}, {change}: {said:?}"
                );
            }
        }
    }

    #[test]
    fn defaults_are_read_only_where_the_schema_gives_them() {
        // A tool error: isError true is never a default.
        let error = json!({"content": [{"type": "text", "text": "no stock"}], "isError": true});
        let r = answered("order", &sha256_hex(canonical_json(&error).as_bytes()));
        let python = json!({"content": [{"type": "text", "text": "no stock"}], "isError": true, "resultType": "complete", "_meta": {RECEIPT_META: {}}});
        assert!(judged(&r, &python).is_ok());
        let mut success = python.clone();
        success["isError"] = json!(false);
        assert!(judged(&r, &success).is_err());
        success.as_object_mut().unwrap().remove("isError");
        assert!(judged(&r, &success).is_err());
        // A success claimed a tool error.
        let ok = json!({"content": [{"type": "text", "text": "no stock"}]});
        let r = answered("order", &sha256_hex(canonical_json(&ok).as_bytes()));
        assert!(judged(&r, &python).is_err());
        // No content (the TypeScript SDK writes `content: []` on 2025-11-25).
        let bare = json!({"structuredContent": {"a": 1}});
        let r = answered("order", &sha256_hex(canonical_json(&bare).as_bytes()));
        assert!(judged(&r, &json!({"content": [], "structuredContent": {"a": 1}})).is_ok());
        assert!(
            judged(
                &r,
                &json!({"content": [{"type": "text", "text": "1"}], "structuredContent": {"a": 1}})
            )
            .is_err()
        );
        // Only the default itself, as JCS writes it: `0` is no `false`.
        assert!(
            judged(&r, &json!({"content": [], "structuredContent": {"a": 1}, "isError": 0}))
                .is_err()
        );
        let read = json!({"contents": [], "ttlMs": 5});
        let r = answered("resource:file:///x", &sha256_hex(canonical_json(&read).as_bytes()));
        assert!(judged(&r, &json!({"contents": [], "ttlMs": 5, "cacheScope": "private"})).is_ok());
        assert!(judged(&r, &json!({"contents": [], "ttlMs": 0, "cacheScope": "private"})).is_err());
        let read = json!({"contents": []});
        let r = answered("resource:file:///x", &sha256_hex(canonical_json(&read).as_bytes()));
        assert!(judged(&r, &json!({"contents": [], "ttlMs": 0.0, "cacheScope": "private", "resultType": "complete"})).is_ok());
        assert!(judged(&r, &json!({"contents": [], "ttlMs": false})).is_err());
        // A prompt has no isError, a read no content: neither is read as a default there.
        let prompt = json!({"messages": []});
        let r = answered("prompt:p", &sha256_hex(canonical_json(&prompt).as_bytes()));
        assert!(judged(&r, &json!({"messages": [], "resultType": "complete"})).is_ok());
        assert!(judged(&r, &json!({"messages": [], "isError": false})).is_err());
        // Nor a null anywhere but at the schema's optional fields.
        let tool =
            json!({"content": [{"type": "text", "text": "a"}], "structuredContent": {"a": null}});
        let r = answered("t", &sha256_hex(canonical_json(&tool).as_bytes()));
        assert!(judged(&r, &json!({"content": [{"type": "text", "text": "a", "annotations": null}], "structuredContent": {"a": null}})).is_ok());
        assert!(judged(&r, &json!({"content": [{"type": "text", "text": "a", "text2": null}], "structuredContent": {"a": null}})).is_err());
        assert!(
            judged(
                &r,
                &json!({"content": [{"type": "text", "text": "a"}], "structuredContent": {}})
            )
            .is_err()
        );
    }

    #[test]
    fn python_names_are_read_in_the_schema_s_objects_only() {
        // The tool's own values may hold the same names: they stay as they are.
        let sent = json!({"content": [], "structuredContent": {"is_error": true, "meta": {"mime_type": null}}});
        let r = answered("t", &sha256_hex(canonical_json(&sent).as_bytes()));
        let dumped = json!({"meta": {RECEIPT_META: receipt().to_value()}, "content": [], "structured_content": {"is_error": true, "meta": {"mime_type": null}}, "is_error": false, "result_type": "complete"});
        assert!(judged(&r, &dumped).is_ok(), "{:?}", judged(&r, &dumped));
        assert_eq!(read_saved(&dumped).unwrap().result.as_ref(), Some(&dumped));
        let mut renamed = dumped.clone();
        renamed["structured_content"] = json!({"isError": true, "_meta": {"mimeType": null}});
        assert!(judged(&r, &renamed).is_err());
        // A member under both names is no dump of the SDK's.
        let mut both = dumped.clone();
        both["isError"] = json!(true);
        assert!(judged(&r, &both).is_err());
        assert!(wire_names(&both, Shape::Call).is_none());
    }

    #[test]
    fn what_an_sdk_drops_is_named_when_the_receipt_carries_the_result() {
        let (recorded, want) = hashed(LOST_SENT);
        let mut r = answered("report", &want);
        // Without the value: why no reading proves it.
        let said = judged(&r, &value(LOST_PY_EXCLUDE_NONE)).unwrap_err();
        assert!(
            said.contains("a member outside the protocol's schema")
                && said.contains("raw JSON-RPC response"),
            "{said}"
        );
        // With it (receipts.capture_values): where, and that nothing else departs.
        r.result = Some(recorded);
        let said = judged(&r, &value(LOST_PY_EXCLUDE_NONE)).unwrap_err();
        assert!(
            said.contains("the SDK dropped content[0].x-extra")
                && said.contains("the SDK dropped x-top")
                && said.contains("not proven whole"),
            "{said}"
        );
        let said = judged(&r, &value(LOST_TS)).unwrap_err();
        assert!(
            said.contains("the SDK dropped content[0].x-extra")
                && !said.contains("x-top")
                && said.contains("not proven whole"),
            "{said}"
        );
        // A change beside the loss is not called a loss.
        let mut changed = value(LOST_TS);
        changed["content"][0]["text"] = json!("approved");
        let said = judged(&r, &changed).unwrap_err();
        assert!(
            said.contains(
                "content[0].text is \"approved\" in the answer, \"ok\" in the recorded result"
            ) && said.contains("not the answer the gateway recorded"),
            "{said}"
        );
        // A null the tool gave, dropped, is named too (no stock SDK drops it).
        let sent = json!({"content": [], "structuredContent": {"x": null, "y": 1}});
        let mut r = answered("t", &sha256_hex(canonical_json(&sent).as_bytes()));
        r.result = Some(sent);
        let said =
            judged(&r, &json!({"content": [], "structuredContent": {"y": 1}, "isError": false}))
                .unwrap_err();
        assert!(
            said.contains("the answer lacks structuredContent.x (recorded: null)")
                && said.contains("not the answer"),
            "{said}"
        );
    }

    #[test]
    fn a_refusal_saved_as_an_sdk_dumps_it_is_judged_in_the_wire_s_form() {
        let refusal = json!({"decision": "deny", "reason": "prohibited", "action": "refused", "message": "no", "note": null});
        let committed = stated("refused", Some(sha256_hex(canonical_json(&refusal).as_bytes())));
        let plain = json!({"_meta": {RECEIPT_META: {}}, "content": [{"type": "text", "text": "no", "annotations": null, "_meta": null}], "structuredContent": refusal, "isError": true, "resultType": "complete"});
        let snake = json!({"meta": {RECEIPT_META: {}}, "content": [{"type": "text", "text": "no", "annotations": null, "meta": null}], "structured_content": refusal, "is_error": true, "result_type": "complete"});
        for saved in [&plain, &snake] {
            assert!(judge(&committed, Some(saved), None).unwrap().is_ok(), "{saved}");
        }
        let mut success = snake.clone();
        success["is_error"] = json!(false);
        let mut words = snake.clone();
        words["content"][0]["text"] = json!("done");
        let mut annotated = plain.clone();
        annotated["content"][0]["annotations"] = json!({"priority": 1});
        let mut stripped = snake.clone();
        stripped["structured_content"].as_object_mut().unwrap().remove("note");
        for forged in [&success, &words, &annotated, &stripped] {
            assert!(judge(&committed, Some(forged), None).unwrap().is_err(), "{forged}");
        }
    }
}
