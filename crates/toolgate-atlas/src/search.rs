//! Lexical ranking (Okapi BM25) for `search_tickets` and `search_manual`.
//!
//! Small on purpose: an inverted index over a fixed corpus, a tokenizer with
//! stop words and a light suffix stemmer, k1 = 1.2 and b = 0.75.

use std::collections::HashMap;

const K1: f64 = 1.2;
const B: f64 = 0.75;

const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "an", "and", "are", "at", "be", "but", "by", "for", "from",
    "has", "have", "in", "into", "is", "it", "its", "just", "of", "on", "or", "the", "then",
    "this", "to", "was", "when", "with", "we", "our", "there", "they", "very", "up", "out", "now",
];

/// Lower-cased alphanumeric words minus stop words, lightly stemmed so
/// "tripping", "tripped" and "trips" meet at "trip".
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

fn stem(word: &str) -> String {
    let mut w = word.to_string();
    for suffix in ["ing", "ed"] {
        if w.len() > suffix.len() + 3 && w.ends_with(suffix) {
            w.truncate(w.len() - suffix.len());
            // "tripp" -> "trip", but keep "ll"/"ss" words such as "stall".
            let bytes = w.as_bytes();
            let n = bytes.len();
            if n >= 2 && bytes[n - 1] == bytes[n - 2] && !matches!(bytes[n - 1], b'l' | b's' | b'z')
            {
                w.truncate(n - 1);
            }
            return w;
        }
    }
    if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
        w.truncate(w.len() - 1);
    }
    w
}

pub struct Index {
    postings: HashMap<String, Vec<(usize, u32)>>,
    doc_len: Vec<u32>,
    avg_len: f64,
}

impl Index {
    pub fn build<'a>(docs: impl IntoIterator<Item = &'a str>) -> Self {
        let mut postings: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let mut doc_len = Vec::new();
        for (id, text) in docs.into_iter().enumerate() {
            let tokens = tokenize(text);
            doc_len.push(tokens.len() as u32);
            let mut counts: HashMap<String, u32> = HashMap::new();
            for t in tokens {
                *counts.entry(t).or_default() += 1;
            }
            for (term, tf) in counts {
                postings.entry(term).or_default().push((id, tf));
            }
        }
        let avg_len = if doc_len.is_empty() {
            0.0
        } else {
            doc_len.iter().map(|&l| f64::from(l)).sum::<f64>() / doc_len.len() as f64
        };
        Self { postings, doc_len, avg_len }
    }

    /// BM25 score of every document sharing at least one term with the
    /// query, restricted to those `keep` accepts. Unordered.
    pub fn score(&self, query: &str, keep: impl Fn(usize) -> bool) -> Vec<(usize, f64)> {
        let n = self.doc_len.len() as f64;
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        let mut scores: HashMap<usize, f64> = HashMap::new();
        for term in terms {
            let Some(list) = self.postings.get(&term) else { continue };
            let df = list.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in list {
                if !keep(doc) {
                    continue;
                }
                let tf = f64::from(tf);
                let norm = 1.0 - B + B * f64::from(self.doc_len[doc]) / self.avg_len;
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        scores.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stemming_joins_inflections() {
        assert_eq!(tokenize("Tripping, tripped, trips!"), vec!["trip", "trip", "trip"]);
        assert_eq!(tokenize("overheating overheated"), vec!["overheat", "overheat"]);
        assert_eq!(tokenize("The valve is leaking"), vec!["valve", "leak"]);
    }

    #[test]
    fn closer_text_scores_higher_and_unrelated_text_not_at_all() {
        let docs = [
            "machine trips on high temperature",
            "oil in the air line",
            "high temperature alarm then trips after forty minutes",
        ];
        let index = Index::build(docs.iter().copied());
        let mut scores = index.score("trips on high temperature after forty minutes", |_| true);
        scores.sort_by(|a, b| b.1.total_cmp(&a.1));
        let order: Vec<usize> = scores.iter().map(|s| s.0).collect();
        assert_eq!(order, vec![2, 0]);
        assert!(index.score("oil", |d| d != 1).is_empty());
    }
}
