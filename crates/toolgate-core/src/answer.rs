//! The receipt an answer names: every `tools/call`, prompt get and resource
//! read answer carries `_meta["io.toolgate/receipt"]`, the log's origin and
//! where its receipts sit in the log (leaf index and leaf hash; for a write,
//! its decision's too), so that whoever holds the answer can prove, from the
//! published log alone, that the gateway recorded it. Pure: values in,
//! values out; the proof itself reads tiles (`tiles::inclusion_proof`).

use serde_json::{Map, Value, json};

use crate::merkle::Hash;
use crate::proposal::{canonical_json, hex, sha256_hex, unhex32};
use crate::receipt::Placed;

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
    json!({"index": p.index, "leaf_hash": hex(&p.leaf_hash)})
}

fn read_placed(v: &Value, what: &str) -> Result<Placed, String> {
    let index = v.get("index").and_then(Value::as_u64).ok_or_else(|| format!("{what}.index must be a leaf index (a whole number)"))?;
    let leaf_hash: Hash = v.get("leaf_hash").and_then(Value::as_str).and_then(unhex32).ok_or_else(|| format!("{what}.leaf_hash must be 64 hex digits"))?;
    Ok(Placed { index, leaf_hash })
}

impl AnswerReceipt {
    /// Its `_meta` value.
    pub fn to_value(&self) -> Value {
        let mut v = json!({"origin": self.origin, "index": self.receipt.index, "leaf_hash": hex(&self.receipt.leaf_hash)});
        if let Some(d) = &self.decision {
            v["decision"] = placed(d);
        }
        if let Some(log) = &self.log {
            v["log"] = json!(log);
        }
        v
    }

    /// Reads its `_meta` value.
    pub fn from_value(v: &Value) -> Result<Self, String> {
        let origin = v.get("origin").and_then(Value::as_str).filter(|o| !o.is_empty()).ok_or("the receipt names no origin (its log)")?;
        let receipt = read_placed(v, "the receipt")?;
        let decision = v.get("decision").map(|d| read_placed(d, "the receipt's decision")).transpose()?;
        let log = v.get("log").and_then(Value::as_str).map(str::to_string);
        Ok(Self { origin: origin.to_string(), receipt, decision, log })
    }
}

/// A saved answer, as `toolgate verify --answer` reads it: its receipt, and
/// the result it came with when the whole answer was saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// The receipt it names.
    pub receipt: AnswerReceipt,
    /// The result (a `tools/call`, `prompts/get` or `resources/read`
    /// result object), when given.
    pub result: Option<Value>,
}

/// Finds the receipt in what was saved: the receipt object itself, a
/// `_meta` object holding it, a result, or a whole JSON-RPC response.
pub fn read_saved(doc: &Value) -> Result<Saved, String> {
    if doc.get("origin").is_some() && doc.get("index").is_some() {
        return Ok(Saved { receipt: AnswerReceipt::from_value(doc)?, result: None });
    }
    if let Some(r) = doc.get(RECEIPT_META) {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: None });
    }
    if let Some(r) = doc.get("_meta").and_then(|m| m.get(RECEIPT_META)) {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: Some(doc.clone()) });
    }
    if let Some(result) = doc.get("result").filter(|r| r.is_object()) {
        return read_saved(result);
    }
    if let Some(r) = doc.get("error").and_then(|e| e.get("data")).and_then(|d| d.get("_meta")).and_then(|m| m.get(RECEIPT_META)) {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: None });
    }
    Err(format!("no receipt found: expected _meta[\"{RECEIPT_META}\"] in the answer, its result, or the receipt object itself"))
}

