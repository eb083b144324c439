//! The JCS of a JSON text (`canonical_json_text`, public as
//! `proposal::canonical_json_text`), written as it is read.
//!
//! The quick way (`canonical`) is for the text most answers are: strings
//! whose escapes are the ones JCS writes itself, integers that print as
//! they are written. Those are copied from the text as they stand instead
//! of being decoded and escaped again; only the members of each object are
//! put in order, and a name given twice keeps its last value. A string with
//! any other escape (`\/`, `\u00e9`) is decoded and written by the one
//! string writer; any other number is read as the double it denotes and
//! printed as ECMAScript prints it.
//!
//! It answers `None` for anything it does not take on — text that is not
//! JSON, nesting deeper than `MAX_DEPTH`, a character JSON forbids —
//! and the text is then read the thorough way (serde_json's parser,
//! through `Canon`), which gives the same bytes or the parser's own error.
//! So the quick way never decides whether a text is JSON, only how fast a
//! valid one is written.

use std::borrow::Cow;

use crate::jcs::{write_members, write_number, write_string};

/// The JCS text of a JSON text, written as it is read: no value is built,
/// and a name given twice keeps its last value (as parsing it into a
/// `Value` would). A read's receipt hashes its answer this way. Most text
/// takes the quick way (`canonical`: what JCS writes as it stands is copied);
/// the rest, and whatever is not JSON, is read by serde_json's parser.
/// For the bench's 1.1 KB answer: 3.7 µs through the parser, where building
/// a `Value` and writing its JCS took 5.1–5.8 µs.
pub fn canonical_json_text(text: &str) -> serde_json::Result<String> {
    if let Some(out) = canonical(text) {
        return Ok(out);
    }
    let mut out = String::with_capacity(text.len());
    let mut de = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Canon(&mut out), &mut de)?;
    de.end()?;
    Ok(out)
}

/// Writes the JCS of the value it is handed to its string.
struct Canon<'o>(&'o mut String);

