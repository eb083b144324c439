//! Where in a caller's arguments something is, for people to read: a JSON
//! pointer whose keys are the caller's, so each is made safe to print
//! before it joins a reason, a rule or a receipt. An argument key is as
//! hostile as a value: it reaches the approvers' screen, their event
//! stream, Slack and the logs. So every control character and line
//! separator in it is written as an escape (`\u000d`), never as itself,
//! and a long key is cut (`…`).

/// The characters of one key kept in a pointer.
pub const MAX_KEY_CHARS: usize = 40;

/// The characters of a message about the arguments kept (a validator's).
pub const MAX_MESSAGE_CHARS: usize = 300;

/// Appends `/KEY` to `out`: `~` and `/` escaped as a pointer escapes them,
/// the key tamed and bounded.
pub fn push_key(out: &mut String, key: &str) {
    out.push('/');
    let escaped = key.replace('~', "~0").replace('/', "~1");
    push_tamed(out, &escaped, MAX_KEY_CHARS);
}

/// Appends `/INDEX` to `out`.
pub fn push_index(out: &mut String, index: usize) {
    out.push('/');
    out.push_str(&index.to_string());
}

/// `text` with every control character and line or paragraph separator
/// written as `\uXXXX`, and cut to at most `max_chars` characters and `…`.
pub fn tame(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 2));
    push_tamed(&mut out, text, max_chars);
    out
}

/// At most `max_chars` characters written (an escape counts whole), then `…`.
fn push_tamed(out: &mut String, text: &str, max_chars: usize) {
    let mut written = 0;
    for c in text.chars() {
        let escaped = c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
        let width = if escaped { 6 } else { 1 };
        if written + width > max_chars {
            out.push('…');
            return;
        }
        written += width;
        if escaped {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_cannot_break_a_line_or_run_on() {
        let mut p = String::new();
        push_key(&mut p, "a\r\rb\n\u{2028}");
        push_index(&mut p, 3);
        assert_eq!(p, "/a\\u000d\\u000db\\u000a\\u2028/3");
        let forged = tame("x\r\revent: count\rdata: 0\r", 30);
        assert!(
            !forged.contains(['\r', '\n']) && forged.chars().count() <= 31 && forged.ends_with('…'),
            "{forged}"
        );
        let mut long = String::new();
        push_key(&mut long, &"k/".repeat(100));
        assert_eq!(long.chars().count(), 1 + MAX_KEY_CHARS + 1);
        assert!(long.starts_with("/k~1k~1") && long.ends_with('…'));
        assert_eq!(tame("plain words", 100), "plain words");
    }
}
