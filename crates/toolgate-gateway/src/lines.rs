//! Newline-delimited JSON-RPC over a byte stream, read with a bound: a line
//! longer than the limit is skipped (and reported) without buffering it, and
//! a line that is not UTF-8 is reported — either way the next line is read.
//! (A codec that stops the stream after its first error would let one bad
//! line end a session.)

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Text(String),
    TooLong,
    NotUtf8,
}

pub(crate) struct BoundedLines<R> {
    reader: BufReader<R>,
    max: usize,
}

impl<R: AsyncRead + Unpin> BoundedLines<R> {
    pub(crate) fn new(reader: R, max: usize) -> Self {
        Self { reader: BufReader::new(reader), max }
    }

    /// The next line, or `None` at the end of the stream.
    pub(crate) async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
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
                    buf = Vec::new();
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
        return Line::TooLong;
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).map_or(Line::NotUtf8, Line::Text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_lines_are_reported_and_reading_goes_on() {
        let input: &[u8] = b"{\"a\":1}\r\n0123456789abcdef\n\xff\xfe\nlast";
        let mut lines = BoundedLines::new(input, 10);
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::Text("{\"a\":1}".into())));
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::TooLong));
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::NotUtf8));
        assert_eq!(lines.next_line().await.unwrap(), Some(Line::Text("last".into())));
        assert_eq!(lines.next_line().await.unwrap(), None);
    }
}
