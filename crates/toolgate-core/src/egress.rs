//! The egress scan: sensitive markers in arguments bound for a tool that
//! sends data outside (seed 003's classification, enforced where toolgate
//! stands: in the path). Every string of the arguments — every object key
//! too — is scanned, at any depth, as written, folded (NFKC, and the digits
//! of every script as ASCII digits) and — for runs that look encoded —
//! base64- or percent-decoded. Matching runs on the `regex` crate (linear
//! time, no backtracking), over at most the gateway's body cap.
//!
//! A marker glued to letters or `_` is still a marker (`CC4111…`,
//! `ssn123-45-6789`, `keyAKIA…`): numbers are bounded by what is not a
//! digit, prefixed tokens by their prefix. A digit next to a digit is no
//! boundary, so a long digit run is not read as the card inside it.
//!
//! A finding names each marker's kind and its JSON pointer, never its
//! value. The classes, by the worst marker found: `restricted` (payment
//! cards, national ids, private keys, cloud and forge tokens), `confidential`
//! (JWTs, `password=`-style pairs), `internal` (configured patterns of that
//! class), else `no_markers_found` — which is not clearance: the list of
//! markers is finite, and a value split across arguments, encrypted,
//! encoded otherwise, or paraphrased is not seen.

use std::sync::LazyLock;

use crate::decision::{Decision, Reason, Verdict};
use base64::Engine as _;
use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How sensitive what a call would send is, by its worst marker.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EgressClass {
    /// No marker of the finite list was found (not clearance to send).
    NoMarkersFound,
    /// Internal data by a configured pattern.
    Internal,
    /// Credentials that may be short-lived or partial: JWTs, `password=` pairs.
    Confidential,
    /// Payment cards, national ids, private keys, cloud and forge tokens.
    Restricted,
}

impl EgressClass {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoMarkersFound => "no_markers_found",
            Self::Internal => "internal",
            Self::Confidential => "confidential",
            Self::Restricted => "restricted",
        }
    }
}

/// One marker found: its kind and where, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Marker {
    /// `payment_card`, `us_ssn`, `uk_nino`, `private_key`, `aws_access_key`,
    /// `github_token`, `gitlab_token`, `slack_token`, `google_api_key`,
    /// `stripe_key`, `jwt`, `password_pair`, or a configured pattern's name.
    pub kind: String,
    /// The JSON pointer of the string it was found in. A key is never
    /// written out when it holds a marker: it is `~key` in the pointer (an
    /// escape no real pointer has), so `/meta/~key` is a key of `/meta`.
    pub path: String,
    /// `plain`, `nfkc` (found once folded), `base64` or `percent`: how the
    /// string held it.
    pub encoding: &'static str,
    /// The class this marker alone would give.
    pub class: EgressClass,
}

/// What a scan concludes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scan {
    /// The worst class found.
    pub class: EgressClass,
    /// Every marker, in document order.
    pub markers: Vec<Marker>,
}

/// A configured pattern: a name, a regular expression and the class it gives.
#[derive(Debug, Clone)]
pub struct CustomPattern {
    /// Its name, as findings report it.
    pub name: String,
    /// The expression (the `regex` crate's syntax: linear time).
    pub regex: Regex,
    /// The class a match gives.
    pub class: EgressClass,
}

struct Detector {
    kind: &'static str,
    class: EgressClass,
    view: View,
    regex: Regex,
    /// A further check of a match (Luhn, id validity rules, a JWT header).
    valid: fn(&str) -> bool,
}

fn always(_: &str) -> bool {
    true
}

/// Where a detector looks: the text as written, or a view of it in which
/// letters (and `_`) no longer touch what they are glued to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    /// The text as written: tokens, whose prefix is their boundary.
    Text,
    /// ASCII letters and `_` made separators: numbers (`CC4111…` is a card).
    Digits,
    /// Lower-case letters and `_` made separators: upper-case ids (`ninoAB…`).
    Upper,
}

