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
    let index = v.get("index").and_then(Value::as_u64).ok_or_else(|| format!("{what}.index must be a leaf index (a whole number)"))?;
    let leaf_hash: Hash = v.get("leaf_hash").and_then(Value::as_str).and_then(unhex32).ok_or_else(|| format!("{what}.leaf_hash must be 64 hex digits"))?;
    let opening = v.get("opening").map(|o| read_opening(o, what)).transpose()?;
    Ok(Placed { index, leaf_hash, opening })
}

fn read_opening(o: &Value, what: &str) -> Result<Opening, String> {
    let key = o.get("key").and_then(Value::as_str).and_then(unhex32).ok_or_else(|| format!("{what}.opening.key must be 64 hex digits"))?;
    let logged = o.get("logged").filter(|l| l.is_object()).ok_or_else(|| format!("{what}.opening.logged must be the logged receipt (an object)"))?;
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
        let opening = |o: &Opening| RawOpening { key: hex(&o.key), logged: serde_json::value::RawValue::from_string(o.logged.to_string()).expect("a logged receipt is JSON") };
        let raw = Raw {
            origin: &self.origin,
            index: self.receipt.index,
            leaf_hash: hex(&self.receipt.leaf_hash),
            opening: self.receipt.opening.as_ref().map(opening),
            decision: self.decision.as_ref().map(|d| RawPlaced { index: d.index, leaf_hash: hex(&d.leaf_hash), opening: d.opening.as_ref().map(opening) }),
            log: self.log.as_deref(),
        };
        serde_json::value::to_raw_value(&raw).expect("the receipt serializes")
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

/// The members an answer carries (a result's, a JSON-RPC response's), which
/// a receipt saved alone never does.
const ANSWER_MEMBERS: [&str; 9] = ["content", "structuredContent", "isError", "resultType", "messages", "contents", "result", "error", "_meta"];

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
    let alone = doc.get("origin").is_some() && doc.get("index").is_some() || doc.get(RECEIPT_META).is_some();
    if alone && let Some(member) = ANSWER_MEMBERS.iter().find(|m| doc.get(**m).is_some()) {
        return Err(format!("the saved receipt carries an answer's {member:?} beside it: save the whole answer (its result holds the receipt in _meta), or the receipt alone"));
    }
    if doc.get("origin").is_some() && doc.get("index").is_some() {
        return Ok(Saved { receipt: AnswerReceipt::from_value(doc)?, result: None, error: None });
    }
    if let Some(r) = doc.get(RECEIPT_META) {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: None, error: None });
    }
    if let Some(r) = doc.get("_meta").and_then(|m| m.get(RECEIPT_META)) {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: Some(doc.clone()), error: None });
    }
    if let Some(result) = doc.get("result").filter(|r| r.is_object()) {
        return read_saved(result);
    }
    if let Some(error) = doc.get("error").filter(|e| e.is_object())
        && let Some(r) = error.get("data").and_then(|d| d.get("_meta")).and_then(|m| m.get(RECEIPT_META))
    {
        return Ok(Saved { receipt: AnswerReceipt::from_value(r)?, result: None, error: Some(error.clone()) });
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

/// How the answer a caller holds stands against the receipt that records
/// it: `Ok` says what was proven (and what a receipt of its kind does not
/// commit to), `Err` what the answer claims that the receipt does not. A
/// verifier must prove the whole answer, never only a part of it: an
/// answer that wraps a refusal's genuine receipt in an invented success
/// fails here, as does a refusal whose words were changed.
pub fn judge(r: &Receipt, result: Option<&Value>, error: Option<&Value>) -> Option<Result<String, String>> {
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
    if records_result(r) {
        let want = r.result_sha256.as_deref().unwrap_or_default();
        return if result_sha256(result).iter().any(|h| h == want) {
            Ok(format!("the answer's result hashes to the receipt's result_sha256 {want}"))
        } else {
            Err(format!("the answer's result does not hash to the receipt's result_sha256 {want}: it is not the answer the gateway recorded (a client that re-serializes a result may change it; verify the `_meta` receipt alone to prove the receipt)"))
        };
    }
    let recorded = format!("{} / {} / {}", r.result_status, r.decision, r.reason);
    if r.result_status.starts_with("protocol_error") {
        return Err(format!("the receipt records a JSON-RPC error ({recorded}), but the answer is a result"));
    }
    // A call held for its approval may ask its client for input instead
    // (the 2026-07-28 era's `input_required`): the question is toolgate's,
    // worded after the receipt was committed with the approval.
    if r.result_status == "awaiting_approval" && result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return Ok(format!("the answer asks for input while the call waits for its approval, as the receipt records ({recorded}); the receipt does not commit to the question's words, which are not proven"));
    }
    if result.get("isError") != Some(&Value::Bool(true)) {
        return Err(format!("the receipt records no result ({recorded}), but the answer claims one (its isError is not true)"));
    }
    let object = result.as_object().ok_or("the answer is not an object")?;
    // The modern era marks every result `"resultType": "complete"`.
    if object.get("resultType").is_some_and(|t| t != "complete") {
        return Err("the answer's resultType is not \"complete\": it is not the refusal the receipt records".into());
    }
    if let Some(key) = object.keys().find(|k| !matches!(k.as_str(), "content" | "structuredContent" | "isError" | "_meta" | "resultType")) {
        return Err(format!("the answer carries {:?}, which a refusal toolgate gives does not: it is not the answer the receipt records", crate::visible::visible(key)));
    }
    if let Some(key) = object.get("_meta").and_then(Value::as_object).and_then(|m| m.keys().find(|k| !k.starts_with(OWN_META_PREFIX))) {
        return Err(format!("the answer's _meta carries {:?}, which a refusal toolgate gives does not", crate::visible::visible(key)));
    }
    let refusal = result.get("structuredContent").filter(|s| s.is_object()).ok_or_else(|| format!("the receipt records a refusal ({recorded}), and the answer carries none (no structuredContent)"))?;
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
            Some(c) if c.to_string() == want => Ok(format!("the answer is the JSON-RPC error {c} the receipt records (an error's message is not committed by its receipt: not proven)")),
            _ => Err(format!("the receipt records the JSON-RPC error {want}; the answer is error {}", code.map_or("(none)".into(), |c| c.to_string()))),
        };
    }
    if records_result(r) {
        return Err(format!("the receipt records a result ({recorded}), but the answer is a JSON-RPC error"));
    }
    let mut refusal = error.get("data").filter(|d| d.is_object()).cloned().ok_or_else(|| format!("the receipt records a refusal ({recorded}); the error carries none (no data)"))?;
    let meta_is_ours = refusal.get("_meta").and_then(Value::as_object).is_none_or(|m| m.keys().all(|k| k.starts_with(OWN_META_PREFIX)));
    refusal.as_object_mut().expect("an object").remove("_meta");
    if !meta_is_ours {
        return Err("the error's _meta carries keys a refusal toolgate gives does not".into());
    }
    if error.get("message") != refusal.get("message") {
        return Err("the error's message is not the refusal's: it is not the answer the receipt records".into());
    }
    judge_refusal(r, &refusal, &recorded)
}

