//! Newline-delimited JSON-RPC over a byte stream, read with a bound: a line
//! longer than the limit is skipped (and reported) without buffering it, and
//! a line that is not UTF-8 is reported — either way the next line is read.
//! (A codec that stops the stream after its first error would let one bad
//! line end a session.) Of a line too long, its first bytes are kept: a
//! JSON-RPC message names its `id` early, so the call it answers can fail at
//! once instead of waiting out its deadline.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line of text, without its newline.
    Text(String),
    /// Longer than the limit; its first [`HEAD`] bytes.
    TooLong(Vec<u8>),
    /// Not UTF-8; skipped.
    NotUtf8,
}

/// How much of a line too long is kept, to find its `id`.
pub const HEAD: usize = 256;

/// The lines of a byte stream, each read with a bound.
pub struct BoundedLines<R> {
    reader: BufReader<R>,
    max: usize,
}

impl<R: AsyncRead + Unpin> BoundedLines<R> {
    /// The lines of `reader`, none longer than `max` bytes kept.
    pub fn new(reader: R, max: usize) -> Self {
        Self { reader: BufReader::new(reader), max }
    }

    /// The next line, or `None` at the end of the stream.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut buf = Vec::new();
        let mut too_long = false;
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok((!buf.is_empty() || too_long).then(|| finish(buf, too_long)));
            }
            let (take, end) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (i, Some(i + 1)),
                None => (available.len(), None),
            };
            if !too_long {
                if buf.len() + take > self.max {
                    too_long = true;
                    let missing = HEAD.saturating_sub(buf.len()).min(take);
                    buf.extend_from_slice(&available[..missing]);
                    buf.truncate(HEAD);
                } else {
                    buf.extend_from_slice(&available[..take]);
                }
            }
            self.reader.consume(end.unwrap_or(take));
            if end.is_some() {
                return Ok(Some(finish(buf, too_long)));
            }
        }
    }
}

fn finish(mut buf: Vec<u8>, too_long: bool) -> Line {
    if too_long {
        return Line::TooLong(buf);
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).map_or(Line::NotUtf8, Line::Text)
}

/// The numeric `id` of the JSON-RPC message `head` begins, if the head
/// holds it whole: the `"id"` member of the outermost object, not one
/// nested in its params or result, nor text inside a string.
pub fn id_in_head(head: &[u8]) -> Option<i64> {
    let (mut depth, mut i) = (0usize, 0usize);
    while i < head.len() {
        match head[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b'"' => {
                let start = i + 1;
                i = start;
                while i < head.len() && head[i] != b'"' {
                    i += if head[i] == b'\\' { 2 } else { 1 };
                }
                let rest = head.get(i + 1..)?;
                let after_colon =
                    rest.iter().position(|b| !b.is_ascii_whitespace()).filter(|&p| rest[p] == b':');
                if depth == 1 && &head[start..i.min(head.len())] == b"id" && after_colon.is_some() {
                    let value = &rest[after_colon? + 1..];
                    let value = &value[value.iter().position(|b| !b.is_ascii_whitespace())?..];
                    let digits =
                        value.iter().take_while(|b| b.is_ascii_digit() || **b == b'-').count();
                    // The number must end inside the head: `12` of `123…` is not the id.
                    return match value.get(digits) {
                        Some(b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n') => {
                            std::str::from_utf8(&value[..digits]).ok()?.parse().ok()
                        }
                        _ => None,
                    };
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_lines_are_reported_and_reading_goes_on() {
        let input: &[u8] = b"{\"a\":1}\r\n0123456789abcdef\n\xff\xfe\nlast";
        let mut lines = BoundedLines::new(input, 10);
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::Text("{\"a\":1}".into())));
        assert_eq!(
            lines.next_line().await.unwrap(),
            Some(Line::TooLong(b"0123456789abcdef".to_vec()))
        );
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::NotUtf8));
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::Text("last".into())));
        assert_eq!(lines.next_line().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_line_too_long_keeps_its_head_only() {
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":\"{}\"}}\nnext",
            "x".repeat(10_000)
        );
        let mut lines = BoundedLines::new(long.as_bytes(), 1_000);
        let Some(Line::TooLong(head)) = lines.next_line().await.unwrap() else {
            panic!("not too long")
        };
        assert_eq!(head.len(), HEAD);
        assert_eq!(id_in_head(&head), Some(42));
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::Text("next".into())));
    }

    #[test]
    fn only_the_outer_id_counts_and_only_when_whole() {
        assert_eq!(id_in_head(br#"{"jsonrpc":"2.0","id" : 7,"result":{"#), Some(7));
        assert_eq!(id_in_head(br#"{"result":{"id":3,"text":"a \"id\":9"},"id":8,"x"#), Some(8));
        assert_eq!(id_in_head(br#"{"result":{"id":3,"text":"#), None);
        assert_eq!(id_in_head(br#"{"text":"\"id\":5","#), None);
        assert_eq!(id_in_head(br#"{"jsonrpc":"2.0","id":12"#), None);
        assert_eq!(id_in_head(br#"{"jsonrpc":"2.0","id":"abc","#), None);
    }
}