static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
    let d = |kind, class, view, pattern: &str, valid| Detector {
        kind,
        class,
        view,
        regex: Regex::new(pattern).expect("static pattern"),
        valid,
    };
    use EgressClass::*;
    use View::*;
    vec![
        // Every network's numbers start with 2–6: a run starting otherwise (an
        // ISBN's 978) is not a candidate, and a card after such a run is still
        // found from its own first digit. `\b` here is "not next to a digit":
        // the view has no letters left.
        d(
            "payment_card",
            Restricted,
            Digits,
            r"(?-u:\b)[2-6](?:[ -]?[0-9]){12,18}(?-u:\b)",
            payment_card,
        ),
        d(
            "us_ssn",
            Restricted,
            Digits,
            r"(?-u:\b)[0-9]{3}[- ][0-9]{2}[- ][0-9]{4}(?-u:\b)",
            us_ssn,
        ),
        d(
            "uk_nino",
            Restricted,
            Upper,
            r"(?-u:\b)[A-Z]{2} ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D](?-u:\b)",
            uk_nino,
        ),
        d(
            "private_key",
            Restricted,
            Text,
            r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
            always,
        ),
        // Prefixed tokens: the prefix is the boundary, whatever precedes it.
        d("aws_access_key", Restricted, Text, r"(?:AKIA|ASIA)[0-9A-Z]{16}", always),
        d(
            "aws_access_key",
            Restricted,
            Text,
            r"(?i)aws_secret_access_key\s*[=:]\s*[A-Za-z0-9/+=]{40}",
            always,
        ),
        d(
            "github_token",
            Restricted,
            Text,
            r"gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}",
            always,
        ),
        d("gitlab_token", Restricted, Text, r"glpat-[A-Za-z0-9_-]{20,}", always),
        d("slack_token", Restricted, Text, r"xox[abprs]-[A-Za-z0-9-]{10,}", always),
        d("google_api_key", Restricted, Text, r"AIza[0-9A-Za-z_-]{35}", always),
        d("stripe_key", Restricted, Text, r"(?:sk|rk)_live_[0-9A-Za-z]{24,}", always),
        d(
            "jwt",
            Confidential,
            Text,
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            jwt,
        ),
        // `db_password=`, `x-api-key:` count as much as `password=`.
        d(
            "password_pair",
            Confidential,
            Text,
            r#"(?i)(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token)\s*[=:]\s*["']?[^\s"',;]{4,}"#,
            always,
        ),
    ]
});

/// All the detectors at once: one pass over a string says which of them
/// may match (most strings: none), and only those run on their own — a pass
/// each over every string cost twice the whole scan. A number detector's
/// pattern enters the set without its word boundaries: what it matches in
/// its view (only letters and `_` hidden) it matches in the text too, so
/// the set still names every candidate, and the view is made only for
/// those. Word boundaries and digits are ASCII (`(?-u:\b)`, `[0-9]`), which
/// is all the validators accept anyway, so the set stays on the regex
/// crate's lazy DFA whatever the text.
static DETECTOR_SET: LazyLock<RegexSet> = LazyLock::new(|| {
    let loose = |d: &Detector| {
        if d.view == View::Text {
            d.regex.as_str().to_string()
        } else {
            d.regex.as_str().replace("(?-u:\\b)", "")
        }
    };
    RegexSet::new(DETECTORS.iter().map(loose)).expect("static patterns")
});

/// `text` as `view` sees it (same length, same char boundaries: only ASCII
/// bytes are replaced, by `#`, which no detector reads as part of a word).
fn view_of(text: &str, view: View) -> std::borrow::Cow<'_, str> {
    let hide = |b: u8| match view {
        View::Text => false,
        View::Digits => b.is_ascii_alphabetic() || b == b'_',
        View::Upper => b.is_ascii_lowercase() || b == b'_',
    };
    if !text.bytes().any(hide) {
        return std::borrow::Cow::Borrowed(text);
    }
    let bytes: Vec<u8> = text.bytes().map(|b| if hide(b) { b'#' } else { b }).collect();
    std::borrow::Cow::Owned(String::from_utf8(bytes).expect("ASCII replaced by ASCII"))
}

