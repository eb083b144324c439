//! Small text helpers the audit rules share: splitting names into words,
//! walking every string of a definition with its JSON pointer.

use std::collections::BTreeSet;

use serde_json::Value;

/// The words of an identifier: `raise_parts_order`, `raisePartsOrder` and
/// `raise-parts-order` all give `raise parts order`.
pub(crate) fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it",
    "its", "of", "on", "or", "the", "this", "that", "to", "with",
];

/// The content words of a text, lowercased, without stopwords.
pub(crate) fn content_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// |a ∩ b| / |a ∪ b|; 0 for two empty sets.
pub(crate) fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 { 0.0 } else { a.intersection(b).count() as f64 / union as f64 }
}

/// Every string in `value` (object keys excluded), with its JSON pointer.
pub(crate) fn strings<'a>(value: &'a Value, pointer: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::String(s) => out.push((pointer, s)),
        Value::Array(items) => {
            items.iter().enumerate().for_each(|(i, v)| strings(v, format!("{pointer}/{i}"), out))
        }
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            strings(v, format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1")), out)
        }),
        _ => {}
    }
}

/// The texts of a definition the model reads as prose: its description and
/// title, and every `description`/`title` in its schemas.
pub(crate) fn prose(definition: &Value) -> Vec<(String, &str)> {
    let mut all = Vec::new();
    strings(definition, String::new(), &mut all);
    all.into_iter().filter(|(p, _)| p.ends_with("/description") || p.ends_with("/title")).collect()
}

/// `s`, cut to `n` characters for a message.
pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifiers_split_into_words_in_every_style() {
        for name in ["raise_parts_order", "raisePartsOrder", "raise-parts-order", "RaisePartsOrder"]
        {
            assert_eq!(words(name), ["raise", "parts", "order"], "{name}");
        }
        assert_eq!(words("get_v2Ticket"), ["get", "v2", "ticket"]);
    }

    #[test]
    fn prose_is_every_description_and_title_with_its_pointer() {
        let d = json!({"name": "x", "description": "top", "inputSchema": {"properties": {"a/b": {"description": "inner", "enum": ["e"]}}}});
        let p = prose(&d);
        assert_eq!(
            p,
            vec![
                ("/description".to_string(), "top"),
                ("/inputSchema/properties/a~1b/description".to_string(), "inner")
            ]
        );
    }
}