impl<'de> serde::de::DeserializeSeed<'de> for Canon<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Canon<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_bool<E>(self, b: bool) -> Result<(), E> {
        self.0.push_str(if b { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E>(self, i: i64) -> Result<(), E> {
        write_number(&i.into(), self.0);
        Ok(())
    }
    fn visit_u64<E>(self, u: u64) -> Result<(), E> {
        write_number(&u.into(), self.0);
        Ok(())
    }
    fn visit_f64<E>(self, f: f64) -> Result<(), E> {
        match serde_json::Number::from_f64(f) {
            Some(n) => write_number(&n, self.0),
            None => self.0.push_str("null"),
        }
        Ok(())
    }
    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        write_string(s, self.0);
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let empty = self.0.len();
        while seq.next_element_seed(Canon(self.0))?.is_some() {
            self.0.push(',');
        }
        if self.0.len() > empty {
            self.0.pop(); // the last element's comma
        }
        self.0.push(']');
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Each member's value is written once, into one scratch string, and
        // placed by its name's order afterwards.
        let mut scratch = String::new();
        let mut members: Vec<(std::borrow::Cow<'de, str>, std::ops::Range<usize>)> = Vec::new();
        while let Some(Name(name)) = map.next_key()? {
            let start = scratch.len();
            map.next_value_seed(Canon(&mut scratch))?;
            members.push((name, start..scratch.len()));
        }
        write_members(members, &scratch, self.0);
        Ok(())
    }
}

/// Deeper than this, the thorough way decides (its parser stops at 128).
const MAX_DEPTH: u32 = 100;

/// The JCS of `text`, or `None` where the thorough way must decide.
fn canonical(text: &str) -> Option<String> {
    let mut scan = Scan { s: text, b: text.as_bytes(), i: 0, depth: 0 };
    let mut out = String::with_capacity(text.len());
    scan.ws();
    scan.value(&mut out)?;
    scan.ws();
    (scan.i == scan.b.len()).then_some(out)
}

struct Scan<'t> {
    s: &'t str,
    b: &'t [u8],
    i: usize,
    depth: u32,
}

impl<'t> Scan<'t> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// Takes `byte` (after any whitespace), or fails.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&byte)).then(|| self.i += 1)
    }

    fn value(&mut self, out: &mut String) -> Option<()> {
        match *self.b.get(self.i)? {
            b'{' => self.nested(out, Self::object),
            b'[' => self.nested(out, Self::array),
            b'"' => {
                let (raw, as_is) = self.string()?;
                if as_is {
                    out.reserve(raw.len() + 2);
                    out.push('"');
                    out.push_str(raw);
                    out.push('"');
                } else {
                    write_string(&decode(raw)?, out);
                }
                Some(())
            }
            b't' => self.literal("true", out),
            b'f' => self.literal("false", out),
            b'n' => self.literal("null", out),
            b'-' | b'0'..=b'9' => self.number(out),
            _ => None,
        }
    }

    fn nested(
        &mut self,
        out: &mut String,
        inner: fn(&mut Self, &mut String) -> Option<()>,
    ) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        inner(self, out)?;
        self.depth -= 1;
        Some(())
    }

    fn literal(&mut self, word: &str, out: &mut String) -> Option<()> {
        self.b[self.i..].starts_with(word.as_bytes()).then(|| {
            self.i += word.len();
            out.push_str(word);
        })
    }

    fn array(&mut self, out: &mut String) -> Option<()> {
        out.push('[');
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            out.push(']');
            return Some(());
        }
        loop {
            self.ws();
            self.value(out)?;
            self.ws();
            match self.b.get(self.i)? {
                b',' => out.push(','),
                b']' => break,
                _ => return None,
            }
            self.i += 1;
        }
        self.i += 1;
        out.push(']');
        Some(())
    }

    fn object(&mut self, out: &mut String) -> Option<()> {
        // Each member's value is written once, into one scratch string, and
        // placed by its name's order afterwards.
        let mut scratch = String::new();
        let mut members: Vec<(Cow<'t, str>, std::ops::Range<usize>)> = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
        } else {
            loop {
                self.ws();
                if self.b.get(self.i) != Some(&b'"') {
                    return None;
                }
                let (raw, _) = self.string()?;
                let name =
                    if raw.contains('\\') { Cow::Owned(decode(raw)?) } else { Cow::Borrowed(raw) };
                self.expect(b':')?;
                self.ws();
                let start = scratch.len();
                self.value(&mut scratch)?;
                members.push((name, start..scratch.len()));
                self.ws();
                match self.b.get(self.i)? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        write_members(members, &scratch, out);
        Some(())
    }

    /// The text between a string's quotes (the scan is on its opening
    /// one), and whether JCS would write it exactly so: every escape is
    /// one JCS writes itself (`\"`, `\\`, the five short forms, `\u00xx`
    /// in lower case for the other control characters).
    fn string(&mut self) -> Option<(&'t str, bool)> {
        let start = self.i + 1;
        let mut i = start;
        let mut as_is = true;
        loop {
            match *self.b.get(i)? {
                b'"' => break,
                b'\\' => match *self.b.get(i + 1)? {
                    b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f' => i += 2,
                    b'u' => {
                        let hex = self.b.get(i + 2..i + 6)?;
                        as_is &= short_of_jcs(hex);
                        i += 6;
                    }
                    _ => {
                        as_is = false;
                        i += 2;
                    }
                },
                // JSON has no raw control characters in a string.
                0x00..=0x1f => return None,
                _ => i += 1,
            }
        }
        self.i = i + 1;
        // The quote and backslash are ASCII, so both ends are boundaries.
        Some((&self.s[start..i], as_is))
    }

    fn number(&mut self, out: &mut String) -> Option<()> {
        let start = self.i;
        let digits = |b: &[u8], mut i: usize| {
            let from = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            (i > from).then_some(i)
        };
        let mut i = start + usize::from(self.b[start] == b'-');
        let int_start = i;
        i = digits(self.b, i)?;
        // No leading zeros (JSON's grammar).
        if self.b[int_start] == b'0' && i - int_start > 1 {
            return None;
        }
        let mut integer = true;
        if self.b.get(i) == Some(&b'.') {
            i = digits(self.b, i + 1)?;
            integer = false;
        }
        if let Some(b'e' | b'E') = self.b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = self.b.get(i) {
                i += 1;
            }
            i = digits(self.b, i)?;
            integer = false;
        }
        self.i = i;
        let token = &self.s[start..i];
        // An integer of up to 15 digits is exact as a double and prints as
        // written; "-0" prints as 0.
        if integer && i - int_start <= 15 && token != "-0" {
            out.push_str(token);
        } else {
            write_number(&serde_json::from_str::<serde_json::Number>(token).ok()?, out);
        }
        Some(())
    }
}