/// The shortest text a built-in marker fits in (`pwd=abcd`): a shorter
/// string (most keys, most small values) meets only the configured patterns.
const MIN_MARKER_BYTES: usize = 8;

/// Runs that may be percent-encoded.
static PERCENT_RUN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~+-]){6,}").expect("static pattern")
});

/// The runs of `text` that may be base64: at least `BASE64_MIN` characters
/// of either alphabet, then up to two `=`. A byte loop: the same runs as
/// `[A-Za-z0-9+/_-]{12,}={0,2}` finds, at a fraction of a regex search's
/// cost over text that is mostly letters and digits.
fn base64_runs(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let in_run = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-');
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let start = i;
            while i < bytes.len() && in_run(bytes[i]) {
                i += 1;
            }
            if i - start >= BASE64_MIN {
                let run_end = i;
                while i < bytes.len() && i < run_end + 2 && bytes[i] == b'=' {
                    i += 1;
                }
                // The run is ASCII, so its ends are char boundaries.
                return Some(&text[start..i]);
            }
            // Past the run, and past the byte that ended it.
            i = if i == start { i + 1 } else { i };
        }
        None
    })
}

/// What a run decodes to as base64, if that is text. One alphabet is tried:
/// `-` or `_` make it URL-safe, else standard; a length no encoding has
/// (one character past a group of four) is not decoded at all, since most
/// runs of this length are words and ids, not base64.
fn base64_text(run: &str) -> Option<String> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let s = run.trim_end_matches('=');
    if s.len() % 4 == 1 {
        return None;
    }
    let engine =
        if s.bytes().any(|b| b == b'-' || b == b'_') { &URL_SAFE_NO_PAD } else { &STANDARD_NO_PAD };
    String::from_utf8(engine.decode(s).ok()?).ok()
}

/// The shortest run read as base64, by what it decodes to: 12 characters
/// (their padding not counted) are 9 bytes, the shortest marker (a NINO
/// written without spaces). A 16-digit card is 22 characters and `==`.
const BASE64_MIN: usize = 12;

/// What a call carrying confidential data meets (`[guards.egress] confidential`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnConfidential {
    /// It runs; its markers are named in the decision.
    Allow,
    /// It waits for a named approver, who sees what it carries.
    #[default]
    Approval,
    /// It is refused.
    Block,
}

/// The egress guard's word, joined to the decision of the policy and the
/// registry: restricted data never leaves (deny); confidential data follows
/// `on_confidential`; either way the markers' kinds and paths join the
/// decision's rules (`egress.KIND@PATH`), so the receipt, the span and a
/// refusal name them — never the values. A denial stands as it is.
pub fn guard(decision: Decision, scan: &Scan, on_confidential: OnConfidential) -> Decision {
    if scan.markers.is_empty() {
        return decision;
    }
    let found: Vec<String> = scan
        .markers
        .iter()
        .map(|m| format!("egress.{}@{}", m.kind, if m.path.is_empty() { "/" } else { &m.path }))
        .collect();
    let listing = scan
        .markers
        .iter()
        .map(|m| format!("{} at {}", m.kind, if m.path.is_empty() { "/" } else { &m.path }))
        .collect::<Vec<_>>()
        .join(", ");
    let noted = |mut d: Decision| {
        d.rules.extend(found.iter().cloned());
        d
    };
    if decision.verdict == Verdict::Deny {
        return noted(decision);
    }
    let class = scan.class.as_str();
    match (scan.class, on_confidential) {
        (EgressClass::Restricted, _) | (EgressClass::Confidential, OnConfidential::Block) => {
            let reason = if scan.class == EgressClass::Restricted {
                Reason::EgressRestricted
            } else {
                Reason::EgressConfidential
            };
            Decision::by(Verdict::Deny, reason, found)
                .because(format!("the arguments carry {class} data ({listing}), which may not leave through this tool; remove it and call again"))
        }
        (EgressClass::Confidential, OnConfidential::Approval) => {
            let why = format!(
                "the arguments carry confidential data ({listing}); a named approver must let it leave"
            );
            match decision.verdict {
                // Already held for a person: they are told what it carries too.
                Verdict::RequireApproval => {
                    let why = if decision.why.is_empty() {
                        why
                    } else {
                        format!("{}; {why}", decision.why)
                    };
                    Decision { why, ..noted(decision) }
                }
                _ => Decision::by(Verdict::RequireApproval, Reason::EgressConfidential, found)
                    .because(why),
            }
        }
        _ => noted(decision),
    }
}

