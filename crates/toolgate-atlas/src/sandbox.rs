//! The sandbox: the only place an Atlas server writes. Each kind of write is
//! an append-only JSON-lines file under the state directory; nothing is ever
//! edited, and nothing leaves the machine.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

/// Notes appended by `post_ticket_update`.
pub const NOTES: &str = "notes.jsonl";
/// Orders recorded by `raise_parts_order`.
pub const ORDERS: &str = "orders.jsonl";
/// Bundles "sent" by `export_service_records`: they stop here.
pub const OUTBOX: &str = "outbox.jsonl";

/// What [`Sandbox::append_unless`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Appended {
    /// A matching record was already there; nothing was written.
    Existing(Value),
    /// Nothing matched; this record was appended.
    New(Value),
}

pub struct Sandbox {
    dir: PathBuf,
    /// Keeps the default temporary directory alive as long as the server.
    _temp: Option<tempfile::TempDir>,
    /// One writer at a time, so sequence numbers and lines never interleave;
    /// under it, what each file held when last read.
    lock: Mutex<HashMap<String, Seen>>,
}

/// A file as far as it was read: its length then, its lines, and (once a
/// reader asked) its records. Each access reads only what was appended
/// since (by this process or another), so a long soak does not make every
/// write rescan the whole file.
#[derive(Default)]
struct Seen {
    offset: u64,
    lines: u64,
    /// A last line without its newline (torn, or being written): counted,
    /// not parsed, until it is whole.
    partial: Vec<u8>,
    records: Option<Vec<Value>>,
    /// Per field looked up by [`Sandbox::first_where`]: each value's oldest
    /// record (its position in `records`), kept as lines arrive. A soak's
    /// desk holds tens of thousands of tickets; scanning them on every
    /// create made each write slower than the last.
    index: HashMap<String, HashMap<String, usize>>,
}

impl Seen {
    /// Reads what `path` gained since the last look; starts over if it shrank.
    fn refresh(&mut self, path: &Path, parse: bool) -> std::io::Result<()> {
        let mut f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self = Seen { records: parse.then(Vec::new), ..Seen::default() };
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        if len < self.offset || (parse && self.records.is_none()) {
            *self = Seen::default();
        }
        if parse && self.records.is_none() {
            self.records = Some(Vec::new());
        }
        if len == self.offset {
            return Ok(());
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut more = Vec::new();
        f.take(len - self.offset).read_to_end(&mut more)?;
        self.offset += more.len() as u64;
        let mut bytes = std::mem::take(&mut self.partial);
        bytes.extend_from_slice(&more);
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |n| n + 1);
        for line in bytes[..whole].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            self.lines += 1;
            // A torn line (power loss mid-write) is skipped, not fatal.
            if let (Some(records), Ok(v)) =
                (self.records.as_mut(), serde_json::from_slice::<Value>(line))
            {
                for (field, by) in &mut self.index {
                    if let Some(value) = v[field.as_str()].as_str() {
                        by.entry(value.to_string()).or_insert(records.len());
                    }
                }
                records.push(v);
            }
        }
        self.partial = bytes[whole..].to_vec();
        Ok(())
    }

    /// Lines so far, a torn last line included.
    fn count(&self) -> u64 {
        self.lines + u64::from(!self.partial.is_empty())
    }
}

