//! The event-stream writer (`toolgate_mcp::sse`), under the reader the
//! browser's `EventSource` follows: whatever a value holds, its frame is
//! read as exactly one event, of its own name, with the value's lines.

use toolgate_mcp::sse;

pub(crate) fn run(data: &[u8]) {
    let value = String::from_utf8_lossy(data);
    let written = sse::frame("inbox", &value);
    let events = sse::read(&written);
    assert_eq!(events.len(), 1, "one frame read as {} events", events.len());
    assert_eq!(events[0].name, "inbox");
    assert_eq!(events[0].data, value.replace("\r\n", "\n").replace('\r', "\n"));
    // Two frames in a row stay two events: nothing of the first runs on.
    let mut both = written.clone();
    sse::push_frame(&mut both, "count", &value);
    assert_eq!(
        sse::read(&both).iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["inbox", "count"]
    );
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    [
        "<li>a</li>\r\revent: count\rdata: 0\r\revent: inbox\rdata: <p>all clear</p>\r",
        "one\r\ntwo\nthree\rfour",
        "",
        "\n\n\n",
        ": a comment\ndata: x\nid: 7\nretry: 1",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