/// The Luhn checksum, over the digits of `s` (other characters ignored).
pub fn luhn(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if digits.is_empty() {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| if i % 2 == 1 { if d * 2 > 9 { d * 2 - 9 } else { d * 2 } } else { d })
        .sum();
    sum % 10 == 0
}

/// 13–19 digits, Luhn-valid, under a card network's prefix — so an order
/// number that happens to pass Luhn (one in ten does) is not a card.
fn payment_card(m: &str) -> bool {
    let digits: String = m.chars().filter(char::is_ascii_digit).collect();
    let n = digits.len();
    let prefix = |len: usize| digits.get(..len).and_then(|p| p.parse::<u32>().ok()).unwrap_or(0);
    let network = match digits.as_bytes().first() {
        Some(b'4') => matches!(n, 13 | 16 | 19), // Visa
        Some(b'5') => (51..=55).contains(&prefix(2)) && n == 16, // Mastercard
        Some(b'2') => (2221..=2720).contains(&prefix(4)) && n == 16, // Mastercard 2-series
        Some(b'3') => {
            (matches!(prefix(2), 34 | 37) && n == 15)
                || ((3528..=3589).contains(&prefix(4)) && n >= 16)
                || (matches!(prefix(2), 36 | 38) || (300..=305).contains(&prefix(3))) && n >= 14
        } // Amex, JCB, Diners
        Some(b'6') => {
            (prefix(4) == 6011
                || prefix(2) == 65
                || (644..=649).contains(&prefix(3))
                || prefix(2) == 62)
                && n >= 16
        } // Discover, UnionPay
        _ => false,
    };
    (13..=19).contains(&n) && network && luhn(&digits)
}

/// A US SSN with separators: area 001–899 except 666, group 01–99, serial 0001–9999.
fn us_ssn(m: &str) -> bool {
    let digits: String = m.chars().filter(char::is_ascii_digit).collect();
    let (area, group, serial) = (
        digits[..3].parse::<u32>().unwrap_or(0),
        digits[3..5].parse::<u32>().unwrap_or(0),
        digits[5..].parse::<u32>().unwrap_or(0),
    );
    let seps: Vec<char> = m.chars().filter(|c| !c.is_ascii_digit()).collect();
    seps.len() == 2
        && seps[0] == seps[1]
        && area != 0
        && area != 666
        && area < 900
        && group != 0
        && serial != 0
}

/// A UK National Insurance number: the prefix letters HMRC allocates (not D,
/// F, I, Q, U, V; second not O; not BG, GB, KN, NK, NT, TN, ZZ), six digits,
/// suffix A–D.
fn uk_nino(m: &str) -> bool {
    let letters: Vec<char> = m.chars().filter(char::is_ascii_alphabetic).collect();
    let (first, second) = (letters[0], letters[1]);
    let prefix: String = [first, second].iter().collect();
    !"DFIQUV".contains(first)
        && !"DFIQUVO".contains(second)
        && !["BG", "GB", "KN", "NK", "NT", "TN", "ZZ"].contains(&prefix.as_str())
}

/// Three dot-separated base64url parts whose first is a JSON header with `alg`.
fn jwt(m: &str) -> bool {
    let header = m.split('.').next().unwrap_or("");
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .is_some_and(|h| h.get("alg").is_some())
}