impl Sandbox {
    /// Opens (creating if needed) `dir`, or a fresh temporary directory.
    pub fn open(dir: Option<&Path>) -> std::io::Result<Self> {
        let (dir, temp) = match dir {
            Some(d) => {
                fs::create_dir_all(d)?;
                (d.to_path_buf(), None)
            }
            None => {
                let temp = tempfile::Builder::new().prefix("toolgate-atlas-").tempdir()?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        Ok(Self { dir, _temp: temp, lock: Mutex::new(HashMap::new()) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one record and returns its 1-based sequence number in the
    /// file. `build` receives that number, so ids derive from it. The line is
    /// flushed to disk before the call returns: an acknowledged write is kept.
    pub fn append(&self, file: &str, build: impl FnOnce(u64) -> Value) -> std::io::Result<Value> {
        let mut seen = self.lock();
        self.append_locked(&mut seen, file, build)
    }

    /// Appends as [`append`](Self::append) unless a record of `file` has
    /// the string `value` at `field`; then that (oldest) record is returned
    /// and nothing is written. Lookup and append happen under one lock, so
    /// two concurrent calls in this process cannot both append: the basis
    /// of deduplication. (Another process on the same directory is not
    /// excluded.)
    pub fn append_unless(
        &self,
        file: &str,
        (field, value): (&str, &str),
        build: impl FnOnce(u64) -> Value,
    ) -> std::io::Result<Appended> {
        let mut seen = self.lock();
        if let Some(existing) = self.first_locked(&mut seen, file, field, value)? {
            return Ok(Appended::Existing(existing));
        }
        self.append_locked(&mut seen, file, build).map(Appended::New)
    }

    /// The oldest record of `file` with the string `value` at `field`, by
    /// an index of that field (built on first use, then kept up to date).
    pub fn first_where(
        &self,
        file: &str,
        field: &str,
        value: &str,
    ) -> std::io::Result<Option<Value>> {
        let mut seen = self.lock();
        self.first_locked(&mut seen, file, field, value)
    }

    fn first_locked(
        &self,
        seen: &mut HashMap<String, Seen>,
        file: &str,
        field: &str,
        value: &str,
    ) -> std::io::Result<Option<Value>> {
        let state = seen.entry(file.to_string()).or_default();
        state.refresh(&self.dir.join(file), true)?;
        let records = state.records.as_deref().unwrap_or_default();
        let by = state.index.entry(field.to_string()).or_insert_with(|| {
            let mut by = HashMap::new();
            for (i, v) in records.iter().enumerate() {
                if let Some(value) = v[field].as_str() {
                    by.entry(value.to_string()).or_insert(i);
                }
            }
            by
        });
        Ok(by.get(value).map(|&i| records[i].clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        // A panic mid-append leaves at worst a torn line, which reads skip.
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The append itself; the caller holds the lock.
    fn append_locked(
        &self,
        seen: &mut HashMap<String, Seen>,
        file: &str,
        build: impl FnOnce(u64) -> Value,
    ) -> std::io::Result<Value> {
        let path = self.dir.join(file);
        let state = seen.entry(file.to_string()).or_default();
        state.refresh(&path, false)?;
        let seq = state.count() + 1;
        let record = build(seq);
        let mut line = serde_json::to_vec(&record)?;
        line.push(b'\n');
        let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
        f.write_all(&line)?;
        f.sync_data()?;
        Ok(record)
    }

    /// Every record of `file` for which `keep` holds, oldest first.
    pub fn read(&self, file: &str, keep: impl Fn(&Value) -> bool) -> std::io::Result<Vec<Value>> {
        let mut seen = self.lock();
        Ok(self.records(&mut seen, file)?.iter().filter(|v| keep(v)).cloned().collect())
    }

    /// The records of `file`, brought up to date; the caller holds the lock.
    fn records<'s>(
        &self,
        seen: &'s mut HashMap<String, Seen>,
        file: &str,
    ) -> std::io::Result<&'s [Value]> {
        let state = seen.entry(file.to_string()).or_default();
        state.refresh(&self.dir.join(file), true)?;
        Ok(state.records.as_deref().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sequence_numbers_and_finds_follow_what_another_process_appended_and_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let one = Sandbox::open(Some(dir.path())).unwrap();
        let other = Sandbox::open(Some(dir.path())).unwrap();
        assert_eq!(one.append("t.jsonl", |seq| json!({"seq": seq, "r": "a"})).unwrap()["seq"], 1);
        // `other` read nothing yet; it sees one's line, then one sees its.
        assert_eq!(other.append("t.jsonl", |seq| json!({"seq": seq, "r": "b"})).unwrap()["seq"], 2);
        let found =
            one.append_unless("t.jsonl", ("r", "b"), |seq| json!({"seq": seq, "r": "b"})).unwrap();
        assert_eq!(found, Appended::Existing(json!({"seq": 2, "r": "b"})));
        // A torn last line counts as a line and is not a record.
        OpenOptions::new()
            .append(true)
            .open(dir.path().join("t.jsonl"))
            .unwrap()
            .write_all(b"{\"seq\": 3, \"r")
            .unwrap();
        assert_eq!(one.read("t.jsonl", |_| true).unwrap().len(), 2);
        let appended = other
            .append_unless("t.jsonl", ("r", "c"), |seq| json!({"seq": seq, "r": "c"}))
            .unwrap();
        assert_eq!(appended, Appended::New(json!({"seq": 4, "r": "c"})));
        // The torn line and the next one share a line on disk: neither parses.
        assert_eq!(one.read("t.jsonl", |_| true).unwrap().len(), 2);
        // The index follows what was appended since it was built, here and in the other process.
        assert_eq!(
            one.first_where("t.jsonl", "r", "c").unwrap(),
            None,
            "the line after a torn one does not parse"
        );
        other.append("t.jsonl", |seq| json!({"seq": seq, "r": "c"})).unwrap();
        assert_eq!(
            one.first_where("t.jsonl", "r", "c").unwrap(),
            Some(json!({"seq": 4, "r": "c"})),
            "the torn line is counted, so this is 4 again"
        );
        assert_eq!(
            one.first_where("t.jsonl", "r", "a").unwrap(),
            Some(json!({"seq": 1, "r": "a"})),
            "the oldest"
        );
        assert_eq!(
            one.first_where("t.jsonl", "seq", "1").unwrap(),
            None,
            "a number is not the string"
        );
        // A file that shrank (replaced) is read again from its start.
        std::fs::write(dir.path().join("t.jsonl"), "{\"seq\": 1, \"r\": \"z\"}\n").unwrap();
        assert_eq!(one.read("t.jsonl", |_| true).unwrap(), vec![json!({"seq": 1, "r": "z"})]);
        assert_eq!(
            one.first_where("t.jsonl", "r", "c").unwrap(),
            None,
            "the index starts over with the file"
        );
        assert_eq!(
            one.first_where("t.jsonl", "r", "z").unwrap(),
            Some(json!({"seq": 1, "r": "z"}))
        );
        assert_eq!(one.append("t.jsonl", |seq| json!({"seq": seq})).unwrap()["seq"], 2);
    }
}
