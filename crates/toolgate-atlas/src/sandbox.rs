//! The sandbox: the only place an Atlas server writes. Each kind of write is
//! an append-only JSON-lines file under the state directory; nothing is ever
//! edited, and nothing leaves the machine.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
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
    /// One writer at a time, so sequence numbers and lines never interleave.
    lock: Mutex<()>,
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
        Ok(Self { dir, _temp: temp, lock: Mutex::new(()) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one record and returns its 1-based sequence number in the
    /// file. `build` receives that number, so ids derive from it. The line is
    /// flushed to disk before the call returns: an acknowledged write is kept.
    pub fn append(&self, file: &str, build: impl FnOnce(u64) -> Value) -> std::io::Result<Value> {
        let _guard = self.lock();
        self.append_locked(file, build)
    }

    /// Appends as [`append`](Self::append) unless a record of `file`
    /// satisfies `find`; then that (oldest) record is returned and nothing is
    /// written. Scan and append happen under one lock, so two concurrent
    /// calls in this process cannot both append: the basis of deduplication.
    /// (Another process on the same directory is not excluded.)
    pub fn append_unless(
        &self,
        file: &str,
        find: impl Fn(&Value) -> bool,
        build: impl FnOnce(u64) -> Value,
    ) -> std::io::Result<Appended> {
        let _guard = self.lock();
        if let Some(existing) = self.read(file, find)?.into_iter().next() {
            return Ok(Appended::Existing(existing));
        }
        self.append_locked(file, build).map(Appended::New)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // A panic mid-append leaves at worst a torn line, which reads skip.
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The append itself; the caller holds the lock.
    fn append_locked(&self, file: &str, build: impl FnOnce(u64) -> Value) -> std::io::Result<Value> {
        let path = self.dir.join(file);
        let seq = self.count_lines(&path)? + 1;
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
        let path = self.dir.join(file);
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for line in BufReader::new(f).lines() {
            let line = line?;
            // A torn last line (power loss mid-write) is skipped, not fatal.
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if keep(&v) {
                    out.push(v);
                }
            }
        }
        Ok(out)
    }

    fn count_lines(&self, path: &Path) -> std::io::Result<u64> {
        match File::open(path) {
            Ok(f) => Ok(BufReader::new(f).lines().count() as u64),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }
}