/// A refusal, as the answer carries it, against the receipt's record.
fn judge_refusal(r: &Receipt, refusal: &Value, recorded: &str) -> Result<String, String> {
    if let Some(want) = &r.result_sha256 {
        return if sha256_hex(canonical_json(refusal).as_bytes()) == *want {
            Ok(format!("the answer is the refusal the receipt records, whole ({recorded})"))
        } else {
            Err(format!("the refusal in the answer is not the one the receipt records ({recorded}): its words or fields were changed"))
        };
    }
    let said = |k: &str| refusal.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    if said("decision") != r.decision || said("reason") != r.reason {
        return Err(format!("the answer is a refusal ({} / {}), not the one the receipt records ({recorded})", crate::visible::visible(&said("decision")), crate::visible::visible(&said("reason"))));
    }
    if let Some(approval) = &r.approval
        && said("approval_id") != approval.id
    {
        return Err(format!("the answer names another approval than the receipt's ({})", approval.id));
    }
    Ok(format!("the answer is a refusal with the receipt's decision and reason ({recorded}); a receipt of its kind does not commit to the refusal's message, which is not proven"))
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
            receipt: Placed { index: 41, leaf_hash: [7; 32], opening: Some(Opening { key: [9; 32], logged: r#"{"receipt":{"v":3}}"#.into() }) },
            decision: Some(Placed { index: 40, leaf_hash: [6; 32], opening: None }),
            log: Some("https://gw.example/log/".into()),
        }
    }

    #[test]
    fn the_receipt_round_trips_and_bad_ones_say_what_is_wrong() {
        let r = receipt();
        assert_eq!(AnswerReceipt::from_value(&r.to_value()).unwrap(), r);
        assert_eq!(serde_json::from_str::<Value>(r.to_raw().get()).unwrap(), r.to_value());
        let bare = AnswerReceipt { decision: None, log: None, receipt: Placed { opening: None, ..r.receipt.clone() }, ..r.clone() };
        assert_eq!(bare.to_value().as_object().unwrap().len(), 3);
        assert!(AnswerReceipt::from_value(&json!({"origin": "o", "index": 1, "leaf_hash": hex(&[0; 32]), "opening": {"key": "x", "logged": {}}})).unwrap_err().contains("opening.key"));
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
        // A receipt saved beside an answer's members is not taken for the receipt alone.
        let mut beside = r.to_value();
        beside["isError"] = json!(false);
        assert!(read_saved(&beside).unwrap_err().contains("isError"));
        let meta_with_text = json!({RECEIPT_META: r.to_value(), "content": [{"type": "text", "text": "Transferred"}]});
        assert!(read_saved(&meta_with_text).unwrap_err().contains("content"));
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
        (message["content"][0]["text"], message["structuredContent"]["message"]) = (json!("done"), json!("done"));
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
        assert!(judge(&protocol, None, Some(&json!({"code": -32603, "message": "boom"}))).unwrap().is_ok());
        assert!(judge(&protocol, None, Some(&json!({"code": -32602, "message": "boom"}))).unwrap().is_err());
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
    }
}