/// Scans every string of `arguments` (at any depth) for the built-in
/// markers and `custom` patterns.
pub fn scan(arguments: &Value, custom: &[CustomPattern]) -> Scan {
    let mut markers = Vec::new();
    walk(arguments, &mut Vec::new(), custom, &mut markers);
    let class = markers.iter().map(|m| m.class).max().unwrap_or(EgressClass::NoMarkersFound);
    Scan { class, markers }
}

/// One step of the way to a string: its key or its index.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
    /// A key that holds a marker: never written out (`~key`).
    Withheld,
}

/// The JSON pointer of a string, written only for a string that holds a
/// marker (most hold none). Keys are tamed and bounded (`pointer`).
fn pointer(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => crate::pointer::push_key(&mut out, k),
            Step::Index(i) => crate::pointer::push_index(&mut out, *i),
            Step::Withheld => out.push_str("/~key"),
        }
    }
    out
}

fn walk<'a>(
    value: &'a Value,
    path: &mut Vec<Step<'a>>,
    custom: &[CustomPattern],
    out: &mut Vec<Marker>,
) {
    match value {
        Value::String(s) => scan_text(s, path, custom, out),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Step::Index(i));
                walk(v, path, custom, out);
                path.pop();
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                // A key is text the call sends like any other: scanned,
                // and withheld from every pointer once it holds a marker.
                let before = out.len();
                path.push(Step::Withheld);
                scan_text(k, path, custom, out);
                if out.len() == before {
                    path.pop();
                    path.push(Step::Key(k));
                }
                walk(v, path, custom, out);
                path.pop();
            }
        }
        // A card number sent as a JSON number is a string of digits too.
        Value::Number(n) => scan_text(&n.to_string(), path, custom, out),
        _ => {}
    }
}