/// Whether `\uXXXX` is how JCS writes its character: a control character
/// with no short form, in lower-case hex.
fn short_of_jcs(hex: &[u8]) -> bool {
    match hex {
        [b'0', b'0', hi @ (b'0' | b'1'), lo @ (b'0'..=b'9' | b'a'..=b'f')] => {
            let code =
                (hi - b'0') << 4 | if lo.is_ascii_digit() { lo - b'0' } else { lo - b'a' + 10 };
            !matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
        }
        _ => false,
    }
}

/// A string's text between its quotes, decoded as JSON decodes it.
fn decode(raw: &str) -> Option<String> {
    let mut quoted = String::with_capacity(raw.len() + 2);
    quoted.push('"');
    quoted.push_str(raw);
    quoted.push('"');
    serde_json::from_str(&quoted).ok()
}

/// A member's name, borrowed from the text when it has no escapes.
struct Name<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Name<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(s.into()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(s.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_jcs_writes_itself_are_copied_and_others_are_written_anew() {
        assert_eq!(canonical(r#""a\"b\\c\n\u001f""#).as_deref(), Some(r#""a\"b\\c\n\u001f""#));
        assert_eq!(canonical(r#""\/\u00e9\u000A\u001F""#).as_deref(), Some("\"/é\\n\\u001f\""));
        assert_eq!(canonical(r#"{"\u0062":1,"a":2}"#).as_deref(), Some(r#"{"a":2,"b":1}"#));
    }

    /// A tool's answer as servers write it takes the quick way whole.
    #[test]
    fn an_answer_as_servers_write_it_is_copied_in_order() {
        let structured = serde_json::json!({"parts": [{"part_no": "AC-250-S/7", "price": 12.5, "stock": 3, "name": "Filter \"Intake\"\n"}], "count": 1});
        let answer = serde_json::json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured, "isError": false});
        for text in [answer.to_string(), serde_json::to_string_pretty(&answer).unwrap()] {
            assert_eq!(canonical(&text), Some(crate::jcs::canonical_json(&answer)));
        }
    }

    #[test]
    fn numbers_print_as_ecmascript_does() {
        assert_eq!(
            canonical("[0,-0,12,1.50,1e3,-12345678901234567,123456789012345]").as_deref(),
            Some("[0,0,12,1.5,1000,-12345678901234568,123456789012345]")
        );
    }

    #[test]
    fn what_it_does_not_take_on_is_left_to_the_parser() {
        for text in [
            "",
            "01",
            "[1,]",
            "{\"a\":1,}",
            "\"\u{1}\"",
            "\"\\x\"",
            "tru",
            "1 2",
            "{\"a\" 1}",
            "\"\\ud800\"",
            "1e400",
        ] {
            assert_eq!(canonical(text), None, "{text:?}");
        }
        let deep =
            format!("{}{}", "[".repeat(MAX_DEPTH as usize + 1), "]".repeat(MAX_DEPTH as usize + 1));
        assert_eq!(canonical(&deep), None);
    }
}
