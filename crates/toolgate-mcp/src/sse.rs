//! Server-sent event frames, written so that no byte of a value can end a
//! line or an event early.
//!
//! An event-stream parser (the browser's `EventSource`, an SDK's reader)
//! ends a line at CR LF, at a bare CR and at a bare LF, and an event at an
//! empty line. A value written after one `data:` with any of those inside
//! could close its event and start another — a forged event of the
//! writer's own stream. So a value's lines are cut at every one of the
//! three, and each goes out as a `data:` line of its own: a reader joins
//! them with LF, which is the value with its line breaks as LF. Event names
//! are ours, never a caller's; one with a line break in it is a bug.

/// One event: `event: NAME`, one `data:` line per line of `data`, and the
/// empty line that dispatches it.
pub fn frame(event: &str, data: &str) -> String {
    let mut out = String::with_capacity(data.len() + event.len() + 16);
    push_frame(&mut out, event, data);
    out
}

/// An MCP message as one `message` event (JSON-RPC over Streamable HTTP).
pub fn message(json: &str) -> String {
    frame("message", json)
}

/// Appends the event `frame` would return to `out`.
pub fn push_frame(out: &mut String, event: &str, data: &str) {
    assert!(!event.contains(['\r', '\n']), "an event name is ours and one line");
    out.push_str("event: ");
    out.push_str(event);
    out.push('\n');
    for line in lines(data) {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
}

/// The lines of `text` as an event-stream reader sees them: cut at CR LF,
/// at a bare CR and at a bare LF. An empty text is one empty line.
pub fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        match text.find(['\r', '\n']) {
            Some(i) => {
                let skip = if text[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&text[i + skip..]);
                Some(&text[..i])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

/// One event as a reader dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its `event:` name (`message` when none was given).
    pub name: String,
    /// Its `data:` lines, joined with LF.
    pub data: String,
}

/// Reads a whole event stream the way the WHATWG event-stream algorithm
/// does (lines cut at CR LF, CR or LF; `field: value`; one space after the
/// colon dropped; comments and unknown fields ignored; an event dispatched
/// at an empty line when it has data). The tests and the fuzz target hold
/// what `frame` writes against it.
pub fn read(stream: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let (mut name, mut data, mut has_data) = (String::new(), String::new(), false);
    for line in lines(stream) {
        if line.is_empty() {
            if has_data {
                events.push(Event {
                    name: if name.is_empty() { "message".into() } else { name.clone() },
                    data: data.clone(),
                });
            }
            (name, data, has_data) = (String::new(), String::new(), false);
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => name = value.to_string(),
            "data" => {
                if has_data {
                    data.push('\n');
                }
                data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bare_cr_in_a_value_cannot_start_an_event() {
        // The attack: a value with bare CRs that, written after one `data:`,
        // reads as an empty line and two forged events.
        let forged =
            "<li>a</li>\r\revent: count\rdata: 0\r\revent: inbox\rdata: <p>all clear</p>\r";
        let written = frame("inbox", forged);
        let events = read(&written);
        assert_eq!(events.len(), 1, "{written:?}");
        assert_eq!(events[0].name, "inbox");
        assert_eq!(events[0].data, forged.replace('\r', "\n"));
        assert!(!written.contains('\r'));
    }

    #[test]
    fn every_kind_of_line_break_becomes_a_data_line() {
        assert_eq!(frame("m", "a\r\nb\rc\nd"), "event: m\ndata: a\ndata: b\ndata: c\ndata: d\n\n");
        assert_eq!(frame("m", ""), "event: m\ndata: \n\n");
        assert_eq!(frame("m", "\n"), "event: m\ndata: \ndata: \n\n");
        // A leading space survives the one space a reader drops.
        assert_eq!(read(&frame("m", " x"))[0].data, " x");
    }

    proptest! {
        #[test]
        fn whatever_the_value_a_reader_sees_exactly_one_event_with_it(data in ".*|[\r\n :a-z]*", name in "[a-z]{1,8}") {
            let events = read(&frame(&name, &data));
            prop_assert_eq!(events.len(), 1);
            prop_assert_eq!(&events[0].name, &name);
            prop_assert_eq!(&events[0].data, &data.replace("\r\n", "\n").replace('\r', "\n"));
        }
    }
}