fn scan_text(text: &str, path: &[Step<'_>], custom: &[CustomPattern], out: &mut Vec<Marker>) {
    let before = out.len();
    find(text, path, "plain", custom, out);
    if let Some(folded) = fold(text) {
        find(&folded, path, "nfkc", custom, out);
    }
    // Encoded runs: decoded once, scanned as text.
    if text.len() >= BASE64_MIN {
        for run in base64_runs(text) {
            if let Some(text) = base64_text(run) {
                find(&text, path, "base64", custom, out);
            }
        }
    }
    if text.contains('%') {
        for run in PERCENT_RUN.find_iter(text).filter(|r| r.as_str().contains('%')) {
            if let Some(decoded) = percent_decode(run.as_str()) {
                find(&decoded, path, "percent", custom, out);
            }
        }
    }
    // One marker per kind and place: a value seen plain and decoded counts once.
    if out.len() > before + 1 {
        let mut seen = std::collections::HashSet::new();
        let mut found = out.split_off(before);
        found.retain(|m| seen.insert(m.kind.clone()));
        out.extend(found);
    }
}

/// `text` folded for matching, if folding changes it: NFKC (fullwidth
/// `４` is `4`, `ＡＫＩＡ` is `AKIA`), then every decimal digit of another
/// script (Arabic-Indic `٤`, Devanagari `४`, …) as its ASCII digit. ASCII
/// text is never folded.
fn fold(text: &str) -> Option<String> {
    if text.is_ascii() {
        return None;
    }
    use unicode_normalization::UnicodeNormalization as _;
    let folded: String = text.nfkc().map(|c| ascii_digit(c).unwrap_or(c)).collect();
    (folded != text).then_some(folded)
}

/// A decimal digit of any script (Unicode `Nd`) as its ASCII digit. Such
/// digits come in runs of ten, zero to nine, so a digit's value is its
/// distance from the start of its run of `Nd` code points, modulo ten.
fn ascii_digit(c: char) -> Option<char> {
    static ND: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\d$").expect("static pattern"));
    if c.is_ascii() || !c.is_numeric() {
        return None;
    }
    let is_nd = |c: char| {
        let mut buf = [0u8; 4];
        ND.is_match(c.encode_utf8(&mut buf))
    };
    if !is_nd(c) {
        return None;
    }
    let mut start = c as u32;
    while let Some(prev) = start.checked_sub(1).and_then(char::from_u32).filter(|&p| is_nd(p)) {
        start = prev as u32;
    }
    char::from_digit((c as u32 - start) % 10, 10)
}

/// Pushes the markers `text` holds.
fn find(
    text: &str,
    path: &[Step<'_>],
    encoding: &'static str,
    custom: &[CustomPattern],
    out: &mut Vec<Marker>,
) {
    if text.len() >= MIN_MARKER_BYTES {
        // Each view is made once, and only for a candidate that needs it.
        let (mut digits, mut upper) = (None, None);
        for d in DETECTOR_SET.matches(text).iter().map(|i| &DETECTORS[i]) {
            let seen: &str = match d.view {
                View::Text => text,
                View::Digits => digits.get_or_insert_with(|| view_of(text, View::Digits)),
                View::Upper => upper.get_or_insert_with(|| view_of(text, View::Upper)),
            };
            if d.regex.find_iter(seen).any(|m| (d.valid)(m.as_str())) {
                out.push(Marker {
                    kind: d.kind.to_string(),
                    path: pointer(path),
                    encoding,
                    class: d.class,
                });
            }
        }
    }
    for p in custom {
        if p.regex.is_match(text) {
            out.push(Marker {
                kind: p.name.clone(),
                path: pointer(path),
                encoding,
                class: p.class,
            });
        }
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Appends the Luhn check digit to `body`.
    fn with_check_digit(body: &str) -> String {
        (0..10).map(|d| format!("{body}{d}")).find(|s| luhn(s)).unwrap()
    }

    proptest! {
        #[test]
        fn a_valid_visa_number_is_found_with_or_without_separators(body in "4[0-9]{14}", sep in prop::sample::select(vec!["", " ", "-"])) {
            let card = with_check_digit(&body);
            let written: String = card.as_bytes().chunks(4).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(sep);
            let scan = scan(&json!({"payment": {"card": written}}), &[]);
            prop_assert_eq!(scan.class, EgressClass::Restricted);
            prop_assert_eq!(&scan.markers[0].path, "/payment/card");
        }

        #[test]
        fn a_number_failing_luhn_is_not_a_card(body in "4[0-9]{14}") {
            let card = with_check_digit(&body);
            let last = card.chars().last().unwrap().to_digit(10).unwrap();
            let broken = format!("{}{}", &card[..15], (last + 1) % 10);
            prop_assert!(!scan(&json!(broken), &[]).markers.iter().any(|m| m.kind == "payment_card"));
        }

        #[test]
        fn ssns_follow_their_allocation_rules(area in 0u32..1000, group in 0u32..100, serial in 0u32..10000) {
            let ssn = format!("{area:03}-{group:02}-{serial:04}");
            let valid = area != 0 && area != 666 && area < 900 && group != 0 && serial != 0;
            let found = scan(&json!({"note": format!("id {ssn} on file")}), &[]).markers.iter().any(|m| m.kind == "us_ssn");
            prop_assert_eq!(found, valid, "{}", ssn);
        }

        #[test]
        fn no_value_is_ever_in_a_finding(body in "4[0-9]{14}") {
            let card = with_check_digit(&body);
            let scan = scan(&json!({"a": [{"b": card.clone()}]}), &[]);
            let text = serde_json::to_string(&scan).unwrap();
            prop_assert!(!text.contains(&card[4..12]));
        }
    }

    fn allowed() -> Decision {
        Decision::by(Verdict::Allow, Reason::Automatic, vec!["registry".into()])
    }

    #[test]
    fn restricted_data_never_leaves_and_confidential_data_follows_the_setting() {
        let card = scan(&json!({"body": "card 4111 1111 1111 1111"}), &[]);
        let d = guard(allowed(), &card, OnConfidential::Allow);
        assert_eq!(
            (d.verdict, d.reason, d.rules.as_slice()),
            (
                Verdict::Deny,
                Reason::EgressRestricted,
                ["egress.payment_card@/body".to_string()].as_slice()
            )
        );
        assert!(d.why.contains("payment_card at /body") && !d.why.contains("4111"), "{}", d.why);
        let pair = scan(&json!({"cc": "password=hunter22"}), &[]);
        assert_eq!(
            guard(allowed(), &pair, OnConfidential::Approval).verdict,
            Verdict::RequireApproval
        );
        assert_eq!(guard(allowed(), &pair, OnConfidential::Block).verdict, Verdict::Deny);
        let let_through = guard(allowed(), &pair, OnConfidential::Allow);
        assert_eq!(
            (let_through.verdict, let_through.rules.as_slice()),
            (
                Verdict::Allow,
                ["registry".to_string(), "egress.password_pair@/cc".to_string()].as_slice()
            )
        );
        // Nothing found changes nothing; a denial stays the policy's.
        assert_eq!(
            guard(allowed(), &scan(&json!({"body": "hi"}), &[]), OnConfidential::Block),
            allowed()
        );
        let denied = Decision::by(Verdict::Deny, Reason::PolicyForbids, vec!["no_exports".into()]);
        assert_eq!(guard(denied, &card, OnConfidential::Block).reason, Reason::PolicyForbids);
        // A call a policy already holds for approval keeps its rule, and the
        // approver is told what it carries.
        let held = Decision::by(
            Verdict::RequireApproval,
            Reason::PolicyRequiresApproval,
            vec!["exact_rule".into()],
        )
        .because("notices need a person");
        let d = guard(held, &pair, OnConfidential::Approval);
        assert_eq!(
            (d.reason, d.rules.as_slice()),
            (
                Reason::PolicyRequiresApproval,
                ["exact_rule".to_string(), "egress.password_pair@/cc".to_string()].as_slice()
            )
        );
        assert_eq!(
            d.why,
            "notices need a person; the arguments carry confidential data (password_pair at /cc); a named approver must let it leave"
        );
    }

    #[test]
    fn a_card_right_after_another_digit_run_is_still_found() {
        // The run "9 4111…" is no card, but the card in it is: a candidate
        // starts at a network's first digit, not at the first digit there is.
        for text in ["qty 9 4111 1111 1111 1111", "ISBN 978-4111-1111-1111-1111"] {
            let s = scan(&json!({"note": text}), &[]);
            assert_eq!(
                s.markers.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
                ["payment_card"],
                "{text}"
            );
        }
        assert!(scan(&json!({"isbn": "978-3-16-148410-0"}), &[]).markers.is_empty());
    }

    proptest! {
        #[test]
        fn the_base64_run_loop_finds_what_the_regex_would(text in "[A-Za-z0-9+/=_ .%-]{0,120}") {
            let regex = Regex::new(r"[A-Za-z0-9+/_-]{12,}={0,2}").unwrap();
            let by_regex: Vec<&str> = regex.find_iter(&text).map(|m| m.as_str()).collect();
            prop_assert_eq!(base64_runs(&text).collect::<Vec<_>>(), by_regex);
        }
    }

    #[test]
    fn a_key_is_scanned_and_never_written_out_once_it_holds_a_marker() {
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        let s = scan(&json!({"meta": {"4111111111111111": {"x\r\ny": jwt}}}), &[]);
        let found: Vec<(&str, &str)> =
            s.markers.iter().map(|m| (m.kind.as_str(), m.path.as_str())).collect();
        assert_eq!(found, [("payment_card", "/meta/~key"), ("jwt", "/meta/~key/x\\u000d\\u000ay")]);
        let d = guard(allowed(), &s, OnConfidential::Approval);
        assert!(
            !d.why.contains("4111")
                && !d.why.contains('\r')
                && d.rules.iter().all(|r| !r.contains("4111") && !r.contains('\n')),
            "{d:?}"
        );
    }

    #[test]
    fn markers_glued_to_letters_folded_or_padded_are_found_and_long_digit_runs_are_not_cards() {
        let kinds = |v: Value| {
            scan(&v, &[]).markers.into_iter().map(|m| (m.kind, m.encoding)).collect::<Vec<_>>()
        };
        assert_eq!(kinds(json!("CC4111111111111111")), [("payment_card".to_string(), "plain")]);
        assert_eq!(kinds(json!("x_078-05-1120_y")), [("us_ssn".to_string(), "plain")]);
        assert_eq!(
            kinds(json!("tokenghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_x")),
            [("github_token".to_string(), "plain")]
        );
        assert_eq!(
            kinds(json!("NDExMTExMTExMTExMTExMQ==")),
            [("payment_card".to_string(), "base64")]
        );
        assert_eq!(kinds(json!("۴۱۱۱۱۱۱۱۱۱۱۱۱۱۱۱")), [("payment_card".to_string(), "nfkc")]);
        assert_eq!(
            kinds(json!("９７８４１１１１１１１１１１１１１１")),
            Vec::<(String, &str)>::new(),
            "a 16-digit card inside a longer run"
        );
        assert!(
            kinds(json!("41111111111111119")).is_empty()
                && kinds(json!("94111111111111111")).is_empty()
        );
    }

    #[test]
    fn the_luhn_check_matches_known_numbers() {
        assert!(luhn("4111111111111111") && luhn("79927398713") && luhn("378282246310005"));
        assert!(!luhn("4111111111111112") && !luhn(""));
    }

    #[test]
    fn national_insurance_numbers_follow_hmrcs_prefix_rules() {
        for (nino, ok) in [
            ("QQ 12 34 56 C", false),
            ("AB 12 34 56 C", true),
            ("AB123456C", true),
            ("GB123456A", false),
            ("AO123456A", false),
            ("AB123456E", false),
        ] {
            assert_eq!(
                scan(&json!(nino), &[]).markers.iter().any(|m| m.kind == "uk_nino"),
                ok,
                "{nino}"
            );
        }
    }

    #[test]
    fn encoded_markers_are_found_and_named_by_their_encoding() {
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";
        let b64 = base64::engine::general_purpose::STANDARD.encode(key);
        let s = scan(
            &json!({"attachment": b64, "link": "https://x.example/?c=4111%201111%201111%201111"}),
            &[],
        );
        let found: Vec<(&str, &str, &str)> =
            s.markers.iter().map(|m| (m.kind.as_str(), m.path.as_str(), m.encoding)).collect();
        assert_eq!(
            found,
            [("private_key", "/attachment", "base64"), ("payment_card", "/link", "percent")]
        );
        assert_eq!(s.class, EgressClass::Restricted);
    }

    #[test]
    fn the_worst_marker_classes_the_call_and_custom_patterns_count() {
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(scan(&json!({"auth": jwt}), &[]).class, EgressClass::Confidential);
        assert_eq!(scan(&json!({"body": "Build passed."}), &[]).class, EgressClass::NoMarkersFound);
        let project = CustomPattern {
            name: "project_codename".into(),
            regex: Regex::new(r"\bPROJECT-[A-Z]{4}\b").unwrap(),
            class: EgressClass::Internal,
        };
        let s =
            scan(&json!({"body": "status of PROJECT-ORCA", "cc": "password=hunter22"}), &[project]);
        assert_eq!(s.class, EgressClass::Confidential);
        let kinds: Vec<&str> = s.markers.iter().map(|m| m.kind.as_str()).collect();
        assert_eq!(kinds, ["project_codename", "password_pair"]);
    }
}

/// Compiles the built-in detectors now (they are compiled once, on first
/// use): a gateway calls it at start so that no call pays for it.
pub fn warm() {
    LazyLock::force(&DETECTORS);
    LazyLock::force(&DETECTOR_SET);
    LazyLock::force(&PERCENT_RUN);
}