/// The `result_sha256` a receipt may give for this answer's result: SHA-256
/// of its JCS once toolgate's notes are taken out of `_meta`. A receipt
/// hashes the result before toolgate notes anything in it, except a
/// replay's, which hashes the result as replayed (with its
/// `io.toolgate/operation` note); so the candidates are the result without
/// any of toolgate's keys and without its receipt alone, each without
/// `_meta` too when that leaves it empty (toolgate added it).
pub fn result_sha256(result: &Value) -> Vec<String> {
    let Some(object) = result.as_object() else { return vec![sha256_hex(canonical_json(result).as_bytes())] };
    let mut out: Vec<String> = Vec::new();
    let strips: [&dyn Fn(&str) -> bool; 2] = [&|k| k.starts_with(OWN_META_PREFIX), &|k| k == RECEIPT_META];
    for strip in strips {
        let mut bare = object.clone();
        let empty = match bare.get_mut("_meta") {
            Some(Value::Object(meta)) => {
                meta.retain(|k, _| !strip(k));
                meta.is_empty()
            }
            _ => false,
        };
        if empty {
            let mut without = bare.clone();
            without.remove("_meta");
            out.push(sha256_hex(canonical_json(&Value::Object(without)).as_bytes()));
        }
        out.push(sha256_hex(canonical_json(&Value::Object(bare)).as_bytes()));
    }
    out.dedup();
    out
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
            receipt: Placed { index: 41, leaf_hash: [7; 32] },
            decision: Some(Placed { index: 40, leaf_hash: [6; 32] }),
            log: Some("https://gw.example/log/".into()),
        }
    }

    #[test]
    fn the_receipt_round_trips_and_bad_ones_say_what_is_wrong() {
        let r = receipt();
        assert_eq!(AnswerReceipt::from_value(&r.to_value()).unwrap(), r);
        let bare = AnswerReceipt { decision: None, log: None, ..r.clone() };
        assert_eq!(bare.to_value().as_object().unwrap().len(), 3);
        assert!(AnswerReceipt::from_value(&json!({"index": 1, "leaf_hash": hex(&[0; 32])})).unwrap_err().contains("origin"));
        assert!(AnswerReceipt::from_value(&json!({"origin": "o", "index": -1, "leaf_hash": hex(&[0; 32])})).unwrap_err().contains("index"));
        assert!(AnswerReceipt::from_value(&json!({"origin": "o", "index": 1, "leaf_hash": "abc"})).unwrap_err().contains("leaf_hash"));
    }

    #[test]
    fn a_saved_answer_is_found_in_any_of_its_forms() {
        let r = receipt();
        let result = Value::Object(with_receipt(json!({"content": [], "isError": false}).as_object().unwrap().clone(), &r));
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
    }

    #[test]
    fn the_result_hash_leaves_out_toolgate_s_notes_only() {
        let upstream = json!({"content": [{"type": "text", "text": "ok"}], "_meta": {"vendor/x": 1}});
        let plain = json!({"content": [{"type": "text", "text": "ok"}]});
        let mut answered = with_receipt(upstream.as_object().unwrap().clone(), &receipt());
        answered["_meta"]["io.toolgate/operation"] = json!({"id": "op"});
        let candidates = result_sha256(&Value::Object(answered.clone()));
        assert!(candidates.contains(&sha256_hex(canonical_json(&upstream).as_bytes())), "{candidates:?}");
        // A replay's receipt hashes the result with its operation note.
        let mut replayed = answered.clone();
        replayed["_meta"].as_object_mut().unwrap().remove(RECEIPT_META);
        assert!(candidates.contains(&sha256_hex(canonical_json(&Value::Object(replayed)).as_bytes())));
        // Never the answer with its own receipt in it.
        assert!(!candidates.contains(&sha256_hex(canonical_json(&Value::Object(answered)).as_bytes())));
        // No `_meta` from the upstream: the one toolgate added goes.
        let answered = Value::Object(with_receipt(plain.as_object().unwrap().clone(), &receipt()));
        assert_eq!(result_sha256(&answered)[0], sha256_hex(canonical_json(&plain).as_bytes()));
        // Another value is another hash.
        let other = Value::Object(with_receipt(json!({"content": []}).as_object().unwrap().clone(), &receipt()));
        assert!(!result_sha256(&other).contains(&sha256_hex(canonical_json(&plain).as_bytes())));
    }
}
