//! Text from outside (a client config, a server's reply, a file name) made
//! safe to print to a terminal: every character that could move the cursor,
//! ring the bell, start an escape sequence, or reorder what the reader sees
//! is written as a visible `\u{..}` escape instead.
//!
//! Why: a server name holding `ESC [ 2 J` clears the screen, a `CR` lets the
//! rest of the line overwrite what came before it, and a right-to-left
//! override (U+202E) shows `exe.txt` for `txt.exe`. What the operator reads
//! must be what the bytes say.

use std::borrow::Cow;

/// `text` with every control character (C0, DEL, C1), line and paragraph
/// separator, and bidirectional formatting character written as `\u{XX}`
/// (lowercase hex, as Rust writes it). Text with none of them is returned
/// borrowed, unchanged. A backslash is left as it is, so Windows paths read
/// naturally; an escape is therefore not a proof that the text held that
/// character, only that nothing invisible is shown raw.
pub fn visible(text: &str) -> Cow<'_, str> {
    escape(text, needs_escape, |c| format!("\\u{{{:x}}}", c as u32))
}

/// `json`, JSON text, with every character [`visible`] escapes written as a
/// JSON `\uXXXX` escape: the same JSON value, nothing invisible shown raw.
/// serde_json escapes C0 controls in strings already, but not DEL, C1,
/// U+2028/2029 or the bidirectional controls; outside strings JSON holds
/// only ASCII punctuation, digits and letters, so every such character is
/// inside a string, where the escape means the same character.
pub fn visible_json(json: &str) -> Cow<'_, str> {
    // JSON's own whitespace between tokens (pretty output's line breaks and
    // indents) is kept: inside a string, serde_json never writes it raw.
    // Every character escaped is in the Basic Multilingual Plane: one \uXXXX.
    escape(
        json,
        |c| needs_escape(c) && !matches!(c, '\n' | '\r' | '\t'),
        |c| format!("\\u{:04x}", c as u32),
    )
}

/// `text` with each character `escaped` picks written as `written` writes
/// it; borrowed, unchanged, when there is none.
fn escape(
    text: &str,
    escaped: impl Fn(char) -> bool,
    written: impl Fn(char) -> String,
) -> Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c) {
            out.push_str(&written(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `c` could change how a terminal shows the text around it.
fn needs_escape(c: char) -> bool {
    c.is_control() || is_separator(c) || is_bidi_control(c)
}

/// U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR break lines in some
/// terminals and viewers.
fn is_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

/// The bidirectional formatting characters: marks (LRM, RLM, ALM),
/// embeddings and overrides (LRE, RLE, PDF, LRO, RLO) and isolates (LRI,
/// RLI, FSI, PDI).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "github · C:\\Users\\dana\\mcp.exe — ünïcode 名前";
        assert!(matches!(visible(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(visible("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(visible("bell\u{7}"), "bell\\u{7}");
        assert_eq!(visible("ok\rEVIL"), "ok\\u{d}EVIL");
        assert_eq!(visible("line\nnext\ttab"), "line\\u{a}next\\u{9}tab");
        assert_eq!(visible("nul\0del\u{7f}c1\u{9b}"), "nul\\u{0}del\\u{7f}c1\\u{9b}");
        assert_eq!(visible("x\u{2028}y\u{2029}"), "x\\u{2028}y\\u{2029}");
    }

    #[test]
    fn json_keeps_its_value_and_shows_nothing_invisible() {
        let value = serde_json::json!({"tool": "gpt\u{202e}txt.exe", "note": "a\u{9b}b\u{2028}"});
        for text in
            [serde_json::to_string(&value).unwrap(), serde_json::to_string_pretty(&value).unwrap()]
        {
            let shown = visible_json(&text).into_owned();
            assert!(!shown.chars().any(|c| needs_escape(c) && c != '\n'), "{shown}");
            assert_eq!(serde_json::from_str::<serde_json::Value>(&shown).unwrap(), value);
            assert_eq!(
                shown.lines().count(),
                text.lines().count(),
                "pretty output keeps its lines"
            );
        }
    }

    #[test]
    fn every_bidi_control_is_escaped() {
        for c in [
            '\u{200e}', '\u{200f}', '\u{061c}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
            '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            let shown = visible(&format!("a{c}b")).into_owned();
            assert_eq!(shown, format!("a\\u{{{:x}}}b", c as u32));
            assert!(!shown.contains(c));
        }
        assert_eq!(visible("gpt\u{202e}txt.exe"), "gpt\\u{202e}txt.exe");
    }
}
